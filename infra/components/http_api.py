"""An HTTP API (API Gateway v2) whose ``$default`` route proxies everything to one Lambda,
with a throttled, access-logged ``$default`` stage.

The API is created before its integration, so a function may receive the API's own URL
in its environment (the platform's ``CODESHOT_API_URL``) without a dependency cycle.
"""

from __future__ import annotations

import json

import jsii
from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.components.function import LOG_RETENTION
from infra.nag import suppress

ACCESS_LOG_FORMAT = json.dumps({
    "requestId": "$context.requestId", "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime", "method": "$context.httpMethod",
    "path": "$context.path", "routeKey": "$context.routeKey", "status": "$context.status",
    "protocol": "$context.protocol", "responseLength": "$context.responseLength",
    "integrationLatency": "$context.integrationLatency",
    "integrationError": "$context.integrationErrorMessage",
})


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    def __init__(self, group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(group)

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(ACCESS_LOG_FORMAT)


class LambdaHttpApi(Construct):
    def __init__(
        self, scope: Construct, id: str, *, description: str, rate_limit: int, burst_limit: int
    ) -> None:
        super().__init__(scope, id)
        self.api = apigwv2.HttpApi(
            self, "HttpApi", description=description, create_default_stage=False)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        self.stage = apigwv2.HttpStage(
            self, "DefaultStage",
            http_api=self.api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            access_log_settings=_AccessLogs(self.access_logs),
        )

    @property
    def url(self) -> str:
        """``https://{id}.execute-api.{region}.amazonaws.com`` (no trailing slash)."""
        return self.api.api_endpoint

    def route_to(self, function: lambda_.IFunction) -> None:
        """The ``$default`` route (every method and path, ``/`` included) to ``function``."""
        self.default_route = apigwv2.HttpRoute(
            self, "DefaultRoute",
            http_api=self.api,
            route_key=apigwv2.HttpRouteKey.DEFAULT,
            integration=integrations.HttpLambdaIntegration("Lambda", function),
        )
        suppress(self.default_route, "AwsSolutions-APIG4",
                 "No API Gateway authorizer on purpose: the platform authenticates each "
                 "request itself (API keys and EdDSA JWTs, codeshot/auth) and agents verify "
                 "the platform's signed JWTs (codeshot/sdk/auth.py); public endpoints such "
                 "as the JWKS must stay reachable without credentials.")
