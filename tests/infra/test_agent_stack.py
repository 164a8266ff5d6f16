"""Agent stacks: one Lambda + HTTP API per agent directory, registered with the platform by
a custom resource that the platform's RegisterAgent Lambda serves."""

from __future__ import annotations

import shutil

import pytest
import yaml

from codeshot.sdk.project import read_config
from infra.app import agent_stack_id
from infra.bundling import AGENT_ENTRY_MODULE, agent_bundle
from infra.config import REPO_ROOT
from tests.infra.cfn import refs
from tests.infra.conftest import synthesize

AGENT_HANDLER = f"{AGENT_ENTRY_MODULE}.handler"


def platform_output(synth, stack_output: dict) -> dict:
    """The platform value an agent stack reads (weak cross-stack reference)."""
    ref = stack_output["Fn::GetStackOutput"]
    assert ref["StackName"] == "Codeshot"
    return synth.platform.data["Outputs"][ref["OutputName"]]["Value"]


def test_registration_custom_resource(synth):
    (_, resource), = synth.agent.of_type("Custom::CodeshotAgentRegistration").items()
    props = resource["Properties"]
    register_fn = synth.platform.function("handlers.register_agent.handler")[0]
    assert platform_output(synth, props["ServiceToken"]) == {"Fn::GetAtt": [register_fn, "Arn"]}
    config = read_config(REPO_ROOT / "agent_template")
    assert props["Owner"] == "admin"
    assert props["Handle"] == config.handle
    assert props["SampleQueries"] == config.sample_queries
    (api_id,) = synth.agent.of_type("AWS::ApiGatewayV2::Api")
    assert props["Url"] == {"Fn::GetAtt": [api_id, "ApiEndpoint"]}
    # A registration that hangs fails the deploy in minutes, not CloudFormation's hour.
    assert props["ServiceTimeout"] == "180"
    # A code change re-reads the handshake: the bundle hash is a property.
    assert props["CodeHash"] == agent_bundle(REPO_ROOT / "agent_template", "agent:agent").hash
    # Registered only after the route and stage serve the function.
    depends = set(resource["DependsOn"])
    assert set(synth.agent.of_type("AWS::ApiGatewayV2::Stage")) <= depends
    assert set(synth.agent.of_type("AWS::ApiGatewayV2::Route")) <= depends


def test_agent_function(synth):
    logical_id, props = synth.agent.function(AGENT_HANDLER)
    env = props["Environment"]["Variables"]
    assert env["CODESHOT_AGENT_ID"] == "admin/notes"
    (platform_api,) = synth.platform.of_type("AWS::ApiGatewayV2::Api")
    assert platform_output(synth, env["CODESHOT_API_URL"]) == {
        "Fn::GetAtt": [platform_api, "ApiEndpoint"]}
    assert props["Architectures"] == ["arm64"] and props["Timeout"] <= 29
    assert props["TracingConfig"] == {"Mode": "Active"}
    # It needs no AWS access beyond its logs and traces.
    assert synth.agent.all_actions(AGENT_HANDLER) == {
        "logs:CreateLogStream", "logs:PutLogEvents",
        "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    synth.agent.assertions.resource_count_is("AWS::ApiGatewayV2::Route", 1)
    (route,) = synth.agent.assertions.find_resources(
        "AWS::ApiGatewayV2::Route", {"Properties": {"RouteKey": "$default"}}).values()
    integration_id = refs(route["Properties"]["Target"]).pop()
    assert refs(synth.agent.props(integration_id)["IntegrationUri"]) == {logical_id}


def test_agent_stack_has_no_platform_resources(synth):
    kinds = {r["Type"] for r in synth.agent.resources.values()}
    assert not {k for k in kinds if k.startswith(("AWS::DynamoDB", "AWS::SQS", "AWS::S3::"))}


@pytest.mark.slow
def test_context_chooses_agents_owner_and_models(tmp_path):
    agent_dir = tmp_path / "my_notes"
    shutil.copytree(REPO_ROOT / "agent_template", agent_dir,
                    ignore=shutil.ignore_patterns("tests", "__pycache__"))
    config = yaml.safe_load((agent_dir / "agent.yaml").read_text())
    config["handle"] = "my_notes"
    (agent_dir / "agent.yaml").write_text(yaml.safe_dump(config))
    stack_id = agent_stack_id("Codeshot", "my_notes")
    assert stack_id == "CodeshotAgent-my-notes"  # stack names allow no '_'
    synth = synthesize(tmp_path / "out", agent_stack=stack_id, **{
        "codeshot:agentDirs": [str(agent_dir)], "codeshot:adminUsername": "ops",
        "codeshot:llm": "fewshot", "codeshot:embedder": "static"})
    stacks = {p.name.removesuffix(".template.json") for p in synth.outdir.glob("*.template.json")}
    assert stacks == {"Codeshot", stack_id}
    assert synth.agent.env(AGENT_HANDLER)["CODESHOT_AGENT_ID"] == "ops/my_notes"
    synth.agent.assertions.resource_count_is("Custom::CodeshotAgentRegistration", 1)
    synth.agent.assertions.has_resource_properties("Custom::CodeshotAgentRegistration",
                                                   {"Owner": "ops"})
    # Offline LLM and embedder: no function may call Bedrock.
    for handler in ("handlers.api.handler", "handlers.runner.handler",
                    "handlers.register_agent.handler"):
        assert not {a for a in synth.platform.all_actions(handler) if a.startswith("bedrock:")}
        assert synth.platform.env(handler)["CODESHOT_EMBEDDER"] == "static"
    assert synth.platform.env("handlers.runner.handler")["CODESHOT_LLM"] == "fewshot"
