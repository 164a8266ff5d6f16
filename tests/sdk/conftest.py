"""An agent built with the SDK, served on loopback against the real platform (``platform``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from codeshot.devtools.agents import serve
from codeshot.sdk import AgentResponse, Message, StandaloneAgent, UserStorage
from tests.sdk.demo import AGENT_ID, demo_agent


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
