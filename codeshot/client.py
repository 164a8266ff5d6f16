"""A user's side of a platform: its GraphQL API with an API key, and registering agents.

The platform is the running ``codeshot local up`` of the working directory (its
``.codeshot/local.json``), else the one ``CODESHOT_API_URL`` / ``CODESHOT_API_KEY`` name.
Needs only httpx: it works where just the SDK is installed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from codeshot.errors import CodeshotError, InvalidInput

if TYPE_CHECKING:
    from codeshot.sdk.project import AgentConfig

STATE_FILE = Path(".codeshot") / "local.json"


class RemoteError(CodeshotError):
    """The platform refused a call; ``code`` is its stable error code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


def read_state(directory: Path | None = None) -> dict[str, Any] | None:
    """The running local stack's ``local.json`` in ``directory`` (default: cwd), if any."""
    path = (directory or Path.cwd()) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state if isinstance(state, dict) else None


@dataclass(frozen=True)
class Target:
    api_url: str
    api_key: str | None

    @classmethod
    def find(cls, api_url: str | None = None, api_key: str | None = None) -> Target:
        """Explicit values first, then the local stack's local.json, then the settings."""
        from codeshot.settings import get_settings

        state = read_state() or {}
        settings = get_settings()
        return cls((api_url or state.get("api_url") or settings.api_url).rstrip("/"),
                   api_key or state.get("api_key") or settings.api_key)


class GraphQLClient:
    def __init__(self, graphql_url: str, api_key: str | None, timeout: float = 60.0) -> None:
        if not api_key:
            raise InvalidInput("no API key: run beside `codeshot local up`, or set "
                               "CODESHOT_API_KEY, or pass --api-key")
        self.url = graphql_url
        self.http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"},
                                 timeout=timeout)

    def call(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self.http.post(self.url, json={"query": query,
                                                      "variables": variables or {}})
        except httpx.HTTPError as exc:
            raise InvalidInput(f"cannot reach the platform at {self.url}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        error = (body.get("errors") or [None])[0] or body.get("error")
        if error:
            code = error.get("extensions", {}).get("code") or error.get("code")
            raise RemoteError(error.get("message", "error"), code or CodeshotError.code)
        if response.status_code != 200 or "data" not in body:
            raise RemoteError(f"the platform at {self.url} answered HTTP "
                              f"{response.status_code}", CodeshotError.code)
        data: dict[str, Any] = body["data"]
        return data


USERNAME = "query { user { username } }"
AGENT = "query ($id: String!) { agentById(agentId: $id) { agentId } }"
AGENT_FIELDS = "agent { agentId kind conversational }"
CREATE = f"mutation ($d: AgentInput!) {{ createAgent(agentData: $d) {{ {AGENT_FIELDS} }} }}"
UPDATE = f"mutation ($d: AgentInput!) {{ updateAgent(agentData: $d) {{ {AGENT_FIELDS} }} }}"


class PlatformClient(GraphQLClient):
    """A user's calls to one platform (``target``)."""

    def __init__(self, target: Target, timeout: float = 60.0) -> None:
        super().__init__(target.api_url + "/graphql", target.api_key, timeout)
        self.target = target

    def username(self) -> str:
        username: str = self.call(USERNAME)["user"]["username"]
        return username

    def register(self, fields: dict[str, Any]) -> str:
        """Create the caller's agent ``fields["handle"]``, or update it and re-read its
        handshake (its code may have changed at the same URL); returns its id."""
        agent_id = f"{self.username()}/{fields['handle']}"
        if self.call(AGENT, {"id": agent_id})["agentById"] is None:
            return str(self.call(CREATE, {"d": fields})["createAgent"]["agent"]["agentId"])
        self.call(UPDATE, {"d": fields})
        try:
            response = self.http.post(f"{self.target.api_url}/api/refresh/{agent_id}")
        except httpx.HTTPError as exc:
            raise InvalidInput(f"cannot reach the platform at {self.target.api_url}: {exc}"
                               ) from exc
        if response.status_code != 200:
            error = response.json().get("error", {}) if response.content else {}
            raise RemoteError(error.get("message", f"refresh answered HTTP "
                                        f"{response.status_code}"),
                              error.get("code", CodeshotError.code))
        return agent_id


def agent_fields(config: AgentConfig, url: str) -> dict[str, Any]:
    """agent.yaml as ``createAgent``/``updateAgent``'s agentData, served at ``url``."""
    # Fixie's agent.yaml descriptions are often block scalars; the platform keeps one line.
    description = " ".join(config.description.split())
    fields: dict[str, Any] = {"handle": config.handle, "description": description,
                              "queryUrl": url, "funcUrl": url, "published": config.published}
    if config.name:
        fields["name"] = config.name
    if config.more_info_url:
        fields["moreInfoUrl"] = config.more_info_url
    if config.sample_queries:
        fields["sampleQueries"] = config.sample_queries
    return fields
