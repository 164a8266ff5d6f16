"""Fairness between users: no query runs past its time budget, and no user has more
than a few queries running at once, so one user's slow agent cannot hold the runner for
everyone else.

:func:`running_query` is the per-user cap (one item per user in the usage table, with
the ids of the queries holding a slot: taken when a query starts, given back when it
ends). It also keeps a query from running twice: a run that crashed mid-way never gave its
slot back, so its redelivery is answered INTERRUPTED instead of calling its agents again;
the slot itself lapses ``LEASE_LASTS`` after it was taken, and stops counting.
:func:`query_deadline` is when the query's time is up: every program of the query (the
planner and the agents it calls) shares it through ``Limits.deadline``, and each agent
call waits at most until then.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from codeshot.errors import CodeshotError, RateLimited
from codeshot.settings import runner_record_seconds

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from codeshot.services import Services
    from codeshot.settings import Settings

RUNNING = "running"
# A lease its run never gave back (a crash) lapses after this: longer than any run (the
# runner's Lambda timeout), so a live run's slot never lapses under it.
LEASE_LASTS = timedelta(minutes=15)


@dataclass
class Lease:
    """A running query's slot. The runner gives it back in the transaction that stores
    the reply (:meth:`release_item`, then ``released``); otherwise leaving the block does."""

    services: Services
    user_id: str
    query_id: str
    released: bool = False

    def release_item(self) -> TransactWriteItemTypeDef:
        return {"Update": self.services.usage.release_request(RUNNING, self.user_id,
                                                              self.query_id)}

    def untaken_item(self) -> TransactWriteItemTypeDef:
        """A transaction's condition that no run of the query took this slot (a reply
        that says nothing of it ran, and gives its charge back, is true only then)."""
        return {"ConditionCheck": self.services.usage.never_leased(RUNNING, self.user_id,
                                                                  self.query_id)}

    def held(self) -> bool:
        """Whether a run of the query holds this slot (or held it, and stopped mid-way)."""
        return self.services.usage.leased(RUNNING, self.user_id, self.query_id)

    def release(self) -> None:
        if not self.released:
            self.services.usage.release(RUNNING, self.user_id, self.query_id)
            self.released = True


@contextmanager
def running_query(services: Services, user_id: str, query_id: str) -> Iterator[Lease]:
    """Hold one of ``user_id``'s running-query slots while ``query_id`` runs: RATE_LIMITED
    when all are taken, Interrupted when this query took one before and never gave it
    back (its run stopped mid-way; the queue delivered it again)."""
    usage, cap = services.usage, services.settings.max_running_queries
    lease = Lease(services, user_id, query_id)
    try:
        # Interrupted propagates with the slot held: the caller gives it back with its
        # INTERRUPTED answer, in the same write.
        usage.take_lease(RUNNING, user_id, cap, query_id, LEASE_LASTS)
    except RateLimited as exc:
        raise RateLimited(f"you already have {cap} queries running; send this one again "
                          f"when one of them has answered", limit=cap) from exc
    try:
        yield lease
    except CodeshotError:
        lease.release()
        raise
    # Anything else propagates with the slot held: the run may have stopped mid-way, and
    # its redelivery must not run it again.
    lease.release()


def posted_again(refusal: RateLimited) -> RateLimited:
    """``refusal`` of an answer the platform posts again itself once a slot is free (an
    Agent Protocol task's with a callback, codeshot.usecases.prompts): saying so, rather
    than asking the client to send it again (of two answers, one would be CANCELED)."""
    limit = refusal.details.get("limit")
    reason = f"you already have {limit} queries running" if limit is not None else \
        "the platform was too busy to run it"
    return RateLimited(f"{reason}; the platform sends this answer again once one of your "
                       "running-query slots is free (until the question's deadline)",
                       **refusal.details)


# The question ends so (UNAVAILABLE) when the platform's own queue or store fails to post
# an answer again that was refused at the cap: the callback (or the user) did answer.
UNQUEUED_ANSWER = ("The platform could not post the answer to the question again (its own "
                   "queue or store failed, not the task's callback); the task can go on "
                   "with a new step.")


def running_slot_free(services: Services, user_id: str) -> bool:
    """Whether ``user_id`` has a running-query slot free now (a query taken in now would
    most likely run, not be refused RATE_LIMITED)."""
    return services.usage.has_room(RUNNING, user_id, services.settings.max_running_queries)


def query_deadline(settings: Settings, record_start: float | None = None) -> float:
    """The ``time.monotonic()`` by which a query starting now must end: its whole budget,
    but no later than the time its queue record may take from its ``record_start`` (a
    wait before the query starts comes out of the record's reserve, not of the query's
    budget, as far as the reserve goes)."""
    budget = settings.query_time_budget_seconds
    deadline = time.monotonic() + budget
    if record_start is None:
        return deadline
    return min(deadline, record_start + runner_record_seconds(budget))
