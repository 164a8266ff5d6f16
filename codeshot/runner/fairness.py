"""Fairness between users: no query runs past its time budget, and no user has more
than a few queries running at once, so one user's slow agent cannot hold the runner for
everyone else.

:func:`running_query` is the per-user cap (a count in the usage table, charged when a
query starts and given back when it ends; a count a crashed runner never gave back
lapses with its 15-minute window). :func:`query_deadline` is when the query's time is up:
every program of the query (the planner and the agents it calls) shares it through
``Limits.deadline``, and each agent call waits at most until then.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from codeshot.errors import RateLimited

if TYPE_CHECKING:
    from codeshot.services import Services
    from codeshot.settings import Settings

RUNNING = "running"
LEASE = "lease"


@contextmanager
def running_query(services: Services, user_id: str) -> Iterator[None]:
    """Hold one of ``user_id``'s running-query slots for the block; RATE_LIMITED when all
    are taken."""
    usage, cap = services.usage, services.settings.max_running_queries
    started = usage.clock()
    try:
        usage.charge(RUNNING, user_id, cap, window=LEASE, now=started)
    except RateLimited as exc:
        raise RateLimited(f"you already have {cap} queries running; send this one again "
                          f"when one of them has answered", limit=cap) from exc
    try:
        yield
    finally:
        usage.release(RUNNING, user_id, LEASE, started)


def query_deadline(settings: Settings) -> float:
    """The ``time.monotonic()`` by which a query starting now must end."""
    return time.monotonic() + settings.query_time_budget_seconds
