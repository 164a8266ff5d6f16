"""Running the blocking use cases from async transports."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread: the event loop keeps serving meanwhile."""
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))
