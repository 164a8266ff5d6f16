"""The condition keys of one AWS request, derived from the request as AWS derives them,
for :mod:`infra.rehearsal.policy`.

Each function returns the keys it derives, each with its values (``()``: the request does
not carry the key, e.g. a ListObjects without a prefix). A key left out is one the
rehearsal does not derive for that request: a statement conditioned on it refuses the
call, naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Values = tuple[str, ...]
Context = dict[str, Values]


def global_context(principal_arn: str, account: str, region: str) -> Context:
    """The global keys of a function's direct call with its role's session.

    ``aws:SecureTransport`` is true: the rehearsal's loopback hop is plain HTTP, but it
    stands for AWS's HTTPS endpoints, the only ones a deployed SDK (or a presigned URL it
    signs) uses. No service calls on anyone's behalf, so the source and via keys are absent.
    """
    return {
        "aws:SecureTransport": ("true",), "aws:RequestedRegion": (region,),
        "aws:PrincipalArn": (principal_arn,), "aws:PrincipalAccount": (account,),
        "aws:PrincipalType": ("AssumedRole",), "aws:ResourceAccount": (account,),
        "aws:username": (), "aws:SourceArn": (), "aws:SourceAccount": (),
        "aws:ViaAWSService": ("false",), "aws:CalledVia": (),
    }


# -- DynamoDB -----------------------------------------------------------------------------
# A name in an expression: a path's top level (not after "." or within a placeholder), not a
# function (followed by "(").
EXPRESSION_NAMES = re.compile(r"(?<![\w.#:])(#\w+|[A-Za-z_]\w*)(?!\w|\s*\()")
# The grammar's words; reserved, so an attribute so named is always written as a #name.
KEYWORDS = frozenset({"set", "remove", "add", "delete", "and", "or", "not", "between", "in"})
# All an expression is made of: names, placeholders, paths, comparators, + and -.
EXPRESSION_TEXT = re.compile(r"[\w\s#:.,()\[\]=<>+-]*")
EXPRESSIONS = ("ProjectionExpression", "UpdateExpression", "ConditionExpression",
               "FilterExpression", "KeyConditionExpression")
# The legacy parameters, each a list or a map of attribute names.
LEGACY_NAMES = ("AttributesToGet", "AttributeUpdates", "Expected", "QueryFilter", "ScanFilter",
                "KeyConditions")
KEY_EQUALITY = re.compile(r"^\(?\s*(#?\w+)\s*=\s*(:\w+)\s*\)?$|^\(?\s*(:\w+)\s*=\s*(#?\w+)\s*\)?$")
READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan"})
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


def dynamodb_context(action: str, request: Mapping[str, Any], partition_key: str | None, *,
                     items: list[Mapping[str, Any]], enclosing: str | None = None) -> Context:
    """``dynamodb:*`` keys of ``action`` (``GetItem`` ...) on one table (one item of a
    transaction, or one table's part of a batch): ``items`` are its keys or items (``Key``,
    ``Item``, a batch's ``Keys``), ``partition_key`` the table's. LeadingKeys is derived from
    the items or a Query's key condition; not for a Scan or a read through an index
    (``partition_key`` None), nor for a request that names no partition value. Attributes
    are every attribute the request reads, writes or conditions on ("read, written, or
    evaluated in a conditional write or scan filter"); not derived where an expression holds
    what the rehearsal does not parse."""
    names = request.get("ExpressionAttributeNames") or {}
    expressed = _expression_names(request, names)
    context: Context = {
        "dynamodb:Select": _select(action, request),
        # "the ReturnValues parameter always has a value (NONE unless otherwise specified)"
        "dynamodb:ReturnValues": _present(request.get("ReturnValues") or (
            "NONE" if action in WRITES else None)),
        "dynamodb:ReturnConsumedCapacity": _present(request.get("ReturnConsumedCapacity")),
        "dynamodb:EnclosingOperation": _present(enclosing),
    }
    if expressed is not None:
        context["dynamodb:Attributes"] = tuple(sorted(
            {name for item in items for name in item} | expressed |
            {str(name) for key in LEGACY_NAMES for name in request.get(key) or ()}))
    leading = _leading_keys(request, partition_key, names, items)
    if leading is not None:
        context["dynamodb:LeadingKeys"] = tuple(sorted(set(leading)))
    return context


def _expression_names(request: Mapping[str, Any], names: Mapping[str, str]) -> set[str] | None:
    """The top-level attributes the request's expressions name (``#t`` as the name it stands
    for), or None if one holds what the grammar does not, or an undefined ``#name``."""
    found: set[str] = set()
    for field in EXPRESSIONS:
        expression = request.get(field) or ""
        if not EXPRESSION_TEXT.fullmatch(expression):
            return None
        for name in EXPRESSION_NAMES.findall(expression):
            if name.startswith("#") and name not in names:
                return None
            if name.lower() not in KEYWORDS:
                found.add(names.get(name, name))
    return found


def _select(action: str, request: Mapping[str, Any]) -> Values:
    """A read's Select, as DynamoDB fills it in when the request leaves it out ("the Select
    parameter always has a value"): the projection's attributes, or all of the table's (of
    the index's projection, through an index)."""
    if request.get("Select") or action not in READS:
        return _present(request.get("Select"))
    if request.get("ProjectionExpression") or request.get("AttributesToGet"):
        return ("SPECIFIC_ATTRIBUTES",)
    return ("ALL_PROJECTED_ATTRIBUTES" if request.get("IndexName") else "ALL_ATTRIBUTES",)


def _leading_keys(request: Mapping[str, Any], partition_key: str | None,
                  names: Mapping[str, str], items: list[Mapping[str, Any]]) -> list[str] | None:
    if partition_key is None:
        return None
    if "KeyConditionExpression" in request or "KeyConditions" in request:
        return _queried_partition(request, partition_key, names)
    if items and all(partition_key in item for item in items):
        return [_scalar(item[partition_key]) for item in items]
    return None


def _present(value: str | None) -> Values:
    return (value,) if value else ()


def _scalar(value: Mapping[str, Any]) -> str:
    return str(next(iter(value.values())))


def _queried_partition(request: Mapping[str, Any], partition_key: str,
                       names: Mapping[str, str]) -> list[str] | None:
    """The partition value a Query names (its key condition's equality), or None."""
    values = request.get("ExpressionAttributeValues") or {}
    for clause in re.split(r"\s+AND\s+", request.get("KeyConditionExpression", ""),
                           flags=re.IGNORECASE):
        match = KEY_EQUALITY.match(clause.strip())
        if match:
            name, placeholder = (match.group(1), match.group(2)) if match.group(1) else \
                (match.group(4), match.group(3))
            if names.get(name, name) == partition_key and placeholder in values:
                return [_scalar(values[placeholder])]
    condition = (request.get("KeyConditions") or {}).get(partition_key)
    if condition and condition.get("ComparisonOperator") == "EQ":
        return [_scalar(condition["AttributeValueList"][0])]
    return None


# -- S3 -----------------------------------------------------------------------------------
LIST_PARAMETERS = ("prefix", "delimiter", "max-keys")
PUT_HEADERS = ("x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id",
               "x-amz-acl", "x-amz-storage-class", "if-none-match", "if-match")
COPY_HEADERS = ("x-amz-copy-source", "x-amz-metadata-directive")


def s3_context(headers: Any, query: Mapping[str, list[str]]) -> Context:
    """The keys of every S3 request: how it is signed, its payload hash."""
    return {
        "s3:authType": ("REST-HEADER" if headers.get("Authorization") else
                        "REST-QUERY-STRING",),
        "s3:signatureversion": ("AWS4-HMAC-SHA256",),
        "s3:x-amz-content-sha256": _present(headers.get("x-amz-content-sha256")
                                            or _first(query, "X-Amz-Content-Sha256")),
    }


def s3_list_context(query: Mapping[str, list[str]]) -> Context:
    """A ListObjects(V2) request's parameters (none for HeadBucket). An empty one is the
    empty string, as AWS's root-listing example (``"s3:prefix": ["", "home/"]``) reads
    ``?prefix=``."""
    return {f"s3:{name}": tuple(query.get(name, ())[:1]) for name in LIST_PARAMETERS}


def s3_put_context(headers: Any, query: Mapping[str, list[str]], *, creates: bool,
                   copy: bool = False) -> Context:
    """A write's headers (its ``x-amz-*`` ones also from a presigned URL's parameters; the
    HTTP conditional headers, If-None-Match and If-Match, only as headers), and whether it
    creates the object (PutObject, CopyObject, CompleteMultipartUpload:
    ``s3:ObjectCreationOperation``; not a multipart upload's start or its parts)."""
    names = PUT_HEADERS + (COPY_HEADERS if copy else ())
    return {f"s3:{name}": _present(s3_header(headers, query, name) if name.startswith(
        "x-amz-") else headers.get(name)) for name in names} | {
        "s3:ObjectCreationOperation": (str(creates).lower(),)}


def s3_header(headers: Any, query: Mapping[str, list[str]], name: str) -> str | None:
    """An ``x-amz-*`` header, or the presigned URL's parameter of that name (S3 reads
    either; in any case, as a header's, so that no spelling passes unchecked)."""
    return headers.get(name) or next(
        (values[0] for key, values in query.items() if key.lower() == name and values), None)


def _first(query: Mapping[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None
