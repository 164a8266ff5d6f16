"""``fixie_query_embed``: answers a question from the text of an embed the query names
(``Summarize this document #doc1``). Plain text, HTML and PDF (pypdf) are read.

The passages sharing most of the question's words are picked; a language model answers
from them, and with the offline ``fewshot`` provider (not a language model) they are
the answer, quoted as they are. ``fixie_query_corpus`` does the same over the agent's
document corpus (:mod:`codeshot.runner.corpora`), citing each passage's URL.
"""

from __future__ import annotations

import io
import math
import re
import time
from collections import Counter
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.parse import urldefrag, urljoin

from codeshot.errors import InvalidInput, NotSupported, Timeout
from codeshot.llm.base import ChatMessage
from codeshot.llm.fewshot import content_words

if TYPE_CHECKING:
    from codeshot.runner.platform_funcs import FuncContext

# Fixie's embed reference: an odd number of '#' before the key ("##x" is a literal "#x").
EMBED_REF = re.compile(r"(?<!#)(?:##)*#(?!#)([\w.-]*\w)")
PASSAGE_CHARS = 800
TOP_PASSAGES = 3
OFFLINE_CHARS = 1500
MAX_ANSWER_TOKENS = 512
# A PDF is read a page at a time, until its pages, its text or the caller's time run out:
# pypdf's own limits are per stream (75 MB each), so a small PDF of many compressed pages
# could otherwise keep a runner decompressing for minutes.
MAX_PDF_PAGES = 2000
MAX_PDF_TEXT_CHARS = 5_000_000
PDF_STREAM_BYTES = 20_000_000  # one page's content, decompressed (pypdf's default: 75 MB)
HTML_TYPES = ("text/html", "application/xhtml+xml")
HTML_FEED_CHARS = 65536  # a page is parsed this much at a time, up to the deadline
TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/csv")
HIDDEN_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "head")
BLOCK_TAGS = ("p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
              "table", "ul", "ol", "dl", "dt", "dd", "blockquote", "section", "article",
              "header", "footer", "nav", "main", "aside", "figure", "figcaption", "hr",
              "form")
ANSWER_PROMPT = (
    "Answer the question from the document excerpts below, and only from them. If they "
    "do not hold the answer, say so. Answer in plain text, without preamble."
)


class _PageReader(HTMLParser):
    """An HTML page's visible text and its first ``max_links`` links, in one pass over
    pieces of the page: no tree is built. (Beautiful Soup's tree, with each block's line
    breaks inserted into its parent, took 7.9 s for a 512 KB page and grew with the
    square of the size: minutes for a page within the fetch caps.)"""

    def __init__(self, base: str | None, max_links: int) -> None:
        super().__init__()  # character references are converted in the text
        self.base, self.max_links = base, max_links
        self.links: list[str] = []
        self.parts: list[str] = []
        self.title: list[str] | None = None  # the first <title>'s text, once it opens
        self.in_title = False
        self.hidden = 0  # open hidden elements (scripts, styles, the head ...)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in HIDDEN_TAGS:
            self.hidden += 1
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")
        elif tag == "title" and self.title is None:
            self.title, self.in_title = [], True
        if tag == "a" and self.base is not None and len(self.links) < self.max_links:
            href = dict(attrs).get("href")
            if href is not None:
                self.links.append(urldefrag(urljoin(self.base, href))[0])

    def handle_endtag(self, tag: str) -> None:
        if tag in HIDDEN_TAGS:
            self.hidden = max(0, self.hidden - 1)
        elif tag in BLOCK_TAGS:
            self.parts.append("\n")
        elif tag == "title":
            self.in_title = False

    def handle_data(self, data: str) -> None:
        if self.in_title and self.title is not None:
            self.title.append(data)
        if not self.hidden:  # a line break in the source is a space: blocks make lines
            self.parts.append(data.replace("\r", " ").replace("\n", " "))

    def text(self) -> str:
        """A paragraph per block, words as a reader sees them, the title first."""
        title = " ".join("".join(self.title or ()).split())
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        body = "\n\n".join(line for line in lines if line)
        return f"{title}\n\n{body}" if title and not body.startswith(title) else body


def html_page(html: bytes, deadline: float | None = None, base: str | None = None,
              max_links: int = 0) -> tuple[str, list[str]]:
    """(the visible text, the first ``max_links`` links made absolute against ``base``,
    without fragments) of an HTML page whose encoding is sniffed from its bytes; TIMEOUT
    once ``deadline`` (time.monotonic()) passes, checked every ``HTML_FEED_CHARS``."""
    from bs4 import UnicodeDammit  # only the Funcs reading HTML need it

    markup = UnicodeDammit(html, is_html=True).unicode_markup or ""
    reader = _PageReader(base, max_links)
    for start in range(0, len(markup), HTML_FEED_CHARS):
        if deadline is not None and time.monotonic() > deadline:
            raise Timeout(f"reading the page ran out of time at character {start} of "
                          f"{len(markup)}")
        reader.feed(markup[start:start + HTML_FEED_CHARS])
    reader.close()
    return reader.text(), reader.links


def pdf_text(data: bytes, deadline: float | None = None) -> str:
    """A PDF's text, page by page; INVALID_INPUT past :data:`MAX_PDF_PAGES` pages or
    :data:`MAX_PDF_TEXT_CHARS` characters, TIMEOUT once ``deadline`` (time.monotonic())
    passes (checked between pages)."""
    from pypdf import PdfReader, apply_configuration
    from pypdf.errors import PyPdfError

    texts: list[str] = []
    size = 0
    try:
        with apply_configuration(zlib_maximum_output_length=PDF_STREAM_BYTES,
                                 stream_decoding_work_maximum_length=PDF_STREAM_BYTES):
            pages = PdfReader(io.BytesIO(data)).pages
            if len(pages) > MAX_PDF_PAGES:
                raise InvalidInput(f"the PDF has {len(pages)} pages; at most "
                                   f"{MAX_PDF_PAGES} are read")
            for page in pages:
                if deadline is not None and time.monotonic() > deadline:
                    raise Timeout(f"reading the PDF ran out of time at page "
                                  f"{len(texts) + 1} of {len(pages)}")
                texts.append(page.extract_text() or "")
                size += len(texts[-1])
                if size > MAX_PDF_TEXT_CHARS:
                    raise InvalidInput(f"the PDF holds more than {MAX_PDF_TEXT_CHARS} "
                                       "characters of text")
    except (PyPdfError, ValueError, KeyError) as exc:  # pypdf's limits included
        raise InvalidInput(f"the PDF cannot be read: {exc}") from exc
    return "\n\n".join(texts)


def document_text(content_type: str, data: bytes, deadline: float | None = None) -> str:
    """The text of an embed's bytes; INVALID_INPUT for kinds that hold no readable text.
    ``deadline`` bounds reading a PDF or an HTML page."""
    kind, _, params = content_type.partition(";")
    kind = kind.strip().lower()
    charset = re.search(r"charset=([\w.-]+)", params)
    if kind == "application/pdf":
        return pdf_text(data, deadline)
    if not (kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith("+json")):
        raise InvalidInput(f"a {kind} embed holds no text to answer from")
    if kind in HTML_TYPES:
        return html_page(data, deadline)[0]
    return data.decode(charset[1] if charset else "utf-8", errors="replace")


def passages(text: str) -> list[str]:
    """Paragraphs; long ones cut between sentences into pieces of up to PASSAGE_CHARS."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        current = ""
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(paragraph.split())):
            if current and len(current) + len(sentence) >= PASSAGE_CHARS:
                out.append(current)
                current = ""
            current = f"{current} {sentence}".strip()[:PASSAGE_CHARS]
        if current:
            out.append(current)
    return out


def best_passages(question: str, candidates: list[str], k: int = TOP_PASSAGES) -> list[str]:
    """The ``k`` passages sharing most of the question's words (rarer words count more),
    in document order; the opening ones when none shares any."""
    words = content_words(question)
    bags = [content_words(p) & words for p in candidates]
    frequency = Counter(w for bag in bags for w in bag)
    scores = [sum(math.log(1 + len(bags) / frequency[w]) for w in bag) for bag in bags]
    ranked = sorted(range(len(candidates)), key=lambda i: -scores[i])[:k]
    chosen = [i for i in ranked if scores[i] > 0] or list(range(min(k, len(candidates))))
    return [candidates[i] for i in sorted(chosen)]


def query_embed(text: str, ctx: FuncContext) -> str:
    keys = list(dict.fromkeys(EMBED_REF.findall(text)))
    if not keys:
        raise InvalidInput("name the embed to read, as in: Summarize this document #doc1")
    question = " ".join(EMBED_REF.sub(" ", text).split())
    excerpts = []
    for key in keys:
        content_type, data = ctx.embeds.read(key)
        chosen = best_passages(question, passages(document_text(content_type, data,
                                                                 ctx.deadline)))
        if not chosen:
            raise InvalidInput(f"embed #{key} holds no text")
        excerpts.append((key, chosen))
    if ctx.llm is None:  # not a language model: the passages themselves are the answer
        answer = "\n\n".join(p for _, chosen in excerpts for p in chosen)
        return answer if len(answer) <= OFFLINE_CHARS else answer[: OFFLINE_CHARS - 3] + "..."
    document = "\n\n".join(f"[#{key}] {p}" for key, chosen in excerpts for p in chosen)
    completion = ctx.llm.complete(
        [ChatMessage("system", ANSWER_PROMPT),
         ChatMessage("user", f"Excerpts:\n{document}\n\nQuestion: {question or 'Summarize.'}")],
        ["\nQuestion:"], MAX_ANSWER_TOKENS)
    return completion.text.strip()


def query_corpus(text: str, ctx: FuncContext) -> str:
    """The agent's corpus passages nearest the question, each with its source URL; with a
    language model, its answer from them, citing the URLs it used."""
    question = " ".join(text.split())
    if not question:
        raise InvalidInput("ask fixie_query_corpus a question")
    if ctx.corpus is None:
        raise NotSupported("this agent declares no document corpus to search")
    found = ctx.corpus(question, TOP_PASSAGES)
    if not found:
        return ("No passages: this agent's document corpus is not indexed (yet, or its "
                "ingestion failed: its owner sees why in the agent's corpusStatus).")
    sourced = "\n\n".join(f"{p.text}\n(Source: {p.url})" for p in found)
    if ctx.llm is None:  # not a language model: the passages themselves are the answer
        return sourced
    completion = ctx.llm.complete(
        [ChatMessage("system", ANSWER_PROMPT + " Cite the source URL of what you use."),
         ChatMessage("user", f"Excerpts:\n{sourced}\n\nQuestion: {question}")],
        ["\nQuestion:"], MAX_ANSWER_TOKENS)
    return completion.text.strip()
