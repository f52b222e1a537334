"""The bunqueue reference server's HTTP side (document 000, "HTTP Endpoints"; BQ-HTTP-*).

:class:`HttpFrontend` serves, with :mod:`aiohttp.web`, the endpoints of the table mapped onto
engine commands (every request uses ``conn_id=None``: a job pulled over HTTP belongs to no
connection, so it is released by its lock/stall timers, not by a disconnect):

========================  ======  ===========================================================
``/health``               GET     ``{ok, status:"healthy", version, uptime, memory:{...}}``
``/healthz``              GET     liveness: ``{ok:true, status:"alive"}``
``/ready``                GET     readiness: 200 ``{ok:true, status:"ready"}`` while serving
``/prometheus``           GET     the Prometheus command's text, ``text/plain; version=0.0.4``
``/stats``                GET     the Stats command's reply (JSON)
``/queues/{queue}/jobs``  POST    PUSH with the JSON body's fields -> ``{ok, id}``
``/queues/{queue}/jobs``  GET     PULL (``?timeout=ms`` long-polls) -> ``{ok, job}``
``/jobs/{id}``            GET     GetJob -> ``{ok, job}``
``/jobs/{id}/ack``        POST    ACK with the body's ``result``/``token``
``/jobs/{id}/fail``       POST    FAIL with the body's ``error``/``token``
``/events``               GET     Server-Sent Events: the engine's events as they happen
``/ws``                   GET     WebSocket: JSON commands as over TCP, plus pushed events
========================  ======  ===========================================================

Every built request is checked with :class:`~queuewire.codecs.validation.BunqueueValidator`;
a violation is 400 ``{ok:false, error:"Invalid request: ..."}`` (the spec's
``invalid_request`` message), a body that is not a JSON object is 400 with
``invalid_command_format``. An unknown job is 404 (``job_not_found``); ACK/FAIL of a job that
exists but is not active is 409; any other refusal is 400. With auth tokens, every endpoint
but the Kubernetes probes (``/healthz``, ``/ready``) needs ``Authorization: Bearer <token>``,
compared in constant time (:func:`~.commands.auth.check_token`), else 401
``not_authenticated`` / ``invalid_token``.

Events (BQ-HTTP-12, BQ-HTTP-13), shaped after bunqueue 2.9.5's ``sseHandler`` and
``wsHandler``: the source is the engine's ``notify`` seam, the one this frontend already
chains for long polls and webhook wake-ups, so there is no second event bus: ``_notify`` hands
each :class:`~.engine.Event` to every open stream (an :class:`_EventStream`, a
bounded inbox: a reader that falls behind loses events, as bunqueue drops them under
backpressure, and never slows the engine). An event about a job is named ``job:<reason>``,
one about a queue ``queue:<reason>`` (the reason's words joined by ``-``: ``job:waiting``,
``job:left-active``, ``job:completed``, ``queue:resumed``), with the data
``{queue, jobId, timestamp}``. ``/events`` (and ``/events/queues/{queue}``, bunqueue's
filter: that queue's events only) answers ``text/event-stream``: first ``retry`` and a
``{"connected":true,"clientId":...}`` data line, then ``id:``/``event:``/``data:`` blocks
and a ``:heartbeat`` comment when ``heartbeat`` seconds pass without one. ``/ws`` (and
``/ws/queues/{queue}``) is a WebSocket connection of its own to the engine
(``connection_opened``/``connection_closed``: a job it pulled goes back to waiting when it
closes, as over TCP): each text (or UTF-8 binary) message is one JSON command map answered
through the same gate as a TCP frame (``invalid_command``, ``unknown_command``,
``invalid_request``, Auth, then ``engine.handle``; a long poll is parked in the same
:class:`~.waits.WaitRoom`), the reply carrying the request's ``reqId``; text that is not JSON
is answered ``invalid_command_format``. Like bunqueue's "legacy" clients, it is also sent every
event, as ``{eventType, queue, jobId, timestamp}``, and where the profile has SubscribeEvents
the engine's ``publish`` frames for it. Both endpoints are behind the Bearer check like every
other (the upgrade itself is refused with 401), and stopping the frontend ends every stream
and closes every WebSocket before the runner shuts down; a client that goes away is dropped
at once (``handler_cancellation``).

Cross-site requests (BQ-SAFE-2, issue 22 item 5): before the Bearer check, a
:class:`~.cross_site.CrossSiteGuard` refuses a ``Host`` that is neither loopback, an address,
the listen host nor configured (421 ``http_host_refused``) and a POST or WebSocket upgrade from
a foreign ``Origin`` (403 ``http_origin_refused``); a POST body not declared JSON is 415
``http_content_type``. Clients that send no ``Origin`` (curl, SDKs, the conformance runner)
are not affected.

WebSocket bounds (BQ-SAFE-1, BQ-PIPE-2, issue 22 item 4): a ``/ws`` connection has at most the
profile's ``max_in_flight`` commands in flight, as over TCP; only a parked long poll stays in
flight, and while all slots are held the next message is not read, so the rest wait, unread,
in arrival order (the peer is pinged meanwhile, so one that went away is still noticed).
Upgrades beyond ``safeguards.max_connections`` connections served at once (this frontend's
WebSockets and the TCP server's connections) are refused with 503 before the upgrade.

Webhooks are delivered by a :class:`~.webhook_delivery.WebhookDispatcher` (a queue per hook,
slots per host, BQ-WEBHOOK-1 target checks at delivery time), started and stopped with the
frontend and woken whenever a request may have queued deliveries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from ...codecs.bunqueue import FrameDecoder, FrameEncoder
from ...codecs.errors import EncodeError, ProtocolError
from ...codecs.validation import BunqueueValidator
from .._service import Service
from .commands.auth import check_token
from .connection import BunqueueConnection
from .cross_site import CrossSiteGuard, json_declared
from .engine import BunqueueEngine, request_refusal
from .gate import RequestGate
from .model import Event, Wait
from .waits import WaitRoom
from .webhook_delivery import SIGNATURE_HEADER, WebhookDispatcher, WebhookRefused


class ServesEngine(Protocol):
    """What the frontend needs of the TCP server it sits beside (no import of that module,
    which imports this one): its engine, and the auth tokens it was given. It also reads,
    when the server has them, ``connection_count`` (its open TCP connections, counted
    against ``max_connections``) and ``http_allowed_origins`` / ``http_allowed_hosts``
    (what ``queuewire serve bunqueue`` was given, for a frontend the server starts itself)."""

    engine: BunqueueEngine
    _tokens: tuple[str, ...]

__all__ = ["SIGNATURE_HEADER", "HttpFrontend", "WebhookRefused"]

log = logging.getLogger("queuewire.reference_server.bunqueue.http")
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PROBES = frozenset({"/healthz", "/ready"})  # Kubernetes probes carry no token
SSE_CONTENT_TYPE = "text/event-stream"
SSE_RETRY_MS = 3000          # bunqueue's SSE_RETRY_MS: the client's reconnection delay
HEARTBEAT = 30.0             # seconds: bunqueue's SSE_HEARTBEAT_MS
STREAM_BACKLOG = 1000        # events an open stream may have unread before it loses some
WS_MAX_MESSAGE = 1024 * 1024  # bunqueue's maxPayloadLength for /ws
WS_PROBE = 1.0               # seconds between pings to a /ws peer waiting for a free slot


@dataclass(eq=False)
class _EventStream:
    """One open ``/events`` stream or ``/ws`` connection hearing engine events: its optional
    queue filter and a bounded inbox (``None`` in it means the server is stopping)."""

    queue: str | None
    inbox: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(STREAM_BACKLOG))
    dropped: int = 0

    def offer(self, item: dict | None) -> None:
        try:
            self.inbox.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped += 1
            if item is None:  # the end must arrive: it takes the oldest event's place
                self.inbox.get_nowait()
                self.inbox.put_nowait(None)


def _event_record(event: Event) -> dict | None:
    """The name and data of one engine event as the streams send it (None: not sent)."""
    if event.queue is None or not event.reason:
        return None
    kind = "job" if event.job_id is not None else "queue"
    data: dict[str, Any] = {"queue": event.queue}
    if event.job_id is not None:
        data["jobId"] = event.job_id
    data["timestamp"] = time.time() * 1000.0
    return {"event": f"{kind}:{'-'.join(event.reason.split())}", "data": data}


class HttpFrontend(Service):
    """The HTTP API of a :class:`~.tcp.BunqueueServer` (its engine and auth tokens) or
    of a bare :class:`~.engine.BunqueueEngine` (``auth_tokens`` then given here).
    ``port=0`` picks a free port. ``allowed_origins`` (``scheme://host[:port]``) and
    ``allowed_hosts`` (names) are served besides the server's own origin and loopback hosts
    (BQ-SAFE-2; ``*`` allows any); when not given, a server's ``http_allowed_origins`` and
    ``http_allowed_hosts`` attributes are used, if it has them."""

    def __init__(self, server_or_engine: ServesEngine | BunqueueEngine,
                 host: str = "127.0.0.1", port: int = 0, *,
                 auth_tokens: tuple[str, ...] | list[str] | None = None,
                 allowed_origins: Iterable[str] | None = None,
                 allowed_hosts: Iterable[str] | None = None):
        self._server: ServesEngine | None = None
        if isinstance(server_or_engine, BunqueueEngine):
            self.engine = server_or_engine
            tokens: tuple[str, ...] = ()
        else:
            self._server = server_or_engine
            self.engine = server_or_engine.engine
            gate = getattr(server_or_engine, "gate", None)
            tokens = tuple(gate.tokens) if gate is not None else ()
            if allowed_origins is None:
                allowed_origins = getattr(server_or_engine, "http_allowed_origins", None)
            if allowed_hosts is None:
                allowed_hosts = getattr(server_or_engine, "http_allowed_hosts", None)
        if auth_tokens is not None:
            tokens = tuple(auth_tokens)
        self._tokens = tuple(t for t in tokens if t)
        self.host = host
        self.guard = CrossSiteGuard(host, allowed_origins=allowed_origins,
                                    allowed_hosts=allowed_hosts)
        self._port = port
        self.profile = self.engine.profile
        self._validator = BunqueueValidator(self.profile)
        self._encoder = FrameEncoder(self.profile, wide_integers=True)  # as the TCP shell's
        self._gate = RequestGate(self.engine, self._tokens, validator=self._validator)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._room = WaitRoom(self.engine)  # parked long polls
        self._unlisten: Callable[[], None] = lambda: None  # the engine hooks, once started
        self.webhooks = WebhookDispatcher(self.engine)
        self._max_in_flight = int(self.profile.limit("max_in_flight").value)  # per /ws
        # WebSockets served at once, with the TCP server's connections (tests lower it)
        self.max_connections = int(self.profile.model.safeguards["max_connections"])
        self._ws_open = 0  # upgrades admitted and not yet ended (counted before prepare)
        self._ready = False
        self.heartbeat = HEARTBEAT   # seconds between SSE heartbeats (tests shorten it)
        self._streams: set[_EventStream] = set()
        self._sockets: dict[str, tuple[web.WebSocketResponse, _EventStream]] = {}  # open /ws
        self._event_ids = 0

    # -- lifecycle
    async def start(self) -> HttpFrontend:
        if self._runner is not None:
            raise RuntimeError("the HTTP frontend is already started")
        app = web.Application(middlewares=[self._cross_site_middleware, self._auth_middleware])
        app.router.add_get("/health", self._health)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/ready", self._readyz)
        app.router.add_get("/prometheus", self._prometheus)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/queues/{queue}/jobs", self._push)
        app.router.add_get("/queues/{queue}/jobs", self._pull)
        app.router.add_get("/jobs/{id}", self._get_job)
        app.router.add_post("/jobs/{id}/ack", self._ack)
        app.router.add_post("/jobs/{id}/fail", self._fail)
        app.router.add_get("/events", self._events)
        app.router.add_get("/events/queues/{queue}", self._events)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/ws/queues/{queue}", self._websocket)
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._site = runner, site
        bound = runner.addresses   # the sockets' names: the bound port (port 0 asked)
        if bound:
            self._port = bound[0][1]
        self._unlisten = self.engine.listen(notify=self._notify, publish=self._publish)
        await self.webhooks.start()
        self._ready = True
        log.info("bunqueue HTTP API listening on %s:%d", self.host, self._port)
        return self

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._ready = False
        self._unlisten()
        for stream in self._streams:
            stream.offer(None)  # ends each /events response and /ws event sender
        for ws, _ in list(self._sockets.values()):
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        self._room.cancel_all()
        await self.webhooks.stop()
        await runner.cleanup()

    @property
    def event_streams(self) -> int:
        """How many ``/events`` streams and ``/ws`` connections hear events now."""
        return len(self._streams)

    @property
    def websockets(self) -> int:
        """How many ``/ws`` connections are open now."""
        return len(self._sockets)

    @property
    def parked_polls(self) -> int:
        """Long polls (``GET /queues/{queue}/jobs?timeout=``, over ``/ws``) parked now."""
        return self._room.parked

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    # -- plumbing
    def _message(self, name: str, **fields: Any) -> str:
        return self.engine.error_message(name, **fields)

    def _refuse(self, status: int, error: str) -> web.Response:
        return web.json_response({"ok": False, "error": error}, status=status)

    @web.middleware
    async def _cross_site_middleware(self, request: web.Request,
                                     handler: Any) -> web.StreamResponse:
        refusal = self.guard.refusal(request.method, request.headers, self.url)
        if refusal is not None:  # BQ-SAFE-2
            status, name, fields = refusal
            return self._refuse(status, self._message(name, **fields))
        return await handler(request)

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._tokens and request.path not in PROBES:
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return self._refuse(401, self._message("not_authenticated"))
            if not check_token(self._tokens, token.strip()):
                return self._refuse(401, self._message("invalid_token"))
        return await handler(request)

    async def _body(self, request: web.Request) -> dict | web.Response:
        """The request's JSON object body ({} when empty), or a 400 response; 415 for a body
        not declared JSON (BQ-SAFE-2: a browser sends text/plain, form and multipart bodies
        cross-site without a preflight, never application/json). An empty body passes
        whatever its declared type (aiohttp's client declares application/octet-stream)."""
        raw = await request.read()
        if not raw.strip():
            return {}
        if not json_declared(request.headers.get("Content-Type")):
            return self._refuse(415, self._message("http_content_type"))
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return self._refuse(400, self._message("invalid_command_format"))
        if not isinstance(body, dict):
            return self._refuse(400, self._message("invalid_command_format"))
        return body

    def _violation(self, request: dict) -> dict | None:
        """The spec's error reply for a request the validator refuses, else None (after
        :meth:`_unwritable`)."""
        return self._unwritable(request) or request_refusal(self.engine, self._validator, request)

    def _unwritable(self, request: dict) -> dict | None:
        """The error reply for a JSON request that a TCP client could not have sent: it is
        first written as the MessagePack frame a TCP client would have sent and read back by
        the profile's decoder, so a value the TCP side could never carry (an integer beyond
        64 bits, a lone surrogate, nesting past max_nesting_depth) is refused here, when it
        arrives, rather than accepted and then undeliverable to a TCP worker
        (BQ-MSGPACK-8)."""
        try:
            FrameDecoder(self.profile).feed(self._encoder.encode(request))
        except ProtocolError as exc:  # EncodeError is one: not writable at all
            rule = "BQ-MSGPACK-8" if isinstance(exc, EncodeError) else exc.requirement
            detail = f"[{rule}] {exc.detail}"
            return {"ok": False, "error": self._message("invalid_request", detail=detail)}
        return None

    async def _call(self, request: dict) -> dict | web.Response:
        """Validate and run one engine request; a violation is a 400 response."""
        refusal = self._violation(request)
        if refusal is not None:
            return web.json_response(refusal, status=400)
        reply = self.engine.handle(None, request)
        if isinstance(reply, Wait):
            reply = await self._room.park(None, reply)
        self._wake_deliveries()
        return reply

    def _answer(self, reply: dict | web.Response, *, missing: str | None = None,
                status_ok: int = 200) -> web.Response:
        if isinstance(reply, web.Response):
            return reply
        if reply.get("ok") is False:
            status = 404 if missing is not None and reply.get("error") == missing else 400
            return web.json_response(reply, status=status)
        return web.json_response(reply, status=status_ok)

    def _notify(self, event: Event) -> None:
        self._room.wake(event)
        self._wake_deliveries()
        if self._streams:
            record = _event_record(event)
            if record is not None:
                for stream in self._streams:
                    if stream.queue is None or stream.queue == event.queue:
                        stream.offer(record)

    def _publish(self, conn_ids: tuple[str, ...], frame: dict) -> None:
        """The engine's SubscribeEvents hook: frames for /ws connections go to them (the
        others are not this front end's: the TCP server's own hook writes those)."""
        for conn_id in conn_ids:
            socket_ = self._sockets.get(conn_id)
            if socket_ is not None:  # sent in order with its other events
                socket_[1].offer({"frame": frame})

    # -- endpoints
    async def _health(self, request: web.Request) -> web.Response:
        metrics = self.engine.handle(None, {"cmd": "Metrics"})
        m = metrics.get("metrics", {}) if isinstance(metrics, dict) else {}
        uptime = time.time() * 1000.0 - self.engine.started_at
        return web.json_response({
            "ok": True, "status": "healthy", "version": self.engine.config.server_version,
            "uptime": uptime,
            "memory": {"usageMb": m.get("memoryUsageMb"), "sqliteSizeMb": m.get("sqliteSizeMb")},
            "connections": m.get("activeConnections")})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "status": "alive"})

    async def _readyz(self, request: web.Request) -> web.Response:
        if not self._ready:
            return web.json_response({"ok": False, "status": "not ready"}, status=503)
        return web.json_response({"ok": True, "status": "ready"})

    async def _prometheus(self, request: web.Request) -> web.Response:
        reply = await self._call({"cmd": "Prometheus"})
        if isinstance(reply, web.Response) or not reply.get("ok"):
            return self._answer(reply)
        return web.Response(body=reply["data"]["metrics"].encode(),
                            headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def _stats(self, request: web.Request) -> web.Response:
        return self._answer(await self._call({"cmd": "Stats"}))

    async def _push(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        body.pop("cmd", None)
        body.pop("reqId", None)
        return self._answer(await self._call(
            {**body, "cmd": "PUSH", "queue": request.match_info["queue"]}))

    async def _pull(self, request: web.Request) -> web.Response:
        req: dict[str, Any] = {"cmd": "PULL", "queue": request.match_info["queue"]}
        for name in ("timeout", "lockTtl"):
            value = request.query.get(name)
            if value is not None:
                try:
                    req[name] = int(value)
                except ValueError:
                    req[name] = value  # the validator words the refusal
        if request.query.get("owner"):
            req["owner"] = request.query["owner"]
        return self._answer(await self._call(req))

    async def _get_job(self, request: web.Request) -> web.Response:
        return self._answer(await self._call({"cmd": "GetJob", "id": request.match_info["id"]}),
                            missing=self._message("job_not_found"))

    async def _settle(self, request: web.Request, cmd: str, fields: tuple[str, ...]) -> \
            web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        job_id = request.match_info["id"]
        req = {"cmd": cmd, "id": job_id, **{k: body[k] for k in fields if k in body}}
        reply = await self._call(req)
        if isinstance(reply, dict) and reply.get("ok") is False \
                and reply.get("error") == self._message("job_not_processing", id=job_id):
            known = self.engine.handle(None, {"cmd": "GetState", "id": job_id})
            status = 409 if isinstance(known, dict) and known.get("ok") else 404
            return web.json_response(reply, status=status)
        return self._answer(reply)

    async def _ack(self, request: web.Request) -> web.Response:
        return await self._settle(request, "ACK", ("result", "token"))

    async def _fail(self, request: web.Request) -> web.Response:
        return await self._settle(request, "FAIL", ("error", "token", "unrecoverable",
                                                    "removeOnFail", "stack"))

    # -- events (BQ-HTTP-13) and WebSocket (BQ-HTTP-12)
    def _event_block(self, record: dict) -> bytes:
        self._event_ids += 1
        data = json.dumps(record["data"], separators=(",", ":"))
        return f"id: {self._event_ids}\nevent: {record['event']}\ndata: {data}\n\n".encode()

    async def _events(self, request: web.Request) -> web.StreamResponse:
        stream = _EventStream(request.match_info.get("queue"))
        response = web.StreamResponse(headers={"Content-Type": SSE_CONTENT_TYPE,
                                               "Cache-Control": "no-cache"})
        self._streams.add(stream)
        try:
            await response.prepare(request)
            hello = json.dumps({"connected": True, "clientId": str(uuid.uuid4())},
                               separators=(",", ":"))
            await response.write(f"retry: {SSE_RETRY_MS}\ndata: {hello}\n\n".encode())
            while True:
                try:
                    async with asyncio.timeout(self.heartbeat):
                        record = await stream.inbox.get()
                except TimeoutError:
                    await response.write(b":heartbeat\n\n")
                    continue
                if record is None:  # the server is stopping
                    break
                await response.write(self._event_block(record))
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away
        finally:
            self._streams.discard(stream)
        return response

    async def _ws_send(self, ws: web.WebSocketResponse, message: dict) -> None:
        if ws.closed:
            return
        try:
            await ws.send_str(json.dumps(message, separators=(",", ":")))
        except (ConnectionResetError, ConnectionError, RuntimeError):
            pass  # it closed meanwhile: its handler cleans up

    def _ws_command(self, link: BunqueueConnection, text: str) -> tuple[Any, dict | Wait]:
        """The request in one WebSocket message and its reply (without reqId), or the Wait
        of a long poll: written as MessagePack (:meth:`_unwritable`), then the TCP server's
        request gate (:class:`~.gate.RequestGate`: shape, Auth, schema) and the engine. The
        connection is authenticated already (the upgrade passed the bearer token) and has no
        rate window (the TCP server's is per TCP connection)."""
        try:
            request = json.loads(text)
        except (ValueError, RecursionError):
            return None, {"ok": False, "error": self._message("invalid_command_format")}
        refusal = self._unwritable(request) if type(request) is dict else None
        if refusal is not None:
            return request, refusal
        reply = link.request(request)
        self._wake_deliveries()
        return request, reply

    async def _ws_park(self, ws: web.WebSocketResponse, conn_id: str, request: dict,
                       wait: Wait) -> None:
        reply = await self._room.park(conn_id, wait)
        await self._ws_send(ws, BunqueueConnection.with_req_id(request, reply))

    async def _ws_events(self, ws: web.WebSocketResponse, stream: _EventStream) -> None:
        while True:
            record = await stream.inbox.get()
            if record is None:
                return
            if "frame" in record:  # a SubscribeEvents frame, as the engine made it
                await self._ws_send(ws, record["frame"])
                continue
            data = record["data"]
            await self._ws_send(ws, {"eventType": record["event"].partition(":")[2], **data})

    def _connections(self) -> int:
        """Connections counted against ``max_connections``: WebSockets admitted here and the
        TCP server's connections (when this frontend sits beside one)."""
        tcp = getattr(self._server, "connection_count", 0) if self._server is not None else 0
        return self._ws_open + (tcp if isinstance(tcp, int) else 0)

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if self._connections() >= self.max_connections:  # BQ-SAFE-1: refused at the upgrade
            return self._refuse(503, self._message("http_connection_limit",
                                                   max=self.max_connections))
        self._ws_open += 1  # before the first await, so concurrent upgrades see it
        try:
            return await self._serve_websocket(request)
        finally:
            self._ws_open -= 1

    async def _serve_websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=WS_MAX_MESSAGE)
        await ws.prepare(request)
        conn_id = f"ws-{uuid.uuid4()}"
        stream = _EventStream(request.match_info.get("queue"))
        self.engine.connection_opened(conn_id)
        # the TCP server's sans-IO connection, without frames; authenticated at the upgrade
        link = BunqueueConnection(conn_id, self._gate, None, self._room, framed=False,
                                  authenticated=True)
        self._sockets[conn_id] = (ws, stream)
        self._streams.add(stream)
        tasks: set[asyncio.Task] = {asyncio.create_task(self._ws_events(ws, stream))}
        slots = asyncio.Semaphore(self._max_in_flight)  # BQ-PIPE-2: commands in flight
        try:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    text = message.data
                elif message.type == aiohttp.WSMsgType.BINARY:
                    text = message.data.decode("utf-8", "replace")
                else:
                    continue
                if not await self._ws_slot(ws, slots):
                    break  # the peer went away meanwhile
                req, reply = self._ws_command(link, text)
                if isinstance(reply, Wait):  # a long poll: answered when it ends
                    task = asyncio.create_task(self._ws_park(ws, conn_id, req, reply))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    task.add_done_callback(lambda _: slots.release())
                else:  # answered in arrival order
                    slots.release()
                    await self._ws_send(ws, link.with_req_id(req, reply))
        finally:
            # synchronous first: the handler may be cancelled at its next await (the peer
            # went away); a cancelled park never reaches engine.retry
            for task in tasks:
                task.cancel()
            released = self.engine.connection_closed(conn_id)
            if released:
                log.info("websocket %s closed: %d active jobs back to waiting", conn_id,
                         len(released))
            self._sockets.pop(conn_id, None)
            self._streams.discard(stream)
            await asyncio.gather(*tasks, return_exceptions=True)
            if not ws.closed:
                await ws.close()
        return ws

    @staticmethod
    async def _ws_slot(ws: web.WebSocketResponse, slots: asyncio.Semaphore) -> bool:
        """Take one of the connection's slots (True), or find the peer gone (False). While all
        are held the socket is not read (aiohttp pauses it), so a peer that went away would go
        unnoticed: a ping every ``WS_PROBE`` seconds makes its kernel answer with a reset,
        and the next write fails (and the lost connection cancels the handler)."""
        while True:
            try:
                async with asyncio.timeout(WS_PROBE):
                    await slots.acquire()
                    return True
            except TimeoutError:
                if ws.closed:
                    return False
                try:
                    await ws.ping()
                except (ConnectionError, RuntimeError):
                    return False

    def _wake_deliveries(self) -> None:
        self.webhooks.wake()
