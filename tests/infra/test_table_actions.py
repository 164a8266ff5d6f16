"""Each table's IAM actions are what its store's code calls, both ways: a call the grant
lacks would be refused in AWS; a grant no code uses is privilege for an attacker only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codeshot.store import tables
from infra.components.access import DYNAMO_READ, DYNAMO_WRITE, table_actions

STORES = Path(__file__).resolve().parents[2] / "codeshot" / "store"
# Calls that are authorised by the actions of the items they hold, not by their own name.
PER_ITEM = {"transact_write_items": (), "transact_get_items": ()}


def called_actions(store: Path) -> set[str]:
    """The DynamoDB actions a store module's own client calls."""
    calls = set(re.findall(r"self\.db\.(\w+)\(", store.read_text()))
    actions = set()
    for call in calls - {"exceptions"}:
        if call in PER_ITEM:
            continue
        actions.add("dynamodb:" + "".join(part.title() for part in call.split("_")))
    return actions


@pytest.mark.parametrize("spec", tables.TABLES, ids=lambda spec: spec.logical)
def test_a_tables_grant_is_what_its_store_calls(spec):
    called = called_actions(STORES / f"{spec.logical}.py")
    granted = set(table_actions(spec, write=True))
    assert called <= granted, f"{spec.logical}: called but not granted: {called - granted}"
    extra = granted - set(DYNAMO_READ + DYNAMO_WRITE)
    assert extra <= called, f"{spec.logical}: granted but never called: {extra - called}"
    assert "dynamodb:ConditionCheckItem" not in granted  # no transaction checks an item
