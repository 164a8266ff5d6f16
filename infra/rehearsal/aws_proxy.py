"""The AWS endpoint the rehearsed functions see: every call is checked against the
caller's role policy from the template, counted, then passed on to moto's server (but a
DescribeStacks of a stack the rehearsal deploys, which it answers: it is their
CloudFormation).

The caller is known from the access key in the request's SigV4 signature (or in a
presigned URL's ``X-Amz-Credential``: S3 authorizes a presigned request as its signer, so
an embed upload is checked against the API's role). Each request becomes the IAM actions
and resource ARNs AWS would authorize (a DynamoDB transaction is one action per item, a
presigned PUT is ``s3:PutObject`` on ``arn:aws:s3:::bucket/key`` ...) with the condition
keys AWS derives from the request (:mod:`.request_context`), evaluated against the role's
policies and the Deny statements of the bucket's or queue's policy
(:mod:`.policy`). A call the rehearsal cannot map is refused too, and so is one whose
decision needs a condition key it does not derive: nothing reaches moto unchecked, but for
the Cognito calls AWS takes unsigned (SignUp, InitiateAuth ...: anyone may make them).

A GET or HEAD of a missing object answers 403, not moto's 404, unless the caller may
``s3:ListBucket`` the bucket with no ``s3:prefix`` in the request (AWS: "if you don't have
the s3:ListBucket permission, Amazon S3 returns 403"; whether a grant limited to a prefix
counts is not documented, so the rehearsal takes the stricter reading).

Not evaluated (stated in the printout): the Allow statements of resource policies,
permission boundaries, SCPs, session policies.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from infra.rehearsal.assembly import ACCOUNT, PARTITION, REGION
from infra.rehearsal.loopback import LoopbackServer, reply
from infra.rehearsal.policy import Decision, Request, decide
from infra.rehearsal.request_context import (
    Values,
    dynamodb_context,
    global_context,
    s3_context,
    s3_header,
    s3_list_context,
    s3_put_context,
)

CLOUDFORMATION_XMLNS = "http://cloudformation.amazonaws.com/doc/2010-05-15/"
STACK_CREATED = "2026-01-01T00:00:00Z"  # any time: the rehearsal creates each stack once
CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/\d{8}/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request")


@dataclass(frozen=True)
class Check:
    """One action on one resource, with the condition keys the request carries."""

    action: str
    resource: str
    context: Mapping[str, Values] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Call:
    service: str
    operation: str
    checks: tuple[Check, ...]


@dataclass
class Principal:
    """Who calls: a function (or an event source) with its role's policy documents."""

    name: str
    role: str
    policies: list[dict[str, Any]]

    @property
    def arn(self) -> str:
        return f"arn:{PARTITION}:iam::{ACCOUNT}:role/{self.role}"


@dataclass(frozen=True)
class Denial:
    principal: str
    action: str
    resource: str
    reason: str = "no identity-based policy allows the action"

    def __str__(self) -> str:
        return f"{self.principal} may not {self.action} on {self.resource} ({self.reason})"


class Unmapped(Exception):
    pass


def _table_arn(name: str) -> str:
    return name if name.startswith("arn:") else \
        f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"


def queue_arn(url: str) -> str:
    account, name = urlsplit(url).path.strip("/").split("/")[-2:]
    return f"arn:{PARTITION}:sqs:{REGION}:{account}:{name}"


def _pool_arn(pool_id: str) -> str:
    return f"arn:{PARTITION}:cognito-idp:{REGION}:{ACCOUNT}:userpool/{pool_id}"


def public_operation(target: str) -> str | None:
    """The Cognito operation ``target`` names if it is one AWS takes unsigned (SignUp,
    InitiateAuth ...: the console's accounts, authorised by the app client, not IAM)."""
    service, _, operation = target.rpartition(".")
    if service != "AWSCognitoIdentityProviderService":
        return None
    model = _cognito_model()
    if operation not in model.operation_names:
        return None
    return operation if model.operation_model(operation).auth_type == "none" else None


@cache
def _cognito_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("cognito-idp")


def dynamodb_checks(operation: str, body: dict[str, Any],
                    partition_keys: Mapping[str, str] = MappingProxyType({})) -> list[Check]:
    """One check per table (per item in a transaction), with its ``dynamodb:*`` keys;
    ``partition_keys``: each table's partition key attribute, by name."""
    def check(action: str, table: str, request: dict[str, Any], items: list[Any],
              enclosing: str | None = None) -> Check:
        index = request.get("IndexName")
        key = None if operation == "Scan" or index else \
            partition_keys.get(table.rsplit("/", 1)[-1])
        arn = _table_arn(table) + (f"/index/{index}" if index else "")
        return Check(f"dynamodb:{action}", arn, dynamodb_context(
            action, request | {"ReturnConsumedCapacity": body.get("ReturnConsumedCapacity")},
            key, items=items, enclosing=enclosing))

    if operation == "BatchGetItem":
        return [check(operation, t, r, r["Keys"]) for t, r in body["RequestItems"].items()]
    if operation == "BatchWriteItem":
        return [check(operation, t, {}, [w.get("PutRequest", {}).get("Item") or
                                         w["DeleteRequest"]["Key"] for w in writes])
                for t, writes in body["RequestItems"].items()]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        actions = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                   "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
        return [check(actions[kind], request["TableName"], request,
                      [request.get("Item") or request["Key"]], enclosing=operation)
                for item in body["TransactItems"] for kind, request in item.items()]
    if "TableName" not in body:
        raise Unmapped(f"dynamodb {operation} without a table")
    return [check(operation, body["TableName"], body,
                  [body[k] for k in ("Key", "Item") if k in body])]


def sqs_checks(operation: str, params: dict[str, Any]) -> list[Check]:
    if "QueueUrl" in params:
        return [Check(f"sqs:{operation}", queue_arn(params["QueueUrl"]))]
    if "QueueName" in params:
        return [Check(f"sqs:{operation}",
                      f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{params['QueueName']}")]
    raise Unmapped(f"sqs {operation} without a queue")


def s3_call(method: str, path: str, query: dict[str, list[str]], headers: Any) -> Call:
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    if not bucket:
        raise Unmapped(f"s3 {method} /")
    bucket_arn = f"arn:{PARTITION}:s3:::{bucket}"
    signed = s3_context(headers, query)
    if not key:
        if method in ("GET", "HEAD") and not (set(query) - {"list-type", "prefix", "delimiter",
                                                           "max-keys", "continuation-token",
                                                           "start-after", "encoding-type"}):
            listing = s3_list_context(query if method == "GET" else {})
            return Call("s3", "ListObjectsV2" if method == "GET" else "HeadBucket",
                        (Check("s3:ListBucket", bucket_arn, signed | listing),))
        if method == "GET" and "versions" in query and not (set(query) - {
                "versions", "prefix", "delimiter", "max-keys", "key-marker",
                "version-id-marker", "encoding-type"}):
            return Call("s3", "ListObjectVersions", (Check(
                "s3:ListBucketVersions", bucket_arn, signed | s3_list_context(query)),))
        raise Unmapped(f"s3 bucket request {method} ?{'&'.join(query)}")
    object_arn = f"{bucket_arn}/{key}"
    names = {name for name in query
             if name not in OBJECT_PARAMETERS and not name.lower().startswith("x-amz-")}
    if len(names) > 1:
        raise Unmapped(f"s3 object request {method} ?{'&'.join(sorted(query))}")
    subresource = next(iter(names), "")
    source = _copy_source(s3_header(headers, query, "x-amz-copy-source"), signed) \
        if method == "PUT" else ()
    if (method, subresource) in MULTIPART_WRITES:
        put = Check("s3:PutObject", object_arn, signed | (
            s3_put_context(headers, query, creates=MULTIPART_WRITES[method, subresource])))
        # only the upload's start sets the object's tags, ACL and lock (parts carry none)
        return Call("s3", "MultipartUpload", (put, *source, *(_also_sets(
            put, headers, query, copy=False) if subresource == "uploads" else ())))
    if method == "PUT" and not subresource:
        put = Check("s3:PutObject", object_arn, signed | s3_put_context(
            headers, query, creates=True, copy=bool(source)))
        return Call("s3", "CopyObject" if source else "PutObject", (
            put, *source, *_also_sets(put, headers, query, copy=bool(source))))
    known = OBJECT_SUBRESOURCES.get((method, subresource))
    if known is None:
        raise Unmapped(f"s3 object request {method} ?{subresource}")
    operation, actions, of_version = known
    # DeleteObject: "To use this header, you must have the s3:BypassGovernanceRetention
    # permission" (S3 API reference; the same for PutObjectRetention)
    bypass = ("s3:BypassGovernanceRetention",) if s3_header(
        headers, query, "x-amz-bypass-governance-retention") and (method, subresource) in (
        ("DELETE", ""), ("PUT", "retention")) else ()
    return Call("s3", operation, tuple(Check(action, object_arn, signed) for action in (
        of_version if "versionId" in query else actions) + bypass))


# An object request's parameters that name no other operation (its other ones but the
# presigned x-amz-* do: a sub-resource): a version, a part, a response override, a list
# of parts' page, the operation some SDKs name (x-id).
OBJECT_PARAMETERS = frozenset({
    "versionId", "partNumber", "max-parts", "part-number-marker", "x-id",
    "response-cache-control", "response-content-disposition", "response-content-encoding",
    "response-content-language", "response-content-type", "response-expires"})
# A multipart upload's writes, all s3:PutObject (CreateMultipartUpload, UploadPart and
# UploadPartCopy, CompleteMultipartUpload), by method and sub-resource: whether it creates
# the object.
MULTIPART_WRITES = {("POST", "uploads"): False, ("PUT", "uploadId"): False,
                    ("POST", "uploadId"): True}
# By method and sub-resource ("": none): the operation, the actions AWS authorizes it as,
# and those with a versionId. A put, a copy and a multipart upload's writes are s3_call's.
OBJECT_SUBRESOURCES: dict[tuple[str, str], tuple[str, Values, Values]] = {
    ("GET", ""): ("GetObject", ("s3:GetObject",), ("s3:GetObjectVersion",)),
    ("HEAD", ""): ("HeadObject", ("s3:GetObject",), ("s3:GetObjectVersion",)),
    ("DELETE", ""): ("DeleteObject", ("s3:DeleteObject",), ("s3:DeleteObjectVersion",)),
    ("GET", "acl"): ("GetObjectAcl", ("s3:GetObjectAcl",), ("s3:GetObjectVersionAcl",)),
    ("PUT", "acl"): ("PutObjectAcl", ("s3:PutObjectAcl",), ("s3:PutObjectVersionAcl",)),
    ("GET", "tagging"): ("GetObjectTagging", ("s3:GetObjectTagging",),
                         ("s3:GetObjectVersionTagging",)),
    ("PUT", "tagging"): ("PutObjectTagging", ("s3:PutObjectTagging",),
                         ("s3:PutObjectVersionTagging",)),
    ("DELETE", "tagging"): ("DeleteObjectTagging", ("s3:DeleteObjectTagging",),
                            ("s3:DeleteObjectVersionTagging",)),
    # "you need the s3:GetObject and s3:GetObjectAttributes permissions" (S3 API reference)
    ("GET", "attributes"): ("GetObjectAttributes", ("s3:GetObject", "s3:GetObjectAttributes"),
                            ("s3:GetObjectVersion", "s3:GetObjectVersionAttributes")),
    ("GET", "retention"): ("GetObjectRetention", ("s3:GetObjectRetention",),
                           ("s3:GetObjectRetention",)),
    ("PUT", "retention"): ("PutObjectRetention", ("s3:PutObjectRetention",),
                           ("s3:PutObjectRetention",)),
    ("GET", "legal-hold"): ("GetObjectLegalHold", ("s3:GetObjectLegalHold",),
                            ("s3:GetObjectLegalHold",)),
    ("PUT", "legal-hold"): ("PutObjectLegalHold", ("s3:PutObjectLegalHold",),
                            ("s3:PutObjectLegalHold",)),
    ("POST", "restore"): ("RestoreObject", ("s3:RestoreObject",), ("s3:RestoreObject",)),
    ("GET", "uploadId"): ("ListParts", ("s3:ListMultipartUploadParts",),
                          ("s3:ListMultipartUploadParts",)),
    ("DELETE", "uploadId"): ("AbortMultipartUpload", ("s3:AbortMultipartUpload",),
                             ("s3:AbortMultipartUpload",)),
}


# A write's headers (or a presigned URL's parameters) that set what AWS authorizes as an
# action of its own. PutObject: "To successfully set the tag-set with your PutObject request,
# you must have the s3:PutObjectTagging" (and s3:PutObjectAcl for its ACL); Object Lock's
# retention and legal hold are s3:PutObjectRetention and s3:PutObjectLegalHold.
SETTING_HEADERS = {
    "x-amz-tagging": "s3:PutObjectTagging", "x-amz-acl": "s3:PutObjectAcl",
    "x-amz-grant-read": "s3:PutObjectAcl", "x-amz-grant-read-acp": "s3:PutObjectAcl",
    "x-amz-grant-write-acp": "s3:PutObjectAcl", "x-amz-grant-full-control": "s3:PutObjectAcl",
    "x-amz-object-lock-mode": "s3:PutObjectRetention",
    "x-amz-object-lock-retain-until-date": "s3:PutObjectRetention",
    "x-amz-object-lock-legal-hold": "s3:PutObjectLegalHold"}
# Object Lock's event hold: IAM documents no action for it, so the rehearsal cannot check it.
EVENT_HOLD = "x-amz-object-lock-event-hold"


def _also_sets(put: Check, headers: Any, query: Mapping[str, list[str]], *,
               copy: bool) -> tuple[Check, ...]:
    """The actions a put, a copy or a multipart upload's start also needs for what its
    headers set, each on the object with the put's keys. A copy that replaces its source's
    tags sets them (``x-amz-tagging-directive: REPLACE``, even to none)."""
    if any(name.lower().startswith(EVENT_HOLD) for name in [*headers.keys(), *query]):
        raise Unmapped(f"s3 write with an {EVENT_HOLD} header")
    replaces = copy and (s3_header(headers, query, "x-amz-tagging-directive") or "").upper() \
        == "REPLACE"
    actions = dict.fromkeys(action for name, action in SETTING_HEADERS.items()
                            if s3_header(headers, query, name) or (
                                replaces and action == "s3:PutObjectTagging"))
    return tuple(Check(action, put.resource, put.context) for action in actions)


def _copy_source(header: str | None, signed: Mapping[str, Values]) -> tuple[Check, ...]:
    """The read of a copy's source (CopyObject, UploadPartCopy): ``/bucket/key``, with
    ``?versionId=`` a read of that version. A header, or a presigned URL's parameter (as
    its other ``x-amz-*`` ones: read, so that it cannot pass unchecked either way)."""
    if not header:
        return ()
    path, _, parameters = header.partition("?")
    version = parse_qs(parameters, keep_blank_values=True)
    if header.startswith("arn:") or set(version) - {"versionId"}:
        raise Unmapped(f"s3 copy source {header}")
    return (Check("s3:GetObjectVersion" if version else "s3:GetObject",
                  f"arn:{PARTITION}:s3:::{unquote(path).lstrip('/')}", signed),)


def _model_arns(model: str) -> list[str]:
    """What Bedrock authorizes a call on ``model`` as: an inference profile and the model
    it routes to (here, in this region), or the model."""
    from codeshot.llm.bedrock import INFERENCE_PROFILE_PREFIXES

    if model.startswith("arn:"):
        return [model]
    if model.startswith(INFERENCE_PROFILE_PREFIXES):
        return [f"arn:{PARTITION}:bedrock:{REGION}:{ACCOUNT}:inference-profile/{model}",
                f"arn:{PARTITION}:bedrock:{REGION}::foundation-model/{model.split('.', 1)[1]}"]
    return [f"arn:{PARTITION}:bedrock:{REGION}::foundation-model/{model}"]


def describe(service: str, method: str, path: str, query: dict[str, list[str]],
             headers: Any, body: bytes, secret_arn: Callable[[str], str],
             partition_keys: Mapping[str, str] = MappingProxyType({})) -> Call:
    """The IAM actions and resources of one request, with its condition keys."""
    if service == "s3":
        return s3_call(method, path, query, headers)
    target = headers.get("x-amz-target", "")
    if service == "bedrock":  # bedrock-runtime signs as "bedrock"
        match = re.match(r"/model/([^/]+)/(invoke|converse)", unquote(path))
        if not match:
            raise Unmapped(f"bedrock {path}")
        return Call("bedrock-runtime", match.group(2).title(), tuple(
            Check("bedrock:InvokeModel", arn) for arn in _model_arns(match.group(1))))
    if target:
        operation = target.rsplit(".", 1)[-1]
        params = json.loads(body or b"{}")
    else:  # query protocol (form-encoded Action=...)
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()} | \
            {k: v[0] for k, v in query.items()}
        operation, params = form.get("Action", ""), form
    if service == "cloudformation" and operation == "DescribeStacks" and \
            params.get("StackName", "").startswith("arn:"):  # a name: IAM needs the ARN
        return Call(service, operation, (Check("cloudformation:DescribeStacks",
                                               params["StackName"]),))
    if service == "sts" and operation == "GetCallerIdentity":
        return Call("sts", operation, ())  # allowed to everyone, as in AWS
    if service == "dynamodb":
        return Call(service, operation, tuple(dynamodb_checks(operation, params,
                                                                 partition_keys)))
    if service == "sqs":
        return Call(service, operation, tuple(sqs_checks(operation, params)))
    if service == "cognito-idp" and "UserPoolId" in params:  # Admin*, ListUsers
        return Call(service, operation, (Check(f"cognito-idp:{operation}", _pool_arn(
            params["UserPoolId"])),))
    secret = params.get("SecretId") or (params.get("Name") if operation == "CreateSecret"
                                        else None)
    if service == "secretsmanager" and secret:
        return Call(service, operation, (Check(f"secretsmanager:{operation}",
                                               secret_arn(secret)),))
    raise Unmapped(f"{service} {operation or method + ' ' + path}")


# AWS puts six random characters after a secret's name in its ARN, the resource IAM
# authorizes: a policy must allow for them (a wildcard), as it must in AWS.
SECRET_ARN_SUFFIX = "-Rh3ars"  # noqa: S105  (part of a name, not a secret)


def secret_resource(known: dict[str, str], secret_id: str) -> str:
    """What IAM authorizes a call on ``secret_id`` (a name or an ARN) as: the ARN of one of
    the stack's secrets (``known``: by name), or of one a function names at run time (an
    agent's, ``codeshot/store/agent_secrets.py``)."""
    if secret_id.startswith("arn:"):
        return secret_id
    return known.get(secret_id) or (
        f"arn:{PARTITION}:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret_id}"
        f"{SECRET_ARN_SUFFIX}")


def authorize(principal: Principal, check: Check, region: str = REGION,
              resource_policies: Mapping[str, list[dict[str, Any]]] = MappingProxyType({})
              ) -> Decision:
    """``check`` by ``principal``: its role's policies, the Deny statements of the policy
    of the bucket or queue it is on (``resource_policies``: by that resource's ARN), and
    the request's condition keys with the global ones of a call from the role."""
    owner = check.resource.split("/", 1)[0] if ":s3:::" in check.resource else check.resource
    context = global_context(principal.arn, ACCOUNT, region) | dict(check.context)
    return decide(principal.policies, resource_policies.get(owner, []),
                  Request(check.action, check.resource, context, principal.arn, ACCOUNT))


@dataclass
class CallLog:
    """Counts of allowed calls by (principal, service, operation), and every denial."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    denials: list[Denial] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> Counter[tuple[str, str, str]]:
        with self.lock:
            return Counter(self.counts)


class AwsProxy:
    """A loopback HTTP endpoint in front of moto's server (``AWS_ENDPOINT_URL``)."""

    def __init__(self, moto_url: str, secret_arn: Callable[[str], str]) -> None:
        self.moto = urlsplit(moto_url)
        self.secret_arn = secret_arn
        self.principals: dict[str, Principal] = {}
        self.partition_keys: dict[str, str] = {}
        self.resource_policies: dict[str, list[dict[str, Any]]] = {}
        # The rehearsal is the functions' CloudFormation: stack id -> its status now.
        self.stack_statuses: dict[str, str] = {}
        self.log = CallLog()
        self.loopback = LoopbackServer(self.handle)
        self.url = self.loopback.url

    def stop(self) -> None:
        self.loopback.stop()

    def add_principal(self, access_key: str, principal: Principal) -> None:
        self.principals[access_key] = principal

    def add_table(self, name: str, key_schema: list[dict[str, str]]) -> None:
        """A table's partition key, for ``dynamodb:LeadingKeys``."""
        self.partition_keys[name] = next(k["AttributeName"] for k in key_schema
                                         if k["KeyType"] == "HASH")

    def add_resource_policy(self, arn: str, document: dict[str, Any]) -> None:
        """A bucket's or queue's policy (``arn``: the bucket's or queue's)."""
        self.resource_policies.setdefault(arn, []).append(document)

    # -- one request ----------------------------------------------------------------------
    def handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = _read_chunked(request)
        signed = request.headers.get("Authorization", "") + " Credential=" + \
            query.get("X-Amz-Credential", [""])[0]
        match = CREDENTIAL.search(signed.replace("%2F", "/"))
        principal = self.principals.get(match.group(1)) if match else None
        public = public_operation(request.headers.get("X-Amz-Target", ""))
        if match is None and public:  # Cognito's SignUp ...: anyone may, as in AWS
            with self.log.lock:
                self.log.counts[("unsigned", "cognito-idp", public)] += 1
            return self._forward(request, body)
        if principal is None or match is None:
            return self._deny(request, "unknown", "(unsigned or unknown credentials)",
                              request.path, "the credentials are no function's", s3=True)
        service = match.group(3)
        try:
            call = describe(service, request.command, parts.path, query, request.headers,
                            body, self.secret_arn, self.partition_keys)
        except (Unmapped, KeyError, ValueError) as exc:
            with self.log.lock:
                self.log.unmapped.append(f"{principal.name}: {exc}")
            return self._deny(request, principal.name, f"{service}:?", str(exc),
                              "the rehearsal cannot map the request", s3=service == "s3")
        region = match.group(2)
        for check in call.checks:
            decision = authorize(principal, check, region, self.resource_policies)
            if not decision.allowed:
                with self.log.lock:
                    self.log.denials.append(Denial(principal.name, check.action, check.resource,
                                                   decision.reason))
                return self._deny(request, principal.role, check.action, check.resource,
                                  decision.reason, s3=service == "s3", json_protocol=
                                  "x-amz-target" in {k.lower() for k in request.headers})
        with self.log.lock:
            self.log.counts[(principal.name, call.service, call.operation)] += 1
        if call.operation in ("GetObject", "HeadObject"):
            listing = Check("s3:ListBucket", call.checks[0].resource.split("/", 1)[0],
                            s3_context(request.headers, query) | s3_list_context({}))
            missing_is_403 = not authorize(principal, listing, region,
                                           self.resource_policies).allowed
            return self._forward(request, body, missing_is_403=missing_is_403)
        if call.service == "cloudformation":
            return self._describe_stack(request, call.checks[0].resource)
        self._forward(request, body)

    def _describe_stack(self, request: BaseHTTPRequestHandler, stack_id: str) -> None:
        """DescribeStacks of a stack the rehearsal deploys, in CloudFormation's XML."""
        status = self.stack_statuses.get(stack_id)
        if status is None:
            data = (f"<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code>"
                    f"<Message>Stack with id {stack_id} does not exist</Message></Error>"
                    f"</ErrorResponse>").encode()
            return reply(request, 400, data, [("Content-Type", "text/xml")])
        name = stack_id.split(":stack/", 1)[1].split("/", 1)[0]
        data = (f'<DescribeStacksResponse xmlns="{CLOUDFORMATION_XMLNS}"><DescribeStacksResult>'
                f"<Stacks><member><StackId>{stack_id}</StackId><StackName>{name}</StackName>"
                f"<CreationTime>{STACK_CREATED}</CreationTime><StackStatus>{status}"
                f"</StackStatus></member></Stacks></DescribeStacksResult><ResponseMetadata>"
                f"<RequestId>rehearsal</RequestId></ResponseMetadata></DescribeStacksResponse>"
                ).encode()
        reply(request, 200, data, [("Content-Type", "text/xml")])

    def _forward(self, request: BaseHTTPRequestHandler, body: bytes, *,
                 missing_is_403: bool = False) -> None:
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("connection", "transfer-encoding", "content-length")}
        headers["Content-Length"] = str(len(body))
        connection = http.client.HTTPConnection(self.moto.netloc, timeout=60)
        try:
            connection.request(request.command, request.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            # A missing key, not a missing bucket (404 whoever asks); HEAD has no body.
            if response.status == 404 and missing_is_403 and (
                    request.command == "HEAD" or b"<Code>NoSuchKey</Code>" in data):
                return reply(request, 403, b"<Error><Code>AccessDenied</Code><Message>Access "
                             b"Denied</Message></Error>", [("Content-Type", "application/xml")])
            reply(request, response.status, data, [
                (k, v) for k, v in response.getheaders() if k.lower() not in ("server", "date")])
        finally:
            connection.close()

    @staticmethod
    def _deny(request: BaseHTTPRequestHandler, who: str, action: str, resource: str,
              reason: str, *, s3: bool = False, json_protocol: bool = False) -> None:
        message = (f"User: arn:{PARTITION}:sts::{ACCOUNT}:assumed-role/{who} is not "
                   f"authorized to perform: {action} on resource: {resource} because "
                   f"{reason}")
        if json_protocol:
            data = json.dumps({"__type": "AccessDeniedException", "message": message}).encode()
            status, content_type = 400, "application/x-amz-json-1.0"
        else:
            tag = "Error" if s3 else "ErrorResponse><Error"
            close = "Error" if s3 else "Error></ErrorResponse"
            data = (f"<{tag}><Code>AccessDenied</Code><Message>{message}</Message></{close}>"
                    ).encode()
            status, content_type = 403, "application/xml"
        reply(request, status, data, [("Content-Type", content_type)])


def _read_chunked(request: BaseHTTPRequestHandler) -> bytes:
    out = b""
    while True:
        size = int(request.rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            request.rfile.readline()
            return out
        out += request.rfile.read(size)
        request.rfile.readline()
