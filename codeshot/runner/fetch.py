"""Fetching a URL an agent named (a URL embed in a Func's reply): public addresses only.

The one place the runner fetches third-party URLs, so the SSRF rules live in one spot:
:func:`codeshot.net.http.public_client` connects only to the public address it checked
(loopback only in local mode; no DNS rebinding), follows no redirects, and the body is
capped: a gzip or deflate body (servers send one whatever is asked) is inflated only up
to the cap, a gzip bomb refused there as any other body too large. With a ``deadline``
(the query's), a fetch ends by then however slowly the server sends: one left running by
an abandoned call does not outlive its query.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from codeshot.errors import AgentUnavailable, InvalidInput, Timeout
from codeshot.net.addresses import check_public_url, unresolved_cause
from codeshot.net.http import CompressedReply, capped_body, public_client


@dataclass(frozen=True)
class Fetched:
    content_type: str  # the server's, without parameters; "" when it sent none
    data: bytes


def fetch_public_url(url: str, *, max_bytes: int, allow_loopback: bool,
                     timeout: float = 10.0, deadline: float | None = None) -> Fetched:
    """GET ``url`` if the platform may call it, gzip or deflate inflated; INVALID_INPUT
    when refused, too large (inflated), compressed otherwise (br, zstd: see
    :func:`~codeshot.net.http.capped_body`) or not valid in its coding, TIMEOUT when a read
    waits ``timeout`` or the ``deadline`` (``time.monotonic()``) passes."""
    check_public_url(url, allow_loopback=allow_loopback, resolve=False)
    try:
        with public_client(allow_loopback=allow_loopback, timeout=timeout,
                           deadline=deadline, compressed=True) as client, \
                client.stream("GET", url) as response:
            if response.status_code != 200:
                raise InvalidInput(f"{url} answered HTTP {response.status_code}")
            chunks, size = [], 0
            for chunk in capped_body(response, max_bytes):
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise InvalidInput(f"{url} is larger than {max_bytes} bytes")
            content_type = response.headers.get("content-type", "").split(";")[0].strip()
    except CompressedReply as exc:
        raise InvalidInput(exc.message) from exc
    except httpx.TimeoutException as exc:
        if deadline is not None and time.monotonic() >= deadline:
            raise Timeout(f"the time ran out while fetching {url}") from exc
        raise Timeout(f"{url} did not answer within {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        unresolved = unresolved_cause(exc)
        if unresolved is not None:  # most often a name the model made up
            raise InvalidInput(f"{url} cannot be fetched: {unresolved}") from exc
        raise AgentUnavailable(f"{url} is unreachable: {exc.__class__.__name__}") from exc
    return Fetched(content_type, b"".join(chunks))

