"""The rehearsal's IAM evaluation (infra/rehearsal/policy.py): each condition operator
allows the request it should and refuses the one it should, and a decision that needs a
condition key the rehearsal does not derive refuses, naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from infra.rehearsal.policy import Request, decide

ROLE = "arn:aws:iam::123456789012:role/api"
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/notes"
BUCKET = "arn:aws:s3:::embeds"


def grant(condition: dict[str, Any] | None = None, *, action: str = "dynamodb:GetItem",
          resource: str = TABLE, effect: str = "Allow") -> dict[str, Any]:
    statement = {"Effect": effect, "Action": action, "Resource": resource}
    return {"Version": "2012-10-17",
            "Statement": [statement | ({"Condition": condition} if condition else {})]}


def ask(policies: list[dict[str, Any]], context: dict[str, tuple[str, ...]], *,
        action: str = "dynamodb:GetItem", resource: str = TABLE,
        resource_policies: list[dict[str, Any]] | None = None) -> tuple[bool, str]:
    decision = decide(policies, resource_policies or [],
                      Request(action, resource, context, ROLE, "123456789012"))
    return decision.allowed, decision.reason


def allows(condition: dict[str, Any], context: dict[str, tuple[str, ...]]) -> bool:
    return ask([grant(condition)], context)[0]


# operator, the policy's values, a request value it allows, one it refuses
CASES = [
    ("StringEquals", "alice", "alice", "Alice"),
    ("StringNotEquals", "alice", "bob", "alice"),
    ("StringEqualsIgnoreCase", "alice", "ALICE", "bob"),
    ("StringNotEqualsIgnoreCase", "alice", "bob", "ALICE"),
    ("StringLike", ["uploads/*", "embeds/?"], "uploads/ab/c", "embeds/ab"),
    ("StringNotLike", "uploads/*", "embeds/x", "uploads/x"),
    ("NumericEquals", "10", "10.0", "11"),
    ("NumericNotEquals", "10", "11", "10"),
    ("NumericLessThan", "10", "9", "10"),
    ("NumericLessThanEquals", "10", "10", "11"),
    ("NumericGreaterThan", "10", "11", "10"),
    ("NumericGreaterThanEquals", "10", "10", "9"),
    ("Bool", "true", "TRUE", "false"),
    ("Bool", True, "true", "false"),
    ("ArnLike", "arn:aws:iam::*:role/api*", ROLE, "arn:aws:iam::123456789012:user/api"),
    ("ArnEquals", ROLE, ROLE, ROLE + "x"),
    ("ArnNotLike", "arn:aws:iam::*:role/admin*", ROLE, "arn:aws:iam::1:role/admin-x"),
    ("ArnNotEquals", ROLE + "x", ROLE, ROLE + "x"),
    ("IpAddress", "10.0.0.0/8", "10.1.2.3", "11.1.2.3"),
    ("NotIpAddress", "10.0.0.0/8", "11.1.2.3", "10.1.2.3"),
]


@pytest.mark.parametrize(("operator", "expected", "good", "bad"), CASES)
def test_each_operator_allows_and_refuses(operator, expected, good, bad):
    condition = {operator: {"test:Key": expected}}
    assert allows(condition, {"test:key": (good,)})
    assert not allows(condition, {"test:key": (bad,)})


@pytest.mark.parametrize(("operator", "holds"), [
    ("StringEquals", False), ("StringLike", False), ("Bool", False), ("ArnLike", False),
    ("StringNotEquals", True), ("StringNotLike", True), ("ArnNotLike", True),
    ("StringEqualsIfExists", True), ("BoolIfExists", True)])
def test_a_key_the_request_does_not_carry(operator, holds):
    """Absent: a positive operator is false, a negated one or an IfExists one is true."""
    assert allows({operator: {"test:Key": "x"}}, {"test:key": ()}) is holds


def test_if_exists_still_compares_a_present_key():
    condition = {"StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "ALL_OLD"]}}
    assert allows(condition, {"dynamodb:returnvalues": ("ALL_OLD",)})
    assert not allows(condition, {"dynamodb:returnvalues": ("ALL_NEW",)})


def test_for_all_values_needs_every_value_in_the_set():
    condition = {"ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk", "text"]}}
    assert allows(condition, {"dynamodb:Attributes": ("pk", "text")})
    assert allows(condition, {"dynamodb:Attributes": ()})  # vacuously, as in AWS
    assert not allows(condition, {"dynamodb:Attributes": ("pk", "secret")})
    like = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["alice#*"]}}
    assert allows(like, {"dynamodb:LeadingKeys": ("alice#notes", "alice#dice")})
    assert not allows(like, {"dynamodb:LeadingKeys": ("alice#notes", "bob#notes")})


def test_for_any_value_needs_one_value_in_the_set():
    condition = {"ForAnyValue:StringEquals": {"aws:TagKeys": ["team", "owner"]}}
    assert allows(condition, {"aws:TagKeys": ("cost", "owner")})
    assert not allows(condition, {"aws:TagKeys": ("cost",)})
    assert not allows(condition, {"aws:TagKeys": ()})
    assert allows({"ForAnyValue:StringLikeIfExists": {"aws:TagKeys": "t*"}},
                  {"aws:TagKeys": ()})


def test_null_tells_a_present_key_from_an_absent_one():
    must_be_absent = {"Null": {"s3:if-none-match": "true"}}
    assert allows(must_be_absent, {"s3:if-none-match": ()})
    assert not allows(must_be_absent, {"s3:if-none-match": ("*",)})
    assert allows({"Null": {"s3:if-none-match": False}}, {"s3:if-none-match": ("*",)})


def test_every_operator_and_key_of_a_block_must_hold():
    condition = {"StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES",
                                  "dynamodb:ReturnValues": "NONE"},
                 "Bool": {"aws:SecureTransport": "true"}}
    context = {"dynamodb:select": ("SPECIFIC_ATTRIBUTES",), "dynamodb:returnvalues": ("NONE",),
               "aws:securetransport": ("true",)}
    assert allows(condition, context)
    assert not allows(condition, context | {"aws:securetransport": ("false",)})
    assert not allows(condition, context | {"dynamodb:returnvalues": ("ALL_OLD",)})


def test_a_policy_variable_is_the_request_s_value():
    condition = {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["${aws:userid}"]}}
    assert allows(condition, {"dynamodb:LeadingKeys": ("AROA1",), "aws:userid": ("AROA1",)})
    assert not allows(condition, {"dynamodb:LeadingKeys": ("AROA2",), "aws:userid": ("AROA1",)})
    objects = grant(action="s3:GetObject", resource=BUCKET + "/home/${aws:username}/*")
    mine = {"aws:username": ("alice",)}
    assert ask([objects], mine, action="s3:GetObject", resource=BUCKET + "/home/alice/a")[0]
    assert not ask([objects], mine, action="s3:GetObject", resource=BUCKET + "/home/bob/a")[0]


def test_an_arn_condition_s_policy_variable_is_the_request_s_value():
    """IAM: "a policy variable for Condition values in any condition that involves the
    string operators or the ARN operators": a Deny of the caller's own account's api role,
    written with ${aws:PrincipalAccount}, applies; an ArnNotLike Allow of every other
    account's roles does not allow this one's."""
    mine = {"aws:principalarn": (ROLE,), "aws:principalaccount": ("123456789012",)}
    own_role = "arn:aws:iam::${aws:PrincipalAccount}:role/api"
    deny = {"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "dynamodb:*",
                           "Resource": "*",
                           "Condition": {"ArnLike": {"aws:PrincipalArn": own_role}}}]}
    assert not ask([grant()], mine, resource_policies=[deny])[0]
    assert ask([grant()], mine | {"aws:principalaccount": ("999999999999",)},
               resource_policies=[deny])[0]
    others = {"ArnNotLike": {"aws:PrincipalArn": "arn:aws:iam::${aws:PrincipalAccount}:role/*"}}
    assert not ask([grant(others)], mine)[0]
    assert allows({"ArnEquals": {"aws:SourceArn": "${aws:PrincipalArn}"}},
                  mine | {"aws:sourcearn": (ROLE,)})


def test_a_policy_variable_s_default_stands_for_an_absent_key():
    """IAM: ``${key, 'default'}`` is ``default`` where the request does not carry key."""
    home = grant(action="s3:GetObject", resource=BUCKET + "/home/${aws:username, 'shared'}/*")
    nobody: dict[str, tuple[str, ...]] = {"aws:username": ()}
    assert ask([home], nobody, action="s3:GetObject", resource=BUCKET + "/home/shared/a")[0]
    assert not ask([home], nobody, action="s3:GetObject", resource=BUCKET + "/home/bob/a")[0]
    assert ask([home], {"aws:username": ("bob",)}, action="s3:GetObject",
               resource=BUCKET + "/home/bob/a")[0]
    deny = {"Statement": [grant()["Statement"][0] | {
        "Effect": "Deny", "Resource": TABLE.replace("notes", "${aws:username, 'notes'}")}]}
    assert not ask([grant(), deny], nobody)[0]


def test_a_resource_with_a_variable_the_request_does_not_carry_widens_nothing():
    """IAM: a key "not present ... any attempt to match it fails and causes the statement
    to be invalid". A role carries no aws:username: a NotResource naming it must not make
    the Allow grant every other object, nor one of several Resources the rest of them."""
    nobody: dict[str, tuple[str, ...]] = {"aws:username": ()}
    secret = BUCKET + "/private/alice/secret"

    def get(statement: dict[str, Any], resource_policies: list[dict[str, Any]] | None = None
            ) -> tuple[bool, str]:
        return ask([{"Statement": [{"Effect": "Allow", "Action": "s3:GetObject"} | statement]}],
                   nobody, action="s3:GetObject", resource=secret,
                   resource_policies=resource_policies)

    allowed, reason = get({"NotResource": BUCKET + "/private/${aws:username}/*"})
    assert not allowed
    assert "aws:username" in reason
    assert not get({"Resource": [BUCKET + "/home/${aws:username}/*", BUCKET + "/private/*"]})[0]
    assert not get({"Resource": BUCKET + "/home/${aws:username}/*"})[0]
    # a Deny that could apply refuses; one that applies to no reading of it does not
    deny = {"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                           "NotResource": BUCKET + "/home/${aws:username}/*"}]}
    assert not get({"Resource": BUCKET + "/*"}, [deny])[0]
    deny["Statement"][0]["NotResource"] = [deny["Statement"][0]["NotResource"], secret]
    assert get({"Resource": BUCKET + "/*"}, [deny])[0]


def test_a_string_condition_s_unresolved_value_is_not_dropped_to_allow():
    """``StringLike: ["${aws:username}/*", "public/*"]`` without a user name: IAM reads the
    statement as invalid, so reading it as ``public/*`` alone would widen the Allow."""
    condition = {"StringLike": {"s3:prefix": ["${aws:username}/*", "public/*"]}}
    allowed, reason = ask([grant(condition)], {"aws:username": (), "s3:prefix": ("public/a",)})
    assert not allowed
    assert "StringLike" in reason
    assert allows(condition, {"aws:username": ("bob",), "s3:prefix": ("public/a",)})


def test_a_wildcard_within_a_part_of_an_arn_decides_nothing_at_its_colons():
    """IAM: "if the * wildcard is the last character of a resource ARN segment, it can
    expand to match beyond the colon boundaries"; of one that is not, it does not say
    whether it can: where that decides, the rehearsal refuses."""
    model = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-v1:0"

    def on(resource: str) -> bool:
        return ask([grant(action="bedrock:InvokeModel", resource=resource)], {},
                   action="bedrock:InvokeModel", resource=model)[0]

    assert on("arn:aws:bedrock:*::foundation-model/anthropic.*")
    assert on("arn:aws:bedrock:us-east-1:*")
    assert on("arn:aws:bedrock:us-east-1::foundation-model/*-v1:0")
    assert not on("arn:aws:bedrock:us-east-1::foundation-model/*-v1*0")
    assert not on("arn:aws:bedrock:us-east-1*foundation-model/anthropic.claude-v1:0")
    assert not on("arn:aws:bedrock:us-east-1::foundation-model/*-v1?0")
    # a Deny of embeds/*/secret: a key 'a:b/secret' may be what it denies
    deny = {"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                           "Resource": BUCKET + "/*/secret"}]}
    objects = grant(action="s3:GetObject", resource=BUCKET + "/*")

    def get(key: str) -> tuple[bool, str]:
        return ask([objects], {}, action="s3:GetObject", resource=f"{BUCKET}/{key}",
                   resource_policies=[deny])

    allowed, reason = get("a:b/secret")
    assert not allowed
    assert "a:b/secret" in reason
    assert not get("a/secret")[0]
    assert get("a:b/public")[0]


def test_a_key_the_rehearsal_does_not_derive_refuses_naming_it():
    """Where moto's evaluator let such a grant through, whatever the request held."""
    allowed, reason = ask([grant({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})], {})
    assert not allowed
    assert "aws:sourceip" in reason
    # a Deny that may apply refuses too, though an Allow grants
    deny = grant({"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}},
                 effect="Deny")
    allowed, reason = ask([grant(), deny], {})
    assert not allowed
    assert "kms:viaservice" in reason and "Deny" in reason


def test_an_underived_key_does_not_matter_where_the_statement_cannot_apply():
    # another key of the block is false: the statement does not apply whatever the other is
    deny = grant({"StringEquals": {"kms:ViaService": "s3.amazonaws.com"},
                  "Bool": {"aws:SecureTransport": "false"}}, effect="Deny")
    assert ask([grant(), deny], {"aws:SecureTransport": ("true",)})[0]
    # an unconditional grant allows whatever a conditional one would need
    assert ask([grant(), grant({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})], {})[0]
    # another action: not read at all
    assert ask([grant(), grant({"IpAddress": {"aws:SourceIp": "1.0.0.0/8"}},
                               action="dynamodb:Scan")], {})[0]


def test_an_operator_it_does_not_implement_refuses_naming_it():
    allowed, reason = ask([grant({"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}})],
                          {"aws:CurrentTime": ("2026-01-01T00:00:00Z",)})
    assert not allowed
    assert "DateGreaterThan" in reason


def test_a_single_valued_operator_on_several_values_refuses():
    allowed, reason = ask([grant({"StringEquals": {"dynamodb:Attributes": "pk"}})],
                          {"dynamodb:Attributes": ("pk", "sk")})
    assert not allowed
    assert "ForAllValues" in reason


def test_a_resource_policy_s_conditional_deny_refuses_only_where_it_holds():
    """The embeds bucket's DenyOverwrites (infra/components/data.py), as synthesized."""
    bucket_policy = {"Version": "2012-10-17", "Statement": [
        {"Sid": "DenyOverwrites", "Effect": "Deny", "Principal": {"AWS": "*"},
         "Action": "s3:PutObject", "Resource": BUCKET + "/*",
         "Condition": {"Null": {"s3:if-none-match": "true"},
                       "Bool": {"s3:ObjectCreationOperation": "true"}}},
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": [BUCKET, BUCKET + "/*"],
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}
    writes = grant(action="s3:PutObject", resource=BUCKET + "/embeds/*")

    def put(context: dict[str, tuple[str, ...]]) -> tuple[bool, str]:
        return ask([writes], {"aws:SecureTransport": ("true",)} | context,
                   action="s3:PutObject", resource=BUCKET + "/embeds/abc",
                   resource_policies=[bucket_policy])

    assert put({"s3:if-none-match": ("*",), "s3:ObjectCreationOperation": ("true",)})[0]
    assert put({"s3:if-none-match": (), "s3:ObjectCreationOperation": ("false",)})[0]  # a part
    allowed, reason = put({"s3:if-none-match": (), "s3:ObjectCreationOperation": ("true",)})
    assert not allowed
    assert "DenyOverwrites" in reason


def test_a_resource_policy_s_deny_names_its_principals():
    others = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::123456789012:role/runner"},
         "Action": "dynamodb:*", "Resource": TABLE},
        {"Effect": "Deny", "Principal": {"Service": "logs.amazonaws.com"},
         "Action": "dynamodb:*", "Resource": TABLE}]}
    mine = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": {"AWS": "123456789012"}, "Action": "dynamodb:Get*",
         "Resource": TABLE}]}
    assert ask([grant()], {}, resource_policies=[others])[0]
    assert not ask([grant()], {}, resource_policies=[mine])[0]
    # a resource policy's Allow grants nothing here (the roles' policies do)
    allow = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "*",
                            "Resource": "*"}]}
    assert not ask([], {}, resource_policies=[allow])[0]


def test_not_action_and_not_resource():
    everything_but = {"Statement": [{"Effect": "Allow", "NotAction": "dynamodb:Delete*",
                                     "NotResource": TABLE + "/index/*"}]}
    assert ask([everything_but], {})[0]
    assert not ask([everything_but], {}, action="dynamodb:DeleteItem")[0]
    assert not ask([everything_but], {}, resource=TABLE + "/index/by-owner")[0]


def test_a_special_variable_is_the_character_itself():
    """IAM: ``${*}``, ``${?}`` and ``${$}`` stand for the literal characters (to match a name
    that holds one), not for wildcards."""
    star = grant(action="s3:GetObject", resource=BUCKET + "/${*}")
    assert ask([star], {}, action="s3:GetObject", resource=BUCKET + "/*")[0]
    assert not ask([star], {}, action="s3:GetObject", resource=BUCKET + "/someone-elses-key")[0]
    condition = {"StringLike": {"s3:prefix": "home/${?}${$}*"}}
    assert allows(condition, {"s3:prefix": ("home/?$notes",)})
    assert not allows(condition, {"s3:prefix": ("home/a$notes",)})
    assert not allows({"StringLike": {"s3:prefix": "home/${*}"}}, {"s3:prefix": ("home/alice",)})


def test_a_policy_variable_s_value_holds_no_wildcards():
    """A ``*`` or ``?`` in the request's value of a variable matches only itself."""
    home = grant(action="s3:GetObject", resource=BUCKET + "/home/${aws:username}/*")
    starred = {"aws:username": ("*",)}
    assert ask([home], starred, action="s3:GetObject", resource=BUCKET + "/home/*/a")[0]
    assert not ask([home], starred, action="s3:GetObject", resource=BUCKET + "/home/bob/a")[0]
    condition = {"StringLike": {"s3:prefix": "${aws:username}/*"}}
    assert not allows(condition, {"aws:username": ("?",), "s3:prefix": ("b/notes",)})
    assert allows(condition, {"aws:username": ("?",), "s3:prefix": ("?/notes",)})


def test_a_not_principal_naming_the_role_does_not_exempt_its_session():
    """IAM: a Deny's NotPrincipal exempts an assumed-role caller only where it names its
    session ("identified by the role session name"); the role's ARN and its account do not.
    The rehearsal names no session, so one that names a session of the role refuses."""
    def deny(*exempted: str) -> dict[str, Any]:
        return {"Statement": [{"Effect": "Deny", "NotPrincipal": {"AWS": list(exempted)},
                               "Action": "dynamodb:*", "Resource": TABLE}]}

    root = "arn:aws:iam::123456789012:root"
    assert not ask([grant()], {}, resource_policies=[deny(ROLE, root)])[0]
    session = "arn:aws:sts::123456789012:assumed-role/api/notes-function"
    allowed, reason = ask([grant()], {}, resource_policies=[deny(session, ROLE, root)])
    assert not allowed
    assert "session" in reason
    assert ask([grant()], {}, resource_policies=[deny("*")])[0]


def test_a_deny_naming_a_session_of_the_role_refuses():
    """A Deny's Principal naming one of the role's sessions applies to that session in AWS;
    the rehearsal does not know a call's session, so it cannot pass it."""
    session = "arn:aws:sts::123456789012:assumed-role/api/notes-function"
    deny = {"Statement": [{"Effect": "Deny", "Principal": {"AWS": session},
                           "Action": "dynamodb:*", "Resource": TABLE}]}
    allowed, reason = ask([grant()], {}, resource_policies=[deny])
    assert not allowed
    assert "session" in reason
    other = {"Statement": [deny["Statement"][0] | {"Principal": {"AWS": session.replace(
        "/api/", "/runner/")}}]}
    assert ask([grant()], {}, resource_policies=[other])[0]


@pytest.mark.parametrize(("operator", "expected"), [
    ("NumericLessThan", "1_000"), ("NumericLessThanEquals", " 5 "), ("NumericLessThan", "inf"),
    ("NumericLessThan", "1e3"), ("NumericNotEquals", "nan")])
def test_a_numeric_condition_on_what_is_no_iam_number_refuses(operator, expected):
    """IAM compares "an integer or decimal value", not what Python's float() reads."""
    allowed, reason = ask([grant({operator: {"s3:max-keys": expected}})],
                          {"s3:max-keys": ("5",)})
    assert not allowed
    assert repr(expected) in reason


def test_numbers_compare_exactly():
    assert not allows({"NumericEquals": {"test:Key": "9007199254740993"}},
                      {"test:key": ("9007199254740992",)})
    assert allows({"NumericEquals": {"test:Key": "10"}}, {"test:key": ("10.00",)})


def test_a_negated_operator_on_a_variable_the_request_does_not_carry_refuses():
    """``StringNotEquals: ${aws:username}`` where the request has no user name: IAM does
    not say it holds (dropping the value would make it hold for anything)."""
    condition = {"StringNotEquals": {"s3:prefix": ["${aws:username}"]}}
    allowed, reason = ask([grant(condition)], {"aws:username": (), "s3:prefix": ("alice/",)})
    assert not allowed
    assert "StringNotEquals" in reason
    assert not allows({"StringEquals": {"s3:prefix": ["${aws:username}"]}},
                      {"aws:username": (), "s3:prefix": ("alice/",)})
