"""The standard components, and the component lists of a Code Shot agent and the planner.

The runner supplies the callers (HTTP to a Func, a call to an agent); the engine only
knows them as ``(name, text) -> result`` callables, so it runs the same offline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from codeshot.engine.components import Command, CommandResult, Decision, Explain, Failure, Retry
from codeshot.engine.fewshot import (
    FewShot,
    Kind,
    Step,
    func_names,
    parse_few_shots,
    unasked_funcs,
    validate_base_prompt,
)
from codeshot.engine.grounding import REPROMPT_UNGROUNDED, grounding_check
from codeshot.engine.prompt import EMBEDS_HEADER, HISTORY_HEADER, examples_message
from codeshot.errors import Forbidden, InvalidInput, NotFound, NotSupported
from codeshot.llm.base import ChatMessage

# (func name, argument text) -> result; (agent id, message text) -> result;
# (agent id, paused state, the user's answer) -> result.
FuncCaller = Callable[[str, str], CommandResult | str]
AgentCaller = Callable[[str, str], CommandResult | str]
AgentResumer = Callable[[str, dict[str, Any], str], CommandResult | str]

TEXT_PARAMETER = {"type": "string"}


@dataclass(frozen=True)
class BasePrompt:
    text: str

    def __post_init__(self) -> None:
        validate_base_prompt(self.text)

    def base_prompt(self) -> str:
        return self.text


@dataclass(frozen=True)
class Directives:
    constraint_list: Sequence[str] = ()
    resource_list: Sequence[str] = ()
    best_practice_list: Sequence[str] = ()

    def constraints(self) -> list[str]:
        return list(self.constraint_list)

    def resources(self) -> list[str]:
        return list(self.resource_list)

    def best_practices(self) -> list[str]:
        return list(self.best_practice_list)


@dataclass(frozen=True)
class FewShotExamples:
    few_shots: Sequence[FewShot]

    def messages(self, query: str) -> list[ChatMessage]:
        return [examples_message(self.few_shots)] if self.few_shots else []


@dataclass(frozen=True)
class Commands:
    command_list: Sequence[Command]

    def commands(self) -> list[Command]:
        return list(self.command_list)


@dataclass(frozen=True)
class FuncSpec:
    """A Func the model is told about beyond its name (an MCP tool): what it does and its
    input as a JSON schema (its Ask line then carries one JSON object)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: TEXT_PARAMETER)


def func_commands(
    names: Sequence[str], caller: FuncCaller, unasked: Collection[str] = (),
    specs: Sequence[FuncSpec] = (),
) -> Commands:
    """One Func command per name, then per spec not named, each calling
    ``caller(name, text)``; those in ``unasked`` reply with no Ask too (the engine calls
    them with no input)."""
    described = {spec.name: spec for spec in specs}
    every = list(dict.fromkeys([*names, *described]))
    return Commands(
        [
            Command(name, described[name].description if name in described else "",
                    dict(described[name].parameters) if name in described else TEXT_PARAMETER,
                    functools.partial(caller, name), unasked=name in unasked)
            for name in every
        ]
    )


@dataclass(frozen=True)
class AgentTool:
    """An agent the planner may ask, as the router proposes it."""

    agent_id: str
    description: str = ""


def agent_commands(
    agents: Sequence[AgentTool], caller: AgentCaller, resumer: AgentResumer | None = None
) -> Commands:
    """One Agent command per agent, each calling ``caller(agent_id, text)``; a paused agent
    continues through ``resumer(agent_id, state, answer)``."""
    return Commands(
        [
            Command(
                a.agent_id,
                a.description,
                TEXT_PARAMETER,
                functools.partial(caller, a.agent_id),
                kind="agent",
                resume=None if resumer is None else functools.partial(resumer, a.agent_id),
            )
            for a in agents
        ]
    )


@dataclass(frozen=True)
class SessionHistory:
    """Earlier questions and answers of the session, and its embeds (key -> content type)
    with how many more it has than are listed (a prompt lists a bounded number)."""

    turns: Sequence[tuple[str, str]] = ()
    embeds: Mapping[str, str] = field(default_factory=dict)
    unlisted_embeds: int = 0

    def messages(self, query: str) -> list[ChatMessage]:
        out = []
        if self.turns:
            lines = [
                Step(kind, text).render()
                for q, a in self.turns
                for kind, text in ((Kind.Q, q), (Kind.A, a))
            ]
            out.append(ChatMessage("user", HISTORY_HEADER + "\n" + "\n".join(lines)))
        if self.embeds:
            lines = [f"- #{key}: {ctype}" for key, ctype in self.embeds.items()]
            if self.unlisted_embeds:
                lines.append(f"- and {self.unlisted_embeds} older ones, not listed")
            out.append(ChatMessage("user", EMBEDS_HEADER + "\n" + "\n".join(lines)))
        return out


@dataclass(frozen=True)
class RetryThenExplain:
    """The default for failed commands: retry with exponential backoff, then say what failed.

    Errors that retrying cannot fix (bad input, a nested run that failed) are explained at
    once.
    """

    retries: int = 2
    base_delay: float = 0.5
    factor: float = 2.0
    permanent: frozenset[str] = frozenset({InvalidInput.code, NotFound.code, Forbidden.code,
                                           NotSupported.code})

    def on_failure(self, failure: Failure) -> Decision:
        if (failure.attempt <= self.retries and failure.code not in self.permanent
                and not failure.permanent):
            return Retry(self.base_delay * self.factor ** (failure.attempt - 1))
        return Explain(explain(failure))


def explain(failure: Failure) -> str:
    """The answer a user gets when a command failed for good."""
    what = failure.step.label
    return f"Sorry, I could not finish: {what} failed ({failure.message})."


def _checks(few_shots: Sequence[FewShot], reprompt_ungrounded: bool) -> list[object]:
    """The answer checks the few-shots call for (grounding, when they show it)."""
    check = grounding_check(few_shots, reprompt_ungrounded)
    return [] if check is None else [check]


def code_shot_components(
    base_prompt: str, few_shots: str | Sequence[str], func_caller: FuncCaller,
    *, reprompt_ungrounded: bool = REPROMPT_UNGROUNDED, funcs: Sequence[FuncSpec] = (),
) -> list[object]:
    """A Code Shot agent: its base prompt, its few-shots, a command per Func they use (and
    per Func in ``funcs``, described), and the answer checks they call for."""
    parsed = parse_few_shots(few_shots)
    return [
        BasePrompt(base_prompt),
        FewShotExamples(parsed),
        func_commands(func_names(parsed), func_caller, unasked_funcs(parsed), funcs),
        *_checks(parsed, reprompt_ungrounded),
    ]


def planner_components(
    base_prompt: str,
    few_shots: str | Sequence[str],
    agents: Sequence[AgentTool],
    agent_caller: AgentCaller,
    agent_resumer: AgentResumer | None = None,
    *, reprompt_ungrounded: bool = REPROMPT_UNGROUNDED,
) -> list[object]:
    """The planner: a Code Shot program whose commands are the proposed agents."""
    parsed = parse_few_shots(few_shots)
    return [
        BasePrompt(base_prompt),
        FewShotExamples(parsed),
        agent_commands(agents, agent_caller, agent_resumer),
        *_checks(parsed, reprompt_ungrounded),
    ]
