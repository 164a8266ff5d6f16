"""The openai provider against a small chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codeshot.errors import LLMError
from codeshot.llm.base import ChatMessage
from codeshot.llm.openai import OpenAILLM

STOP = ["\nFunc[", "\nAgent[", "\nUser says:", "\nQ:"]
MESSAGES = [ChatMessage("system", "I quote stocks."), ChatMessage("user", "Q: GOOG?\n")]


class ChatServer:
    """Records requests; answers with ``status`` and ``body`` after ``delay`` seconds."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        self.body: bytes = b""
        self.delay = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append((self.path, dict(self.headers), self.rfile.read(length)))
                time.sleep(server.delay)
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, payload: object, status: int = 200) -> None:
        self.status = status
        self.body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    thread = threading.Thread(target=chat.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield chat
    chat.httpd.shutdown()
    chat.httpd.server_close()


def completion_body(text: str | None, prompt_tokens: int = 31, completion_tokens: int = 6) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "llama3.1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


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
