"""The tap's asyncio shell: a transparent TCP proxy around the sans-IO :class:`Analyzer`.

Each accepted client gets its own upstream connection (the client is not read until the
upstream answers; if it refuses, the client is closed and the refusal reported). Bytes are
written to the other side in the same callback that read them, before anything looks at
them, and unchanged; a frame the analyzer cannot decode is reported, never dropped. What was
forwarded is queued (connection, direction, bytes, time) and analysed at a lower priority
than forwarding: while bytes keep arriving, fewer than ``lag_bytes`` wait for analysis and
the oldest waited less than ``lag_ns`` (1 s), it waits for the sockets to be quiet for
``idle_s``; it then runs in slices: at most
``slice_ns`` of analysis (``slice_bytes`` of a chunk at a time) per event-loop turn, after
which the loop polls the sockets and forwards what arrived before analysis goes on; so a
burst being analysed holds forwarding up by about one slice, not by the burst. Half-closes
pass through: an EOF from one side is written on to the other (``write_eof``) and the
connection stays open the other way until that side closes too. Memory is bounded:
backpressure stops reading a side while the other side's write buffer is over
``high_water`` (until it drains under ``low_water``), and if analysis falls behind by more
than ``max_backlog`` bytes (sustained overload, never a burst) every connection stops being
read until half of it is analysed; a side's reasons to be paused are kept apart, so one
never resumes what another paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

from ..traffic.analyzer import Analyzer

log = logging.getLogger("queuewire.tap")

HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
#: Analysis runs for at most SLICE_NS per loop turn, SLICE_BYTES of a chunk at a time, so a
#: burst being analysed delays forwarding by at most about one slice.
SLICE_NS = 50_000
SLICE_BYTES = 8 * 1024
#: Bytes forwarded but not yet analysed beyond which reading stops (sustained overload).
MAX_BACKLOG = 32 * 1024 * 1024
#: While bytes keep arriving, analysis waits for the sockets to be quiet for IDLE_S, as
#: long as the bytes not yet analysed stay under LAG_BYTES (0: analyse at once, in slices).
LAG_BYTES = 4 * 1024 * 1024
IDLE_S = 0.0002
#: ... and as long as the oldest of them is younger than LAG_NS: verdicts lag by at most this.
LAG_NS = 1_000_000_000


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

    def __init__(self, tap: TapServer, conn_id: int):
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


class TapServer:
    """``queuewire tap`` in process: listens, proxies every connection to ``upstream``,
    feeds the analyzer (and, through its sink, the recorder)."""

    def __init__(self, analyzer: Analyzer, upstream_host: str, upstream_port: int, *,
                 host: str = "127.0.0.1", port: int = 0, high_water: int = HIGH_WATER,
                 low_water: int = LOW_WATER, connect_timeout: float = 10.0,
                 max_backlog: int = MAX_BACKLOG, slice_ns: int = SLICE_NS,
                 slice_bytes: int = SLICE_BYTES, lag_bytes: int = LAG_BYTES,
                 idle_s: float = IDLE_S):
        self.analyzer = analyzer
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.host, self.port = host, port
        self.high_water, self.low_water = high_water, low_water
        self.connect_timeout = connect_timeout
        self.links: dict[int, _Link] = {}
        self._next_id = 0
        self._queue: deque[tuple] = deque()
        self._scheduled = False
        self._backlog = 0                  # bytes queued for analysis
        self.max_backlog = max_backlog
        self.slice_ns, self.slice_bytes = slice_ns, slice_bytes
        self.throttled = False
        self.throttle_count = 0
        self.lag_bytes, self.idle_s, self.lag_ns = lag_bytes, idle_s, LAG_NS
        self._io = 0          # data events queued so far
        self._io_seen = 0     # ... as of the last look
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.analysis_errors = 0

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> TapServer:
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

    # -- analysis, in slices between the loop's I/O ----------------------------------------
    def enqueue(self, event: tuple) -> None:
        self._queue.append(event)
        if event[0] == "data":
            self._backlog += len(event[3])
            if self._backlog > self.max_backlog and not self.throttled:
                self._throttle(True)
            self._io += 1
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._drain)

    def _throttle(self, on: bool) -> None:
        """Sustained overload only: more bytes queued for analysis than ``max_backlog``
        stops reading every connection until half of it is analysed (bounded memory)."""
        self.throttled = on
        if on:
            self.throttle_count += 1
        for link in list(self.links.values()):
            for side in (link.client, link.upstream):
                if side is not None:
                    (side.hold if on else side.release)("analysis")

    def _drain(self) -> None:
        """Analyse queued events for at most ``slice_ns``, in pieces of at most
        ``slice_bytes``; then let the loop forward what arrived meanwhile, and go on."""
        self._scheduled = False
        if (self._io != self._io_seen and self._backlog < self.lag_bytes and self._queue
                and time.time_ns() - self._queue[0][4] < self.lag_ns):
            # bytes are flowing and the lag is within budget: forwarding goes first; look
            # again once the sockets have been quiet for idle_s (or the lag grows)
            self._io_seen = self._io
            self._scheduled = True
            self.loop.call_later(self.idle_s, self._drain)
            return
        self._io_seen = self._io
        queue, a = self._queue, self.analyzer
        deadline = time.perf_counter_ns() + self.slice_ns
        step = self.slice_bytes
        while queue:
            kind, conn_id, x, y, z = queue[0]
            if kind == "data" and len(y) > step:
                view = y if type(y) is memoryview else memoryview(y)
                queue[0] = (kind, conn_id, x, view[step:], z)
                y = view[:step]
            else:
                queue.popleft()
            try:
                if kind == "data":
                    self._backlog -= len(y)
                    a.feed(conn_id, x, y, z)
                elif kind == "eof":
                    a.eof(conn_id, x, z)
                elif kind == "close":
                    a.close(conn_id, z, x)
                elif kind == "open":
                    a.open(conn_id, z, client=x[0], upstream=x[1], listen=self.listen)
                elif kind == "refused":
                    a.refused(conn_id, z, client=x[0], upstream=x[1], error=y)
            except Exception:  # noqa: BLE001 - fail open: analysis never stops the proxy
                self.analysis_errors += 1
                log.exception("tap analysis failed on connection %d (traffic still flows)",
                              conn_id)
            if queue and time.perf_counter_ns() > deadline:
                self._scheduled = True
                self.loop.call_soon(self._drain)
                break
        if self.throttled and self._backlog <= self.max_backlog // 2:
            self._throttle(False)

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
        self.slice_ns = 1 << 62  # analyse everything still queued, now
        self.lag_bytes = 0
        self._drain()
        self.analyzer.close_all(time.time_ns())

    async def __aenter__(self) -> TapServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
