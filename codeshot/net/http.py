"""The HTTP client for URLs users name: it connects only to an address it has checked.

Checking a URL and then letting the HTTP library resolve its host again leaves a gap: a
DNS name can answer a public address to the check and a private one to the connection
(DNS rebinding). Here the check *is* the resolution: the connection pool's network
backend resolves the host, refuses the name unless every answer is allowed
(:func:`codeshot.net.addresses.resolve_public`), and opens the socket to the address it
checked. The URL, the Host header and TLS (SNI and certificate checks) keep the
hostname. No proxy from the environment is used (a proxy would resolve the name itself),
redirects are never followed and no cookie is kept.

Replies are asked for uncompressed, and one that comes compressed anyway is refused
(:class:`CompressedReply`): what callers cap is what they read, and a few KB of gzip
could inflate to gigabytes in memory before any cap could count them. Pages, embeds and
corpus documents come from servers that send gzip whatever is asked (objects uploaded
pre-compressed to S3, ``.gz`` files): a client made with ``compressed=True`` hands such
replies over as sent, and :func:`capped_body` inflates them no further than the cap.

httpx's timeouts bound each read and write, not a request: a peer sending a byte every
few seconds would hold its caller for ever. A client made with a ``deadline`` waits for
no name lookup, connect, read or write past it, whatever the peer or the resolver does
(:class:`DeadlineBackend`).
"""

from __future__ import annotations

import email.utils
import functools
import http.cookiejar
import ipaddress
import itertools
import ssl
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpcore
import httpx

from codeshot.errors import AgentFailed
from codeshot.net.addresses import IPAddress, Resolver, Unresolved, resolve_public

# When a client's requests must be over (time.monotonic()): fixed, or read at each step.
Deadline = float | Callable[[], float]


MAX_ADDRESSES_TRIED = 3  # of a host's addresses, per connection
# Asked of every user-named URL; a reply in a coding httpx decodes is refused (or, for
# pages, inflated within the cap).
IDENTITY = {"Accept-Encoding": "identity"}
# What httpx (and httpx2) undo as a body is read: br and zstd when their packages are
# installed. Any other coding (``UTF-8`` from a misconfigured server) they ignore, and
# the body is read as sent, so it is ignored here too.
DECODED_CODINGS = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})
# Those inflated within a cap, by zlib (br and zstd have no decoder here that can stop
# at a given output length).
INFLATED_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})
# Inflated at most this much at a time: zlib builds a call's output in blocks and then
# joins them, so one call holds twice what it returns.
INFLATE_STEP = 64 << 10


class CompressedReply(AgentFailed):
    """A reply came compressed though asked for none: refused unread. ``problem`` is the
    message without ``sender``, for an error that names the agent instead of its URL."""

    def __init__(self, sender: object, problem: str) -> None:
        super().__init__(f"{sender} {problem}")
        self.problem = problem


def content_codings(headers: Any) -> list[str]:
    """The codings of ``headers`` (an httpx or httpx2 Headers) that httpx would undo, in
    the order they were applied."""
    return [coding for coding in (value.strip().lower() for value in
                                  headers.get("content-encoding", "").split(","))
            if coding in DECODED_CODINGS]


def refuse_compressed(url: object, headers: Any) -> None:
    """:class:`CompressedReply` unless ``headers`` (an httpx or httpx2 Headers) say the
    body is read as sent."""
    codings = content_codings(headers)
    if codings:
        raise CompressedReply(url, f"answered with Content-Encoding "
                                   f"{', '.join(codings)[:40]!r} though asked for none: a "
                                   "compressed reply's size cannot be capped before it is in "
                                   "memory")


def capped_body(response: httpx.Response, max_bytes: int) -> Iterator[bytes]:
    """The body of a reply from a ``public_client(compressed=True)``, gzip or deflate
    inflated as it is read, but never more than ``max_bytes`` + 1 bytes of it in all,
    whatever a chunk would inflate to: a gzip bomb stops there, having cost the cap and
    one chunk. A body in a coding httpx does not decode comes as sent. Raises
    :class:`CompressedReply` for br, zstd or stacked codings (which cannot be stopped at
    a length) and for a body that is not valid in its coding."""
    codings = content_codings(response.headers)
    if not codings:
        yield from response.iter_raw()
        return
    url = response.request.url
    if len(codings) > 1 or codings[0] not in INFLATED_CODINGS:
        raise CompressedReply(url, f"answered with Content-Encoding "
                                   f"{', '.join(codings)[:40]!r}, which cannot be read within "
                                   "a size cap: only gzip and deflate can")
    inflater: Any = None
    left, out_full = max_bytes + 1, False
    try:
        # b"" last: what zlib still holds when the last chunk filled a step comes out.
        for chunk in itertools.chain(response.iter_raw(), [b""]):
            if inflater is None:
                inflater = zlib.decompressobj(_wbits(codings[0], chunk))
            pending = chunk
            while pending or out_full:
                step = min(left, INFLATE_STEP)
                out = inflater.decompress(pending, step)
                pending, out_full = inflater.unconsumed_tail, len(out) == step
                left -= len(out)
                yield out
                if left <= 0:
                    return
    except zlib.error as exc:
        raise CompressedReply(url, f"sent a body that is not valid {codings[0]}: {exc}"
                              ) from exc


def _wbits(coding: str, start: bytes) -> int:
    """zlib's format for a body in ``coding`` that begins with ``start``: 47 (32 + 15)
    takes a gzip or a zlib header, whichever it is; "deflate" without either is taken as
    bare deflate, as some servers send it and httpx reads it."""
    headed = start[:2] == b"\x1f\x8b" or (
        len(start) >= 2 and start[0] & 0x0F == 8 and int.from_bytes(start[:2]) % 31 == 0)
    return 47 if coding != "deflate" or headed else -zlib.MAX_WBITS


def connect_tries(addresses: list[IPAddress], ends: float | None
                  ) -> Iterator[tuple[IPAddress, float | None]]:
    """A few of a host's checked addresses (as socket.create_connection tries each),
    each with the time left until ``ends`` (``time.monotonic()``; None: no end): the
    lookup and all attempts share one connect timeout, or a name answering twenty
    silent addresses would take twenty timeouts."""
    for address in addresses[:MAX_ADDRESSES_TRIED]:
        left = None if ends is None else ends - time.monotonic()
        if left is not None and left <= 0:
            return
        yield address, left


class PinnedBackend(httpcore.SyncBackend):
    """Resolves and checks the host, then connects to the checked addresses only."""

    def __init__(self, allow_loopback: bool, resolver: Resolver | None = None) -> None:
        self.allow_loopback = allow_loopback
        self.resolver = resolver

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        ends = None if timeout is None else time.monotonic() + timeout
        try:
            addresses = resolve_public(host, port, allow_loopback=self.allow_loopback,
                                       resolver=self.resolver, timeout=timeout)
        except Unresolved as exc:  # unreachable, as a refused connection: nothing was sent
            raise httpcore.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address, left in connect_tries(addresses, ends):
            try:
                return super().connect_tcp(str(address), port, left, local_address,
                                           socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore.ConnectTimeout(f"no address of {host} answered in time")


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads and writes wait at most until ``deadline``
    (``time.monotonic()``); past it, each fails at once as a timeout."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: Callable[[], float]) -> None:
        self.stream, self.deadline = stream, deadline

    def _left(self, timeout: float | None, late: type[Exception]) -> float:
        left = self.deadline() - time.monotonic()
        if left <= 0:
            raise late("the deadline has passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, self._left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return DeadlineStream(self.stream.start_tls(
            ssl_context, server_hostname, self._left(timeout, httpcore.ConnectTimeout)),
            self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """``backend``'s connections, each bounded by ``deadline`` (:class:`DeadlineStream`)."""

    def __init__(self, backend: httpcore.NetworkBackend, deadline: Callable[[], float]) -> None:
        self.backend, self.deadline = backend, deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        left = self.deadline() - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("the deadline has passed")
        stream = self.backend.connect_tcp(host, port, left if timeout is None else
                                          min(timeout, left), local_address, socket_options)
        return DeadlineStream(stream, self.deadline)

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


@functools.cache
def tls_context() -> ssl.SSLContext:
    # Loading the CA bundle is most of what a new client costs; the context is shareable.
    return httpx.create_ssl_context()


class NoCookies(http.cookiejar.CookieJar):
    """Agents answer many users through one client: none of them may set a cookie."""

    def __init__(self) -> None:
        super().__init__(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))


def environment_proxy(url: str) -> str | None:
    """The proxy ``HTTPS_PROXY`` / ``HTTP_PROXY`` (else ``ALL_PROXY``) names for ``url``,
    unless ``NO_PROXY`` exempts its host, by name or, for an address, by a network such as
    ``10.0.0.0/8`` (as curl and httpx read them), or the host is this machine's loopback,
    which no proxy reaches."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies()
    every = proxies.get("all", "")
    # ALL_PROXY often names a SOCKS proxy for curl: only an HTTP(S) one is taken from it.
    every_scheme = every.partition("://")[0].lower() if "://" in every else "http"
    proxy = proxies.get(parts.scheme) or (
        every if every and every_scheme in ("http", "https") else None)
    if not proxy or host == "localhost" or urllib.request.proxy_bypass(host):
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name
        address = None
    if address is not None and (address.is_loopback or any(
            address in network for network in _no_proxy_networks(proxies.get("no", "")))):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"  # curl reads host:port so too


def _no_proxy_networks(no_proxy: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks (``10.0.0.0/8``) among ``NO_PROXY``'s entries, which urllib reads as
    names."""
    networks = []
    for entry in no_proxy.split(","):
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:  # a name, or nothing
            continue
    return networks


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport over ``backend``, the system's sockets by default, and through
    ``proxy`` if given (never from the environment: agents' URLs are pinned to public
    addresses); with ``deadline``, no lookup, connect, read or write waits past it."""

    def __init__(self, deadline: Deadline | None,
                 backend: httpcore.NetworkBackend | None = None,
                 proxy: str | None = None) -> None:
        super().__init__(verify=tls_context(), trust_env=False)
        limits = httpx.Limits()
        backend = backend or httpcore.SyncBackend()
        if isinstance(deadline, float | int):
            backend = DeadlineBackend(backend, lambda: float(deadline))
        elif deadline is not None:
            backend = DeadlineBackend(backend, deadline)
        pool: dict[str, Any] = {
            "ssl_context": tls_context(), "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry, "network_backend": backend}
        self._pool = (_through(proxy, pool) if proxy else httpcore.ConnectionPool(**pool))


def _through(proxy: str, pool: dict[str, Any]) -> httpcore.HTTPProxy:
    """A pool through an HTTP(S) proxy, with the credentials its URL carries; ValueError
    for another kind (SOCKS)."""
    parsed = httpx.Proxy(proxy)
    if parsed.url.scheme not in ("http", "https"):
        raise ValueError(f"only http:// and https:// proxies are supported, not {proxy!r}")
    return httpcore.HTTPProxy(
        proxy_url=str(parsed.url), proxy_auth=parsed.raw_auth, proxy_headers=parsed.headers.raw,
        proxy_ssl_context=tls_context() if parsed.url.scheme == "https" else None, **pool)


class PinnedTransport(DeadlineTransport):
    def __init__(self, allow_loopback: bool, resolver: Resolver | None = None,
                 deadline: Deadline | None = None, compressed: bool = False) -> None:
        super().__init__(deadline, PinnedBackend(allow_loopback, resolver))
        self.compressed = compressed

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if self.compressed:
            return response
        try:
            refuse_compressed(request.url, response.headers)
        except CompressedReply:
            response.close()
            raise
        return response


def public_client(*, allow_loopback: bool, timeout: float | httpx.Timeout | None = None,
                  resolver: Resolver | None = None, deadline: Deadline | None = None,
                  compressed: bool = False) -> httpx.Client:
    """An httpx client for user-named URLs: connections only to checked public addresses
    (loopback too when ``allow_loopback``, the local stack's setting), no redirects
    followed, no cookies kept, no proxy, replies asked for and taken uncompressed. A
    refused address raises :class:`~codeshot.net.addresses.RefusedAddress`
    (INVALID_INPUT) from the request, a compressed reply :class:`CompressedReply`
    (AGENT_ERROR) unless ``compressed`` (then read the body with :func:`capped_body`
    only: ``iter_bytes`` would inflate it unbounded); a host that does not resolve raises
    ``httpx.ConnectError``, as a refused connection.
    With ``deadline`` (``time.monotonic()``, or a function giving it as each request's
    connection reads it), nothing waits past it: the request raises an ``httpx`` timeout
    instead."""
    return httpx.Client(
        transport=PinnedTransport(allow_loopback, resolver, deadline, compressed),
        follow_redirects=False,
        cookies=NoCookies(), trust_env=False, headers=IDENTITY,
        timeout=timeout if timeout is not None else httpx.Timeout(10.0),
    )


def retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait (RFC 9110 10.2.3: delay-seconds
    or an HTTP-date; a date already past is 0), or None: no header, or not a valid one."""
    value = (value or "").strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:  # "-0000": an HTTP-date is always GMT
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    except (TypeError, ValueError, OverflowError):  # a huge zone offset overflows
        return None
