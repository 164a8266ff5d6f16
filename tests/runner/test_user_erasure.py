"""Deleting a user: their keys are refused at once, and the runner erases their data, a
bounded part per queued message (codeshot/runner/erasure.py), every table read straight
from moto; a redelivered part erases nothing more, and other users' data stays."""

import json
import time
from typing import Any

import pytest

from codeshot.errors import Conflict, InvalidInput, Unauthenticated
from codeshot.models import Agent, Message, Principal, User
from codeshot.runner import erasure
from codeshot.runner.batch import process_batch, record_of
from codeshot.runner.session_runner import SessionRunner
from codeshot.services import Services
from codeshot.store.queue import Work
from codeshot.store.tables import TABLES
from codeshot.usecases import accounts, sessions, user_storage
from codeshot.usecases.registration import AgentFields, AgentRegistration
from codeshot.usecases.users import create_user, principal_of
from tests.runner.conftest import run_queue


def signed_up(services: Services, name: str) -> tuple[User, str, Principal]:
    user, key = create_user(services, name)
    return user, key, services.auth.user_for_api_key(key)


def agent_of(services: Services, owner: Principal, handle: str) -> Agent:
    return AgentRegistration(services, charge=None).create(owner, handle, AgentFields(
        base_prompt="I keep notes.", few_shots=["Q: Remember milk\nA: Noted."]))


def as_agent(services: Services, agent: Agent, user: User) -> Principal:
    return services.auth.principal_for_agent_token(
        services.auth.agent_token(agent.agent_id, user.user_id, None, agent.registration))


def use(services: Services, user: User, me: Principal, agents: list[Agent]) -> None:
    """What a user leaves behind: sessions with messages (one keyed, once), storage and
    an OAuth token with each agent, a day's counters."""
    for n in range(3):
        session = sessions.create_session(services, me, once=f"k{n}" if n == 0 else None)
        for i in range(4):
            services.sessions.add_message(Message(session_id=session.session_id,
                                                  message_id=f"m{n}{i}", text="my secret"))
    for agent in agents:
        caller = as_agent(services, agent, user)
        user_storage.put_value(services, caller, agent.agent_id, "diary", {"of": user.username})
        services.oauth.put_token(user.user_id, agent.agent_id, {"access_token": "t"})
    services.usage.charge("query", user.user_id, 100)


def everything(services: Services) -> dict[str, list[str]]:
    """Every item of every table, as JSON text, read from moto."""
    db = services.users.db
    return {t.logical: sorted(json.dumps(i, sort_keys=True, default=repr) for i in db.scan(
        TableName=getattr(services.settings, t.setting))["Items"]) for t in TABLES}


def holding(items: dict[str, list[str]], *needles: str) -> dict[str, list[str]]:
    found = {table: [i for i in rows if any(n in i for n in needles)]
             for table, rows in items.items()}
    return {table: rows for table, rows in found.items() if rows}


@pytest.fixture
def two_users(services: Services) -> dict[str, Any]:
    alice, alice_key, alice_me = signed_up(services, "alice")
    bob, bob_key, bob_me = signed_up(services, "bob")
    notes, diary = agent_of(services, alice_me, "notes"), agent_of(services, bob_me, "diary")
    use(services, alice, alice_me, [notes, diary])
    use(services, bob, bob_me, [notes, diary])
    run_queue(services)  # nothing queued yet but what creating agents queues
    return {"alice": alice, "alice_key": alice_key, "alice_me": alice_me, "bob": bob,
            "bob_key": bob_key, "notes": notes, "diary": diary}


def test_deleting_an_account_refuses_its_keys_and_erases_its_data_and_only_its(
        services, two_users, monkeypatch):
    monkeypatch.setattr(erasure, "SESSIONS_PART", 2)  # several parts: sessions, then more
    monkeypatch.setattr(erasure, "AGENTS_PART", 1)
    alice, bob = two_users["alice"], two_users["bob"]
    before = everything(services)
    bobs_before = holding(before, bob.user_id)
    assert holding(before, alice.user_id).keys() == {"sessions", "user_storage", "usage",
                                                     "users", "oauth"}

    with pytest.raises(InvalidInput, match="type your username"):
        accounts.delete_account(services, two_users["alice_me"], "alicee")
    assert services.users.get(alice.user_id).deleted is None  # nothing done

    accounts.delete_account(services, two_users["alice_me"], "alice")
    # At once, before any erasure ran: her key is refused, UNAUTHENTICATED.
    with pytest.raises(Unauthenticated, match="deleted") as refused:
        services.auth.user_for_api_key(two_users["alice_key"])
    assert refused.value.code == "UNAUTHENTICATED"
    # So is an agent's call for her in flight (its token lasts minutes): it writes nothing.
    with pytest.raises(Unauthenticated, match="deleted"):
        user_storage.put_value(services, as_agent(services, two_users["diary"], alice),
                               two_users["diary"].agent_id, "late", 1)

    parts = run_queue(services)
    assert parts >= 4  # her agent (and its storage sweep), sessions 2 a part, the rest

    after = everything(services)
    left = holding(after, alice.user_id, "alice/")
    # What is left of her: the tombstone and its username guard (the name stays taken),
    # and her deleted sessions' places in her list (no content; they expire in a week).
    # Her per-minute rate counters with agents (a count each) expire within the day.
    assert all(int(json.loads(i)["expires_at"]["N"]) <= time.time() + 86_400 + 120
               for i in left.pop("usage"))
    assert left.keys() == {"users", "sessions"}
    [tombstone] = [json.loads(i) for i in left["users"] if alice.user_id + '"' in i and
                   '"@alice"' not in i and '"user_id": {"S": "' + alice.user_id in i]
    assert set(tombstone) == {"user_id", "username", "created", "deleted", "disabled"}
    assert all('"DELETED"' in i and "my secret" not in i for i in left["sessions"])
    assert not any("my secret" in i for i in after["sessions"] if alice.user_id in i)
    assert "alice/notes" not in json.dumps(after["registry"])
    # Bob's data is all there, but his storage and token with her agent (gone with it).
    assert holding(after, bob.user_id) == {
        table: [i for i in rows if table not in ("user_storage", "oauth") or
                "alice/notes" not in i] for table, rows in bobs_before.items()}
    assert services.auth.user_for_api_key(two_users["bob_key"]).username == "bob"
    # Nobody gets her name, and with it her agents' ids.
    with pytest.raises(Conflict, match="taken"):
        create_user(services, "alice")


def test_a_redelivered_part_erases_nothing_more(services, two_users):
    alice = two_users["alice"]
    accounts.delete_user(services, "alice")  # an operator's deletion
    [first] = services.queue.receive(wait_seconds=0)
    assert Work.parse(first["Body"]) == Work.erase(alice.user_id)
    runner = SessionRunner(services)
    process_batch({"Records": [record_of(first)]}, runner.handle)
    services.queue.delete(first["ReceiptHandle"])
    run_queue(services)
    done = everything(services)

    # SQS delivers the first part again, and an operator deletes her again: each finds
    # nothing and queues no further part (SQS drops the second deletion's message as a
    # duplicate of the first's; moto delivers it: it is the one part that runs).
    assert process_batch({"Records": [record_of(first)]}, runner.handle) == {
        "batchItemFailures": []}
    assert services.queue.receive(wait_seconds=0) == []
    accounts.delete_user(services, "alice")
    assert run_queue(services) <= 1
    assert everything(services) == done


def test_an_erasure_never_touches_a_live_user(services, two_users):
    """A message naming a user who was not deleted (forged, or a bug) fails: the user's
    data stays."""
    before = everything(services)
    with pytest.raises(RuntimeError, match="not deleted"):
        SessionRunner(services).handle(Work.erase(two_users["bob"].user_id))
    assert everything(services) == before
    assert principal_of(services.users.get(two_users["bob"].user_id)).username == "bob"


def test_a_part_left_unrun_on_its_last_delivery_is_queued_again(services, two_users):
    """Not dead-lettered: nothing waits on it, and the user's data must still go."""
    accounts.delete_user(services, "alice")
    [last] = services.queue.receive(wait_seconds=0)
    services.queue.delete(last["ReceiptHandle"])
    SessionRunner(services).give_up(Work.parse(last["Body"]))
    [again] = services.queue.receive(wait_seconds=0)
    assert Work.parse(again["Body"]) == Work.erase(two_users["alice"].user_id)
