"""Unbounded work a hostile peer could cause (the third review): an agent's reply naming
thousands of embeds, a callback URL answering gigabytes or one byte at a time, a task
listing reading whole histories. Each over real HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from codeshot import ids
from codeshot.errors import CallTimeout
from codeshot.local.http_server import HttpServer
from codeshot.models import MAX_EMBEDS_PER_MESSAGE, Message, MessageType
from codeshot.runner.handshake import fetch_handshake
from codeshot.store import sessions as sessions_store
from codeshot.usecases import tasks
from tests.raw_server import raw_server
from tests.runner.conftest import messages, register, send, session


class EmbeddingAgent:
    """A standalone agent whose answer carries whatever embeds the test sets."""

    def __init__(self) -> None:
        self.embeds: dict[str, Any] = {}
        app = FastAPI()

        @app.get("/")
        def handshake() -> dict[str, Any]:
            return {"type": "standalone", "sample_queries": ["Show the files"]}

        @app.post("/")
        def answer() -> dict[str, Any]:
            return {"message": {"text": "Here they are", "embeds": self.embeds}}

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = self.server.start()


@pytest.fixture
def embedding_agent() -> Iterator[EmbeddingAgent]:
    agent = EmbeddingAgent()
    yield agent
    agent.server.stop()


def _ask(live: Any, agent: EmbeddingAgent, user: str) -> tuple[dict[str, Any], float, str]:
    """The agent's answer to one query in a new session with it, how long it took, and
    the session."""
    _, key = live.user(user)
    h = session(live, key, frontend=register(live, key, "files", agent.url))
    began = time.monotonic()
    send(live, key, h, "Show the files")
    took = time.monotonic() - began
    return messages(live, key, h)[-1], took, h


def test_a_reply_with_too_many_embeds_is_refused_before_any_fetch(live, embedding_agent):
    with raw_server("huge", limit=10) as files:
        embedding_agent.embeds = {
            f"f{i}": {"content_type": "text/plain", "uri": f"{files.url}/{i}"}
            for i in range(MAX_EMBEDS_PER_MESSAGE + 5)}
        reply, _, _ = _ask(live, embedding_agent, "hoarder")
        assert files.requests == 0  # was one fetch (and one S3 object) per embed
    assert reply["type"] == "error" and reply["errorCode"] == "AGENT_ERROR"
    assert f"{MAX_EMBEDS_PER_MESSAGE + 5} embeds" in reply["text"]


@pytest.mark.settings(max_query_embed_bytes=1000)
def test_a_querys_embeds_are_capped_in_bytes_all_or_none(live, embedding_agent):
    def data(n: int) -> dict[str, str]:
        return {"content_type": "text/plain",
                "uri": "data:text/plain;base64," + base64.b64encode(b"y" * n).decode()}

    embedding_agent.embeds = {"a": data(600), "b": data(600)}
    reply, _, h = _ask(live, embedding_agent, "bulky")
    assert reply["type"] == "error" and reply["errorCode"] == "AGENT_ERROR"
    assert "over 1000 bytes" in reply["text"]
    assert not any(m.embeds for m in live.services.sessions.all_messages(h))  # not "a" alone


@pytest.mark.settings(query_time_budget_seconds=2)
def test_an_embed_fetch_ends_with_its_querys_time(live, embedding_agent):
    with raw_server("drip", interval=0.25) as files:
        embedding_agent.embeds = {"slow": {"content_type": "text/plain", "uri": files.url}}
        reply, took, _ = _ask(live, embedding_agent, "patient")
        # The fetch hangs up by the query's deadline (it went on at 4 bytes/s until the
        # server gave up, holding the runner: each read came well within its timeout).
        assert files.hangs_up(within=3), f"still fetching after {took:.1f}s, {files.sent} B"
    assert reply["type"] == "error" and reply["errorCode"] == "TIMEOUT"
    assert took < 5, took


def _long_task(platform: Any, key: str, filler: int) -> str:
    """A planner task whose first turn took ``filler`` steps and whose newest turn has
    more steps than a listing reads: its query is older than its newest messages."""
    task = httpx.post(f"{platform.url}/ap/v1/agent/tasks", json={},
                      headers={"Authorization": f"Bearer {key}"}).json()["task_id"]

    def msg(kind: MessageType, text: str, reply_to: str | None = None) -> Message:
        return Message(session_id=task, message_id=ids.ulid(), text=text, type=kind,
                       sent_by="platform/planner", in_reply_to=reply_to)

    first, second = msg(MessageType.QUERY, "first question"), None
    log = [first, *(msg(MessageType.THOUGHT, f"step {i}", first.message_id)
                    for i in range(filler)),
           msg(MessageType.RESPONSE, "first answer", first.message_id)]
    second = msg(MessageType.QUERY, "second question")
    log += [second, *(msg(MessageType.THOUGHT, f"late step {i}", second.message_id)
                      for i in range(tasks.LISTED_MESSAGES + 5)),
            msg(MessageType.RESPONSE, "the newest answer", second.message_id)]
    platform.services.sessions.put_messages(log)
    return task


def test_task_listings_read_a_few_messages_per_task(platform, monkeypatch):
    _, key = platform.user("historian")
    made = [_long_task(platform, key, 1500) for _ in range(2)]
    read: list[int] = []
    real = sessions_store._message
    monkeypatch.setattr(sessions_store, "_message", lambda v: read.append(1) or real(v))
    auth = {"Authorization": f"Bearer {key}"}

    listed = httpx.get(f"{platform.url}/ap/v1/agent/tasks", headers=auth, timeout=60).json()
    assert sorted(t["task_id"] for t in listed["tasks"]) == sorted(made)
    for task in listed["tasks"]:
        assert (task["input"], task["status"]) == ("first question", "completed")
    # Each listing read every message of both tasks (over 3,000).
    assert len(read) <= 2 * (tasks.LISTED_MESSAGES + 3), len(read)
    read.clear()

    rpc = httpx.post(f"{platform.url}/a2a/platform/planner", headers={**auth,
                     "A2A-Version": "1.0"}, timeout=60, json={
        "jsonrpc": "2.0", "id": 1, "method": "ListTasks",
        "params": {"historyLength": 2, "includeArtifacts": True}}).json()["result"]
    # Every task of both contexts, each walked back turn by turn: never the steps.
    assert [t["contextId"] for t in rpc["tasks"]] == [made[1], made[1], made[0], made[0]]
    assert len(read) <= 2 * (tasks.LISTED_MESSAGES + 3), len(read)
    for task, (answer, step) in zip(rpc["tasks"], [
            ("the newest answer", f"late step {tasks.LISTED_MESSAGES + 4}"),
            ("first answer", "step 1499")] * 2):
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["status"]["message"]["parts"][0]["text"] == answer
        assert [m["parts"][0]["text"] for m in task["history"]] == [step, answer]
        assert [a["parts"][0]["text"] for a in task["artifacts"]] == [answer]

    def a2a(method: str, params: dict) -> dict:
        return httpx.post(f"{platform.url}/a2a/platform/planner", timeout=60,
                          headers={**auth, "A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 2, "method": method, "params": params}).json()["result"]

    read.clear()  # A context's tasks: its user messages and answers, never its steps.
    in_context = a2a("ListTasks", {"contextId": made[0]})["tasks"]
    assert len(in_context) == 2 and len(read) == 4, len(read)
    read.clear()  # One task alone: its own messages, never the rest of the log.
    got = a2a("GetTask", {"id": in_context[0]["id"]})
    assert got["status"]["message"]["parts"][0]["text"] == "the newest answer"
    assert len(got["history"]) == tasks.LISTED_MESSAGES + 7  # its query, steps and answer
    assert len(read) <= tasks.LISTED_MESSAGES + 10, len(read)
    older = a2a("GetTask", {"id": in_context[1]["id"]})  # its newest 100, not the log's
    assert len(older["history"]) == tasks.SHOWN_MESSAGES
    assert older["history"][-1]["parts"][0]["text"] == "first answer"


def test_a_handshake_sent_a_byte_at_a_time_ends_within_its_timeout():
    with raw_server("drip", interval=0.25) as agent:
        began = time.monotonic()
        with pytest.raises(CallTimeout):
            fetch_handshake(agent.url, "token", timeout=2, allow_loopback=True)
        # Each byte came within the read timeout: registering it waited as long as it sent.
        assert time.monotonic() - began < 3 and agent.hangs_up(within=2)
