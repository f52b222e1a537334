"""The tap's in-loop forwarder (``queuewire tap --forwarder loop``): a transparent TCP proxy
on the analyzer's own asyncio loop, the tap's forwarder before :mod:`.forwarder`.

Each accepted client gets its own upstream connection (the client is not read until the
upstream answers; if it refuses, the client is closed and the refusal reported). Bytes are
written to the other side in the same callback that read them, before anything looks at
them, and unchanged; what was forwarded is queued for :class:`.backlog.Backlog`, whose
analysis shares this loop (in slices, in the quiet moments). Half-closes pass through: an
EOF from one side is written on to the other (``write_eof``) and the connection stays open
the other way until that side closes too. Memory is bounded: backpressure stops reading a
side while the other side's write buffer is over ``high_water`` (until it drains under
``low_water``), and the backlog's bound stops every connection being read; a side's reasons
to be paused are kept apart, so one never resumes what another paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from ..traffic.analyzer import Analyzer
from .backlog import HIGH_WATER, IDLE_S, LAG_BYTES, LOW_WATER, MAX_BACKLOG, SLICE_BYTES, SLICE_NS, Backlog

log = logging.getLogger("queuewire.tap")


class _Side(asyncio.Protocol):
    """One socket of a link: the client's (it reads c2s) or the upstream's (it reads s2c)."""

    def __init__(self, link: _Link, reads: str):
        self.link = link
        self.reads = reads
        self.transport: Any = None
        self.eof = False
        self.closed = False
        self.holds: set[str] = set()   # why reading is paused: connecting, peer, analysis

    def hold(self, reason: str) -> None:
        if not self.holds and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self.holds.add(reason)

    def release(self, reason: str) -> None:
        if reason in self.holds:
            self.holds.discard(reason)
            if not self.holds and self.transport is not None and not self.closed:
                self.transport.resume_reading()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(self.link.tap.high_water, self.link.tap.low_water)
        if self.holds:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        link = self.link
        peer = link.peer(self)
        if peer is not None and not peer.closed:
            peer.transport.write(data)
        link.tap.enqueue(("data", link.conn_id, self.reads, data, time.time_ns()))

    def eof_received(self) -> bool:
        self.eof = True
        link = self.link
        link.tap.enqueue(("eof", link.conn_id, self.reads, None, time.time_ns()))
        peer = link.peer(self)
        if peer is not None and not peer.closed:
            if peer.eof:  # both halves closed: done
                peer.transport.close()
                return False
            if peer.transport.can_write_eof():
                peer.transport.write_eof()
        return True  # keep our half open for what the other side still sends

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.link.lost(self, exc)

    def pause_writing(self) -> None:
        peer = self.link.peer(self)
        if peer is not None:
            peer.hold("peer")

    def resume_writing(self) -> None:
        peer = self.link.peer(self)
        if peer is not None:
            peer.release("peer")


class _Link:
    """A client connection and its upstream connection."""

    def __init__(self, tap: InLoopTapServer, conn_id: int):
        self.tap = tap
        self.conn_id = conn_id
        self.client = _Side(self, "c2s")
        self.upstream: _Side | None = None
        self.reason: str | None = None
        self.opened = False
        self.done = False

    def peer(self, side: _Side) -> _Side | None:
        return self.upstream if side is self.client else self.client

    async def connect(self) -> None:
        tap, client = self.tap, self.client
        peer = client.transport.get_extra_info("peername") or ("?", 0)
        client_addr = f"{peer[0]}:{peer[1]}"
        upstream_addr = f"{tap.upstream_host}:{tap.upstream_port}"
        side = _Side(self, "s2c")
        side.holds.add("connecting")  # an upstream that speaks first waits for our "open"
        try:
            await asyncio.wait_for(tap.loop.create_connection(
                lambda: side, tap.upstream_host, tap.upstream_port), tap.connect_timeout)
        except (TimeoutError, OSError) as exc:
            error = str(exc) or type(exc).__name__
            log.warning("connection %d: upstream %s refused: %s", self.conn_id, upstream_addr, error)
            tap.enqueue(("refused", self.conn_id, (client_addr, upstream_addr), error,
                         time.time_ns()))
            self.done = True
            client.transport.close()
            tap.links.pop(self.conn_id, None)
            return
        if client.closed:  # the client left while we were connecting
            side.transport.close()
            self.done = True
            tap.links.pop(self.conn_id, None)
            return
        self.upstream = side
        self.opened = True
        tap.enqueue(("open", self.conn_id, (client_addr, upstream_addr), None, time.time_ns()))
        if tap.throttled:
            side.hold("analysis")
            client.hold("analysis")
        side.release("connecting")
        client.release("connecting")

    def lost(self, side: _Side, exc: Exception | None) -> None:
        if exc is not None and self.reason is None:
            self.reason = "reset"
        peer = self.peer(side)
        if peer is not None and not peer.closed and peer.transport is not None:
            peer.transport.close()  # flushes what is buffered, then FIN
        if self.upstream is None or (self.client.closed and self.upstream.closed):
            if not self.done and self.opened:
                self.done = True
                both_eof = self.client.eof and self.upstream is not None and self.upstream.eof
                reason = self.reason or ("eof" if both_eof else "closed")
                self.tap.enqueue(("close", self.conn_id, reason, None, time.time_ns()))
            self.tap.links.pop(self.conn_id, None)


class InLoopTapServer(Backlog):
    """The tap with its forwarding on the analyzer's loop: listens, proxies every connection
    to ``upstream``, feeds the analyzer (and, through its sink, the recorder)."""

    def __init__(self, analyzer: Analyzer, upstream_host: str, upstream_port: int, *,
                 host: str = "127.0.0.1", port: int = 0, high_water: int = HIGH_WATER,
                 low_water: int = LOW_WATER, connect_timeout: float = 10.0,
                 max_backlog: int = MAX_BACKLOG, slice_ns: int = SLICE_NS,
                 slice_bytes: int = SLICE_BYTES, lag_bytes: int = LAG_BYTES,
                 idle_s: float = IDLE_S):
        super().__init__(analyzer, max_backlog=max_backlog, slice_ns=slice_ns,
                         slice_bytes=slice_bytes, lag_bytes=lag_bytes, idle_s=idle_s)
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.host, self.port = host, port
        self.high_water, self.low_water = high_water, low_water
        self.connect_timeout = connect_timeout
        self.links: dict[int, _Link] = {}
        self._next_id = 0
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> InLoopTapServer:
        self.loop = asyncio.get_running_loop()
        self._server = await self.loop.create_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def _accept(self) -> _Side:
        self._next_id += 1
        link = _Link(self, self._next_id)
        self.links[link.conn_id] = link
        side = link.client
        original = side.connection_made

        def made(transport: Any) -> None:
            original(transport)
            side.hold("connecting")  # until the upstream answers
            task = self.loop.create_task(link.connect())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        side.connection_made = made  # type: ignore[method-assign]
        return side

    def _hold(self, on: bool) -> None:
        for link in list(self.links.values()):
            for side in (link.client, link.upstream):
                if side is not None:
                    (side.hold if on else side.release)("analysis")

    async def stop(self) -> None:
        """Stop accepting, close every connection, analyse what is queued, close the rest."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for link in list(self.links.values()):
            for side in (link.client, link.upstream):
                if side is not None and side.transport is not None and not side.closed:
                    side.transport.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.analyse_all()

    async def __aenter__(self) -> InLoopTapServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
