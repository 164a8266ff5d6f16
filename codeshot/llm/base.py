"""The one interface every LLM provider implements.

The engine speaks only this: chat messages, stop sequences and a token limit in; text and
token counts out. Providers turn their own failures into ``LLMError``, and end a call
at the query's deadline (:func:`calls_ending_by`) with TIMEOUT.

Servers take only a few stop sequences (OpenAI-compatible ones and Bedrock: four), so a
provider sends the first ``SERVER_STOPS`` and cuts the text at every stop itself
(:func:`cut_at_stops`); the engine lists the stops that matter most first. A line the
model already wrote in the same reply also ends it: small models loop ("Thought: I need
the time." over and over up to the token cap), and a streaming provider stops there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

from codeshot.errors import Timeout

Role = Literal["system", "user", "assistant"]
SERVER_STOPS = 4

# When the LLM calls made now must be over (time.monotonic()): a query's deadline. In a
# context variable, so it reaches every call of a run (nested agents, platform Funcs in
# their threads, a provider wrapped in budgets and settings) without each passing it on.
_CALLS_END: ContextVar[float | None] = ContextVar("codeshot_llm_calls_end", default=None)


@contextmanager
def calls_ending_by(deadline: float | None) -> Iterator[None]:
    """LLM calls made in the block (and in threads started with a copy of its context)
    end by ``deadline`` (``time.monotonic()``; None: no end): the provider stops a call
    there, a streamed reply included, and raises :func:`out_of_time`."""
    token = _CALLS_END.set(deadline)
    try:
        yield
    finally:
        _CALLS_END.reset(token)


def call_ends() -> float | None:
    """When an LLM call made now must end (:func:`calls_ending_by`), or None."""
    return _CALLS_END.get()


def out_of_time() -> Timeout:
    """What a provider raises when the call's deadline came first."""
    return Timeout("the query's time ran out while the language model was answering")


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class LlmSettings:
    """One agent's model settings (Fixie 1.0's ``LlmSettings``); None keeps the platform's.

    Providers apply what they can: ``temperature`` and ``maximum_tokens`` always, ``model``
    where it names one of theirs.
    """

    model: str | None = None
    temperature: float | None = None
    maximum_tokens: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> LlmSettings | None:
        """The settings of a registry record (``{model, temperature, maximum_tokens}``)."""
        if not data:
            return None
        settings = cls(
            model=str(data["model"]) if data.get("model") else None,
            temperature=float(data["temperature"]) if data.get("temperature") is not None
            else None,
            maximum_tokens=int(data["maximum_tokens"]) if data.get("maximum_tokens") else None,
        )
        return settings if settings != cls() else None

    def max_tokens(self, engine_limit: int) -> int:
        """The engine's token limit for a call, lowered to the agent's own."""
        if self.maximum_tokens is None:
            return engine_limit
        return max(1, min(engine_limit, self.maximum_tokens))

    def merged(self, other: LlmSettings | None) -> LlmSettings:
        """These settings with ``other``'s set fields on top."""
        if other is None:
            return self
        return replace(self, **{k: v for k, v in vars(other).items() if v is not None})


@runtime_checkable
class LLM(Protocol):
    def complete(
        self, messages: list[ChatMessage], stop: list[str], max_tokens: int
    ) -> Completion: ...


@runtime_checkable
class ConfigurableLLM(LLM, Protocol):
    def with_settings(self, settings: LlmSettings) -> LLM:
        """This provider with one agent's settings applied."""
        ...


# A token or more a character in the usual BPE vocabularies: Indic scripts and Thai, Han,
# kana and hangul, fullwidth forms, and the symbols and dingbats most emoji of the basic
# plane are.
_WIDE = re.compile("[\u0900-\u0e7f\u1100-\u11ff\u2600-\u27bf\u3000-\u9fff"
                   "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")  # emoji, rarer Han: 2-4 tokens each


def estimated_prompt_tokens(messages: list[ChatMessage]) -> int:
    """A prompt's tokens where no count is given: about 4 characters a token for ASCII, 2
    for other alphabets (Cyrillic, Greek, accented Latin), one a character of CJK, Indic
    or Thai text and two of emoji (4 a token let such prompts pass a budget at a quarter
    of their cost or less)."""
    text = "".join(m.content for m in messages)
    ascii_chars = len(text.encode("ascii", "ignore"))
    wide, astral = len(_WIDE.findall(text)), len(_ASTRAL.findall(text))
    return ascii_chars // 4 + (len(text) - ascii_chars - wide - astral) // 2 + wide + 2 * astral


def configured(llm: LLM, settings: LlmSettings | None) -> LLM:
    """``llm`` with an agent's settings, when it has any and the provider takes them."""
    if settings is None or not isinstance(llm, ConfigurableLLM):
        return llm
    return llm.with_settings(settings)


def cut_at_stops(text: str, stops: list[str]) -> str:
    """``text`` up to the first stop sequence, as a server would have cut it, and before
    the first complete line that repeats an earlier one.

    Leading whitespace is skipped first: a reply that starts with a blank line is not empty.
    """
    start = len(text) - len(text.lstrip())
    cut = min((i for i in (text.find(s, start) for s in stops if s) if i >= 0), default=-1)
    return _cut_at_repeated_line(text if cut < 0 else text[:cut])


def _cut_at_repeated_line(text: str) -> str:
    """Lines with no letter or digit (a code fence, a rule, a blank) may repeat."""
    seen: set[str] = set()
    offset = 0
    for line in text.split("\n")[:-1]:  # complete lines only: the last may still grow
        key = line.strip()
        if any(c.isalnum() for c in key):
            if key in seen:
                return text[:offset].rstrip("\n")
            seen.add(key)
        offset += len(line) + 1
    return text
