"""HTTP requests of conformance cases: the bunqueue server's HTTP API (document 000, BQ-HTTP-*).

A bunqueue server may serve an HTTP API next to its TCP protocol, on its own port. The runner
knows it as the *HTTP target* (``--http-target HOST:PORT``; the embedded reference server
starts its HTTP API on an ephemeral port and sets it itself). :func:`request` makes one request
with an ``aiohttp`` client session (no connection reuse: each request stands alone) and
returns an :class:`HttpReply` (status, headers, body text, the body parsed as JSON when it is
JSON), or an :class:`HttpReply` whose ``error`` says why nothing usable came back (refused,
reset, timed out): that is the target failing the step, never an ERROR of the case. With
``--auth-token`` every request carries ``Authorization: Bearer <token>`` unless told not to.
``stream`` requests (Server-Sent Events, a WebSocket upgrade) read the status and headers and
at most :data:`STREAM_BYTES` of body for :data:`STREAM_WINDOW` seconds, then close. Both the
request and the reply are recorded in the case transcript as ``note`` events on connection 0
(not a TCP connection of the case; replay does not resend them) whose decoded view is
``{"http": "request" | "response", ...}`` with long strings capped like every other view.
:func:`http_mismatch` judges an ``http:`` outcome (``status``, ``json``, ``headers``,
``content_type``, ``text``) against a reply.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from .matching import subset_mismatch
from .model import Transcript
from .wire import cap_view

HTTP_CONN = 0            # the transcript's connection number for HTTP exchanges
STREAM_WINDOW = 0.3      # seconds of a streamed body read before closing
STREAM_BYTES = 1 << 16   # bytes of a streamed body read at most
BODY_RECORD = 1 << 16    # bytes of a request or response body kept in the transcript
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
REQUEST_KEYS = {"method", "path", "json", "body", "headers", "query", "stream"}
OUTCOME_KEYS = {"status", "json", "headers", "content_type", "text"}


@dataclass
class HttpReply:
    """What one HTTP request got: ``error`` is set when no response came."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    text: str = ""
    json: Any = None
    is_json: bool = False
    error: str | None = None

    def view(self) -> dict[str, Any]:
        if self.error is not None:
            return {"http": "no response", "error": self.error}
        out: dict[str, Any] = {"http": "response", "status": self.status,
                               "headers": self.headers}
        if self.is_json:
            out["json"] = self.json
        elif self.text:
            out["text"] = self.text
        return cap_view(out)


def parse_http_target(s: str) -> tuple[str, int]:
    """``HOST:PORT`` of an HTTP API (a one-line ``ValueError`` otherwise)."""
    host, sep, port = (s or "").strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http-target {s!r} is not HOST:PORT (port 1-65535)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def url_of(target: tuple[str, int], path: str) -> str:
    host, port = target
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}{path}"


async def request(transcript: Transcript, target: tuple[str, int], method: str, path: str, *,
                  json_body: Any = None, body: str | bytes | None = None,
                  headers: dict[str, str] | None = None, query: dict[str, Any] | None = None,
                  token: str | None = None, stream: bool = False,
                  timeout: float = 5.0) -> HttpReply:
    """Make one request to the HTTP target, recording both sides; never raises for the
    target's behaviour (a refused or silent server is an ``HttpReply`` with ``error``)."""
    import aiohttp

    hdrs = {str(k): str(v) for k, v in (headers or {}).items()}
    if token and not any(k.lower() == "authorization" for k in hdrs):
        hdrs["Authorization"] = f"Bearer {token}"
    data: bytes | None = None
    if json_body is not None:
        data = json.dumps(json_body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    elif body is not None:
        data = body.encode() if isinstance(body, str) else bytes(body)
    params = {str(k): str(v) for k, v in (query or {}).items()}
    url = url_of(target, path)
    shown = {k: ("Bearer <token>" if k.lower() == "authorization" and token else v)
             for k, v in hdrs.items()}
    req_view: dict[str, Any] = {"http": "request", "method": method, "url": url}
    if params:
        req_view["query"] = params
    if shown:
        req_view["headers"] = shown
    if json_body is not None:
        req_view["json"] = json_body
    elif body is not None:
        req_view["body"] = body if isinstance(body, str) else bytes(body).hex()
    transcript.add(HTTP_CONN, "note", (data or b"")[:BODY_RECORD], cap_view(req_view),
                   f"HTTP {method} {path}")
    reply = HttpReply()
    try:
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(timeout=client_timeout, connector=connector,
                                         auto_decompress=True) as session:
            async with session.request(method, url, data=data, headers=hdrs, params=params,
                                       allow_redirects=False,
                                       read_until_eof=not stream) as resp:
                reply.status = resp.status
                reply.headers = {k.lower(): v for k, v in resp.headers.items()}
                raw = await _read_stream(resp) if stream else await resp.read()
    except TimeoutError:
        reply.error = f"no HTTP response within {timeout:g} s"
    except aiohttp.ClientConnectorError as exc:
        reply.error = f"cannot connect to {target[0]}:{target[1]}: {exc.os_error or exc}"
    except (aiohttp.ClientError, OSError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        reply.error = f"the HTTP exchange failed: {type(exc).__name__}: {text}".rstrip(": ")
    if reply.error is None:
        reply.text = raw.decode("utf-8", "replace")
        try:
            reply.json, reply.is_json = json.loads(reply.text), True
        except ValueError:
            pass
        transcript.add(HTTP_CONN, "note", raw[:BODY_RECORD], reply.view(),
                       f"HTTP {reply.status} ({reply.headers.get('content-type', 'no type')})")
    else:
        transcript.add(HTTP_CONN, "note", b"", reply.view(), f"HTTP: {reply.error}")
    return reply


async def _read_stream(resp: Any) -> bytes:
    """What a streamed body sends within the window (SSE, an upgraded socket)."""
    got = b""
    loop = asyncio.get_running_loop()
    end = loop.time() + STREAM_WINDOW
    while len(got) < STREAM_BYTES:
        left = end - loop.time()
        if left <= 0:
            break
        try:
            chunk = await asyncio.wait_for(resp.content.readany(), left)
        except (TimeoutError, Exception):  # noqa: BLE001 - a stream that stops is judged as is
            break
        if not chunk:
            break
        got += chunk
    resp.close()
    return got


def http_mismatch(want: dict[str, Any], reply: HttpReply | None) -> str | None:
    """Why ``reply`` does not match the ``http:`` outcome ``want`` (None: it does)."""
    if reply is None:
        return "no HTTP request was made"
    if reply.error is not None:
        return reply.error
    status = want.get("status")
    if status is not None:
        allowed = status if isinstance(status, list) else [status]
        if reply.status not in allowed:
            return f"HTTP status {reply.status}, not {' or '.join(map(str, allowed))}"
    ctype = want.get("content_type")
    if ctype is not None:
        got = reply.headers.get("content-type", "").split(";")[0].strip().lower()
        if got != str(ctype).lower():
            return f"content type {got or '(none)'!r}, not {ctype!r}"
    if "headers" in want:
        why = subset_mismatch({str(k).lower(): v for k, v in want["headers"].items()},
                              reply.headers, "headers")
        if why:
            return why
    if "json" in want:
        if not reply.is_json:
            return f"the body is not JSON: {reply.text[:80]!r}"
        why = subset_mismatch(want["json"], reply.json, "json")
        if why:
            return why
    if "text" in want and re.search(want["text"], reply.text) is None:
        return f"the body does not match /{want['text']}/: {reply.text[:80]!r}"
    return None


def describe_outcome(want: dict[str, Any]) -> str:
    parts = []
    if "status" in want:
        parts.append(f"status {want['status']}")
    if "content_type" in want:
        parts.append(want["content_type"])
    if "json" in want:
        parts.append(f"JSON containing {want['json']}")
    if "headers" in want:
        parts.append(f"headers {want['headers']}")
    if "text" in want:
        parts.append(f"a body matching /{want['text']}/")
    return "an HTTP response" + (f" ({', '.join(parts)})" if parts else "")


def check_request(body: Any, where: str) -> str | None:
    """Why an ``http:`` step body breaks the case language (None: it is fine)."""
    if not isinstance(body, dict):
        return "http: takes {method: M, path: /p, ...}"
    bad = sorted(set(body) - REQUEST_KEYS)
    if bad:
        return f"http: unknown key {bad[0]!r} (allowed: {', '.join(sorted(REQUEST_KEYS))})"
    if body.get("method", "GET") not in METHODS:
        return f"http: method must be one of {', '.join(METHODS)}"
    if not isinstance(body.get("path"), str) or not body["path"].startswith("/"):
        return "http: path: takes a string starting with /"
    if "json" in body and "body" in body:
        return "http: json: and body: exclude each other"
    for key in ("headers", "query"):
        if key in body and not isinstance(body[key], dict):
            return f"http: {key}: takes a map"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "http: stream: takes true or false"
    return None


def check_outcome(want: Any) -> str | None:
    """Why an ``http:`` outcome breaks the case language (None: it is fine)."""
    if not isinstance(want, dict):
        return "http: (outcome) takes {status: N, json: {subset}, ...}"
    bad = sorted(set(want) - OUTCOME_KEYS)
    if bad:
        return f"http: unknown outcome key {bad[0]!r} (allowed: {', '.join(sorted(OUTCOME_KEYS))})"
    status = want.get("status")
    if status is not None:
        values = status if isinstance(status, list) else [status]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return "http: status: takes a status code or a list of them"
    if "headers" in want and not isinstance(want["headers"], dict):
        return "http: headers: takes a map"
    if "text" in want:
        try:
            re.compile(str(want["text"]))
        except re.error as exc:
            return f"http: text: bad regex: {exc}"
    return None
