"""The tap's deferred analysis: what was forwarded waits in a queue and is analysed at a
lower priority than forwarding, within a bounded lag, in slices, on the analyzer's loop.

Both forwarders (the forwarding process of :mod:`.proxy`, the in-loop one of :mod:`.inloop`)
hand their events here as tuples ``(kind, conn_id, x, y, t_ns)``: ``data`` (direction,
bytes), ``eof`` (direction), ``open`` and ``refused`` ((client, upstream) addresses; the
error), ``close`` (reason). While bytes keep arriving, fewer than ``lag_bytes`` wait and the
oldest waited less than ``lag_ns`` (1 s), analysis waits for the traffic to be quiet for
``idle_s``; it then runs in slices of at most ``slice_ns`` (``slice_bytes`` of a chunk at a
time) per event-loop turn. If more than ``max_backlog`` bytes wait (sustained overload,
never a burst), :meth:`Backlog._hold` stops the forwarder reading until half of it is
analysed (bounded memory). An exception in the analysis is counted and logged, never raised:
the traffic is never stopped by it (fail open).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from ..traffic.analyzer import Analyzer

log = logging.getLogger("queuewire.tap")

HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
#: Analysis runs for at most SLICE_NS per loop turn, SLICE_BYTES of a chunk at a time, so a
#: burst being analysed delays the loop by at most about one slice.
SLICE_NS = 50_000
SLICE_BYTES = 8 * 1024
#: Bytes forwarded but not yet analysed beyond which reading stops (sustained overload).
MAX_BACKLOG = 32 * 1024 * 1024
#: While bytes keep arriving, analysis waits for the traffic to be quiet for IDLE_S, as
#: long as the bytes not yet analysed stay under LAG_BYTES (0: analyse at once, in slices).
LAG_BYTES = 4 * 1024 * 1024
IDLE_S = 0.0002
#: ... and as long as the oldest of them is younger than LAG_NS: verdicts lag by at most this.
LAG_NS = 1_000_000_000


class Backlog:
    """The queue of forwarded events and its analysis; a forwarder subclasses it and
    implements :meth:`_hold` (stop or resume reading every connection)."""

    def __init__(self, analyzer: Analyzer, *, max_backlog: int = MAX_BACKLOG,
                 slice_ns: int = SLICE_NS, slice_bytes: int = SLICE_BYTES,
                 lag_bytes: int = LAG_BYTES, idle_s: float = IDLE_S):
        self.analyzer = analyzer
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
        self._timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.analysis_errors = 0
        self.host, self.port = "", 0

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

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
        self._hold(on)

    def _hold(self, on: bool) -> None:
        raise NotImplementedError

    def _flowing(self) -> bool:
        """Did bytes arrive since the last look (then analysis waits)? The in-loop
        forwarder's answer; the forwarding process says when its traffic is quiet."""
        flowing = self._io != self._io_seen
        self._io_seen = self._io
        return flowing

    def _recheck_s(self) -> float:
        """When to look again while analysis waits for the traffic to be quiet."""
        return self.idle_s

    def _wake(self) -> None:
        """Look now (the traffic went quiet): cut a waiting timer short."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._scheduled = False
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        """Analyse queued events for at most ``slice_ns``, in pieces of at most
        ``slice_bytes``; then let the loop forward (or read) what arrived, and go on."""
        self._scheduled = False
        self._timer = None
        if (self._flowing() and self._backlog < self.lag_bytes and self._queue
                and time.time_ns() - self._queue[0][4] < self.lag_ns):
            # bytes are flowing and the lag is within budget: forwarding goes first; look
            # again once the traffic has been quiet (or the lag grows)
            self._scheduled = True
            self._timer = self.loop.call_later(self._recheck_s(), self._drain)
            return
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

    def analyse_all(self) -> None:
        """Analyse everything still queued, now (the tap stopping)."""
        self.slice_ns = 1 << 62
        self.lag_bytes = 0
        if self._timer is not None:
            self._timer.cancel()
        self._drain()
        self.analyzer.close_all(time.time_ns())
