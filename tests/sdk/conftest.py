"""An agent built with the SDK, served on loopback against the real platform (``platform``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from codeshot.sdk import (
    AgentResponse,
    CodeShotAgent,
    Embed,
    Message,
    StandaloneAgent,
    UserStorage,
    ask_user,
)
from codeshot.sdk.devtools import serve

AGENT_ID = "acme/sdkdemo"

FEW_SHOTS = """
Q: Remember my colour is blue
Ask Func[remember]: blue
Func[remember] says: remembered blue
A: I will remember blue.

Q: Add 2 and 3
Ask Func[add]: 2, 3
Func[add] says: 5
A: 2 + 3 = 5.
"""


def demo_agent() -> CodeShotAgent:
    agent = CodeShotAgent("I am a demo agent for SDK tests.", FEW_SHOTS)

    @agent.register_func
    def remember(query: Message, user_storage: UserStorage) -> str:
        user_storage["colour"] = {"name": query.text, "raw": query.text.encode()}
        stored = user_storage["colour"]
        return f"remembered {stored['name']} ({len(stored['raw'])} bytes, keys {sorted(user_storage)})"

    @agent.register_func
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @agent.register_func(func_name="book")
    def book_table(query: str) -> AgentResponse:
        if "at" not in query.split():
            return ask_user("For what time?")
        return AgentResponse(Message(f"booked {query}", embeds={
            "ticket": Embed("text/plain", "data:text/plain;base64,dGlja2V0")}))

    @agent.register_func
    def explode(query):
        raise RuntimeError("secret internals")

    return agent


@dataclass
class Served:
    url: str
    agent_id: str


@pytest.fixture
def sdk_agent(platform) -> Iterator[Served]:
    with serve(demo_agent(), platform.url, AGENT_ID) as url:
        yield Served(url, AGENT_ID)


@pytest.fixture
def standalone_agent(platform) -> Iterator[Served]:
    def handle(query: Message, user_storage: UserStorage):
        yield "thinking"
        user_storage["last"] = query.text
        yield AgentResponse(Message(f"you said {user_storage['last']}"))

    with serve(StandaloneAgent(handle, sample_queries=["say hi"]), platform.url, AGENT_ID) as url:
        yield Served(url, AGENT_ID)
