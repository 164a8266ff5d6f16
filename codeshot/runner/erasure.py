"""Removing an agent (its deletion, and a deleted user's agents) and erasing a deleted
user's data, a bounded part per queued message (``Work.erase``).

A user's deletion (codeshot/usecases/accounts.py) makes the user a tombstone first: from
then on every credential is refused, so nothing new is written for them. Each part then
does the first step that still finds something, in this order: their agents (through
:func:`remove_agent`, so each agent's storage is swept as any deleted agent's), their
sessions (a large one's rest queued as its own purge), their one-time session keys,
their OAuth tokens for agents, their storage with every agent (``cursor``: the last
agent whose storage went), and last their usage counters. Every step deletes what it
reads, so a redelivered part finds less (or nothing) and deletes nothing twice.
"""

from __future__ import annotations

import contextlib
import functools
import logging

from codeshot.errors import NotFound
from codeshot.models import Agent, User
from codeshot.runner.budgets import USER_TOKENS
from codeshot.runner.fairness import RUNNING
from codeshot.services import Services
from codeshot.store.queue import Work
from codeshot.store.usage import UPLOAD_BYTES

log = logging.getLogger("codeshot.runner")

AGENTS_PART = 2  # agents removed a part (each several calls: its OAuth, corpora, registry)
SESSIONS_PART = 10  # sessions deleted a part (each up to a few thousand items)
ITEMS_PART = 100  # items (session keys, OAuth tokens) deleted a part
# User storage: SCOPES_PART agents' partitions read a part, SCOPE_ITEMS items of each
# deleted (at most 1,000 a part, as a sweep's part).
SCOPES_PART = 50
SCOPE_ITEMS = 20
STORAGE = "storage:"  # a cursor's prefix: the part goes on with storage after that agent
# The user's daily counters (the rest, per minute or per agent, expire within a day).
DAILY_COUNTERS = ("query", "session", "route", "agent-change", "revision-switch",
                  UPLOAD_BYTES, USER_TOKENS)
COUNTER_DAYS = 2  # a daily counter is kept a day past its day (codeshot/store/usage.py)


def forget_corpora(services: Services, agent_id: str, seconds: float | None = None) -> None:
    """The id's corpus versions, their objects and (S3 Vectors) indexes."""
    vectors = services.settings.corpus_search == "s3vectors"
    services.corpora.delete_agent(agent_id, seconds=seconds,
                                  drop=services.vector_indexes.drop if vectors else None)


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


def erase_part(services: Services, user_id: str, cursor: str | None = None
               ) -> tuple[bool, str | None]:
    """One part of a deleted user's erasure: (whether a part is left, its cursor)."""
    user = services.users.get(user_id)
    if user.deleted is None:  # never a live user's data, whatever a message says
        raise RuntimeError(f"user {user_id} is not deleted: not erased")
    if cursor is None:
        if _agents(services, user) or _sessions(services, user) or \
                services.sessions.drop_guards(user_id, ITEMS_PART) or \
                services.oauth.forget_user(user_id, ITEMS_PART):
            return True, None
        cursor = STORAGE
    after = _storage(services, user, cursor.removeprefix(STORAGE))
    if after is not None:
        return True, STORAGE + after
    for kind in DAILY_COUNTERS:
        services.usage.forget(kind, user_id, COUNTER_DAYS)
    services.usage.forget(RUNNING, user_id)
    log.info("erased user %s", user_id)
    return False, None


def _agents(services: Services, user: User) -> bool:
    owned = [a for a in services.registry.listed() if a.owner == user.username]
    for agent in owned[:AGENTS_PART]:
        with contextlib.suppress(NotFound):  # removed meanwhile (a redelivered part)
            remove_agent(services, agent)
    return bool(owned)


def _sessions(services: Services, user: User) -> bool:
    page = services.sessions.list_by_owner(user.user_id, limit=SESSIONS_PART)
    for session in page.items:
        purge = functools.partial(services.queue.enqueue, Work.purge(session.session_id))
        with contextlib.suppress(NotFound):  # deleted meanwhile (the index lags)
            services.sessions.delete(session.session_id, user.user_id, purge_later=purge)
    return bool(page.items)


def _storage(services: Services, user: User, after: str) -> str | None:
    """Delete the user's storage with the next SCOPES_PART agents after ``after`` (by
    id); the agent to go on after, None when done. A deleted agent's storage is swept
    with its registration; this is the registered agents'."""
    agent_ids = sorted(a.agent_id for a in services.registry.listed() if a.agent_id > after)
    for agent_id in agent_ids[:SCOPES_PART]:
        if services.storage.drop_scope(user.user_id, agent_id, SCOPE_ITEMS):
            return after  # this agent's rest in the next part
        after = agent_id
    return after if len(agent_ids) > SCOPES_PART else None
