"""The router: the agent index, cached per process and rebuilt when the registry changes.

``Router.route(text, k, viewer)`` returns the ``k`` best :class:`Candidate` agents the
viewer may use, best first: ``agent_id``, ``score`` (dense and lexical fused, 0..1),
``matched_sample`` (the agent's sample closest to the text) and ``fits`` (at or above
the floor, and not nearer a no-agent example by more than the margin). When no candidate
fits, no agent should take the query; the candidates are still returned, so a caller can
say which came closest. Floor and margin are calibrated per embedder
(:mod:`codeshot.routing.calibration`); ``floor=`` and ``margin=``
(``CODESHOT_ROUTER_FLOOR``, ``CODESHOT_ROUTER_MARGIN``) override them.

Every registry write bumps a version counter; the router looks at it at most every
``check_seconds``, so a warm runner pays one small read now and then, not a table scan
per query. A rebuild embeds only agents whose rows it has from neither the registry nor
the index it replaces: an agent stored under another model is embedded once a process.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the index (and numpy) load on the first route: not at cold start
    from codeshot.routing.embedders import Embedder
    from codeshot.routing.index import AgentIndex, Candidate
    from codeshot.store.registry import AgentRegistry


class Router:
    def __init__(
        self, registry: AgentRegistry, embedder: Embedder, check_seconds: float = 5.0,
        floor: float | None = None, margin: float | None = None,
    ) -> None:
        from codeshot.routing.calibration import scoring_for

        self.registry = registry
        self.embedder = embedder
        self.check_seconds = check_seconds
        self.scoring = scoring_for(embedder.model_id, floor, margin)
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

                    self._index = AgentIndex(self.registry.scan_all(), self.embedder,
                                             self.scoring, store=self.registry,
                                             previous=self._index)
                    self._version = version
            return self._index

    @property
    def floor(self) -> float:
        """The score below which no agent fits."""
        return self.scoring.floor

    def route(self, text: str, k: int = 3, viewer: str | None = None) -> list[Candidate]:
        return self.index().search(text, k, viewer)
