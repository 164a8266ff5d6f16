"""The ``fewshot`` provider: offline and deterministic. It is NOT a language model.

It reads the few-shot examples and the transcript back out of the prompt the engine
built, takes the example whose question is closest to the query by word overlap, and
replays it: the query's differing words replace the example's in the Ask lines (a count
is no function word: "Roll two d20" asks "two d20" where "Roll a d20" asked "a d20"), the
real Func results replace the example's in the answer, one Ask per call (a Func the
example shows replying with no Ask: its label, as a model cut at the "] says:" stop
writes it). A replay never contradicts a result: when the example's answer cannot carry
every real result (a total the example computed, more dice than it rolled, a Func's
reply in words where the example's was a number: a refusal), the answer is the results
as returned. When no example is close it says it is an offline replay that found none,
and so when its Ask would hold the example's own words; when the Ask has no place for a
count the query changed (an Ask of "2d6" for "two six-sided dice" cannot roll "a
six-sided die"; a number counts where the example said a count, fused with letters
wherever it stands ("d12", "x3"; not "3pm", "2nd"), or right before a word its Ask
receives or "times", so "at 3pm" or "In 2024," elsewhere in a question replays as without
it), or an example's number in an Ask would take a query's number that stands elsewhere
("2" of "in 2 minutes" for the "5" of "5 miles" where the query says "10 miles"), it says
the example is close but the replay cannot fit that number, where a model would. It
aligns a few-shot's text with the actual one word by word up to MAX_ALIGNED pairs of words:
past it a Func's reply is carried whole or as returned, and a question is declined.
Use it for local runs and tests of agents whose queries look like their few-shots; use
``bedrock`` or ``openai`` for anything else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from difflib import SequenceMatcher
from itertools import pairwise

from codeshot.engine.fewshot import ASKS, SAYS, FewShot, Kind, Step
from codeshot.engine.grounding import grounded_numbers, numbers
from codeshot.engine.prompt import read_examples, read_transcript
from codeshot.llm.base import ChatMessage, Completion

CANT_HELP = ("No example of this agent is close to your question, and this is an offline "
             "replay (the fewshot provider), not a language model: it only replays examples. "
             "Set CODESHOT_LLM to bedrock or openai for a real model.")
# The example is close, but its Ask has no place for a count the question changed.
NO_PLACE = ("An example of this agent is close to your question, but this offline replay (the "
            "fewshot provider) cannot fit a number your question says into the call its "
            "example makes; a language model would. Set CODESHOT_LLM to bedrock or openai for "
            "a real model.")
DECLINES = (CANT_HELP, NO_PLACE)  # the answers a replay gives when it replays nothing
AS_RETURNED = "The offline replay cannot fit these results into its example's answer:"
# An agent with no few-shots is a plain LLM agent: nothing here can stand in for the model.
NEEDS_LLM = ("This agent needs a language model to answer, and the offline fewshot provider "
             "is not one: set CODESHOT_LLM to bedrock or openai.")
NO_REPLAY = "No replay: "  # a Thought's start: why the replay declined (DECLINES)
THRESHOLD = 0.4  # below this Dice overlap of content words, an example does not apply
# The most word pairs (an example text's words times the actual's) the replay aligns: difflib's
# work on repetitive text grows with their cube (200 x "5 miles" against 1,000 x "10 miles",
# 9 kB, took 3 to 6 s a step); 200 x 200 words take under 0.1 s, and a few-shot's lines far less.
MAX_ALIGNED = 40_000

_LETTERS = re.compile(r"[^\W\d_]{2}")  # a word: two letters running (not "18C"'s unit)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")  # a word that is a number: "15", "3.5"
# A URL is one word, so a query's URL replaces an example's whole.
_WORD = re.compile(r"https?://[^\s\"'<>]*[^\s\"'<>.,;:!?)]|\w+(?:[.'-]\w+)*")
# fmt: off
_STOPWORDS = frozenset({
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "of", "for", "to", "in", "on",
    "at", "by", "with", "from", "and", "or", "but", "what", "whats", "what's", "how", "who",
    "which", "when", "where", "me", "my", "i", "you", "your", "it", "its", "this", "that",
    "these", "those", "please", "can", "could", "would", "will", "do", "does", "did", "tell",
    "give", "show", "get", "find", "s",
})
# fmt: on
_ARTICLES = frozenset({"a", "an", "the"})
# Counts said in words; "a pair of" (_GROUPS) is one.
# fmt: off
_COUNT_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "twenty": 20,
    "hundred": 100, "pair": 2, "couple": 2, "dozen": 12,
}
# fmt: on
_GROUPS = frozenset({"pair", "couple", "dozen"})
# A number fused with letters counts wherever it stands ("d12", "2d6", "12-sided", "x3"),
# but a time or an ordinal does not ("3pm", "9am", "2nd").
_FUSED = re.compile(r"(?i)(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[\w-]+")
_NO_COUNT = re.compile(r"(?i)\d+(?:am|pm|h|st|nd|rd|th)")
_TIMES = frozenset({"times", "x"})  # "3 times", "3 x": a count of what the Ask receives
_PUNCTUATED = re.compile(r"[,:.?;!]")  # after a number: "In 2024," counts nothing after it
_PLACES = frozenset({Kind.ASK_FUNC, Kind.ASK_AGENT})  # the lines a count reaches a call in
_GIVEN = "(given: "  # the planner's hand-off: "<task> (given: <first answer>)"


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` that carry meaning (no stopwords)."""
    return {w for w in (t.lower() for t in _WORD.findall(text)) if w not in _STOPWORDS}


def similarity(a: str, b: str) -> float:
    """Dice coefficient of the two texts' content words (0 when either has none). Numbers
    match numbers once a word matches too: "a 20% tip on $50" asks what "a 15% tip on $80"
    does (the replay carries the query's numbers over), "a 20% fee" does not."""
    left, right = content_words(a), content_words(b)
    if not left or not right:
        return 0.0
    left_numbers, right_numbers = ({w for w in words if _NUMBER.fullmatch(w)}
                                   for words in (left, right))
    shared = len((left - left_numbers) & (right - right_numbers))
    shared += min(len(left_numbers), len(right_numbers)) if shared \
        else len(left_numbers & right_numbers)
    return 2 * shared / (len(left) + len(right))


def word_substitutions(example: str, actual: str) -> dict[str, str]:
    """Which of the example's words became which of the actual text's, by alignment.

    Replaced runs, trimmed of function words, map word to word when of equal length and
    phrase to phrase otherwise; "for" -> "of" is never a substitution. The example's
    article before its run, where the actual run has none, goes with it too ("the quick
    brown fox" -> "green eggs and ham", not "the green eggs and ham"). A count is no
    function word: "a" -> "two" maps with the word it counts ("a d20" -> "two d20"), as an
    article alone would replace every "a" of a line; nor is one after a function word
    ("Roll me two d20" maps "a d20" -> "two d20" too), nor after other words, which map
    apart ("Throw two" -> "Roll a pair of": "Throw" -> "Roll", "two" -> "a pair of").
    None past MAX_ALIGNED pairs of words.
    """
    return {old: new for run in _runs(example, actual) for old, new in run.pairs}


@dataclass(frozen=True)
class _Run:
    """A run of words the two texts differ in: what it maps, the example's words and the
    actual text's (with the word after them, which both have), and whether it changes a
    count or number (a replay that cannot carry one does what the example asked)."""

    pairs: list[tuple[str, str]]
    example: list[str]
    actual: list[str]
    after: str | None
    recounts: bool
    # The example's numbers it maps whose neighbouring word the query has beside another
    # word ("5 miles" -> "2" where the query says "10 miles"): the alignment misplaced them.
    misplaced: list[str]

    @property
    def words(self) -> str:
        """The actual text's words, or the example's where the actual left them out."""
        return " ".join(self.actual or self.example)

    def counts_for(self, asked: set[str]) -> bool:
        """Whether the number it changes is a count the Ask must carry: the example said a
        count or number here ("a table" -> "two tables"), the actual text says one fused
        with letters ("d12", "2d6", "x3") or right before a word the example's Ask receives
        ("two" d20) or "times". A year, a time or a "#2" elsewhere in the question is no
        count: a model would not carry it either."""
        if not self.recounts:
            return False
        if any(_said(word) for word in self.example):
            return True
        words = [w.lower() for w in (*self.actual, *([self.after] if self.after else []))]
        for k, word in enumerate(words[:len(self.actual)]):
            if _fused(word):
                return True
            rest = words[k + 1:]
            if word in _GROUPS and rest[:1] == ["of"]:  # "a pair of" d20
                rest = rest[1:]
            if _counts([word]) and rest and rest[0] in (asked - _STOPWORDS) | _TIMES:
                return True
        return False


def _aligned(left: Sequence[str], right: Sequence[str]) -> bool:
    """Whether the replay aligns the two texts' words one by one (MAX_ALIGNED)."""
    return len(left) * len(right) <= MAX_ALIGNED


def _runs(example: str, actual: str) -> list[_Run]:
    """The runs the texts differ in, by alignment of their words; none past MAX_ALIGNED (a
    reply is still replaced whole, and an answer that then holds the example's words is the
    results as returned)."""
    left, right = _WORD.findall(example), _WORD.findall(actual)
    if not _aligned(left, right):
        return []
    # A number before punctuation ("In 2024, ", "Today at 5: ") counts nothing after it.
    loose = {k for k, m in enumerate(_WORD.finditer(actual))
             if _NUMBER.fullmatch(m.group(0)) and _PUNCTUATED.match(actual, m.end())}
    lower = [w.lower() for w in right]
    matcher = SequenceMatcher(None, [w.lower() for w in left], lower, autojunk=False)
    runs = []
    beside = _Beside.of(lower)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        # A count after other words is still one, mapped on its own: "Roll me two d20",
        # "the two d20"; "Throw two" -> "Roll a pair of" is "Throw" -> "Roll" and "two" ->
        # "a pair of".
        c1, d1 = _count_start(left, i1, i2), _count_start(right, j1, j2)
        if op == "replace" and c1 is not None and d1 is not None and \
                _content(left[i1:c1]) == _content(right[j1:d1]):
            pairs = _recounted(left, right, c1, i2, d1, j2)
            if _content(left[i1:c1]):
                pairs = _replaced(left, right, i1, c1, j1, d1) + pairs
        elif op == "replace":
            pairs = _replaced(left, right, i1, i2, j1, j2)
        else:
            pairs = _widened(left, right, i1, i2, j1, j2)
        kept = [pair for pair in pairs if _kept(*pair)]
        runs.append(_Run(kept, left[i1:i2], right[j1:j2],
                         right[j2] if j2 < len(right) else None,
                         _counts(left[i1:i2]) != _counts(
                             [w for k, w in enumerate(right[j1:j2], j1) if k not in loose]),
                         _misplaced(left, i1, i2, dict(kept), beside)))
    return runs


def _count_start(words: list[str], start: int, end: int) -> int | None:
    """Where the count ``words[start:end]`` ends with starts, or None: it ends with none.
    A count is three words at most ("a pair of"): only those are tried, so a long run
    costs no more than a short one."""
    return next((k for k in range(max(start, end - 3), end) if _is_count(words[k:end])), None)


def _content(words: Sequence[str]) -> bool:
    """Whether any of the words is no function word."""
    return any(w.lower() not in _STOPWORDS for w in words)


def _misplaced(left: list[str], start: int, end: int, mapped: dict[str, str],
               beside: _Beside) -> list[str]:
    """The example's numbers in ``left[start:end]`` that the run maps, whose neighbouring
    word (the next, else the one before) the actual text has beside another word: "5
    miles" aligned with "2 minutes" where the query says "10 miles"."""
    found = []
    for k in range(start, end):
        new = mapped.get(left[k])
        if new is None or not _NUMBER.fullmatch(left[k]):
            continue
        for step, words in ((1, beside.before), (-1, beside.after)):
            if not 0 <= k + step < len(left) or left[k + step].lower() in _STOPWORDS:
                continue
            if there := words.get(left[k + step].lower()):
                if new.split()[-1 if step == 1 else 0].lower() not in there:
                    found.append(left[k])
                break
    return found


@dataclass(frozen=True)
class _Beside:
    """The words the actual text has before and after each of its words (lower-cased),
    read once for all of a text's runs: a lookup per number, not a scan of the text."""

    before: dict[str, set[str]]
    after: dict[str, set[str]]

    @classmethod
    def of(cls, lower: list[str]) -> _Beside:
        before: dict[str, set[str]] = {}
        after: dict[str, set[str]] = {}
        for first, second in pairwise(lower):
            before.setdefault(second, set()).add(first)
            after.setdefault(first, set()).add(second)
        return cls(before, after)


def _kept(old: str, new: str) -> bool:
    """Whether a pair is worth substituting: no function word on either side, but for a
    count ("two" -> "a"); an article alone is no key ("a" -> "two" would hit every "a")."""
    if old.lower() not in _STOPWORDS and new.lower() not in _STOPWORDS:
        return True
    return old.lower() not in _ARTICLES and _is_count(old.split()) and _is_count(new.split())


def _replaced(left: list[str], right: list[str], i1: int, i2: int, j1: int,
              j2: int) -> list[tuple[str, str]]:
    """A replaced run's pairs: word to word when of equal length, else phrase to phrase,
    and the example's article before it where the actual run has none."""
    (old_start, old_end), (new_start, new_end) = _core(left[i1:i2]), _core(right[j1:j2])
    old, new = left[i1:i2][old_start:old_end], right[j1:j2][new_start:new_end]
    pairs: list[tuple[str, str]] = []
    if len(old) == len(new):
        pairs.extend(zip(old, new))
    elif old and new:
        pairs.append((" ".join(old), " ".join(new)))
    # An article before the example's run, where the query's has none, goes with it
    # (prepositions stay: "in Paris" -> "London" would lose the answer's "in").
    if old and new and new_start == 0 and old_start and \
            left[i1 + old_start - 1].lower() in _ARTICLES:
        pairs.append((" ".join(left[i1 + old_start - 1:i1 + old_end]), " ".join(new)))
    return pairs


def _recounted(left: list[str], right: list[str], i1: int, i2: int, j1: int,
               j2: int) -> list[tuple[str, str]]:
    """A count replaced by a count, whole ("two" -> "a pair of"); an article with the word
    it counts, after it (both texts have it: a run ends at an equal word) or else before."""
    old, new = " ".join(left[i1:i2]), " ".join(right[j1:j2])
    if old.lower() not in _ARTICLES:
        return [(old, new)]
    if i2 < len(left):
        return [(f"{old} {left[i2]}", f"{new} {right[j2]}")]
    return [(f"{left[i1 - 1]} {old}", f"{right[j1 - 1]} {new}")] if i1 else []


def _widened(left: list[str], right: list[str], i1: int, i2: int, j1: int,
             j2: int) -> list[tuple[str, str]]:
    """Words only one text has ("buy oat milk" against "buy milk"), as phrases widened to
    the words both have beside them, so the change lands where the example's words are:
    "buy milk" -> "buy oat milk", else "buy" -> "buy oat" or "milk" -> "oat milk" (the
    longest that appears wins). Only function words ("please"): nothing to carry."""
    start, end = _core(left[i1:i2] or right[j1:j2])
    if start == end:
        return []
    before, after = i1 > 0 and j1 > 0, i2 < len(left) and j2 < len(right)
    spans = [(i1 - before, i2 + after, j1 - before, j2 + after)]
    if before and after:  # one side only, for an Ask line holding part of the question
        spans += [(i1 - 1, i2, j1 - 1, j2), (i1, i2 + 1, j1, j2 + 1)]
    return [(" ".join(left[a:b]), " ".join(right[c:d])) for a, b, c, d in spans
            if a < b and c < d]


def _core(words: list[str]) -> tuple[int, int]:
    """Where a run of words is without the function words at its ends ("for AAPL":
    "AAPL")."""
    start, end = 0, len(words)
    while start < end and words[start].lower() in _STOPWORDS:
        start += 1
    while end > start and words[end - 1].lower() in _STOPWORDS:
        end -= 1
    return start, end


def _is_count(words: Sequence[str]) -> bool:
    """Whether a run of words is only a count ("two", "3", "a", "a pair of"); its value is
    not read (int() refuses a word of more than 4300 digits)."""
    names = [w.lower() for w in words]
    if len(names) > 1 and names[-1] == "of" and names[-2] in _GROUPS:
        names.pop()
    if len(names) == 2 and names[0] in _ARTICLES and names[1] in _GROUPS:
        names.pop(0)
    return len(names) == 1 and (names[0].isdecimal() or names[0] in _COUNT_WORDS)


def _said(word: str) -> bool:
    """Whether a word says a count or number, one included ("a", "2", "d20", "six-sided")."""
    return bool(numbers(word)) or any(part in _COUNT_WORDS for part in word.lower().split("-"))


def _fused(word: str) -> bool:
    """Whether a word is a number fused with letters that counts ("d12", "2d6", "x3",
    "12-sided"), not a time or an ordinal ("3pm", "2nd")."""
    return _FUSED.fullmatch(word) is not None and _NO_COUNT.fullmatch(word) is None


def _counts(words: Sequence[str]) -> list[Decimal]:
    """The counts and numbers the words say, but one (what "a" or no count says too):
    digits, also inside a word ("d20"), and number words, also in one ("six-sided")."""
    said = [value for word in words for value in (
        *numbers(word), *(Decimal(_COUNT_WORDS.get(part, 1)) for part in word.lower().split("-")))]
    return [value for value in said if value != 1]


def substitute(text: str, subs: dict[str, str]) -> str:
    """``text`` with each whole-word key replaced, in one pass (longest key first)."""
    keys = sorted((k for k in subs if k), key=len, reverse=True)
    if not keys:
        return text
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, keys)) + r")(?!\w)")
    return pattern.sub(lambda m: subs[m.group(0)], text)


def _words(text: str) -> bool:
    """Whether ``text`` says something in words (a run of two letters or more), not only
    numbers and symbols ("17", "$150.12", "3 + 5 = 8", "18C")."""
    return _LETTERS.search(text) is not None


def _carried(answer: str, turn: Sequence[Step], query: str, real: Sequence[Step]) -> bool:
    """Whether a replayed answer states the real results as its example stated its own,
    and nothing an example result said that the real ones did not."""
    texts = [r.text for r in real]
    example_results = [s.text for s in turn if s.kind in SAYS and s.kind is not Kind.USER_SAYS]
    called = [r.text for r in real if r.kind is not Kind.USER_SAYS]
    if any(_words(result) and not _words(example)
           for example, result in zip(example_results, called, strict=False)):
        # Words where the example's answer was written around a value: the Func said why
        # it could not ("I roll 1 to 100 dice"), which "You rolled 17." cannot carry.
        return False
    allowed = grounded_numbers(query, texts)
    if any(n not in allowed for n in numbers(answer)):
        return False  # a number from the example (a total, a price) is still there
    real_words = content_words(query).union(*(content_words(t) for t in texts))
    example_replies = [s.text for s in turn if s.kind in SAYS]
    answer_words = content_words(answer)
    if any(content_words(ex) & answer_words - real_words for ex in example_replies):
        return False  # words of an example result are still there
    stated = [s.text for s in turn if s.kind is Kind.A]
    if any(set(numbers(ex)) & set(numbers(a)) for ex in example_replies for a in stated):
        shown = numbers(answer)
        return all(n in shown for t in texts for n in numbers(t))
    return True


def _as_returned(real: Sequence[Step]) -> str:
    """The real results, plainly, for an answer the replay could not fit them into."""
    lines = [f"{r.label or 'The user'} returned: {r.text}" for r in real]
    return Step(Kind.A, "\n".join([AS_RETURNED, *lines])).render()


def _turns(examples: Sequence[FewShot]) -> list[tuple[Step, ...]]:
    """Every Q..A turn of the examples (each starts with its Q)."""
    return [turn for shot in examples for turn in shot.turns()]


def _nearest(turns: Sequence[Sequence[Step]], query: str) -> tuple[Sequence[Step], float]:
    turn = max(turns, key=lambda t: similarity(t[0].text, query))
    return turn, similarity(turn[0].text, query)


def miss(examples: Sequence[FewShot], query: str) -> str:
    """Why the replay answered ``query`` with CANT_HELP for want of a close example: its
    nearest one and their overlap (``agent test`` shows it, and a trace as a Thought
    (NO_REPLAY), as each other reason to decline; the answer itself stays plain, as a real model's
    refusal would, and gives the answer checks no numbers to question)."""
    turns = _turns(examples)
    if not turns:
        return "the agent has no few-shot questions"
    return _missed(*_nearest(turns, query))


def _missed(turn: Sequence[Step], score: float) -> str:
    return (f'the nearest few-shot is "{turn[0].text}": word overlap {score:.2f}, under the '
            f"replay's {THRESHOLD:.2f}")


def next_lines(examples: Sequence[FewShot], transcript: Sequence[Step]) -> str:
    """The lines the nearest example says come next: up to its next Ask (or the label of a
    reply it shows with no Ask), or its answer."""
    q_index = max((i for i, s in enumerate(transcript) if s.kind is Kind.Q), default=None)
    turns = _turns(examples)
    if not turns:
        return f"A: {NEEDS_LLM}"
    if q_index is None:
        return f"A: {CANT_HELP}"
    # The planner's hand-off of a first answer ("save it as a note (given: You rolled
    # 15.)") read as the text it gives, as an example's "Save a note: buy milk" is.
    query = _given(transcript[q_index].text)
    turn, score = _nearest(turns, query)
    if score < THRESHOLD:
        return _declined(_missed(turn, score))
    asked_words, query_words = _WORD.findall(turn[0].text), _WORD.findall(query)
    if not _aligned(asked_words, query_words):
        return _declined(f"the question ({len(query_words)} words) is too long to align word "
                         f'by word with the nearest few-shot, "{turn[0].text}" '
                         f"({len(asked_words)} words): the replay aligns {MAX_ALIGNED:,} pairs "
                         "of words at most")

    real = [s for s in transcript[q_index + 1 :] if s.kind in SAYS]
    real_replies = [s.text for s in real]
    example_replies = [(i, s.text) for i, s in enumerate(turn) if s.kind in SAYS]
    # Actual results first: they win over the query's words when both would apply.
    subs = {ex: real for (_, ex), real in zip(example_replies, real_replies, strict=False) if ex}
    for key, value in word_substitutions(turn[0].text, query).items():
        subs.setdefault(key, value)
    for (_, ex), reply in zip(example_replies, real_replies, strict=False):
        for key, value in word_substitutions(ex, reply).items():
            subs.setdefault(key, value)

    # The example's question is its first line: notes after it ("Self Ask: ...", "Answer:
    # shop-prod") are its own reasoning, which a replay may pass on.
    asked = turn[0].text.splitlines()[0]
    done = len(real_replies)
    start = example_replies[done - 1][0] + 1 if 0 < done <= len(example_replies) else 1
    if done > len(example_replies):
        start = len(turn) - 1  # the transcript went beyond the example: answer now
    lines = []
    for previous, step in zip(turn[start - 1 : -1], turn[start:], strict=True):
        if step.kind in SAYS and previous.kind not in ASKS:
            lines.append(f"{step.label}")  # a reply with no Ask: the engine calls it
            break
        replayed = Step(step.kind, substitute(step.text, subs), step.target)
        if step.kind in ASKS and (kept := _example_words(replayed.text, asked, query, real)):
            # A count word of the example's missing ("two" for "a pair of"): one the
            # replay could not place.
            return _declined(f'the nearest few-shot, "{asked}", would ask "{replayed.text}": '
                             f'{", ".join(sorted(kept))} not in the question',
                             NO_PLACE if kept <= _COUNT_WORDS.keys() else CANT_HELP)
        if step.kind in ASKS and (moved := _moved_numbers(turn, query)):
            said = ", ".join(f'"{word}"' for word in moved)
            return _declined(f'the nearest few-shot, "{asked}", would ask "{replayed.text}": '
                             f"the question's number for {said} is not where the example's "
                             "was", NO_PLACE)
        if step.kind in ASKS and (lost := _lost_counts(turn, query, subs)):
            said = ", ".join(f'"{words}"' for words in lost)
            return _declined(f'the nearest few-shot, "{asked}", would ask "{replayed.text}": '
                             f"it has no place for {said}", NO_PLACE)
        if step.kind is Kind.A and real and not _carried(replayed.text, turn, query, real):
            lines.append(_as_returned(real))
            break
        lines.append(replayed.render())
        if step.kind is not Kind.THOUGHT:
            break
    return "\n".join(lines)


def _given(text: str) -> str:
    """The planner's hand-off ("save it (given: You rolled 15.)") as the text it gives
    ("save it: You rolled 15."): from its first "(given: " to the closing parenthesis that
    ends the text. Found, not matched: a regex rescans a long run of spaces per space."""
    start, body = text.find(_GIVEN), text.rstrip()
    if start < 0 or not body.endswith(")"):
        return text
    return f"{text[:start].rstrip()}: {body[start + len(_GIVEN):-1]}"


def _example_words(ask: str, asked: str, query: str, real: Sequence[Step]) -> set[str]:
    """The words of the example's question ``asked`` that a replayed Ask still holds and neither the
    query nor a real result does: "save a note" replaying "Save a note: buy milk" would
    save "buy milk", "a 20% tip" replaying "a 15% tip on $80" work out 20% of 80."""
    known = content_words(query).union(*(content_words(r.text) for r in real))
    return content_words(ask) & content_words(asked) - known


def _lost_counts(turn: Sequence[Step], query: str, subs: dict[str, str]) -> list[str]:
    """The query's words for each count it says where the example said another (and for
    each count it left out) that no Ask line of the example has a place for: its "2d6"
    for "two six-sided dice" would roll two dice for "a six-sided die". Only an Ask is a
    place: a count the answer alone carries ("Done: two tables") was never asked for; nor
    one a longer substitution took first ("a d20" -> "2 d20" before "d20" -> "d20 3x")."""
    written = [s.text for s in turn[1:] if s.kind in _PLACES]
    asked = {word.lower() for text in written for word in _WORD.findall(text)}
    return [run.words for run in _runs(turn[0].text, query) if run.counts_for(asked) and not any(
        _holds(text, old) and _holds(substitute(text, subs), new)
        for old, new in run.pairs for text in written)]


def _moved_numbers(turn: Sequence[Step], query: str) -> list[str]:
    """The example's numbers an Ask line holds that the alignment replaced by a number of
    the query's standing elsewhere ("5" of "5 miles" by the "2" of "in 2 minutes", where
    the query says "10 miles"): the replay would pass the wrong one."""
    written = [s.text for s in turn[1:] if s.kind in _PLACES]
    return [old for run in _runs(turn[0].text, query) for old in run.misplaced
            if any(_holds(text, old) for text in written)]


def _holds(text: str, phrase: str) -> bool:
    """Whether ``text`` holds ``phrase`` as whole words (as ``substitute`` replaces)."""
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def _declined(why: str, answer: str = CANT_HELP) -> str:
    """An answer that declines (DECLINES), after a Thought saying why: the trace shows it,
    the answer stays plain."""
    return f"{Step(Kind.THOUGHT, NO_REPLAY + why).render()}\nA: {answer}"


class FewShotLLM:
    """Replays the nearest few-shot; deterministic, offline, and not an LLM."""

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
        """Tokens are counted as whitespace-separated words; ``stop`` is moot, as replies end
        at an Ask line by construction."""
        text = next_lines(read_examples(messages), read_transcript(messages))
        words = re.findall(r"\S+\s*", text)[:max_tokens]
        prompt_tokens = sum(len(m.content.split()) for m in messages)
        return Completion("".join(words).rstrip(), prompt_tokens, len(words))
