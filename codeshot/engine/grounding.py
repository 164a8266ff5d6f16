"""A cheap grounding check: numbers in an answer that came from nowhere.

When an agent's few-shots answer with numbers taken from Func (or agent) replies, an
answer whose numbers appear in no reply of the run and not in the question was most
likely invented: a price quoted without asking the Func, a dice total copied from an
example. Sums of one reply's numbers count as grounded (dice totals); other arithmetic
is flagged, so a flag is a hint in the trace, not a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from codeshot.engine.components import AnswerFlag
from codeshot.engine.fewshot import ASKS, SAYS, FewShot, Kind, Step

# 1,234.50 or 171.42 or 7 (also inside "2d10" and "$5")
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)?")
_REPLIES = tuple(SAYS)
# Whether an answer that fails the check goes back to the model once (benchmarks/engine.py
# measures both ways).
REPROMPT_UNGROUNDED = False


def numbers(text: str) -> dict[Decimal, str]:
    """The numbers written in ``text``: value (1,234.50 == 1234.5) -> how it was written."""
    found: dict[Decimal, str] = {}
    for match in _NUMBER.finditer(text):
        try:
            found.setdefault(Decimal(match.group(0).replace(",", "")).normalize(), match.group(0))
        except InvalidOperation:
            continue
    return found


def grounded_numbers(question: str, replies: Iterable[str]) -> set[Decimal]:
    """The numbers an answer may state: the question's, the replies', each reply's sum."""
    allowed = set(numbers(question))
    for reply in replies:
        values = list(numbers(reply))
        allowed.update(values)
        if len(values) > 1:
            allowed.add(sum(values, Decimal(0)).normalize())
    return allowed


def _numbers_from_replies(turn: tuple[Step, ...]) -> bool:
    """Whether the turn answers with a number a reply gave (and its question did not)."""
    replies = set().union(*(numbers(s.text) for s in turn if s.kind in _REPLIES))
    given = replies - set(numbers(turn[0].text))
    return any(n in given for s in turn if s.kind is Kind.A for n in numbers(s.text))


@dataclass(frozen=True)
class GroundingCheck:
    """Flags answers with numbers no reply of the run (or the question) holds. When every
    example asks a command (``must_ask``) and the run asked none, the question's numbers
    do not count either: "You rolled a 6" for "Roll a d6" rolled nothing.

    ``reprompt``: the model is asked once more, told which numbers had no source.
    """

    must_ask: bool
    reprompt: bool = False

    def check_answer(self, transcript: Sequence[Step], answer: str) -> AnswerFlag | None:
        q_index = max((i for i, s in enumerate(transcript) if s.kind is Kind.Q), default=0)
        run = transcript[q_index:]
        replies = [s.text for s in run if s.kind in _REPLIES]
        asked = any(s.kind in ASKS for s in run) or bool(replies)
        question = run[0].text if run and (asked or not self.must_ask) else ""
        allowed = grounded_numbers(question, replies)
        unsourced = [shown for value, shown in numbers(answer).items() if value not in allowed]
        if not unsourced:
            return None
        where = ("no reply of this run or the question" if replies else
                 "no reply (no command was asked)" if self.must_ask else
                 "no reply (no command was asked) or the question")
        found = f"{', '.join(unsourced)} in the answer came from {where}"
        fix = "ask the command that gives these numbers, or answer only with what the replies said"
        return AnswerFlag(f"Grounding check: {found}.", f"{found}; {fix}" if self.reprompt
                          else None)


def grounding_check(few_shots: Sequence[FewShot], reprompt: bool = REPROMPT_UNGROUNDED
                    ) -> GroundingCheck | None:
    """The check, when some few-shot answers with numbers its replies gave; else None."""
    turns = [turn for shot in few_shots for turn in shot.turns()]
    if not any(_numbers_from_replies(turn) for turn in turns):
        return None
    must_ask = all(any(s.kind in ASKS for s in turn) for turn in turns)
    return GroundingCheck(must_ask, reprompt)
