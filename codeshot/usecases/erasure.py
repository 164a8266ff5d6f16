"""A deleted user's erasure: a bounded part a message on the erasure queue, each part
queueing the next, run by the eraser function (handlers/eraser.py) on a role of its own.

The user's deletion (codeshot/usecases/accounts.py) queues the first part, then makes the
user a tombstone: every credential refused from then on. A credential checked before
that may still write for the user a while: an API key's user record cached in a warm API
(``api_key_cache_seconds``), a query the runner had started (``query_time_budget_seconds``)
and the agent call tokens it minted (``agent_token_ttl_seconds`` past its end), a presigned
upload URL (``embed_url_ttl_seconds``). An OAuth flow opened before is refused at its
callback (codeshot/usecases/oauth.py), so it writes nothing. So the
erasure starts only once all of those are over (``window_seconds`` after the deletion;
a part that comes earlier waits again), and runs the agents and sessions steps once more
at the end.

Each part runs one of :data:`STEPS` on a bounded number of items and deletes only what it
reads, so running it again deletes nothing twice. The tombstone counts the parts done
(``erasure_part``) and keeps where the next part goes on (its step and cursor), in one
conditional update before the next part is queued: a part is counted once (two copies of
it may both run, as their deletes are idempotent; the second to count does nothing
more), a delivery that counted it and failed before queueing the next queues it again,
and one that fails on every delivery goes to the queue's dead-letter queue (nothing
loops).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from codeshot.errors import NotFound
from codeshot.models import User
from codeshot.runner.batch import process_batch
from codeshot.runner.budgets import USER_TOKENS
from codeshot.runner.fairness import RUNNING
from codeshot.services import Services
from codeshot.store.queue import ErasureWork, Work
from codeshot.store.usage import UPLOAD_BYTES
from codeshot.store.users import ErasureProgress
from codeshot.usecases.agent_removal import forget_some_corpora, remove_agent
from codeshot.usecases.erasure_start import recheck_seconds, window_seconds

log = logging.getLogger("codeshot.erasure")

# An agent's corpus versions deleted a part (each its object, item and index: a few calls)
CORPUS_VERSIONS_PART = 50
# Sessions deleted a part, each ITEMS_PART items at most, key by key (a larger one's rest
# is purged by the runner, as a large session's deletion by its owner is).
SESSIONS_PART = 5
# Embeds a part looks at (each: an object, an item, and for each other user whose session
# holds the same bytes, up to HOLDERS_LOOKED of them, an index read and their user item).
EMBEDS_PART = 50
# Deleted users holding the same bytes looked past for one who is not: more than the
# parts that run at once (the eraser's concurrency times its batch), which are all the
# deleted ones whose items the last erasure to look can find still there (see
# _held_by_the_living). Past them the bytes count as held: kept, for a later look.
HOLDERS_LOOKED = 20
ITEMS_PART = 100  # items (session keys, OAuth tokens, uploads) deleted a part
# User storage: SCOPES_PART agents' partitions read a part, SCOPE_ITEMS items of each
# deleted (at most 1,000 a part, as a sweep's part).
SCOPES_PART = 50
SCOPE_ITEMS = 20
# The user's daily counters (the rest, per minute or per agent, expire within a day).
DAILY_COUNTERS = ("query", "session", "route", "agent-change", "revision-switch",
                  UPLOAD_BYTES, USER_TOKENS)
COUNTER_DAYS = 2  # a daily counter is kept a day past its day (codeshot/store/usage.py)


class NotYet(Exception):
    """A part that cannot run before ``seconds`` from now."""

    def __init__(self, seconds: int) -> None:
        super().__init__(f"not before {seconds} s")
        self.seconds = seconds


# A step: (whether it is done, where its next part goes on after).
Step = Callable[[Services, User, str | None], tuple[bool, str | None]]


def erase_part(services: Services, work: ErasureWork) -> None:
    """Run one part of an erasure, count it done, then queue the next."""
    try:
        user = services.users.get(work.user_id)
    except NotFound:
        log.warning("erasure of %s: no such user", work.user_id)
        return
    if user.deleted is None:  # queued by a deletion whose tombstone was never written
        log.warning("erasure of %s: the user is not deleted; nothing erased", work.user_id)
        return
    if user.erasure_part == work.part + 1 and user.erasure_by == work.sent:
        # This send's part was counted: its delivery may have failed before queueing the
        # next one, so it goes again (a copy of a part that counts second does nothing).
        _queue_next(services, user)
        return
    if user.erasure_part != work.part:  # another copy of this part was counted
        log.info("erasure of %s: part %d done already", work.user_id, work.part)
        return
    wait = user.deleted + timedelta(seconds=window_seconds(services.settings)) \
        - services.clock()
    if wait > timedelta(0):
        services.erasure_queue.send(work, math.ceil(wait.total_seconds()))
        return
    try:
        done, after = STEPS[user.erasure_step](services, user, user.erasure_after)
    except NotYet as not_yet:  # nothing done: the same part again, later
        services.erasure_queue.send(work, not_yet.seconds)
        return
    step = user.erasure_step + 1 if done else user.erasure_step
    ran = services.clock()
    # Counted before the next part is queued: a copy of the next part run before this
    # count would find its part not yet awaited, and be dropped (the chain would stop).
    if not services.users.advance_erasure(user.user_id, work.part, ErasureProgress(
            step=step, after=None if done else after, sent=work.sent, ran=ran.isoformat(),
            erased=step >= len(STEPS))):
        log.info("erasure of %s: part %d counted by another copy", work.user_id, work.part)
        return
    if step >= len(STEPS):
        log.info("erased user %s", user.user_id)
        return
    services.erasure_queue.send(ErasureWork(user.user_id, work.part + 1))


def _queue_next(services: Services, user: User) -> None:
    if user.erased is None:
        services.erasure_queue.send(ErasureWork(user.user_id, user.erasure_part))


def erase_batch(services: Services, event: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """An SQS event's parts, each on its own; the failed ones, to be delivered again."""
    return process_batch(event, lambda work, _final: erase_part(services, work),
                         parse=ErasureWork.parse)


def _agents(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    """The user's agents, one at a time: its OAuth tokens and corpus versions a bounded
    part at a time (an agent may hold thousands), then the rest of it (a few calls)."""
    owned = sorted((a for a in services.registry.listed() if a.owner == user.username),
                   key=lambda a: a.agent_id)
    if not owned:
        return True, None
    agent = owned[0]
    if services.oauth.forget_agent_part(agent.agent_id, ITEMS_PART) or \
            forget_some_corpora(services, agent.agent_id, CORPUS_VERSIONS_PART):
        return False, None  # this agent's rest in the next part
    with contextlib.suppress(NotFound):  # removed meanwhile
        remove_agent(services, agent)
    return len(owned) == 1, None


def _sessions(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    """The user's sessions, each with its embeds' objects no session of another user who
    is not deleted holds (content-addressed: the same bytes are one object; see
    :func:`_held_by_the_living`). The objects a part deleted are
    looked at again by the next (``after``), once a writer that found one before its
    delete has named it (:func:`_recheck`)."""
    if after is not None:
        _recheck(services, user, json.loads(after))
        return False, None
    page = services.sessions.list_by_owner(user.user_id, limit=SESSIONS_PART)
    budget = EMBEDS_PART
    deleted: list[tuple[str, str | None]] = []
    # A reply written before replies held their embeds' bytes may name any object, unseen
    # by by_content: until they are backfilled, every object stays (for good: recorded).
    held = services.sessions.replies_held()
    for session in page.items:
        embeds = services.sessions.embed_hashes(session.session_id, budget)
        if embeds and not held and not user.embeds_kept:
            services.users.note_embeds_kept(user.user_id)
        for item, digest in embeds:
            if held and not _held_by_the_living(services, digest, user.user_id):
                deleted.append((digest, services.embeds.forget(digest)))
            services.sessions.drop_item(session.session_id, item)
        budget -= len(embeds)
        if budget <= 0:  # this session's other embeds, and the rest, in the next part
            break
        purge = functools.partial(services.queue.enqueue, Work.purge(session.session_id))
        with contextlib.suppress(NotFound):  # deleted meanwhile (the index lags)
            services.sessions.erase(session.session_id, user.user_id, purge, ITEMS_PART)
    if deleted:
        return False, json.dumps({"at": services.clock().isoformat(), "objects": deleted})
    return not page.items, None


def _held_by_the_living(services: Services, digest: str, user_id: str) -> bool:
    """Whether a session of a user but ``user_id`` who is not deleted (or not found)
    holds these bytes. A deleted user's sessions do not count: their own erasure deletes
    them, and two erasures of the same bytes at once would otherwise each keep them for
    the other (or restore them on looking again), leaving them to no one for good. Of
    the erasures of all the bytes' holders, the one whose look (before a delete, or
    again after it) comes last finds every other holder deleted (each was before its
    own erasure looked) and their items gone but for those of parts running meanwhile:
    it deletes the bytes, or leaves them deleted. A deletion is never undone (``deleted``
    is kept as first written): a user found deleted holds nothing from then on."""
    for looked, holder in enumerate(services.sessions.other_holders(digest, user_id)):
        if looked == HOLDERS_LOOKED:
            return True
        try:
            if services.users.get(holder).deleted is None:
                return True
        except NotFound:  # not a user's id: held, to be safe
            return True
    return False


def _recheck(services: Services, user: User, pending: dict[str, Any]) -> None:
    """Restore each object deleted at ``pending["at"]`` that a session of another user
    who is not deleted holds now: the check before its delete may have come between
    another writer's finding the object (an embed bound, a reply's embed stored) and
    its naming it (its EMBED# or HELD# item), at most :func:`recheck_seconds` apart.
    Not before then (NotYet)."""
    due = datetime.fromisoformat(pending["at"]) + \
        timedelta(seconds=recheck_seconds(services.settings))
    wait = due - services.clock()
    if wait > timedelta(0):
        raise NotYet(math.ceil(wait.total_seconds()))
    for digest, marker in pending["objects"]:
        if marker is not None and _held_by_the_living(services, digest, user.user_id):
            log.warning("erasure of %s: embed %s named meanwhile by another user; restored",
                        user.user_id, digest)
            services.embeds.restore(digest, marker)


def _guards(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    return not services.sessions.drop_guards(user.user_id, ITEMS_PART), None


def _oauth(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    return not services.oauth.forget_user(user.user_id, ITEMS_PART), None


def _uploads(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    return not services.embeds.drop_uploads(user.user_id, ITEMS_PART), None


def _storage(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    """The user's storage with the next SCOPES_PART registered agents after ``after`` (by
    id). A deleted agent's storage is swept with its registration; this is the registered
    agents'."""
    start = after or ""
    agent_ids = sorted(a.agent_id for a in services.registry.listed() if a.agent_id > start)
    for agent_id in agent_ids[:SCOPES_PART]:
        if services.storage.drop_scope(user.user_id, agent_id, SCOPE_ITEMS):
            return False, start  # this agent's rest in the next part
        start = agent_id
    return len(agent_ids) <= SCOPES_PART, start


def _usage(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    for kind in DAILY_COUNTERS:
        services.usage.forget(kind, user.user_id, COUNTER_DAYS)
    services.usage.forget(RUNNING, user.user_id)
    return True, None


# In order; the agents and sessions steps once more at the end, for what a credential
# checked before the deletion wrote after those steps first ran.
STEPS: tuple[Step, ...] = (_agents, _sessions, _guards, _oauth, _uploads, _storage, _usage,
                           _agents, _sessions)
