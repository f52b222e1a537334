"""The protocol-free session machinery (queuewire.client.session) on its own: a toy session
with its own heartbeat bytes and errors uses the tables, the outbox, the heartbeat timer and
closing without any codec, as a bunqueue session would."""

from __future__ import annotations

import errno

import pytest

from queuewire.client.session import (
    CLIENT_TRANSITIONS,
    ClientConnectError,
    ClientConnectionLost,
    ClientEvent,
    ClientSessionStopped,
    ClientState,
    ClientStateError,
    Closed,
    HeartbeatSent,
    Request,
    RequestEvent,
    RequestState,
    Session,
    Settled,
    connect_failure,
    mermaid,
    step,
)


class ToyLost(ClientConnectionLost):
    pass


class ToyStateError(ClientStateError):
    pass


class ToySession(Session):
    role = "toy"
    state_error = ToyStateError
    lost_error = ToyLost
    heartbeat_answer = "PONG"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.can_heartbeat = True
        self.pending: list[Request] = []

    def _heartbeat_frame(self) -> bytes:
        return b"PING\n"

    def receive(self, data: bytes) -> None:
        self._touch()

    def _settle_all(self, error, events):
        for req in self.pending:
            if req.fire(RequestEvent.CLOSED) is RequestState.LOST:
                req.error = error
                events.append(Settled(req))
        self.pending.clear()


class LoopSession(Session):
    """A machine with a loop, to take more transitions than the history holds."""

    _table = {(ClientState.CREATED, ClientEvent.START): ClientState.CREATED}


class Clock:
    def __init__(self):
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_step_raises_the_given_error_for_a_missing_pair():
    assert step(CLIENT_TRANSITIONS, ClientState.OPEN, ClientEvent.STOP, "x") is ClientState.STOPPING
    with pytest.raises(ToyStateError, match="'drained' is not allowed in state 'open'"):
        step(CLIENT_TRANSITIONS, ClientState.OPEN, ClientEvent.DRAINED, "x", ToyStateError)


def test_a_protocol_session_gets_heartbeats_closing_and_its_own_errors():
    clock = Clock()
    s = ToySession(heartbeat_interval=5.0, pong_timeout=2.0, clock=clock)
    with pytest.raises(ToyStateError):
        s._fire(ClientEvent.CONNECTED)  # not connecting yet
    assert s.next_tick() is None  # no heartbeats before the connection is up
    s.start()
    s.connected()
    req = Request()
    s.pending.append(req)
    assert s.next_tick() == pytest.approx(15.0)
    clock.now = 15.0
    assert s.tick() == [HeartbeatSent()] and s.data_to_send() == b"PING\n"
    s._heartbeat_answered()
    clock.now = 20.0
    assert s.tick() == [HeartbeatSent()]
    clock.now = 22.0
    events = s.tick()
    assert s.closed and s.state is ClientState.CLOSED
    assert isinstance(s.error, ToyLost) and "no PONG within 2.0 s" in str(s.error)
    assert events == [Settled(req), Closed(str(s.error), s.error)]
    assert req.state is RequestState.LOST and req.error is s.error


# ------------------------------------------------ issue 31: behaviours a mutation run found

def test_mermaid_renders_one_line_per_transition_with_start_and_end():
    table = {(ClientState.CREATED, ClientEvent.START): ClientState.CONNECTING,
             (ClientState.CONNECTING, ClientEvent.STOP): ClientState.CLOSED}
    assert mermaid(table, ClientState.CREATED, ClientState.CLOSED).split("\n") == [
        "stateDiagram-v2",
        "    [*] --> CREATED",
        "    CREATED --> CONNECTING: start",
        "    CONNECTING --> CLOSED: stop",
        "    CLOSED --> [*]",
    ]


class ToyRequest(Request):
    state_error = ToyStateError


def test_a_request_refuses_a_missing_transition_with_its_own_error_naming_it():
    req = ToyRequest()
    with pytest.raises(ToyStateError, match=rf"^request {req.id}: 'done' is not allowed in "
                                            r"state 'sent'$"):
        req.fire(RequestEvent.DONE)
    assert req.state is RequestState.SENT


def test_a_session_state_error_names_its_role():
    s = ToySession()
    with pytest.raises(ToyStateError, match=r"^toy session: 'connected' is not allowed in "
                                            r"state 'created'$"):
        s._fire(ClientEvent.CONNECTED)
    assert s.error is None and s.close_reason is None  # nothing closed yet


def test_a_session_that_cannot_heartbeat_never_does():
    """``heartbeat_interval`` alone does not make a session heartbeat: ``can_heartbeat``
    (off by default) must be set too."""
    clock = Clock()
    s = Session(heartbeat_interval=1.0, clock=clock)
    s.start()
    s.connected()
    assert s.next_tick() is None
    clock.now += 100
    assert s.tick() == [] and s.data_to_send() == b""


def test_heartbeats_wait_for_an_idle_socket_and_the_answer_deadline():
    clock = Clock()
    s = ToySession(heartbeat_interval=5.0, pong_timeout=2.0, clock=clock)
    s.start()
    clock.now = 30.0
    assert s.next_tick() is None and s.tick() == []  # still connecting: no heartbeat
    s.connected()  # idle since 30
    clock.now = 34.0
    s.receive(b"hello")  # bytes in: not idle (since 34)
    assert s.next_tick() == 39.0
    clock.now = 38.9
    assert s.tick() == [] and s.data_to_send() == b""  # not idle long enough
    clock.now = 39.0
    assert s.tick() == [HeartbeatSent()] and s.data_to_send() == b"PING\n"
    assert s.next_tick() == 41.0  # the answer is due pong_timeout later
    clock.now = 40.9
    assert s.tick() == [] and not s.closed
    clock.now = 41.0
    assert isinstance(s.tick()[-1], Closed) and s.closed


def test_the_heartbeat_answer_is_awaited_ten_seconds_by_default():
    """``pong_timeout`` defaults to 10 s (the documented default every session inherits): the
    session closes exactly 10 s after an unanswered heartbeat, and says so."""
    clock = Clock()
    s = ToySession(heartbeat_interval=5.0, clock=clock)
    s.start()
    s.connected()
    clock.now += 5.0
    assert s.tick() == [HeartbeatSent()]
    assert s.next_tick() == clock.now + 10.0
    clock.now += 9.99
    assert s.tick() == [] and not s.closed
    clock.now += 0.01
    closed = s.tick()[-1]
    assert isinstance(closed, Closed) and "no PONG within 10.0 s" in closed.reason
    assert s.next_tick() is None and s.tick() == []  # nothing is due once closed


def test_a_graceful_close_settles_pending_requests_with_session_stopped():
    """Document 003: stopping rejects pending requests with "Session stopped"."""
    s = ToySession()
    s.start()
    s.connected()
    req = Request()
    s.pending.append(req)
    s._fire(ClientEvent.STOP)
    events: list = []
    s._close(ClientEvent.DRAINED, "stopped", None, events)
    assert s.state is ClientState.CLOSED and s.error is None and s.close_reason == "stopped"
    assert events == [Settled(req), Closed("stopped", None)]
    assert type(req.error) is ClientSessionStopped and str(req.error) == "Session stopped"


def test_the_history_keeps_the_last_64_transitions():
    s = LoopSession()
    for _ in range(70):
        s.start()
    assert len(s.history) == 64
    assert list(s.history)[-1] == (ClientState.CREATED, ClientEvent.START, ClientState.CREATED)


# ------------------------------------------- issue 24: a failed connect says why, loudly

REFUSED = f"[Errno {errno.ECONNREFUSED}] Connect call failed ('127.0.0.1', 6789)"


@pytest.mark.parametrize(("error", "timeout", "words"), [
    # a refusal, however the socket spells it
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 6789)"), None,
     f"connection refused ({REFUSED})"),
    (ConnectionRefusedError("Connect call failed"), 5.0, "connection refused (Connect call failed)"),
    # asyncio's one OSError for a host name whose addresses all failed: one refusal is enough
    (OSError(f"Multiple exceptions: [Errno {errno.EADDRNOTAVAIL}] Cannot assign requested "
             f"address, {REFUSED}"), None,
     f"connection refused (Multiple exceptions: [Errno {errno.EADDRNOTAVAIL}] Cannot assign "
     f"requested address, {REFUSED})"),
    # asyncio.timeout's bare TimeoutError is the connect timeout ...
    (TimeoutError(), 30.0, "no connection within the connect timeout (30 s)"),
    (TimeoutError(), 2.5, "no connection within the connect timeout (2.5 s)"),
    # ... but not without a timeout, nor a timeout the OS reported with its own words
    (TimeoutError(), None, "TimeoutError"),
    (TimeoutError(errno.ETIMEDOUT, "Connect call failed"), 2.5,
     f"[Errno {errno.ETIMEDOUT}] Connect call failed"),
    # anything else in the socket's own words, or its type when it has none
    (OSError(errno.EHOSTUNREACH, "No route to host"), 2.5,
     f"[Errno {errno.EHOSTUNREACH}] No route to host"),
    (OSError(), 2.5, "OSError"),
])
def test_a_failed_connect_is_put_in_words(error, timeout, words):
    assert connect_failure(error, timeout) == words


def test_a_connect_error_names_the_address_says_why_and_chains_the_cause():
    cause = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 6789)")
    error = ClientConnectError("127.0.0.1", 6789, cause, 4.0)
    assert str(error) == f"cannot connect to 127.0.0.1:6789: connection refused ({REFUSED})"
    assert (error.host, error.port, error.reason) == ("127.0.0.1", 6789, f"connection refused ({REFUSED})")
    assert error.__cause__ is cause
    assert isinstance(error, ClientConnectionLost) and isinstance(error, ConnectionError)
    timed_out = TimeoutError()
    error = ClientConnectError("db.internal", 7000, timed_out, 4.0)  # the timeout reaches the words
    assert str(error) == "cannot connect to db.internal:7000: no connection within the connect timeout (4 s)"
    assert error.__cause__ is timed_out
    error = ClientConnectError("h", 1, "refused")  # a reason given in words has no cause
    assert str(error) == "cannot connect to h:1: refused" and error.reason == "refused"
    assert error.__cause__ is None
