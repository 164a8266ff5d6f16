"""Which agent URLs the platform will call: http(s) to public addresses only.

Agent URLs come from users, and the platform calls them from inside the user's AWS
account, so a URL pointing at a private network, link-local range or the instance
metadata service would let a user make the platform call things it must not (SSRF).
Local mode (the embedded stack) also allows loopback, where its agents run.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from codeshot.errors import InvalidInput


def _refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address, allow_loopback: bool) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address.is_loopback:
        return not allow_loopback
    return (
        address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def check_agent_url(url: str, *, allow_loopback: bool, resolve: bool = True) -> str:
    """Return ``url`` if the platform may call it, else raise INVALID_INPUT."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"agent URL {url!r} is not a valid URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"agent URL {url!r} must be http(s)://host/...")
    if parts.username or parts.password:
        raise InvalidInput("agent URL must not carry credentials")
    host = parts.hostname
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if not resolve:
            return url
        try:
            infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
        except socket.gaierror as exc:
            raise InvalidInput(f"agent host {host!r} does not resolve") from exc
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if _refused(address, allow_loopback):
            raise InvalidInput(
                f"agent URL {url!r} points at a non-public address ({address}); refused"
            )
    return url
