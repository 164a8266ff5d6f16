"""The platform's queues. The session work queue (SQS FIFO): one message group per
session, keeping each session's messages in order; the message id deduplicates retries
of the same send (FIFO ids: at most 128 characters of ASCII letters, digits and
punctuation, which SQS checks and moto does not). The prompt queue (standard, for its
per-message delays): the polls of an Agent Protocol task's callback, each sent with its
backoff as its delay. The erasure queue (standard, for the same reason): the parts of a
deleted user's erasure."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from codeshot import aws, ids
from codeshot.settings import Settings

if TYPE_CHECKING:
    from types_boto3_sqs.type_defs import ChangeMessageVisibilityBatchRequestEntryTypeDef

log = logging.getLogger("codeshot.store")
SQS_BATCH = 10  # entries per ChangeMessageVisibilityBatch
# How long after a post gave up on a write DynamoDB did not confirm a send of it may
# still land (one in flight when the connection dropped or the read timed out). The
# runner's copy of its message (:attr:`Work.unconfirmed_at`) taken before then and finding
# no message waits out the rest and looks once more: skipped at once, a write landing
# after the look was never answered (the retry under its key finds it answered by then;
# an Agent Protocol callback's answer waits for its exchange's redelivery to queue it
# again). A client without a key waits it out before it reads the session.
LANDING_SECONDS = 15.0


@dataclass(frozen=True)
class Work:
    """A queued query (``session_id``, ``message_id``); with ``kind`` "corpus" an agent's
    corpus ingestion (``corpus/<agent id>`` as its ``session_id``, the version as its id);
    with ``kind`` "sweep" a part of the sweep of a deleted agent registration's user
    storage (``sweep/<agent id>``, "<registration>.<part>" as its id: each part is queued
    by the one before, under an id of its own); with ``kind`` "purge" a part of a
    deleted session's deletion (its ``session_id``, "purge.<session id>.<part>" as its
    id), in the session's own group, after the queries queued before it."""

    session_id: str
    message_id: str
    kind: str = "query"
    correlation_id: str | None = None  # the posting request's (codeshot/observability.py)
    # A copy queued by a post whose write DynamoDB did not confirm: when (epoch seconds).
    # A send of it may land up to LANDING_SECONDS after that.
    unconfirmed_at: float | None = None

    CORPUS = "corpus"
    SWEEP = "sweep"
    PURGE = "purge"

    @classmethod
    def corpus(cls, agent_id: str, version: str) -> Work:
        return cls(f"{cls.CORPUS}/{agent_id}", version, cls.CORPUS)

    @classmethod
    def sweep(cls, agent_id: str, registration: int, part: int = 0) -> Work:
        return cls(f"{cls.SWEEP}/{agent_id}", f"{registration}.{part}", cls.SWEEP)

    @classmethod
    def purge(cls, session_id: str, part: int = 0) -> Work:
        return cls(session_id, f"{cls.PURGE}.{session_id}.{part}", cls.PURGE)

    @property
    def group(self) -> str:
        """Its FIFO message group: a query's or a purge's session; a corpus ingestion's or
        a sweep's agent, by a hash of its id (an agent id is up to 127 characters, a group
        id at most 128)."""
        if self.kind in ("query", self.PURGE):
            return self.session_id
        return f"{self.kind}/{hashlib.sha256(self.agent_id.encode()).hexdigest()[:40]}"

    @property
    def agent_id(self) -> str:
        """The agent of a corpus ingestion or a sweep."""
        return self.session_id.split("/", 1)[1]

    @property
    def registration(self) -> int:
        """The registration a sweep is of."""
        return int(self.message_id.split(".")[0])

    def next_part(self) -> Work:
        """The sweep's or the purge's part after this one."""
        part = int(self.message_id.rsplit(".", 1)[1]) + 1
        if self.kind == self.PURGE:
            return Work.purge(self.session_id, part)
        return Work.sweep(self.agent_id, self.registration, part)

    def body(self) -> str:
        body: dict[str, str | float] = {"session_id": self.session_id,
                                        "message_id": self.message_id}
        if self.kind != "query":
            body["kind"] = self.kind
        if self.correlation_id:
            body["correlation_id"] = self.correlation_id
        if self.unconfirmed_at is not None:
            body["unconfirmed_at"] = self.unconfirmed_at
        return json.dumps(body)

    @classmethod
    def parse(cls, body: str) -> Work:
        data = json.loads(body)
        correlation, unconfirmed = data.get("correlation_id"), data.get("unconfirmed_at")
        return cls(session_id=str(data["session_id"]), message_id=str(data["message_id"]),
                   kind=str(data.get("kind", "query")),
                   correlation_id=str(correlation) if correlation else None,
                   unconfirmed_at=None if unconfirmed is None else float(unconfirmed))


PROMPT_FIRST_DELAY_SECONDS = 1  # a prompt's first pause; each one after doubles


@dataclass(frozen=True)
class PromptWork:
    """The next exchange with a task's callback about the question ``question_id``: the
    prompt's POST (no ``prompt_id`` yet), or poll number ``attempt`` of its status; with
    ``answer_id``, try number ``attempt`` to post again the callback's answer the runner
    refused at the user's running-query cap (that message's id), once a slot is free."""

    session_id: str
    question_id: str
    deadline: float  # epoch seconds: no answer by then ends the question
    prompt_id: str | None = None
    attempt: int = 0
    answer_id: str | None = None

    def body(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, body: str) -> PromptWork:
        data = json.loads(body)
        prompt_id, answer_id = data.get("prompt_id"), data.get("answer_id")
        return cls(session_id=str(data["session_id"]), question_id=str(data["question_id"]),
                   deadline=float(data["deadline"]),
                   prompt_id=None if prompt_id is None else str(prompt_id),
                   attempt=int(data.get("attempt", 0)),
                   answer_id=None if answer_id is None else str(answer_id))


@dataclass(frozen=True)
class ErasureWork:
    """Part ``part`` of deleted user ``user_id``'s erasure (codeshot/usecases/erasure.py:
    which step, and where in it, the tombstone says). ``sent`` names this send: a delivery
    of it that finds its part counted with its name counted it, and may have failed before
    sending the next part (a copy of the part, sent again, counted by another name)."""

    user_id: str
    part: int = 0
    sent: str = field(default_factory=lambda: uuid.uuid4().hex)

    def body(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, body: str) -> ErasureWork:
        data = json.loads(body)
        return cls(user_id=str(data["user_id"]), part=int(data["part"]),
                   sent=str(data["sent"]))


class _Queue:
    def __init__(self, url: str | None, what: str, settings: Settings,
                 sqs: Any | None = None) -> None:
        if not url:
            raise RuntimeError(f"{what} is not set")
        self.url = url
        self.sqs = sqs or aws.client("sqs", settings)

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

    def set_visibility(self, receipt_handles: list[str], seconds: int) -> None:
        """Make received messages visible again in ``seconds`` (0: at once), ten a call.
        Best effort: one that cannot be changed comes back after the visibility timeout."""
        for start in range(0, len(receipt_handles), SQS_BATCH):
            entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                for i, handle in enumerate(receipt_handles[start:start + SQS_BATCH])]
            try:
                out = self.sqs.change_message_visibility_batch(QueueUrl=self.url,
                                                               Entries=entries)
            except Exception:
                log.exception("could not change the visibility of %d messages", len(entries))
                continue
            for failure in out.get("Failed", []):
                log.warning("could not change a message's visibility: %s",
                            failure.get("Message"))


class SessionQueue(_Queue):
    def __init__(self, settings: Settings, sqs: Any | None = None) -> None:
        super().__init__(settings.queue_url, "CODESHOT_QUEUE_URL", settings, sqs)

    def enqueue(self, work: Work, again: bool = False) -> None:
        """``again``: a fresh try of work sent before, under a new deduplication id (SQS
        drops a second send of an id within five minutes)."""
        self.sqs.send_message(
            QueueUrl=self.url,
            MessageBody=work.body(),
            MessageGroupId=work.group,
            MessageDeduplicationId=f"{work.message_id}.{ids.ulid()}" if again
            else work.message_id,
        )


MAX_DELAY_SECONDS = 900  # SQS's limit on a message's delay


class PromptQueue(_Queue):
    def __init__(self, settings: Settings, sqs: Any | None = None) -> None:
        super().__init__(settings.prompt_queue_url, "CODESHOT_PROMPT_QUEUE_URL", settings, sqs)

    def schedule(self, work: PromptWork, delay_seconds: int = 0) -> None:
        self.sqs.send_message(QueueUrl=self.url, MessageBody=work.body(),
                              DelaySeconds=max(0, min(delay_seconds, MAX_DELAY_SECONDS)))


class ErasureQueue(_Queue):
    def __init__(self, settings: Settings, sqs: Any | None = None) -> None:
        super().__init__(settings.erasure_queue_url, "CODESHOT_ERASURE_QUEUE_URL", settings,
                         sqs)

    def send(self, work: ErasureWork, delay_seconds: int = 0) -> None:
        self.sqs.send_message(QueueUrl=self.url, MessageBody=work.body(),
                              DelaySeconds=max(0, min(delay_seconds, MAX_DELAY_SECONDS)))
