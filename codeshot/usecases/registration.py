"""Registering, updating, refreshing and deleting agents.

A registration learns what the agent is from its handshake (``GET {url}/``) unless the
few-shots come inline; the few-shots are validated with the engine's grammar before
anything is written, and agent URLs must pass the SSRF check. Heavy to import (the
router's embeddings): transports import it where they use it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codeshot.engine.fewshot import (
    func_names,
    lines_of,
    parse_few_shots,
    sample_queries,
    split_few_shots,
    validate_base_prompt,
)
from codeshot.errors import CodeshotError, Conflict, InvalidInput, NotFound, Unavailable
from codeshot.models import (
    MAX_SAMPLE_QUERIES,
    MAX_SAMPLE_QUERY,
    PLATFORM_FUNC_NAMES,
    Agent,
    AgentKind,
    Principal,
    check_agent_fields,
    check_sample_query,
    utcnow,
    validate_handle,
)
from codeshot.net.addresses import check_public_url
from codeshot.routing.index import keep_no_agent_rows, with_embeddings
from codeshot.runner.handshake import Handshake, fetch_handshake
from codeshot.services import Services
from codeshot.settings import API_CALL_SECONDS
from codeshot.store.registry import check_size
from codeshot.text import as_one_line
from codeshot.usecases.agent_removal import forget_corpora, remove_agent, sweep_storage

if TYPE_CHECKING:
    from codeshot.runner.mcp_servers import McpServerInfo

# Of the API's 29 s, what a rename spends deleting its old id's corpus (the rest waits for
# the next agent of that id, whose registration sweeps it first).
RENAME_SWEEP_SECONDS = 5.0
HandshakeFetcher = Callable[[str, str], Handshake]
# (MCP server URL, its Authorization header or None) -> its name, instructions and tools
McpDescriber = Callable[[str, str | None], "McpServerInfo"]
# (services, caller, what the client may send again: charged once a day) -> None
ChangeCharge = Callable[[Services, Principal, str | None], None]


# Why `fixie deploy` (code for the platform to build) is refused, and what works instead.
NOT_BUILT = ("codeshot does not build code on request: use `codeshot serve DIR --register` "
             "locally (then `fixie serve --no-tunnel` with a deployment_url in agent.yaml "
             "serves new revisions of the agent), `cdk deploy` in AWS, or `codeshot agent "
             "register DIR --url URL`")


@dataclass
class AgentFields:
    """What a client may set on an agent; None leaves a field as it is on update."""

    name: str | None = None
    description: str | None = None
    query_url: str | None = None
    func_url: str | None = None
    more_info_url: str | None = None
    published: bool | None = None
    base_prompt: str | None = None
    few_shots: list[str] | None = None
    sample_queries: list[str] | None = None
    conversational: bool | None = None  # inline few-shots' agent; a handshake says its own
    mcp_url: str | None = None  # an MCP server whose tools are the agent's Funcs ("": none)
    mcp_authorization: str | None = None  # the header to call it with; kept as a secret


@dataclass(frozen=True)
class FewShotText:
    """Few-shots written as one text, as a form holds them: split where Fixie split them
    (a blank line, then ``Q:``), remembering where each starts, so that a grammar error
    ("few-shot 2, line 3") can be shown on the line of the text it names."""

    lines: list[str]
    few_shots: list[str]
    starts: list[int]  # each few-shot's first line, as an index into ``lines``

    @classmethod
    def of(cls, text: str) -> FewShotText:
        lines = lines_of(text)
        few_shots = split_few_shots(text) if text.strip() else []
        starts, cursor = [], 0
        for block in few_shots:
            first = lines_of(block)[0]
            while lines[cursor].strip() != first:  # blank lines between few-shots
                cursor += 1
            starts.append(cursor)
            cursor += len(lines_of(block))
        return cls(lines, few_shots, starts)

    def line_of(self, error: CodeshotError) -> int | None:
        """The index into ``lines`` that a grammar error names, if it names one."""
        number, line = error.details.get("few_shot"), error.details.get("line")
        if not isinstance(number, int) or not 1 <= number <= len(self.starts):
            return None
        if not isinstance(line, int):
            return self.starts[number - 1]
        return min(self.starts[number - 1] + line - 1, len(self.lines) - 1)


def daily_agent_change(services: Services, principal: Principal, once: str | None = None
                       ) -> None:
    """One change against the caller's daily allowance (``CODESHOT_DAILY_AGENT_CHANGES``);
    a change named ``once`` (under a client's idempotency key) is charged once a day,
    however often it is sent, at the same time too."""
    subject, most = principal.user_id or "", services.settings.daily_agent_changes
    if once is None:
        services.usage.charge("agent-change", subject, most)
    else:
        services.usage.charge_once("agent-change", subject, most, once, 1)


def daily_revision_switch(services: Services, principal: Principal) -> None:
    """One switch to a revision an agent has, against twice the changes' daily allowance:
    each revision made (a change) can be switched away from and back, as ``fixie serve``
    does when it stops, without its change allowance, but a switch reads a handshake and
    may start a corpus ingestion, so it is not free for ever."""
    services.usage.charge("revision-switch", principal.user_id or "",
                          2 * services.settings.daily_agent_changes)


class AgentRegistration:
    def __init__(self, services: Services, *, charge: ChangeCharge | None,
                 fetch: HandshakeFetcher | None = None,
                 describe_mcp: McpDescriber | None = None) -> None:
        """``charge``: what a change costs its caller (users' changes:
        :func:`daily_agent_change`); None for the operator's deploys and the local stack's
        own agents. Passed in, not chosen here, so that the deploying function's code
        never reaches the usage table its role cannot write."""
        self.s = services
        self.charge = charge
        self.fetch = fetch or functools.partial(
            fetch_handshake, allow_loopback=services.settings.local_mode)
        self.describe_mcp = describe_mcp or self._describe_mcp

    def _describe_mcp(self, url: str, authorization: str | None) -> McpServerInfo:
        from codeshot.runner.mcp_servers import McpServer

        settings = self.s.settings
        return McpServer(url, authorization,
                         timeout=min(settings.agent_call_timeout_seconds, API_CALL_SECONDS),
                         allow_loopback=settings.local_mode).describe()

    def _owner(self, principal: Principal) -> str:
        if not principal.username:
            raise InvalidInput("only users can own agents")
        return principal.username

    def _check_urls(self, agent: Agent) -> None:
        allow = self.s.settings.local_mode
        for url in (agent.query_url, agent.func_url, agent.mcp_url):
            if url:
                check_public_url(url, allow_loopback=allow)
        if agent.more_info_url and not agent.more_info_url.startswith(("http://", "https://")):
            raise InvalidInput("moreInfoUrl must be an http(s) URL")

    def describe(self, agent: Agent, inline: bool, authorization: str | None = None) -> Agent:
        """Fill prompt, few-shots, kind and sample queries from the handshake (or inline);
        an MCP agent's tools from its server (``authorization``: the header to call it
        with; else the one kept for it)."""
        self._check_urls(agent)
        if agent.mcp_url:
            return self._describe_mcp_agent(agent, authorization)
        agent = agent.replace(mcp_tools=None)
        url = agent.func_url or agent.query_url
        if not inline:
            if not url:
                # `fixie deploy` and `fixie serve` send this for a new agent: what works
                # instead comes first, for either command.
                raise InvalidInput(
                    "an agent is registered where it answers: createAgent without a URL "
                    "(what `fixie deploy` and `fixie serve` send for a new agent) asks for "
                    f"its code to be built and hosted; {NOT_BUILT}. (createAgent takes "
                    "queryUrl or funcUrl, or the few-shots inline.)")
            token = self.s.auth.agent_token(agent.agent_id, None, None)
            hs = self.fetch(url, token)
            kind = AgentKind.STANDALONE if hs.type == "standalone" else AgentKind.CODE_SHOT
            agent = check_agent_fields(agent.replace(
                kind=kind, base_prompt=hs.base_prompt, few_shots=hs.few_shots,
                sample_queries=hs.sample_queries or agent.sample_queries,
                conversational=hs.conversational, llm_settings=hs.llm_settings(),
                corpora=hs.corpora, funcs=hs.func_names()))
        elif agent.few_shots or agent.base_prompt:
            agent = agent.replace(kind=AgentKind.CODE_SHOT)
        if agent.kind is AgentKind.CODE_SHOT:
            # No few-shots: a plain LLM agent answering from its base prompt (Fixie 1.0).
            validate_base_prompt(agent.base_prompt)
            parsed = parse_few_shots(agent.few_shots, conversational=agent.conversational)
            if not agent.func_url:
                agent = agent.replace(func_url=agent.query_url)
            queries = list(dict.fromkeys(sample_queries(parsed) + agent.sample_queries)
                           )[:MAX_SAMPLE_QUERIES]
            agent = agent.replace(sample_queries=queries)
        elif not agent.query_url:
            raise InvalidInput("a standalone agent needs queryUrl")
        return self._embedded(agent)

    def _describe_mcp_agent(self, agent: Agent, authorization: str | None) -> Agent:
        """A Code Shot agent whose Funcs are the server's tools: few-shots if its owner
        wrote some (asking only those tools or the platform's Funcs), a base prompt and
        description from the server unless given, and the tools' descriptions as sample
        queries when no few-shot gives any."""
        if agent.query_url or agent.func_url:
            raise InvalidInput("an agent is an MCP server (mcpUrl) or a Fixie agent "
                               "(queryUrl, funcUrl), not both")
        if authorization is None and agent.mcp_auth_secret:
            authorization = self.s.agent_secrets.get(agent.mcp_auth_secret)
        info = self.describe_mcp(agent.mcp_url or "", authorization)
        parsed = parse_few_shots(agent.few_shots, conversational=agent.conversational)
        tools = {t.func for t in info.tools}
        unknown = [f for f in func_names(parsed) if f not in tools and f not in PLATFORM_FUNC_NAMES]
        if unknown:
            raise InvalidInput(f"the few-shots ask Func[{unknown[0]}], which the MCP server "
                               f"does not have (its tools: {', '.join(sorted(tools)) or 'none'})")
        prompt = agent.base_prompt or as_one_line(
            f"I am {agent.name or info.name}. I answer with the tools of an MCP server: I ask "
            "a tool with its arguments as one JSON object that matches its parameters, and "
            f"I answer from what the tools return. {info.instructions}", 2_000)
        validate_base_prompt(prompt)
        queries = sample_queries(parsed) + agent.sample_queries or [
            as_one_line(t.description, MAX_SAMPLE_QUERY) for t in info.tools if t.description]
        agent = check_agent_fields(agent.replace(
            kind=AgentKind.CODE_SHOT, base_prompt=prompt, name=agent.name or info.name,
            description=agent.description or info.description(),
            mcp_tools=[t.to_dict() for t in info.tools], funcs=sorted(tools),
            sample_queries=list(dict.fromkeys(queries))[:MAX_SAMPLE_QUERIES]))
        return self._embedded(agent)

    def _embedded(self, agent: Agent) -> Agent:
        """The agent with its texts' vectors, once it is known to fit one item with them
        (INVALID_INPUT before anything is written: a handshake's fields or the vectors
        may take it over, after the charge that reading them cost)."""
        return check_size(with_embeddings(agent, self.s.embedder))

    def create(self, principal: Principal, handle: str, fields: AgentFields) -> Agent:
        owner = self._owner(principal)
        validate_handle(handle)
        agent = Agent(agent_id=Agent.make_id(owner, handle), owner=owner, handle=handle)
        # Its text must fit before the charge; its vectors are checked once made.
        agent = check_size(check_agent_fields(self._apply(agent, fields)))
        self._refuse_taken(agent.agent_id)
        self._charge(principal)
        agent = self.describe(agent, inline=fields.few_shots is not None,
                              authorization=fields.mcp_authorization)
        self._claim(agent.agent_id)
        return self._store(agent, fields, self.s.registry.create)

    def _charge(self, principal: Principal, once: str | None = None) -> None:
        """A change's cost (after the input's checks: refused input is not counted)."""
        if self.charge is not None:
            self.charge(self.s, principal, once)

    def _refuse_taken(self, agent_id: str) -> None:
        try:
            self.s.registry.get(agent_id)
        except NotFound:
            return
        raise Conflict(f"agent {agent_id} already exists")

    def _claim(self, agent_id: str) -> None:
        """Before an id is registered: CONFLICT if an agent holds it (its users' tokens
        are live), else sweep what a former agent of that id left (a delete cut short,
        its call in flight), so a new one inherits nothing."""
        self._refuse_taken(agent_id)
        self._forget_oauth(agent_id)
        self._forget_corpora(agent_id)

    def _forget_corpora(self, agent_id: str, seconds: float | None = None) -> None:
        forget_corpora(self.s, agent_id, seconds)

    def _forget_oauth(self, agent_id: str) -> None:
        """Users' OAuth tokens (and open flows) for the id."""
        self.s.oauth.forget_agent(agent_id)

    def _store(self, agent: Agent, fields: AgentFields, write: Callable[[Agent], Agent],
               previous_secret: str | None = None) -> Agent:
        """Write the agent with a new secret for the Authorization given (if any): the
        new secret is deleted if the write fails, the one it replaces once it succeeded."""
        if self.s.router.scoring.no_agent_margin is not None:  # for the runners' first route
            keep_no_agent_rows(self.s.embedder, self.s.registry)
        if fields.mcp_authorization and agent.mcp_url:
            agent = agent.replace(mcp_auth_secret=self.s.agent_secrets.create(
                agent.agent_id, fields.mcp_authorization))
        elif not agent.mcp_url:
            agent = agent.replace(mcp_auth_secret=None)
        try:
            stored = write(agent)
        except Exception:
            if agent.mcp_auth_secret != previous_secret:
                self.s.agent_secrets.delete(agent.mcp_auth_secret)
            raise
        if previous_secret != stored.mcp_auth_secret:
            self.s.agent_secrets.delete(previous_secret)
        self._ingest_corpora(stored)
        return stored

    def _ingest_corpora(self, agent: Agent, again: bool = False) -> None:
        """Queue the ingestion of the agent's declared URL corpora (the runner reads them,
        never a query): when they are new or changed, or ``again`` (a refresh)."""
        from codeshot.runner.corpora import url_corpora
        from codeshot.store.queue import Work

        if not url_corpora(agent.corpora):
            return
        latest = self.s.corpora.recent(agent.agent_id, 1)
        if latest and not again and latest[0].corpora == url_corpora(agent.corpora):
            return
        version = self.s.corpora.start(agent.agent_id, url_corpora(agent.corpora))
        self.s.queue.enqueue(Work.corpus(agent.agent_id, version.version))

    def update(
        self, principal: Principal, handle: str, fields: AgentFields, new_handle: str | None
    ) -> Agent:
        owner = self._owner(principal)
        current = self._owned(owner, handle)
        agent = self._apply(current, fields)
        # The handshake's funcs and corpora are checked when it is read (describe): stored
        # ones from before their caps must not stop the owner changing anything else.
        checked = check_agent_fields(agent.replace(funcs=None, corpora=None))
        agent = agent.replace(sample_queries=checked.sample_queries)  # blanks dropped, cut
        check_size(agent)  # with its vectors as they are: new ones are checked once made
        if new_handle and new_handle != handle:
            validate_handle(new_handle)
            # Created now at its new id: a call token of a deleted agent of that id, still
            # in flight, was issued before this, and OAuth refuses it (usecases/oauth.py).
            agent = agent.replace(handle=new_handle, agent_id=Agent.make_id(owner, new_handle),
                                  created=utcnow())
            self._refuse_taken(agent.agent_id)
        self._charge(principal)
        urls_changed = ((agent.query_url, agent.func_url, agent.mcp_url)
                        != (current.query_url, current.func_url, current.mcp_url))
        if (urls_changed or fields.few_shots is not None or fields.base_prompt is not None
                or fields.mcp_authorization is not None):
            agent = self.describe(agent, inline=fields.few_shots is not None,
                                  authorization=fields.mcp_authorization)
        else:  # name, description or sample queries may have changed what it matches
            agent = self._embedded(agent)
        renamed = agent.agent_id != current.agent_id
        if renamed:  # the new id is swept of what a former agent of that id left
            self._claim(agent.agent_id)
        # Written only over the agent as read: a change made meanwhile (a revision, a new
        # MCP secret) is CONFLICT here, not lost.
        stored = self._store(agent, fields,
                             lambda a: self.s.registry.replace(a, previous_id=current.agent_id,
                                                               read_as=current),
                             previous_secret=current.mcp_auth_secret)
        if renamed:
            # Tokens, users' storage and corpora are kept by agent id: the old id's go
            # once it is free, so a rename refused above keeps them (the new id's corpora
            # are ingested anew). Any left by a failure here are never read: a new agent
            # of that id is swept first (_claim).
            self._forget_oauth(current.agent_id)
            self._sweep_storage(current)
            with contextlib.suppress(Unavailable):  # more than a few seconds': _claim's
                self._forget_corpora(current.agent_id, seconds=RENAME_SWEEP_SECONDS)
        return stored

    def deploy(self, principal: Principal, handle: str, fields: AgentFields) -> Agent:
        """Register a deployed agent, or update one registered before (a redeploy, or an
        agent registered by hand) and re-read its handshake."""
        owner = self._owner(principal)
        try:
            self.s.registry.get(Agent.make_id(owner, handle))
        except NotFound:
            return self.create(principal, handle, fields)
        self.update(principal, handle, fields, new_handle=None)
        return self.refresh(principal, owner, handle)

    def refresh(self, principal: Principal, owner: str, handle: str) -> Agent:
        """Re-read the agent's handshake (after its code changed)."""
        current = self._owned(self._owner(principal), handle, owner=owner)
        self._charge(principal)
        agent = self.describe(current, inline=False)
        stored = self.s.registry.replace(agent, read_as=current)
        self._ingest_corpora(stored, again=True)
        return stored

    def delete(self, principal: Principal, owner: str, handle: str) -> Agent:
        agent = self._owned(self._owner(principal), handle, owner=owner)
        remove_agent(self.s, agent)
        return agent

    def _sweep_storage(self, agent: Agent) -> None:
        sweep_storage(self.s, agent)

    def _owned(self, caller: str, handle: str, owner: str | None = None) -> Agent:
        agent_id = Agent.make_id(owner or caller, handle)
        agent = self.s.registry.get(agent_id)
        if agent.owner != caller:
            raise NotFound(f"agent {agent_id} not found")  # others' agents look absent
        return agent

    @staticmethod
    def _apply(agent: Agent, fields: AgentFields) -> Agent:
        for query in fields.sample_queries or []:
            check_sample_query(query)
        updates = {k: v for k, v in vars(fields).items()
                   if v is not None and k != "mcp_authorization"}
        if updates.get("mcp_url") == "":
            updates["mcp_url"] = None  # no longer an MCP server
        return agent.replace(**{**updates, "modified": utcnow()})

