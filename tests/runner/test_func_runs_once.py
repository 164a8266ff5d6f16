"""A Func that ran is not called again when what follows the call fails (its reply cannot
be read or its embed cannot be stored), and the user reads no platform internals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from fastapi import FastAPI, Request
from fastapi.responses import Response

from codeshot.local.http_server import HttpServer
from tests.runner.conftest import DICE, register, send, session

ARN = "arn:aws:sts::123456789012:assumed-role/Codeshot-RunnerRole-X1/Codeshot-Runner"


class Func:
    """An agent whose Func counts its calls (each one "sends the email") and answers
    ``reply``."""

    def __init__(self, reply: Response | dict[str, Any]) -> None:
        self.calls = 0
        app = FastAPI()

        @app.get("/x/")
        def handshake() -> dict[str, Any]:
            return DICE

        @app.post("/x/roll")
        async def roll(request: Request) -> Any:
            await request.body()
            self.calls += 1
            return reply

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = self.server.start() + "/x"


@pytest.fixture
def func_server(request: pytest.FixtureRequest) -> Iterator[Func]:
    func = Func(request.param)
    yield func
    func.server.stop()


@pytest.mark.parametrize("func_server", [Response(b"[" * 100_000, media_type="application/json")],
                         indirect=True)
def test_a_reply_nested_too_deep_to_read_is_the_agents_failure_once(live, func_server):
    _, key = live.user("nora")
    h = session(live, key, frontend=register(live, key, "deep", func_server.url))
    reply = send(live, key, h, "Roll 1d20")["reply"]
    assert func_server.calls == 1
    assert reply["type"] == "error"
    assert reply["text"].endswith("sent JSON nested too deeply).")
    assert "RecursionError" not in reply["text"]
    errors = [m for m in live.services.sessions.all_messages(h) if m.error_code]
    assert {m.error_code for m in errors} == {"AGENT_ERROR"}


@pytest.mark.parametrize("func_server", [{"message": {"text": "7", "embeds": {"chart": {
    "content_type": "text/plain", "uri": "data:text/plain;base64,aGk="}}}}], indirect=True)
def test_s3_refusing_a_funcs_embed_fails_the_call_once_without_internals(
        live, func_server, monkeypatch, caplog):
    def denied(*args: Any, **kwargs: Any) -> str:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": f"User: {ARN} is not "
                                     "authorized to perform: s3:PutObject"}}, "PutObject")

    monkeypatch.setattr(live.services.embeds, "put", denied)
    _, key = live.user("olga")
    h = session(live, key, frontend=register(live, key, "emb", func_server.url))
    reply = send(live, key, h, "Roll 1d20")["reply"]
    assert func_server.calls == 1
    assert reply["type"] == "error"
    assert reply["text"] == ("Sorry, I could not finish: Func[roll] failed (embed #chart "
                             "cannot be stored: internal error).")
    stored = " ".join(m.text for m in live.services.sessions.all_messages(h))
    assert "arn:" not in stored and "ClientError" not in stored
    assert ARN in caplog.text  # the operator still finds out why


def queued(platform: Any, func_server: Func, user: str) -> tuple[str, Any, Any]:
    """``user``'s "Roll 1d20" to ``func_server``'s agent, queued and taken off the queue
    (the session, the work to hand the runner) and an LLM that asks the Func twice."""
    from codeshot.store.queue import Work
    from tests.engine.conftest import ScriptedLLM

    _, key = platform.user(user)
    h = session(platform, key, frontend=register(platform, key, "rerun", func_server.url))
    platform.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData: {session:
        $s, text: "Roll 1d20", wait: false}) { message { id } } }""", {"s": h})
    [record] = platform.services.queue.receive()
    return h, Work.parse(record["Body"]), ScriptedLLM(
        *["Ask Func[roll]: 1d20", "A: You rolled 4."] * 2)


@pytest.mark.parametrize("func_server", [{"message": {"text": "4"}}], indirect=True)
def test_an_interrupted_answer_that_fails_to_be_written_does_not_free_a_rerun(
        platform, func_server, monkeypatch):
    """A crashed run's redelivery gave its slot back before writing INTERRUPTED: when
    that write failed, the next delivery took the slot afresh and called the Func again."""
    from codeshot.runner.session_runner import SessionRunner

    h, work, llm = queued(platform, func_server, "rita")

    def killed(*_: Any, **__: Any) -> None:
        raise RuntimeError("the Lambda was killed")

    with monkeypatch.context() as patch:
        patch.setattr(SessionRunner, "_finish", killed)
        with pytest.raises(RuntimeError):
            SessionRunner(platform.services, llm).handle(work)
    assert func_server.calls == 1
    db, write = platform.services.sessions.db, platform.services.sessions.db.transact_write_items

    def fails_once(**request: Any) -> Any:
        monkeypatch.setattr(db, "transact_write_items", write)
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "x"}},
                          "TransactWriteItems")

    monkeypatch.setattr(db, "transact_write_items", fails_once)
    with pytest.raises(ClientError):
        SessionRunner(platform.services, llm).handle(work)
    SessionRunner(platform.services, llm).handle(work)
    assert func_server.calls == 1
    reply = platform.services.sessions.all_messages(h)[-1]
    assert (reply.type.value, reply.error_code) == ("error", "INTERRUPTED"), reply


@pytest.mark.parametrize("func_server", [{"message": {"text": "y" * 99_000}}], indirect=True)
def test_a_question_after_more_than_a_pause_can_keep_is_the_agents_error(platform,
                                                                         func_server):
    """A paused run is one DynamoDB item: past 400 KB (a few pages fetched, then a
    question), the reply's write failed and the query ended INTERRUPTED after the queue's
    redelivery, its session held meanwhile."""
    from tests.engine.conftest import ScriptedLLM
    from tests.runner.conftest import running

    llm = ScriptedLLM(*["Ask Func[roll]: 1d20"] * 5, "Ask User: Again?")
    with running(platform, llm):
        _, key = platform.user("petra")
        h = session(platform, key, frontend=register(platform, key, "big", func_server.url))
        reply = send(platform, key, h, "Roll 1d20")["reply"]
    assert func_server.calls == 5
    assert reply["type"] == "error" and "more steps than a paused run can keep" in \
        reply["text"], reply
    errors = [m.error_code for m in platform.services.sessions.all_messages(h) if m.error_code]
    assert errors == ["AGENT_ERROR"]
    assert platform.services.sessions.get(h).status.value == "idle"


@pytest.mark.parametrize("func_server", [{"message": {"text": "4"}}], indirect=True)
def test_a_trace_the_store_keeps_refusing_does_not_free_a_rerun(platform, func_server,
                                                                 monkeypatch):
    """A long trace goes ahead of the reply; DynamoDB refusing it through every try was
    UNAVAILABLE, a refusal, which gave the slot back: the redelivery ran the Func again,
    and the stored answer said to send again what had already run."""
    from codeshot.runner import session_runner
    from codeshot.runner.session_runner import SessionRunner
    from tests.dynamo_faults import refuse

    h, work, llm = queued(platform, func_server, "tess")
    monkeypatch.setattr(session_runner, "TRANSACTION_ITEMS", 0)  # the trace goes first
    db, write = platform.services.sessions.db, platform.services.sessions.db.transact_write_items
    with monkeypatch.context() as patch:
        refuse(patch, db, "transact_write_items", "Ask Func[roll]", times=None)
        with pytest.raises(RuntimeError, match="the reply was not stored"):
            SessionRunner(platform.services, llm).handle(work)
    SessionRunner(platform.services, llm).handle(work)
    assert func_server.calls == 1
    reply = platform.services.sessions.all_messages(h)[-1]
    assert (reply.type.value, reply.error_code) == ("error", "INTERRUPTED"), reply
    assert db.transact_write_items == write
