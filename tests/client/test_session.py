"""The protocol-free session machinery (queuewire.client.session) on its own: a toy session
with its own heartbeat bytes and errors uses the tables, the outbox, the heartbeat timer and
closing without any codec, as a bunqueue session would."""

from __future__ import annotations

import pytest

from queuewire.client.session import (
    CLIENT_TRANSITIONS,
    ClientConnectionLost,
    ClientEvent,
    ClientState,
    ClientStateError,
    Closed,
    HeartbeatSent,
    Request,
    RequestEvent,
    RequestState,
    Session,
    Settled,
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

    def _settle_all(self, error, events):
        for req in self.pending:
            if req.fire(RequestEvent.CLOSED) is RequestState.LOST:
                req.error = error
                events.append(Settled(req))
        self.pending.clear()


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
