"""The runner's HTTP client for agents, against a real agent on loopback: nothing one call
learns (cookies) reaches the next, and a reply of the wrong shape is the agent's error."""

import socket
import threading

import pytest
from fastapi import FastAPI, Request, Response

from codeshot.errors import AgentCallDropped, AgentFailed, InvalidInput
from codeshot.local.http_server import HttpServer
from codeshot.runner.agent_client import AgentClient


@pytest.fixture(scope="module")
def agent():
    app, seen = FastAPI(), []

    @app.post("/remember")
    async def remember(request: Request, response: Response) -> dict:
        seen.append(request.headers.get("cookie"))
        response.set_cookie("session", "secret-of-" + request.headers["authorization"][-5:])
        return {"message": {"text": "noted"}}

    @app.post("/roll")
    async def roll() -> Response:  # what an SDK Func raising InvalidInput answers
        return Response('{"error": {"code": "INVALID_INPUT", "message": "give two whole '
                        'numbers, such as 1 6"}}', status_code=400,
                        media_type="application/json")

    @app.post("/ask")
    async def ask() -> dict:
        return {"message": {"text": ""}, "needs_input": True, "question": {"not": "text"}}

    server = HttpServer(app)
    server.start()
    yield server.url, seen
    server.stop()


def client(user: str) -> AgentClient:
    return AgentClient(lambda _agent_id: f"token-{user}", timeout=5, allow_loopback=True)


def test_no_cookie_set_by_an_agent_is_ever_sent_back(agent):
    url, seen = agent
    alice = client("alice")
    assert alice.call_func("me/notes", url, "remember", "hi").text == "noted"
    alice.call_func("me/notes", url, "remember", "again")
    client("bob").call_func("me/notes", url, "remember", "hi")
    assert seen == [None, None, None]


def test_a_question_that_is_not_text_is_the_agents_error(agent):
    url, _ = agent
    with pytest.raises(AgentFailed, match="question that is not text"):
        client("alice").call_func("me/notes", url, "ask", "book it")


def test_a_func_refusing_its_input_is_input_to_correct_not_the_agents_failure(agent):
    # The engine gives INVALID_INPUT back to the model once (it may ask again) and never
    # retries it; AGENT_ERROR would end the query.
    url, _ = agent
    with pytest.raises(InvalidInput, match=r"^give two whole numbers, such as 1 6$"):
        client("alice").call_func("me/dice", url, "roll", "1, many")


def test_a_call_dropped_after_it_was_sent_is_not_sent_again():
    """The agent read the call and closed the connection without answering: it may have
    run it, so the client does not call again (a Func's side effects would repeat)."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def drop_each_call() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                received.append(conn.recv(65536))

    threading.Thread(target=drop_each_call, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(AgentCallDropped, match="dropped the call before answering") as err:
            client("alice").call_func("me/pay", url, "pay", "Alice 7")
    finally:
        listener.close()
    assert err.value.code == "AGENT_UNAVAILABLE" and err.value.permanent
    assert len(received) == 1 and received[0].startswith(b"POST /pay ")
