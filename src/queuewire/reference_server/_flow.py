"""Flow control shared by the reference daemons' asyncio shells: named limits and the few
helpers that apply them, protocol-neutral (quicx and bunqueue frame bytes alike).

A daemon is answerable for three things no protocol document spells out, and each has a limit
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
* **Half-received frames.** A connection that holds part of a frame and sends nothing more for
  ``partial_frame_timeout`` seconds (default :data:`DEFAULT_PARTIAL_FRAME_TIMEOUT`) is reset:
  :func:`read_chunk` raises :class:`PartialFrameTimeout`. Only then: a connection that is
  silent between frames is an idle client the protocol keeps open.

:data:`DEFAULT_LISTEN_BACKLOG` is the listen queue every daemon asks for
(:meth:`~._service.TcpService.listen`). Timeouts use ``asyncio.timeout``, never
``asyncio.wait_for``, which in Python 3.11 can swallow a cancellation that races the timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

__all__ = [
    "DEFAULT_LISTEN_BACKLOG",
    "DEFAULT_PARTIAL_FRAME_TIMEOUT",
    "FRAMES_PER_TURN",
    "OUTPUT_HIGH_WATER",
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

#: Seconds a connection may hold a half-received frame without sending another byte before it
#: is reset. The real bunqueue server resets a partial frame after 60 s; a live client never
#: pauses inside a frame it is writing for anything close to that.
DEFAULT_PARTIAL_FRAME_TIMEOUT = 60.0

#: Listen backlog: connections the kernel queues before the daemon accepts them. asyncio's
#: default of 100 made one of 200 rapid concurrent connects retry; 1024 absorbs such a burst
#: (the kernel caps it at ``net.core.somaxconn``).
DEFAULT_LISTEN_BACKLOG = 1024


class PartialFrameTimeout(TimeoutError):
    """A connection held a half-received frame and sent nothing for the timeout."""


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


async def read_chunk(reader: asyncio.StreamReader, size: int, *, in_frame: bool,
                     timeout: float | None,
                     pending: Awaitable[bytes] | None = None) -> bytes:
    """``reader.read(size)`` (or ``pending``, a read the shell already started), which must
    bring a byte within ``timeout`` seconds when the stream stopped inside a frame
    (``in_frame``; None: no limit); a connection between frames waits for ever. Raises
    :class:`PartialFrameTimeout` when the time runs out."""
    read = pending if pending is not None else reader.read(size)
    if not in_frame or timeout is None:
        return await read
    try:
        async with asyncio.timeout(timeout):
            return await read
    except TimeoutError:
        raise PartialFrameTimeout(f"no byte for {timeout:g} s inside a frame") from None
