"""The ``fewshot`` provider: offline and deterministic. It is NOT a language model.

It reads the few-shot examples and the transcript back out of the prompt the engine
built, takes the example whose question is closest to the query by word overlap, and
replays it: the query's differing words replace the example's in the Ask lines, the
real Func results replace the example's in the answer, one Ask per call. When no
example is close it answers plainly that it can't help. Use it for local runs and tests
of agents whose queries look like their few-shots; use ``bedrock`` or ``openai`` for
anything else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher

from codeshot.engine.fewshot import SAYS, FewShot, Kind, Step
from codeshot.engine.prompt import read_examples, read_transcript
from codeshot.llm.base import ChatMessage, Completion

CANT_HELP = "I can't help with that."
# An agent with no few-shots is a plain LLM agent: nothing here can stand in for the model.
NEEDS_LLM = ("This agent needs a language model to answer, and the offline fewshot provider "
             "is not one: set CODESHOT_LLM to bedrock or openai.")
THRESHOLD = 0.4  # below this Dice overlap of content words, an example does not apply

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


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` that carry meaning (no stopwords)."""
    return {w for w in (t.lower() for t in _WORD.findall(text)) if w not in _STOPWORDS}


def similarity(a: str, b: str) -> float:
    """Dice coefficient of the two texts' content words (0 when either has none)."""
    left, right = content_words(a), content_words(b)
    if not left or not right:
        return 0.0
    return 2 * len(left & right) / (len(left) + len(right))


def word_substitutions(example: str, actual: str) -> dict[str, str]:
    """Which of the example's words became which of the actual text's, by alignment.

    Replaced runs, trimmed of function words, map word to word when of equal length and
    phrase to phrase otherwise; "for" -> "of" is never a substitution.
    """
    left, right = _WORD.findall(example), _WORD.findall(actual)
    matcher = SequenceMatcher(
        None, [w.lower() for w in left], [w.lower() for w in right], autojunk=False
    )
    pairs: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "replace":
            continue
        old, new = _trim(left[i1:i2]), _trim(right[j1:j2])
        if len(old) == len(new):
            pairs.extend(zip(old, new))
        elif old and new:
            pairs.append((" ".join(old), " ".join(new)))
    return {
        old: new
        for old, new in pairs
        if old.lower() not in _STOPWORDS and new.lower() not in _STOPWORDS
    }


def _trim(words: list[str]) -> list[str]:
    """A run of words without the function words at its ends ("for AAPL" -> "AAPL")."""
    start, end = 0, len(words)
    while start < end and words[start].lower() in _STOPWORDS:
        start += 1
    while end > start and words[end - 1].lower() in _STOPWORDS:
        end -= 1
    return words[start:end]


def substitute(text: str, subs: dict[str, str]) -> str:
    """``text`` with each whole-word key replaced, in one pass (longest key first)."""
    keys = sorted((k for k in subs if k), key=len, reverse=True)
    if not keys:
        return text
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, keys)) + r")(?!\w)")
    return pattern.sub(lambda m: subs[m.group(0)], text)


def next_lines(examples: Sequence[FewShot], transcript: Sequence[Step]) -> str:
    """The lines the nearest example says come next: up to its next Ask, or its answer."""
    q_index = max((i for i, s in enumerate(transcript) if s.kind is Kind.Q), default=None)
    turns = [turn for shot in examples for turn in shot.turns()]
    if not turns:
        return f"A: {NEEDS_LLM}"
    if q_index is None:
        return f"A: {CANT_HELP}"
    query = transcript[q_index].text
    turn = max(turns, key=lambda t: similarity(t[0].text, query))
    if similarity(turn[0].text, query) < THRESHOLD:
        return f"A: {CANT_HELP}"

    real_replies = [s.text for s in transcript[q_index + 1 :] if s.kind in SAYS]
    example_replies = [(i, s.text) for i, s in enumerate(turn) if s.kind in SAYS]
    # Actual results first: they win over the query's words when both would apply.
    subs = {ex: real for (_, ex), real in zip(example_replies, real_replies) if ex}
    for key, value in word_substitutions(turn[0].text, query).items():
        subs.setdefault(key, value)
    for (_, ex), real in zip(example_replies, real_replies):
        for key, value in word_substitutions(ex, real).items():
            subs.setdefault(key, value)

    done = len(real_replies)
    start = example_replies[done - 1][0] + 1 if 0 < done <= len(example_replies) else 1
    if done > len(example_replies):
        start = len(turn) - 1  # the transcript went beyond the example: answer now
    lines = []
    for step in turn[start:]:
        lines.append(Step(step.kind, substitute(step.text, subs), step.target).render())
        if step.kind is not Kind.THOUGHT:
            break
    return "\n".join(lines)


class FewShotLLM:
    """Replays the nearest few-shot; deterministic, offline, and not an LLM."""

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
        """Tokens are counted as whitespace-separated words; ``stop`` is moot, as replies end
        at an Ask line by construction."""
        text = next_lines(read_examples(messages), read_transcript(messages))
        words = re.findall(r"\S+\s*", text)[:max_tokens]
        prompt_tokens = sum(len(m.content.split()) for m in messages)
        return Completion("".join(words).rstrip(), prompt_tokens, len(words))
