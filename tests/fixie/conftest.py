"""Agents written as Fixie 1.0 agents are (``import codeshot.sdk as fixieai``), served on
loopback and run by the platform's real runner; the runner tests' helpers are shared."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codeshot.devtools.agents import serve
from codeshot.sdk import AgentBase
from tests.runner.conftest import live, register  # noqa: F401 - shared fixture


@dataclass
class User:
    user_id: str
    key: str
    username: str


@pytest.fixture
def user(live) -> User:  # noqa: F811
    user_id, key = live.user()
    return User(user_id, key, live.services.users.get(user_id).username)


@pytest.fixture
def deploy(live, user) -> Iterator[Callable[[AgentBase, str], str]]:  # noqa: F811
    """Serve an agent on loopback and register it as the user's ``handle``; its id."""
    with ExitStack() as stack:

        def deploy_one(agent: AgentBase, handle: str) -> str:
            agent_id = f"{user.username}/{handle}"
            register(live, user.key, handle, stack.enter_context(serve(agent, live.url,
                                                                       agent_id)))
            return agent_id

        yield deploy_one


@contextmanager
def serving_pages(page: Callable[[str], tuple[str, bytes]]) -> Iterator[str]:
    """A web server on loopback answering GET ``path`` with ``page(path)`` (content type,
    body); yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            content_type, body = page(self.path)
            self.send_response(200)
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
