"""The handshake: what an agent says about itself at ``GET /``, read when it registers.

Kept apart from :mod:`codeshot.runner.agent_client` because it validates with pydantic,
which the API has loaded anyway and the runner never needs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from codeshot.errors import AgentFailed
from codeshot.models import MAX_INT
from codeshot.net.http import public_client
from codeshot.runner.agent_client import request

log = logging.getLogger("codeshot.runner")

# A YAML handshake is read in the API's worker: PyYAML's pure-Python loader took 29.6 s
# for 2 MB (libyaml 2.7 s). A handshake is a few KB; a larger one can be sent as JSON.
MAX_YAML_BYTES = 256 * 1024
# Levels of lists and mappings: a handshake has 4 (corpora, a corpus, its urls); DynamoDB
# stores 32 (the registry's item nests the handshake's fields inside its own).
MAX_DEPTH = 16
NESTED = f"the agent's handshake is nested more than {MAX_DEPTH} levels deep"


def _load_yaml(text: str) -> Any:
    """YAML with libyaml when it is installed, without aliases (a few hundred bytes of
    nested ``*name`` references expand into millions of values once walked) and at most
    ``MAX_DEPTH`` deep (the loader recurses per level): both checked on the parser's
    events, before a value is built."""
    import yaml  # only YAML handshakes need it

    if len(text.encode()) > MAX_YAML_BYTES:
        raise AgentFailed(f"the agent's YAML handshake is over {MAX_YAML_BYTES} bytes: "
                          "send it as JSON")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            raise AgentFailed("the agent's YAML uses aliases (*name), which the "
                              "platform does not accept: write the values out")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise AgentFailed(NESTED)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader


def _depth(value: Any) -> int:
    """How many levels of lists and mappings ``value`` has (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
    return deepest


def parse_document(body: bytes, content_type: str) -> Any:
    """JSON, or YAML when the agent says so (the Fixie SDK answers YAML); AGENT_ERROR
    when it is nested more than ``MAX_DEPTH`` levels."""
    text = body.decode("utf-8", errors="strict")
    if "yaml" in content_type:
        return _load_yaml(text)
    try:
        document = json.loads(text)
    except RecursionError:
        raise AgentFailed(NESTED) from None
    except ValueError:
        return _load_yaml(text)  # some agents send YAML as text/plain
    if _depth(document) > MAX_DEPTH:
        raise AgentFailed(NESTED)
    return document


class ResponseModel(BaseModel):
    """Fixie 1.0's ``response_model`` (``LlmSettings``): what the agent asks its LLM for."""

    model: str | None = Field(default=None, max_length=200)
    temperature: float | None = Field(default=None, ge=0, le=2)
    # Every user's agent listing shows it (GraphQL's Int): a larger one failed theirs.
    maximum_tokens: int | None = Field(default=None, ge=1, le=MAX_INT)


class FuncInfo(BaseModel):
    """A Func as codeshot's SDK lists it (Fixie's handshake has no Func list)."""

    name: str


class Handshake(BaseModel):
    """What an agent says about itself at ``GET /`` (Fixie SDK: YAML; plain: JSON)."""

    type: str = "code_shot"
    base_prompt: str = ""
    few_shots: list[str] = Field(default_factory=list)
    sample_queries: list[str] = Field(default_factory=list)
    conversational: bool = False
    response_model: ResponseModel | None = None
    corpora: list[dict[str, Any]] | None = None
    funcs: list[FuncInfo] | None = None

    @field_validator("base_prompt", "few_shots", "sample_queries", "conversational",
                     mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any, info: Any) -> Any:
        # Fixie's SDK sends `sample_queries: null` (and may send other nulls).
        if value is None:
            return {"base_prompt": "", "conversational": False}.get(info.field_name, [])
        return value

    def llm_settings(self) -> dict[str, Any] | None:
        """``response_model`` as the registry keeps it: {temperature, model, maximum_tokens}."""
        return self.response_model.model_dump() if self.response_model else None

    def func_names(self) -> list[str] | None:
        return None if self.funcs is None else [f.name for f in self.funcs]


def fetch_handshake(url: str, token: str, timeout: float = 10.0, *,
                    allow_loopback: bool = False) -> Handshake:
    """The agent's handshake, read over a :func:`~codeshot.net.http.public_client`
    (loopback only with ``allow_loopback``, the local stack's setting) within ``timeout``
    seconds in all: an agent sending it a byte at a time does not hold the registration."""
    with public_client(allow_loopback=allow_loopback,
                       deadline=time.monotonic() + timeout) as client:
        reply = request("GET", url.rstrip("/") + "/", token, timeout=timeout,
                        accept="application/json, application/yaml;q=0.9", client=client)
    status, body = reply.status, reply.body
    # What the target answered stays in the logs: a URL may point at any public service,
    # and an error repeating its page or its JSON would make registration a way to read it.
    if status != 200:
        log.info("handshake at %s answered HTTP %s: %.500r", url, status, body)
        refused = (": it refused the platform's call token (an agent takes only tokens for "
                   "the agent id it was served as, from the platform it was served for: "
                   "is it serving another agent?)") if status in (401, 403) else (
            ": a codeshot SDK agent answers 503 when it cannot read the platform's signing "
            "keys (is its CODESHOT_API_URL this platform's?)") if status == 503 else ""
        raise AgentFailed(f"agent handshake at {url} answered HTTP {status}{refused}")
    import yaml

    try:
        document = parse_document(body, reply.content_type)
        if not isinstance(document, dict):
            raise ValueError("not a mapping")
        return Handshake(**document)
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        log.info("handshake at %s is not valid: %s", url, exc)
        raise AgentFailed(
            f"agent handshake at {url} is not a valid handshake: expected a JSON or YAML "
            "object with type, base_prompt and few_shots (or sample_queries)"
            + _first_error(exc)) from None


def _first_error(exc: Exception) -> str:
    """Which field broke which rule (``response_model.maximum_tokens: Input should be less
    than or equal to 2147483647``): the model's names and bounds, never a value sent."""
    if not isinstance(exc, ValidationError):
        return ""
    first = exc.errors(include_url=False, include_input=False)[0]
    if "[key]" in first["loc"]:  # a mapping key the agent sent is in the path
        return ""
    return f"; {'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
