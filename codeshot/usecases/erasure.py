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
# holds the same bytes, up to HOLDERS_LOOKED of them, an index read and, once a part,
# their user item).
EMBEDS_PART = 50
# Deleted users holding the same bytes looked past for one who is not: more than the
# parts that run at once (the eraser's concurrency times its batch), whose deleted users'
# items the last erasure to look can find still there (_Looks.held_by_the_living). Items
# of sessions a deleted user deleted before, still to be purged, count too. Past them the
# bytes count as held: kept (logged, and noted on the tombstone).
HOLDERS_LOOKED = 20
# by_content reads a part makes at most (a look: one past the owner's own item, one for
# each other holder, one that finds no more), and so users' reads (each holder once): the
# looks it has not made go to the next part, so a part of bytes shared with crowds of
# deleted users stays within the eraser's timeout (unshared, EMBEDS_PART take 100).
INDEX_READS_PART = 200
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
    except PartCounted:
        log.info("erasure of %s: part %d counted by another copy", work.user_id, work.part)
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


class PartCounted(Exception):
    """Another copy of this part counted it: this one does nothing more."""


def _sessions(services: Services, user: User, after: str | None) -> tuple[bool, str | None]:
    """The user's sessions, each with its embeds' objects no session of another user who
    is not deleted holds (content-addressed: the same bytes are one object; see
    :meth:`_Looks.held_by_the_living`). The objects a part deletes are added to the
    tombstone's ``erasure_recheck`` before it deletes any, and looked at again by the next part
    (``after``), once a writer that found one before its delete has named it
    (:func:`_recheck`): a part that fails after a delete, run again, still has them looked
    at."""
    if after is not None:
        return _recheck(services, user, json.loads(after))
    page = services.sessions.list_by_owner(user.user_id, limit=SESSIONS_PART)
    budget, looks = EMBEDS_PART, _Looks(services, user)
    # A reply written before replies held their embeds' bytes may name any object, unseen
    # by by_content: until they are backfilled, every object stays (for good: recorded).
    held = services.sessions.replies_held()
    for session in page.items:
        embeds = services.sessions.embed_hashes(session.session_id, budget)
        if embeds and not held and not user.embeds_kept:
            services.users.note_embeds_kept(user.user_id)
        looked: list[tuple[str, str | None]] = []  # (item, the digest to delete)
        for item, digest in embeds:
            if held and looks.spent():  # the rest in the next part
                break
            unheld = held and not looks.held_by_the_living(digest)
            looked.append((item, digest if unheld else None))
        doomed = {gone for _, gone in looked if gone is not None}
        if doomed and not services.users.note_recheck(user.user_id, user.erasure_part, doomed):
            raise PartCounted
        for item, gone in looked:
            if gone is not None:
                services.embeds.forget(gone)
            services.sessions.drop_item(session.session_id, item)
        looks.deleted |= doomed
        budget -= len(looked)
        if budget <= 0 or len(looked) < len(embeds):  # this session's rest, and the others
            break
        purge = functools.partial(services.queue.enqueue, Work.purge(session.session_id))
        with contextlib.suppress(NotFound):  # deleted meanwhile (the index lags)
            services.sessions.erase(session.session_id, user.user_id, purge, ITEMS_PART)
    looks.note_kept()
    # Objects a copy of this part that failed deleted count as this part's; before the
    # step ends, those a copy running at once added since this one read the tombstone too
    # (else the step, the last one even, could end with them never looked at again).
    if looks.deleted or user.erasure_recheck or (
            not page.items and services.users.pending_recheck(user.user_id)):
        return False, json.dumps({"at": services.clock().isoformat()})
    return not page.items, None


class _Looks:
    """One part's looks at who holds bytes: each other holder's user read once (deleted
    is for good; found live, the bytes stay, which is safe), at most INDEX_READS_PART
    index reads, and the bytes kept past HOLDERS_LOOKED deleted holders."""

    def __init__(self, services: Services, user: User) -> None:
        self.services, self.user = services, user
        self.live: dict[str, bool] = {}
        self.reads = 0
        self.crowded: list[str] = []
        self.deleted: set[str] = set()

    def spent(self) -> bool:
        return self.reads >= INDEX_READS_PART

    def held_by_the_living(self, digest: str) -> bool:
        """Whether a session of a user but this one who is not deleted (or not found)
        holds these bytes. A deleted user's sessions do not count: their own erasure
        deletes them, and two erasures of the same bytes at once would otherwise each keep
        them for the other (or restore them on looking again), leaving them to no one for
        good. Of the erasures of all the bytes' holders, the one whose look (before a
        delete, or again after it) comes last finds every other holder deleted (each was
        before its own erasure looked) and their items gone but for those of parts running
        meanwhile: it deletes the bytes, or leaves them deleted. A deletion is never undone
        (``deleted`` is kept as first written): a user found deleted holds nothing from
        then on."""
        self.reads += 2  # the read past the user's own item, and the one that finds no one
        for looked, holder in enumerate(self.services.sessions.other_holders(
                digest, self.user.user_id)):
            self.reads += 1
            if looked == HOLDERS_LOOKED:
                self.crowded.append(digest)
                return True
            if holder not in self.live:
                self.live[holder] = _live(self.services, holder)
            if self.live[holder]:
                return True
        return False

    def note_kept(self) -> None:
        """Bytes kept past HOLDERS_LOOKED deleted holders: logged, and on the tombstone."""
        if not self.crowded:
            return
        log.warning("erasure of %s: embeds %s kept, held by more than %d deleted users",
                    self.user.user_id, ", ".join(self.crowded), HOLDERS_LOOKED)
        if not self.user.embeds_crowded:
            self.services.users.note_embeds_kept(self.user.user_id, crowded=True)


def _live(services: Services, user_id: str) -> bool:
    try:
        return services.users.get(user_id).deleted is None
    except NotFound:  # not a user's id: held, to be safe
        return True


def _recheck(services: Services, user: User, pending: dict[str, Any]) -> tuple[bool, str | None]:
    """Restore each object of the tombstone's ``erasure_recheck`` (deleted by the parts
    before, up to ``pending["at"]``) that a session of another user who is not deleted
    holds now: the check before its delete may have come between another writer's finding
    the object (an embed bound, a reply's embed stored) and its naming it (its EMBED# or
    HELD# item), at most :func:`recheck_seconds` apart. Not before then (NotYet). A
    restore undoes every erasure's delete of the bytes (EmbedStore.restore). As many as
    a part's index reads allow; the rest in the next part."""
    due = datetime.fromisoformat(pending["at"]) + \
        timedelta(seconds=recheck_seconds(services.settings))
    wait = due - services.clock()
    if wait > timedelta(0):
        raise NotYet(math.ceil(wait.total_seconds()))
    # Counted before the tombstone kept them: the objects (and their markers) in ``after``.
    if (older := {digest for digest, _ in pending.pop("objects", ())}) and \
            not services.users.note_recheck(user.user_id, user.erasure_part, older):
        raise PartCounted
    looks, rechecked = _Looks(services, user), set()
    for digest in sorted(user.erasure_recheck | older):
        if looks.spent():
            break
        if looks.held_by_the_living(digest) and services.embeds.restore(digest):
            log.warning("erasure of %s: embed %s named meanwhile by another user; restored",
                        user.user_id, digest)
        rechecked.add(digest)
    looks.note_kept()
    if rechecked and not services.users.rechecked(user.user_id, user.erasure_part, rechecked):
        raise PartCounted
    if rechecked != user.erasure_recheck | older:
        return False, json.dumps(pending)  # the rest in the next part
    return False, None


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
