"""A user's side of a platform: its GraphQL API with an API key, and registering agents.

The platform is the running ``codeshot local up`` of the working directory (its
``.codeshot/local.json``), else the one ``CODESHOT_API_URL`` / ``CODESHOT_API_KEY`` name
when that is set (a setting the user made wins over a file found above), else the
running stack of the nearest directory above (found as git finds ``.git``), else the
default URL.
Needs only httpx: it works where just the SDK is installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from codeshot.errors import AgentUnavailable, CodeshotError, InvalidInput, NotFound, Unavailable
from codeshot.lending import RECORDS, Lent, LentRecords
from codeshot.models import as_sample_query

if TYPE_CHECKING:
    from codeshot.sdk.project import AgentConfig

STATE_FILE = Path(".codeshot") / "local.json"


class RemoteError(CodeshotError):
    """The platform refused a call; ``code`` is its stable error code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


def read_state(directory: Path | None = None) -> dict[str, Any] | None:
    """The running local stack's ``local.json`` in ``directory``, if any; without one, the
    local stack a user's command acts on (:func:`local_stack`)."""
    if directory is None:
        found = local_stack()
        return found[1] if found else None
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):  # no stack here
        return None
    return state if isinstance(state, dict) else None


def local_stack() -> tuple[Path, dict[str, Any]] | None:
    """(the file, its state) of the local stack a user's command acts on: the working
    directory's own, whatever the environment says (a stable contract: a command run
    where `codeshot local up` runs targets that stack), else the nearest above it
    (:func:`find_state`), unless ``CODESHOT_API_URL`` (or ``FIXIE_API_URL``) is set: a
    platform the user named wins over a file found in a directory above."""
    return find_state(upward=searches_above())


def searches_above() -> bool:
    """Whether a local stack's file above the working directory counts: not when the user
    named a platform (``CODESHOT_API_URL`` or ``FIXIE_API_URL``)."""
    return not _from_environment("api_url")


def find_state(start: Path | None = None, upward: bool = True
               ) -> tuple[Path, dict[str, Any]] | None:
    """(the file, its state) of the nearest ``.codeshot/local.json`` in ``start`` (default:
    cwd) or (``upward``) a directory above it, as git finds ``.git``: so an agent's
    directory inside the one `codeshot local up` runs in finds that stack. The search
    stops at the home directory (of a start under it) or the root, and, as git's
    safe.directory, before a
    directory this user does not own or that others may write to (unless sticky): there
    anyone could plant a file that would take this user's chats. A file (or its
    ``.codeshot``) another user owns is passed over, and so is one above ``start`` whose
    stack's process is gone (a crashed stack's, noted on stderr)."""
    here = (start or Path.cwd()).resolve()
    try:
        home: Path | None = Path.home().resolve()
    except RuntimeError:  # no HOME and no passwd entry
        home = None
    uid = getattr(os, "getuid", lambda: None)()
    for directory in (here, *here.parents) if upward else (here,):
        if uid is not None and not _safe_to_search(directory, uid):
            break
        state = read_state(directory) if uid is None else _read_owned_state(directory, uid)
        path = directory / STATE_FILE
        if state is not None and (directory == here or not stack_process_gone(state)):
            return path, state
        if state is not None:
            _note_once(f"codeshot: passing over {path}: the `codeshot local up` that wrote "
                       f"it (pid {state.get('pid')}) is not running")
        if directory == home:
            break
    return None


def _others_may_replace(mode: int) -> bool:
    """Whether users other than the owner may rename or delete entries of a directory of
    ``mode``: it is writable by all and not sticky (as /tmp is)."""
    return bool(mode & stat.S_IWOTH) and not mode & stat.S_ISVTX


def _safe_to_search(directory: Path, uid: int) -> bool:
    try:
        st = directory.stat()
    except OSError:
        return False
    return st.st_uid == uid and not _others_may_replace(st.st_mode)


def _read_owned_state(directory: Path, uid: int) -> dict[str, Any] | None:
    """``directory``'s local.json if it and its ``.codeshot`` are this user's own: each
    opened once without following a symlink and checked on the open file, so nothing can
    be swapped in between the check and the read."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO must not hang the CLI
    try:
        folder = os.open(directory / STATE_FILE.parent, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        st = os.fstat(folder)
        if st.st_uid != uid or _others_may_replace(st.st_mode):
            return None
        fd = os.open(STATE_FILE.name, flags, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if st.st_uid != uid or not stat.S_ISREG(st.st_mode):
            return None
        try:
            state = json.loads(file.read())
        except (OSError, ValueError):
            return None
    return state if isinstance(state, dict) else None


def stack_process_gone(state: dict[str, Any]) -> bool:
    """Whether the process of the stack that wrote ``state`` (its ``pid``) no longer
    exists: a crash, kill -9 or reboot left its local.json behind."""
    pid = state.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False  # not known: taken as running
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        pass  # another user's process: it exists
    return False


_NOTED: set[str] = set()  # what a command has said on stderr already (it looks again)


def _note_once(line: str) -> None:
    if line not in _NOTED:
        _NOTED.add(line)
        print(line, file=sys.stderr)


def state_source(path: Path) -> str:
    """A found local.json as the user would name it: relative in the working directory,
    else its whole path."""
    return str(STATE_FILE) if path == Path.cwd().resolve() / STATE_FILE else str(path)


def stale_stack(source: str) -> str:
    """What to say of the local.json named ``source`` (:func:`state_source`) whose stack
    does not answer."""
    here = " here" if source == str(STATE_FILE) else ""
    return f"the `codeshot local up` that wrote {source}{here} is not running; start it again"


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
    # The directory `codeshot local up` ran in, when its local.json named the platform:
    # serve keeps its lending records there (see :func:`lending_records`).
    stack_dir: Path | None = None

    @classmethod
    def find(cls, api_url: str | None = None, api_key: str | None = None) -> Target:
        """The platform and the key for it, taken together: a key never goes to a URL
        from another source (a planted .codeshot/local.json must not get the
        environment's key). --api-url with --api-key or CODESHOT_API_KEY; else the local
        stack's .codeshot/local.json here (:func:`local_stack`) with its own key; else
        CODESHOT_API_URL, when set, with them; else such a file above; else the default
        URL."""
        from codeshot.settings import get_settings

        settings = get_settings()
        key = api_key or settings.api_key
        if api_url:
            return cls(api_url.rstrip("/"), key, "--api-url")
        found = local_stack()
        if found is None:
            named = _from_environment("api_url")
            return cls(named[1].rstrip("/"), key, named[0]) if named else \
                cls(settings.api_url.rstrip("/"), key, "the default URL")
        path, state = found
        source = state_source(path)
        if api_key:
            raise InvalidInput(f"--api-key without --api-url here: {source} names a "
                               f"local stack with its own key; give --api-url too to send "
                               f"this key")
        url = state.get("api_url")
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"{source} names no api_url")
        stored = state.get("api_key")
        return cls(url.rstrip("/"), stored if isinstance(stored, str) else None, source,
                   path.parent.parent)

    def __str__(self) -> str:
        return f"{self.api_url} (from {self.source})"

    def lending_records(self) -> LentRecords:
        """Where serve's lendings to this platform are kept: beside the local stack's
        local.json (a serve run in an agent's directory below it finds them there too),
        else in the working directory."""
        return LentRecords(self.api_url, (self.stack_dir or Path.cwd()) / RECORDS)


class GraphQLClient:
    def __init__(self, graphql_url: str, api_key: str | None, timeout: float = 60.0,
                 source: str = "") -> None:
        """``source``: where the URL came from (Target.source), named in errors."""
        if not api_key:
            raise InvalidInput(f"no API key for {graphql_url}"
                               f"{f' (from {source})' if source else ''}: run in the "
                               f"directory where `codeshot local up` runs (or under it, "
                               f"CODESHOT_API_URL unset: it reads .codeshot/local.json "
                               f"there), or set CODESHOT_API_KEY "
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
        if self.source.endswith(str(STATE_FILE)):
            return Unavailable(f"the platform at {url} does not answer: "
                               f"{stale_stack(self.source)}")
        return Unavailable(f"cannot reach the platform at {url}: {exc}")


USERNAME = "query { user { username } }"
AGENT = "query ($id: String!) { agentById(agentId: $id) { agentId } }"
AGENT_FIELDS = "agent { agentId kind conversational }"
CREATE = f"mutation ($d: AgentInput!) {{ createAgent(agentData: $d) {{ {AGENT_FIELDS} }} }}"
UPDATE = f"mutation ($d: AgentInput!) {{ updateAgent(agentData: $d) {{ {AGENT_FIELDS} }} }}"


REVISION_FIELDS = "id metadata { key value } externalDeployment { url }"
CURRENT = ("query ($id: String!) { agentById(agentId: $id) { name description queries "
           f"moreInfoUrl published currentRevision {{ {REVISION_FIELDS} }} "
           f"allRevisions {{ {REVISION_FIELDS} }} }} }}")
# Marks the revisions serve_here makes: one left current at a loopback URL (its previous
# server did not answer at the Ctrl-C) is serve's own, taken over by the next serve_here.
SERVED = {"key": "codeshot", "value": "serve"}
# Beside SERVED: the revision before any serve lent the agent (serves may lend it on, one
# on top of the other), where the last of them to stop takes it back.
HOME = "codeshot.home"
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
    moreInfoUrl may be null, and "" clears it (null leaves a field as it is); a sample query
    stored before blanks were refused is left out, one stored before long ones were cut is
    cut (given back as it is, either would be refused)."""
    described = {k: "" if agent[name] is None else agent[name]
                 for k, name in DESCRIBING.items()}
    described["sampleQueries"] = [as_sample_query(q) for q in described["sampleQueries"]
                                  if q.strip()]
    return described


def loopback_port(url: str | None) -> int | None:
    """The port of ``url`` if it is on this machine (where `codeshot serve` serves)."""
    where = urlsplit(url or "")
    return where.port if where.hostname in ("127.0.0.1", "localhost", "::1") else None


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
    """What :meth:`PlatformClient.give_back` did. ``restored``: the revision ``back_to``
    (the previous one's URL, or the home one's past a serve that stopped) is current
    again, with DESCRIBING's fields but ``changed`` (the owner's changes made while lent).
    Otherwise the agent was left as it is: ``moved_to`` the URL of a current revision
    that is not the lent one (switched meanwhile; ``lent_on`` if by another serve, which
    takes it home when it stops: the lent revision was deleted), ``deleted`` if the lent
    revision was (a later serve took the agent home past it, or its owner deleted it),
    ``gone`` if the revision to go back to was deleted meanwhile (``agent_gone``: the
    agent, or its handle renamed), else
    its server (``back_to``) does not answer. ``taken_over``: the lent revision is
    current at ``moved_to``, where another serve took it over (its own serve stopped)."""

    restored: bool
    changed: tuple[str, ...] = ()
    moved_to: str | None = None
    lent_on: bool = False
    taken_over: bool = False
    agent_gone: bool = False

    @property
    def left_lent(self) -> bool:
        """Whether the agent is still lent, its server to go back to not answering."""
        return not (self.restored or self.moved_to or self.lent_on or self.taken_over
                    or self.deleted or self.gone or self.agent_gone)
    deleted: bool = False
    gone: bool = False
    back_to: str | None = None


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

    def __init__(self, target: Target, records: LentRecords | None = None,
                 timeout: float = 60.0) -> None:
        """``records``: where serve_here keeps what it lent until give_back."""
        super().__init__(target.api_url + "/graphql", target.api_key, timeout, target.source)
        self.target, self.records = target, records

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
        even if its server does not answer now), its home revision (the previous one's,
        if a serve lent it already) and what described it kept for :meth:`give_back`,
        and in ``records`` while lent."""
        agent_id = f"{self.username()}/{fields['handle']}"
        agent = self.call(CURRENT, {"id": agent_id})["agentById"]
        previous = (agent or {}).get("currentRevision")
        if agent is None or previous is None:
            return Serving(self.register(fields)[0])
        previous_url = _url(previous)
        here = previous_url == fields["funcUrl"]  # served here again: it stays here
        unanswered = previous_url if previous_url and not here and not answers(
            previous_url) else None
        if unanswered and SERVED in previous.get("metadata", []) and loopback_port(unanswered):
            return Serving(self.register(fields)[0], unanswered=unanswered)
        home_id, home_url = _home(agent, previous)
        if self.records is not None:
            try:
                self.records.check()
            except OSError as exc:
                raise self._unkept(agent_id, exc, "nothing was lent") from exc
        made = self.call(NEW_REVISION, {"h": fields["handle"], "u": fields["funcUrl"],
                                        "m": [SERVED, {"key": HOME, "value": home_id}]})
        # All of them, also those agent.yaml leaves out: switching revisions adds the
        # few-shots' queries to the sample queries.
        restore = {} if here else _described(agent)
        lent = Lent(agent_id, fields["handle"], fields["funcUrl"],
                    str(made["createAgentRevision"]["revision"]["id"]), str(previous["id"]),
                    previous_url, restore, {}, home_id, home_url,
                    self._home_restore(agent_id, str(previous["id"]), restore)
                    if home_id != str(previous["id"]) else restore)
        self._kept(lent)
        try:
            self.call(UPDATE, {"d": {k: v for k, v in fields.items()
                                     if k not in ("queryUrl", "funcUrl")}})
        except CodeshotError:  # agent.yaml refused: the agent goes back as it was
            self.give_back(lent)
            raise
        now = self.call(CURRENT, {"id": agent_id})["agentById"]
        lent = dataclasses.replace(lent, lent_as=_described(now))
        self._kept(lent)
        return Serving(agent_id, lent, unanswered)

    def _keep(self, lent: Lent) -> None:
        if self.records is not None:
            self.records.keep(lent)

    def _drop(self, agent_id: str, revision_id: str) -> None:
        if self.records is not None:
            self.records.drop(agent_id, revision_id)

    def _kept(self, lent: Lent) -> None:
        """Keep serve_here's record of ``lent``; if it cannot be written, the agent is
        given back at once (lent without a record, a kill would strand it); said if it
        cannot be either."""
        try:
            self._keep(lent)
        except OSError as exc:
            stays = f"it stays lent to {lent.url}, not given back"
            try:  # no records: they cannot be kept
                given = PlatformClient(self.target).give_back(lent)
            except CodeshotError as failed:
                raise self._unkept(lent.agent_id, exc, f"{stays} ({failed})") from failed
            raise self._unkept(lent.agent_id, exc, f"{stays} (its previous server "
                               f"{given.back_to} does not answer)" if given.left_lent
                               else "given back") from exc

    def _unkept(self, agent_id: str, exc: OSError, done: str) -> InvalidInput:
        where = self.records.directory if self.records is not None else None
        return InvalidInput(f"cannot keep the record of lending {agent_id} in {where} "
                            f"({exc.strerror or exc}): {done}; make that directory writable, "
                            "or serve without --register")

    def _home_restore(self, agent_id: str, lender_id: str,
                      restore: dict[str, Any]) -> dict[str, Any]:
        """What described the agent at home, lent from the serve whose revision is
        ``lender_id`` (seen as ``restore``): that serve's record's, but the fields its
        owner changed while that serve lent it; ``restore`` if no record of it is here."""
        lender = next((lent for lent in self.records.of(agent_id)
                       if lent.revision_id == lender_id), None) if self.records else None
        return restore if lender is None else _under(lender, lender.home_restore, restore)

    def _past_stopped(self, lent: Lent, kept: set[str], stopping: Lent | None
                      ) -> tuple[Lent, list[Lent]]:
        """``lent`` to be given back past the serves under it that stopped (killed), by
        their records here, and ``stopping``'s (that serve is stopping, its server still
        answers), to the first one still serving (or home); their records."""
        stopped = []
        while lent.previous_id != lent.home_id and lent.previous_id in kept:
            if stopping is not None and lent.previous_id == stopping.revision_id:
                below: Lent | None = stopping
            elif self.records is None or (lent.previous_url and answers(lent.previous_url)):
                break
            else:
                below = next((other for other in self.records.of(lent.agent_id)
                              if other.revision_id == lent.previous_id), None)
            if below is None:
                break
            stopped.append(below)
            lent = dataclasses.replace(lent, previous_id=below.previous_id,
                                       previous_url=below.previous_url,
                                       restore=_under(below, below.restore, lent.restore))
        return lent, stopped

    def give_back(self, lent: Lent, stopping: Lent | None = None) -> GivenBack:
        """Make the revision before :meth:`serve_here`'s current again (the home one if
        the serve it was lent from stopped: that one's revision is deleted too), delete
        its own and set back what described the agent, but the fields its owner changed
        while it was lent. Nothing is changed if the lent revision is no longer current
        (switched meanwhile; by another serve lending it on: then the lent revision is
        deleted, that serve goes home past it, or this one if that serve stopped), if the
        revision to go back to was deleted, if another serve took the lent revision over
        (moved it to its own URL) and serves it, or if its URL does not answer: the agent
        stays where it is. Its record is dropped then, kept if this fails (the platform unreachable)
        or the agent stays lent (the URL to go back to does not answer: for a retry,
        the only thing that knows it). ``stopping``: the lending of a serve under this one
        that is stopping (it lent the agent on to this one, which stopped): given back
        past it too, though its server still answers."""
        given = self._give_back(lent, stopping)
        if not given.left_lent:
            self._drop(lent.agent_id, lent.revision_id)
        return given

    def _give_back(self, lent: Lent, stopping: Lent | None) -> GivenBack:
        agent = self.call(CURRENT, {"id": lent.agent_id})["agentById"]
        current = (agent or {}).get("currentRevision")
        if agent is None:
            return GivenBack(False, agent_gone=True)
        if current is None:
            return GivenBack(False, gone=True, back_to=_back_to(lent))
        kept = {str(r["id"]) for r in agent["allRevisions"]}
        current_id = str(current["id"])
        if lent.back_id is not None and current_id == lent.back_id:
            # This restore, cut short after its switch: finished below, but the fields
            # the owner changed since (neither the lender's nor those it sets back).
            described, back = _described(agent), _restore_of(lent)
            lent = dataclasses.replace(lent, changed=[
                k for k, v in lent.lent_as.items()
                if k in lent.changed or _set_since(k, described[k], (v, back.get(k, v)))])
        elif lent.revision_id not in kept:  # a later serve took it home past this one
            return GivenBack(False, deleted=True)
        elif current_id != lent.revision_id:
            lent_on = SERVED in current["metadata"] and {"key": HOME, "value": lent.home_id} \
                in current["metadata"]
            upper_url = _url(current)
            if lent_on and upper_url and not answers(upper_url):  # that serve stopped
                given = self._back_past(lent, current_id, upper_url)
                self._delete(lent.handle, lent.revision_id)  # if it was not given back past
                return given
            if lent_on:
                self._delete(lent.handle, lent.revision_id)
            return GivenBack(False, moved_to=_url(current), lent_on=lent_on)
        elif (moved := _url(current)) != lent.url and moved and answers(moved):
            # Another serve took it over and serves it; one that stopped since left it to
            # this record, the only one that knows where it goes back to.
            return GivenBack(False, moved_to=moved, taken_over=True)
        else:
            lent, stopped = self._past_stopped(lent, kept, stopping)
            past = lent.previous_id != lent.home_id and lent.home_id in kept and (
                lent.previous_id not in kept
                or not (lent.previous_url and answers(lent.previous_url)))
            described = _described(agent)
            # Home, past the revision of the serve it was lent from, if that one stopped.
            lent = dataclasses.replace(
                lent, back_id=lent.home_id if past else lent.previous_id,
                changed=[k for k, v in lent.lent_as.items() if described[k] != v])
            self._keep(lent)
            for below in stopped:  # not current: deleted before the switch (a retry's not)
                self._delete(lent.handle, below.revision_id)
                self._drop(lent.agent_id, below.revision_id)
            try:
                self.call(SET_CURRENT, {"h": lent.handle, "r": lent.back_id})
            except RemoteError as exc:
                if exc.code not in (AgentUnavailable.code, NotFound.code):
                    raise
                return GivenBack(False, gone=exc.code == NotFound.code,
                                 back_to=_back_to(lent))
        home = lent.back_id != lent.previous_id
        for revision_id in (lent.revision_id, *([lent.previous_id] if home else [])):
            if revision_id in kept:
                self._delete(lent.handle, revision_id)
        if home:  # the stopped serve's, if it was killed here
            self._drop(lent.agent_id, lent.previous_id)
        restore = {k: v for k, v in _restore_of(lent).items() if k not in lent.changed}
        if restore:
            self.call(UPDATE, {"d": {"handle": lent.handle, **restore}})
        return GivenBack(True, tuple(lent.changed), back_to=_back_to(lent))

    def _delete(self, handle: str, revision_id: str) -> None:
        """Delete the revision ``revision_id``; one deleted already is done (another
        process finishing the same lending at once)."""
        try:
            self.call(DELETE_REVISION, {"h": handle, "r": revision_id})
        except RemoteError as exc:
            if exc.code != NotFound.code:
                raise

    def _back_past(self, lent: Lent, upper_id: str, upper_url: str) -> GivenBack:
        """Give the agent ``lent`` (stopping) was lent on from (to the revision ``upper_id``
        at ``upper_url``, whose serve stopped) back past ``lent``, as that serve would
        have: to the first serve under them still running, else home; by its record if it
        is here, else as lent on from ``lent`` (what it set is not known)."""
        upper = next((other for other in self.records.of(lent.agent_id)
                      if other.revision_id == upper_id), None) if self.records else None
        return self.give_back(upper or Lent(
            lent.agent_id, lent.handle, upper_url, upper_id, lent.revision_id, lent.url,
            lent.lent_as, {}, lent.home_id, lent.home_url, lent.home_restore), stopping=lent)

    def finish_restores(self, agent_id: str, here: str | None = None
                        ) -> list[tuple[Lent, GivenBack | None]]:
        """Give back ``agent_id``'s lendings in ``records`` whose serve ended without
        (killed) with :meth:`give_back`'s rules, the latest first; None for one still
        served (its URL answers, and is not ``here``, where this process serves)."""
        if self.records is None:
            return []
        done: list[tuple[Lent, GivenBack | None]] = []
        for lent in self.records.of(agent_id):
            if lent.revision_id not in {other.revision_id
                                        for other in self.records.of(agent_id)}:
                continue  # given back meanwhile, past it by the one above it
            done.append((lent, None if lent.url != here and answers(lent.url)
                         else self.give_back(lent)))
        return done


def _back_to(lent: Lent) -> str | None:
    """The URL ``lent`` is given back to: its previous revision's, or its home's."""
    return lent.home_url if lent.back_id != lent.previous_id else lent.previous_url


def _under(lender: Lent, before: dict[str, Any], restore: dict[str, Any]) -> dict[str, Any]:
    """What described the agent before ``lender`` lent it (``before``), seen as
    ``restore`` since: but the fields its owner changed while ``lender`` lent it."""
    return {k: before.get(k, v) if lender.lent_as.get(k, v) == v else v
            for k, v in restore.items()}


def _set_since(field: str, value: Any, before: tuple[Any, ...]) -> bool:
    """Whether the agent's ``field`` now ``value`` was set since it was one of ``before``:
    sample queries only by a query none of them has (switching revisions adds its
    few-shots' queries to them)."""
    if field == "sampleQueries":
        return not set(value) <= {query for queries in before for query in queries}
    return value not in before


def _restore_of(lent: Lent) -> dict[str, Any]:
    """What described the agent where ``lent`` is given back to (``back_id``)."""
    return lent.home_restore if lent.back_id != lent.previous_id else lent.restore


def _url(revision: dict[str, Any]) -> str | None:
    url: str | None = (revision.get("externalDeployment") or {}).get("url")
    return url


def _home(agent: dict[str, Any], previous: dict[str, Any]) -> tuple[str, str | None]:
    """The home revision of ``agent`` (as CURRENT reads it), lent from ``previous``: the
    one a serve's ``previous`` names if it is kept, else ``previous``; and its URL."""
    named = next((pair["value"] for pair in previous.get("metadata", [])
                  if pair["key"] == HOME), None) if SERVED in previous.get("metadata", []) \
        else None
    home = next((r for r in agent["allRevisions"] if str(r["id"]) == named), previous)
    return str(home["id"]), _url(home)


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
