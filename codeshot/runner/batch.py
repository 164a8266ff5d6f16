"""SQS batches for the session runner, with partial batch failure reporting.

Within a message group (a session) order matters: once a record fails, the later
records of that group are reported failed too, untouched, so SQS redelivers them in
order. Other sessions' records in the batch go on, each session in its own thread; a
record without a group (the standard prompt queue's) is a group of its own.

No record starts unless the invocation has left what one record may take (a query's
``query_time_budget_seconds``) and ``RUNNER_RECORD_MARGIN_SECONDS``: it and the records of
its session after it are reported failed, untouched, so a batch that would run into the
Lambda timeout ends first and SQS redelivers what it did not process (a timed-out
invocation reports nothing, and its whole batch comes back). Records left untouched are
handed back to their queue (visible again at once, not after the visibility timeout of
half an hour); a record that failed waits that out.

Every delivery counts against the queue's ``max_receive_count``, untouched or not. A
record left untouched on its last delivery would go to the dead-letter queue never run,
so it is given up instead (``GiveUp``): a query is answered with an error in its turn, a
record whose order does not matter is sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from codeshot.observability import correlated
from codeshot.settings import RUNNER_RECORD_MARGIN_SECONDS
from codeshot.store.queue import PromptQueue, SessionQueue, Work
from codeshot.store.tables import SESSION_QUEUE

log = logging.getLogger("codeshot.runner")

Handle = Callable[[Any, bool], None]  # (work, final_attempt); work: what ``parse`` made
# Work on its last delivery that will not run (see above): answered or sent again, unrun.
GiveUp = Callable[[Any], None]
Parse = Callable[[str], Any]  # a record's body -> its work (Work, PromptWork)
RemainingMs = Callable[[], int]  # the Lambda context's get_remaining_time_in_millis

# How soon a record left untouched comes back: at once. A session's next records still
# wait for this invocation to end: SQS delivers none of a FIFO group while one of its
# messages is in flight, and Lambda deletes those that succeeded only once it returns.
HAND_BACK_SECONDS = 0


@dataclass(frozen=True)
class Invocation:
    """The Lambda invocation a batch runs in: its time left, and the longest one record
    may take (a query's time budget)."""

    remaining_ms: RemainingMs
    record_seconds: float

    @property
    def reserve_ms(self) -> int:
        """What a record needs left to start: its time and the writes after it."""
        return round((self.record_seconds + RUNNER_RECORD_MARGIN_SECONDS) * 1000)

    def too_late(self) -> bool:
        left = self.remaining_ms()
        if left >= self.reserve_ms:
            return False
        log.warning("starting no more records: the invocation ends in %d ms", left)
        return True


def process_batch(event: dict[str, Any], handle: Handle, invocation: Invocation | None = None,
                  parse: Parse = Work.parse, queue: SessionQueue | PromptQueue | None = None,
                  give_up: GiveUp | None = None) -> dict[str, list[dict[str, str]]]:
    """Each session's records in order, different sessions side by side (a slow agent in
    one session never holds up the others); the records to redeliver. Those left
    untouched are handed back to ``queue`` (the event's) to come back soon, or given up
    on their last delivery."""
    groups = grouped(event.get("Records", []))

    def process(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
        return _process_group(records, handle, invocation, parse, give_up)

    if len(groups) <= 1:
        failed = [f for records in groups.values() for f in process(records)]
    else:
        with ThreadPoolExecutor(max_workers=len(groups),
                                thread_name_prefix="session") as pool:
            failed = [f for group_failed in pool.map(process, groups.values())
                      for f in group_failed]
    if queue is not None:
        queue.set_visibility([record["receiptHandle"] for record, untouched in failed
                              if untouched], HAND_BACK_SECONDS)
    return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}
                                  for record, _ in failed]}


def grouped(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The records by the group each runs in (:func:`group_of`), each group in order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(group_of(record), []).append(record)
    return groups


def group_of(record: dict[str, Any]) -> tuple[str, str]:
    """The group a record runs in, in order: its FIFO message group. A standard queue's
    records (the prompt queue's) have none: each is its own, so they run side by side and
    one's failure holds up no other."""
    group = record.get("attributes", {}).get("MessageGroupId")
    return ("group", group) if group is not None else ("record", record["messageId"])


def _process_group(records: list[dict[str, Any]], handle: Handle,
                   invocation: Invocation | None, parse: Parse, give_up: GiveUp | None
                   ) -> list[tuple[dict[str, Any], bool]]:
    """One session's records in order; after a failure, or too close to the invocation's
    end, the rest are failed untouched (or given up, on their last delivery). The failed
    records, each with whether it was left untouched."""
    failed: list[tuple[dict[str, Any], bool]] = []
    for record in records:
        try:
            work = parse(record["body"])
        except (ValueError, KeyError, TypeError):
            log.error("dropping malformed queue message %s", record.get("messageId"))
            continue  # retrying cannot fix it
        final = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1")) >= \
            SESSION_QUEUE.max_receive_count
        untouched = bool(failed) or (invocation is not None and invocation.too_late())
        if untouched and (not final or give_up is None):
            if final:
                log.error("%s goes to the dead-letter queue unrun", record["messageId"])
            failed.append((record, True))
            continue
        try:
            # A query's logs and agent calls carry its correlation id (a prompt has none).
            with correlated(getattr(work, "correlation_id", None)):
                if untouched and give_up is not None:
                    log.warning("giving up on %s, unrun: its last delivery", record["messageId"])
                    give_up(work)
                else:
                    handle(work, final)
        except Exception:
            log.exception("work %s failed: %s", record["messageId"], work)
            failed.append((record, False))
    return failed


def record_of(message: dict[str, Any]) -> dict[str, Any]:
    """An SQS ReceiveMessage result in the shape Lambda's event source gives it."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "eventSource": "aws:sqs",
    }


def source_queue(event: dict[str, Any]) -> str:
    """The name of the queue a Lambda SQS event's records come from (one per event)."""
    records = event.get("Records") or [{}]
    return str(records[0].get("eventSourceARN", "")).rsplit(":", 1)[-1]
