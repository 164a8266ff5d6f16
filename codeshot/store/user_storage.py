"""Per-user, per-agent key-value storage (the agent's "cookies").

Values arrive as JSON text (docs/fixie-wire-contract.md) and are stored as that text after a check
that it parses; bytes inside are already encoded by the SDK as ``_bytes_ascii`` objects.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from codeshot.errors import InvalidInput, NotFound, Unavailable
from codeshot.models import utcnow
from codeshot.store.base import Repository
from codeshot.store.dynamo import Page, clamp_limit, decode_token, encode_token, from_item
from codeshot.store.tables import USER_STORAGE

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef

MAX_KEY_BYTES = 512
WRITE_ATTEMPTS = 4  # a write whose transaction met another on the same count
# The sort key of each scope's count of keys: blank, so no user key (_check_key refuses
# those; DynamoDB refuses an empty one).
COUNT_KEY = " "


def _cancelled_by(exc: Exception) -> list[str]:
    """Which parts of a cancelled transaction failed their condition."""
    reasons = getattr(exc, "response", {}).get("CancellationReasons", [])
    return [r.get("Code", "") for r in reasons]


def _scope(user_id: str, agent_id: str) -> str:
    return f"{user_id}#{agent_id}"


def _check_key(key: str) -> None:
    if not key or not key.strip():
        raise InvalidInput("user storage key must not be empty")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidInput(f"user storage key exceeds {MAX_KEY_BYTES} bytes")


class UserStorageStore(Repository):
    table = USER_STORAGE

    def _key(self, user_id: str, agent_id: str, key: str) -> dict[str, Any]:
        _check_key(key)
        return {"scope": {"S": _scope(user_id, agent_id)}, "key": {"S": key}}

    def put(self, user_id: str, agent_id: str, key: str, data: str) -> None:
        """Store ``data`` (JSON text) under ``key``; replaces any earlier value."""
        item_key = self._key(user_id, agent_id, key)
        size = len(data.encode())
        limit = self.settings.max_storage_value_bytes
        if size > limit:
            raise InvalidInput(f"value is {size} bytes; the limit is {limit}", limit=limit)
        try:
            json.loads(data)
        except ValueError as exc:
            raise InvalidInput("value must be JSON text") from exc
        item = {**item_key, "data": {"S": data}, "modified": {"S": utcnow().isoformat()}}
        names = {"#k": "key"}
        for attempt in range(WRITE_ATTEMPTS):
            try:  # a key it has: replaced, the count unchanged
                self.db.put_item(TableName=self.table_name, Item=item,
                                 ConditionExpression="attribute_exists(#k)",
                                 ExpressionAttributeNames=names)
                return
            except self.db.exceptions.ConditionalCheckFailedException:
                pass
            try:  # a new key: counted, within the limit
                self.db.transact_write_items(TransactItems=[
                    {"Put": {"TableName": self.table_name, "Item": item,
                             "ConditionExpression": "attribute_not_exists(#k)",
                             "ExpressionAttributeNames": names}},
                    self._count(user_id, agent_id, +1),
                ])
                return
            except self.db.exceptions.TransactionCanceledException as exc:
                if _cancelled_by(exc)[1:] == ["ConditionalCheckFailed"]:
                    most = self.settings.max_storage_keys
                    raise InvalidInput(
                        f"this agent keeps {most} keys for this user, the most it may: "
                        "delete some first", limit=most) from exc
                # The key was written meanwhile (a concurrent put: replace it), or another
                # write of this user's keys held the count (try again).
                time.sleep(0.05 * 2 ** attempt)
        raise Unavailable("the user's storage is busy with other writes: try again")

    def _count(self, user_id: str, agent_id: str, step: int) -> TransactWriteItemTypeDef:
        """The transaction part that moves the scope's count of keys by ``step``."""
        values: dict[str, Any] = {":step": {"N": str(step)}}
        update: UpdateTypeDef = {
            "TableName": self.table_name,
            "Key": {"scope": {"S": _scope(user_id, agent_id)}, "key": {"S": COUNT_KEY}},
            "UpdateExpression": "ADD #n :step",
            "ExpressionAttributeNames": {"#n": "count"},
            "ExpressionAttributeValues": values,
        }
        if step > 0:  # a key added must fit; one taken away always may be
            update["ConditionExpression"] = "attribute_not_exists(#n) OR #n < :most"
            values[":most"] = {"N": str(self.settings.max_storage_keys)}
        return {"Update": update}

    def get(self, user_id: str, agent_id: str, key: str) -> str:
        item = self.db.get_item(
            TableName=self.table_name,
            Key=self._key(user_id, agent_id, key),
            ConsistentRead=True,
        ).get("Item")
        if not item:
            raise NotFound(f"no value for key {key!r}")
        return item["data"]["S"]

    def delete(self, user_id: str, agent_id: str, key: str) -> None:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.db.transact_write_items(TransactItems=[
                    {"Delete": {"TableName": self.table_name,
                                "Key": self._key(user_id, agent_id, key),
                                "ConditionExpression": "attribute_exists(#k)",
                                "ExpressionAttributeNames": {"#k": "key"}}},
                    self._count(user_id, agent_id, -1),
                ])
                return
            except self.db.exceptions.TransactionCanceledException as exc:
                if _cancelled_by(exc)[:1] == ["ConditionalCheckFailed"]:
                    raise NotFound(f"no value for key {key!r}") from exc
                time.sleep(0.05 * 2 ** attempt)  # the count was held by another write
        raise Unavailable("the user's storage is busy with other writes: try again")

    def list_keys(
        self, user_id: str, agent_id: str, limit: int | None = None, token: str | None = None
    ) -> Page[str]:
        scope = _scope(user_id, agent_id)
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#s = :s",
            "FilterExpression": "#k <> :count",
            "ExpressionAttributeNames": {"#s": "scope", "#k": "key"},
            "ExpressionAttributeValues": {":s": {"S": scope}, ":count": {"S": COUNT_KEY}},
            "ProjectionExpression": "#s, #k",
            "ConsistentRead": True,
            "Limit": clamp_limit(limit, default=1000, maximum=1000),
        }
        start = decode_token(token, {"scope": scope})
        if start:
            kwargs["ExclusiveStartKey"] = start
        out = self.db.query(**kwargs)
        return Page(
            [from_item(i)["key"] for i in out.get("Items", [])],
            encode_token(out.get("LastEvaluatedKey")),
        )
