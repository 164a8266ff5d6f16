"""A session's embeds are listed in each prompt a bounded number at a time: the query's
own first, then the most recent (a session of thousands put thousands of lines into every
LLM call)."""

from __future__ import annotations

import base64
from datetime import timedelta

from codeshot.engine.prompt import EMBEDS_HEADER
from codeshot.llm.base import ChatMessage, Completion
from codeshot.llm.fewshot import FewShotLLM
from codeshot.models import Embed, utcnow
from codeshot.runner.session_runner import HISTORY_MESSAGES, PROMPT_EMBEDS
from codeshot.store.dynamo import batch_write
from tests.dynamo_reads import PartitionReads
from tests.runner.conftest import register, run_queue, running, session

SEND = """mutation ($s: String!, $t: String!, $e: [EmbedInput!]) {
  sendSessionMessage(messageData: {session: $s, text: $t, embeds: $e}) {
    reply { text type } } }"""

POST = """mutation ($s: String!, $t: String!, $e: [EmbedInput!]) {
  sendSessionMessage(messageData: {session: $s, text: $t, embeds: $e, wait: false}) {
    message { id } } }"""


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


def test_a_query_reads_the_embeds_it_lists_not_all_of_the_sessions(platform, agents):
    """Each query read every embed its session had bound, to list 50 of them (20,000
    one-byte Agent Protocol uploads: 20,000 items read by every query, 16.9 s on moto)."""
    _, key = platform.user("una")
    h = session(platform, key, frontend=register(platform, key, "dice", agents.url + "/dice"))
    sessions = platform.services.sessions
    owner = sessions.get(h).owner
    digest = platform.services.embeds.put(b"a note", "text/plain")
    first = utcnow() - timedelta(hours=1)
    bound = [Embed(key=f"n{n:04d}", session_id=h, owner=owner, content_type="text/plain",
                   content_hash=digest, size=6, created=first + timedelta(seconds=n))
             for n in range(2000)]  # uploaded one by one, as artifacts are
    batch_write(sessions.db, sessions.table_name,
                [{"PutRequest": {"Item": sessions.embed_item(e)}} for e in bound])
    sessions.db.update_item(**sessions.owner_update(h, owner, len(bound)))
    content = base64.b64encode(b"mine").decode()
    out = platform.gql(key, POST, {"s": h, "t": "Roll 1d20", "e": [
        {"key": "mine", "contentType": "text/plain", "content": content}]})
    assert "errors" not in out, out
    llm = Prompts()
    with PartitionReads(sessions.db, h) as reads:
        assert run_queue(platform.services, llm) == 1
    # The session and the query (in one read); the newest embeds and the SESSION item.
    assert reads.items() <= 2 + PROMPT_EMBEDS + 1, reads.calls
    [block, *_] = llm.blocks
    assert block[0] == "- #mine: text/plain"
    assert block[1:-1] == [f"- #n{n:04d}: text/plain" for n in range(1999, 1950, -1)]
    assert block[-1] == f"- and {2001 - PROMPT_EMBEDS} older ones, not listed"
