"""Tunes the ``minilm`` embedder on the registered agents (issue #20), SetFit's way.

Each agent's rows (its sample queries, and its name with its description:
:func:`codeshot.routing.index.agent_texts`) are pairs of texts that should embed close
together; the other agents' rows in the same batch are the texts that should not
(in-batch negatives, sentence-transformers' MultipleNegativesRankingLoss). A batch holds
at most one pair per agent, so no negative is a row of the anchor's own agent.

What it buys, on ``benchmarks/router_corpus.json`` (test split, run once; 2 epochs and
the learning rate chosen on dev): top-1 0.830 -> 0.890, top-3 0.960 -> 0.980, and the
no-agent outcome 0.80 declined with 0.070 wrongly -> 0.90 with 0.040. It is not an
overfit to the agents it saw: tuned on 40 of the 50 agents, the other 10's dev queries
went first to their agent as often as the 40's (0.91). Re-tune after the agents change
much; an agent registered since routes with the tuned model all the same.

The model is written to a directory with ``codeshot-tuning.json`` beside it: the base
model, what it was tuned on (a digest of the rows) and how. ``CODESHOT_MINILM_MODEL``
points the ``minilm`` embedder at it; its model id names that digest, so stored agent
rows made by another model are embedded again (:func:`codeshot.routing.index.stored_rows`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from codeshot.errors import InvalidInput
from codeshot.models import Agent
from codeshot.routing.calibration import TUNED_MINILM
from codeshot.routing.embedders import MINILM, load_minilm
from codeshot.routing.index import agent_texts

TUNING_FILE = "codeshot-tuning.json"
BATCH = 32  # pairs a step: 32 agents' rows against each other
PAIRS_PER_AGENT = 24  # a step's cost is per pair: an agent of 12 samples has 156 pairs
SCALE = 20.0  # cosine to logit, sentence-transformers' default for this loss


@dataclass(frozen=True)
class Tuning:
    """How a model was tuned: ``codeshot-tuning.json``."""

    base: str
    rows_digest: str  # sha256 of the agents' rows the model was tuned on
    agents: int
    pairs: int
    epochs: int
    learning_rate: float
    seed: int

    @property
    def model_id(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode())
        return f"{TUNED_MINILM}-" + digest.hexdigest()[:12]


def read_tuning(directory: Path) -> Tuning:
    """The tuning recorded beside a tuned model (INVALID_INPUT if it is not one)."""
    try:
        return Tuning(**json.loads((directory / TUNING_FILE).read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise InvalidInput(f"{directory} is not a model `codeshot router tune` made (for "
                           f"CODESHOT_MINILM_MODEL): {TUNING_FILE}: {exc}") from exc


def training_pairs(rows: Sequence[Sequence[str]], rng: random.Random) -> list[tuple[int, str, str]]:
    """(agent, anchor, positive): ordered pairs of one agent's distinct rows, at most
    ``PAIRS_PER_AGENT`` an agent (drawn anew each epoch)."""
    pairs = []
    for agent, texts in enumerate(rows):
        own = [(agent, a, b) for a in texts for b in texts if a != b]
        pairs += rng.sample(own, min(len(own), PAIRS_PER_AGENT))
    rng.shuffle(pairs)
    return pairs


def batches(pairs: list[tuple[int, str, str]]) -> list[list[tuple[int, str, str]]]:
    """Batches of up to ``BATCH`` pairs, no two of one agent (a batch of one teaches
    nothing: it has no negative)."""
    out, pending = [], pairs
    while pending:
        batch: list[tuple[int, str, str]] = []
        seen: set[int] = set()
        rest = []
        for pair in pending:
            if pair[0] in seen or len(batch) == BATCH:
                rest.append(pair)
            else:
                batch.append(pair)
                seen.add(pair[0])
        if len(batch) > 1:
            out.append(batch)
        pending = rest if len(batch) > 1 else []
    return out


def tune(agents: Sequence[Agent], out: Path, epochs: int = 2, learning_rate: float = 2e-5,
         seed: int = 0) -> Tuning:
    """Tunes all-MiniLM-L6-v2 on the agents' rows and saves it to ``out``: a new
    directory, an empty one or an earlier tuning's (INVALID_INPUT for any other)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())) \
            and not (out / TUNING_FILE).exists():
        raise InvalidInput(f"{out} is not empty and holds no earlier tuning: give a new "
                           f"directory")
    rows = [agent_texts(agent) for agent in agents]
    if sum(len(set(texts)) > 1 for texts in rows) < 2:
        raise InvalidInput("tuning needs at least two agents with two or more sample "
                           "queries (or a sample and a description)")
    model = load_minilm()
    import torch  # installed with sentence-transformers (load_minilm says if it is not)

    torch.manual_seed(seed)
    rng = random.Random(seed)  # noqa: S311 - which pairs to train on, not a secret
    optimiser = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    pairs = 0
    for _ in range(epochs):
        for batch in batches(training_pairs(rows, rng)):
            anchors, positives = (
                torch.nn.functional.normalize(
                    model(model.preprocess(texts))["sentence_embedding"], dim=-1)
                for texts in ([a for _, a, _ in batch], [p for _, _, p in batch]))
            logits = anchors @ positives.T * SCALE
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))
            optimiser.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call, unused-ignore]  # CI has no torch
            optimiser.step()
            pairs += len(batch)
    model.eval()
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    tuning = Tuning(MINILM, digest, len(agents), pairs, epochs, learning_rate, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save(str(out))
    (out / TUNING_FILE).write_text(json.dumps(asdict(tuning), indent=2) + "\n")
    return tuning
