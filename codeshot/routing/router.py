"""The router: the agent index, cached per process and rebuilt when the registry changes.

Every registry write bumps a version counter; the router looks at it at most every
``check_seconds``, so a warm runner pays one small read now and then, not a table scan
per query.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the index (and numpy) load on the first route: not at cold start
    from codeshot.routing.embedders import Embedder
    from codeshot.routing.index import AgentIndex, Route
    from codeshot.store.registry import AgentRegistry


class Router:
    def __init__(
        self, registry: AgentRegistry, embedder: Embedder, check_seconds: float = 5.0
    ) -> None:
        self.registry = registry
        self.embedder = embedder
        self.check_seconds = check_seconds
        self._index: AgentIndex | None = None
        self._version = -1
        self._checked = 0.0
        self._lock = threading.Lock()

    def index(self) -> AgentIndex:
        with self._lock:
            now = time.monotonic()
            if self._index is None or now - self._checked >= self.check_seconds:
                self._checked = now
                version = self.registry.version()
                if self._index is None or version != self._version:
                    from codeshot.routing.index import AgentIndex

                    self._index = AgentIndex(self.registry.scan_all(), self.embedder)
                    self._version = version
            return self._index

    def route(self, text: str, k: int = 3, viewer: str | None = None) -> list[Route]:
        return self.index().search(text, k, viewer)
