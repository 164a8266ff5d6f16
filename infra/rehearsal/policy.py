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
from decimal import Decimal
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
    unsure = None  # the resource may match: decided only if nothing else makes it false
    try:
        if not _resource_matches(statement, request):
            return False
    except Undetermined as exc:
        unsure = exc
    if of_resource and not _names_caller(statement, request):
        return False
    if not _condition_holds(statement.get("Condition") or {}, request.context):
        return False
    if unsure:
        raise unsure
    return True


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


def _names_caller(statement: Mapping[str, Any], request: Request) -> bool:
    """Principal names a role's session by the role's ARN, its account, or every AWS
    principal. NotPrincipal exempts only the session itself ("the assumed-role user is
    identified by the role session name"): one naming the role or account exempts nothing.
    The rehearsal names no session: either naming a session of the caller's role is
    undetermined."""
    arn, account = request.principal_arn, request.account
    if "Principal" in statement:
        named, negated = _principals(statement["Principal"]), False
    elif "NotPrincipal" in statement:
        named, negated = _principals(statement["NotPrincipal"]), True
    else:
        return False
    if any(name == "AWS|*" if negated else _principal_match(name, arn, account)
           for name in named):
        return not negated
    partition, role = arn.split(":")[1], arn.rsplit("/", 1)[-1]
    if any(name.startswith(f"AWS|arn:{partition}:sts::{account}:assumed-role/{role}/")
           for name in named):
        raise Undetermined(f"a principal names a session of {arn}: the rehearsal does not "
                           "know a call's session")
    return negated


def _principal_match(pattern: str, arn: str, account: str) -> bool:
    kind, _, name = pattern.partition("|")
    return kind == "AWS" and name in (
        "*", arn, account, f"arn:{arn.split(':')[1]}:iam::{account}:root")


def _resource_matches(statement: Mapping[str, Any], request: Request) -> bool:
    """Resource or NotResource covers the request's resource, after its policy variables.
    One the request does not carry (with no default) makes the statement invalid ("any
    attempt to match it fails and causes the statement to be invalid"): where the others
    would make the statement apply, the rehearsal cannot tell which."""
    negated = "Resource" not in statement
    element = "NotResource" if negated else "Resource"
    if element not in statement:
        return False
    patterns = [_substitute(pattern, request.context)
                for pattern in _listed(statement[element])]
    readings = {any(p is not None and _glob(p, arn=arn).fullmatch(request.resource)
                    for p in patterns) for arn in (True, False)}
    if len(readings) > 1:
        raise Undetermined(f"{element} {statement[element]!r}: a wildcard within a part of "
                           f"the ARN meets a ':' of {request.resource}, which IAM does not "
                           "say whether it crosses")
    if readings.pop() == negated:
        return False
    if None in patterns:
        raise Undetermined(f"{element} {statement[element]!r}: a policy variable the request "
                           "does not carry, which makes the statement invalid in IAM")
    return True


# A policy's string after its variables: the policy's own text at even places, where ``*``
# and ``?`` are wildcards, and each variable's value at odd ones, where they are the
# characters themselves (IAM documents no wildcard in a value; ``${*}`` is a literal ``*``).
Pattern = tuple[str, ...]


@cache
def _glob(pattern: Pattern, *, arn: bool = False) -> re.Pattern[str]:
    """The wildcards of the policy's own text. In a resource ARN (``arn``) a ``*`` or ``?``
    stays within its part, but for a ``*`` that ends a part (IAM: "if the * wildcard is the
    last character of a resource ARN segment, it can expand to match beyond the colon
    boundaries"). IAM does not say whether one within a part crosses a ``:`` in a key:
    a Resource is matched both ways."""
    text, regex, at = "".join(pattern), [], 0
    for place, piece in enumerate(pattern):
        for char in piece:
            at += 1
            if place % 2 or char not in "*?":
                regex.append(re.escape(char))
            elif char == "?":
                regex.append("[^:]" if arn else ".")
            else:
                regex.append(".*" if not arn or text[at:at + 1] in ("", ":") else "[^:]*")
    return re.compile("".join(regex), re.DOTALL)


def _action_match(pattern: str, action: str) -> bool:
    return _glob((pattern.lower(),)).fullmatch(action.lower()) is not None


def _like(pattern: Pattern, value: str) -> bool:
    return _glob(pattern).fullmatch(value) is not None


def _arn_like(pattern: Pattern, value: str) -> bool:
    """ArnLike: the six parts compared each with wildcards (a ``*`` stays in its part)."""
    if pattern == ("*",):
        return True
    parts, values = _arn_parts(pattern), value.split(":", 5)
    return len(parts) == len(values) == 6 and all(
        _like(part, actual) for part, actual in zip(parts, values))


def _arn_parts(pattern: Pattern) -> list[Pattern]:
    """An ARN after its policy variables, split at its colons into (at most) six parts,
    each still telling the policy's text from the variables' values (as ``Pattern``)."""
    parts: list[list[str]] = [[""]]
    for place, piece in enumerate(pattern):
        for index, text in enumerate(piece.split(":", 6 - len(parts))):
            if index:
                parts.append([""])
            if len(parts[-1]) % 2 != place % 2:  # the same kind as the part's last piece
                parts[-1][-1] += text
            else:
                parts[-1].append(text)
    return [tuple(part) for part in parts]


VARIABLE = re.compile(r"\$\{([^}]+)\}")
DEFAULT = re.compile(r"'[^']*'")


def _substitute(text: str, context: Context) -> Pattern | None:
    """Policy variables (``${aws:username}``) from the request, or their default
    (``${aws:username, 'anyone'}``) where the request does not carry the key; None where
    it does not and there is none (IAM: the statement is then invalid)."""
    pieces = VARIABLE.split(text)
    for place in range(1, len(pieces), 2):
        name = pieces[place]
        if name in ("*", "?", "$"):  # the character itself
            continue
        key, _, default = (part.strip() for part in name.partition(","))
        key = key.lower()
        if key not in context:
            raise Undetermined(f"condition key {key} (a policy variable) is not derived")
        if not context[key] and DEFAULT.fullmatch(default):
            pieces[place] = default[1:-1]
        elif len(context[key]) != 1:
            return None
        else:
            pieces[place] = context[key][0]
    return tuple(pieces)


# -- conditions ---------------------------------------------------------------------------
# An IAM number: "an integer or decimal value". Not float()'s "1_000", " 5 ", "nan", "1e3".
NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _numbers(compare: Callable[[Decimal, Decimal], bool]) -> Callable[[str, str], bool]:
    def match(expected: str, actual: str) -> bool:
        for value in (expected, actual):
            if not NUMBER.fullmatch(value):
                raise Undetermined(f"{value!r} is no number IAM documents")
        return compare(Decimal(actual), Decimal(expected))
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


def _plain(compare: Callable[[str, str], bool]) -> Callable[[Pattern, str], bool]:
    """``compare`` of the policy's value as a whole (its ``*`` and ``?`` are no wildcards)."""
    return lambda expected, actual: compare("".join(expected), actual)


# The operators and whether each is the negation of its match (true for a missing key).
OPERATORS: dict[str, tuple[Callable[[Pattern, str], bool], bool]] = {
    "StringEquals": (_plain(_string_equals), False),
    "StringNotEquals": (_plain(_string_equals), True),
    "StringEqualsIgnoreCase": (_plain(_string_equals_ignore_case), False),
    "StringNotEqualsIgnoreCase": (_plain(_string_equals_ignore_case), True),
    "StringLike": (_like, False),
    "StringNotLike": (_like, True),
    "NumericEquals": (_plain(_numbers(lambda a, e: a == e)), False),
    "NumericNotEquals": (_plain(_numbers(lambda a, e: a == e)), True),
    "NumericLessThan": (_plain(_numbers(lambda a, e: a < e)), False),
    "NumericLessThanEquals": (_plain(_numbers(lambda a, e: a <= e)), False),
    "NumericGreaterThan": (_plain(_numbers(lambda a, e: a > e)), False),
    "NumericGreaterThanEquals": (_plain(_numbers(lambda a, e: a >= e)), False),
    "Bool": (_plain(_bool_equals), False),
    "BinaryEquals": (_plain(_string_equals), False),
    "ArnEquals": (_arn_like, False),
    "ArnLike": (_arn_like, False),
    "ArnNotEquals": (_arn_like, True),
    "ArnNotLike": (_arn_like, True),
    "IpAddress": (_plain(_in_network), False),
    "NotIpAddress": (_plain(_in_network), True),
}
# IAM: "a policy variable for Condition values in any condition that involves the string
# operators or the ARN operators"
SUBSTITUTING = frozenset(op for op in OPERATORS if op.startswith(("String", "Arn")))


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
    resolved: list[Pattern | None] = [
        _substitute(e, context) if base in SUBSTITUTING else (e,) for e in expected]
    patterns = tuple(p for p in resolved if p is not None)

    def one(value: str) -> bool:
        return any(match(p, value) for p in patterns) != negated

    if qualifier == "ForAllValues":
        holds = all(map(one, actual))
    elif qualifier == "ForAnyValue":
        holds = any(map(one, actual)) or (if_exists and not actual)
    elif not actual:
        holds = if_exists or negated
    elif len(actual) > 1:
        raise Undetermined(f"condition key {key} has several values in this request: "
                           f"{operator} needs ForAllValues or ForAnyValue")
    else:
        holds = one(actual[0])
    # A value with a variable the request does not carry makes the statement invalid in
    # IAM; read without that value, the condition holds: IAM does not say which.
    if holds and None in resolved:
        raise Undetermined(f"{operator} on {key}: a policy variable the request does not "
                           "carry, without which it would hold")
    return holds
