"""Sans-IO quicx client sessions: producer, worker and monitor state machines as tables.

Design (after h11's ``_state.py`` and the session layer of document 003). The machinery no
protocol owns is in :mod:`.session`: the pure-object contract (the shell feeds in the bytes
that arrived, ``receive_data``, ``receive_eof``, ``connection_lost``, and the user's calls,
``submit``, ``finish``, ``stop``, ...; the session returns :class:`Event` objects and queues
the bytes to write, ``data_to_send``; time comes from an injected ``clock`` and ``tick()``),
the client and request transition tables, heartbeats and closing. This module adds what is
quicx: decoding and encoding with the profile, what each message means in each state, the
worker's machine, FIFO correlation, and the quicx errors (subclasses of the generic ones).

Every state change goes through a transition table, a plain dict from ``(state, event)`` to
the next state; a pair missing from the table is an error (:class:`QuicxStateError` for a
call the user may not make now, :class:`QuicxProtocolViolation` when the daemon sent
something the state does not allow, e.g. a MSG_TASK to a busy worker). The lifecycle follows
003: CREATED -> CONNECTING -> (open states) -> STOPPING -> CLOSED. quicx has no negotiation,
so a connection is open as soon as TCP is. Three machines:

* :data:`~.session.CLIENT_TRANSITIONS` for producers and monitors (OPEN while requests may be
  made; STOPPING refuses new requests and drains the pending ones; CLOSED).
* :data:`WORKER_TRANSITIONS`: IDLE (registered, no READY outstanding), WAITING (READY sent,
  or re-armed by a result where ``ready_required_after_result`` is false), BACKOFF (after a
  MSG_WAIT, until the backoff delay has passed and READY is sent again), BUSY (a task is
  running), STOPPING (a graceful stop waits for the running task's result).
* :data:`~.session.REQUEST_TRANSITIONS` for each producer submission and monitor request: SENT ->
  ACCEPTED -> DONE | FAILED (the result is awaited only where
  ``forward_results_to_producer`` is true; otherwise ACCEPTED is final), or REFUSED, LOST,
  TIMED_OUT.

Request correlation. quicx frames carry no request id: the daemon answers each MSG_SUBMIT
with one MSG_OK or MSG_ERROR, in order, so pending submissions form a FIFO; the task id in the
MSG_OK then keys the forwarded DONE or FAILED. A submission that times out before its answer
stays in the FIFO as a tombstone (TIMED_OUT) so that the late answer is consumed by it and not
by the next submission. Heartbeats: a session whose role may send MSG_HEARTBEAT (the
``heartbeat_from`` flag) sends one when the socket has been idle (nothing read or written)
for ``heartbeat_interval`` seconds; no MSG_PONG within ``pong_timeout`` closes the session
(003's missed heartbeats). A MSG_HEARTBEAT from the daemon (where the profile lets it send
one) is answered MSG_PONG. Errors never escape from ``receive_data``: a protocol error in the
daemon's bytes closes the session (``client_error_reaction``, QX-DIR-2) and is reported as a
:class:`Closed` event whose ``error`` is set, and every pending request is settled with it.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..codecs.errors import ProtocolError
from ..codecs.quicx import Message, QuicxDecoder, QuicxEncoder
from ..spec import Profile, load_profile
from ..spec.quicx import DAEMON, QuicxSpec
from .session import (
    CLIENT_TRANSITIONS,
    REQUEST_TRANSITIONS,
    ClientConnectError,
    ClientConnectionLost,
    ClientError,
    ClientEvent,
    ClientSessionStopped,
    ClientState,
    ClientStateError,
    ClientTimeout,
    Closed,
    Event,
    HeartbeatSent,
    Request,
    RequestEvent,
    RequestState,
    Session,
    Settled,
)

__all__ = [
    "CLIENT_TRANSITIONS",
    "REQUEST_TRANSITIONS",
    "WORKER_TRANSITIONS",
    "Accepted",
    "Assignment",
    "ClientEvent",
    "ClientState",
    "Closed",
    "ErrorReceived",
    "Event",
    "HeartbeatSent",
    "MonitorSession",
    "ProducerSession",
    "QuicxClientError",
    "QuicxConnectError",
    "QuicxConnectionLost",
    "QuicxProtocolViolation",
    "QuicxRefused",
    "QuicxSessionStopped",
    "QuicxStateError",
    "QuicxTimeout",
    "Request",
    "RequestEvent",
    "RequestState",
    "Settled",
    "StatsRequest",
    "Submission",
    "TaskAssigned",
    "WaitAdvised",
    "WorkerEvent",
    "WorkerSession",
    "WorkerState",
]

log = logging.getLogger("queuewire.client.quicx")


# ----------------------------------------------------------------------------------- errors

class QuicxClientError(ClientError):
    """Base of the client errors."""


class QuicxStateError(QuicxClientError, ClientStateError):
    """A call the session's state does not allow (a local misuse)."""


class QuicxRefused(QuicxClientError):
    """The daemon answered MSG_ERROR."""

    def __init__(self, error_code: int, error_name: str | None, message: str):
        self.error_code, self.error_name, self.message = error_code, error_name, message
        super().__init__(f"refused by the daemon: {error_name or hex(error_code)} "
                         f"({error_code:#04x}): {message}")


class QuicxTimeout(QuicxClientError, ClientTimeout):
    """No answer within the timeout."""


class QuicxConnectionLost(QuicxClientError, ClientConnectionLost):
    """The connection closed (or stopped answering heartbeats) before the answer came."""


class QuicxConnectError(QuicxConnectionLost, ClientConnectError):
    """The TCP connect failed (refused, unreachable, timed out); ``__cause__`` is why."""


class QuicxSessionStopped(QuicxClientError, ClientSessionStopped):
    """The session was stopped before the answer came."""


class QuicxProtocolViolation(QuicxClientError):
    """The daemon's bytes broke the protocol; the session closed (QX-DIR-2)."""

    def __init__(self, error: ProtocolError | str):
        self.protocol_error = error if isinstance(error, ProtocolError) else None
        super().__init__(f"the daemon broke the protocol: {error}")


# ------------------------------------------------------------------------------ the tables

class WorkerState(enum.Enum):
    CREATED = "created"
    CONNECTING = "connecting"
    IDLE = "idle"            # registered or between tasks, no READY outstanding
    WAITING = "waiting"      # READY outstanding (or implied): the next MSG_TASK may come
    BACKOFF = "backoff"      # MSG_WAIT received; READY again after the backoff delay
    BUSY = "busy"            # a task is running
    STOPPING = "stopping"    # graceful stop: the running task's result is still to be sent
    CLOSED = "closed"


class WorkerEvent(enum.Enum):
    START = "start"
    CONNECTED = "connected"
    READY = "ready"                  # the session sends MSG_READY
    TASK = "task"                    # MSG_TASK received
    WAIT = "wait"                    # MSG_WAIT received
    RESULT = "result"                # the session sends MSG_DONE or MSG_FAILED
    NEXT_IMPLIED = "next_implied"    # the profile re-arms the worker after a result
    STOP = "stop"
    CONNECTION_LOST = "connection_lost"
    PROTOCOL_ERROR = "protocol_error"
    HEARTBEAT_MISSED = "heartbeat_missed"


_W, _WE = WorkerState, WorkerEvent
_WORKER_LIVE = (_W.CREATED, _W.CONNECTING, _W.IDLE, _W.WAITING, _W.BACKOFF, _W.BUSY, _W.STOPPING)

#: Worker sessions.
WORKER_TRANSITIONS: Mapping[tuple[WorkerState, WorkerEvent], WorkerState] = {
    (_W.CREATED, _WE.START): _W.CONNECTING,
    (_W.CONNECTING, _WE.CONNECTED): _W.IDLE,
    (_W.IDLE, _WE.READY): _W.WAITING,
    (_W.IDLE, _WE.NEXT_IMPLIED): _W.WAITING,
    (_W.WAITING, _WE.TASK): _W.BUSY,
    (_W.WAITING, _WE.WAIT): _W.BACKOFF,
    (_W.BACKOFF, _WE.READY): _W.WAITING,
    (_W.BUSY, _WE.RESULT): _W.IDLE,
    (_W.BUSY, _WE.STOP): _W.STOPPING,
    (_W.STOPPING, _WE.RESULT): _W.CLOSED,
    **{(s, _WE.STOP): _W.CLOSED for s in (_W.CREATED, _W.CONNECTING, _W.IDLE, _W.WAITING,
                                          _W.BACKOFF)},
    **{(s, e): _W.CLOSED for s in _WORKER_LIVE
       for e in (_WE.CONNECTION_LOST, _WE.PROTOCOL_ERROR, _WE.HEARTBEAT_MISSED)},
}


# ----------------------------------------------------------------------------------- values

@dataclass(eq=False)
class Submission(Request):
    """A MSG_SUBMIT: task type, then the task id (MSG_OK) and the outcome."""

    state_error = QuicxStateError

    task_type: str = ""
    task_id: int | None = None
    reason: str | None = None     # MSG_FAILED's reason


@dataclass(eq=False)
class StatsRequest(Request):
    """A MSG_STATS: the MSG_STATS_RESPONSE fields once answered."""

    state_error = QuicxStateError

    fields: dict[str, Any] | None = None


@dataclass(frozen=True)
class Assignment:
    """A task the daemon handed this worker (MSG_TASK)."""

    task_id: int
    task_type: str
    payload: bytes


@dataclass(frozen=True)
class Accepted(Event):
    """A submission got its MSG_OK (and, where results are forwarded, still awaits one)."""

    submission: Submission


@dataclass(frozen=True)
class TaskAssigned(Event):
    task: Assignment


@dataclass(frozen=True)
class WaitAdvised(Event):
    """MSG_WAIT: call ``backoff_elapsed()`` after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True)
class ErrorReceived(Event):
    """A MSG_ERROR that answers no pending request of this session."""

    error: QuicxRefused


# ---------------------------------------------------------------------------------- session

class _Session(Session):
    """What every quicx session shares: the profile, decoder, encoder, MSG_HEARTBEAT and
    MSG_PONG, MSG_ERROR, and closing on a protocol error (the rest is :class:`.session.Session`)."""

    state_error = QuicxStateError
    lost_error = QuicxConnectionLost
    stopped_error = QuicxSessionStopped
    heartbeat_answer = "MSG_PONG"

    def __init__(self, profile: Profile | str = "quicx/v1", *,
                 heartbeat_interval: float | None = None, pong_timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        if self.profile.protocol != "quicx":
            raise ValueError(f"profile {self.profile.name} is not a quicx profile")
        super().__init__(heartbeat_interval=heartbeat_interval, pong_timeout=pong_timeout,
                         clock=clock)
        self.spec: QuicxSpec = self.profile.model
        self.decoder = QuicxDecoder(self.profile, self.role)
        self.encoder = QuicxEncoder(self.profile, self.role)
        spec = self.spec
        #: this role may send MSG_HEARTBEAT to the daemon in this profile
        self.can_heartbeat = (self.role in spec.flag("heartbeat_from")
                              and spec.allowed("MSG_HEARTBEAT", self.role, DAEMON))
        self._can_pong = spec.allowed("MSG_PONG", self.role, DAEMON)
        #: frames without fields (READY, HEARTBEAT, ...) this role sends: the same bytes each time
        self._constant = {name: self.encoder.encode(name) for name, m in spec.messages.items()
                          if not m.layout and spec.allowed(name, self.role, DAEMON)}

    def _heartbeat_frame(self) -> bytes:
        return self._constant["MSG_HEARTBEAT"]

    # -- input
    def receive_data(self, data: bytes) -> list[Event]:
        """Bytes from the daemon. Never raises for anything the daemon sent."""
        events: list[Event] = []
        if self.closed:
            return events
        self._touch()
        while True:
            try:
                frames = self.decoder.feed(data)
            except ProtocolError as exc:
                self._messages(exc.frames, events)
                if self.closed:
                    return events
                if exc.reaction == "close":
                    self._close(self._events.PROTOCOL_ERROR, str(exc), QuicxProtocolViolation(exc), events)
                    return events
                log.warning("%s session: skipped a bad frame: %s", self.role, exc)
                data = b""
                continue
            self._messages(frames, events)
            return events

    def receive_eof(self) -> list[Event]:
        """The daemon closed the connection."""
        events: list[Event] = []
        if self.closed:
            return events
        try:
            self.decoder.eof()
            error: Exception = QuicxConnectionLost("the daemon closed the connection")
        except ProtocolError as exc:
            error = QuicxProtocolViolation(exc)
        self._close(self._events.CONNECTION_LOST, str(error), error, events)
        return events

    def connection_lost(self, error: Exception | None = None) -> list[Event]:
        """The socket is gone (or the shell gave up on it): settle everything pending."""
        events: list[Event] = []
        if not self.closed:
            error = error or QuicxConnectionLost("connection lost")
            self._close(self._events.CONNECTION_LOST, str(error), error, events)
        return events

    def _messages(self, frames: list[Message], events: list[Event]) -> None:
        for msg in frames:
            if self.closed:
                return
            name = msg.name
            if name == "MSG_HEARTBEAT":
                if self._can_pong:
                    self._queue(self._constant["MSG_PONG"])
            elif name == "MSG_PONG":
                self._heartbeat_answered()
            elif name == "MSG_ERROR":
                fields = msg.fields
                code = fields["error_code"]
                self._on_error(QuicxRefused(code, self.spec.error_names.get(code), fields["message"]),
                               events)
            else:
                try:
                    self._on_message(msg, events)
                except QuicxStateError as exc:  # the daemon sent what this state does not allow
                    self._close(self._events.PROTOCOL_ERROR, str(exc), QuicxProtocolViolation(str(exc)),
                                events)

    def _on_message(self, msg: Message, events: list[Event]) -> None:  # pragma: no cover
        raise QuicxStateError(f"{msg.name} is not expected by a {self.role}")

    def _on_error(self, error: QuicxRefused, events: list[Event]) -> None:
        log.warning("%s session: %s", self.role, error)
        events.append(ErrorReceived(error))


class _RequestSession(_Session):
    """A session whose requests the daemon answers in order (producer, monitor)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._fifo: deque[Request] = deque()   # awaiting MSG_OK / MSG_ERROR / the answer

    def stop(self) -> list[Event]:
        """Stop taking requests; the session closes once nothing is pending."""
        events: list[Event] = []
        if self.closed or self.state is ClientState.STOPPING:
            return events
        if self._fire(ClientEvent.STOP) is ClientState.STOPPING:
            self._maybe_drained(events)
        else:
            self._close_quietly(events)
        return events

    @property
    def pending(self) -> int:
        """Requests still waiting for an answer (timed-out tombstones excluded)."""
        return sum(1 for r in self._fifo if r.state is RequestState.SENT)

    def _maybe_drained(self, events: list[Event]) -> None:
        if self.state is ClientState.STOPPING and not self.pending:
            self._fire(ClientEvent.DRAINED)
            self.close_reason = "stopped"
            events.append(Closed("stopped", None))

    def _close_quietly(self, events: list[Event]) -> None:
        # stopped before the connection was up: no request can be pending (they need OPEN)
        self.close_reason = "stopped"
        events.append(Closed("stopped", None))

    def _require_open(self, what: str) -> None:
        if self.state is not ClientState.OPEN:
            raise QuicxStateError(f"cannot {what}: the {self.role} session is {self.state.value}")

    def _answer(self) -> Request:
        """The oldest pending request, which the daemon's next answer is for."""
        if not self._fifo:
            raise QuicxStateError("an answer came with no request pending")
        return self._fifo.popleft()

    def _on_error(self, error: QuicxRefused, events: list[Event]) -> None:
        if not self._fifo:
            super()._on_error(error, events)
            return
        req = self._answer()
        if req.fire(RequestEvent.ERROR) is RequestState.REFUSED:
            req.error = error
            events.append(Settled(req))
        self._maybe_drained(events)

    def abandon(self, request: Request) -> list[Event]:
        """The shell gave up waiting (timeout): keep a tombstone for the late answer."""
        events: list[Event] = []
        if request.state in (RequestState.SENT, RequestState.ACCEPTED):
            request.fire(RequestEvent.TIMEOUT)
            request.error = QuicxTimeout(f"request {request.id} timed out")
            self._forget(request)
            self._maybe_drained(events)
        return events

    def _forget(self, request: Request) -> None:
        """Drop what is keyed on an abandoned request (beyond its FIFO tombstone)."""

    def _settle_all(self, error: Exception, events: list[Event]) -> None:
        for req in self._pending_requests():
            if req.fire(RequestEvent.CLOSED) is RequestState.LOST:
                req.error = error
                events.append(Settled(req))
        self._fifo.clear()

    def _pending_requests(self) -> list[Request]:
        return list(self._fifo)


class ProducerSession(_RequestSession):
    """A producer: ``submit`` returns a :class:`Submission`, settled by the daemon's answers."""

    role = "producer"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        #: the daemon forwards DONE / FAILED here (otherwise MSG_OK is the final answer)
        self.forwards_results = bool(self.spec.flag("forward_results_to_producer"))
        self._results: dict[int, Submission] = {}   # task id -> accepted, result awaited

    def submit(self, task_type: str, payload: bytes = b"") -> Submission:
        """Queue a MSG_SUBMIT. Raises QuicxStateError unless open, and the encoder's error for
        a task the profile cannot carry (type or payload too long)."""
        self._require_open("submit")
        frame = self.encoder.submit(task_type, payload)
        sub = Submission(task_type=task_type)
        self._fifo.append(sub)
        self._queue(frame)
        return sub

    @property
    def pending(self) -> int:
        return super().pending + len(self._results)

    def _on_message(self, msg: Message, events: list[Event]) -> None:
        name = msg.name
        if name == "MSG_OK":
            sub = self._answer()
            assert isinstance(sub, Submission)  # a producer's FIFO holds only its submissions
            task_id = msg.fields["task_id"]
            if sub.fire(RequestEvent.OK) is RequestState.ACCEPTED:
                sub.task_id = task_id
                if self.forwards_results:
                    self._results[task_id] = sub
                    events.append(Accepted(sub))
                else:
                    events.append(Accepted(sub))
                    events.append(Settled(sub))
        elif name in ("MSG_DONE", "MSG_FAILED"):
            task_id = msg.fields["task_id"]
            awaited = self._results.pop(task_id, None)
            if awaited is None:  # a task given up on (timed out) or not ours
                log.debug("producer session: result for task %d, not awaited", task_id)
                return
            if name == "MSG_DONE":
                awaited.fire(RequestEvent.DONE)
            else:
                awaited.fire(RequestEvent.FAILED)
                awaited.reason = msg.fields.get("reason", "")
            events.append(Settled(awaited))
        else:
            raise QuicxStateError(f"{name} is not expected by a producer")
        self._maybe_drained(events)

    def _forget(self, request: Request) -> None:
        if isinstance(request, Submission) and request.task_id is not None:
            self._results.pop(request.task_id, None)

    def _pending_requests(self) -> list[Request]:
        return [*self._fifo, *self._results.values()]

    def _settle_all(self, error: Exception, events: list[Event]) -> None:
        super()._settle_all(error, events)
        self._results.clear()


class MonitorSession(_RequestSession):
    """A monitor: ``request_stats`` returns a :class:`StatsRequest`, settled by the reply."""

    role = "monitor"

    @property
    def stats_on_tcp(self) -> bool:
        return self.spec.allowed("MSG_STATS", self.role, DAEMON)

    def request_stats(self) -> StatsRequest:
        self._require_open("ask for stats")
        if not self.stats_on_tcp:
            raise QuicxStateError(f"{self.profile.name} does not carry MSG_STATS on "
                                  f"{self.spec.transport}")
        req = StatsRequest()
        self._fifo.append(req)
        self._queue(self._constant["MSG_STATS"])
        return req

    def _on_message(self, msg: Message, events: list[Event]) -> None:
        if msg.name != "MSG_STATS_RESPONSE":
            raise QuicxStateError(f"{msg.name} is not expected by a monitor")
        req = self._answer()
        if req.fire(RequestEvent.ANSWER) is RequestState.ANSWERED:
            assert isinstance(req, StatsRequest)
            req.fields = dict(msg.fields)
            events.append(Settled(req))
        self._maybe_drained(events)


class WorkerSession(_Session):
    """A worker: READY, then one task at a time; ``finish`` sends its result.

    On MSG_WAIT the session reports :class:`WaitAdvised` with an exponential backoff delay
    (``backoff_min`` doubling up to ``backoff_max``, reset by a task); the shell calls
    ``backoff_elapsed()`` after it. A MSG_FAILED reason is cut to the profile's
    ``max_reason_bytes`` (at a UTF-8 character boundary).
    """

    role = "worker"
    _table = WORKER_TRANSITIONS
    _states = WorkerState
    _events = WorkerEvent

    def __init__(self, profile: Profile | str = "quicx/v1", *, backoff_min: float = 0.05,
                 backoff_max: float = 1.0, heartbeat_interval: float | None = 15.0,
                 pong_timeout: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__(profile, heartbeat_interval=heartbeat_interval, pong_timeout=pong_timeout,
                         clock=clock)
        spec = self.spec
        self.ready_after_result = bool(spec.flag("ready_required_after_result"))
        reason = next(f for f in spec.message("MSG_FAILED").layout if f.id == "reason")
        self.max_reason_bytes = reason.max_bytes
        self.backoff_min, self.backoff_max = backoff_min, backoff_max
        self._backoff = backoff_min
        self.current: Assignment | None = None

    def connected(self) -> list[Event]:
        super().connected()
        self._ready()
        return []

    def _ready(self) -> None:
        self._fire(WorkerEvent.READY)
        self._queue(self._constant["MSG_READY"])

    def backoff_elapsed(self) -> None:
        """The backoff after MSG_WAIT is over: send READY again (if still backing off)."""
        if self.state is WorkerState.BACKOFF:
            self._ready()

    def _on_message(self, msg: Message, events: list[Event]) -> None:
        if msg.name == "MSG_TASK":
            self._fire(WorkerEvent.TASK)
            f = msg.fields
            self.current = Assignment(f["task_id"], f["task_type"], f["payload"])
            self._backoff = self.backoff_min
            events.append(TaskAssigned(self.current))
        elif msg.name == "MSG_WAIT":
            self._fire(WorkerEvent.WAIT)
            delay = self._backoff
            self._backoff = min(self._backoff * 2, self.backoff_max)
            events.append(WaitAdvised(delay))
        else:
            raise QuicxStateError(f"{msg.name} is not expected by a worker")

    def finish(self, task_id: int, error: str | None = None) -> list[Event]:
        """Report the current task: MSG_DONE, or MSG_FAILED with ``error`` as the reason.
        Then READY again, or wait for the next task unasked, as the profile says."""
        if self.current is None or self.current.task_id != task_id:
            raise QuicxStateError(f"task {task_id} is not the task this worker is running")
        events: list[Event] = []
        if error is None:
            frame = self.encoder.done(task_id)
        else:
            frame = self.encoder.failed(task_id, self._cut(error))
        state = self._fire(WorkerEvent.RESULT)
        self._queue(frame)
        self.current = None
        if state is WorkerState.CLOSED:  # a graceful stop was waiting for this result
            self.close_reason = "stopped"
            events.append(Closed("stopped", None))
        elif self.ready_after_result:
            self._ready()
        else:
            self._fire(WorkerEvent.NEXT_IMPLIED)
        return events

    def _cut(self, reason: str) -> str:
        cap = self.max_reason_bytes
        data = reason.encode("utf-8")
        if cap is None or len(data) <= cap:
            return reason
        return data[:cap].decode("utf-8", "ignore")

    def stop(self) -> list[Event]:
        """Graceful stop: at once when no task runs, else after its ``finish``."""
        events: list[Event] = []
        if self.closed or self.state is WorkerState.STOPPING:
            return events
        if self._fire(WorkerEvent.STOP) is WorkerState.CLOSED:
            self.close_reason = "stopped"
            events.append(Closed("stopped", None))
        return events

    def _settle_all(self, error: Exception, events: list[Event]) -> None:
        self.current = None  # the daemon requeues a task whose result it never got
