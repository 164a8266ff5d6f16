"""An S3 Vectors bucket for document corpora (``codeshot:corpusSearch`` = ``s3vectors``):
the runner creates an index per ingestion in it, writes the passages' vectors, queries
them and deletes an index once a newer version is ready (codeshot/runner/corpora.py,
``S3VectorsSearch``); the functions that delete agents delete their indexes."""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3vectors as s3vectors
from cdk_nag import RegexAppliesTo
from constructs import Construct

from infra.nag import suppress

# What S3VectorsSearch calls (QueryVectors with metadata needs GetVectors as well;
# DeleteIndex: a version's index once a newer version is ready).
VECTOR_ACTIONS = ("s3vectors:CreateIndex", "s3vectors:PutVectors", "s3vectors:QueryVectors",
                  "s3vectors:GetVectors", "s3vectors:DeleteIndex")


class CorpusVectors(Construct):
    def __init__(self, scope: Construct, id: str, *, bucket_name: str) -> None:
        super().__init__(scope, id)
        self.bucket_name = bucket_name
        self.bucket = s3vectors.CfnVectorBucket(
            self, "Bucket", vector_bucket_name=bucket_name,
            encryption_configuration=s3vectors.CfnVectorBucket.EncryptionConfigurationProperty(
                sse_type="AES256"))

    def grant_search(self, role: iam.Role) -> None:
        self._grant(role, VECTOR_ACTIONS)

    def grant_index_deletion(self, role: iam.Role) -> None:
        """For a function that deletes agents: their last indexes, which no newer version
        replaces (codeshot/store/corpora.py ``delete_agent``)."""
        self._grant(role, ("s3vectors:DeleteIndex",))

    def _grant(self, role: iam.Role, actions: tuple[str, ...]) -> None:
        bucket_arn = (f"arn:{Aws.PARTITION}:s3vectors:{Aws.REGION}:{Aws.ACCOUNT_ID}:bucket/"
                      f"{self.bucket_name}")
        suppress(role, "AwsSolutions-IAM5",
                 "Each corpus ingestion gets an index of its own, created at run time, so "
                 "access is scoped to this vector bucket's indexes.",
                 [RegexAppliesTo(regex=r"/^Resource::arn:.*:s3vectors:.*\/index\/\*$/g")])
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(actions), resources=[bucket_arn, f"{bucket_arn}/index/*"]))
