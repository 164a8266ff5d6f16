"""An ASGI app on uvicorn in a background thread (the local API, local agents, MCP servers
registered as agents, tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codeshot.errors import Unavailable
from codeshot.local.aws_server import check_port_free

# How long a request still running when its server is told to stop may take to finish.
GRACE_SECONDS = 2
STOPPED = json.dumps({"error": {"code": Unavailable.code, "message": "the server was "
                                "stopped before it answered"}}).encode()


class HttpServer:
    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *,
                 lifespan: bool = False) -> None:
        import uvicorn

        self.host = host
        check_port_free(host, port, "--port")  # `serve`'s and `local up`'s option
        self._server = uvicorn.Server(uvicorn.Config(
            AnswerWhenStopped(app, lambda: self._server.should_exit), host=host, port=port,
            log_level="warning", lifespan="on" if lifespan else "off",
            # Only a backstop: AnswerWhenStopped ends each request first.
            timeout_graceful_shutdown=GRACE_SECONDS + 3,
        ))
        self._thread = threading.Thread(target=self._server.run, name=f"http-{port}", daemon=True)

    def start(self, timeout: float = 15.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"HTTP server on {self.host} did not start")
            time.sleep(0.01)
        return self.url

    @property
    def port(self) -> int:
        port: int = self._server.servers[0].sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        stop_all([self])


def stop_all(servers: list[HttpServer]) -> None:
    """Stop servers side by side: each takes a few tenths of a second to wind down."""
    for server in servers:
        server._server.should_exit = True
    for server in servers:
        server._thread.join(timeout=10)


class AnswerWhenStopped:
    """``app``, whose requests still running ``GRACE_SECONDS`` after ``stopping()`` are
    cancelled and answered 503 UNAVAILABLE: uvicorn cancelled them itself, logged each
    one's traceback (some 60 lines at a Ctrl-C of `codeshot serve` during a slow Func) and
    answered 500, which the platform reads as the agent's own failure (AGENT_ERROR)
    rather than as it being unavailable."""

    def __init__(self, app: ASGIApp, stopping: Callable[[], bool]) -> None:
        self.app, self.stopping = app, stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, sending))
        try:
            ends = float("inf")
            while not task.done() and time.monotonic() < ends:
                await asyncio.wait({task}, timeout=0.1)
                if ends == float("inf") and self.stopping():
                    ends = time.monotonic() + GRACE_SECONDS
        finally:  # also when this request is cancelled: the app's task goes with it
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            task.result()  # the app's own failure, as uvicorn reports it
        elif not started:  # a started reply is cut short: uvicorn closes the connection
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": STOPPED})


class RequireAuthorization:
    """An app that answers 401 to a request without ``expected`` as its Authorization: an
    MCP server's own check of the header its owner registered it with."""

    def __init__(self, app: ASGIApp, expected: str) -> None:
        self.app, self.expected = app, expected.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") \
                != self.expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
            return
        await self.app(scope, receive, send)


def mcp_http_server(server: Any, authorization: str | None = None) -> HttpServer:
    """An ``mcp`` SDK server (``MCPServer``) on loopback as an agent's ``mcpUrl`` names it:
    stateless streamable HTTP at ``{url}/mcp``, requiring ``authorization`` when given.
    Not started."""
    app: ASGIApp = server.streamable_http_app(stateless_http=True, json_response=True)
    if authorization:
        app = RequireAuthorization(app, authorization)
    return HttpServer(app, "127.0.0.1", 0, lifespan=True)
