"""Deleting a session: a small one in the request; a large one (a long-lived chat's
thousands of messages and traces) is gone for its owner at once, the rest of its items
deleted by the runner a bounded part at a time, where it would have outlasted the
API's 29 s."""

import pytest

from codeshot import ids
from codeshot.errors import NotFound
from codeshot.models import Message, MessageType, Principal
from codeshot.runner import session_runner
from codeshot.store import sessions as store
from codeshot.usecases.sessions import create_session, delete_session, list_sessions
from tests.runner.conftest import run_queue

OWNER = Principal(user_id="u-alice", username="alice")


def session_with(services, messages: int) -> str:
    session_id = create_session(services, OWNER).session_id
    for n in range(messages):
        services.sessions.add_message(Message(
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
