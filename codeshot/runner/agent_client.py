"""Calls from the platform to agents over HTTP: the handshake, Funcs, standalone queries.

Every call carries a fresh agent-call JWT; every reply is size-capped and parsed
defensively, and failures map to AGENT_UNAVAILABLE (could not reach it), AGENT_ERROR
(it answered badly) or TIMEOUT.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import yaml
from pydantic import BaseModel, Field, ValidationError

from codeshot.errors import AgentError, AgentUnavailable, Timeout

MAX_REPLY_BYTES = 2 * 1024 * 1024


class Handshake(BaseModel):
    """What an agent says about itself at ``GET /`` (Fixie SDK: YAML; plain: JSON)."""

    type: str = "code_shot"
    base_prompt: str = ""
    few_shots: list[str] = Field(default_factory=list)
    sample_queries: list[str] = Field(default_factory=list)
    conversational: bool = False


def _read_capped(response: httpx.Response) -> bytes:
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_REPLY_BYTES:
            raise AgentError(f"agent reply exceeds {MAX_REPLY_BYTES} bytes")
    return body


def parse_document(body: bytes, content_type: str) -> Any:
    """JSON, or YAML when the agent says so (the Fixie SDK answers YAML)."""
    text = body.decode("utf-8", errors="strict")
    if "yaml" in content_type:
        return yaml.safe_load(text)
    try:
        return json.loads(text)
    except ValueError:
        return yaml.safe_load(text)  # some agents send YAML as text/plain


def request(
    method: str,
    url: str,
    token: str,
    *,
    timeout: float,
    json_body: Any = None,
    accept: str = "application/json",
    client: httpx.Client | None = None,
) -> tuple[int, str, bytes]:
    headers = {"Authorization": f"Bearer {token}", "Accept": accept}
    owned = client is None
    http = client or httpx.Client(follow_redirects=False)
    try:
        with http.stream(method, url, headers=headers, json=json_body,
                         timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0))) as r:
            return r.status_code, r.headers.get("content-type", ""), _read_capped(r)
    except httpx.TimeoutException as exc:
        raise Timeout(f"agent at {url} did not answer within {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        raise AgentUnavailable(f"agent at {url} is unreachable: {exc.__class__.__name__}") from exc
    finally:
        if owned:
            http.close()


def fetch_handshake(url: str, token: str, timeout: float = 10.0) -> Handshake:
    status, content_type, body = request(
        "GET", url.rstrip("/") + "/", token, timeout=timeout,
        accept="application/json, application/yaml;q=0.9",
    )
    if status != 200:
        raise AgentError(f"agent handshake at {url} answered HTTP {status}")
    try:
        document = parse_document(body, content_type)
        if not isinstance(document, dict):
            raise ValueError("not a mapping")
        return Handshake(**document)
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        raise AgentError(f"agent handshake at {url} is not a valid document: {exc}") from exc
