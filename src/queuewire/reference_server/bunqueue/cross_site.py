"""What the bunqueue HTTP API refuses so that a web page cannot use it (BQ-SAFE-2, issue 22
item 5): :class:`CrossSiteGuard` and :func:`json_declared`.

With no token (the default) a page open in a browser on the server's machine could otherwise
create jobs and read them: a browser sends a ``text/plain`` form POST, a WebSocket upgrade
and a request to a name the page's author rebinds to 127.0.0.1 without any CORS preflight.
So, before anything else (the HTTP shell runs :meth:`CrossSiteGuard.refusal` ahead of its
Bearer check):

* ``Host``: a request whose Host names neither a loopback name (``localhost``,
  ``*.localhost``), an address literal (which DNS rebinding cannot produce: the page's origin
  would then be the address itself), the listen host nor a configured host (``allowed_hosts``,
  ``--http-allowed-host``; ``*`` allows any) is 421 ``http_host_refused``. A request without a
  Host name is not a browser's and passes.
* ``Origin``: a POST or WebSocket upgrade carrying an Origin that is neither the server's own
  (``http://`` + the request's Host, or the frontend's URL) nor configured
  (``allowed_origins``, ``--http-allowed-origin``; ``*`` allows any) is 403
  ``http_origin_refused``. Origins compare as ``scheme://host:port`` with the default port
  filled in; ``null`` (a sandboxed page, a file) passes only when configured as such. A
  request without Origin (curl, SDKs, the conformance runner) passes: browsers send one on
  every POST and upgrade.
* body type (:func:`json_declared`, checked where a POST body is read): a non-empty body must
  be declared ``application/json`` or ``application/*+json`` (the types a browser cannot send
  cross-site without a preflight), else 415 ``http_content_type``; an empty body passes
  whatever its declared type (aiohttp's client declares ``application/octet-stream``).

Refusals are returned as ``(status, error name, fields)`` for the shell to word with the
spec's ``errors``; this module holds no message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping

from yarl import URL

__all__ = ["CrossSiteGuard", "host_name", "json_declared", "origin_key"]


def host_name(header: str) -> str:
    """The host of a ``Host`` header: without its port, brackets and final dot, lower-cased."""
    text = header.strip()
    if text.startswith("["):
        name = text[1:].partition("]")[0]
    else:
        name = text.rpartition(":")[0] if ":" in text else text
    return name.rstrip(".").lower()


def origin_key(origin: str) -> str | None:
    """An origin as ``scheme://host:port`` (the default port filled in) for comparison; None
    for one that is not a ``scheme://host[:port]`` (``null``, garbage)."""
    try:
        url = URL(origin.strip().rstrip("/"))
        host, port = url.host, url.port
    except (ValueError, TypeError):
        return None
    if not url.scheme or not host or port is None or url.path not in ("", "/"):
        return None
    host = host.rstrip(".").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{url.scheme.lower()}://{host}:{port}"


def json_declared(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` declares JSON (``application/json``, ``application/*+json``)."""
    mime = (content_type or "").partition(";")[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/")
                                          and mime.endswith("+json"))


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _configured(values: Iterable[str] | None,
                normalise: Callable[[str], str | None]) -> frozenset[str]:
    out = set()
    for value in values or ():
        text = str(value).strip()
        if text == "*":
            out.add("*")
        elif text:
            out.add(normalise(text) or text.lower())
    return frozenset(out)


class CrossSiteGuard:
    """The Host and Origin rules of one HTTP frontend listening on ``listen_host``, with the
    origins and hosts it was configured to serve besides its own."""

    def __init__(self, listen_host: str, *, allowed_origins: Iterable[str] | None = None,
                 allowed_hosts: Iterable[str] | None = None):
        self.listen_host = host_name(listen_host)
        self.allowed_origins = _configured(allowed_origins, origin_key)
        self.allowed_hosts = _configured(allowed_hosts, host_name)

    def refusal(self, method: str, headers: Mapping[str, str],
                own_url: str) -> tuple[int, str, dict[str, str]] | None:
        """``(status, error name, fields)`` for a request to refuse, else None."""
        host = headers.get("Host")
        if host is not None and not self.host_allowed(host_name(host)):
            return 421, "http_host_refused", {"host": host_name(host)}
        origin = headers.get("Origin")
        if origin is None:
            return None
        upgrade = headers.get("Upgrade", "").lower() == "websocket"
        if (method == "POST" or upgrade) and not self.origin_allowed(origin, host, own_url):
            return 403, "http_origin_refused", {"origin": origin}
        return None

    def host_allowed(self, name: str) -> bool:
        return (not name or name == "localhost" or name.endswith(".localhost")
                or _ip_literal(name) or name == self.listen_host
                or "*" in self.allowed_hosts or name in self.allowed_hosts)

    def origin_allowed(self, origin: str, host: str | None, own_url: str) -> bool:
        if "*" in self.allowed_origins:
            return True
        key = origin_key(origin)
        if key is None:  # "null" or garbage: only if configured as such
            return origin.strip().lower() in self.allowed_origins
        own = {origin_key(own_url)}
        if host:
            own.add(origin_key(f"http://{host}"))
        return key in own or key in self.allowed_origins
