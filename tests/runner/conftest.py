"""The whole loop on loopback: API + runner (fed by the SQS poller) + agents over HTTP."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from codeshot.local.http_server import HttpServer
from codeshot.local.poller import QueuePoller
from codeshot.runner.batch import process_batch, record_of
from codeshot.runner.session_runner import SessionRunner
from codeshot.services import Services

DICE = {
    "type": "code_shot",
    "base_prompt": "I am a dice roller. I roll dice written like 2d6 or 1d20.",
    "few_shots": [
        "Q: Roll 1d20\nAsk Func[roll]: 1d20\nFunc[roll] says: 17\nA: You rolled 17.",
        "Q: Roll 3d8 for me\nAsk Func[roll]: 3d8\nFunc[roll] says: 4 + 2 + 7 = 13\n"
        "A: You rolled 4 + 2 + 7 = 13.",
    ],
}

BOOKING = {
    "type": "code_shot",
    "base_prompt": "I book restaurant tables.",
    "few_shots": [
        "Q: Book a table at Luigi's\nAsk User: For how many people?\nUser says: 4\n"
        "Ask Func[book]: Luigi's\nFunc[book] says: Booked Luigi's\nA: Done: Booked Luigi's.",
    ],
}


STANDALONE = {"type": "standalone", "sample_queries": ["Repeat after me: hello"]}
LATE_SECONDS = 7  # the late agent's pause: past a 1 s token's life and PyJWT's 5 s leeway


class AgentServer:
    """Plain-protocol agents (JSON over HTTP) behaving well or badly, for the runner."""

    def __init__(self) -> None:
        self.rolls: list[str] = []
        self.throttled: set[str] = set()  # texts "throttled" answered 503 to once
        self.calls: list[tuple[str, str, str]] = []  # (path, text, bearer)
        self.correlations: list[str | None] = []  # each call's X-Correlation-Id
        app = FastAPI()

        @app.get("/{agent}/")
        def handshake(agent: str) -> Any:
            return {"dice": DICE, "booking": BOOKING, "standalone": STANDALONE,
                    "late": STANDALONE}.get(agent, DICE)

        @app.post("/{agent}/{func}")
        async def func(agent: str, func: str, request: Request) -> Any:
            body = await request.json()
            text = body["message"]["text"]
            self.calls.append((f"{agent}/{func}", text, request.headers.get("authorization", "")))
            self.correlations.append(request.headers.get("x-correlation-id"))
            if agent == "redirect":
                return Response(status_code=302,
                                headers={"Location": "http://169.254.169.254/latest/meta-data/"})
            if agent == "broken":
                return JSONResponse({"error": {"code": "ERR", "message": "kaput"}},
                                    status_code=500)
            if agent == "slow":
                await asyncio.sleep(3)  # past the call timeout; other calls go on meanwhile
            if agent == "throttled" and text not in self.throttled:  # not run: try again
                self.throttled.add(text)
                return Response(status_code=503, headers={"Retry-After": "0"})
            if agent == "busy":  # a gateway's own 503: it says nothing of the call
                return Response(status_code=503)
            if agent == "garbage":
                return PlainTextResponse("{not json", media_type="application/json")
            if agent == "empty":  # JSON, but no reply: a gateway's {"ok": true}
                return {"ok": True}
            if agent == "surrogate":  # valid JSON that no UTF-8 store can hold as sent
                return PlainTextResponse('{"message": {"text": "rolled \\ud800 7"}}',
                                         media_type="application/json")
            if agent == "huge":  # under the 2 MB reply cap, over DynamoDB's 400 KB item
                return {"message": {"text": "x" * 1_900_000, "embeds": {}}, "error": None}
            if agent == "booking":
                return {"message": {"text": f"Booked {text}", "embeds": {}}, "error": None}
            count, sides = map(int, re.fullmatch(r"\s*(\d+)d(\d+)\s*", text).groups())
            dice = [random.randint(1, sides) for _ in range(count)]
            result = f"{' + '.join(map(str, dice))} = {sum(dice)}" if count > 1 else str(dice[0])
            if agent != "slow":  # a call given up on rolls late: no query's answer
                self.rolls.append(result)
            return {"message": {"text": result, "embeds": {}}, "error": None}

        @app.post("/standalone/")
        async def standalone(request: Request) -> Any:
            body = await request.json()
            text = body["message"]["text"]
            lines = [{"message": {"text": "thinking...", "embeds": {}}},
                     {"message": {"text": f"You said: {text}", "embeds": {}}}]
            return PlainTextResponse("\n".join(map(json.dumps, lines)),
                                     media_type="application/x-ndjson")

        @app.post("/late/")
        async def late(request: Request) -> Any:
            """Streams for a while, then lists the user's storage with its call token."""
            body = await request.json()
            token = body["access_token"]
            claims = jwt.decode(token, options={"verify_signature": False})

            async def lines() -> AsyncIterator[str]:
                yield json.dumps({"message": {"text": "thinking...", "embeds": {}}}) + "\n"
                await asyncio.sleep(LATE_SECONDS)
                async with httpx.AsyncClient() as platform:
                    listed = await platform.get(
                        f"{claims['iss']}/api/userstorage/{claims['aid']}",
                        headers={"Authorization": f"Bearer {token}"})
                text = f"storage answered {listed.status_code}"
                yield json.dumps({"message": {"text": text, "embeds": {}}}) + "\n"

            return StreamingResponse(lines(), media_type="application/x-ndjson")

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = self.server.start()

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture(scope="session")
def agents():
    server = AgentServer()
    yield server
    server.stop()


@contextmanager
def running(platform: Any, llm: Any | None = None) -> Iterator[Any]:
    """The real session runner consuming the platform's queue (with ``llm``, if given)."""
    poller = QueuePoller(platform.services.queue, SessionRunner(platform.services, llm).handle)
    poller.start()
    try:
        yield platform
    finally:
        poller.stop()


@pytest.fixture
def live(platform):
    """The platform with the real runner consuming its queue."""
    with running(platform):
        yield platform


def register(platform, key: str, handle: str, url: str, published: bool = True) -> str:
    out = platform.gql(key, """mutation ($h: String!, $u: String!, $p: Boolean) {
        createAgent(agentData: {handle: $h, queryUrl: $u, funcUrl: $u, published: $p,
          description: "test agent"}) { agent { agentId } } }""",
                       {"h": handle, "u": url, "p": published})
    assert "errors" not in out, out
    return out["data"]["createAgent"]["agent"]["agentId"]


def misbehaving(platform, key: str, handle: str, agents: AgentServer, path: str) -> str:
    """A session with the caller's agent ``handle``: registered with the dice handshake,
    then its Funcs pointed at ``agents``' ``path`` (one that misbehaves)."""
    agent_id = register(platform, key, handle, agents.url + "/dice", published=False)
    agent = platform.services.registry.get(agent_id)
    platform.services.registry.replace(agent.replace(func_url=agents.url + path))
    return session(platform, key, frontend=agent_id)


def session(platform, key: str, frontend: str | None = None) -> str:
    out = platform.gql(key, """mutation ($f: String) { createSession(sessionData:
        {frontendAgentId: $f}) { session { handle } } }""", {"f": frontend})
    return out["data"]["createSession"]["session"]["handle"]


def send(platform, key: str, handle: str, text: str) -> dict:
    out = platform.gql(key, """mutation ($s: String!, $t: String!) { sendSessionMessage(
        messageData: {session: $s, text: $t}) { message { id } reply { id text type } } }""",
                       {"s": handle, "t": text}, timeout=60)
    assert "errors" not in out, out
    return out["data"]["sendSessionMessage"]


def messages(platform, key: str, handle: str) -> list[dict]:
    out = platform.gql(key, """query ($h: String!) { sessionByHandle(handle: $h) { status
        messages { id text type sentBy { handle agentId } inReplyTo { id } errorCode } } }""",
                       {"h": handle})
    return out["data"]["sessionByHandle"]["messages"]


def status(platform, key: str, handle: str) -> str:
    out = platform.gql(key, "query ($h: String!) { sessionByHandle(handle: $h) { status } }",
                       {"h": handle})
    return out["data"]["sessionByHandle"]["status"]


def closed_port_url() -> str:
    from tests.conftest import free_port

    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def services(aws):
    """The platform's services on moto in-process, with no API or poller running."""
    return Services(aws.replace(local_mode=True))


def run_queue(services: Services, llm: Any | None = None) -> int:
    """What is queued, through the runner (with ``llm``, if given) as the Lambda's SQS
    trigger gives it; how many messages ran."""
    runner, ran = SessionRunner(services, llm), 0
    while messages := services.queue.receive(wait_seconds=0):
        event = {"Records": [record_of(m) for m in messages]}
        assert process_batch(event, runner.handle) == {"batchItemFailures": []}
        for message in messages:
            services.queue.delete(message["ReceiptHandle"])
        ran += len(messages)
    return ran
