"""Agents written as Fixie 1.0 agents are (``import codeshot.sdk as fixieai``), served on
loopback and run by the platform's real runner; the runner tests' helpers are shared."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from codeshot.devtools.agents import serve
from codeshot.devtools.pages import serving_pages  # noqa: F401 - the tests' page server
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
