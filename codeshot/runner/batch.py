"""SQS FIFO batches for the session runner, with partial batch failure reporting.

Within a message group (a session) order matters: once a record fails, the later
records of that group are reported failed too, untouched, so SQS redelivers them in
order. Other sessions' records in the batch go on, each session in its own thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codeshot.store.queue import Work
from codeshot.store.tables import SESSION_QUEUE

log = logging.getLogger("codeshot.runner")

Handle = Callable[[Work, bool], None]  # (work, final_attempt)


def process_batch(event: dict[str, Any], handle: Handle) -> dict[str, list[dict[str, str]]]:
    """Each session's records in order, different sessions side by side (a slow agent in
    one session never holds up the others); the records to redeliver."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in event.get("Records", []):
        group = record.get("attributes", {}).get("MessageGroupId", "")
        groups.setdefault(group, []).append(record)
    if len(groups) <= 1:
        failures = [f for records in groups.values() for f in _process_group(records, handle)]
    else:
        with ThreadPoolExecutor(max_workers=len(groups),
                                thread_name_prefix="session") as pool:
            done = pool.map(lambda records: _process_group(records, handle), groups.values())
            failures = [f for group_failures in done for f in group_failures]
    return {"batchItemFailures": failures}


def _process_group(records: list[dict[str, Any]], handle: Handle) -> list[dict[str, str]]:
    """One session's records in order; after a failure the rest are failed untouched."""
    failures: list[dict[str, str]] = []
    for record in records:
        if failures:
            failures.append({"itemIdentifier": record["messageId"]})
            continue
        try:
            work = Work.parse(record["body"])
        except (ValueError, KeyError, TypeError):
            log.error("dropping malformed queue message %s", record.get("messageId"))
            continue  # retrying cannot fix it
        final = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1")) >= \
            SESSION_QUEUE.max_receive_count
        try:
            handle(work, final)
        except Exception:
            log.exception("session %s message %s failed", work.session_id, work.message_id)
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
