"""Document corpora: ingestion (fetch, extract, chunk, embed, store) and search.

An agent declares URL corpora in its handshake (Fixie's ``DocumentCorpus(urls=...)``; a
URL ending in ``*`` is every page below it, reached by following links). Registration
queues an ingestion; the runner runs it (:func:`ingest`): each page through the runner's
one fetch of third-party URLs (SSRF rules, size cap), its text read as embeds are (HTML
with Beautiful Soup, PDF with pypdf, plain text and Markdown), cut into passages,
embedded with the router's embedder, and stored as one immutable object. A declared URL
that cannot be read, a document over the size cap, or no text at all fail the version
(nothing stored; the previous index stays in use); a linked page that cannot be read is
listed and skipped. Reading ends at the page cap or after ``READ_SECONDS`` (the linked
pages left are listed as not read) and the whole ingestion within ``CORPUS_INGEST_SECONDS``
(embedding past it fails the version): a record starts in the runner only with that much
of its Lambda's time left.

Search (``Func[fixie_query_corpus]``) goes through :class:`CorpusSearch`:
:class:`InLambdaSearch` loads the newest ready index from S3 once per container (cached by
version, the least recently searched dropped past ``CACHE_BYTES``) and ranks passages as
the router ranks agents, ``w * dense + (1 - w) * lexical``: the cosine with the question
in numpy, fused with BM25 over the passages' stems
(:mod:`codeshot.routing.lexical`, normalised by the question's IDF mass), so a question
naming a rare word (a name, a code) finds the passage holding it however unlike it the
question is phrased. BM25 is built from the stored passages when the index is loaded
(the stored format is unchanged). :class:`S3VectorsSearch` keeps the vectors in an S3
Vectors index instead (``CODESHOT_CORPUS_SEARCH=s3vectors``) for corpora too large to
load per container (see the README for where that line is); it has no lexical score, so
the cosine's nearest few are reranked with BM25 over their own text.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from codeshot.errors import CodeshotError, InvalidInput
from codeshot.models import MAX_EXCLUDE_PATTERNS
from codeshot.routing.lexical import BM25
from codeshot.routing.text import terms
from codeshot.runner.fetch import fetch_public_url
from codeshot.runner.platform_funcs.documents import (
    HTML_TYPES,
    PASSAGE_CHARS,
    document_text,
    html_page,
    passages,
)
from codeshot.settings import CORPUS_INGEST_SECONDS, Settings
from codeshot.store.corpora import CorpusState, CorpusStore, CorpusVersion, VectorIndexes

if TYPE_CHECKING:
    from codeshot.routing.embedders import Embedder

log = logging.getLogger("codeshot.runner")

FETCH_TIMEOUT_SECONDS = 10.0
READ_SECONDS = 60.0  # of it, reading documents: the rest embeds what was read
MAX_LINKS_PER_PAGE = 1000  # a page's links considered for following, in page order
EMBED_BATCH = 64
PROGRESS_EVERY = 10  # documents between the progress an ingesting version shows
FORGOTTEN = "the agent's corpus was deleted meanwhile"
# Search's dense weight per embedder (score = w * dense + (1 - w) * lexical): the highest
# whose recall@3 on the corpus benchmark's dev towns is within 0.01 of the best (``python
# -m benchmarks.corpus --calibrate``); the benchmark reports on other towns.
DENSE_WEIGHT = {"hashing-v2-1024": 0.9, "static-minilm-256-e43a8e0c634a": 0.75,
                "all-MiniLM-L6-v2": 0.75}
UNCALIBRATED_DENSE_WEIGHT = 0.8  # an embedder never calibrated here (Bedrock's)
RERANK_POOL = 4  # S3 Vectors: the nearest k times this many are reranked with BM25
# Stored index bytes a runner keeps loaded (the least recently searched go first): an
# index takes 3-5 times its stored size loaded (66 MB: 198 MB; 17.7 MB: ~95 MB), of the
# runner's 1,024 MB.
CACHE_BYTES = 64 * 1024 * 1024
# Passages an index searched in the runner may have: 30,000 (66 MB) took 16.6 s to load
# in each container that searched it.
MAX_LAMBDA_PASSAGES = 20_000


@dataclass(frozen=True)
class Passage:
    text: str
    url: str
    score: float = 0.0


@dataclass(frozen=True)
class Document:
    url: str
    text: str
    size: int


def url_corpora(corpora: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The declared corpora the platform fetches (URL corpora; custom corpus Funcs are
    the agent's own)."""
    return [c for c in corpora or [] if isinstance(c, dict) and c.get("urls")]


def _excluded(patterns: Any) -> re.Pattern[str] | None:
    """One expression matching what any of the corpus's ``exclude_patterns`` (shell
    wildcards) matches: a link is tried once, not once per pattern."""
    if patterns and (not isinstance(patterns, list) or len(patterns) > MAX_EXCLUDE_PATTERNS):
        raise InvalidInput(f"a corpus has a list of at most {MAX_EXCLUDE_PATTERNS} "
                           "exclude_patterns")
    wildcards = [fnmatch.translate(p) for p in patterns or [] if isinstance(p, str)]
    return re.compile("|".join(wildcards)) if wildcards else None


class Crawl:
    """One ingestion's reading: bounded in pages, bytes and time (``READ_SECONDS``)."""

    def __init__(self, settings: Settings, fetch: Callable[..., Any] = fetch_public_url,
                 progress: Callable[[int, int], bool] = lambda _pages, _bytes: True) -> None:
        """``progress`` shows pages and bytes read so far: False once the version it
        shows them on is gone (its agent deleted or renamed), which ends the reading."""
        self.settings, self.fetch, self.progress = settings, fetch, progress
        self.forgotten = False
        self.pages = 0
        self.bytes = 0
        self.errors: list[str] = []
        self.deadline = time.monotonic() + READ_SECONDS

    def documents(self, corpus: dict[str, Any]) -> list[Document]:
        excluded = _excluded(corpus.get("exclude_patterns"))
        found: list[Document] = []
        for root in corpus["urls"]:
            if not isinstance(root, str):
                raise InvalidInput(f"corpus URL {root!r} is not text")
            prefix = root[:-1] if root.endswith("*") else None
            queue, seen = deque([prefix or root]), {prefix or root}
            first = True
            while queue:
                if not first and (stop := self._stopped()):  # one line for all left
                    self.errors.append(f"{stop}: {len(queue)} linked pages not read")
                    break
                url = queue.popleft()
                try:
                    document, links = self._read(url, follow=prefix is not None)
                except CodeshotError as exc:
                    if first:  # the URL the agent declared: the corpus is not what it says
                        raise InvalidInput(f"{url}: {exc.message}") from exc
                    self.errors.append(f"skipped {url}: {exc.message}")
                    continue
                finally:
                    first = False
                found.append(document)
                for link in links:
                    if (prefix and link.startswith(prefix) and link not in seen
                            and not (excluded and excluded.match(link))):
                        seen.add(link)
                        queue.append(link)
        return found

    def _stopped(self) -> str | None:
        """Why no more pages are read, if none are."""
        if self.forgotten:
            return FORGOTTEN
        if self.pages >= self.settings.corpus_max_pages:
            return f"the corpus reached its {self.settings.corpus_max_pages} pages"
        if time.monotonic() > self.deadline:
            return f"reading ran out of its {READ_SECONDS:g}s"
        return None

    def _read(self, url: str, follow: bool) -> tuple[Document, list[str]]:
        settings = self.settings
        if stop := self._stopped():
            raise InvalidInput(stop)
        fetched = self.fetch(url, max_bytes=settings.corpus_max_document_bytes,
                             allow_loopback=settings.local_mode, timeout=FETCH_TIMEOUT_SECONDS,
                             deadline=self.deadline)  # a page sent slowly stops with it
        self.pages += 1
        self.bytes += len(fetched.data)
        if self.pages % PROGRESS_EVERY == 0 and not self.progress(self.pages, self.bytes):
            self.forgotten = True
        if self.bytes > settings.corpus_max_bytes:
            raise InvalidInput(f"the corpus passed its {settings.corpus_max_bytes} bytes")
        kind = fetched.content_type or "text/plain"
        if kind == "text/markdown" or url.lower().endswith((".md", ".markdown")):
            kind = "text/plain"
        if kind in HTML_TYPES:  # its text and links in one pass
            text, links = html_page(fetched.data, self.deadline, url,
                                    MAX_LINKS_PER_PAGE if follow else 0)
        else:
            text, links = document_text(kind, fetched.data, self.deadline), []
        return Document(url, text, len(fetched.data)), links


def corpus_search(settings: Settings, store: CorpusStore, embedder: Embedder) -> CorpusSearch:
    if settings.corpus_search == "s3vectors":
        return S3VectorsSearch(settings, store, embedder)
    return InLambdaSearch(store, embedder)


def ingest(version: CorpusVersion, corpora: list[dict[str, Any]], settings: Settings,
           store: CorpusStore, embedder: Embedder,
           fetch: Callable[..., Any] = fetch_public_url,
           vectors_to: S3VectorsSearch | None = None) -> CorpusVersion:
    """Run one ingestion to its end and store how it ended (never raises for the
    documents' sake: their errors are the version's). ``vectors_to``: also write the
    vectors to S3 Vectors (``CODESHOT_CORPUS_SEARCH=s3vectors``)."""
    deadline = time.monotonic() + CORPUS_INGEST_SECONDS
    crawl = Crawl(settings, fetch, lambda pages, size: store.progress(
        version.replace(documents=pages, bytes=size)))
    try:
        documents = [d for corpus in corpora for d in crawl.documents(corpus)]
        if crawl.forgotten:  # nothing to embed for
            raise InvalidInput(FORGOTTEN)
        chunks = [{"text": c, "url": d.url} for d in documents for c in chunked(d.text)]
        if not chunks:
            raise InvalidInput("the corpus holds no text")
        if vectors_to is None and len(chunks) > MAX_LAMBDA_PASSAGES:
            raise InvalidInput(
                f"the corpus has {len(chunks)} passages; searched in the runner it may have "
                f"{MAX_LAMBDA_PASSAGES} (CODESHOT_CORPUS_SEARCH=s3vectors takes more)")
        vectors = _embed(embedder, [c["text"] for c in chunks], deadline)
        index = {"embedding_model": embedder.model_id, "chunks": chunks,
                 "dim": len(vectors[0]) if len(vectors) else 0,
                 "vectors": base64.b64encode(_float32(vectors)).decode()}
        key = store.put_index(version.agent_id, json.dumps(index).encode())
        if vectors_to is not None:
            vectors_to.write(version.agent_id, version.version, chunks, vectors)
        done = version.replace(state=CorpusState.READY, documents=len(documents),
                               chunks=len(chunks), bytes=crawl.bytes, object_key=key,
                               embedding_model=embedder.model_id, errors=crawl.errors)
    except CodeshotError as exc:
        done = version.replace(state=CorpusState.FAILED, bytes=crawl.bytes,
                               errors=[exc.message, *crawl.errors])
    except Exception as exc:  # what went wrong is logged; the agent's status says it failed
        log.exception("ingesting %s %s failed", version.agent_id, version.version)
        done = version.replace(state=CorpusState.FAILED,
                               errors=[f"ingestion failed: {exc.__class__.__name__}"])
    return store.finish(done, drop=vectors_to.drop if vectors_to is not None else None)


def chunked(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """A document's passages, consecutive short ones joined up to ``size`` characters: a
    heading stays with its paragraph, and a line of links is not a passage of its own."""
    out: list[str] = []
    for passage in passages(text):
        if out and len(out[-1]) + len(passage) + 1 <= size:
            out[-1] = f"{out[-1]}\n{passage}"
        else:
            out.append(passage)
    return out


def _embed(embedder: Embedder, texts: list[str], deadline: float | None = None) -> Any:
    """The texts' vectors, a batch at a time; INVALID_INPUT once ``deadline`` passes."""
    import numpy as np

    rows = []
    for start in range(0, len(texts), EMBED_BATCH):
        if deadline is not None and time.monotonic() > deadline:
            raise InvalidInput(
                f"ingestion ran out of its {CORPUS_INGEST_SECONDS:g}s embedding {len(texts)} "
                f"passages ({start} done): declare fewer or smaller documents")
        rows.append(np.asarray(embedder.embed(texts[start:start + EMBED_BATCH]),
                               dtype=np.float32))
    return np.vstack(rows)


def _float32(vectors: Any) -> bytes:
    import numpy as np

    data: bytes = np.ascontiguousarray(vectors, dtype="<f4").tobytes()
    return data


class CorpusSearch(Protocol):
    def search(self, agent_id: str, question: str, k: int) -> list[Passage]: ...


@dataclass(frozen=True)
class LoadedIndex:
    version: str
    chunks: list[dict[str, str]]
    vectors: Any  # numpy float32, n x d, rows L2-normalised
    lexical: BM25 | None  # over the passages' stems; None when search is dense only
    size: int  # bytes of the stored index

    @classmethod
    def read(cls, version: str, data: bytes, embedder: Embedder,
             lexical: bool = True) -> LoadedIndex:
        """A stored index (``ingest``'s JSON) ready to search with ``embedder``."""
        import numpy as np

        index = json.loads(data)
        chunks = index["chunks"]
        if index.get("embedding_model") == embedder.model_id or not chunks:
            vectors = np.frombuffer(base64.b64decode(index["vectors"]), dtype="<f4").reshape(
                len(chunks), index["dim"])
        else:
            # Ingested with another embedder (CODESHOT_EMBEDDER changed since): its vectors
            # do not compare with this one's queries, so the passages are embedded anew.
            vectors = _embed(embedder, [c["text"] for c in chunks])
        bm25 = BM25([terms(c["text"]) for c in chunks]) if lexical and chunks else None
        return cls(version, chunks, vectors, bm25, len(data))

    def search(self, query: Any, question: str, k: int, dense_weight: float) -> list[Passage]:
        """The ``k`` best passages for ``question`` (``query``: its embedding)."""
        import numpy as np

        scores = self.vectors @ np.asarray(query, dtype=np.float32)
        if self.lexical is not None:
            lexical = self.lexical.array_scores(np, terms(question))
            scores = dense_weight * scores + (1 - dense_weight) * lexical
        k = min(k, len(self.chunks))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        return [Passage(self.chunks[i]["text"], self.chunks[i]["url"], float(scores[i]))
                for i in best]


class InLambdaSearch:
    """The newest ready index, loaded from S3 once per container and version; those
    loaded are kept up to ``cache_bytes`` of stored index, the least recently searched
    dropped first (the one just loaded is kept, whatever its size)."""

    def __init__(self, store: CorpusStore, embedder: Embedder,
                 dense_weight: float | None = None, cache_bytes: int = CACHE_BYTES) -> None:
        self.store, self.embedder, self.cache_bytes = store, embedder, cache_bytes
        self.dense_weight = DENSE_WEIGHT.get(embedder.model_id, UNCALIBRATED_DENSE_WEIGHT) \
            if dense_weight is None else dense_weight
        self._cache: OrderedDict[str, LoadedIndex] = OrderedDict()
        self._cached_bytes = 0  # the cache's sizes summed
        self._lock = threading.Lock()

    def index(self, agent_id: str) -> LoadedIndex | None:
        version = self.store.newest_ready(agent_id)
        if version is None or not version.object_key:
            return None
        with self._lock:
            cached = self._cache.get(agent_id)
            if cached and cached.version == version.version:
                self._cache.move_to_end(agent_id)
                return cached
        loaded = LoadedIndex.read(version.version, self.store.read_index(version.object_key),
                                  self.embedder, lexical=self.dense_weight < 1)
        with self._lock:
            replaced = self._cache.pop(agent_id, None)
            self._cached_bytes += loaded.size - (replaced.size if replaced else 0)
            self._cache[agent_id] = loaded
            while len(self._cache) > 1 and self._cached_bytes > self.cache_bytes:
                self._cached_bytes -= self._cache.popitem(last=False)[1].size
        return loaded

    def search(self, agent_id: str, question: str, k: int) -> list[Passage]:
        index = self.index(agent_id)
        if index is None or not index.chunks or k < 1:
            return []
        query = self.embedder.embed([question])[0]
        return index.search(query, question, k, self.dense_weight)


class S3VectorsSearch(VectorIndexes):
    """The passages' vectors in an S3 Vectors index per agent version (their text and URL
    as metadata): for corpora too large to load into a Lambda; written at ingestion. A
    search takes the cosine's ``RERANK_POOL * k`` nearest and reranks them with BM25
    (:func:`reranked`)."""

    def __init__(self, settings: Settings, store: CorpusStore, embedder: Embedder,
                 client: Any | None = None) -> None:
        super().__init__(settings, client)
        self.store, self.embedder = store, embedder
        self._loaded = InLambdaSearch(store, embedder)
        self.dense_weight = self._loaded.dense_weight

    def write(self, agent_id: str, version: str, chunks: list[dict[str, str]],
              vectors: Any) -> None:
        bucket = self.settings.corpus_vector_bucket
        name = self.index_name(agent_id, version)
        self.client.create_index(vectorBucketName=bucket, indexName=name, dataType="float32",
                                 dimension=int(vectors.shape[1]), distanceMetric="cosine")
        for start in range(0, len(chunks), 500):  # PutVectors takes at most 500
            self.client.put_vectors(vectorBucketName=bucket, indexName=name, vectors=[
                {"key": str(i), "data": {"float32": [float(x) for x in vectors[i]]},
                 "metadata": chunks[i]}
                for i in range(start, min(start + 500, len(chunks)))])

    def search(self, agent_id: str, question: str, k: int) -> list[Passage]:
        version = self.store.newest_ready(agent_id)
        if version is None:
            return []
        if version.embedding_model not in (None, self.embedder.model_id):
            # Its S3 Vectors index holds another embedder's vectors (CODESHOT_EMBEDDER
            # changed since): until a refresh, search the passages loaded and re-embedded.
            return self._loaded.search(agent_id, question, k)
        query = [float(x) for x in self.embedder.embed([question])[0]]
        out = self.client.query_vectors(
            vectorBucketName=self.settings.corpus_vector_bucket,
            indexName=self.index_name(agent_id, version.version), topK=k * RERANK_POOL,
            queryVector={"float32": query}, returnMetadata=True, returnDistance=True)
        nearest = [Passage(v["metadata"]["text"], v["metadata"]["url"],
                           1.0 - float(v.get("distance", 1.0))) for v in out["vectors"]]
        return reranked(nearest, question, k, self.dense_weight)


def reranked(nearest: list[Passage], question: str, k: int,
             dense_weight: float) -> list[Passage]:
    """The ``k`` best of the cosine's nearest passages (their score: the cosine) once BM25,
    over only these passages' stems, is fused in: S3 Vectors has no lexical score, so a
    passage the cosine ranks below the pool is not found, as it is in the runner."""
    if not nearest or dense_weight >= 1:
        return nearest[:k]
    import numpy as np

    lexical = BM25([terms(p.text) for p in nearest]).array_scores(np, terms(question))
    fused = [Passage(p.text, p.url, dense_weight * p.score + (1 - dense_weight) * float(s))
             for p, s in zip(nearest, lexical, strict=True)]
    return sorted(fused, key=lambda p: -p.score)[:k]
