"""Sessions expire (CODESHOT_SESSION_TTL_DAYS): every item a query writes to its session's
partition (the session, the query, the steps, the reply, the answer marker, a paused
program) carries the table's TTL attribute, and the table expires items by it."""

from __future__ import annotations

import time

import pytest

from codeshot import aws
from codeshot.store.tables import EXPIRES_AT
from tests.runner.conftest import register, send, session

DAY = 86400


def partition(platform, session_id: str) -> dict[str, dict]:
    db = aws.client("dynamodb", platform.services.settings)
    out = db.query(TableName=platform.services.sessions.table_name,
                   KeyConditionExpression="session_id = :s",
                   ExpressionAttributeValues={":s": {"S": session_id}}, ConsistentRead=True)
    return {item["item"]["S"]: item for item in out["Items"]}


def ask(platform, agents, name: str) -> tuple[dict[str, dict], str]:
    """A Func-calling query and a query left waiting for the user, in two sessions."""
    _, key = platform.user(name)
    register(platform, key, "dice", agents.url + "/dice")
    booking = register(platform, key, "booking", agents.url + "/booking")
    rolled = session(platform, key)
    assert send(platform, key, rolled, "Roll 2d6")["reply"]["type"] == "response"
    paused = session(platform, key, frontend=booking)
    assert send(platform, key, paused, "Book a table at Mario's")["reply"]["type"] == \
        "awaiting_input"
    return partition(platform, rolled) | partition(platform, paused), rolled


def test_every_item_of_a_session_expires_ttl_days_after_it_was_written(live, agents):
    db = aws.client("dynamodb", live.services.settings)
    described = db.describe_time_to_live(TableName=live.services.sessions.table_name)
    assert described["TimeToLiveDescription"] == {
        "TimeToLiveStatus": "ENABLED", "AttributeName": EXPIRES_AT}
    before = int(time.time())
    items, _ = ask(live, agents, "tina")
    kinds = {name.split("#")[0] for name in items}
    assert kinds == {"SESSION", "MSG", "ANSWER", "STATE"}
    days = live.services.settings.session_ttl_days
    assert days == 90
    for name, item in items.items():
        expires = int(item[EXPIRES_AT]["N"])
        assert before + days * DAY <= expires <= int(time.time()) + days * DAY, name


@pytest.mark.settings(session_ttl_days=0)
def test_a_ttl_of_zero_keeps_sessions(live, agents):
    items, _ = ask(live, agents, "tom")
    assert len(items) > 5
    assert not [name for name, item in items.items() if EXPIRES_AT in item]
