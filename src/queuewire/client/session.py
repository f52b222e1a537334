"""Sans-IO client session machinery that does not depend on a protocol.

Design (after h11's ``_state.py``). A session is a pure object: the shell feeds it what
arrived and what its user calls, and it returns :class:`Event` objects and queues the bytes
to write (``data_to_send``). It owns no socket and no timer: time comes from an injected
``clock``, and the shell calls ``tick()`` when ``next_tick()`` says a heartbeat or a
heartbeat deadline is due. Every state change goes through a transition table, a plain dict
from ``(state, event)`` to the next state; a pair missing from the table is an error
(:func:`step` raises the session's ``state_error``).

This module holds what every protocol's client sessions share, so that a bunqueue session can
be written beside the quicx one (:mod:`.quicx_session`) without copying it: the connection
lifecycle (:data:`CLIENT_TRANSITIONS`: CREATED -> CONNECTING -> OPEN -> STOPPING -> CLOSED),
the lifecycle of one request (:data:`REQUEST_TRANSITIONS`: SENT -> ACCEPTED -> DONE | FAILED,
or REFUSED, LOST, TIMED_OUT; a timed-out request stays as a tombstone that consumes its late
answer), the base errors, the events every session reports (:class:`Settled`,
:class:`HeartbeatSent`, :class:`Closed`), and :class:`Session`: the state machine driver,
the outbox, and heartbeats (one is sent when the socket has been idle for
``heartbeat_interval`` seconds; no answer within ``pong_timeout`` closes the session). A
protocol's session subclasses :class:`Session` and adds decoding, encoding and what each
message means; it raises its own error subclasses by overriding ``state_error``,
``lost_error`` and ``stopped_error``. A TCP connect that fails is a
:class:`ClientConnectError` (a :class:`ClientConnectionLost` that names the address and says
why, :func:`connect_failure`, with what the socket raised as its ``__cause__``). Nothing here
imports a codec or the spec.
"""

from __future__ import annotations

import enum
import errno
import itertools
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "CLIENT_TRANSITIONS",
    "REQUEST_TRANSITIONS",
    "ClientConnectError",
    "ClientConnectionLost",
    "ClientError",
    "ClientEvent",
    "ClientSessionStopped",
    "ClientState",
    "ClientStateError",
    "ClientTimeout",
    "Closed",
    "mermaid",
    "Event",
    "HeartbeatSent",
    "Request",
    "RequestEvent",
    "RequestState",
    "Session",
    "Settled",
    "connect_failure",
    "step",
]


# ----------------------------------------------------------------------------------- errors

class ClientError(Exception):
    """Base of the client errors of every protocol."""


class ClientStateError(ClientError):
    """A call the session's state does not allow (a local misuse)."""


class ClientTimeout(ClientError, TimeoutError):
    """No answer within the timeout."""


class ClientConnectionLost(ClientError, ConnectionError):
    """The connection closed (or stopped answering heartbeats) before the answer came."""


class ClientConnectError(ClientConnectionLost):
    """The TCP connect failed: refused, unreachable, a host name that does not resolve, or no
    connection within the connect timeout (``timeout`` s). ``host`` and ``port`` name the
    address and ``reason`` says why: ``why`` itself when it is a string, else
    :func:`connect_failure` of what the socket raised, which becomes the ``__cause__``."""

    def __init__(self, host: str, port: int | None, why: BaseException | str,
                 timeout: float | None = None):
        self.host, self.port = host, port
        self.reason = why if isinstance(why, str) else connect_failure(why, timeout)
        if not isinstance(why, str):
            self.__cause__ = why
        super().__init__(f"cannot connect to {host}:{port}: {self.reason}")


def connect_failure(error: BaseException, timeout: float | None = None) -> str:
    """Why a TCP connect failed, in words: ``connection refused (...)`` when the port was
    refused (asyncio tries every address of a host name and raises one OSError listing them
    all: a refusal among them is a refusal), the connect timeout when ``asyncio.timeout``
    (``timeout`` seconds) ran out, else the socket's own message."""
    text = str(error)
    if isinstance(error, ConnectionRefusedError) or f"[Errno {errno.ECONNREFUSED}]" in text:
        return f"connection refused ({text})"
    if not text and isinstance(error, TimeoutError) and timeout is not None:
        return f"no connection within the connect timeout ({timeout:g} s)"
    return text or type(error).__name__


class ClientSessionStopped(ClientError):
    """The session was stopped before the answer came."""


# ------------------------------------------------------------------------------ the tables

class ClientState(enum.Enum):
    CREATED = "created"
    CONNECTING = "connecting"
    OPEN = "open"
    STOPPING = "stopping"
    CLOSED = "closed"


class ClientEvent(enum.Enum):
    START = "start"                      # the shell starts connecting
    CONNECTED = "connected"              # TCP is up
    STOP = "stop"                        # the user asks for a graceful stop
    DRAINED = "drained"                  # stopping, and nothing is pending any more
    CONNECTION_LOST = "connection_lost"  # EOF, reset, or the shell closed the socket
    PROTOCOL_ERROR = "protocol_error"    # the daemon's bytes broke the protocol
    HEARTBEAT_MISSED = "heartbeat_missed"  # no heartbeat answer in time


_C, _CE = ClientState, ClientEvent
_CLIENT_LIVE = (_C.CREATED, _C.CONNECTING, _C.OPEN, _C.STOPPING)

#: Sessions that make requests (quicx producers and monitors).
CLIENT_TRANSITIONS: Mapping[tuple[ClientState, ClientEvent], ClientState] = {
    (_C.CREATED, _CE.START): _C.CONNECTING,
    (_C.CREATED, _CE.STOP): _C.CLOSED,
    (_C.CONNECTING, _CE.CONNECTED): _C.OPEN,
    (_C.CONNECTING, _CE.STOP): _C.CLOSED,
    (_C.OPEN, _CE.STOP): _C.STOPPING,
    (_C.STOPPING, _CE.DRAINED): _C.CLOSED,
    **{(s, e): _C.CLOSED for s in _CLIENT_LIVE
       for e in (_CE.CONNECTION_LOST, _CE.PROTOCOL_ERROR, _CE.HEARTBEAT_MISSED)},
}


class RequestState(enum.Enum):
    QUEUED = "queued"        # accepted by the session, not written yet (no window, no link)
    SENT = "sent"            # written, no answer yet
    ACCEPTED = "accepted"    # the server took it (final unless the result is forwarded)
    ANSWERED = "answered"    # a query's answer (quicx: a monitor's MSG_STATS_RESPONSE)
    DONE = "done"            # forwarded result: done
    FAILED = "failed"        # forwarded result: failed
    REFUSED = "refused"      # an error answer
    TIMED_OUT = "timed_out"  # given up on; a late answer is still consumed
    LOST = "lost"            # the session closed first


class RequestEvent(enum.Enum):
    SEND = "send"
    OK = "ok"
    ANSWER = "answer"
    DONE = "done"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    CLOSED = "closed"


_R, _RE = RequestState, RequestEvent

#: One request of a session (quicx: producer submissions and monitor requests).
REQUEST_TRANSITIONS: Mapping[tuple[RequestState, RequestEvent], RequestState] = {
    # a request held back (bunqueue: window full, or the link is being built) is written later,
    # or times out or is lost before that
    (_R.QUEUED, _RE.SEND): _R.SENT,
    (_R.QUEUED, _RE.TIMEOUT): _R.TIMED_OUT,
    (_R.QUEUED, _RE.CLOSED): _R.LOST,
    (_R.SENT, _RE.OK): _R.ACCEPTED,
    (_R.SENT, _RE.ANSWER): _R.ANSWERED,
    (_R.SENT, _RE.ERROR): _R.REFUSED,
    (_R.ACCEPTED, _RE.DONE): _R.DONE,
    (_R.ACCEPTED, _RE.FAILED): _R.FAILED,
    (_R.SENT, _RE.TIMEOUT): _R.TIMED_OUT,
    (_R.ACCEPTED, _RE.TIMEOUT): _R.TIMED_OUT,
    (_R.SENT, _RE.CLOSED): _R.LOST,
    (_R.ACCEPTED, _RE.CLOSED): _R.LOST,
    # a tombstone consumes the late answer and stays what it is
    (_R.TIMED_OUT, _RE.OK): _R.TIMED_OUT,
    (_R.TIMED_OUT, _RE.ANSWER): _R.TIMED_OUT,
    (_R.TIMED_OUT, _RE.ERROR): _R.TIMED_OUT,
    (_R.TIMED_OUT, _RE.CLOSED): _R.TIMED_OUT,
}


def mermaid(table: Mapping, initial: Any = None, final: Any = None) -> str:
    """A transition table as a Mermaid ``stateDiagram-v2`` (what the docs render)."""
    lines = ["stateDiagram-v2"]
    if initial is not None:
        lines.append(f"    [*] --> {initial.name}")
    for (state, event), target in table.items():
        lines.append(f"    {state.name} --> {target.name}: {event.value}")
    if final is not None:
        lines.append(f"    {final.name} --> [*]")
    return "\n".join(lines)


def step(table: Mapping, state: Any, event: Any, what: str,
         error: type[Exception] = ClientStateError) -> Any:
    """The state ``table`` gives ``(state, event)``; ``error`` when the pair is not there."""
    try:
        return table[state, event]
    except KeyError:
        raise error(f"{what}: {event.value!r} is not allowed in state {state.value!r}") from None


# ----------------------------------------------------------------------------------- values

_request_ids = itertools.count(1)


@dataclass(eq=False)
class Request:
    """A pending request: its state, and the server's answer once there is one."""

    #: what a transition missing from :data:`REQUEST_TRANSITIONS` raises
    state_error: ClassVar[type[Exception]] = ClientStateError

    id: int = field(default_factory=lambda: next(_request_ids))
    state: RequestState = RequestState.SENT
    error: Exception | None = None

    def fire(self, event: RequestEvent) -> RequestState:
        self.state = step(REQUEST_TRANSITIONS, self.state, event, f"request {self.id}",
                          self.state_error)
        return self.state


class Event:
    """Base of what a session reports."""


@dataclass(frozen=True)
class Settled(Event):
    """A request reached its final state (see ``request.state`` and ``request.error``)."""

    request: Request


@dataclass(frozen=True)
class HeartbeatSent(Event):
    pass


@dataclass(frozen=True)
class Closed(Event):
    """The session closed; ``error`` is None after a graceful stop."""

    reason: str
    error: Exception | None


# ---------------------------------------------------------------------------------- session

class Session:
    """The state machine driver, outbox, heartbeat timer and closing every session shares.

    A subclass sets ``role`` and, for a machine other than :data:`CLIENT_TRANSITIONS`,
    ``_table``, ``_states`` and ``_events`` (an enum with START, CONNECTED and the three
    closing events); it sets ``can_heartbeat`` and returns its heartbeat bytes from
    ``_heartbeat_frame``, calls ``_touch`` when bytes arrive and ``_heartbeat_answered`` on
    the answer, and settles its pending requests in ``_settle_all``.
    """

    role = ""
    _table: Mapping = CLIENT_TRANSITIONS
    _states: type[enum.Enum] = ClientState
    _events: Any = ClientEvent
    state_error: type[Exception] = ClientStateError
    lost_error: type[Exception] = ClientConnectionLost
    stopped_error: type[Exception] = ClientSessionStopped
    #: the name of the final state
    _terminal = "CLOSED"
    #: what answers a heartbeat, for the error when none comes
    heartbeat_answer = "heartbeat answer"

    def __init__(self, *, heartbeat_interval: float | None = None, pong_timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        #: this session sends heartbeats on an idle socket (when ``heartbeat_interval`` is set)
        self.can_heartbeat = False
        self.heartbeat_interval = heartbeat_interval
        self.pong_timeout = pong_timeout
        self._clock = clock
        self.state = self._states["CREATED"]
        #: the last transitions taken, (state, event, next state), oldest first
        self.history: deque[tuple[Any, Any, Any]] = deque(maxlen=64)
        self._outbox = bytearray()
        self._last_io = clock()
        self._pong_due: float | None = None
        self.error: Exception | None = None
        self.close_reason: str | None = None

    # -- state
    def _fire(self, event: Any) -> Any:
        before = self.state
        self.state = step(self._table, before, event, f"{self.role} session", self.state_error)
        self.history.append((before, event, self.state))
        return self.state

    @property
    def closed(self) -> bool:
        return self.state.name == self._terminal

    def now(self) -> float:
        """The session's clock."""
        return self._clock()

    def start(self) -> None:
        """The shell is connecting."""
        self._fire(self._events.START)

    def connected(self) -> list[Event]:
        """TCP is up."""
        self._fire(self._events.CONNECTED)
        self._last_io = self._clock()
        return []

    # -- output
    def _queue(self, frame: bytes) -> None:
        self._outbox += frame
        self._last_io = self._clock()

    def data_to_send(self) -> bytes:
        """The bytes queued since the last call (empty when there are none)."""
        out = bytes(self._outbox)
        self._outbox.clear()
        return out

    def _touch(self) -> None:
        """Bytes arrived: the socket is not idle."""
        self._last_io = self._clock()

    # -- heartbeats
    def _heartbeat_frame(self) -> bytes:  # pragma: no cover - sessions that heartbeat override
        raise NotImplementedError

    def _heartbeat_answered(self) -> None:
        self._pong_due = None

    def _heartbeat_live(self) -> bool:
        return not self.closed and self.state.name not in ("CREATED", "CONNECTING")

    def next_tick(self) -> float | None:
        """When ``tick()`` has something to do next (clock time), or None."""
        if not self._heartbeat_live():
            return None
        if self._pong_due is not None:
            return self._pong_due
        if self.can_heartbeat and self.heartbeat_interval:
            return self._last_io + self.heartbeat_interval
        return None

    def tick(self) -> list[Event]:
        """Send a heartbeat on an idle socket; close if the last one got no answer in time."""
        events: list[Event] = []
        if not self._heartbeat_live():
            return events
        now = self._clock()
        if self._pong_due is not None:
            if now >= self._pong_due:
                error = self.lost_error(f"no {self.heartbeat_answer} within {self.pong_timeout} s")
                self._close(self._events.HEARTBEAT_MISSED, str(error), error, events)
            return events
        if self.can_heartbeat and self.heartbeat_interval and now - self._last_io >= self.heartbeat_interval:
            self._queue(self._heartbeat_frame())
            self._pong_due = now + self.pong_timeout
            events.append(HeartbeatSent())
        return events

    # -- closing
    def _close(self, event: Any, reason: str, error: Exception | None, events: list[Event]) -> None:
        self._fire(event)
        self.error, self.close_reason = error, reason
        self._settle_all(error or self.stopped_error("Session stopped"), events)
        events.append(Closed(reason, error))

    def _settle_all(self, error: Exception, events: list[Event]) -> None:
        """Settle every pending request with ``error`` (the session closed)."""
