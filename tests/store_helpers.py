"""Direct writes and reads of a session's items that only tests make (to set up a
session as the platform would have left it, or to look at it): the platform itself
writes them in its own transactions (:class:`~codeshot.store.sessions.SessionStore`)."""

from __future__ import annotations

import json
from typing import Any

from codeshot.errors import Conflict, InvalidInput
from codeshot.models import Embed, Message, SessionStatus, stamp, utcnow
from codeshot.store.dynamo import from_item
from codeshot.store.sessions import SESSION_ITEM, STATE_ITEM, SessionStore, _key


def set_status(store: SessionStore, session_id: str, status: SessionStatus,
               expected: SessionStatus | None = None) -> None:
    kwargs: dict[str, Any] = {
        "TableName": store.table_name,
        "Key": _key(session_id, SESSION_ITEM),
        "UpdateExpression": "SET #s = :s, modified = :m",
        "ConditionExpression": "attribute_exists(session_id)",
        "ExpressionAttributeNames": {"#s": "status"},
        "ExpressionAttributeValues": {
            ":s": {"S": status.value},
            ":m": {"S": stamp(utcnow())},
        },
    }
    if expected is not None:
        kwargs["ConditionExpression"] += " AND #s = :e"
        kwargs["ExpressionAttributeValues"][":e"] = {"S": expected.value}
    kwargs["UpdateExpression"], kwargs["ExpressionAttributeValues"] = store.touch(
        kwargs["UpdateExpression"], kwargs["ExpressionAttributeValues"])
    try:
        store.db.update_item(**kwargs)
    except store.db.exceptions.ConditionalCheckFailedException as exc:
        raise Conflict(f"session {session_id} is not {expected or 'present'}") from exc


def _put_new(store: SessionStore, item: dict[str, Any]) -> Exception | None:
    """Write ``item`` unless its key is taken; DynamoDB's refusal when it is."""
    try:
        store.db.put_item(
            TableName=store.table_name,
            Item=item,
            ConditionExpression="attribute_not_exists(#i)",
            ExpressionAttributeNames={"#i": "item"},
        )
    except store.db.exceptions.ConditionalCheckFailedException as exc:
        return exc
    return None


def add_message(store: SessionStore, message: Message) -> Message:
    if (taken := _put_new(store, store.message_item(message))) is not None:
        if store.get_message(message.session_id, message.message_id) == message:
            return message  # our own write, retried after a lost reply
        raise Conflict(f"message {message.message_id} already exists") from taken
    return message


def put_embed(store: SessionStore, embed: Embed) -> Embed:
    """Attach an embed under its key; a key, once used, is never rebound."""
    if (taken := _put_new(store, store.embed_item(embed))) is not None:
        return store._same_embed(embed, taken)
    return embed


def put_state(store: SessionStore, session_id: str, state: dict[str, Any],
              question_id: str | None = None) -> None:
    item = store.state_item(session_id, state, question_id)
    if len(item["state"]["S"].encode()) > 350_000:
        raise InvalidInput("paused program state exceeds 350 kB")
    store.db.put_item(TableName=store.table_name, Item=item)


def get_state(store: SessionStore, session_id: str) -> dict[str, Any] | None:
    item = store.db.get_item(
        TableName=store.table_name, Key=_key(session_id, STATE_ITEM), ConsistentRead=True
    ).get("Item")
    return json.loads(from_item(item)["state"]) if item else None


def delete_state(store: SessionStore, session_id: str) -> None:
    store.db.delete_item(TableName=store.table_name, Key=_key(session_id, STATE_ITEM))


def resent_after_landing(store: SessionStore) -> Any:
    """The store's transactions each written, then sent again and refused for what they
    wrote: a send whose response was lost, resent (for ``monkeypatch.setattr(db,
    "transact_write_items", ...)``)."""
    write = store.db.transact_write_items

    def written_then_resent(**request: Any) -> Any:
        write(**request)
        return write(**request)  # the same request again: its conditions now fail

    return written_then_resent
