"""The one interface every LLM provider implements.

The engine speaks only this: chat messages, stop sequences and a token limit in; text and
token counts out. Providers turn their own failures into ``LLMError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int


@runtime_checkable
class LLM(Protocol):
    def complete(
        self, messages: list[ChatMessage], stop: list[str], max_tokens: int
    ) -> Completion: ...
