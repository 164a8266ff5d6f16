"""A query's time budget bounds its LLM calls whole: a model that streams slowly is cut
off at the deadline, and the query ends with TIMEOUT instead of running on into the
runner's own time limit."""

from __future__ import annotations

import time

import pytest

from codeshot.llm.openai import OpenAILLM
from codeshot.runner.batch import process_batch, record_of
from codeshot.runner.session_runner import SessionRunner
from tests.openai_server import scripted_texts, serving
from tests.runner.conftest import register, session

CREATE = """mutation ($h: String!, $f: [String!]) { createAgent(agentData:
  {handle: $h, description: "calc", basePrompt: "I am a calculator.", fewShots: $f})
  { agent { agentId } } }"""
FEW = ["Q: What is 2 * 3?\nAsk Func[fixie_calc]: 2 * 3\nFunc[fixie_calc] says: 6\nA: It is 6."]


@pytest.mark.settings(query_time_budget_seconds=3)
def test_a_slow_stream_ends_with_the_querys_time_as_timeout(platform):
    _, key = platform.user("lena")
    assert "errors" not in platform.gql(key, CREATE, {"h": "calc", "f": FEW})
    h = session(platform, key, frontend="lena/calc")
    platform.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "What is 2 * 3?", wait: false}) { message { id } } }""", {"s": h})
    [raw] = platform.services.queue.receive(wait_seconds=1)
    answer = "A: " + " ".join(f"w{i}" for i in range(60))  # 20 events, no stop in them
    with serving(scripted_texts([answer])) as llm_server:
        llm_server.event_delay = 1.0  # a slow model: one event a second
        runner = SessionRunner(platform.services, llm=OpenAILLM("m", llm_server.url, None))
        started = time.monotonic()
        assert process_batch({"Records": [record_of(raw)]}, runner.handle) == \
            {"batchItemFailures": []}
        took = time.monotonic() - started
    assert took < 12, took  # the 3 s budget, not the 20 s the stream would take (slack: load)
    reply = platform.services.sessions.all_messages(h)[-1]
    assert (reply.type.value, reply.error_code) == ("error", "TIMEOUT")
    assert reply.text == "This query's time ran out before I reached an answer."
    # The call cut off is counted: its prompt, and the most it may have written.
    used = platform.gql(key, "{ user { dailyUsedTokens } }")["data"]["user"]["dailyUsedTokens"]
    assert used >= platform.services.settings.llm_max_tokens_per_call, used


@pytest.mark.settings(query_time_budget_seconds=3, planner_mode="plan")
def test_a_nested_agents_slow_model_ends_the_planners_query_as_timeout(platform, agents):
    _, key = platform.user("mona")
    register(platform, key, "dice", agents.url + "/dice")
    rolls = len(agents.rolls)  # the agent server is the session's: others roll too
    h = session(platform, key)  # the planner answers, asking the agent
    platform.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "Roll 1d20", wait: false}) { message { id } } }""", {"s": h})
    [raw] = platform.services.queue.receive(wait_seconds=1)
    planner = scripted_texts(["Ask Agent[mona/dice]: Roll 1d20"])
    agent = scripted_texts(["A: " + " ".join(f"w{i}" for i in range(60))])

    def respond(path: str, body: dict) -> tuple[int, object]:
        if not llm_server.requests[:-1]:
            return planner(path, body)
        llm_server.event_delay = 1.0  # the agent's model is the slow one
        return agent(path, body)

    with serving(respond) as llm_server:
        runner = SessionRunner(platform.services, llm=OpenAILLM("m", llm_server.url, None))
        started = time.monotonic()
        process_batch({"Records": [record_of(raw)]}, runner.handle)
        took = time.monotonic() - started
        time.sleep(5)
        # The nested call was cut off at 3 s, not left streaming its reply's 20 s.
        assert llm_server.events_sent[-1] <= 5, llm_server.events_sent
    assert took < 12, took  # the 3 s budget, not the 20 s (slack: load)
    assert len(llm_server.requests) == 2 and len(agents.rolls) == rolls
    reply = platform.services.sessions.all_messages(h)[-1]
    assert (reply.type.value, reply.error_code) == ("error", "TIMEOUT"), reply
    assert reply.text.startswith("Sorry, I could not finish: Agent[mona/dice] failed (")
    assert "time ran out" in reply.text
