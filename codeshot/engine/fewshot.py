"""The Code Shot grammar: typed steps, few-shot parsing and validation.

The grammar is the one fixieai 1.0.4 accepted. A line that starts with a step prefix
(``Q:``, ``Thought:``, ``Ask Func[f]:``, ``Func[f] says:``, ``Ask Agent[id]:``,
``Agent[id] says:``, ``Ask User:``, ``User says:``, ``A:``) begins a step; any other line
(a table row, a poem's next line, ``Self Ask:``, a blank line) continues the step before
it, so answers and replies span several lines. Agent authors write few-shots by hand and
the LLM imitates them: what Fixie refused, validation refuses at registration, naming the
few-shot, the line and the offending text.

Transcripts (the current query, Func results, user answers) hold text nobody checked.
:meth:`Step.render` indents every continuation line, and readers take only unindented
lines as steps, so no such text can forge a step line. Every line separator Python knows
(``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, U+0085, U+2028, U+2029, not only ``\\n``)
counts as a line break wherever a transcript is rendered or read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from codeshot.errors import InvalidInput
from codeshot.models import FUNC_NAME_RE, as_sample_query

AGENT_ID = r"[\w.-]+(?:/[\w.-]+)?"
# Continuation lines of a rendered step start with this, so they never read as steps.
INDENT = "  "
# An embed reference: an odd number of '#' then a key (Fixie's rule: ``##x`` is a literal).
EMBED_REF = re.compile(r"(?<!#)(?:##)*#(?!#)(?P<key>\w+)(?!\w)")


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
_TARGET = {"Func": re.compile(rf"{FUNC_NAME_RE.pattern}\Z"), "Agent": re.compile(rf"{AGENT_ID}\Z")}
# New embeds come from the question or a reply; Fixie refused them first in these steps.
_NO_NEW_EMBEDS = (Kind.ASK_FUNC, Kind.ASK_AGENT, Kind.ASK_USER, Kind.A)


def lines_of(text: str) -> list[str]:
    """``text`` split at every line break (``str.splitlines``: \\n, \\r, \\v, \\f, \\x1c-\\x1e,
    U+0085, U+2028, U+2029), so no separator can hide a line from a reader."""
    return text.splitlines()


@dataclass(frozen=True)
class Step:
    """One step of a Code Shot program; ``target`` is the func name or agent id."""

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

    def render(self, indent: str = INDENT) -> str:
        """The step as transcript lines: continuation lines start with ``indent``, so
        whatever the text holds, only the first line reads as a step."""
        first, *rest = lines_of(self.text) or [""]
        head = f"{self.prefix} {first}" if first else self.prefix
        return "\n".join([head, *(indent + line for line in rest)])

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
        """The few-shot as its author wrote it (lines stripped). Unindented continuation
        lines are safe here: validation made sure none of them reads as a step."""
        return "\n".join(step.render(indent="") for step in self.steps)


class _LineError(ValueError):
    pass


def parse_line(line: str) -> Step | None:
    """The step a stripped line starts, None for a line of no known kind.

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


def _lenient_step(line: str) -> Step | None:
    try:
        return parse_line(line.strip())
    except _LineError:
        return None  # a bad target makes the line text: the model wrote it, not an author


def _parse(text: str, indent: str) -> list[Step]:
    steps: list[Step] = []
    for raw in lines_of(text.lstrip()):
        step = None if raw[:1] in (" ", "\t") else _lenient_step(raw)
        if step is not None:
            steps.append(step)
            continue
        line = raw.removeprefix(indent).rstrip() if indent else raw.rstrip()
        if steps:
            last = steps[-1]
            steps[-1] = Step(last.kind, f"{last.text}\n{line}" if last.text else line.strip(),
                             last.target)
        elif line.strip():
            steps.append(Step(Kind.THOUGHT, line.strip()))
    return [Step(s.kind, s.text.rstrip(), s.target) for s in steps]


def parse_lines(text: str) -> list[Step]:
    """Lenient parse of LLM output.

    Indented lines and lines of no known kind continue the previous step (as written);
    leading ones become a Thought. A bad func name or agent id makes the line plain text.
    """
    return _parse(text, indent="")


def parse_transcript(text: str) -> list[Step]:
    """A transcript rendered with :meth:`Step.render`, read back exactly."""
    return _parse(text, indent=INDENT)


def _quote(line: str, limit: int = 80) -> str:
    if not line:
        return "a blank line"
    return '"' + (line if len(line) <= limit else line[: limit - 3] + "...") + '"'


@dataclass(frozen=True)
class _Source:
    """A parsed few-shot step and where it came from: its first line and line number,
    and the lines that continue it."""

    step: Step
    number: int
    line: str
    continuation: tuple[str, ...] = ()


def _structure_error(
    sources: list[_Source], conversational: bool, total_lines: int
) -> tuple[int, str] | None:
    """The first violation of the Q .. A structure as (line number, message), or None."""
    previous: _Source | None = None
    in_turn = False  # a Q: is waiting for its A:
    for source in sources:
        step, line = source.step, source.line
        if previous is None:
            if step.kind is not Kind.Q:
                return source.number, f'a few-shot must start with "Q:", got {_quote(line)}'
        elif previous.step.kind in ASKS:
            expected = previous.step.reply("")
            if step.kind is not expected.kind or step.target != expected.target:
                return source.number, (
                    f'expected "{expected.prefix}" after {_quote(previous.line)}, '
                    f"got {_quote(line)}"
                )
        elif step.kind is Kind.USER_SAYS:
            return source.number, f'{_quote(line)} must follow its "Ask User:" line'
        if step.kind is Kind.Q:
            if in_turn:
                return source.number, (
                    f'{_quote(line)} comes before the previous "Q:" was answered with "A:"'
                )
            if previous is not None and not conversational:
                return source.number, (
                    f"{_quote(line)} starts a second question: several Q/A turns in one "
                    "few-shot need a conversational agent (conversational=True)"
                )
        elif step.kind is not Kind.THOUGHT and not in_turn:
            answer = next(s for s in reversed(sources[: sources.index(source)])
                          if s.step.kind is Kind.A)
            return source.number, (
                f'expected "Q:" after {_quote(answer.line)}, got {_quote(line)}'
            )
        if step.kind in ASKS and source.continuation:
            expected = step.reply("")
            return source.number + 1, (
                f'expected "{expected.prefix}" after {_quote(line)}, '
                f"got {_quote(source.continuation[0])}"
            )
        if step.kind is not Kind.THOUGHT:
            in_turn = step.kind is not Kind.A
        previous = source
    assert previous is not None
    if previous.step.kind in ASKS:
        awaited = previous.step.reply("").prefix
        return total_lines, f'expected "{awaited}" after {_quote(previous.line)}, got the end'
    if in_turn:
        last = previous.continuation[-1] if previous.continuation else previous.line
        return total_lines, f'a few-shot must end with "A:", got {_quote(last)}'
    return None


def _embed_error(sources: list[_Source]) -> tuple[int, str] | None:
    """A new embed first named where Fixie refused it (Ask and A: steps), or None.

    ``Thought:`` lines belong to the step before them, as in Fixie (where they were text).
    """
    known: set[str] = set()
    owner = Kind.Q
    for source in sources:
        if source.step.kind is not Kind.THOUGHT:
            owner = source.step.kind
        for offset, line in enumerate((source.line, *source.continuation)):
            for match in EMBED_REF.finditer(line):
                key = match["key"]
                if key not in known and owner in _NO_NEW_EMBEDS:
                    return source.number + offset, (
                        f'embed "#{key}" is new in {_quote(line)}: an embed must first come '
                        'from the question or a reply, not an Ask or "A:" line'
                    )
                known.add(key)
    return None


def parse_few_shot(text: str, number: int = 1, *, conversational: bool = True) -> FewShot:
    """Parse and validate one few-shot; ``number`` (1-based) goes into error messages.

    Lines are stripped first (Fixie's authors indent their triple-quoted few-shots).
    ``conversational=False`` refuses several Q/A turns in one few-shot, as Fixie did.
    """

    def error(line_number: int, message: str) -> FewShotError:
        return FewShotError(
            f"few-shot {number}, line {line_number}: {message}", few_shot=number, line=line_number
        )

    lines = [line.strip() for line in lines_of(text.strip())]
    if not lines:
        raise FewShotError(f"few-shot {number} is empty", few_shot=number)
    sources: list[_Source] = []
    for line_number, line in enumerate(lines, start=1):
        try:
            step = parse_line(line)
        except _LineError as exc:
            raise error(line_number, f"{exc} in {_quote(line)}") from None
        if step is not None:
            sources.append(_Source(step, line_number, line))
        elif not sources:
            raise error(line_number, f'a few-shot must start with "Q:", got {_quote(line)}')
        else:
            last = sources[-1]
            sources[-1] = _Source(last.step, last.number, last.line, (*last.continuation, line))
    steps = []
    for source in sources:
        body = "\n".join((source.step.text, *source.continuation)).strip()
        if source.step.kind is Kind.Q and not source.step.text:
            raise error(source.number, f"{_quote(source.line)} has no text")
        if source.step.kind is Kind.A and not body:
            raise error(source.number, f"{_quote(source.line)} has no text")
        steps.append(Step(source.step.kind, body, source.step.target))
    problem = _structure_error(sources, conversational, len(lines)) or _embed_error(sources)
    if problem is not None:
        raise error(*problem)
    return FewShot(tuple(steps))


def split_few_shots(text: str) -> list[str]:
    """A FEW_SHOTS text split where Fixie split it: at a blank line followed by a ``Q:``
    line. A blank line followed by anything else stays inside its few-shot."""
    lines = [line.strip() for line in lines_of(text.strip())]
    blocks: list[list[str]] = []
    current: list[str] = []
    for index, line in enumerate(lines):
        if line.startswith("Q:") and index and not lines[index - 1] and current:
            blocks.append(current)
            current = []
        current.append(line)
    blocks.append(current)
    return ["\n".join(block).strip() for block in blocks]


def parse_few_shots(
    few_shots: str | Sequence[str], *, conversational: bool = True
) -> list[FewShot]:
    """Parse a FEW_SHOTS text or a list of few-shot strings, validating each.

    An empty list is no few-shots (a plain LLM agent); an empty text is an error.
    """
    blocks = split_few_shots(few_shots) if isinstance(few_shots, str) else list(few_shots)
    return [
        parse_few_shot(block, number, conversational=conversational)
        for number, block in enumerate(blocks, start=1)
    ]


def validate_base_prompt(base_prompt: str) -> str:
    """The base prompt unchanged, or FewShotError: empty, or padded with whitespace."""
    if not isinstance(base_prompt, str) or not base_prompt.strip():
        raise FewShotError("base prompt must not be empty")
    if base_prompt != base_prompt.strip():
        raise FewShotError("base prompt must not start or end with whitespace")
    return base_prompt


def sample_queries(few_shots: Iterable[FewShot]) -> list[str]:
    """The Q lines of the few-shots, in order, each within a sample query's cap: what the
    router embeds for an agent."""
    return [as_sample_query(step.text) for shot in few_shots for step in shot.steps
            if step.kind is Kind.Q]


def func_names(few_shots: Iterable[FewShot]) -> list[str]:
    """The Funcs the few-shots use (asked, or replying with no Ask), each once, in order of
    first use."""
    names = (
        s.target
        for shot in few_shots
        for s in shot.steps
        if s.kind in (Kind.ASK_FUNC, Kind.FUNC_SAYS)
    )
    return list(dict.fromkeys(n for n in names if n is not None))


def unasked_funcs(few_shots: Iterable[FewShot]) -> list[str]:
    """Funcs the engine calls, with no input, when the model starts their says line: those
    whose reply a few-shot shows with no Ask before it (gcalendar's
    ``Func[fixie_local_datetime] says:``), and those every Ask of the few-shots gives no
    input (a clock's ``Ask Func[now]:``, whose empty Ask small models skip)."""
    names: list[str] = []
    empty_asks: list[str] = []
    with_input: set[str] = set()
    for shot in few_shots:
        for previous, step in zip((None, *shot.steps), shot.steps):
            asked = previous is not None and previous.kind is Kind.ASK_FUNC
            if step.kind is Kind.FUNC_SAYS and not asked and step.target is not None:
                names.append(step.target)
            if step.kind is Kind.ASK_FUNC and step.target is not None:
                (with_input.add if step.text.strip() else empty_asks.append)(step.target)
    return list(dict.fromkeys([*names, *(n for n in empty_asks if n not in with_input)]))
