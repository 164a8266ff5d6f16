"""CODESHOT_LLM_MAX_TOKENS_PER_CALL caps what each LLM call of a query's run may generate
(a small model repeating itself used to run to the server's 1,024-token cap)."""

from __future__ import annotations

import pytest

from codeshot.llm.base import ChatMessage, Completion
from codeshot.llm.fewshot import FewShotLLM
from tests.runner.conftest import register, running, send, session


class AskedLimits(FewShotLLM):
    """The offline provider, recording each call's token limit."""

    def __init__(self) -> None:
        self.limits: list[int] = []

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        self.limits.append(max_tokens)
        return super().complete(messages, stop, max_tokens)


@pytest.mark.settings(llm_max_tokens_per_call=48)
def test_every_call_of_a_query_is_capped(platform, agents):
    llm = AskedLimits()
    with running(platform, llm):
        _, key = platform.user("hal")
        h = session(platform, key, frontend=register(platform, key, "dice",
                                                     agents.url + "/dice"))
        assert send(platform, key, h, "Roll 1d20")["reply"]["type"] == "response"
    assert llm.limits == [48, 48]  # the Ask, then the answer
