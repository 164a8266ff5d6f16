"""The local AWS: moto's server in its own process, with our fixes applied there."""

import pytest
from botocore.exceptions import ClientError

from codeshot import aws


def test_failed_transaction_leaves_every_item_as_it_was(server_aws):
    db, table = aws.client("dynamodb", server_aws), server_aws.sessions_table

    def key(item: str) -> dict:
        return {"session_id": {"S": "s1"}, "item": {"S": item}}

    db.put_item(TableName=table, Item={**key("old"), "n": {"N": "1"}})
    with pytest.raises(ClientError) as refused:
        db.transact_write_items(TransactItems=[
            {"Put": {"TableName": table, "Item": {**key("new"), "n": {"N": "1"}}}},
            {"Update": {"TableName": table, "Key": key("old"), "UpdateExpression": "SET n = :n",
                        "ExpressionAttributeValues": {":n": {"N": "2"}}}},
            {"ConditionCheck": {"TableName": table, "Key": key("absent"),
                                "ConditionExpression": "attribute_exists(n)"}},
        ])
    assert [r["Code"] for r in refused.value.response["CancellationReasons"]] == \
        ["None", "None", "ConditionalCheckFailed"]
    assert "Item" not in db.get_item(TableName=table, Key=key("new"))
    assert db.get_item(TableName=table, Key=key("old"))["Item"]["n"] == {"N": "1"}


def test_query_reads_one_partition_in_order_and_pages(server_aws):
    db, table = aws.client("dynamodb", server_aws), server_aws.sessions_table
    for session in ("s1", "s2", "s3"):
        for n in range(5):
            db.put_item(TableName=table, Item={"session_id": {"S": session},
                                                "item": {"S": f"MSG#{n}"}})
    asked = {"TableName": table, "KeyConditionExpression": "session_id = :s",
                 "ExpressionAttributeValues": {":s": {"S": "s2"}}, "ScanIndexForward": False, "Limit": 3}
    first = db.query(**asked)
    rest = db.query(**asked, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert [i["item"]["S"] for i in first["Items"] + rest["Items"]] == \
        [f"MSG#{n}" for n in (4, 3, 2, 1, 0)]
    assert {i["session_id"]["S"] for i in first["Items"] + rest["Items"]} == {"s2"}
    assert db.query(**{**asked, "ExpressionAttributeValues": {":s": {"S": "none"}}})[
        "Items"] == []
