"""Counting what DynamoDB sends back for one session's partition, through botocore's own
event hooks on the platform's (moto) client: how much a request reads, as a user of a
long session would feel it."""

from __future__ import annotations

from typing import Any


class PartitionReads:
    """(operation, keys only, items sent back, items read) per call that read
    ``session_id``'s partition (or, given a user id, the owner index's of their
    sessions): a Query reads (and is billed for) every item its key range
    and Limit cover, those its filter drops and keys-only ones included (ScannedCount)."""

    def __init__(self, db: Any, session_id: str) -> None:
        self.db, self.session_id = db, session_id
        self.calls: list[tuple[str, bool, int, int]] = []

    def _mine(self, params: dict[str, Any]) -> bool:
        partition = {"S": self.session_id}
        values = params.get("ExpressionAttributeValues", {})
        batch = [key.get("session_id") for request in params.get("RequestItems", {}).values()
                 for key in request.get("Keys", [])]
        return partition in (params.get("Key", {}).get("session_id"), values.get(":s"),
                             values.get(":owner"), *batch)

    def _params(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["partition_read"] = (self._mine(params), "ProjectionExpression" in params)

    def _parsed(self, parsed: dict[str, Any], model: Any, context: dict[str, Any],
                **_: Any) -> None:
        mine, keys_only = context.get("partition_read", (False, False))
        if mine:
            batch = sum(len(found) for found in parsed.get("Responses", {}).values()) \
                if model.name == "BatchGetItem" else None
            items = parsed.get("Count", 1 if parsed.get("Item") else 0) if batch is None \
                else batch
            self.calls.append((model.name, keys_only, items, parsed.get("ScannedCount", items)))

    def __enter__(self) -> PartitionReads:
        self.db.meta.events.register("provide-client-params.dynamodb", self._params)
        self.db.meta.events.register("after-call.dynamodb", self._parsed)
        return self

    def __exit__(self, *_: Any) -> None:
        self.db.meta.events.unregister("provide-client-params.dynamodb", self._params)
        self.db.meta.events.unregister("after-call.dynamodb", self._parsed)

    def items(self) -> int:
        """Whole items (messages, embeds) sent back, keys-only reads left out."""
        return sum(n for _, keys_only, n, _ in self.calls if not keys_only)

    def read(self) -> int:
        """Items DynamoDB read, whatever came back of them."""
        return sum(n for *_, n in self.calls)
