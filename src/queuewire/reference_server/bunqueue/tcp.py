"""The bunqueue reference server's asyncio shell: :class:`BunqueueServer`.

All queue semantics live in :mod:`.engine`, and everything the protocol says about one peer
(decoding, the gate, transport errors, the pre-auth bound, slots, reply frames) in the
sans-IO :class:`~.connection.BunqueueConnection`; this module moves bytes and schedules.
``asyncio.start_server`` gives each connection a handler with its own connection object; the
handler reads, hands each read to it and carries out the actions it gives, in order: a
request that completes at once (all but a parked long poll) is answered inline, without a
task, and its reply is gathered with the next ones into writes of about ``FLUSH_BYTES``; a
long poll gets a task that holds one of the connection's ``max_in_flight`` slots (BQ-PIPE-2; one
slot until the connection's Hello, as protocol v1 is sequential: BQ-HELLO-3) until it is
answered, so at most that many commands of one connection are in flight, the rest wait in
arrival order (while all slots are taken one more chunk is read, no further, so a peer that
goes away is still noticed), and replies go out as they finish (out of order, correlated by
the echoed ``reqId``, verbatim). A request passes, in order: the per-connection
rate limit (when configured; every frame counts, as bunqueue counts), the authentication gate
(with tokens configured, everything but Auth is refused until an Auth succeeds; tokens are
compared by the engine's constant-time :func:`~.commands.auth.check_token`; until then a frame may
declare at most ``safeguards.pre_auth_frame_bytes``, a larger one is refused as too large
before its payload is read: BQ-SAFE-1), the schema
(:class:`~queuewire.codecs.validation.BunqueueValidator`; a violation is answered with the
spec's ``invalid_request`` message naming the requirement id and path) and then
:meth:`~.engine.BunqueueEngine.handle`. A :class:`~.engine.Wait` (a long poll) parks its
task in the engine's :class:`~.waits.ParkingLot` (shared with the HTTP frontend), which the
engine's ``notify`` hook wakes FIFO, as many polls as an :class:`~.engine.Event` may serve; a
woken task calls ``retry``, or ``expire`` at its deadline; beyond
``safeguards.max_parked_polls`` a poll is answered at once, as if it had timed out. One
background task calls ``tick`` at ``next_deadline`` (at least every ``tick_interval``), woken
early when a request brings the deadline forward. A ``reply`` protocol error is answered
(bunqueue's transport strings, never a reqId) and decoding continues after the bad frame; a
``close`` error (a frame too large) is answered once, after the requests before it, and the
connection is closed; a stream ending inside a frame is closed unanswered. Closing a
connection cancels its parked polls and calls ``connection_closed``, which returns its active
jobs to waiting (BQ-CONN-1). Flow control (:mod:`.._flow`): a connection is not read while
more than ``OUTPUT_HIGH_WATER`` bytes of its replies are unsent (every write is followed by
``drain()``, which waits only then), so a peer that does not read costs bounded memory and
slows only itself (BQ-FLOW-1); a read's requests are handled ``FRAMES_PER_TURN`` at a time
with a yield between, so a flood on one connection does not starve the others (BQ-FLOW-2); a
frame not complete ``partial_frame_timeout`` after its first byte closes the connection
(BQ-FLOW-3); the half-received frames of all connections hold at most
``safeguards.max_buffered_bytes`` (:mod:`.intake`); a connection beyond
``safeguards.max_connections`` is closed at accept; an event for a subscriber whose unsent
output is over the bound closes it (BQ-EVENT-103). Any unexpected exception is logged and
closes that connection only. Where the profile defines ``job_events`` (bunqueue/2.9.5), the
engine's ``publish`` hook writes each event frame, without reqId, to the connections
subscribed to its queue (BQ-EVENT-102). Every error string and limit comes from the profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import itertools
import logging
import os
import time
from collections.abc import Iterable
from typing import Any, cast

from ...codecs.bunqueue import FrameEncoder
from ...codecs.errors import EncodeError
from ...spec import Profile
from .._flow import (
    DEFAULT_LISTEN_BACKLOG,
    DEFAULT_PARTIAL_FRAME_TIMEOUT,
    FRAMES_PER_TURN,
    FrameBudget,
    PartialFrameTimeout,
    limit_output,
    next_turn,
    output_congested,
    read_chunk,
)
from .._service import TcpService
from .connection import BunqueueConnection, Close, Park, RateWindow
from .engine import BunqueueEngine
from .gate import RequestGate
from .http import HttpFrontend
from .intake import FrameIntake
from .model import EngineConfig, Event, Wait
from .sqlite import FLUSH_INTERVAL_MS, SqliteStore
from .store import NullStore
from .waits import WaitRoom

__all__ = ["BunqueueServer", "tune_gc"]

log = logging.getLogger("queuewire.reference_server.bunqueue")
READ_SIZE = 64 * 1024        # bytes per read: one socket buffer's worth
DEFAULT_TICK_INTERVAL = 1.0  # seconds: the longest the timer sleeps when no deadline is known
MIN_TICK_SLEEP = 0.001       # seconds: a deadline already due never makes the timer spin
FLUSH_BYTES = 64 * 1024      # replies gathered before one write: a socket buffer's worth, so a
                             # read of small requests costs one send, and a big reply is written
                             # (and its memory freed) before the next one is built


# The young-generation threshold the serve command sets (CPython's default is 700). Every
# PUSH leaves a few container objects alive (the job, its timeline, its data), so with the
# default the collector runs every ~100 pushes and re-walks the growing set of live jobs; it
# took about a third of a PUSH's time in the engine (a profile in benchmarks/README.md's history).
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Process-wide collector settings for a server process (called by ``queuewire serve
    bunqueue``, never by the library): a larger young generation, and what was allocated
    while starting (the loaded spec, compiled schemas) frozen out of later collections."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    gc.freeze()


def _now_ms() -> float:
    """The engine's default clock (ms since the epoch), used to time parked polls."""
    return time.time() * 1000.0


class _Connection:
    """The shell's side of one TCP connection: its socket, its tasks and its frame intake;
    the protocol's side is :attr:`link` (a sans-IO :class:`~.connection.BunqueueConnection`)."""

    __slots__ = ("closing", "id", "intake", "link", "next_read", "parked", "reader",
                 "slot_free", "tasks", "writer")

    def __init__(self, link: BunqueueConnection, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, intake: FrameIntake):
        self.link = link
        self.id = link.id
        self.reader = reader
        self.writer = writer
        self.tasks: set[asyncio.Task] = set()     # parked polls' tasks
        self.parked: set[asyncio.Task] = set()    # ... those not yet woken (or not yet run)
        self.slot_free = asyncio.Event()          # set when a parked poll gives its slot back
        self.closing = False
        # a read started while the connection waits for a slot, so that a peer that goes
        # away is noticed even when its requests fill every slot (at most one chunk ahead)
        self.next_read: asyncio.Task | None = None
        self.intake = intake   # the frame in progress: its deadline, its share of the budget


class BunqueueServer(TcpService):
    """A bunqueue server on a TCP port.

    ``port=None`` is the profile's ``default_port``; ``port=0`` picks a free port.
    ``auth_tokens``: with any, connections must Auth first (BQ-AUTH-2). ``rate_limit``:
    ``(requests, window_seconds)`` per connection, or None (off; the spec gives no default).
    ``engine``: a ready :class:`~.engine.BunqueueEngine` (its ``notify`` is chained).
    ``data_path``: keep jobs in a SQLite file (:class:`~.sqlite.SqliteStore`, WAL):
    a PUSH with ``durable: true`` is committed before it is answered, other writes within the
    store's flush bound (``FLUSH_INTERVAL_MS``, also run on a timer here); the file is
    recovered on start and closed on stop. ``http_port``: also serve the HTTP API
    (:class:`~.http.HttpFrontend`, same host, engine and tokens) on that port (0 picks
    a free one), started and stopped with the server; None (the default) serves no HTTP.
    ``config``: the :class:`~.engine.EngineConfig` of the engine built here (stall
    interval, lock TTL, ...); None uses the profile's defaults. ``partial_frame_timeout``:
    seconds from a frame's first byte by which it must be complete, else the connection is
    closed (BQ-FLOW-3; None or 0: never). ``backlog``: the listen queue's length.

    The server's own bounds are the profile's ``safeguards`` (BQ-SAFE-1), public attributes a
    test may lower before connections come: ``max_connections`` (TCP connections served at
    once; one beyond is closed at accept), ``frame_budget`` (a
    :class:`~.._flow.FrameBudget` of ``max_buffered_bytes`` over all connections'
    half-received frames) and, with tokens, ``pre_auth_frame_bytes`` (the largest frame an
    unauthenticated connection may declare). ``max_parked_polls`` is the
    :class:`~.waits.ParkingLot`'s, shared with the HTTP frontend of the same engine.
    """

    #: the sans-IO connection each accepted socket gets (a seam: a test's deliberately
    #: broken server gives a subclass)
    connection: type[BunqueueConnection] = BunqueueConnection

    def __init__(self, profile: Profile | str = "bunqueue/v2", host: str = "127.0.0.1",
                 port: int | None = None, *, auth_tokens: Iterable[str] = (),
                 engine: BunqueueEngine | None = None,
                 rate_limit: tuple[int, float] | None = None,
                 tick_interval: float = DEFAULT_TICK_INTERVAL,
                 data_path: str | os.PathLike[str] | None = None,
                 http_port: int | None = None,
                 config: EngineConfig | None = None,
                 partial_frame_timeout: float | None = DEFAULT_PARTIAL_FRAME_TIMEOUT,
                 backlog: int = DEFAULT_LISTEN_BACKLOG):
        if engine is not None and (data_path is not None or config is not None):
            raise ValueError("give either an engine or a data_path and config, not both")
        self._sqlite: SqliteStore | None = None
        if engine is None:
            # in memory, nothing reads job records back: a NullStore skips building them
            store = NullStore() if data_path is None else SqliteStore(data_path)
            self._sqlite = store if isinstance(store, SqliteStore) else None
            engine = BunqueueEngine(profile, store=store, config=config)
        self.engine = engine
        self.profile = self.engine.profile
        spec = self.profile.model
        self.host = host
        self._port = spec.default_port if port is None else port
        self._tokens = tuple(t for t in auth_tokens if t)
        if rate_limit is not None and (rate_limit[0] < 1 or rate_limit[1] <= 0):
            raise ValueError(f"rate_limit needs at least 1 request per positive window, "
                             f"got {rate_limit!r}")
        self._rate_limit = rate_limit
        if tick_interval <= 0:
            raise ValueError(f"tick_interval must be positive, got {tick_interval!r}")
        self._tick_interval = tick_interval
        if partial_frame_timeout is not None and partial_frame_timeout < 0:
            raise ValueError(f"partial_frame_timeout must be >= 0, got {partial_frame_timeout!r}")
        self._partial_timeout = partial_frame_timeout or None
        if backlog < 1:
            raise ValueError(f"backlog must be at least 1, got {backlog!r}")
        self.backlog = backlog
        self._max_in_flight = int(self.profile.limit("max_in_flight").value)
        self._slots_before_hello = int(self.profile.limit("max_in_flight_without_hello").value)
        self._max_frame = spec.max_frame_bytes
        safeguards = spec.safeguards  # BQ-SAFE-1
        self.max_connections = int(safeguards["max_connections"])
        self.pre_auth_frame_bytes = min(int(safeguards["pre_auth_frame_bytes"]), self._max_frame)
        self.frame_budget = FrameBudget(int(safeguards["max_buffered_bytes"]))
        self._refused_at = -float("inf")  # when a connection over max_connections was logged
        #: the request path (rate limit, shape, auth, validation, engine): sans-IO, shared
        #: with the embedded server
        self.gate = RequestGate(self.engine, self._tokens)
        self._encoder = FrameEncoder(self.profile, wide_integers=True)  # BQ-MSGPACK-8
        self._prefix_size = len(self._encoder.prefix(0))
        self._server: asyncio.Server | None = None
        self._connections: dict[str, _Connection] = {}
        self._handlers: set[asyncio.Task] = set()
        self._ids = itertools.count(1)
        self._room = WaitRoom(self.engine)  # parked long polls
        self._rate_clock = time.monotonic
        self._ticker: asyncio.Task | None = None
        self._flusher: asyncio.Task | None = None
        self._tick_wake: asyncio.Event | None = None
        self._tick_at = float("inf")  # ms: when the timer will next run the engine's tick
        self.engine.listen(notify=self._notify, publish=self._publish)
        self._http_port = http_port
        self.http: Any = None  # the HttpFrontend while serving with http_port

    # -- lifecycle
    async def start(self) -> BunqueueServer:
        await self.listen(self._serve)
        if self._http_port is not None:
            try:
                self.http = await HttpFrontend(self, self.host, self._http_port).start()
            except BaseException:
                server, self._server = self._server, None
                if server is not None:
                    server.close()
                    await server.wait_closed()
                raise
        self.start_timers()
        log.info("%s server listening on %s:%d", self.profile.name, self.host, self._port)
        return self

    def start_timers(self) -> None:
        """Start the engine's timer and the store's flush loop (``start`` does; an embedded
        server, which never listens, calls only this)."""
        self._tick_wake = asyncio.Event()
        self._ticker = asyncio.create_task(self._tick_loop(), name="bunqueue-tick")
        if self._sqlite is not None:
            self._flusher = asyncio.create_task(self._flush_loop(), name="bunqueue-flush")

    async def stop_timers(self) -> None:
        """Stop what :meth:`start_timers` started; close the store (an embedded server)."""
        tasks = [t for t in (self._ticker, self._flusher) if t is not None]
        self._ticker = self._flusher = None
        self._tick_wake = None
        self._room.cancel_all()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._sqlite is not None:
            self._sqlite.close()

    async def stop(self) -> None:
        """Stop listening, close every connection and stop the timer."""
        server, self._server = self._server, None
        if server is None:
            return
        http, self.http = self.http, None
        if http is not None:
            await http.stop()
        server.close()
        for conn in list(self._connections.values()):
            conn.writer.transport.abort()  # unblocks a drain to a peer that never reads
        tasks = list(self._handlers)
        for timer in (self._ticker, self._flusher):
            if timer is not None:
                tasks.append(timer)
        self._ticker = self._flusher = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        if self._sqlite is not None:
            self._sqlite.close()  # flushes what is buffered

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def parked_polls(self) -> int:
        """Long polls (PULL with a timeout, WaitJob) parked now."""
        return self._room.parked

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    # -- connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:  # BQ-SAFE-1
            self._refuse_connection(writer)
            return
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        rate = RateWindow(*self._rate_limit, self._rate_clock) \
            if self._rate_limit is not None else None
        # before Auth, only small frames (BQ-SAFE-1 pre_auth_frame_bytes); Auth lifts it
        link = self.connection(f"c{next(self._ids)}", self.gate, self._encoder, self._room,
                               max_in_flight=self._max_in_flight,
                               slots_before_hello=self._slots_before_hello,
                               pre_auth_frame_bytes=self.pre_auth_frame_bytes, rate=rate)
        intake = FrameIntake(self.frame_budget, self._partial_timeout, self._prefix_size,
                             small=READ_SIZE)
        conn = _Connection(link, reader, writer, intake)
        limit_output(writer.transport)  # drain() waits only while over it: BQ-FLOW-1
        self._connections[conn.id] = conn
        reason = "connection closed"
        try:
            self.engine.connection_opened(conn.id)
            while not conn.closing:
                data = await self._read(conn)
                if data is None:
                    reason = "partial frame past its deadline"
                    break
                if not data:
                    await self._on_eof(conn)
                    break
                await self._receive(conn, data)
        except asyncio.CancelledError:  # stop(): this task is ours, nobody awaits it
            reason = "server stopping"
        except OSError as exc:  # reset, broken pipe: the peer is gone
            reason = f"connection lost: {exc}"
            log.debug("connection %s: %s", conn.id, reason)
        except Exception:  # a bug, not the peer's bytes: this connection only
            reason = "internal error"
            log.exception("connection %s: unexpected error, closing it", conn.id)
        finally:
            await self._close(conn, reason)
            self._handlers.discard(task)

    def _refuse_connection(self, writer: asyncio.StreamWriter) -> None:
        """A connection beyond ``max_connections``: closed unserved (logged at most once a
        minute, so a connect flood does not flood the log too)."""
        writer.transport.abort()
        now = time.monotonic()
        if now - self._refused_at >= 60.0:
            self._refused_at = now
            log.warning("refusing connections beyond max_connections (%d) (BQ-SAFE-1)",
                        self.max_connections)

    async def _read(self, conn: _Connection) -> bytes | None:
        """The next chunk from the peer (b"" at its end); None when the frame it is inside
        was not complete by its deadline (BQ-FLOW-3): the connection is then closed without a
        reply, as bunqueue closes a stalled connection. A connection whose frame does not fit
        the frame budget waits for room first (BQ-SAFE-1 max_buffered_bytes)."""
        assert conn.reader is not None
        pending, conn.next_read = conn.next_read, None
        intake = conn.intake
        try:
            if intake.owed:
                await intake.admit()
            return await read_chunk(conn.reader, READ_SIZE, deadline=intake.deadline,
                                    pending=pending)
        except PartialFrameTimeout:
            if pending is not None:
                pending.cancel()
            log.warning("connection %s: closing it, a frame not complete %gs after its first "
                        "byte (%d bytes received, BQ-FLOW-3)", conn.id, self._partial_timeout,
                        conn.link.progress[1])
            return None

    async def _receive(self, conn: _Connection, data: bytes) -> None:
        """Hand a chunk to the connection and carry out what follows; then note where the
        frame in progress stands (its deadline, its share of the frame budget)."""
        link = conn.link
        link.receive_data(data)
        await self._answer(conn)
        if not conn.closing and not link.closed:
            conn.intake.note(*link.progress)

    async def _answer(self, conn: _Connection) -> None:
        """Carry out the connection's actions until it has none: reply bytes gathered into
        writes of about FLUSH_BYTES, each followed by a wait while the peer has more than
        OUTPUT_HIGH_WATER bytes unread, so no further request of this connection is read or
        answered meanwhile (BQ-FLOW-1); a long poll parked in a task of its own; a close.
        Every FRAMES_PER_TURN frames the loop yields, so that the other connections are
        served during a flood on this one (BQ-FLOW-2). While every slot is held by a parked
        poll, it waits for one (BQ-PIPE-2) and reads at most one chunk ahead meanwhile."""
        link = conn.link
        turn = FRAMES_PER_TURN
        try:
            while not conn.closing:
                actions = link.next_actions(turn, FLUSH_BYTES)
                turn -= link.handled
                out: list[bytes] = []
                for action in actions:
                    if type(action) is bytes:
                        out.append(action)
                    elif type(action) is Park:
                        task = asyncio.create_task(self._park(conn, action))
                        # parked from now on (a poll cancelled before its task first runs is
                        # dropped too), and its slot given back however the task ends
                        conn.tasks.add(task)
                        conn.parked.add(task)
                        task.add_done_callback(functools.partial(self._slot_back, conn))
                    else:
                        await self._flush(conn, out)
                        await self._end(conn, cast(Close, action))
                        return
                await self._flush(conn, out)
                if conn.closing or not link.pending:
                    return  # (a peer that is gone: its unread requests are not worth answering)
                if link.blocked:
                    if not await self._wait_for_slot(conn):  # BQ-PIPE-2: excess requests wait
                        return
                elif turn <= 0:
                    turn = FRAMES_PER_TURN
                    await next_turn()  # BQ-FLOW-2: let the other connections in
        finally:
            self.poke_timer()

    async def _end(self, conn: _Connection, close: Close) -> None:
        """The connection's Close: an abort (a bug) resets it; a refused frame (BQ-FRAME-2)
        cancels its parked polls, writes the refusal and closes it."""
        if close.abort:
            conn.closing = True
            conn.writer.transport.abort()
            return
        await self._settle(conn)
        if close.farewell and not conn.writer.is_closing():
            conn.writer.write(close.farewell)
            with contextlib.suppress(OSError):
                await conn.writer.drain()
        conn.closing = True

    async def _flush(self, conn: _Connection, out: list[bytes]) -> None:
        """Write the replies gathered so far in one write, then wait for the peer to read."""
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        writer = conn.writer
        if writer.is_closing():
            conn.closing = True
            return
        try:
            writer.write(data)
            await writer.drain()
        except OSError as exc:
            log.debug("connection %s: write failed: %s", conn.id, exc)
            conn.closing = True
            writer.transport.abort()

    async def _wait_for_slot(self, conn: _Connection) -> bool:
        """Wait until a parked poll gives its slot back; False when the connection was reset
        (or is closing) meanwhile, and then the requests still waiting are dropped. One chunk
        is read meanwhile, no further: a peer that sent more is answered after this backlog;
        a peer that closed its half has its parked polls dropped and its backlog answered."""
        link = conn.link
        while link.blocked and not conn.closing:
            conn.slot_free.clear()
            if conn.next_read is None:
                conn.next_read = asyncio.create_task(conn.reader.read(READ_SIZE))
            peek = conn.next_read
            if not peek.done():
                freed = asyncio.create_task(conn.slot_free.wait())
                try:
                    await asyncio.wait((freed, peek), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not freed.done():
                        freed.cancel()
                continue
            if peek.cancelled() or peek.exception() is not None:
                conn.closing = True  # the peer is gone (reset): stop serving its backlog
                return False
            if not peek.result():
                # the peer closed its half: as at any end of stream its parked polls are
                # dropped, which frees their slots, and the requests it sent after them are
                # still answered (a protocol-v1 connection has one slot, so a long poll and
                # the commands pipelined behind it before a half-close would be lost)
                await self._settle(conn)
                continue
            await conn.slot_free.wait()  # the peer sent more: that chunk is read after this
        return not conn.closing

    async def _on_eof(self, conn: _Connection) -> None:
        """The peer closed its side: finish what it sent (a stream that ends inside a frame
        is closed unanswered, as bunqueue does), drop its parked polls."""
        conn.link.receive_eof()
        await self._settle(conn)

    async def _settle(self, conn: _Connection) -> None:
        """Cancel the connection's parked polls and let its other requests finish."""
        for task in list(conn.parked):
            task.cancel()
        if conn.tasks:
            await asyncio.gather(*list(conn.tasks), return_exceptions=True)

    async def _close(self, conn: _Connection, reason: str) -> None:
        conn.closing = True
        conn.link.close(reason)
        conn.intake.release()
        if conn.next_read is not None:
            conn.next_read.cancel()
        for task in list(conn.tasks):
            task.cancel()
        if conn.tasks:
            await asyncio.gather(*list(conn.tasks), return_exceptions=True)
        try:
            released = self.engine.connection_closed(conn.id)
            if released:
                log.info("connection %s (%s): %d active jobs back to waiting", conn.id,
                         reason, len(released))
        except Exception:  # noqa: BLE001 - never let one connection's cleanup stop the server
            log.exception("connection %s: error while closing it", conn.id)
        self._connections.pop(conn.id, None)
        conn.writer.close()
        self.poke_timer()

    # -- requests
    async def _park(self, conn: _Connection, park: Park) -> None:
        """A long poll: parked (holding its slot) until woken or expired, then answered."""
        try:
            task = asyncio.current_task()
            assert task is not None
            try:
                reply = await self._room.park(conn.id, park.wait)
            finally:
                conn.parked.discard(task)   # woken or expired: its reply is written now
            writer = conn.writer
            if not writer.is_closing():
                writer.write(conn.link.answer(park.request, reply))
                await writer.drain()
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            log.debug("connection %s: write failed: %s", conn.id, exc)
            conn.writer.transport.abort()
        except Exception:  # a bug: close this connection only
            log.exception("connection %s: error answering a request, closing it", conn.id)
            conn.closing = True
            conn.writer.transport.abort()
        finally:
            self.poke_timer()

    def _slot_back(self, conn: _Connection, task: asyncio.Task) -> None:
        """A parked poll's task ended (answered, expired, cancelled, even before it first
        ran): its slot is free again."""
        conn.tasks.discard(task)
        conn.parked.discard(task)
        conn.link.unpark()
        conn.slot_free.set()

    def _notify(self, event: Event) -> None:
        """The engine's hook: wake the parked polls this event concerns. (Called for every
        job a PUSH or PUSHB adds, so with no poll parked at all it returns at once.)"""
        if self._room:
            self._room.wake(event)

    def _publish(self, conn_ids: tuple[str, ...], frame: dict) -> None:
        """The engine's hook: write a pushed event frame (no reqId, BQ-EVENT-102) to each of
        these connections, encoded once; written behind the replies already queued."""
        data = None
        for conn_id in conn_ids:
            conn = self._connections.get(conn_id)
            if conn is None or conn.closing or conn.writer.is_closing():
                continue
            if data is None:
                try:
                    data = self._encoder.encode(frame)
                except EncodeError as exc:
                    log.warning("cannot encode a job event: %s", exc)
                    return
            transport = conn.writer.transport
            if output_congested(transport):  # BQ-EVENT-103
                log.warning("connection %s: closing it, %d bytes unsent when a job event came "
                            "(BQ-EVENT-103)", conn.id, transport.get_write_buffer_size())
                conn.closing = True
                transport.abort()
                continue
            conn.writer.write(data)

    # -- for the embedded server: the same request path without a socket
    def park(self, conn_id: str, wait: Wait) -> Any:
        """Park a long poll (BQ-PIPE-2) until its event or its timeout: awaitable reply."""
        return self._room.park(conn_id, wait)

    @property
    def room(self) -> WaitRoom:
        """Where the server's long polls are parked (its connections ask whether it is full)."""
        return self._room

    @property
    def encoder(self) -> FrameEncoder:
        """The encoder the server writes replies with (BQ-MSGPACK-8's wide integers)."""
        return self._encoder

    # -- time
    def poke_timer(self) -> None:
        """Wake the timer if the engine's next deadline moved before its planned run."""
        if self._tick_wake is None:
            return
        deadline = self.engine.next_deadline()
        if deadline is not None and deadline < self._tick_at:
            self._tick_wake.set()

    async def _flush_loop(self) -> None:
        """Commit buffered (non-durable) writes every flush interval, so the bound holds even
        when no command arrives to trigger the store's own age check."""
        assert self._sqlite is not None
        interval = FLUSH_INTERVAL_MS / 1000.0
        while True:
            await asyncio.sleep(interval)
            self._sqlite.flush()  # never raises; a failure shows in StorageStatus

    async def _tick_loop(self) -> None:
        wake = self._tick_wake
        assert wake is not None
        while True:
            now = _now_ms()
            deadline = self.engine.next_deadline()
            sleep = self._tick_interval
            if deadline is not None:
                sleep = min(sleep, max(MIN_TICK_SLEEP, (deadline - now) / 1000.0))
            self._tick_at = now + sleep * 1000.0
            wake.clear()
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel
                async with asyncio.timeout(sleep):
                    await wake.wait()
            except TimeoutError:
                pass
            deadline = self.engine.next_deadline()
            if deadline is not None and deadline > _now_ms() and wake.is_set():
                continue  # woken for a deadline still ahead: sleep until it
            self._tick_at = float("inf")
            try:
                self.engine.tick()  # its events reach _notify
            except Exception:  # noqa: BLE001 - the timer must outlive a bug
                log.exception("bunqueue engine tick failed")
