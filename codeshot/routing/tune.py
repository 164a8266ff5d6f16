"""Tunes the ``minilm`` embedder on the registered agents (issue #20), SetFit's way.

Each agent's rows (its sample queries, and its name with its description:
:func:`codeshot.routing.index.agent_texts`) are pairs of texts that should embed close
together; the texts that should not are the other pairs' positives in the same batch and
one row of each of up to 32 agents with no pair in it (in-batch negatives, sentence-transformers'
MultipleNegativesRankingLoss, with extra negatives). A batch holds at most one pair per
agent, so no negative is a row of the anchor's own agent.

What it buys is measured by ``benchmarks/router.py --embedders minilm-tuned`` (its
docstring has the numbers: on the test split, top-1 0.830 -> 0.875 and the no-agent
goal met). Re-tune after the agents change much; an agent registered since routes with
the tuned model all the same.

The model is written to a directory with ``codeshot-tuning.json`` beside it: the base
model, what it was tuned on (a digest of the rows), how, and digests of the weights, the
graph and the vocabulary. Beside them, the transformer exported as an ONNX graph with its
vocabulary: what the router runs (onnxruntime, no torch; checked against the model before
it is saved). ``CODESHOT_MINILM_MODEL`` points the ``minilm`` embedder at it; its model id
is a digest of all that, so rows stored under another model (or an earlier tuning) are
embedded again (:func:`codeshot.routing.index.stored_rows`). The directory is replaced
whole (a new one renamed into place), so a process never loads half a tuning.

The model id names the vectors stored under it, so a tuning file must describe the files
beside it: the file carries the digest of its own fields (an edited one is refused where
it is read), and every load checks the vocabulary's digest (230 KB) and the graph's size;
the graph's digest (90 MB to read) is checked where that is cheap, once: ``cdk synth``
(``codeshot:routerModel``) and ``codeshot router check``. A deployed function reads the
graph the synth checked from S3, where the asset's key is derived from its content.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codeshot.errors import InvalidInput, LLMError, install_hint
from codeshot.models import Agent
from codeshot.routing.calibration import TUNED_MINILM
from codeshot.routing.embedders import MINILM, OnnxMiniLM, load_minilm
from codeshot.routing.index import agent_texts
from codeshot.settings import MINILM_ONNX_FILE, MINILM_TUNING_FILE, MINILM_VOCAB_FILE

TUNING_FILE = MINILM_TUNING_FILE
WEIGHTS_FILE = "model.safetensors"
BATCH = 32  # pairs a step: 32 agents' rows against each other
PAIRS_PER_AGENT = 24  # a step's cost is per pair: an agent of 12 samples has 156 pairs
SCALE = 20.0  # cosine to logit, sentence-transformers' default for this loss
GRAPH_TOLERANCE = 1e-3  # exported graph against the model: float32 differences are ~1e-6

Pair = tuple[int, str, str]  # (agent, anchor, positive)


@dataclass(frozen=True)
class Tuning:
    """How a model was tuned: ``codeshot-tuning.json``."""

    base: str
    rows_digest: str  # sha256 of the agents' rows the model was tuned on
    agents: int
    pair_steps: int  # pairs trained on, over all epochs
    epochs: int
    learning_rate: float
    seed: int
    weights_digest: str  # sha256 of the saved weights: the id changes with them
    graph_digest: str  # sha256 of the ONNX graph, what routes
    graph_bytes: int  # its size: a stat checks it at every load, where 90 MB would not be read
    vocab_digest: str  # sha256 of its vocabulary

    @property
    def digest(self) -> str:
        """sha256 of the fields: written beside them, so an edit shows."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()

    @property
    def model_id(self) -> str:
        return f"{TUNED_MINILM}-{self.digest[:12]}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_tuning(directory: Path, **fields: Any) -> Tuning:
    """Record the tuning beside its graph and vocabulary, with their digests and its own."""
    graph = directory / MINILM_ONNX_FILE
    tuning = Tuning(**fields, graph_digest=sha256_file(graph), graph_bytes=graph.stat().st_size,
                    vocab_digest=sha256_file(directory / MINILM_VOCAB_FILE))
    (directory / TUNING_FILE).write_text(
        json.dumps(asdict(tuning) | {"digest": tuning.digest}, indent=2) + "\n")
    return tuning


def read_tuning(directory: Path) -> Tuning:
    """The tuning recorded beside a tuned model, as ``codeshot router tune`` wrote it
    (LLM_ERROR, the embedder's failure, if it is not one, or was edited since: the
    platform's configuration, not a caller's input)."""
    path = directory / TUNING_FILE
    try:
        fields = json.loads(path.read_text())
        digest = fields.pop("digest", None) if isinstance(fields, dict) else None
        tuning = Tuning(**fields)
    except (OSError, ValueError, TypeError) as exc:
        raise LLMError(f"{directory} is not a model `codeshot router tune` made (for "
                       f"CODESHOT_MINILM_MODEL): {TUNING_FILE}: {exc}") from exc
    if digest is None:
        raise LLMError(f"{path} has no digest of its own fields (an earlier release's "
                       f"tuning, or edited): tune it again with `codeshot router tune`")
    if digest != tuning.digest:
        raise LLMError(f"{path} was edited since `codeshot router tune` wrote it (its "
                       f"fields do not match their digest): tune it again")
    return tuning


def check_files(directory: Path, tuning: Tuning, graph: Path | None = None, *,
                full: bool = False) -> None:
    """LLM_ERROR unless the vocabulary and the graph (``graph``, else the directory's) are
    the ones ``tuning`` was made with: the graph by its size, or by its digest when
    ``full`` (90 MB read: where that is cheap, not at every load)."""
    graph = graph or directory / MINILM_ONNX_FILE
    path = directory / TUNING_FILE
    try:
        vocab_digest = sha256_file(directory / MINILM_VOCAB_FILE)
        size = graph.stat().st_size
        graph_digest = sha256_file(graph) if full and size == tuning.graph_bytes else None
    except OSError as exc:
        raise LLMError(f"the router model at {directory} cannot be read ({exc}): tune it "
                       f"again with `codeshot router tune`") from exc
    wrong = [what for what, bad in (
        (f"{MINILM_VOCAB_FILE}", vocab_digest != tuning.vocab_digest),
        (f"{graph} ({size:,} bytes, {tuning.graph_bytes:,} expected)",
         size != tuning.graph_bytes),
        (f"{graph} (its sha256)", graph_digest not in (None, tuning.graph_digest))) if bad]
    if wrong:
        raise LLMError(f"{path} does not match {' or '.join(wrong)}: files of another "
                       f"tuning, or changed since: tune it again with `codeshot router tune`")


def training_pairs(rows: Sequence[Sequence[str]], rng: random.Random) -> list[Pair]:
    """Ordered pairs of one agent's distinct rows, at most ``PAIRS_PER_AGENT`` an agent
    (drawn anew each epoch)."""
    pairs = []
    for agent, texts in enumerate(rows):
        own = [(agent, a, b) for a in texts for b in texts if a != b]
        pairs += rng.sample(own, min(len(own), PAIRS_PER_AGENT))
    rng.shuffle(pairs)
    return pairs


def batches(pairs: list[Pair]) -> list[list[Pair]]:
    """Every pair, in batches of up to ``BATCH`` pairs with no two of one agent (the
    last of an agent with many rows may go alone: its negatives are other agents' rows)."""
    out, pending = [], pairs
    while pending:
        batch: list[Pair] = []
        seen: set[int] = set()
        rest = []
        for pair in pending:
            if pair[0] in seen or len(batch) == BATCH:
                rest.append(pair)
            else:
                batch.append(pair)
                seen.add(pair[0])
        out.append(batch)
        pending = rest
    return out


def absent_rows(rows: Sequence[Sequence[str]], batch: list[Pair],
                rng: random.Random) -> list[str]:
    """One row of each agent with no pair in the batch, at most ``BATCH``: negatives
    that keep a small batch (or a lone pair) learning."""
    present = {agent for agent, _, _ in batch}
    absent = [agent for agent in range(len(rows)) if agent not in present]  # rows: 1 or more
    return [rng.choice(rows[agent]) for agent in rng.sample(absent, min(len(absent), BATCH))]


def prepare(out: Path) -> Path:
    """A new directory beside ``out`` (resolved: not a symlink, nor ".") to save into,
    once ``out`` is known to be one that may be replaced: new, empty or an earlier
    tuning's (INVALID_INPUT for any other, or where nothing can be written), checked
    before the minutes of tuning."""
    if not out.name:
        raise InvalidInput(f"{out} is a file system's root: give a directory for the model")
    if out.exists() and not (out / TUNING_FILE).exists() and \
            (not out.is_dir() or any(out.iterdir())):
        what = "a directory" if out.is_dir() else "not a directory"
        raise InvalidInput(f"{out} is {what} holding no earlier tuning: give a new or "
                           f"empty directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise InvalidInput(f"cannot write the model beside {out}: {exc}") from exc


def replace(staging: Path, out: Path) -> None:
    """``out`` becomes ``staging`` by renames: a reader sees the old tuning or the new
    (the old one back if the new cannot take its place). Readable as the umask allows:
    ``mkdtemp`` made it for its owner alone, and a platform may run as another user."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [staging, *staging.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
    old = None
    if out.exists():
        old = out.with_name(f"{staging.name}.old")
        out.rename(old)
    try:
        staging.rename(out)
    except OSError:
        if old is not None:
            try:
                old.rename(out)
            except OSError:  # another tuning took the place: it stays, this one goes
                shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_graph(model: Any, directory: Path, texts: list[str]) -> None:
    """The tuned transformer as an ONNX graph, and its vocabulary: what the router runs
    (:class:`codeshot.routing.embedders.OnnxMiniLM`, no torch). Checked on the agents'
    own rows against the model itself, so a graph that embeds otherwise is never saved."""
    import warnings

    import numpy
    import torch

    class Transformer(torch.nn.Module):  # type: ignore[misc, unused-ignore]  # CI: no torch
        """The graph's inputs by name; no token types."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = model[0].auto_model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=torch.zeros_like(input_ids)).last_hidden_state

    example = torch.tensor([[101, 7592, 102]])
    axes = {0: "texts", 1: "tokens"}
    with warnings.catch_warnings():  # the tracer's notes on Python branches it fixes
        warnings.simplefilter("ignore")
        torch.onnx.export(Transformer().eval(), (example, torch.ones_like(example)),
                          str(directory / MINILM_ONNX_FILE), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "last_hidden_state": axes})
    vocab = model.tokenizer.get_vocab()  # token: id, the ids 0 to n - 1
    (directory / MINILM_VOCAB_FILE).write_text(
        "".join(f"{token}\n" for token in sorted(vocab, key=vocab.__getitem__)),
        encoding="utf-8")
    sample = texts[:BATCH]
    graph = numpy.asarray(OnnxMiniLM(directory).encode(sample))
    own = model.encode(sample, convert_to_numpy=True, normalize_embeddings=True)
    if numpy.abs(graph - own).max() > GRAPH_TOLERANCE:
        raise LLMError("the exported graph does not embed as the tuned model does "
                       f"(largest difference {numpy.abs(graph - own).max():.2g})")


def tune(agents: Sequence[Agent], out: Path, epochs: int = 2, learning_rate: float = 2e-5,
         seed: int = 0) -> Tuning:
    """Tunes all-MiniLM-L6-v2 on the agents' rows and saves it to ``out``: a new
    directory, an empty one or an earlier tuning's (INVALID_INPUT for any other)."""
    rows = [agent_texts(agent) for agent in agents]
    if sum(len(set(texts)) > 1 for texts in rows) < 2:
        raise InvalidInput("tuning needs at least two agents with two or more sample "
                           "queries (or a sample and a description)")
    out = out.resolve()
    staging = prepare(out)
    try:
        model = load_minilm()
        try:  # before the minutes of tuning: the graph is exported and checked after them
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            raise LLMError("tuning exports the model for onnxruntime: "
                           f"{install_hint('embeddings')}") from exc
        import torch  # installed with sentence-transformers (load_minilm says if it is not)

        torch.manual_seed(seed)
        rng = random.Random(seed)  # noqa: S311 - which pairs to train on, not a secret
        # sentence-transformers 5 renamed tokenize to preprocess
        encode = getattr(model, "preprocess", None) or model.tokenize
        optimiser = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        model.train()
        pair_steps = 0
        for _ in range(epochs):
            for batch in batches(training_pairs(rows, rng)):
                anchors, candidates = (
                    torch.nn.functional.normalize(
                        model(encode(texts))["sentence_embedding"], dim=-1)
                    for texts in ([a for _, a, _ in batch],
                                  [p for _, _, p in batch] + absent_rows(rows, batch, rng)))
                logits = anchors @ candidates.T * SCALE
                loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))
                optimiser.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call, unused-ignore]  # CI has no torch
                optimiser.step()
                pair_steps += len(batch)
        model.eval()
        model.save(str(staging))
        (staging / "README.md").unlink(missing_ok=True)  # the base model's card: not this
        export_graph(model, staging, [text for texts in rows for text in texts])
        tuning = write_tuning(
            staging, base=MINILM, rows_digest=hashlib.sha256(json.dumps(rows).encode()).hexdigest(),
            agents=len(agents), pair_steps=pair_steps, epochs=epochs, learning_rate=learning_rate,
            seed=seed, weights_digest=sha256_file(staging / WEIGHTS_FILE))
        try:
            replace(staging, out)
        except OSError as exc:  # another tuning took its place meanwhile
            raise InvalidInput(f"cannot put the model at {out}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tuning
