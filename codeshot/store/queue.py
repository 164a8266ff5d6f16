"""The session work queue (SQS FIFO): one message group per session, keeping each
session's messages in order; the message id deduplicates retries of the same send."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from codeshot import aws
from codeshot.settings import Settings


@dataclass(frozen=True)
class Work:
    """A queued query (``session_id``, ``message_id``), or with ``kind`` "corpus" an
    agent's corpus ingestion (``corpus/<agent id>`` as its group, the version as its id)."""

    session_id: str
    message_id: str
    kind: str = "query"

    CORPUS = "corpus"

    @classmethod
    def corpus(cls, agent_id: str, version: str) -> Work:
        return cls(f"{cls.CORPUS}/{agent_id}", version, cls.CORPUS)

    @property
    def agent_id(self) -> str:
        """The agent of a corpus ingestion."""
        return self.session_id.removeprefix(f"{self.CORPUS}/")

    def body(self) -> str:
        body = {"session_id": self.session_id, "message_id": self.message_id}
        return json.dumps(body if self.kind == "query" else {**body, "kind": self.kind})

    @classmethod
    def parse(cls, body: str) -> Work:
        data = json.loads(body)
        return cls(session_id=str(data["session_id"]), message_id=str(data["message_id"]),
                   kind=str(data.get("kind", "query")))


class SessionQueue:
    def __init__(self, settings: Settings, sqs: Any | None = None) -> None:
        if not settings.queue_url:
            raise RuntimeError("CODESHOT_QUEUE_URL is not set")
        self.url = settings.queue_url
        self.sqs = sqs or aws.client("sqs", settings)

    def enqueue(self, work: Work) -> None:
        self.sqs.send_message(
            QueueUrl=self.url,
            MessageBody=work.body(),
            MessageGroupId=work.session_id,
            MessageDeduplicationId=work.message_id,
        )

    def receive(self, max_messages: int = 10, wait_seconds: int = 1) -> list[dict[str, Any]]:
        """Raw SQS messages, for the local poller (Lambda receives them as events)."""
        out = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=wait_seconds,
            AttributeNames=["All"],
        )
        return [dict(m) for m in out.get("Messages", [])]

    def delete(self, receipt_handle: str) -> None:
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=receipt_handle)
