"""Reading synthesized CloudFormation templates in tests: resources, references, and the
IAM statements that reach each function's role.

``Template.assertions`` is CDK's own :class:`aws_cdk.assertions.Template` over the same
JSON, for what it states plainly (a resource with these properties, so many of a type);
the rest here answers what it cannot: which statements reach one function's role, and
what they grant on which resource."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from aws_cdk import assertions


def refs(expr: Any) -> set[str]:
    """Logical ids an expression points at (Ref / Fn::GetAtt, however deeply nested)."""
    if isinstance(expr, dict):
        if "Ref" in expr and isinstance(expr["Ref"], str):
            return {expr["Ref"]}
        if "Fn::GetAtt" in expr:
            return {expr["Fn::GetAtt"][0]}
        return set().union(*(refs(v) for v in expr.values())) if expr else set()
    if isinstance(expr, list):
        return set().union(*(refs(v) for v in expr)) if expr else set()
    return set()


def text(expr: Any) -> str:
    """A readable flattening of an expression (Fn::Join parts glued, refs as <id>)."""
    if isinstance(expr, str):
        return expr
    if isinstance(expr, dict):
        if "Fn::Join" in expr:
            sep, parts = expr["Fn::Join"]
            return sep.join(text(p) for p in parts)
        if "Ref" in expr:
            return f"<{expr['Ref']}>"
        if "Fn::GetAtt" in expr:
            return "<{}.{}>".format(*expr["Fn::GetAtt"])
    return json.dumps(expr, sort_keys=True)


@dataclass(frozen=True)
class Grant:
    actions: frozenset[str]
    resources: tuple[Any, ...]
    condition: Any

    def targets(self) -> set[str]:
        return refs(list(self.resources))

    def resource_texts(self) -> list[str]:
        return [text(r) for r in self.resources]


class Template:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.resources: dict[str, dict[str, Any]] = data["Resources"]

    @classmethod
    def load(cls, path: Path) -> Template:
        return cls(json.loads(path.read_text()))

    @cached_property
    def assertions(self) -> assertions.Template:
        return assertions.Template.from_json(self.data)

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == kind}

    def props(self, logical_id: str) -> dict[str, Any]:
        return self.resources[logical_id].get("Properties", {})

    def function(self, handler: str) -> tuple[str, dict[str, Any]]:
        found = [(k, v["Properties"]) for k, v in self.of_type("AWS::Lambda::Function").items()
                 if v["Properties"]["Handler"] == handler]
        assert len(found) == 1, f"one function with handler {handler}, found {len(found)}"
        return found[0]

    def env(self, handler: str) -> dict[str, Any]:
        return self.function(handler)[1]["Environment"]["Variables"]

    def grants(self, handler: str) -> list[Grant]:
        """Every IAM statement that applies to the function's role."""
        role_ids = refs(self.function(handler)[1]["Role"])
        assert len(role_ids) == 1
        role_id = role_ids.pop()
        role = self.props(role_id)
        assert not role.get("ManagedPolicyArns"), "functions use inline least-privilege only"
        docs = [p["PolicyDocument"] for p in role.get("Policies", [])]
        policies = self.of_type("AWS::IAM::Policy").values()
        docs += [p["Properties"]["PolicyDocument"] for p in policies
                 if role_id in refs(p["Properties"].get("Roles", []))]
        out = []
        for doc in docs:
            for st in doc["Statement"]:
                assert st["Effect"] == "Allow"
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
                out.append(Grant(frozenset(actions), tuple(resources), st.get("Condition")))
        return out

    def actions_on(self, handler: str, logical_id: str) -> set[str]:
        return {a for g in self.grants(handler) if logical_id in g.targets() for a in g.actions}

    def grants_on(self, handler: str, logical_id: str) -> set[tuple[str, str]]:
        """(action, resource as text) of each grant the function has on ``logical_id``:
        an index's ARN reads ``<Table.Arn>/index/<name>``."""
        return {(a, r) for g in self.grants(handler) if logical_id in g.targets()
                for a in g.actions for r in g.resource_texts()}

    def all_actions(self, handler: str) -> set[str]:
        return {a for g in self.grants(handler) for a in g.actions}
