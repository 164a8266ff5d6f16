"""The openai provider against a small chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time

import pytest

from codeshot.errors import LLMError
from codeshot.llm.base import ChatMessage
from codeshot.llm.openai import OpenAILLM
from tests.conftest import ChatServer, completion_body

STOP = ["\nFunc[", "\nAgent[", "\nUser says:", "\nQ:"]
MESSAGES = [ChatMessage("system", "I quote stocks."), ChatMessage("user", "Q: GOOG?\n")]


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    return chat_server


def test_request_carries_stop_and_max_tokens_and_usage_is_read(server: ChatServer) -> None:
    server.reply(completion_body("Ask Func[quote]: GOOG", 31, 6))
    completion = OpenAILLM("llama3.1", server.url + "/", api_key="sk-test").complete(
        MESSAGES, STOP, 321
    )
    assert (completion.text, completion.input_tokens, completion.output_tokens) == (
        "Ask Func[quote]: GOOG",
        31,
        6,
    )
    [(path, headers, raw)] = server.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert json.loads(raw) == {
        "model": "llama3.1",
        "messages": [
            {"role": "system", "content": "I quote stocks."},
            {"role": "user", "content": "Q: GOOG?\n"},
        ],
        "stop": STOP,
        "max_tokens": 321,
        "temperature": 0,
    }


def test_no_api_key_sends_no_authorization(server: ChatServer) -> None:
    server.reply(completion_body("A: hi"))
    OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    assert "Authorization" not in server.requests[0][1]


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (500, {"error": {"message": "model crashed"}}, r"returned HTTP 500: .*model crashed"),
        (401, {"error": "bad key"}, "returned HTTP 401"),
        (200, b"<html>not json</html>", r"malformed response \(JSONDecodeError"),
        (200, {"choices": []}, r"malformed response \(IndexError"),
        (200, completion_body(None), r"malformed response \(TypeError"),
        (
            200,
            {"choices": [{"message": {"content": "x"}}]},
            r"malformed response \(KeyError\('usage",
        ),
    ],
)
def test_bad_replies_are_llm_errors(
    server: ChatServer, status: int, payload: object, message: str
) -> None:
    server.reply(payload, status)
    with pytest.raises(LLMError, match=message) as info:
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    assert info.value.code == "LLM_ERROR"


def test_a_slow_server_times_out(server: ChatServer) -> None:
    server.reply(completion_body("late"))
    server.delay = 1.0
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 0\.2s"):
        OpenAILLM("m", server.url, timeout=0.2).complete(MESSAGES, STOP, 10)
    assert time.monotonic() - started < 1.0


def test_connection_refused_is_an_llm_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LLMError, match="unreachable"):
        OpenAILLM("m", f"http://127.0.0.1:{port}/v1").complete(MESSAGES, STOP, 10)
