"""The quicx daemon's asyncio shell: :class:`QuicxServer`, the only module that touches sockets.

All protocol logic lives in :mod:`.engine` and :mod:`.connection`; this module moves bytes and
applies the flow-control rules of :mod:`.._flow`. The server listens with the shared
:meth:`~.._service.TcpService.listen` (backlog ``backlog``, default
:data:`~.._flow.DEFAULT_LISTEN_BACKLOG`); each connection gets a :class:`~.connection.QuicxConnection`
on the one shared :class:`~.engine.QuicxEngine` and a handler task that loops: read, hand the
bytes to the connection, then take its actions at most ``frames_per_turn`` frames at a time,
performing them at once (a :class:`~.engine.Send` is written to whichever connection it names, a
TASK to a worker's socket, a forwarded DONE to a producer's; a :class:`~.engine.Close` closes
that connection) and yielding to the event loop between batches, so a flood on one connection
delays another's answer by a few batches (fairness).

Backpressure: every transport gets the high-water mark ``output_high_water`` (default
:data:`~.._flow.OUTPUT_HIGH_WATER`). A handler whose own output is over it waits for it to drain
before it handles or reads anything more, so a peer that never reads costs bounded memory and
slows only itself. Output caused by *another* connection's turn is bounded too: the first write
that takes a connection over the mark puts it on hold in the engine, which then pushes it no
task, and a small task releases it once it has drained (a forwarded result needs no hold, see
:mod:`.engine`). While the stream stops inside a frame, a read must bring a byte within
``partial_frame_timeout`` seconds (default :data:`~.._flow.DEFAULT_PARTIAL_FRAME_TIMEOUT`) or
the connection is reset; between frames a connection may stay silent for ever.

A peer's bytes cannot crash or hang the daemon: every protocol error is answered by its reaction
inside the connection object, a stream that ends inside a frame is closed, and any other
exception in a handler is logged and closes that connection only (its tasks in flight are
requeued, QX-WORKER-1). ``stop()`` closes the listener and every connection. Use it as
``async with QuicxServer(profile, port=0) as server:``; ``server.port`` is the bound port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from ...spec import Profile
from .._flow import (
    DEFAULT_LISTEN_BACKLOG,
    DEFAULT_PARTIAL_FRAME_TIMEOUT,
    FRAMES_PER_TURN,
    OUTPUT_HIGH_WATER,
    PartialFrameTimeout,
    drain_if_congested,
    limit_output,
    next_turn,
    read_chunk,
)
from .._service import TcpService
from .connection import QuicxConnection
from .engine import Action, EngineStats, QuicxEngine, Send
from .pool import DEFAULT_POOL_BYTES

__all__ = ["READ_SIZE", "QuicxServer"]

log = logging.getLogger("queuewire.reference_server.quicx")
READ_SIZE = 64 * 1024  # bytes per read: one socket buffer's worth


class QuicxServer(TcpService):
    """A quicx daemon on a TCP port, speaking one profile.

    ``port=None`` is the profile's ``default_port``; ``port=0`` picks a free port. ``pool_bytes``,
    ``task_types`` and ``largest_class`` configure the engine (see
    :class:`~.engine.QuicxEngine`), or pass a ready ``engine``. ``partial_frame_timeout``
    (seconds, None for none) resets a connection silent inside a frame; ``backlog`` is the
    listen queue; ``output_high_water`` and ``frames_per_turn`` are the flow-control limits of
    :mod:`.._flow`, settable for tests and tuning.
    """

    def __init__(self, profile: Profile | str = "quicx/v1", host: str = "127.0.0.1",
                 port: int | None = None, *, pool_bytes: int = DEFAULT_POOL_BYTES,
                 task_types: Iterable[str] | None = None, largest_class: int | None = None,
                 engine: QuicxEngine | None = None,
                 partial_frame_timeout: float | None = DEFAULT_PARTIAL_FRAME_TIMEOUT,
                 backlog: int = DEFAULT_LISTEN_BACKLOG,
                 output_high_water: int = OUTPUT_HIGH_WATER,
                 frames_per_turn: int = FRAMES_PER_TURN):
        if partial_frame_timeout is not None and not partial_frame_timeout > 0:
            raise ValueError(f"the partial-frame timeout must be positive, not {partial_frame_timeout}")
        for name, value in (("backlog", backlog), ("output_high_water", output_high_water),
                            ("frames_per_turn", frames_per_turn)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self.engine = engine if engine is not None else QuicxEngine(
            profile, pool_bytes=pool_bytes, task_types=task_types, largest_class=largest_class)
        self.profile = self.engine.profile
        self.host = host
        self._port = self.profile.model.default_port if port is None else port
        self.partial_frame_timeout = partial_frame_timeout
        self.backlog = backlog
        self.output_high_water = output_high_water
        self.frames_per_turn = frames_per_turn
        self._server: asyncio.AbstractServer | None = None
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._handlers: set[asyncio.Task] = set()
        self._drainers: dict[int, asyncio.Task] = {}  # held connections, each waiting to drain

    # -- lifecycle
    async def start(self) -> QuicxServer:
        await self.listen(self._serve)
        log.info("%s daemon listening on %s:%d", self.profile.name, self.host, self._port)
        return self

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._writers.values()):
            writer.transport.abort()  # unblocks a handler waiting to drain to a peer that never reads
        tasks = [*self._handlers, *self._drainers.values()]
        self._drainers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def unsent_bytes(self) -> dict[int, int]:
        """Each open connection's output not yet handed to the kernel, by connection id."""
        return {conn: w.transport.get_write_buffer_size() for conn, w in self._writers.items()}

    # -- connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        conn = QuicxConnection(self.engine)
        limit_output(writer.transport, self.output_high_water)
        self._writers[conn.id] = writer
        reason, reset = "connection closed", False
        high, batch, timeout = self.output_high_water, self.frames_per_turn, self.partial_frame_timeout
        try:
            while not conn.closed:
                data = await read_chunk(reader, READ_SIZE, in_frame=conn.in_frame, timeout=timeout)
                if not data:
                    self._perform(conn.receive_eof())
                    break
                conn.receive_data(data)
                while True:
                    self._perform(conn.next_actions(batch))
                    if conn.closed:
                        break
                    await drain_if_congested(writer, high)  # read nothing more until it drains
                    if not conn.pending:
                        break
                    await next_turn()  # every other connection gets its turn first
        except PartialFrameTimeout as exc:
            reason, reset = f"reset: {exc}", True
            log.info("connection %d: %s", conn.id, reason)
        except asyncio.CancelledError:  # stop(): this task is ours, nobody awaits it
            reason = "daemon stopping"
        except OSError as exc:  # reset, broken pipe: the peer is gone
            reason = f"connection lost: {exc}"
            log.debug("connection %d: %s", conn.id, reason)
        except Exception:  # a bug, not the peer's bytes: this connection only
            reason = "internal error"
            log.exception("connection %d: unexpected error, closing it", conn.id)
        finally:
            if reset or writer.transport.get_write_buffer_size() > high:
                writer.transport.abort()  # nothing worth flushing to a peer that does not read
            try:
                self._perform(conn.connection_lost(reason))
            except Exception:  # noqa: BLE001 - never let one connection's cleanup stop the daemon
                log.exception("connection %d: error while closing it", conn.id)
            self._writers.pop(conn.id, None)
            drainer = self._drainers.pop(conn.id, None)
            if drainer is not None:
                drainer.cancel()
            writer.close()
            self._handlers.discard(task)

    def _perform(self, actions: list[Action]) -> None:
        writers, high = self._writers, self.output_high_water
        for action in actions:
            writer = writers.get(action.conn)
            if writer is None or writer.is_closing():
                continue
            if type(action) is Send:
                writer.write(action.frame)
                if writer.transport.get_write_buffer_size() > high and action.conn not in self._drainers:
                    self._hold(action.conn, writer)
            else:
                writer.close()

    def _hold(self, conn: int, writer: asyncio.StreamWriter) -> None:
        """``conn``'s output went over the mark: the engine pushes it no task until it drains."""
        self.engine.hold(conn)
        self._drainers[conn] = asyncio.get_running_loop().create_task(
            self._release_when_drained(conn, writer), name=f"quicx-drain-{conn}")

    async def _release_when_drained(self, conn: int, writer: asyncio.StreamWriter) -> None:
        """Wait for a held connection's output to drain, then release it in the engine."""
        try:
            await writer.drain()
        except Exception as exc:  # noqa: BLE001 - the connection is gone: its handler cleans up
            log.debug("connection %d: lost while held: %r", conn, exc)
            self._drainers.pop(conn, None)
            return
        self._drainers.pop(conn, None)
        if conn not in self._writers:
            return
        try:
            self._perform(self.engine.release(conn))
        except Exception:  # noqa: BLE001 - a bug must not take the daemon down
            log.exception("connection %d: error while resuming it", conn)
