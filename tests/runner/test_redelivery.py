"""SQS redelivery and crashes never answer a message twice nor leave it unanswered."""

import json
import threading
import time

import pytest

from codeshot.models import utcnow
from codeshot.runner.batch import Invocation, process_batch, record_of
from codeshot.runner.fairness import LEASE_LASTS
from codeshot.runner.session_runner import SessionRunner
from codeshot.services import Services
from codeshot.store.queue import PromptWork, SessionQueue, Work
from codeshot.store.tables import SESSION_QUEUE
from codeshot.usecases.prompts import Prompts, process_prompts
from tests.runner.conftest import register, session
from tests.store_helpers import add_message


def post(platform, key, h, text):
    out = platform.gql(key, """mutation ($s: String!, $t: String!) { sendSessionMessage(
        messageData: {session: $s, text: $t, wait: false}) { message { id } } }""",
                       {"s": h, "t": text})
    return out["data"]["sendSessionMessage"]["message"]["id"]


def queued_roll(platform, agents, username):
    """A dice session with one queued "Roll 1d20": (session, raw SQS message, runner)."""
    _, key = platform.user(username)
    dice = register(platform, key, "dice", agents.url + "/dice")
    h = session(platform, key, frontend=dice)
    post(platform, key, h, "Roll 1d20")
    [raw] = platform.services.queue.receive(wait_seconds=1)
    return h, raw, SessionRunner(platform.services)


def terminal(platform, h):
    return [m for m in platform.services.sessions.all_messages(h)
            if m.type.value in ("response", "error", "awaiting_input")]


def test_same_message_delivered_twice_is_answered_once(platform, agents):
    h, raw, runner = queued_roll(platform, agents, "rita")
    event = {"Records": [record_of(raw)]}
    calls_before = len(agents.calls)
    assert process_batch(event, runner.handle) == {"batchItemFailures": []}
    assert process_batch(event, runner.handle) == {"batchItemFailures": []}  # redelivery
    assert len(terminal(platform, h)) == 1
    assert len(agents.calls) == calls_before + 1  # the agent was not called again


def test_concurrent_duplicates_write_one_reply(platform, agents):
    h, raw, runner = queued_roll(platform, agents, "sam")
    threads = [threading.Thread(target=process_batch, args=({"Records": [record_of(raw)]},
                                                            runner.handle)) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(terminal(platform, h)) == 1


def test_runner_killed_mid_program_is_not_run_again(platform, agents, monkeypatch):
    h, raw, runner = queued_roll(platform, agents, "tom")
    real_finish = runner._finish
    calls_before = len(agents.calls)

    def die_before_storing(*args):
        raise ConnectionError("container died")  # the agent was called, nothing stored

    monkeypatch.setattr(runner, "_finish", die_before_storing)
    first = process_batch({"Records": [record_of(raw)]}, runner.handle)
    assert first == {"batchItemFailures": [{"itemIdentifier": raw["MessageId"]}]}
    assert terminal(platform, h) == []
    monkeypatch.setattr(runner, "_finish", real_finish)
    retry = {**record_of(raw), "attributes": {**raw.get("Attributes", {}),
                                              "ApproximateReceiveCount": "2"}}
    assert process_batch({"Records": [retry]}, runner.handle) == {"batchItemFailures": []}
    # Answered once, INTERRUPTED: the agent (which may have acted) is not called again.
    [reply] = terminal(platform, h)
    assert reply.type.value == "error" and reply.error_code == "INTERRUPTED"
    assert len(agents.calls) == calls_before + 1
    steps = [m.type.value for m in platform.services.sessions.all_messages(h)]
    assert "func_call" not in steps, steps  # the lost run's trace is not half-stored


def test_failure_keeps_the_rest_of_that_session_in_order(platform):
    handled = []

    def handle(work, final):
        handled.append(work.message_id)
        if work.message_id == "m1":
            raise RuntimeError("boom")

    records = [
        {"messageId": f"r{i}", "body": f'{{"session_id": "{s}", "message_id": "m{i}"}}',
         "attributes": {"MessageGroupId": s}}
        for i, s in enumerate(["a", "a", "b", "a"])
    ]
    records.append({"messageId": "bad", "body": "not json", "attributes": {}})
    result = process_batch({"Records": records}, handle)
    assert result == {"batchItemFailures": [{"itemIdentifier": "r1"}, {"itemIdentifier": "r3"}]}
    assert sorted(handled) == ["m0", "m1", "m2"]  # sessions side by side; m3 untouched


def test_a_batch_stops_starting_records_before_the_invocation_ends():
    """Each record takes 100 s of a 300 s invocation: two run, the rest of the session are
    reported unprocessed (SQS redelivers them) instead of the invocation timing out whole."""
    left_ms = [300_000]
    handled = []

    def handle(work, final):
        handled.append(work.message_id)
        left_ms[0] -= 100_000

    records = [{"messageId": f"r{i}", "body": f'{{"session_id": "s", "message_id": "m{i}"}}',
                "attributes": {"MessageGroupId": "s"}} for i in range(5)]
    result = process_batch({"Records": records}, handle, Invocation(lambda: left_ms[0], 100))
    assert handled == ["m0", "m1"]  # m2 would start with 100 s left: not its 100 s + margin
    assert result == {"batchItemFailures": [{"itemIdentifier": f"r{i}"} for i in (2, 3, 4)]}


def test_giving_up_on_the_last_attempt_leaves_an_error_not_a_stuck_session(platform, agents,
                                                                            monkeypatch, capsys):
    h, raw, runner = queued_roll(platform, agents, "uma")
    monkeypatch.setattr(runner, "_memory", lambda *a: (_ for _ in ()).throw(OSError("disk")))
    last = {**record_of(raw), "attributes": {
        "ApproximateReceiveCount": str(SESSION_QUEUE.max_receive_count), "MessageGroupId": h}}
    assert process_batch({"Records": [last]}, runner.handle) == {"batchItemFailures": []}
    [reply] = terminal(platform, h)
    assert reply.type.value == "error" and reply.error_code == "AGENT_ERROR"
    # ... and counts it as a CloudWatch metric (EMF), which an alarm watches.
    [emf] = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if '"_aws"' in line]
    assert emf["QueriesGivenUp"] == [1] and emf["QueueName"] == runner.s.settings.queue_name
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "codeshot"
    assert emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["QueueName"]]  # the alarm's


def test_records_without_a_group_run_side_by_side_and_fail_alone():
    """The prompt queue is a standard queue: its records carry no MessageGroupId. One
    user's failing record neither waits for nor fails the others'."""
    running, most = [0], [0]
    lock = threading.Lock()

    def handle(work, final):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.5)  # one callback exchange
        with lock:
            running[0] -= 1
        if work.session_id == "s3":
            raise RuntimeError("a DynamoDB hiccup on one user's prompt")

    records = [{"messageId": f"r{i}", "body": PromptWork(f"s{i}", "q", 0).body(),
                "attributes": {}} for i in range(10)]
    result = process_batch({"Records": records}, handle, parse=PromptWork.parse)
    assert result == {"batchItemFailures": [{"itemIdentifier": "r3"}]}
    assert most[0] > 1  # side by side, not one after another


def test_records_left_untouched_come_back_in_seconds_not_after_the_visibility_timeout(aws):
    """A session's queries left for the next delivery near the invocation's end are handed
    back to the queue: SQS delivers them again as soon as the invocation ends, not half
    an hour later."""
    queue = SessionQueue(aws)
    for i in range(3):
        queue.enqueue(Work("s1", f"m{i}"))
    raw = queue.receive(wait_seconds=1)
    assert len(raw) == 3
    left_ms, handled = [220_000], []

    def handle(work, final):
        handled.append(work.message_id)
        left_ms[0] -= 100_000  # m1 would start with 120 s left: no more

    result = process_batch({"Records": [record_of(m) for m in raw]}, handle,
                           Invocation(lambda: left_ms[0], 120), queue=queue)
    assert handled == ["m0"]
    assert result == {"batchItemFailures": [{"itemIdentifier": m["MessageId"]}
                                            for m in raw[1:]]}
    # The session's first record is in flight until the invocation returns: SQS holds
    # the rest of the session till then, ...
    assert queue.receive(wait_seconds=0) == []
    queue.delete(raw[0]["ReceiptHandle"])  # ... when Lambda deletes the one that succeeded
    again = queue.receive(wait_seconds=0)
    assert [Work.parse(m["Body"]).message_id for m in again] == ["m1", "m2"]
    assert SESSION_QUEUE.visibility_timeout_seconds == 1800  # what they would have waited


def on_last_delivery(raw):
    """A received message as Lambda gives it on its last delivery (the next receive would
    move it to the dead-letter queue)."""
    return {**record_of(raw), "attributes": {
        **raw.get("Attributes", {}), "ApproximateReceiveCount": str(SESSION_QUEUE.max_receive_count)}}


def test_a_query_never_run_on_its_last_delivery_is_answered_once_and_the_session_goes_on(
        platform, agents, capsys):
    """A session's first query keeps failing; the one behind it, never run, is on its last
    delivery too. It used to go to the dead-letter queue unanswered: now it is answered
    UNAVAILABLE, once however often it comes, and the session's next query runs as usual."""
    _, key = platform.user("vera")
    h = session(platform, key, frontend=register(platform, key, "dice", agents.url + "/dice"))
    post(platform, key, h, "Roll 1d20")
    post(platform, key, h, "Roll 2d6")
    queue = platform.services.queue
    raw = queue.receive(wait_seconds=1)
    first, second = (Work.parse(m["Body"]).message_id for m in raw)
    runner = SessionRunner(platform.services)

    def handle(work, final):
        if work.message_id == first:
            raise ConnectionError("DynamoDB is unreachable")
        runner.handle(work, final)

    records = [on_last_delivery(m) for m in raw]
    result = process_batch({"Records": records}, handle, give_up=runner.give_up)
    assert result == {"batchItemFailures": [{"itemIdentifier": raw[0]["MessageId"]}]}
    [reply] = terminal(platform, h)
    assert (reply.in_reply_to, reply.type.value, reply.error_code) == \
        (second, "error", "UNAVAILABLE")
    assert "nothing of it ran: please send it again" in reply.text
    runner.give_up(Work.parse(raw[1]["Body"]))  # delivered once more: still one reply
    assert len(terminal(platform, h)) == 1
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [e["QueriesGivenUp"] for e in emf] == [[1]]  # the alarm's metric counts it

    for m in raw:  # the first dead-lettered, the second deleted as it succeeded
        queue.delete(m["ReceiptHandle"])
    post(platform, key, h, "Roll 1d20")
    [third] = queue.receive(wait_seconds=1)
    assert process_batch({"Records": [record_of(third)]}, runner.handle,
                         give_up=runner.give_up) == {"batchItemFailures": []}
    assert [m.type.value for m in terminal(platform, h)] == ["error", "response"]


def test_a_query_given_up_unrun_gives_its_daily_query_back_once(platform, agents,
                                                               monkeypatch):
    """A user with one query a day whose query the runners never got to (answered
    UNAVAILABLE, "send it again") can send it again, and it runs: the unrun query's charge
    is given back with its reply, once however often the queue delivers it."""
    user_id, key = platform.user("una", daily_query_limit=1)
    h = session(platform, key, frontend=register(platform, key, "dice", agents.url + "/dice"))
    post(platform, key, h, "Roll 1d20")
    queue, usage = platform.services.queue, platform.services.usage
    [raw] = queue.receive(wait_seconds=1)
    runner = SessionRunner(platform.services)
    out_of_time = Invocation(remaining_ms=lambda: 0, record_seconds=1)
    sessions = platform.services.sessions
    unanswered = sessions.recent(h, 40)  # what a copy delivered at the same time reads
    for _ in range(2):  # its last delivery, then the same once more: one reply, one refund
        assert process_batch({"Records": [on_last_delivery(raw)]}, runner.handle,
                             invocation=out_of_time, give_up=runner.give_up
                             ) == {"batchItemFailures": []}
    # A copy that read the session before the reply was written gets as far as the write.
    monkeypatch.setattr(sessions, "recent", lambda *_: unanswered)
    runner.give_up(Work.parse(raw["Body"]))
    monkeypatch.undo()
    assert [m.error_code for m in terminal(platform, h)] == ["UNAVAILABLE"]
    assert usage.used("query", user_id) == 0
    queue.delete(raw["ReceiptHandle"])

    post(platform, key, h, "Roll 1d20")  # sent again: accepted (was RATE_LIMITED)
    [again] = queue.receive(wait_seconds=1)
    assert process_batch({"Records": [record_of(again)]}, runner.handle,
                         give_up=runner.give_up) == {"batchItemFailures": []}
    assert [m.type.value for m in terminal(platform, h)] == ["error", "response"]
    assert usage.used("query", user_id) == 1  # the day's one query, charged once


@pytest.mark.settings(max_running_queries=1)
@pytest.mark.parametrize("lapsed", [False, True])
def test_a_query_whose_run_died_and_is_given_up_is_interrupted_and_keeps_its_charge(
        platform, agents, monkeypatch, lapsed):
    """A run called the agent and died before its reply; its last delivery was given up:
    answered UNAVAILABLE ("nothing of it ran: send it again") with its charge given back,
    so the message sent again ran the agent twice, and the dead run's running slot stayed
    held (the user's one: the next query refused). It is answered INTERRUPTED as any
    redelivery of it is, charged once, and the slot is given back with that reply, also
    once its slot lapsed (a query of another session took the slot meanwhile)."""
    user_id, key = platform.user(f"ida{int(lapsed)}")
    dice = register(platform, key, "dice", agents.url + "/dice")
    h = session(platform, key, frontend=dice)
    post(platform, key, h, "Roll 1d20")
    queue, usage = platform.services.queue, platform.services.usage
    [raw] = queue.receive(wait_seconds=1)
    runner = SessionRunner(platform.services)
    calls_before = len(agents.calls)
    monkeypatch.setattr(runner, "_finish", lambda *a, **k: (_ for _ in ()).throw(
        ConnectionError("container died")))  # the agent was called, nothing stored
    assert process_batch({"Records": [record_of(raw)]}, runner.handle)["batchItemFailures"]
    monkeypatch.undo()
    assert len(agents.calls) == calls_before + 1
    if lapsed:  # later than the slot lasts, another session's query takes it and runs
        other = session(platform, key, frontend=dice)
        post(platform, key, other, "Roll 2d6")
        [elsewhere] = queue.receive(wait_seconds=1)
        monkeypatch.setattr(usage, "clock", lambda: utcnow() + LEASE_LASTS)
        assert process_batch({"Records": [record_of(elsewhere)]}, runner.handle) == {
            "batchItemFailures": []}
        monkeypatch.undo()
        assert terminal(platform, other)[-1].type.value == "response"
        queue.delete(elsewhere["ReceiptHandle"])
    out_of_time = Invocation(remaining_ms=lambda: 0, record_seconds=1)
    for _ in range(2):  # given up on its last delivery, then delivered once more
        assert process_batch({"Records": [on_last_delivery(raw)]}, runner.handle,
                             invocation=out_of_time, give_up=runner.give_up
                             ) == {"batchItemFailures": []}
    [reply] = terminal(platform, h)
    assert (reply.type.value, reply.error_code) == ("error", "INTERRUPTED"), reply
    assert "is not run again" in reply.text
    assert len(agents.calls) == calls_before + 1 + lapsed  # its run's call, nothing more
    assert usage.used("query", user_id) == 1 + lapsed  # its charge kept
    queue.delete(raw["ReceiptHandle"])

    post(platform, key, h, "Roll 1d20")  # the slot is free: it runs (was RATE_LIMITED)
    [again] = queue.receive(wait_seconds=1)
    assert process_batch({"Records": [record_of(again)]}, runner.handle) == {
        "batchItemFailures": []}
    assert [m.type.value for m in terminal(platform, h)] == ["error", "response"]


def test_a_sweep_never_run_on_its_last_delivery_is_queued_again(aws):
    """Work without a reply to give (a storage sweep, a corpus ingestion), left unrun near
    the invocation's end on its last delivery, is queued again instead of dead-lettered:
    under a new deduplication id, as SQS drops a second send of one for five minutes."""
    services = Services(aws)
    sweep = Work.sweep("ada/notes", 3)
    services.queue.enqueue(sweep)
    [raw] = services.queue.receive(wait_seconds=0)

    def handle(work, final):
        raise AssertionError("not started with 5 s left")

    result = process_batch({"Records": [on_last_delivery(raw)]}, handle,
                           Invocation(lambda: 5_000, 120), queue=services.queue,
                           give_up=SessionRunner(services).give_up)
    assert result == {"batchItemFailures": []}
    services.queue.delete(raw["ReceiptHandle"])  # Lambda deletes it: it succeeded
    [again] = services.queue.receive(wait_seconds=0)
    assert Work.parse(again["Body"]) == sweep
    assert again["Attributes"]["ApproximateReceiveCount"] == "1"


def test_a_prompt_poll_needs_an_exchange_s_time_left_and_is_queued_again_on_its_last(aws):
    """A prompt queue record is one callback exchange (5 s at most), not a query: it starts
    with 20 s of the invocation left. With less, on its last delivery, it is queued again."""
    services = Services(aws)
    work = PromptWork("s-gone", "q1", time.time() + 60, "p-1", 3)
    services.prompt_queue.schedule(work)
    [raw] = services.prompt_queue.receive(wait_seconds=0)
    event = {"Records": [on_last_delivery(raw)]}
    prompts = Prompts(services)
    # 20 s left: it runs (its session is gone: nothing to ask), nothing queued again.
    assert process_prompts(event, prompts, lambda: 20_000) == {"batchItemFailures": []}
    assert process_prompts(event, prompts, lambda: 10_000) == {"batchItemFailures": []}
    services.prompt_queue.delete(raw["ReceiptHandle"])
    [again] = services.prompt_queue.receive(wait_seconds=0)
    assert PromptWork.parse(again["Body"]) == work


def test_a_query_closed_because_it_could_not_be_queued_is_never_answered_later(
        platform, agents, monkeypatch):
    """Its error reply is its answer: a retry under its key queues it again (the first
    try may have died before queueing), and the runner skips it even once it is further
    back than the recent messages the runner reads."""
    from codeshot import ids
    from codeshot.models import Message, MessageType

    _, key = platform.user("quinn")
    dice = register(platform, key, "dice", agents.url + "/dice")
    h = session(platform, key, frontend=dice)
    roll = """mutation ($s: String!) { sendSessionMessage(messageData: {session: $s,
        text: "Roll 1d20", wait: false, idempotencyKey: "k1"}) { message { id } } }"""

    def unqueued(work, again=False):
        raise ConnectionError("SQS is unreachable")

    monkeypatch.setattr(platform.services.queue, "enqueue", unqueued)
    refused = platform.gql(key, roll, {"s": h})
    assert refused["errors"][0]["extensions"]["code"] == "AGENT_UNAVAILABLE"
    monkeypatch.undo()
    [query] = [m for m in platform.services.sessions.all_messages(h) if m.type.value == "query"]
    for n in range(45):  # newer messages push it out of the runner's recent history
        add_message(platform.services.sessions, Message(
            session_id=h, message_id=ids.ulid(), type=MessageType.THOUGHT, text=f"note {n}",
            sent_by="test"))
    again = platform.gql(key, roll, {"s": h})  # the retry: the same message, queued again
    assert again["data"]["sendSessionMessage"]["message"]["id"] == query.message_id
    [raw] = platform.services.queue.receive(wait_seconds=1)
    SessionRunner(platform.services).handle(Work.parse(raw["Body"]), False)
    replies = [m.type.value for m in platform.services.sessions.all_messages(h)
               if m.in_reply_to == query.message_id]
    assert replies == ["error"]  # not rolled after all


@pytest.mark.settings(query_time_budget_seconds=2)
def test_a_query_that_landed_during_the_wait_gets_its_whole_budget(platform, agents,
                                                                  monkeypatch):
    """A copy of a post the store did not confirm waits for its write to land, and it
    lands: the query runs with its whole budget. The wait came out of it: with a budget
    under the wait, the query was answered TIMEOUT, its agent never called (and
    charged)."""
    from codeshot.runner import session_runner

    monkeypatch.setattr(session_runner, "LANDING_SECONDS", 3.0)
    _, key = platform.user("lena")
    dice = register(platform, key, "dice", agents.url + "/dice")
    h = session(platform, key, frontend=dice)
    mid = post(platform, key, h, "Roll 1d20")
    platform.services.queue.receive(wait_seconds=1)  # the post's own copy: not run here
    looked, seen = SessionRunner._query, []

    def not_there_at_first(self, work, recent):  # the write lands during the wait
        seen.append(1)
        return session_runner.MISSING if len(seen) == 1 else looked(self, work, recent)

    monkeypatch.setattr(SessionRunner, "_query", not_there_at_first)
    calls = len(agents.calls)
    SessionRunner(platform.services).handle(Work(h, mid, unconfirmed_at=time.time()))
    [reply] = [m for m in terminal(platform, h) if m.in_reply_to == mid]
    assert reply.type.value == "response", (reply.error_code, reply.text)
    assert len(agents.calls) == calls + 1


@pytest.mark.parametrize("budget", [30, 120])
def test_a_wait_before_the_query_comes_out_of_its_records_reserve(budget):
    """The deadline of a query that started after a 15 s wait: its whole budget while its
    record's reserve (the longest a record may take) has room for it, else the reserve's
    end (counted from the record's start), so the invocation keeps the time its next
    record was promised."""
    from codeshot.runner.fairness import query_deadline
    from codeshot.settings import Settings, runner_record_seconds

    settings = Settings(region="us-east-1", query_time_budget_seconds=budget)
    reserve = runner_record_seconds(budget)
    now = time.monotonic()
    deadline = query_deadline(settings, record_start=now - 15)
    assert deadline == pytest.approx(min(now + budget, now - 15 + reserve), abs=1)
    assert deadline - now == pytest.approx(30 if budget == 30 else 105, abs=1)
