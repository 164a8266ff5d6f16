"""How the rehearsal's AWS endpoint sees a call: the resources IAM authorizes it on, and
what a caller's policies allow where moto's evaluator would pass a condition unread."""

from __future__ import annotations

from infra.rehearsal.aws_proxy import Check, allowed, describe, unconditional

BUCKET = "arn:aws:s3:::embeds"


def converse(model: str) -> list[str]:
    call = describe("bedrock", "POST", f"/model/{model}/converse", {}, {}, b"", str)
    assert {c.action for c in call.checks} == {"bedrock:InvokeModel"}
    return [c.resource for c in call.checks]


def test_an_inference_profile_is_authorized_with_the_model_it_routes_to():
    assert converse("us.anthropic.claude-haiku-4-5-20251001-v1:0") == [
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0"]
    assert converse("amazon.titan-embed-text-v2:0") == [
        "arn:aws:bedrock:us-east-1::foundation-model/amazon.titan-embed-text-v2:0"]


def policy(*statements: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def test_a_listing_limited_to_a_prefix_does_not_count_as_listing_the_bucket():
    """A missing object answers 403 to such a caller, as AWS may (aws_proxy.py)."""
    by_prefix = policy({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": BUCKET,
                        "Condition": {"StringLike": {"s3:prefix": ["uploads/*"]}}})
    whole = policy({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": BUCKET})
    listing = Check("s3:ListBucket", BUCKET)
    assert allowed([by_prefix], listing)  # moto's evaluator reads no StringLike
    assert not allowed(unconditional([by_prefix]), listing)
    assert allowed(unconditional([whole]), listing)
