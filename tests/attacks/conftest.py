"""Attacks from the second hostile review (issue #13), each over real HTTP against the
platform: two users, an agent of one of them turned against the other, and anonymous
callers. docs/threat-model.md names each test here with the defence it checks."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request

from codeshot.local.http_server import HttpServer
from tests.conftest import Platform, marked_settings, serving
from tests.runner.conftest import agents, live, running  # noqa: F401 (fixtures)


class InternalService:
    """Something inside the network the platform must never reach: it counts requests."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def anything(path: str, request: Request) -> dict[str, str]:
            self.hits.append(f"{request.method} /{path}")
            return {"secret": "internal-credentials"}

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = self.server.start()
        self.port = int(self.url.rsplit(":", 1)[1])


@pytest.fixture
def internal() -> Iterator[InternalService]:
    service = InternalService()
    yield service
    service.server.stop()


class RebindingDNS:
    """An attacker's DNS: each name answers from a script (one answer list per lookup,
    the last repeated), every other name resolves as usual. It replaces the resolver the
    whole process uses, as a DNS server would change what every lookup sees."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.scripts: dict[str, list[list[str]]] = {}
        self.lookups: dict[str, int] = {}

    def answer(self, name: str, *answers: list[str]) -> str:
        self.scripts[name] = list(answers)
        return name

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[tuple]:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in self.scripts:
            return self.real(host, port, *args, **kwargs)
        count = self.lookups.get(name, 0)
        self.lookups[name] = count + 1
        script = self.scripts[name]
        addresses = script[min(count, len(script) - 1)]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, int(port or 0))) for a in addresses]


@pytest.fixture
def dns(monkeypatch) -> RebindingDNS:
    resolver = RebindingDNS(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    return resolver


class ChatServer:
    """An OpenAI-compatible chat-completions endpoint on loopback: records every prompt
    and answers each call with the next scripted reply (the last one repeats)."""

    def __init__(self) -> None:
        self.prompts: list[list[dict[str, str]]] = []
        self.replies: list[str] = ["A: ok"]
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.prompts.append(body["messages"])
            text = self.replies[min(len(self.prompts) - 1, len(self.replies) - 1)]
            return {"choices": [{"message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10}}

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = self.server.start() + "/v1"


@pytest.fixture(scope="session")
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    yield server
    server.server.stop()


@pytest.fixture
def llm_live(server_aws, request, chat_server) -> Iterator[Platform]:
    """``live``, with the ``openai`` LLM provider talking to ``chat_server``."""
    overrides = {"llm": "openai", "openai_base_url": chat_server.url, **marked_settings(request)}
    with serving(server_aws, **overrides) as platform, running(platform):
        chat_server.prompts.clear()
        yield platform
