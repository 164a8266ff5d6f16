"""An ASGI app on uvicorn in a background thread (the local API, local agents, MCP servers
registered as agents, tests)."""

from __future__ import annotations

import threading
import time
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from codeshot.local.aws_server import check_port_free


class HttpServer:
    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *,
                 lifespan: bool = False) -> None:
        import uvicorn

        self.host = host
        check_port_free(host, port, "--port")  # `serve`'s and `local up`'s option
        self._server = uvicorn.Server(uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="on" if lifespan else "off",
            timeout_graceful_shutdown=2,
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
