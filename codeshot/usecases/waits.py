"""A cap on the requests one user may hold open waiting for replies.

A request that waits for the runner (``sendSessionMessage`` by default, the Fixie
``/api/agents/...`` query, a blocking A2A send, stream or subscription to a working task,
MCP's ``ask``, an Agent Protocol step, a long poll of ``messages``) keeps an API Lambda
instance busy all that time. The account's Lambda concurrency is shared by every user (a
new account often has 10), so one user may hold only ``CODESHOT_MAX_WAITING_REQUESTS``
such waits at once: one slot each, leases in the usage table as the runner's
running-query slots are (:func:`codeshot.runner.fairness.running_query`), so the cap
holds across Lambda instances. A slot is given back when its request stops waiting,
whatever ended it; one a Lambda that died never gave back lapses once no request could
still be waiting on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta

import anyio

from codeshot import ids
from codeshot.errors import RateLimited
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of

WAITING = "waiting"  # the leases' kind in the usage table
# Past the longest wait, what a request does around it (its post before, its answer after):
# in AWS the API's timeout (29 s) ends a request well before its slot lapses.
LAPSE_MARGIN = timedelta(seconds=60)


@dataclass
class WaitSlot:
    """One of a user's waiting slots, held until :meth:`release` (which may come again)."""

    services: Services
    user_id: str
    lease_id: str
    released: bool = False

    async def release(self) -> None:
        if not self.released:
            self.released = True
            # Shielded: a request cancelled mid-wait (its caller gone, a stream's scope
            # cancelled) still gives its slot back. run_sync alone is not enough: it
            # checkpoints, and so is cancelled, before its own shield begins.
            with anyio.CancelScope(shield=True):
                await blocking(self.services.usage.release, WAITING, self.user_id,
                               self.lease_id)


async def take_slot(services: Services, principal: Principal) -> WaitSlot:
    """One of the caller's waiting slots, taken once the request's input is checked
    (bad input gets its own error, and holds none) and before anything is written for
    it: RATE_LIMITED (nothing written) when all are taken."""
    cap = services.settings.max_waiting_requests
    slot = WaitSlot(services, user_id_of(principal), ids.ulid())
    lasts = timedelta(seconds=services.settings.reply_wait_seconds) + LAPSE_MARGIN
    try:
        await blocking(services.usage.take_lease, WAITING, slot.user_id, cap, slot.lease_id,
                       lasts)
    except RateLimited as exc:
        raise RateLimited(
            f"you already have {cap} requests waiting for replies; send this one without "
            "waiting for its reply (then read it from the session), or again once one of "
            "them has answered", limit=cap) from exc
    return slot


# Whether this request holds a slot already: a wait nested in another (an A2A send
# around the ask it makes) holds one slot, not two.
_holding: ContextVar[bool] = ContextVar("holding_a_waiting_slot", default=False)


@asynccontextmanager
async def waiting(services: Services, principal: Principal, seconds: float
                  ) -> AsyncIterator[None]:
    """Hold one of the caller's waiting slots for the block if it waits at all (``seconds``
    > 0) and holds none yet: taken first, so a refused request writes nothing (see
    :func:`take_slot`). Not for an async generator's body (its steps run in its reader's
    context): :func:`take_slot` and :meth:`WaitSlot.release` there."""
    if seconds <= 0 or _holding.get():
        yield
        return
    slot = await take_slot(services, principal)
    holding = _holding.set(True)
    try:
        yield
    finally:
        _holding.reset(holding)
        await slot.release()
