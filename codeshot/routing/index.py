"""An in-memory cosine index over every agent's sample-query embeddings.

Rows are grouped by agent; an agent's score is its best row. With numpy (the runner's
bundle ships it) the scores are one matrix-vector product and one ``maximum.reduceat``,
so routing 10,000 agents stays a few milliseconds; without it (the API and the
registration Lambda, which route rarely and keep their bundles small) the same scores
come from plain Python.
"""

from __future__ import annotations

import heapq
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codeshot.models import Agent
from codeshot.routing.embedders import Embedder, Vectors


def agent_texts(agent: Agent) -> list[str]:
    """What represents an agent: its sample queries, and its name with its description."""
    texts = [q for q in agent.sample_queries if q.strip()]
    summary = " ".join(part for part in (agent.name, agent.description) if part).strip()
    if summary:
        texts.append(summary)
    return texts or [agent.handle]


def to_bytes(rows: Vectors) -> bytes:
    """Rows as little-endian float32, the registry's storage format."""
    flat = array("f", (float(x) for row in rows for x in row))
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def from_bytes(data: bytes, n_rows: int) -> list[array[float]]:
    flat = array("f")
    flat.frombytes(data)
    if sys.byteorder != "little":
        flat.byteswap()
    width = len(flat) // n_rows
    return [flat[i * width:(i + 1) * width] for i in range(n_rows)]


def with_embeddings(agent: Agent, embedder: Embedder) -> Agent:
    rows = embedder.embed(agent_texts(agent))
    return agent.replace(embeddings=to_bytes(rows), embedding_model=embedder.model_id)


def stored_rows(agent: Agent, embedder: Embedder) -> Vectors:
    """The agent's stored rows, or fresh ones if they were made by another model."""
    if agent.embeddings and agent.embedding_model == embedder.model_id:
        return from_bytes(agent.embeddings, len(agent_texts(agent)))
    return embedder.embed(agent_texts(agent))


@dataclass(frozen=True)
class Route:
    agent_id: str
    score: float
    matched: str  # the sample query (or description) that matched best


class _PythonScores:
    def __init__(self, rows: list[Sequence[float]], starts: list[int]) -> None:
        self.rows, self.bounds = rows, list(zip(starts, [*starts[1:], len(rows)]))

    def __call__(self, query: Sequence[float]) -> tuple[Sequence[float], list[float]]:
        scores = [sum(a * b for a, b in zip(row, query)) for row in self.rows]
        return scores, [max(scores[start:end]) for start, end in self.bounds]


class _NumpyScores:
    def __init__(self, np: Any, rows: list[Sequence[float]], starts: list[int]) -> None:
        self.np = np
        self.matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)
        self.starts = np.asarray(starts, dtype=np.int64)

    def __call__(self, query: Sequence[float]) -> tuple[Sequence[float], list[float]]:
        scores = self.matrix @ self.np.asarray(query, dtype=self.np.float32)
        return scores, self.np.maximum.reduceat(scores, self.starts).tolist()


def _scorer(rows: list[Sequence[float]], starts: list[int]) -> Any:
    try:
        import numpy
    except ImportError:
        return _PythonScores(rows, starts)
    return _NumpyScores(numpy, rows, starts)


class AgentIndex:
    def __init__(self, agents: list[Agent], embedder: Embedder) -> None:
        self.embedder = embedder
        self.agents = list(agents)
        rows: list[Sequence[float]] = []
        self.starts: list[int] = []
        self.texts: list[str] = []
        for agent in self.agents:
            self.starts.append(len(rows))
            rows.extend(stored_rows(agent, embedder))
            self.texts.extend(agent_texts(agent))
        self._scores = _scorer(rows, self.starts) if rows else None

    def __len__(self) -> int:
        return len(self.agents)

    def search(self, text: str, k: int = 3, viewer: str | None = None) -> list[Route]:
        if self._scores is None or k < 1:
            return []
        scores, best = self._scores(self.embedder.embed([text])[0])
        visible = [i for i, a in enumerate(self.agents)
                   if a.published or (viewer is not None and a.owner == viewer)]
        routes = []
        for i in heapq.nlargest(k, visible, key=best.__getitem__):
            start = self.starts[i]
            end = self.starts[i + 1] if i + 1 < len(self.starts) else len(scores)
            row = max(range(start, end), key=lambda r: scores[r])
            routes.append(Route(self.agents[i].agent_id, round(float(best[i]), 4),
                                self.texts[row]))
        return routes
