"""Fairness in the API: one user cannot hold more than CODESHOT_MAX_WAITING_REQUESTS
requests open waiting for replies (each an API Lambda instance in AWS, from a pool all
users share). One more is refused RATE_LIMITED before anything is written; its slot is
given back however a wait ends, and lapses if its Lambda died holding it."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from codeshot import aws, ids
from codeshot.usecases.waits import LAPSE_MARGIN, take_slot
from tests.api.test_fixie_compat import fixieai
from tests.attacks.test_fairness import reply_to
from tests.conftest import code
from tests.runner.conftest import messages, register, send, session
from tests.store_helpers import resent_after_landing

SEND = """mutation ($s: String!, $t: String!, $w: Boolean) { sendSessionMessage(
  messageData: {session: $s, text: $t, wait: $w}) { message { id } reply { type } } }"""
KEYED = """mutation ($s: String!, $t: String!, $k: String, $w: Boolean) { sendSessionMessage(
  messageData: {session: $s, text: $t, idempotencyKey: $k, wait: $w}) { message { id } } }"""
SESSIONS = "{ allSessions { handle } }"


def held_by_a_dead_lambda(platform, key: str) -> None:
    """A waiting slot taken as a request takes it, by a Lambda that then died."""
    principal = platform.services.auth.user_for_api_key(key)
    asyncio.run(take_slot(platform.services, principal))


def wait_for_call(agents, called: int) -> None:
    deadline = time.monotonic() + 30
    while len(agents.calls) == called:
        assert time.monotonic() < deadline, "the slow query's Func was never called"
        time.sleep(0.05)


@pytest.mark.settings(max_waiting_requests=1, agent_call_timeout_seconds=10)
def test_a_user_past_their_waiting_cap_holds_no_wait_while_another_users_wait_is_answered(
        live, agents):
    _, key = live.user("hog")
    _, other = live.user("polite")
    slow = register(live, key, "slow", agents.url + "/slow")  # each Func call takes 3 s
    dice = register(live, other, "dice", agents.url + "/dice")
    first, second = session(live, key, frontend=slow), session(live, key, frontend=slow)
    with ThreadPoolExecutor(2) as pool:
        called = len(agents.calls)
        held = pool.submit(send, live, key, first, "Roll 1d20")
        wait_for_call(agents, called)  # hog's first request is waiting for its reply now
        started = time.monotonic()
        refused = live.gql(key, SEND, {"s": second, "t": "Roll 1d20"})
        took = time.monotonic() - started
        assert code(refused) == "RATE_LIMITED", refused
        assert "you already have 1 requests waiting for replies" in \
            refused["errors"][0]["message"]
        assert took < 2.0, f"the refusal took {took:.2f} s"
        assert not held.done()  # refused while the first still waits
        assert messages(live, key, second) == []  # nothing was posted
        # Another user's request waits meanwhile, and gets its reply.
        polite = pool.submit(send, live, other, session(live, other, frontend=dice),
                             "Roll 1d20")
        assert polite.result()["reply"]["type"] == "response"
        # A post that does not wait is never refused for the cap.
        posted = live.gql(key, SEND, {"s": second, "t": "Roll 1d20", "w": False})
        assert "errors" not in posted, posted
        assert held.result()["reply"]["type"] == "response"
    # Its reply read, hog's first request gave its slot back: hog may wait again.
    third = session(live, key, frontend=slow)
    assert send(live, key, third, "Roll 1d20")["reply"]["type"] == "response"


@pytest.mark.settings(max_waiting_requests=1, reply_wait_seconds=1.0,
                      agent_call_timeout_seconds=10)
def test_a_waiting_slot_is_given_back_when_the_wait_times_out_or_the_post_fails(live, agents):
    _, key = live.user("impatient")
    slow = register(live, key, "slow", agents.url + "/slow")
    handle = session(live, key, frontend=slow)
    timed_out = live.gql(key, SEND, {"s": handle, "t": "Roll 1d20"})
    assert timed_out["data"]["sendSessionMessage"]["reply"] is None, timed_out  # 1 s < 3 s
    # A post refused once its slot is taken: its key was used for another message.
    keyed = {"s": handle, "t": "Roll 1d6", "k": ids.ulid()}
    assert "errors" not in live.gql(key, KEYED, {**keyed, "w": False})
    assert code(live.gql(key, KEYED, {**keyed, "t": "Roll 1d8"})) == "INVALID_INPUT"
    # Neither kept its slot: the next request waits (rather than being refused).
    again = live.gql(key, SEND, {"s": handle, "t": "Roll 1d20"})
    assert "errors" not in again, again
    # ... as the one slot there is, held, would have refused it.
    held_by_a_dead_lambda(live, key)
    assert code(live.gql(key, SEND, {"s": handle, "t": "Roll 1d20"})) == "RATE_LIMITED"


@pytest.mark.settings(max_waiting_requests=1)
def test_a_slot_whose_lambda_died_lapses_after_the_longest_wait(platform):
    _, key = platform.user("crashed")
    handle = platform.gql(key, "mutation { createSession { session { handle } } }")[
        "data"]["createSession"]["session"]["handle"]
    held_by_a_dead_lambda(platform, key)
    assert code(platform.gql(key, SEND, {"s": handle, "t": "hello"})) == "RATE_LIMITED"
    wait = timedelta(seconds=platform.services.settings.reply_wait_seconds)
    platform.clock.now = datetime.now(UTC) + wait + LAPSE_MARGIN + timedelta(seconds=1)
    out = platform.gql(key, SEND, {"s": handle, "t": "hello"})  # no runner: it times out
    assert "errors" not in out, out


@pytest.mark.settings(max_waiting_requests=1, reply_wait_seconds=1.0)
def test_fixieai_session_query_past_the_cap_fails_cleanly_and_makes_nothing(
        platform, fixie_python):
    """fixieai 1.0.4's ``Session.query`` streams /api/agents and keeps the last line as
    the answer: past the cap it gets 429 RATE_LIMITED (raised), not a wrong answer, and
    no session or message is made; its ``messages(waitSeconds)`` long poll is refused
    too."""
    _, key = platform.user("scripted")
    held_by_a_dead_lambda(platform, key)
    failed = fixieai(fixie_python, platform, key, """
import requests
from fixieai.client.client import FixieClient
try:
    print(FixieClient().create_session().query("Roll 2d6"))
except requests.HTTPError as exc:
    print("HTTP", exc.response.status_code, exc.response.json()["error"]["code"])""")
    assert failed.splitlines()[-1] == "HTTP 429 RATE_LIMITED"
    # fixieai made its session first; the refused query posted nothing in it.
    [made] = platform.gql(key, SESSIONS)["data"]["allSessions"]
    assert messages(platform, key, made["handle"]) == []
    body = {"message": {"text": "Roll 2d6"}, "stream": True}
    refused = httpx.post(f"{platform.url}/api/agents/None", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "RATE_LIMITED"
    assert len(platform.gql(key, SESSIONS)["data"]["allSessions"]) == 1  # none made for it
    polled = platform.gql(key, """query ($h: String!) { sessionByHandle(handle: $h) {
        messages(waitSeconds: 1) { id } } }""", {"h": made["handle"]})
    assert code(polled) == "RATE_LIMITED"


def a2a(platform, key: str, method: str, immediately: bool) -> httpx.Response:
    return a2a_call(platform, key, method, {
        "message": {"messageId": ids.ulid(), "role": "ROLE_USER",
                    "parts": [{"text": "Roll 1d20"}]},
        "configuration": {"returnImmediately": immediately}})


def a2a_call(platform, key: str, method: str, params: dict) -> httpx.Response:
    return httpx.post(f"{platform.url}/a2a/platform/planner", timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"})


@pytest.mark.settings(max_waiting_requests=1, reply_wait_seconds=1.0)
def test_a2a_and_mcp_requests_that_would_wait_past_the_cap_are_refused_and_make_nothing(
        platform):
    user_id, key = platform.user("agentic")
    held_by_a_dead_lambda(platform, key)
    blocking = a2a(platform, key, "SendMessage", immediately=False).json()
    assert blocking["error"]["code"] == -32029, blocking
    assert blocking["error"]["data"][0]["metadata"]["code"] == "RATE_LIMITED"
    streamed = a2a(platform, key, "SendStreamingMessage", immediately=False)
    assert "RATE_LIMITED" in streamed.text and '"task"' not in streamed.text, streamed.text
    asked = platform.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "Roll 1d20"}}).json()
    assert asked["result"]["content"][0]["text"].startswith("RATE_LIMITED"), asked
    assert platform.services.sessions.count_by_owner(user_id) == 0  # no task, no session
    # A message that does not wait is taken.
    taken = a2a(platform, key, "SendMessage", immediately=True).json()
    assert taken["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", taken
    # Following that working task would wait for its reply too.
    task_id = taken["result"]["task"]["id"]
    subscribed = a2a_call(platform, key, "SubscribeToTask", {"id": task_id})
    assert "RATE_LIMITED" in subscribed.text and '"task"' not in subscribed.text, \
        subscribed.text


@pytest.mark.settings(max_waiting_requests=1, agent_call_timeout_seconds=10)
@pytest.mark.parametrize("path", ["rest", "a2a"])
def test_a_streamed_wait_whose_client_left_gives_its_slot_back(live, agents, path):
    """A client that leaves a stream mid-wait frees its slot at once, not once the slot
    lapses (some 90 s later)."""
    _, key = live.user(f"leaver-{path}")
    slow = register(live, key, "slow", agents.url + "/slow")
    auth = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    if path == "rest":
        url, body = f"{live.url}/api/agents/slow", {"message": {"text": "Roll 1d20"},
                                                    "stream": True}
    else:
        url, body = f"{live.url}/a2a/{slow}", {
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
                "message": {"messageId": ids.ulid(), "role": "ROLE_USER",
                            "parts": [{"text": "Roll 1d20"}]}}}
    called = len(agents.calls)
    with httpx.stream("POST", url, json=body, headers=auth, timeout=30) as streamed:
        if path == "rest":
            handle = streamed.headers["X-Codeshot-Session"]
        else:
            first = next(line for line in streamed.iter_lines() if line.startswith("data:"))
            handle = json.loads(first[5:])["result"]["task"]["contextId"]
        wait_for_call(agents, called)  # waiting for its reply now; the client leaves
    assert reply_to(live, key, handle)["type"] == "response"  # the query ran on
    out = live.gql(key, SEND, {"s": session(live, key, frontend=slow), "t": "Roll 1d20"})
    assert "errors" not in out, out  # the slot the stream held is free again


@pytest.mark.settings(max_waiting_requests=1)
def test_bad_input_that_would_wait_writes_nothing_and_gets_its_own_error_at_the_cap(
        platform):
    """Checked before a waiting slot is taken: bad input writes nothing (no slot either),
    and a user at the cap hears what is wrong with it rather than RATE_LIMITED."""
    _, key = platform.user("careless")
    usage = platform.services.usage

    def usage_items() -> list[dict]:
        return usage.db.scan(TableName=usage.table_name)["Items"]

    before = usage_items()
    assert code(platform.gql(key, SEND, {"s": "no-such-session", "t": "hello"})) == \
        "NOT_FOUND"
    assert usage_items() == before
    held_by_a_dead_lambda(platform, key)
    assert code(platform.gql(key, SEND, {"s": "no-such-session", "t": "hello"})) == \
        "NOT_FOUND"
    handle = session(platform, key)
    assert code(platform.gql(key, SEND, {"s": handle, "t": " "})) == "INVALID_INPUT"
    auth = {"Authorization": f"Bearer {key}"}
    queried = httpx.post(f"{platform.url}/api/agents", headers=auth, timeout=30, json={
        "session": "no-such-session", "message": {"text": "hello"}, "stream": False})
    assert queried.json()["error"]["code"] == "NOT_FOUND", queried.text
    queried = httpx.post(f"{platform.url}/api/agents/no-such-agent", headers=auth,
                         timeout=30, json={"message": {"text": "hello"}, "stream": False})
    assert queried.json()["error"]["code"] == "NOT_FOUND", queried.text
    assert platform.gql(key, SESSIONS)["data"]["allSessions"] == [{"handle": handle}]
    stepped = httpx.post(f"{platform.url}/ap/v1/agent/tasks/no-such-task/steps",
                         headers=auth, timeout=30, json={"input": "hello"})
    assert stepped.status_code == 404, stepped.text
    asked = platform.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "hello", "session": "no-such-session"}}).json()
    assert asked["result"]["content"][0]["text"].startswith("NOT_FOUND"), asked
    for arguments, error in (({"query": "x" * 100_000}, "INVALID_INPUT"),
                             ({"query": "hello", "agent": "no-such-agent"}, "NOT_FOUND")):
        asked = platform.rpc(key, "/mcp", "tools/call", {"name": "ask",
                                                         "arguments": arguments}).json()
        assert asked["result"]["content"][0]["text"].startswith(error), asked
    assert platform.gql(key, SESSIONS)["data"]["allSessions"] == [{"handle": handle}]
    for method in ("SendMessage", "SendStreamingMessage"):
        sent = a2a_call(platform, key, method, {"message": {
            "messageId": ids.ulid(), "role": "ROLE_USER", "taskId": f"{handle}.{ids.ulid()}",
            "parts": [{"text": "hello"}]}})
        assert "TaskNotFound" in sent.text or "-32001" in sent.text, sent.text
        assert "RATE_LIMITED" not in sent.text, sent.text


@pytest.mark.settings(max_waiting_requests=1, agent_call_timeout_seconds=10)
def test_following_a_working_a2a_task_holds_a_slot_until_its_answer(live, agents):
    _, key = live.user("follower")
    slow = register(live, key, "slow", agents.url + "/slow")
    url, auth = f"{live.url}/a2a/{slow}", {"Authorization": f"Bearer {key}",
                                          "A2A-Version": "1.0"}
    task = httpx.post(url, headers=auth, timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": ids.ulid(), "role": "ROLE_USER", "parts": [{"text": "Roll 1d20"}]},
            "configuration": {"returnImmediately": True}}}).json()["result"]["task"]
    other = session(live, key, frontend=slow)
    with httpx.stream("POST", url, headers=auth, timeout=60, json={
            "jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask",
            "params": {"id": task["id"]}}) as followed:
        events = (line for line in followed.iter_lines() if line.startswith("data:"))
        assert '"task"' in next(events)  # following it now
        assert code(live.gql(key, SEND, {"s": other, "t": "Roll 1d20"})) == "RATE_LIMITED"
        assert "TASK_STATE_COMPLETED" in list(events)[-1]
    out = live.gql(key, SEND, {"s": other, "t": "Roll 1d20"})
    assert "errors" not in out, out  # its slot was given back at the answer


@pytest.mark.settings(reply_wait_seconds=0.5)
def test_a_waiting_post_takes_its_slot_with_the_message_in_one_write(platform):
    """The cap costs a waiting query one write of its own (giving the slot back), not
    three calls: the slot is taken in the post's transaction, and the session is not read
    before it (the post refuses bad input itself, holding no slot)."""
    user_id, key = platform.user("frugal")
    handle = session(platform, key)
    platform.gql(key, SEND, {"s": handle, "t": "warm up"})  # the user's leases item made
    calls: list[str] = []
    stop = aws.on_call(lambda service, op: calls.append(op))
    try:
        out = platform.gql(key, SEND, {"s": handle, "t": "hello"})
    finally:
        stop()
    assert "errors" not in out, out
    assert out["data"]["sendSessionMessage"]["reply"] is None  # no runner here: it waited
    assert sorted(op for op in calls if op != "Query") == \
        ["SendMessage", "TransactWriteItems", "UpdateItem"], calls  # post, enqueue, give back
    held = platform.services.usage.db.get_item(
        TableName=platform.services.usage.table_name,
        Key={"counter": {"S": f"waiting#{user_id}"}})["Item"]
    assert held["leases"]["M"] == {}  # given back


@pytest.mark.settings(reply_wait_seconds=0.5)
def test_a_waiting_post_whose_written_transaction_lost_its_reply_is_posted_once(
        platform, monkeypatch):
    """The post's transaction was written but its response lost, and the resend (botocore
    retrying, or DynamoDB not honouring its token) was refused for what the first wrote:
    the post is the message it wrote, queued, its slot given back, charged once."""
    user_id, key = platform.user("unlucky")
    handle = session(platform, key)
    db = platform.services.sessions.db
    monkeypatch.setattr(db, "transact_write_items",
                        resent_after_landing(platform.services.sessions))
    out = platform.gql(key, SEND, {"s": handle, "t": "hello"})
    monkeypatch.undo()
    assert "errors" not in out, out
    stored = messages(platform, key, handle)
    assert [(m["type"], m["text"]) for m in stored] == [("query", "hello")]
    assert platform.services.usage.used("query", user_id) == 1
    held = platform.services.usage.db.get_item(
        TableName=platform.services.usage.table_name,
        Key={"counter": {"S": f"waiting#{user_id}"}})["Item"]
    assert held["leases"]["M"] == {}  # given back
    queued = platform.services.queue.receive(10)  # no runner here: it is still queued
    assert len(queued) == 1
    assert out["data"]["sendSessionMessage"]["message"]["id"] in queued[0]["Body"]


def test_a_waiting_post_the_database_keeps_refusing_is_told_busy(platform, monkeypatch):
    """A throttled post (no cancellation reasons to read) is RATE_LIMITED "busy", for a
    user whose waiting slots were never taken too (giving back one not taken is no error)."""
    _, key = platform.user("throttled")
    handle = session(platform, key)
    db = platform.services.sessions.db

    def throttled(**request):
        raise db.exceptions.ClientError(
            {"Error": {"Code": "ThrottlingException", "Message": "slow down"}},
            "TransactWriteItems")

    monkeypatch.setattr(db, "transact_write_items", throttled)
    out = platform.gql(key, SEND, {"s": handle, "t": "hello"})
    monkeypatch.undo()
    assert code(out) == "RATE_LIMITED" and "busy" in out["errors"][0]["message"], out
    assert messages(platform, key, handle) == []
