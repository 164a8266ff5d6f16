from codeshot import aws as aws_clients
from codeshot.store.provision import create_all
from codeshot.store.tables import EMBEDS_BUCKET, TABLES


def test_every_table_is_created_as_specified(aws):
    db = aws_clients.client("dynamodb", aws)
    for spec in TABLES:
        desc = db.describe_table(TableName=getattr(aws, spec.setting))["Table"]
        keys = {k["KeyType"]: k["AttributeName"] for k in desc["KeySchema"]}
        assert keys.get("HASH") == spec.pk and keys.get("RANGE") == spec.sk
        indexes = {i["IndexName"]: i for i in desc.get("GlobalSecondaryIndexes", [])}
        assert set(indexes) == {i.name for i in spec.indexes}
        ttl = db.describe_time_to_live(TableName=desc["TableName"])["TimeToLiveDescription"]
        assert (ttl.get("AttributeName") if ttl["TimeToLiveStatus"] == "ENABLED" else None) \
            == spec.ttl


def test_bucket_is_private_and_encrypted_and_queue_is_fifo_with_dlq(aws):
    s3 = aws_clients.client("s3", aws)
    block = s3.get_public_access_block(Bucket=aws.embeds_bucket)
    assert all(block["PublicAccessBlockConfiguration"].values())
    rules = s3.get_bucket_encryption(Bucket=aws.embeds_bucket)[
        "ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    sqs = aws_clients.client("sqs", aws)
    attrs = sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["All"])[
        "Attributes"]
    assert attrs["FifoQueue"] == "true" and "dlq.fifo" in attrs["RedrivePolicy"]


def test_the_bucket_keeps_replaced_bytes_and_lets_unbound_uploads_expire(aws):
    s3 = aws_clients.client("s3", aws)
    assert s3.get_bucket_versioning(Bucket=aws.embeds_bucket)["Status"] == "Enabled"
    rules = s3.get_bucket_lifecycle_configuration(Bucket=aws.embeds_bucket)["Rules"]
    assert [(r["Filter"], r["Expiration"]) for r in rules] == [
        ({"Prefix": EMBEDS_BUCKET.uploads_prefix}, {"Days": EMBEDS_BUCKET.uploads_expire_days})]


def test_provisioning_twice_is_harmless(aws):
    again = create_all(aws)
    assert again.queue_url == aws.queue_url
