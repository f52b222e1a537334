"""Flow control shared by the reference daemons' asyncio shells: named limits and the few
helpers that apply them, protocol-neutral (quicx and bunqueue frame bytes alike).

A daemon is answerable for things no protocol document spells out, and each has a limit
here, chosen the way h11 chooses its own (a named constant, its reason next to it):

* **Fairness.** A connection handles at most :data:`FRAMES_PER_TURN` frames, then yields to the
  event loop (:func:`next_turn`) before it handles more, so a peer that writes frames as fast
  as it can delays another connection's answer by a few turns, not by its whole backlog.
* **Backpressure.** Frames are written as they are produced. A connection whose unsent output
  is over :data:`OUTPUT_HIGH_WATER` is not read again until the output has drained to a quarter
  of it (:func:`drain_if_congested`), so a peer that sends requests and never reads the answers
  costs bounded memory and slows only itself. :func:`limit_output` gives the transport that
  mark, so asyncio's own pause and resume follow it; :func:`output_congested` is the test a
  shell applies to a connection it wrote to on another's behalf.
* **Half-received frames.** A frame must be complete ``partial_frame_timeout`` seconds (default
  :data:`DEFAULT_PARTIAL_FRAME_TIMEOUT`) after its first byte arrived, or the connection is
  reset: :func:`read_chunk` takes that deadline and raises :class:`PartialFrameTimeout` once it
  has passed. A deadline per frame, not a silence timer: a peer that sends a byte now and then
  (one every 59 s kept a 63 MiB frame buffer for ever, issue 22) gains nothing by it. Only
  inside a frame: a connection that is silent between frames is an idle client the protocol
  keeps open. The quicx daemon, whose frame buffer is at most one task of its largest size
  class (64 KiB), applies the same constant as a silence timer (QX-FLOW-3).
* **Buffered bytes over all connections.** A :class:`FrameBudget` bounds the bytes of
  half-received frames a daemon holds over all its connections: a connection that has read a
  frame's length prefix takes the whole frame from the budget before it reads on; one whose
  frame does not fit is not read until others give theirs back (its frame deadline runs
  meanwhile). The bound is the daemon's (bunqueue: ``safeguards.max_buffered_bytes``).

:data:`DEFAULT_LISTEN_BACKLOG` is the listen queue every daemon asks for
(:meth:`~._service.TcpService.listen`). Timeouts use ``asyncio.timeout``, never
``asyncio.wait_for``, which in Python 3.11 can swallow a cancellation that races the timeout.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable

__all__ = [
    "DEFAULT_LISTEN_BACKLOG",
    "DEFAULT_PARTIAL_FRAME_TIMEOUT",
    "FRAMES_PER_TURN",
    "OUTPUT_HIGH_WATER",
    "FrameBudget",
    "PartialFrameTimeout",
    "drain_if_congested",
    "limit_output",
    "next_turn",
    "output_congested",
    "read_chunk",
    "write_frame",
]

#: Bytes of unsent output above which a connection is not read until it drains (to a quarter of
#: this, asyncio's default low-water mark). 8 MiB holds thousands of replies, so a client that
#: pipelines and reads normally never meets it, while a thousand peers that never read cost at
#: most a few GiB rather than all the memory there is.
OUTPUT_HIGH_WATER = 8 * 1024 * 1024

#: Frames one connection handles before it yields to the event loop, so that while one peer
#: floods, another connection is still answered within 100 ms. Measured on the quicx daemon
#: (a peer pipelining MSG_STATS and reading the answers, another sending MSG_HEARTBEAT): at
#: 128 the worst heartbeat waited 3 to 8 ms and pipelined throughput was 5 % under a daemon
#: that never yields; at 64 the wait was no shorter and throughput 11 % lower; from 256 on the
#: wait grows with the batch (19 ms at 256, 48 ms at 1024, half a second without a bound).
FRAMES_PER_TURN = 128

#: Seconds from a frame's first byte by which the whole frame must have arrived, else the
#: connection is reset. The real bunqueue server resets a partial frame after 60 s without new
#: bytes; a live client writes even a 64 MiB frame over a slow link in far less than that.
DEFAULT_PARTIAL_FRAME_TIMEOUT = 60.0

#: Listen backlog: connections the kernel queues before the daemon accepts them. asyncio's
#: default of 100 made one of 200 rapid concurrent connects retry; 1024 absorbs such a burst
#: (the kernel caps it at ``net.core.somaxconn``).
DEFAULT_LISTEN_BACKLOG = 1024


class PartialFrameTimeout(TimeoutError):
    """A connection's half-received frame was not complete by its deadline."""


class FrameBudget:
    """Bytes of half-received frames held over all of a daemon's connections: at most
    ``limit`` (a public attribute; a test may lower it before connections come).

    A connection takes a frame's whole size (prefix and payload, as the prefix declares) when
    it knows it and gives it back when the frame is complete or the connection closes.
    :meth:`try_take` answers at once; :meth:`take` waits, first come first served, until the
    size fits. A frame larger than the whole budget is admitted when nothing else is held, so
    the budget never refuses a frame outright (refusing is the frame size limit's job).
    ``used`` is what is taken now, ``waiting`` how many connections wait."""

    __slots__ = ("limit", "used", "_queue")

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for _, future in self._queue if not future.done())

    def _fits(self, size: int) -> bool:
        return not self.used or self.used + size <= self.limit

    def try_take(self, size: int) -> bool:
        """Take ``size`` bytes now if they fit and nobody waits before; else False."""
        if self._queue or not self._fits(size):
            return False
        self.used += size
        return True

    async def take(self, size: int) -> None:
        """Take ``size`` bytes, waiting in line until they fit. Cancelled while waiting (its
        deadline, its connection closing), it takes nothing."""
        if self.try_take(size):
            return
        entry = (size, asyncio.get_running_loop().create_future())
        self._queue.append(entry)
        try:
            await entry[1]
        except BaseException:
            if entry[1].done() and not entry[1].cancelled():
                self.give(size)  # admitted just as it was cancelled: hand it on
            else:
                self._queue.remove(entry)
                self._admit()  # those behind it may fit now
            raise

    def give(self, size: int) -> None:
        """Give back what :meth:`try_take` or :meth:`take` took."""
        self.used -= size
        self._admit()

    def _admit(self) -> None:
        queue = self._queue
        while queue:
            size, future = queue[0]
            if future.done():
                queue.popleft()
                continue
            if not self._fits(size):
                return
            queue.popleft()
            self.used += size
            future.set_result(None)


def limit_output(transport: asyncio.WriteTransport, high: int = OUTPUT_HIGH_WATER) -> None:
    """Give ``transport`` the high-water mark (low water: a quarter of it). Once per
    connection, before the first write."""
    transport.set_write_buffer_limits(high=high)


def output_congested(transport: asyncio.WriteTransport, high: int = OUTPUT_HIGH_WATER) -> bool:
    """The transport's unsent output is over ``high``."""
    return transport.get_write_buffer_size() > high


async def drain_if_congested(writer: asyncio.StreamWriter, high: int = OUTPUT_HIGH_WATER) -> None:
    """Wait for ``writer``'s output to drain when it is over ``high``; return at once
    otherwise (no drain call, no yield: the common case costs one comparison). Raises
    ``ConnectionError`` if the connection is lost while waiting."""
    if writer.transport.get_write_buffer_size() > high:
        await writer.drain()


async def write_frame(writer: asyncio.StreamWriter, frame: bytes,
                      high: int = OUTPUT_HIGH_WATER) -> None:
    """Write one frame now; wait for the output to drain only when it is over ``high``."""
    writer.write(frame)
    if writer.transport.get_write_buffer_size() > high:
        await writer.drain()


async def next_turn() -> None:
    """Let every other ready connection run before this one handles its next batch."""
    await asyncio.sleep(0)


async def read_chunk(reader: asyncio.StreamReader, size: int, *, deadline: float | None,
                     pending: Awaitable[bytes] | None = None) -> bytes:
    """``reader.read(size)`` (or ``pending``, a read the shell already started), which must
    complete by ``deadline`` (the event loop's clock): the deadline of the frame the stream
    stopped inside. None (between frames, or no timeout configured): no limit. Raises
    :class:`PartialFrameTimeout` once the deadline has passed."""
    read = pending if pending is not None else reader.read(size)
    if deadline is None:
        return await read
    try:
        async with asyncio.timeout_at(deadline):
            return await read
    except TimeoutError:
        raise PartialFrameTimeout("the frame was not complete by its deadline") from None
