"""A session's embeds are listed in each prompt a bounded number at a time: the query's
own first, then the most recent (a session of thousands put thousands of lines into every
LLM call)."""

from __future__ import annotations

import base64

from codeshot.engine.prompt import EMBEDS_HEADER
from codeshot.llm.base import ChatMessage, Completion
from codeshot.llm.fewshot import FewShotLLM
from codeshot.local.poller import QueuePoller
from codeshot.runner.session_runner import PROMPT_EMBEDS, SessionRunner
from tests.runner.conftest import register, session

SEND = """mutation ($s: String!, $t: String!, $e: [EmbedInput!]) {
  sendSessionMessage(messageData: {session: $s, text: $t, embeds: $e}) {
    reply { text type } } }"""


class Prompts(FewShotLLM):
    """The offline provider, recording each call's embeds block."""

    def __init__(self) -> None:
        self.blocks: list[list[str]] = []

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        self.blocks += [m.content.splitlines()[1:] for m in messages
                        if m.content.startswith(EMBEDS_HEADER)]
        return super().complete(messages, stop, max_tokens)


def test_the_prompt_lists_the_querys_and_the_latest_embeds_and_counts_the_rest(
        platform, agents):
    llm = Prompts()
    poller = QueuePoller(platform.services.queue, SessionRunner(platform.services, llm).handle)
    poller.start()
    try:
        _, key = platform.user("ida")
        h = session(platform, key, frontend=register(platform, key, "dice",
                                                     agents.url + "/dice"))
        content = base64.b64encode(b"a note").decode()

        def post(keys: list[str]) -> None:
            out = platform.gql(key, SEND, {"s": h, "t": "Roll 1d20", "e": [
                {"key": k, "contentType": "text/plain", "content": content} for k in keys]},
                timeout=60)
            assert out["data"]["sendSessionMessage"]["reply"]["type"] == "response", out

        for start in (0, 20, 40):  # 60 embeds, 20 a message
            post([f"e{i:02d}" for i in range(start, start + 20)])
        llm.blocks.clear()
        post(["mine"])
    finally:
        poller.stop()
    older = 61 - PROMPT_EMBEDS
    assert llm.blocks and all(block == [
        "- #mine: text/plain",
        *(f"- #e{i:02d}: text/plain" for i in range(59, older - 1, -1)),
        f"- and {older} older ones, not listed"] for block in llm.blocks)
