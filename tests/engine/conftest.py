"""Engine test helpers: a scripted LLM (the model's replies are the test's input) and a
trace recorder."""

from __future__ import annotations

import pytest

from codeshot.engine.executor import TraceStep
from codeshot.llm.base import ChatMessage, Completion


class ScriptedLLM:
    """Replies with the given texts in order and records every request."""

    def __init__(self, *replies: str, tokens: tuple[int, int] = (10, 5)) -> None:
        self.replies = list(replies)
        self.tokens = tokens
        self.calls: list[tuple[list[ChatMessage], list[str], int]] = []

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
        self.calls.append((messages, stop, max_tokens))
        if not self.replies:
            raise AssertionError("the LLM was asked more often than scripted")
        return Completion(self.replies.pop(0), *self.tokens)

    def transcript(self, call: int = -1) -> str:
        """The transcript message of one recorded request."""
        return self.calls[call][0][-1].content


@pytest.fixture
def trace() -> list[TraceStep]:
    return []


@pytest.fixture
def scripted() -> type[ScriptedLLM]:
    return ScriptedLLM
