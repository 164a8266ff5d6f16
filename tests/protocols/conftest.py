"""The local stack as `codeshot local up` runs it (moto in a child process; the API, the
runner and the example agents local/dice, local/clock, local/notes on loopback), driven
by the protocols' own clients."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from codeshot.models import User
from codeshot.sdk import Message
from tests.conftest import free_port, unique_settings


def start_stack(**settings):
    from codeshot.local.stack import LocalStack

    directory = tempfile.TemporaryDirectory()
    stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory.name),
                       base=unique_settings(**settings), progress=lambda _line: None)
    stack.start()
    return stack, directory


def stack_with(**settings):
    """A module's stack with these settings: a generator for a module-scoped fixture."""
    running, directory = start_stack(**settings)
    yield running
    running.stop()
    directory.cleanup()


@pytest.fixture(scope="module")
def stack():
    yield from stack_with(mcp_agent_tools=10, reply_wait_seconds=20.0)


def new_account(stack, name: str) -> tuple[User, str]:
    """A new user of the stack, named ``name`` and a suffix of its own (a test run again
    after a flake makes another); returns (user, API key)."""
    from codeshot import ids
    from codeshot.usecases.users import create_user

    return create_user(stack.services, f"{name}{ids.ulid().lower()[-6:]}")


def new_user(stack, name: str) -> str:
    """A new user of the stack named ``name`` (agent ids and owners name it); returns
    their API key."""
    from codeshot.usecases.users import create_user

    return create_user(stack.services, name)[1]


BOOKING_FEW_SHOTS = """
Q: Book a table at Luigi's
Ask User: For how many people?
User says: 4
Ask Func[book]: Luigi's for 4
Func[book] says: Booked Luigi's for 4 at 19:00
A: Done: Booked Luigi's for 4 at 19:00.
"""


def register_served(stack, agent, handle: str, owner: str = "local", *,
                    url_field: str = "func_url", description: str = "") -> str:
    """``agent`` (written with codeshot.sdk) served on loopback and registered as
    ``owner/handle`` (as `codeshot serve --register` would), its URL as ``url_field``;
    returns its agent id."""
    from codeshot.local.http_server import HttpServer
    from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change
    from codeshot.usecases.users import find_user, principal_of

    agent_id = f"{owner}/{handle}"
    server = HttpServer(agent.app(stack.settings.replace(agent_id=agent_id)), "127.0.0.1", 0)
    url = server.start()
    stack.agents.append(server)  # stopped with the stack
    principal = principal_of(find_user(stack.services, owner))
    AgentRegistration(stack.services, charge=daily_agent_change).create(
        principal, handle, AgentFields(published=True, description=description,
                                       **{url_field: url}))
    return agent_id


def serve_agent(stack, handle: str, base_prompt: str, few_shots: str, funcs: dict,
                owner: str = "local", description: str = "") -> str:
    """A Code Shot agent with these Funcs, served and registered (``register_served``)."""
    from codeshot.sdk import CodeShotAgent

    agent = CodeShotAgent(base_prompt, few_shots)
    for name, fn in funcs.items():
        agent.register_func(fn, func_name=name)
    return register_served(stack, agent, handle, owner,
                           description=description or base_prompt)


@pytest.fixture(scope="module")
def booking(stack) -> tuple[str, list[str]]:
    """local/booking: asks how many people, then books (the bookings it made)."""
    made: list[str] = []

    def book(query: Message) -> str:
        made.append(query.text)
        return f"Booked {query.text} at 19:00"

    agent_id = serve_agent(stack, "booking", "I book restaurant tables.", BOOKING_FEW_SHOTS,
                           {"book": book}, description="Books restaurant tables.")
    return agent_id, made
