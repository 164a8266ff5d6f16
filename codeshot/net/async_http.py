""":func:`codeshot.net.http.public_client`'s rules for the async ``httpx2`` client that the
``mcp`` SDK speaks through: connections only to addresses checked at that moment (loopback
too in local mode), a few of them within one connect timeout, no proxy, no cookies,
replies asked for and taken uncompressed, and a cap on the bytes one reply may send (an
MCP server's JSON replies have no limit of the SDK's own).

Imported only where MCP servers are called: ``httpx2`` comes with the ``mcp`` SDK.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
import httpcore2
import httpx2

from codeshot.net.addresses import Resolver, Unresolved, resolve_public
from codeshot.net.http import (
    IDENTITY,
    CompressedReply,
    NoCookies,
    connect_tries,
    refuse_compressed,
    tls_context,
)


class ReplyTooLong(httpx2.ReadError):
    """A reply went past the client's byte cap; the transport stopped reading it."""


class PinnedAsyncBackend(httpcore2.AnyIOBackend):
    """Resolves and checks the host, then connects to the checked addresses only."""

    def __init__(self, allow_loopback: bool, resolver: Resolver | None = None) -> None:
        self.allow_loopback = allow_loopback
        self.resolver = resolver

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore2.AsyncNetworkStream:
        ends = None if timeout is None else time.monotonic() + timeout
        try:
            addresses = await anyio.to_thread.run_sync(
                lambda: resolve_public(host, port, allow_loopback=self.allow_loopback,
                                       resolver=self.resolver, timeout=timeout))
        except Unresolved as exc:  # unreachable, as a refused connection: nothing was sent
            raise httpcore2.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address, left in connect_tries(addresses, ends):
            try:
                return await super().connect_tcp(str(address), port, left, local_address,
                                                 socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore2.ConnectTimeout(f"no address of {host} answered in time")


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, cap: int) -> None:
        self.stream, self.cap = stream, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self.stream:
            read += len(chunk)
            if read > self.cap:
                raise ReplyTooLong(f"reply over {self.cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


class PinnedAsyncTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, allow_loopback: bool, max_reply_bytes: int) -> None:
        super().__init__(verify=tls_context(), trust_env=False)
        self.max_reply_bytes = max_reply_bytes
        limits = httpx2.Limits()
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=tls_context(), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedAsyncBackend(allow_loopback),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        try:
            refuse_compressed(request.url, response.headers)
        except CompressedReply:
            await response.aclose()
            raise
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(response.stream, self.max_reply_bytes)
        return response


def public_async_client(*, allow_loopback: bool, timeout: float, max_reply_bytes: int,
                        headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """An ``httpx2`` client for user-named URLs (see :func:`codeshot.net.http.public_client`):
    refused addresses raise :class:`~codeshot.net.addresses.RefusedAddress` from the
    request, a compressed reply :class:`~codeshot.net.http.CompressedReply`, a host that
    does not resolve ``httpx2.ConnectError``; a reply over ``max_reply_bytes`` raises
    :class:`ReplyTooLong`."""
    return httpx2.AsyncClient(
        transport=PinnedAsyncTransport(allow_loopback, max_reply_bytes),
        follow_redirects=False, trust_env=False, headers={**IDENTITY, **(headers or {})},
        cookies=NoCookies(),
        timeout=httpx2.Timeout(timeout, connect=min(timeout, 5.0)),
    )
