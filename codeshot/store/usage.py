"""Usage counters: one atomic, conditional increment per charge, expiring by TTL.

A counter lives at "<kind>#<subject>#<window start>"; the conditional update is the whole
check-and-charge, so concurrent callers can never push a counter past its limit.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from codeshot.errors import Interrupted, RateLimited
from codeshot.models import Clock, utcnow
from codeshot.settings import Settings
from codeshot.store.base import Repository
from codeshot.store.dynamo import cancelled_by, retry_transient
from codeshot.store.tables import USAGE

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import (
        ConditionCheckTypeDef,
        UpdateItemInputTypeDef,
        UpdateTypeDef,
    )

UPLOAD_BYTES = "upload_bytes"  # usage counter: bytes uploaded (inline or presigned) per day
UNPROCESSED_RETRIES = 4  # BatchGetItem rounds for keys DynamoDB left unprocessed
WINDOWS = {"day": timedelta(days=1), "minute": timedelta(minutes=1)}
# How long a subject's leases item outlives its last lease taken (TTL), and a lapsed lease
# is remembered: longer than SQS redelivers a message (5 receives, 30 minutes apart).
LEASES_KEPT = timedelta(days=1)
# What a query is answered when a run of it took its lease and stopped before its reply.
INTERRUPTED = ("this query was interrupted mid-way and is not run again, so no agent "
               "repeats what it may already have done; send it again to retry")


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @classmethod
    def of(cls, window: str, now: datetime) -> Window:
        length = WINDOWS[window]
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        start = epoch + ((now - epoch) // length) * length
        return cls(start, start + length)

    def tag(self) -> str:
        return self.start.strftime("%Y%m%dT%H%M")


def _expires_at(span: Window) -> str:
    # Kept a day past the window so "used today" stays readable near midnight.
    return str(int((span.end + timedelta(days=1)).timestamp()))


def _all_taken(kind: str, limit: int) -> RateLimited:
    return RateLimited(f"{kind} limit of {limit} at once reached", limit=limit)


@dataclass(frozen=True)
class TokenUsage:
    """LLM tokens one subject spent in one window (``used`` = input + output)."""

    used: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    @classmethod
    def of(cls, item: dict[str, Any] | None) -> TokenUsage:
        def number(name: str) -> int:
            return int(item[name]["N"]) if item and name in item else 0

        return cls(number("used"), number("input_tokens"), number("output_tokens"),
                   number("calls"))


class UsageCounters(Repository):
    """``clock`` tells which window a charge falls in (injected by tests)."""

    table = USAGE

    def __init__(self, settings: Settings, dynamodb: DynamoDBClient | None = None,
                 clock: Clock = utcnow) -> None:
        super().__init__(settings, dynamodb)
        self.clock = clock

    def _counter(self, kind: str, subject: str, window: str, now: datetime | None
                 ) -> tuple[str, Window]:
        span = Window.of(window, now or self.clock())
        return f"{kind}#{subject}#{span.tag()}", span

    def charge_request(
        self, kind: str, subject: str, limit: int, window: str = "day",
        now: datetime | None = None, amount: int = 1,
    ) -> UpdateTypeDef:
        """The UpdateItem request that charges ``amount`` units (one query, or the bytes of
        an upload), for use alone or in a transaction; the charge must fit in ``limit``."""
        if not 0 < amount <= limit:
            raise self.rate_limited(kind, limit, window, now)
        counter, span = self._counter(kind, subject, window, now)
        return {
            "TableName": self.table_name,
            "Key": {"counter": {"S": counter}},
            "UpdateExpression": "ADD used :amount SET expires_at = :exp",
            "ConditionExpression": "attribute_not_exists(used) OR used <= :most",
            "ExpressionAttributeValues": {
                ":amount": {"N": str(amount)},
                ":most": {"N": str(limit - amount)},
                ":exp": {"N": _expires_at(span)},
            },
        }

    def refund_request(self, kind: str, subject: str, at: datetime) -> UpdateTypeDef:
        """The UpdateItem request that gives back one unit charged at ``at`` (of a query
        that never ran), in the transaction that answers it: so exactly once."""
        counter, span = self._counter(kind, subject, "day", at)
        return {
            "TableName": self.table_name,
            "Key": {"counter": {"S": counter}},
            "UpdateExpression": "ADD used :minus SET expires_at = if_not_exists(expires_at, :exp)",
            "ExpressionAttributeValues": {":minus": {"N": "-1"}, ":exp": {"N": _expires_at(span)}},
        }

    def rate_limited(self, kind: str, limit: int, window: str, now: datetime | None = None
                     ) -> RateLimited:
        span = Window.of(window, now or self.clock())
        return RateLimited(
            f"{kind} limit of {limit} per {window} reached; resets at {span.end.isoformat()}",
            limit=limit,
            resets_at=span.end.isoformat(),
        )

    def charge(
        self, kind: str, subject: str, limit: int, window: str = "day",
        now: datetime | None = None, amount: int = 1,
    ) -> int:
        """Charge ``amount`` units; returns the new count or raises RATE_LIMITED (nothing
        charged)."""
        request = self.charge_request(kind, subject, limit, window, now, amount)
        try:
            out = self.db.update_item(**request, ReturnValues="UPDATED_NEW")
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise self.rate_limited(kind, limit, window, now) from exc
        return int(out["Attributes"]["used"]["N"])

    def charge_once(self, kind: str, subject: str, limit: int, what: str, amount: int,
                    window: str = "day", now: datetime | None = None) -> None:
        """Charge ``amount`` for ``what`` (one thing asked for again and again, such as
        an upload URL) at most once a window; RATE_LIMITED (nothing charged) if it is not
        charged yet and does not fit. A marker item and the
        charge are one transaction, so concurrent retries charge once."""
        now = now or self.clock()
        request = self.charge_request(kind, subject, limit, window, now, amount)
        marker, span = self._counter(f"{kind}.once", f"{subject}#{what}", window, now)
        try:
            self.db.transact_write_items(TransactItems=[
                {"Put": {"TableName": self.table_name,
                         "Item": {"counter": {"S": marker},
                                  "expires_at": {"N": _expires_at(span)}},
                         "ConditionExpression": "attribute_not_exists(#c)",
                         "ExpressionAttributeNames": {"#c": "counter"}}},
                {"Update": request},
            ])
        except self.db.exceptions.TransactionCanceledException as exc:
            reasons = cancelled_by(exc)
            if reasons[:1] == ["ConditionalCheckFailed"]:
                return  # charged already this window
            if reasons[1:2] == ["ConditionalCheckFailed"]:
                raise self.rate_limited(kind, limit, window, now) from exc
            raise

    # -- leases: things in progress (running queries), each with its own expiry -------
    # One item per subject ("<kind>#<subject>", no window): ``leases`` maps each lease id to
    # when it lapses (epoch seconds); its size is the count held. A lease its holder never
    # gave back (a crashed run) lapses then: it is moved to ``lapsed`` (id -> when it is
    # forgotten), which no longer counts but still tells its holder it was interrupted.

    def take_lease(self, kind: str, subject: str, limit: int, lease_id: str, lasts: timedelta
                   ) -> None:
        """Take one of ``subject``'s ``limit`` slots for ``lease_id`` until it is given
        back, or for ``lasts`` at most. RATE_LIMITED when all are taken; Interrupted when
        ``lease_id`` took one before and never gave it back (a run that stopped mid-way)."""
        for _ in range(3):  # again once the item is made, or a lapsed lease made room
            try:
                retry_transient(lambda: self.db.update_item(
                    **self.take_lease_request(kind, subject, limit, lease_id, lasts)))
                return
            except self.db.exceptions.ConditionalCheckFailedException as exc:
                if not self.make_room(kind, subject, lease_id):
                    raise _all_taken(kind, limit) from exc
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ValidationException":
                    raise
                self.make_room(kind, subject, lease_id)  # no item yet: made, then taken
        raise _all_taken(kind, limit)

    def take_lease_request(self, kind: str, subject: str, limit: int, lease_id: str,
                           lasts: timedelta) -> UpdateTypeDef:
        """The conditional update that takes one of ``subject``'s ``limit`` slots for
        ``lease_id`` (see :meth:`take_lease`), for a transaction of its holder's own writes.
        Refused (ConditionalCheckFailed) when all are taken, and (ValidationException, or
        the reason ValidationError) when the subject's item is not made yet: then
        :meth:`make_room` and try again."""
        now = self.clock()
        return {"TableName": self.table_name, "Key": self._lease_key(kind, subject),
                "UpdateExpression": "SET leases.#id = :until, expires_at = :exp",
                "ConditionExpression": "(attribute_not_exists(leases) OR size(leases) < :limit)"
                                       " AND attribute_not_exists(leases.#id) AND "
                                       "attribute_not_exists(lapsed.#id)",
                "ExpressionAttributeNames": {"#id": lease_id},
                "ExpressionAttributeValues": {
                    ":until": {"N": str(int((now + lasts).timestamp()))},
                    ":limit": {"N": str(limit)},
                    ":exp": {"N": str(int((now + LEASES_KEPT).timestamp()))}}}

    def make_room(self, kind: str, subject: str, lease_id: str) -> bool:
        """After :meth:`take_lease_request` was refused: whether taking it again may now
        succeed (the subject's item made, or a lapsed lease moved out of the way).
        Interrupted when ``lease_id`` took one before and never gave it back."""
        key = self._lease_key(kind, subject)
        now = self.clock()
        item = self.db.get_item(TableName=self.table_name, Key=key,
                                ConsistentRead=True).get("Item")
        if item is None or "leases" not in item:  # its maps are not there to write into
            with contextlib.suppress(self.db.exceptions.ConditionalCheckFailedException):
                self.db.put_item(TableName=self.table_name, Item={
                    **key, "leases": {"M": {}}, "lapsed": {"M": {}},
                    "expires_at": {"N": str(int((now + LEASES_KEPT).timestamp()))}},
                    ConditionExpression="attribute_not_exists(#c)",
                    ExpressionAttributeNames={"#c": "counter"})
            return True
        if _holds(item, lease_id):
            raise Interrupted(INTERRUPTED)
        return self._lapse(key, item, now)

    def leased(self, kind: str, subject: str, lease_id: str) -> bool:
        """Whether ``lease_id`` holds one of ``subject``'s slots, or a lapsed one (its run
        may be under way, or stopped mid-way: its redelivery answers it)."""
        item = self.db.get_item(TableName=self.table_name, Key=self._lease_key(kind, subject),
                                ConsistentRead=True).get("Item")
        return _holds(item or {}, lease_id)

    def has_room(self, kind: str, subject: str, limit: int) -> bool:
        """Whether one of ``subject``'s ``limit`` slots is free now (a lease past its time
        counts as free: a take moves it out of the way). A read, not a claim: a take may
        still be refused."""
        item = self.db.get_item(TableName=self.table_name, Key=self._lease_key(kind, subject),
                                ConsistentRead=True).get("Item") or {}
        epoch = int(self.clock().timestamp())
        held = item.get("leases", {}).get("M", {}).values()
        return sum(int(until["N"]) > epoch for until in held) < limit

    @staticmethod
    def _lease_key(kind: str, subject: str) -> dict[str, Any]:
        return {"counter": {"S": f"{kind}#{subject}"}}

    def _lapse(self, key: dict[str, Any], item: dict[str, Any], now: datetime) -> bool:
        """Move the leases of ``item`` past their time to ``lapsed``, and forget lapsed ones
        past theirs; whether any lease lapsed (made room)."""
        epoch = int(now.timestamp())
        forget = {"N": str(int((now + LEASES_KEPT).timestamp()))}
        lapsed = False
        for lease_id, until in item.get("leases", {}).get("M", {}).items():
            if int(until["N"]) <= epoch:
                with contextlib.suppress(self.db.exceptions.ConditionalCheckFailedException):
                    self.db.update_item(  # unless given back meanwhile
                        TableName=self.table_name, Key=key,
                        UpdateExpression="REMOVE leases.#id SET lapsed.#id = :forget",
                        ConditionExpression="leases.#id = :until",
                        ExpressionAttributeNames={"#id": lease_id},
                        ExpressionAttributeValues={":until": until, ":forget": forget})
                lapsed = True
        for lease_id, until in item.get("lapsed", {}).get("M", {}).items():
            if int(until["N"]) <= epoch:
                self.db.update_item(TableName=self.table_name, Key=key,
                                    UpdateExpression="REMOVE lapsed.#id",
                                    ExpressionAttributeNames={"#id": lease_id})
        return lapsed

    def release_request(self, kind: str, subject: str, lease_id: str) -> UpdateTypeDef:
        """The update that gives back ``lease_id``'s slot (or its lapsed one), for a
        transaction (the runner's reply write): unconditional, so it never cancels one (the
        item is there: a lease keeps it for LEASES_KEPT)."""
        return {"TableName": self.table_name, "Key": self._lease_key(kind, subject),
                "UpdateExpression": "REMOVE leases.#id, lapsed.#id",
                "ExpressionAttributeNames": {"#id": lease_id}}

    def never_leased(self, kind: str, subject: str, lease_id: str) -> ConditionCheckTypeDef:
        """The transaction condition that ``lease_id`` holds no slot, nor a lapsed one: it
        never took one (or gave it back)."""
        return {"TableName": self.table_name, "Key": self._lease_key(kind, subject),
                "ConditionExpression": "attribute_not_exists(leases.#id) AND "
                                       "attribute_not_exists(lapsed.#id)",
                "ExpressionAttributeNames": {"#id": lease_id}}

    def release(self, kind: str, subject: str, lease_id: str) -> None:
        """Give back ``lease_id``'s slot, if it still holds one (none if the subject's
        item was never made: a take whose outcome was unknown, refused after all)."""
        with contextlib.suppress(self.db.exceptions.ConditionalCheckFailedException):
            self._update({**self.release_request(kind, subject, lease_id),
                          "ConditionExpression": "attribute_exists(leases)"})

    def check_room(self, kind: str, subject: str, amount: int, limit: int, what: str) -> None:
        """RATE_LIMITED (the ``what`` limit) unless ``amount`` more fits today's ``limit``:
        read before a charge that a write elsewhere (S3) must not precede if refused."""
        if self.used(kind, subject) + amount > limit:
            raise self.rate_limited(what, limit, "day")

    def used(
        self, kind: str, subject: str, window: str = "day", now: datetime | None = None
    ) -> int:
        counter, _ = self._counter(kind, subject, window, now)
        item = self.db.get_item(
            TableName=self.table_name, Key={"counter": {"S": counter}}, ConsistentRead=True
        ).get("Item")
        return int(item["used"]["N"]) if item else 0

    # -- amounts known only after the fact (LLM tokens) ------------------------------
    def add(self, charges: list[tuple[str, str]], input_tokens: int, output_tokens: int,
            window: str = "day", now: datetime | None = None, reserved: int = 0,
            calls: int = 1) -> None:
        """Add one LLM call's tokens to each (kind, subject) counter, less the ``reserved``
        tokens :meth:`reserve` counted for it already (a call that failed: its tokens 0,
        its ``calls`` 0, gives its reservation back).

        Unconditional: the tokens are spent already. Limits are checked before each call
        (:meth:`token_usage`), so concurrent callers overspend by at most one call each.
        One plain ADD per counter, not a transaction: a counter such as the planner's is
        shared by every user, and a transaction on it would be cancelled by any other
        writing it at that moment; an ADD refused so is tried again."""
        for kind, subject in charges:
            counter, span = self._counter(kind, subject, window, now)
            request: UpdateItemInputTypeDef = {
                "TableName": self.table_name,
                "Key": {"counter": {"S": counter}},
                "UpdateExpression": "ADD used :used, input_tokens :in, output_tokens :out, "
                                    "calls :calls SET expires_at = :exp",
                "ExpressionAttributeValues": {
                    ":used": {"N": str(input_tokens + output_tokens - reserved)},
                    ":in": {"N": str(input_tokens)},
                    ":out": {"N": str(output_tokens)},
                    ":calls": {"N": str(calls)},
                    ":exp": {"N": _expires_at(span)},
                },
            }
            self._update(request)

    def reserve(self, kind: str, subject: str, amount: int, limit: int, window: str = "day",
                now: datetime | None = None) -> bool:
        """Count ``amount`` tokens for a call about to be made, if they fit in ``limit``
        (one conditional ADD, so concurrent calls cannot all fit the same room); whether
        they did. :meth:`add` settles the call's real tokens against it."""
        if not 0 < amount <= limit:
            return False
        try:
            self._update(self.charge_request(kind, subject, limit, window, now, amount))
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _update(self, request: UpdateItemInputTypeDef | UpdateTypeDef) -> None:
        retry_transient(lambda: self.db.update_item(**request))

    def token_usage(self, charges: list[tuple[str, str]], window: str = "day",
                    now: datetime | None = None) -> list[TokenUsage]:
        """Each (kind, subject) counter's usage in this window, read consistently at once."""
        counters = [self._counter(kind, subject, window, now)[0] for kind, subject in charges]
        request: dict[str, Any] = {self.table_name: {
            "Keys": [{"counter": {"S": c}} for c in dict.fromkeys(counters)],
            "ConsistentRead": True}}
        found: dict[str, dict[str, Any]] = {}
        for attempt in range(UNPROCESSED_RETRIES):
            if attempt:
                time.sleep(0.05 * 2 ** attempt)  # DynamoDB asks callers to back off
            out = self.db.batch_get_item(RequestItems=request)
            found.update((item["counter"]["S"], item)
                         for item in out.get("Responses", {}).get(self.table_name, []))
            request = dict(out.get("UnprocessedKeys") or {})
            if not request:
                return [TokenUsage.of(found.get(c)) for c in counters]
        # Unread under throttling: not "nothing used", which would let a spent budget pass.
        raise RateLimited("the usage counters cannot be read right now; retry in a moment")

    def forget(self, kind: str, subject: str, days: int = 0) -> None:
        """Delete ``subject``'s ``kind`` counter: with ``days``, its daily counters of the
        last ``days`` days (older ones have expired), else its one without a window."""
        now = self.clock()
        counters = [self._counter(kind, subject, "day", now - timedelta(days=back))[0]
                    for back in range(days)] if days else [f"{kind}#{subject}"]
        for counter in counters:
            self.db.delete_item(TableName=self.table_name, Key={"counter": {"S": counter}})


def _holds(item: dict[str, Any], lease_id: str) -> bool:
    """Whether a subject's lease ``item`` has ``lease_id`` holding a slot, or a lapsed one."""
    return any(lease_id in item.get(held, {}).get("M", {}) for held in ("leases", "lapsed"))
