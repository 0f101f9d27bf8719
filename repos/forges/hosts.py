"""Where the server may connect for a forge's API: public addresses, or networks an
operator allows (CLONE_ALLOWED_NETWORKS, as for clones). The host is resolved, every
address checked, and the caller connects to the checked address (Host and TLS SNI keep
the name), so a name that changes its answer between the check and the connection cannot
point the server at an internal service."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from repos.clone import address_allowed

from .errors import ForgeError


def _plain_host(host: str, *, bracketed: bool) -> bool:
    """An IPv6 literal, or a name in ASCII letters, digits, dots, hyphens and underscores:
    the Host header and TLS name are sent as they are, and must be ASCII."""
    if bracketed or ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return "%" not in host  # no zone: an interface of this server's
    return host.isascii() and all(ch.isalnum() or ch in "._-" for ch in host)


def forge_host_check(url: str) -> str:
    """The address to connect to for ``url``, after checking that every address its
    host resolves to is public or in an allowed network; ForgeError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # not a URL: a bracket left open, a port past 65535 …
        parts, port = urlsplit(""), 0
    if parts.scheme not in ("https", "http") or not parts.hostname or not port:
        raise ForgeError(f"The forge's API URL {url} is not an http(s) URL.", code="forge_bad_url")
    if not _plain_host(parts.hostname, bracketed="[" in parts.netloc):
        raise ForgeError(
            f"Write the forge's host in ASCII (an international name in its xn-- form): {url}", code="forge_bad_url"
        )
    try:
        addresses = list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(parts.hostname, port)))
    except (socket.gaierror, UnicodeError):
        raise ForgeError(
            f"The forge's host {parts.hostname} does not resolve. Check the API URL, or try again later.",
            code="forge_unreachable",
            retryable=True,
        ) from None
    if not addresses or not all(address_allowed(address) for address in addresses):
        raise ForgeError(
            f"The forge's host {parts.hostname} is on an internal address, which the server does not connect "
            "to (an operator can allow networks with CLONE_ALLOWED_NETWORKS).",
            code="forge_host_not_allowed",
        )
    return addresses[0]
