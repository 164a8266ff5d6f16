"""Reading a cloud assembly (cdk.out) and resolving CloudFormation's intrinsic functions
against what the rehearsal created."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
PARTITION = "aws"


class RehearsalError(RuntimeError):
    """Something ``cdk deploy`` or the deployed functions would have failed at."""


@dataclass
class Stack:
    name: str
    template: dict[str, Any]
    dependencies: list[str]
    assets: dict[str, Path]  # S3 object key (hash.zip) -> staged asset directory

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return dict(self.template.get("Resources", {}))

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == kind}

    def creation_order(self) -> list[str]:
        """Logical ids in an order where each comes after everything it refers to."""
        resources = self.resources
        pending = {k: {d for d in references(v) if d in resources} for k, v in resources.items()}
        order: list[str] = []
        while pending:
            ready = sorted(k for k, deps in pending.items() if not deps - set(order))
            if not ready:
                raise RehearsalError(f"{self.name}: circular references among {sorted(pending)}")
            for k in ready:
                order.append(k)
                del pending[k]
        return order


def references(resource: dict[str, Any]) -> set[str]:
    """Logical ids a resource depends on: DependsOn, Ref, GetAtt and ${...} in Fn::Sub."""
    found: set[str] = set()
    depends = resource.get("DependsOn", [])
    found.update([depends] if isinstance(depends, str) else depends)

    def walk(expr: Any) -> None:
        if isinstance(expr, dict):
            if isinstance(expr.get("Ref"), str):
                found.add(expr["Ref"])
            if "Fn::GetAtt" in expr:
                target = expr["Fn::GetAtt"]
                found.add(target[0] if isinstance(target, list) else target.split(".")[0])
            if "Fn::Sub" in expr:
                text = expr["Fn::Sub"] if isinstance(expr["Fn::Sub"], str) else \
                    expr["Fn::Sub"][0]
                found.update(m.split(".")[0] for m in re.findall(r"\$\{([^!}][^}]*)\}", text))
            for value in expr.values():
                walk(value)
        elif isinstance(expr, list):
            for value in expr:
                walk(value)

    walk(resource.get("Properties", {}))
    return found


def read_assembly(outdir: Path) -> list[Stack]:
    """The stacks of a cloud assembly, platform first (manifest dependency order)."""
    outdir = outdir.resolve()
    manifest = json.loads((outdir / "manifest.json").read_text())
    artifacts = manifest["artifacts"]
    stacks: dict[str, Stack] = {}
    for name, artifact in artifacts.items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        props = artifact["properties"]
        assets: dict[str, Path] = {}
        for dep in artifact.get("dependencies", []):
            if artifacts.get(dep, {}).get("type") == "cdk:asset-manifest":
                asset_manifest = json.loads(
                    (outdir / artifacts[dep]["properties"]["file"]).read_text())
                for asset in asset_manifest.get("files", {}).values():
                    if asset["source"].get("packaging") != "zip":
                        continue
                    for destination in asset["destinations"].values():
                        assets[destination["objectKey"]] = outdir / asset["source"]["path"]
        stacks[name] = Stack(
            name, json.loads((outdir / props["templateFile"]).read_text()),
            [d for d in artifact.get("dependencies", []) if d in artifacts
             and artifacts[d]["type"] == "aws:cloudformation:stack"], assets)
    ordered: list[Stack] = []
    while len(ordered) < len(stacks):
        for stack in stacks.values():
            if stack not in ordered and all(stacks[d] in ordered for d in stack.dependencies):
                ordered.append(stack)
    return ordered


def stack_id(name: str) -> str:
    """The stack's id (ARN), the same in its template (``AWS::StackId``) as in its custom
    resources' events."""
    return f"arn:{PARTITION}:cloudformation:{REGION}:{ACCOUNT}:stack/{name}/" \
        "00000000-0000-0000-0000-000000000000"


@dataclass
class Deployed:
    """What a stack's resources became: physical ids (Ref) and attributes (GetAtt)."""

    stack: Stack
    refs: dict[str, str] = field(default_factory=dict)
    attributes: dict[tuple[str, str], Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    exports: dict[str, Any] = field(default_factory=dict)


class Resolver:
    """Evaluates intrinsic functions for one stack, with other stacks' outputs at hand."""

    def __init__(self, deployed: Deployed, others: Callable[[str], Deployed],
                 all_exports: Callable[[], dict[str, Any]]) -> None:
        self.deployed = deployed
        self.others = others
        self.all_exports = all_exports

    def pseudo(self, name: str) -> str:
        stack = self.deployed.stack.name
        values = {
            "AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION,
            "AWS::URLSuffix": "amazonaws.com", "AWS::StackName": stack, "AWS::NoValue": "",
            "AWS::StackId": stack_id(stack),
        }
        if name not in values:
            raise RehearsalError(f"unknown pseudo parameter {name}")
        return values[name]

    def ref(self, name: str) -> Any:
        if name.startswith("AWS::"):
            return self.pseudo(name)
        parameters = self.deployed.stack.template.get("Parameters", {})
        if name in parameters:
            return parameters[name].get("Default")
        if name not in self.deployed.refs:
            raise RehearsalError(f"{self.deployed.stack.name}: Ref {name} before it exists")
        return self.deployed.refs[name]

    def get_att(self, logical_id: str, attribute: str) -> Any:
        key = (logical_id, attribute)
        if key not in self.deployed.attributes:
            raise RehearsalError(f"{self.deployed.stack.name}: no attribute {logical_id}."
                                 f"{attribute} (the rehearsal does not make it)")
        return self.deployed.attributes[key]

    def __call__(self, expr: Any) -> Any:
        if isinstance(expr, list):
            return [self(e) for e in expr]
        if not isinstance(expr, dict):
            return expr
        if len(expr) == 1:
            (key, arg), = expr.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                target, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(target, attribute)
            if key == "Fn::Join":
                separator, parts = arg
                return separator.join(str(p) for p in self(parts))
            if key == "Fn::Select":
                index, values = arg
                return self(values)[int(self(index))]
            if key == "Fn::Split":
                separator, text = arg
                return str(self(text)).split(separator)
            if key == "Fn::Sub":
                return self.sub(arg)
            if key == "Fn::GetStackOutput":
                other = self.others(self(arg["StackName"]))
                return other.outputs[self(arg["OutputName"])]
            if key == "Fn::ImportValue":
                return self.all_exports()[self(arg)]
            if key.startswith("Fn::"):
                raise RehearsalError(f"intrinsic function {key} is not supported")
        return {k: self(v) for k, v in expr.items()}

    def sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self(arg[1]))

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name and not name.startswith("AWS::"):
                return str(self.get_att(*name.split(".", 1)))
            return str(self.ref(name))

        return re.sub(r"\$\{([^!}][^}]*)\}", value, text)

