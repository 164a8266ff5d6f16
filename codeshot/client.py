"""A user's side of a platform: its GraphQL API with an API key, and registering agents.

The platform is the running ``codeshot local up`` of the working directory (its
``.codeshot/local.json``), else the one ``CODESHOT_API_URL`` / ``CODESHOT_API_KEY`` name.
Needs only httpx: it works where just the SDK is installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from codeshot.errors import AgentUnavailable, CodeshotError, InvalidInput, NotFound, Unavailable

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
    except (FileNotFoundError, NotADirectoryError, ValueError):  # no stack here
        return None
    return state if isinstance(state, dict) else None


def _from_environment(field: str) -> tuple[str, str] | None:
    """The variable that sets Settings' ``field``, and its value, if one is set."""
    from codeshot.settings import env_names, field_named

    names = env_names(field_named(field))
    return next(((name, os.environ[name]) for name in names if os.environ.get(name)), None)


@dataclass(frozen=True)
class Target:
    api_url: str
    api_key: str | None
    source: str  # where the URL came from, as the user would name it

    @classmethod
    def find(cls, api_url: str | None = None, api_key: str | None = None) -> Target:
        """The platform and the key for it, taken together: a key never goes to a URL
        from another source (a planted .codeshot/local.json must not get the
        environment's key). --api-url with --api-key or CODESHOT_API_KEY; else the local
        stack's .codeshot/local.json here with its own key; else CODESHOT_API_URL (or the
        default URL) with --api-key or CODESHOT_API_KEY."""
        from codeshot.settings import get_settings

        settings = get_settings()
        key = api_key or settings.api_key
        if api_url:
            return cls(api_url.rstrip("/"), key, "--api-url")
        state = read_state()
        if state is None:
            named = _from_environment("api_url")
            return cls(named[1].rstrip("/"), key, named[0]) if named else \
                cls(settings.api_url.rstrip("/"), key, "the default URL")
        if api_key:
            raise InvalidInput(f"--api-key without --api-url here: {STATE_FILE} names a "
                               f"local stack with its own key; give --api-url too to send "
                               f"this key")
        url = state.get("api_url")
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"{STATE_FILE} here names no api_url")
        stored = state.get("api_key")
        return cls(url.rstrip("/"), stored if isinstance(stored, str) else None,
                   str(STATE_FILE))

    def __str__(self) -> str:
        return f"{self.api_url} (from {self.source})"


class GraphQLClient:
    def __init__(self, graphql_url: str, api_key: str | None, timeout: float = 60.0,
                 source: str = "") -> None:
        """``source``: where the URL came from (Target.source), named in errors."""
        if not api_key:
            raise InvalidInput(f"no API key for {graphql_url}"
                               f"{f' (from {source})' if source else ''}: run in the "
                               f"directory where `codeshot local up` runs (it reads "
                               f".codeshot/local.json there), or set CODESHOT_API_KEY "
                               f"(or pass --api-key, where the command has it)")
        self.url, self.source = graphql_url, source
        self.http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"},
                                 timeout=timeout)

    def call(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self.http.post(self.url, json={"query": query,
                                                      "variables": variables or {}})
        except httpx.HTTPError as exc:
            raise self.unreachable(self.url, exc) from exc
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

    def unreachable(self, url: str, exc: httpx.HTTPError) -> Unavailable:
        if self.source == str(STATE_FILE):
            return Unavailable(f"the platform at {url} does not answer: the `codeshot local "
                               f"up` that wrote {STATE_FILE} here is not running; start it "
                               f"again")
        return Unavailable(f"cannot reach the platform at {url}: {exc}")


USERNAME = "query { user { username } }"
AGENT = "query ($id: String!) { agentById(agentId: $id) { agentId } }"
AGENT_FIELDS = "agent { agentId kind conversational }"
CREATE = f"mutation ($d: AgentInput!) {{ createAgent(agentData: $d) {{ {AGENT_FIELDS} }} }}"
UPDATE = f"mutation ($d: AgentInput!) {{ updateAgent(agentData: $d) {{ {AGENT_FIELDS} }} }}"


CURRENT = ("query ($id: String!) { agentById(agentId: $id) { name description queries "
           "moreInfoUrl published currentRevision { id metadata { key value } "
           "externalDeployment { url } } } }")
# Marks the revisions serve_here makes: one left current at a loopback URL (its previous
# server did not answer at the Ctrl-C) is serve's own, taken over by the next serve_here.
SERVED = {"key": "codeshot", "value": "serve"}
NEW_REVISION = ("mutation ($h: String!, $u: String!, $m: [RevisionMetadataKeyValuePairInput!]!)"
                " { createAgentRevision(agentHandle: $h, makeCurrent: true, revision: "
                "{metadata: $m, externalDeployment: {url: $u}}, reindexCorpora: false) "
                "{ revision { id } } }")
SET_CURRENT = ("mutation ($h: String!, $r: ID!) { updateAgent(agentData: {handle: $h, "
               "currentRevisionId: $r}) { agent { agentId } } }")
DELETE_REVISION = ("mutation ($h: String!, $r: ID!) { deleteAgentRevision(agentHandle: $h, "
                   "revisionId: $r) { agent { agentId } } }")
# What describes an agent to users and the router (AgentInput's names: AgentType's),
# read before serve_here lends the agent and set back after.
DESCRIBING = {"name": "name", "description": "description", "moreInfoUrl": "moreInfoUrl",
              "sampleQueries": "queries", "published": "published"}


def _described(agent: dict[str, Any]) -> dict[str, Any]:
    """DESCRIBING's fields of ``agent`` (as CURRENT reads it), as AgentInput takes them:
    moreInfoUrl may be null, and "" clears it (null leaves a field as it is); a blank sample
    query stored before blanks were refused is left out (given back, it would be refused)."""
    described = {k: "" if agent[name] is None else agent[name]
                 for k, name in DESCRIBING.items()}
    described["sampleQueries"] = [q for q in described["sampleQueries"] if q.strip()]
    return described


def loopback_port(url: str | None) -> int | None:
    """The port of ``url`` if it is on this machine (where `codeshot serve` serves)."""
    where = urlsplit(url or "")
    return where.port if where.hostname in ("127.0.0.1", "localhost", "::1") else None


@dataclass(frozen=True)
class Lent:
    """An agent that was registered already, served here for a while: its new revision
    (current while served), the one to make current again after, what described it
    before (``restore``) and what serve_here made of that (``lent_as``; both
    DESCRIBING's fields, as AgentInput takes them)."""

    agent_id: str
    handle: str
    revision_id: str
    previous_id: str
    previous_url: str | None
    restore: dict[str, Any]
    lent_as: dict[str, Any]


@dataclass(frozen=True)
class Serving:
    """What :meth:`PlatformClient.serve_here` did: ``lent`` is None when the agent stays
    at the URL served (new, or at a serve's own revision left behind); ``unanswered``:
    the previous server, if it did not answer."""

    agent_id: str
    lent: Lent | None = None
    unanswered: str | None = None


@dataclass(frozen=True)
class GivenBack:
    """What :meth:`PlatformClient.give_back` did. ``restored``: the previous revision is
    current again, with DESCRIBING's fields but ``changed`` (the owner's changes made
    while lent). Otherwise the agent was left as it is: ``moved_to`` the URL of a
    current revision that is not the lent one (switched meanwhile), ``gone`` if the
    previous revision (or the agent) was deleted meanwhile, else the previous server
    does not answer."""

    restored: bool
    changed: tuple[str, ...] = ()
    moved_to: str | None = None
    gone: bool = False


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether anything answers at ``url`` (any HTTP status does): a server that stopped
    refuses the connection, or never takes it."""
    try:
        httpx.get(url, timeout=timeout)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return False
    except httpx.HTTPError:  # it took the connection: a server is there
        return True
    return True


class PlatformClient(GraphQLClient):
    """A user's calls to one platform (``target``)."""

    def __init__(self, target: Target, timeout: float = 60.0) -> None:
        super().__init__(target.api_url + "/graphql", target.api_key, timeout, target.source)
        self.target = target

    def username(self) -> str:
        username: str = self.call(USERNAME)["user"]["username"]
        return username

    def register(self, fields: dict[str, Any]) -> tuple[str, bool]:
        """Create the caller's agent ``fields["handle"]``, or update it and re-read its
        handshake (its code may have changed at the same URL); its id, and whether it
        was registered before (updated)."""
        agent_id = f"{self.username()}/{fields['handle']}"
        if self.call(AGENT, {"id": agent_id})["agentById"] is None:
            return str(self.call(CREATE, {"d": fields})["createAgent"]["agent"]["agentId"]), False
        self.call(UPDATE, {"d": fields})
        try:
            response = self.http.post(f"{self.target.api_url}/api/refresh/{agent_id}")
        except httpx.HTTPError as exc:
            raise self.unreachable(self.target.api_url, exc) from exc
        if response.status_code != 200:
            error = response.json().get("error", {}) if response.content else {}
            raise RemoteError(error.get("message", f"refresh answered HTTP "
                                        f"{response.status_code}"),
                              error.get("code", CodeshotError.code))
        return agent_id, True

    def serve_here(self, fields: dict[str, Any]) -> Serving:
        """The caller's agent ``fields["handle"]`` answered at ``fields["funcUrl"]`` for as
        long as it is served there (as `fixie serve` does). A new agent is created; one
        at a revision an earlier serve left current at a loopback URL that does not
        answer is registered here (that revision moves: no revision piles up). Any other
        is lent (one served here again keeps agent.yaml's fields after): a new current
        revision at this URL and agent.yaml's other fields, its previous revision (kept,
        even if its server does not answer now) and what described it kept for
        :meth:`give_back`."""
        agent_id = f"{self.username()}/{fields['handle']}"
        agent = self.call(CURRENT, {"id": agent_id})["agentById"]
        previous = (agent or {}).get("currentRevision")
        if agent is None or previous is None:
            return Serving(self.register(fields)[0])
        previous_url = (previous.get("externalDeployment") or {}).get("url")
        here = previous_url == fields["funcUrl"]  # served here again: it stays here
        unanswered = previous_url if previous_url and not here and not answers(
            previous_url) else None
        if unanswered and SERVED in previous.get("metadata", []) and loopback_port(unanswered):
            return Serving(self.register(fields)[0], unanswered=unanswered)
        made = self.call(NEW_REVISION, {"h": fields["handle"], "u": fields["funcUrl"],
                                        "m": [SERVED]})
        # All of them, also those agent.yaml leaves out: switching revisions adds the
        # few-shots' queries to the sample queries.
        lent = Lent(agent_id, fields["handle"],
                    str(made["createAgentRevision"]["revision"]["id"]), str(previous["id"]),
                    previous_url, {} if here else _described(agent), {})
        try:
            self.call(UPDATE, {"d": {k: v for k, v in fields.items()
                                     if k not in ("queryUrl", "funcUrl")}})
        except CodeshotError:  # agent.yaml refused: the agent goes back as it was
            self.give_back(lent)
            raise
        now = self.call(CURRENT, {"id": agent_id})["agentById"]
        return Serving(agent_id, dataclasses.replace(lent, lent_as=_described(now)),
                       unanswered)

    def give_back(self, lent: Lent) -> GivenBack:
        """Make the revision before :meth:`serve_here`'s current again, delete its own and
        set back what described the agent, but the fields its owner changed while it was
        lent. Nothing is changed if the lent revision is no longer current (switched
        meanwhile), if the previous one was deleted, or if the previous URL does not
        answer: the agent stays where it is."""
        agent = self.call(CURRENT, {"id": lent.agent_id})["agentById"]
        current = (agent or {}).get("currentRevision")
        if agent is None or current is None:
            return GivenBack(False, gone=True)
        if str(current["id"]) != lent.revision_id:
            return GivenBack(False, moved_to=(current.get("externalDeployment") or {}).get(
                "url"))
        described = _described(agent)
        changed = tuple(k for k, v in lent.lent_as.items() if described[k] != v)
        try:
            self.call(SET_CURRENT, {"h": lent.handle, "r": lent.previous_id})
        except RemoteError as exc:
            if exc.code not in (AgentUnavailable.code, NotFound.code):
                raise
            return GivenBack(False, gone=exc.code == NotFound.code)
        self.call(DELETE_REVISION, {"h": lent.handle, "r": lent.revision_id})
        restore = {k: v for k, v in lent.restore.items() if k not in changed}
        if restore:
            self.call(UPDATE, {"d": {"handle": lent.handle, **restore}})
        return GivenBack(True, changed)


def agent_fields(config: AgentConfig, url: str) -> dict[str, Any]:
    """agent.yaml as ``createAgent``/``updateAgent``'s agentData, served at ``url``."""
    # Fixie's agent.yaml descriptions are often block scalars; the platform keeps one line.
    fields: dict[str, Any] = {"handle": config.handle, "queryUrl": url, "funcUrl": url,
                              "published": config.published}
    # What agent.yaml leaves out is left as registered (an update), not emptied.
    if config.description.strip():
        # Fixie's agent.yaml descriptions are often block scalars; the platform keeps one line.
        fields["description"] = " ".join(config.description.split())
    if config.name:
        fields["name"] = config.name
    if config.more_info_url:
        fields["moreInfoUrl"] = config.more_info_url
    if config.sample_queries:
        fields["sampleQueries"] = config.sample_queries
    return fields
