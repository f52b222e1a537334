"""The quicx reference daemon's sans-IO core: a size-class task pool, the task engine and the
per-connection protocol logic, with no sockets and no clock.

:class:`QuicxConnection` is one client connection as the daemon sees it: bytes go in
(``receive_data``, ``receive_eof``), :class:`Send` and :class:`Close` actions come out. It owns
a :class:`~queuewire.codecs.quicx.QuicxDecoder` in the daemon role and answers every
``ProtocolError`` by its spec reaction: ``reply`` becomes a MSG_ERROR carrying the error's
code, ``close`` closes the connection. Decoded messages go to the shared
:class:`QuicxEngine`, which holds the queue (FIFO, QX-QUEUE-1), the workers and the
:class:`SizeClassPool`, and returns the frames to send to *any* connection (an OK to the
producer and a TASK to an idle worker, a forwarded DONE to the task's producer). Everything
the profiles disagree on is read from the spec: ``wait_when_empty`` (answer READY with WAIT
or hold the worker), ``ready_required_after_result`` (does a result re-arm the worker),
``forward_results_to_producer``, ``done_frees_slot_first``, ``requeue_on_worker_disconnect``
(QX-WORKER-1) and ``role_from_first_message``; the error codes a refusal carries come from
``protocol_errors`` (``queue_full``, ``task_too_large``, ``unknown_task_type``,
``unknown_task_id`` are the engine's own kinds). Workers are credit based: each READY that
finds no task (when the profile holds READYs) and each result (when the profile re-arms the
worker) is one credit, spent by the next TASK, so a worker connection has one task in flight
per credit it was given, and idle workers are served in the order they became idle. A task
is accounted in the pool from acceptance until its DONE or FAILED; a task requeued because its
worker disconnected keeps its slot and goes back to the head of the queue. The pool is a
slab allocator: power-of-two size classes up to the largest class, pages of the largest
class's size carved into slots of one class on demand and returned when empty, so "queue
full" and "payload too large" are real outcomes of a bounded pool. A task is stored as the
MSG_TASK frame it will be sent as, so its size is that frame's payload size, and a profile's
``max_payload_bytes`` (1024 in quicx/1.0.3) bounds the largest class.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..codecs.errors import ProtocolError
from ..codecs.quicx import Message, QuicxDecoder, QuicxEncodeError, QuicxEncoder
from ..spec import Profile, load_profile
from ..spec.quicx import DAEMON, QuicxSpec

__all__ = [
    "DEFAULT_LARGEST_CLASS",
    "DEFAULT_POOL_BYTES",
    "SMALLEST_CLASS",
    "Action",
    "ClassUsage",
    "Close",
    "EngineStats",
    "QuicxConnection",
    "QuicxEngine",
    "Send",
    "SizeClassPool",
    "Slot",
    "default_largest_class",
]

log = logging.getLogger("queuewire.reference_server.quicx")

# ----------------------------------------------------------------------- pool configuration
# Server configuration, not protocol: no document gives PMAD's classes or size.
#: Smallest slot. A task is at least 5 bytes (task id and type length); 64 bytes holds a short
#: type and a small payload, and keeps the number of classes (and of partial pages) small.
SMALLEST_CLASS = 64
#: Largest class when the profile sets no payload bound of its own (quicx/v1: 004 says only
#: "the largest size class", so the u32 length is the only limit). 64 KiB keeps one task far
#: below what a socket buffer holds and bounds what a peer can make the daemon buffer per frame.
DEFAULT_LARGEST_CLASS = 64 * 1024
#: Default pool: 64 MiB, a million queued tasks of the smallest class or a thousand of the
#: largest, a modest footprint for a reference daemon.
DEFAULT_POOL_BYTES = 64 * 1024 * 1024


def default_largest_class(spec: QuicxSpec) -> int:
    """The profile's ``max_payload_bytes`` when it is a real bound (quicx/1.0.3: 1024), else
    :data:`DEFAULT_LARGEST_CLASS`."""
    cap = spec.max_payload_bytes
    return cap if cap is not None and cap <= DEFAULT_LARGEST_CLASS else DEFAULT_LARGEST_CLASS


# ------------------------------------------------------------------------------------- pool

@dataclass(slots=True, eq=False)
class Slot:
    """One allocated slot: its class size, page and index in the page."""

    size: int
    page: int
    index: int
    live: bool = True


@dataclass(frozen=True, slots=True)
class ClassUsage:
    """One size class in a pool snapshot."""

    size: int
    slots_used: int
    slots_free: int       # free slots in the pages this class holds
    pages: int


class SizeClassPool:
    """A bounded slab allocator with power-of-two size classes.

    Classes run from ``smallest_class`` (a power of two) doubling up to ``largest_class``,
    which is always the top class even when it is not a power of two. The pool is
    ``total_bytes // largest_class`` pages of ``largest_class`` bytes; a class takes a free
    page when it has no free slot and carves it into ``page // class`` slots; a page whose
    slots are all free goes back to the pool. ``allocate`` returns None when no slot can be
    had (the pool is exhausted for that class); a size above the largest class has no class.
    ``bytes_used`` counts the class sizes of the live slots, ``bytes_total`` the pages.
    """

    def __init__(self, total_bytes: int, largest_class: int = DEFAULT_LARGEST_CLASS,
                 smallest_class: int = SMALLEST_CLASS):
        if smallest_class < 1 or smallest_class & (smallest_class - 1):
            raise ValueError(f"the smallest class must be a power of two, not {smallest_class}")
        if largest_class < smallest_class:
            raise ValueError(f"the largest class ({largest_class}) is below the smallest "
                             f"({smallest_class})")
        if total_bytes < largest_class:
            raise ValueError(f"a pool of {total_bytes} bytes cannot hold one page of the largest "
                             f"class ({largest_class} bytes)")
        classes, size = [], smallest_class
        while size < largest_class:
            classes.append(size)
            size *= 2
        classes.append(largest_class)
        self.classes: tuple[int, ...] = tuple(classes)
        self.page_size = largest_class
        self.pages_total = total_bytes // largest_class
        self.bytes_total = self.pages_total * self.page_size
        self.bytes_used = 0
        self._free_pages = list(range(self.pages_total - 1, -1, -1))
        self._partial: list[dict[int, None]] = [{} for _ in classes]  # pages with a free slot
        self._page_free: dict[int, list[int]] = {}
        self._page_used: dict[int, int] = {}
        self._page_class: dict[int, int] = {}
        self._slots_used = [0] * len(classes)

    @property
    def largest_class(self) -> int:
        return self.classes[-1]

    def class_for(self, size: int) -> int | None:
        """The class a ``size``-byte object goes in, or None when it exceeds the largest."""
        i = bisect.bisect_left(self.classes, size)
        return self.classes[i] if i < len(self.classes) else None

    def allocate(self, size: int) -> Slot | None:
        """A slot of the smallest class that holds ``size`` bytes, or None if there is none
        (the size exceeds the largest class, or the pool has no free slot of that class)."""
        ci = bisect.bisect_left(self.classes, size)
        if ci == len(self.classes):
            return None
        partial = self._partial[ci]
        if partial:
            page = next(iter(partial))
        elif self._free_pages:
            page = self._free_pages.pop()
            n = self.page_size // self.classes[ci]
            self._page_free[page] = list(range(n - 1, -1, -1))
            self._page_used[page] = 0
            self._page_class[page] = ci
            partial[page] = None
        else:
            return None
        free = self._page_free[page]
        index = free.pop()
        self._page_used[page] += 1
        if not free:
            del partial[page]
        self._slots_used[ci] += 1
        self.bytes_used += self.classes[ci]
        return Slot(self.classes[ci], page, index)

    def free(self, slot: Slot) -> None:
        """Return ``slot``; its page goes back to the pool when it has no live slot left."""
        if not slot.live:
            raise ValueError(f"slot {slot} is freed twice")
        slot.live = False
        page, ci = slot.page, self._page_class[slot.page]
        self._page_free[page].append(slot.index)
        self._page_used[page] -= 1
        self._slots_used[ci] -= 1
        self.bytes_used -= self.classes[ci]
        partial = self._partial[ci]
        if self._page_used[page] == 0:
            partial.pop(page, None)
            del self._page_free[page], self._page_used[page], self._page_class[page]
            self._free_pages.append(page)
        else:
            partial[page] = None

    def snapshot(self) -> tuple[ClassUsage, ...]:
        pages = [0] * len(self.classes)
        for ci in self._page_class.values():
            pages[ci] += 1
        return tuple(
            ClassUsage(size, self._slots_used[ci],
                       pages[ci] * (self.page_size // size) - self._slots_used[ci], pages[ci])
            for ci, size in enumerate(self.classes))


# ---------------------------------------------------------------------------------- actions

@dataclass(frozen=True, slots=True)
class Send:
    """Write ``frame`` (an encoded ``message``) to connection ``conn``."""

    conn: int
    message: str
    frame: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close connection ``conn`` (after what was sent to it before)."""

    conn: int
    reason: str


Action = Send | Close


# ----------------------------------------------------------------------------------- engine

@dataclass(slots=True, eq=False)
class Task:
    """An accepted task, from MSG_OK to its DONE or FAILED."""

    id: int
    seq: int                  # order of acceptance (ids wrap; this does not)
    task_type: str
    payload: bytes
    frame: bytes              # the MSG_TASK frame it is dispatched as
    slot: Slot
    producer: int             # connection it was submitted on
    worker: int | None = None
    dispatches: int = 0


@dataclass(slots=True, eq=False)
class Peer:
    """A connection as the engine sees it."""

    id: int
    role: str | None = None   # first SUBMIT or READY, when the profile fixes roles (not enforced)
    worker: bool = False      # has sent MSG_READY
    credits: int = 0          # tasks the daemon may send it without a new READY
    in_flight: dict[int, Task] = field(default_factory=dict)
    open: bool = True


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine: the MSG_STATS_RESPONSE figures and more."""

    queue_depth: int
    workers_total: int
    workers_idle: int
    in_flight: int
    pool_bytes_used: int
    pool_bytes_total: int
    connections: int
    accepted: int
    done: int
    failed: int
    requeued: int
    refused: Mapping[str, int]
    classes: tuple[ClassUsage, ...]


class QuicxEngine:
    """The daemon's state: queue, workers, pool. Pure: messages in, actions out.

    ``open()`` registers a connection and returns its id; ``handle(conn, message)`` processes a
    decoded message from it; ``refuse(conn, error)`` answers a ``reply`` ProtocolError;
    ``disconnect(conn)`` forgets it (requeuing its tasks in flight). Each returns the actions
    that follow, in order. ``task_types`` restricts the accepted task types (QX-SUBMIT-3);
    ``largest_class`` defaults to :func:`default_largest_class` and may not exceed the
    profile's ``max_payload_bytes``.
    """

    def __init__(self, profile: Profile | str = "quicx/v1", *, pool_bytes: int = DEFAULT_POOL_BYTES,
                 task_types: Iterable[str] | None = None, largest_class: int | None = None,
                 smallest_class: int = SMALLEST_CLASS):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        if self.profile.protocol != "quicx":
            raise ValueError(f"profile {self.profile.name} is not a quicx profile")
        spec: QuicxSpec = self.profile.model
        self.spec = spec
        if largest_class is None:
            largest_class = default_largest_class(spec)
        cap = spec.max_payload_bytes
        if cap is not None and largest_class > cap:
            raise ValueError(f"the largest class ({largest_class}) exceeds {self.profile.name}'s "
                             f"max_payload_bytes ({cap}): such a task could not be sent")
        self.pool = SizeClassPool(pool_bytes, largest_class, smallest_class)
        self.task_types = None if task_types is None else frozenset(task_types)
        self.encoder = QuicxEncoder(self.profile, DAEMON)
        self._hsize = spec.header_size
        self._wait_when_empty = bool(spec.flag("wait_when_empty"))
        self._ready_after_result = bool(spec.flag("ready_required_after_result"))
        self._forward = bool(spec.flag("forward_results_to_producer"))
        self._free_first = bool(spec.flag("done_frees_slot_first"))
        self._requeue = bool(spec.flag("requeue_on_worker_disconnect"))
        self._fix_role = bool(spec.flag("role_from_first_message"))
        self._id_max = next(f for f in spec.message("MSG_OK").layout if f.id == "task_id").max_value
        # frames without fields are the same every time
        self._constant = {name: self.encoder.encode(name) for name, m in spec.messages.items()
                          if not m.layout and spec.allowed(name, sender=DAEMON)}
        self._handlers: dict[str, Callable[[Peer, Message], list[Action]]] = {
            "MSG_SUBMIT": self._submit, "MSG_READY": self._ready, "MSG_DONE": self._result,
            "MSG_FAILED": self._result, "MSG_HEARTBEAT": self._heartbeat,
            "MSG_PONG": self._pong, "MSG_STATS": self._stats,
        }
        self.queue: deque[Task] = deque()
        self._tasks: dict[int, Task] = {}      # every live task (queued or in flight) by id
        self._peers: dict[int, Peer] = {}
        self._idle: deque[int] = deque()       # one entry per credit, oldest first
        self._conn_ids = itertools.count(1)
        self._seq = itertools.count()
        self._last_id = 0
        self._workers = 0
        self._counts = {"accepted": 0, "done": 0, "failed": 0, "requeued": 0}
        self._refused: dict[str, int] = {}

    # -- connections
    def open(self) -> int:
        conn = next(self._conn_ids)
        self._peers[conn] = Peer(conn)
        return conn

    def disconnect(self, conn: int) -> list[Action]:
        """The connection is gone: forget it and requeue its tasks in flight (QX-WORKER-1)."""
        peer = self._peers.pop(conn, None)
        if peer is None:
            return []
        peer.open = False
        if peer.worker:
            self._workers -= 1
        if peer.credits:
            self._idle = deque(c for c in self._idle if c != conn)
        out: list[Action] = []
        if peer.in_flight:
            tasks = sorted(peer.in_flight.values(), key=lambda t: t.seq)
            peer.in_flight.clear()
            if self._requeue:
                for task in reversed(tasks):  # back to the head, in order of acceptance
                    task.worker = None
                    self.queue.appendleft(task)
                self._counts["requeued"] += len(tasks)
                log.info("connection %d closed with task(s) %s in flight: requeued", conn,
                         ", ".join(str(t.id) for t in tasks))
                self._dispatch(out)
            else:
                for task in tasks:
                    self._forget(task)
                log.warning("connection %d closed with task(s) %s in flight: dropped", conn,
                            ", ".join(str(t.id) for t in tasks))
        return out

    # -- messages
    def handle(self, conn: int, message: Message) -> list[Action]:
        peer = self._peers[conn]
        handler = self._handlers.get(message.name)
        if handler is None:  # a message the decoder lets through but the daemon does not handle
            return self._refuse(peer, "wrong_direction", f"the daemon does not handle {message.name}")
        return handler(peer, message)

    def refuse(self, conn: int, error: ProtocolError) -> list[Action]:
        """The MSG_ERROR answering a ``reply`` error the decoder raised on ``conn``."""
        self._refused[error.kind] = self._refused.get(error.kind, 0) + 1
        return [Send(conn, "MSG_ERROR", self._error_frame(error.error_code, error.detail))]

    def _refuse(self, peer: Peer, kind: str, detail: str) -> list[Action]:
        self._refused[kind] = self._refused.get(kind, 0) + 1
        return [Send(peer.id, "MSG_ERROR", self._error_frame(self.spec.error_replies[kind], detail))]

    def _error_frame(self, code: int | None, detail: str) -> bytes:
        if code is None:
            raise ValueError("a refusal needs an error code")
        try:
            return self.encoder.error(code, detail)
        except QuicxEncodeError:  # a detail too long for the profile's payload cap
            return self.encoder.error(code, "")

    def _submit(self, peer: Peer, msg: Message) -> list[Action]:
        if self._fix_role and peer.role is None:
            peer.role = "producer"
        fields = msg.fields
        task_type, payload = fields["task_type"], fields["payload"]
        if self.task_types is not None and task_type not in self.task_types:
            return self._refuse(peer, "unknown_task_type",
                                f"task type {task_type!r} is not one this daemon accepts")
        task_id = self._next_id()
        try:
            frame = self.encoder.task(task_id, task_type, payload)
        except QuicxEncodeError:  # the TASK body would exceed the profile's payload cap
            return self._refuse(peer, "task_too_large",
                                f"a {len(payload)}-byte payload of type {task_type!r} does not fit "
                                f"a MSG_TASK")
        size = len(frame) - self._hsize
        if size > self.pool.largest_class:
            return self._refuse(peer, "task_too_large",
                                f"task of {size} bytes, the largest size class is "
                                f"{self.pool.largest_class}")
        slot = self.pool.allocate(size)
        if slot is None:
            return self._refuse(peer, "queue_full",
                                f"no free {self.pool.class_for(size)}-byte slot "
                                f"({self.pool.bytes_used} of {self.pool.bytes_total} bytes in use)")
        self._last_id = task_id
        task = Task(task_id, next(self._seq), task_type, payload, frame, slot, peer.id)
        self._tasks[task_id] = task
        self._counts["accepted"] += 1
        out: list[Action] = [Send(peer.id, "MSG_OK", self.encoder.ok(task_id))]
        self.queue.append(task)
        self._dispatch(out)
        return out

    def _next_id(self) -> int:
        tid = self._last_id
        for _ in range(len(self._tasks) + 1):
            tid = tid + 1 if tid < self._id_max else 1
            if tid not in self._tasks:
                return tid
        raise RuntimeError("every task id is in use")  # pragma: no cover - 2**32 live tasks

    def _ready(self, peer: Peer, msg: Message | None = None) -> list[Action]:
        if self._fix_role and peer.role is None:
            peer.role = "worker"
        if not peer.worker:
            peer.worker = True
            self._workers += 1
        out: list[Action] = []
        self._arm(peer, out)
        return out

    def _arm(self, peer: Peer, out: list[Action]) -> None:
        """The worker may take one more task: hand it the next one, answer WAIT, or hold."""
        if self.queue:
            self._hand(peer, self.queue.popleft(), out)
        elif self._wait_when_empty:
            out.append(Send(peer.id, "MSG_WAIT", self._constant["MSG_WAIT"]))
        else:
            peer.credits += 1
            self._idle.append(peer.id)

    def _dispatch(self, out: list[Action]) -> None:
        """Hand queued tasks to credited workers, oldest credit first."""
        queue, idle, peers = self.queue, self._idle, self._peers
        while queue and idle:
            peer = peers.get(idle.popleft())
            if peer is None or peer.credits == 0:
                continue
            peer.credits -= 1
            self._hand(peer, queue.popleft(), out)

    def _hand(self, peer: Peer, task: Task, out: list[Action]) -> None:
        task.worker = peer.id
        task.dispatches += 1
        peer.in_flight[task.id] = task
        out.append(Send(peer.id, "MSG_TASK", task.frame))

    def _result(self, peer: Peer, msg: Message) -> list[Action]:
        task_id = msg.fields["task_id"]
        task = peer.in_flight.pop(task_id, None)
        if task is None:
            return self._refuse(peer, "unknown_task_id",
                                f"task {task_id} is not in flight on this connection")
        if self._free_first:  # QX-DONE-2: the slot is back before any producer hears of it
            self._forget(task)
        if msg.name == "MSG_DONE":
            self._counts["done"] += 1
        else:
            self._counts["failed"] += 1
            log.info("task %d (%s) failed: %s", task_id, task.task_type, msg.fields.get("reason", ""))
        out: list[Action] = []
        if self._forward:
            producer = self._peers.get(task.producer)
            if producer is not None:
                out.append(Send(producer.id, msg.name, self.encoder.encode(msg.name, **msg.fields)))
        if not self._free_first:
            self._forget(task)
        if not self._ready_after_result:  # the daemon hands the worker its next task unasked
            self._arm(peer, out)
        return out

    def _forget(self, task: Task) -> None:
        del self._tasks[task.id]
        self.pool.free(task.slot)

    def _heartbeat(self, peer: Peer, msg: Message) -> list[Action]:
        return [Send(peer.id, "MSG_PONG", self._constant["MSG_PONG"])]

    def _pong(self, peer: Peer, msg: Message) -> list[Action]:
        return []  # the answer to a heartbeat; this daemon sends none, so nothing to match

    def _stats(self, peer: Peer, msg: Message) -> list[Action]:
        s = self.stats()
        figures = {"queue_depth": s.queue_depth, "workers_total": s.workers_total,
                   "workers_idle": s.workers_idle, "pmad_bytes_used": s.pool_bytes_used,
                   "pmad_bytes_total": s.pool_bytes_total}
        layout = self.spec.message("MSG_STATS_RESPONSE").layout
        frame = self.encoder.encode("MSG_STATS_RESPONSE", **{f.id: figures[f.id] for f in layout})
        return [Send(peer.id, "MSG_STATS_RESPONSE", frame)]

    # -- introspection
    def stats(self) -> EngineStats:
        peers = self._peers.values()
        return EngineStats(
            queue_depth=len(self.queue), workers_total=self._workers,
            workers_idle=sum(1 for p in peers if p.worker and not p.in_flight),
            in_flight=sum(len(p.in_flight) for p in peers),
            pool_bytes_used=self.pool.bytes_used, pool_bytes_total=self.pool.bytes_total,
            connections=len(self._peers), refused=dict(self._refused),
            classes=self.pool.snapshot(), **self._counts,
        )

    def peer(self, conn: int) -> Peer | None:
        return self._peers.get(conn)


# ------------------------------------------------------------------------------- connection

class QuicxConnection:
    """One client connection of the daemon: bytes in, actions out (for every connection)."""

    def __init__(self, engine: QuicxEngine):
        self.engine = engine
        self.id = engine.open()
        # a frame longer than the largest class can hold no task: refused from its header
        self.decoder = QuicxDecoder(engine.profile, DAEMON, max_payload=engine.pool.largest_class)
        self.closed = False
        self.close_reason: str | None = None

    def receive_data(self, data: bytes) -> list[Action]:
        """Bytes from the peer; every complete frame is handled, every error answered."""
        if self.closed:
            return []
        engine, out = self.engine, []
        while True:
            try:
                frames = self.decoder.feed(data)
            except ProtocolError as exc:
                for msg in exc.frames:
                    out.extend(engine.handle(self.id, msg))
                if exc.reaction == "reply":
                    out.extend(engine.refuse(self.id, exc))
                    data = b""  # go on with what is buffered after the refused frame
                    continue
                log.debug("connection %d: %s", self.id, exc)
                out.extend(self._close(str(exc)))
                return out
            for msg in frames:
                out.extend(engine.handle(self.id, msg))
            return out

    def receive_eof(self) -> list[Action]:
        """The peer closed its side: check the stream did not stop inside a frame, then close."""
        if self.closed:
            return []
        reason = "peer closed the connection"
        try:
            self.decoder.eof()
        except ProtocolError as exc:
            reason = str(exc)
            log.debug("connection %d: %s", self.id, exc)
        return self._close(reason)

    def connection_lost(self, reason: str = "connection lost") -> list[Action]:
        return self._close(reason)

    def _close(self, reason: str) -> list[Action]:
        if self.closed:
            return []
        self.closed, self.close_reason = True, reason
        return [Close(self.id, reason), *self.engine.disconnect(self.id)]
