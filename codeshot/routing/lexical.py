"""Okapi BM25 over one document per agent (its name, description and sample queries).

Plain Python over an inverted index: a query touches only the postings of its own terms,
so scoring 10,000 agents is a few thousand additions. (rank-bm25 scores every document
per term and is no longer maintained; bm25s needs scipy, too heavy for the runner's
Lambda bundle.)

Numbers are left out (a query's numbers are its values, not its topic: "what's 2+2" is
not about dice because a dice agent's sample says "2d6"). Scores are divided by the
query's IDF mass, so they compare across queries: 1.0 when
every query term occurs once in a document of average length, 0 when none occurs. BM25's
length normalisation is the per-agent normalisation here: an agent with many samples has
a long document, and a term occurring once in it weighs less than in a short one.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from typing import Any


class BM25:
    K1, B = 1.2, 0.75
    UNSEEN = 0.5  # a query word no agent knows counts this share of the highest IDF

    def __init__(self, documents: list[list[str]]) -> None:
        n = len(documents)
        average = sum(map(len, documents)) / n if n else 1.0
        # Term -> (document positions, weights) as packed arrays: 8 bytes a posting where a
        # tuple takes about 100 (a corpus of 100,000 passages has millions of postings),
        # and numpy reads them without a copy.
        postings: dict[str, tuple[array[int], array[float]]] = {}
        documents = [[t for t in document if not t.isdigit()] for document in documents]
        for i, document in enumerate(documents):
            norm = self.K1 * (1 - self.B + self.B * len(document) / (average or 1.0))
            for term, tf in Counter(document).items():
                entry = postings.get(term)
                if entry is None:
                    entry = postings[term] = (array("i"), array("f"))
                entry[0].append(i)
                entry[1].append(tf * (self.K1 + 1) / (tf + norm))
        self.postings = postings
        self.idf = {t: math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
                    for t, (ids, _) in postings.items()}
        self.unseen = self.UNSEEN * math.log(1 + (n + 0.5) / 0.5)
        self.n = n

    def _mass(self, query: dict[str, None]) -> float:
        return sum(self.idf.get(t, self.unseen) for t in query)

    def array_scores(self, np: Any, terms: list[str]) -> Any:
        """:meth:`scores` for every agent, as a numpy array (postings kept as arrays)."""
        query = dict.fromkeys(t for t in terms if not t.isdigit())
        acc = np.zeros(self.n, dtype=np.float32)
        mass = self._mass(query)
        for term in query:
            if mass and term in self.postings:
                ids, weights = self.postings[term]
                acc[np.frombuffer(ids, dtype=np.intc)] += self.idf[term] * np.frombuffer(
                    weights, dtype=np.float32)
        return np.minimum(acc / (mass or 1.0), 1.0)

    def scores(self, terms: list[str]) -> dict[int, float]:
        """Agent position -> normalised BM25, for the agents sharing a term with the query."""
        query = dict.fromkeys(t for t in terms if not t.isdigit())
        mass = self._mass(query)
        if not mass:
            return {}
        acc: dict[int, float] = {}
        for term in query:
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i, weight in zip(*self.postings[term], strict=True):
                acc[i] = acc.get(i, 0.0) + idf * weight
        return {i: min(1.0, score / mass) for i, score in acc.items()}
