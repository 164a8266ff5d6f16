"""Usage counters: one atomic, conditional increment per charge, expiring by TTL.

A counter lives at "<kind>#<subject>#<window start>"; the conditional update is the whole
check-and-charge, so concurrent callers can never push a counter past its limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from codeshot.errors import RateLimited
from codeshot.models import Clock, utcnow
from codeshot.settings import Settings
from codeshot.store.base import Repository
from codeshot.store.tables import USAGE

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import UpdateTypeDef

WINDOWS = {"day": timedelta(days=1), "minute": timedelta(minutes=1)}


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
        self, kind: str, subject: str, limit: int, window: str = "day", now: datetime | None = None
    ) -> UpdateTypeDef:
        """The UpdateItem request that charges one unit, for use alone or in a transaction."""
        counter, span = self._counter(kind, subject, window, now)
        return {
            "TableName": self.table_name,
            "Key": {"counter": {"S": counter}},
            "UpdateExpression": "ADD used :one SET expires_at = :exp",
            "ConditionExpression": "attribute_not_exists(used) OR used < :limit",
            "ExpressionAttributeValues": {
                ":one": {"N": "1"},
                ":limit": {"N": str(limit)},
                # Kept a day past the window so "used today" stays readable near midnight.
                ":exp": {"N": str(int((span.end + timedelta(days=1)).timestamp()))},
            },
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
        self, kind: str, subject: str, limit: int, window: str = "day", now: datetime | None = None
    ) -> int:
        """Charge one unit; returns the new count or raises RATE_LIMITED (nothing charged)."""
        request = self.charge_request(kind, subject, limit, window, now)
        try:
            out = self.db.update_item(**request, ReturnValues="UPDATED_NEW")
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise self.rate_limited(kind, limit, window, now) from exc
        return int(out["Attributes"]["used"]["N"])

    def used(
        self, kind: str, subject: str, window: str = "day", now: datetime | None = None
    ) -> int:
        counter, _ = self._counter(kind, subject, window, now)
        item = self.db.get_item(
            TableName=self.table_name, Key={"counter": {"S": counter}}, ConsistentRead=True
        ).get("Item")
        return int(item["used"]["N"]) if item else 0
