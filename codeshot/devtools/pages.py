"""Web pages on loopback for tests and benchmarks: what agents, corpora and Funcs fetch."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# path -> (content type, body), or None: 404
Page = Callable[[str], "tuple[str, bytes] | None"]


@contextmanager
def serving_pages(page: Page) -> Iterator[str]:
    """A web server on 127.0.0.1 answering GET ``path`` with ``page(path)``; yields its
    base URL (``http://127.0.0.1:PORT``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = page(self.path)
            content_type, body = found or ("text/plain", b"not found")
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
