"""An agent directory: ``agent.yaml`` (who the agent is, its tests) and the code it names.

Used by ``codeshot serve``, ``codeshot agent test``, the deploy tooling and test fixtures.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from codeshot.errors import InvalidInput
from codeshot.models import validate_handle
from codeshot.sdk.agent import AgentBase

CONFIG_FILE = "agent.yaml"


class AgentTest(BaseModel):
    """One check: the agent's answer to ``query`` must contain ``expected``."""

    query: str
    expected: str


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    handle: str
    name: str = ""
    description: str = ""
    sample_queries: list[str] = Field(default_factory=list)
    tests: list[AgentTest] = Field(default_factory=list)
    entry_point: str = "agent:agent"

    @field_validator("handle")
    @classmethod
    def _handle(cls, value: str) -> str:
        return validate_handle(value)

    @field_validator("entry_point")
    @classmethod
    def _entry_point(cls, value: str) -> str:
        module, _, attr = value.partition(":")
        if not module or not attr.isidentifier():
            raise ValueError(f"entry_point must be 'module:attribute', got {value!r}")
        return value


def read_config(agent_dir: Path) -> AgentConfig:
    path = agent_dir / CONFIG_FILE
    try:
        return AgentConfig.model_validate(yaml.safe_load(path.read_text()) or {})
    except FileNotFoundError:
        raise InvalidInput(
            f"{agent_dir} is not an agent directory: it has no {CONFIG_FILE}"
        ) from None
    except (yaml.YAMLError, ValidationError) as exc:
        raise InvalidInput(f"{path} is not valid: {exc}") from None


def load_agent(agent_dir: Path, config: AgentConfig) -> AgentBase:
    """Import the entry point from ``agent_dir`` (put first on sys.path).

    Agent directories all call their module ``agent``, and one process may load several
    (the local stack, tests), so a same-named module from elsewhere is dropped first.
    """
    module_name, _, attr = config.entry_point.partition(":")
    root = str(agent_dir.resolve())
    cached = sys.modules.get(module_name)
    if cached is not None and not str(getattr(cached, "__file__", "")).startswith(root + os.sep):
        del sys.modules[module_name]  # another agent directory's module of the same name
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)  # first, so its module wins over other agent directories'
    agent = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(agent, AgentBase):
        raise InvalidInput(f"{config.entry_point} in {agent_dir} must be a CodeShotAgent or "
                           f"StandaloneAgent, got {type(agent).__name__}")
    return agent
