"""The API over real HTTP: uvicorn on loopback, moto's server behind it."""

from __future__ import annotations

import threading

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse

from codeshot import ids
from codeshot.local.http_server import HttpServer
from codeshot.models import Message, MessageType
from codeshot.services import Services
from codeshot.store.queue import Work
from tests.store_helpers import add_message


class EchoRunner:
    """A test double standing in for the session runner (it arrives in #6): it takes
    work from the real SQS queue and stores a `response` echoing the query."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for raw in self.services.queue.receive(wait_seconds=0):
                work = Work.parse(raw["Body"])
                query = self.services.sessions.get_message(work.session_id, work.message_id)
                add_message(self.services.sessions, Message(
                    session_id=work.session_id, message_id=ids.ulid(), type=MessageType.RESPONSE,
                    text=f"echo: {query.text}", sent_by="test/echo", in_reply_to=query.message_id,
                ))
                self.services.queue.delete(raw["ReceiptHandle"])
            self.stop.wait(0.05)


@pytest.fixture
def echo_runner(platform):
    runner = EchoRunner(platform.services)
    runner.thread.start()
    yield runner
    runner.stop.set()
    runner.thread.join()


HANDSHAKE = {
    "type": "code_shot",
    "base_prompt": "I am a simple agent that generates random numbers.",
    "few_shots": ["Q: Generate a random number between 0 and 100.\n"
                  "Ask Func[genrand]: 0, 100\nFunc[genrand] says: 42\n"
                  "A: The random number is 42."],
    "conversational": False,
}


@pytest.fixture(scope="session")
def handshake_agent():
    """A minimal agent on loopback answering the handshake in JSON, or YAML when asked."""
    import yaml

    app = FastAPI()

    @app.get("/")
    def handshake():
        return JSONResponse(HANDSHAKE)

    @app.get("/yaml/")
    def handshake_yaml():
        return PlainTextResponse(yaml.safe_dump(HANDSHAKE), media_type="application/yaml")

    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    yield server.url
    server.stop()
