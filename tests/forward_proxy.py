"""An HTTP proxy on 127.0.0.1, as a corporate network's: absolute-form requests (plain
HTTP) are passed on, CONNECT opens a tunnel; each target is recorded. Names in ``hosts``
resolve to 127.0.0.1 here only, as an internal name resolves only inside the network."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit


class ForwardProxy:
    def __init__(self, hosts: tuple[str, ...] = ()) -> None:
        self.hosts = hosts
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.targets: list[str] = []  # "POST http://host:port/path" or "CONNECT host:port"
        self.authorizations: list[str | None] = []  # each request's Proxy-Authorization

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            line, _, rest = head.partition(b"\r\n")
            method, target, version = line.decode().split(" ")
            self.targets.append(f"{method} {target}")
            fields = dict(h.split(": ", 1) for h in
                          rest.partition(b"\r\n\r\n")[0].decode().split("\r\n") if h)
            self.authorizations.append(fields.get("Proxy-Authorization"))
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = socket.create_connection((self._resolve(host), int(port)))
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first = rest.partition(b"\r\n\r\n")[2]
            else:
                url = urlsplit(target)
                upstream = socket.create_connection((self._resolve(url.hostname or ""),
                                                     url.port or 80))
                path = url.path + (f"?{url.query}" if url.query else "")
                first = f"{method} {path} {version}\r\n".encode() + rest
            with upstream:
                upstream.sendall(first)
                threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
                _pipe(upstream, client)

    def _resolve(self, host: str) -> str:
        return "127.0.0.1" if host in self.hosts else host


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass  # either side went away


@contextmanager
def proxying(hosts: tuple[str, ...] = ()) -> Iterator[ForwardProxy]:
    proxy = ForwardProxy(hosts)
    threading.Thread(target=proxy.serve, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy.listener.close()
