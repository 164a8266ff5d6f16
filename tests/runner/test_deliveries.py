"""A session's backlog through Lambda's SQS trigger, emulated on moto around the runner's
handler: the FIFO queue and its dead-letter queue as the platform makes them (5 receives),
the time of an invocation on a simulated clock. No query is cut off by the Lambda
timeout."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import handlers.runner
from codeshot.runner.batch import record_of
from codeshot.store.queue import SessionQueue, Work
from codeshot.store.tables import RUNNER_TIMEOUT_SECONDS


class InvocationKilled(BaseException):
    """Lambda's timeout: the invocation stops where it is and reports nothing."""


class ClockedRunner:
    """What the handler calls of the session runner, on a simulated clock: each query
    takes its whole time budget. Its replies as the session shows them: an answer, or
    INTERRUPTED for a query whose run the timeout cut off (the runner's lease)."""

    def __init__(self, settings) -> None:
        self.s = SimpleNamespace(settings=settings, queue=SessionQueue(settings))
        self.clock = 0.0
        self.replies: dict[str, str] = {}
        self.cut_off: set[str] = set()

    def handle(self, work: Work, final: bool) -> None:
        if work.message_id in self.replies:
            return  # answered already
        if work.message_id in self.cut_off:
            self.replies[work.message_id] = "INTERRUPTED"
            return
        self.clock += self.s.settings.query_time_budget_seconds
        if self.clock > RUNNER_TIMEOUT_SECONDS:
            self.cut_off.add(work.message_id)
            raise InvocationKilled
        self.replies[work.message_id] = "answer"

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


def backlog(runner: ClockedRunner, count: int) -> list[str]:
    ids = [f"m{i:02d}" for i in range(count)]
    for message_id in ids:
        runner.s.queue.enqueue(Work("s1", message_id))
    return ids


@pytest.mark.parametrize("budget", [120, 160, 200])
def test_queries_taking_their_whole_budget_are_never_cut_off_by_the_lambda_timeout(
        aws, monkeypatch, budget):
    """With CODESHOT_QUERY_TIME_BUDGET_SECONDS above 120, a query used to start with too
    little of the invocation left: the timeout cut it off (answered INTERRUPTED), and its
    whole batch waited out the visibility timeout."""
    runner = ClockedRunner(aws.replace(query_time_budget_seconds=budget))
    monkeypatch.setattr(handlers.runner, "_runner", lambda: runner)
    ids = backlog(runner, 10)
    assert trigger(runner, runner.s.queue) == 0
    assert "INTERRUPTED" not in runner.replies.values()
    assert list(runner.replies) == ids[:len(runner.replies)]  # in the session's order
    assert len(runner.replies) >= 5
