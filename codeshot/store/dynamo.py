"""Small helpers over the low-level DynamoDB client: (de)serialisation, condition
failures and opaque page tokens."""

from __future__ import annotations

import base64
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, TypeVar

from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer

from codeshot.errors import InvalidInput, NotFound, Unavailable

log = logging.getLogger("codeshot.store")
_ser = TypeSerializer()
_deser = TypeDeserializer()
T = TypeVar("T")


def _storable(value: Any) -> Any:
    """Floats (at any depth) as the Decimals DynamoDB stores, and text as valid Unicode:
    a lone surrogate (an agent's, an MCP server's or a model's JSON can carry one;
    people's text is refused with it) becomes U+FFFD, where it failed the write, and the
    query with it, as the platform's own trouble."""
    if isinstance(value, str):
        return value if value.isascii() else _valid_unicode(value)
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def _valid_unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _numbers_out(value: Any) -> Any:
    """Decimals (at any depth) back as int or float."""
    if isinstance(value, Decimal):
        return int(value) if value == int(value) else float(value)
    if isinstance(value, dict):
        return {k: _numbers_out(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_out(v) for v in value]
    return value


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    """Serialise, dropping None and empty sets (DynamoDB cannot store an empty set)."""
    return {
        k: _ser.serialize(_storable(v))
        for k, v in values.items()
        if v is not None and not (isinstance(v, (set, frozenset)) and not v)
    }


MAX_ITEM_BYTES = 400 * 1024  # DynamoDB's limit for one item, names and values together
TRANSACTION_ITEMS = 100  # DynamoDB's most items in one TransactWriteItems ...
TRANSACTION_BYTES = 4_000_000  # ... and their bytes (4 MiB), less room for the keys


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it against :data:`MAX_ITEM_BYTES` (its names'
    and text's UTF-8 bytes, binary's length; numbers at most their digits): measured
    before a write, so an item too large is refused as input, not by DynamoDB."""
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(value: dict[str, Any]) -> int:
    ((kind, data),) = value.items()
    if kind == "S":
        return len(data.encode())
    if kind in ("N", "B"):
        return len(data)  # a number's digits bound its size (at most 21 bytes)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_bytes({kind[0]: v}) for v in data)
    if kind == "L":  # 3 bytes, and 1 for each element
        return 3 + sum(1 + _value_bytes(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_bytes(v) for k, v in data.items())
    return 1  # BOOL, NULL


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in item.items():
        value = _deser.deserialize(raw)
        if isinstance(value, Binary):
            value = bytes(value)  # type: ignore[call-overload]  # the stub types __bytes__ as str
        out[key] = _numbers_out(value)
    return out


def _response(exc: Exception) -> dict[str, Any]:
    """What AWS answered with ``exc``: botocore's timeouts carry a ``response`` too, None."""
    return getattr(exc, "response", None) or {}


def is_condition_failure(exc: Exception) -> bool:
    code = _response(exc).get("Error", {}).get("Code", "")
    return code in ("ConditionalCheckFailedException", "TransactionCanceledException")


def cancelled_by(exc: Exception) -> list[str]:
    """A cancelled transaction's reason per item, in order ("ConditionalCheckFailed" for
    an item whose condition failed, "None" for one that was fine)."""
    reasons = _response(exc).get("CancellationReasons", [])
    return [r.get("Code", "") for r in reasons]


# Why DynamoDB refuses a write for the moment, not for good: another transaction on one
# of its items (botocore retries neither TransactionConflictException nor a transaction
# cancelled for it), or throttling that outlasted botocore's own retries.
TRANSIENT_CODES = frozenset({"TransactionConflictException", "ThrottlingException",
                             "ProvisionedThroughputExceededException",
                             "RequestLimitExceeded", "TransactionInProgressException"})
TRANSIENT_REASONS = frozenset({"TransactionConflict", "ThrottlingError",
                               "ProvisionedThroughputExceeded", "RequestLimitExceeded"})
WRITE_ATTEMPTS = 5  # with the backoff below: at most 1.5 s of waiting in all


def is_transient(exc: Exception) -> bool:
    """Whether ``exc`` is a write refused only for the moment (worth trying again): a
    transaction is, when no item's condition failed and one item was busy or throttled."""
    code = _response(exc).get("Error", {}).get("Code", "")
    if code == "TransactionCanceledException":
        reasons = cancelled_by(exc)
        return "ConditionalCheckFailed" not in reasons and \
            any(r in TRANSIENT_REASONS for r in reasons)
    return code in TRANSIENT_CODES


# Tokens of transact_write's calls under way, and those of them one of whose sends
# (botocore's own resends included) got no answer, a 5xx or "in progress": they may have
# been written, whatever the last send got. Other callers' tokens are not kept.
_SENDING: set[str] = set()
_UNSURE: set[str] = set()


def _note_unsure(request_dict: dict[str, Any], response: Any,
                 caught_exception: Exception | None, **_: Any) -> None:
    """botocore's ``needs-retry`` hook, after each send of a TransactWriteItems."""
    if caught_exception is None:
        if response is None:
            return
        http, parsed = response
        if http.status_code < 500 and \
                parsed.get("Error", {}).get("Code") != "TransactionInProgressException":
            return
    token = json.loads(request_dict.get("body") or b"{}").get("ClientRequestToken")
    if token in _SENDING:
        _UNSURE.add(token)


def note_unsure_sends(db: Any) -> None:
    """Have ``db`` tell :func:`transact_write` of its sends that may have been written:
    once, where the client is made (the sessions store's)."""
    db.meta.events.register_first("needs-retry.dynamodb.TransactWriteItems", _note_unsure,
                                  unique_id="codeshot-note-unsure")


def transact_write(db: Any, items: Sequence[Any], unsure: list[bool]) -> None:
    """``db.transact_write_items(items)`` under a token of its own, ``db`` being a client
    :func:`note_unsure_sends` was given. If it raises, whether any send of it (botocore's
    own resends included) may have been written is appended to ``unsure``: a throttle
    after a resend of a send that timed out refuses only that resend."""
    token = str(uuid.uuid4())
    _SENDING.add(token)
    try:
        db.transact_write_items(TransactItems=items, ClientRequestToken=token)
    except Exception:
        unsure.append(token in _UNSURE)
        raise
    finally:
        _SENDING.discard(token)
        _UNSURE.discard(token)


def retry_transient(write: Callable[[], T], attempts: int = WRITE_ATTEMPTS) -> T:
    """``write()``, tried again after a transient refusal (:func:`is_transient`) with
    jittered exponential backoff, so writers colliding on one item spread out; the last
    refusal, or any other error, is raised."""
    for attempt in range(attempts - 1):
        try:
            return write()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.info("write refused for the moment (%s); trying again", exc)
            time.sleep(random.uniform(0, 0.1 * 2 ** attempt))  # noqa: S311  (jitter)
    return write()


BATCH_WRITES = 25  # DynamoDB's most requests in one BatchWriteItem
BATCH_ATTEMPTS = 8  # writes of a batch DynamoDB left unprocessed, tried again this often


def batch_write(db: Any, table: str, requests: Sequence[dict[str, Any]]) -> None:
    """Every put or delete of ``requests``, 25 at a time; what DynamoDB leaves unprocessed
    (throttling) is sent again after a jittered exponential backoff, as AWS asks (at once,
    a throttled table was sent it again in a hot loop), until it fails for good."""
    for start in range(0, len(requests), BATCH_WRITES):
        pending: dict[str, Any] = {table: list(requests[start:start + BATCH_WRITES])}
        for attempt in range(BATCH_ATTEMPTS):
            pending = dict(db.batch_write_item(RequestItems=pending).get(
                "UnprocessedItems") or {})
            if not pending:
                break
            if attempt < BATCH_ATTEMPTS - 1:
                time.sleep(random.uniform(0, 0.05 * 2 ** attempt))  # noqa: S311  (jitter)
        else:
            raise Unavailable("the store is busy; try again in a moment")


def drop_partition(db: Any, table_name: str, pk: str, sk: str, key: str, most: int) -> bool:
    """Delete up to ``most`` items of the partition ``key``, key by key (DeleteItem: a
    role that erases need not put an item), having read only their keys; whether any may
    be left. Deleted items are not read again, so a part cut short resumes by starting
    again. The Query names its Select: the eraser's grant allows reading keys alone."""
    out = db.query(TableName=table_name, KeyConditionExpression="#p = :p", Limit=most,
                   ProjectionExpression="#p, #s", ConsistentRead=True,
                   Select="SPECIFIC_ATTRIBUTES",
                   ExpressionAttributeNames={"#p": pk, "#s": sk},
                   ExpressionAttributeValues={":p": {"S": key}})
    for item in out.get("Items", []):
        db.delete_item(TableName=table_name, Key={pk: item[pk], sk: item[sk]})
    return "LastEvaluatedKey" in out


def query_pages(db: Any, kwargs: dict[str, Any], reads: int | None = None
                ) -> Iterator[dict[str, Any]]:
    """The answers of a Query read on from where each stopped (DynamoDB ends one at
    1 MB), at most ``reads`` of them; ``kwargs`` ends holding where the last stopped."""
    done = 0
    while reads is None or done < reads:
        out: dict[str, Any] = db.query(**kwargs)
        done += 1
        yield out
        if "LastEvaluatedKey" not in out:
            return
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def fill_page(db: Any, kwargs: dict[str, Any], start: dict[str, Any] | None, limit: int,
              reads: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Up to ``limit`` items of a Query from ``start``, read on past DynamoDB's 1 MB stops
    in at most ``reads`` Queries, each asking only for what is still missing (so the last
    key read is the page's last item: nothing is skipped); and where it stopped (None:
    at the end)."""
    items: list[dict[str, Any]] = []
    for _ in range(reads):
        if start:
            kwargs["ExclusiveStartKey"] = start
        out = db.query(**kwargs, Limit=limit - len(items))
        items += out.get("Items", [])
        start = out.get("LastEvaluatedKey")
        if not start or len(items) >= limit:
            break
    return items, start


def count_items(db: Any, kwargs: dict[str, Any], most: int | None = None) -> int:
    """How many items a Query finds, counted by DynamoDB (none sent back). With ``most``
    (a Query without a filter), no more than ``most`` + 1 are read, however many there
    are: more than ``most`` count as ``most`` + 1."""
    if most is None:
        return sum(out["Count"] for out in query_pages(db, {**kwargs, "Select": "COUNT"}))
    assert "FilterExpression" not in kwargs, "Limit bounds what is read, not what matches"
    query, counted = {**kwargs, "Select": "COUNT", "Limit": most + 1}, 0
    for out in query_pages(db, query):
        counted += out["Count"]
        if counted > most:
            break
        query["Limit"] = most + 1 - counted  # read on from a 1 MB stop: no further
    return counted


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_token: str | None = None


def every_page(fetch: Callable[[str | None], Page[T]]) -> list[T]:
    """The items of ``fetch(token)`` page after page, from the first to the last."""
    items: list[T] = []
    token = None
    while True:
        page = fetch(token)
        items.extend(page.items)
        if not page.next_token:
            return items
        token = page.next_token


def encode_token(last_key: dict[str, Any] | None) -> str | None:
    if not last_key:
        return None
    plain = from_item(last_key)
    return base64.urlsafe_b64encode(json.dumps(plain, sort_keys=True).encode()).decode()


def decode_token(token: str | None, required: dict[str, str], keys: frozenset[str]
                 ) -> dict[str, Any] | None:
    """Turn a page token back into an ExclusiveStartKey.

    ``required`` pins attributes to the values of the current query (the partition being
    read), so a token made for another user's partition cannot be replayed here. ``keys``
    are the attributes a start key of that query has (:meth:`Table.page_key`): DynamoDB
    refuses one with more or fewer.
    """
    if not token:
        return None
    try:
        plain = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(plain, dict) or not all(isinstance(v, str) for v in plain.values()):
            raise ValueError
    except (ValueError, TypeError) as exc:
        raise InvalidInput("invalid page token") from exc
    if set(plain) != keys or any(plain[name] != value for name, value in required.items()):
        raise InvalidInput("invalid page token")
    return to_item(plain)


def clamp_limit(limit: int | None, default: int = 50, maximum: int = 200) -> int:
    if limit is None:
        return default
    if limit < 1:
        raise InvalidInput("limit must be at least 1")
    return min(limit, maximum)


MAX_KEY_BYTES = 1024  # DynamoDB's limit for a sort key; partition keys allow 2048


def lookup_key(value: str, what: str) -> str:
    """An id used to look something up: an empty or oversized one cannot exist, so the
    caller gets NOT_FOUND rather than DynamoDB's ValidationException."""
    if not value or len(value.encode()) > MAX_KEY_BYTES:
        raise NotFound(f"{what} {value[:80]!r} not found")
    return value
