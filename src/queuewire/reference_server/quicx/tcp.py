"""The quicx daemon's asyncio shell: :class:`QuicxServer`, the only module that touches sockets.

All protocol logic lives in :mod:`.engine` and :mod:`.connection`; this module moves bytes and
applies the flow-control rules of :mod:`.._flow`. Each connection is an :class:`asyncio.Protocol`
(:class:`_Link`) driving a :class:`~.connection.QuicxConnection` on the one shared
:class:`~.engine.QuicxEngine`: the bytes asyncio hands it are given to the connection and handled
at once, at most ``frames_per_turn`` frames per turn. A connection with frames still to handle
stops reading and takes its next turn from the event loop's ready queue (``call_soon``), behind
every other connection that is ready, so a flood on one connection delays another's answer by a
few turns (fairness). Protocol callbacks rather than a stream-reading task per connection: a
read costs no future, no task wake-up and no coroutine switch, which on the daemon-bound
workloads of benchmarks/quicx_bench.py was a large share of the time per task. The actions of a
turn are performed when it ends, with one write per connection (the frames for a connection are
joined; a :class:`~.engine.Close` flushes that connection's frames first): the connection's own
answers and a TASK to a worker's socket at once, a result forwarded to a producer at the start
of the next loop iteration, joined with the others that iteration sent it.

Fair scheduling under a backlog: while the engine has more tasks queued than workers connected,
a connection that is no worker gets turns of :data:`BACKLOG_FRAMES_PER_TURN` frames
(:meth:`~.engine.QuicxEngine.throttled`): its SUBMITs can only lengthen the queue, and at full
turns four producers keeping windows of submissions in flight made the workers' turns (each a
completion and, at once, the next dispatch) wait behind whole windows of accepted tasks. Such a
connection's own answers (its MSG_OKs) are written together once it has no frame left to
handle (or :data:`KEPT_FRAMES` are waiting): one write per read of the peer, not one per frame.

Backpressure: every transport gets the high-water mark ``output_high_water`` (default
:data:`~.._flow.OUTPUT_HIGH_WATER`). When a connection's unsent output goes over it, asyncio
calls ``pause_writing``: the engine holds the connection (it is pushed no task from another
connection's turn) and the connection itself handles and reads nothing more until its output
has drained to a quarter of the mark (``resume_writing``), which releases it in the engine. A
peer that never reads costs bounded memory and slows only itself (a forwarded result needs no
hold, see :mod:`.engine`). While the stream stops inside a frame, a byte must arrive within
``partial_frame_timeout`` seconds (default :data:`~.._flow.DEFAULT_PARTIAL_FRAME_TIMEOUT`) or the
connection is reset; between frames a connection may stay silent for ever.

A peer's bytes cannot crash or hang the daemon: every protocol error is answered by its reaction
inside the connection object, a stream that ends inside a frame is closed, and any other
exception while handling a connection's bytes is logged and closes that connection only (its
tasks in flight are requeued, QX-WORKER-1). ``stop()`` closes the listener and every connection.
Use it as ``async with QuicxServer(profile, port=0) as server:``; ``server.port`` is the bound
port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from ...spec import Profile
from .._flow import (
    DEFAULT_LISTEN_BACKLOG,
    DEFAULT_PARTIAL_FRAME_TIMEOUT,
    FRAMES_PER_TURN,
    OUTPUT_HIGH_WATER,
    limit_output,
)
from .._service import TcpService
from .connection import QuicxConnection
from .engine import Action, EngineStats, QuicxEngine, Send
from .pool import DEFAULT_POOL_BYTES

__all__ = ["BACKLOG_FRAMES_PER_TURN", "READ_SIZE", "QuicxServer"]

log = logging.getLogger("queuewire.reference_server.quicx")
#: Bytes per read of the stream-based shells (kept for callers; a protocol's reads are sized
#: by asyncio's transport).
READ_SIZE = 64 * 1024
#: Frames a connection that is no worker handles per turn while the engine is backlogged (more
#: tasks queued than workers connected, :meth:`~.engine.QuicxEngine.throttled`). Measured with
#: benchmarks/quicx_bench.py's ``sustained`` workload (4 producers x 32 SUBMITs in flight, 8
#: workers one task at a time, see benchmarks/README.md): at the full
#: :data:`~.._flow.FRAMES_PER_TURN` the daemon completed 0.14-0.27x the tasks of a minimal
#: daemon, at 8 frames 0.2-0.5x, at 1 frame (workers' turns unshortened) 0.9-1.2x.
BACKLOG_FRAMES_PER_TURN = 1
#: A throttled connection's own answers (its MSG_OKs) are kept and written together when its
#: received frames are all handled, or once this many are kept: one write per read of the
#: peer rather than one per frame, while the queue is long anyway. The peer's answers wait
#: for the daemon to reach the end of what it sent, as they would behind a full turn.
KEPT_FRAMES = 256


class _Link(asyncio.Protocol):
    """One TCP connection: asyncio's callbacks driving a :class:`QuicxConnection`."""

    def __init__(self, server: QuicxServer):
        self.server = server
        self.transport: Any = None
        self.conn: QuicxConnection | None = None
        self.turn: asyncio.Handle | None = None   # the next turn, when frames are pending
        self.timer: asyncio.TimerHandle | None = None  # the partial-frame timeout
        self.blocked = False    # own output over the mark: handle nothing until it drains
        self.held = False       # held in the engine (output over the mark)
        self.paused = False     # reading paused (frames pending, or blocked)
        self.reason: str | None = None  # why the connection ends, once known
        self.kept: list[bytes] = []  # answers of throttled turns, written together (KEPT_FRAMES)

    # -- asyncio callbacks
    def connection_made(self, transport: Any) -> None:
        server = self.server
        self.transport = transport
        limit_output(transport, server.output_high_water)
        self.conn = server.connection(server.engine)
        server._links[self.conn.id] = self

    def data_received(self, data: bytes) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.conn.receive_data(data)  # type: ignore[union-attr]
        if self.turn is None and not self.blocked:
            self._turn()

    def eof_received(self) -> bool:
        conn = self.conn
        assert conn is not None
        if self.turn is not None:  # pragma: no cover - reading is paused while frames are pending
            self.turn.cancel()
            self.turn = None
        self._guarded(conn.receive_eof)
        return False  # asyncio closes the transport once what was written is flushed

    def connection_lost(self, exc: Exception | None) -> None:
        server, conn = self.server, self.conn
        for handle in (self.turn, self.timer):
            if handle is not None:
                handle.cancel()
        self.turn = self.timer = None
        if conn is None:  # pragma: no cover - lost before it was made
            return
        reason = self.reason or (
            "daemon stopping" if server._stopping
            else f"connection lost: {exc}" if exc is not None else "connection closed")
        if exc is not None:
            log.debug("connection %d: %s", conn.id, reason)
        server._links.pop(conn.id, None)
        try:
            server._perform(conn.connection_lost(reason))
        except Exception:  # noqa: BLE001 - never let one connection's cleanup stop the daemon
            log.exception("connection %d: error while closing it", conn.id)

    def pause_writing(self) -> None:
        self.held = True
        self.server.engine.hold(self.conn.id)  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        conn = self.conn
        assert conn is not None
        if self.held:
            self.held = False
            self._guarded(lambda: self.server.engine.release(conn.id))
        if self.blocked:
            self.blocked = False
            self._turn()

    # -- turns
    def _turn(self) -> None:
        """Handle one batch of received frames, then read on, or take another turn later."""
        self.turn = None
        conn, server = self.conn, self.server
        assert conn is not None
        throttled = server.engine.throttled(conn.id)
        limit = server._backlog_batch if throttled else server.frames_per_turn
        try:  # _guarded(), inlined: a turn per frame of a throttled producer
            actions = conn.next_actions(limit)
            if actions:
                server._perform(actions, conn.id, self.kept)
        except Exception:  # noqa: BLE001 - a bug, not the peer's bytes: _failed() logs it
            self._failed()
            return
        kept, transport = self.kept, self.transport
        if kept and (not throttled or not conn.pending or len(kept) >= KEPT_FRAMES):
            self._write_kept()
        if conn.closed:
            return
        if transport.get_write_buffer_size() > server.output_high_water:
            self.blocked = True  # resume_writing() takes the next turn
            self._pause()
        elif conn.pending:
            self._pause()
            self.turn = asyncio.get_running_loop().call_soon(self._turn)  # every other ready connection first
        else:
            if self.paused:
                self.paused = False
                transport.resume_reading()
            timeout = server.partial_frame_timeout
            if timeout is not None and conn.in_frame:
                self.timer = asyncio.get_running_loop().call_later(timeout, self._expire, timeout)

    def _pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def _guarded(self, step: Any, hold_answers: bool = False) -> bool:
        """Run ``step`` (which returns actions) and perform its actions. This connection's
        frames join the kept ones, in order, and are written now unless ``hold_answers`` (a
        turn decides). An exception is a bug, not the peer's bytes: it is logged and closes
        this connection only."""
        try:
            self.server._perform(step(), self.conn.id, self.kept)  # type: ignore[union-attr]
            if not hold_answers and self.kept:
                self._write_kept()
            return True
        except Exception:  # noqa: BLE001 - a bug, not the peer's bytes: _failed() logs it
            self._failed()
            return False

    def _failed(self) -> None:
        """Handling this connection's bytes raised (a bug): log it, close this connection."""
        conn = self.conn
        assert conn is not None
        log.exception("connection %d: unexpected error, closing it", conn.id)
        self.reason = "internal error"
        try:
            self.server._perform(conn.connection_lost(self.reason))
        except Exception:  # noqa: BLE001
            log.exception("connection %d: error while closing it", conn.id)
        self._close(self.transport)

    def _write_kept(self) -> None:
        kept = self.kept
        if not self.transport.is_closing():
            self.transport.write(kept[0] if len(kept) == 1 else b"".join(kept))
        kept.clear()

    def _expire(self, timeout: float) -> None:
        """Silent inside a frame for the whole timeout: reset the connection."""
        self.timer = None
        conn = self.conn
        assert conn is not None
        if not conn.in_frame:  # pragma: no cover - a byte came in the meantime
            return
        self.reason = f"reset: no byte for {timeout:g} s inside a frame"
        log.info("connection %d: %s", conn.id, self.reason)
        self.transport.abort()

    def _close(self, transport: Any) -> None:
        """Close after flushing, or at once when the output is over the mark (nothing worth
        flushing to a peer that does not read)."""
        if transport.get_write_buffer_size() > self.server.output_high_water:
            transport.abort()
        else:
            transport.close()


class QuicxServer(TcpService):
    """A quicx daemon on a TCP port, speaking one profile.

    ``port=None`` is the profile's ``default_port``; ``port=0`` picks a free port. ``pool_bytes``,
    ``task_types`` and ``largest_class`` configure the engine (see
    :class:`~.engine.QuicxEngine`), or pass a ready ``engine``. ``partial_frame_timeout``
    (seconds, None for none) resets a connection silent inside a frame; ``backlog`` is the
    listen queue; ``output_high_water``, ``frames_per_turn`` and ``backlog_frames_per_turn``
    are the flow-control limits of :mod:`.._flow` and of this module, settable for tests and
    tuning.
    """

    #: the sans-IO connection each accepted socket gets (a seam: a test's design variant or
    #: deliberately broken daemon gives a subclass)
    connection: type[QuicxConnection] = QuicxConnection

    def __init__(self, profile: Profile | str = "quicx/v1", host: str = "127.0.0.1",
                 port: int | None = None, *, pool_bytes: int = DEFAULT_POOL_BYTES,
                 task_types: Iterable[str] | None = None, largest_class: int | None = None,
                 engine: QuicxEngine | None = None,
                 partial_frame_timeout: float | None = DEFAULT_PARTIAL_FRAME_TIMEOUT,
                 backlog: int = DEFAULT_LISTEN_BACKLOG,
                 output_high_water: int = OUTPUT_HIGH_WATER,
                 frames_per_turn: int = FRAMES_PER_TURN,
                 backlog_frames_per_turn: int = BACKLOG_FRAMES_PER_TURN):
        if partial_frame_timeout is not None and not partial_frame_timeout > 0:
            raise ValueError(f"the partial-frame timeout must be positive, not {partial_frame_timeout}")
        for name, value in (("backlog", backlog), ("output_high_water", output_high_water),
                            ("frames_per_turn", frames_per_turn),
                            ("backlog_frames_per_turn", backlog_frames_per_turn)):
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
        self.backlog_frames_per_turn = backlog_frames_per_turn
        self._backlog_batch = min(frames_per_turn, backlog_frames_per_turn)
        self._server: asyncio.Server | None = None
        self._links: dict[int, _Link] = {}
        self._deferred: dict[int, list[bytes]] = {}  # frames for other connections, see _perform
        self._flush: asyncio.Handle | None = None
        self._stopping = False

    # -- lifecycle
    async def start(self) -> QuicxServer:
        if self._server is not None:
            raise RuntimeError("the server is already started")
        self._stopping = False
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Link(self), self.host, self._port, backlog=self.backlog)
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("%s daemon listening on %s:%d", self.profile.name, self.host, self._port)
        return self

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        server.close()
        for link in list(self._links.values()):
            link.transport.abort()  # connection_lost() follows on the next loop iteration
        for _ in range(100):  # each aborted transport reports connection_lost() on the loop
            if not self._links:
                break
            await asyncio.sleep(0)
        await server.wait_closed()

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def unsent_bytes(self) -> dict[int, int]:
        """Each open connection's output not yet handed to the kernel, by connection id."""
        return {conn: link.transport.get_write_buffer_size() for conn, link in self._links.items()}

    # -- actions
    def _perform(self, actions: list[Action], own: int | None = None,
                 keep: list[bytes] | None = None) -> None:
        """Perform a batch's actions in order, with one write per connection: the frames for a
        connection are joined and written when the batch ends, or before a Close of it. With
        ``keep``, the frames for connection ``own`` (whose turn it is) are appended to it
        instead (the caller writes them later), except before a Close of ``own``, which writes
        them first. Frames for another connection that is no worker (a result forwarded to a
        producer) are written at the start of the next loop iteration, joined with what every
        other turn of this one sent it; a TASK goes to its worker at once, which waits for it
        (and whose hold in the engine follows its buffer exactly)."""
        if not actions:
            return
        links, deferred = self._links, self._deferred
        out: dict[int, list[bytes]] = {}
        for action in actions:
            if type(action) is Send:
                if keep is not None and action.conn == own:
                    keep.append(action.frame)
                    continue
                frames = out.get(action.conn)
                if frames is None:
                    out[action.conn] = [action.frame]
                else:
                    frames.append(action.frame)
                continue
            link = links.get(action.conn)
            frames = out.pop(action.conn, None)
            later = deferred.pop(action.conn, None)
            if later:
                frames = later + (frames or [])
            if keep and action.conn == own:
                frames = keep + (frames or [])
                keep.clear()
            if link is None or link.transport.is_closing():
                continue
            if frames:
                link.transport.write(b"".join(frames))
            link._close(link.transport)
        peer = self.engine.peer
        for conn, frames in out.items():
            if own is not None and conn != own and not getattr(peer(conn), "worker", True):
                later = deferred.get(conn)
                if later is None:
                    deferred[conn] = frames
                else:
                    later += frames
                if self._flush is None:
                    self._flush = asyncio.get_running_loop().call_soon(self._write_deferred)
                continue
            self._write_link(links.get(conn), frames)

    @staticmethod
    def _write_link(link: Any, frames: list[bytes]) -> None:
        """One write of ``frames`` to a live link, after its own answers kept from a
        throttled turn (they come first)."""
        if link is None or link.transport.is_closing():
            return
        data = frames
        if link.kept:
            data = link.kept + frames
            link.kept.clear()
        link.transport.write(data[0] if len(data) == 1 else b"".join(data))

    def _write_deferred(self) -> None:
        """Write what this loop iteration's turns sent to other connections that are no
        workers (see :meth:`_perform`), one write per connection."""
        self._flush = None
        deferred, self._deferred = self._deferred, {}
        links = self._links
        for conn, frames in deferred.items():
            self._write_link(links.get(conn), frames)
