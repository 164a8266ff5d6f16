"""The Code Shot grammar: typed steps, few-shot parsing and validation.

Agent authors write few-shots by hand and the LLM imitates them, so a malformed example
teaches the model a malformed protocol; validation rejects it at registration with the
few-shot number, the line number and the offending line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from codeshot.errors import InvalidInput

FUNC_NAME = r"\w+"
AGENT_ID = r"[\w.-]+(?:/[\w.-]+)?"


class FewShotError(InvalidInput):
    """A few-shot (or base prompt) breaks the Code Shot grammar."""


class Kind(str, Enum):
    Q = "q"
    THOUGHT = "thought"
    ASK_FUNC = "ask_func"
    FUNC_SAYS = "func_says"
    ASK_AGENT = "ask_agent"
    AGENT_SAYS = "agent_says"
    ASK_USER = "ask_user"
    USER_SAYS = "user_says"
    A = "a"


ASKS = {
    Kind.ASK_FUNC: Kind.FUNC_SAYS,
    Kind.ASK_AGENT: Kind.AGENT_SAYS,
    Kind.ASK_USER: Kind.USER_SAYS,
}
SAYS = {says: ask for ask, says in ASKS.items()}

# Target-bearing prefixes capture any bracket content so a bad name gets its own error.
_LINE = re.compile(
    r"^(?:"
    r"(?P<q>Q):|(?P<thought>Thought):|(?P<a>A):"
    r"|Ask (?P<ask>Func|Agent)\[(?P<ask_target>[^\]]*)\]:"
    r"|(?P<says>Func|Agent)\[(?P<says_target>[^\]]*)\] says:"
    r"|(?P<ask_user>Ask User):|(?P<user_says>User says):"
    r")(?P<text>.*)$",
    re.DOTALL,
)
_PREFIXES = {
    Kind.Q: "Q:",
    Kind.THOUGHT: "Thought:",
    Kind.A: "A:",
    Kind.ASK_USER: "Ask User:",
    Kind.USER_SAYS: "User says:",
}
_TARGET = {"Func": re.compile(rf"{FUNC_NAME}\Z"), "Agent": re.compile(rf"{AGENT_ID}\Z")}


@dataclass(frozen=True)
class Step:
    """One line of a Code Shot program; ``target`` is the func name or agent id."""

    kind: Kind
    text: str = ""
    target: str | None = None

    @property
    def label(self) -> str | None:
        """ "Func[name]" or "Agent[id]" for func and agent lines, else None."""
        if self.kind in (Kind.ASK_FUNC, Kind.FUNC_SAYS):
            return f"Func[{self.target}]"
        if self.kind in (Kind.ASK_AGENT, Kind.AGENT_SAYS):
            return f"Agent[{self.target}]"
        return None

    @property
    def prefix(self) -> str:
        if self.kind in (Kind.ASK_FUNC, Kind.ASK_AGENT):
            return f"Ask {self.label}:"
        if self.kind in (Kind.FUNC_SAYS, Kind.AGENT_SAYS):
            return f"{self.label} says:"
        return _PREFIXES[self.kind]

    def render(self) -> str:
        """The step as a line; continuation lines are indented so they never read as steps."""
        text = "\n  ".join(self.text.split("\n"))
        return f"{self.prefix} {text}" if text else self.prefix

    def reply(self, text: str) -> Step:
        """The says line answering this Ask."""
        return Step(ASKS[self.kind], text, self.target)

    def to_dict(self) -> dict[str, str]:
        data = {"kind": self.kind.value, "text": self.text}
        if self.target is not None:
            data["target"] = self.target
        return data

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Step:
        return cls(Kind(data["kind"]), data.get("text", ""), data.get("target"))


@dataclass(frozen=True)
class FewShot:
    steps: tuple[Step, ...]

    def turns(self) -> list[tuple[Step, ...]]:
        """The Q..A turns of this few-shot, in order."""
        starts = [i for i, step in enumerate(self.steps) if step.kind is Kind.Q]
        return [self.steps[a:b] for a, b in zip(starts, [*starts[1:], len(self.steps)])]

    def render(self) -> str:
        return "\n".join(step.render() for step in self.steps)


class _LineError(ValueError):
    pass


def parse_line(line: str) -> Step | None:
    """The step a stripped line holds, None for a line of no known kind.

    Raises ``ValueError`` for a known kind with a bad func name or agent id.
    """
    match = _LINE.match(line)
    if match is None:
        return None
    text = match["text"].strip()
    for group, kind in (
        ("q", Kind.Q),
        ("thought", Kind.THOUGHT),
        ("a", Kind.A),
        ("ask_user", Kind.ASK_USER),
        ("user_says", Kind.USER_SAYS),
    ):
        if match[group]:
            return Step(kind, text)
    if match["ask"]:
        what, target = match["ask"], match["ask_target"]
        kind = Kind.ASK_FUNC if what == "Func" else Kind.ASK_AGENT
    else:
        what, target = match["says"], match["says_target"]
        kind = Kind.FUNC_SAYS if what == "Func" else Kind.AGENT_SAYS
    if not _TARGET[what].match(target):
        rule = (
            "letters, digits and _"
            if what == "Func"
            else '"owner/handle" of letters, digits, _ . -'
        )
        raise _LineError(f"{what.lower()} name {target!r} must be {rule}")
    return Step(kind, text, target)


def parse_lines(text: str) -> list[Step]:
    """Lenient parse of a transcript or LLM output.

    Lines of no known kind (and indented lines) continue the previous step; leading ones
    become a Thought. A bad func name or agent id makes the line plain text.
    """
    steps: list[Step] = []
    for raw in text.strip("\n").split("\n"):
        step = None
        if raw[:1] not in (" ", "\t"):
            try:
                step = parse_line(raw.strip())
            except _LineError:
                step = None
        if step is not None:
            steps.append(step)
        elif steps:
            last = steps[-1]
            joined = f"{last.text}\n{raw.strip()}" if last.text else raw.strip()
            steps[-1] = Step(last.kind, joined, last.target)
        elif raw.strip():
            steps.append(Step(Kind.THOUGHT, raw.strip()))
    return steps


def _quote(line: str, limit: int = 80) -> str:
    return '"' + (line if len(line) <= limit else line[: limit - 3] + "...") + '"'


def _check(steps_and_lines: list[tuple[Step, str]]) -> tuple[int, str] | None:
    """The first grammar violation as (line number, message), or None."""
    previous: tuple[Step, str] | None = None
    in_turn = False
    for number, (step, line) in enumerate(steps_and_lines, start=1):
        if previous is None and step.kind is not Kind.Q:
            return number, f'a few-shot must start with "Q:", got {_quote(line)}'
        if previous is not None:
            prev_step, prev_line = previous
            if prev_step.kind in ASKS:
                expected = prev_step.reply("")
                if step.kind is not expected.kind or step.target != expected.target:
                    return number, (
                        f'expected "{expected.prefix}" after {_quote(prev_line)}, '
                        f"got {_quote(line)}"
                    )
            elif step.kind in SAYS:
                says = Step(SAYS[step.kind], "", step.target).prefix
                return number, (
                    f'{_quote(line)} must follow its "{says}"'
                    " line"
                )
            elif prev_step.kind is Kind.A and step.kind is not Kind.Q:
                return number, f'expected "Q:" after {_quote(prev_line)}, got {_quote(line)}'
            elif step.kind is Kind.Q and in_turn:
                return (
                    number,
                    f'{_quote(line)} comes before the previous "Q:" was answered with "A:"',
                )
        in_turn = step.kind is not Kind.A
        previous = step, line
    assert previous is not None
    last_step, last_line = previous
    if last_step.kind in ASKS:
        awaited = last_step.reply("").prefix
        return len(steps_and_lines), f'expected "{awaited}" after {_quote(last_line)}, got the end'
    if last_step.kind is not Kind.A:
        return len(steps_and_lines), f'a few-shot must end with "A:", got {_quote(last_line)}'
    return None


def parse_few_shot(text: str, number: int = 1) -> FewShot:
    """Parse and validate one few-shot; ``number`` (1-based) goes into error messages."""
    lines = [line.strip() for line in text.strip().split("\n")]
    if not lines or lines == [""]:
        raise FewShotError(f"few-shot {number} is empty", few_shot=number)
    parsed: list[tuple[Step, str]] = []
    for line_number, line in enumerate(lines, start=1):
        if not line:
            raise FewShotError(
                f"few-shot {number}, line {line_number}: blank line inside a few-shot",
                few_shot=number,
                line=line_number,
            )
        try:
            step = parse_line(line)
        except _LineError as exc:
            raise FewShotError(
                f"few-shot {number}, line {line_number}: {exc} in {_quote(line)}",
                few_shot=number,
                line=line_number,
            ) from None
        if step is None:
            raise FewShotError(
                f"few-shot {number}, line {line_number}: unknown line {_quote(line)}; lines start"
                ' with "Q:", "Thought:", "Ask Func[name]:", "Func[name] says:", "Ask Agent[id]:",'
                ' "Agent[id] says:", "Ask User:", "User says:" or "A:"',
                few_shot=number,
                line=line_number,
            )
        if step.kind in (Kind.Q, Kind.A) and not step.text:
            raise FewShotError(
                f"few-shot {number}, line {line_number}: {_quote(line)} has no text",
                few_shot=number,
                line=line_number,
            )
        parsed.append((step, line))
    problem = _check(parsed)
    if problem is not None:
        line_number, message = problem
        raise FewShotError(
            f"few-shot {number}, line {line_number}: {message}", few_shot=number, line=line_number
        )
    return FewShot(tuple(step for step, _ in parsed))


def split_few_shots(text: str) -> list[str]:
    """A FEW_SHOTS text split on blank lines."""
    return [block for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]


def parse_few_shots(few_shots: str | Sequence[str]) -> list[FewShot]:
    """Parse a FEW_SHOTS text or a list of few-shot strings, validating each."""
    blocks = split_few_shots(few_shots) if isinstance(few_shots, str) else list(few_shots)
    return [parse_few_shot(block, number) for number, block in enumerate(blocks, start=1)]


def validate_base_prompt(base_prompt: str) -> str:
    """The base prompt unchanged, or FewShotError: empty, or padded with whitespace."""
    if not isinstance(base_prompt, str) or not base_prompt.strip():
        raise FewShotError("base prompt must not be empty")
    if base_prompt != base_prompt.strip():
        raise FewShotError("base prompt must not start or end with whitespace")
    return base_prompt


def sample_queries(few_shots: Iterable[FewShot]) -> list[str]:
    """The Q lines of the few-shots, in order: what the router embeds for an agent."""
    return [step.text for shot in few_shots for step in shot.steps if step.kind is Kind.Q]


def func_names(few_shots: Iterable[FewShot]) -> list[str]:
    """The funcs the few-shots call, each once, in order of first use."""
    names = (s.target for shot in few_shots for s in shot.steps if s.kind is Kind.ASK_FUNC)
    return list(dict.fromkeys(n for n in names if n is not None))
