"""Finding agents: which ones a caller may see and use, and which the router picks.

Registering and changing agents is :mod:`codeshot.usecases.registration` (heavier).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codeshot.errors import InvalidInput, NotFound
from codeshot.models import Agent, Principal
from codeshot.services import Services
from codeshot.usecases import paging
from codeshot.usecases.users import user_id_of

if TYPE_CHECKING:
    from codeshot.routing.index import Candidate
    from codeshot.store.corpora import CorpusVersion

MAX_ROUTES = 50


def can_use(agent: Agent, principal: Principal) -> bool:
    """Published agents are everyone's; unpublished ones only their owner's."""
    return agent.usable_by(principal.username)


def is_owner(principal: Principal, agent: Agent) -> bool:
    """Whether the caller owns the agent: only they see its revisions, usage, corpora."""
    return principal.username is not None and principal.username == agent.owner


def all_visible_agents(services: Services, principal: Principal) -> list[Agent]:
    """Published agents and the caller's own, by id: all of them (the registry's listing
    is read once per registry change, so this costs no reads)."""
    return sorted(services.registry.all_agents(principal.username), key=lambda a: a.agent_id)


def visible_agents(services: Services, principal: Principal, after: str | None = None,
                   limit: int | None = None) -> list[Agent]:
    """Published agents and the caller's own, by id: a page of them, after ``after``."""
    agents = all_visible_agents(services, principal)
    if after is not None:
        agents = [a for a in agents if a.agent_id > after]
    return agents[: paging.AGENTS.of(limit)]


def find_agent(services: Services, principal: Principal, agent_id: str) -> Agent | None:
    """The agent, or None when it does not exist or the caller may not see it. A bare
    handle is the caller's own agent (Fixie's ``--agent dice``)."""
    if "/" not in agent_id and principal.username:
        agent_id = Agent.make_id(principal.username, agent_id)
    try:
        agent = services.registry.get(agent_id)
    except NotFound:
        return None
    return agent if can_use(agent, principal) else None


def usable_agent(services: Services, principal: Principal, agent_id: str) -> Agent:
    """The agent, or NOT_FOUND: others' unpublished agents look absent."""
    agent = find_agent(services, principal, agent_id)
    if agent is None:
        raise NotFound(f"agent {agent_id} not found")
    return agent


def route(services: Services, principal: Principal, text: str,
          k: int = 3) -> list[Candidate]:
    """The ``k`` agents the router proposes for ``text``, best first, each saying whether
    it fits (scores at least the router's floor)."""
    if not text.strip() or len(text) > services.settings.max_message_length:
        raise InvalidInput("text must be non-empty and within the message length limit")
    if not 1 <= k <= MAX_ROUTES:
        raise InvalidInput(f"k must be between 1 and {MAX_ROUTES}")
    # Each call embeds the text (a Bedrock call in AWS): counted per day like queries.
    services.usage.charge("route", user_id_of(principal),
                          services.daily_limit(principal.daily_query_limit))
    # The router's index lags the registry by up to its check interval: an agent its
    # owner unpublished or deleted meanwhile is left out, as the planner leaves it out.
    return [route for route in services.router.route(text, k, principal.username)
            if find_agent(services, principal, route.agent_id) is not None]


def corpus_status(services: Services, principal: Principal, agent: Agent
                  ) -> CorpusVersion | None:
    """The newest ingestion of the agent's document corpora (its owner's eyes only: the
    errors name the URLs it read)."""
    if principal.username is None or principal.username != agent.owner or not agent.corpora:
        return None
    recent = services.corpora.recent(agent.agent_id, 1)
    return recent[0] if recent else None
