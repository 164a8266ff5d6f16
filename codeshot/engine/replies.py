"""Reading one LLM reply: the step it adds, or why it adds none.

Real models (small ones always, large ones now and then) reply with more or less than one
step: a new ``Q:`` line, a says line they should have left to the engine, only a
Thought, nothing at all, text running on after the answer, the protocol's own words or
chat-template tokens. :func:`read_reply` turns a reply into thoughts plus one action, or a
problem the executor tells the model about once before giving up.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from codeshot.engine.fewshot import Kind, Step, lines_of, parse_line, parse_lines

# A reply cut at the "] says:" stop ends with the label of the reply the model began,
# without its "]" (the stop takes it).
_DANGLING_LABEL = re.compile(r"(?:\A|\n)[ \t]*(?P<kind>Func|Agent)\[(?P<target>[^\]\n]*)\]?\s*\Z")
# Where an answer runs on into more protocol on the same line (seen on /v1/completions:
# "A: You rolled a 4! Thought: The user asked ...").
_RUN_ON = re.compile(
    r"(?<!\S)(?:Thought:|Self Ask:|Ask (?:Func|Agent)\[|Ask User:|User says:"
    r"|(?:Func|Agent)\[[^\]\n]*(?:\] says:|\]?\s*\Z))"
)
_ACTIONS = (Kind.A, Kind.ASK_FUNC, Kind.ASK_AGENT, Kind.ASK_USER)


@dataclass(frozen=True)
class Reply:
    """What one reply adds: ``thoughts`` and one ``action`` (an answer, an Ask, or the
    says line of an unasked Func with empty text), or the ``problem`` that makes it
    unusable (said to the model as "Your previous reply ... could not be used: <problem>")."""

    thoughts: tuple[Step, ...] = ()
    action: Step | None = None
    problem: str | None = None


def _short(line: str, limit: int = 60) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _is_step_line(line: str) -> bool:
    try:
        return parse_line(line.strip()) is not None
    except ValueError:
        return False


def read_reply(text: str, unasked: Collection[str] = (),
               agents_on_query: Collection[str] = ()) -> Reply:
    """The step ``text`` adds. ``unasked``: Funcs the few-shots show replying with no Ask;
    the model starting one of their says lines is the action (the engine calls them).
    ``agents_on_query``: agents the model may start the says line of without asking (the
    engine asks them the query: small models skip the Ask of a query passed on as it is)."""
    wanted = None
    label = _DANGLING_LABEL.search(text.rstrip())
    if label is not None:
        wanted = Step(Kind.FUNC_SAYS if label["kind"] == "Func" else Kind.AGENT_SAYS, "",
                      label["target"])
        text = text[: label.start()]
    if not text.strip() and wanted is None:
        return Reply(problem="the reply was empty")
    if text.strip() and wanted is None and not any(_is_step_line(x) for x in lines_of(text)):
        return Reply(action=Step(Kind.A, text.strip()))  # a model that forgot the protocol
    thoughts: list[Step] = []
    for step in parse_lines(text):
        if step.kind is Kind.THOUGHT:
            thoughts.append(step)
            continue
        if step.kind in _ACTIONS:
            return Reply(tuple(thoughts), step)
        wanted = step
        break
    if wanted is None:
        return Reply(tuple(thoughts), problem="it had only a Thought and no step")
    if wanted.target in {Kind.FUNC_SAYS: unasked, Kind.AGENT_SAYS: agents_on_query}.get(
            wanted.kind, ()):
        return Reply(tuple(thoughts), Step(wanted.kind, "", wanted.target))
    if wanted.kind is Kind.Q:
        first = _short(wanted.render().splitlines()[0])
        return Reply(problem=f'it wrote a new question ("{first}"); only the user asks questions')
    return Reply(problem=f'it wrote "{wanted.prefix}" itself; only the engine writes replies, '
                         f"after an Ask line")


def clean_answer(text: str) -> str:
    """An answer without the protocol it ran on into on the same line."""
    match = _RUN_ON.search(text)
    return (text[: match.start()] if match else text).strip()
