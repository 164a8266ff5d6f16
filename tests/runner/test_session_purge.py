"""Deleting a session: a small one in the request; a large one (a long-lived chat's
thousands of messages and traces) is gone for its owner at once, the rest of its items
deleted by the runner a bounded part at a time, where it would have outlasted the
API's 29 s."""

import pytest

from codeshot import ids
from codeshot.errors import CodeshotError, NotFound
from codeshot.models import Message, MessageType, Principal
from codeshot.runner import session_runner
from codeshot.store import sessions as store
from codeshot.usecases.sessions import create_session, delete_session, list_sessions
from tests.runner.conftest import run_queue
from tests.store_helpers import add_message, set_status

OWNER = Principal(user_id="u-alice", username="alice")


def session_with(services, messages: int) -> str:
    session_id = create_session(services, OWNER).session_id
    for n in range(messages):
        add_message(services.sessions, Message(
            session_id=session_id, message_id=ids.ulid(), type=MessageType.QUERY,
            text=f"m{n}", sent_by=OWNER.user_id))
    return session_id


def partition(services, session_id: str) -> list[str]:
    return [i["item"]["S"] for i in services.sessions.db.query(
        TableName=services.settings.sessions_table, KeyConditionExpression="session_id = :s",
        ExpressionAttributeValues={":s": {"S": session_id}})["Items"]]


def test_a_large_session_is_gone_at_once_and_purged_by_the_runner(services, monkeypatch):
    monkeypatch.setattr(store, "KEYS_PAGE", 8)
    monkeypatch.setattr(store, "DELETE_PAGES", 1)
    monkeypatch.setattr(session_runner, "PURGE_PAGES", 1)
    kept = session_with(services, 3)
    large = session_with(services, 30)  # 31 items with the session's own

    delete_session(services, OWNER, large)
    with pytest.raises(NotFound):
        services.sessions.get(large, OWNER.user_id)
    assert [s.session_id for s in list_sessions(services, OWNER)] == [kept]
    assert len(partition(services, large)) == 31  # 30 messages and the DELETED marker

    # A read of 8 keys holds the DELETED marker, kept: 7 + 7 + 7 + 7 + 2 messages, the
    # part that found 2 the last.
    assert run_queue(services) == 5
    assert partition(services, large) == [store.DELETED_ITEM]
    assert services.sessions.place(large, OWNER.user_id).session_id == large  # pages on
    assert len(partition(services, kept)) == 4  # another session of the owner's is kept

    # A small session goes in the request; nothing is queued.
    delete_session(services, OWNER, kept)
    assert partition(services, kept) == [store.DELETED_ITEM]
    assert run_queue(services) == 0


def test_a_purge_never_deletes_a_session_that_was_not_deleted(services):
    live = session_with(services, 2)
    with pytest.raises(RuntimeError, match="is not deleted"):
        services.sessions.purge(live, 1)
    assert len(partition(services, live)) == 3


def test_a_purge_given_up_is_queued_again(services, monkeypatch):
    """A purge left untouched to its last delivery (behind a failing record, or when the
    invocation ran out of time) was dropped: the deleted session's items stayed."""
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.store.queue import Work

    monkeypatch.setattr(store, "KEYS_PAGE", 10)
    monkeypatch.setattr(store, "DELETE_PAGES", 1)
    large = session_with(services, 20)
    delete_session(services, OWNER, large)
    [message] = services.queue.receive(wait_seconds=0)
    SessionRunner(services).give_up(Work.parse(message["Body"]))
    services.queue.delete(message["ReceiptHandle"])
    assert run_queue(services) == 1
    assert partition(services, large) == [store.DELETED_ITEM]


def test_a_prompt_id_kept_after_the_session_was_deleted_leaves_nothing(services):
    """A callback's reply that came while its session was deleted wrote the prompt's
    claim back, an item without expiry that nothing would ever delete."""
    session_id = session_with(services, 1)
    assert services.sessions.claim_prompt(session_id, "q1") == (True, None)
    delete_session(services, OWNER, session_id)
    with pytest.raises(NotFound):
        services.sessions.keep_prompt_id(session_id, "q1", "p-1")
    assert partition(services, session_id) == [store.DELETED_ITEM]


def deletion_begun(services, session_id: str):
    """Begin deleting the session as ``deleteSession`` does (its DELETED place written, the
    keys it will delete read) and stop there, where a write racing it lands; the function
    that finishes the deletion."""
    pending = []
    real = services.sessions._delete_keys
    services.sessions._delete_keys = pending.append
    try:
        delete_session(services, OWNER, session_id)
    finally:
        services.sessions._delete_keys = real
    return lambda: real(*pending)


def test_a_post_racing_the_deletion_is_refused_and_leaves_nothing(services):
    """The post's transaction checked only that the SESSION item existed, which goes last:
    the message (and its idempotency key) stayed for the TTL, or for ever."""
    from codeshot.usecases.messaging import Messaging

    session_id = session_with(services, 1)
    finish = deletion_begun(services, session_id)
    with pytest.raises(NotFound):
        Messaging(services).post(OWNER, session_id, "my private text", idempotency_key="k1")
    finish()
    assert partition(services, session_id) == [store.DELETED_ITEM]
    assert services.usage.used("query", OWNER.user_id) == 0  # nor charged


def test_a_message_that_could_not_be_queued_leaves_no_error_in_a_deleted_session(
        services, monkeypatch):
    """The queue failed while the owner deleted the session: the error closing the query
    was written behind the deletion."""
    from codeshot.usecases.messaging import Messaging

    session_id = session_with(services, 0)
    finishes = []

    def queue_down(work, again=False):
        finishes.append(deletion_begun(services, session_id))
        raise ConnectionError("the queue is down")

    monkeypatch.setattr(services.queue, "enqueue", queue_down)
    with pytest.raises(CodeshotError) as refused:
        Messaging(services).post(OWNER, session_id, "hello")
    finishes[0]()
    assert partition(services, session_id) == [store.DELETED_ITEM]
    assert refused.value.code == NotFound.code  # as for any post to a session gone


@pytest.mark.parametrize("transaction_items", [session_runner.TRANSACTION_ITEMS, 1])
def test_a_reply_racing_the_deletion_leaves_nothing(services, monkeypatch, transaction_items):
    """The runner's reply and its answer marker landed behind the deletion, and so did a
    trace too long for the reply's transaction (here: any), written ahead of it."""
    from codeshot.usecases.messaging import Messaging

    monkeypatch.setattr(session_runner, "TRANSACTION_ITEMS", transaction_items)
    session_id = session_with(services, 0)
    Messaging(services).post(OWNER, session_id, "Roll 1d20")
    finish = deletion_begun(services, session_id)
    assert run_queue(services) == 1  # answered: a thought, then the reply
    finish()
    assert partition(services, session_id) == [store.DELETED_ITEM]


def test_a_long_trace_is_written_whole_in_parts(services):
    session_id = session_with(services, 0)
    trace = [Message(session_id=session_id, message_id=ids.ulid(), type=MessageType.THOUGHT,
                     text="x" * 100_000, sent_by="planner") for _ in range(120)]
    services.sessions.put_messages(trace)  # 12 MB: four transactions
    assert [m.message_id for m in services.sessions.all_messages(session_id)] == \
        [m.message_id for m in trace]


def test_a_prompt_racing_its_tasks_deletion_is_never_asked(services):
    """The prompt's claim, an unconditional put, landed behind the deletion, and the
    prompt was POSTed to the deleted task's callback."""
    from fastapi import FastAPI, Request

    from codeshot.local.http_server import HttpServer
    from codeshot.models import SessionStatus
    from codeshot.runner.callbacks import PROMPT_FORMAT
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    asked = []
    app = FastAPI()

    @app.post("/prompts")
    async def prompt(request: Request):
        asked.append(await request.json())
        return {"status": "pending", "prompt_id": "p-1"}

    server = HttpServer(app, "127.0.0.1", 0)
    try:
        session_id = create_session(services, OWNER, callback_url=f"{server.start()}/prompts",
                                    callback_format=PROMPT_FORMAT).session_id
        question = Message(session_id=session_id, message_id=ids.ulid(), sent_by="booking",
                           type=MessageType.AWAITING_INPUT, text="For how many people?")
        add_message(services.sessions, question)
        set_status(services.sessions, session_id, SessionStatus.AWAITING_INPUT)
        finish = deletion_begun(services, session_id)
        Prompts(services).handle(PromptWork(session_id, question.message_id, 10**10))
        finish()
    finally:
        server.stop()
    assert asked == []
    assert partition(services, session_id) == [store.DELETED_ITEM]


def test_an_embed_or_an_ended_question_racing_the_deletion_leaves_nothing(services):
    """An Agent Protocol artifact bound, or a question ended (declined, timed out), while
    the session was deleted."""
    from codeshot.errors import Conflict
    from codeshot.models import Embed, SessionStatus

    session_id = session_with(services, 0)
    set_status(services.sessions, session_id, SessionStatus.AWAITING_INPUT)
    finish = deletion_begun(services, session_id)
    with pytest.raises(NotFound):
        services.sessions.bind_embed(Embed(key="a.txt", session_id=session_id,
                                           owner=OWNER.user_id, content_type="text/plain",
                                           content_hash="0" * 64, size=1))
    with pytest.raises(Conflict):  # as for a session gone: not waiting for input
        services.sessions.end_pause(Message(
            session_id=session_id, message_id=ids.ulid(), type=MessageType.ERROR,
            text="declined", sent_by="platform"))
    finish()
    assert partition(services, session_id) == [store.DELETED_ITEM]
