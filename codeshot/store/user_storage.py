"""Per-user, per-agent key-value storage (the agent's "cookies").

Values arrive as JSON text (docs/fixie-wire-contract.md) and are stored as that text after a check
that it parses; bytes inside are already encoded by the SDK as ``_bytes_ascii`` objects.

Every item, the scope's count of keys too, carries the agent registration that wrote it
(``registration``: "<agent id>#<Agent.registration>"). A registration reads, lists,
replaces, deletes and counts only its own items: an agent registered at a deleted one's id
(the same owner) starts empty for every user at once, before anything is swept, and a
deleted agent's call still in flight writes only what its own registration held. The
deleted registration's items, every user's, are swept later through the keys-only
``by_registration`` index, a bounded part at a time (the runner, queued by the deletion:
an agent may keep a thousand keys for each of thousands of users, more than a request may
delete). Items written before items carried a registration have none, and that index does
not find them: each is the registration's whose time is not after its ``modified`` (the
one registered when it was written), so a live agent keeps reading them and stamps each it
writes again; a deleted agent's stay in the table, read by no later registration, until
one writes the same key.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from codeshot.errors import InvalidInput, NotFound, Unavailable
from codeshot.models import utcnow
from codeshot.store.base import Repository
from codeshot.store.dynamo import (
    Page,
    cancelled_by,
    clamp_limit,
    count_items,
    decode_token,
    drop_partition,
    encode_token,
    from_item,
    query_pages,
)
from codeshot.store.tables import USER_STORAGE

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef

log = logging.getLogger(__name__)
MAX_KEY_BYTES = 512
WRITE_ATTEMPTS = 4  # a write whose transaction met another on the same count
# The sort key of each scope's count of keys: blank, so no user key (check_key refuses
# those; DynamoDB refuses an empty one).
COUNT_KEY = " "
REGISTRATION = "registration"
BY_REGISTRATION = "by_registration"
SWEEP_PAGE = 100  # index keys per query page of a sweep, deleted before the next is read
# An item is the registration's: stamped with it, or unstamped (written before stamps) and
# written no earlier than it. ISO texts of UTC times order as the times do ("...:05+00:00",
# a whole second, sorts before "...:05.000001+00:00"). Holder.holds says it in Python.
HELD = "(#g = :g OR (attribute_not_exists(#g) AND #m >= :since))"
HELD_NAMES = {"#g": REGISTRATION, "#m": "modified"}


def check_key(key: str) -> None:
    if not key or not key.strip():
        raise InvalidInput("user storage key must not be empty")
    if key in (".", ".."):  # an HTTP client resolves them away in a URL's path
        raise InvalidInput(f"user storage key must not be {key!r}")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidInput(f"user storage key exceeds {MAX_KEY_BYTES} bytes")


def stamp(agent_id: str, registration: int) -> str:
    """What an item written by this registration of the agent carries (and is indexed by)."""
    return f"{agent_id}#{registration}"


@dataclass(frozen=True)
class Holder:
    """Whose storage: a user's with one registration of an agent (``registration``:
    :attr:`~codeshot.models.Agent.registration`; 0 for an agent served unregistered, as
    ``codeshot agent test`` does)."""

    user_id: str
    agent_id: str
    registration: int

    @property
    def scope(self) -> str:
        return f"{self.user_id}#{self.agent_id}"

    @property
    def stamp(self) -> str:
        return stamp(self.agent_id, self.registration)

    @property
    def since(self) -> str:
        """The registration's time, spelt as ``modified`` is."""
        return (datetime.fromtimestamp(0, UTC)
                + timedelta(microseconds=self.registration)).isoformat()

    def key(self, key: str) -> dict[str, Any]:
        return {"scope": {"S": self.scope}, "key": {"S": key}}

    def held_values(self) -> dict[str, Any]:
        return {":g": {"S": self.stamp}, ":since": {"S": self.since}}

    def holds(self, item: dict[str, Any]) -> bool:
        """:data:`HELD`, of an item read."""
        if REGISTRATION in item:
            return bool(item[REGISTRATION]["S"] == self.stamp)
        return bool(item["modified"]["S"] >= self.since)


class UserStorageStore(Repository):
    table = USER_STORAGE

    def check_value(self, data: str) -> None:
        """INVALID_INPUT unless ``data`` is JSON text within the size limit."""
        size = len(data.encode())
        limit = self.settings.max_storage_value_bytes
        if size > limit:
            raise InvalidInput(f"value is {size} bytes; the limit is {limit}", limit=limit)
        try:
            json.loads(data)
        except ValueError as exc:
            raise InvalidInput("value must be JSON text") from exc

    def put(self, holder: Holder, key: str, data: str) -> None:
        """Store ``data`` (JSON text) under ``key``; replaces any earlier value."""
        check_key(key)
        self.check_value(data)
        item = {**holder.key(key), "data": {"S": data}, "modified": {"S": utcnow().isoformat()},
                REGISTRATION: {"S": holder.stamp}}
        names = {"#k": "key", **HELD_NAMES}
        for attempt in range(WRITE_ATTEMPTS):
            try:  # a key it has: replaced, the count unchanged
                self.db.put_item(TableName=self.table_name, Item=item,
                                 ConditionExpression=f"attribute_exists(#k) AND {HELD}",
                                 ExpressionAttributeNames=names,
                                 ExpressionAttributeValues=holder.held_values())
                return
            except self.db.exceptions.ConditionalCheckFailedException:
                pass
            try:  # a new key (or one another registration left): counted, within the limit
                self.db.transact_write_items(TransactItems=[
                    {"Put": {"TableName": self.table_name, "Item": item,
                             "ConditionExpression": f"attribute_not_exists(#k) OR NOT {HELD}",
                             "ExpressionAttributeNames": names,
                             "ExpressionAttributeValues": holder.held_values()}},
                    self._count(holder, +1),
                ])
                return
            except self.db.exceptions.TransactionCanceledException as exc:
                if cancelled_by(exc)[1:] == ["ConditionalCheckFailed"]:
                    if self._own_count(holder):
                        continue
                    most = self.settings.max_storage_keys
                    raise InvalidInput(
                        f"this agent keeps {most} keys for this user, the most it may: "
                        "delete some first", limit=most) from exc
                # The key was written meanwhile (a concurrent put: replace it), or another
                # write of this user's keys held the count (try again).
                time.sleep(0.05 * 2 ** attempt)
        raise Unavailable("the user's storage is busy with other writes: try again")

    def _count(self, holder: Holder, step: int) -> TransactWriteItemTypeDef:
        """The transaction part that moves the scope's count of the registration's keys
        by ``step``. It fails on a count another registration (or none) wrote: then
        :meth:`_own_count` makes it this one's first."""
        values: dict[str, Any] = {":step": {"N": str(step)}, ":g": {"S": holder.stamp}}
        update: UpdateTypeDef = {
            "TableName": self.table_name,
            "Key": holder.key(COUNT_KEY),
            "UpdateExpression": "SET #g = :g ADD #n :step",
            "ExpressionAttributeNames": {"#n": "count", "#g": REGISTRATION},
            "ExpressionAttributeValues": values,
        }
        if step > 0:  # a key added must fit; one taken away always may be
            update["ConditionExpression"] = "attribute_not_exists(#n) OR (#g = :g AND #n < :most)"
            values[":most"] = {"N": str(self.settings.max_storage_keys)}
        else:
            update["ConditionExpression"] = "#g = :g"
        return {"Update": update}

    def _own_count(self, holder: Holder) -> bool:
        """Make the scope's count the registration's if another registration's is there
        (or one written before counts carried theirs); whether it was not already (False:
        it is, and it is full).

        Another registration's counts none of this one's keys (a registration adds keys
        only through its own count): it starts again at 0. One without a registration
        counted the keys before stamps, and maybe a deleted agent's among them: this
        registration's of those are counted, once, by reading the scope."""
        count_key = holder.key(COUNT_KEY)
        found = self.db.get_item(TableName=self.table_name, Key=count_key,
                                 ConsistentRead=True).get("Item")
        if found and found.get(REGISTRATION, {}).get("S") == holder.stamp:
            return False
        if found is None:
            return True  # swept meanwhile: the next write starts it
        if REGISTRATION in found:
            count = 0
            unchanged: dict[str, Any] = {"ConditionExpression": "#g = :was",
                                         "ExpressionAttributeValues": {":was": found[REGISTRATION]}}
        else:
            # The registration's keys in the scope: once per scope after an upgrade.
            count = count_items(self.db, self._query_held(holder))
            unchanged = {"ConditionExpression": "attribute_not_exists(#g)"}
        with contextlib.suppress(self.db.exceptions.ConditionalCheckFailedException):
            # Changed meanwhile (another write made it this registration's): tried again.
            self.db.put_item(
                TableName=self.table_name,
                Item={**count_key, "count": {"N": str(count)}, REGISTRATION: {"S": holder.stamp}},
                ExpressionAttributeNames={"#g": REGISTRATION}, **unchanged)
        return True

    def _query_held(self, holder: Holder) -> dict[str, Any]:
        """A query of the scope's keys that are the registration's."""
        return {
            "TableName": self.table_name,
            "KeyConditionExpression": "#s = :s",
            "FilterExpression": f"#k <> :count AND {HELD}",
            "ExpressionAttributeNames": {"#s": "scope", "#k": "key", **HELD_NAMES},
            "ExpressionAttributeValues": {":s": {"S": holder.scope},
                                          ":count": {"S": COUNT_KEY}, **holder.held_values()},
            "ConsistentRead": True,
        }

    def get(self, holder: Holder, key: str) -> str:
        check_key(key)
        item = self.db.get_item(
            TableName=self.table_name, Key=holder.key(key), ConsistentRead=True,
        ).get("Item")
        if not item or not holder.holds(item):
            raise NotFound(f"no value for key {key!r}")
        return item["data"]["S"]

    def delete(self, holder: Holder, key: str) -> None:
        check_key(key)
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.db.transact_write_items(TransactItems=[
                    {"Delete": {"TableName": self.table_name, "Key": holder.key(key),
                                "ConditionExpression": f"attribute_exists(#k) AND {HELD}",
                                "ExpressionAttributeNames": {"#k": "key", **HELD_NAMES},
                                "ExpressionAttributeValues": holder.held_values()}},
                    self._count(holder, -1),
                ])
                return
            except self.db.exceptions.TransactionCanceledException as exc:
                reasons = cancelled_by(exc)
                if reasons[:1] == ["ConditionalCheckFailed"]:
                    raise NotFound(f"no value for key {key!r}") from exc
                if reasons[1:] == ["ConditionalCheckFailed"]:
                    self._own_count(holder)
                    continue
                time.sleep(0.05 * 2 ** attempt)  # the count was held by another write
        raise Unavailable("the user's storage is busy with other writes: try again")

    def list_keys(self, holder: Holder, limit: int | None = None,
                  token: str | None = None) -> Page[str]:
        kwargs = self._query_held(holder)
        kwargs["ProjectionExpression"] = "#s, #k"
        kwargs["Limit"] = clamp_limit(limit, default=1000, maximum=1000)
        start = decode_token(token, {"scope": holder.scope}, USER_STORAGE.page_key())
        if start:
            kwargs["ExclusiveStartKey"] = start
        out = self.db.query(**kwargs)
        return Page(
            [from_item(i)["key"] for i in out.get("Items", [])],
            encode_token(out.get("LastEvaluatedKey")),
        )

    def drop_scope(self, user_id: str, agent_id: str, most: int) -> bool:
        """Delete up to ``most`` of a deleted user's items with the agent, every
        registration's, its count too; whether any may be left."""
        scope = Holder(user_id, agent_id, 0).scope
        return drop_partition(self.db, self.table_name, "scope", "key", scope, most)

    def sweep_registration(self, agent_id: str, registration: int, pages: int) -> bool:
        """Delete up to ``pages`` pages of a deleted registration's items, every user's,
        key by key; whether any may be left. An item another registration wrote over
        since is not its any more and stays. Deleted items leave the index, so a sweep
        cut short anywhere (a throttled delete raises once boto3's retries are spent)
        resumes by starting again."""
        value = {":g": {"S": stamp(agent_id, registration)}}
        kwargs: dict[str, Any] = {
            "TableName": self.table_name, "IndexName": BY_REGISTRATION, "Limit": SWEEP_PAGE,
            "KeyConditionExpression": "#g = :g", "ExpressionAttributeNames": {"#g": REGISTRATION},
            "ExpressionAttributeValues": value,
        }
        deleted = 0
        page: dict[str, Any] = {}
        for page in query_pages(self.db, kwargs, reads=pages):
            # DeleteItem, not BatchWriteItem: the sweeper's role can delete, never put.
            for item in page["Items"]:
                with contextlib.suppress(self.db.exceptions.ConditionalCheckFailedException):
                    self.db.delete_item(TableName=self.table_name,
                                        Key={"scope": item["scope"], "key": item["key"]},
                                        ConditionExpression="#g = :g",
                                        ExpressionAttributeNames={"#g": REGISTRATION},
                                        ExpressionAttributeValues=value)
                    deleted += 1
        if "LastEvaluatedKey" not in page:
            log.info("swept %d user-storage items of %s", deleted, value[":g"]["S"])
            return False
        log.info("swept %d user-storage items of %s, more to go", deleted, value[":g"]["S"])
        return True
