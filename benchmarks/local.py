"""A local stack (the platform in this process, moto in a child) for benchmarks, on free
ports, with a GraphQL helper."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from codeshot.local.stack import LocalStack


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Client:
    def __init__(self, graphql_url: str, key: str) -> None:
        self.http = httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120)
        self.url = graphql_url

    def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        body: dict[str, Any] = self.http.post(
            self.url, json={"query": query, "variables": variables}).json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        data: dict[str, Any] = body["data"]
        return data

    def session(self, frontend: str | None = None) -> str:
        handle: str = self.gql("mutation ($f: String) { createSession(sessionData: "
                               "{frontendAgentId: $f}) { session { handle } } }",
                               f=frontend)["createSession"]["session"]["handle"]
        return handle

    def ask(self, session: str, text: str, wait: bool = True) -> dict[str, Any]:
        sent: dict[str, Any] = self.gql(
            "mutation ($s: String!, $t: String!, $w: Boolean!) { sendSessionMessage("
            "messageData: {session: $s, text: $t, wait: $w}) { message { id } "
            "reply { text type } } }", s=session, t=text, w=wait)["sendSessionMessage"]
        return sent


@contextmanager
def local_stack(examples: bool = True, **settings: Any) -> Iterator[tuple[LocalStack, Client]]:
    from codeshot.settings import Settings

    with tempfile.TemporaryDirectory() as directory:
        stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory),
                           base=Settings(**settings), progress=lambda _line: None,
                           examples=examples)
        state = stack.start()
        try:
            yield stack, Client(state["graphql_url"], state["api_key"])
        finally:
            stack.stop()
