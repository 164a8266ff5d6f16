"""IAM statement helpers that do not need a synth."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack

from infra.components.access import check_profile_region, model_arns
from tests.infra.cfn import text


def resolved(value: str) -> str:
    """``arn:<AWS::Partition>:bedrock:...`` for an ARN built from tokens."""
    return text(Stack(App(), "S").resolve(value))


def test_foundation_model_arn_in_the_stack_region():
    (arn,) = model_arns("amazon.titan-embed-text-v2:0")
    assert resolved(arn) == (
        "arn:<AWS::Partition>:bedrock:<AWS::Region>::foundation-model/amazon.titan-embed-text-v2:0")


def test_inference_profile_also_allows_the_routed_model_in_any_region():
    profile, model = model_arns("us.anthropic.claude-haiku-4-5-20251001-v1:0")
    assert resolved(profile) == (
        "arn:<AWS::Partition>:bedrock:<AWS::Region>:<AWS::AccountId>:inference-profile/"
        "us.anthropic.claude-haiku-4-5-20251001-v1:0")
    assert resolved(model) == (
        "arn:<AWS::Partition>:bedrock:*::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0")


@pytest.mark.parametrize(("model_id", "region"), [
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "us-east-1"),
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "us-west-2"),
    ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "eu-central-1"),
    ("jp.anthropic.claude-haiku-4-5-20251001-v1:0", "ap-northeast-1"),
    ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "sa-east-1"),
    ("apac.anthropic.claude-haiku-4-5-20251001-v1:0", "me-central-1"),
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "mx-central-1"),  # a region not placed
    # here is not judged: AWS adds source regions to profiles
    ("amazon.titan-embed-text-v2:0", "eu-west-1"),  # a model, not a profile: not judged
])
def test_a_profile_called_from_its_geography_passes(model_id, region):
    check_profile_region(model_id, region, "codeshot:llmModel")


@pytest.mark.parametrize(("model_id", "region"), [
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "eu-west-1"),
    ("us.anthropic.claude-haiku-4-5-20251001-v1:0", "us-gov-west-1"),
    ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "us-east-1"),
    ("jp.anthropic.claude-haiku-4-5-20251001-v1:0", "ap-southeast-2"),
])
def test_a_profile_called_from_elsewhere_is_refused_at_synth(model_id, region):
    with pytest.raises(ValueError, match=f"codeshot:llmModel {model_id} is an inference "
                       f"profile for other regions than {region}"):
        check_profile_region(model_id, region, "codeshot:llmModel")
