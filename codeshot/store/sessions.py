"""Sessions, their time-ordered messages, their embeds and a paused program's state.

All of a session lives in one partition (see ``tables.SESSIONS``), so one Query reads
a session with its recent history and deleting a session is one partition sweep. Item
keys sort so that a descending read from the top returns the paused program (``STATE``),
the session (``SESSION``) and then the newest messages (``MSG#<ulid>``): every other kind
(``ANSWER#``, ``ASKED#``, ``EMBED#``, ``IDEM#``) sorts below ``MSG#``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from codeshot.errors import Conflict, NotFound, RateLimited, Unavailable
from codeshot.models import (
    Embed,
    EmbedRef,
    Message,
    MessageType,
    Session,
    SessionStatus,
    stamp,
    utcnow,
)
from codeshot.store.base import Repository
from codeshot.store.dynamo import (
    TRANSACTION_BYTES,
    TRANSACTION_ITEMS,
    Page,
    batch_write,
    cancelled_by,
    clamp_limit,
    count_items,
    decode_token,
    drop_partition,
    encode_token,
    every_page,
    fill_page,
    from_item,
    is_transient,
    item_bytes,
    lookup_key,
    note_unsure_sends,
    query_pages,
    retry_transient,
    to_item,
)
from codeshot.store.tables import (
    EXPIRES_AT,
    REPLIES_HELD_MARK,
    RUNNER_TIMEOUT_SECONDS,
    SESSIONS,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import (
        AttributeValueTypeDef,
        ConditionCheckTypeDef,
        DeleteTypeDef,
        PutTypeDef,
        TransactWriteItemTypeDef,
        UpdateTypeDef,
    )

    from codeshot.settings import Settings

SESSION_ITEM = "SESSION"
STATE_ITEM = "STATE"
# The SESSION item's attribute naming the message a runner resumes the paused program
# with (:meth:`SessionStore.claim_pause`); the runner's reply removes it.
RESUMING = "resuming"
# When it was taken: a claim older than any runner invocation (RESUMING_LASTS) was left by
# a run that died before its reply, so it no longer holds (the question would wait for
# ever); a shorter bound could free a claim whose run still writes its reply.
RESUMED_AT = "resumed_at"
RESUMING_LASTS = RUNNER_TIMEOUT_SECONDS
MSG_PREFIX = "MSG#"
MSG_END = "MSG$"  # sorts just after every MSG# key
EMBED_PREFIX = "EMBED#"
# Bytes a reply of the session names (an agent's embed, stored by the runner and named in
# the reply message alone): their hash and the session's owner, so that by_content finds
# them as it finds EMBED# items (the erasure keeps bytes a session of another user who is
# not deleted holds, and erases the rest). Written with the reply.
HELD_PREFIX = "HELD#"
BY_CONTENT = "by_content"  # embeds and held bytes by content hash and owner (tables.SESSIONS)
PAGE_READS = 4  # DynamoDB reads (of at most 1 MB each) for one page of messages
# A bounded read of a log filtered in DynamoDB (:meth:`SessionStore.messages_of`) asks
# each Query for at most SCAN_PAGE messages (its Limit, counted before the filter; the
# last one more, which tells whether the log goes on) and makes at most SCAN_READS of
# them: what it costs is capped however long the log.
SCAN_PAGE = 1000
SCAN_READS = 8
ANSWER_PREFIX = "ANSWER#"  # the runner's exactly-once marker of an answered query
IDEMPOTENCY_PREFIX = "IDEM#"  # a posted message's idempotency key -> its message id
# A question's prompt POSTed to an Agent Protocol task's callback -> the prompt id it named
# (codeshot/usecases/prompts.py): a redelivered or requeued prompt polls, never asks again.
PROMPT_PREFIX = "ASKED#"
# A deleted session's place in its owner's list (its created time; no `owner` attribute:
# not listed), kept a week: a client paging with its handle as `after` goes on from it.
DELETED_ITEM = "DELETED"
# Its attributes beside its key and expiry: the eraser may put no other (its grant).
DELETED_MARKER_FIELDS = ("deleted_owner", "deleted_created")
DELETED_KEPT_SECONDS = 7 * 86400
# A session's deletion reads its keys KEYS_PAGE at a time (each read also at most 1 MB
# of items, whatever the projection): DELETE_PAGES of them in the request, a few seconds
# of batch writes; a larger session's rest is queued for the runner, PURGE_PAGES a part.
KEYS_PAGE = 500
DELETE_PAGES = 4
PURGE_PAGES = 20
# A user's one-time keys for new sessions live in a partition of their own,
# GUARD#<owner>, item <key> -> the session made for it (no owner attribute: not listed).
GUARD_PARTITION = "GUARD#"
CALLBACK_FIELDS = frozenset({"callback_url", "callback_token", "callback_id",
                             "callback_format"})


@dataclass(frozen=True)
class Place:
    """Where a session is, or was, in its owner's list (newest first)."""

    session_id: str
    created: str  # ISO, as stored: the owner index's sort key


def _start(owner: str, token: str | None, after: Place | None) -> dict[str, Any] | None:
    """Where a page of the owner's index starts: after ``token``'s key, else after
    ``after``'s place (the item need not exist: DynamoDB starts after where its key would
    be), else at the newest."""
    start = decode_token(token, {"owner": owner}, SESSIONS.page_key("by_owner"))
    if start is None and after is not None:
        start = {**_key(after.session_id, SESSION_ITEM), "owner": {"S": owner},
                 "created": {"S": after.created}}
    return start


@dataclass(frozen=True)
class Recent:
    """A session's newest items from one read (see :meth:`SessionStore.recent`)."""

    session: Session | None
    state: dict[str, Any] | None  # a paused program
    messages: list[Message]  # newest first
    question: str | None = None  # the question the paused program waits on (if kept)


def _stale(now: float) -> AttributeValueTypeDef:
    """The time before which a claim to resume (:data:`RESUMED_AT`) no longer holds."""
    return {"N": f"{now - RESUMING_LASTS:.0f}"}


def _key(session_id: str, item: str) -> dict[str, Any]:
    lookup_key(session_id, "session")
    lookup_key(item, "item")
    return {"session_id": {"S": session_id}, "item": {"S": item}}


def _message_values(message: Message) -> dict[str, Any]:
    values = message.to_dict()
    values["item"] = MSG_PREFIX + message.message_id
    values["embeds"] = json.dumps(values["embeds"]) if message.embeds else None
    return values


def _message(values: dict[str, Any]) -> Message:
    values["embeds"] = json.loads(values.get("embeds") or "{}")
    return Message.from_dict(values)


class SessionStore(Repository):
    table = SESSIONS

    def __init__(self, settings: Settings, dynamodb: DynamoDBClient | None = None) -> None:
        super().__init__(settings, dynamodb)
        note_unsure_sends(self.db)  # a post's transaction is written with transact_write

    # -- expiry -----------------------------------------------------------------------
    def expires_at(self) -> int | None:
        """When an item written now expires (epoch seconds, the table's TTL attribute),
        or None: CODESHOT_SESSION_TTL_DAYS = 0 keeps sessions forever."""
        days = self.settings.session_ttl_days
        return int(time.time()) + days * 86400 if days else None

    def item(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` as a sessions-table item that expires with the session's TTL."""
        return to_item(values | {EXPIRES_AT: self.expires_at()})

    def message_item(self, message: Message) -> dict[str, Any]:
        return self.item(_message_values(message))

    def embed_item(self, embed: Embed) -> dict[str, Any]:
        values = embed.to_dict()
        values["item"] = EMBED_PREFIX + embed.key
        values["embed_owner"] = values.pop("owner")  # keep `owner` for SESSION items only
        return self.item(values)

    def held_items(self, session_id: str, owner: str,
                   refs: Iterable[EmbedRef]) -> list[dict[str, Any]]:
        """The ``HELD#`` items of a reply's embeds, one per distinct bytes (a transaction
        may name an item once)."""
        return [self.item({"session_id": session_id, "item": HELD_PREFIX + digest,
                           "content_hash": digest, "embed_owner": owner})
                for digest in sorted({ref.content_hash for ref in refs})]

    def idempotency_item(self, session_id: str, key: str, message_id: str) -> PutTypeDef:
        """A transaction's Put of ``key``: it fails if the key was used before."""
        return {"TableName": self.table_name,
                "Item": self.item({"session_id": session_id, "item": IDEMPOTENCY_PREFIX + key,
                                   "message_id": message_id}),
                "ConditionExpression": "attribute_not_exists(#i)",
                "ExpressionAttributeNames": {"#i": "item"}}

    def answer_item(self, session_id: str, query_id: str, reply_id: str) -> PutTypeDef:
        """A transaction's Put of the query's ``ANSWER#`` marker, beside its terminal reply:
        it fails if the query was answered before (its answer is written once)."""
        return {"TableName": self.table_name,
                "Item": self.item({"session_id": session_id, "item": ANSWER_PREFIX + query_id,
                                   "reply_id": reply_id}),
                "ConditionExpression": "attribute_not_exists(#i)",
                "ExpressionAttributeNames": {"#i": "item"}}

    def unless_deleted(self, session_id: str) -> ConditionCheckTypeDef:
        """A transaction's ConditionCheck that the session's deletion has not begun: every
        write into a session carries it, so none can land behind the deletion
        (:meth:`delete` writes DELETED before it reads the keys it deletes) and outlive it."""
        return {"TableName": self.table_name, "Key": _key(session_id, DELETED_ITEM),
                "ConditionExpression": "attribute_not_exists(#i)",
                "ExpressionAttributeNames": {"#i": "item"}}

    def still_asks(self, session_id: str, question_id: str) -> ConditionCheckTypeDef:
        """A transaction's ConditionCheck that the session's paused program still waits on
        ``question_id``: nothing ended that question since it was read (:meth:`end_pause`
        drops the program)."""
        return {"TableName": self.table_name, "Key": _key(session_id, STATE_ITEM),
                "ConditionExpression": "#q = :q", "ExpressionAttributeNames": {"#q": "question"},
                "ExpressionAttributeValues": {":q": {"S": question_id}}}

    def claim_prompt(self, session_id: str, question_id: str) -> tuple[bool, str | None]:
        """Claim the POST of a question's prompt to its task's callback, which asks the
        user: (True, None) for the first claim; after it, (False, the prompt id the
        callback named, or None while none is kept). NOT_FOUND once the session's deletion
        has begun: nothing is claimed, so nothing may be asked."""
        key = PROMPT_PREFIX + question_id
        try:
            retry_transient(lambda: self.db.transact_write_items(TransactItems=[
                {"ConditionCheck": self.unless_deleted(session_id)},
                {"Put": {"TableName": self.table_name,
                         "Item": self.item({"session_id": session_id, "item": key}),
                         "ConditionExpression": "attribute_not_exists(#i)",
                         "ExpressionAttributeNames": {"#i": "item"}}}]))
            return True, None
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = cancelled_by(exc)
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise NotFound(f"session {session_id} not found") from exc
            if reasons[1:2] != ["ConditionalCheckFailed"]:  # busy even after retries
                raise
            item = self.db.get_item(TableName=self.table_name, Key=_key(session_id, key),
                                    ConsistentRead=True).get("Item") or {}
            return False, item["prompt_id"]["S"] if "prompt_id" in item else None

    def prompt_claimed(self, session_id: str, question_id: str) -> bool:
        return PROMPT_PREFIX + question_id in self.get_items(session_id,
                                                             [PROMPT_PREFIX + question_id])

    def keep_prompt_id(self, session_id: str, question_id: str, prompt_id: str) -> None:
        """The prompt id the callback named for the question's claimed prompt (NOT_FOUND:
        the session was deleted meanwhile, its claim with it)."""
        try:
            self.db.update_item(TableName=self.table_name,
                                Key=_key(session_id, PROMPT_PREFIX + question_id),
                                UpdateExpression="SET prompt_id = :p",
                                ConditionExpression="attribute_exists(#i)",
                                ExpressionAttributeNames={"#i": "item"},
                                ExpressionAttributeValues={":p": {"S": prompt_id}})
        except self.db.exceptions.ConditionalCheckFailedException:
            raise NotFound(f"session {session_id} not found") from None

    def posted_under(self, session_id: str, key: str) -> Message | None:
        """The message posted with idempotency ``key``, if any."""
        item = self.db.get_item(TableName=self.table_name,
                                Key=_key(session_id, IDEMPOTENCY_PREFIX + key),
                                ConsistentRead=True).get("Item")
        return self.get_message(session_id, item["message_id"]["S"]) if item else None

    def answered(self, session_id: str, query_id: str) -> bool:
        """Whether the runner answered ``query_id`` (its ``ANSWER#`` marker is written)."""
        return "Item" in self.db.get_item(TableName=self.table_name,
                                          Key=_key(session_id, ANSWER_PREFIX + query_id),
                                          ConsistentRead=True)

    def touch(self, expression: str, values: dict[str, AttributeValueTypeDef]
              ) -> tuple[str, dict[str, AttributeValueTypeDef]]:
        """An update (expression starting with SET, and its values) that also pushes the
        item's expiry out: the SESSION item lives as long as the session is used."""
        expires = self.expires_at()
        if expires is None:
            return expression, values
        assert expression.startswith("SET "), expression
        return (f"SET {EXPIRES_AT} = :expires, " + expression[4:],
                values | {":expires": {"N": str(expires)}})

    # -- sessions ---------------------------------------------------------------------
    def create(self, session: Session) -> Session:
        values = session.to_dict()
        values["item"] = SESSION_ITEM
        try:
            self.db.put_item(
                TableName=self.table_name,
                Item=self.item(values),
                ConditionExpression="attribute_not_exists(session_id)",
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            # botocore retries a put whose reply was lost: the item may be our own write.
            if self.get(session.session_id) == session:
                return session
            raise Conflict(f"session {session.session_id} already exists") from exc
        return session

    def create_once(self, session: Session, key: str, charge: UpdateTypeDef) -> str | None:
        """Create ``session`` under its owner's one-time ``key`` with ``charge`` (the
        UpdateItem of its quota), all in one transaction, and return its id; or the id of
        the session the key made before (nothing written or charged); None when the charge
        is refused (nothing written)."""
        guard = self.item({"session_id": GUARD_PARTITION + session.owner, "item": key,
                           "guarded_session": session.session_id})
        values = session.to_dict() | {"item": SESSION_ITEM}
        try:
            self.db.transact_write_items(TransactItems=[
                {"Update": charge},
                {"Put": {"TableName": self.table_name, "Item": guard,
                         "ConditionExpression": "attribute_not_exists(#i)",
                         "ExpressionAttributeNames": {"#i": "item"}}},
                {"Put": {"TableName": self.table_name, "Item": self.item(values),
                         "ConditionExpression": "attribute_not_exists(#i)",
                         "ExpressionAttributeNames": {"#i": "item"}}},
            ])
        except self.db.exceptions.TransactionCanceledException as exc:
            # The key first: a retry of the day's last session is that session, not refused.
            if (earlier := self.guarded(session.owner, key)) is not None:
                return earlier
            reasons = cancelled_by(exc)
            if reasons[:1] == ["ConditionalCheckFailed"]:
                return None
            # Not the key nor the charge: a session id collision (vanishingly rare).
            raise Conflict("the session collided with a concurrent change; retry") from exc
        return session.session_id

    def guarded(self, owner: str, key: str) -> str | None:
        """The session the owner's one-time ``key`` made, if any."""
        item = self.db.get_item(TableName=self.table_name,
                                Key=_key(GUARD_PARTITION + owner, key),
                                ConsistentRead=True).get("Item")
        return item["guarded_session"]["S"] if item else None

    # -- a deleted user's erasure (codeshot/usecases/erasure.py) --------------------------
    def drop_guards(self, owner: str, most: int) -> bool:
        """Delete up to ``most`` of a deleted user's one-time session keys; whether any
        may be left."""
        return drop_partition(self.db, self.table_name, "session_id", "item",
                              GUARD_PARTITION + owner, most)

    def embed_hashes(self, session_id: str, most: int) -> list[tuple[str, str]]:
        """Up to ``most`` of the session's embeds, then of the bytes its replies hold
        (``HELD#``): (item, content hash), keys and hash alone read."""
        found: list[tuple[str, str]] = []
        for prefix in (EMBED_PREFIX, HELD_PREFIX):
            if len(found) >= most:
                break
            out = self.db.query(
                TableName=self.table_name, Limit=most - len(found), ConsistentRead=True,
                Select="SPECIFIC_ATTRIBUTES",
                KeyConditionExpression="session_id = :s AND begins_with(#i, :e)",
                ProjectionExpression="#i, content_hash",
                ExpressionAttributeNames={"#i": "item"},
                ExpressionAttributeValues={":s": {"S": session_id}, ":e": {"S": prefix}})
            found += [(i["item"]["S"], i["content_hash"]["S"]) for i in out.get("Items", [])]
        return found

    def replies_held(self) -> bool:
        """Whether every reply's embeds are held (``HELD#`` items): the table was made
        with them, or :meth:`hold_replies` went through it since. Until then a reply
        written before they were may name bytes by_content does not find."""
        return "Item" in self.db.get_item(TableName=self.table_name, Key=REPLIES_HELD_MARK,
                                          ConsistentRead=True)

    def mark_replies_held(self) -> None:
        """Mark the table :meth:`replies_held`: made with ``HELD#`` items (a new stack's,
        codeshot.usecases.new_stack), or gone through by :meth:`hold_replies`."""
        self.db.put_item(TableName=self.table_name, Item=REPLIES_HELD_MARK)

    def hold_replies(self, start: dict[str, Any] | None) -> tuple[int, dict[str, Any] | None]:
        """One Scan page of the table: the ``HELD#`` items of each message's embeds, for
        its session's owner (written again, they change nothing but their expiry); how
        many, and where the next page starts (None: the last was done, and the table
        marked :meth:`replies_held`). An operator's backfill, run once after upgrading."""
        kwargs: dict[str, Any] = {
            "TableName": self.table_name, "ConsistentRead": True,
            "FilterExpression": "begins_with(#i, :m) AND attribute_exists(embeds)",
            "ProjectionExpression": "session_id, embeds", "ExpressionAttributeNames": {
                "#i": "item"}, "ExpressionAttributeValues": {":m": {"S": MSG_PREFIX}}}
        if start:
            kwargs["ExclusiveStartKey"] = start
        out = self.db.scan(**kwargs)
        owners: dict[str, str | None] = {}
        held: list[dict[str, Any]] = []
        for item in out.get("Items", []):
            session_id = item["session_id"]["S"]
            if session_id not in owners:
                found = self.get_items(session_id, [SESSION_ITEM]).get(SESSION_ITEM)
                owners[session_id] = found.get("owner") if found else None
            owner = owners[session_id]
            refs = json.loads(item["embeds"]["S"])
            if owner and refs:  # a session being deleted has no owner to hold them for
                held += self.held_items(session_id, owner, (
                    EmbedRef.from_dict(ref) for ref in refs.values()))
        batch_write(self.db, self.table_name, [{"PutRequest": {"Item": i}} for i in held])
        nxt = out.get("LastEvaluatedKey")
        if nxt is None:
            self.mark_replies_held()
        return len(held), nxt

    def drop_item(self, session_id: str, item: str) -> None:
        self.db.delete_item(TableName=self.table_name, Key=_key(session_id, item))

    def other_holders(self, content_hash: str, owner: str) -> Iterator[str]:
        """The users but ``owner`` whose sessions hold an embed or a reply's embed of
        these bytes (content-addressed: the same object on S3), by id, read as they are
        wanted through the by_content index, whose sort key is the embed's owner: one
        read of one item each (and one past ``owner``'s own), however many items a user
        has. An index is eventually consistent: an item written a moment ago may be
        missing, one deleted a moment ago still there."""
        values: dict[str, AttributeValueTypeDef] = {":h": {"S": content_hash}}
        condition = "content_hash = :h"
        while True:
            found = self.db.query(
                TableName=self.table_name, IndexName=BY_CONTENT, Limit=1,
                KeyConditionExpression=condition, ExpressionAttributeValues=values,
            ).get("Items")
            if not found:
                return
            holder = found[0]["embed_owner"]["S"]
            if holder != owner:
                yield holder
            condition = "content_hash = :h AND embed_owner > :after"
            values[":after"] = {"S": holder}

    def get(self, session_id: str, owner: str | None = None) -> Session:
        """The session; with ``owner``, another user's session is reported as missing."""
        item = self.db.get_item(
            TableName=self.table_name, Key=_key(session_id, SESSION_ITEM), ConsistentRead=True
        ).get("Item")
        session = Session.from_dict(from_item(item)) if item else None
        if session is None or (owner is not None and session.owner != owner):
            raise NotFound(f"session {session_id} not found")
        return session

    def place(self, session_id: str, owner: str) -> Place:
        """Where the owner's session is in their list, or was if deleted in the last
        ``DELETED_KEPT_SECONDS``; another user's (or none) is NOT_FOUND."""
        try:
            return Place(session_id, self.get(session_id, owner).to_dict()["created"])
        except NotFound:
            item = self.db.get_item(TableName=self.table_name,
                                    Key=_key(session_id, DELETED_ITEM), ConsistentRead=True
                                    ).get("Item")
            if item is None or item["deleted_owner"]["S"] != owner:
                raise
            return Place(session_id, item["deleted_created"]["S"])

    def list_by_owner(
        self, owner: str, limit: int | None = None, token: str | None = None,
        after: Place | None = None,
    ) -> Page[Session]:
        """The owner's sessions, newest first; from ``token``, or older than ``after``."""
        lookup_key(owner, "owner")
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": "by_owner",
            "KeyConditionExpression": "#o = :owner",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": {":owner": {"S": owner}},
            "ScanIndexForward": False,
            "Limit": clamp_limit(limit),
        }
        start = _start(owner, token, after)
        if start:
            kwargs["ExclusiveStartKey"] = start
        out = self.db.query(**kwargs)
        return Page(
            [Session.from_dict(from_item(i)) for i in out.get("Items", [])],
            encode_token(out.get("LastEvaluatedKey")),
        )

    @staticmethod
    def _with_frontend(owner: str, frontend: str | None) -> dict[str, Any]:
        """A Query of the owner's index for their sessions with ``frontend`` (None: the
        planner); DynamoDB filters the others out after reading them."""
        lookup_key(owner, "owner")
        return {
            "IndexName": "by_owner", "KeyConditionExpression": "#o = :owner",
            "FilterExpression": "#f = :f" if frontend else "attribute_not_exists(#f)",
            "ExpressionAttributeNames": {"#o": "owner", "#f": "frontend_agent_id"},
            "ExpressionAttributeValues": {":owner": {"S": owner},
                                          **({":f": {"S": frontend}} if frontend else {})},
        }

    def list_by_frontend(self, owner: str, frontend: str | None, limit: int,
                         token: str | None = None, reads: int = 5, after: Place | None = None
                         ) -> Page[Session]:
        """The owner's sessions with ``frontend`` (None: the planner), newest first, from
        ``token`` or older than ``after``: up to ``limit`` of them in at most ``reads``
        Queries (a page may come short, with a token to go on, when the owner has many
        sessions with others)."""
        kwargs = {"TableName": self.table_name, "ScanIndexForward": False,
                  **self._with_frontend(owner, frontend)}
        start = _start(owner, token, after)
        items, last = fill_page(self.db, kwargs, start, limit, reads)
        return Page([Session.from_dict(from_item(i)) for i in items], encode_token(last))

    def place_at(self, owner: str, token: str) -> Place:
        """Where a page of the owner's index that gave ``token`` stopped."""
        key = decode_token(token, {"owner": owner}, SESSIONS.page_key("by_owner")) or {}
        return Place(key["session_id"]["S"], key["created"]["S"])

    def count_by_owner(self, owner: str, most: int | None = None) -> int:
        """How many sessions the owner has (counted by DynamoDB, none returned); with
        ``most``, reading no more than one past it (more count as ``most`` + 1)."""
        lookup_key(owner, "owner")
        return count_items(self.db, {
            "TableName": self.table_name, "IndexName": "by_owner",
            "KeyConditionExpression": "#o = :owner",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": {":owner": {"S": owner}},
        }, most)

    def delete(self, session_id: str, owner: str, purge_later: Callable[[], None]) -> Session:
        """Delete the session and everything in its partition, but for its place in its
        owner's list (:meth:`place`), kept a while. A session larger than DELETE_PAGES
        reads (a request has 29 s) is gone for its owner at once: ``purge_later`` queues
        the rest's deletion (:meth:`purge`) before its SESSION item goes."""
        session = self._mark_deleted(session_id, owner)
        keys, more = self._item_keys(session_id, DELETE_PAGES)
        if more:
            purge_later()
            keys = [_key(session_id, SESSION_ITEM)]
        self._delete_keys(keys)
        return session

    def erase(self, session_id: str, owner: str, purge_later: Callable[[], None],
              most: int) -> None:
        """:meth:`delete` for a deleted user's erasure: up to ``most`` items, key by key
        (DeleteItem: the eraser's role may put no item, which BatchWriteItem could),
        the rest left to :meth:`purge` (queued by ``purge_later``)."""
        self._mark_deleted(session_id, owner)
        out = self.db.query(
            TableName=self.table_name, Limit=most, ConsistentRead=True,
            KeyConditionExpression="session_id = :s", FilterExpression="#i <> :deleted",
            ExpressionAttributeValues={":s": {"S": session_id},
                                       ":deleted": {"S": DELETED_ITEM}},
            ProjectionExpression="session_id, #i", ExpressionAttributeNames={"#i": "item"})
        keys = out.get("Items", [])
        if "LastEvaluatedKey" in out:
            purge_later()
            keys = [_key(session_id, SESSION_ITEM)]
        keys.sort(key=lambda k: k["item"]["S"] == SESSION_ITEM)  # last, as in delete
        for key in keys:
            self.db.delete_item(TableName=self.table_name, Key=key)

    def _mark_deleted(self, session_id: str, owner: str) -> Session:
        """Put the session's place (its DELETED marker) first: from then on every write
        into it is refused (:meth:`unless_deleted`), so the keys read next are all there
        will be."""
        session = self.get(session_id, owner)
        self.db.put_item(TableName=self.table_name, Item=to_item({
            "session_id": session_id, "item": DELETED_ITEM, "deleted_owner": owner,
            "deleted_created": session.to_dict()["created"],
            EXPIRES_AT: int(time.time()) + DELETED_KEPT_SECONDS}))
        return session

    def purge(self, session_id: str, pages: int) -> bool:
        """Delete the items ``pages`` reads find of a deleted session (one with its
        DELETED marker); whether any may be left."""
        if not self.get_items(session_id, [DELETED_ITEM]):
            raise RuntimeError(f"session {session_id} is not deleted: not purged")
        keys, more = self._item_keys(session_id, pages)
        self._delete_keys(keys)
        return more

    def _item_keys(self, session_id: str, pages: int) -> tuple[list[dict[str, Any]], bool]:
        """The keys ``pages`` reads find in the session's partition, but its DELETED
        marker; and whether there may be more."""
        keys: list[dict[str, Any]] = []
        page: dict[str, Any] = {}
        for page in query_pages(self.db, {
            "TableName": self.table_name,
            "KeyConditionExpression": "session_id = :s",
            "FilterExpression": "#i <> :deleted",
            "ExpressionAttributeValues": {":s": {"S": session_id},
                                          ":deleted": {"S": DELETED_ITEM}},
            "ProjectionExpression": "session_id, #i",
            "ExpressionAttributeNames": {"#i": "item"},
            "Limit": KEYS_PAGE,
            "ConsistentRead": True,  # what was written just before goes too
        }, reads=pages):
            keys.extend(page.get("Items", []))
        return keys, "LastEvaluatedKey" in page

    def _delete_keys(self, keys: list[dict[str, Any]]) -> None:
        # The SESSION item goes last so a half-finished delete can be retried.
        keys.sort(key=lambda k: k["item"]["S"] == SESSION_ITEM)
        batch_write(self.db, self.table_name, [{"DeleteRequest": {"Key": k}} for k in keys])

    def owner_update(self, session_id: str, owner: str, new_embeds: int = 0,
                     modified: datetime | None = None,
                     callback: Mapping[str, str | None] | None = None) -> UpdateTypeDef:
        """The transaction Update that checks ``owner`` has the session (a post's own write
        is its ownership check: no read first), and with ``modified`` that it is unchanged
        since a read saw that (every post and reply sets it), counts newly bound embeds,
        and sets (a value) or removes (None) the ``callback`` fields (see
        :meth:`set_callback`): written only with the post."""
        values: dict[str, AttributeValueTypeDef] = {":o": {"S": owner},
                                                     ":m": {"S": stamp(utcnow())}}
        condition = "attribute_exists(session_id) AND #o = :o"
        if modified is not None:
            # Also as written before every write kept microseconds (none when zero).
            condition += " AND modified IN (:seen, :seen_short)"
            values[":seen"] = {"S": stamp(modified)}
            values[":seen_short"] = {"S": modified.isoformat()}
        update = "SET modified = :m"
        names = {"#o": "owner"}
        removes = []
        for name, value in (callback or {}).items():
            assert name in CALLBACK_FIELDS, name
            names[f"#{name}"] = name
            if value is None:
                removes.append(f"#{name}")
            else:
                update += f", #{name} = :{name}"
                values[f":{name}"] = {"S": value}
        if new_embeds:
            update += " ADD embed_count :n"
            values[":n"] = {"N": str(new_embeds)}
        if removes:
            update += " REMOVE " + ", ".join(removes)
        update, values = self.touch(update, values)
        return {"TableName": self.table_name, "Key": _key(session_id, SESSION_ITEM),
                "UpdateExpression": update, "ExpressionAttributeValues": values,
                "ConditionExpression": condition, "ExpressionAttributeNames": names}

    def recent(self, session_id: str, messages: int) -> Recent:
        """The session, its paused program and its ``messages`` newest messages, in one
        consistent Query (descending from the top of the partition)."""
        out = self.db.query(
            TableName=self.table_name,
            KeyConditionExpression="session_id = :s AND #i >= :m",
            ExpressionAttributeNames={"#i": "item"},
            ExpressionAttributeValues={":s": {"S": session_id}, ":m": {"S": MSG_PREFIX}},
            ScanIndexForward=False, ConsistentRead=True, Limit=messages + 2,
        )
        session, state, question, found = None, None, None, []
        for raw in out.get("Items", []):
            values = from_item(raw)
            if values["item"] == SESSION_ITEM:
                session = Session.from_dict(values)
            elif values["item"] == STATE_ITEM:
                state, question = json.loads(values["state"]), values.get("question")
            else:
                found.append(_message(values))
        return Recent(session, state, found[:messages], question)

    def get_items(self, session_id: str, items: list[str]) -> dict[str, dict[str, Any]]:
        """Several items of one session in one consistent round-trip: item -> values."""
        keys = [_key(session_id, item) for item in items]
        found: dict[str, dict[str, Any]] = {}
        request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
        while request:
            out = self.db.batch_get_item(RequestItems=request)
            for raw in out.get("Responses", {}).get(self.table_name, []):
                values = from_item(raw)
                found[values["item"]] = values
            request = out.get("UnprocessedKeys") or {}
        return found

    @staticmethod
    def message_of(values: dict[str, Any]) -> Message:
        return _message(dict(values))

    # -- messages ---------------------------------------------------------------------
    def put_messages(self, messages: list[Message]) -> None:
        """Many new messages of a session (ULIDs: they never overwrite another), in
        transactions as large as DynamoDB takes, each checking :meth:`unless_deleted`:
        once the session's deletion has begun, the rest is not written (what was, the
        deletion deletes) and the caller's own transaction is refused next."""
        parts: list[list[TransactWriteItemTypeDef]] = []
        size = 0
        for message in messages:
            item = self.message_item(message)
            if not parts or len(parts[-1]) == TRANSACTION_ITEMS or \
                    size + item_bytes(item) > TRANSACTION_BYTES:
                parts.append([{"ConditionCheck": self.unless_deleted(message.session_id)}])
                size = 0
            parts[-1].append({"Put": {"TableName": self.table_name, "Item": item}})
            size += item_bytes(item)
        for part in parts:
            try:
                retry_transient(functools.partial(self.db.transact_write_items,
                                                  TransactItems=part))
            except ClientError as exc:
                if cancelled_by(exc)[:1] == ["ConditionalCheckFailed"]:
                    return
                if is_transient(exc):  # busy through every try
                    raise Unavailable("the store is busy; try again in a moment") from exc
                raise

    def get_message(self, session_id: str, message_id: str) -> Message:
        item = self.db.get_item(
            TableName=self.table_name,
            Key=_key(session_id, MSG_PREFIX + message_id),
            ConsistentRead=True,
        ).get("Item")
        if not item:
            raise NotFound(f"message {message_id} not found")
        return _message(from_item(item))

    def list_messages(
        self,
        session_id: str,
        limit: int | None = None,
        token: str | None = None,
        newest_first: bool = False,
        after: str | None = None,
        before: str | None = None,
    ) -> Page[Message]:
        """``limit`` messages in time order (or newest first); ``after`` = only those newer
        than that message id, ``before`` (newest first) = only those older. DynamoDB ends
        a query at 1 MB, so this reads on from where it stopped until the page is full,
        the log ends or PAGE_READS reads are done (about 4 MB: a page must fit Lambda's
        6 MB response); ``next_token`` says if more follow."""
        lookup_key(session_id, "session")
        limit = clamp_limit(limit, default=100, maximum=1000)
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "session_id = :s AND begins_with(#i, :p)",
            "ExpressionAttributeNames": {"#i": "item"},
            "ExpressionAttributeValues": {":s": {"S": session_id}, ":p": {"S": MSG_PREFIX}},
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
        }
        start = decode_token(token, {"session_id": session_id}, SESSIONS.page_key())
        assert before is None or (newest_first and after is None), "before: newest first"
        if start is None and (after or before):
            start = _key(session_id, MSG_PREFIX + (after or before or ""))
        items, last = fill_page(self.db, kwargs, start, limit, PAGE_READS)
        return Page([_message(from_item(i)) for i in items], encode_token(last))

    def newest_messages(self, session_id: str, limit: int) -> list[Message]:
        """The session's newest ``limit`` messages, in time order."""
        return self.list_messages(session_id, limit=limit, newest_first=True).items[::-1]

    def all_messages(self, session_id: str) -> list[Message]:
        return every_page(lambda token: self.list_messages(session_id, limit=1000, token=token))

    def _matching(self, session_id: str, types: Collection[MessageType], first: str | None,
                  before: str | None, items: int, condition: str = "",
                  keys_only: bool = False) -> tuple[list[dict[str, Any]], bool]:
        """The session's messages of ``types`` from ``first`` to just before ``before``
        (message ids; None: the log's ends), filtered in DynamoDB (only they come back),
        among at most ``items`` messages read (Limit) in at most ``SCAN_READS`` Queries
        (each of at most 1 MB); and whether the read got to its end. One message past
        ``items`` is read to tell: a Query that stops at its Limit answers as if more
        may follow, even at the log's end."""
        lookup_key(session_id, "session")
        names = [f":t{n}" for n in range(len(types))]
        values: dict[str, Any] = {":s": {"S": session_id},
                                  ":a": {"S": MSG_PREFIX + (first or "")},
                                  ":b": {"S": MSG_PREFIX + before if before else MSG_END}}
        values |= {name: {"S": t.value} for name, t in zip(names, types)}
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "session_id = :s AND #i BETWEEN :a AND :b",
            "FilterExpression": f"#t IN ({', '.join(names)})" + condition,
            "ExpressionAttributeNames": {"#i": "item", "#t": "type"},
            "ExpressionAttributeValues": values, "ConsistentRead": True}
        if keys_only:
            kwargs["ProjectionExpression"] = "#i"
        found: list[dict[str, Any]] = []
        left = items + 1
        for _ in range(SCAN_READS):
            # The one past in the last Query, not a Query of its own.
            out = self.db.query(**kwargs, Limit=left if left <= SCAN_PAGE + 1 else SCAN_PAGE)
            found += [raw for raw in out.get("Items", [])
                      if before is None or raw["item"]["S"] != MSG_PREFIX + before]
            left -= out["ScannedCount"]
            if "LastEvaluatedKey" not in out:
                return found, True
            if left <= 0:
                # The one past ``items`` (the Query's last, where it stopped) only told
                # that the log goes on: it is not among them.
                if found and found[-1]["item"] == out["LastEvaluatedKey"]["item"]:
                    found.pop()
                break
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        return found, False

    def message_ids(self, session_id: str, types: Collection[MessageType], items: int
                    ) -> tuple[list[str], bool]:
        """The ids of the session's messages of ``types`` among its first ``items``, in
        time order (only their keys are sent back), and whether that was the whole log."""
        found, whole = self._matching(session_id, types, None, None, items, keys_only=True)
        return [raw["item"]["S"].removeprefix(MSG_PREFIX) for raw in found], whole

    def messages_of(self, session_id: str, types: Collection[MessageType], items: int,
                    first: str | None = None, before: str | None = None,
                    with_embeds: bool = False) -> tuple[list[Message], bool]:
        """The session's messages of ``types`` (those carrying embeds only, with
        ``with_embeds``) among the ``items`` from the message ``first`` on, to just before
        ``before``; and whether the read got to ``before`` (or the log's end)."""
        condition = " AND attribute_exists(embeds)" if with_embeds else ""
        found, whole = self._matching(session_id, types, first, before, items, condition)
        return [_message(from_item(raw)) for raw in found], whole

    # -- embeds -----------------------------------------------------------------------
    def bind_embed(self, embed: Embed, charge: UpdateTypeDef | None = None) -> Embed | None:
        """Attach an embed to its owner's session, count it and make ``charge`` (the
        UpdateItem of its bytes' allowance), in one transaction (others' sessions look
        absent); None when the charge is refused. Binding the same bytes under the same
        key again is a no-op that charges nothing."""
        items: list[TransactWriteItemTypeDef] = [
            {"Update": self.owner_update(embed.session_id, embed.owner, new_embeds=1)},
            {"ConditionCheck": self.unless_deleted(embed.session_id)},
            {"Put": {"TableName": self.table_name, "Item": self.embed_item(embed),
                     "ConditionExpression": "attribute_not_exists(#i)",
                     "ExpressionAttributeNames": {"#i": "item"}}}]
        if charge is not None:
            items.append({"Update": charge})
        try:
            self.db.transact_write_items(TransactItems=items)
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = cancelled_by(exc)
            if "ConditionalCheckFailed" in reasons[:2]:  # gone, or its deletion begun
                raise NotFound(f"session {embed.session_id} not found") from exc
            try:  # the key before the charge: a retry of the day's last upload is that upload
                return self._same_embed(embed, exc)
            except NotFound:
                if reasons[3:4] == ["ConditionalCheckFailed"]:
                    return None
                raise
        return embed

    def _same_embed(self, embed: Embed, exc: Exception) -> Embed:
        existing = self.get_embed(embed.session_id, embed.key)
        if existing.content_hash == embed.content_hash:
            return existing  # a retry of the same attachment
        raise Conflict(f"embed {embed.key!r} already exists in this session") from exc

    def get_embed(self, session_id: str, key: str) -> Embed:
        item = self.db.get_item(
            TableName=self.table_name,
            Key=_key(session_id, EMBED_PREFIX + key),
            ConsistentRead=True,
        ).get("Item")
        if not item:
            raise NotFound(f"embed {key!r} not found")
        return _embed(from_item(item))

    def embeds_named(self, session_id: str, keys: Collection[str]) -> dict[str, Embed]:
        """The session's embeds bound under ``keys`` (key -> embed), read by key in one
        consistent round-trip however many the session has."""
        found = self.get_items(session_id, [EMBED_PREFIX + k for k in keys]) if keys else {}
        return {embed.key: embed for embed in map(_embed, found.values())}

    def newest_embeds(self, session_id: str, limit: int) -> list[tuple[str, EmbedRef]]:
        """The session's ``limit`` most recently bound embeds (key, ref), newest first: one
        read of at most ``limit`` + 1 items (the by_created index, which also holds the
        SESSION item), however many the session has. An index is eventually consistent:
        an embed bound a moment ago may be missing (:meth:`get_embed` reads by key)."""
        out = self.db.query(
            TableName=self.table_name, IndexName="by_created",
            KeyConditionExpression="session_id = :s",
            ExpressionAttributeValues={":s": {"S": lookup_key(session_id, "session")}},
            ScanIndexForward=False, Limit=limit + 1)
        found = [from_item(raw) for raw in out.get("Items", [])]
        return [(values["item"].removeprefix(EMBED_PREFIX),
                 EmbedRef(content_type=values["content_type"],
                          content_hash=values["content_hash"], size=int(values["size"])))
                for values in found if values["item"].startswith(EMBED_PREFIX)][:limit]

    def list_embeds(self, session_id: str, after: str | None = None,
                    limit: int | None = None) -> list[Embed]:
        """The session's embeds by key: all of them, or ``limit`` after the key ``after``
        (as many pages of DynamoDB's 1 MB as they take)."""
        lookup_key(session_id, "session")
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "session_id = :s AND begins_with(#i, :p)",
            "ExpressionAttributeNames": {"#i": "item"},
            "ExpressionAttributeValues": {":s": {"S": session_id}, ":p": {"S": EMBED_PREFIX}},
            "ConsistentRead": True,
        }
        if after:
            kwargs["ExclusiveStartKey"] = _key(session_id, EMBED_PREFIX + after)
        embeds: list[Embed] = []
        while True:
            if limit is not None:
                kwargs["Limit"] = limit - len(embeds)
            out = self.db.query(**kwargs)
            embeds.extend(_embed(from_item(i)) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out or (limit is not None and len(embeds) >= limit):
                return embeds
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    # -- paused program ---------------------------------------------------------------
    def state_item(self, session_id: str, state: dict[str, Any], question_id: str | None
                   ) -> dict[str, Any]:
        """A paused program's item: its state and the question it waits on, so that only
        an end of that question drops it (:meth:`end_pause`)."""
        return self.item({"session_id": session_id, "item": STATE_ITEM,
                          "state": json.dumps(state, separators=(",", ":")),
                          "question": question_id})

    def claim_pause(self, session_id: str, answer_id: str) -> bool:
        """Take the session's paused program to resume it with the message ``answer_id``:
        it holds only while the session still awaits input (so its question was not ended
        since the runner read it), and from then on nothing else ends the question
        (:meth:`end_pause`) until the runner's reply clears it (:data:`RESUMING`). So of a
        resume and a cancel at once exactly one wins, before the program runs. False: the
        question was ended meanwhile (or the session deleted); RATE_LIMITED: the session
        was busy through every retry (nothing was taken). A claim older than
        ``RESUMING_LASTS`` holds no more."""
        now = time.time()
        try:
            retry_transient(lambda: self.db.update_item(
                TableName=self.table_name, Key=_key(session_id, SESSION_ITEM),
                UpdateExpression="SET #r = :a, #t = :now",
                # The same answer again: a redelivery of a run that claimed it.
                ConditionExpression="#s = :awaiting AND (attribute_not_exists(#r) OR #r = :a "
                                    "OR #t < :stale)",
                ExpressionAttributeNames={"#s": "status", "#r": RESUMING, "#t": RESUMED_AT},
                ExpressionAttributeValues={":awaiting": {"S": SessionStatus.AWAITING_INPUT.value},
                                           ":a": {"S": answer_id}, ":now": {"N": f"{now:.0f}"},
                                           ":stale": _stale(now)}))
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        except ClientError as exc:
            if is_transient(exc):
                raise RateLimited("the platform is busy right now; retry in a moment") from exc
            raise
        return True

    def end_pause(self, message: Message, owner: str | None = None,
                  also: list[TransactWriteItemTypeDef] | None = None,
                  any_question: bool = False) -> None:
        """End a paused program without resuming it: ``message`` (an error saying why, in
        reply to the question) is stored, the paused state dropped and the session idle
        again, with the writes ``also``, in one transaction that holds only while the
        session still awaits input (and is ``owner``'s), no runner has taken its paused
        program to resume it (:meth:`claim_pause`; or one took it so long ago that it
        died before its reply), and that program still waits on that
        question: the caller read it as pending, but the user may have answered it since
        and the agent asked another. ``any_question``: whichever it waits on (the caller
        holds the answer to it, which could not be queued)."""
        condition = "#s = :awaiting AND (attribute_not_exists(#r) OR #t < :stale)" + \
            (" AND #o = :o" if owner else "")
        values: dict[str, AttributeValueTypeDef] = {
            ":awaiting": {"S": SessionStatus.AWAITING_INPUT.value},
            ":idle": {"S": SessionStatus.IDLE.value},
            ":m": {"S": stamp(message.timestamp)}, ":stale": _stale(time.time())}
        names = {"#s": "status", "#r": RESUMING, "#t": RESUMED_AT}
        if owner:
            values[":o"] = {"S": owner}
            names["#o"] = "owner"
        update, values = self.touch("SET #s = :idle, modified = :m", values)
        update += " REMOVE #r, #t"
        state: DeleteTypeDef = {"TableName": self.table_name,
                                "Key": _key(message.session_id, STATE_ITEM)}
        # Still that question (a program paused before questions were kept passes).
        if message.in_reply_to and not any_question:
            state["ConditionExpression"] = "attribute_not_exists(#q) OR #q = :q"
            state["ExpressionAttributeNames"] = {"#q": "question"}
            state["ExpressionAttributeValues"] = {":q": {"S": message.in_reply_to}}
        try:
            retry_transient(lambda: self.db.transact_write_items(TransactItems=[
                {"Update": {"TableName": self.table_name,
                            "Key": _key(message.session_id, SESSION_ITEM),
                            "UpdateExpression": update,
                            "ConditionExpression": condition,
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": values}},
                {"Delete": state},
                {"Put": {"TableName": self.table_name, "Item": self.message_item(message),
                         "ConditionExpression": "attribute_not_exists(#i)",
                         "ExpressionAttributeNames": {"#i": "item"}}},
                {"ConditionCheck": self.unless_deleted(message.session_id)},
                *(also or []),
            ]))
        except self.db.exceptions.TransactionCanceledException as exc:
            if "ConditionalCheckFailed" not in cancelled_by(exc):  # busy even after retries
                raise RateLimited("the platform is busy right now; retry in a moment") from exc
            raise Conflict(f"session {message.session_id} is not waiting for input") from exc

    def set_callback(self, session_id: str, owner: str, **fields: str | None) -> Session:
        """Set (a value) or remove (None) the session's callback fields (``callback_url``,
        ``callback_token``, ``callback_id``, ``callback_format``); others' sessions look
        absent."""
        assert set(fields) <= CALLBACK_FIELDS, fields
        sets = [f"#{k} = :{k}" for k, v in fields.items() if v is not None]
        removes = [f"#{k}" for k, v in fields.items() if v is None]
        expression = (("SET " + ", ".join(sets)) if sets else "") + \
            ((" REMOVE " + ", ".join(removes)) if removes else "")
        values: dict[str, AttributeValueTypeDef] = {
            f":{k}": {"S": v} for k, v in fields.items() if v is not None}
        values[":o"] = {"S": owner}
        try:
            out = self.db.update_item(
                TableName=self.table_name, Key=_key(session_id, SESSION_ITEM),
                UpdateExpression=expression.strip(),
                ConditionExpression="attribute_exists(session_id) AND #owner = :o",
                ExpressionAttributeNames={"#owner": "owner", **{f"#{k}": k for k in fields}},
                ExpressionAttributeValues=values, ReturnValues="ALL_NEW")
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise NotFound(f"session {session_id} not found") from exc
        return Session.from_dict(from_item(out["Attributes"]))



def _embed(values: dict[str, Any]) -> Embed:
    values["owner"] = values.pop("embed_owner")
    return Embed.from_dict(values)
