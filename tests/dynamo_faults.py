"""DynamoDB refusing a write for a moment, as it does when another transaction holds one
of its items (TransactionConflict), injected into a real (moto) client."""

from __future__ import annotations

from typing import Any


def conflict(db: Any, items: int) -> Exception:
    """The cancellation DynamoDB answers a transaction whose last item another one held."""
    reasons = [{"Code": "None"}] * (items - 1) + [
        {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}]
    return db.exceptions.TransactionCanceledException(
        {"Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
         "CancellationReasons": reasons}, "TransactWriteItems")


def busy(db: Any) -> Exception:
    """What a single-item write gets when a transaction holds its item."""
    return db.exceptions.TransactionConflictException(
        {"Error": {"Code": "TransactionConflictException",
                   "Message": "Transaction is ongoing for the item"}}, "UpdateItem")


def refuse(monkeypatch, db: Any, method: str, matches: str, times: int | None) -> list[int]:
    """Make ``db.<method>`` refuse its calls whose request mentions ``matches``, the first
    ``times`` of them (None: every one), as DynamoDB does under a conflict; the list
    counts the refusals."""
    real, refused = getattr(db, method), []

    def write(**request: Any) -> Any:
        if matches in str(request) and (times is None or len(refused) < times):
            refused.append(1)
            if method == "transact_write_items":
                raise conflict(db, len(request["TransactItems"]))
            raise busy(db)
        return real(**request)

    monkeypatch.setattr(db, method, write)
    return refused
