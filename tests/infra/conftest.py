"""Synthesizes the app once per test session, without bundling (``aws:cdk:bundling-stacks``
= []), with cdk-nag applied as in ``cdk synth``; tests read the templates it wrote."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from codeshot.store import tables
from infra.settings_env import env_name
from tests.infra.cfn import Template

NO_BUNDLING = {"aws:cdk:bundling-stacks": []}


@dataclass
class Synth:
    outdir: Path
    platform: Template
    agent: Template

    def table_id(self, spec: tables.Table) -> str:
        """The table's logical id, found through the API's environment (so names agree
        too)."""
        value = self.platform.env("handlers.api.handler")[env_name(spec.setting)]
        assert set(value) == {"Ref"}, value
        return str(value["Ref"])


def synthesize(outdir: Path, agent_stack: str = "CodeshotAgent-notes", **context: object
               ) -> Synth:
    """Synthesize the app into ``outdir``; ``context`` overrides cdk.json's."""
    from infra.app import build_app, cdk_json_context

    build_app(cdk_json_context() | NO_BUNDLING | context, outdir=str(outdir)).synth()
    return Synth(outdir, Template.load(outdir / "Codeshot.template.json"),
                 Template.load(outdir / f"{agent_stack}.template.json"))


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize(tmp_path_factory.mktemp("cdk.out"))
