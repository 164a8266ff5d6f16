"""The rehearsal's small HTTP servers (front doors, the AWS proxy, Lambda Runtime APIs,
CloudFormation's response URL): threaded, on 127.0.0.1, on a port the OS picks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackServer:
    """Serves every request, whatever its method, with ``handle`` until stopped."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler], None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def reply(request: BaseHTTPRequestHandler, status: int, data: bytes,
          headers: list[tuple[str, str]] | None = None) -> None:
    """Answer with ``data`` (JSON unless a Content-Type is given); a client that has gone
    away (its own timeout) is not an error here."""
    headers = headers or []
    request.send_response(status)
    for key, value in headers:
        if key.lower() not in ("content-length", "connection", "transfer-encoding"):
            request.send_header(key, value)
    if "content-type" not in {k.lower() for k, _ in headers}:
        request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    try:
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
