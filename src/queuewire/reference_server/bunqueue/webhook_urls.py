"""Webhooks: what a delivery is (:class:`WebhookDelivery`, with its HMAC signature,
BQ-WEBHOOK-3), which targets are refused (BQ-WEBHOOK-1): :func:`webhook_url_error` for a
URL as given, :func:`webhook_host_error` for a host or a resolved address, and how a target
may be named in a log line (:func:`webhook_target`: ``scheme://host:port`` only, since a hook's
URL may carry credentials in its userinfo, path or query; issue 22 item 11)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .model import METADATA_HOSTS


@dataclass(frozen=True)
class WebhookDelivery:
    """One POST the shell should make: ``payload`` as JSON to ``url``; with a ``secret``, the
    hex HMAC-SHA256 of the exact body goes in an ``X-Webhook-Signature`` header (BQ-WEBHOOK-3,
    bunqueue's scheme)."""

    webhook_id: str
    url: str = field(repr=False)  # may carry credentials: see webhook_target
    event: str
    payload: Mapping[str, Any]
    secret: str | None = field(default=None, repr=False)

    def signature(self, body: bytes) -> str | None:
        if not self.secret:
            return None
        return hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()

    @property
    def target(self) -> str:
        """The URL as a log line may show it (:func:`webhook_target`)."""
        return webhook_target(self.url)


def webhook_target(url: Any) -> str:
    """``scheme://host:port`` of a webhook URL, the only part of it a log line shows: the
    userinfo, path, query and fragment may hold credentials (``http://user:pass@h/x?token=s``)
    and are never logged. A URL that does not parse is ``<invalid url>``."""
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return "<invalid url>"
    scheme = parts.scheme.lower()
    if not host or scheme not in ("http", "https"):
        return "<invalid url>"
    if port is None:
        port = 443 if scheme == "https" else 80
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"


def webhook_url_error(url: Any, *, allow_private: bool = False) -> str | None:
    """The ``errors`` name of the first rule ``url`` breaks (BQ-WEBHOOK-1), or None.

    Parsing follows what a WHATWG URL parser (bunqueue's) makes of the host, so the usual SSRF
    disguises are seen through: percent-encoding, Unicode look-alikes (IDNA mapping), IPv4 in
    decimal, octal or hex (``http://2130706433/``), IPv4 inside IPv6 (mapped, compatible,
    6to4, Teredo, NAT64). Nothing is resolved: a name that resolves to a private address is the
    shell's to refuse at delivery time, with :func:`webhook_host_error` on the address."""
    if not isinstance(url, str) or not url.strip():
        return "webhook_url_required"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme and scheme not in ("http", "https"):
            return "webhook_url_protocol"
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return "webhook_url_invalid"
    if not scheme or not host:
        return "webhook_url_invalid"
    host = _normalise_host(host)
    if host is None:
        return "webhook_url_invalid"
    return None if allow_private else webhook_host_error(host)


def webhook_host_error(host: str) -> str | None:
    """The ``errors`` name for a webhook host (a name or an address) that must not be called:
    localhost (and the other names hosts files give a loopback address, :data:`LOOPBACK_NAMES`;
    a fully-qualified ``name.`` as ``name``), loopback, private, link-local (cloud metadata lives
    there), unspecified or otherwise non-public addresses and metadata host names; None for a
    public host."""
    h = host.strip().strip("[]").rstrip(".").lower()
    if h in LOOPBACK_NAMES or h.endswith(".localhost"):
        return "webhook_url_localhost"
    ip = _host_ip(h)
    if isinstance(ip, str):   # "invalid": a malformed numeric host
        return "webhook_url_invalid"
    if ip is None:
        if h in METADATA_HOSTS or h.endswith(".internal"):
            return "webhook_url_metadata"
        return None
    return _ip_error(ip)


def _normalise_host(host: str) -> str | None:
    host = urllib.parse.unquote(host)
    if host.isascii():
        return host.lower()
    try:  # IDNA mapping (NFKC, case folding), as a browser's URL parser does
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return None


def _ipv4_number(part: str) -> int | None:
    """One part of a WHATWG IPv4 host: decimal, 0x-hex or 0-octal; None if not a number."""
    try:
        if part[:2].lower() == "0x":
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def _host_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | str | None:
    """The address a URL host denotes, "invalid" for a malformed numeric host, else None."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return "invalid"
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    last = parts[-1]
    if not (last.isdigit() or (last[:2].lower() == "0x"
                               and all(c in "0123456789abcdefABCDEF" for c in last[2:]))):
        return None  # a domain name (WHATWG: the host does not end in a number)
    numbers = [n for n in map(_ipv4_number, parts) if n is not None]
    if len(parts) > 4 or len(numbers) < len(parts):
        return "invalid"
    *head, tail = numbers
    if any(n > 255 for n in head) or tail >= 256 ** (5 - len(parts)):
        return "invalid"
    value = tail
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


_ULA = ipaddress.IPv6Network("fc00::/7")
#: NAT64's well-known prefix (RFC 6052): 64:ff9b::a.b.c.d is the IPv4 host a.b.c.d reached
#: through a NAT64 gateway, so it is judged as that address (64:ff9b::a9fe:a9fe is the cloud
#: metadata endpoint 169.254.169.254; issue 25).
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

#: Names the usual hosts files map to a loopback address (Debian's and Red Hat's /etc/hosts),
#: besides localhost itself and *.localhost: a resolver on the server's host turns each into
#: 127.0.0.1 or ::1, so they are localhost for BQ-WEBHOOK-1 (issue 25: bunqueue 2.9.5 accepts
#: http://localhost.localdomain/). Compared after the trailing dot of a fully-qualified name
#: is removed (``localhost.`` is localhost).
LOOPBACK_NAMES = frozenset({
    "localhost", "localhost.localdomain", "localhost4", "localhost4.localdomain4",
    "localhost6", "localhost6.localdomain6", "ip6-localhost", "ip6-loopback",
})


def _ip_error(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if ip.version == 6:
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and (ip in _NAT64
                                 or (ip.packed[:12] == bytes(12) and int(ip) > 1)):
            # NAT64 64:ff9b::a.b.c.d, or IPv4-compatible ::a.b.c.d
            embedded = ipaddress.IPv4Address(ip.packed[12:])
        if embedded is not None:
            return _ip_error(embedded)
    if ip.is_unspecified:
        return "webhook_url_unspecified"
    if ip.is_loopback:
        return "webhook_url_loopback"
    if ip.is_link_local:
        return "webhook_url_link_local"
    if ip.version == 6 and (ip in _ULA or not ip.is_global or ip.is_site_local
                            or ip.is_multicast or ip.is_reserved):
        return "webhook_url_private_ula" if ip in _ULA else "webhook_url_private"
    if not ip.is_global or ip.is_multicast or ip.is_reserved:
        return "webhook_url_private"
    return None
