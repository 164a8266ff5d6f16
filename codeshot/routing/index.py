"""An in-memory cosine index over every agent's sample-query embeddings.

Rows are grouped by agent, so an agent's score (its best row) is one
``np.maximum.reduceat`` over the similarity vector: routing 10,000 agents is a single
matrix-vector product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codeshot.models import Agent
from codeshot.routing.embedders import Embedder


def agent_texts(agent: Agent) -> list[str]:
    """What represents an agent: its sample queries, and its name with its description."""
    texts = [q for q in agent.sample_queries if q.strip()]
    summary = " ".join(part for part in (agent.name, agent.description) if part).strip()
    if summary:
        texts.append(summary)
    return texts or [agent.handle]


def with_embeddings(agent: Agent, embedder: Embedder) -> Agent:
    matrix = embedder.embed(agent_texts(agent))
    return agent.replace(embeddings=matrix.astype("<f4").tobytes(),
                         embedding_model=embedder.model_id)


def stored_matrix(agent: Agent, embedder: Embedder) -> np.ndarray:
    """The agent's stored rows, or fresh ones if they were made by another model."""
    if agent.embeddings and agent.embedding_model == embedder.model_id:
        rows = np.frombuffer(agent.embeddings, dtype="<f4")
        return rows.reshape(-1, rows.size // len(agent_texts(agent)))
    return embedder.embed(agent_texts(agent))


@dataclass(frozen=True)
class Route:
    agent_id: str
    score: float
    matched: str  # the sample query (or description) that matched best


class AgentIndex:
    def __init__(self, agents: list[Agent], embedder: Embedder) -> None:
        self.embedder = embedder
        self.agents = list(agents)
        blocks, texts, starts = [], [], []
        offset = 0
        for agent in self.agents:
            rows = stored_matrix(agent, embedder)
            starts.append(offset)
            offset += len(rows)
            blocks.append(rows)
            texts.extend(agent_texts(agent))
        self.texts = texts
        self.starts = np.asarray(starts, dtype=np.int64)
        self.matrix = np.vstack(blocks) if blocks else np.zeros((0, 1), dtype=np.float32)
        self.published = np.asarray([a.published for a in self.agents], dtype=bool)
        self.owners = np.asarray([a.owner for a in self.agents], dtype=object)

    def __len__(self) -> int:
        return len(self.agents)

    def search(self, text: str, k: int = 3, viewer: str | None = None) -> list[Route]:
        if not self.agents or k < 1:
            return []
        query = self.embedder.embed([text])[0]
        scores = self.matrix @ query
        best = np.maximum.reduceat(scores, self.starts)
        visible = self.published | (self.owners == viewer) if viewer else self.published
        best = np.where(visible, best, -np.inf)
        k = min(k, int(visible.sum()))
        if k == 0:
            return []
        top = np.argpartition(-best, k - 1)[:k]
        top = top[np.argsort(-best[top], kind="stable")]
        routes = []
        for i in top:
            start = self.starts[i]
            end = self.starts[i + 1] if i + 1 < len(self.starts) else len(scores)
            row = start + int(np.argmax(scores[start:end]))
            routes.append(Route(self.agents[i].agent_id, round(float(best[i]), 4),
                                self.texts[row]))
        return routes
