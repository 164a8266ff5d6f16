"""Agent revisions, as Fixie 1.0 has them: the places an agent has answered at, kept so
that its owner can switch between them. What `fixie serve` uses: it makes a revision at
its own URL current while it runs, then makes the previous one current again and deletes
its own.

A revision is its URLs, when it was made and the client's metadata; they live in the
agent's registry item (``Agent.revisions``), so listings, renames and deletes carry them
as they carry the rest of the agent. Making one current is a registration at its URL:
the handshake is read again, and a URL that does not answer it changes nothing. Only an
agent's owner sees or changes its revisions.

A revision made under the client's idempotency key is that key's while it is kept: the
same request again (a retry after a lost answer, or the same sent twice at once) is that
revision, charged once. Without a key each request makes one, as Fixie's did: `fixie
serve` makes a new revision at the same URL for each reload and deletes the one before,
so the same URL and metadata again cannot be taken for a retry.
"""

from __future__ import annotations

from codeshot import ids
from codeshot.errors import CodeshotError, Conflict, InvalidInput, NotFound
from codeshot.models import MAX_URL, Agent, Principal, Revision
from codeshot.net.addresses import check_public_url
from codeshot.text import check_idempotency_key, check_text
from codeshot.usecases.registration import NOT_BUILT, AgentRegistration, daily_revision_switch

# Revisions live in the agent's item (DynamoDB: 400 KB), beside up to ~300 KB of its own
# (few-shots, embeddings): at most 10 x (2 URLs of 2 KB + 10 x 300 B of metadata + an
# idempotency key of 512 B) = 75 KB.
MAX_REVISIONS = 10
MAX_METADATA = 10
MAX_METADATA_KEY = 100
MAX_METADATA_VALUE = 200


def check_metadata(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The client's metadata (key, value pairs) as a mapping, if it keeps the limits."""
    if len(pairs) > MAX_METADATA:
        raise InvalidInput(f"{len(pairs)} metadata entries; a revision has at most "
                           f"{MAX_METADATA}")
    for key, value in pairs:
        if not key:
            raise InvalidInput("a metadata key must not be empty")
        check_text(key, "a metadata key", MAX_METADATA_KEY, one_line=True)
        check_text(value, f"metadata {key!r}", MAX_METADATA_VALUE, one_line=True)
    metadata = dict(pairs)
    if len(metadata) < len(pairs):
        raise InvalidInput("a metadata key is given twice")
    return metadata


class AgentRevisions(AgentRegistration):
    def create_revision(self, principal: Principal, handle: str, url: str | None,
                        metadata: list[tuple[str, str]], make_current: bool,
                        reindex_corpora: bool = False, once: str | None = None
                        ) -> tuple[Revision, bool]:
        """A new revision of the caller's agent ``handle`` answering at ``url``, and
        whether it is current: made current (its handshake read) when asked. No URL: code
        to build, refused. Under the idempotency key ``once``, the revision that key made
        if it is kept (the same URL and metadata, else CONFLICT)."""
        if url is None:
            raise InvalidInput("a revision is a URL the agent answers at (externalDeployment "
                               f"{{url}}; deployment_url in agent.yaml): {NOT_BUILT}")
        key = None if once is None else check_idempotency_key(once)
        agent = self._owned(self._owner(principal), handle)
        if agent.mcp_url:
            raise InvalidInput(f"agent {agent.agent_id} is an MCP server's (mcpUrl): it has "
                               "no revisions; change its mcpUrl with updateAgent")
        check_text(url, "the revision's url", MAX_URL, one_line=True)
        check_public_url(url, allow_loopback=self.s.settings.local_mode)
        revision = Revision(revision_id=ids.ulid(), query_url=url, func_url=url,
                            metadata=check_metadata(metadata), once=key)
        if (made := _made_as(agent, revision)) is not None:
            return made  # before the cap: the revision that reached it, retried, is that one
        if len(agent.all_revisions()) >= MAX_REVISIONS:
            raise InvalidInput(f"agent {agent.agent_id} has {MAX_REVISIONS} revisions, the "
                               "most it keeps: delete one (deleteAgentRevision) first")
        self._charge(principal, None if key is None else f"revision#{agent.agent_id}#{key}")
        try:
            if make_current:
                self._switch(agent, revision, reindex_corpora)
            else:
                self.s.registry.replace(agent.replace(revisions=[*agent.revisions, revision]),
                                        read_as=agent)
        except Conflict:  # changed meanwhile: by the same request sent at the same time?
            made = _made_as(self._owned(agent.owner, agent.handle), revision)
            if made is None:
                raise
            return made
        return revision, make_current

    def set_current(self, principal: Principal, handle: str, revision_id: str) -> Agent:
        """The caller's agent ``handle`` answering at its revision ``revision_id``."""
        agent = self._owned(self._owner(principal), handle)
        revision = self._revision(agent, revision_id)
        if revision_id == agent.current_revision_id():
            return agent  # already: a retry changes nothing
        if self.charge is not None:  # users' switches (the operator's are not counted)
            daily_revision_switch(self.s, principal)
        return self._switch(agent, revision)

    def delete_revision(self, principal: Principal, handle: str, revision_id: str) -> Agent:
        """Forget a revision of the caller's agent ``handle`` (not its current one)."""
        agent = self._owned(self._owner(principal), handle)
        self._revision(agent, revision_id)
        if revision_id == agent.current_revision_id():
            raise InvalidInput(f"revision {revision_id} is the current one of agent "
                               f"{agent.agent_id}: make another current first")
        kept = [r for r in agent.revisions if r.revision_id != revision_id]
        return self.s.registry.replace(agent.replace(revisions=kept), read_as=agent)

    @staticmethod
    def _revision(agent: Agent, revision_id: str) -> Revision:
        revision = agent.revision(revision_id)
        if revision is None:
            raise NotFound(f"agent {agent.agent_id} has no such revision")
        return revision

    def _switch(self, agent: Agent, to: Revision, reindex_corpora: bool = False) -> Agent:
        """The agent answering at ``to``'s URLs, described by its handshake there; the
        revision it leaves is kept with the URLs it answered at."""
        try:
            described = self.describe(
                agent.replace(query_url=to.query_url, func_url=to.func_url), inline=False)
        except CodeshotError as exc:  # the same code, saying that nothing changed
            raise type(exc)(f"revision {to.revision_id} was not made current ({agent.agent_id} "
                            f"answers where it did): {exc.message}", **exc.details) from exc
        kept = [r for r in agent.all_revisions() if r.revision_id != to.revision_id]
        stored = self.s.registry.replace(
            described.replace(revisions=[*kept, to], current_revision=to.revision_id),
            read_as=agent)
        self._ingest_corpora(stored, again=reindex_corpora)
        return stored


def _made_as(agent: Agent, asked: Revision) -> tuple[Revision, bool] | None:
    """The revision of ``agent`` made under ``asked``'s idempotency key, if kept, and
    whether it is current; CONFLICT if it was made for another URL or metadata."""
    made = next((r for r in agent.all_revisions() if asked.once and r.once == asked.once),
                None)
    if made is None:
        return None
    if (made.url, made.metadata) != (asked.url, asked.metadata):
        raise Conflict(f"this idempotencyKey made revision {made.revision_id} of agent "
                       f"{agent.agent_id} for another URL or metadata: use a new key for "
                       "a new revision")
    return made, made.revision_id == agent.current_revision_id()
