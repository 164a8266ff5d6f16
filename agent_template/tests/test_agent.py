"""The agent over HTTP, against a local platform (moto), with real signed tokens."""

import httpx

from codeshot.llm import get_llm
from codeshot.devtools.agents import AgentTestClient, format_results, run_cases
from codeshot.settings import Settings


def test_handshake_describes_the_agent(agent_server):
    handshake = agent_server.client.handshake()
    assert handshake.type == "code_shot"
    assert handshake.few_shots and handshake.base_prompt


def test_notes_are_saved_per_user(agent_server):
    status, reply = agent_server.client.call("add_note", "water the plants")
    assert status == 200, reply
    assert reply["message"]["text"] == "Saved note 1: water the plants"
    assert "1. water the plants" in agent_server.client.call("list_notes", "")[1]["message"]["text"]

    platform, other_user = agent_server.platform, agent_server.platform.user()
    other = AgentTestClient(agent_server.client.url, agent_server.agent_id,
                        lambda: platform.token(agent_server.agent_id, other_user))
    assert other.call("list_notes", "")[1]["message"]["text"] == "You have no notes."


def test_calls_without_a_token_are_refused(agent_server):
    reply = httpx.post(agent_server.client.url + "/add_note", json={"message": {"text": "x"}})
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "UNAUTHENTICATED"


def test_agent_yaml_tests_pass_through_the_engine(agent_server):
    results = run_cases(agent_server.client, agent_server.config.tests, get_llm(Settings()))
    assert results and all(r.passed for r in results), format_results(results)
