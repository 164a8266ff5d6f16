"""SQS batches for the session runner, with partial batch failure reporting.

Within a message group (a session) order matters: once a record fails, the later
records of that group are reported failed too, untouched, so SQS redelivers them in
order. Other sessions' records in the batch go on, each session in its own thread; a
record without a group (the standard prompt queue's) is a group of its own.

No record starts once less than ``RECORD_RESERVE_MS`` of the invocation is left: it and
the records of its session after it are reported failed, untouched, so a batch that would
run into the Lambda timeout ends first and SQS redelivers what it did not process (a
timed-out invocation reports nothing, and its whole batch comes back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codeshot.observability import correlated
from codeshot.store.queue import Work
from codeshot.store.tables import SESSION_QUEUE

log = logging.getLogger("codeshot.runner")

Handle = Callable[[Any, bool], None]  # (work, final_attempt); work: what ``parse`` made
Parse = Callable[[str], Any]  # a record's body -> its work (Work, PromptWork)
RemainingMs = Callable[[], int]  # the Lambda context's get_remaining_time_in_millis

# What one query may take: CODESHOT_QUERY_TIME_BUDGET_SECONDS (120 s by default) and the
# writes of its reply.
RECORD_RESERVE_MS = 130_000


def process_batch(event: dict[str, Any], handle: Handle, remaining_ms: RemainingMs | None = None,
                  parse: Parse = Work.parse) -> dict[str, list[dict[str, str]]]:
    """Each session's records in order, different sessions side by side (a slow agent in
    one session never holds up the others); the records to redeliver."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in event.get("Records", []):
        # A standard queue's records (the prompt queue's) have no group: each is its own,
        # so they run side by side and one's failure holds up no other.
        group = record.get("attributes", {}).get("MessageGroupId")
        key = ("group", group) if group is not None else ("record", record["messageId"])
        groups.setdefault(key, []).append(record)
    if len(groups) <= 1:
        failures = [f for records in groups.values()
                    for f in _process_group(records, handle, remaining_ms, parse)]
    else:
        with ThreadPoolExecutor(max_workers=len(groups),
                                thread_name_prefix="session") as pool:
            done = pool.map(lambda records: _process_group(records, handle, remaining_ms,
                                                           parse), groups.values())
            failures = [f for group_failures in done for f in group_failures]
    return {"batchItemFailures": failures}


def _process_group(records: list[dict[str, Any]], handle: Handle,
                   remaining_ms: RemainingMs | None, parse: Parse) -> list[dict[str, str]]:
    """One session's records in order; after a failure, or too close to the invocation's
    end, the rest are failed untouched."""
    failures: list[dict[str, str]] = []
    for record in records:
        if not failures and remaining_ms is not None and remaining_ms() < RECORD_RESERVE_MS:
            log.warning("leaving %s for the next delivery: the invocation ends in %d ms",
                        record["messageId"], remaining_ms())
            failures.append({"itemIdentifier": record["messageId"]})
            continue
        if failures:
            failures.append({"itemIdentifier": record["messageId"]})
            continue
        try:
            work = parse(record["body"])
        except (ValueError, KeyError, TypeError):
            log.error("dropping malformed queue message %s", record.get("messageId"))
            continue  # retrying cannot fix it
        final = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1")) >= \
            SESSION_QUEUE.max_receive_count
        try:
            # A query's logs and agent calls carry its correlation id (a prompt has none).
            with correlated(getattr(work, "correlation_id", None)):
                handle(work, final)
        except Exception:
            log.exception("session %s work %s failed", work.session_id, record["messageId"])
            failures.append({"itemIdentifier": record["messageId"]})
    return failures


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
