"""Sans-IO bunqueue client session: one link's lifecycle, negotiation, correlation and health.

Design (after h11's ``_state.py``, modelled on document 003's session layer, with document
000's connection lifecycle). A :class:`BunqueueSession` is a pure object that lives across
reconnects of one pool slot: the shell feeds in what happened (``connected``,
``connect_failed``, ``receive_data``, ``receive_eof``, ``connection_lost``, the user's
``send`` and ``stop``) and calls ``tick()`` when ``next_tick()`` says something is due; the
session answers :class:`~.session.Event` objects and queues the bytes to write
(``data_to_send``). Time comes from an injected clock (seconds) and randomness (the backoff's
jitter) from an injected ``random.Random``, so every path below runs in a unit test without a
socket. Every state change goes through :data:`SESSION_TRANSITIONS`, the only source of
transitions (``_fire`` looks the pair up; a missing pair raises); :func:`~.session.mermaid`
renders it for the docs, and :data:`SPEC_STATES` maps each state onto the spec's
``connection_lifecycle`` (document 000's DISCONNECTED, CONNECTING, CONNECTED, RECONNECTING).

The rules, each citing the requirement it implements:

* Negotiation (BQ-CLIENT-1): once TCP is up the session sends Auth when a token is set and
  waits for its answer (document 001 refuses every other command before Auth, BQ-AUTH-2), then
  Hello with the profile's protocol version and capabilities. READY when Hello is answered; a
  Hello answer without ``pipelining`` (or below version 2), or a refused Hello, makes the
  window 1 (sequential: "older clients without Hello default to v1"). A refused Auth is final:
  no reconnect fixes a wrong token, so the session stops with :class:`BunqueueAuthError`.
* Correlation (BQ-PIPE-1): every command gets a fresh ``reqId``, a decimal string (BQ-ENV-2);
  answers match by it and may come in any order. A frame without ``reqId`` is a pushed frame
  (a job event, BQ-EVENT-102) and is reported as :class:`PushedFrame`. An answer to a reqId
  nobody waits for (its command timed out) is dropped. At most ``max_in_flight`` commands are
  on the wire; the rest wait in a FIFO backlog, as do commands sent while the link is being
  (re)built, and are written when a slot or the link comes.
* Timeouts: every command has a deadline (``command_timeout`` from when it was submitted, or
  the caller's own, e.g. a long poll's server timeout plus ``command_timeout``); at the
  deadline it fails with :class:`BunqueueTimeout` and frees its slot.
* Dead links (BQ-CLIENT-3, BQ-CLIENT-4, BQ-CLIENT-6): ``max_command_timeouts`` consecutive
  timeouts of written commands with no answer in between, or ``max_ping_failures`` consecutive
  unanswered health-check Pings (one every ``ping_interval`` while READY and the window has
  room, each with ``command_timeout``), or a negotiation command's timeout, conclude the link
  is dead: the shell is told to tear the socket down (:class:`LinkDown`), every written
  command fails at once with :class:`BunqueueConnectionLost`, and reconnection starts. Any
  answer resets both counters: an answer, even an error one, proves the link carries bytes
  both ways (a decision: document 000 says "any successful response").
* Reconnect (BQ-CLIENT-2): after a lost link or a failed connect the session waits ``min(base
  * factor ** attempt, max)`` varied by +-``jitter``, then asks the shell to connect
  (:class:`ConnectNow`); the attempt count resets when a link is READY. Commands not yet
  written survive a reconnect (they were never sent, so sending them later cannot run them
  twice) until their own deadline; written ones do not (BQ-CLIENT-6), and bytes queued for a
  socket that went down are dropped with it. ``reconnect=False`` gives up instead.
* The first connect fails fast (after document 003's ``start()``, which rejects): until the
  link has been READY once, a failed connect fails the waiting commands at once with
  :class:`BunqueueConnectError` (the address, "connection refused", the OSError as
  ``__cause__``) and a command sent during the backoff ends it, so each command fails within
  the connect timeout; the link keeps reconnecting. ``retry_first_connect=True`` waits.
* Graceful stop (document 003's order): ``stop()`` refuses new commands; READY drains what is
  pending (STOPPING) and then STOPPED; any other state stops at once. Whatever is still
  pending when the session stops is settled with :class:`BunqueueSessionStopped`.
* Errors never escape from the input methods: a framing error in the server's bytes tears the
  link down like a lost connection (:class:`BunqueueProtocolViolation`), a payload error that
  costs only its frame is skipped (its command then times out), and an ``ok`` answer with a
  field of the wrong type fails its command with :class:`BunqueueReplyInvalid` (the link stays
  up; :mod:`.replies` says what is checked). Callers meet errors only as
  the ``error`` of a settled :class:`Command`, typed as a :class:`BunqueueClientError`.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import random
import re
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import FrameDecoder, FrameEncoder, nests_too_deep, undefined_to_none
from ..codecs.errors import EncodeError, ProtocolError
from ..spec import Profile, load_profile
from .bunqueue_errors import (
    BunqueueAuthError,
    BunqueueClientError,
    BunqueueConnectError,
    BunqueueConnectionLost,
    BunqueueEncodeError,
    BunqueueProtocolViolation,
    BunqueueRefused,
    BunqueueReplyInvalid,
    BunqueueSessionStopped,
    BunqueueStateError,
    BunqueueTimeout,
    too_deep_message,
)
from .options import ConnectionOptions
from .replies import ReplyShapes
from .session import (
    Closed,
    Event,
    Request,
    RequestEvent,
    RequestState,
    Session,
    Settled,
    mermaid,
)

__all__ = [
    "SESSION_TRANSITIONS",
    "SPEC_STATES",
    "BunqueueAuthError",
    "BunqueueClientError",
    "BunqueueConnectError",
    "BunqueueConnectionLost",
    "BunqueueEncodeError",
    "BunqueueProtocolViolation",
    "BunqueueReplyInvalid",
    "BunqueueRefused",
    "BunqueueSession",
    "BunqueueSessionStopped",
    "BunqueueStateError",
    "BunqueueTimeout",
    "Command",
    "ConnectNow",
    "ErrorMatcher",
    "LinkDown",
    "PushedFrame",
    "Ready",
    "SessionEvent",
    "SessionState",
    "session_mermaid",
    "too_deep_message",
]

log = logging.getLogger("queuewire.client.bunqueue")


# ------------------------------------------------------------------------------ the table

class SessionState(enum.Enum):
    CREATED = "created"            # no connection yet
    CONNECTING = "connecting"      # TCP connect in progress
    NEGOTIATING = "negotiating"    # TCP is up: Auth (with a token), then Hello
    READY = "ready"                # commands flow
    STOPPING = "stopping"          # stop() asked: no new commands, pending ones drain
    STOPPED = "stopped"            # final: every resource released
    RECONNECTING = "reconnecting"  # the link went down: waiting out the backoff delay


class SessionEvent(enum.Enum):
    START = "start"                      # the shell starts the first connect
    CONNECTED = "connected"              # TCP is up
    CONNECT_FAILED = "connect failed"    # TCP connect failed
    NEGOTIATED = "negotiated"            # Hello (after Auth) answered ok
    REFUSED = "refused"                  # Auth refused: final
    STOP = "stop"                        # the user asks for a graceful stop
    DRAINED = "drained"                  # stopping and nothing is pending any more
    CONNECTION_LOST = "connection lost"  # EOF, reset, or the shell closed the socket
    PROTOCOL_ERROR = "protocol error"    # the server's bytes broke the framing
    DEAD_LINK = "dead link"              # timeouts or failed pings (BQ-CLIENT-3, -4)
    BACKOFF_ELAPSED = "backoff elapsed"  # time to connect again
    GIVE_UP = "give up"                  # reconnecting is off


_S, _E = SessionState, SessionEvent
_LINK_DOWN = (_E.CONNECTION_LOST, _E.PROTOCOL_ERROR, _E.DEAD_LINK)

#: The session's transitions: the code's only source of them (``_fire`` looks pairs up here).
SESSION_TRANSITIONS: Mapping[tuple[SessionState, SessionEvent], SessionState] = {
    (_S.CREATED, _E.START): _S.CONNECTING,
    (_S.CREATED, _E.STOP): _S.STOPPED,
    (_S.CONNECTING, _E.CONNECTED): _S.NEGOTIATING,
    (_S.CONNECTING, _E.CONNECT_FAILED): _S.RECONNECTING,
    (_S.CONNECTING, _E.STOP): _S.STOPPED,
    (_S.NEGOTIATING, _E.NEGOTIATED): _S.READY,
    (_S.NEGOTIATING, _E.REFUSED): _S.STOPPED,
    (_S.NEGOTIATING, _E.STOP): _S.STOPPED,
    **{(_S.NEGOTIATING, e): _S.RECONNECTING for e in _LINK_DOWN},
    (_S.READY, _E.STOP): _S.STOPPING,
    **{(_S.READY, e): _S.RECONNECTING for e in _LINK_DOWN},
    (_S.STOPPING, _E.DRAINED): _S.STOPPED,
    **{(_S.STOPPING, e): _S.STOPPED for e in _LINK_DOWN},
    (_S.RECONNECTING, _E.BACKOFF_ELAPSED): _S.CONNECTING,
    (_S.RECONNECTING, _E.GIVE_UP): _S.STOPPED,
    (_S.RECONNECTING, _E.STOP): _S.STOPPED,
}

#: Each session state as a state of the spec's ``connection_lifecycle`` (document 000).
SPEC_STATES: Mapping[SessionState, str] = {
    _S.CREATED: "DISCONNECTED",
    _S.CONNECTING: "CONNECTING",
    _S.NEGOTIATING: "CONNECTING",   # 000: CONNECTED once "Hello and Auth answered"
    _S.READY: "CONNECTED",
    _S.STOPPING: "CONNECTED",
    _S.STOPPED: "DISCONNECTED",
    _S.RECONNECTING: "RECONNECTING",
}


def session_mermaid() -> str:
    """:data:`SESSION_TRANSITIONS` as a Mermaid state diagram."""
    return mermaid(SESSION_TRANSITIONS, _S.CREATED, _S.STOPPED)


# ----------------------------------------------------------------------------------- values

@dataclass(eq=False)
class Command(Request):
    """One command: what was asked, its deadline, and once settled its reply or error."""

    state_error = BunqueueStateError

    payload: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 0.0
    deadline: float = 0.0
    req_id: str = ""
    #: the encoded frame of a command waiting in the backlog (dropped once written)
    frame: bytes = b""
    state: RequestState = RequestState.QUEUED
    result: dict[str, Any] | None = None
    #: the session's own (Auth, Hello, Ping): settled inside, never reported
    internal: str = ""
    #: the shell's handle (an asyncio future), untouched by the session
    waiter: Any = None

    @property
    def cmd(self) -> str:
        return str(self.payload.get("cmd", "?"))


@dataclass(frozen=True)
class PushedFrame(Event):
    """A frame without ``reqId`` (a job event of SubscribeEvents, BQ-EVENT-102)."""

    frame: dict[str, Any]


@dataclass(frozen=True)
class Ready(Event):
    """Negotiation is over: commands flow. ``window`` is the in-flight limit now in force."""

    protocol_version: int | None
    capabilities: tuple[str, ...]
    window: int
    hello: dict[str, Any]


@dataclass(frozen=True)
class LinkDown(Event):
    """The shell must close the socket now. ``retry_at``: when the session will ask for a
    new connection (clock time), None when it will not (stopped)."""

    reason: str
    error: Exception | None
    retry_at: float | None


@dataclass(frozen=True)
class ConnectNow(Event):
    """The backoff is over: the shell opens a new connection and calls ``connected``."""

    attempt: int


# ---------------------------------------------------------------------------------- session

class BunqueueSession(Session):
    """One bunqueue link's sans-IO session (see the module docstring for its rules)."""

    role = "bunqueue"
    _table = SESSION_TRANSITIONS
    _states = SessionState
    _events = SessionEvent
    _terminal = "STOPPED"
    state_error = BunqueueStateError
    lost_error = BunqueueConnectionLost
    stopped_error = BunqueueSessionStopped

    def __init__(self, profile: Profile | str = "bunqueue/v2",
                 options: ConnectionOptions | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None):
        super().__init__(clock=clock)
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self.options = options or ConnectionOptions.from_profile(self.profile)
        o = self.options
        self._encode = FrameEncoder(self.profile).encode
        self._decoder: FrameDecoder  # the replies of one link: a new one per connection
        self._shapes = ReplyShapes(self.profile)
        self._max_depth = self.profile.model.max_nesting_depth
        self._prefix_len = struct.calcsize(self.profile.model.len_format)
        self._rng = rng or random.Random()
        self._timeout = o.command_timeout / 1000.0
        self._window = o.max_in_flight if o.pipelining else 1
        self._next_req = 1
        self._inflight: dict[str, Command] = {}   # written, by reqId
        self._backlog: deque[Command] = deque()   # accepted, not written yet
        # heap of (deadline, order of arrival, command); settled entries are skipped
        self._deadlines: list[tuple[float, int, Command]] = []
        self._arrivals = itertools.count()
        self._timeouts_in_row = 0
        self._ping_failures = 0
        self._ping: Command | None = None
        self._next_ping: float | None = None
        self._attempt = 0                          # reconnect attempts since the last READY
        #: the link has been READY (the first connect fails fast until then)
        self.ready_once = False
        self._retry_at: float | None = None
        self.protocol_version: int | None = None
        self.capabilities: tuple[str, ...] = ()
        self.server_hello: dict[str, Any] = {}
        #: counters for diagnostics (and tests)
        self.late_answers = 0
        self.reconnects = 0
        self.dead_links = 0
        self._errors = ErrorMatcher(self.profile)

    # -- introspection
    @property
    def ready(self) -> bool:
        return self.state is _S.READY

    @property
    def stopped(self) -> bool:
        return self.state is _S.STOPPED

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    @property
    def pending(self) -> int:
        """Commands accepted and not settled (written or waiting to be)."""
        return len(self._inflight) + len(self._backlog)

    @property
    def window(self) -> int:
        return self._window

    @property
    def fails_fast(self) -> bool:
        """Never READY and no ``retry_first_connect``: a failed connect fails what waits."""
        return not (self.ready_once or self.options.retry_first_connect)

    # -- lifecycle input
    def connected(self) -> list[Event]:
        """TCP is up: negotiate (Auth first when a token is set, then Hello)."""
        self._fire(_E.CONNECTED)
        self._decoder = FrameDecoder(self.profile, check_depth=False)  # replies
        token = self.options.token
        if token:
            self._internal({"cmd": "Auth", "token": token}, "auth")
        else:
            self._internal(self._hello(), "hello")
        return []

    def connect_failed(self, error: BaseException | str) -> list[Event]:
        """The TCP connect failed: ``error`` is what the socket raised (the ``__cause__`` of
        the :class:`BunqueueConnectError`), a reason, or a client error used as it is."""
        events: list[Event] = []
        o = self.options
        err = error if isinstance(error, BunqueueClientError) else BunqueueConnectError(
            o.host, o.port, error, o.connect_seconds)
        if self.fails_fast:
            waiting, self._backlog = self._backlog, deque()
            self._settle(waiting, err, events)
        self._link_down(_E.CONNECT_FAILED, str(err), err, events)
        return events

    def connect_soon(self) -> None:
        """Someone waits for the link: while :attr:`fails_fast`, a backoff ends now."""
        if self.state is _S.RECONNECTING and self.fails_fast:
            self._retry_at = self._clock()

    def receive_data(self, data: bytes) -> list[Event]:
        """Bytes from the server: the answers and pushed frames they complete."""
        events: list[Event] = []
        if self.state not in (_S.NEGOTIATING, _S.READY, _S.STOPPING):
            return events  # a closing socket's last bytes
        decoder = self._decoder
        feed, chunk, seen = decoder.feed, data, decoder.undefined_seen
        while True:
            try:
                frames = feed(chunk)
            except ProtocolError as exc:
                for frame in exc.frames:
                    self._on_frame(frame, events, decoder.undefined_seen != seen)
                if exc.reaction == "close":
                    if self.state in (_S.NEGOTIATING, _S.READY, _S.STOPPING):
                        err = BunqueueProtocolViolation(exc)
                        self._link_down(_E.PROTOCOL_ERROR, str(err), err, events)
                    return events
                # the frame is lost, the stream is intact: its command will time out
                log.warning("bunqueue session: skipped a frame the server garbled: %s", exc)
                chunk = b""
                continue
            break
        nulls = decoder.undefined_seen != seen   # ext 0 in these frames: null to the caller
        for frame in frames:
            self._on_frame(frame, events, nulls)
            if self.state not in (_S.NEGOTIATING, _S.READY, _S.STOPPING):
                return events
        self._after_input(events)
        return events

    def receive_eof(self) -> list[Event]:
        """The server closed its side."""
        return self.connection_lost(BunqueueConnectionLost("Connection lost: the server closed "
                                                           "the connection"))

    def connection_lost(self, error: Exception | None = None) -> list[Event]:
        """The socket is gone (EOF, reset, or the shell closed it)."""
        events: list[Event] = []
        if self.state in (_S.NEGOTIATING, _S.READY, _S.STOPPING):
            err = error if isinstance(error, BunqueueClientError) else BunqueueConnectionLost(
                f"Connection lost: {error}" if error else "Connection lost")
            self._link_down(_E.CONNECTION_LOST, str(err), err, events)
        return events

    def stop(self) -> list[Event]:
        """Graceful stop: no new commands; READY drains what is pending first."""
        events: list[Event] = []
        if self.state in (_S.STOPPING, _S.STOPPED):
            return events
        self._fire(_E.STOP)
        if self.state is _S.STOPPED:
            self._finish("stopped", None, events)
        else:
            self._after_input(events)
        return events

    def abort(self, error: Exception | None = None) -> list[Event]:
        """Stop now: whatever is pending is settled with ``error`` (default: stopped)."""
        events: list[Event] = []
        if self.state is _S.STOPPED:
            return events
        if self.state is not _S.STOPPING:
            self._fire(_E.STOP)
        if self.state is _S.STOPPING:
            self._fire(_E.CONNECTION_LOST)
        self._finish("aborted", error, events)
        return events

    # -- commands
    def send(self, payload: Mapping[str, Any], timeout: float | None = None) -> Command:
        """Accept a command (a map with ``cmd``); ``timeout`` in seconds (default
        ``command_timeout``). Written now when the link is READY and the window has room,
        else queued. Raises :class:`BunqueueStateError` once stopping, and
        :class:`BunqueueEncodeError` when it cannot be encoded."""
        state = self.state
        if state is _S.STOPPING or state is _S.STOPPED:
            raise BunqueueStateError(f"{payload.get('cmd')}: the session is {state.value}, "
                                     f"it takes no new commands")
        timeout = self._timeout if timeout is None else timeout
        command = Command(payload=payload, timeout=timeout, deadline=self._clock() + timeout)
        if state is _S.READY and len(self._inflight) < self._window and not self._backlog:
            self._write(command)  # raises BunqueueEncodeError before anything is queued
        else:
            self._check_encodable(command)
            self._backlog.append(command)
            self.connect_soon()
        self._watch(command)
        return command

    def _watch(self, command: Command) -> None:
        """Put a command on the deadline heap (once it has been accepted)."""
        heapq.heappush(self._deadlines, (command.deadline, next(self._arrivals), command))

    def _check_encodable(self, command: Command) -> None:
        """Give a queued command its reqId and frame now: encoded once, refused at once."""
        self._encoded(command)

    def _encoded(self, command: Command) -> bytes:
        number = self._next_req
        self._next_req = number + 1
        req_id = str(number)  # a string (BQ-ENV-2), as the official client sends it
        message = {**command.payload, "reqId": req_id}
        # a refused command is dropped: send raises before it is queued, written or watched
        try:
            frame = self._encode(message)
        except EncodeError as exc:
            raise BunqueueEncodeError(str(exc)) from None
        if nests_too_deep(frame[self._prefix_len:], message, self._max_depth):
            raise BunqueueEncodeError(too_deep_message(self._max_depth))
        command.id = number
        command.req_id = req_id
        command.frame = frame
        return frame

    def _write(self, command: Command) -> None:
        frame = command.frame or self._encoded(command)
        command.frame = b""
        command.fire(RequestEvent.SEND)
        self._inflight[command.req_id] = command
        self._queue(frame)

    def _internal(self, payload: dict[str, Any], kind: str) -> Command:
        command = Command(payload=payload, timeout=self._timeout,
                          deadline=self._clock() + self._timeout, internal=kind)
        self._write(command)
        self._watch(command)
        return command

    def _hello(self) -> dict[str, Any]:
        spec = self.profile.model
        return {"cmd": "Hello", "protocolVersion": spec.protocol_version,
                "capabilities": list(spec.capabilities)}

    def _pump(self) -> None:
        """Write queued commands while the link is READY (or STOPPING) and the window allows.
        A queued command was encoded when ``send`` accepted it (``_check_encodable``), so
        ``_write`` only sends its frame: it cannot fail here."""
        backlog = self._backlog
        while backlog and len(self._inflight) < self._window:
            command = backlog.popleft()
            if command.state is not RequestState.QUEUED:
                continue
            self._write(command)

    # -- answers
    def _on_frame(self, frame: dict[str, Any], events: list[Event], nulls: bool = False) -> None:
        """One frame from the server. ``nulls``: the frame may hold msgpackr's undefined
        (ext 0), which the caller gets as None (BQ-MSGPACK-201), after the reply's shape was
        judged with undefined read as absent (the envelope's x-undefinedAsAbsent)."""
        req_id = frame.get("reqId")
        if req_id is None and "ok" not in frame:   # a pushed frame answers nothing
            events.append(PushedFrame(undefined_to_none(frame) if nulls else frame))
            return
        command = self._inflight.pop(req_id, None) if type(req_id) is str else None
        if command is None:
            self.late_answers += 1
            return
        self._timeouts_in_row = 0
        self._ping_failures = 0
        ok = frame.get("ok")
        if ok is False or (ok is not True and "error" in frame):
            command.error = self._refusal(command, frame)
            command.fire(RequestEvent.ERROR)
        elif not command.internal and (problem := self._shapes.problem(command.cmd, frame)):
            command.error = BunqueueReplyInvalid(command.cmd, problem[1], problem[0], frame)
            command.fire(RequestEvent.ERROR)
        else:
            command.result = undefined_to_none(frame) if nulls else frame
            command.fire(RequestEvent.ANSWER)
        if command.internal:
            self._internal_settled(command, events)
        else:
            events.append(Settled(command))

    def _refusal(self, command: Command, frame: Mapping[str, Any]) -> BunqueueRefused:
        message = str(frame.get("error", "refused"))
        name, requirement = self._errors.match(message)
        cls = BunqueueAuthError if command.internal == "auth" else BunqueueRefused
        return cls(command.cmd, message, name, requirement, frame)

    def _internal_settled(self, command: Command, events: list[Event]) -> None:
        kind = command.internal
        if kind == "ping":
            self._ping = None  # an answer, even a refusal, proves the link carries bytes
            self._ping_failures = 0
            return
        if self.state is not _S.NEGOTIATING:
            return
        if command.state is not RequestState.ANSWERED and kind == "hello":
            # a server without Hello (or without this version): document 000's v1, sequential
            log.info("bunqueue session: Hello refused (%s); going on as protocol v1, one "
                     "command at a time", command.error)
            command.result = {"refused": str(command.error)}
        elif command.state is not RequestState.ANSWERED:
            self._fire(_E.REFUSED)
            self._finish(f"{command.cmd} refused", command.error, events)
            return
        if kind == "auth":
            self._internal(self._hello(), "hello")
            return
        hello = command.result or {}
        version = hello.get("protocolVersion")
        caps = hello.get("capabilities")
        self.protocol_version = version if type(version) is int else None
        self.capabilities = tuple(c for c in caps if isinstance(c, str)) if isinstance(
            caps, list) else ()
        self.server_hello = {k: v for k, v in hello.items() if k not in ("ok", "reqId")}
        sequential = (not self.options.pipelining or "pipelining" not in self.capabilities
                      or self.protocol_version is None or self.protocol_version < 2)
        self._window = 1 if sequential else self.options.max_in_flight
        self._fire(_E.NEGOTIATED)
        self._attempt = 0
        self.ready_once = True
        interval = self.options.ping_interval
        self._next_ping = self._clock() + interval / 1000.0 if interval else None
        events.append(Ready(self.protocol_version, self.capabilities, self._window,
                            self.server_hello))
        self._pump()

    def _after_input(self, events: list[Event]) -> None:
        if self.state is _S.READY or self.state is _S.STOPPING:
            if self._backlog:
                self._pump()
            if self.state is _S.STOPPING and not self._inflight and not self._backlog:
                self._fire(_E.DRAINED)
                self._finish("stopped", None, events)

    # -- time
    def next_tick(self) -> float | None:
        """When ``tick()`` has something to do next (clock time), or None."""
        state = self.state
        if state is _S.STOPPED:
            return None
        due = self._retry_at if state is _S.RECONNECTING else None
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].state not in (RequestState.QUEUED, RequestState.SENT):
            heapq.heappop(deadlines)
        if deadlines:
            due = deadlines[0][0] if due is None else min(due, deadlines[0][0])
        if (self._next_ping is not None and state is _S.READY and self._ping is None
                and len(self._inflight) < self._window):  # a full window holds the Ping back
            due = self._next_ping if due is None else min(due, self._next_ping)
        return due

    def tick(self) -> list[Event]:
        """Expire commands past their deadline, send a due Ping, end a backoff."""
        events: list[Event] = []
        now = self._clock()
        deadlines = self._deadlines  # commands time out in every state, backlogged ones too
        while deadlines and deadlines[0][0] <= now and self.state is not _S.STOPPED:
            command = heapq.heappop(deadlines)[2]
            if command.state is RequestState.QUEUED or command.state is RequestState.SENT:
                self._expire(command, events)
        if self.state is _S.RECONNECTING:
            if self._retry_at is not None and now >= self._retry_at:
                self._fire(_E.BACKOFF_ELAPSED)
                self.reconnects += 1
                events.append(ConnectNow(self._attempt))
            return events
        if (self.state is _S.READY and self._next_ping is not None and self._ping is None
                and now >= self._next_ping and len(self._inflight) < self._window):
            self._ping = self._internal({"cmd": "Ping"}, "ping")
            self._next_ping = now + self.options.ping_interval / 1000.0
        self._after_input(events)
        return events

    def _expire(self, command: Command, events: list[Event]) -> None:
        written = command.state is RequestState.SENT
        if written:
            self._inflight.pop(command.req_id, None)
        command.error = BunqueueTimeout(
            f"Command timeout: {command.cmd} got no answer within {command.timeout:g} s")
        command.fire(RequestEvent.TIMEOUT)
        kind = command.internal
        if kind == "ping":
            self._ping = None
            self._ping_failed("the Ping timed out", events)
            return
        if kind:  # Auth or Hello unanswered: this link cannot negotiate
            self._dead(f"{command.cmd} got no answer within {self._timeout:g} s", events)
            return
        events.append(Settled(command))
        if written:
            self._timeouts_in_row += 1
            limit = self.options.max_command_timeouts
            if limit and self._timeouts_in_row >= limit:
                self._dead(f"{self._timeouts_in_row} consecutive command timeouts "
                           f"(maxCommandTimeouts {limit}, BQ-CLIENT-4)", events)

    def _ping_failed(self, why: str, events: list[Event]) -> None:
        self._ping_failures += 1
        limit = self.options.max_ping_failures
        if limit and self._ping_failures >= limit:
            self._dead(f"{self._ping_failures} consecutive failed pings (maxPingFailures "
                       f"{limit}, BQ-CLIENT-3): {why}", events)

    def _dead(self, why: str, events: list[Event]) -> None:
        if self.state not in (_S.NEGOTIATING, _S.READY, _S.STOPPING):
            return
        self.dead_links += 1
        err = BunqueueConnectionLost(f"Connection lost: dead link: {why}")
        self._link_down(_E.DEAD_LINK, str(err), err, events)

    # -- going down
    def _link_down(self, event: SessionEvent, reason: str, error: Exception,
                   events: list[Event]) -> None:
        """The link is gone: fail what was written, then reconnect (or stop)."""
        self._fire(event)
        self._outbox.clear()  # bytes for the dead socket must not reach the next one
        self._ping = None
        inflight, self._inflight = self._inflight, {}
        for command in inflight.values():  # BQ-CLIENT-6: rejected at once
            command.error = error
            command.fire(RequestEvent.CLOSED)
            if not command.internal:
                events.append(Settled(command))
        if self.state is _S.STOPPED:
            self._finish(reason, error, events)
            return
        # RECONNECTING
        if not self.options.reconnect:
            self._fire(_E.GIVE_UP)
            events.append(LinkDown(reason, error, None))
            self._finish(reason, error, events)
            return
        delay = self.backoff_delay(self._attempt)
        self._attempt += 1
        self._retry_at = self._clock() + delay
        events.append(LinkDown(reason, error, self._retry_at))

    def backoff_delay(self, attempt: int) -> float:
        """Seconds to wait before reconnect attempt ``attempt`` (0-based), BQ-CLIENT-2."""
        o = self.options
        base = min(o.reconnect_base_delay * o.reconnect_factor ** attempt, o.reconnect_max_delay)
        jitter = o.reconnect_jitter
        return max(0.0, base * (1.0 + self._rng.uniform(-jitter, jitter))) / 1000.0

    def _finish(self, reason: str, error: Exception | None, events: list[Event]) -> None:
        """STOPPED: settle everything still pending, report Closed."""
        self.error, self.close_reason = error, reason
        self._outbox.clear()
        failure = error or BunqueueSessionStopped("Session stopped")
        pending = list(self._inflight.values()) + list(self._backlog)
        self._inflight, self._backlog = {}, deque()
        self._deadlines = []
        self._settle(pending, failure, events)
        events.append(Closed(reason, error))

    @staticmethod
    def _settle(commands: Iterable[Command], error: Exception, events: list[Event]) -> None:
        """Fail the commands still waiting (queued or written) with ``error``."""
        for command in commands:
            if command.state in (RequestState.QUEUED, RequestState.SENT):
                command.error = error
                command.fire(RequestEvent.CLOSED)
                if not command.internal:
                    events.append(Settled(command))


class ErrorMatcher:
    """Names a refusal's message after the profile's error strings (their ``{field}``
    placeholders match anything), so a :class:`BunqueueRefused` can cite the rule."""

    def __init__(self, profile: Profile):
        self._patterns: list[tuple[re.Pattern[str], str, str | None]] = []
        for name, error in profile.model.errors.items():
            parts = re.split(r"\{[^{}]*\}", error.message)
            pattern = "^" + "(.+?)".join(re.escape(p) for p in parts) + "$"
            self._patterns.append((re.compile(pattern, re.S), name, error.requirement))
        self._patterns.sort(key=lambda p: -len(p[0].pattern))  # the most specific first

    def match(self, message: str) -> tuple[str | None, str | None]:
        for pattern, name, requirement in self._patterns:
            if pattern.match(message):
                return name, requirement
        return None, None
