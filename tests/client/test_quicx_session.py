"""The sans-IO quicx sessions (``queuewire.client.quicx_session``) driven by hand: bytes in,
events and bytes out, time from a fake clock, no sockets.

What each session does with each input, in every state a caller can reach: the errors a caller
sees (their attributes and the texts users read), closing (EOF, a lost socket, a protocol
error, a graceful stop) and what it settles, FIFO correlation with its timed-out tombstones,
the producer's forwarded results, the monitor's stats, the worker's READY, backoff, result and
graceful stop, heartbeats per role, and the defaults. Expected bytes come from the codec,
expected codes, names, limits and flags from the loaded spec. A few tests build a variant of a
shipped profile (a flag or a direction changed) to reach what the session does for a profile
value no shipped profile has yet but the spec allows (``client_error_reaction: reply``, a
``heartbeat_from`` without a role the message table allows, a looser direction table).
tests/client/test_quicx_client.py drives the same sessions through the asyncio shells.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from queuewire.client.quicx_session import (
    Accepted,
    ClientState,
    Closed,
    ErrorReceived,
    HeartbeatSent,
    MonitorSession,
    ProducerSession,
    QuicxConnectionLost,
    QuicxProtocolViolation,
    QuicxRefused,
        QuicxStateError,
    QuicxTimeout,
    RequestState,
    Settled,
    StatsRequest,
    TaskAssigned,
    WaitAdvised,
    WorkerSession,
    WorkerState,
)
from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.quicx import QuicxDecoder, QuicxEncodeError, QuicxEncoder
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import DAEMON, QuicxSpec

PROFILES = profile_names("quicx")
LOGGER = "queuewire.client.quicx"
ROLES = {"producer": ProducerSession, "worker": WorkerSession, "monitor": MonitorSession}


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def spec_of(profile) -> QuicxSpec:
    return (load_profile(profile) if isinstance(profile, str) else profile).model


def forwarding() -> str:
    """A profile whose daemon forwards DONE / FAILED to the producer."""
    return next(p for p in PROFILES if spec_of(p).flag("forward_results_to_producer"))


def not_forwarding() -> str:
    return next(p for p in PROFILES if not spec_of(p).flag("forward_results_to_producer"))


def with_stats() -> str:
    return next(p for p in PROFILES if spec_of(p).allowed("MSG_STATS", "monitor", DAEMON))


def with_wait() -> str:
    return next(p for p in PROFILES if spec_of(p).allowed("MSG_WAIT", DAEMON, "worker"))


def variant(profile: str, *, flags=None, directions=(), without=()):
    """``profile`` with semantics ``flags`` set to other values, (message, sender, receiver)
    ``directions`` added to its message table and those in ``without`` taken out: a profile
    the spec's schema allows."""
    base = load_profile(profile)
    spec = base.model
    semantics = dict(spec.semantics)
    for name, value in (flags or {}).items():
        semantics[name] = dataclasses.replace(semantics[name], value=value)
    messages = dict(spec.messages)
    for name, sender, receiver in directions:
        msg = messages[name]
        messages[name] = dataclasses.replace(msg, directions=msg.directions | {(sender, receiver)})
    for name, sender, receiver in without:
        msg = messages[name]
        assert (sender, receiver) in msg.directions
        messages[name] = dataclasses.replace(msg, directions=msg.directions - {(sender, receiver)})
    by_code = {code: messages.get(m.name, m) for code, m in spec.by_code.items()}
    model = dataclasses.replace(spec, semantics=semantics, messages=messages, by_code=by_code)
    return dataclasses.replace(base, name=f"{base.name}+variant", model=model)


def opened(cls, profile="quicx/v1", **kwargs):
    """A session of ``cls`` connected, its first bytes (a worker's READY) taken."""
    s = cls(profile, **kwargs)
    s.start()
    assert s.connected() == []
    s.data_to_send()
    return s


def daemon(profile) -> QuicxEncoder:
    return QuicxEncoder(profile, DAEMON)


def sent(profile, data: bytes) -> list[tuple[str, dict]]:
    """What the daemon reads in ``data``."""
    return [(m.name, m.fields) for m in QuicxDecoder(profile, DAEMON).feed(data)]


def refusal_text(spec: QuicxSpec, code: int, message: str) -> str:
    return f"refused by the daemon: {spec.error_names.get(code) or hex(code)} ({code:#04x}): {message}"


def log_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]


# ------------------------------------------------------------------------- construction

def test_defaults_are_quicx_v1_no_producer_heartbeat_and_a_15_s_worker_heartbeat():
    """A session built with no arguments speaks quicx/v1; producers and monitors send no
    heartbeat unless asked, a worker probes after 15 s idle and gives the PONG 10 s, and its
    backoff starts at 0.05 s and doubles up to 1 s."""
    clock = FakeClock()
    for cls in (ProducerSession, MonitorSession):
        s = cls(clock=clock)
        assert s.profile.name == "quicx/v1" and s.can_heartbeat
        s.start()
        s.connected()
        clock.now += 1000.0
        assert s.next_tick() is None and s.tick() == [] and s.data_to_send() == b""
    w = WorkerSession(clock=clock)
    assert w.profile.name == "quicx/v1"
    w.start()
    w.connected()
    assert w.data_to_send() == QuicxEncoder("quicx/v1").ready()
    assert w.next_tick() == pytest.approx(clock.now + 15.0)
    clock.now += 15.0
    assert w.tick() == [HeartbeatSent()]
    assert w.next_tick() == pytest.approx(clock.now + 10.0)
    enc = daemon("quicx/v1")
    delays = []
    for _ in range(7):
        (event,) = w.receive_data(enc.wait())
        delays.append(event.delay)
        w.backoff_elapsed()
    assert delays == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_default_pong_timeout_is_10_s(role):
    """Where the role may heartbeat, a probe without its MSG_PONG closes the session 10 s later
    by default, not earlier."""
    profile = next(p for p in PROFILES if spec_of(p).allowed("MSG_HEARTBEAT", role, DAEMON))
    clock = FakeClock()
    s = opened(ROLES[role], profile, heartbeat_interval=5.0, clock=clock)
    clock.now += 5.0
    assert s.tick() == [HeartbeatSent()] and s.data_to_send() == QuicxEncoder(profile).heartbeat()
    clock.now += 9.9
    assert s.tick() == [] and not s.closed
    clock.now += 0.1
    (closed,) = s.tick()
    assert s.closed and isinstance(closed.error, QuicxConnectionLost)
    assert str(closed.error) == "no MSG_PONG within 10.0 s" == closed.reason


@pytest.mark.parametrize("profile", PROFILES)
def test_a_profile_object_is_used_as_given(profile):
    """``profile`` may be a name or a loaded Profile; a Profile is used as it is (here a
    variant no name loads)."""
    custom = variant(profile)
    for cls in ROLES.values():
        assert cls(profile).profile is load_profile(profile)
        s = cls(custom)
        assert s.profile is custom and s.spec is custom.model


def test_a_profile_of_another_protocol_is_refused():
    name = profile_names("bunqueue")[0]
    for cls in ROLES.values():
        with pytest.raises(ValueError) as info:
            cls(name)
        assert str(info.value) == f"profile {name} is not a quicx profile"


@pytest.mark.parametrize("profile", PROFILES)
def test_who_heartbeats_is_the_profiles_heartbeat_from(profile):
    """A role heartbeats when the profile's ``heartbeat_from`` names it and it may send
    MSG_HEARTBEAT; a role that may not sends nothing however long the socket is idle."""
    spec = spec_of(profile)
    for role, cls in ROLES.items():
        clock = FakeClock()
        s = opened(cls, profile, heartbeat_interval=1.0, clock=clock)
        expected = role in spec.flag("heartbeat_from") and spec.allowed("MSG_HEARTBEAT", role, DAEMON)
        assert s.can_heartbeat is expected
        clock.now += 5.0
        assert s.tick() == ([HeartbeatSent()] if expected else [])
        assert s.data_to_send() == (QuicxEncoder(profile).heartbeat() if expected else b"")


def test_heartbeat_from_is_obeyed_even_where_the_message_table_allows_a_heartbeat():
    """A profile whose ``heartbeat_from`` leaves a role out: that role never probes, although
    its message table lets it send MSG_HEARTBEAT."""
    profile = variant("quicx/v1", flags={"heartbeat_from": [DAEMON, "worker"]})
    assert profile.model.allowed("MSG_HEARTBEAT", "producer", DAEMON)
    clock = FakeClock()
    s = opened(ProducerSession, profile, heartbeat_interval=1.0, clock=clock)
    clock.now += 5.0
    assert not s.can_heartbeat and s.next_tick() is None and s.tick() == []
    assert s.data_to_send() == b""
    w = opened(WorkerSession, profile, heartbeat_interval=1.0, clock=clock)
    clock.now += 5.0
    assert w.can_heartbeat and w.tick() == [HeartbeatSent()]


def test_heartbeat_from_cannot_make_a_role_send_what_its_message_table_forbids():
    """A profile whose ``heartbeat_from`` names a role its message table does not let send
    MSG_HEARTBEAT: that role never probes either."""
    base = next(p for p in PROFILES if not spec_of(p).allowed("MSG_HEARTBEAT", "producer", DAEMON))
    profile = variant(base, flags={"heartbeat_from": [*spec_of(base).flag("heartbeat_from"), "producer"]})
    clock = FakeClock()
    s = opened(ProducerSession, profile, heartbeat_interval=1.0, clock=clock)
    clock.now += 5.0
    assert not s.can_heartbeat and s.next_tick() is None and s.tick() == []
    assert s.data_to_send() == b""


def test_a_role_that_may_not_send_msg_pong_leaves_a_daemon_heartbeat_unanswered():
    """Where the daemon may probe a role but the profile does not let that role send MSG_PONG,
    the heartbeat is taken (the session stays open) and nothing is sent; the other roles of
    the same profile answer it."""
    profile = variant("quicx/v1", without=[("MSG_PONG", "producer", DAEMON)])
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    assert s.receive_data(enc.heartbeat()) == [] and s.data_to_send() == b"" and not s.closed
    w = opened(WorkerSession, profile)
    assert w.receive_data(enc.heartbeat()) == [] and w.data_to_send() == QuicxEncoder(profile).pong()


@pytest.mark.parametrize("profile", PROFILES)
def test_the_session_encodes_as_its_role(profile):
    """The session's encoder refuses what its role may not send (a producer sends no MSG_READY,
    a worker no MSG_SUBMIT): a session can never put another role's frame on the wire."""
    spec = spec_of(profile)
    for role, cls in ROLES.items():
        s = cls(profile)
        for name in ("MSG_READY", "MSG_SUBMIT", "MSG_STATS"):
            if not spec.allowed(name, role, DAEMON):
                with pytest.raises(QuicxEncodeError):
                    s.encoder.encode(name)


# ------------------------------------------------------------------------- errors

@pytest.mark.parametrize("profile", PROFILES)
def test_a_refusal_carries_the_daemons_code_name_and_message(profile):
    """MSG_ERROR becomes QuicxRefused: code, the spec's name for it (or its hex where the spec
    names none), the daemon's message, and a text naming all three."""
    spec = spec_of(profile)
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    a, b = s.submit("t"), s.submit("t")
    code = spec.error_code("QUEUE_FULL")
    unknown = max(spec.error_names) + 0x50
    events = s.receive_data(enc.error("QUEUE_FULL", "full")
                            + enc.encode("MSG_ERROR", error_code=unknown, message="odd"))
    assert events == [Settled(a), Settled(b)]
    assert (a.state, b.state) == (RequestState.REFUSED, RequestState.REFUSED)
    assert (a.error.error_code, a.error.error_name, a.error.message) == (code, "QUEUE_FULL", "full")
    assert str(a.error) == refusal_text(spec, code, "full")
    assert str(a.error) == f"refused by the daemon: QUEUE_FULL ({code:#04x}): full"
    assert (b.error.error_code, b.error.error_name, b.error.message) == (unknown, None, "odd")
    assert str(b.error) == f"refused by the daemon: {hex(unknown)} ({unknown:#04x}): odd"
    assert not s.closed and s.pending == 0


@pytest.mark.parametrize("role", sorted(ROLES))
def test_an_error_no_request_waits_for_is_reported_and_logged(role, caplog):
    """A MSG_ERROR that answers nothing (to a worker, or a client with nothing pending) is an
    ErrorReceived event and a warning naming the role; the session stays open."""
    profile = "quicx/v1"
    spec = spec_of(profile)
    s = opened(ROLES[role], profile)
    code = spec.error_code("INVALID_MESSAGE")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        (event,) = s.receive_data(daemon(profile).error("INVALID_MESSAGE", "what?"))
    assert isinstance(event, ErrorReceived) and isinstance(event.error, QuicxRefused)
    assert (event.error.error_code, event.error.error_name, event.error.message) == (
        code, "INVALID_MESSAGE", "what?")
    assert log_lines(caplog) == [("WARNING", f"{role} session: {refusal_text(spec, code, 'what?')}")]
    assert not s.closed


@pytest.mark.parametrize("profile", PROFILES)
def test_a_decoder_error_closes_the_session_with_the_rule_it_broke(profile):
    """A frame the decoder refuses (here one sent the wrong way, MSG_SUBMIT to a producer)
    closes the session (client_error_reaction): Closed and the session's error carry a
    QuicxProtocolViolation holding the decoder's ProtocolError and its requirement; the frames
    before it in the same read are still handled; what comes after the close is ignored."""
    spec = spec_of(profile)
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    a, b = s.submit("t"), s.submit("t")
    bad = QuicxEncoder(profile).submit("x")
    events = s.receive_data(enc.ok(1) + bad + enc.ok(2))
    *first, closed = events
    assert first[0] == Accepted(a) and a.task_id == 1
    assert isinstance(closed, Closed) and s.closed and s.state is ClientState.CLOSED
    error = closed.error
    assert isinstance(error, QuicxProtocolViolation) and s.error is error
    assert isinstance(error.protocol_error, ProtocolError)
    assert error.protocol_error.requirement == spec.error("wrong_direction").requirement
    assert closed.reason == str(error.protocol_error) == s.close_reason
    assert str(error) == f"the daemon broke the protocol: {error.protocol_error}"
    assert b.state is RequestState.LOST and b.error is error and Settled(b) in events
    assert s.receive_data(enc.ok(3)) == [] and s.receive_eof() == [] and s.connection_lost() == []
    assert b.state is RequestState.LOST and s.error is error


@pytest.mark.parametrize("profile", PROFILES)
def test_a_bad_frame_after_the_answer_that_closed_a_stopping_session_is_not_a_second_close(profile):
    """A stopping producer whose last answer and a bad frame come in one read: the answer
    settles the submission and closes the session gracefully; the bad frame after it is not
    looked at (one Closed, no error, nothing raised)."""
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    sub = s.submit("t")
    s.stop()
    answer = enc.error("QUEUE_FULL", "full")
    events = s.receive_data(answer + QuicxEncoder(profile).submit("x"))
    assert events == [Settled(sub), Closed("stopped", None)]
    assert s.closed and s.error is None and s.close_reason == "stopped"


def test_a_state_error_the_daemon_causes_closes_with_a_violation_without_a_protocol_error():
    """An answer the session has no request for (MSG_OK with nothing pending) is the daemon's
    fault, not the caller's: the session closes with a QuicxProtocolViolation whose text is the
    state error's, and no ProtocolError inside."""
    for cls, frame in ((ProducerSession, daemon("quicx/v1").ok(5)),
                       (MonitorSession, daemon("quicx/v1").stats_response(
                           queue_depth=0, workers_total=0, workers_idle=0, pmad_bytes_used=0,
                           pmad_bytes_total=0))):
        s = opened(cls, "quicx/v1")
        (closed,) = s.receive_data(frame)
        assert closed.reason == "an answer came with no request pending" == s.close_reason
        assert isinstance(closed.error, QuicxProtocolViolation) and closed.error.protocol_error is None
        assert str(closed.error) == "the daemon broke the protocol: an answer came with no request pending"
        assert s.closed and s.error is closed.error


@pytest.mark.parametrize("role", ["producer", "worker", "monitor"])
def test_a_message_the_role_has_no_meaning_for_closes_the_session(role):
    """Under a profile whose direction table is looser than the session (the daemon may send
    MSG_OK to a worker or monitor, MSG_TASK to a producer), the session itself refuses what its
    role has no meaning for and closes with a violation naming the message and the role."""
    name = "MSG_TASK" if role == "producer" else "MSG_OK"
    profile = variant("quicx/v1", directions=[(name, DAEMON, role)])
    enc = daemon(profile)
    frame = enc.task(1, "t", b"") if name == "MSG_TASK" else enc.ok(1)
    s = opened(ROLES[role], profile)
    (closed,) = s.receive_data(frame)
    assert s.closed and isinstance(closed.error, QuicxProtocolViolation)
    assert closed.reason == f"{name} is not expected by a {role}"
    assert str(closed.error) == f"the daemon broke the protocol: {name} is not expected by a {role}"


def test_a_profile_that_skips_bad_frames_goes_on_after_them(caplog):
    """With ``client_error_reaction: reply`` (a value the spec allows), a refused frame is
    skipped with a warning naming the role and the error, and the frames after it in the same
    read are handled: the session stays open."""
    profile = variant("quicx/v1", flags={"client_error_reaction": "reply"})
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    a, b = s.submit("t"), s.submit("t")
    bad = QuicxEncoder(profile).submit("x")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        events = s.receive_data(enc.ok(1) + bad + enc.ok(2) + bad + enc.ok(3)[:4])
    assert events == [Accepted(a), Settled(a), Accepted(b), Settled(b)]
    assert (a.task_id, b.task_id) == (1, 2) and not s.closed
    lines = log_lines(caplog)
    assert len(lines) == 2
    with pytest.raises(ProtocolError) as info:  # the same error, at the same stream offset
        QuicxDecoder(profile, "producer").feed(enc.ok(1) + bad)
    assert lines[0] == ("WARNING", f"producer session: skipped a bad frame: {info.value}")
    c = s.submit("t")
    assert s.receive_data(enc.ok(3)[4:]) == [Accepted(c), Settled(c)] and c.task_id == 3


# ------------------------------------------------------------------------- closing

@pytest.mark.parametrize("role", sorted(ROLES))
def test_eof_between_frames_is_a_lost_connection(role):
    s = opened(ROLES[role], "quicx/v1")
    pending = s.submit("t") if role == "producer" else s.request_stats() if role == "monitor" else None
    events = s.receive_eof()
    closed = events[-1]
    assert isinstance(closed, Closed) and s.closed and s.error is closed.error
    assert isinstance(closed.error, QuicxConnectionLost)
    assert str(closed.error) == "the daemon closed the connection" == closed.reason == s.close_reason
    if pending is not None:
        assert events == [Settled(pending), closed]
        assert pending.state is RequestState.LOST and pending.error is closed.error


@pytest.mark.parametrize("profile", PROFILES)
def test_eof_inside_a_frame_is_a_protocol_violation(profile):
    """The daemon closing in the middle of a frame broke the protocol (truncated): the
    violation holds the decoder's error, and the pending request is lost with it."""
    s = opened(ProducerSession, profile)
    sub = s.submit("t")
    assert s.receive_data(daemon(profile).ok(1)[:5]) == []
    events = s.receive_eof()
    closed = events[-1]
    assert isinstance(closed.error, QuicxProtocolViolation)
    assert closed.error.protocol_error.kind == "truncated"
    assert closed.error.protocol_error.requirement == spec_of(profile).error("truncated").requirement
    assert closed.reason == str(closed.error) == s.close_reason
    assert events == [Settled(sub), closed] and sub.error is closed.error


def test_connection_lost_settles_everything_with_the_shells_error_or_its_own():
    s = opened(ProducerSession, "quicx/v1")
    sub = s.submit("t")
    events = s.connection_lost()
    closed = events[-1]
    assert events == [Settled(sub), closed] and s.closed
    assert isinstance(closed.error, QuicxConnectionLost) and str(closed.error) == "connection lost"
    assert closed.reason == "connection lost" == s.close_reason and s.error is closed.error
    assert sub.state is RequestState.LOST and sub.error is closed.error
    assert s.connection_lost(QuicxConnectionLost("again")) == [] and s.error is closed.error

    s = opened(MonitorSession, with_stats())
    req = s.request_stats()
    cause = QuicxConnectionLost("connection lost: reset by peer")
    events = s.connection_lost(cause)
    assert events == [Settled(req), Closed("connection lost: reset by peer", cause)]
    assert req.state is RequestState.LOST and req.error is cause and s.error is cause


def test_tombstones_stay_timed_out_when_the_session_closes():
    s = opened(ProducerSession, "quicx/v1")
    old, live = s.submit("t"), s.submit("t")
    assert s.abandon(old) == []
    timeout = old.error
    events = s.connection_lost()
    assert events[:-1] == [Settled(live)]
    assert old.state is RequestState.TIMED_OUT and old.error is timeout


# ------------------------------------------------------------------------- stopping

@pytest.mark.parametrize("cls", [ProducerSession, MonitorSession])
def test_stop_before_the_connection_is_up_closes_at_once(cls):
    for connecting in (False, True):
        s = cls("quicx/v1")
        if connecting:
            s.start()
        assert s.stop() == [Closed("stopped", None)]
        assert s.closed and s.close_reason == "stopped" and s.error is None
        assert s.stop() == []


@pytest.mark.parametrize("cls", [ProducerSession, MonitorSession])
def test_stop_with_nothing_pending_closes_at_once(cls):
    s = opened(cls, "quicx/v1")
    assert s.stop() == [Closed("stopped", None)]
    assert s.state is ClientState.CLOSED and s.close_reason == "stopped"
    assert s.stop() == []


@pytest.mark.parametrize("profile", PROFILES)
def test_a_stopping_producer_closes_when_its_last_answer_comes(profile):
    """STOPPING refuses new submissions and waits: the answer that settles the last pending
    request (MSG_OK, MSG_ERROR, a forwarded result, or giving up on it) also closes the session,
    and a second stop while stopping is no error."""
    enc = daemon(profile)
    forwards = spec_of(profile).flag("forward_results_to_producer")
    for ending in ("ok", "error", "abandon"):
        s = opened(ProducerSession, profile)
        sub = s.submit("t")
        assert s.stop() == [] and s.state is ClientState.STOPPING and s.stop() == []
        with pytest.raises(QuicxStateError) as info:
            s.submit("t")
        assert str(info.value) == "cannot submit: the producer session is stopping"
        if ending == "ok":
            events = s.receive_data(enc.ok(7))
            if forwards:
                assert events == [Accepted(sub)] and s.state is ClientState.STOPPING
                events = s.receive_data(enc.done(7))
                assert events[0] == Settled(sub) and sub.state is RequestState.DONE
            else:
                assert events[:2] == [Accepted(sub), Settled(sub)]
        elif ending == "error":
            events = s.receive_data(enc.error("QUEUE_FULL", "full"))
            assert events[0] == Settled(sub) and sub.state is RequestState.REFUSED
        else:
            events = s.abandon(sub)
            assert sub.state is RequestState.TIMED_OUT
        assert events[-1] == Closed("stopped", None)
        assert s.state is ClientState.CLOSED and s.close_reason == "stopped" and s.error is None


def test_a_stopping_monitor_closes_when_its_stats_come():
    profile = with_stats()
    s = opened(MonitorSession, profile)
    req = s.request_stats()
    s.stop()
    with pytest.raises(QuicxStateError) as info:
        s.request_stats()
    assert str(info.value) == "cannot ask for stats: the monitor session is stopping"
    figures = {"queue_depth": 1, "workers_total": 2, "workers_idle": 3, "pmad_bytes_used": 4,
               "pmad_bytes_total": 5}
    events = s.receive_data(daemon(profile).stats_response(**figures))
    assert events == [Settled(req), Closed("stopped", None)] and req.fields == figures
    assert s.closed and s.close_reason == "stopped"


def test_requests_are_refused_unless_open():
    p, m = ProducerSession("quicx/v1"), MonitorSession("quicx/v1")
    with pytest.raises(QuicxStateError) as info:
        p.submit("t")
    assert str(info.value) == "cannot submit: the producer session is created"
    with pytest.raises(QuicxStateError) as info:
        m.request_stats()
    assert str(info.value) == "cannot ask for stats: the monitor session is created"
    assert p.data_to_send() == m.data_to_send() == b""


# ------------------------------------------------------------------------- producer

@pytest.mark.parametrize("profile", PROFILES)
def test_submit_sends_one_msg_submit_and_waits_for_its_answer(profile):
    s = opened(ProducerSession, profile)
    a = s.submit("email")
    b = s.submit("email", b"body")
    assert (a.task_type, a.state, a.task_id) == ("email", RequestState.SENT, None)
    assert s.data_to_send() == QuicxEncoder(profile).submit("email", b"") + QuicxEncoder(profile).submit(
        "email", b"body")
    assert sent(profile, QuicxEncoder(profile).submit("email")) == [
        ("MSG_SUBMIT", {"len_type": 5, "task_type": "email", "payload": b""})]
    assert s.pending == 2 and a.id != b.id
    assert s.forwards_results is spec_of(profile).flag("forward_results_to_producer")


def test_without_forwarding_msg_ok_settles_the_submission():
    profile = not_forwarding()
    s = opened(ProducerSession, profile)
    a, b = s.submit("t"), s.submit("t")
    assert s.receive_data(daemon(profile).ok(11)) == [Accepted(a), Settled(a)]
    assert (a.state, a.task_id, s.pending) == (RequestState.ACCEPTED, 11, 1)
    assert s.receive_data(daemon(profile).ok(12)) == [Accepted(b), Settled(b)] and s.pending == 0


def test_with_forwarding_the_result_settles_the_submission_by_task_id():
    """MSG_OK accepts (Accepted only); the forwarded DONE / FAILED, keyed by the task id in any
    order, settles it, FAILED with the worker's reason."""
    profile = forwarding()
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    a, b, c = s.submit("t"), s.submit("t"), s.submit("t")
    assert s.receive_data(enc.ok(1) + enc.ok(2) + enc.ok(3)) == [Accepted(a), Accepted(b), Accepted(c)]
    assert (a.task_id, b.task_id, c.task_id) == (1, 2, 3) and s.pending == 3
    assert a.state is RequestState.ACCEPTED
    assert s.receive_data(enc.failed(3, "bad input")) == [Settled(c)]
    assert (c.state, c.reason) == (RequestState.FAILED, "bad input")
    assert s.receive_data(enc.done(1)) == [Settled(a)]
    assert (a.state, a.reason) == (RequestState.DONE, None) and s.pending == 1
    assert s.receive_data(enc.failed(2, "")) == [Settled(b)] and b.reason == "" and s.pending == 0


def test_a_forwarded_failure_without_a_reason_field_has_the_empty_reason():
    """Under a profile whose MSG_FAILED carries only the task id (a layout the spec's schema
    allows), the forwarded failure still settles the submission FAILED, its reason ""."""
    base = load_profile(forwarding())
    spec = base.model
    failed = spec.message("MSG_FAILED")
    (task_id,) = [f for f in failed.layout if f.id == "task_id"]
    bare = dataclasses.replace(failed, layout=(task_id,), fixed_size=failed.min_size)
    messages = {**spec.messages, "MSG_FAILED": bare}
    model = dataclasses.replace(spec, messages=messages,
                                by_code={c: messages.get(m.name, m) for c, m in spec.by_code.items()})
    profile = dataclasses.replace(base, name=f"{base.name}+bare-failed", model=model)
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    sub = s.submit("t")
    s.receive_data(enc.ok(5))
    assert s.receive_data(enc.encode("MSG_FAILED", task_id=5)) == [Settled(sub)]
    assert (sub.state, sub.reason) == (RequestState.FAILED, "")


def test_a_result_nobody_waits_for_is_dropped_and_logged(caplog):
    """A forwarded result for a task given up on (or never ours) is logged at debug and
    dropped; the session stays open and the submission stays timed out."""
    profile = forwarding()
    enc = daemon(profile)
    s = opened(ProducerSession, profile)
    sub = s.submit("t")
    s.receive_data(enc.ok(42))
    assert s.abandon(sub) == [] and s.pending == 0
    assert isinstance(sub.error, QuicxTimeout) and str(sub.error) == f"request {sub.id} timed out"
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert s.receive_data(enc.done(42) + enc.failed(99, "x")) == []
    assert log_lines(caplog) == [("DEBUG", "producer session: result for task 42, not awaited"),
                                 ("DEBUG", "producer session: result for task 99, not awaited")]
    assert sub.state is RequestState.TIMED_OUT and not s.closed


def test_a_tombstone_consumes_its_late_answer():
    """A submission given up on keeps its place: the late MSG_OK or MSG_ERROR is consumed by it
    (no event) and the next answer goes to the next submission."""
    for profile in PROFILES:
        enc = daemon(profile)
        s = opened(ProducerSession, profile)
        a, b, c = s.submit("t"), s.submit("t"), s.submit("t")
        s.abandon(a)
        s.abandon(b)
        assert s.pending == 1
        assert s.receive_data(enc.ok(1)) == [] and a.task_id is None
        assert s.receive_data(enc.error("QUEUE_FULL", "late")) == []
        assert isinstance(b.error, QuicxTimeout) and b.state is RequestState.TIMED_OUT
        assert s.receive_data(enc.ok(3))[0] == Accepted(c) and c.task_id == 3


def test_abandon_only_touches_a_request_still_waiting():
    """Giving up on a request already settled changes nothing; on a submission MSG_OK already
    settled (results not forwarded) it is harmless."""
    profile = not_forwarding()
    s = opened(ProducerSession, profile)
    done, refused = s.submit("t"), s.submit("t")
    s.receive_data(daemon(profile).ok(5) + daemon(profile).error("QUEUE_FULL", "x"))
    err = refused.error
    assert s.abandon(refused) == [] and refused.state is RequestState.REFUSED and refused.error is err
    s.abandon(done)
    assert not s.closed and s.pending == 0
    nxt = s.submit("t")
    assert s.receive_data(daemon(profile).ok(6)) == [Accepted(nxt), Settled(nxt)]


def test_abandon_of_a_request_that_is_not_a_submission_leaves_the_results_alone():
    """``abandon`` takes any Request: one that is not a submission times out and the awaited
    results are untouched."""
    profile = forwarding()
    s = opened(ProducerSession, profile)
    sub = s.submit("t")
    s.receive_data(daemon(profile).ok(1))
    other = StatsRequest()
    assert s.abandon(other) == [] and other.state is RequestState.TIMED_OUT
    assert s.pending == 1
    assert s.receive_data(daemon(profile).done(1)) == [Settled(sub)]


# ------------------------------------------------------------------------- monitor

def test_request_stats_asks_and_the_answer_fills_the_fields():
    profile = with_stats()
    s = opened(MonitorSession, profile)
    assert s.stats_on_tcp
    a, b = s.request_stats(), s.request_stats()
    assert sent(profile, s.data_to_send()) == [("MSG_STATS", {}), ("MSG_STATS", {})]
    assert s.pending == 2 and a.fields is None
    s.abandon(a)
    figures = {"queue_depth": 9, "workers_total": 8, "workers_idle": 7, "pmad_bytes_used": 6,
               "pmad_bytes_total": 5}
    enc = daemon(profile)
    assert s.receive_data(enc.stats_response(**figures)) == []  # the tombstone takes it
    assert a.fields is None and a.state is RequestState.TIMED_OUT
    assert s.receive_data(enc.stats_response(**figures)) == [Settled(b)]
    assert b.fields == figures and b.state is RequestState.ANSWERED and s.pending == 0


def test_a_profile_without_stats_on_tcp_refuses_request_stats():
    profile = next(p for p in PROFILES if not spec_of(p).allowed("MSG_STATS", "monitor", DAEMON))
    spec = spec_of(profile)
    s = opened(MonitorSession, profile)
    assert not s.stats_on_tcp
    with pytest.raises(QuicxStateError) as info:
        s.request_stats()
    assert str(info.value) == f"{profile} does not carry MSG_STATS on {spec.transport}"
    assert s.pending == 0 and s.data_to_send() == b""


# ------------------------------------------------------------------------- heartbeats

@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_daemon_heartbeat_is_answered_with_a_pong(role):
    profile = next(p for p in PROFILES if spec_of(p).allowed("MSG_HEARTBEAT", DAEMON, role))
    s = opened(ROLES[role], profile)
    assert s.receive_data(daemon(profile).heartbeat()) == []
    assert s.data_to_send() == QuicxEncoder(profile).pong() and not s.closed


def test_a_pong_answers_the_probe():
    clock = FakeClock()
    s = opened(ProducerSession, "quicx/v1", heartbeat_interval=5.0, pong_timeout=2.0, clock=clock)
    clock.now += 5.0
    s.tick()
    clock.now += 1.0
    assert s.receive_data(daemon("quicx/v1").pong()) == []
    assert s.next_tick() == pytest.approx(clock.now + 5.0)
    clock.now += 3.0
    assert s.tick() == [] and not s.closed


def test_nothing_after_the_frame_that_closed_the_session_is_handled():
    """A heartbeat behind the frame that closed the session gets no PONG."""
    profile = "quicx/v1"
    enc = daemon(profile)
    s = opened(WorkerSession, profile)
    s.receive_data(enc.task(1, "t"))
    events = s.receive_data(enc.task(2, "t") + enc.heartbeat())
    assert s.closed and isinstance(events[-1], Closed) and len(events) == 1
    assert s.data_to_send() == b""


# ------------------------------------------------------------------------- worker

@pytest.mark.parametrize("profile", PROFILES)
def test_a_worker_readies_runs_one_task_and_reports_it(profile):
    spec = spec_of(profile)
    enc = daemon(profile)
    w = WorkerSession(profile)
    w.start()
    assert w.connected() == [] and w.state is WorkerState.WAITING
    assert sent(profile, w.data_to_send()) == [("MSG_READY", {})]
    (event,) = w.receive_data(enc.task(7, "resize", b"img"))
    assert isinstance(event, TaskAssigned) and w.current is event.task
    assert (event.task.task_id, event.task.task_type, event.task.payload) == (7, "resize", b"img")
    assert w.state is WorkerState.BUSY
    assert w.finish(7) == [] and w.current is None
    again = spec.flag("ready_required_after_result")
    assert w.ready_after_result is again
    assert sent(profile, w.data_to_send()) == [("MSG_DONE", {"task_id": 7})] + (
        [("MSG_READY", {})] if again else [])
    assert w.state is WorkerState.WAITING
    w.receive_data(enc.task(8, "resize"))
    assert w.finish(8, "boom") == []
    assert sent(profile, w.data_to_send())[0] == ("MSG_FAILED", {"task_id": 8, "reason": "boom"})


def test_finish_refuses_a_task_the_worker_is_not_running():
    w = opened(WorkerSession, "quicx/v1")
    for task_id in (1, 7):
        with pytest.raises(QuicxStateError) as info:
            w.finish(task_id)
        assert str(info.value) == f"task {task_id} is not the task this worker is running"
    w.receive_data(daemon("quicx/v1").task(7, "t"))
    with pytest.raises(QuicxStateError) as info:
        w.finish(8)
    assert str(info.value) == "task 8 is not the task this worker is running"
    w.finish(7)
    with pytest.raises(QuicxStateError) as info:
        w.finish(7)  # twice
    assert str(info.value) == "task 7 is not the task this worker is running"


def test_a_worker_that_lost_its_connection_has_no_task_to_finish():
    """The daemon requeues a task whose result it never got: after the connection is lost the
    worker holds no task, and finishing it is a state error."""
    w = opened(WorkerSession, "quicx/v1")
    w.receive_data(daemon("quicx/v1").task(3, "t"))
    events = w.connection_lost()
    assert events == [Closed("connection lost", w.error)] and w.current is None
    with pytest.raises(QuicxStateError) as info:
        w.finish(3)
    assert str(info.value) == "task 3 is not the task this worker is running"


def test_a_failure_reason_is_cut_to_the_profiles_limit_at_a_character_boundary():
    """The reason is cut to MSG_FAILED's ``max_bytes`` without splitting a UTF-8 character; a
    reason that fits (to the last byte) is sent whole; a profile with no limit sends it all."""
    for profile in PROFILES:
        cap = next(f for f in spec_of(profile).message("MSG_FAILED").layout if f.id == "reason").max_bytes
        enc = daemon(profile)
        long = "a" + "é" * 300
        cases = [(long, long if cap is None else ("a" + "é" * ((cap - 1) // 2)))]
        if cap is not None:
            assert (cap - 1) % 2 == 1  # the cut falls inside an "é"
            cases.append(("é" * (cap // 2), "é" * (cap // 2)))
        for i, (reason, expected) in enumerate(cases, 1):
            w = opened(WorkerSession, profile)
            assert w.max_reason_bytes == cap
            w.receive_data(enc.task(i, "t"))
            w.finish(i, reason)
            assert sent(profile, w.data_to_send())[0] == ("MSG_FAILED", {"task_id": i, "reason": expected})


def test_backoff_elapsed_readies_only_a_backing_off_worker():
    profile = with_wait()
    enc = daemon(profile)
    w = opened(WorkerSession, profile, backoff_min=0.5, backoff_max=3.0)
    w.backoff_elapsed()  # waiting already: nothing to send
    assert w.data_to_send() == b"" and w.state is WorkerState.WAITING
    assert w.receive_data(enc.wait()) == [WaitAdvised(0.5)] and w.state is WorkerState.BACKOFF
    assert w.data_to_send() == b""
    w.backoff_elapsed()
    assert w.state is WorkerState.WAITING and sent(profile, w.data_to_send()) == [("MSG_READY", {})]
    assert w.receive_data(enc.wait()) == [WaitAdvised(1.0)]
    w.backoff_elapsed()
    assert w.receive_data(enc.wait()) == [WaitAdvised(2.0)]
    w.backoff_elapsed()
    assert w.receive_data(enc.wait()) == [WaitAdvised(3.0)]


def test_a_task_to_a_backing_off_worker_breaks_the_protocol():
    profile = with_wait()
    w = opened(WorkerSession, profile)
    w.receive_data(daemon(profile).wait())
    (closed,) = w.receive_data(daemon(profile).task(1, "t"))
    assert w.closed and isinstance(closed.error, QuicxProtocolViolation)
    assert closed.reason == "worker session: 'task' is not allowed in state 'backoff'"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_graceful_stop_waits_for_the_running_task(profile):
    """Idle: stop closes at once. Busy: stop waits (a second stop is no error) and the task's
    result closes the session, with no READY after it."""
    w = opened(WorkerSession, profile)
    assert w.stop() == [Closed("stopped", None)]
    assert w.closed and w.close_reason == "stopped" and w.stop() == []

    w = opened(WorkerSession, profile)
    w.receive_data(daemon(profile).task(4, "t"))
    assert w.stop() == [] and w.state is WorkerState.STOPPING and w.close_reason is None
    assert w.stop() == [] and w.state is WorkerState.STOPPING
    assert w.finish(4) == [Closed("stopped", None)]
    assert w.closed and w.close_reason == "stopped" and w.error is None and w.current is None
    assert sent(profile, w.data_to_send()) == [("MSG_DONE", {"task_id": 4})]
    assert w.stop() == []


def test_an_unstarted_worker_stops_at_once():
    w = WorkerSession("quicx/v1")
    assert w.stop() == [Closed("stopped", None)] and w.closed and w.close_reason == "stopped"
