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
from typing import TYPE_CHECKING

import anyio

from codeshot import ids
from codeshot.errors import RateLimited
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import UpdateTypeDef

WAITING = "waiting"  # the leases' kind in the usage table
# Past the longest wait, what a request does around it (its post before, its answer after):
# in AWS the API's timeout (29 s) ends a request well before its slot lapses.
LAPSE_MARGIN = timedelta(seconds=60)


@dataclass
class WaitSlot:
    """One of a user's waiting slots: taken on its own (:meth:`take`) or in the
    transaction that posts the request's message (:meth:`take_request`, see
    :meth:`Messaging.post`), held until :meth:`release` (which may come again)."""

    services: Services
    user_id: str
    lease_id: str
    held: bool = False  # may hold it: given back unless a refusal proved it was not taken

    @property
    def cap(self) -> int:
        return self.services.settings.max_waiting_requests

    def _lasts(self) -> timedelta:
        return timedelta(seconds=self.services.settings.reply_wait_seconds) + LAPSE_MARGIN

    def take(self) -> None:
        """Take it now, with its own write: RATE_LIMITED (nothing written) when all are."""
        self.held = True
        try:
            self.services.usage.take_lease(WAITING, self.user_id, self.cap, self.lease_id,
                                           self._lasts())
        except RateLimited as exc:
            self.held = False
            raise self.refused() from exc

    def take_request(self) -> UpdateTypeDef:
        """The update that takes it in a transaction (refused as
        :meth:`UsageCounters.take_lease_request` says)."""
        return self.services.usage.take_lease_request(WAITING, self.user_id, self.cap,
                                                      self.lease_id, self._lasts())

    def make_room(self) -> bool:
        """After :meth:`take_request` was refused: whether to try again."""
        return self.services.usage.make_room(WAITING, self.user_id, self.lease_id)

    def refused(self) -> RateLimited:
        return RateLimited(
            f"you already have {self.cap} requests waiting for replies; send this one "
            "without waiting for its reply (then read it from the session), or again once "
            "one of them has answered", limit=self.cap)

    async def release(self) -> None:
        if self.held:
            self.held = False
            # Shielded: a request cancelled mid-wait (its caller gone, a stream's scope
            # cancelled) still gives its slot back. run_sync alone is not enough: it
            # checkpoints, and so is cancelled, before its own shield begins.
            with anyio.CancelScope(shield=True):
                await blocking(self.services.usage.release, WAITING, self.user_id,
                               self.lease_id)


def new_slot(services: Services, principal: Principal) -> WaitSlot:
    """One of the caller's waiting slots, not taken yet."""
    return WaitSlot(services, user_id_of(principal), ids.ulid())


async def take_slot(services: Services, principal: Principal) -> WaitSlot:
    """One of the caller's waiting slots, taken once the request's input is checked
    (bad input gets its own error, and holds none) and before anything is written for
    it: RATE_LIMITED (nothing written) when all are taken."""
    slot = new_slot(services, principal)
    await blocking(slot.take)
    return slot


# Whether this request holds a slot already: a wait nested in another (an A2A send
# around the ask it makes) holds one slot, not two.
_holding: ContextVar[bool] = ContextVar("holding_a_waiting_slot", default=False)


@asynccontextmanager
async def waiting(services: Services, principal: Principal, seconds: float, *,
                  posting: bool = False) -> AsyncIterator[WaitSlot | None]:
    """Hold one of the caller's waiting slots for the block if it waits at all (``seconds``
    > 0) and holds none yet: taken first, so a refused request writes nothing (see
    :func:`take_slot`); or, ``posting``, yielded untaken for the block's one write, the
    post of its message, to take (:meth:`Messaging.post`: one write fewer, and bad input
    is refused by that post before it holds one; a slot taken already is kept by it).
    Yields None when it holds none. Not for an async generator's body (its steps run in
    its reader's context): :func:`take_slot` and :meth:`WaitSlot.release` there."""
    if seconds <= 0 or _holding.get():
        yield None
        return
    slot = new_slot(services, principal)
    if not posting:
        await blocking(slot.take)
    holding = _holding.set(True)
    try:
        yield slot
    finally:
        _holding.reset(holding)
        await slot.release()
