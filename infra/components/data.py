"""The platform's state: DynamoDB tables, the embeds bucket and the session queue, all
generated from ``codeshot/store/tables.py`` (the one definition the local stack uses too).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from codeshot.store import tables
from infra.components import access

_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER,
          "B": dynamodb.AttributeType.BINARY}

DLQ_RETENTION = Duration.days(14)  # the maximum: time to look at what failed


def _attribute(spec: tables.Table, name: str | None) -> dynamodb.Attribute | None:
    if name is None:
        return None
    return dynamodb.Attribute(name=name, type=_TYPES[spec.key_attributes()[name]])


def removal_policy(retain: bool) -> RemovalPolicy:
    return RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY


class PlatformTables(Construct):
    """One table per ``tables.TABLES`` entry: on demand, PITR, AWS-managed KMS encryption,
    retained on stack deletion unless ``retain`` is false (they hold users' data), and
    protected from deletion unless ``deletion_protection`` is false."""

    def __init__(self, scope: Construct, id: str, *, retain: bool,
                 deletion_protection: bool) -> None:
        super().__init__(scope, id)
        self.tables: dict[str, dynamodb.Table] = {}
        for spec in tables.TABLES:
            table = dynamodb.Table(
                self, spec.logical.replace("_", " ").title().replace(" ", ""),
                partition_key=_attribute(spec, spec.pk),
                sort_key=_attribute(spec, spec.sk),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True),
                encryption=dynamodb.TableEncryption.AWS_MANAGED,
                time_to_live_attribute=spec.ttl,
                deletion_protection=deletion_protection,
                removal_policy=removal_policy(retain),
            )
            for index in spec.indexes:
                table.add_global_secondary_index(
                    index_name=index.name,
                    partition_key=_attribute(spec, index.pk),
                    sort_key=_attribute(spec, index.sk),
                    projection_type=dynamodb.ProjectionType[index.projection],
                    non_key_attributes=list(index.include) or None,
                )
            self.tables[spec.setting] = table

    def by_spec(self, spec: tables.Table) -> dynamodb.Table:
        return self.tables[spec.setting]

    def grant(self, role: iam.Role, actions: dict[str, tuple[str, ...]]) -> None:
        """Each table's actions (by its logical name) to ``role``, as access.table_access
        spells them."""
        for spec in tables.TABLES:
            if spec.logical in actions:
                access.table_access(role, self.by_spec(spec), spec, actions[spec.logical])


class EmbedsBucket(Construct):
    """Content-addressed embeds: private, TLS only, encrypted, versioned (an object can
    never be silently replaced or lost), with its own access-log bucket. Both are retained
    on stack deletion unless ``retain`` is false; then CDK's auto-delete custom resource
    empties them first, so `cdk destroy` can delete them."""

    def __init__(self, scope: Construct, id: str, *, retain: bool) -> None:
        super().__init__(scope, id)
        self.access_logs = s3.Bucket(
            self, "AccessLogs",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,  # log delivery cannot use SSE-KMS
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            removal_policy=removal_policy(retain),
            auto_delete_objects=not retain,
        )
        self.bucket = s3.Bucket(
            self, "Bucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # SSE-S3: presigned GET/PUT URLs work without granting KMS to their users.
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="embeds/",
            # Writes use If-None-Match, so old versions appear only when other bytes found
            # under a content name are replaced (embeds.py): kept a month for a look.
            lifecycle_rules=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(1)),
                # Users' uploads are copied to embeds/ when a message binds them; the
                # upload itself is only needed until then.
                s3.LifecycleRule(
                    prefix=tables.EMBEDS_BUCKET.uploads_prefix,
                    expiration=Duration.days(tables.EMBEDS_BUCKET.uploads_expire_days),
                    noncurrent_version_expiration=Duration.days(1)),
            ],
            removal_policy=removal_policy(retain),
            auto_delete_objects=not retain,
        )
        # Objects are never overwritten: a PutObject (or CompleteMultipartUpload) without
        # If-None-Match is refused, whoever sends it. The parts of a multipart upload cannot
        # carry the header, so only the operations that create an object are held to it.
        self.bucket.add_to_resource_policy(iam.PolicyStatement(
            sid="DenyOverwrites", effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()], actions=["s3:PutObject"],
            resources=[self.bucket.arn_for_objects("*")],
            conditions={"Null": {"s3:if-none-match": "true"},
                        "Bool": {"s3:ObjectCreationOperation": "true"}}))
        self.prefix = tables.EMBEDS_BUCKET.prefix
        self.uploads_prefix = tables.EMBEDS_BUCKET.uploads_prefix


class SessionQueue(Construct):
    """A queue and its dead-letter queue from ``spec``: by default the FIFO session queue
    (``tables.SESSION_QUEUE``), high-throughput FIFO (deduplication and throughput per
    message group = session, as message ids are ULIDs and sessions are independent); or a
    standard one such as ``tables.PROMPT_QUEUE`` (per-message delays).
    """

    def __init__(self, scope: Construct, id: str,
                 spec: tables.Queue = tables.SESSION_QUEUE) -> None:
        super().__init__(scope, id)
        self.spec = spec
        fifo: dict[str, Any] = {"fifo": True} if spec.fifo else {}
        self.dlq = sqs.Queue(
            self, "DeadLetterQueue",
            **fifo,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DLQ_RETENTION,
        )
        if spec.fifo:
            fifo.update(deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
                        fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID)
        self.queue = sqs.Queue(
            self, "Queue",
            **fifo,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(spec.visibility_timeout_seconds),
            retention_period=Duration.seconds(spec.retention_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dlq, max_receive_count=spec.max_receive_count),
        )
