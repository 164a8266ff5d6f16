"""A2A against the API alone (no runner: a task stays working), driven by the a2a-sdk
client where it can say it and by raw JSON-RPC where the test is the wire: refused input
writes nothing, a retried message is one task, ListTasks pages every task, error codes,
streams, and cards a 0.3 client reads."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.compat.v0_3 import types as v03
from a2a.types import (
    AgentCard,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import ParseDict

from codeshot import ids
from codeshot.models import Message as Message_
from codeshot.models import MessageType, Session, SessionStatus
from codeshot.store.usage import Window
from codeshot.usecases import tasks
from codeshot.usecases.messaging import Messaging
from codeshot.usecases.sessions import create_session
from codeshot.usecases.users import create_user, principal_of
from tests.store_helpers import add_message, get_state, put_state, set_status

PLANNER = "platform/planner"


@pytest.fixture
def user(platform):
    """A new user of the platform: (user, API key)."""
    return create_user(platform.services, f"a2a{uuid.uuid4().hex[:8]}")


def rpc(platform, key: str, method: str, params: dict, path: str = PLANNER) -> dict:
    return httpx.post(f"{platform.url}/a2a/{path}", timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"}).json()


def send_params(text: str, message_id: str = "", task_id: str = "", **config) -> dict:
    message = {"messageId": message_id or str(uuid.uuid4()), "role": "ROLE_USER",
               "parts": [{"text": text}], **({"taskId": task_id} if task_id else {})}
    return {"message": message, "configuration": {"returnImmediately": True, **config}}


def error_of(response: dict) -> tuple[int, dict]:
    """A JSON-RPC error's code and its codeshot data (ErrorInfo's metadata)."""
    error = response["error"]
    return error["code"], error["data"][0]["metadata"]


def client_for(platform, key: str, path: str = PLANNER, streaming: bool = False):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
    return factory.create_from_url(f"{platform.url}/a2a/{path}")


def message(text: str, message_id: str | None = None) -> Message:
    return Message(role=Role.ROLE_USER, message_id=message_id or str(uuid.uuid4()),
                   parts=[Part(text=text)])


async def send(client, sent: Message):
    request = SendMessageRequest(message=sent, configuration=SendMessageConfiguration(
        return_immediately=True))
    return [r.task async for r in client.send_message(request)][-1]


@pytest.mark.settings(daily_query_limit=1)
def test_refused_messages_make_no_task_charge_nothing_and_store_no_push_config(platform,
                                                                             user):
    owner, key = user
    services = platform.services
    refused = [rpc(platform, key, "SendMessage", params) for params in (
        send_params("hi\u0000there"), send_params("   "),
        send_params("hello", taskPushNotificationConfig={"url": "http://10.0.0.1/x"}))]
    assert [error_of(r) for r in refused] == [(-32602, {"code": "INVALID_INPUT"})] * 3
    assert services.sessions.count_by_owner(owner.user_id) == 0
    assert services.usage.used("session", owner.user_id) == 0
    # A refused message to an existing task stores none of its push config.
    task = rpc(platform, key, "SendMessage", send_params("hello"))["result"]["task"]
    bad = rpc(platform, key, "SendMessage", send_params(
        "bad\u0000text", task_id=task["id"],
        taskPushNotificationConfig={"url": "http://127.0.0.1:9/hook", "token": "t"}))
    assert error_of(bad)[0] == -32602
    configs = rpc(platform, key, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert configs["result"].get("configs", []) == []
    # A used-up quota: RATE_LIMITED in A2A's server range, when it resets; no new task.
    limited = rpc(platform, key, "SendMessage", send_params("hello again"))
    code, data = error_of(limited)
    assert code == -32029 and data["code"] == "RATE_LIMITED"
    assert data["resets_at"] == Window.of("day", services.usage.clock()).end.isoformat()
    assert services.sessions.count_by_owner(owner.user_id) == 1
    assert services.usage.used("session", owner.user_id) == 1


def test_a_message_id_sent_again_with_other_text_leaves_the_push_config_alone(platform,
                                                                              user):
    """Refused for its used messageId, the message still replaced its task's push config
    (stored before the post): another URL and token got the task's answers."""
    _, key = user
    push = {"url": "http://127.0.0.1:9/evil", "token": "stolen"}
    task = rpc(platform, key, "SendMessage", send_params("hello", "m1"))["result"]["task"]
    in_context = send_params("other", "m1", taskPushNotificationConfig=push)
    in_context["message"]["contextId"] = task["contextId"]
    for message in (send_params("other", "m1", task_id=task["id"],
                                taskPushNotificationConfig=push),
                    in_context, send_params("other", "m1", taskPushNotificationConfig=push)):
        assert error_of(rpc(platform, key, "SendMessage", message))[0] == -32602
    configs = rpc(platform, key, "ListTaskPushNotificationConfigs", {"taskId": task["id"]})
    assert configs["result"].get("configs", []) == [], configs


def test_a_retried_message_is_the_same_task_charged_once_even_while_in_flight(platform,
                                                                             user):
    owner, key = user
    services = platform.services

    async def exchange():
        client = await client_for(platform, key)
        again = message("Roll a d20")
        first = await send(client, again)
        retried = await send(client, again)
        racing = message("Roll a d6")  # a retry sent while the first is still posting
        both = await asyncio.gather(send(client, racing), send(client, racing))
        return again.message_id, first, retried, both

    message_id, first, retried, both = asyncio.run(exchange())
    assert first.id == retried.id
    assert both[0].id == both[1].id != first.id
    assert services.sessions.count_by_owner(owner.user_id) == 2
    assert services.usage.used("session", owner.user_id) == 2
    assert services.usage.used("query", owner.user_id) == 2
    for task in (first, both[0]):
        assert [m.type.value for m in services.sessions.all_messages(task.context_id)
                ] == ["query"]
    # The same messageId with other text is a mistake the client hears about, as input.
    other = rpc(platform, key, "SendMessage", {"message": {
        "messageId": message_id, "role": "ROLE_USER", "taskId": first.id,
        "parts": [{"text": "something else"}]}})
    assert error_of(other) == (-32602, {"code": "INVALID_INPUT"})
    assert "idempotencyKey" in other["error"]["message"]


def stored(services, session_id: str, *steps: tuple[MessageType, str | None]) -> list[str]:
    """Messages written to a session as a runner and its user would have: (type, the
    index of the message it replies to, or None); returns their ids."""
    made: list[str] = []
    for kind, reply_to in steps:
        made.append(ids.ulid())
        add_message(services.sessions, Message_(
            session_id=session_id, message_id=made[-1], text=f"{kind.value} {len(made)}",
            type=kind, in_reply_to=made[int(reply_to)] if reply_to is not None else None))
    return made


def test_list_tasks_pages_every_task_of_the_caller_and_refuses_bad_input(platform, user):
    """Without a contextId, ListTasks showed each context's newest task only: a context's
    earlier tasks were listed nowhere but under its contextId."""
    owner, key = user
    services, principal = platform.services, principal_of(owner)
    q, r = MessageType.QUERY, MessageType.RESPONSE
    mine = []  # newest first: contexts newest first, each one's tasks newest first
    for n in range(25):
        session_id = create_session(services, principal).session_id
        done = [step for i in range(n % 3) for step in ((q, None), (r, 2 * i))]
        made = stored(services, session_id, *done, (q, None))
        mine = [f"{session_id}.{made[i]}" for i in range(len(made) - 1, -1, -2)] + mine
        if n == 20:
            create_session(services, principal)  # a context without a task yet lists none
    for n in range(5):  # sessions with another agent are not this endpoint's tasks
        services.sessions.create(Session(session_id=f"other{n}{uuid.uuid4().hex[:6]}",
                                         owner=owner.user_id, frontend_agent_id="x/y"))
    other, other_key = create_user(services, f"a2a{uuid.uuid4().hex[:8]}")
    theirs = create_session(services, principal_of(other)).session_id
    stored(services, theirs, (q, None))

    async def listing(key: str, size: int, **more):
        client = await client_for(platform, key)
        pages, token = [], ""
        while True:
            page = await client.list_tasks(ListTasksRequest(page_size=size, page_token=token,
                                                            **more))
            pages.append(page)
            token = page.next_page_token
            if not token or len(pages) > 20:
                return pages

    pages = asyncio.run(listing(key, 10))
    assert [t.id for page in pages for t in page.tasks] == mine
    assert len(mine) == 49 and len(pages) == 5
    working, completed = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED
    assert [t.status.state for t in pages[0].tasks[:4]] == [working, working, completed,
                                                             completed]
    assert pages[0].total_size == 11 and pages[-1].total_size == len(pages[-1].tasks)
    with_history = asyncio.run(listing(key, 7, history_length=1, include_artifacts=True))
    assert [t.id for page in with_history for t in page.tasks] == mine
    done = with_history[0].tasks[2]
    assert [len(done.history), len(done.artifacts)] == [1, 1]
    assert [t.id for page in asyncio.run(listing(other_key, 10)) for t in page.tasks] == [
        f"{theirs}.{services.sessions.newest_messages(theirs, 1)[0].message_id}"]
    for bad in ({"pageToken": "garbage"}, {"pageToken": mine[3].replace(".", "x")},
                {"pageToken": f"{theirs}."}, {"pageToken": f"{theirs}.{ids.ulid()}"},
                {"pageSize": 101}, {"pageSize": -1},
                {"historyLength": -1}, {"status": "TASK_STATE_COMPLETED"},
                {"contextId": mine[0].split(".")[0], "pageToken": "garbage"}):
        assert rpc(platform, key, "ListTasks", bad)["error"]["code"] == -32602, bad
    assert rpc(platform, key, "GetTask", {"id": mine[0], "historyLength": -1})["error"][
        "code"] == -32602


def test_a_page_of_the_callers_tasks_reads_a_bounded_number_of_contexts(platform, user):
    """Each context costs a read even with no task: a page walks at most
    ``tasks.LISTED_CONTEXTS`` of them, then comes short with a token to go on."""
    owner, key = user
    services, principal = platform.services, principal_of(owner)
    oldest = create_session(services, principal).session_id
    first, = stored(services, oldest, (MessageType.QUERY, None))
    for _ in range(2 * tasks.LISTED_CONTEXTS + 5):
        create_session(services, principal)
    calls: list[str] = []
    services.sessions.db.meta.events.register(
        "before-call.dynamodb", lambda model, **kw: calls.append(model.name))
    pages, token = [], ""
    while True:
        calls.clear()
        page = rpc(platform, key, "ListTasks", {"pageSize": 5, "pageToken": token})["result"]
        pages.append(([t["id"] for t in page.get("tasks", [])], len(calls)))
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert [listed for listed, _ in pages] == [[], [], [f"{oldest}.{first}"]]
    assert max(read for _, read in pages) <= tasks.LISTED_CONTEXTS + 10, pages


def test_a_task_of_too_many_questions_does_not_stop_the_listing_of_the_callers_tasks(
        platform, user):
    """Where a task of more than ``tasks.TASK_TURNS`` questions began is not read: every
    page reaching its context was refused (no token to go on), so no older context was
    ever listed. It, and the tasks before it in its context, are skipped instead."""
    owner, key = user
    services, principal = platform.services, principal_of(owner)
    q, a, r = MessageType.QUERY, MessageType.AWAITING_INPUT, MessageType.RESPONSE
    oldest = create_session(services, principal).session_id
    old = stored(services, oldest, (q, None), (r, 0))
    long = create_session(services, principal).session_id
    asking = [step for n in range(tasks.TASK_TURNS + 1) for step in ((q, None), (a, 2 * n))]
    made = stored(services, long, *asking, (MessageType.ERROR, 2 * tasks.TASK_TURNS + 1),
                  (q, None), (r, 2 * tasks.TASK_TURNS + 3))  # canceled, then a new task
    newest = create_session(services, principal).session_id
    new = stored(services, newest, (q, None))

    async def listing():
        client = await client_for(platform, key)
        pages, token = [], ""
        while len(pages) < 5:
            page = await client.list_tasks(ListTasksRequest(page_size=5, page_token=token))
            pages.append([t.id for t in page.tasks])
            if not (token := page.next_page_token):
                return pages
        return pages

    listed = [task for page in asyncio.run(listing()) for task in page]
    assert listed == [f"{newest}.{new[0]}", f"{long}.{made[-2]}", f"{oldest}.{old[0]}"]
    # Its context's own listing still refuses it, as the README says.
    in_context = rpc(platform, key, "ListTasks", {"contextId": long, "pageSize": 1})["result"]
    assert [t["id"] for t in in_context["tasks"]] == [f"{long}.{made[-2]}"]
    refused = rpc(platform, key, "ListTasks", {"contextId": long,
                                               "pageToken": in_context["nextPageToken"]})
    assert refused["error"]["code"] == -32602
    assert "more than 100 questions" in refused["error"]["message"]


def test_a_contexts_tasks_are_its_turns_a_question_and_its_answer_one_task(platform, user):
    owner, key = user
    services = platform.services
    context = create_session(services, principal_of(owner)).session_id
    q, r, a = MessageType.QUERY, MessageType.RESPONSE, MessageType.AWAITING_INPUT
    made = stored(services, context, (q, None), (MessageType.THOUGHT, 0), (r, 0),  # done
                  (q, None), (a, 3), (q, None), (r, 5),  # asked, answered: one task
                  (q, None))  # still working
    first, asked, working = (f"{context}.{made[n]}" for n in (0, 3, 7))
    listed = rpc(platform, key, "ListTasks", {"contextId": context, "pageSize": 2,
                                              "historyLength": 10})["result"]
    assert [t["id"] for t in listed["tasks"]] == [working, asked]
    assert listed["totalSize"] == 3
    rest = rpc(platform, key, "ListTasks", {"contextId": context,
                                            "pageToken": listed["nextPageToken"]})["result"]
    assert [t["id"] for t in rest["tasks"]] == [first] and rest["nextPageToken"] == ""
    answered = listed["tasks"][1]
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["messageId"] for m in answered["history"]] == made[3:7]
    assert {m["taskId"] for m in answered["history"]} == {asked}
    got = rpc(platform, key, "GetTask", {"id": first})["result"]
    assert [m["messageId"] for m in got["history"]] == made[:3]
    assert got["status"]["state"] == "TASK_STATE_COMPLETED" and got["contextId"] == context
    with_artifacts = rpc(platform, key, "ListTasks", {"contextId": context,
                                                      "includeArtifacts": True})["result"]
    assert [len(t.get("artifacts", [])) for t in with_artifacts["tasks"]] == [0, 1, 1]
    assert rpc(platform, key, "ListTasks", {"contextId": "nope"})["result"].get(
        "tasks", []) == []
    # Not a task: a step's id, the answer to its question, a bare context, malformed ids.
    for wrong in (f"{context}.{made[1]}", f"{context}.{made[5]}", context, f"{context}.x",
                  f"{context}.{ids.ulid()}", f".{made[0]}"):
        assert rpc(platform, key, "GetTask", {"id": wrong})["error"]["code"] == -32001, wrong


@pytest.mark.settings(reply_wait_seconds=3.0)
def test_a_stream_polls_with_backoff_and_ends_with_the_current_status(platform, user):
    _, key = user
    services = platform.services
    task = rpc(platform, key, "SendMessage", send_params("Roll a d20"))["result"]["task"]
    queries = []
    services.sessions.db.meta.events.register(
        "before-call.dynamodb.Query", lambda **kw: queries.append(kw["params"]))

    async def subscribe():
        client = await client_for(platform, key, streaming=True)
        return [e async for e in client.subscribe(SubscribeToTaskRequest(id=task["id"]))]

    events = asyncio.run(subscribe())
    # Polled at 0.4 s rising to 1 s for the 3 s reply wait: 5 reads, and one for the task.
    assert len(queries) <= 7
    assert [e.WhichOneof("payload") for e in events] == ["task", "status_update"]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_WORKING


def test_cards_a_03_client_reads_and_the_planner_without_agents(platform, user):
    _, key = user
    card = httpx.get(f"{platform.url}/.well-known/agent-card.json").json()
    legacy = v03.AgentCard.model_validate(card)  # the 0.3 schema, strictly
    assert legacy.url == f"{platform.url}/a2a/{PLANNER}"
    assert (legacy.protocol_version, legacy.preferred_transport) == ("0.3", "JSONRPC")
    assert [s.id for s in legacy.skills] == ["ask"]  # no agents yet: one skill still

    async def as_03_client():
        parsed = ParseDict(card, AgentCard(), ignore_unknown_fields=True)
        only_03 = [i for i in parsed.supported_interfaces if i.protocol_version == "0.3"]
        del parsed.supported_interfaces[:]
        parsed.supported_interfaces.extend(only_03)
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(parsed)
        assert type(client._transport).__name__ == "CompatJsonRpcTransport"  # speaks 0.3
        return await send(client, message("hello"))

    task = asyncio.run(as_03_client())
    assert task.status.state == TaskState.TASK_STATE_WORKING


def test_a_finished_or_working_task_and_a_busy_or_unknown_context_take_no_message(
        platform, user, monkeypatch):
    """Only a task waiting for input takes a message; a context takes a new task once its
    newest is over; a context that is not the caller's is refused: none stores, charges
    or queues anything."""
    owner, key = user
    services = platform.services
    task = rpc(platform, key, "SendMessage", send_params("Roll a d20"))["result"]["task"]
    context = task["contextId"]
    other_context = create_session(services, principal_of(owner)).session_id
    done = create_session(services, principal_of(owner)).session_id
    answered = stored(services, done, (MessageType.QUERY, None), (MessageType.RESPONSE, 0))
    failed = stored(services, done, (MessageType.QUERY, None), (MessageType.ERROR, 0))
    _, stranger = create_user(services, f"a2a{uuid.uuid4().hex[:8]}")
    strangers = rpc(platform, stranger, "SendMessage", send_params("hi"))["result"]["task"]
    queued: list = []
    monkeypatch.setattr(services.queue, "enqueue", lambda work, again=False: queued.append(work))

    def with_context(context_id: str, task_id: str = "") -> dict:
        params = send_params("Roll a d6", task_id=task_id)
        params["message"]["contextId"] = context_id
        return params

    refused = [
        (send_params("Roll a d6", task_id=f"{done}.{answered[0]}"), -32004, "is completed"),
        (send_params("Roll a d6", task_id=f"{done}.{failed[0]}"), -32004, "is failed"),
        (with_context(done, f"{done}.{answered[0]}"), -32004, "cannot be continued"),
        (send_params("Roll a d6", task_id=task["id"]), -32004, "still working"),
        (with_context(context), -32004, "still working"),
        (with_context("nope"), -32602, "none of your contexts"),
        (with_context(strangers["contextId"]), -32602, "none of your contexts"),
        (with_context(other_context, task["id"]), -32602, "not the context of that task"),
        (send_params("Roll a d6", task_id=strangers["id"]), -32001, "not found"),
        (send_params("Roll a d6", task_id=context), -32001, "not found"),
    ]
    for params, code, says in refused:
        error = rpc(platform, key, "SendMessage", params)["error"]
        assert (error["code"], says in error["message"]) == (code, True), error
    assert [m.text for m in services.sessions.all_messages(context)] == ["Roll a d20"]
    assert services.sessions.all_messages(other_context) == []
    assert [m.message_id for m in services.sessions.all_messages(done)] == answered + failed
    assert queued == []
    assert services.usage.used("query", owner.user_id) == 1
    assert services.sessions.count_by_owner(owner.user_id) == 3


def test_a_finished_task_cannot_be_subscribed_to(platform, user):
    owner, key = user
    context = create_session(platform.services, principal_of(owner)).session_id
    made = stored(platform.services, context, (MessageType.QUERY, None),
                  (MessageType.RESPONSE, 0))

    async def subscribe():
        client = await client_for(platform, key, streaming=True)
        return [e async for e in client.subscribe(SubscribeToTaskRequest(
            id=f"{context}.{made[0]}"))]

    with pytest.raises(UnsupportedOperationError, match="completed"):
        asyncio.run(subscribe())


def test_two_messages_at_once_to_a_task_or_context_are_one_post_and_one_refusal(
        platform, user, monkeypatch):
    """A message is checked, then posted only if nothing was posted or answered in its
    session since: the second of two answers to a question (or of two new tasks in a
    context) sent at once is refused, not taken as a new turn nobody asked for."""
    owner, key = user
    services = platform.services
    real = Messaging.post

    def racing(self, principal, session_id, text, *args, **kwargs):
        # Another request's post lands between this one's check and its post.
        real(self, principal, session_id, "the other one", idempotency_key=session_id)
        monkeypatch.setattr(Messaging, "post", real)
        return real(self, principal, session_id, text, *args, **kwargs)

    asking = create_session(services, principal_of(owner)).session_id
    asked = stored(services, asking, (MessageType.QUERY, None), (MessageType.AWAITING_INPUT, 0))
    done = create_session(services, principal_of(owner)).session_id
    stored(services, done, (MessageType.QUERY, None), (MessageType.RESPONSE, 0))
    in_context = send_params("4")
    in_context["message"]["contextId"] = done
    for session_id, params in ((asking, send_params("4", task_id=f"{asking}.{asked[0]}")),
                               (done, in_context)):
        monkeypatch.setattr(Messaging, "post", racing)
        error = rpc(platform, key, "SendMessage", params)["error"]
        assert (error["code"], "still working" in error["message"]) == (-32004, True), error
        texts = [m.text for m in services.sessions.all_messages(session_id)]
        assert texts.count("the other one") == 1 and "4" not in texts
    # Unraced, the answer is taken: the task goes on, under its own id.
    answering = create_session(services, principal_of(owner)).session_id
    question = stored(services, answering, (MessageType.QUERY, None),
                      (MessageType.AWAITING_INPUT, 0))
    task = rpc(platform, key, "SendMessage", send_params(
        "4", task_id=f"{answering}.{question[0]}"))["result"]["task"]
    assert (task["id"], task["status"]["state"]) == (f"{answering}.{question[0]}",
                                                     "TASK_STATE_WORKING")


def test_a_context_changed_at_a_whole_second_takes_its_next_task(platform, user):
    """The check that a context is unchanged since it was read compares the time as
    stored: one whose microseconds are zero is not always "changed"."""
    owner, key = user
    services = platform.services
    context = f"whole{uuid.uuid4().hex[:8]}"
    services.sessions.create(Session(session_id=context, owner=owner.user_id,
                                     modified=datetime(2026, 1, 1, 12, tzinfo=UTC)))
    stored(services, context, (MessageType.QUERY, None), (MessageType.RESPONSE, 0))
    params = send_params("again")
    params["message"]["contextId"] = context
    task = rpc(platform, key, "SendMessage", params)["result"]["task"]
    assert (task["contextId"], task["status"]["state"]) == (context, "TASK_STATE_WORKING")


def test_a_message_refused_after_a_race_leaves_the_push_config_alone(platform, user,
                                                                       monkeypatch):
    """A message's push config is written with its post: the loser of two messages sent
    at once to a context does not replace the winner's config with its own."""
    owner, key = user
    services = platform.services
    done = create_session(services, principal_of(owner)).session_id
    stored(services, done, (MessageType.QUERY, None), (MessageType.RESPONSE, 0))
    services.sessions.set_callback(done, owner.user_id, callback_url="http://127.0.0.1:9/w",
                                   callback_token="winner", callback_id="default",
                                   callback_format="a2a")
    real = Messaging.post

    def racing(self, principal, session_id, text, *args, **kwargs):
        real(self, principal, session_id, "the other one", idempotency_key=session_id)
        monkeypatch.setattr(Messaging, "post", real)
        return real(self, principal, session_id, text, *args, **kwargs)

    monkeypatch.setattr(Messaging, "post", racing)
    params = send_params("4", taskPushNotificationConfig={"url": "http://127.0.0.1:9/l",
                                                          "token": "loser"})
    params["message"]["contextId"] = done
    assert rpc(platform, key, "SendMessage", params)["error"]["code"] == -32004
    session = services.sessions.get(done)
    assert (session.callback_url, session.callback_token) == ("http://127.0.0.1:9/w",
                                                              "winner")


def test_an_answer_that_cannot_be_queued_fails_its_task_and_ends_its_paused_program(
        platform, user, monkeypatch):
    """The task reads failed, and nothing is left to resume: the context's next message
    is a new task that starts afresh, not the paused program's answer."""
    owner, key = user
    services = platform.services
    context = create_session(services, principal_of(owner)).session_id
    asked = stored(services, context, (MessageType.QUERY, None), (MessageType.AWAITING_INPUT, 0))
    # paused on the question, as the runner keeps it (the question named)
    put_state(services.sessions, context, {"program": "x", "state": {}, "task": asked[0]},
              asked[1])
    set_status(services.sessions, context, SessionStatus.AWAITING_INPUT)
    before = services.sessions.get(context).modified
    task = f"{context}.{asked[0]}"

    def down(work, again=False):
        raise RuntimeError("the queue is down")

    monkeypatch.setattr(services.queue, "enqueue", down)
    error = rpc(platform, key, "SendMessage", send_params("4", task_id=task))["error"]
    assert "could not queue" in error["message"]
    assert rpc(platform, key, "GetTask", {"id": task})["result"]["status"]["state"] == \
        "TASK_STATE_FAILED"
    session = services.sessions.get(context)
    assert (session.status, get_state(services.sessions, context)) == (SessionStatus.IDLE, None)
    assert session.modified > before


def test_a_contexts_newest_task_is_named_by_its_first_message_however_long_its_turns(
        platform, user):
    """A task whose question was answered by a turn of more messages than a listing
    reads is still listed (and named busy) by its first message, the id GetTask takes."""
    owner, key = user
    services = platform.services
    context = create_session(services, principal_of(owner)).session_id
    q, a, s = MessageType.QUERY, MessageType.AWAITING_INPUT, MessageType.THOUGHT
    made = stored(services, context, (q, None), (a, 0), (q, None), *[(s, 2)] * 12)
    task = f"{context}.{made[0]}"
    listed = rpc(platform, key, "ListTasks", {"historyLength": 3})["result"]["tasks"]
    assert [(t["id"], t["status"]["state"]) for t in listed] == [(task, "TASK_STATE_WORKING")]
    assert [m["messageId"] for m in listed[0]["history"]] == made[-3:]
    assert rpc(platform, key, "GetTask", {"id": task})["result"]["id"] == task
    follow_up = send_params("next")
    follow_up["message"]["contextId"] = context
    error = rpc(platform, key, "SendMessage", follow_up)["error"]
    assert error["code"] == -32004 and f"task {task} of this context" in error["message"]
    add_message(services.sessions, Message_(session_id=context, message_id=ids.ulid(),
                                            text="done", type=MessageType.RESPONSE,
                                            in_reply_to=made[2]))
    answered = rpc(platform, key, "ListTasks", {"includeArtifacts": True})["result"]["tasks"]
    assert [(t["id"], t["status"]["state"], len(t["artifacts"])) for t in answered] == [
        (task, "TASK_STATE_COMPLETED", 1)]


def _long_turns(services, context: str, *steps: int) -> list[str]:
    """Turns of ``steps`` steps each, answered; returns their user messages' ids."""
    log, queries = [], []
    for count in steps:
        query = ids.ulid()
        queries.append(query)
        log += [Message_(session_id=context, message_id=query, text="q", type=MessageType.QUERY),
                *(Message_(session_id=context, message_id=ids.ulid(), text="step",
                           type=MessageType.THOUGHT, in_reply_to=query) for _ in range(count)),
                Message_(session_id=context, message_id=ids.ulid(), text="a",
                         type=MessageType.RESPONSE, in_reply_to=query)]
    services.sessions.put_messages(log)
    return queries


def test_task_reads_are_bounded_whatever_the_log(platform, user, monkeypatch):
    """No A2A request scans a context's log: DynamoDB bills the items a query scans,
    those a filter drops too."""
    owner, key = user
    services = platform.services
    context = create_session(services, principal_of(owner)).session_id
    queries = _long_turns(services, context, 600, 600, *[0] * 6)
    scanned: list[int] = []
    services.sessions.db.meta.events.register(
        "after-call.dynamodb.Query",
        lambda parsed, **kw: scanned.append(parsed.get("ScannedCount", 0)))

    def cost(method: str, params: dict) -> tuple[dict, int]:
        scanned.clear()
        return rpc(platform, key, method, params)["result"], sum(scanned)

    page, read = cost("ListTasks", {"contextId": context, "pageSize": 1})
    assert [t["id"] for t in page["tasks"]] == [f"{context}.{queries[-1]}"] and read <= 5
    everything, read = cost("ListTasks", {"contextId": context, "historyLength": 1})
    assert [t["id"] for t in everything["tasks"]] == [f"{context}.{q}" for q in queries[::-1]]
    assert [len(t["history"]) for t in everything["tasks"]] == [1] * 8 and read <= 40
    small, read = cost("GetTask", {"id": f"{context}.{queries[2]}"})  # after a long one
    assert len(small["history"]) == 2 and read <= 20
    # A task is read from its first message on, in a bounded number of pages: the
    # context's newest shows its newest messages, an older one is refused.
    monkeypatch.setattr(tasks, "TASK_PAGE", 100)
    monkeypatch.setattr(tasks, "TASK_READS", 2)
    newer = _long_turns(services, context, 600)
    newest, read = cost("GetTask", {"id": f"{context}.{newer[0]}"})
    assert len(newest["history"]) == tasks.SHOWN_MESSAGES and read <= 400
    scanned.clear()
    refused = rpc(platform, key, "GetTask", {"id": f"{context}.{queries[1]}"})["error"]
    assert refused["code"] == -32602 and "more than 200 messages" in refused["message"]
    assert sum(scanned) <= 400


def test_a_message_id_sent_again_to_another_task_is_invalid_input(platform, user,
                                                                  monkeypatch):
    owner, key = user
    services = platform.services
    monkeypatch.setattr(services.queue, "enqueue", lambda work, again=False: None)
    context = create_session(services, principal_of(owner)).session_id
    asked = stored(services, context, (MessageType.QUERY, None), (MessageType.AWAITING_INPUT, 0))
    task = f"{context}.{asked[0]}"
    answer = send_params("4", message_id="answer-1", task_id=task)
    assert rpc(platform, key, "SendMessage", answer)["result"]["task"]["id"] == task
    assert rpc(platform, key, "SendMessage", answer)["result"]["task"]["id"] == task  # retry
    as_new = send_params("4", message_id="answer-1")
    as_new["message"]["contextId"] = context
    assert error_of(rpc(platform, key, "SendMessage", as_new)) == (-32602,
                                                                  {"code": "INVALID_INPUT"})
    done = create_session(services, principal_of(owner)).session_id
    stored(services, done, (MessageType.QUERY, None), (MessageType.RESPONSE, 0))
    new = send_params("again", message_id="new-1")
    new["message"]["contextId"] = done
    began = rpc(platform, key, "SendMessage", new)["result"]["task"]["id"]
    assert rpc(platform, key, "SendMessage", new)["result"]["task"]["id"] == began
    elsewhere = send_params("again", message_id="new-1", task_id=f"{done}.{asked[0]}")
    assert error_of(rpc(platform, key, "SendMessage", elsewhere)) == (
        -32602, {"code": "INVALID_INPUT"})
    assert [m.text for m in services.sessions.all_messages(context)].count("4") == 1
