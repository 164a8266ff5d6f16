"""With the example agents on a real local stack (route mode, the offline fewshot
provider, the hashing router): a query no agent fits gets a clear answer naming the
closest agent, and no agent is called; a query an agent fits still reaches it."""

import tempfile
from pathlib import Path

import pytest

from benchmarks.local import Client
from codeshot.local.stack import LocalStack
from tests.conftest import free_port, unique_settings


@pytest.fixture(scope="module")
def stack():
    with tempfile.TemporaryDirectory() as directory:
        stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory),
                           base=unique_settings(planner_mode="route"),
                           progress=lambda _line: None)
        state = stack.start()
        yield stack, Client(state["graphql_url"], state["api_key"])
        stack.stop()


@pytest.mark.parametrize("text", ["hello", "what's 2+2"])
def test_no_agent_fits(stack, text):
    stack, client = stack
    h = client.session()
    reply = client.ask(h, text)["reply"]
    assert reply["type"] == "response"
    assert reply["text"].startswith("No agent here can help with that. The closest is local/")
    trace = stack.services.sessions.all_messages(h)
    assert [m.type.value for m in trace] == ["query", "thought", "response"]
    assert trace[1].text.startswith("Router proposes: no agent fits (closest: local/")


def test_a_fitting_agent_still_answers(stack):
    stack, client = stack
    h = client.session()
    reply = client.ask(h, "Roll a d20")["reply"]
    assert reply["type"] == "response" and reply["text"].startswith("You rolled ")
    calls = [m.text for m in stack.services.sessions.all_messages(h)
             if m.type.value == "agent_call"]
    assert calls == ["Ask Agent[local/dice]: Roll a d20"]
