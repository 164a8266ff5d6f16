"""The text and links of HTML pages: embeds, ``fixie_http_get`` pages and corpus pages."""

import re
import time

import pytest

from codeshot.errors import Timeout
from codeshot.runner.platform_funcs.documents import document_text, html_page

PAGE = """<!doctype html><html><head><title>Opening  hours</title>
<style>p { color: red }</style><script>if (a < b) { document.write("<p>x</p>") }</script>
</head><body><h1>Opening hours</h1><!-- not shown -->
<p>We open at <b>9&nbsp;am</b> &amp; close
   at 5 pm.</p><ul><li>Mon</li><li>Tue</li></ul><svg><title>logo</title></svg>
<p>See <a href="/faq#top">the FAQ</a>, <a href="parking.html">parking</a> and
<a href="https://other.example/">elsewhere</a>.<br>Caf\u00e9 open.</p></body></html>"""


def test_a_page_reads_as_a_paragraph_per_block_without_what_is_hidden():
    """A block's text wrapped over lines in the source is one paragraph, one passage."""
    text, links = html_page(PAGE.encode(), base="https://shop.example/hours/", max_links=2)
    assert text == ("Opening hours\n\nWe open at 9 am & close at 5 pm.\n\nMon\n\nTue\n\n"
                    "See the FAQ, parking and elsewhere.\n\nCaf\u00e9 open.")
    assert links == ["https://shop.example/faq", "https://shop.example/hours/parking.html"]


def test_the_title_leads_when_the_body_does_not_start_with_it():
    page = b"<html><head><title>Menu</title></head><body><p>Soup of the day</p></body></html>"
    assert document_text("text/html", page) == "Menu\n\nSoup of the day"
    assert html_page(page) == ("Menu\n\nSoup of the day", [])  # no base: no links


def test_the_encoding_is_sniffed_from_the_page():
    page = '<meta charset="iso-8859-1"><p>Cr\u00e8me br\u00fbl\u00e9e</p>'.encode("latin-1")
    assert document_text("text/html", page) == "Cr\u00e8me br\u00fbl\u00e9e"


def test_reading_a_page_stops_when_the_callers_time_is_up():
    """A 4 MB page (within the corpus fetch cap) took Beautiful Soup minutes, with no
    deadline: the time grew with the square of the page. It is read a piece at a time."""
    block = "<div><p>Some words of a page, <b>bold</b> and <a href='/x'>a link</a>.</p></div>\n"
    page = ("<html><body>" + block * (4 * 1024 * 1024 // len(block)) + "</body></html>").encode()
    html_page(b"<p>warm-up</p>")  # the encoding sniffer's import is not the page's time
    with pytest.raises(Timeout, match="ran out of time at character") as stopped:
        document_text("text/html", page, deadline=time.monotonic() + 0.5)
    read, size = map(int, re.search(r"character (\d+) of (\d+)", stopped.value.message).groups())
    assert 0 < read < size
