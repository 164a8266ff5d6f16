"""The planner in `plan` mode writes a multi-agent plan (here with the offline fewshot
provider following the examples built from the routed agents' samples) and combines real
agent answers."""

import re
import tempfile
from pathlib import Path

import pytest

from benchmarks.local import Client
from codeshot.local.stack import LocalStack
from tests.conftest import free_port, unique_settings


@pytest.fixture(scope="module")
def planning_stack():
    with tempfile.TemporaryDirectory() as directory:
        stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory),
                           base=unique_settings(planner_mode="plan"),
                           progress=lambda _line: None)
        state = stack.start()
        yield stack, Client(state["graphql_url"], state["api_key"])
        stack.stop()


def test_two_agents_in_one_answer(planning_stack):
    stack, client = planning_stack
    h = client.session()
    reply = client.ask(h, "Roll 3d8 and tell me the time")["reply"]
    trace = stack.services.sessions.all_messages(h)
    calls = [m.text for m in trace if m.type.value == "agent_call"]
    roll = next(m.text for m in trace if m.type.value == "result" and m.sent_by == "local/dice")
    rolled = roll.removeprefix("Func[roll] says: ")
    assert re.fullmatch(r"\d \+ \d \+ \d = \d+", rolled)
    # The examples are built from the agents' own samples nearest the query; the second
    # Ask carries the first agent's answer where the example holds its placeholder.
    assert calls == ["Ask Agent[local/dice]: Roll 3d8",
                     f"Ask Agent[local/clock]: What time is it? (given: You rolled {rolled}.)"]
    assert reply["type"] == "response" and rolled in reply["text"] and "UTC" in reply["text"]
