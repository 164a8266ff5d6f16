"""IAM policy evaluation for the rehearsal's AWS endpoint: Action, Resource, Principal and
Condition, as AWS evaluates one request against a caller's identity policies and the
resource's own policy.

Why not moto's evaluator: it reads only ``StringEquals`` and passes every other condition
(a ``StringLike`` grant allows whatever the request holds, a conditional Deny denies
everything), and a key missing from the request passes even ``StringEquals``. Nor a PyPI
package: those found lint or generate policies, or compute effective permissions from an
account's dump, none evaluates one request's context.

A request's context maps each condition key the rehearsal derives for it to its values
(``()``: the request does not carry the key). A key a statement needs that is not in the
context at all is one the rehearsal cannot derive: the statement is then undetermined, and
a decision that hangs on it refuses the call naming the key, rather than guess.

Resource policies (bucket and queue policies) are read for their Deny statements only: an
Allow in them naming the caller would grant in AWS too, but none of the shipped ones names
a function's role, and reading them would only ever let more through.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

Values = tuple[str, ...]
Context = Mapping[str, Values]
Document = Mapping[str, Any]


class Undetermined(Exception):
    """The evaluation needs what the rehearsal does not derive (a condition key) or
    implement (an operator)."""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: Context
    principal_arn: str
    account: str


def decide(identity: Sequence[Document], resource_policies: Sequence[Document],
           request: Request) -> Decision:
    """An explicit Deny (either kind of policy) wins, else an identity policy's Allow."""
    context = {key.lower(): values for key, values in request.context.items()}
    request = Request(request.action, request.resource, context, request.principal_arn,
                      request.account)
    granted, undetermined = False, []
    for document, of_resource in [(d, False) for d in identity] + \
            [(d, True) for d in resource_policies]:
        for statement in _statements(document):
            effect = statement.get("Effect")
            if of_resource and effect != "Deny":
                continue
            try:
                applies = _applies(statement, request, of_resource)
            except Undetermined as exc:
                undetermined.append((effect, str(exc)))
                continue
            if applies and effect == "Deny":
                return Decision(False, f"an explicit deny ({statement.get('Sid') or 'no Sid'}"
                                       f") in {'a resource' if of_resource else 'an identity'}"
                                       "-based policy matches")
            granted = granted or (applies and effect == "Allow")
    denies = [why for effect, why in undetermined if effect == "Deny"]
    if denies:
        return Decision(False, f"the rehearsal cannot tell whether a Deny applies: {denies[0]}")
    if granted:
        return Decision(True, "allowed")
    if undetermined:
        return Decision(False, "only a statement the rehearsal cannot evaluate would allow "
                               f"it: {undetermined[0][1]}")
    return Decision(False, "no identity-based policy allows the action")


def _statements(document: Document) -> list[Mapping[str, Any]]:
    statements = document.get("Statement", [])
    return statements if isinstance(statements, list) else [statements]


def _listed(value: Any) -> Values:
    items = value if isinstance(value, list) else [value]
    return tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in items)


def _applies(statement: Mapping[str, Any], request: Request, of_resource: bool) -> bool:
    if not _matches_either(statement, "Action", _listed, request.action, _action_match):
        return False
    if not _matches_either(statement, "Resource", _listed, request.resource,
                           lambda pattern, arn: _like_all(pattern, arn, request.context)):
        return False
    if of_resource and not _matches_either(
            statement, "Principal", _principals, request.principal_arn,
            lambda pattern, arn: _principal_match(pattern, arn, request.account)):
        return False
    return _condition_holds(statement.get("Condition") or {}, request.context)


def _matches_either(statement: Mapping[str, Any], element: str,
                    patterns: Callable[[Any], Values], value: str,
                    match: Callable[[str, str], bool]) -> bool:
    """``element`` (Action, Resource, Principal) or its ``Not`` form matches ``value``."""
    if element in statement:
        return any(match(pattern, value) for pattern in patterns(statement[element]))
    if "Not" + element in statement:
        return not any(match(pattern, value) for pattern in patterns(
            statement["Not" + element]))
    return False


def _principals(value: Any) -> Values:
    """``kind|name`` for each principal (``"*"`` is every AWS principal)."""
    if isinstance(value, Mapping):
        return tuple(f"{kind}|{name}" for kind, names in value.items()
                     for name in _listed(names))
    return tuple("AWS|" + name for name in _listed(value))


def _principal_match(pattern: str, arn: str, account: str) -> bool:
    """A role's caller is named by its ARN, its account, or every AWS principal."""
    kind, _, name = pattern.partition("|")
    return kind == "AWS" and name in (
        "*", arn, account, f"arn:{arn.split(':')[1]}:iam::{account}:root")


def _like_all(pattern: str, value: str, context: Context) -> bool:
    """A Resource, after its policy variables."""
    resolved = _substitute(pattern, context)
    return resolved is not None and _resource_wildcard(resolved).fullmatch(value) is not None


@cache
def _resource_wildcard(pattern: str) -> re.Pattern[str]:
    """A ``*`` stays within its part of the ARN, but for one that ends a part (IAM: "if the
    * wildcard is the last character of a resource ARN segment, it can expand to match
    beyond the colon boundaries")."""
    return re.compile("".join(
        (".*" if pattern[i + 1:i + 2] in ("", ":") else "[^:]*") if char == "*" else
        "." if char == "?" else re.escape(char) for i, char in enumerate(pattern)), re.DOTALL)


def _action_match(pattern: str, action: str) -> bool:
    return _wildcard(pattern.lower()).fullmatch(action.lower()) is not None


@cache
def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(".".join(map(re.escape, part.split("?")))
                                for part in pattern.split("*")), re.DOTALL)


def _like(pattern: str, value: str) -> bool:
    return _wildcard(pattern).fullmatch(value) is not None


def _arn_like(pattern: str, value: str) -> bool:
    """ArnLike: the six parts compared each with wildcards (a ``*`` stays in its part)."""
    if pattern == "*":
        return True
    parts, values = pattern.split(":", 5), value.split(":", 5)
    return len(parts) == len(values) == 6 and all(map(_like, parts, values))


VARIABLE = re.compile(r"\$\{([^}]+)\}")
DEFAULT = re.compile(r"'[^']*'")


def _substitute(text: str, context: Context) -> str | None:
    """Policy variables (``${aws:username}``) from the request, or their default
    (``${aws:username, 'anyone'}``) where the request does not carry the key; None where
    it does not and there is none (the element then matches nothing)."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(1)
        if name in ("*", "?", "$"):
            return name
        key, _, default = (part.strip() for part in name.partition(","))
        key = key.lower()
        if key not in context:
            raise Undetermined(f"condition key {key} (a policy variable) is not derived")
        if not context[key] and DEFAULT.fullmatch(default):
            return default[1:-1]
        if len(context[key]) != 1:
            missing = True
            return ""
        return context[key][0]

    text = VARIABLE.sub(value, text)
    return None if missing else text


# -- conditions ---------------------------------------------------------------------------
def _numbers(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def match(expected: str, actual: str) -> bool:
        try:
            return compare(float(actual), float(expected))
        except ValueError:
            return False
    return match


def _in_network(expected: str, actual: str) -> bool:
    try:
        return ipaddress.ip_address(actual) in ipaddress.ip_network(expected, strict=False)
    except ValueError:
        return False


def _string_equals(expected: str, actual: str) -> bool:
    return expected == actual


def _string_equals_ignore_case(expected: str, actual: str) -> bool:
    return expected.casefold() == actual.casefold()


def _bool_equals(expected: str, actual: str) -> bool:
    return expected.lower() == actual.lower()


# The operators and whether each is the negation of its match (true for a missing key).
OPERATORS: dict[str, tuple[Callable[[str, str], bool], bool]] = {
    "StringEquals": (_string_equals, False),
    "StringNotEquals": (_string_equals, True),
    "StringEqualsIgnoreCase": (_string_equals_ignore_case, False),
    "StringNotEqualsIgnoreCase": (_string_equals_ignore_case, True),
    "StringLike": (_like, False),
    "StringNotLike": (_like, True),
    "NumericEquals": (_numbers(lambda a, e: a == e), False),
    "NumericNotEquals": (_numbers(lambda a, e: a == e), True),
    "NumericLessThan": (_numbers(lambda a, e: a < e), False),
    "NumericLessThanEquals": (_numbers(lambda a, e: a <= e), False),
    "NumericGreaterThan": (_numbers(lambda a, e: a > e), False),
    "NumericGreaterThanEquals": (_numbers(lambda a, e: a >= e), False),
    "Bool": (_bool_equals, False),
    "BinaryEquals": (_string_equals, False),
    "ArnEquals": (_arn_like, False),
    "ArnLike": (_arn_like, False),
    "ArnNotEquals": (_arn_like, True),
    "ArnNotLike": (_arn_like, True),
    "IpAddress": (_in_network, False),
    "NotIpAddress": (_in_network, True),
}
STRING_OPERATORS = frozenset(op for op in OPERATORS if op.startswith("String"))


def _condition_holds(condition: Mapping[str, Mapping[str, Any]], context: Context) -> bool:
    """Every operator's every key holds. A false one decides even where another is
    undetermined (the statement does not apply either way)."""
    undetermined: list[str] = []
    for operator, keys in condition.items():
        for key, expected in keys.items():
            try:
                if not _holds(operator, key.lower(), _listed(expected), context):
                    return False
            except Undetermined as exc:
                undetermined.append(str(exc))
    if undetermined:
        raise Undetermined(undetermined[0])
    return True


def _holds(operator: str, key: str, expected: Values, context: Context) -> bool:
    qualifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists") and name != "IfExists"
    base = name.removesuffix("IfExists") if if_exists else name
    if (base not in OPERATORS and base != "Null") or qualifier not in (
            "", "ForAllValues", "ForAnyValue") or (base == "Null" and (qualifier or if_exists)):
        raise Undetermined(f"condition operator {operator} is not evaluated")
    if key not in context:
        raise Undetermined(f"condition key {key} is not derived for this request")
    actual = context[key]
    if base == "Null":  # "true": the request must not carry the key
        return any((value.lower() == "true") == (not actual) for value in expected)
    match, negated = OPERATORS[base]
    if base in STRING_OPERATORS:
        expected = tuple(v for v in (_substitute(e, context) for e in expected) if v is not None)

    def one(value: str) -> bool:
        return any(match(e, value) for e in expected) != negated

    if qualifier == "ForAllValues":
        return all(map(one, actual))
    if qualifier == "ForAnyValue":
        return any(map(one, actual)) or (if_exists and not actual)
    if not actual:
        return if_exists or negated
    if len(actual) > 1:
        raise Undetermined(f"condition key {key} has several values in this request: "
                           f"{operator} needs ForAllValues or ForAnyValue")
    return one(actual[0])
