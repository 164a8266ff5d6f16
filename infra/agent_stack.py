"""One stack per deployed agent directory, so agents deploy, update and go away on their
own (``cdk deploy CodeshotAgent-notes``) while sharing the platform stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from codeshot.sdk.project import AgentConfig
from infra.components.agent_function import AgentFunction
from infra.config import InfraConfig


class AgentStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: InfraConfig,
        agent_dir: Path,
        agent_config: AgentConfig,
        platform_api_url: str,
        register_function: lambda_.IFunction,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, description=f"codeshot agent {agent_config.handle}",
                         **kwargs)
        self.agent = AgentFunction(
            self, "Agent",
            agent_dir=agent_dir,
            agent_config=agent_config,
            owner=config.admin_username,
            platform_api_url=platform_api_url,
            register_function=register_function,
            published=config.publish_agents,
            rate_limit=config.api_rate_limit,
            burst_limit=config.api_burst_limit,
            target=config.target,
        )
