"""Reading a PDF is bounded as a whole, not only stream by stream (pypdf's own limits):
its pages, its text and the caller's time."""

from __future__ import annotations

import re
import time

import pytest

from codeshot.errors import InvalidInput, Timeout
from codeshot.runner.platform_funcs import documents
from codeshot.runner.platform_funcs.documents import document_text
from tests.pdfs import pdf_of

pytestmark = pytest.mark.unit


def test_a_pdfs_pages_are_read_in_order():
    text = document_text("application/pdf", pdf_of("First page.", "Second page."))
    assert text.index("First page.") < text.index("Second page.")


def test_too_many_pages_are_refused_before_any_is_read(monkeypatch):
    monkeypatch.setattr(documents, "MAX_PDF_PAGES", 3)
    with pytest.raises(InvalidInput, match="has 4 pages; at most 3"):
        document_text("application/pdf", pdf_of("a", "b", "c", "d"))
    assert "d" in document_text("application/pdf", pdf_of("b", "c", "d"))


def test_more_text_than_a_pdf_may_hold_is_refused(monkeypatch):
    monkeypatch.setattr(documents, "MAX_PDF_TEXT_CHARS", 50)
    with pytest.raises(InvalidInput, match="more than 50 characters"):
        document_text("application/pdf", pdf_of(*["thirty characters of text, ok"] * 3))


def test_a_page_decompressing_past_its_limit_is_refused(monkeypatch):
    monkeypatch.setattr(documents, "PDF_STREAM_BYTES", 1_000_000)
    bomb = pdf_of("small file", padding=3_000_000)
    assert len(bomb) < 10_000
    with pytest.raises(InvalidInput, match="cannot be read"):
        document_text("application/pdf", bomb)


def test_reading_stops_when_the_callers_time_is_up():
    """A 120 KB PDF of 60 pages, each decompressing to 2 MB of content that pypdf parses
    for about 0.2 s: about 12 s in all, which a query's deadline now cuts short."""
    heavy = pdf_of(*[f"page {n}" for n in range(60)], padding=2_000_000)
    assert len(heavy) < 200_000
    # pypdf is imported on first use (0.65 s on a loaded machine): not within the deadline,
    # which leaves time to read a page or more (0.2 s each, 0.8 s on a loaded machine)
    # and still ends far short of the whole 12 s.
    document_text("application/pdf", pdf_of("warm-up"))
    with pytest.raises(Timeout, match="ran out of time at page") as stopped:
        document_text("application/pdf", heavy, deadline=time.monotonic() + 2)
    page = int(re.search(r"at page (\d+) of 60", stopped.value.message)[1])
    assert 1 < page < 60
