"""Which addresses the platform may call: global unicast only.

URLs come from users, and the platform calls them from inside the user's AWS account,
so an address on a private network, a link-local range, the instance metadata service or
a carrier-grade NAT (used by some providers' metadata services) would let a user make the
platform call what it must not (SSRF). ``ipaddress``'s ``is_global`` misses addresses
that carry an IPv4 address inside an IPv6 one (6to4, NAT64, Teredo, IPv4-compatible,
IPv4-translated), which reach that IPv4 host through a gateway: those are judged by the
IPv4 address they carry. Local mode (the embedded stack) also allows loopback.
"""

from __future__ import annotations

import ipaddress
import queue
import re
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

from codeshot.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port, type=...) -> getaddrinfo's answers; socket.getaddrinfo unless a test says
# otherwise
Resolver = Callable[..., list[tuple[Any, ...]]]

# Ranges ipaddress (3.11) counts as global that are not reachable public hosts.
_NOT_GLOBAL = tuple(ipaddress.ip_network(n) for n in (
    "192.0.0.0/24",  # IETF protocol assignments (192.0.0.8 dummy, DS-Lite, NAT64 discovery)
    "64:ff9b:1::/48",  # NAT64 for local use (RFC 8215)
))
# IPv6 ranges whose last 32 bits are an IPv4 address a gateway forwards to.
_EMBEDDED_LOW32 = tuple(ipaddress.ip_network(n) for n in (
    "64:ff9b::/96",  # NAT64 well-known prefix (RFC 6052)
    "::/96",  # IPv4-compatible (deprecated)
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
))


# getaddrinfo has no timeout and cannot be interrupted: each lookup runs on a thread of
# its own and its caller stops waiting when its time is up (an agent call's, a fetch's;
# MAX_LOOKUP_SECONDS at most). A lookup given up holds its thread until the resolver
# answers (the system resolver gives up after its own timeouts and attempts, seconds); at
# most LOOKUP_THREADS are held at once, and while all are, a new lookup waits for one only
# as long as its own time, then its host is unresolved (an agent unreachable).
LOOKUP_THREADS = 16
MAX_LOOKUP_SECONDS = 10.0
_LOOKUP_SLOTS: queue.SimpleQueue[None] = queue.SimpleQueue()  # one item per free thread
for _ in range(LOOKUP_THREADS):
    _LOOKUP_SLOTS.put_nowait(None)


class RefusedAddress(InvalidInput):
    """A URL or address the platform will not call."""


class Unresolved(Exception):
    """A host name that resolves to nothing now (no such name, or DNS failing): the host
    cannot be reached, which says nothing against the URL. A call reports it as a failed
    connection (:mod:`codeshot.net.http`); a URL being registered is refused. ``why``:
    what the resolver said, without the name."""

    def __init__(self, host: str, why: str = "") -> None:
        super().__init__(f"host {host!r} does not resolve{f' ({why})' if why else ''}")
        self.why = why


def unresolved_cause(exc: BaseException) -> Unresolved | None:
    """The failed name lookup behind a connection error, if that is what it was."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, Unresolved):
        cause = cause.__cause__ or cause.__context__
    return cause


def without_address(text: str, url: str) -> str:
    """``text`` naming ``url`` and its host only as "its URL" and "its host": for users,
    who are told which agent failed, not where the platform reaches it (a URL may carry a
    token; the log names it)."""
    text = text.replace(repr(url), "its URL").replace(url, "its URL")
    host = urlsplit(url).hostname
    # The name alone, not the same letters in other words (a host may be "api").
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])", "its host", text) if host \
        else text


def why_unreachable(exc: BaseException, url: str) -> str:
    """Why a connection to ``url`` failed, for users (:func:`without_address`)."""
    unresolved = unresolved_cause(exc)
    if unresolved is not None:
        return f"its host name does not resolve{f' ({unresolved.why})' if unresolved.why else ''}"
    return without_address(str(exc) or exc.__class__.__name__, url)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and would be delivered to, if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client behind the NAT
    if int(address) > 1 and any(address in net for net in _EMBEDDED_LOW32):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress, allow_loopback: bool = False) -> str | None:
    """Why the platform must not connect to ``address`` (None: it may)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return refusal(address.ipv4_mapped, allow_loopback)  # the same host, over IPv6
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)  # reached through a gateway: never our loopback
        why = refusal(inner) if inner is not None else None
        if why:
            return f"{why} (carried in {address})"
    if address.is_loopback:
        return None if allow_loopback else "a loopback address"
    if address.is_multicast:
        return "a multicast address"
    if not address.is_global or any(address in net for net in _NOT_GLOBAL):
        return "not a public address"
    return None


def _look_up(resolve: Resolver, host: str, port: int, timeout: float) -> list[tuple[Any, ...]]:
    """``resolve(host, port)`` on a lookup thread, waited for ``timeout`` seconds at most
    (for a free thread too); Unresolved past that."""
    ends = time.monotonic() + timeout
    late = Unresolved(host, f"no answer within {timeout:.3g}s")
    try:
        _LOOKUP_SLOTS.get(timeout=max(0.0, timeout))
    except queue.Empty:
        raise late from None  # every lookup thread is held by a lookup that still hangs
    answer: Future[list[tuple[Any, ...]]] = Future()

    def run() -> None:
        try:
            answer.set_result(resolve(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the caller, if it still waits
            answer.set_exception(exc)
        finally:
            _LOOKUP_SLOTS.put_nowait(None)

    try:
        threading.Thread(target=run, name="codeshot-dns", daemon=True).start()
    except BaseException:
        _LOOKUP_SLOTS.put_nowait(None)
        raise
    try:
        return answer.result(timeout=max(0.0, ends - time.monotonic()))
    except TimeoutError:
        raise late from None


def resolve_public(host: str, port: int, *, allow_loopback: bool,
                   resolver: Resolver | None = None,
                   timeout: float | None = None) -> list[IPAddress]:
    """Every address ``host`` resolves to, all of them allowed; RefusedAddress if one is
    not, Unresolved if there are none, or none within ``timeout`` seconds (by default
    ``MAX_LOOKUP_SECONDS``).

    One refused answer refuses the name: an attacker's DNS may order its answers."""
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        wait = MAX_LOOKUP_SECONDS if timeout is None else min(timeout, MAX_LOOKUP_SECONDS)
        try:
            infos = _look_up(resolver or socket.getaddrinfo, host, port, wait)
        except UnicodeError as exc:  # not a host name at all
            raise RefusedAddress(f"host {host!r} is not a valid host name") from exc
        except socket.gaierror as exc:
            raise Unresolved(host, exc.strerror or "") from exc
        addresses = list(dict.fromkeys(
            ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise Unresolved(host)
    for address in addresses:
        why = refusal(address, allow_loopback)
        if why:
            raise RefusedAddress(f"{host} resolves to {address}, {why}; refused")
    return addresses


def check_public_url(url: str, *, allow_loopback: bool, resolve: bool = True) -> str:
    """``url`` if it is an http(s) URL without credentials whose host resolves to allowed
    addresses (with ``resolve=False``, the host is checked only if it is an address)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RefusedAddress(f"URL {url!r} is not a valid URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RefusedAddress(f"URL {url!r} must be http(s)://host/...")
    if parts.username or parts.password:
        raise RefusedAddress("the URL must not carry credentials")
    host = parts.hostname
    default_port = 443 if parts.scheme == "https" else 80
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not resolve:
            return url
    try:
        resolve_public(host, port or default_port, allow_loopback=allow_loopback)
    except RefusedAddress as exc:
        raise RefusedAddress(f"URL {url!r}: {exc.message}") from None
    except Unresolved as exc:  # a URL given now must work now
        raise RefusedAddress(f"URL {url!r}: {exc}") from None
    return url
