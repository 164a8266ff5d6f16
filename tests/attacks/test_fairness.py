"""Fairness (#13 item 11): a slow agent cannot hold a query past its time budget, one
user cannot fill the runner with running queries, and the sessions of one runner batch do
not wait on each other."""

from __future__ import annotations

import json
import threading
import time
import uuid

import httpx
import pytest

from codeshot.runner.batch import process_batch
from tests.runner.conftest import messages, register, send, session, status

SEND_NO_WAIT = """mutation ($s: String!, $t: String!) { sendSessionMessage(
  messageData: {session: $s, text: $t, wait: false}) { message { id } } }"""


def reply_to(platform, key: str, handle: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        terminal = [m for m in messages(platform, key, handle)
                    if m["type"] in ("response", "error", "awaiting_input")]
        if terminal:
            return terminal[-1]
        time.sleep(0.1)
    raise AssertionError(f"no reply in session {handle}")


@pytest.mark.settings(query_time_budget_seconds=1.5, agent_call_timeout_seconds=10)
def test_a_slow_agent_cannot_hold_a_query_past_its_time_budget(live, agents):
    _, key = live.user("tess")
    slow = register(live, key, "slow", agents.url + "/slow")  # each Func call takes 3 s
    handle = session(live, key, frontend=slow)
    reply = send(live, key, handle, "Roll 1d20")["reply"]
    assert reply["type"] == "error", reply
    assert "this query's time ran out" in reply["text"].lower(), reply
    assert messages(live, key, handle)[-1]["errorCode"] == "TIMEOUT"


def running_slowly(live, agents, key: str, slow: str) -> str:
    """A session with the agent ``slow`` whose query is running (its Func takes 3 s)."""
    handle = session(live, key, frontend=slow)
    called = len(agents.calls)
    out = live.gql(key, SEND_NO_WAIT, {"s": handle, "t": "Roll 1d20"})
    assert "errors" not in out, out
    # The slow query is running once its Func is called: the runner may take a while to
    # start it on a loaded machine.
    deadline = time.monotonic() + 30
    while len(agents.calls) == called:
        assert time.monotonic() < deadline, "the slow query's Func was never called"
        time.sleep(0.05)
    return handle


@pytest.mark.settings(max_running_queries=1, agent_call_timeout_seconds=10)
def test_one_user_cannot_run_more_than_their_cap_at_once(live, agents):
    """Beyond the cap a query is refused, and (nothing of it ran) it does not use up the
    day's quota: sent again, it is charged once."""
    _, key = live.user("hog", daily_query_limit=2)
    _, other = live.user("polite")
    slow = register(live, key, "slow", agents.url + "/slow")
    first = running_slowly(live, agents, key, slow)
    second = session(live, key, frontend=slow)
    refused = send(live, key, second, "Roll 1d20")["reply"]
    assert refused["type"] == "error" and "you already have 1 queries running" in \
        refused["text"], refused
    assert messages(live, key, second)[-1]["errorCode"] == "RATE_LIMITED"
    # Another user is not held back meanwhile.
    dice = register(live, other, "dice", agents.url + "/dice")
    assert send(live, other, session(live, other, frontend=dice),
                "Roll 1d20")["reply"]["type"] == "response"
    # Once the first query has answered, its slot is free again.
    assert reply_to(live, key, first)["type"] == "response"
    again = send(live, key, second, "Roll 1d20")["reply"]
    assert again["type"] == "response", again


@pytest.mark.settings(max_running_queries=1, agent_call_timeout_seconds=10)
def test_an_answer_refused_for_the_cap_still_answers_the_question_when_sent_again(
        live, agents):
    """The refusal says "send this one again"; it dropped the agent's paused program, so
    the answer sent again was a new query, and the question was asked anew."""
    _, key = live.user("eager")
    booking = register(live, key, "booking", agents.url + "/booking")
    asking = session(live, key, frontend=booking)
    assert send(live, key, asking, "Book a table at Luigi's")["reply"]["text"] == \
        "For how many people?"
    slow = running_slowly(live, agents, key, register(live, key, "slow", agents.url + "/slow"))
    refused = send(live, key, asking, "4")["reply"]
    assert refused["type"] == "error" and "send this one again" in refused["text"], refused
    assert status(live, key, asking) == "awaiting_input"
    assert reply_to(live, key, slow)["type"] == "response"
    again = send(live, key, asking, "4")["reply"]
    assert (again["type"], again["text"]) == ("response", "Done: Booked Luigi's."), again
    assert agents.calls[-1][:2] == ("booking/book", "Luigi's")
    # Refused once, answered once: the refusal is written exactly once.
    assert [m["errorCode"] for m in messages(live, key, asking) if m["type"] == "error"] == [
        "RATE_LIMITED"]


def a2a(live, key: str, agent_id: str, method: str, **params) -> dict:
    """An A2A JSON-RPC call to ``agent_id``'s endpoint: its result, or its error."""
    out = live.rpc(key, f"/a2a/{agent_id}", method, params, headers={"A2A-Version": "1.0"})
    return out.json()


def a2a_send(live, key: str, agent_id: str, text: str, **ids: str) -> dict:
    """SendMessage (waiting for the reply) with the task or context ``ids``."""
    return a2a(live, key, agent_id, "SendMessage", message={
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}], **ids})


@pytest.mark.settings(max_running_queries=1, agent_call_timeout_seconds=10)
def test_an_a2a_task_whose_answer_was_refused_for_the_cap_still_waits_for_it(live, agents):
    """The refusal kept the question, yet read as its task's end: the task failed, so the
    answer sent again by taskId was refused, a cancel said it waited for nothing, and a
    message with its contextId began a new task while the runner resumed the old one."""
    _, key = live.user("waiter")
    booking = register(live, key, "booking", agents.url + "/booking")
    asked = [a2a_send(live, key, booking, f"Book a table at {place}")["result"]["task"]
             for place in ("Luigi's", "Nino's")]
    assert {t["status"]["state"] for t in asked} == {"TASK_STATE_INPUT_REQUIRED"}
    slow = running_slowly(live, agents, key, register(live, key, "slow", agents.url + "/slow"))
    for task in asked:
        refused = a2a_send(live, key, booking, "4", taskId=task["id"])["result"]["task"]
        assert refused["id"] == task["id"]
        assert refused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", refused
        assert refused["status"]["message"]["metadata"]["errorCode"] == "RATE_LIMITED"
        assert "send this one again" in refused["status"]["message"]["parts"][0]["text"]
    # The same over MCP: refused, the question still waiting (no question elicited).
    over_mcp = live.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "2", "session": asked[1]["contextId"]}}).json()["result"]
    assert over_mcp["isError"] and over_mcp["content"][0]["text"].startswith("RATE_LIMITED")
    assert over_mcp["structuredContent"]["status"] == "input_required", over_mcp
    assert reply_to(live, key, slow)["type"] == "response"
    # The Agent Protocol's task (the session) awaits input; its refused step is not last.
    ap = f"{live.url}/ap/v1/agent/tasks/{asked[0]['contextId']}"
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(ap, headers=auth).json()["status"] == "awaiting_input"
    steps = httpx.get(f"{ap}/steps", headers=auth).json()["steps"]
    assert [(s["input"], s["is_last"]) for s in steps] == [
        ("Book a table at Luigi's", False), ("4", False)]
    got = a2a(live, key, booking, "GetTask", id=asked[0]["id"])["result"]
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", got
    # Its context is still busy with it: a message there is not a new task.
    busy = a2a_send(live, key, booking, "4", contextId=asked[0]["contextId"])["error"]
    assert busy["code"] == -32004 and "waits for input" in busy["message"], busy
    # The answer sent again resumes it; a cancel ends the other.
    done = a2a_send(live, key, booking, "4", taskId=asked[0]["id"])["result"]["task"]
    assert (done["id"], done["status"]["state"]) == (asked[0]["id"], "TASK_STATE_COMPLETED")
    assert done["status"]["message"]["parts"][0]["text"] == "Done: Booked Luigi's."
    assert agents.calls[-1][:2] == ("booking/book", "Luigi's")
    canceled = a2a(live, key, booking, "CancelTask", id=asked[1]["id"])
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
    assert status(live, key, asked[1]["contextId"]) == "idle"



@pytest.mark.settings(max_running_queries=1, agent_call_timeout_seconds=10)
def test_a_canceled_question_that_a_refusal_kept_ends_its_task(live, agents):
    """The cancel answered the question's turn, not the refused answer's, which waited on
    it for ever: the Agent Protocol's task still awaited input, and the A2A context took
    no new task."""
    _, key = live.user("quitter")
    booking = register(live, key, "booking", agents.url + "/booking")
    task = a2a_send(live, key, booking, "Book a table at Luigi's")["result"]["task"]
    slow = running_slowly(live, agents, key, register(live, key, "slow", agents.url + "/slow"))
    refused = a2a_send(live, key, booking, "4", taskId=task["id"])["result"]["task"]
    assert refused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", refused
    assert reply_to(live, key, slow)["type"] == "response"
    canceled = a2a(live, key, booking, "CancelTask", id=task["id"])
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
    ap = f"{live.url}/ap/v1/agent/tasks/{task['contextId']}"
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(ap, headers=auth).json()["status"] == "canceled"
    steps = httpx.get(f"{ap}/steps", headers=auth).json()["steps"]
    assert [(s["input"], s["is_last"]) for s in steps] == [
        ("Book a table at Luigi's", False), ("4", True)]
    assert steps[-1]["additional_output"]["error"]["code"] == "CANCELED"
    # The context takes a new task; the refused answer was never one.
    new = a2a_send(live, key, booking, "Book a table at Nino's",
                   contextId=task["contextId"])["result"]["task"]
    assert new["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", new
    listed = a2a(live, key, booking, "ListTasks", contextId=task["contextId"])["result"]
    assert [(t["id"], t["status"]["state"]) for t in listed["tasks"]] == [
        (new["id"], "TASK_STATE_INPUT_REQUIRED"), (task["id"], "TASK_STATE_CANCELED")]

def record(message_id: str, session_id: str) -> dict:
    body = json.dumps({"session_id": session_id, "message_id": message_id})
    return {"messageId": message_id, "body": body,
            "attributes": {"MessageGroupId": session_id, "ApproximateReceiveCount": "1"}}


def test_the_sessions_of_one_batch_do_not_wait_on_each_other():
    other_done = threading.Event()
    seen: list[str] = []

    def handle(work, final):
        if work.session_id == "s-slow":
            # Waits for the other session's record: run one after another, it never comes.
            seen.append("other ran meanwhile" if other_done.wait(10) else "waited alone")
        else:
            other_done.set()

    result = process_batch({"Records": [record("m1", "s-slow"), record("m2", "s-fast")]},
                           handle)
    assert result == {"batchItemFailures": []}
    assert seen == ["other ran meanwhile"]


def test_a_failed_record_still_fails_the_rest_of_its_session_only():
    handled: list[str] = []

    def handle(work, final):
        handled.append(work.message_id)
        if work.message_id == "a1":
            raise RuntimeError("boom")

    records = [record("a1", "s-a"), record("b1", "s-b"), record("a2", "s-a"),
               record("b2", "s-b")]
    result = process_batch({"Records": records}, handle)
    assert sorted(f["itemIdentifier"] for f in result["batchItemFailures"]) == ["a1", "a2"]
    assert sorted(handled) == ["a1", "b1", "b2"]  # a2 untouched: its session's order holds
