"""A change made to an agent between another request's read and its write is kept: the
later write is refused (INVALID_INPUT, "changed meanwhile") and writes nothing, as
docs/errors.md promises. The other request is made to land in between by running it
where the update embeds the agent's texts, after its read."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import codeshot.usecases.registration as registration
from codeshot.errors import Conflict, NotFound
from codeshot.models import Principal
from codeshot.usecases.registration import AgentFields, AgentRegistration
from codeshot.usecases.revisions import AgentRevisions
from codeshot.usecases.users import principal_of

SHOT = "Q: Roll 1d20\nAsk Func[roll]: 1d20\nFunc[roll] says: 7\nA: You rolled 7."


def _owner(platform, name: str) -> Principal:
    user_id, _ = platform.user(name)
    return principal_of(platform.services.users.get(user_id))


def _meanwhile(monkeypatch, change: Callable[[], object]) -> None:
    """Run ``change`` (once) where the next registration embeds an agent."""
    real = registration.with_embeddings
    pending = [change]

    def embed_after(agent, embedder):
        while pending:
            pending.pop()()
        return real(agent, embedder)

    monkeypatch.setattr(registration, "with_embeddings", embed_after)


@pytest.mark.parametrize("new_handle", [None, "b"])
def test_an_update_does_not_undo_a_revision_added_meanwhile(platform, monkeypatch, new_handle):
    owner = _owner(platform, "alice" if new_handle else "carol")
    reg = AgentRegistration(platform.services, charge=None)
    agent = reg.create(owner, "a", AgentFields(base_prompt="I roll dice.", few_shots=[SHOT],
                                               func_url="http://127.0.0.1:9/"))
    oauth = platform.services.oauth
    oauth.put_token(owner.user_id, agent.agent_id, {"access_token": "t"})
    revisions = AgentRevisions(platform.services, charge=None)
    _meanwhile(monkeypatch, lambda: revisions.create_revision(
        owner, "a", "http://127.0.0.1:8/", [("by", "the other request")], make_current=False))

    with pytest.raises(Conflict, match="changed meanwhile") as refused:
        reg.update(owner, "a", AgentFields(description="new text"), new_handle=new_handle)
    assert refused.value.code == "INVALID_INPUT"
    # A refused rename took nothing from the agent's users (they authorized it once).
    assert oauth.get_token(owner.user_id, agent.agent_id) == {"access_token": "t"}
    assert platform.services.queue.receive() == []  # no sweep of their storage either

    kept = platform.services.registry.get(agent.agent_id)
    assert [r.metadata for r in kept.revisions] == [{"by": "the other request"}]
    assert kept.description == agent.description
    if new_handle:
        with pytest.raises(NotFound):
            platform.services.registry.get(f"{owner.username}/b")
    # Sent again, it is made from what is there now, and keeps it.
    again = reg.update(owner, "a", AgentFields(description="new text"), new_handle=new_handle)
    assert again.description == "new text"
    assert [r.metadata for r in platform.services.registry.get(again.agent_id).revisions] \
        == [{"by": "the other request"}]


def test_a_refresh_does_not_undo_a_revision_added_meanwhile(platform, monkeypatch,
                                                            handshake_agent):
    owner = _owner(platform, "dave")
    reg = AgentRegistration(platform.services, charge=None)
    reg.create(owner, "a", AgentFields(query_url=handshake_agent))
    revisions = AgentRevisions(platform.services, charge=None)
    _meanwhile(monkeypatch, lambda: revisions.create_revision(
        owner, "a", "http://127.0.0.1:8/", [], make_current=False))

    with pytest.raises(Conflict, match="changed meanwhile"):
        reg.refresh(owner, "dave", "a")
    assert len(platform.services.registry.get("dave/a").revisions) == 1


def test_an_update_does_not_point_the_agent_at_a_secret_replaced_meanwhile(platform,
                                                                          monkeypatch):
    """One request sets the MCP server's Authorization again (a new secret; the old one is
    deleted), another changes the description from what it read before: written, it
    pointed the agent at the deleted secret, and every call to the server failed."""
    from mcp.server.mcpserver import MCPServer

    from codeshot.local.http_server import mcp_http_server

    server = MCPServer("Echo")

    @server.tool(description="Echo a text back")
    def echo(text: str) -> str:
        return text

    http = mcp_http_server(server, "Bearer e")
    url = http.start() + "/mcp"
    try:
        owner = _owner(platform, "erin")
        reg = AgentRegistration(platform.services, charge=None)
        reg.create(owner, "echo", AgentFields(mcp_url=url, mcp_authorization="Bearer e"))
        first = platform.services.registry.get("erin/echo").mcp_auth_secret
        _meanwhile(monkeypatch, lambda: reg.update(
            owner, "echo", AgentFields(mcp_authorization="Bearer e"), new_handle=None))

        with pytest.raises(Conflict, match="changed meanwhile"):
            reg.update(owner, "echo", AgentFields(description="echoes"), new_handle=None)

        secret = platform.services.registry.get("erin/echo").mcp_auth_secret
        assert secret and secret != first
        assert platform.services.agent_secrets.get(secret) == "Bearer e"
        # The agent still reaches its server (its tools read with the kept secret).
        assert reg.refresh(owner, "erin", "echo").mcp_tools
    finally:
        http.stop()


@pytest.mark.settings(daily_agent_changes=2)
def test_the_same_revision_sent_twice_at_once_is_made_and_charged_once(platform, monkeypatch,
                                                                       handshake_agent):
    """Two tries of one createAgentRevision under one idempotency key, the second landing
    between the first's read and its write: the first is refused as changed meanwhile,
    unless what changed is its own revision, made by the other; the two are charged
    once."""
    from codeshot.usecases.registration import daily_agent_change

    owner = _owner(platform, "twice")
    AgentRegistration(platform.services, charge=daily_agent_change).create(
        owner, "a", AgentFields(query_url=handshake_agent))  # change 1
    revisions = AgentRevisions(platform.services, charge=daily_agent_change)

    def make():
        return revisions.create_revision(owner, "a", handshake_agent + "/yaml", [("v", "1")],
                                         make_current=True, once="deploy-1")

    other: list = []
    _meanwhile(monkeypatch, lambda: other.append(make()))
    first = make()
    assert first == other[0] and first[1], (first, other)
    stored = platform.services.registry.get("twice/a")
    assert [r.revision_id for r in stored.all_revisions()][1:] == [first[0].revision_id]
    assert stored.current_revision == first[0].revision_id
    assert platform.services.usage.used("agent-change", owner.user_id or "") == 2
