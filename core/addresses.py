"""Which network addresses the server may connect to on a user's say-so: public ones,
or those in networks an operator allows (CLONE_ALLOWED_NETWORKS). Clone and push URLs,
forge APIs and a project's own model endpoint all ask this one rule, so that nobody can
point the server at its own internal services (loopback, private, link-local — cloud
metadata at 169.254.169.254 —, shared and reserved ranges, multicast)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(value, strict=False) for value in settings.CLONE_ALLOWED_NETWORKS]


def address_allowed(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in _allowed_networks()):
        return True
    return ip.is_global and not ip.is_multicast


def address_is_local(address: str) -> bool:
    """Loopback, private or link-local: a machine of one's own, not a paid service."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local


class EndpointRefused(ValueError):
    """An endpoint URL the server will not connect to; ``reason`` says why: "bad_url",
    "unresolved" (perhaps only for now) or "internal"."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def endpoint_parts(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL; EndpointRefused("bad_url") otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a bracket left open, a port past 65535 …
        raise EndpointRefused(f"{url} is not an http(s) URL.", reason="bad_url") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise EndpointRefused(f"{url} is not an http(s) URL.", reason="bad_url")
    host = parts.hostname
    if not (host.isascii() and all(ch.isalnum() or ch in "._-:" for ch in host)):
        raise EndpointRefused(
            f"Write the host in ASCII (an international name in its xn-- form): {url}", reason="bad_url"
        )
    return parts.scheme, host, port


def endpoint_addresses(url: str) -> list[str]:
    """Every address ``url``'s host resolves to (EndpointRefused when it does not)."""
    _, host, port = endpoint_parts(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise EndpointRefused(f"The host {host} does not resolve.", reason="unresolved") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def endpoint_host_check(url: str) -> str:
    """The address to connect to for ``url``: every address its host resolves to must be
    public or in an allowed network (EndpointRefused("internal") otherwise). The caller
    connects to the returned address, so a second DNS answer cannot send it elsewhere."""
    addresses = endpoint_addresses(url)
    if not addresses or not all(address_allowed(address) for address in addresses):
        raise EndpointRefused(
            f"The host {endpoint_parts(url)[1]} is on an internal address, which the server does not connect to "
            "(an operator can allow networks with CLONE_ALLOWED_NETWORKS).",
            reason="internal",
        )
    return addresses[0]


def endpoint_is_local(url: str) -> bool:
    """Whether ``url`` is served from this machine or a private network (every address
    loopback, private or link-local): a model one runs oneself, which costs nothing per
    token. A host that does not resolve is not called local."""
    try:
        addresses = endpoint_addresses(url)
    except EndpointRefused:
        return False
    return bool(addresses) and all(address_is_local(address) for address in addresses)
