"""``fixie_http_get``: the text of a public web page or document, for an agent's LLM.

The URL goes through the runner's one fetch of third-party URLs
(:func:`codeshot.runner.fetch.fetch_public_url`: the SSRF rules, loopback only in local
mode, no redirects, a size cap, a timeout); its text is read as an embed's is
(:func:`~codeshot.runner.platform_funcs.documents.document_text`: HTML, PDF, plain
text), and capped so one page cannot fill the prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codeshot.errors import InvalidInput
from codeshot.runner.fetch import fetch_public_url
from codeshot.runner.platform_funcs.documents import document_text

if TYPE_CHECKING:
    from codeshot.runner.platform_funcs import FuncContext

MAX_BYTES = 2_000_000  # of the page
MAX_CHARS = 8_000  # of the answer (about 2,000 tokens)
TIMEOUT_SECONDS = 10.0


def http_get(text: str, ctx: FuncContext) -> str:
    url = text.strip()
    if not url.lower().startswith(("http://", "https://")) or any(c.isspace() for c in url):
        raise InvalidInput("fixie_http_get takes one http:// or https:// URL")
    fetched = fetch_public_url(url, max_bytes=MAX_BYTES, allow_loopback=ctx.allow_loopback,
                               timeout=TIMEOUT_SECONDS, deadline=ctx.deadline)
    page = "\n\n".join(p.strip() for p in document_text(
        fetched.content_type or "text/plain", fetched.data, ctx.deadline).split("\n\n")
        if p.strip())
    if len(page) > MAX_CHARS:
        page = page[:MAX_CHARS].rsplit(" ", 1)[0] + " [...]"
    return page or f"{url} has no text."
