"""SQS FIFO batches for the session runner, with partial batch failure reporting.

Within a message group (a session) order matters: once a record fails, the later
records of that group are reported failed too, untouched, so SQS redelivers them in
order. Other sessions' records in the batch go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from codeshot.store.queue import Work
from codeshot.store.tables import SESSION_QUEUE

log = logging.getLogger("codeshot.runner")

Handle = Callable[[Work, bool], None]  # (work, final_attempt)


def process_batch(event: dict[str, Any], handle: Handle) -> dict[str, list[dict[str, str]]]:
    failures: list[dict[str, str]] = []
    failed_groups: set[str] = set()
    for record in event.get("Records", []):
        attributes = record.get("attributes", {})
        group = attributes.get("MessageGroupId", "")
        if group in failed_groups:
            failures.append({"itemIdentifier": record["messageId"]})
            continue
        try:
            work = Work.parse(record["body"])
        except (ValueError, KeyError, TypeError):
            log.error("dropping malformed queue message %s", record.get("messageId"))
            continue  # retrying cannot fix it
        final = int(attributes.get("ApproximateReceiveCount", "1")) >= \
            SESSION_QUEUE.max_receive_count
        try:
            handle(work, final)
        except Exception:
            log.exception("session %s message %s failed", work.session_id, work.message_id)
            failures.append({"itemIdentifier": record["messageId"]})
            failed_groups.add(group)
    return {"batchItemFailures": failures}


def record_of(message: dict[str, Any]) -> dict[str, Any]:
    """An SQS ReceiveMessage result in the shape Lambda's event source gives it."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "eventSource": "aws:sqs",
    }
