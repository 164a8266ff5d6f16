"""An OpenAI-compatible server on 127.0.0.1 whose answers the test scripts: the ``openai``
provider talks to it over a real socket, as it talks to llama.cpp, vLLM or OpenAI."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (path, JSON body) -> (HTTP status, payload: an object sent as JSON, or streamed as
# events when the request asks for a stream; raw bytes; or a list of raw stream events)
Responder = Callable[[str, dict[str, Any]], tuple[int, object]]


def completion_payload(path: str, text: str | None, prompt_tokens: int = 31,
                       completion_tokens: int = 6) -> dict[str, Any]:
    """A successful reply of ``/chat/completions`` or ``/completions`` holding ``text``."""
    choice: dict[str, Any] = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        if path.endswith("/chat/completions")
        else {"index": 0, "text": text, "finish_reason": "stop"}
    )
    return {
        "id": "cmpl-1",
        "object": "chat.completion" if "chat" in path else "text_completion",
        "model": "scripted",
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def event_stream(path: str, payload: dict[str, Any], piece: int = 3) -> list[bytes]:
    """A reply as a streaming server sends it: its text a few characters per event, then
    an event with the usage and no choices (``stream_options.include_usage``), then
    ``[DONE]``."""
    choice = payload["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    events = []
    for start in range(0, len(text or ""), piece):
        part = text[start:start + piece]
        events.append({"choices": [{"index": 0, "delta": {"content": part}} if "chat" in path
                                   else {"index": 0, "text": part}]})
    events.append({"choices": [], "usage": payload["usage"]})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


class OpenAICompatibleServer:
    """Records every request (path, headers, JSON body) and answers with ``respond``;
    ``delay`` seconds before each answer, ``event_delay`` between a stream's events (how
    many went out before the client left: ``events_sent``)."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.delay = 0.0
        self.streams = True  # False: a server that ignores "stream" (sends JSON)
        self.event_delay = 0.0
        self.events_sent: list[int] = []  # per streamed reply
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw)
                server.requests.append((self.path, dict(self.headers), body))
                time.sleep(server.delay)
                status, payload = server.respond(self.path, body)
                if isinstance(payload, list):  # events as they are
                    self.stream(payload)
                    return
                if body.get("stream") and server.streams and status == 200 \
                        and isinstance(payload, dict):
                    self.stream(event_stream(self.path, payload))
                    return
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a timeout test)

            def stream(self, events: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                server.events_sent.append(0)
                try:
                    for event in events:
                        self.wfile.write(event)
                        self.wfile.flush()
                        server.events_sent[-1] += 1
                        time.sleep(server.event_delay)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (a stop or a repeated line)
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, _, body in self.requests]


@contextmanager
def serving(respond: Responder) -> Iterator[OpenAICompatibleServer]:
    server = OpenAICompatibleServer(respond)
    thread = threading.Thread(target=server.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def scripted_texts(texts: list[str], tokens: tuple[int, int] = (31, 6)) -> Responder:
    """Answers with ``texts`` in order (each request takes the next), on either endpoint."""
    queue = list(texts)

    def respond(path: str, body: dict[str, Any]) -> tuple[int, object]:
        if not queue:
            return 500, {"error": {"message": "the script has no more replies"}}
        return 200, completion_payload(path, queue.pop(0), *tokens)

    return respond
