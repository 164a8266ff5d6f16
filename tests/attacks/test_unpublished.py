"""Unpublished agents (#13 item 4): once its owner unpublishes an agent, other users'
existing sessions can no longer use it, whether they talk to it or the planner routes."""

from __future__ import annotations

from tests.runner.conftest import register, send, session

UNPUBLISH = """mutation { updateAgent(agentData: {handle: "dice", published: false}) {
  agent { agentId published } } }"""


def test_an_unpublished_agent_is_gone_from_other_users_existing_sessions(live, agents):
    _, mallory = live.user("mallory")
    _, victor = live.user("victor")
    register(live, mallory, "dice", agents.url + "/dice")
    direct = session(live, victor, frontend="mallory/dice")
    planned = session(live, victor)
    assert send(live, victor, direct, "Roll 1d20")["reply"]["type"] == "response"

    out = live.gql(mallory, UNPUBLISH)
    assert out["data"]["updateAgent"]["agent"]["published"] is False, out
    reply = send(live, victor, direct, "Roll 1d20")["reply"]
    assert reply["type"] == "error" and "no longer available" in reply["text"], reply
    routed = send(live, victor, planned, "Roll 1d20")["reply"]
    assert routed["type"] == "response" and "You rolled" not in routed["text"], routed
    assert "mallory/dice" not in routed["text"], routed
    # Its owner still uses it.
    own = session(live, mallory, frontend="mallory/dice")
    assert send(live, mallory, own, "Roll 1d20")["reply"]["type"] == "response"
