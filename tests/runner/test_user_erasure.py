"""Deleting a user: every credential refused at once; their data erased by the eraser, a
bounded part a message on its own queue, once every credential they held has run out;
another user's data untouched, bytes another user's embed holds kept (bytes two users
erased at once held, deleted whatever the interleaving of their erasures); a part
delivered twice counted once, the chain of parts never stopped by it; a part failing on
every delivery left in the dead-letter queue."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from botocore.exceptions import ClientError

from codeshot import cli, ids
from codeshot.errors import InvalidInput, NotFound, Unauthenticated, UserDeleted
from codeshot.models import Agent, EmbedRef, Message, MessageType, Principal, User
from codeshot.runner.batch import record_of
from codeshot.runner.session_runner import SessionRunner
from codeshot.services import Services
from codeshot.store.oauth import Flow
from codeshot.store.queue import ErasureWork, Work
from codeshot.store.sessions import BY_CONTENT
from codeshot.store.tables import ERASURE_QUEUE, REPLIES_HELD_MARK
from codeshot.usecases import (
    accounts,
    erasure,
    erasure_start,
    new_stack,
    oauth,
    user_storage,
    users,
)
from codeshot.usecases.messaging import EmbedUpload, Messaging
from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change
from codeshot.usecases.sessions import create_session
from tests import conftest, stacks

SHARED = b"bytes both users sent"


@pytest.fixture
def clock() -> conftest.TestClock:
    clock = conftest.TestClock()
    clock.now = datetime.now(UTC)
    return clock


@pytest.fixture
def services(aws, clock) -> Services:
    return Services(aws.replace(local_mode=True), clock=clock)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Holdings:
    user: User
    key: str
    agent: Agent
    session_id: str
    own_bytes: bytes

    @property
    def principal(self) -> Principal:
        return users.principal_of(self.user)


def holdings(services: Services, name: str, common: Agent) -> Holdings:
    """A user with some of everything: an API key, an agent, a session (once-key too)
    with a message and two embeds (one of bytes only they sent), storage with their
    agent and another user's, an OAuth token for that agent, an upload, a day's usage."""
    user, key = users.create_user(services, name)
    principal = users.principal_of(user)
    agent = register(services, principal, "notes")
    session_id = create_session(services, principal, once=f"{name}-once").session_id
    own = f"{name}'s own bytes".encode()
    Messaging(services).post(principal, session_id, "hello", embeds=[
        EmbedUpload(k, "text/plain", base64.b64encode(data).decode())
        for k, data in (("own.txt", own), ("shared.txt", SHARED))])
    for with_agent in (agent, common):
        user_storage.put_value(services, as_agent(services, with_agent, user.user_id),
                               with_agent.agent_id, "diary", {"of": name})
    services.oauth.put_token(user.user_id, common.agent_id, {"access_token": f"{name}-t"})
    upload = services.embeds.upload_key(user.user_id, digest(own))
    services.embeds.s3.put_object(Bucket=services.embeds.bucket, Key=upload, Body=own)
    return Holdings(user, key, agent, session_id, own)


def register(services: Services, owner: Principal, handle: str) -> Agent:
    return AgentRegistration(services, charge=daily_agent_change).create(owner, handle, AgentFields(
        base_prompt="I keep notes.", few_shots=["Q: Remember milk\nA: Noted."]))


def as_agent(services: Services, agent: Agent, user_id: str) -> Principal:
    return services.auth.principal_for_agent_token(
        services.auth.agent_token(agent.agent_id, user_id, None, agent.registration))


def object_exists(services: Services, key: str) -> bool:
    try:
        services.embeds.s3.head_object(Bucket=services.embeds.bucket, Key=key)
    except ClientError:
        return False
    return True


def what_is_left(services: Services, h: Holdings, common: Agent) -> dict[str, object]:
    """What of ``h``'s holdings the platform still has."""
    user_id = h.user.user_id
    storage = services.storage.db.scan(TableName=services.settings.user_storage_table)
    sessions = services.sessions.db.query(
        TableName=services.settings.sessions_table, KeyConditionExpression="session_id = :s",
        ExpressionAttributeValues={":s": {"S": h.session_id}})["Items"]
    try:
        services.registry.get(h.agent.agent_id)
        agent = True
    except NotFound:
        agent = False
    return {
        "sessions": [s.session_id for s in services.sessions.list_by_owner(user_id).items],
        "session items": sorted(i["item"]["S"].split("#")[0] for i in sessions),
        "once keys": bool(services.sessions.guarded(user_id, f"{h.user.username}-once")),
        "own embed": object_exists(services, services.embeds.object_key(digest(h.own_bytes))),
        "shared embed": object_exists(services, services.embeds.object_key(digest(SHARED))),
        "upload": object_exists(services, services.embeds.upload_key(user_id,
                                                                     digest(h.own_bytes))),
        "agent": agent,
        "storage": sorted(i["scope"]["S"].split("#", 1)[1] for i in storage["Items"]
                          if i["scope"]["S"].startswith(user_id + "#") and i["key"]["S"] != " "),
        "oauth": services.oauth.get_token(user_id, common.agent_id) is not None,
        "queries today": services.usage.used("query", user_id),
    }


def kept(h: Holdings, common: Agent) -> dict[str, object]:
    return {"sessions": [h.session_id], "session items": ["EMBED", "EMBED", "MSG", "SESSION"],
            "once keys": True, "own embed": True, "shared embed": True, "upload": True,
            "agent": True, "storage": sorted([common.agent_id, h.agent.agent_id]),
            "oauth": True, "queries today": 1}


@contextmanager
def later(services: Services, clock: conftest.TestClock, seconds: float) -> Iterator[None]:
    """``seconds`` from now, for the platform's clock and for SQS's delays."""
    from moto.sqs import models

    clock.now = (clock.now or datetime.now(UTC)) + timedelta(seconds=seconds)
    real = models.unix_time_millis
    with mock.patch.object(models, "unix_time_millis",
                           side_effect=lambda *_: real() + seconds * 1000):
        yield


def deliveries(services: Services) -> list[dict]:
    """The erasure queue's messages visible now (received, not yet acknowledged)."""
    return [record_of(m) for m in services.erasure_queue.receive(wait_seconds=0)]


def run_erasure(services: Services, clock: conftest.TestClock | None = None) -> int:
    """Deliver the erasure queue's visible parts to the eraser until none is left; how
    many parts ran. With ``clock``, on through the erasure's own waits (a part that looks
    again at the objects the one before deleted, once a writer could have named them)."""
    ran = 0
    while records := deliveries(services):
        assert erasure.erase_batch(services, {"Records": records}) == {"batchItemFailures": []}
        for record in records:
            services.erasure_queue.delete(record["receiptHandle"])
        ran += len(records)
    if clock is not None and queued(services)["ApproximateNumberOfMessagesDelayed"] != "0":
        with later(services, clock, erasure_start.recheck_seconds(services.settings) + 1):
            ran += run_erasure(services, clock)
    return ran


def queued(services: Services) -> dict[str, str]:
    """How many parts the erasure queue holds, visible and delayed."""
    attributes = services.erasure_queue.sqs.get_queue_attributes(
        QueueUrl=services.erasure_queue.url, AttributeNames=["All"])["Attributes"]
    return {name: attributes[name] for name in ("ApproximateNumberOfMessages",
                                                "ApproximateNumberOfMessagesDelayed")}


@contextmanager
def at_look(services: Services, digest: str, then: Callable[[], None], read: int | None = None,
            before: bool = False) -> Iterator[None]:
    """Run ``then`` once, in the middle of an erasure's look at who holds ``digest``:
    after its by_content read number ``read`` (0 the first; None: its first read that
    finds no one, the look's last), or just ``before`` it; at the block's end if no such
    read came. What ``then`` reads itself is not counted."""
    real = services.sessions.db.query
    reads = itertools.count()
    fired: list[bool] = []

    def query(**kwargs):
        looks = not fired and kwargs.get("IndexName") == BY_CONTENT and \
            kwargs["ExpressionAttributeValues"][":h"]["S"] == digest
        if looks and before and read == next(reads):
            fired.append(True)
            then()
        out = real(**kwargs)
        if looks and not before and (read == next(reads) if read is not None
                                     else not out.get("Items")):
            fired.append(True)
            then()
        return out

    with mock.patch.object(services.sessions.db, "query", query):
        yield
    if not fired:
        then()


def run_sweeps(services: Services, queries_of: str | None = None) -> None:
    """The storage sweeps (and session purges) the erasure queued, through the runner,
    as the session queue's trigger gives them; the queries queued for the session
    ``queries_of`` too (the rest are left unrun)."""
    runner = SessionRunner(services)
    while messages := services.queue.receive(wait_seconds=0):
        for message in messages:
            work = Work.parse(message["Body"])
            if work.kind in (Work.SWEEP, Work.PURGE) or work.session_id == queries_of:
                runner.handle(work, False)


@pytest.fixture
def people(services):
    carol, _ = users.create_user(services, "carol")
    common = register(services, users.principal_of(carol), "common")
    return holdings(services, "alice", common), holdings(services, "bob", common), common


def test_a_deleted_users_data_is_erased_after_their_credentials_ran_out_and_no_one_elses(
        services, clock, people):
    alice, bob, common = people
    assert what_is_left(services, alice, common) == kept(alice, common)

    accounts.delete_account(services, alice.principal, "alice")

    with pytest.raises(Unauthenticated, match="deleted"):
        services.auth.user_for_api_key(alice.key)
    # Nothing is erased before a credential checked before the deletion can have run out
    # (SQS delays a message 900 s at most: a part delivered before waits again).
    assert run_erasure(services) == 0
    with later(services, clock, erasure_start.window_seconds(services.settings) - 5):
        run_erasure(services)
    assert what_is_left(services, alice, common) == kept(alice, common)

    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        parts = run_erasure(services, clock)
    run_sweeps(services)  # the storage of alice's agent, every user's
    assert parts >= len(erasure.STEPS)
    left = what_is_left(services, alice, common)
    assert left == {"sessions": [], "session items": ["DELETED"], "once keys": False,
                    "own embed": False, "shared embed": True, "upload": False,
                    "agent": False, "storage": [], "oauth": False, "queries today": 0}
    assert what_is_left(services, bob, common) == kept(bob, common)
    tombstone = services.users.get(alice.user.user_id)
    assert tombstone.deleted and tombstone.api_key_ids == set() and tombstone.email is None
    assert tombstone.erasure_part >= len(erasure.STEPS) and tombstone.erased == clock.now
    # An operator deleting an erased user again queues nothing.
    accounts.delete_user(services, "alice")
    assert queued(services) == {"ApproximateNumberOfMessages": "0",
                                "ApproximateNumberOfMessagesDelayed": "0"}


def test_a_part_delivered_again_is_counted_once(services, clock, people):
    alice, bob, common = people
    accounts.delete_account(services, alice.principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        [first] = deliveries(services)
        assert json.loads(first["body"])["part"] == 0
        erasure.erase_batch(services, {"Records": [first]})
        [second] = deliveries(services)  # part 1, queued by part 0
        # Part 0 delivered again (SQS delivers at least once): nothing of it runs; as its
        # delivery that counted it may have failed before queueing part 1, part 1 goes
        # again: a copy, which does nothing once part 1 is counted.
        with mock.patch("codeshot.usecases.erasure.remove_agent") as remove:
            assert erasure.erase_batch(services, {"Records": [first]}) == \
                {"batchItemFailures": []}
        remove.assert_not_called()
        [copy] = deliveries(services)
        assert json.loads(copy["body"])["part"] == 1
        services.erasure_queue.delete(first["receiptHandle"])
        erasure.erase_batch(services, {"Records": [second]})
        services.erasure_queue.delete(second["receiptHandle"])
        with mock.patch("codeshot.usecases.erasure.STEPS") as steps:
            assert erasure.erase_batch(services, {"Records": [copy]}) == \
                {"batchItemFailures": []}
        steps.__getitem__.assert_not_called()  # nothing of the copy ran, nothing queued
        services.erasure_queue.delete(copy["receiptHandle"])
        [third] = deliveries(services)
        assert json.loads(third["body"])["part"] == 2
        services.erasure_queue.set_visibility([third["receiptHandle"]], 0)
        parts = run_erasure(services, clock)
    run_sweeps(services)
    assert what_is_left(services, alice, common)["session items"] == ["DELETED"]
    assert what_is_left(services, bob, common) == kept(bob, common)
    assert parts and services.users.get(alice.user.user_id).erased == clock.now


def test_the_next_part_taken_at_once_by_another_eraser_goes_on(services, clock, people):
    """Two erasers side by side (the function's concurrency): one takes the next part as
    soon as it is queued, while the part that queued it has not returned. The part is
    counted first, so the next one is the part the tombstone awaits: the chain goes on to
    the end (it stopped there, data left, nothing queued, when the count came second)."""
    alice, _, common = people
    accounts.delete_account(services, alice.principal, "alice")
    real = services.erasure_queue.send
    taken: list[int] = []

    def send_and_run_at_once(work, delay_seconds=0):
        real(work, delay_seconds)
        if work.part == 4 and not taken:
            taken.append(work.part)
            records = deliveries(services)
            assert erasure.erase_batch(services, {"Records": records}) == \
                {"batchItemFailures": []}
            for record in records:
                services.erasure_queue.delete(record["receiptHandle"])

    with later(services, clock, erasure_start.window_seconds(services.settings) + 1), \
            mock.patch.object(services.erasure_queue, "send", send_and_run_at_once):
        run_erasure(services, clock)
    run_sweeps(services)
    assert taken == [4]
    tombstone = services.users.get(alice.user.user_id)
    assert tombstone.erased == clock.now and tombstone.erasure_step == len(erasure.STEPS)
    left = what_is_left(services, alice, common)
    assert (left["upload"], left["oauth"], left["storage"], left["sessions"]) == \
        (False, False, [], [])


def test_a_part_counted_whose_next_part_failed_to_queue_queues_it_when_delivered_again(
        services, clock, people):
    alice, _, common = people
    accounts.delete_account(services, alice.principal, "alice")
    real = services.erasure_queue.send
    failed: list[int] = []

    def send_failing_once(work, delay_seconds=0):
        if work.part == 1 and not failed:
            failed.append(work.part)
            raise ClientError({"Error": {"Code": "InternalError"}}, "SendMessage")
        real(work, delay_seconds)

    with later(services, clock, erasure_start.window_seconds(services.settings) + 1), \
            mock.patch.object(services.erasure_queue, "send", send_failing_once):
        while records := deliveries(services):
            out = erasure.erase_batch(services, {"Records": records})
            failures = {f["itemIdentifier"] for f in out["batchItemFailures"]}
            for record in records:
                if record["messageId"] in failures:  # delivered again
                    services.erasure_queue.set_visibility([record["receiptHandle"]], 0)
                else:
                    services.erasure_queue.delete(record["receiptHandle"])
        run_erasure(services, clock)
    run_sweeps(services)
    assert failed == [1]
    assert services.users.get(alice.user.user_id).erased == clock.now
    assert what_is_left(services, alice, common)["storage"] == []


def test_an_erasure_for_a_user_not_deleted_erases_nothing(services, clock, people):
    """The deletion queues the erasure before it writes the tombstone: one whose
    tombstone was never written finds a live user, and erases nothing of theirs."""
    alice, _, common = people
    erasure_start.start_erasure(services, alice.user)
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        assert run_erasure(services) == 1
    assert what_is_left(services, alice, common) == kept(alice, common)


def test_a_part_failing_on_every_delivery_ends_in_the_dead_letter_queue(services, clock,
                                                                         people):
    alice, _, _ = people
    accounts.delete_account(services, alice.principal, "alice")
    sqs = services.erasure_queue.sqs
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1), \
            mock.patch.object(type(services.registry), "listed",
                              side_effect=RuntimeError("the registry is down")):
        for _ in range(ERASURE_QUEUE.max_receive_count):
            [record] = deliveries(services)
            assert erasure.erase_batch(services, {"Records": [record]}) == \
                {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
            services.erasure_queue.set_visibility([record["receiptHandle"]], 0)
        assert deliveries(services) == []  # moved to the DLQ, not queued again
        dlq = sqs.get_queue_url(QueueName=ERASURE_QUEUE.dlq_name(
            services.settings.erasure_queue_name))["QueueUrl"]
        [dead] = sqs.receive_message(QueueUrl=dlq)["Messages"]
    assert ErasureWork.parse(dead["Body"]).part == 0


def test_a_deleted_user_gets_no_key_no_deploys_and_no_operator_command(services, people):
    alice, _, _ = people
    accounts.delete_user(services, "alice")
    deleted = services.users.get(alice.user.user_id)
    for refused in (
            lambda: users.create_api_key(services, alice.principal),
            lambda: users.ensure_user(services, "alice"),
            lambda: users.find_user(services, "alice"),
            lambda: users.set_limits(services, "alice", daily_queries=5),
            lambda: users.revoke_key_of(services, "alice", "key_x"),
            lambda: accounts.set_disabled(services, "alice", False),
            lambda: accounts.set_operator(services, "alice", True)):
        with pytest.raises(UserDeleted):
            refused()
    assert services.users.get(alice.user.user_id) == deleted  # nothing written
    # Deleting again queues the erasure again (one left in the dead-letter queue goes on).
    accounts.delete_user(services, "alice")
    assert queued(services)["ApproximateNumberOfMessagesDelayed"] == "2"


def test_a_deleted_users_key_another_api_process_still_holds_queues_nothing(
        services, clock, people):
    """Another warm API process still accepts alice's key (it caches users a while):
    deleting her account again through it is refused as her key is, and queues nothing."""
    alice, _, _ = people
    other = Services(services.settings, clock=clock)
    cached = other.auth.user_for_api_key(alice.key)
    accounts.delete_account(services, alice.principal, "alice")
    assert other.auth.user_for_api_key(alice.key) == cached
    for _ in range(3):
        with pytest.raises(Unauthenticated, match="deleted"):
            accounts.delete_account(other, cached, "alice")
    assert queued(services)["ApproximateNumberOfMessagesDelayed"] == "1"


def test_the_owner_of_the_deployed_agents_is_deleted_only_when_forced(services, people):
    alice, _, _ = people
    with pytest.raises(InvalidInput, match="owns the deployed agents"):
        accounts.delete_user(services, "alice", deploy_owner="alice")
    assert services.users.get(alice.user.user_id).deleted is None
    assert queued(services)["ApproximateNumberOfMessagesDelayed"] == "0"
    assert accounts.delete_user(services, "alice", deploy_owner=None).deleted


def test_deleting_ones_account_takes_ones_username_and_no_agent(services, people):
    alice, _, _ = people
    with pytest.raises(Exception, match="type your username"):
        accounts.delete_account(services, alice.principal, "bob")
    agent_call = as_agent(services, alice.agent, alice.user.user_id)
    with pytest.raises(Exception, match="only the user"):
        accounts.delete_account(services, agent_call, "alice")
    assert services.users.get(alice.user.user_id).deleted is None


def test_deleting_a_missing_agent_still_moves_the_registry_version(services, people):
    """A retry of a removal whose first try deleted the agent but not the version bump
    (it failed in between) moves it: every process's cached listing reloads."""
    alice, _, _ = people
    services.registry.db.delete_item(TableName=services.settings.registry_table,
                                     Key={"agent_id": {"S": alice.agent.agent_id}})
    version = services.registry.version()
    with pytest.raises(NotFound):
        services.registry.delete(alice.agent.agent_id, owner="alice")
    assert services.registry.version() == version + 1


def test_a_deleted_users_call_tokens_write_nothing_and_their_late_query_runs_nothing(
        services, clock, people):
    """Tokens minted before the deletion still verify for minutes: they are refused, and
    so are their writes and OAuth token reads checked before it. A query of theirs that
    the runner takes only after the erasure finds no session, and runs nothing (no agent
    called, no token minted, nothing written)."""
    alice, _, common = people
    token = services.auth.agent_token(common.agent_id, alice.user.user_id, None,
                                      common.registration)
    call = services.auth.principal_for_agent_token(token)
    accounts.delete_user(services, "alice")
    with pytest.raises(Unauthenticated, match="deleted"):
        services.auth.principal_for_agent_token(token)
    with pytest.raises(Unauthenticated, match="deleted"):
        user_storage.put_value(services, call, common.agent_id, "later", {"x": 1})
    with pytest.raises(Unauthenticated, match="deleted"):
        oauth.put_token(services, call, {"access_token": "later"})
    with pytest.raises(Unauthenticated, match="deleted"):
        oauth.get_token(services, call)
    # A token the runner mints after the deletion (a query of hers still queued) is
    # refused too: not handed her OAuth token, though it stays until the erasure's step.
    with pytest.raises(Unauthenticated, match="deleted"):
        as_agent(services, common, alice.user.user_id)
    assert services.oauth.get_token(alice.user.user_id, common.agent_id) is not None
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        run_erasure(services, clock)
    with mock.patch.object(SessionRunner, "_run") as run:
        run_sweeps(services, queries_of=alice.session_id)
    run.assert_not_called()
    assert what_is_left(services, alice, common)["session items"] == ["DELETED"]


def test_another_api_process_serves_a_deleted_users_call_token_reads_only_while_it_caches(
        services, clock, people):
    """A warm API process that checked alice's call token just before her deletion reads
    for it up to CODESHOT_API_KEY_CACHE_SECONDS more, as for her API key (the erasure
    waits that out), but writes nothing (a write reads her record afresh)."""
    alice, _, common = people
    token = services.auth.agent_token(common.agent_id, alice.user.user_id, None,
                                      common.registration)
    other = Services(services.settings, clock=clock)
    call = other.auth.principal_for_agent_token(token)
    accounts.delete_user(services, "alice")
    assert user_storage.get_value(other, other.auth.principal_for_agent_token(token),
                                  common.agent_id, "diary") == '{"of": "alice"}'
    subject = f"{alice.user.user_id}#{common.agent_id}"
    charged = other.usage.used("storage", subject, window="minute")
    with pytest.raises(Unauthenticated, match="deleted"):
        user_storage.put_value(other, call, common.agent_id, "later", {"x": 1})
    with pytest.raises(Unauthenticated, match="deleted"):
        oauth.put_token(other, call, {"access_token": "t"})
    # A refused write writes nothing, its rate counters neither.
    assert other.usage.used("storage", subject, window="minute") == charged
    assert other.usage.used("oauth", subject, window="minute") == 0
    cached = services.settings.api_key_cache_seconds
    with mock.patch("time.monotonic", return_value=time.monotonic() + cached + 1), \
            pytest.raises(Unauthenticated, match="deleted"):
        other.auth.principal_for_agent_token(token)


def opened_flow(services: Services, alice, common) -> Flow:
    """An OAuth flow of alice's for the common agent, its link opened in her browser (her
    tokens forgotten: the flow is what would give her one)."""
    flow = Flow.new(alice.user.user_id, common.agent_id, alice.session_id,
                    oauth.redirect_uri(services))
    services.oauth.start_flow(flow, "https://provider.example/authorize")
    services.oauth.open_flow(flow.state, "alices-browser")
    services.oauth.forget_user(alice.user.user_id, 100)
    return flow


def test_an_oauth_flow_or_an_upload_url_from_before_the_deletion_writes_nothing_after_it(
        services, clock, people):
    """An OAuth flow opened before the deletion outlives the credentials' wait: its link
    page and its callback are refused (no agent called for the code, no token kept). An
    upload URL handed out before the deletion (or through a key a warm API still caches)
    expires before the erasure starts, so an upload through it is erased."""
    alice, _, common = people
    flow = opened_flow(services, alice, common)
    late = services.embeds.upload_key(alice.user.user_id, digest(b"late"))
    accounts.delete_account(services, alice.principal, "alice")
    with pytest.raises(Unauthenticated, match="deleted"):
        oauth.describe_link(services, flow.state, "alices-browser")
    with pytest.raises(Unauthenticated, match="deleted"):
        oauth.complete(services, flow.state, "alices-browser", "the-code", None)
    assert services.oauth.get_token(alice.user.user_id, common.agent_id) is None
    window = erasure_start.window_seconds(services.settings)
    assert window > services.settings.api_key_cache_seconds + \
        services.settings.embed_url_ttl_seconds
    with later(services, clock, window - 5):
        run_erasure(services)  # nothing erased yet: an upload URL may still be used
        services.embeds.s3.put_object(Bucket=services.embeds.bucket, Key=late, Body=b"late")
    with later(services, clock, window + 1):
        run_erasure(services, clock)
    assert not object_exists(services, late)


def test_a_disabled_users_oauth_flow_is_refused_at_its_link_and_callback(services, people):
    """A flow opened before an operator disabled its user: its page and its callback are
    refused as the user's API keys are (no agent called for the code, no token kept)."""
    alice, _, common = people
    flow = opened_flow(services, alice, common)
    accounts.set_disabled(services, "alice", True)
    with pytest.raises(Unauthenticated, match="disabled"):
        oauth.describe_link(services, flow.state, "alices-browser")
    with pytest.raises(Unauthenticated, match="disabled"):
        oauth.complete(services, flow.state, "alices-browser", "the-code", None)
    assert services.oauth.get_token(alice.user.user_id, common.agent_id) is None


def test_a_query_sent_before_its_user_was_disabled_runs_nothing(services, people):
    """The runner takes a query of a user disabled since they sent it: nothing runs for
    them (no agent called, no LLM spent), and the reply says why."""
    alice, _, _ = people
    accounts.set_disabled(services, "alice", True)
    with mock.patch.object(SessionRunner, "_program") as program:
        run_sweeps(services, queries_of=alice.session_id)
    program.assert_not_called()
    reply = services.sessions.recent(alice.session_id, 1).messages[0]
    assert (reply.type, reply.error_code, reply.text) == (
        MessageType.ERROR, "UNAUTHENTICATED", "this user has been disabled by an operator")


def test_an_agent_with_many_tokens_and_corpus_versions_is_removed_a_bounded_part_at_a_time(
        services, clock, people):
    """Each part stays within the eraser's timeout however much an agent holds: its
    users' OAuth tokens and its corpus versions go ITEMS_PART and CORPUS_VERSIONS_PART a
    part (all of them went in one part, unbounded, or UNAVAILABLE past 1,000 versions)."""
    alice, bob, common = people
    agent_id = alice.agent.agent_id
    for n in range(7):
        services.oauth.put_token(f"u_reader{n}", agent_id, {"access_token": f"t{n}"})
    for _ in range(5):
        services.corpora.finish(services.corpora.start(agent_id, [{"urls": ["https://a/*"]}]))

    def held() -> tuple[int, int]:
        tokens = sum(services.oauth.get_token(f"u_reader{n}", agent_id) is not None
                     for n in range(7))
        return tokens, len(services.corpora.recent(agent_id, 100))

    accounts.delete_account(services, alice.principal, "alice")
    seen = [held()]
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1), \
            mock.patch.object(erasure, "ITEMS_PART", 3), \
            mock.patch.object(erasure, "CORPUS_VERSIONS_PART", 2):
        while records := deliveries(services):
            for record in records:  # one part at a time
                assert erasure.erase_batch(services, {"Records": [record]}) == \
                    {"batchItemFailures": []}
                services.erasure_queue.delete(record["receiptHandle"])
                seen.append(held())
    assert seen[0] == (7, 5) and seen[-1] == (0, 0)
    gone = [(a[0] - b[0], a[1] - b[1]) for a, b in itertools.pairwise(seen)]
    assert max(t for t, _ in gone) == 3 and max(c for _, c in gone) == 2, seen
    run_sweeps(services)
    assert what_is_left(services, alice, common)["agent"] is False
    assert what_is_left(services, bob, common) == kept(bob, common)


def test_a_large_session_is_erased_key_by_key_its_rest_purged_by_the_runner(
        services, clock, people):
    """The eraser deletes items with DeleteItem alone, ITEMS_PART a session (its role may
    put no session item, as BatchWriteItem could); a larger session's rest is the
    runner's purge, as for its owner's own deletion of it."""
    alice, bob, common = people
    for n in range(6):
        Messaging(services).post(alice.principal, alice.session_id, f"note {n}")
    accounts.delete_account(services, alice.principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1), \
            mock.patch.object(erasure, "ITEMS_PART", 3), \
            mock.patch.object(type(services.sessions.db), "batch_write_item",
                              side_effect=AssertionError("BatchWriteItem")) as batch:
        run_erasure(services, clock)
    batch.assert_not_called()
    left = what_is_left(services, alice, common)
    assert left["sessions"] == [] and "MSG" in left["session items"]  # the runner's part
    run_sweeps(services)
    assert what_is_left(services, alice, common)["session items"] == ["DELETED"]
    assert what_is_left(services, bob, common) == kept(bob, common)


def test_bytes_another_user_binds_between_the_check_and_the_delete_are_restored(
        services, clock, people):
    """Bob posts the bytes of alice's own embed just after her erasure found no other
    session holding them, and before it deletes their object: the erasure looks again
    once a writer that found the object before the delete has named it, finds bob's
    embed, and restores the object (missing in between)."""
    alice, bob, common = people
    h = digest(alice.own_bytes)
    posted: list[str] = []

    def bob_posts():
        posted.append(h)
        Messaging(services).post(bob.principal, bob.session_id, "same file", embeds=[
            EmbedUpload("copy.txt", "text/plain", base64.b64encode(alice.own_bytes).decode())])

    accounts.delete_account(services, alice.principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1), \
            at_look(services, h, bob_posts):
        run_erasure(services)  # up to the look again, not yet due
        assert posted == [h]
        with pytest.raises(NotFound):
            services.embeds.read(h)
        run_erasure(services, clock)
    assert services.users.get(alice.user.user_id).erased == clock.now
    assert services.embeds.read(h) == alice.own_bytes
    assert "copy.txt" in services.sessions.embeds_named(bob.session_id, ["copy.txt"])
    assert what_is_left(services, alice, common)["sessions"] == []


def old_reply(services: Services, session_id: str, agent: Agent, data: bytes) -> str:
    """A reply naming an agent's embed of ``data`` as replies did before they held their
    embeds' bytes (no HELD# item); the bytes' hash."""
    h = services.embeds.put(data, "image/png")
    services.sessions.put_messages([Message(
        session_id=session_id, message_id=ids.ulid(), text="here", type=MessageType.RESPONSE,
        sent_by=agent.agent_id, embeds={"chart.png": EmbedRef(
            content_type="image/png", content_hash=h, size=len(data))})])
    return h


def test_until_old_replies_are_held_an_erasure_deletes_no_embeds_object(
        services, clock, people):
    """Bob's reply from before replies held their bytes names a chart; alice posts the
    same bytes and deletes her account. by_content cannot see bob's reply, so until an
    operator backfills (`users hold-replies`), her erasure keeps every object: her own
    bytes too, which no one else holds (deleted, as before, bob's chart was)."""
    alice, bob, common = people
    services.sessions.db.delete_item(TableName=services.settings.sessions_table,
                                     Key=REPLIES_HELD_MARK)  # a table from before them
    chart = b"\x89PNG bob's chart"
    h = old_reply(services, bob.session_id, common, chart)
    Messaging(services).post(alice.principal, alice.session_id, "look", embeds=[
        EmbedUpload("c.png", "image/png", base64.b64encode(chart).decode())])
    accounts.delete_account(services, alice.principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        run_erasure(services, clock)
    assert services.embeds.read(h) == chart
    left = what_is_left(services, alice, common)
    assert left["sessions"] == [] and left["own embed"] is True


def unmark(services: Services) -> None:
    """The sessions table as a deploy makes it: no replies-held mark (CDK writes no item)."""
    services.sessions.db.delete_item(TableName=services.settings.sessions_table,
                                     Key=REPLIES_HELD_MARK)


def deploy_marks(services: Services, status: str) -> bool:
    """What the platform stack's Custom::CodeshotRepliesHeld does, created while its stack
    has ``status``; whether it says it marked the table."""
    _, data = new_stack.hold_new_stack_replies(
        services, stacks.replies_held_event(stacks.stack_in(services.settings, status)))
    return data["Marked"] == "true"


def test_a_new_stacks_erasures_delete_embeds_objects_with_no_operator_step(services, clock):
    """A deployed stack's sessions table has no mark; CloudFormation creating the stack
    creates the table with it, so it holds no reply of before HELD# items: marked. A
    deleted user's embeds then go."""
    unmark(services)
    assert deploy_marks(services, stacks.CREATING) and services.sessions.replies_held()
    alice, _ = users.create_user(services, "alice")
    principal = users.principal_of(alice)
    session_id = create_session(services, principal).session_id
    own = b"alice's holiday photo"
    Messaging(services).post(principal, session_id, "look", embeds=[
        EmbedUpload("p.jpg", "image/jpeg", base64.b64encode(own).decode())])
    accounts.delete_account(services, principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        run_erasure(services, clock)
    with pytest.raises(NotFound):
        services.embeds.read(digest(own))
    assert not services.users.get(alice.user_id).embeds_kept


def test_a_stack_with_sessions_from_before_held_replies_is_not_marked_by_its_upgrade(
        services, clock):
    """An upgraded stack: the resource is created by the update that brings it, when its
    table may hold sessions whose replies name bytes with no HELD# item; it marks
    nothing, and nor does a user made since. An erasure keeps the objects, and the
    tombstone says so."""
    carol, _ = users.create_user(services, "carol")
    create_session(services, users.principal_of(carol))
    unmark(services)
    assert not deploy_marks(services, stacks.UPDATING)
    alice, _ = users.create_user(services, "alice")
    assert not services.sessions.replies_held()
    principal = users.principal_of(alice)
    session_id = create_session(services, principal).session_id
    Messaging(services).post(principal, session_id, "look", embeds=[
        EmbedUpload("p.jpg", "image/jpeg", base64.b64encode(b"photo").decode())])
    accounts.delete_account(services, principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        run_erasure(services, clock)
    tombstone = services.users.get(alice.user_id)
    assert tombstone.erased is not None and tombstone.embeds_kept
    assert services.embeds.read(digest(b"photo")) == b"photo"
    listed = cli._deleted(services.settings, tombstone)  # her line in `users list`
    assert "kept for good" in listed and "codeshot users hold-replies" in listed


def test_an_upgraded_stacks_empty_table_is_not_marked_either(services):
    """Whether the table is empty is not asked (that took a Scan of its keys, which the
    API and registration roles no longer have): an upgraded stack is the backfill's, an
    empty table one Scan page of it. Made by the old code, the first user marked it."""
    unmark(services)
    assert not deploy_marks(services, stacks.UPDATING)
    users.create_user(services, "erin")
    assert not services.sessions.replies_held()


def test_old_replies_held_by_the_backfill_keep_their_bytes_and_lose_their_users(
        services, clock, people):
    alice, bob, common = people
    services.sessions.db.delete_item(TableName=services.settings.sessions_table,
                                     Key=REPLIES_HELD_MARK)
    assert not services.sessions.replies_held()
    bobs = old_reply(services, bob.session_id, common, b"\x89PNG bob's chart")
    alices = old_reply(services, alice.session_id, common, b"\x89PNG alice's report")
    Messaging(services).post(alice.principal, alice.session_id, "look", embeds=[
        EmbedUpload("c.png", "image/png", base64.b64encode(b"\x89PNG bob's chart").decode())])
    start, pages = None, 0
    while True:  # what `codeshot users hold-replies` runs
        _, start = services.sessions.hold_replies(start)
        pages += 1
        if start is None:
            break
    assert services.sessions.replies_held()
    services.sessions.hold_replies(None)  # again: the same items, nothing more
    accounts.delete_account(services, alice.principal, "alice")
    with later(services, clock, erasure_start.window_seconds(services.settings) + 1):
        run_erasure(services, clock)
    assert services.embeds.read(bobs) == b"\x89PNG bob's chart"  # bob's reply holds it
    with pytest.raises(NotFound):
        services.embeds.read(alices)  # only alice's sessions held it
    assert what_is_left(services, alice, common)["own embed"] is False
    bobs_left = what_is_left(services, bob, common)
    assert (bobs_left["sessions"], bobs_left["own embed"], bobs_left["shared embed"]) == \
        ([bob.session_id], True, True)


def test_deleting_a_user_with_an_account_needs_the_user_pool(services):
    """An operator whose environment lacks CODESHOT_USER_POOL_ID (a deployed stack's
    UserPoolId output) is refused, naming it, and nothing is written: else the account and
    its email would stay for good, the deletion said done."""
    from codeshot.store.provision import create_user_pool

    pooled = Services(create_user_pool(services.settings), clock=services.clock)
    email = "leaver@example.com"
    accounts.sign_up(pooled, email, "Correct-horse-9")
    pooled.accounts.admin_confirm(email)
    sub = next(a["Value"] for a in pooled.accounts.client.admin_get_user(
        UserPoolId=pooled.settings.user_pool_id, Username=email)["UserAttributes"]
        if a["Name"] == "sub")
    user = pooled.users.create("leaver", identity=sub, email=email)
    with pytest.raises(InvalidInput, match="CODESHOT_USER_POOL_ID"):
        accounts.delete_user(services, "leaver")  # services: no pool id
    assert pooled.users.get(user.user_id).deleted is None
    queued = services.erasure_queue.sqs.get_queue_attributes(
        QueueUrl=services.erasure_queue.url, AttributeNames=["All"])["Attributes"]
    assert queued["ApproximateNumberOfMessagesDelayed"] == "0"  # no erasure queued
    gone = accounts.delete_user(pooled, "leaver")  # with it: the account goes
    assert gone.deleted is not None
    with pytest.raises(ClientError, match="UserNotFound"):
        pooled.accounts.client.admin_get_user(UserPoolId=pooled.settings.user_pool_id,
                                               Username=email)


def test_delete_account_is_refused_to_a_key_revoked_a_user_disabled_and_the_deploy_owner(
        services):
    """The one change with no undo reads the user fresh, not as a warm API process still
    caches a key's user: a key revoked (leaked) or a user disabled (under investigation)
    since cannot delete the account. Nor can the owner of the deployed agents
    (CODESHOT_DEPLOY_OWNER, CDK's codeshot:adminUsername), as `users delete` refuses it."""
    leaky, key = users.create_user(services, "leaky")
    cached = services.auth.user_for_api_key(key)
    users.create_api_key(services, cached)
    users.revoke_api_key(services, cached, str(cached.key_id))
    with pytest.raises(Unauthenticated, match="revoked"):
        accounts.delete_account(services, cached, "leaky")
    watched, key = users.create_user(services, "watched")
    cached = services.auth.user_for_api_key(key)
    accounts.set_disabled(services, "watched", True)
    with pytest.raises(Unauthenticated, match="disabled"):
        accounts.delete_account(services, cached, "watched")
    deployed = Services(services.settings.replace(deploy_owner="acme"), clock=services.clock)
    acme = users.ensure_user(deployed, "acme")
    owner = deployed.auth.user_for_api_key(deployed.auth.issue_api_key(acme))
    with pytest.raises(InvalidInput, match="owns the deployed agents"):
        accounts.delete_account(deployed, owner, "acme")
    for user in (leaky, watched, acme):
        assert services.users.get(user.user_id).deleted is None
    queued = services.erasure_queue.sqs.get_queue_attributes(
        QueueUrl=services.erasure_queue.url, AttributeNames=["All"])["Attributes"]
    assert queued["ApproximateNumberOfMessagesDelayed"] == "0"


# Two users holding the same bytes (one object) erased at the same time, their erasures'
# parts interleaved as two eraser functions running at once would interleave them.

class Erasures:
    """The erasure queue as two eraser functions would take from it: each user's parts
    kept apart, each with when it is due, so that a test runs one user's parts at any
    point of another's. The clock moves on to a part's due time as it runs."""

    def __init__(self, services: Services, clock: conftest.TestClock) -> None:
        self.services, self.clock = services, clock
        self.parts: dict[str, list[tuple[datetime, ErasureWork]]] = defaultdict(list)

    def send(self, work: ErasureWork, delay_seconds: int = 0) -> None:
        self.parts[work.user_id].append(
            (self.clock() + timedelta(seconds=delay_seconds), work))

    def run(self, user_id: str) -> None:
        """The user's parts, one after another, to the erasure's end."""
        while self.parts[user_id]:
            due, work = self.parts[user_id].pop(0)
            self.clock.now = max(self.clock(), due)
            erasure.erase_part(self.services, work)
        assert self.services.users.get(user_id).erased is not None


@pytest.fixture
def erasures(services, clock):
    chains = Erasures(services, clock)
    with mock.patch.object(services.erasure_queue, "send", chains.send):
        yield chains


def delete(services: Services, *people: Holdings) -> None:
    for h in people:
        accounts.delete_account(services, h.principal, h.user.username)


def shared_kept(services: Services) -> bool:
    return object_exists(services, services.embeds.object_key(digest(SHARED)))


def post_shared(services: Services, name: str) -> tuple[User, Callable[[], None]]:
    """A user ``name`` who is not deleted, and the post of the shared bytes into a
    session of theirs (to run later)."""
    user, _ = users.create_user(services, name)
    principal = users.principal_of(user)
    session_id = create_session(services, principal).session_id

    def post() -> None:
        Messaging(services).post(principal, session_id, "same file", embeds=[
            EmbedUpload("copy.txt", "text/plain", base64.b64encode(SHARED).decode())])
    return user, post


# Where the second erasure runs, whole, within the first's looks at who holds the shared
# bytes: after (or just before) each index read of them, its first look's and its look
# again's (a read past the last of them: the second after the first).
READS = range(6)
WHEN = ("after", "before")


@pytest.mark.parametrize("first", ["alice", "bob"])
@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("read", READS)
def test_two_users_erased_at_once_leave_no_bytes_they_shared(
        services, people, erasures, first, when, read):
    alice, bob, _ = people
    one, other = (alice, bob) if first == "alice" else (bob, alice)
    delete(services, alice, bob)
    with at_look(services, digest(SHARED), lambda: erasures.run(other.user.user_id),
                 read=read, before=when == "before"):
        erasures.run(one.user.user_id)
    assert not shared_kept(services)
    assert not object_exists(services, services.embeds.object_key(digest(alice.own_bytes)))


def test_bytes_only_a_deleted_user_still_holds_are_deleted_and_not_restored(
        services, people, erasures):
    """Bob is deleted too, his erasure not yet run (it may be stuck, in the dead-letter
    queue): alice's erasure deletes the bytes they shared, and its look again does not
    bring them back for his session, whose items are still there."""
    alice, bob, _ = people
    delete(services, alice, bob)
    erasures.run(alice.user.user_id)
    assert not shared_kept(services)
    assert services.sessions.embed_hashes(bob.session_id, 10)
    erasures.run(bob.user.user_id)
    assert not shared_kept(services)


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("read", READS)
def test_bytes_a_user_not_deleted_holds_stay_however_the_erasures_interleave(
        services, people, erasures, when, read):
    alice, bob, _ = people
    post_shared(services, "dora")[1]()
    delete(services, alice, bob)
    with at_look(services, digest(SHARED), lambda: erasures.run(bob.user.user_id),
                 read=read, before=when == "before"):
        erasures.run(alice.user.user_id)
    assert shared_kept(services)


@pytest.mark.parametrize("read", [*READS, None])
def test_bytes_a_user_comes_to_hold_while_both_are_erased_stay(
        services, people, erasures, read):
    """Dora posts the shared bytes in the middle of alice's look (finding the object, or
    storing it again once deleted), and bob's erasure runs right then: whoever deleted
    the object before she named it restores it on looking again."""
    alice, bob, _ = people
    _, dora_posts = post_shared(services, "dora")
    delete(services, alice, bob)

    def dora_posts_then_bob_is_erased() -> None:
        dora_posts()
        erasures.run(bob.user.user_id)

    with at_look(services, digest(SHARED), dora_posts_then_bob_is_erased, read=read):
        erasures.run(alice.user.user_id)
    assert shared_kept(services)


def test_past_a_crowd_of_deleted_holders_the_bytes_are_kept_for_the_last_to_look(
        services, people, erasures):
    """More deleted users hold the bytes than a look reads past: it keeps them (bounded
    reads), and says so (its log, the tombstone: `users list`); the last erasure to look,
    finding fewer, deletes them."""
    alice, bob, _ = people
    dora, dora_posts = post_shared(services, "dora")
    dora_posts()
    delete(services, alice, bob)
    accounts.delete_account(services, users.principal_of(dora), "dora")
    with mock.patch.object(erasure, "HOLDERS_LOOKED", 1), \
            mock.patch.object(erasure.log, "warning") as warned:
        erasures.run(alice.user.user_id)
        assert shared_kept(services)  # bob and dora still held them
        assert any(digest(SHARED) in str(c.args) for c in warned.call_args_list)
        listed = cli._deleted(services.settings, services.users.get(alice.user.user_id))
        assert "kept, shared with more deleted users" in listed
        assert not services.users.get(bob.user.user_id).embeds_crowded
        erasures.run(bob.user.user_id)
        assert not shared_kept(services)
        erasures.run(dora.user_id)
    assert not shared_kept(services)


def redeliver(erasures: Erasures, user_id: str) -> None:
    """The user's erasure run to its end, a part that fails delivered again (as SQS
    delivers a message whose handler raised)."""
    while True:
        if not erasures.parts[user_id]:
            part = erasures.services.users.get(user_id).erasure_part
            erasures.send(ErasureWork(user_id, part))
        try:
            erasures.run(user_id)
            return
        except (ClientError, TimeoutError):
            pass


def named_by(services: Services, user: User) -> tuple[str, Callable[[bytes], None]]:
    """A session of ``user`` (not deleted), and what names bytes in it as a writer that
    found their object before an erasure deleted it does (its EMBED# item, no put)."""
    from codeshot.models import Embed

    session_id = create_session(services, users.principal_of(user)).session_id

    def name(data: bytes) -> None:
        services.sessions.bind_embed(Embed(
            key="copy.txt", session_id=session_id, owner=user.user_id,
            content_type="text/plain", content_hash=digest(data), size=len(data)))
    return session_id, name


def test_bytes_two_erasures_deleted_come_back_though_a_part_died_after_its_delete(
        services, people, erasures):
    """Alice and bob are deleted, dora is not. Alice's part deletes the shared object and
    dies (the eraser's timeout); bob's erasure deletes it again (a second delete marker),
    then dora's writer, which found the object before, names it. Every delete is undone
    by a look again: the object was left deleted when each look undid its own marker
    only (the dead part's was in no list)."""
    alice, bob, _ = people
    dora, _ = users.create_user(services, "dora")
    dora_session, dora_names = named_by(services, dora)
    h = digest(SHARED)
    real_forget = services.embeds.forget
    running = {"user": alice.user.user_id}
    died: list[str] = []

    def forget(d: str) -> object:
        deleted = real_forget(d)
        if d == h and running["user"] == alice.user.user_id and not died:
            died.append(d)
            raise TimeoutError("the eraser timed out right after the delete")
        if d == h and running["user"] == bob.user.user_id:
            dora_names(SHARED)
        return deleted

    delete(services, alice, bob)
    with mock.patch.object(services.embeds, "forget", side_effect=forget):
        with pytest.raises(TimeoutError):
            erasures.run(alice.user.user_id)
        running["user"] = bob.user.user_id
        erasures.run(bob.user.user_id)
        running["user"] = alice.user.user_id
        redeliver(erasures, alice.user.user_id)
    assert died == [h]
    assert services.sessions.embeds_named(dora_session, ["copy.txt"])
    assert services.embeds.read(h) == SHARED


def test_bytes_two_copies_of_a_part_deleted_come_back(services, people, erasures):
    """Two copies of alice's part run at once (SQS delivers a message twice): each deletes
    her own bytes' object (two markers), then dora's writer, which found it before, names
    it. The look again brings it back (it undid the marker of the copy that counted)."""
    alice, _, _ = people
    dora, _ = users.create_user(services, "dora")
    dora_session, dora_names = named_by(services, dora)
    h = digest(alice.own_bytes)
    real_forget, real_part = services.embeds.forget, erasure.erase_part
    parts: list[ErasureWork] = []
    copies: list[str] = []

    def forget(d: str) -> object:
        deleted = real_forget(d)
        if d == h and not copies:
            copies.append(d)
            real_part(services, parts[-1])  # the other copy, at once, to its end
            dora_names(alice.own_bytes)
        return deleted

    accounts.delete_account(services, alice.principal, "alice")
    with mock.patch.object(services.embeds, "forget", side_effect=forget), \
            mock.patch.object(erasure, "erase_part",
                              side_effect=lambda s, w: (parts.append(w), real_part(s, w))):
        erasures.run(alice.user.user_id)
    assert copies == [h]
    assert services.sessions.embeds_named(dora_session, ["copy.txt"])
    assert services.embeds.read(h) == alice.own_bytes


@pytest.mark.parametrize("failing", ["drop_item", "erase"])
def test_objects_a_part_deleted_before_it_failed_are_looked_at_again(
        services, people, erasures, failing):
    """Bob names alice's own bytes right after her look found no one; her part deletes
    them, then fails (a throttled write: dropping the embed's item, or erasing the
    session) and is delivered again. The part run again finds bob holding the bytes, or
    their item gone, yet looks at their object again (the tombstone had it before the
    delete) and restores it for bob: it stayed deleted."""
    alice, bob, _ = people
    h = digest(alice.own_bytes)
    key = services.embeds.object_key(h)

    def bob_posts() -> None:
        Messaging(services).post(bob.principal, bob.session_id, "same file", embeds=[
            EmbedUpload("copy.txt", "text/plain", base64.b64encode(alice.own_bytes).decode())])

    failed: list[str] = []
    real = getattr(services.sessions, failing)

    def throttled_once(*args, **kwargs):
        if not failed and not object_exists(services, key):
            failed.append(failing)
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                         "Message": "throttled"}}, "DeleteItem")
        return real(*args, **kwargs)

    accounts.delete_account(services, alice.principal, "alice")
    with at_look(services, h, bob_posts), \
            mock.patch.object(services.sessions, failing, side_effect=throttled_once):
        redeliver(erasures, alice.user.user_id)
    assert failed == [failing]
    assert services.sessions.embeds_named(bob.session_id, ["copy.txt"])
    assert services.embeds.read(h) == alice.own_bytes
    assert services.users.get(alice.user.user_id).erasure_recheck == set()


def test_a_restore_undoes_every_delete_of_the_bytes_and_only_those(services):
    """EmbedStore.restore takes no marker: however many deletes (erasures, copies of a
    part) are stacked on the bytes, one restore brings them back; again, or with the
    bytes stored since, it changes nothing."""
    embeds = services.embeds
    h = embeds.put(b"photo", "image/jpeg")
    for _ in range(3):
        embeds.forget(h)
    with pytest.raises(NotFound):
        embeds.read(h)
    assert embeds.restore(h) and embeds.read(h) == b"photo"
    assert not embeds.restore(h)
    embeds.forget(h)
    embeds.put(b"photo", "image/jpeg")  # stored again since the delete
    assert not embeds.restore(h) and embeds.read(h) == b"photo"
    never = digest(b"never stored")
    assert not embeds.restore(never)


def test_a_part_looking_past_crowds_of_deleted_holders_reads_each_once_within_a_bound(
        services, clock):
    """Eight deleted users share six files. A part of the last one's erasure reads each
    other holder's user once (not once for each file), and makes at most INDEX_READS_PART
    index reads: the files it has not looked at go to the next part, and all go."""
    blobs = [f"blob {i}".encode() for i in range(6)]
    made = []
    for n in range(8):
        user, _ = users.create_user(services, f"u{n:02d}")
        principal = users.principal_of(user)
        session_id = create_session(services, principal).session_id
        Messaging(services).post(principal, session_id, "files", embeds=[
            EmbedUpload(f"f{i}.txt", "text/plain", base64.b64encode(b).decode())
            for i, b in enumerate(blobs)])
        made.append(user)
    for user in made:
        accounts.delete_account(services, users.principal_of(user), user.username)
    clock.now += timedelta(seconds=erasure_start.window_seconds(services.settings) + 1)
    last = services.users.get(made[-1].user_id)  # its id sorts last: the others before it
    calls: defaultdict[tuple[str, str | None], int] = defaultdict(int)
    real_call = type(services.sessions.db)._make_api_call

    def counting(client, operation, params):
        calls[operation, params.get("IndexName")] += 1
        return real_call(client, operation, params)

    reads = 20  # a look at one file: one read for each of 7 holders and its own, one more
    with mock.patch.object(type(services.sessions.db), "_make_api_call", counting), \
            mock.patch.object(erasure, "INDEX_READS_PART", reads):
        done, after = erasure.STEPS[last.erasure_step + 1](services, last, None)
    assert not done and after is not None
    assert calls["GetItem", None] <= 7 + 1  # the other holders; the replies-held mark
    looked = reads + 8  # the look that reaches the bound ends
    assert calls["Query", BY_CONTENT] <= looked, dict(calls)
    deleted = services.users.get(last.user_id).erasure_recheck
    assert 0 < len(deleted) < len(blobs)  # the rest in the next parts
    # Its look again is bounded the same way: the objects it has not looked at stay.
    clock.now += timedelta(seconds=erasure_start.recheck_seconds(services.settings))
    with mock.patch.object(erasure, "INDEX_READS_PART", 1):
        assert erasure.STEPS[last.erasure_step + 1](
            services, services.users.get(last.user_id), after) == (False, after)
    assert len(services.users.get(last.user_id).erasure_recheck) == len(deleted) - 1
    with mock.patch.object(erasure, "INDEX_READS_PART", reads):
        run_erasure(services, clock)
    for b in blobs:
        with pytest.raises(NotFound):
            services.embeds.read(digest(b))


def test_a_look_again_counted_before_the_tombstone_kept_its_objects_still_restores(
        services, people, erasures):
    """A part counted by the code before this one kept the objects it deleted (and their
    markers) in the tombstone's cursor alone: the look again after an upgrade takes them
    from there, and restores bytes bob named meanwhile."""
    alice, bob, _ = people
    h = digest(alice.own_bytes)
    accounts.delete_account(services, alice.principal, "alice")
    uid = alice.user.user_id
    while services.users.get(uid).erasure_after is None:
        due, work = erasures.parts[uid].pop(0)
        erasures.clock.now = max(erasures.clock(), due)
        erasure.erase_part(services, work)
    pending = json.loads(services.users.get(uid).erasure_after)
    services.users.db.update_item(
        TableName=services.settings.users_table, Key={"user_id": {"S": uid}},
        UpdateExpression="SET erasure_after = :a REMOVE erasure_recheck",
        ExpressionAttributeValues={":a": {"S": json.dumps(pending | {"objects": [[h, "m"]]})}})
    named_by(services, bob.user)[1](alice.own_bytes)
    with pytest.raises(NotFound):
        services.embeds.read(h)
    erasures.run(uid)
    assert services.embeds.read(h) == alice.own_bytes


def test_a_copy_of_the_last_part_that_read_the_tombstone_early_leaves_no_bytes_unrechecked(
        services, clock, people, erasures):
    """Two copies of alice's last sessions part at once: one deletes bytes (recorded in
    the tombstone's recheck set first) that a live user's writer had found; the other,
    which read the tombstone before that record and found no session left, ended the
    erasure with the set still holding them: never looked at again, the live user's
    bytes lost for good (review s24f, finding 1). It looks at the set once more first."""
    from codeshot.models import Embed
    from codeshot.store.queue import ErasureWork
    from codeshot.usecases import erasure

    alice = people[0]
    dora, _ = users.create_user(services, "dora")
    _, dora_names = named_by(services, dora)
    late = b"bytes alice's cached key posted during her window"
    held = services.embeds.put(late, "text/plain")
    delete(services, alice)
    uid = alice.user.user_id
    real_get, real_advance = services.users.get, services.users.advance_erasure
    final = len(erasure.STEPS) - 1
    state: dict[str, object] = {"stale": None, "late": False, "done": False}

    def get(user_id: str) -> User:
        user = real_get(user_id)
        if user_id == uid and user.erasure_step == final and state["stale"] is None:
            state["stale"] = user
        return user

    def advance(user_id: str, part: int, progress: object) -> bool:
        user = real_get(user_id)
        if user_id == uid and user.erasure_step == 2 and not state["late"]:
            state["late"] = True  # a session her still-cached key made in the window
            session_id = create_session(services, users.principal_of(alice.user)).session_id
            services.sessions.bind_embed(Embed(
                key="late.txt", session_id=session_id, owner=uid, content_type="text/plain",
                content_hash=held, size=len(late)))
        if user_id == uid and user.erasure_step == final and user.erasure_recheck \
                and not state["done"]:
            state["done"] = True
            dora_names(late)  # dora's writer found the object before the delete
            with mock.patch.object(services.users, "get", return_value=state["stale"]):
                erasure.erase_part(services, ErasureWork(uid, part))  # the early copy
        return real_advance(user_id, part, progress)

    with mock.patch.object(services.users, "get", get), \
            mock.patch.object(services.users, "advance_erasure", advance):
        erasures.run(uid)
    assert state["done"] and real_get(uid).erased is not None
    assert object_exists(services, services.embeds.object_key(held))  # dora's, kept
