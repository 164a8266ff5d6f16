"""What the runner can run for a session: a Code Shot agent, a standalone agent, or the
planner that routes to agents. Each runs a query to an Outcome and can resume a paused
run with the user's answer; nested calls (planner -> agent -> Func) share one trace."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from codeshot.engine.builtin import (
    AgentTool,
    FuncSpec,
    SessionHistory,
    code_shot_components,
    planner_components,
)
from codeshot.engine.components import CommandResult
from codeshot.engine.executor import Executor, Limits, Outcome, Status, TraceStep
from codeshot.engine.grounding import grounded_numbers, numbers
from codeshot.engine.planning import CarryReplies, OfferedAgent, PlannerGuard, planner_examples
from codeshot.engine.prompt import ECHO_STOPS, STOP_SEQUENCES
from codeshot.engine.replies import clean_answer
from codeshot.errors import AgentRunFailed, CallTimeout, CodeshotError, LLMError, NotFound
from codeshot.llm.base import LLM, ChatMessage, LlmSettings, calls_ending_by, configured
from codeshot.models import MAX_AGENT_DESCRIPTION, PLANNER_ID, Agent, AgentKind, MessageType
from codeshot.runner.agent_client import AgentClient, FuncNotDefined
from codeshot.runner.corpora import url_corpora
from codeshot.runner.embeds import EmbedBook
from codeshot.runner.platform_funcs import LIBRARY, FuncContext
from codeshot.text import as_one_line

if TYPE_CHECKING:
    from codeshot.routing.index import Candidate
    from codeshot.routing.router import Router
    from codeshot.runner.budgets import TokenBudget
    from codeshot.runner.corpora import CorpusSearch

log = logging.getLogger("codeshot.runner")
PLANNER_PROMPT = (
    "I am the planner of an agent platform. I answer the user's query by asking the "
    "agents listed below, one step at a time, and I combine their answers. I only ask "
    "agents that are listed, and I answer directly when no agent fits."
)
# When no agent fits, one call sorts small talk (answered in kind) from requests (declined
# by the platform): told to decline, a 1.5B model still answered "Who won the 1998 World
# Cup?" itself, wrongly; sorting by example it does reliably. With the Code Shot protocol
# and no command to ask, small models used "Ask User:" to echo the question back.
SMALL_TALK_PROMPT = (
    "I am the planner of an agent platform: agents answer requests, and none of them fits "
    "this message. If the message is small talk (a greeting, thanks, goodbye, or a question "
    "about me), I reply with one short friendly sentence after \"A:\". If it asks for "
    "anything else (a fact, a number, a date, an action), I reply only \"NONE\"."
)
SMALL_TALK_EXAMPLES = [("hi!", "A: Hello! What can I do for you?"),
                       ("What is the tallest mountain in Peru?", "NONE"),
                       ("thank you", "A: You're welcome!"),
                       ("Send an email to my boss", "NONE")]
# A query naming two tasks goes to plan mode in auto (one task: the best agent answers).
_COMPOUND = re.compile(r"\b(and then|and also|and|then|also)\b", re.IGNORECASE)
# A request and its text after a colon and a space ("Save a note: buy milk").
_PAYLOAD = re.compile(r"(.+?):\s", re.DOTALL)
# A second task that refers to the first one's result ("save it as a note").
_REFERS_BACK = re.compile(r"\b(it|that|this|them|the (result|number|total|price|answer))\b",
                          re.IGNORECASE)

class Program(Protocol):
    def run(self, query: str) -> Outcome: ...

    def resume(self, state: dict[str, Any], answer: str) -> Outcome: ...


Trace = Callable[[str, TraceStep], None]  # (sent_by, step)


@dataclass
class RunContext:
    """Everything one query's run needs; built by the session runner."""

    llm: LLM
    client: AgentClient
    registry_get: Callable[[str], Agent]
    trace: Trace
    embeds: EmbedBook
    platform: FuncContext  # for the platform's own Funcs
    history: SessionHistory = field(default_factory=SessionHistory)  # the planner's
    # agent id -> the session's earlier (question, answer) turns with that agent
    agent_turns: Callable[[str], Sequence[tuple[str, str]]] = lambda _agent_id: ()
    limits: Limits = field(default_factory=Limits)
    budget: TokenBudget | None = None  # the user's and agents' daily LLM tokens
    # A secret an agent's owner gave, by name (an MCP server's Authorization header).
    agent_secret: Callable[[str], str] | None = None
    corpus_search: Callable[[], CorpusSearch] | None = None  # agents' document corpora
    agent_models: frozenset[str] = frozenset()  # models agents may choose (settings)

    def llm_for(self, agent_id: str, settings: dict[str, Any] | None = None) -> LLM:
        """The LLM as ``agent_id``'s program uses it: with the agent's own model settings
        (Fixie's ``llm_settings``; its model only when the platform allows it) where the
        provider takes them, metered against the budgets."""
        if settings and settings.get("model") not in self.agent_models:
            settings = {**settings, "model": None}
        llm = configured(self.llm, LlmSettings.from_dict(settings))
        return llm if self.budget is None else self.budget.metered(llm, agent_id)


def as_data(text: str) -> str:
    """An agent's own words as the planner's prompt shows them: one line, capped, and
    quoted as a JSON string, so they read as a value and never as a line of the prompt
    (other users' queries see them). Registration refuses line breaks; this also holds
    for agents stored before it did."""
    return json.dumps(as_one_line(text, MAX_AGENT_DESCRIPTION), ensure_ascii=False)


def outcome_as_result(agent_id: str, outcome: Outcome) -> CommandResult:
    """A nested agent's outcome as the caller's command result (or its failure)."""
    if outcome.status is Status.ERROR:  # it retried its own Funcs already: not again
        if outcome.error_code == CallTimeout.code:  # the query's time: it ends as TIMEOUT
            raise CallTimeout(f"{agent_id}: {outcome.text}")
        raise AgentRunFailed(f"{agent_id}: {outcome.text}")
    if outcome.status is Status.AWAITING_INPUT:  # its state comes back with the answer
        return CommandResult(text="", needs_input=True, question=outcome.text,
                             state=outcome.state)
    return CommandResult(text=outcome.text, embeds=dict(outcome.embeds))


class CodeShotProgram:
    """A Code Shot agent: its few-shots run here; its Funcs are called over HTTP, except
    the platform's own (:mod:`codeshot.runner.platform_funcs`) that it does not define.

    A conversational agent sees the session's earlier turns with it; every agent sees
    which embeds the session holds.
    """

    def __init__(self, agent: Agent, ctx: RunContext) -> None:
        # The agent's Funcs: listed by codeshot's SDK; unknown for Fixie's (ask it first).
        own = agent.funcs if agent.func_url else []
        # The platform Funcs' model calls count against this agent's and the user's budgets.
        platform = ctx.platform if ctx.platform.llm is None else \
            dataclasses.replace(ctx.platform, llm=ctx.llm_for(agent.agent_id))
        if ctx.corpus_search is not None and url_corpora(agent.corpora):
            search = ctx.corpus_search
            platform = dataclasses.replace(platform, corpus=lambda question, k: search().search(
                agent.agent_id, question, k))

        def call_func(name: str, text: str) -> CommandResult:
            builtin = LIBRARY.get(name)
            if builtin is not None and own is not None and name not in own:
                return CommandResult(builtin(text, platform))
            try:
                reply = ctx.client.call_func(agent.agent_id, agent.func_url or "", name, text,
                                             ctx.embeds.links(), registration=agent.registration)
            except FuncNotDefined:
                if builtin is None:
                    raise
                return CommandResult(builtin(text, platform))
            return CommandResult(text=reply.text, embeds=ctx.embeds.ingest(reply.embeds),
                                 needs_input=reply.needs_input, question=reply.question,
                                 repeat_on_answer=reply.repeat_on_answer)

        funcs: Callable[[str, str], CommandResult] = call_func
        specs: list[FuncSpec] = []
        if agent.mcp_url:
            funcs, specs = mcp_funcs(agent, ctx, platform)
        turns = ctx.agent_turns(agent.agent_id) if agent.conversational else ()
        history = dataclasses.replace(ctx.history, turns=turns)
        components = code_shot_components(agent.base_prompt, agent.few_shots, funcs,
                                          funcs=specs)
        self.executor = Executor([*components, history],
                                 ctx.llm_for(agent.agent_id, agent.llm_settings),
                                 limits=ctx.limits,
                                 trace=lambda step: ctx.trace(agent.agent_id, step))

    def run(self, query: str) -> Outcome:
        return self.executor.run(query)

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        return self.executor.resume(state, answer)


def mcp_funcs(agent: Agent, ctx: RunContext, platform: FuncContext
              ) -> tuple[Callable[[str, str], CommandResult], list[FuncSpec]]:
    """An MCP agent's Funcs: its server's tools (``tools/call`` with the Ask line's JSON),
    then the platform's own; each tool described with its JSON schema."""
    from codeshot.runner.mcp_servers import McpServer, McpTool

    tools = {t.func: t for t in map(McpTool.from_dict, agent.mcp_tools or [])}
    authorization = None
    if agent.mcp_auth_secret and ctx.agent_secret is not None:
        authorization = ctx.agent_secret(agent.mcp_auth_secret)
    server = McpServer(agent.mcp_url or "", authorization, timeout=ctx.client.timeout,
                       allow_loopback=ctx.client.allow_loopback)

    def call_func(name: str, text: str) -> CommandResult:
        tool = tools.get(name)
        if tool is not None:
            return CommandResult(server.call(tool.name, text,
                                             f"agent {agent.agent_id}'s Func[{name}]"))
        builtin = LIBRARY.get(name)
        if builtin is None:
            raise FuncNotDefined(f"the MCP server of {agent.agent_id} has no tool {name}")
        return CommandResult(builtin(text, platform))

    return call_func, [FuncSpec(t.func, t.description, t.input_schema) for t in tools.values()]


class StandaloneProgram:
    """A fully custom agent: the query goes to its URL, its last response is the answer."""

    def __init__(self, agent: Agent, ctx: RunContext) -> None:
        self.agent, self.ctx = agent, ctx

    def run(self, query: str) -> Outcome:
        reply = self.ctx.client.query_standalone(self.agent.agent_id, self.agent.query_url or "",
                                                 query, self.ctx.embeds.links(),
                                                 registration=self.agent.registration)
        if reply.needs_input:
            return Outcome(Status.AWAITING_INPUT, reply.question or reply.text,
                           state={"query": query, "repeat": reply.repeat_on_answer})
        return Outcome(Status.DONE, reply.text, embeds=self.ctx.embeds.ingest(reply.embeds))

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        # A custom agent keeps its own conversation state; one that paused for the user to
        # act elsewhere (authorize it) is asked the first query again.
        return self.run(state["query"] if state.get("repeat") else answer)


def program_for(agent: Agent, ctx: RunContext) -> Program:
    if agent.kind is AgentKind.CODE_SHOT:
        return CodeShotProgram(agent, ctx)
    return StandaloneProgram(agent, ctx)


SAMPLES_IN_PROMPT = 3  # sample queries shown with each agent the planner may ask


def tool_description(agent: Agent) -> str:
    """What the planner's prompt says about an agent: its description and a few samples,
    each as data (``as_data``)."""
    samples = "; ".join(as_data(q) for q in agent.sample_queries[:SAMPLES_IN_PROMPT])
    description = as_data((agent.description or agent.name).strip())
    return f"{description} For example: {samples}" if samples else description


NO_AGENT_FITS = "No agent here can help with that."


def no_agent_answer(closest: Agent | None) -> str:
    if closest is None:
        return "I can't help with that: no agent is registered yet."
    about = ": ".join(part for part in (closest.name, closest.description) if part)
    return (f"{NO_AGENT_FITS} The closest is {closest.agent_id}"
            + (f" ({about})" if about else "") + ", but it does not fit this request.")


class PlannerProgram:
    """The "Fixie agent": routes the query to agents and combines their answers.

    The router proposes the top-k agents; only those scoring above its floor are offered.
    ``mode``: ``route`` hands the whole query to the best agent (or says that no agent
    fits, naming the closest); ``plan`` runs a Code Shot program whose commands are the
    offered agents, with examples built from their own sample queries (with none offered,
    small talk is answered and anything else declined: ``_direct``); ``auto`` runs "X
    and/then Y" as two agent calls when each half fits a different agent (``_two_steps``),
    plans the other compound queries (two agents fit, or it says "and"/"then") and those
    no agent fits, and routes the rest. Without ``free_plans`` (the offline replay, which
    cannot plan), ``auto`` still runs "X and Y" as two agent calls and routes the rest.
    """

    def __init__(self, ctx: RunContext, router: Router, viewer: str | None,
                 mode: str, k: int = 3, free_plans: bool = True) -> None:
        self.ctx, self.router, self.viewer, self.k, self.mode = ctx, router, viewer, k, mode
        self.free_plans = free_plans

    def _thought(self, text: str) -> None:
        self.ctx.trace(PLANNER_ID, TraceStep(MessageType.THOUGHT, text))

    def _routes(self, query: str) -> list[Candidate]:
        candidates = [c for c in self.router.route(query, self.k, self.viewer)
                      if self._usable(c.agent_id)]
        fitting = [c for c in candidates if c.fits]
        if fitting:
            listing = ", ".join(f"{c.agent_id} ({c.score:.2f})" for c in fitting)
        elif candidates:
            closest = candidates[0]
            listing = (f"no agent fits (closest: {closest.agent_id} {closest.score:.2f}, "
                       f"floor {self.router.floor:.2f})")
        else:
            listing = "no agents"
        self._thought(f"Router proposes: {listing}")
        return candidates

    def _usable(self, agent_id: str) -> bool:
        """Whether this user may still use a routed agent (the router's index may lag a
        change, such as an agent just unpublished, by a few seconds)."""
        try:
            self.ctx.registry_get(agent_id)
        except NotFound:
            return False
        return True

    def _plans(self, query: str, fitting: list[Candidate]) -> bool:
        if self.mode != "auto":
            return self.mode == "plan"
        return self.free_plans and (not fitting or len(fitting) > 1
                                    or bool(_COMPOUND.search(query)))

    def run(self, query: str) -> Outcome:
        candidates = self._routes(query)
        fitting = [c for c in candidates if c.fits]
        if self.mode == "auto" and (steps := self._two_steps(query)):
            return self._run_steps(*steps)
        if not self._plans(query, fitting):
            if not fitting:
                closest = self.ctx.registry_get(candidates[0].agent_id) if candidates else None
                return Outcome(Status.DONE, no_agent_answer(closest))
            return self._delegate(fitting[0].agent_id, query)
        if not fitting:
            return self._direct(query, candidates[0].agent_id if candidates else None)
        agents = [self.ctx.registry_get(c.agent_id) for c in fitting]
        samples = [c.matched_sample for c in fitting]  # each agent's sample nearest the query
        # Two agents fit a query naming two tasks: the answer must have asked both.
        needed = tuple(a.agent_id for a in agents[:2]) \
            if len(agents) > 1 and _COMPOUND.search(query) else ()
        outcome = self._executor(agents, samples, needed).run(query)
        if fitting and any(f.startswith(PlannerGuard.SKIPPED) for f in outcome.flags):
            return self._delegate(fitting[0].agent_id, query)  # asked twice, asked no agent
        return outcome

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        if "delegate" in state:
            agent = self.ctx.registry_get(state["delegate"])
            outcome = self._wrap(agent.agent_id,
                                 program_for(agent, self.ctx).resume(state["state"], answer))
            if "then" not in state:
                return outcome
            then_agent, then_task = state["then"]  # a list once stored as JSON
            return self._then(outcome, (then_agent, then_task))
        agents = [self.ctx.registry_get(a) for a in state.get("tools", [])]
        return self._executor(agents).resume(state["state"], answer)

    def _two_steps(self, query: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
        """A query of two tasks ("X and/then Y") whose halves each fit a different agent:
        ((agent, X), (agent, Y)). Else None (the model plans)."""
        # A bare "and" after a colon that ends a request to an agent is that request's
        # text ("Save a note: call mom and check the time" is one note); "then" and
        # "also" still start a task there, and a colon of a time or a URL is no payload's.
        # The request before the first such colon is the same for every "and" after it:
        # routed once, when one asks (each routing embeds it: a Bedrock call).
        lead = _PAYLOAD.match(query)
        payload = functools.cache(lambda: lead is not None and self._fits(lead.group(1)))
        match = next((m for m in _COMPOUND.finditer(query) if m.group(1).lower() != "and"
                      or lead is None or lead.end() > m.start() or not payload()), None)
        if match is None:
            return None
        halves = (query[:match.start()].strip(" ,;"), query[match.end():].strip(" ,;"))
        steps = []
        for half in halves:
            best = next(iter(self.router.route(half, 1, self.viewer)), None) if half else None
            if best is None or not best.fits or not self._usable(best.agent_id):
                return None
            steps.append((best.agent_id, half))
        first, second = steps
        return (first, second) if first[0] != second[0] else None

    def _fits(self, request: str) -> bool:
        """Whether the request before a colon fits an agent on its own, so the text after
        it is its payload ("Save a note: ...", not "Quick question: ...")."""
        best = next(iter(self.router.route(request, 1, self.viewer)), None)
        return best is not None and best.fits

    def _run_steps(self, first: tuple[str, str], second: tuple[str, str]) -> Outcome:
        """Two tasks in order, without the model planning them: the second agent is given
        the first one's answer when its task refers back to it ("save it as a note")."""
        self._thought(f"Two tasks: Agent[{first[0]}], then Agent[{second[0]}].")
        return self._then(self._delegate(*first), second)

    def _then(self, one: Outcome, second: tuple[str, str]) -> Outcome:
        """The second task, after the first task's outcome. A first agent that asks the
        user keeps the second task in its paused state: the answer resumes both."""
        if one.status is Status.AWAITING_INPUT:
            return dataclasses.replace(one, state={**(one.state or {}), "then": list(second)})
        if one.status is not Status.DONE:
            return one
        agent_id, task = second
        given = f"{task} (given: {one.text})" if _REFERS_BACK.search(task) else task
        two = self._delegate(agent_id, given)
        embeds = {**one.embeds, **two.embeds}
        if two.status is Status.AWAITING_INPUT:  # the first answer is shown with the question
            return dataclasses.replace(two, text=f"{one.text}\n{two.text}", embeds=embeds)
        if two.status is not Status.DONE:
            return two
        return Outcome(Status.DONE, f"{one.text}\n{two.text}", embeds=embeds)

    def _direct(self, query: str, closest: str | None) -> Outcome:
        """The reply when no agent fits: small talk answered in kind, anything else
        declined by the platform (naming the closest agent). A reply stating a number the
        query did not hold was made up: it is declined too."""
        messages = [ChatMessage("system", SMALL_TALK_PROMPT)]
        for example, reply in SMALL_TALK_EXAMPLES:
            messages += [ChatMessage("user", example), ChatMessage("assistant", reply)]
        messages.append(ChatMessage("user", query))
        text = ""
        try:
            with calls_ending_by(self.ctx.limits.deadline):
                completion = self.ctx.llm_for(PLANNER_ID).complete(
                    messages, [*STOP_SEQUENCES, *ECHO_STOPS],
                    self.ctx.limits.max_tokens_per_call)
            if completion.text.strip().startswith("A:"):
                text = clean_answer(completion.text.strip().removeprefix("A:"))
        except LLMError as exc:  # the platform's own answer holds without the model
            self._thought(f"The language model failed ({exc.message}).")
        except CodeshotError:  # the budget spent, the time up: the query's end
            raise
        except Exception:  # a provider's bug: the platform's own answer holds all the same
            log.exception("the planner's small-talk call failed")
            self._thought("The language model failed (internal error).")
        if not text or not set(numbers(text)) <= grounded_numbers(query, ()):
            text = no_agent_answer(self.ctx.registry_get(closest) if closest else None)
        self.ctx.trace(PLANNER_ID, TraceStep(MessageType.RESPONSE, text))
        return Outcome(Status.DONE, text)

    def _executor(self, agents: list[Agent], samples: Sequence[str] = (),
                  needed: tuple[str, ...] = ()) -> Program:
        """``samples``: each agent's sample query nearest this query (else its first);
        ``needed``: the agents the answer must have asked."""
        planner = self

        def call_agent(agent_id: str, text: str) -> CommandResult:
            agent = planner.ctx.registry_get(agent_id)
            return outcome_as_result(agent_id, program_for(agent, planner.ctx).run(text))

        def resume_agent(agent_id: str, state: dict[str, Any], answer: str) -> CommandResult:
            agent = planner.ctx.registry_get(agent_id)
            return outcome_as_result(agent_id,
                                     program_for(agent, planner.ctx).resume(state, answer))

        tools = [AgentTool(a.agent_id, tool_description(a)) for a in agents]
        examples = planner_examples([
            OfferedAgent(a.agent_id, as_one_line((*samples[i:i + 1], *a.sample_queries,
                                                  a.description or a.name)[0],
                                                 MAX_AGENT_DESCRIPTION))
            for i, a in enumerate(agents)])
        components = planner_components(PLANNER_PROMPT, examples, tools, call_agent,
                                        resume_agent)
        guards = [CarryReplies(), PlannerGuard(tuple(a.agent_id for a in agents), needed)]
        executor = Executor([*components, *guards, self.ctx.history],
                            self.ctx.llm_for(PLANNER_ID),
                            limits=self.ctx.limits,
                            trace=lambda step: self.ctx.trace(PLANNER_ID, step))
        return _RememberTools(executor, [a.agent_id for a in agents])

    def _delegate(self, agent_id: str, query: str) -> Outcome:
        step = TraceStep(MessageType.AGENT_CALL, query, f"Agent[{agent_id}]")
        self.ctx.trace(PLANNER_ID, step)
        agent = self.ctx.registry_get(agent_id)
        return self._wrap(agent_id, program_for(agent, self.ctx).run(query))

    def _wrap(self, agent_id: str, outcome: Outcome) -> Outcome:
        if outcome.status is Status.DONE:
            self.ctx.trace(PLANNER_ID, TraceStep(MessageType.RESULT, outcome.text,
                                                 f"Agent[{agent_id}]", dict(outcome.embeds)))
        if outcome.status is Status.AWAITING_INPUT:
            state = {"delegate": agent_id, "state": outcome.state}
            return Outcome(outcome.status, outcome.text, state, dict(outcome.embeds))
        return outcome


class _RememberTools:
    """Keeps the planner's agent list in its paused state, so a resume offers the same."""

    def __init__(self, executor: Executor, tools: list[str]) -> None:
        self.executor, self.tools = executor, tools

    def _wrap(self, outcome: Outcome) -> Outcome:
        if outcome.status is Status.AWAITING_INPUT:
            state = {"tools": self.tools, "state": outcome.state}
            return Outcome(outcome.status, outcome.text, state, dict(outcome.embeds))
        return outcome

    def run(self, query: str) -> Outcome:
        return self._wrap(self.executor.run(query))

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        return self._wrap(self.executor.resume(state, answer))


def failure_outcome(exc: CodeshotError) -> Outcome:
    return Outcome(Status.ERROR, exc.message, error_code=exc.code)
