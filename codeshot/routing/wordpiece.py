"""BERT's uncased WordPiece tokenizer, as all-MiniLM-L6-v2 reads text, in plain Python.

The ``static`` embedder needs only token ids. Hugging Face's ``tokenizers`` gives the same
ids (tests/routing/test_static_embedder.py compares them) but pulls huggingface-hub and
its hf-xet binary into every Lambda bundle that routes; the algorithm is short and fixed:

- normalise (BertNormalizer): drop control characters, turn whitespace into spaces, put
  spaces around CJK ideographs, strip accents (NFD, less the combining marks), lower-case;
- split (BertPreTokenizer) on whitespace, and around each punctuation character;
- WordPiece: each word greedily, longest vocabulary piece first, later pieces with a
  ``##`` prefix; a word that cannot be pieced (or is longer than 100 characters) is
  ``[UNK]``.
"""

from __future__ import annotations

import unicodedata

MAX_WORD_CHARS = 100
# CJK ideograph blocks, each character its own word (BERT's _is_chinese_char).
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_punctuation(c: str) -> bool:
    # ASCII's symbols ($, +, ^ ...) count too, as in BERT.
    return ((c.isascii() and c.isprintable() and not c.isalnum() and c != " ")
            or unicodedata.category(c).startswith("P"))


def _normalised(text: str) -> str:
    out = []
    for c in text:
        if c in "\x00\ufffd" or (unicodedata.category(c).startswith("C")
                                 and c not in "\t\n\r"):
            continue
        if c.isspace():
            out.append(" ")
        elif any(lo <= ord(c) <= hi for lo, hi in _CJK):
            out.append(f" {c} ")
        else:
            out.append(c)
    decomposed = unicodedata.normalize("NFD", "".join(out))
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").lower()


def words(text: str) -> list[str]:
    """The words WordPiece pieces: whitespace-separated, each punctuation mark alone."""
    out: list[str] = []
    for chunk in _normalised(text).split():
        start = 0
        for i, c in enumerate(chunk):
            if _is_punctuation(c):
                out.extend(w for w in (chunk[start:i], c) if w)
                start = i + 1
        if start < len(chunk):
            out.append(chunk[start:])
    return out


class WordPiece:
    def __init__(self, vocab: list[str]) -> None:
        self.ids = {token: i for i, token in enumerate(vocab)}
        self.unknown = self.ids["[UNK]"]

    def word_ids(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARS:
            return [self.unknown]
        out, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else f"##{word[start:end]}"
                if piece in self.ids:
                    out.append(self.ids[piece])
                    start = end
                    break
            else:
                return [self.unknown]
        return out

    def encode(self, text: str) -> list[int]:
        """The text's token ids, without [CLS] and [SEP]."""
        return [i for word in words(text) for i in self.word_ids(word)]
