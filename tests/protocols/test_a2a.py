"""Every agent as an A2A agent, driven by the official a2a-sdk client against the local
stack: cards, messages, streams, tasks, input-required answered, signed push
notifications received on loopback, and bad input."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

import httpx
import jwt
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import ParseDict

from tests.protocols.conftest import new_account


def user_message(text: str, task_id: str = "", context_id: str = "") -> Message:
    return Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)],
                   task_id=task_id, context_id=context_id)


def client_for(stack, key: str, path: str, streaming: bool = False):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
    return factory.create_from_url(f"{stack.api_url}/a2a/{path}")


async def send(client, message: Message):
    task = None
    async for response in client.send_message(SendMessageRequest(message=message)):
        task = response.task
    return task


def test_a_card_is_found_and_a_message_answered_with_the_funcs_number(stack):
    async def exchange():
        client = await client_for(stack, stack.state["api_key"], "local/dice")
        card = client._card
        task = await send(client, user_message("Roll a d20"))
        got = await client.get_task(GetTaskRequest(id=task.id))
        return card, task, got

    card, task, got = asyncio.run(exchange())
    assert card.name == "Dice" and card.supported_interfaces[0].url.endswith("/a2a/local/dice")
    assert "Roll a d20" in card.skills[0].examples
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert "apiKey" in card.security_schemes
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    answer = get_message_text(task.status.message)
    rolled = re.fullmatch(r"You rolled (\d+)\.", answer)
    assert rolled and 1 <= int(rolled.group(1)) <= 20
    assert [p.text for p in task.artifacts[0].parts] == [answer]
    # The history is the turn's messages, the Func's own result among them.
    steps = [(m.metadata["type"], get_message_text(m)) for m in got.history]
    assert steps[0] == ("query", "Roll a d20")
    assert ("result", f"Func[roll] says: {rolled.group(1)}") in steps
    assert got.id == task.id != got.context_id == task.context_id
    assert stack.services.sessions.get(task.context_id).frontend_agent_id == "local/dice"


def test_the_planners_card_and_a_streamed_answer(stack):
    card = httpx.get(f"{stack.api_url}/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"].endswith("/a2a/platform/planner")
    assert {s["id"] for s in card["skills"]} >= {"local.dice", "local.clock"}

    async def stream():
        client = await client_for(stack, stack.state["api_key"], "platform/planner",
                                  streaming=True)
        return [response async for response in client.send_message(SendMessageRequest(
            message=user_message("Roll a d20")))]

    events = asyncio.run(stream())
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    assert "artifact_update" in kinds
    working = [get_message_text(e.status_update.status.message) for e in events
               if e.WhichOneof("payload") == "status_update"
               and e.status_update.status.state == TaskState.TASK_STATE_WORKING]
    assert working[0].startswith("Router proposes: local/dice")  # the trace, step by step
    assert "Ask Func[roll]: a d20" in working
    final = events[-1].status_update.status
    assert final.state == TaskState.TASK_STATE_COMPLETED
    assert re.fullmatch(r"You rolled \d+\.", get_message_text(final.message))


def test_an_input_required_task_is_answered_and_pushes_signed_updates(stack, booking, receiver):
    agent_id, made = booking
    booked = len(made)

    async def exchange():
        client = await client_for(stack, stack.state["api_key"], agent_id)
        task = await send(client, user_message("Book a table at Alfredo's"))
        asked = task
        config = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, url=receiver.url, token="tok-123"))
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=config.id))
        done = await send(client, user_message("5", task_id=task.id, context_id=task.context_id))
        with pytest.raises(UnsupportedOperationError):  # answered and done: finished
            await send(client, user_message("6", task_id=task.id))
        return asked, config, got, done

    asked, config, got, done = asyncio.run(exchange())
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    # Its answer continued it: one task, both turns in its history, its answer its artifact.
    assert (done.id, done.context_id) == (asked.id, asked.context_id)
    assert [get_message_text(m) for m in done.history if m.role == Role.ROLE_USER] == [
        "Book a table at Alfredo's", "5"]
    assert len(done.artifacts) == 1
    assert get_message_text(asked.status.message) == "For how many people?"
    assert (got.url, got.token, got.id) == (receiver.url, "tok-123", config.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert made[-1] == "Alfredo's for 5" and len(made) == booked + 1
    assert "Booked Alfredo's for 5" in get_message_text(done.status.message)
    # The push: signed by the platform (JWKS), for this URL and body, in A2A's form.
    for _ in range(50):
        if receiver.received:
            break
        asyncio.run(asyncio.sleep(0.1))
    headers, body = receiver.received[-1]
    assert headers["x-a2a-notification-token"] == "tok-123"
    token = headers["authorization"].split()[1]
    key = jwt.PyJWKClient(f"{stack.api_url}/.well-known/jwks.json").get_signing_key_from_jwt(token)
    claims = jwt.decode(token, key.key, algorithms=["EdDSA"], audience=receiver.url)
    import hashlib

    assert claims["sid"] == done.context_id
    assert claims["body_sha256"] == hashlib.sha256(
        json.dumps(body, separators=(",", ":")).encode()).hexdigest()
    update = ParseDict(body, StreamResponse()).status_update  # valid A2A, strictly parsed
    assert update.task_id == done.id
    assert update.status.state == TaskState.TASK_STATE_COMPLETED
    assert "Booked Alfredo's for 5" in get_message_text(update.status.message)


def test_cancel_a_question_and_a_finished_task_cannot_be_canceled(stack, booking):
    agent_id, _ = booking

    async def exchange():
        client = await client_for(stack, stack.state["api_key"], agent_id)
        task = await send(client, user_message("Book a table at Nino's"))
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(UnsupportedOperationError, match="canceled"):  # not answerable
            await send(client, user_message("4", task_id=task.id))
        # The context goes on: a new task, which runs afresh (no question is pending).
        again = await send(client, user_message("Book a table at Rita's",
                                                context_id=task.context_id))
        return canceled, again

    canceled, again = asyncio.run(exchange())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert again.id != canceled.id and again.context_id == canceled.context_id
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(again.status.message) == "For how many people?"


def test_the_v03_method_names_on_the_same_endpoint(stack):
    url = f"{stack.api_url}/a2a/local/dice"
    auth = {"Authorization": f"Bearer {stack.state['api_key']}"}
    sent = httpx.post(url, headers=auth, timeout=60, json={
        "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
            "kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
            "parts": [{"kind": "text", "text": "Roll 3d8"}]}}}).json()
    task = sent["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    got = httpx.post(url, headers=auth, timeout=60, json={
        "jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}}).json()
    assert got["result"]["id"] == task["id"]
    text = got["result"]["status"]["message"]["parts"][0]["text"]
    assert re.fullmatch(r"You rolled \d \+ \d \+ \d = \d+\.", text)


def test_bad_input_gets_clear_protocol_errors(stack):
    url = f"{stack.api_url}/a2a/local/dice"
    auth = {"Authorization": f"Bearer {stack.state['api_key']}", "A2A-Version": "1.0"}

    def rpc(body, headers=auth):
        return httpx.post(url, headers=headers, content=body, timeout=60,
                          )

    assert rpc("{garbage").json()["error"]["code"] == -32700
    assert rpc(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "nope"})).json()["error"][
        "code"] == -32601
    assert rpc(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                           "params": {"id": 5}})).json()["error"]["code"] == -32602
    too_long = rpc(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": "m1",
                    "parts": [{"text": "x" * 20_000}]}}})).json()["error"]
    assert too_long["code"] == -32602 and "16000" in too_long["message"]
    huge = rpc("x" * (5 * 1024 * 1024))
    assert huge.status_code == 413
    no_key = httpx.post(url, json={"jsonrpc": "2.0", "id": 4, "method": "GetTask",
                                   "params": {"id": "x"}})
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "UNAUTHENTICATED"
    unknown = httpx.post(f"{stack.api_url}/a2a/local/nobody", headers=auth, json={})
    assert unknown.status_code == 404
    missing = rpc(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "GetTask",
                              "params": {"id": "no-such-task"}})).json()["error"]
    assert missing["code"] == -32001
    assert "Traceback" not in json.dumps(missing)


def test_a_notification_is_not_answered_and_runs_nothing(stack):
    """A request without an id is a JSON-RPC notification, which a server must not
    answer: a2a-sdk's dispatcher answered it, and ran its message through the agent."""
    _, key = new_account(stack, "notifier")
    auth = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    for method, message in (
            ("SendMessage", {"role": "ROLE_USER", "messageId": str(uuid.uuid4()),
                             "parts": [{"text": "Roll a d20"}]}),
            ("message/send", {"kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
                              "parts": [{"kind": "text", "text": "Roll a d6"}]})):
        r = httpx.post(f"{stack.api_url}/a2a/local/dice", headers=auth, timeout=60, json={
            "jsonrpc": "2.0", "method": method, "params": {"message": message}})
        assert (r.status_code, r.content) == (204, b""), r.text
    sessions = httpx.post(f"{stack.api_url}/graphql", headers=auth, timeout=30,
                          json={"query": "{ allSessions { handle } }"}).json()
    assert sessions == {"data": {"allSessions": []}}
    # Not a notification, nor a request: Invalid Request, as ever.
    for body in ({}, {"jsonrpc": "2.0"}, {"jsonrpc": "1.0", "method": "message/send"},
                 {"jsonrpc": "2.0", "method": 5}):
        r = httpx.post(f"{stack.api_url}/a2a/local/dice", headers=auth, timeout=60, json=body)
        assert r.json()["error"]["code"] == -32600, (body, r.text)


def test_another_users_task_is_not_found_nor_its_context_usable(stack):
    async def exchange():
        mine = await send(await client_for(stack, stack.state["api_key"], "local/dice"),
                          user_message("Roll 1d6"))
        other = await client_for(stack, new_account(stack, "a2aother")[1], "local/dice")
        theirs = await send(other, user_message("Roll 1d8"))
        before = stack.services.sessions.all_messages(mine.context_id)
        query = mine.id.rpartition(".")[2]
        # Its id, and ids forged from its context or its first message and their own.
        for task_id in (mine.id, f"{mine.context_id}.{theirs.id.rpartition('.')[2]}",
                        f"{theirs.context_id}.{query}", mine.context_id):
            with pytest.raises(TaskNotFoundError):
                await other.get_task(GetTaskRequest(id=task_id))
            with pytest.raises(TaskNotFoundError):
                await other.cancel_task(CancelTaskRequest(id=task_id))
        with pytest.raises(TaskNotFoundError):  # nor continue it
            await send(other, user_message("Roll 1d4", task_id=mine.id))
        with pytest.raises(InvalidParamsError, match="none of your contexts"):  # nor its context
            await send(other, user_message("Roll 1d4", context_id=mine.context_id))
        return mine, before

    mine, before = asyncio.run(exchange())
    assert stack.services.sessions.all_messages(mine.context_id) == before


def test_a_finished_task_takes_no_message_and_a_follow_up_is_a_new_task_in_its_context(stack):
    """A2A's tasks are immutable once finished: a message naming one is refused (and
    writes nothing); the next turn is sent with the contextId and is a task of its own."""
    user, key = new_account(stack, "a2aturns")
    services = stack.services

    async def exchange():
        client = await client_for(stack, key, "local/dice")
        first = await send(client, user_message("Roll a d20"))
        before = services.sessions.all_messages(first.context_id)
        for context_id in (first.context_id, ""):
            with pytest.raises(UnsupportedOperationError, match="completed"):
                await send(client, user_message("Roll a d6", task_id=first.id,
                                                context_id=context_id))
        legacy = httpx.post(f"{stack.api_url}/a2a/local/dice", timeout=60,
                            headers={"Authorization": f"Bearer {key}"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
                "kind": "message", "role": "user", "messageId": str(uuid.uuid4()),
                "taskId": first.id, "parts": [{"kind": "text", "text": "Roll a d4"}]}}})
        refused = services.sessions.all_messages(first.context_id)
        charged = services.usage.used("query", user.user_id)
        follow = await send(client, user_message("Roll 2d6", context_id=first.context_id))
        got = await client.get_task(GetTaskRequest(id=follow.id))
        again = await client.get_task(GetTaskRequest(id=first.id))
        return first, before, legacy.json(), refused, charged, follow, got, again

    first, before, legacy, refused, charged, follow, got, again = asyncio.run(exchange())
    assert legacy["error"]["code"] == -32004, legacy  # A2A 0.3's method, the same error
    assert refused == before and charged == 1  # nothing stored, charged or queued
    assert follow.context_id == first.context_id and follow.id != first.id
    assert follow.status.state == TaskState.TASK_STATE_COMPLETED
    assert re.fullmatch(r"You rolled \d \+ \d = \d+\.", get_message_text(follow.status.message))

    def asked(task):
        return [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER]

    assert asked(got) == ["Roll 2d6"] and {m.task_id for m in got.history} == {follow.id}
    assert len(got.artifacts) == 1
    assert asked(again) == ["Roll a d20"] and again.status.state == TaskState.TASK_STATE_COMPLETED
    assert [a.artifact_id for a in again.artifacts] != [a.artifact_id for a in got.artifacts]


@pytest.mark.parametrize(("field", "value"), [
    ("token", "café€"),  # no header can carry it: the runner's push raised
    ("token", "t" * 420_000),  # past DynamoDB's item: -32603 after the session was made
    ("id", "i" * 300_000),  # stored on the session: every later read paid for it
])
def test_a_push_config_that_cannot_be_kept_or_sent_is_refused_and_makes_nothing(
        stack, field, value):
    _, key = new_account(stack, f"a2apush{field}")
    url = f"{stack.api_url}/a2a/local/dice"
    auth = {"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}
    push = {"url": f"{stack.api_url}/healthz", field: value}
    sent = httpx.post(url, headers=auth, timeout=60, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"role": "ROLE_USER", "messageId": "p1", "parts": [{"text": "Roll"}]},
            "configuration": {"taskPushNotificationConfig": push}}}).json()
    assert sent["error"]["code"] == -32602 and field in sent["error"]["message"], sent
    listed = httpx.post(f"{stack.api_url}/graphql", headers=auth, timeout=30, json={
        "query": "{ allSessions { handle } }"}).json()
    assert listed == {"data": {"allSessions": []}}, listed
