"""What the runner can run for a session: a Code Shot agent, a standalone agent, or the
planner that routes to agents. Each runs a query to an Outcome and can resume a paused
run with the user's answer; nested calls (planner -> agent -> Func) share one trace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from codeshot.engine.builtin import (
    AgentTool,
    SessionHistory,
    code_shot_components,
    planner_components,
)
from codeshot.engine.components import CommandResult
from codeshot.engine.executor import Executor, Limits, Outcome, Status, TraceStep
from codeshot.errors import AgentFailed, CodeshotError
from codeshot.llm.base import LLM
from codeshot.models import PLANNER_ID, Agent, AgentKind, MessageType
from codeshot.runner.agent_client import AgentClient

if TYPE_CHECKING:
    from codeshot.routing.router import Router

PLANNER_PROMPT = (
    "I am the planner of an agent platform. I answer the user's query by asking the "
    "agents listed below, one step at a time, and I combine their answers. I only ask "
    "agents that are listed, and I answer directly when no agent fits."
)

# Examples of planning, written with the local stack's example agents.
PLANNER_FEW_SHOTS = [
    "Q: Roll a d20 for me\n"
    "Ask Agent[local/dice]: Roll a d20\n"
    "Agent[local/dice] says: You rolled 14.\n"
    "A: You rolled 14.",
    "Q: Roll 2d6 and tell me the time\n"
    "Thought: Two agents are needed: the dice roller and the clock.\n"
    "Ask Agent[local/dice]: Roll 2d6\n"
    "Agent[local/dice] says: You rolled 3 + 5 = 8.\n"
    "Ask Agent[local/clock]: What time is it?\n"
    "Agent[local/clock] says: It is 10:04 UTC on Monday, 2 March 2026.\n"
    "A: You rolled 3 + 5 = 8. It is 10:04 UTC on Monday, 2 March 2026.",
]


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
    history: SessionHistory = field(default_factory=SessionHistory)
    embeds: dict[str, Any] = field(default_factory=dict)  # the query's, as agents get them
    limits: Limits = field(default_factory=Limits)


def outcome_as_result(agent_id: str, outcome: Outcome) -> CommandResult:
    """A nested agent's outcome as the caller's command result (or its failure)."""
    if outcome.status is Status.ERROR:
        raise AgentFailed(f"{agent_id}: {outcome.text}")
    if outcome.status is Status.AWAITING_INPUT:  # its state comes back with the answer
        return CommandResult(text="", needs_input=True, question=outcome.text,
                             state=outcome.state)
    return CommandResult(text=outcome.text, embeds=dict(outcome.embeds))


class CodeShotProgram:
    def __init__(self, agent: Agent, ctx: RunContext) -> None:
        def call_func(name: str, text: str) -> CommandResult:
            reply = ctx.client.call_func(agent.agent_id, agent.func_url or "", name, text,
                                         ctx.embeds)
            return CommandResult(text=reply.text, embeds=reply.embeds,
                                 needs_input=reply.needs_input, question=reply.question)

        components = code_shot_components(agent.base_prompt, agent.few_shots, call_func)
        self.executor = Executor([*components, ctx.history], ctx.llm, limits=ctx.limits,
                                 trace=lambda step: ctx.trace(agent.agent_id, step))

    def run(self, query: str) -> Outcome:
        return self.executor.run(query)

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        return self.executor.resume(state, answer)


class StandaloneProgram:
    """A fully custom agent: the query goes to its URL, its last response is the answer."""

    def __init__(self, agent: Agent, ctx: RunContext) -> None:
        self.agent, self.ctx = agent, ctx

    def run(self, query: str) -> Outcome:
        reply = self.ctx.client.query_standalone(self.agent.agent_id, self.agent.query_url or "",
                                                 query, self.ctx.embeds)
        if reply.needs_input:
            return Outcome(Status.AWAITING_INPUT, reply.question or reply.text,
                           state={"query": query})
        return Outcome(Status.DONE, reply.text, embeds=reply.embeds)

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        return self.run(answer)  # a custom agent keeps its own conversation state


def program_for(agent: Agent, ctx: RunContext) -> Program:
    if agent.kind is AgentKind.CODE_SHOT:
        return CodeShotProgram(agent, ctx)
    return StandaloneProgram(agent, ctx)


class PlannerProgram:
    """The "Fixie agent": routes the query to agents and combines their answers.

    With an LLM it runs a Code Shot program whose commands are the router's top-k agents.
    In ``route`` mode (the default with the offline ``fewshot`` provider, which cannot
    plan freely) it hands the whole query to
    the best-matching agent and answers with that agent's reply.
    """

    def __init__(self, ctx: RunContext, router: Router, viewer: str | None,
                 route_only: bool, k: int = 3) -> None:
        self.ctx, self.router, self.viewer, self.k = ctx, router, viewer, k
        self.route_only = route_only

    def _thought(self, text: str) -> None:
        self.ctx.trace(PLANNER_ID, TraceStep(MessageType.THOUGHT, text))

    def _routes(self, query: str) -> list[Any]:
        routes = self.router.route(query, self.k, self.viewer)
        listing = ", ".join(f"{r.agent_id} ({r.score:.2f})" for r in routes) or "no agents"
        self._thought(f"Router proposes: {listing}")
        return routes

    def run(self, query: str) -> Outcome:
        routes = self._routes(query)
        if self.route_only:
            return self._delegate(routes[0].agent_id if routes else None, query)
        tools = []
        for route in routes:
            agent = self.ctx.registry_get(route.agent_id)
            tools.append(AgentTool(agent.agent_id, agent.description or agent.name))
        return self._executor(tools).run(query)

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        if "delegate" in state:
            agent = self.ctx.registry_get(state["delegate"])
            outcome = program_for(agent, self.ctx).resume(state["state"], answer)
            return self._wrap(agent.agent_id, outcome)
        tools = [AgentTool(a) for a in state.get("tools", [])]
        return self._executor(tools).resume(state["state"], answer)

    def _executor(self, tools: list[AgentTool]) -> Program:
        planner = self

        def call_agent(agent_id: str, text: str) -> CommandResult:
            agent = planner.ctx.registry_get(agent_id)
            return outcome_as_result(agent_id, program_for(agent, planner.ctx).run(text))

        def resume_agent(agent_id: str, state: dict[str, Any], answer: str) -> CommandResult:
            agent = planner.ctx.registry_get(agent_id)
            return outcome_as_result(agent_id,
                                     program_for(agent, planner.ctx).resume(state, answer))

        components = planner_components(PLANNER_PROMPT, PLANNER_FEW_SHOTS, tools, call_agent,
                                        resume_agent)
        executor = Executor([*components, self.ctx.history], self.ctx.llm,
                            limits=self.ctx.limits,
                            trace=lambda step: self.ctx.trace(PLANNER_ID, step))
        return _RememberTools(executor, [t.agent_id for t in tools])

    def _delegate(self, agent_id: str | None, query: str) -> Outcome:
        if agent_id is None:
            return Outcome(Status.DONE, "I can't help with that: no agent is registered yet.")
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
