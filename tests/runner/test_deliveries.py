"""A session's backlog through Lambda's SQS trigger, emulated on moto around the runner's
handler: the FIFO queue and its dead-letter queue as the platform makes them (5 receives),
the time of an invocation on a simulated clock. No query is cut off by the Lambda timeout
and none goes to the dead-letter queue without an answer."""

from __future__ import annotations

from types import SimpleNamespace

import boto3
import pytest

import handlers.runner
from codeshot.runner.batch import record_of
from codeshot.settings import CORPUS_INGEST_SECONDS
from codeshot.store.queue import SessionQueue, Work
from codeshot.store.tables import RUNNER_TIMEOUT_SECONDS, SESSION_QUEUE


class InvocationKilled(BaseException):
    """Lambda's timeout: the invocation stops where it is and reports nothing."""


class ClockedRunner:
    """What the handler calls of the session runner, on a simulated clock: each query
    takes its whole time budget. Its replies as the session shows them: an answer, or
    INTERRUPTED for a query whose run the timeout cut off (the runner's lease), or
    UNAVAILABLE for one given up unrun."""

    def __init__(self, settings, failing: str | None = None) -> None:
        self.s = SimpleNamespace(settings=settings, queue=SessionQueue(settings))
        self.failing, self.clock = failing, 0.0
        self.took: dict[str, float] = {}  # seconds a corpus version's ingestion takes
        self.replies: dict[str, str] = {}
        self.cut_off: set[str] = set()

    def handle(self, work: Work, final: bool) -> None:
        if work.message_id == self.failing:
            raise ConnectionError("its reply's write keeps failing")
        if work.message_id in self.replies:
            return  # answered already
        if work.message_id in self.cut_off:
            self.replies[work.message_id] = "INTERRUPTED"
            return
        self.clock += self.took.get(work.message_id, CORPUS_INGEST_SECONDS) \
            if work.kind == Work.CORPUS else self.s.settings.query_time_budget_seconds
        if self.clock > RUNNER_TIMEOUT_SECONDS:
            self.cut_off.add(work.message_id)
            raise InvocationKilled
        self.replies[work.message_id] = "answer"

    def give_up(self, work: Work) -> None:
        self.replies.setdefault(work.message_id, "UNAVAILABLE")

    def remaining_ms(self) -> int:
        return int((RUNNER_TIMEOUT_SECONDS - self.clock) * 1000)


def trigger(runner: ClockedRunner, queue: SessionQueue) -> int:
    """Lambda's SQS trigger until the queue is empty; the invocations the timeout killed.
    A record that failed, or a killed invocation's batch, waits out the visibility timeout
    (skipped here: it is visible again at once)."""
    killed = 0
    for _ in range(100):
        messages = queue.receive(max_messages=10, wait_seconds=0)
        if not messages:
            return killed
        runner.clock = 0.0
        records = [record_of(m) for m in messages]
        context = SimpleNamespace(get_remaining_time_in_millis=runner.remaining_ms)
        try:
            out = handlers.runner.handler({"Records": records}, context)
            failed = {f["itemIdentifier"] for f in out["batchItemFailures"]}
        except InvocationKilled:
            killed += 1
            failed = {r["messageId"] for r in records}
        for record in records:
            if record["messageId"] in failed:
                queue.sqs.change_message_visibility(QueueUrl=queue.url, VisibilityTimeout=0,
                                                    ReceiptHandle=record["receiptHandle"])
            else:
                queue.delete(record["receiptHandle"])
    raise AssertionError("the queue never emptied")


def dead_letters(settings) -> list[str]:
    sqs = boto3.client("sqs", region_name=settings.region)
    url = sqs.get_queue_url(QueueName=SESSION_QUEUE.dlq_name(settings.queue_name))["QueueUrl"]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    return sorted(Work.parse(m["Body"]).message_id for m in messages.get("Messages", []))


def backlog(runner: ClockedRunner, count: int) -> list[str]:
    ids = [f"m{i:02d}" for i in range(count)]
    for message_id in ids:
        runner.s.queue.enqueue(Work("s1", message_id))
    return ids


@pytest.mark.parametrize("budget", [120, 160, 200])
def test_queries_taking_their_whole_budget_are_never_cut_off_by_the_lambda_timeout(
        aws, monkeypatch, budget):
    """With CODESHOT_QUERY_TIME_BUDGET_SECONDS above 120, a query used to start with too
    little of the invocation left: the timeout cut it off (answered INTERRUPTED) and, five
    receives on, dead-lettered the queries behind it unanswered."""
    runner = ClockedRunner(aws.replace(query_time_budget_seconds=budget))
    monkeypatch.setattr(handlers.runner, "_runner", lambda: runner)
    ids = backlog(runner, 10)
    assert trigger(runner, runner.s.queue) == 0
    assert "INTERRUPTED" not in runner.replies.values()
    # Every query has its reply, in the session's order: an answer, or for the backlog
    # that outlasted five receives, UNAVAILABLE (send it again), never silence.
    assert list(runner.replies) == ids
    assert dead_letters(aws) == []
    assert list(runner.replies.values())[:3] == ["answer"] * 3


def test_queries_behind_one_that_keeps_failing_are_answered_not_dead_lettered(aws,
                                                                             monkeypatch):
    """m00 fails every delivery: the session's later queries, never run behind it, used
    to go to the dead-letter queue with it, unanswered."""
    runner = ClockedRunner(aws, failing="m00")
    monkeypatch.setattr(handlers.runner, "_runner", lambda: runner)
    backlog(runner, 4)
    assert trigger(runner, runner.s.queue) == 0
    assert runner.replies == {"m01": "UNAVAILABLE", "m02": "UNAVAILABLE", "m03": "UNAVAILABLE"}
    # The failing one itself is dead-lettered after its last attempt, which in the runner
    # answers it with an error unless that write fails too (QueriesGivenUp's alarm).
    assert dead_letters(aws) == ["m00"]


def test_a_corpus_ingestion_never_starts_too_late_under_a_short_query_budget(aws, monkeypatch):
    """An ingestion takes up to its own time (CORPUS_INGEST_SECONDS), whatever the query
    budget: with a 60 s budget the runner's reserve was 70 s, so an agent's third version,
    after a short first one and a full second, started with 80 s left and was cut off."""
    runner = ClockedRunner(aws.replace(query_time_budget_seconds=60))
    monkeypatch.setattr(handlers.runner, "_runner", lambda: runner)
    runner.took["v1"] = 100
    for version in ("v1", "v2", "v3"):
        runner.s.queue.enqueue(Work.corpus("ann/handbook", version))
    assert trigger(runner, runner.s.queue) == 0
    assert runner.replies == {"v1": "answer", "v2": "answer", "v3": "answer"}
