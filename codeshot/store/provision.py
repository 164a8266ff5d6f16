"""Create every resource of ``tables.py`` against an AWS endpoint (moto, locally).

In AWS, CDK creates these from the same specs; this is for the local stack and tests.
Creating is idempotent: resources that exist are left as they are.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from typing import Any

from codeshot import aws
from codeshot.settings import Settings
from codeshot.store.tables import (
    EMBEDS_BUCKET,
    ERASURE_QUEUE,
    OAUTH_KEY_SECRET,
    PROMPT_QUEUE,
    REPLIES_HELD_MARK,
    SESSION_QUEUE,
    SESSIONS,
    SIGNING_SECRET,
    TABLES,
    Queue,
    SeedSecret,
)


def create_tables(settings: Settings, dynamodb: Any | None = None) -> list[str]:
    db = dynamodb or aws.client("dynamodb", settings)
    existing = set(db.list_tables().get("TableNames", []))
    names = []
    for table in TABLES:
        name = getattr(settings, table.setting)
        names.append(name)
        if name in existing:
            continue
        db.create_table(**table.create_table_kwargs(name))
        if table is SESSIONS:  # made with HELD# items: no reply of before them to backfill
            db.put_item(TableName=name, Item=REPLIES_HELD_MARK)
        if table.ttl:
            db.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl},
            )
    return names


def create_bucket(settings: Settings, s3: Any | None = None) -> str:
    s3 = s3 or aws.client("s3", settings)
    name: str = getattr(settings, EMBEDS_BUCKET.setting)
    kwargs: dict[str, Any] = {"Bucket": name}
    if settings.region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": settings.region}
    try:
        s3.create_bucket(**kwargs)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        return name
    s3.put_public_access_block(
        Bucket=name,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_encryption(
        Bucket=name,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    # As in AWS: a replaced object stays as a noncurrent version; unbound uploads expire.
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": [{
        "ID": "unbound-uploads", "Status": "Enabled",
        "Filter": {"Prefix": EMBEDS_BUCKET.uploads_prefix},
        "Expiration": {"Days": EMBEDS_BUCKET.uploads_expire_days}}]})
    return name


def create_queue(settings: Settings, sqs: Any | None = None, spec: Queue = SESSION_QUEUE
                 ) -> str:
    sqs = sqs or aws.client("sqs", settings)
    name: str = getattr(settings, spec.setting)
    fifo: dict[Any, str] = {"FifoQueue": "true"} if spec.fifo else {}
    dlq_url = sqs.create_queue(
        QueueName=spec.dlq_name(name),
        Attributes={**fifo, "MessageRetentionPeriod": str(14 * 24 * 3600)},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    return sqs.create_queue(
        QueueName=name,
        Attributes={
            **fifo,
            "VisibilityTimeout": str(spec.visibility_timeout_seconds),
            "MessageRetentionPeriod": str(spec.retention_seconds),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": spec.max_receive_count}
            ),
        },
    )["QueueUrl"]


def create_seed_secret(settings: Settings, spec: SeedSecret,
                       secretsmanager: Any | None = None) -> str:
    """A seed secret (signing keys, OAuth token key) with a fresh random seed, as
    CloudFormation makes it; one that exists is kept."""
    client = secretsmanager or aws.client("secretsmanager", settings)
    name = str(getattr(settings, spec.setting))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    seed = "".join(secrets.choice(alphabet) for _ in range(spec.seed_length))
    with contextlib.suppress(client.exceptions.ResourceExistsException):
        client.create_secret(Name=name, Description=spec.description,
                             SecretString=json.dumps({spec.seed_key: seed}))
    return name


def create_user_pool(settings: Settings) -> Settings:
    """A user pool and the console's app client as the CDK app makes them (sign-up by
    email, the same password policy); returns settings naming them."""
    from codeshot.auth.cognito import POOL

    cognito = aws.client("cognito-idp", settings)  # type: ignore[call-overload]  # no stubs
    pool = cognito.create_user_pool(
        PoolName="codeshot-users", UsernameAttributes=["email"],
        AutoVerifiedAttributes=["email"], MfaConfiguration="OPTIONAL",
        Policies={"PasswordPolicy": POOL.password_policy()})["UserPool"]
    client = cognito.create_user_pool_client(
        UserPoolId=pool["Id"], ClientName=POOL.console_client, GenerateSecret=False,
        ExplicitAuthFlows=list(POOL.auth_flows))["UserPoolClient"]
    return settings.replace(user_pool_id=pool["Id"], user_pool_client_id=client["ClientId"])


def create_all(settings: Settings) -> Settings:
    """Create tables, bucket, queues and seed secrets; returns settings with the queues'
    URLs filled in."""
    create_tables(settings)
    create_bucket(settings)
    for spec in (SIGNING_SECRET, OAUTH_KEY_SECRET):
        create_seed_secret(settings, spec)
    return settings.replace(queue_url=create_queue(settings),
                            prompt_queue_url=create_queue(settings, spec=PROMPT_QUEUE),
                            erasure_queue_url=create_queue(settings, spec=ERASURE_QUEUE))
