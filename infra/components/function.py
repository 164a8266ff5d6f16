"""A Python Lambda the codeshot way: arm64, X-Ray, its own log group with retention and
its own role, which starts with nothing but writing to that log group.

Every further permission is added by the stack, statement by statement (see
``access.py``), so each function's role reads as the list of what it needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.bundling import LAMBDA_TARGET, Target
from infra.nag import X_RAY_REASON, suppress

LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class PythonFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        code: lambda_.Code,
        handler: str,
        description: str,
        memory_mb: int,
        timeout: Duration,
        environment: Mapping[str, str],
        target: Target = LAMBDA_TARGET,
        reserved_concurrency: int | None = None,
        recursive_loop: lambda_.RecursiveLoop = lambda_.RecursiveLoop.TERMINATE,
    ) -> None:
        super().__init__(scope, id)
        self.environment = dict(environment)  # what the code reads its settings from
        self.log_group = logs.LogGroup(
            self, "Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        self.role = iam.Role(
            self, "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"codeshot {id}: {description}",
        )
        # Instead of AWSLambdaBasicExecutionRole (any log group): only this one.
        self.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[self.log_group.log_group_arn]))
        self.function = lambda_.Function(
            self, "Function",
            runtime=target.runtime,
            architecture=target.architecture,
            code=code,
            handler=handler,
            description=description,
            memory_size=memory_mb,
            timeout=timeout,
            environment=self.environment,
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            tracing=lambda_.Tracing.ACTIVE,
            reserved_concurrent_executions=reserved_concurrency,
            recursive_loop=recursive_loop,
        )
        suppress(self.role, "AwsSolutions-IAM5", X_RAY_REASON, ["Resource::*"])
        suppress(self.function, "AwsSolutions-L1",
                 f"Pinned to Python {LAMBDA_TARGET.python_version}, the CPython ABI the bundles' "
                 "arm64 wheels are built for (infra/bundling.py, one constant to bump); it is in "
                 "Lambda's standard support until 2028.")
