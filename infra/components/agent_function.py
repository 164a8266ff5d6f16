"""One agent directory -> one Lambda behind its own HTTP API, registered with the platform.

The registration is a custom resource served by the platform's RegisterAgent Lambda: on
create and update it registers (or updates and refreshes) the agent under the admin
user, on delete it unregisters it. Its properties include the bundle hash, so changing
the agent's code re-reads its handshake on the next deploy.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnOutput, CustomResource, Duration
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from codeshot.models import Agent
from codeshot.sdk.project import AgentConfig
from infra.bundling import AGENT_ENTRY_MODULE, LAMBDA_TARGET, Target, agent_bundle, lambda_code
from infra.components.function import PythonFunction
from infra.components.http_api import LambdaHttpApi
from infra.settings_env import settings_env

RESOURCE_TYPE = "Custom::CodeshotAgentRegistration"
# The platform calls Funcs with a 30 s timeout and HTTP APIs stop at 30 s: answer first.
AGENT_TIMEOUT = Duration.seconds(29)
AGENT_MEMORY_MB = 512

# How long CloudFormation waits for the registration function's answer (its default is an
# hour): longer than that function's own timeout (infra/platform_stack.py asserts it).
REGISTRATION_SERVICE_TIMEOUT = Duration.minutes(3)

class AgentFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        agent_dir: Path,
        agent_config: AgentConfig,
        owner: str,
        platform_api_url: str,
        register_function: lambda_.IFunction,
        published: bool,
        rate_limit: int,
        burst_limit: int,
        target: Target = LAMBDA_TARGET,
    ) -> None:
        super().__init__(scope, id)
        self.agent_id = Agent.make_id(owner, agent_config.handle)
        spec = agent_bundle(agent_dir, agent_config.entry_point, target)
        self.http = LambdaHttpApi(
            self, "Api", description=f"codeshot agent {self.agent_id}",
            rate_limit=rate_limit, burst_limit=burst_limit)
        self.lambda_ = PythonFunction(
            self, "AgentFunction", code=lambda_code(spec, agent_dir),
            handler=f"{AGENT_ENTRY_MODULE}.handler",
            description=f"codeshot agent {self.agent_id}",
            memory_mb=AGENT_MEMORY_MB, timeout=AGENT_TIMEOUT, target=target,
            # Tokens are verified against the platform's JWKS and must be for this agent.
            environment=settings_env(api_url=platform_api_url, agent_id=self.agent_id),
        )
        self.http.route_to(self.lambda_.function)
        self.registration = CustomResource(
            self, "Registration",
            service_token=register_function.function_arn,
            resource_type=RESOURCE_TYPE,
            service_timeout=REGISTRATION_SERVICE_TIMEOUT,
            properties={
                "Owner": owner,
                "Handle": agent_config.handle,
                "Name": agent_config.name or agent_config.handle,
                "Description": agent_config.description,
                "SampleQueries": agent_config.sample_queries,
                "Url": self.http.url,
                "Published": "true" if published else "false",
                "CodeHash": spec.hash,
            },
        )
        # Register only once the stage (and so the URL) serves the function.
        self.registration.node.add_dependency(self.http.stage, self.http.default_route)
        CfnOutput(self, "Url", value=self.http.url, description=f"agent {self.agent_id}")
        CfnOutput(self, "AgentId", value=self.agent_id)
