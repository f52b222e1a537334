"""The quicx daemon's state and rules: :class:`QuicxEngine`, pure (messages in, actions out).

The engine holds the queue (FIFO, QX-QUEUE-1), the connected peers, the workers and their
credits, and the :class:`~.pool.SizeClassPool`. It is fed decoded messages by
:class:`~.connection.QuicxConnection` and returns :class:`Send` and :class:`Close` actions for
*any* connection (an OK to the producer and a TASK to an idle worker, a forwarded DONE to the
task's producer); it owns no socket and no clock. Everything the profiles disagree on is read
from the spec: ``wait_when_empty`` (answer READY with WAIT or hold the worker),
``ready_required_after_result`` (does a result re-arm the worker),
``forward_results_to_producer``, ``done_frees_slot_first`` (QX-DONE-2),
``requeue_on_worker_disconnect`` (QX-WORKER-1) and ``role_from_first_message``; the error codes
a refusal carries come from ``protocol_errors`` (``queue_full``, ``task_too_large``,
``unknown_task_type``, ``unknown_task_id`` are the engine's own kinds).

Workers are credit based: each READY that finds no task (when the profile holds READYs) and
each result (when the profile re-arms the worker) is one credit, spent by the next TASK, so a
worker connection has one task in flight per credit it was given, and idle workers are served
in the order they became idle. A task is accounted in the pool from acceptance until its DONE
or FAILED; a task requeued because its worker disconnected keeps its slot and goes back to the
head of the queue. A task is stored as the MSG_TASK frame it will be sent as, so its size is
that frame's payload size. Frames of integer fields only (MSG_OK, MSG_STATS_RESPONSE) are
packed with ``struct`` from the spec's layout rather than through the encoder, and MSG_TASK,
whose layout is MSG_SUBMIT's with the task id in front (the engine checks the two layouts
say so), is one pack of header and id followed by the SUBMIT's own payload bytes (else the
encoder's struct plan builds it), and a result forwarded to its producer is the worker's
frame itself when it carries the current version (what the encoder would build from its
decoded fields), so an answer a peer can ask for ten thousand times a second stays cheap;
tests/reference_server/test_quicx_fastpath.py compares every such frame with the checked
encoder's, byte for byte. :class:`Send` and :class:`Close` are named tuples,
built on the hot path with one ``tuple.__new__``.

Scheduling has one seam here too: :meth:`QuicxEngine.throttled` says that a connection is no
worker while the queue is backlogged (workers connected, and more tasks queued than workers),
so the shell gives it a short turn and completions are not queued behind submissions.

Output flow control has one seam here: the shell calls :meth:`QuicxEngine.hold` when a
connection's unsent output is over the high-water mark and :meth:`QuicxEngine.release` when it
has drained. A held worker keeps its credits but is pushed no task from another connection's
turn (a SUBMIT, a requeue), so a worker that does not read costs about the high-water mark
however many credits it collected, and the tasks stay queued for workers that do read; a
worker that is not reading is not "waiting" in the sense of QX-QUEUE-1, so on release its
credits rejoin the line of idle workers at its end. A worker's own READY or result is still
answered in its own turn: the shell bounds those turns (a batch of frames, then no more reading
while the output is over the mark). A forwarded result needs no hold, and holding the worker
that sent it would let one producer that never reads stall every worker it shares: a producer
is owed one result per task it had accepted, and it submits nothing more while its own output
is over the mark, so what it can be owed is bounded by its tasks in the pool.
"""

from __future__ import annotations

import functools
import itertools
import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ...codecs.errors import ProtocolError
from ...codecs.quicx import Message, QuicxEncodeError, QuicxEncoder
from ...spec import Profile, load_profile
from ...spec.quicx import DAEMON, QuicxSpec, struct_format
from .pool import DEFAULT_POOL_BYTES, SMALLEST_CLASS, ClassUsage, SizeClassPool, Slot, default_largest_class

__all__ = [
    "Action",
    "Close",
    "EngineStats",
    "Peer",
    "QuicxEngine",
    "Send",
    "Task",
]

log = logging.getLogger("queuewire.reference_server.quicx")
_new = tuple.__new__  # builds a Send without the named tuple's Python-level __new__


# ---------------------------------------------------------------------------------- actions

class Send(NamedTuple):
    """Write ``frame`` (an encoded ``message``) to connection ``conn``. A named tuple, like
    :class:`Close`: a frozen value the hot path builds with one ``tuple.__new__``."""

    conn: int
    message: str
    frame: bytes


class Close(NamedTuple):
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
    held: bool = False        # its output is over the high-water mark: pushed no task (hold())


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
    ``disconnect(conn)`` forgets it (requeuing its tasks in flight); ``release(conn)`` resumes
    pushing tasks to a connection ``hold(conn)`` marked as congested. Each but ``open`` and
    ``hold`` returns the actions that follow, in order. ``task_types`` restricts the accepted
    task types (QX-SUBMIT-3); ``largest_class`` defaults to :func:`default_largest_class` and
    may not exceed the profile's ``max_payload_bytes``.
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
        id_max = next(f for f in spec.message("MSG_OK").layout if f.id == "task_id").max_value
        if id_max is None:
            raise ValueError(f"{self.profile.name}: task_id has no maximum")
        self._id_max = id_max
        # frames without fields are the same every time
        self._constant = {name: self.encoder.encode(name) for name, m in spec.messages.items()
                          if not m.layout and spec.allowed(name, sender=DAEMON)}
        # frames of integer fields only, packed with struct: the encoder's checked path costs
        # tens of microseconds a frame, too much for an answer a peer can ask for in a flood
        self._packers = {name: self._packer(name) for name, m in spec.messages.items()
                         if m.layout and all(f.is_int for f in m.layout)
                         and spec.allowed(name, sender=DAEMON) and m.transport == spec.transport}
        # MSG_TASK is MSG_SUBMIT's layout with the task id in front (004): where the spec says
        # so, a task's frame is the SUBMIT's payload bytes behind one pack of header and id
        self._task_head = self._task_from_submit()
        # a result forwarded to its producer is the worker's frame itself when the daemon may
        # send that message and the frame carries the current version: the encoder would
        # build the same bytes from the decoded fields (a decoded payload re-encodes to itself)
        self._version_at, self._version = spec.header_offsets["version"], spec.version
        self._echoed = frozenset(n for n, m in spec.messages.items()
                                 if spec.allowed(n, sender=DAEMON) and not m.reserved
                                 and m.transport == spec.transport)
        # MSG_OK, the answer to every SUBMIT: header and task id in one pack
        ok_header, ok_body, ok_ids = self._packers["MSG_OK"]
        if ok_ids == ("task_id",):
            self._ok: Callable[[int], bytes] = lambda task_id: ok_header + ok_body.pack(task_id)
        else:  # pragma: no cover - a profile whose MSG_OK carries more than the task id
            self._ok = lambda task_id: self._pack("MSG_OK", task_id=task_id)
        self._handlers: dict[str, Callable[[Peer, Message], list[Action]]] = {
            "MSG_SUBMIT": self._submit, "MSG_READY": self._ready, "MSG_DONE": self._result,
            "MSG_FAILED": self._result, "MSG_HEARTBEAT": self._heartbeat,
            "MSG_PONG": self._pong, "MSG_STATS": self._stats,
        }
        self.queue: deque[Task] = deque()
        self._tasks: dict[int, Task] = {}      # every live task (queued or in flight) by id
        self._peers: dict[int, Peer] = {}
        self._idle: deque[int] = deque()       # one entry per credit of a peer not held, oldest first
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
        if peer.credits and not peer.held:
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

    # -- output flow control
    def hold(self, conn: int) -> None:
        """``conn``'s unsent output is over the high-water mark: push it no task until
        :meth:`release`. Its credits are kept but leave the line of idle workers."""
        peer = self._peers.get(conn)
        if peer is None or peer.held:
            return
        peer.held = True
        if peer.credits:
            self._idle = deque(c for c in self._idle if c != conn)

    def release(self, conn: int) -> list[Action]:
        """``conn``'s output has drained: its credits rejoin the line of idle workers (at its
        end) and queued tasks are handed out again. Returns the TASKs that follow."""
        peer = self._peers.get(conn)
        if peer is None or not peer.held:
            return []
        peer.held = False
        self._idle.extend(itertools.repeat(conn, peer.credits))
        out: list[Action] = []
        self._dispatch(out)
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
        quick, raw, hs = self._task_head, msg.raw, self._hsize
        if quick is not None and len(raw) - hs + quick[1] <= quick[2]:
            frame = quick[0](len(raw) - hs + quick[1], task_id) + raw[hs:]
        else:
            try:
                frame = self.encoder.task(task_id, task_type, payload)
            except QuicxEncodeError:  # the TASK body would exceed the profile's payload cap
                return self._refuse(peer, "task_too_large",
                                    f"a {len(payload)}-byte payload of type {task_type!r} does "
                                    f"not fit a MSG_TASK")
        size = len(frame) - hs
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
        out: list[Action] = [_new(Send, (peer.id, "MSG_OK", self._ok(task_id)))]
        self.queue.append(task)
        if self._idle:
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
            if not peer.held:  # a held worker's credits rejoin the line on release()
                self._idle.append(peer.id)

    def _dispatch(self, out: list[Action]) -> None:
        """Hand queued tasks to credited workers, oldest credit first (a held worker's
        credits are not in the line)."""
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
        out.append(_new(Send, (peer.id, "MSG_TASK", task.frame)))

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
                raw = msg.raw
                if msg.name in self._echoed and raw[self._version_at] == self._version:
                    frame = raw
                else:
                    frame = self.encoder.encode(msg.name, **msg.fields)
                out.append(Send(producer.id, msg.name, frame))
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
        frame = self._pack("MSG_STATS_RESPONSE", queue_depth=len(self.queue),
                           workers_total=self._workers, workers_idle=self._workers_idle(),
                           pmad_bytes_used=self.pool.bytes_used,
                           pmad_bytes_total=self.pool.bytes_total)
        return [Send(peer.id, "MSG_STATS_RESPONSE", frame)]

    def _task_from_submit(self) -> tuple[Callable[[int, int], bytes], int, int] | None:
        """How a MSG_TASK is built from the decoded MSG_SUBMIT it carries, when the spec's
        layouts allow it: TASK's layout is an integer ``task_id`` followed by exactly
        SUBMIT's fields (same ids, types, sizes, encodings and limits), and the header is
        (version, msg_type, len_payload). Then the frame is ``pack(length, task_id)`` (header
        and id, one ``struct`` pack) + the SUBMIT's payload bytes, which the decoder checked
        against the same field rules. Returns (pack, id width, the largest TASK payload the
        encoder builds), or None (the encoder builds every TASK)."""
        spec = self.spec
        task, submit = spec.message("MSG_TASK"), spec.message("MSG_SUBMIT")
        if [f.id for f in spec.header] != ["version", "msg_type", "len_payload"] or \
                not task.layout or not task.layout[0].is_int or task.layout[0].id != "task_id":
            return None

        def shape(fields):
            return [(f.id, f.type, f.size, f.size_eos, f.encoding, f.max_bytes) for f in fields]
        if shape(task.layout[1:]) != shape(submit.layout):
            return None
        head = struct.Struct(struct_format(spec.header) + struct_format(task.layout[:1])[1:])
        version, code = spec.version, task.code
        top = spec.header[-1].max_value
        if top is None:   # a length field without a bound: no packer of fixed shape
            return None
        cap = top if spec.max_payload_bytes is None else min(top, spec.max_payload_bytes)
        return functools.partial(head.pack, version, code), head.size - spec.header_size, cap

    def _packer(self, name: str) -> tuple[bytes, struct.Struct, tuple[str, ...]]:
        msg = self.spec.message(name)
        body = struct.Struct(struct_format(msg.layout))
        header = self.encoder.frame(msg.code, bytes(body.size))[:self._hsize]
        return header, body, tuple(f.id for f in msg.layout)

    def _pack(self, name: str, **fields: int) -> bytes:
        """The frame ``encoder.encode(name, **fields)`` would build, for an integer-only
        message; falls back to the encoder (and its checks) for any other."""
        packer = self._packers.get(name)
        if packer is None:
            return self.encoder.encode(name, **fields)
        header, body, ids = packer
        try:
            return header + body.pack(*[fields[i] for i in ids])
        except struct.error:  # a figure beyond its field: the encoder names the field
            return self.encoder.encode(name, **fields)

    def _workers_idle(self) -> int:
        return sum(1 for p in self._peers.values() if p.worker and not p.in_flight)

    # -- introspection
    @property
    def backlogged(self) -> bool:
        """Workers are connected and more tasks are queued than there are workers: every
        worker could take one now, so a further SUBMIT only lengthens the queue. (Without
        workers nothing drains the queue, and holding producers back would gain nothing.)"""
        return 0 < self._workers < len(self.queue)

    def throttled(self, conn: int) -> bool:
        """``conn`` is no worker (it never sent MSG_READY) and the queue is :attr:`backlogged`:
        its frames can only lengthen the queue, while a worker's result frees a worker that a
        queued task is waiting for. The shell gives such a connection a short turn
        (:data:`~.tcp.BACKLOG_FRAMES_PER_TURN` frames), so the workers' turns, and the
        dispatch on every completion, are not queued behind whole windows of submissions."""
        if not 0 < self._workers < len(self.queue):
            return False
        peer = self._peers.get(conn)
        return peer is not None and not peer.worker

    def stats(self) -> EngineStats:
        peers = self._peers.values()
        return EngineStats(
            queue_depth=len(self.queue), workers_total=self._workers,
            workers_idle=self._workers_idle(),
            in_flight=sum(len(p.in_flight) for p in peers),
            pool_bytes_used=self.pool.bytes_used, pool_bytes_total=self.pool.bytes_total,
            connections=len(self._peers), refused=dict(self._refused),
            classes=self.pool.snapshot(), **self._counts,
        )

    def peer(self, conn: int) -> Peer | None:
        return self._peers.get(conn)
