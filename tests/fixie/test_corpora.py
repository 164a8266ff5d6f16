"""Document corpora through real sessions: an agent declares a corpus of pages served on
loopback (facts that are in no few-shot), registration queues its ingestion, the runner
reads, chunks, embeds and stores it, and ``Func[fixie_query_corpus]`` answers with the
right passage and its URL; documents that cannot be read are the agent's visible
ingestion errors, with nothing half-stored and queries still answered."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

import codeshot.sdk as fixieai
from codeshot.devtools.agents import serve
from codeshot.errors import InvalidInput
from codeshot.models import Principal
from tests.engine.conftest import ScriptedLLM
from tests.fixie.conftest import User, serving_pages
from tests.pdfs import pdf_of
from tests.raw_server import raw_server
from tests.runner.conftest import register, running, send, session

ANN = Principal(user_id="u-ann", username="ann")
FEW_SHOTS = """
Q: What does the handbook say about the coffee machine?
Ask Func[fixie_query_corpus]: What does the handbook say about the coffee machine?
Func[fixie_query_corpus] says: The coffee machine is descaled on Fridays. (Source: https://handbook.example/kitchen)
A: The coffee machine is descaled on Fridays. (Source: https://handbook.example/kitchen)
"""


PAGES = {
    "/handbook/": ("text/html", b"""<html><head><title>Staff handbook</title></head><body>
        <nav><a href="wifi.html">Wifi</a> <a href="/handbook/parking.html#lots">Parking</a>
        <a href="bikes.pdf">Bikes</a> <a href="lunch.md">Lunch</a>
        <a href="/elsewhere/secret.html">Not the handbook</a>
        <a href="missing.html">A broken link</a></nav>
        <p>Welcome to the staff handbook of the Quillfeather office.</p></body></html>"""),
    "/handbook/wifi.html": ("text/html; charset=utf-8", b"""<html><body><h1>Wifi</h1>
        <p>The guest wifi network is called Quill-Guest and its password is
        heron-42-lantern. It is changed every quarter.</p>
        <script>var password = "not-this-one";</script></body></html>"""),
    "/handbook/parking.html": ("text/html", b"""<html><body><h1 id="lots">Parking</h1>
        <p>Staff park in lot C behind the warehouse; visitors use the two bays by the
        fountain.</p></body></html>"""),
    "/handbook/bikes.pdf": ("application/pdf", pdf_of("The bike shed opens at 06:30.")),
    "/handbook/lunch.md": ("text/markdown", b"# Lunch\n\nThe canteen serves lunch from "
                                             b"11:45 to 14:15 on weekdays."),
    "/elsewhere/secret.html": ("text/html", b"<p>The vault code is 9911.</p>"),
}


@pytest.fixture
def pages() -> Iterator[tuple[str, list[str]]]:
    """The handbook on loopback; the paths it was asked for."""
    asked: list[str] = []

    def page(path: str) -> tuple[str, bytes]:
        asked.append(path)
        return PAGES.get(path, ("text/html", b"<p>Not found</p>"))

    with serving_pages(page) as url:
        yield url, asked


def corpus_agent(urls: list[str]) -> fixieai.CodeShotAgent:
    return fixieai.CodeShotAgent("I answer from the staff handbook.", FEW_SHOTS,
                                 corpora=[fixieai.DocumentCorpus(urls=urls)])


STATUS = """query ($a: String!) { agentById(agentId: $a) { corpusStatus {
  state documents chunks bytes errors } } }"""


def ingested(live, user, agent_id: str, timeout: float = 30) -> dict:
    """The agent's corpus status once its ingestion has ended."""
    deadline = time.monotonic() + timeout
    while True:
        status = live.gql(user.key, STATUS, {"a": agent_id})["data"]["agentById"]["corpusStatus"]
        if status["state"] != "ingesting" or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def answer(live, user, agent_id: str, text: str) -> str:
    reply = send(live, user.key, session(live, user.key, agent_id), text)["reply"]
    assert reply["type"] == "response", reply
    return reply["text"]


def test_a_question_is_answered_with_the_right_passage_and_its_url(live, user, deploy, pages):
    base, asked = pages
    agent_id = deploy(corpus_agent([f"{base}/handbook/*"]), "handbook")
    status = ingested(live, user, agent_id)
    assert status["state"] == "ready", status
    assert status["documents"] == 6  # index, wifi, parking, PDF, Markdown, the broken link's page
    assert "/elsewhere/secret.html" not in asked  # outside the declared prefix
    assert asked.count("/handbook/parking.html") == 1  # its #fragment is the same page

    text = answer(live, user, agent_id, "What does the handbook say about the wifi password?")
    assert "heron-42-lantern" in text and f"(Source: {base}/handbook/wifi.html)" in text
    assert "not-this-one" not in text  # scripts are not a page's text
    pdf = answer(live, user, agent_id, "What does the handbook say about the bike shed hours?")
    assert "06:30" in pdf and f"{base}/handbook/bikes.pdf" in pdf
    lunch = answer(live, user, agent_id, "What does the handbook say about the canteen lunch?")
    assert "11:45" in lunch and f"{base}/handbook/lunch.md" in lunch

    # The owner's agent page in the console says so too.
    page = httpx.get(f"{live.url}/console/agents/{agent_id}", timeout=30, headers={
        "Authorization": f"Bearer {user.key}", "HX-Request": "true"})
    assert page.status_code == 200 and "Document corpus" in page.text
    assert "ready · 6 documents" in page.text

    # Nobody else sees the status (its errors name the URLs read).
    _, other_key = live.user()
    seen = live.gql(other_key, STATUS, {"a": agent_id})["data"]["agentById"]
    assert seen is None or seen["corpusStatus"] is None


@pytest.fixture
def scripted_runner(platform):
    """The platform with the runner answering from a scripted model (the test's)."""
    llm = ScriptedLLM()
    with running(platform, llm):
        yield platform, llm


def test_the_engines_real_path_gives_the_model_the_passages_and_urls(scripted_runner, pages):
    live, llm = scripted_runner
    base, _ = pages
    user_id, key = live.user()
    username = live.services.users.get(user_id).username
    user = User(user_id, key, username)
    with serve(corpus_agent([f"{base}/handbook/*"]), live.url, f"{username}/handbook") as url:
        agent_id = f"{username}/{register(live, key, 'handbook', url).split('/')[1]}"
        assert ingested(live, user, agent_id)["state"] == "ready"
        llm.replies += ["Ask Func[fixie_query_corpus]: where do staff park",
                        f"A: In lot C, behind the warehouse ({base}/handbook/parking.html)."]
        text = answer(live, user, agent_id, "Where do staff park?")
    assert text == f"In lot C, behind the warehouse ({base}/handbook/parking.html)."
    # What the model read before answering: the Func's passages, each with its URL.
    said = llm.transcript(1).split("Func[fixie_query_corpus] says: ", 1)[1]
    assert said.startswith("Parking\n  Staff park in lot C behind the warehouse;")
    assert f"(Source: {base}/handbook/parking.html)" in said


def test_with_a_model_the_func_answers_from_the_passages_citing_them(aws):
    """fixie_query_corpus with a language model: its answer, from the passages it got."""
    from codeshot.runner.corpora import Passage
    from codeshot.runner.platform_funcs import FuncContext
    from codeshot.runner.platform_funcs.documents import query_corpus

    llm = ScriptedLLM("Lot C (https://h.example/parking).")
    found = [Passage("Staff park in lot C.", "https://h.example/parking", 0.9)]
    ctx = FuncContext(time_zone=lambda: "UTC", embeds=None, llm=llm,  # type: ignore[arg-type]
                      corpus=lambda question, k: found[:k])
    assert query_corpus("where do staff park", ctx) == "Lot C (https://h.example/parking)."
    prompt = llm.calls[0][0][-1].content
    assert "Staff park in lot C.\n(Source: https://h.example/parking)" in prompt
    assert "where do staff park" in prompt


BAD_PAGES = {
    "/huge.txt": ("text/plain", b"x" * (50 * 1024 * 1024)),
    "/broken.pdf": ("application/pdf", b"%PDF-1.4\nthis is not a PDF at all\n%%EOF"),
    "/empty.html": ("text/html", b"<html><head></head><body><script>x()</script></body></html>"),
}


def corpus_objects(live) -> set[str]:
    listed = live.services.embeds.s3.list_objects_v2(
        Bucket=live.services.settings.embeds_bucket, Prefix="corpora/")
    return {o["Key"] for o in listed.get("Contents", [])}


def test_unreadable_documents_are_visible_errors_with_nothing_half_stored(live, user, deploy):
    with serving_pages(lambda path: BAD_PAGES[path]) as base:
        stored_before = corpus_objects(live)
        cases = {
            "unreachable": ("http://127.0.0.1:9/manual.html", "is unreachable"),
            "private": ("http://10.1.2.3/manual.html", "not a public address"),
            "huge": (f"{base}/huge.txt", "larger than 4194304 bytes"),
            "badpdf": (f"{base}/broken.pdf", "the PDF cannot be read"),
            "empty": (f"{base}/empty.html", "the corpus holds no text"),
        }
        for handle, (url, says) in cases.items():
            agent_id = deploy(corpus_agent([url]), handle)
            status = ingested(live, user, agent_id)
            assert status["state"] == "failed", (handle, status)
            assert says in status["errors"][0], (handle, status)
            assert status["chunks"] == 0
            # A query still gets an answer, saying the corpus has nothing to search.
            text = answer(live, user, agent_id, "What does the handbook say about the wifi?")
            assert "not indexed" in text, (handle, text)
        assert corpus_objects(live) == stored_before  # nothing half-stored


def test_a_failed_refresh_keeps_the_corpus_queries_search(live, user, deploy, pages):
    base, _ = pages
    agent_id = deploy(corpus_agent([f"{base}/handbook/wifi.html"]), "wifi")
    assert ingested(live, user, agent_id)["state"] == "ready"
    PAGES["/handbook/wifi.html"], kept = ("text/html", b""), PAGES["/handbook/wifi.html"]
    try:
        refreshed = httpx.post(f"{live.url}/api/refresh/{agent_id}", timeout=30,
                               headers={"Authorization": f"Bearer {user.key}"})
        assert refreshed.status_code == 200, refreshed.text
        assert ingested(live, user, agent_id)["state"] == "failed"
    finally:
        PAGES["/handbook/wifi.html"] = kept
    text = answer(live, user, agent_id, "What does the handbook say about the wifi password?")
    assert "heron-42-lantern" in text


def test_an_ingestion_shows_its_progress_while_it_runs(aws):
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import ingest
    from codeshot.store.corpora import CorpusStore

    def page(path: str) -> tuple[str, bytes]:
        if path == "/docs/":
            links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(24))
            return "text/html", f"<p>Index</p>{links}".encode()
        return "text/html", f"<p>Page {path} says fact {path[-7:-5]}.</p>".encode()

    store = CorpusStore(aws)
    shown: list[tuple[int, str]] = []
    progress = store.progress
    store.progress = lambda v: (shown.append((v.documents, v.state.value)),  # type: ignore[method-assign]
                                progress(v))[1]
    with serving_pages(page) as base:
        done = ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs/*"]}],
                      aws.replace(local_mode=True), store, HashingEmbedder())
    assert shown == [(10, "ingesting"), (20, "ingesting")]
    assert (done.state.value, done.documents) == ("ready", 25)
    assert store.recent("ann/docs")[0].documents == 25


def test_an_ingestion_stops_reading_once_its_agent_is_deleted(aws):
    """It read and embedded on to the end, then put its version back."""
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import ingest
    from codeshot.store.corpora import CorpusStore

    store, served = CorpusStore(aws), []

    def page(path: str) -> tuple[str, bytes]:
        served.append(path)
        if path == "/docs/":
            links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(40))
            return "text/html", f"<p>Index</p>{links}".encode()
        if path == "/docs/p4.html":
            store.delete_agent("ann/docs")  # the owner deletes the agent meanwhile
        return "text/html", f"<p>Page {path} says a fact.</p>".encode()

    with serving_pages(page) as base:
        done = ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs/*"]}],
                      aws.replace(local_mode=True), store, HashingEmbedder())
    assert len(served) == 10  # the next progress found the version gone
    assert done.state.value == "failed" and store.recent("ann/docs") == []
    assert not store.s3.list_objects_v2(Bucket=store.bucket, Prefix="corpora/").get("Contents")


def test_linked_pages_failing_under_long_urls_are_listed_each_on_a_short_line(aws):
    """25 links of 15 KB each that cannot be read: the version is ready with the page it
    read, its errors listed each cut to a line (whole, they exceed DynamoDB's item)."""
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import ingest
    from codeshot.store.corpora import MAX_ERROR_CHARS, CorpusStore

    links = "".join(f'<a href="/docs/{i}{"a" * 15000}">x</a>' for i in range(25))

    def page(path: str) -> tuple[str, bytes] | None:
        if path == "/docs/":
            return "text/html", f"<p>Staff park in lot C.</p>{links}".encode()
        return None

    store = CorpusStore(aws)
    with serving_pages(page) as base:
        done = ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs/*"]}],
                      aws.replace(local_mode=True), store, HashingEmbedder())
    [stored] = store.recent("ann/docs")
    assert (done.state.value, stored.state.value, stored.documents) == ("ready", "ready", 1)
    assert len(stored.errors) == 20 and stored.errors[0].startswith(f"skipped {base}/docs/0a")
    assert all(len(e) <= MAX_ERROR_CHARS for e in stored.errors)


def test_a_corpus_ingested_with_another_embedder_is_still_searched(aws):
    """A stack that changed CODESHOT_EMBEDDER (hashing was the default) keeps answering
    from the corpora it ingested before: their passages are embedded anew on load."""
    from codeshot.routing.embedders import HashingEmbedder, StaticEmbedder
    from codeshot.runner.corpora import InLambdaSearch, S3VectorsSearch, ingest
    from codeshot.store.corpora import CorpusStore

    facts = {"/docs/kitchen.html": "The coffee machine is descaled on Fridays.",
             "/docs/office.html": "Visitors sign in at the front desk on the ground floor."}

    def page(path: str) -> tuple[str, bytes]:
        if path == "/docs/":
            return "text/html", b'<a href="kitchen.html">k</a><a href="office.html">o</a>'
        return "text/html", f"<p>{facts[path]}</p>".encode()

    store = CorpusStore(aws)
    with serving_pages(page) as base:
        done = ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs/*"]}],
                      aws.replace(local_mode=True), store, HashingEmbedder())
    assert done.embedding_model == HashingEmbedder().model_id
    question = "When does the espresso maker get cleaned?"  # no word of the passage
    for search in (InLambdaSearch(store, StaticEmbedder()),
                   S3VectorsSearch(aws, store, StaticEmbedder())):  # its index is hashing's
        [best] = search.search("ann/docs", question, k=1)
        assert best.text == facts["/docs/kitchen.html"] and best.url.endswith("kitchen.html")


def test_a_runner_keeps_the_most_recently_searched_indexes_within_its_cache(aws):
    """Indexes are loaded once and kept up to the cache's bytes: past them the least
    recently searched is dropped (read from S3 again if searched again)."""
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import InLambdaSearch, ingest
    from codeshot.store.corpora import CorpusStore

    def page(path: str) -> tuple[str, bytes]:
        return "text/plain", f"The {path[1:]} handbook says staff park in lot C.".encode()

    store = CorpusStore(aws)

    def ingested(name: str) -> int:
        """The size of a new version of the agent's index."""
        with serving_pages(page) as base:
            return len(store.read_index(ingest(
                store.start(f"ann/{name}", []), [{"urls": [f"{base}/{name}"]}],
                aws.replace(local_mode=True), store, HashingEmbedder()).object_key))

    sizes = [ingested(name) for name in ("a", "b", "c")]
    read_index, reads = store.read_index, []
    store.read_index = lambda key: (reads.append(key), read_index(key))[1]  # type: ignore[method-assign]
    search = InLambdaSearch(store, HashingEmbedder(), cache_bytes=sum(sizes) - 1)

    def searched(*names: str) -> int:
        """How many indexes the searches read from S3."""
        before = len(reads)
        for name in names:
            [found] = search.search(f"ann/{name}", "Where do staff park?", k=1)
            assert found.text == f"The {name} handbook says staff park in lot C."
        return len(reads) - before

    assert searched("a", "b", "a") == 2
    assert searched("c") == 1  # the three are over the cache: b, searched least lately, goes
    assert searched("a", "c") == 0
    assert searched("b") == 1  # a goes
    ingested("c")  # a new version of c's index, of the same size, replaces the old one
    assert searched("c") == 1
    assert searched("b", "c") == 0


def test_a_corpus_too_large_to_search_in_the_runner_fails_its_ingestion(aws, monkeypatch):
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner import corpora
    from codeshot.store.corpora import CorpusStore

    monkeypatch.setattr(corpora, "MAX_LAMBDA_PASSAGES", 2)

    def page(path: str) -> tuple[str, bytes]:
        return "text/plain", "\n\n".join(f"Passage {i}. " + "x" * 700 for i in range(3)).encode()

    store = CorpusStore(aws)
    with serving_pages(page) as base:
        done = corpora.ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs.txt"]}],
                              aws.replace(local_mode=True), store, HashingEmbedder())
    assert (done.state.value, done.errors) == ("failed", [
        "the corpus has 3 passages; searched in the runner it may have 2 "
        "(CODESHOT_CORPUS_SEARCH=s3vectors takes more)"])


HANDBOOK = {
    "induction": "Everyone must complete the safety induction in their first week, before "
                 "touching any machine.",
    "visitors": "Visitors sign in at the front desk on the ground floor and wear a badge at "
                "all times.",
    "expenses": "Expense claims are submitted within thirty days with the receipts attached.",
    "starters": "New starters fill in the equipment request so their laptop is ready on day "
                "one.",
    "contractors": "Contractors hand in form QX7 to the site office before they start work "
                   "on the roof.",
    "holidays": "Holiday requests go to your manager at least two weeks ahead.",
}
RARE_WORD_QUESTION = "Where do I send my QX7?"


def test_a_question_naming_a_rare_word_finds_the_passage_holding_it(aws):
    """Asked where a form goes, the default embedder's cosine prefers passages about
    requests and claims; the form's code, in one passage only, is what finds the answer
    (BM25 fused in)."""
    from codeshot.routing.embedders import StaticEmbedder
    from codeshot.runner.corpora import InLambdaSearch, ingest
    from codeshot.store.corpora import CorpusStore

    def page(path: str) -> tuple[str, bytes]:
        if path == "/handbook/":
            return "text/html", "".join(f'<a href="{name}.html">{name}</a>'
                                        for name in HANDBOOK).encode()
        return "text/html", f"<p>{HANDBOOK[path.removeprefix('/handbook/')[:-5]]}</p>".encode()

    store = CorpusStore(aws)
    with serving_pages(page) as base:
        ingest(store.start("ann/handbook", []), [{"urls": [f"{base}/handbook/*"]}],
               aws.replace(local_mode=True), store, StaticEmbedder())
    [best] = InLambdaSearch(store, StaticEmbedder()).search("ann/handbook",
                                                            RARE_WORD_QUESTION, k=1)
    assert best.text == HANDBOOK["contractors"] and best.url.endswith("/contractors.html")
    # The cosine alone ranks two other passages above it.
    dense = InLambdaSearch(store, StaticEmbedder(), dense_weight=1.0).search(
        "ann/handbook", RARE_WORD_QUESTION, k=2)
    assert HANDBOOK["contractors"] not in [p.text for p in dense]


def test_s3_vectors_nearest_passages_are_reranked_by_the_rare_word():
    """S3 Vectors ranks by cosine only: the passages it returns (with their text) are
    reranked with BM25 over them, so the same question finds the same passage."""
    import numpy as np

    from codeshot.routing.embedders import StaticEmbedder
    from codeshot.runner.corpora import DENSE_WEIGHT, Passage, reranked

    embedder = StaticEmbedder()
    query, *rows = np.asarray(embedder.embed([RARE_WORD_QUESTION, *HANDBOOK.values()]))
    nearest = sorted((Passage(text, f"https://docs.example/{name}", float(row @ query))
                      for (name, text), row in zip(HANDBOOK.items(), rows, strict=True)),
                     key=lambda p: -p.score)  # as QueryVectors returns them
    assert HANDBOOK["contractors"] not in [p.text for p in nearest[:2]]
    [best] = reranked(nearest, RARE_WORD_QUESTION, 1, DENSE_WEIGHT[embedder.model_id])
    assert best.url == "https://docs.example/contractors"


def test_a_page_sent_a_byte_at_a_time_stops_with_the_ingestions_time(monkeypatch):
    from codeshot.runner import corpora
    from codeshot.settings import Settings

    monkeypatch.setattr(corpora, "READ_SECONDS", 1.0)
    with raw_server("drip", interval=0.25) as drip:
        began = time.monotonic()
        with pytest.raises(InvalidInput, match="time ran out"):
            corpora.Crawl(Settings().replace(local_mode=True)).documents({"urls": [drip.url]})
        # Each byte came within the read timeout: it held the runner until the page ended.
        assert time.monotonic() - began < 3 and drip.hangs_up(within=2)


def test_a_page_of_thousands_of_links_is_read_in_a_bounded_time_and_listed_once(aws):
    """A page of 5,000 links and 100 exclude_patterns, with room for one page: its
    first 1,000 links are considered, each tried once against the patterns, and those
    left unread are one error, not one per link."""
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import ingest
    from codeshot.store.corpora import CorpusStore

    links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(5_000))

    def page(path: str) -> tuple[str, bytes] | None:
        if path == "/docs/":
            return "text/html", f"<p>Staff park in lot C.</p>{links}".encode()
        return None

    patterns = ["*/p1?.html", *(f"*never-{i}*" for i in range(99))]  # p10-p19 excluded
    store = CorpusStore(aws)
    with serving_pages(page) as base:
        began = time.monotonic()
        done = ingest(store.start("ann/docs", []),
                      [{"urls": [f"{base}/docs/*"], "exclude_patterns": patterns}],
                      aws.replace(local_mode=True, corpus_max_pages=1), store,
                      HashingEmbedder())
        took = time.monotonic() - began
    assert (done.state.value, done.documents) == ("ready", 1)
    assert done.errors == ["the corpus reached its 1 pages: 990 linked pages not read"]
    assert took < 10, took

    with serving_pages(page) as base:
        done = ingest(store.start("ann/docs", []),
                      [{"urls": [f"{base}/docs/*"], "exclude_patterns": [*patterns, "*x*"]}],
                      aws.replace(local_mode=True), store, HashingEmbedder())
    assert (done.state.value, done.errors) == (
        "failed", ["a corpus has a list of at most 100 exclude_patterns"])


def test_reading_stops_in_its_time_keeping_the_pages_read(aws, monkeypatch):
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner import corpora
    from codeshot.store.corpora import CorpusStore

    monkeypatch.setattr(corpora, "READ_SECONDS", 1.0)

    def page(path: str) -> tuple[str, bytes]:
        # A slow site past its first two pages, 0.3 s a page (31 pages would take 9 s).
        # Always two read in time: a loaded machine read one page of the slow ones in 1 s.
        if path not in ("/docs/", "/docs/p0.html"):
            time.sleep(0.3)
        links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(30))
        return "text/html", f"<p>Page {path} says fact {path}.</p>{links}".encode()

    store = CorpusStore(aws)
    with serving_pages(page) as base:
        began = time.monotonic()
        done = corpora.ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs/*"]}],
                              aws.replace(local_mode=True), store, HashingEmbedder())
        took = time.monotonic() - began
    assert done.state.value == "ready" and 2 <= done.documents <= 5, done
    *cut, left = done.errors  # a page whose sending the deadline cut is listed as skipped
    assert all(e.endswith(".html") and "time ran out while fetching" in e for e in cut), cut
    assert left == f"reading ran out of its 1s: {31 - done.documents - len(cut)} linked " \
                   "pages not read"
    assert took < 6, took  # the 1 s, not the 9 s all pages take (slack: a loaded machine)


def test_embedding_past_the_ingestions_time_fails_the_version(aws, monkeypatch):
    """4,000 sentences (572 passages), embedded at 0.2 s a batch (the default embedder
    takes about 1 s for them all here, too near the test's limit): with 1 s for the
    ingestion it stops at the first batch past it, and nothing is stored."""
    from codeshot.routing.embedders import StaticEmbedder
    from codeshot.runner import corpora
    from codeshot.store.corpora import CorpusStore

    class SlowEmbedder(StaticEmbedder):
        def embed(self, texts):
            time.sleep(0.2)
            return super().embed(texts)

    monkeypatch.setattr(corpora, "CORPUS_INGEST_SECONDS", 1.0)
    text = "\n\n".join(f"Passage {i} tells of the warehouse lot and the canteen hours, "
                        f"the bike shed and the guest network {i}." for i in range(4_000))

    def page(path: str) -> tuple[str, bytes]:
        return "text/plain", text.encode()

    store = CorpusStore(aws)
    with serving_pages(page) as base:
        done = corpora.ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs.txt"]}],
                              aws.replace(local_mode=True), store, SlowEmbedder())
    assert done.state.value == "failed", done
    cut = re.fullmatch(r"ingestion ran out of its 1s embedding (\d+) passages \((\d+) done\): "
                       "declare fewer or smaller documents", done.errors[0])
    assert cut and int(cut[2]) < int(cut[1]), done.errors  # stopped part-way
    assert store.newest_ready("ann/docs") is None


def test_a_refreshed_corpus_leaves_only_its_newest_index_on_s3_and_in_s3_vectors(aws):
    """Each ingestion stores an object and (s3vectors) an index: once a newer one is
    ready, the older ones are deleted, not kept forever."""
    import boto3

    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import S3VectorsSearch, ingest
    from codeshot.store.corpora import CorpusStore

    vectors = boto3.client("s3vectors", region_name=aws.region)
    vectors.create_vector_bucket(vectorBucketName=aws.corpus_vector_bucket)
    store = CorpusStore(aws)
    text = {"/docs/a.html": "The first edition of the handbook."}

    def page(path: str) -> tuple[str, bytes]:
        return "text/html", f"<p>{text[path]}</p>".encode()

    def ingested(base: str):
        search = S3VectorsSearch(aws, store, HashingEmbedder(), vectors)
        return ingest(store.start("ann/docs", []), [{"urls": [f"{base}/docs/a.html"]}],
                      aws.replace(local_mode=True), store, HashingEmbedder(),
                      vectors_to=search)

    with serving_pages(page) as base:
        first = ingested(base)
        text["/docs/a.html"] = "The second edition of the handbook."
        second = ingested(base)
    listed = store.s3.list_objects_v2(Bucket=store.bucket, Prefix="corpora/ann/docs/")
    assert [o["Key"] for o in listed["Contents"]] == [second.object_key] != [first.object_key]
    indexes = vectors.list_indexes(vectorBucketName=aws.corpus_vector_bucket)["indexes"]
    assert [i["indexName"] for i in indexes] == [
        S3VectorsSearch.index_name("ann/docs", second.version)]


def indexed_agent(aws, handle: str):
    """An agent of ann's with a ready corpus version in S3 Vectors: (registration, agent,
    the vector client)."""
    import boto3
    import numpy as np

    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.corpora import S3VectorsSearch
    from codeshot.services import Services
    from codeshot.store.corpora import CorpusState
    from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change

    vectors = boto3.client("s3vectors", region_name=aws.region)
    vectors.create_vector_bucket(vectorBucketName=aws.corpus_vector_bucket)
    services = Services(aws.replace(local_mode=True, corpus_search="s3vectors"))
    registration = AgentRegistration(services, charge=daily_agent_change)
    agent = registration.create(ANN, handle, AgentFields(
        base_prompt="I answer from the handbook.", few_shots=["Q: Hi\nA: Hello."]))
    search = S3VectorsSearch(services.settings, services.corpora, HashingEmbedder(), vectors)
    version = services.corpora.start(agent.agent_id, [])
    search.write(agent.agent_id, version.version, [{"text": "handbook", "url": "https://a/"}],
                 np.eye(1, 256, dtype=np.float32))
    services.corpora.finish(version.replace(state=CorpusState.READY), search.drop)
    return registration, agent, vectors


def test_deleting_an_agent_deletes_its_last_s3_vectors_index(aws):
    """No newer version ever replaces it: the agent's deletion must take it."""
    registration, agent, vectors = indexed_agent(aws, "docs")
    registration.delete(ANN, "ann", "docs")
    assert vectors.list_indexes(vectorBucketName=aws.corpus_vector_bucket)["indexes"] == []
    assert registration.s.corpora.recent(agent.agent_id) == []


def test_renaming_an_agent_deletes_its_old_ids_corpus(aws):
    """The renamed agent's corpora are ingested anew under its new id; the old id's stayed
    for ever, and a new agent of the old id searched them."""
    from codeshot.usecases.registration import AgentFields

    registration, agent, vectors = indexed_agent(aws, "docs")
    registration.update(ANN, "docs", AgentFields(), "manual")
    assert vectors.list_indexes(vectorBucketName=aws.corpus_vector_bucket)["indexes"] == []
    assert registration.s.corpora.recent(agent.agent_id) == []
