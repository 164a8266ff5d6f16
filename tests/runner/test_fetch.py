"""Fetching a page, an embed or a corpus document (``fetch_public_url``) from servers
that send it compressed whatever was asked (objects uploaded gzipped to S3, ``.gz``
files), against a real server on loopback: gzip and deflate are read, within the cap."""

import gzip
import tracemalloc
import zlib
from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request, Response

from codeshot.errors import InvalidInput
from codeshot.local.http_server import HttpServer
from codeshot.runner.fetch import fetch_public_url
from tests.raw_server import gzip_bomb

PAGE = b"<html><body>" + b"hello docs " * 2_000 + b"</body></html>"
CAP = 2 << 20  # what fixie_http_get reads of a page
BOMB = gzip_bomb()  # 50 MB of JSON in about 50 KB: made before any memory is counted


def _bare_deflate(data: bytes) -> bytes:
    squeezer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return squeezer.compress(data) + squeezer.flush()


# path: (Content-Encoding, body)
BODIES = {
    "gzip": ("gzip", gzip.compress(PAGE)),
    "deflate": ("deflate", zlib.compress(PAGE)),
    "bare-deflate": ("deflate", _bare_deflate(PAGE)),
    "bomb": ("gzip", BOMB),
    "long": ("identity", b" " * (CAP + 1)),
    "utf8": ("UTF-8", PAGE),
    "br": ("br", b"\x1b\x0b\x00\xf8\x25\x02"),
    "corrupt": ("gzip", b"\x1f\x8b\x08\x00" + b"not gzip at all" * 10),
}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[str | None]]]:
    app, asked = FastAPI(), []

    @app.get("/{name}")
    async def body(name: str, request: Request) -> Response:
        asked.append(request.headers.get("accept-encoding"))
        coding, data = BODIES[name]
        return Response(data, media_type="text/html", headers={"Content-Encoding": coding})

    running = HttpServer(app)
    running.start()
    yield running.url, asked
    running.stop()


@pytest.mark.parametrize("name", ["gzip", "deflate", "bare-deflate"])
def test_a_page_sent_compressed_whatever_was_asked_is_read_as_text(server, name):
    url, asked = server
    fetched = fetch_public_url(f"{url}/{name}", max_bytes=CAP, allow_loopback=True)
    assert (fetched.content_type, fetched.data) == ("text/html", PAGE)
    assert asked[-1] == "identity"


def test_a_gzip_bomb_is_refused_at_the_cap_as_any_page_too_long(server):
    """50 KB of gzip inflating to 50 MB: refused as a plain page over the cap is, and
    never inflated much past the cap (before, the one 50 KB chunk inflated whole)."""
    url, _ = server
    with pytest.raises(InvalidInput) as plain:
        fetch_public_url(f"{url}/long", max_bytes=CAP, allow_loopback=True)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput) as bomb:
            fetch_public_url(f"{url}/bomb", max_bytes=CAP, allow_loopback=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(bomb.value).replace("/bomb", "/long") == str(plain.value)
    assert f"larger than {CAP} bytes" in str(bomb.value)
    assert peak < CAP + (1 << 20), f"{peak / 2**20:.1f} MB held while reading the bomb"


def test_a_coding_httpx_does_not_know_is_read_as_sent(server):
    url, _ = server  # "UTF-8": a misconfigured server's charset
    assert fetch_public_url(f"{url}/utf8", max_bytes=CAP, allow_loopback=True).data == PAGE


@pytest.mark.parametrize(("name", "error"), [
    ("br", "Content-Encoding 'br', which cannot be read within a size cap"),
    ("corrupt", "sent a body that is not valid gzip"),
])
def test_a_body_that_cannot_be_inflated_within_the_cap_is_refused_clearly(server, name,
                                                                          error):
    url, _ = server
    with pytest.raises(InvalidInput, match=error):
        fetch_public_url(f"{url}/{name}", max_bytes=CAP, allow_loopback=True)
