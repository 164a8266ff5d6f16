"""How the rehearsal's AWS endpoint sees a call: the resources IAM authorizes it on, and
the condition keys it carries, and what a caller's policies and the resource's policy
allow, evaluated by the proxy in front of moto's server."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from email.message import Message
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from infra.rehearsal.aws_proxy import (
    AwsProxy,
    Check,
    Principal,
    Unmapped,
    authorize,
    describe,
    dynamodb_checks,
    s3_call,
)

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


def test_the_condition_keys_of_a_dynamodb_request():
    """LeadingKeys from the item's key or the query's key condition, Attributes from every
    expression, the request's own Select and ReturnValues."""
    update = {"TableName": "notes", "Key": {"pk": {"S": "alice"}, "sk": {"S": "n1"}},
              "UpdateExpression": "SET #t = if_not_exists(#t, :z), meta.seen = :one "
                                  "REMOVE gone ADD hits :one",
              "ExpressionAttributeNames": {"#t": "text"}, "ReturnValues": "ALL_NEW"}
    (check,) = dynamodb_checks("UpdateItem", update, {"notes": "pk"})
    assert dict(check.context) == {
        "dynamodb:Attributes": ("gone", "hits", "meta", "pk", "sk", "text"),
        "dynamodb:LeadingKeys": ("alice",), "dynamodb:ReturnValues": ("ALL_NEW",),
        "dynamodb:Select": (), "dynamodb:ReturnConsumedCapacity": (),
        "dynamodb:EnclosingOperation": ()}
    query = {"TableName": "notes", "Select": "SPECIFIC_ATTRIBUTES",
             "KeyConditionExpression": "begins_with(sk, :p) AND #k = :v",
             "ExpressionAttributeNames": {"#k": "pk"}, "ProjectionExpression": "sk, #n[0]",
             "ExpressionAttributeValues": {":v": {"S": "bob"}, ":p": {"S": "n"}}}
    (check,) = dynamodb_checks("Query", query | {"ExpressionAttributeNames": {
        "#k": "pk", "#n": "items"}}, {"notes": "pk"})
    assert check.context["dynamodb:LeadingKeys"] == ("bob",)
    assert check.context["dynamodb:Attributes"] == ("items", "pk", "sk")
    assert check.context["dynamodb:Select"] == ("SPECIFIC_ATTRIBUTES",)
    # a scan or a read through an index: the rehearsal does not say which keys it reads
    (scan,) = dynamodb_checks("Scan", {"TableName": "notes"}, {"notes": "pk"})
    (by_index,) = dynamodb_checks("Query", query | {"IndexName": "by-owner"}, {"notes": "pk"})
    assert "dynamodb:LeadingKeys" not in scan.context
    assert "dynamodb:LeadingKeys" not in by_index.context
    assert by_index.resource.endswith("table/notes/index/by-owner")
    transaction = {"TransactItems": [
        {"Put": {"TableName": "notes", "Item": {"pk": {"S": "alice"}, "text": {"S": "x"}}}},
        {"ConditionCheck": {"TableName": "notes", "Key": {"pk": {"S": "carol"}}}}]}
    put, condition_check = dynamodb_checks("TransactWriteItems", transaction, {"notes": "pk"})
    assert (put.action, put.context["dynamodb:LeadingKeys"]) == ("dynamodb:PutItem", ("alice",))
    assert condition_check.context["dynamodb:LeadingKeys"] == ("carol",)
    assert put.context["dynamodb:EnclosingOperation"] == ("TransactWriteItems",)


TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/notes"


def on_notes(condition: dict) -> Principal:
    return Principal("api", "api", [policy({"Effect": "Allow", "Action": "dynamodb:*",
                                            "Resource": TABLE, "Condition": condition})])


def one(operation: str, body: dict) -> Check:
    (check,) = dynamodb_checks(operation, {"TableName": "notes"} | body, {"notes": "pk"})
    return check


def test_attributes_count_those_a_request_conditions_or_filters_on():
    """The FGAC guide: the listed attributes are those that "can be read, written, or
    evaluated in a conditional write or scan filter"."""
    only = on_notes({"ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "a"]}})
    item = {"Item": {"pk": {"S": "x"}, "a": {"S": "1"}}}
    assert authorize(only, one("PutItem", item | {
        "ConditionExpression": "attribute_not_exists(pk)"})).allowed
    assert not authorize(only, one("PutItem", item | {
        "ConditionExpression": "attribute_not_exists(secret)"})).allowed
    filtered = one("Scan", {"FilterExpression": "#s.k > :v AND size(b[0]) < :n OR NOT c IN (:v)",
                            "ExpressionAttributeNames": {"#s": "secret"}})
    assert filtered.context["dynamodb:Attributes"] == ("b", "c", "secret")
    legacy = one("Query", {"KeyConditions": {"pk": {}}, "QueryFilter": {"d": {}},
                           "Expected": {"e": {}}})
    assert legacy.context["dynamodb:Attributes"] == ("d", "e", "pk")
    # an expression the rehearsal cannot read (an undefined #name, an unknown character):
    # the key is not derived, and a decision on it refuses naming it
    for untrusted in ({"ConditionExpression": "#nope = :v"},
                      {"FilterExpression": "a = :v; b"}):
        check = one("Scan", untrusted)
        assert "dynamodb:Attributes" not in check.context
        assert "dynamodb:attributes" in authorize(only, check).reason


def test_select_is_aws_s_default_where_a_read_leaves_it_out():
    """The FGAC guide: "the Select parameter always has a value (ALL_ATTRIBUTES, unless
    otherwise specified)"; its example policy refuses a Query without a projection."""
    example = on_notes({"ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "a"]},
                        "StringEqualsIfExists": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"}})
    query = {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {
        ":p": {"S": "x"}}}
    assert not authorize(example, one("Query", query)).allowed
    assert authorize(example, one("Query", query | {"ProjectionExpression": "a"})).allowed
    assert [one(operation, body).context["dynamodb:Select"] for operation, body in [
        ("GetItem", {"Key": {"pk": {"S": "x"}}}),
        ("GetItem", {"Key": {"pk": {"S": "x"}}, "AttributesToGet": ["a"]}),
        ("Query", query | {"IndexName": "by-a"}),
        ("Scan", {"Select": "COUNT"}),
        ("PutItem", {"Item": {"pk": {"S": "x"}}})]] == [
        ("ALL_ATTRIBUTES",), ("SPECIFIC_ATTRIBUTES",), ("ALL_PROJECTED_ATTRIBUTES",),
        ("COUNT",), ()]
    (get,) = dynamodb_checks("TransactGetItems", {"TransactItems": [
        {"Get": {"TableName": "notes", "Key": {"pk": {"S": "x"}}}}]}, {"notes": "pk"})
    assert get.context["dynamodb:Select"] == ("ALL_ATTRIBUTES",)


def test_return_values_is_none_where_a_write_leaves_it_out():
    """The FGAC guide: "the ReturnValues parameter always has a value (NONE unless
    otherwise specified)"; its example 3 allows a plain UpdateItem."""
    example3 = on_notes({"StringEquals": {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD"]}})
    update = {"Key": {"pk": {"S": "x"}}, "UpdateExpression": "SET a = :v"}
    assert authorize(example3, one("UpdateItem", update)).allowed
    assert not authorize(example3, one("UpdateItem", update | {
        "ReturnValues": "ALL_NEW"})).allowed
    assert one("DeleteItem", update).context["dynamodb:ReturnValues"] == ("NONE",)
    assert one("GetItem", update).context["dynamodb:ReturnValues"] == ()


# -- through the proxy, in front of moto's server -----------------------------------------
ACCESS_KEY = "ASIAREHEARSALTEST"


@pytest.fixture
def proxy(moto_server: Any) -> Iterator[AwsProxy]:
    proxy = AwsProxy(moto_server.endpoint_url, str)
    yield proxy
    proxy.stop()


def client(endpoint: str, service: str, access_key: str = "admin") -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=access_key, aws_secret_access_key="secret")


def as_role(proxy: AwsProxy, service: str, *statements: dict) -> Any:
    proxy.add_principal(ACCESS_KEY, Principal("api", "api-role", [policy(*statements)]))
    return client(proxy.url, service, ACCESS_KEY)


def refused(call: Callable[[], Any]) -> str:
    """The message of the AccessDenied ``call`` is answered with."""
    with pytest.raises(ClientError) as raised:
        call()
    assert raised.value.response["Error"]["Code"] in ("AccessDenied", "AccessDeniedException")
    return str(raised.value.response["Error"]["Message"])


@pytest.fixture
def bucket(moto_server: Any) -> str:
    name = f"embeds-{uuid.uuid4().hex[:12]}"
    client(moto_server.endpoint_url, "s3").create_bucket(Bucket=name)
    return name


def test_a_listing_outside_the_granted_prefix_is_refused(proxy, bucket):
    """The API's grant (infra/components/access.py): ListBucket where s3:prefix is
    uploads/*. moto's evaluator let any listing through it."""
    s3 = as_role(proxy, "s3", {
        "Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}",
        "Condition": {"StringLike": {"s3:prefix": ["uploads/*"]}}}, {
        "Effect": "Allow", "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{bucket}/uploads/*"})
    assert s3.list_objects_v2(Bucket=bucket, Prefix="uploads/abc")["KeyCount"] == 0
    assert "s3:ListBucket" in refused(lambda: s3.list_objects_v2(Bucket=bucket,
                                                                 Prefix="embeds/"))
    refused(lambda: s3.list_objects_v2(Bucket=bucket))
    # a missing object: 403, as the grant is limited to a prefix
    with pytest.raises(ClientError) as missing:
        s3.get_object(Bucket=bucket, Key="uploads/gone")
    assert missing.value.response["Error"]["Code"] == "AccessDenied"
    assert [(d.action, d.principal) for d in proxy.log.denials] == [
        ("s3:ListBucket", "api"), ("s3:ListBucket", "api")]


def test_a_listing_of_versions_is_its_own_action_limited_to_the_granted_prefix(proxy, bucket):
    """The eraser's grant (access.object_delete with markers): ListBucketVersions where
    s3:prefix is embeds/*, which a restore's listing of one embed's versions meets."""
    s3 = as_role(proxy, "s3", {
        "Effect": "Allow", "Action": "s3:ListBucketVersions",
        "Resource": f"arn:aws:s3:::{bucket}",
        "Condition": {"StringLike": {"s3:prefix": ["embeds/*"]}}})
    assert s3.list_object_versions(Bucket=bucket, Prefix="embeds/abc").get("Versions") is None
    assert "s3:ListBucketVersions" in refused(lambda: s3.list_object_versions(
        Bucket=bucket, Prefix="uploads/"))
    refused(lambda: s3.list_object_versions(Bucket=bucket))
    assert "s3:ListBucket" in refused(lambda: s3.list_objects_v2(Bucket=bucket,
                                                                 Prefix="embeds/abc"))


def test_the_bucket_policy_refuses_a_put_without_if_none_match(proxy, bucket):
    """The embeds bucket's DenyOverwrites (infra/components/data.py) holds in the
    rehearsal: a put must carry If-None-Match; a part of a multipart upload need not."""
    arn = f"arn:aws:s3:::{bucket}"
    proxy.add_resource_policy(arn, policy({
        "Sid": "DenyOverwrites", "Effect": "Deny", "Principal": {"AWS": "*"},
        "Action": "s3:PutObject", "Resource": f"{arn}/*",
        "Condition": {"Null": {"s3:if-none-match": "true"},
                      "Bool": {"s3:ObjectCreationOperation": "true"}}}, {
        "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*",
        "Resource": [arn, f"{arn}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}))
    s3 = as_role(proxy, "s3", {"Effect": "Allow", "Action": "s3:PutObject",
                               "Resource": f"{arn}/embeds/*"})
    s3.put_object(Bucket=bucket, Key="embeds/a", Body=b"a", IfNoneMatch="*")
    assert "DenyOverwrites" in refused(lambda: s3.put_object(Bucket=bucket, Key="embeds/b",
                                                             Body=b"b"))
    upload = s3.create_multipart_upload(Bucket=bucket, Key="embeds/c")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="embeds/c", UploadId=upload, PartNumber=1,
                          Body=b"c")
    assert "DenyOverwrites" in refused(lambda: s3.complete_multipart_upload(
        Bucket=bucket, Key="embeds/c", UploadId=upload,
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}))


def test_if_none_match_is_read_from_the_headers_only():
    """An HTTP conditional header, not a parameter S3 reads from a presigned URL's query
    (as it reads x-amz-*): a put carrying it only there is no conditional put (the
    rehearsal refuses it: a parameter it does not know may name another operation)."""
    deny = policy({"Sid": "DenyOverwrites", "Effect": "Deny", "Principal": {"AWS": "*"},
                   "Action": "s3:PutObject", "Resource": BUCKET + "/*",
                   "Condition": {"Null": {"s3:if-none-match": "true"}}})
    api = Principal("api", "api", [policy({"Effect": "Allow", "Action": "s3:*",
                                           "Resource": BUCKET + "/*"})])

    def put(query: dict[str, list[str]], headers: Message) -> bool:
        (check,) = s3_call("PUT", "/embeds/uploads/u/abc", query, headers).checks
        return authorize(api, check, resource_policies={BUCKET: [deny]}).allowed

    conditional = Message()
    conditional["If-None-Match"] = "*"
    assert put({}, conditional)
    with pytest.raises(Unmapped):
        put({"if-none-match": ["*"]}, Message())


def test_deleting_a_version_is_its_own_action():
    """A delete naming a version (a delete marker removed: an embed's delete undone) is
    s3:DeleteObjectVersion, which DeleteObject alone does not grant."""
    deleter = Principal("eraser", "eraser", [policy({
        "Effect": "Allow", "Action": "s3:DeleteObject", "Resource": BUCKET + "/*"})])

    def delete(query: dict[str, list[str]]) -> bool:
        (check,) = s3_call("DELETE", "/embeds/embeds/abc", query, Message()).checks
        return authorize(deleter, check).allowed

    assert delete({})
    assert not delete({"versionId": ["v1"]})


def test_an_empty_prefix_parameter_is_the_empty_string():
    """AWS's example grant of the bucket's root listing: "s3:prefix": ["", "home/"]."""
    lister = Principal("api", "api", [policy({
        "Effect": "Allow", "Action": "s3:ListBucket", "Resource": BUCKET,
        "Condition": {"StringEquals": {"s3:prefix": ["", "home/"]}}})])

    def listing(query: dict[str, list[str]]) -> Check:
        return s3_call("GET", "/embeds", {"list-type": ["2"]} | query, Message()).checks[0]

    assert listing({"prefix": [""]}).context["s3:prefix"] == ("",)
    assert authorize(lister, listing({"prefix": [""], "delimiter": ["/"]})).allowed
    assert not authorize(lister, listing({})).allowed  # no prefix: the key is absent



def actions(method: str, path: str, query: dict[str, list[str]], **headers: str) -> list[
        tuple[str, str]]:
    message = Message()
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    return [(c.action, c.resource) for c in s3_call(method, path, query, message).checks]


@pytest.mark.parametrize(("method", "query", "expected"), [
    ("GET", {"response-content-type": ["text/plain"]}, ["s3:GetObject"]),
    ("GET", {"acl": [""]}, ["s3:GetObjectAcl"]),
    ("GET", {"acl": [""], "versionId": ["v1"]}, ["s3:GetObjectVersionAcl"]),
    ("PUT", {"acl": [""]}, ["s3:PutObjectAcl"]),
    ("GET", {"tagging": [""]}, ["s3:GetObjectTagging"]),
    ("PUT", {"tagging": [""]}, ["s3:PutObjectTagging"]),
    ("DELETE", {"tagging": [""]}, ["s3:DeleteObjectTagging"]),
    ("GET", {"attributes": [""]}, ["s3:GetObject", "s3:GetObjectAttributes"]),
    ("GET", {"attributes": [""], "versionId": ["v1"]},
     ["s3:GetObjectVersion", "s3:GetObjectVersionAttributes"]),
    ("GET", {"retention": [""]}, ["s3:GetObjectRetention"]),
    ("PUT", {"legal-hold": [""]}, ["s3:PutObjectLegalHold"]),
    ("POST", {"restore": [""]}, ["s3:RestoreObject"]),
    ("DELETE", {"versionId": ["v1"]}, ["s3:DeleteObjectVersion"]),
    ("POST", {"uploads": [""]}, ["s3:PutObject"]),
    ("PUT", {"uploadId": ["u"], "partNumber": ["1"]}, ["s3:PutObject"]),
    ("POST", {"uploadId": ["u"]}, ["s3:PutObject"]),
    ("GET", {"uploadId": ["u"]}, ["s3:ListMultipartUploadParts"]),
    ("DELETE", {"uploadId": ["u"]}, ["s3:AbortMultipartUpload"]),
])
def test_an_object_request_is_checked_as_the_action_its_sub_resource_names(
        method, query, expected):
    """AWS authorizes GET ?acl as s3:GetObjectAcl, PUT ?tagging as s3:PutObjectTagging ...:
    a role granted only GetObject and PutObject may make none of them."""
    assert actions(method, "/embeds/uploads/a", query) == [
        (action, BUCKET + "/uploads/a") for action in expected]


def test_a_copy_reads_its_source_s_version():
    assert actions("PUT", "/embeds/b", {}, x_amz_copy_source="/embeds/a%20b?versionId=v1") == [
        ("s3:PutObject", BUCKET + "/b"), ("s3:GetObjectVersion", BUCKET + "/a b")]
    assert actions("PUT", "/embeds/b", {"uploadId": ["u"], "partNumber": ["2"]},
                   x_amz_copy_source="/embeds/a") == [
        ("s3:PutObject", BUCKET + "/b"), ("s3:GetObject", BUCKET + "/a")]


def test_a_presigned_copy_source_is_read_too():
    """A presigned PUT with ``x-amz-copy-source`` as a parameter: a role that may write
    uploads/ but not read private/ may not copy private/x there."""
    role = Principal("api", "api", [policy({
        "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
        "Resource": BUCKET + "/uploads/*"})])
    call = s3_call("PUT", "/embeds/uploads/a", {"x-amz-copy-source": ["/embeds/private/x"]},
                   Message())
    assert [c.action for c in call.checks] == ["s3:PutObject", "s3:GetObject"]
    assert not authorize(role, call.checks[1]).allowed


@pytest.mark.parametrize(("method", "query", "headers", "expected"), [
    ("PUT", {}, {"x_amz_tagging": "owner=mallory"}, ["s3:PutObject", "s3:PutObjectTagging"]),
    ("PUT", {}, {"x_amz_acl": "public-read"}, ["s3:PutObject", "s3:PutObjectAcl"]),
    ("PUT", {"x-amz-acl": ["public-read"]}, {}, ["s3:PutObject", "s3:PutObjectAcl"]),
    ("PUT", {"X-Amz-Tagging": ["k=v"]}, {}, ["s3:PutObject", "s3:PutObjectTagging"]),
    ("PUT", {}, {"x_amz_grant_read": "uri=http://acs.amazonaws.com/groups/global/AllUsers"},
     ["s3:PutObject", "s3:PutObjectAcl"]),
    ("PUT", {}, {"x_amz_object_lock_mode": "GOVERNANCE",
                 "x_amz_object_lock_retain_until_date": "2030-01-01T00:00:00Z"},
     ["s3:PutObject", "s3:PutObjectRetention"]),
    ("POST", {"uploads": [""]}, {"x_amz_tagging": "k=v", "x_amz_object_lock_legal_hold": "ON"},
     ["s3:PutObject", "s3:PutObjectTagging", "s3:PutObjectLegalHold"]),
    ("PUT", {"uploadId": ["u"], "partNumber": ["1"]}, {"x_amz_tagging": "k=v"},
     ["s3:PutObject"]),
    ("PUT", {}, {"x_amz_copy_source": "/embeds/a", "x_amz_tagging_directive": "REPLACE"},
     ["s3:PutObject", "s3:GetObject", "s3:PutObjectTagging"]),
    ("PUT", {}, {"x_amz_copy_source": "/embeds/a", "x_amz_acl": "public-read"},
     ["s3:PutObject", "s3:GetObject", "s3:PutObjectAcl"]),
    ("DELETE", {}, {"x_amz_bypass_governance_retention": "true"},
     ["s3:DeleteObject", "s3:BypassGovernanceRetention"]),
])
def test_a_write_s_tags_acl_and_lock_are_actions_of_their_own(method, query, headers, expected):
    """S3 PutObject: "To successfully set the tag-set with your PutObject request, you must
    have the s3:PutObjectTagging" (s3:PutObjectAcl for its ACL); DeleteObject: "To use this
    header, you must have the s3:BypassGovernanceRetention permission". As headers or as a
    presigned URL's parameters; a copy replacing its source's tags sets them."""
    assert [action for action, _ in actions(method, "/embeds/uploads/a", query,
                                            **headers)] == expected


def test_an_event_hold_is_refused():
    """Object Lock's event hold: IAM documents no action for it."""
    with pytest.raises(Unmapped):
        s3_call("PUT", "/embeds/uploads/a", {"x-amz-object-lock-event-hold": ["ON"]},
                Message())


@pytest.mark.parametrize(("method", "query"), [
    ("GET", {"torrent": [""]}), ("POST", {"select": [""], "select-type": ["2"]}),
    ("PUT", {"restore": [""]}), ("GET", {"acl": [""], "tagging": [""]})])
def test_a_sub_resource_the_rehearsal_does_not_know_is_refused(method, query):
    with pytest.raises(Unmapped):
        s3_call(method, "/embeds/uploads/a", query, Message())


def test_a_role_with_get_and_put_may_not_tag_or_read_attributes(proxy, bucket):
    arn = f"arn:aws:s3:::{bucket}"
    s3 = as_role(proxy, "s3", {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
                               "Resource": f"{arn}/*"})
    s3.put_object(Bucket=bucket, Key="a", Body=b"a")
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"a"
    assert "s3:PutObjectTagging" in refused(lambda: s3.put_object_tagging(
        Bucket=bucket, Key="a", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}))
    assert "s3:GetObjectAttributes" in refused(lambda: s3.get_object_attributes(
        Bucket=bucket, Key="a", ObjectAttributes=["ObjectSize"]))
    # nor set tags or an ACL with the put itself
    assert "s3:PutObjectTagging" in refused(lambda: s3.put_object(
        Bucket=bucket, Key="b", Body=b"b", Tagging="owner=mallory"))
    assert "s3:PutObjectAcl" in refused(lambda: s3.put_object(
        Bucket=bucket, Key="b", Body=b"b", ACL="public-read"))


SCHEMA = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]


def test_a_put_is_held_to_the_encryption_its_header_asks_for(proxy, bucket):
    """s3:x-amz-server-side-encryption from the request's header: the classic "deny
    unencrypted uploads", which also denies a put without the header (StringNotEquals
    holds for a key the request does not carry)."""
    arn = f"arn:aws:s3:::{bucket}"
    s3 = as_role(proxy, "s3", {"Effect": "Allow", "Action": "s3:PutObject",
                               "Resource": f"{arn}/*"}, {
        "Sid": "EncryptedOnly", "Effect": "Deny", "Action": "s3:PutObject",
        "Resource": f"{arn}/*",
        "Condition": {"StringNotEquals": {"s3:x-amz-server-side-encryption": "aws:kms"}}})
    s3.put_object(Bucket=bucket, Key="a", Body=b"a", ServerSideEncryption="aws:kms")
    assert "EncryptedOnly" in refused(lambda: s3.put_object(
        Bucket=bucket, Key="b", Body=b"b", ServerSideEncryption="AES256"))
    refused(lambda: s3.put_object(Bucket=bucket, Key="c", Body=b"c"))


@pytest.fixture
def table(moto_server: Any) -> str:
    name = f"notes-{uuid.uuid4().hex[:12]}"
    client(moto_server.endpoint_url, "dynamodb").create_table(
        TableName=name, KeySchema=SCHEMA, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"}])
    return name


def test_a_grant_on_the_caller_s_own_items_refuses_another_s(proxy, table):
    """Fine-grained access: LeadingKeys, Attributes and ReturnValues, each derived from the
    request the SDK sends (the table's partition key as deploy.py tells the proxy)."""
    proxy.add_table(table, SCHEMA)
    db = as_role(proxy, "dynamodb", {
        "Effect": "Allow", "Resource": f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}",
        "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                   "dynamodb:Query"],
        "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["alice"],
                                                    "dynamodb:Attributes": ["pk", "sk", "text"]},
                      "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "ALL_OLD"]}}})

    def key(who: str) -> dict:
        return {"pk": {"S": who}, "sk": {"S": "n1"}}

    db.put_item(TableName=table, Item=key("alice") | {"text": {"S": "hi"}})
    db.update_item(TableName=table, Key=key("alice"), UpdateExpression="SET #t = :t",
                   ExpressionAttributeNames={"#t": "text"},
                   ExpressionAttributeValues={":t": {"S": "hello"}}, ReturnValues="ALL_OLD")
    assert db.get_item(TableName=table, Key=key("alice"))["Item"]["text"] == {"S": "hello"}
    mine = db.query(TableName=table, KeyConditionExpression="pk = :p",
                    ExpressionAttributeValues={":p": {"S": "alice"}})
    assert mine["Count"] == 1
    assert "dynamodb:PutItem" in refused(lambda: db.put_item(TableName=table, Item=key("bob")))
    refused(lambda: db.get_item(TableName=table, Key=key("bob")))
    refused(lambda: db.query(TableName=table, KeyConditionExpression="pk = :p",
                             ExpressionAttributeValues={":p": {"S": "bob"}}))
    refused(lambda: db.update_item(TableName=table, Key=key("alice"),
                                   UpdateExpression="SET secret = :s",
                                   ExpressionAttributeValues={":s": {"S": "x"}}))
    refused(lambda: db.update_item(TableName=table, Key=key("alice"),
                                   UpdateExpression="SET #t = :t",
                                   ExpressionAttributeNames={"#t": "text"},
                                   ExpressionAttributeValues={":t": {"S": "x"}},
                                   ReturnValues="ALL_NEW"))
    assert db.get_item(TableName=table, Key=key("alice"))["Item"] == key("alice") | {
        "text": {"S": "hello"}}  # nothing refused was written


def test_a_condition_on_a_key_the_proxy_cannot_derive_refuses_naming_it(proxy, table):
    """Loudly, where moto's evaluator passed the grant whatever the request held."""
    db = as_role(proxy, "dynamodb", {
        "Effect": "Allow", "Action": "dynamodb:GetItem",
        "Resource": f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}",
        "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}})
    message = refused(lambda: db.get_item(TableName=table,
                                          Key={"pk": {"S": "a"}, "sk": {"S": "b"}}))
    assert "aws:sourceip" in message
    (denial,) = proxy.log.denials
    assert "aws:sourceip" in str(denial)


def test_the_rehearsal_answers_describe_stacks_of_its_stacks_to_a_role_granted_it(proxy):
    """It is the functions' CloudFormation (moto's knows none of its stacks): a stack it
    deploys is described with its status now, to the role granted that stack alone."""
    own = "arn:aws:cloudformation:us-east-1:123456789012:stack/Codeshot/0000"
    other = "arn:aws:cloudformation:us-east-1:123456789012:stack/Other/0000"
    proxy.stack_statuses |= {own: "CREATE_IN_PROGRESS", other: "CREATE_COMPLETE"}
    cloudformation = as_role(proxy, "cloudformation", {
        "Effect": "Allow", "Action": "cloudformation:DescribeStacks", "Resource": own})
    (stack,) = cloudformation.describe_stacks(StackName=own)["Stacks"]
    assert (stack["StackName"], stack["StackStatus"]) == ("Codeshot", "CREATE_IN_PROGRESS")
    proxy.stack_statuses[own] = "CREATE_COMPLETE"
    assert cloudformation.describe_stacks(StackName=own)["Stacks"][0]["StackStatus"] == \
        "CREATE_COMPLETE"
    assert "cloudformation:DescribeStacks" in refused(
        lambda: cloudformation.describe_stacks(StackName=other))
    with pytest.raises(ClientError, match="does not exist"):
        as_role(proxy, "cloudformation", {"Effect": "Allow", "Action": "cloudformation:*",
                                          "Resource": "*"}).describe_stacks(
            StackName=own.replace("Codeshot", "Gone"))
    with pytest.raises(Unmapped):  # by name: IAM authorizes the stack's ARN
        describe("cloudformation", "POST", "/", {}, {}, b"Action=DescribeStacks&StackName=S",
                 str)
