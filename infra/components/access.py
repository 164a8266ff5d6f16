"""Least-privilege IAM statements, spelled out action by action.

The CDK ``grant*`` helpers add more than codeshot uses (DescribeTable, Abort*, tagging,
legal hold ...). Explicit lists keep each role to what the code calls, and make the
tests' "runner cannot write the registry" checks meaningful.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from aws_cdk import Aws
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from cdk_nag import RegexAppliesTo

from codeshot.llm.bedrock import INFERENCE_PROFILE_PREFIXES
from codeshot.store.tables import Table
from infra.nag import suppress

# DynamoDB actions, for each role's per-table lists (platform_stack.py): what that role's
# code calls on that table, which tests/infra/test_function_actions.py reads from the
# code and checks both ways. Transactions are authorised by their items' actions.
GET, QUERY, SCAN, BATCH_GET = ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan",
                               "dynamodb:BatchGetItem")
PUT, UPDATE, DELETE, BATCH_WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem",
                                    "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")
CONDITION_CHECK = "dynamodb:ConditionCheckItem"  # a transaction's check of another item
SQS_SEND = ("sqs:SendMessage",)
# Converse and InvokeModel are both authorised by bedrock:InvokeModel.
BEDROCK_INVOKE = ("bedrock:InvokeModel",)


def table_access(role: iam.Role, table: dynamodb.ITable, spec: Table,
                 actions: Collection[str]) -> None:
    """These actions on one table; a Query on its indexes too, if it has any."""
    resources = [table.table_arn]
    if spec.indexes and QUERY in actions:
        resources.append(f"{table.table_arn}/index/*")
        suppress(role, "AwsSolutions-IAM5",
                 "Querying a GSI needs the index ARN; '/index/*' covers only this table's "
                 "indexes, all defined in codeshot/store/tables.py.",
                 [RegexAppliesTo(regex=r"/^Resource::<.*\.Arn>\/index\/\*$/g")])
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(actions), resources=resources))


def index_sweep(role: iam.Role, table: dynamodb.ITable, index: str) -> None:
    """Find items through one index and delete them, key by key: Query on that index
    only, DeleteItem on the table, and no action that reads an item whole or writes one
    (BatchWriteItem would also put)."""
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=[QUERY], resources=[f"{table.table_arn}/index/{index}"]))
    role.add_to_principal_policy(iam.PolicyStatement(actions=[DELETE], resources=[table.table_arn]))


def key_query(role: iam.Role, table: dynamodb.ITable, spec: Table, action: str = QUERY) -> None:
    """Query (or ``action``, Scan) the table for its items' keys alone (one naming any
    other attribute, or none, is refused): a role that deletes items it finds, or asks
    whether there are any, need not read them."""
    keys = [spec.pk] + ([spec.sk] if spec.sk else [])
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=[action], resources=[table.table_arn],
        conditions={"StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
                    "ForAllValues:StringEquals": {"dynamodb:Attributes": keys}}))


def limited_update(role: iam.Role, table: dynamodb.ITable, *, key: str | None = None,
                   attributes: Collection[str] = (), action: str = UPDATE) -> None:
    """UpdateItem (or ``action``: PutItem, GetItem) of the one item whose partition key is ``key``,
    or naming no other attributes than ``attributes`` (with the table's key)."""
    name, values = ("dynamodb:LeadingKeys", [key]) if key is not None else \
        ("dynamodb:Attributes", list(attributes))
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=[action], resources=[table.table_arn],
        conditions={"ForAllValues:StringEquals": {name: values}}))


def object_access(role: iam.Role, bucket: s3.IBucket, prefix: str, *, put: bool,
                  delete: bool = False, missing_as_404: bool = True) -> None:
    """GetObject (GET and HEAD), optionally PutObject and DeleteObject, under ``prefix``.

    DeleteObject is for replacing other bytes found under a content name: the bucket
    refuses unconditional puts, so it is delete, then put with If-None-Match (embeds.py).

    ListBucket on that prefix (``missing_as_404``) tells a missing key from a refused one:
    S3 answers 404 to a caller that may list the bucket, and the embed store lists the key
    when it is answered 403 (AWS does not say whether a prefix-limited grant counts). Both
    are NOT_FOUND to users; a function that only reads objects it knows exist does without.
    """
    actions = ["s3:GetObject"] + (["s3:PutObject"] if put else []) + \
        (["s3:DeleteObject"] if delete else [])
    suppress(role, "AwsSolutions-IAM5",
             f"Embeds are content-addressed ({prefix}<sha256>): keys are unknown until "
             f"written, so access is scoped to the '{prefix}' prefix, not to single objects.",
             [RegexAppliesTo(regex=rf"/^Resource::<.*\.Arn>\/{prefix.rstrip('/')}\/\*$/g")])
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=actions, resources=[bucket.arn_for_objects(prefix + "*")]))
    if missing_as_404:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix + "*"]}}))


def object_delete(role: iam.Role, bucket: s3.IBucket, prefix: str, *,
                  listed: bool = False, markers: bool = False) -> None:
    """DeleteObject under ``prefix`` only (a deleted agent's corpus indexes: their keys are
    read from their versions' items, so no read or list is needed); with ``listed``,
    ListBucket of that prefix too (a deleted user's uploads, found by listing); with
    ``markers``, DeleteObjectVersion and ListBucketVersions of that prefix too (a delete
    undone: the delete markers above the bytes' newest version, found by listing its
    versions, removed)."""
    listings = (["s3:ListBucket"] if listed else []) + \
        (["s3:ListBucketVersions"] if markers else [])
    if listings:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=listings, resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix + "*"]}}))
    suppress(role, "AwsSolutions-IAM5",
             f"Objects under '{prefix}' are named by their content, unknown until written: "
             "deletion is scoped to the prefix, not to single objects.",
             [RegexAppliesTo(regex=rf"/^Resource::<.*\.Arn>\/{prefix.rstrip('/')}\/\*$/g")])
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:DeleteObject"] + (["s3:DeleteObjectVersion"] if markers else []),
        resources=[bucket.arn_for_objects(prefix + "*")]))


def send_messages(role: iam.IRole, queue: sqs.IQueue) -> None:
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=list(SQS_SEND), resources=[queue.queue_arn]))


# Where a geography's inference profile may be called from (AWS region name prefixes).
PROFILE_REGIONS = {"us.": ("us-east-", "us-west-"), "us-gov.": ("us-gov-",), "eu.": ("eu-",),
                   "apac.": ("ap-", "me-"), "jp.": ("ap-northeast-1", "ap-northeast-3"),
                   "au.": ("ap-southeast-2", "ap-southeast-4"), "ca.": ("ca-",)}
KNOWN_REGIONS = tuple(r for regions in PROFILE_REGIONS.values() for r in regions)


def check_profile_region(model_id: str, region: str, setting: str) -> None:
    """Refuse at synth a geography's inference profile called from a region of another
    (Bedrock would refuse every call): ``us.`` models from ``eu-west-1``, say. A region
    this table does not place (a new one) is not judged."""
    if not region.startswith(KNOWN_REGIONS):
        return
    for prefix, regions in PROFILE_REGIONS.items():
        if model_id.startswith(prefix) and not region.startswith(regions):
            raise ValueError(
                f"{setting} {model_id} is an inference profile for other regions than "
                f"{region}, where the stack deploys: use its profile for {region}'s "
                f"geography or its global. profile (Bedrock, Cross-Region inference)")


def model_arns(model_id: str) -> list[str]:
    """Foundation model ARN, or for an inference profile its ARN plus the models it routes
    to in any region (Bedrock checks both)."""
    if model_id.startswith(INFERENCE_PROFILE_PREFIXES):
        base = model_id.split(".", 1)[1]
        profile = (f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}:{Aws.ACCOUNT_ID}:"
                   f"inference-profile/{model_id}")
        return [profile, f"arn:{Aws.PARTITION}:bedrock:*::foundation-model/{base}"]
    return [f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}::foundation-model/{model_id}"]


def invoke_models(role: iam.IRole, model_ids: list[str]) -> None:
    for model_id in model_ids:
        if model_id.startswith(INFERENCE_PROFILE_PREFIXES):
            model = model_id.split(".", 1)[1]
            suppress(role, "AwsSolutions-IAM5",
                     f"The inference profile {model_id} routes each call to {model} in one "
                     "of its regions, chosen per call, and Bedrock authorizes that region's "
                     "model too (Bedrock user guide: cross-Region inference, IAM).",
                     [RegexAppliesTo(regex=rf"/^Resource::arn:<AWS::Partition>:bedrock:\*::"
                                           rf"foundation-model\/{re.escape(model)}$/g")])
    if model_ids:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(BEDROCK_INVOKE),
            resources=[a for m in dict.fromkeys(model_ids) for a in model_arns(m)]))


# Secrets agents' owners give (codeshot/store/agent_secrets.py): the API creates and
# deletes them with the agent (and reads one to read an MCP server's tools again), the
# runner reads them to call the agent.
AGENT_SECRETS_READ = ("secretsmanager:GetSecretValue",)
AGENT_SECRETS_DELETE = ("secretsmanager:DeleteSecret",)
AGENT_SECRETS_MANAGE = ("secretsmanager:CreateSecret", *AGENT_SECRETS_DELETE)


def agent_secrets(role: iam.Role, prefix: str, *, manage: bool = False,
                  actions: tuple[str, ...] | None = None) -> None:
    """``actions`` on the agent secrets under ``prefix``: by default reading them (and
    with ``manage``, creating and deleting them)."""
    if actions is None:
        actions = AGENT_SECRETS_READ + (AGENT_SECRETS_MANAGE if manage else ())
    suppress(role, "AwsSolutions-IAM5",
             f"Each agent secret is created at run time under '{prefix}' with a name of its "
             "own (codeshot/store/agent_secrets.py): access is scoped to that prefix.",
             [RegexAppliesTo(regex=r"/^Resource::arn:.*:secret:.*\*$/g")])
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(actions), resources=[
        f"arn:{Aws.PARTITION}:secretsmanager:{Aws.REGION}:{Aws.ACCOUNT_ID}:secret:{prefix}*"]))
