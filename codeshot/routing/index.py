"""The agent index: which agents fit a query, best first.

An agent is represented by its sample queries and a line made of its name and
description, each embedded once at registration (stored with it). Two scores are fused:

- dense: the cosine between the query and the agent's centroid (the mean of its rows).
  One vector per agent, however many samples it has, so an agent with many samples does
  not win by count (a best-row maximum would: each sample is one more chance).
- lexical: BM25 over the same texts' stems (:mod:`codeshot.routing.lexical`), divided by
  the query's IDF mass, so it reads as the share of the query's words the agent knows.
  The name and description count ``SUMMARY_WEIGHT`` times (BM25F's field weight): they
  say what the agent is for, where a sample's other words (a city, a ticker) are
  incidental, and "what time is it in Tokyo" should not go to the weather agent because
  one of its samples names Tokyo.

``score = w * dense + (1 - w) * lexical``, with ``w`` and the no-agent floor calibrated
per embedder (:mod:`codeshot.routing.calibration`); a candidate below the floor does not
fit. ``matched_sample`` is the agent's row closest to the query.

A floor alone cannot tell "hello" from a short request: both score low on every agent.
So the platform ships examples of queries no agent should take (``data/no-agent.txt``:
greetings, feelings, advice, chores), embedded once (registration keeps their rows in
the registry; each process reads them there at its first route), and a candidate does
not fit when the query's nearest example is closer than the agent's nearest row by more
than the calibrated margin: an out-of-scope class, as intent classifiers have. An agent
made for small talk still takes "hello": its own sample is as close as any example.

With numpy (the runner's bundle ships it) a query costs one product with the centroid
matrix; a sparse query vector (``hashing``) reads only its own columns, and a large dense
index (``minilm`` beyond about 11,000 agents) shortlists agents on a 64-dimension
projection, next to BM25's best, before scoring the shortlist exactly. Without numpy
(bundles that route rarely) the same scores come from plain Python.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from codeshot.models import Agent
from codeshot.routing.calibration import Scoring, scoring_for
from codeshot.routing.embedders import Embedder, Vectors
from codeshot.routing.lexical import BM25
from codeshot.routing.text import terms

log = logging.getLogger(__name__)
EXACT_CELLS = 1 << 22  # centroid cells (agents x dimensions) scanned exactly per query:
# 10,000 agents of 384 dimensions take about 1 ms; beyond, a shortlist first
SHORTLIST = 256  # agents taken from each first stage of a large index
PROJECTION = 64  # dimensions of the first stage
SUMMARY_WEIGHT = 3  # the name and description's terms count this many times in BM25
NO_AGENT_EXAMPLES = Path(__file__).with_name("data") / "no-agent.txt"
_no_agent_rows: dict[str, Vectors] = {}  # by embedder model id: embedded once per process


def no_agent_examples() -> list[str]:
    lines = (line.strip() for line in NO_AGENT_EXAMPLES.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


class RowStore(Protocol):
    """Where vectors outlive a process (the agent registry): a runner container reads the
    no-agent examples' rows instead of embedding 82 texts (82 Bedrock calls with Titan)."""

    def rows(self, key: str, version: str) -> bytes | None: ...

    def put_rows(self, key: str, version: str, data: bytes) -> None: ...


def _no_agent_key(embedder: Embedder, examples: list[str]) -> tuple[str, str]:
    """Where the rows are (one place per model) and their version (the list's digest:
    a release with new examples replaces them)."""
    digest = hashlib.sha256("\n".join(examples).encode()).hexdigest()[:16]
    return f"no-agent#{embedder.model_id}", digest


def no_agent_rows(embedder: Embedder, store: RowStore | None = None) -> Vectors:
    """The examples' rows: this process's, else the store's, else embedded here."""
    rows = _no_agent_rows.get(embedder.model_id)
    if rows is None:
        examples = no_agent_examples()
        data = None
        if store is not None:
            try:
                data = store.rows(*_no_agent_key(embedder, examples))
            except Exception:  # a cache: embedding them is slower, not wrong
                log.warning("reading the no-agent examples' rows failed", exc_info=True)
        rows = from_bytes(data, len(examples)) if data else embedder.embed(examples)
        _no_agent_rows[embedder.model_id] = rows
    return rows


def keep_no_agent_rows(embedder: Embedder, store: RowStore) -> None:
    """Store the examples' rows if the store has none for this embedder (registration
    does: it embeds with the router's model anyway; one read when they are there). A
    cache: when this fails (Bedrock or DynamoDB throttled), the registration goes on and
    runners embed the examples themselves."""
    examples = no_agent_examples()
    key, version = _no_agent_key(embedder, examples)
    try:
        if store.rows(key, version) is None:
            store.put_rows(key, version, to_bytes(no_agent_rows(embedder)))
    except Exception:
        log.warning("keeping the no-agent examples' rows failed", exc_info=True)


class EmbeddingStore(Protocol):
    """Where agents' vectors are stored (the agent registry)."""

    def keep_embeddings(self, agent: Agent, read_as: Agent) -> bool: ...


def embed_again(agents: Sequence[Agent], embedder: Embedder, store: EmbeddingStore) -> int:
    """Store ``embedder``'s rows for each agent stored under another model, once (after
    ``codeshot router tune``: the agents registered before it), so that no router embeds
    them at each of its rebuilds; how many were stored. Run by whoever may write agents:
    the runner, which rebuilds indexes, may not."""
    return sum(store.keep_embeddings(with_embeddings(agent, embedder), read_as=agent)
               for agent in agents
               if agent.embedding_model != embedder.model_id or not agent.embeddings)


def agent_texts(agent: Agent) -> list[str]:
    """What represents an agent: its sample queries, and its name with its description."""
    texts = [q for q in agent.sample_queries if q.strip()]
    summary = ". ".join(part.strip() for part in (agent.name, agent.description)
                        if part.strip())
    if summary:
        texts.append(summary)
    return texts or [agent.handle]


def lexical_terms(agent: Agent) -> list[str]:
    """BM25's document for an agent: its samples' stems, then its name and description's
    stems ``SUMMARY_WEIGHT`` times."""
    samples = [t for q in agent.sample_queries for t in terms(q)]
    summary = terms(f"{agent.name} {agent.description}")
    return samples + summary * SUMMARY_WEIGHT or terms(agent.handle)


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


# An index's rows by the texts they embed, for the next index of the same model.
KnownRows = dict[tuple[str, ...], Vectors]


def stored_rows(agent: Agent, embedder: Embedder, known: KnownRows | None = None) -> Vectors:
    """The agent's stored rows, or if they were made by another model, the rows this
    process already has for its texts (``known``), else fresh ones."""
    texts = agent_texts(agent)
    if agent.embeddings and agent.embedding_model == embedder.model_id:
        rows = from_bytes(agent.embeddings, len(texts))
        if rows and len(rows[-1]) and len(agent.embeddings) % len(texts) == 0:
            return rows
    embedded = (known or {}).get(tuple(texts))
    return embedder.embed(texts) if embedded is None else embedded


@dataclass(frozen=True)
class Candidate:
    """An agent the router proposes for a query."""

    agent_id: str
    score: float  # fused dense and lexical score, 0..1; compare with the floor
    matched_sample: str  # the sample query (or name and description) closest to the query
    fits: bool  # at or above the floor and not nearer a no-agent example: else decline
    # How much nearer the query is to its nearest no-agent example than to the agent's
    # nearest row (fits only up to the margin); -inf when the scoring has no margin.
    no_agent_gap: float = -math.inf


def _centroid(rows: Vectors) -> list[float]:
    width = len(rows[0])
    sums = [sum(row[j] for row in rows) for j in range(width)]
    norm = math.sqrt(sum(x * x for x in sums))
    return [x / norm for x in sums] if norm else sums


class _PythonScores:
    """Exact fused scores in plain Python (no numpy installed)."""

    def __init__(self, rows: list[Vectors], published: list[bool],
                 dense_weight: float) -> None:
        self.centroids, self.w = [_centroid(r) for r in rows], dense_weight
        self.published = [i for i, p in enumerate(published) if p]

    def top(self, query: Sequence[float], bm25: BM25, words: list[str], extra: list[int],
            k: int) -> list[tuple[int, float]]:
        nz = [(j, x) for j, x in enumerate(query) if x]
        lexical = bm25.scores(words)

        def fused(i: int) -> float:
            dense = sum(self.centroids[i][j] * x for j, x in nz)
            return self.w * dense + (1 - self.w) * lexical.get(i, 0.0)

        scored = ((i, fused(i)) for i in dict.fromkeys(self.published + extra))
        return heapq.nlargest(k, scored, key=lambda pair: pair[1])

    def prepared(self, rows: Vectors) -> Vectors:
        return rows

    def row_scores(self, rows: Vectors, query: Sequence[float]) -> list[float]:
        return [sum(a * b for a, b in zip(row, query, strict=False)) for row in rows]


class _NumpyScores:
    """Fused scores with numpy: exact for small indexes and sparse queries, else on a
    shortlist from a projection onto the centroids' main directions plus BM25's best."""

    def __init__(self, np: Any, rows: list[Vectors], published: list[bool],
                 dense_weight: float) -> None:
        self.np, self.w = np, dense_weight
        flat = np.stack([np.frombuffer(row, dtype=np.float32) if isinstance(row, array)
                         else np.asarray(row, dtype=np.float32) for r in rows for row in r])
        sums = np.add.reduceat(flat, np.cumsum([0] + [len(r) for r in rows[:-1]]), axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        self.matrix = sums / np.where(norms == 0, 1, norms)
        # Transposed: a sparse query reads only the rows of its own dimensions.
        self.by_dimension = np.ascontiguousarray(self.matrix.T)
        self.published = np.asarray(published, dtype=bool)
        n, d = self.matrix.shape
        self.large = n * d > EXACT_CELLS and d > PROJECTION
        self.projection: Any = None
        self.projected: Any = None

    def _project(self) -> None:
        """The top eigenvectors of C^T C (they keep dot products, not only variance)."""
        np, matrix = self.np, self.matrix
        sample = matrix[:: max(1, len(matrix) // 4096)]
        _, vectors = np.linalg.eigh(sample.T @ sample)
        self.projection = np.ascontiguousarray(vectors[:, -PROJECTION:], dtype=np.float32)
        self.projected = np.ascontiguousarray(matrix @ self.projection)

    def top(self, query: Sequence[float], bm25: BM25, words: list[str], extra: list[int],
            k: int) -> list[tuple[int, float]]:
        np, matrix = self.np, self.matrix
        q = np.asarray(query, dtype=np.float32)
        nz = np.flatnonzero(q)
        n, d = matrix.shape
        lexical = bm25.array_scores(np, words)
        if not self.large or len(nz) * 8 <= d:  # exact, over every agent
            ids = np.arange(n)
            dense = q[nz] @ self.by_dimension[nz] if len(nz) * 2 < d else matrix @ q
        else:
            if self.projection is None:
                self._project()
            rough = self.projected @ (q @ self.projection)
            near = np.argpartition(-rough, min(SHORTLIST, n) - 1)[:SHORTLIST]
            best_lexical = np.argpartition(-lexical, min(SHORTLIST, n) - 1)[:SHORTLIST]
            ids = np.union1d(near, best_lexical[lexical[best_lexical] > 0])
            dense = matrix[ids] @ q
        fused = self.w * dense + (1 - self.w) * lexical[ids]
        visible = self.published[ids]
        if extra:
            visible = visible | np.isin(ids, extra)
        fused = np.where(visible, fused, -np.inf)
        k = min(k, int(visible.sum()))
        if k == 0:
            return []
        top = np.argpartition(-fused, k - 1)[:k]
        top = top[np.argsort(-fused[top], kind="stable")]
        return [(int(ids[t]), float(fused[t])) for t in top]

    def prepared(self, rows: Vectors) -> Vectors:
        """Rows scored on every query, converted once."""
        out: Vectors = self.np.asarray(rows, dtype=self.np.float32)
        return out

    def row_scores(self, rows: Vectors, query: Sequence[float]) -> list[float]:
        np = self.np
        out: list[float] = (np.asarray(rows, dtype=np.float32)
                            @ np.asarray(query, dtype=np.float32)).tolist()
        return out


def _scores(rows: list[Vectors], published: list[bool],
            dense_weight: float) -> _PythonScores | _NumpyScores:
    try:
        import numpy
    except ImportError:
        return _PythonScores(rows, published, dense_weight)
    return _NumpyScores(numpy, rows, published, dense_weight)


class AgentIndex:
    def __init__(self, agents: list[Agent], embedder: Embedder,
                 scoring: Scoring | None = None, store: RowStore | None = None,
                 previous: AgentIndex | None = None) -> None:
        """``previous``: the index this one replaces. Agents whose stored rows are another
        model's (registered before a tuning, or before ``CODESHOT_EMBEDDER`` changed) take
        the rows it embedded for them, rather than being embedded again at every rebuild."""
        self.embedder = embedder
        self.scoring = scoring or scoring_for(embedder.model_id)
        self.agents = list(agents)
        self.texts = [agent_texts(a) for a in self.agents]
        known = previous.known_rows() if previous is not None and \
            previous.embedder.model_id == embedder.model_id else None
        self.rows = [stored_rows(a, embedder, known) for a in self.agents]
        self._scores = _scores(self.rows, [a.published for a in self.agents],
                               self.scoring.dense_weight) if self.agents else None
        self._bm25 = BM25([lexical_terms(a) for a in self.agents])
        self._no_agent = (self._scores.prepared(no_agent_rows(embedder, store))
                          if self._scores and self.scoring.no_agent_margin is not None else None)
        self._unpublished: dict[str, list[int]] = {}
        for i, a in enumerate(self.agents):
            if not a.published:
                self._unpublished.setdefault(a.owner, []).append(i)

    def __len__(self) -> int:
        return len(self.agents)

    def known_rows(self) -> KnownRows:
        return {tuple(texts): rows for texts, rows in zip(self.texts, self.rows, strict=True)}

    def search(self, text: str, k: int = 3, viewer: str | None = None) -> list[Candidate]:
        """The ``k`` best agents ``viewer`` may use, best first, whether they fit or not."""
        if self._scores is None or k < 1:
            return []
        query = self.embedder.embed([text])[0]
        extra = self._unpublished.get(viewer, []) if viewer else []
        margin = self.scoring.no_agent_margin
        nearest_example = (max(self._scores.row_scores(self._no_agent, query))
                           if self._no_agent is not None else -math.inf)  # no margin
        out = []
        for i, fused in self._scores.top(query, self._bm25, terms(text), extra, k):
            row_scores = self._scores.row_scores(self.rows[i], query)
            best_row = max(range(len(row_scores)), key=row_scores.__getitem__)
            score = round(fused, 4)
            gap = nearest_example - row_scores[best_row]
            fits = score >= self.scoring.floor and (margin is None or gap <= margin)
            out.append(Candidate(self.agents[i].agent_id, score, self.texts[i][best_row],
                                 fits, gap))
        return out
