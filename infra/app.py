"""The CDK app: the platform stack, one stack per agent directory, cdk-nag on all of them.

Run by the CDK CLI (``cdk.json``: ``.venv/bin/python -m infra.app``) or directly
(``python -m infra.app``), in which case it reads ``cdk.json``'s context itself so both
ways synthesize the same templates (into ``cdk.out``). Neither needs AWS access.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
# jsii names the end-of-life Node majors to keep quiet about (this machine has Node 20).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App, Environment

from codeshot.sdk.project import read_config as read_agent_config
from infra.agent_stack import AgentStack
from infra.config import REPO_ROOT, read_config
from infra.nag import apply_checks
from infra.platform_stack import PlatformStack

# Set by the CDK CLI when it runs the app (it then passes cdk.json's context itself).
CLI_ENV = "CDK_CONTEXT_JSON"


def cdk_json_context() -> dict[str, Any]:
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text()).get("context", {})
    return context


def _environment() -> Environment | None:
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    return Environment(account=account, region=region) if account or region else None


def agent_stack_id(stack_name: str, handle: str) -> str:
    return f"{stack_name}Agent-" + re.sub(r"[^A-Za-z0-9-]", "-", handle)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None,
              nag: bool = True) -> App:
    """The app with its stacks; ``context`` defaults to cdk.json's when not under the CLI."""
    if context is None and CLI_ENV not in os.environ:
        context = cdk_json_context()
    app = App(context=context, outdir=outdir)
    config = read_config(app.node)
    env = _environment()
    platform = PlatformStack(app, config.stack_name, config=config, env=env)
    for agent_dir in config.agent_paths():
        agent_config = read_agent_config(agent_dir)
        AgentStack(
            app, agent_stack_id(config.stack_name, agent_config.handle), config=config,
            agent_dir=agent_dir, agent_config=agent_config, env=env,
            platform_api_url=platform.api_url,
            register_function=platform.register_agent_function,
        )
    if nag:
        apply_checks(app)
    return app


def main() -> None:
    # The CLI tells the app where to write (CDK_OUTDIR); run directly, it writes cdk.out.
    build_app(outdir=None if "CDK_OUTDIR" in os.environ else str(REPO_ROOT / "cdk.out")).synth()


if __name__ == "__main__":
    main()
