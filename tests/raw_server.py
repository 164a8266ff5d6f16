"""A hostile HTTP server on a raw socket: it answers every request 200 with a body that
is huge (sent as fast as the client reads), or drips its whole answer, status line and
headers included, one byte per ``interval``; it
records how much it sent and when the client hung up. Real sockets on 127.0.0.1, so
what a client reads, and how long it stays, is what it would be against a real peer."""

from __future__ import annotations

import functools
import gzip
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

CHUNK = b"x" * 65536


@functools.cache
def gzip_bomb(inflated: int = 50 << 20) -> bytes:
    """A JSON object padded with spaces to ``inflated`` bytes, gzipped (about 1000x
    smaller): what a hostile server sends with Content-Encoding: gzip."""
    return gzip.compress(b"{" + b" " * (inflated - 2) + b"}", compresslevel=9)


@dataclass
class RawServer:
    mode: str  # "huge" or "drip"
    interval: float = 0.5  # seconds between dripped bytes
    limit: int = 1 << 30  # bytes a huge body has at most (1 GiB)
    requests: int = 0
    sent: int = 0  # body bytes written, over all connections (each sends at most limit)
    hung_up: list[float] = field(default_factory=list)  # time.monotonic() of each hang-up
    url: str = ""
    stop: threading.Event = field(default_factory=threading.Event)

    def hangs_up(self, within: float) -> bool:
        """Whether a client hangs up within ``within`` seconds (a dripping server notices
        at its next byte or two)."""
        deadline = time.monotonic() + within
        while not self.hung_up and time.monotonic() < deadline:
            time.sleep(0.05)
        return bool(self.hung_up)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)  # the request (small here); its body is not needed
            self.requests += 1
            length = self.limit if self.mode == "huge" else 1_000_000
            head = ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {length}\r\n\r\n").encode()
            mine = 0
            try:
                if self.mode == "huge":
                    conn.sendall(head)
                while mine < length and not self.stop.is_set():
                    if self.mode == "huge":
                        chunk = CHUNK[:length - mine]
                    else:  # the status line and headers too: all of it a byte at a time
                        time.sleep(self.interval)
                        chunk = head[mine:mine + 1] or b" "
                    conn.sendall(chunk)
                    mine += len(chunk)
                    self.sent += len(chunk)
            except OSError:  # the client closed the connection
                self.hung_up.append(time.monotonic())


@contextmanager
def raw_server(mode: str, **options: float) -> Iterator[RawServer]:
    server = RawServer(mode, **options)  # type: ignore[arg-type]
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    server.url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"

    def accept() -> None:
        while not server.stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            threading.Thread(target=server._serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        thread.join()
        listener.close()
