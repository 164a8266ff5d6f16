"""The planner's examples, built per query from the agents it may ask, and its guards.

Fixed examples get copied: a small model sends the example's "Roll 2d6" for "hello" and
appends the example's clock time to every answer. So the examples use the offered
agents' own sample queries for their questions and placeholders for the agents' answers:
a shape to follow, no value to copy. A placeholder the model copies anyway is filled in
with the real reply (``CarryReplies``); an answer that still holds one, states numbers no
agent returned, or skips the agents the router chose is sent back once (``PlannerGuard``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from codeshot.engine.components import AnswerFlag, CommandResult
from codeshot.engine.fewshot import ASKS, SAYS, Kind, Step
from codeshot.engine.grounding import grounded_numbers, numbers

# "<what Agent[local/dice] says>", and what small models write for it ("<result of
# previous command>"): angle brackets around words, never a real answer.
_PLACEHOLDER = re.compile(r"<([^<>\n]{1,80})>")
_NAMED = re.compile(r"Agent\[([^\]]+)\]")

DIRECT_ANSWER_EXAMPLE = "Q: Thanks, that is all for now\nA: You're welcome!"


def reply_placeholder(agent_id: str) -> str:
    return f"<what Agent[{agent_id}] says>"


@dataclass(frozen=True)
class OfferedAgent:
    """An agent the planner may ask: its id and one of its own sample queries."""

    agent_id: str
    sample: str


def _joined(first: str, second: str) -> str:
    return f"{first.rstrip(' .?!')}, then {second[:1].lower()}{second[1:]}"


def planner_examples(agents: Sequence[OfferedAgent]) -> list[str]:
    """A direct answer; one Ask per offered agent (its sample query, its answer as a
    placeholder); with two agents, a two-step plan whose second Ask carries the first
    answer."""
    shots = [DIRECT_ANSWER_EXAMPLE]
    for agent in agents:
        says = reply_placeholder(agent.agent_id)
        shots.append(f"Q: {agent.sample}\nAsk Agent[{agent.agent_id}]: {agent.sample}\n"
                     f"Agent[{agent.agent_id}] says: {says}\nA: {says}")
    if len(agents) >= 2:
        first, second = agents[0], agents[1]
        one, two = reply_placeholder(first.agent_id), reply_placeholder(second.agent_id)
        shots.append(
            f"Q: {_joined(first.sample, second.sample)}\n"
            f"Thought: Agent[{first.agent_id}] first; its answer goes into the next Ask.\n"
            f"Ask Agent[{first.agent_id}]: {first.sample}\n"
            f"Agent[{first.agent_id}] says: {one}\n"
            f"Ask Agent[{second.agent_id}]: {second.sample} (given: {one})\n"
            f"Agent[{second.agent_id}] says: {two}\n"
            f"A: {one} {two}")
    return shots


@dataclass
class CarryReplies:
    """Fills placeholders the model copied with the replies of this run: a named agent's
    latest answer, or else the latest answer of any agent. One instance per run."""

    replies: dict[str, str] = field(default_factory=dict)  # agent id -> latest answer
    latest: str | None = None

    def after_execute(self, step: Step, result: CommandResult) -> CommandResult:
        if step.kind is Kind.ASK_AGENT and not result.needs_input:
            self.replies[step.target or ""] = self.latest = result.text
        return result

    def _fill(self, match: re.Match[str]) -> str:
        named = _NAMED.search(match.group(1))
        if named and named.group(1) in self.replies:
            return self.replies[named.group(1)]
        return self.latest if self.latest is not None else match.group(0)

    def after_parse(self, step: Step) -> Step:
        if step.kind not in (Kind.ASK_AGENT, Kind.A) or "<" not in step.text:
            return step
        return replace(step, text=_PLACEHOLDER.sub(self._fill, step.text))


@dataclass(frozen=True)
class PlannerGuard:
    """Sends an answer back once when it asked none of the agents the router chose
    (``offered``; checked first, so the planner can hand such a run to the best agent),
    skipped one the query needs (``needed``: a compound query's two best agents), holds a
    placeholder, or states numbers (times, dates, counts) that no agent returned and the
    question did not hold."""

    offered: tuple[str, ...]
    needed: tuple[str, ...] = ()
    SKIPPED: ClassVar[str] = "Planner guard: the answer asked none of"

    def check_answer(self, transcript: Sequence[Step], answer: str) -> AnswerFlag | None:
        q_index = max((i for i, s in enumerate(transcript) if s.kind is Kind.Q), default=0)
        run = transcript[q_index:]
        question = run[0].text if run else ""
        if self.offered and not any(s.kind in ASKS for s in run):
            listed = ", ".join(f"Agent[{a}]" for a in self.offered)
            return AnswerFlag(f"{self.SKIPPED} {listed}.",
                              f"it answered without asking {listed}; ask the agent that fits")
        asked = {s.target for s in run if s.kind in ASKS}
        if missing := [a for a in self.needed if a not in asked]:
            listed = ", ".join(f"Agent[{a}]" for a in missing)
            return AnswerFlag(f"Planner guard: the answer skipped {listed}.",
                              f"the query also needs {listed}; ask it, giving it what the "
                              "other agent said")
        if (placeholder := _PLACEHOLDER.search(answer)) is not None:
            return AnswerFlag(f"Planner guard: the answer holds the placeholder "
                              f"{placeholder.group(0)}.",
                              f"the answer holds {placeholder.group(0)}; ask the agent and "
                              "answer with what it says")
        allowed = grounded_numbers(question, [s.text for s in run if s.kind in SAYS])
        unsourced = [shown for value, shown in numbers(answer).items() if value not in allowed]
        if unsourced:
            found = f"{', '.join(unsourced)} in the answer came from no agent or the question"
            return AnswerFlag(f"Planner guard: {found}.",
                              f"{found}; answer only with what the agents said")
        return None
