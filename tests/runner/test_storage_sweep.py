"""Deleting (or renaming) an agent deletes every user's storage with it: the deletion
queues a sweep, which the runner does a bounded part at a time, each part queueing the
next; an agent registered again at the id starts empty at once, before any sweep ran."""

import re
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError

from codeshot.errors import NotFound
from codeshot.models import Agent, Principal, User
from codeshot.runner import session_runner
from codeshot.runner.batch import process_batch, record_of
from codeshot.runner.session_runner import SessionRunner
from codeshot.services import Services
from codeshot.store import user_storage as store
from codeshot.store.dynamo import to_item
from codeshot.store.queue import Work
from codeshot.store.tables import SESSION_QUEUE
from codeshot.usecases import user_storage
from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change
from tests.runner.conftest import run_queue

OWNER = Principal(user_id="u-alice", username="alice")


def changes(services: Services) -> AgentRegistration:
    """Registration as a user's GraphQL request makes it."""
    return AgentRegistration(services, charge=daily_agent_change)


def create(services: Services, handle: str, owner: Principal = OWNER) -> Agent:
    return changes(services).create(owner, handle, AgentFields(
        base_prompt="I keep notes.", few_shots=["Q: Remember milk\nA: Noted."]))


def as_agent(services: Services, agent: Agent, user: str) -> Principal:
    """The agent calling the platform for ``user`` (stored, as a user a call is for must
    be) with the token of one of its calls."""
    services.users.db.put_item(TableName=services.users.table_name,
                               Item=to_item(User(user_id=user, username=user).to_dict()))
    return services.auth.principal_for_agent_token(
        services.auth.agent_token(agent.agent_id, user, None, agent.registration))


def put(services: Services, agent: Agent, user: str, key: str, value: object) -> None:
    user_storage.put_value(services, as_agent(services, agent, user), agent.agent_id, key, value)


def get(services: Services, agent: Agent, user: str, key: str) -> str:
    return user_storage.get_value(services, as_agent(services, agent, user), agent.agent_id, key)


def in_table(services: Services, agent_id: str) -> dict[str, str]:
    """Every item users keep with ``agent_id`` in the table, whatever its registration:
    "<user>/<key>" -> the registration that wrote it ("" if none)."""
    items = services.storage.db.scan(TableName=services.settings.user_storage_table)["Items"]
    return {f"{i['scope']['S'].split('#')[0]}/{i['key']['S']}":
            i.get("registration", {"S": ""})["S"].rpartition("#")[2]
            for i in items if i["scope"]["S"].endswith("#" + agent_id)}


def test_deleting_an_agent_deletes_every_users_storage_and_a_new_one_inherits_none(services):
    notes, other = create(services, "notes"), create(services, "other")
    for user in ("u1", "u2"):
        put(services, notes, user, "diary", {"secret": user})
    put(services, other, "u1", "diary", '"another agent\'s"')

    changes(services).delete(OWNER, "alice", "notes")
    again = create(services, "notes")
    # Before any sweep: the deleted registration's values are still in the table, and the
    # new agent of its id neither reads nor lists them, for any user.
    assert set(in_table(services, "alice/notes")) == {"u1/diary", "u1/ ", "u2/diary", "u2/ "}
    for user in ("u1", "u2"):
        assert user_storage.list_keys(services, as_agent(services, again, user),
                                      again.agent_id) == []
        with pytest.raises(NotFound):
            get(services, again, user, "diary")
    put(services, again, "u1", "diary", '"fresh"')

    assert run_queue(services) == 1  # one part: the sweep of the deleted registration
    assert in_table(services, "alice/notes") == {"u1/diary": str(again.registration),
                                                 "u1/ ": str(again.registration)}
    assert get(services, again, "u1", "diary") == '"fresh"'
    assert get(services, other, "u1", "diary") == '"another agent\'s"'


def test_a_sweep_cut_short_resumes_and_finishes_a_bounded_part_at_a_time(services,
                                                                         monkeypatch):
    monkeypatch.setattr(store, "SWEEP_PAGE", 5)
    monkeypatch.setattr(session_runner, "SWEEP_PAGES", 1)
    notes = create(services, "notes")
    for user in range(6):  # 6 users x (2 keys + their count): 18 items
        for key in ("a", "b"):
            put(services, notes, f"u{user}", key, 1)
    changes(services).delete(OWNER, "alice", "notes")
    [message] = services.queue.receive(wait_seconds=0)
    runner = SessionRunner(services)

    delete_item, deletes = services.storage.db.delete_item, []

    def throttled_third(**kwargs):
        deletes.append(kwargs)
        if len(deletes) == 3:
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}},
                              "DeleteItem")
        return delete_item(**kwargs)

    monkeypatch.setattr(services.storage.db, "delete_item", throttled_third)
    failed = process_batch({"Records": [record_of(message)]}, runner.handle)
    assert failed == {"batchItemFailures": [{"itemIdentifier": message["MessageId"]}]}
    assert len(in_table(services, "alice/notes")) == 16  # cut short after two deletes
    # SQS delivers it again: it starts again from what is left, a page of 5, and queues
    # the next part; the parts after it take 5, 5 and the last 1.
    assert process_batch({"Records": [record_of(message)]}, runner.handle) == {
        "batchItemFailures": []}
    assert len(in_table(services, "alice/notes")) == 11
    services.queue.delete(message["ReceiptHandle"])  # done: the group's next may come
    assert run_queue(services) == 3
    assert in_table(services, "alice/notes") == {}


def test_a_sweep_never_deletes_the_storage_of_an_agent_still_registered(services,
                                                                        monkeypatch):
    """The sweep is queued before the registry changes: when the deletion then fails, the
    agent and its users' storage stay; the sweep waits for redeliveries, then is dropped."""
    monkeypatch.setattr(session_runner, "SWEEP_RECHECK_SECONDS", 0)
    notes = create(services, "notes")
    put(services, notes, "u1", "diary", '"kept"')

    def refused(*_args, **_kwargs):
        raise ClientError({"Error": {"Code": "InternalServerError"}}, "DeleteItem")

    monkeypatch.setattr(services.registry, "delete", refused)
    with pytest.raises(ClientError):
        changes(services).delete(OWNER, "alice", "notes")
    [message] = services.queue.receive(wait_seconds=0)
    runner = SessionRunner(services)
    record = record_of(message)
    assert process_batch({"Records": [record]}, runner.handle)["batchItemFailures"]
    last = {**record, "attributes": {**record["attributes"], "ApproximateReceiveCount":
                                     str(SESSION_QUEUE.max_receive_count)}}
    assert process_batch({"Records": [last]}, runner.handle) == {"batchItemFailures": []}
    assert get(services, notes, "u1", "diary") == '"kept"'


def test_a_sweep_arriving_just_before_its_agents_deletion_looks_again_and_sweeps(services,
                                                                              monkeypatch):
    notes = create(services, "notes")
    put(services, notes, "u1", "diary", '"gone soon"')
    registry_delete, pending = services.registry.delete, []
    monkeypatch.setattr(services.registry, "delete",
                        lambda *args, **kwargs: pending.append((args, kwargs)))
    changes(services).delete(OWNER, "alice", "notes")
    # The deletion's registry write lands while the sweep pauses to look again.
    monkeypatch.setattr(session_runner, "time", SimpleNamespace(
        sleep=lambda _seconds: [registry_delete(*a, **kw) for a, kw in pending]))
    assert run_queue(services) == 1
    assert in_table(services, "alice/notes") == {}


def test_renaming_an_agent_sweeps_its_old_ids_storage(services):
    notes = create(services, "notes")
    put(services, notes, "u1", "diary", '"old id"')
    changes(services).update(OWNER, "notes", AgentFields(), new_handle="journal")
    assert run_queue(services) == 1
    assert in_table(services, "alice/notes") == {}
    again = create(services, "notes")
    with pytest.raises(NotFound):
        get(services, again, "u1", "diary")


# SQS's rule for a FIFO message's group and deduplication ids (moto does not check it).
SQS_FIFO_ID = re.compile(r"[!-~]{1,128}")  # 1-128 ASCII letters, digits and punctuation


def test_the_longest_agent_id_is_swept_and_ingested_under_ids_sqs_accepts(services,
                                                                         monkeypatch):
    owner = Principal(user_id="u-long", username="o" * 63)
    notes = create(services, "n" * 63, owner)  # the longest agent id: 127 characters
    put(services, notes, "u1", "diary", '"old"')
    sqs, sent = services.queue.sqs, []
    send = sqs.send_message

    def as_sqs(**kwargs):  # refuses what SQS refuses
        for name in ("MessageGroupId", "MessageDeduplicationId"):
            if not SQS_FIFO_ID.fullmatch(kwargs[name]):
                raise ClientError({"Error": {"Code": "InvalidParameterValue"}}, "SendMessage")
        sent.append(kwargs)
        return send(**kwargs)

    monkeypatch.setattr(sqs, "send_message", as_sqs)
    changes(services).delete(owner, owner.username, notes.handle)
    assert run_queue(services) == 1
    assert in_table(services, notes.agent_id) == {}

    services.queue.enqueue(Work.corpus(notes.agent_id, "v#01KAZ0000000000000000000"))
    [message] = services.queue.receive(wait_seconds=0)
    assert Work.parse(message["Body"]).agent_id == notes.agent_id
    # One group per agent: its sweeps and ingestions each run in order.
    corpus, again = Work.corpus(notes.agent_id, "v#2"), Work.sweep(notes.agent_id, 1)
    assert {w["MessageGroupId"] for w in sent} == {again.group, corpus.group}
    assert Work.corpus("alice/other", "v#2").group != corpus.group
