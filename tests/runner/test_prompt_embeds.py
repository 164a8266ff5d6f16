"""A session's embeds are listed in each prompt a bounded number at a time: the query's
own first, then the most recent (a session of thousands put thousands of lines into every
LLM call)."""

from __future__ import annotations

import base64

from codeshot.engine.prompt import EMBEDS_HEADER
from codeshot.llm.base import ChatMessage, Completion
from codeshot.llm.fewshot import FewShotLLM
from codeshot.runner.session_runner import HISTORY_MESSAGES, PROMPT_EMBEDS
from tests.runner.conftest import register, running, session

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
    with running(platform, llm):
        _, key = platform.user("ida")
        h = session(platform, key, frontend=register(platform, key, "dice",
                                                     agents.url + "/dice"))
        content = base64.b64encode(b"a note").decode()

        def post(keys: list[str]) -> None:
            out = platform.gql(key, SEND, {"s": h, "t": "Roll 1d20", "e": [
                {"key": k, "contentType": "text/plain", "content": content} for k in keys]
                or None}, timeout=60)
            assert out["data"]["sendSessionMessage"]["reply"]["type"] == "response", out

        for start in (0, 20, 40):  # 60 embeds, 20 a message, in an order unlike the keys'
            post([key_of(i) for i in range(start, start + 20)])
        for _ in range(HISTORY_MESSAGES // 2):  # past the messages a query reads back
            post([])
        llm.blocks.clear()
        post(["mine"])
    older = 61 - PROMPT_EMBEDS
    assert llm.blocks
    for block in llm.blocks:  # the query's own, then the newest message's, and so on
        assert block[0] == "- #mine: text/plain"
        assert block[-1] == f"- and {older} older ones, not listed"
        listed = [line.removeprefix("- #").removesuffix(": text/plain") for line in block[1:-1]]
        assert len(listed) == PROMPT_EMBEDS - 1
        assert set(listed[:20]) == {key_of(i) for i in range(40, 60)}
        assert set(listed[20:40]) == {key_of(i) for i in range(20, 40)}
        assert set(listed[40:]) < {key_of(i) for i in range(20)}


def key_of(i: int) -> str:
    return f"k{i * 37 % 60:02d}"  # 37 and 60 are coprime: 60 keys, not in time order
