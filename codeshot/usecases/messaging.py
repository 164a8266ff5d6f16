"""Posting a user's message to a session and following its reply.

One DynamoDB transaction checks the session is the poster's (and not being deleted),
charges the daily quota, stores the message, binds its embeds and (optionally) records an
idempotency key: it all happens or none of it does, so a refused or failed post stores
nothing, and a retried post returns the first message. A plain post reads nothing first.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from codeshot import ids
from codeshot.errors import (
    AgentUnavailable,
    Changed,
    Conflict,
    InvalidInput,
    NotFound,
    Unavailable,
    throttled,
)
from codeshot.models import (
    MAX_EMBEDS_PER_MESSAGE,
    Embed,
    EmbedRef,
    Message,
    MessageType,
    Principal,
    check_embed_key,
)
from codeshot.observability import correlation_id
from codeshot.runner.fairness import Lease
from codeshot.services import Services
from codeshot.store.dynamo import cancelled_by, is_transient, retry_transient, transact_write
from codeshot.store.embeds import check_content_type
from codeshot.store.embeds import content_hash as hash_of
from codeshot.store.queue import LANDING_SECONDS, Work
from codeshot.store.usage import UPLOAD_BYTES
from codeshot.text import check_idempotency_key, check_text
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from codeshot.usecases.waits import WaitSlot

log = logging.getLogger("codeshot.api")
TERMINAL = frozenset({MessageType.RESPONSE, MessageType.ERROR, MessageType.AWAITING_INPUT})
UPLOAD_LIMIT = "daily upload bytes"  # its limit, as RATE_LIMITED names it
SLOT_TRIES = 3  # a post taking a waiting slot: again once its item is made or one lapsed
NEWEST_PAGE = 100  # messages a read without `after` returns: the newest


@dataclass(frozen=True)
class EmbedUpload:
    """An embed sent with a message: small bytes inline, or the hash of an upload."""

    key: str
    content_type: str
    content_base64: str | None = None
    content_hash: str | None = None


@dataclass(frozen=True)
class _Checked:
    """An embed checked and not yet stored: its bytes if sent inline, and its ref."""

    upload: EmbedUpload
    data: bytes | None
    ref: EmbedRef


def _unconfirmed(exc: Exception) -> bool:
    """Whether DynamoDB's answer to a send of a transaction leaves it unknown whether it
    was written: none (a timeout, a dropped connection), an error of its own (5xx), or a
    resend's token still in progress. A throttle is a refusal of that send only: botocore's
    resends carry the first send's token, and one of them that timed out may have been
    written (:func:`~codeshot.store.dynamo.transact_write` tells)."""
    if not isinstance(exc, ClientError):
        return isinstance(exc, (HTTPClientError, BotoConnectionError))
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500 or \
        exc.response.get("Error", {}).get("Code") == "TransactionInProgressException"


def _landed(exc: ClientError, at: int) -> bool:
    """Whether a refused transaction's message (its item at ``at``) is there already: an
    earlier send of it was written and only its response was lost (botocore's own resends
    carry one idempotency token, but each of ``retry_transient``'s has its own). Its
    condition failing says so, with no read that could fail in turn: the item's id is new
    to this post, so no other write makes it, and a transaction is written whole."""
    return cancelled_by(exc)[at:at + 1] == ["ConditionalCheckFailed"]


class Messaging:
    def __init__(self, services: Services) -> None:
        self.s = services

    def _check_text(self, text: str, has_embeds: bool) -> str:
        check_text(text, "message", self.s.settings.max_message_length)
        if not text.strip() and not has_embeds:
            raise InvalidInput("message text must not be empty")
        return text

    def _checked_embeds(self, owner: str, uploads: list[EmbedUpload]) -> list[_Checked]:
        """Check every embed and write nothing: inline bytes decoded and hashed here, the
        caller's own uploads found and hashed where they lie. The daily upload allowance
        (inline bytes count against it, with the post) and the query quota (:meth:`post`)
        are read first too, so a refused post stores nothing; one that a concurrent post
        beats to the last of either leaves its bytes, uncharged: content-addressed, so
        reused by its retry, and at most one post's worth per post that had quota when it
        began."""
        if len(uploads) > MAX_EMBEDS_PER_MESSAGE:
            raise InvalidInput(f"at most {MAX_EMBEDS_PER_MESSAGE} embeds per message")
        checked: list[tuple[EmbedUpload, bytes | None]] = []
        for up in uploads:
            check_embed_key(up.key)
            check_content_type(up.content_type)
            if any(p.key == up.key for p, _ in checked):
                raise InvalidInput(f"embed key {up.key!r} appears twice")
            if (up.content_base64 is None) == (up.content_hash is None):
                raise InvalidInput(f"embed {up.key!r}: give exactly one of content or contentHash")
            data = None
            if up.content_base64 is not None:
                data = _inline_bytes(up)
                limit = self.s.settings.max_inline_embed_bytes
                if len(data) > limit:
                    raise InvalidInput(
                        f"embed {up.key!r} is {len(data)} bytes; inline embeds are limited to "
                        f"{limit}: upload larger ones with createEmbedUpload"
                    )
            checked.append((up, data))
        inline = sum(len(data) for _, data in checked if data is not None)
        allowance = self.s.settings.daily_upload_bytes
        if inline:
            self.s.usage.check_room(UPLOAD_BYTES, owner, inline, allowance, UPLOAD_LIMIT)
        return [_Checked(up, data, self._ref(owner, up, data)) for up, data in checked]

    def _ref(self, owner: str, up: EmbedUpload, data: bytes | None) -> EmbedRef:
        """What an embed will be once stored: inline bytes hashed here, or the caller's
        own upload (another user's bytes cannot be named) found and hashed where it is."""
        if data is not None:
            digest, size = hash_of(data), len(data)
        else:
            digest = up.content_hash or ""
            size = self.s.embeds.check_upload(owner, digest)
        return EmbedRef(content_type=up.content_type, content_hash=digest, size=size)

    def _store_embeds(self, owner: str, embeds: list[_Checked]) -> None:
        """Write the checked embeds' bytes to the platform's content on S3."""
        for embed in embeds:
            if embed.data is not None:
                self.s.embeds.put(embed.data, embed.upload.content_type)
            else:
                self.s.embeds.claim_upload(owner, embed.ref.content_hash,
                                           embed.upload.content_type)

    def post(
        self,
        principal: Principal,
        session_id: str,
        text: str,
        embeds: list[EmbedUpload] | None = None,
        idempotency_key: str | None = None,
        unchanged_since: datetime | None = None,
        callback: Mapping[str, str | None] | None = None,
        answers: str | None = None,
        task: str | None = None,
        slot: WaitSlot | None = None,
    ) -> tuple[Message, bool]:
        """Store and enqueue a user message (the answer to the question ``answers`` of the
        A2A ``task``, when given: see :attr:`Message.answers`); returns (message,
        newly_created). With ``unchanged_since`` (the session's ``modified`` as a check
        read it), only if no post or reply came since: else CHANGED (:class:`Changed`),
        nothing written. The session's ``callback`` fields (see
        :meth:`SessionStore.set_callback`) are written with the message: a refused or
        repeated post changes none. A waiting ``slot`` not taken yet is taken with the
        message, in its transaction (a post that refuses its input, or is refused, holds
        none; see :mod:`codeshot.usecases.waits`), or on its own before a retry's wait for
        the first post's reply or before embeds are written to S3 (a refused wait writes
        nothing). A transaction DynamoDB neither confirms nor refuses (or refuses for the
        moment after a send it did not confirm) is UNAVAILABLE, its message queued in case
        it was written (:meth:`_outcome_unknown`)."""
        user_id = user_id_of(principal)
        embeds = embeds or []
        slot = slot if slot and not slot.held else None  # one taken already is kept
        self._check_fields(text, bool(embeds), idempotency_key)
        if idempotency_key or embeds:
            # Both read the session's items before the write: only its owner may.
            self.s.sessions.get(session_id, owner=user_id)
        if idempotency_key:
            earlier = self.s.sessions.posted_under(session_id, idempotency_key)
            if earlier:
                return self._posted_again(session_id, earlier, text, embeds, slot), False
        limit = self.s.daily_limit(principal.daily_query_limit)
        # S3 writes are not undone by a refused transaction: all that can refuse the post
        # is checked before the first (a refused post stores and charges nothing).
        if embeds:
            self._check_quota(user_id, limit)
        checked = self._checked_embeds(user_id, embeds)
        refs = {embed.upload.key: embed.ref for embed in checked}
        inline_bytes = sum(len(embed.data) for embed in checked if embed.data is not None)
        new_embeds = self._unbound_embeds(session_id, user_id, refs)
        # A key bound already holds these bytes (checked above): on S3 since it was bound.
        unbound = {embed.key for embed in new_embeds}
        if slot and checked:
            slot.take()
            slot = None
        self._store_embeds(user_id, [e for e in checked if e.upload.key in unbound])
        message = Message(
            session_id=session_id, message_id=ids.ulid(), text=text,
            type=MessageType.QUERY, sent_by=principal.username or user_id,
            embeds=refs, answers=answers, task=task,
        )
        # (what is charged, its limit): the transaction's first items, in this order
        charges = [("daily query", limit)]
        items: list[TransactWriteItemTypeDef] = [
            {"Update": self.s.usage.charge_request("query", user_id, limit)}]
        if inline_bytes:
            allowance = self.s.settings.daily_upload_bytes
            charges.append((UPLOAD_LIMIT, allowance))
            items.append({"Update": self.s.usage.charge_request(
                UPLOAD_BYTES, user_id, allowance, amount=inline_bytes)})
        table = self.s.sessions.table_name
        items += [
            {"Update": self.s.sessions.owner_update(
                session_id, user_id, len(new_embeds), unchanged_since, callback)},
            {"ConditionCheck": self.s.sessions.unless_deleted(session_id)},
            {"Put": {"TableName": table, "Item": self.s.sessions.message_item(message),
                     "ConditionExpression": "attribute_not_exists(#i)",
                     "ExpressionAttributeNames": {"#i": "item"}}},
        ]
        for embed in new_embeds:
            items.append({"Put": {"TableName": table, "Item": self.s.sessions.embed_item(embed),
                                  "ConditionExpression": "attribute_not_exists(#i)",
                                  "ExpressionAttributeNames": {"#i": "item"}}})
        if idempotency_key:
            items.append({"Put": self.s.sessions.idempotency_item(
                session_id, idempotency_key, message.message_id)})
        if slot:  # last: its refusal is read after the session's (bad input's own error)
            items.append({"Update": slot.take_request()})
        unknown: list[bool] = []  # per send: whether DynamoDB left its outcome unknown

        def send() -> None:
            unsure: list[bool] = []
            try:
                transact_write(self.s.sessions.db, items, unsure)
            except Exception as exc:
                unknown.append(_unconfirmed(exc) or any(unsure))
                raise

        for attempt in range(SLOT_TRIES):
            if slot:
                slot.held = True  # unless refused: a write whose outcome is unknown
            try:
                # Cancelled because another write held one of its items (the runner's reply
                # on the session, another post's quota charge): tried again, not refused.
                retry_transient(send)
                break
            except (ClientError, HTTPClientError, BotoConnectionError) as exc:
                # Unconfirmed, or given up on a refusal for the moment after a send that
                # was (under its own token, it may still land); a definite refusal tells
                # whether an earlier send landed (its message is there: _landed).
                if not isinstance(exc, ClientError) or unknown[-1] or \
                        (is_transient(exc) and any(unknown)):
                    raise self._outcome_unknown(session_id, message, idempotency_key) from exc
                if _landed(exc, len(charges) + 2):
                    if slot:
                        slot.held = True  # taken with it
                    break
                refused = self._refused(exc, session_id, user_id, charges, unchanged_since,
                                        idempotency_key, slot, attempt + 1 < SLOT_TRIES)
                if isinstance(refused, Message):
                    return self._posted_again(session_id, refused, text, embeds, slot), False
                if refused is None:
                    continue
                if refused is exc:
                    raise
                raise refused from exc
        self._enqueue(session_id, message)
        return message, True

    def _outcome_unknown(self, session_id: str, message: Message,
                         idempotency_key: str | None) -> Unavailable:
        """The error of a post whose transaction DynamoDB neither confirmed nor refused
        for good: a send of it may have been written. Its message is queued all the
        same, so one that was written is answered: the runner skips work whose message is
        not there, once a send could still land (a copy taken sooner waits for that). Under
        a deduplication id of its own: a send that lands after the runner took this copy
        (and skipped it) is queued by the same post again under its key, which the queue
        must not drop as this copy's duplicate; of two copies the runner answers one (a
        session's queries run one at a time) and skips the other, answered."""
        try:
            self._queue(session_id, message, unconfirmed=True)
        except Exception:  # the retry under the key queues it
            log.exception("could not queue %s/%s, whose post may have been written",
                          session_id, message.message_id)
        # Its write may land up to LANDING_SECONDS from now: a read sooner can miss it.
        read = (f"wait {LANDING_SECONDS:g} s (until its write can no longer land), then "
                "read the session")
        then = ("send it again under the same idempotency key to be sure (it is never "
                f"posted twice), or {read}" if idempotency_key else
                f"{read} before sending it again (if it was posted, that posts it twice)")
        return Unavailable(f"the store did not confirm the message was posted to session "
                           f"{session_id}: it may have been, and is then answered; {then}")

    def _refused(self, exc: ClientError, session_id: str, user_id: str,
                 charges: list[tuple[str, int]], unchanged_since: datetime | None,
                 idempotency_key: str | None, slot: WaitSlot | None, again: bool
                 ) -> Exception | Message | None:
        """Why :meth:`post`'s transaction was refused (items: the ``charges``, the
        session's two, the message, its embeds, the idempotency key, the ``slot``): the
        error to raise, the message a concurrent retry under the key posted, or None to
        try again (``again``: a waiting slot may be taken now)."""
        reasons = cancelled_by(exc)
        validation = exc.response.get("Error", {}).get("Code") == "ValidationException"
        if slot and (reasons or validation):
            slot.held = False  # refused: nothing of it was written
        failed = "ConditionalCheckFailed"
        # The key first: a concurrent retry of the day's last post (its charge refused
        # too) is that post, not RATE_LIMITED.
        key_at = len(reasons) - (2 if slot else 1)
        if idempotency_key and reasons and reasons[key_at] == failed:
            earlier = self.s.sessions.posted_under(session_id, idempotency_key)
            if earlier:
                return earlier
        if slot and ((validation and not reasons) or reasons[-1:] == ["ValidationError"]):
            # Refused for the slot's item not made yet (whole, as moto does, or that item's
            # reason, as DynamoDB does), so the session's own refusal may not be told:
            # read, as NOT_FOUND before the item is made.
            self.s.sessions.get(session_id, owner=user_id)
        # The session: gone, not the poster's, changed since the check, or its deletion
        # begun. Before the charges and the slot: bad input gets its own error.
        session_reasons = reasons[len(charges):len(charges) + 2]
        if failed in session_reasons:
            deleting = session_reasons[1:] == [failed]
            if unchanged_since and session_reasons[0] == failed and not deleting:
                self.s.sessions.get(session_id, owner=user_id)  # NOT_FOUND if gone
                return Changed(f"session {session_id} changed meanwhile")
            return NotFound(f"session {session_id} not found")
        # The slot: all taken, or (ValidationError) the user's item not made yet.
        if slot and (validation or reasons[-1:] in ([failed], ["ValidationError"])):
            if again and slot.make_room():
                return None
            if reasons[-1:] == [failed]:
                return slot.refused()
        for (what, most), reason in zip(charges, reasons):
            if reason == failed:
                return self.s.usage.rate_limited(what, most, "day")
        if reasons:
            return Conflict("the message collided with a concurrent change; retry")
        # Throttled through every send: RATE_LIMITED to every caller, not only the API's.
        return throttled(exc) or exc

    def _unbound_embeds(
        self, session_id: str, owner: str, refs: dict[str, EmbedRef]
    ) -> list[Embed]:
        """Embeds to bind now; a key already bound must name the same bytes (immutable).
        Reads only the posted keys, however many embeds the session has."""
        existing = self.s.sessions.embeds_named(session_id, list(refs))
        new = []
        for key, ref in refs.items():
            if key in existing:
                if existing[key].content_hash != ref.content_hash:
                    raise Conflict(f"embed {key!r} already exists in this session; embeds are "
                                   "immutable, use a new key")
                continue
            new.append(Embed(key=key, session_id=session_id, owner=owner,
                             content_type=ref.content_type, content_hash=ref.content_hash,
                             size=ref.size))
        return new

    def _check_fields(self, text: str, has_embeds: bool, idempotency_key: str | None) -> None:
        self._check_text(text, has_embeds)
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key)

    def precheck(self, principal: Principal, text: str, has_embeds: bool = False) -> None:
        """Refuse, before anything is made for it, a post that would be refused: bad text,
        or a daily quota already used up (the post itself charges it exactly)."""
        self._check_text(text, has_embeds)
        self._check_quota(user_id_of(principal),
                          self.s.daily_limit(principal.daily_query_limit))

    def _check_quota(self, user_id: str, limit: int) -> None:
        self.s.usage.check_room("query", user_id, 1, limit, "daily query")

    @staticmethod
    def _same_post(earlier: Message, text: str, embeds: list[EmbedUpload]) -> None:
        """A retry sends the same message again; other content under the key (text, or
        an embed's key, type or bytes) is a mistake the client must hear about, not a
        silent replay of the first message."""
        sent = {e.key: (e.content_type, e.content_hash if e.content_base64 is None
                        else hash_of(_inline_bytes(e))) for e in embeds}
        bound = {k: (ref.content_type, ref.content_hash) for k, ref in earlier.embeds.items()}
        if earlier.text != text or sent != bound:
            raise Conflict("this idempotencyKey was already used for a different message; "
                           "use a new key for a new message")

    def _posted_again(self, session_id: str, earlier: Message, text: str,
                      embeds: list[EmbedUpload], slot: WaitSlot | None) -> Message:
        """A retry's message, queued again: had the first try died between its write and
        its enqueue, nothing else would ever queue it. Harmless when it was queued: the
        queue drops a copy within 5 minutes (deduplicated by message id), and the runner
        skips a message already answered. Its ``slot`` (to wait for the first one's reply)
        is taken on its own: there is no post to take it with."""
        self._same_post(earlier, text, embeds)
        if slot:
            slot.take()
        try:
            self._queue(session_id, earlier)
        except Exception as exc:  # no error reply: the first try may have been answered
            raise AgentUnavailable("the platform could not queue the message; please send "
                                   "it again") from exc
        return earlier

    def queue_unrun(self, session_id: str, owner: str, idempotency_key: str) -> None:
        """The message posted under ``idempotency_key``, queued again if it is written but
        neither answered nor run: a write the store did not confirm may land after the
        runner skipped its queued copy (see :data:`codeshot.store.queue.LANDING_SECONDS`),
        and a retry under the key, which would queue it, may never come. Under a
        deduplication id of its own (an earlier copy's may be within SQS's 5 minutes); of
        two copies the runner answers one (its answer marker and running slot)."""
        message = self.s.sessions.posted_under(session_id, idempotency_key)
        if message is None or self.s.sessions.answered(session_id, message.message_id) or \
                Lease(self.s, owner, message.message_id).held():
            return
        log.info("queueing %s/%s again: written, never run", session_id, message.message_id)
        self._queue(session_id, message, again=True)

    def _queue(self, session_id: str, message: Message, unconfirmed: bool = False,
               again: bool = False) -> None:
        """``unconfirmed``: a copy of a message whose write may land after this (stamped
        for the runner to wait for it); it and ``again``: under a deduplication id of its
        own."""
        self.s.queue.enqueue(Work(session_id, message.message_id,
                                  correlation_id=correlation_id(),
                                  unconfirmed_at=time.time() if unconfirmed else None),
                             again=unconfirmed or again)

    def _enqueue(self, session_id: str, message: Message) -> None:
        try:
            self._queue(session_id, message)
        except Exception as exc:
            # Never leave a query that no runner will answer: close it with an error, its
            # answer (the marker: a retry under its key queues it again, and the runner
            # must skip it however far back it is). An answer to a paused program's
            # question ends that program too, as a cancel does: the session's next message
            # starts afresh rather than resuming it.
            error = Message(
                session_id=session_id, message_id=ids.ulid(), type=MessageType.ERROR,
                text="The platform could not queue this message; please send it again.",
                sent_by="platform", in_reply_to=message.message_id,
                error_code=AgentUnavailable.code,
            )
            sessions = self.s.sessions
            marker: TransactWriteItemTypeDef = {"Put": sessions.answer_item(
                session_id, message.message_id, error.message_id)}
            try:
                # an answer to a question: the paused program ends with it, as a cancel
                sessions.end_pause(error, also=[marker], any_question=True)
            except Conflict:  # not paused: only the query is closed
                try:
                    retry_transient(lambda: sessions.db.transact_write_items(TransactItems=[
                        {"ConditionCheck": sessions.unless_deleted(session_id)}, marker,
                        {"Put": {"TableName": sessions.table_name,
                                 "Item": sessions.message_item(error)}}]))
                except sessions.db.exceptions.TransactionCanceledException as cancelled:
                    if cancelled_by(cancelled)[:1] == ["ConditionalCheckFailed"]:
                        raise NotFound(f"session {session_id} not found") from exc
                    raise
            raise AgentUnavailable("the platform could not queue the message; please send "
                                   "it again") from exc

    def newer(self, session_id: str, after: str) -> list[Message]:
        return self.s.sessions.list_messages(session_id, after=after, limit=1000).items

    def since(self, session_id: str, after: str | None) -> list[Message]:
        """Messages newer than ``after``, or without it the newest ``NEWEST_PAGE`` (one
        read however long the log: a reader that has none yet needs no older ones)."""
        if after is None:
            return self.s.sessions.newest_messages(session_id, NEWEST_PAGE)
        if not ids.is_ulid(after):
            raise InvalidInput("after must be a message id")
        return self.newer(session_id, after)

    def reply_to(self, session_id: str, query_id: str) -> Message | None:
        """The terminal reply (response, error or a question) to a query, if there is one."""
        for message in self.newer(session_id, query_id):
            if message.in_reply_to == query_id and message.type in TERMINAL:
                return message
        return None


def _inline_bytes(up: EmbedUpload) -> bytes:
    try:
        return base64.b64decode(up.content_base64 or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"embed {up.key!r}: content is not base64") from exc


# Reply polls: none before a runner could have answered, then a growing interval (each
# poll is a DynamoDB read). Only the Fixie 1.0 paths wait; clients that can poll post with
# wait: false (benchmarks/cost.py prices both).
FIRST_POLL_SECONDS = 0.4
MAX_POLL_INTERVAL_SECONDS = 1.0


def _poll_delays() -> Iterator[float]:
    """The waits between reply polls: FIRST_POLL_SECONDS growing to the interval's most."""
    delay = FIRST_POLL_SECONDS
    while True:
        yield delay
        delay = min(delay * 1.5, MAX_POLL_INTERVAL_SECONDS)


async def wait_for_reply(messaging: Messaging, message: Message, timeout: float) -> Message | None:
    """Poll for the reply with a growing interval, never holding a worker thread."""
    deadline = time.monotonic() + timeout
    reply = None
    for delay in _poll_delays():
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        reply = await blocking(messaging.reply_to, message.session_id, message.message_id)
        if reply or time.monotonic() >= deadline:
            break
    return reply


async def follow(messaging: Messaging, query: Message, timeout: float) -> AsyncIterator[Message]:
    """Yield each message stored after ``query`` until its terminal reply (or timeout),
    polling as :func:`wait_for_reply` does (a stream's reads are not charged)."""
    deadline = time.monotonic() + timeout
    last = query.message_id
    for delay in _poll_delays():
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        for message in await blocking(messaging.newer, query.session_id, last):
            last = message.message_id
            yield message
            if message.in_reply_to == query.message_id and message.type in TERMINAL:
                return
        if time.monotonic() >= deadline:
            return


# A long poll reads often at first, then less.
LONG_POLL_FIRST_SECONDS, LONG_POLL_SECONDS = 0.1, 0.5


async def next_messages(
    messaging: Messaging, session_id: str, after: str | None, timeout: float,
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> list[Message]:
    """Messages newer than ``after`` (the newest page without it: :meth:`Messaging.since`),
    waiting up to ``timeout`` seconds for the first to arrive: a long poll, which works
    the same behind API Gateway (whose responses are buffered, so server-sent events would
    not stream) and locally. ``gone`` tells when the caller has hung up, to stop waiting
    early."""
    deadline = time.monotonic() + max(timeout, 0.0)
    delay = LONG_POLL_FIRST_SECONDS
    while True:
        found = await blocking(messaging.since, session_id, after)
        if found or time.monotonic() >= deadline or (gone is not None and await gone()):
            return found
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, LONG_POLL_SECONDS)


def long_poll_reads(timeout: float) -> int:
    """The reads a long poll of ``timeout`` seconds makes at most (what GraphQL's cost
    rule charges for it)."""
    reads, delay, waited = 1, LONG_POLL_FIRST_SECONDS, 0.0
    while waited < timeout:
        waited, reads, delay = waited + delay, reads + 1, min(delay * 1.5, LONG_POLL_SECONDS)
    return reads


@dataclass(frozen=True)
class PresignedUpload:
    """Where to PUT an embed's bytes, with the headers the upload must carry."""

    url: str
    headers: dict[str, str]
    content_hash: str


def upload_url(services: Services, principal: Principal, content_type: str, size: int,
               content_hash: str) -> PresignedUpload:
    """A presigned URL for the caller to upload an embed's bytes to, before sending it
    with a message by its ``content_hash``; ``size`` counts against the caller's daily
    upload allowance once a day per hash and size: asking again (a retry, an expired
    URL) costs nothing, as the URL can only ever take those same bytes. Charged here,
    not when the upload is bound, so bytes uploaded and never sent count too."""
    user_id = user_id_of(principal)
    upload = services.embeds.put_url(user_id, content_hash, content_type, size)  # checks
    services.usage.charge_once(UPLOAD_BYTES, user_id, services.settings.daily_upload_bytes,
                               f"{content_hash}#{size}", size)
    return PresignedUpload(upload["url"], upload["headers"], content_hash)
