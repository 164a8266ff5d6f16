"""The local stack's queue poller, feeding moto's queues to the runner as Lambda would,
but a failed record back in seconds."""

from __future__ import annotations

import threading
import time

from codeshot.local.poller import RETRY_DELAY_SECONDS, QueuePoller
from codeshot.store.queue import PromptQueue, PromptWork, SessionQueue, Work


def test_a_failed_query_comes_back_in_seconds(aws):
    """Lambda would wait out the visibility timeout (half an hour); locally a failed record
    is back after RETRY_DELAY_SECONDS."""
    queue = SessionQueue(aws)
    handled: list[float] = []
    again = threading.Event()

    def handle(work, final):
        handled.append(time.monotonic())
        if len(handled) == 1:
            raise ConnectionError("DynamoDB hiccup")
        again.set()

    queue.enqueue(Work("s1", "m1"))
    poller = QueuePoller(queue, handle)
    poller.start()
    try:
        assert again.wait(10)
    finally:
        poller.stop()
    assert RETRY_DELAY_SECONDS <= handled[1] - handled[0] < RETRY_DELAY_SECONDS + 3


def test_prompt_polls_are_acknowledged_each_as_it_ends_not_with_the_slowest(aws):
    """The prompt queue's records have no group: each is a batch of its own, so a quick
    exchange is deleted from the queue while a slow one still runs (they used to share
    one batch, with a pool of its own, acknowledged when the slowest ended)."""
    queue = PromptQueue(aws)
    for question in ("slow", "quick-1", "quick-2"):
        queue.schedule(PromptWork("s1", question, time.time() + 60))
    in_flight: list[int] = []
    slow_done = threading.Event()

    def handle(work, final):
        if work.question_id != "slow":
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until the quick ones are deleted, or 5 s
            attributes = queue.sqs.get_queue_attributes(
                QueueUrl=queue.url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
            in_flight.append(int(attributes["Attributes"]
                                 ["ApproximateNumberOfMessagesNotVisible"]))
            if in_flight[-1] == 1:
                break
            time.sleep(0.1)
        slow_done.set()

    poller = QueuePoller(queue, handle, parse=PromptWork.parse, name="prompt-poller")
    poller.start()
    try:
        assert slow_done.wait(10)
    finally:
        poller.stop()
    assert in_flight[-1] == 1, in_flight  # only the slow one, while it runs
