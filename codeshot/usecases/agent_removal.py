"""Removing an agent and what it holds: its deletion by its owner, and a deleted user's
agents in their erasure (codeshot/usecases/erasure.py)."""

from __future__ import annotations

from collections.abc import Callable

from codeshot.models import Agent
from codeshot.services import Services
from codeshot.store.corpora import CorpusVersion
from codeshot.store.queue import Work


def forget_corpora(services: Services, agent_id: str, seconds: float | None = None) -> None:
    """The id's corpus versions, their objects and (S3 Vectors) indexes."""
    services.corpora.delete_agent(agent_id, seconds=seconds, drop=_index_drop(services))


def forget_some_corpora(services: Services, agent_id: str, most: int) -> bool:
    """Up to ``most`` of the id's corpus versions, as :func:`forget_corpora`; whether any
    may be left."""
    return services.corpora.delete_some(agent_id, most, drop=_index_drop(services))


def _index_drop(services: Services) -> Callable[[CorpusVersion], None] | None:
    vectors = services.settings.corpus_search == "s3vectors"
    return services.vector_indexes.drop if vectors else None


def sweep_storage(services: Services, agent: Agent) -> None:
    """Queue the sweep of every user's storage with this registration of the agent.
    The runner does it, a bounded part per queued message, once the registration is
    gone (an agent may keep a thousand keys for each of thousands of users: more
    than one request may delete); until then no later registration reads those
    items (codeshot/store/user_storage.py). One message per request: a retry of the
    same deletion is deduplicated, and sweeping twice deletes nothing twice."""
    services.queue.enqueue(Work.sweep(agent.agent_id, agent.registration))


def remove_agent(services: Services, agent: Agent) -> None:
    """Delete the agent and what it holds. What it holds goes first, the registry record
    last: if a part fails, the agent is still there and the same removal again finishes
    (each part is idempotent); the other way round, a retry would find no agent."""
    services.oauth.forget_agent(agent.agent_id)
    forget_corpora(services, agent.agent_id)
    sweep_storage(services, agent)
    services.agent_secrets.delete(agent.mcp_auth_secret)
    services.registry.delete(agent.agent_id, owner=agent.owner)
