"""Stateful fuzzing of quicx dispatch: a hypothesis ``RuleBasedStateMachine`` of producers,
workers and a monitor that drives a daemon over real TCP and checks it against a model built
from the spec.

Design
------
* **The model is the profile's flags.** quicx has no state table; what a daemon does with a
  task is said by the ``semantics`` flags of ``spec/quicx/protocol.yaml`` and the decisions
  beside them, and the model reads them, never a profile name: ``wait_when_empty`` (a READY
  that finds no task is answered MSG_WAIT, QX-WAIT-1, or held until one exists,
  QX-READY-101), ``ready_required_after_result`` (a result re-arms the worker or not,
  QX-WORKER-2 / QX-READY-102), ``forward_results_to_producer`` (the producer's connection
  gets the task's MSG_DONE / MSG_FAILED, QX-PROD-101), ``requeue_on_worker_disconnect``
  (a task in flight on a worker whose connection closes goes back to the head of the queue,
  QX-WORKER-1), ``stats_on_tcp`` (the monitor's MSG_STATS is answered on this port) and
  ``heartbeat_from``. Opcodes and layouts come from the codecs; nothing here writes one.
* **What is modelled**: the queue (task ids in the order they are to be handed out: accepted
  order, a requeued task first, QX-QUEUE-1), per worker connection the tasks in flight on it,
  whether it has sent MSG_READY, and its credits (READYs held, in the profiles that hold them;
  the worker armed longest gets the next task, QX-QUEUE-1), and per task its type and payload
  (a MSG_TASK carries them as submitted, QX-TASK-2). Task ids are the daemon's: the model
  takes each from its MSG_OK.
* **Rules** (few, each with a choice inside, as in :mod:`.stateful`): ``submit`` (a producer's
  MSG_SUBMIT: one MSG_OK with a fresh id, QX-OK-1, and a push to an armed worker), ``ready`` (a
  worker slot's MSG_READY, connecting it first: MSG_TASK with the head of the queue or MSG_WAIT
  or nothing), ``finish`` (MSG_DONE or MSG_FAILED for a task in flight on the worker, or for an
  id that is not: MSG_ERROR INVALID_MESSAGE and nothing changes, QX-DONE-3), ``disconnect`` (a
  worker's connection closes: its tasks are requeued) and ``heartbeat`` (MSG_PONG, QX-HB-2).
* **Invariants** after every step: no connection holds a frame the model did not expect (a
  second MSG_TASK for a task in flight elsewhere, a task nobody asked for), and where the
  profile serves stats on TCP, MSG_STATS_RESPONSE agrees with the model: queue depth, workers
  (connections that sent MSG_READY) and idle workers (those with no task in flight), QX-STATS-5;
  a queue depth that disagrees while the worker figures agree cites the requirement of the
  step that last moved a task (else the figures themselves, QX-STATS-5, a reading). A
  violation raises :class:`~.stateful.LifecycleViolation` with the requirement id and its
  level; hypothesis shrinks the steps.
* **Isolation**: quicx has one queue per daemon, so a run starts from a fresh engine (an
  embedded daemon, :meth:`EmbeddedQuicx.reset`) or by draining what earlier runs left (a
  worker that answers MSG_DONE until MSG_WAIT, or until no task comes) and ends by closing
  every connection. The default target is an in-process reference daemon
  (:class:`EmbeddedQuicx`); any ``HOST:PORT`` works too.

Entry points: :func:`dispatch_machine` (a machine class for a target, used by the tests) and
:func:`run_stateful_quicx` (a campaign, for ``queuewire fuzz --stateful --protocol quicx``).
"""

from __future__ import annotations

import asyncio
import itertools
import select
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from ..codecs.errors import ProtocolError
from ..codecs.quicx import Message, QuicxDecoder, QuicxEncoder, swap_bytes
from ..spec import Profile, load_profile
from .stateful import (
    LifecycleViolation,
    StatefulReport,
    ThreadedServer,
    parse_target,
    play_machine,
)

DEFAULT_PROFILE = "quicx/v1"
TIMEOUT_S = 2.0          # an expected frame not there by then is lost
SETTLE_S = 0.005         # how long connections are polled for frames the model does not expect
GONE_WAIT_S = 2.0        # how long a closed worker may take to leave the daemon's stats
MAX_TASKS = 5            # tasks per run: few tasks, long histories (requeue, requeue again)
WORKERS = 3              # worker slots
TYPES = ("qw_a", "qw_b")
REQ_OK, REQ_READY, REQ_WAIT, REQ_QUEUE = "QX-OK-1", "QX-READY-3", "QX-WAIT-1", "QX-QUEUE-1"
REQ_HELD, REQ_REARM, REQ_FORWARD = "QX-READY-101", "QX-READY-102", "QX-PROD-101"
REQ_TASK, REQ_UNKNOWN_ID, REQ_REQUEUE = "QX-TASK-2", "QX-DONE-3", "QX-WORKER-1"
REQ_PONG, REQ_STATS, REQ_TASK_ID = "QX-HB-2", "QX-STATS-5", "QX-TASK-1"
#: every requirement the model may cite (a conformance pass of this machine cites them)
REQUIREMENTS = (REQ_OK, REQ_READY, REQ_WAIT, REQ_QUEUE, REQ_HELD, REQ_REARM, REQ_FORWARD,
                REQ_TASK, REQ_UNKNOWN_ID, REQ_REQUEUE, REQ_PONG, REQ_STATS, REQ_TASK_ID)


class DispatchSpec:
    """The profile's dispatch behaviour, read from its flags and message table."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self.model = spec = profile.model
        if profile.protocol != "quicx":
            raise ValueError(f"{profile.name} is not a quicx profile")
        self.wait_when_empty = bool(spec.flag("wait_when_empty"))
        self.ready_after_result = bool(spec.flag("ready_required_after_result"))
        self.forward = bool(spec.flag("forward_results_to_producer"))
        self.requeue = bool(spec.flag("requeue_on_worker_disconnect"))
        self.stats = bool(spec.flag("stats_on_tcp"))
        self.heartbeat_from = frozenset(spec.flag("heartbeat_from"))
        self.invalid = spec.error_code("INVALID_MESSAGE")
        self.open_after_error = spec.semantics["open_after_error"].requirement or REQ_UNKNOWN_ID
        # the rule a READY's answer rests on: TASK or WAIT, or held until a task exists
        self.ready_req = REQ_READY if self.wait_when_empty else REQ_HELD

    def level(self, requirement: str) -> str:
        req = self.profile.requirements.get(requirement)
        return req.level if req is not None else "?"

    def violation(self, requirement: str, message: str) -> LifecycleViolation:
        return LifecycleViolation(requirement, self.level(requirement), message)


class QLink:
    """A blocking quicx connection in one peer role: frames out, decoded messages in."""

    def __init__(self, host: str, port: int, profile: Profile, role: str):
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.enc = QuicxEncoder(profile, role)
        self.dec = QuicxDecoder(profile, role)
        self.inbox: deque[Message] = deque()
        self.closed = False

    def send(self, name: str, **fields: Any) -> None:
        self.sock.sendall(self.enc.encode(name, **fields))

    def _read(self, timeout: float) -> bool:
        if self.closed:
            return False
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.inbox.extend(self.dec.feed(data))
        return True

    def next(self, timeout: float = TIMEOUT_S) -> Message | None:
        """The next message, waiting up to ``timeout`` (None: none came)."""
        deadline = time.monotonic() + timeout
        while not self.inbox:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left) and self.closed:
                return None
        return self.inbox.popleft()

    def pending(self, timeout: float = SETTLE_S) -> list[Message]:
        """Whatever arrived unasked (polled for ``timeout``)."""
        while self._read(timeout):
            timeout = 0
        out = list(self.inbox)
        self.inbox.clear()
        return out

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


@dataclass
class ModelTask:
    id: int
    seq: int                       # order of acceptance
    type: str
    payload: bytes
    worker: int | None = None      # the worker slot it is in flight on
    finished: bool = False


@dataclass
class ModelWorker:
    slot: int
    link: QLink | None = None
    registered: bool = False       # has sent MSG_READY (the daemon counts it a worker)
    credits: int = 0               # READYs the daemon holds (profiles without MSG_WAIT)
    in_flight: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)


class DispatchMachine(RuleBasedStateMachine):
    """Rules submit, ready, finish, disconnect, heartbeat; invariants: no frame unexpected,
    stats agree. Bound to a target by :func:`dispatch_machine`."""

    host: str = "127.0.0.1"
    port: int = 0
    spec: DispatchSpec
    steps_log: list[str] = []
    reset: Callable[[], None] | None = None   # a fresh daemon state per run (embedded)

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []
        type(self).steps_log = self.log
        prof = self.spec.profile
        reset = type(self).reset
        if reset is not None:
            reset()
        else:
            self._drain()
        self.producer = QLink(self.host, self.port, prof, "producer")
        self.monitor = QLink(self.host, self.port, prof, "monitor") if self.spec.stats else None
        self.tasks: dict[int, ModelTask] = {}
        self.queue: deque[int] = deque()
        self.armed: deque[int] = deque()       # one entry per credit, longest waiting first
        self.workers = [ModelWorker(i) for i in range(WORKERS)]
        self.queue_because = REQ_OK
        self._payloads = itertools.count()
        self._seq = itertools.count()

    # -- helpers ------------------------------------------------------------------------------
    def _fail(self, requirement: str, message: str) -> NoReturn:
        raise self.spec.violation(requirement, message)

    def _expect(self, link: QLink, name: str, requirement: str, what: str) -> Message:
        msg = link.next()
        if msg is None:
            self._fail(requirement, f"{what}: no {name} within {TIMEOUT_S} s")
        if msg.name != name:
            self._fail(requirement, f"{what}: {msg.name} {msg.fields} instead of {name}")
        return msg

    def _drain(self) -> None:
        """Empty the daemon's queue of what earlier runs left: a worker that answers MSG_DONE
        until MSG_WAIT (or, where READY is held, until no task comes for a while)."""
        link = QLink(self.host, self.port, self.spec.profile, "worker")
        wait = self.spec.wait_when_empty
        try:
            link.send("MSG_READY")
            for _ in range(1000):
                msg = link.next(TIMEOUT_S if wait else 0.05)
                if msg is None or msg.name != "MSG_TASK":
                    break
                link.send("MSG_DONE", task_id=msg.fields["task_id"])
                if self.spec.ready_after_result:
                    link.send("MSG_READY")
        finally:
            link.close()

    def _link(self, w: ModelWorker) -> QLink:
        if w.link is None:
            w.link = QLink(self.host, self.port, self.spec.profile, "worker")
        return w.link

    def _hand(self, w: ModelWorker, what: str) -> None:
        """The head of the queue goes to ``w``: expect its MSG_TASK, as submitted."""
        task = self.tasks[self.queue.popleft()]
        msg = self._expect(self._link(w), "MSG_TASK", self.spec.ready_req, what)
        self._check_task(w, msg, task, what)
        task.worker = w.slot
        w.in_flight.append(task.id)
        self.queue_because = self.spec.ready_req

    def _sync(self, link: QLink, role: str) -> None:
        """Wait until the daemon has handled what ``link`` sent (a frame it answers nothing):
        a MSG_HEARTBEAT round trip where the role may send one, else a short pause. Frames
        before the MSG_PONG stay in the inbox, for the model to expect."""
        if role not in self.spec.heartbeat_from:
            time.sleep(0.02)
            return
        link.send("MSG_HEARTBEAT")
        kept: list[Message] = []
        while True:
            msg = link.next()
            if msg is None:
                self._fail(REQ_PONG, f"no MSG_PONG within {TIMEOUT_S} s")
            if msg.name == "MSG_PONG":
                break
            kept.append(msg)
        link.inbox.extendleft(reversed(kept))

    def _where(self, task_id: Any) -> str:
        task = self.tasks.get(task_id)
        if task is None:
            return "unknown"
        if task.worker is not None:
            return f"in flight on worker {task.worker}: a double dispatch"
        return "finished" if task.finished else "queued"

    def _check_task(self, w: ModelWorker, msg: Message, want: ModelTask, what: str) -> None:
        got: Any = msg.fields.get("task_id")  # as the daemon sent it
        width = cast(int, next(f for f in self.spec.model.message("MSG_OK").layout
                               if f.id == "task_id").width)  # a u4be: a fixed width
        if isinstance(got, int) and got != want.id and got == swap_bytes(want.id, width):
            # the same id, bytes reversed: MSG_OK's or MSG_TASK's is written little-endian
            # (ids count up from small numbers: the larger reading is the wrong one)
            rule = REQ_OK if want.id > got else REQ_TASK_ID
            self._fail(rule, f"{what}: worker {w.slot} was handed task {got}, the id MSG_OK "
                             f"gave as {want.id} with its bytes reversed (integers are "
                             f"big-endian)")
        if got != want.id:
            other = self.tasks.get(got)
            if other is not None and other.worker is not None:
                self._fail(REQ_QUEUE, f"{what}: worker {w.slot} was handed task {got}, which "
                                      f"is in flight on worker {other.worker} (double dispatch)")
            if other is not None and other.finished:
                self._fail(REQ_QUEUE, f"{what}: worker {w.slot} was handed task {got}, which "
                                      f"was finished")
            self._fail(REQ_QUEUE, f"{what}: worker {w.slot} was handed task {got}; the head of "
                                  f"the queue is {want.id} (queue {list(self.queue)})")
        if (msg.fields.get("task_type"), bytes(msg.fields.get("payload", b""))) != \
                (want.type, want.payload):
            self._fail(REQ_TASK, f"task {want.id} came as {msg.fields}; it was submitted as "
                                 f"{want.type!r} {want.payload!r}")

    def _arm(self, w: ModelWorker, what: str) -> None:
        """``w`` may take one more task: the head of the queue, or a credit (held READY)."""
        if self.queue:
            self._hand(w, what)
        else:
            w.credits += 1
            self.armed.append(w.slot)

    def _dispatch(self, what: str) -> None:
        while self.queue and self.armed:
            w = self.workers[self.armed.popleft()]
            w.credits -= 1
            self._hand(w, what)

    # -- rules --------------------------------------------------------------------------------
    @precondition(lambda self: sum(not t.finished for t in self.tasks.values()) < MAX_TASKS)
    @rule(kind=st.sampled_from(TYPES))
    def submit(self, kind: str) -> None:
        payload = f"n{next(self._payloads)}".encode()
        self.log.append(f"SUBMIT {kind}")
        self.producer.send("MSG_SUBMIT", task_type=kind, payload=payload)
        msg = self._expect(self.producer, "MSG_OK", REQ_OK, "SUBMIT")
        task_id: Any = msg.fields.get("task_id")  # as the daemon sent it
        if task_id in self.tasks and not self.tasks[task_id].finished:
            self._fail(REQ_OK, f"SUBMIT answered id {task_id}, the id of a live task")
        self.tasks[task_id] = ModelTask(task_id, next(self._seq), kind, payload)
        self.queue.append(task_id)
        self.queue_because = REQ_OK
        self._dispatch(f"SUBMIT of task {task_id} with a worker armed")

    @rule(slot=st.integers(0, WORKERS - 1))
    def ready(self, slot: int) -> None:
        w = self.workers[slot]
        self.log.append(f"READY worker {slot}" + (" (connects)" if w.link is None else ""))
        link = self._link(w)
        link.send("MSG_READY")
        w.registered = True
        if self.queue:
            self._hand(w, f"READY of worker {slot}")
        elif self.spec.wait_when_empty:
            msg = link.next()
            if msg is None or msg.name != "MSG_WAIT":
                req = REQ_WAIT if msg is not None and msg.name == "MSG_TASK" else REQ_READY
                what = "nothing" if msg is None else f"{msg.name} {msg.fields}" + (
                    f" (task {self._where(msg.fields.get('task_id'))})"
                    if msg.name == "MSG_TASK" else "")
                self._fail(req, f"READY of worker {slot} with the queue empty was answered "
                                f"{what}; expected MSG_WAIT")
        else:   # held: make sure the daemon has it before another connection's step
            self._sync(link, "worker")
            self._arm(w, f"READY of worker {slot}")

    @rule(slot=st.integers(0, WORKERS - 1), done=st.booleans(), known=st.booleans())
    def finish(self, slot: int, done: bool, known: bool) -> None:
        """MSG_DONE (or MSG_FAILED) for the oldest task in flight on the worker, or (not
        ``known``, or nothing in flight) for an id that is not in flight on it."""
        w = self.workers[slot]
        if w.link is None:
            return
        name = "MSG_DONE" if done else "MSG_FAILED"
        fields: dict[str, Any] = {} if done else {"reason": "qw-stateful"}
        if known and w.in_flight:
            task = self.tasks[w.in_flight.pop(0)]
            self.log.append(f"{name[4:]} task {task.id} on worker {slot}")
            w.link.send(name, task_id=task.id, **fields)
            self._sync(w.link, "worker")
            task.worker, task.finished = None, True
            w.finished.append(task.id)
            if self.spec.forward:
                got = self._expect(self.producer, name, REQ_FORWARD, f"{name} of task {task.id}")
                if got.fields.get("task_id") != task.id:
                    self._fail(REQ_FORWARD, f"{name} of task {task.id} was forwarded as "
                                            f"{got.fields}")
            if not self.spec.ready_after_result:
                self._arm(w, f"{name} of task {task.id} (the worker is re-armed)")
            return
        stale = w.finished[-1] if w.finished else max(self.tasks, default=0) + 1000
        self.log.append(f"{name[4:]} task {stale} on worker {slot} (not in flight on it)")
        w.link.send(name, task_id=stale, **fields)
        msg = self._expect(w.link, "MSG_ERROR", REQ_UNKNOWN_ID,
                           f"{name} of task {stale}, not in flight on worker {slot}")
        if msg.fields.get("error_code") != self.spec.invalid:
            self._fail(REQ_UNKNOWN_ID, f"{name} of an unknown id answered {msg.fields}")
        w.link.pending(SETTLE_S)
        if w.link.closed:  # 004 does not say the daemon keeps it: a reading (QX-ERR-6)
            self._fail(self.spec.open_after_error, f"the daemon closed worker {slot}'s "
                                                   f"connection after that MSG_ERROR")

    @rule(slot=st.integers(0, WORKERS - 1))
    def disconnect(self, slot: int) -> None:
        """The worker's connection closes: its tasks go back to the head of the queue (where
        the profile requeues), in order of acceptance."""
        w = self.workers[slot]
        if w.link is None:
            return
        self.log.append(f"disconnect worker {slot}" + (f" holding {w.in_flight}"
                                                       if w.in_flight else ""))
        w.link.close()
        back = sorted(w.in_flight, key=lambda t: self.tasks[t].seq)
        for task_id in back:
            self.tasks[task_id].worker = None
            if not self.spec.requeue:
                self.tasks[task_id].finished = True
        if self.spec.requeue and back:
            self.queue.extendleft(reversed(back))
            self.queue_because = REQ_REQUEUE
        self.armed = deque(s for s in self.armed if s != slot)
        self.workers[slot] = ModelWorker(slot)
        self._gone()
        self._dispatch(f"the requeue of {back}")

    def _gone(self) -> None:
        """Wait (bounded) until the daemon has seen the close: its stats count the workers
        the model has; without stats, a short pause."""
        if self.monitor is None:
            time.sleep(0.05)
            return
        deadline = time.monotonic() + GONE_WAIT_S
        want = sum(w.registered for w in self.workers)
        while time.monotonic() < deadline:
            if self._stats().get("workers_total") == want:
                return
            time.sleep(0.005)

    @rule(slot=st.integers(-1, WORKERS - 1))
    def heartbeat(self, slot: int) -> None:
        """MSG_HEARTBEAT from the producer (-1) or a worker, where the role may send one."""
        role, link = ("producer", self.producer) if slot < 0 else \
            ("worker", self.workers[slot].link)
        if link is None or role not in self.spec.heartbeat_from:
            return
        self.log.append(f"HEARTBEAT from {role} {slot if slot >= 0 else ''}".rstrip())
        link.send("MSG_HEARTBEAT")
        self._expect(link, "MSG_PONG", REQ_PONG, f"HEARTBEAT from the {role}")

    # -- invariants ---------------------------------------------------------------------------
    def _stats(self) -> dict[str, Any]:
        assert self.monitor is not None
        self.monitor.send("MSG_STATS")
        return dict(self._expect(self.monitor, "MSG_STATS_RESPONSE", "QX-STATS-2",
                                 "STATS").fields)

    @invariant()
    def daemon_agrees(self) -> None:
        stats = self._stats() if self.monitor is not None else None
        links = [("producer", self.producer)] + \
            [(f"worker {w.slot}", w.link) for w in self.workers if w.link is not None]
        # the daemon writes what a step makes it push before it reads the next frame (its
        # STATS answer is such a sync point): then a look suffices, else a short wait
        ready, _, _ = select.select([link.sock for _, link in links if not link.closed], [], [],
                                    0 if stats is not None else SETTLE_S)
        for who, link in links:
            if link.sock not in ready and not link.inbox:
                continue
            for msg in link.pending(0):   # a task the daemon gave unasked, or anything else
                req = self.spec.ready_req
                if msg.name == "MSG_TASK":
                    task_id = msg.fields.get("task_id")
                    self._fail(req, f"{who} was handed task {task_id} ({self._where(task_id)}) "
                                    f"unasked, after {self.log[-1:]}")
                self._fail(req, f"{who} received {msg.name} {msg.fields} unasked")
        if stats is None:
            return
        registered = [w for w in self.workers if w.registered]
        want = {"queue_depth": len(self.queue), "workers_total": len(registered),
                "workers_idle": sum(not w.in_flight for w in registered)}
        got = {k: stats.get(k) for k in want}
        others_agree = all(got[k] == want[k] for k in want if k != "queue_depth")
        if got["queue_depth"] != want["queue_depth"] and others_agree:
            # the worker figures are right, so the queue is what differs: blame the step
            # that last moved a task (a figure that is wrong itself is QX-STATS-5, below)
            self._fail(self.queue_because, f"STATS queue_depth {got['queue_depth']}; the model "
                                           f"queues {list(self.queue)} (after {self.log[-1:]})")
        if got != want:
            self._fail(REQ_STATS, f"STATS answered {got}; the model says {want}")

    def teardown(self) -> None:
        for link in [self.producer, self.monitor] + [w.link for w in self.workers]:
            if link is not None:
                link.close()


def dispatch_machine(host: str, port: int, profile: Profile | str = DEFAULT_PROFILE,
                     reset: Callable[[], None] | None = None) -> type[DispatchMachine]:
    """A :class:`DispatchMachine` subclass bound to the daemon at ``host:port``; ``reset``
    gives the daemon a fresh state before each run (else the run drains the queue)."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    return type("BoundDispatchMachine", (DispatchMachine,),
                {"host": host, "port": port, "spec": DispatchSpec(prof), "steps_log": [],
                 "reset": staticmethod(reset) if reset is not None else None})


class EmbeddedQuicx(ThreadedServer):
    """A reference :class:`~queuewire.reference_server.quicx.QuicxServer` on 127.0.0.1 (an
    ephemeral port) on an event loop thread of its own; ``engine``: a ready engine (a
    deliberately broken one, in tests). :meth:`reset` replaces the engine by a fresh one of
    its class, so that every run starts from an empty daemon (a broken engine may leave a
    state no drain empties, and a run that depends on its predecessors does not shrink)."""

    def __init__(self, profile: Profile | str = DEFAULT_PROFILE, *, engine: Any = None):
        from ..reference_server.quicx import QuicxServer
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self._serve(QuicxServer(self.profile, "127.0.0.1", 0, engine=engine), "qw-stateful-quicx")

    def reset(self) -> None:
        async def swap() -> None:
            self.server.engine = type(self.server.engine)(self.profile)
        asyncio.run_coroutine_threadsafe(swap(), self._loop).result(10)


def run_stateful_quicx(target: str | EmbeddedQuicx = "embedded",
                       profile: Profile | str = DEFAULT_PROFILE, max_examples: int = 100,
                       seed: int | None = None, *, step_count: int = 25,
                       extra_settings: Mapping[str, Any] | None = None,
                       on_machine: Callable[[type[DispatchMachine]], None] | None = None,
                       ) -> StatefulReport:
    """Fuzz the dispatch of ``target`` (``"embedded"``, ``"HOST:PORT"`` or a running
    :class:`EmbeddedQuicx`) and report the first violation, shrunk; the arguments and the
    report are :func:`~.stateful.run_stateful`'s."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    owned = isinstance(target, str) and target == "embedded"
    server = EmbeddedQuicx(prof) if owned else target
    try:
        reset = None
        if isinstance(server, EmbeddedQuicx):
            host, port, name, reset = server.host, server.port, str(server), server.reset
        else:
            (host, port), name = parse_target(server), server
        machine = dispatch_machine(host, port, prof, reset)
        if on_machine is not None:
            on_machine(machine)
        spec = DispatchSpec(prof)

        def classify(exc: Exception) -> tuple[str, str, str] | None:
            if isinstance(exc, ProtocolError):  # the daemon sent a frame the role cannot decode
                return exc.requirement, spec.level(exc.requirement), str(exc)
            return None

        return play_machine(machine, name, prof.name, max_examples=max_examples,
                            step_count=step_count, seed=seed, extra_settings=extra_settings,
                            classify=classify)
    finally:
        if owned and isinstance(server, EmbeddedQuicx):
            server.close()
