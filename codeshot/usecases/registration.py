"""Registering, updating, refreshing and deleting agents.

A registration learns what the agent is from its handshake (``GET {url}/``) unless the
few-shots come inline; the few-shots are validated with the engine's grammar before
anything is written, and agent URLs must pass the SSRF check. Heavy to import (the
router's embeddings): transports import it where they use it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from codeshot.engine.fewshot import (
    lines_of,
    parse_few_shots,
    sample_queries,
    split_few_shots,
    validate_base_prompt,
)
from codeshot.errors import CodeshotError, InvalidInput, NotFound
from codeshot.models import (
    MAX_SAMPLE_QUERIES,
    Agent,
    AgentKind,
    Principal,
    check_agent_fields,
    utcnow,
    validate_handle,
)
from codeshot.net.addresses import check_public_url
from codeshot.routing.index import with_embeddings
from codeshot.runner.handshake import Handshake, fetch_handshake
from codeshot.services import Services

HandshakeFetcher = Callable[[str, str], Handshake]



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


class AgentRegistration:
    def __init__(self, services: Services, fetch: HandshakeFetcher | None = None) -> None:
        self.s = services
        self.fetch = fetch or functools.partial(
            fetch_handshake, allow_loopback=services.settings.local_mode)

    def _owner(self, principal: Principal) -> str:
        if not principal.username:
            raise InvalidInput("only users can own agents")
        return principal.username

    def _check_urls(self, agent: Agent) -> None:
        allow = self.s.settings.local_mode
        for url in (agent.query_url, agent.func_url):
            if url:
                check_public_url(url, allow_loopback=allow)
        if agent.more_info_url and not agent.more_info_url.startswith(("http://", "https://")):
            raise InvalidInput("moreInfoUrl must be an http(s) URL")

    def describe(self, agent: Agent, inline: bool) -> Agent:
        """Fill prompt, few-shots, kind and sample queries from the handshake (or inline)."""
        self._check_urls(agent)
        url = agent.func_url or agent.query_url
        if not inline:
            if not url:
                raise InvalidInput(
                    "give queryUrl or funcUrl, or the few-shots inline. (`fixie deploy` "
                    "uploads code for Fixie to host; codeshot does not build code on "
                    "request: use `codeshot serve DIR --register` locally, `cdk deploy` in "
                    "AWS, or `codeshot agent register DIR --url URL`.)")
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
        return with_embeddings(agent, self.s.embedder)

    def create(self, principal: Principal, handle: str, fields: AgentFields) -> Agent:
        owner = self._owner(principal)
        validate_handle(handle)
        agent = Agent(agent_id=Agent.make_id(owner, handle), owner=owner, handle=handle)
        agent = check_agent_fields(self._apply(agent, fields))
        agent = self.describe(agent, inline=fields.few_shots is not None)
        return self.s.registry.create(agent)

    def update(
        self, principal: Principal, handle: str, fields: AgentFields, new_handle: str | None
    ) -> Agent:
        owner = self._owner(principal)
        current = self._owned(owner, handle)
        agent = check_agent_fields(self._apply(current, fields))
        if new_handle and new_handle != handle:
            validate_handle(new_handle)
            agent = agent.replace(handle=new_handle, agent_id=Agent.make_id(owner, new_handle)
            )
        urls_changed = (agent.query_url, agent.func_url) != (current.query_url, current.func_url)
        if urls_changed or fields.few_shots is not None or fields.base_prompt is not None:
            agent = self.describe(agent, inline=fields.few_shots is not None)
        else:  # name, description or sample queries may have changed what it matches
            agent = with_embeddings(agent, self.s.embedder)
        return self.s.registry.replace(agent, previous_id=current.agent_id)

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
        agent = self._owned(self._owner(principal), handle, owner=owner)
        agent = self.describe(agent, inline=False)
        return self.s.registry.replace(agent)

    def delete(self, principal: Principal, owner: str, handle: str) -> Agent:
        agent = self._owned(self._owner(principal), handle, owner=owner)
        self.s.registry.delete(agent.agent_id, owner=agent.owner)
        return agent

    def _owned(self, caller: str, handle: str, owner: str | None = None) -> Agent:
        agent_id = Agent.make_id(owner or caller, handle)
        agent = self.s.registry.get(agent_id)
        if agent.owner != caller:
            raise NotFound(f"agent {agent_id} not found")  # others' agents look absent
        return agent

    @staticmethod
    def _apply(agent: Agent, fields: AgentFields) -> Agent:
        updates = {k: v for k, v in vars(fields).items() if v is not None}
        return agent.replace(**{**updates, "modified": utcnow()})

