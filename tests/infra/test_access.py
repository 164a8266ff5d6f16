"""IAM statement helpers that do not need a synth."""

from __future__ import annotations

from aws_cdk import App, Stack

from infra.components.access import model_arns
from tests.infra.cfn import text


def resolved(value: str) -> str:
    """``arn:<AWS::Partition>:bedrock:...`` for an ARN built from tokens."""
    return text(Stack(App(), "S").resolve(value))


def test_foundation_model_arn_in_the_stack_region():
    (arn,) = model_arns("amazon.titan-embed-text-v2:0")
    assert resolved(arn) == (
        "arn:<AWS::Partition>:bedrock:<AWS::Region>::foundation-model/amazon.titan-embed-text-v2:0")


def test_inference_profile_also_allows_the_routed_model_in_any_region():
    profile, model = model_arns("us.anthropic.claude-3-5-haiku-20241022-v1:0")
    assert resolved(profile) == (
        "arn:<AWS::Partition>:bedrock:<AWS::Region>:<AWS::AccountId>:inference-profile/"
        "us.anthropic.claude-3-5-haiku-20241022-v1:0")
    assert resolved(model) == (
        "arn:<AWS::Partition>:bedrock:*::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0")
