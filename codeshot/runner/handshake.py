"""The handshake: what an agent says about itself at ``GET /``, read when it registers.

Kept apart from :mod:`codeshot.runner.agent_client` because it validates with pydantic,
which the API has loaded anyway and the runner never needs.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from codeshot.errors import AgentFailed
from codeshot.net.http import public_client
from codeshot.runner.agent_client import parse_document, request

log = logging.getLogger("codeshot.runner")


class Handshake(BaseModel):
    """What an agent says about itself at ``GET /`` (Fixie SDK: YAML; plain: JSON)."""

    type: str = "code_shot"
    base_prompt: str = ""
    few_shots: list[str] = Field(default_factory=list)
    sample_queries: list[str] = Field(default_factory=list)
    conversational: bool = False

    @field_validator("base_prompt", "few_shots", "sample_queries", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any, info: Any) -> Any:
        # Fixie's SDK sends `sample_queries: null` (and may send other nulls).
        if value is None:
            return "" if info.field_name == "base_prompt" else []
        return value


def fetch_handshake(url: str, token: str, timeout: float = 10.0, *,
                    allow_loopback: bool = False) -> Handshake:
    """The agent's handshake, read over a :func:`~codeshot.net.http.public_client`
    (loopback only with ``allow_loopback``, the local stack's setting)."""
    with public_client(allow_loopback=allow_loopback) as client:
        status, content_type, body = request(
            "GET", url.rstrip("/") + "/", token, timeout=timeout,
            accept="application/json, application/yaml;q=0.9", client=client,
        )
    # What the target answered stays in the logs: a URL may point at any public service,
    # and an error repeating its page or its JSON would make registration a way to read it.
    if status != 200:
        log.info("handshake at %s answered HTTP %s: %.500r", url, status, body)
        raise AgentFailed(f"agent handshake at {url} answered HTTP {status}")
    import yaml

    try:
        document = parse_document(body, content_type)
        if not isinstance(document, dict):
            raise ValueError("not a mapping")
        return Handshake(**document)
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        log.info("handshake at %s is not valid: %s", url, exc)
        raise AgentFailed(
            f"agent handshake at {url} is not a valid handshake: expected a JSON or YAML "
            "object with type, base_prompt and few_shots (or sample_queries)") from None
