"""``transact_write``: whether a transaction may have been written, its own calls only."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError

from codeshot.store import dynamo
from tests.conftest import free_port

ITEMS = [{"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}}]


def test_a_send_that_got_no_answer_may_have_landed_and_other_calls_tokens_are_not_kept():
    """Every TransactWriteItems of a client the hook is on passes it: the tokens of calls
    not made by transact_write were kept for good (a warm process's set grew unbounded)."""
    db = boto3.client("dynamodb", region_name="us-east-1",
                      endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens
                      aws_access_key_id="test", aws_secret_access_key="test",
                      config=Config(retries={"mode": "standard", "max_attempts": 2},
                                    connect_timeout=1))
    unsure: list[bool] = []
    with pytest.raises(EndpointConnectionError):
        dynamo.transact_write(db, ITEMS, unsure)
    assert unsure == [True]
    with pytest.raises(EndpointConnectionError):
        db.transact_write_items(TransactItems=ITEMS)  # another caller, hook still on
    assert not dynamo._UNSURE and not dynamo._SENDING
