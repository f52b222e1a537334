"""The sans-IO bunqueue session, driven by hand with a fake clock: no sockets.

The first test walks SESSION_TRANSITIONS: every pair in the table is reached through the
session's public inputs and lands where the table says, and every pair NOT in the table is
refused; together they show the table is the only source of the session's transitions.
"""

from __future__ import annotations

import errno
import logging
import random
import shutil
import struct
from types import SimpleNamespace

import pytest

from queuewire.client.bunqueue_session import (
    SESSION_TRANSITIONS,
    SPEC_STATES,
    BunqueueAuthError,
    BunqueueConnectError,
    BunqueueConnectionLost,
    BunqueueEncodeError,
    BunqueueProtocolViolation,
    BunqueueRefused,
    BunqueueReplyInvalid,
    BunqueueSession,
    BunqueueSessionStopped,
    BunqueueStateError,
    BunqueueTimeout,
    ConnectNow,
    ErrorMatcher,
    LinkDown,
    PushedFrame,
    Ready,
    SessionEvent,
    SessionState,
    session_mermaid,
)
from queuewire.client.options import ClientConfigError, ConnectionOptions
from queuewire.client.session import ClientConnectError, Closed, RequestState, Settled
from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.codecs.errors import ProtocolError
from queuewire.spec import clear_cache, load_profile, spec_dir

S, E = SessionState, SessionEvent
PROFILE = "bunqueue/v2"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Peer:
    """The server's side of the bytes."""

    def __init__(self, profile: str = PROFILE):
        self.decoder = FrameDecoder(profile)
        self.encoder = FrameEncoder(profile)

    def read(self, session: BunqueueSession) -> list[dict]:
        return self.decoder.feed(session.data_to_send())

    def reply(self, request: dict, **fields) -> bytes:
        return self.encoder.encode({"ok": True, **fields, "reqId": request["reqId"]})

    def refuse(self, request: dict, error: str) -> bytes:
        return self.encoder.encode({"ok": False, "error": error, "reqId": request["reqId"]})


def make(profile: str = PROFILE, **options) -> tuple[BunqueueSession, Clock, Peer]:
    clock = Clock()
    opts = ConnectionOptions.from_profile(profile, {"port": 6789, **options})
    return BunqueueSession(profile, opts, clock=clock, rng=random.Random(7)), clock, Peer(profile)


def ready(session: BunqueueSession, peer: Peer, **hello) -> list:
    session.start()
    session.connected()
    out = peer.read(session)
    events = []
    if out[0]["cmd"] == "Auth":
        events += session.receive_data(peer.reply(out[0]))
        out = peer.read(session)
    assert out[0]["cmd"] == "Hello"
    fields = {"protocolVersion": 2, "capabilities": ["pipelining"], **hello}
    events += session.receive_data(peer.reply(out[0], **fields))
    assert session.state is S.READY
    return events


# ------------------------------------------------------------------------------ the table

def _drive_to(state: SessionState, **options) -> tuple[BunqueueSession, Clock, Peer]:
    session, clock, peer = make(ping_interval=0, **options)
    if state is S.CREATED:
        return session, clock, peer
    session.start()
    if state is S.CONNECTING:
        return session, clock, peer
    if state is S.RECONNECTING:
        session.connect_failed("refused")
        return session, clock, peer
    session.connected()
    if state is S.NEGOTIATING:
        return session, clock, peer
    hello = peer.read(session)[0]
    session.receive_data(peer.reply(hello, protocolVersion=2, capabilities=["pipelining"]))
    if state is S.READY:
        return session, clock, peer
    if state is S.STOPPING:
        for _ in range(session.options.max_command_timeouts):
            session.send({"cmd": "Count", "queue": "q"})
        session.stop()
        assert session.state is S.STOPPING
        return session, clock, peer
    session.stop()
    return session, clock, peer


def _fire(session: BunqueueSession, clock: Clock, peer: Peer, event: SessionEvent) -> None:
    """Cause ``event`` through the session's public inputs."""
    if event is E.START:
        session.start()
    elif event is E.CONNECTED:
        session.connected()
    elif event is E.CONNECT_FAILED:
        session.connect_failed("refused")
    elif event is E.NEGOTIATED:
        hello = peer.read(session)[0]
        session.receive_data(peer.reply(hello, protocolVersion=2, capabilities=["pipelining"]))
    elif event is E.REFUSED:
        auth = peer.read(session)[0]
        assert auth["cmd"] == "Auth"
        session.receive_data(peer.refuse(auth, "Invalid token"))
    elif event is E.STOP:
        session.stop()
    elif event is E.DRAINED:
        for frame in peer.read(session):
            session.receive_data(peer.reply(frame, count=0))
    elif event is E.CONNECTION_LOST:
        session.receive_eof()
    elif event is E.PROTOCOL_ERROR:
        session.receive_data(b"\xff\xff\xff\xff")  # declares 4 GiB: a framing error
    elif event is E.DEAD_LINK:
        if session.state is not S.STOPPING:  # STOPPING has its commands written already
            for _ in range(session.options.max_command_timeouts):
                session.send({"cmd": "Count", "queue": "q"})
        clock.t += session.options.command_timeout / 1000.0 + 1
        session.tick()
    elif event is E.BACKOFF_ELAPSED:
        clock.t += 60
        session.tick()
    elif event is E.GIVE_UP:
        pytest.skip("GIVE_UP is walked in test_reconnect_off_gives_up")


@pytest.mark.parametrize(("pair", "target"), sorted(SESSION_TRANSITIONS.items(),
                                                    key=lambda kv: (kv[0][0].value, kv[0][1].value)),
                         ids=lambda v: v.value if hasattr(v, "value") else f"{v[0].value}-{v[1].value}")
def test_every_transition_of_the_table_is_reached_through_the_public_inputs(pair, target):
    state, event = pair
    if event is E.GIVE_UP:
        return  # needs reconnect=False: walked in test_reconnect_off_gives_up
    session, clock, peer = _drive_to(state, **({"token": "t"} if event is E.REFUSED else {}))
    assert session.state is state
    if event is E.NEGOTIATED or event is E.REFUSED:
        assert state is S.NEGOTIATING
    _fire(session, clock, peer, event)
    assert (state, event, target) in session.history
    # and every transition the session took is a row of the table
    assert all(SESSION_TRANSITIONS[a, e] is b for a, e, b in session.history)


def test_pairs_missing_from_the_table_are_refused():
    session, _, _ = make()
    with pytest.raises(BunqueueStateError, match="'connected' is not allowed in state 'created'"):
        session.connected()
    session.start()
    with pytest.raises(BunqueueStateError, match="not allowed in state 'connecting'"):
        session.start()


def test_the_table_maps_onto_the_spec_connection_lifecycle():
    """Each transition is a transition (or a stay) of the spec's connection_lifecycle."""
    machine = load_profile(PROFILE).model.connection_lifecycle
    spec_pairs = {(t.source, t.target) for t in machine.transitions}
    spec_states = set(machine.states)
    assert set(SPEC_STATES) == set(SessionState)
    for (state, _event), target in SESSION_TRANSITIONS.items():
        a, b = SPEC_STATES[state], SPEC_STATES[target]
        assert a in spec_states and b in spec_states
        assert a == b or (a, b) in spec_pairs, (state, target, a, b)


def test_the_mermaid_rendering_has_every_transition():
    text = session_mermaid()
    assert text.startswith("stateDiagram-v2")
    assert text.count("-->") == len(SESSION_TRANSITIONS) + 2


# ------------------------------------------------------------------------- negotiation

def test_auth_goes_first_and_hello_waits_for_its_answer():
    session, _, peer = make(token="s3cret")
    session.start()
    session.connected()
    out = peer.read(session)
    assert [f["cmd"] for f in out] == ["Auth"]
    assert out[0]["token"] == "s3cret"
    session.send({"cmd": "Count", "queue": "q"})
    assert peer.read(session) == []  # nothing but Auth before Auth is answered (BQ-AUTH-2)
    session.receive_data(peer.reply(out[0]))
    out = peer.read(session)
    assert [f["cmd"] for f in out] == ["Hello"]
    spec = load_profile(PROFILE).model
    assert out[0]["protocolVersion"] == spec.protocol_version
    assert out[0]["capabilities"] == list(spec.capabilities)
    events = session.receive_data(peer.reply(out[0], protocolVersion=2,
                                             capabilities=["pipelining"]))
    assert any(isinstance(e, Ready) for e in events)
    assert [f["cmd"] for f in peer.read(session)] == ["Count"]  # the queued command now


def test_a_refused_token_stops_the_session_with_a_typed_error_and_no_reconnect():
    session, _, peer = make(token="wrong")
    session.start()
    session.connected()
    waiting = session.send({"cmd": "Count", "queue": "q"})
    auth = peer.read(session)[0]
    events = session.receive_data(peer.refuse(auth, "Invalid token"))
    assert session.state is S.STOPPED
    assert isinstance(session.error, BunqueueAuthError)
    assert session.error.error_name == "invalid_token"
    assert waiting.state is RequestState.LOST and isinstance(waiting.error, BunqueueAuthError)
    assert any(isinstance(e, Closed) for e in events)
    assert not any(isinstance(e, ConnectNow) for e in events)


def test_a_refused_hello_means_protocol_v1_one_command_at_a_time():
    session, _, peer = make(ping_interval=0)
    session.start()
    session.connected()
    hello = peer.read(session)[0]
    events = session.receive_data(peer.refuse(hello, "Unknown command: Hello"))
    assert session.state is S.READY
    assert next(e for e in events if isinstance(e, Ready)).window == 1


def test_backlogged_commands_time_out_while_reconnecting():
    session, clock, peer = make(command_timeout=1000, ping_interval=0, reconnect_base_delay=30000,
                                reconnect_max_delay=30000, reconnect_jitter=0)
    ready(session, peer)
    session.receive_eof()
    assert session.state is S.RECONNECTING
    waiting = session.send({"cmd": "Count", "queue": "q"})
    assert session.next_tick() == pytest.approx(clock.t + 1.0)  # not the 30 s backoff
    clock.t += 1.01
    events = session.tick()
    assert [e.request for e in events if isinstance(e, Settled)] == [waiting]
    assert isinstance(waiting.error, BunqueueTimeout)


def test_bytes_for_a_socket_that_went_down_are_dropped_with_it():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "PUSH", "queue": "q", "data": {}})  # queued, not flushed
    session.receive_data(b"\xff\xff\xff\xff")  # the link goes down before the shell writes
    assert isinstance(command.error, BunqueueConnectionLost)
    assert session.data_to_send() == b""  # so the PUSH the caller was told failed never goes


def test_the_ping_waits_for_room_in_the_window_and_any_answer_counts():
    session, clock, peer = make(command_timeout=60000, ping_interval=1000, max_ping_failures=1)
    ready(session, peer, protocolVersion=1, capabilities=[])  # window 1
    pull = session.send({"cmd": "PULL", "queue": "q", "timeout": 5000})
    peer.read(session)
    clock.t += 2
    session.tick()
    assert peer.read(session) == []  # no Ping beside the PULL in a window of one
    session.receive_data(peer.reply({"reqId": pull.req_id}, job=None))
    clock.t += 1
    session.tick()
    ping = peer.read(session)
    assert [f["cmd"] for f in ping] == ["Ping"]
    session.receive_data(peer.refuse(ping[0], "Rate limit exceeded"))
    clock.t += 70
    session.tick()
    assert session.state is S.READY  # a refused Ping is still an answer


def test_a_server_without_pipelining_gets_one_command_at_a_time():
    session, _, peer = make()
    events = ready(session, peer, protocolVersion=1, capabilities=[])
    assert next(e for e in events if isinstance(e, Ready)).window == 1
    first = session.send({"cmd": "Count", "queue": "a"})
    session.send({"cmd": "Count", "queue": "b"})
    out = peer.read(session)
    assert [f["queue"] for f in out] == ["a"]
    session.receive_data(peer.reply(out[0], count=0))
    assert first.state is RequestState.ANSWERED
    assert [f["queue"] for f in peer.read(session)] == ["b"]


# ------------------------------------------------------------------------- correlation

def test_answers_out_of_order_match_by_req_id_and_the_window_holds():
    session, _, peer = make(max_in_flight=3, ping_interval=0)
    ready(session, peer)
    commands = [session.send({"cmd": "Count", "queue": f"q{i}"}) for i in range(5)]
    sent = peer.read(session)
    assert len(sent) == 3 and session.in_flight == 3 and session.pending == 5
    assert all(isinstance(f["reqId"], str) for f in sent)  # BQ-ENV-2
    assert len({f["reqId"] for f in sent}) == 3
    events = session.receive_data(peer.reply(sent[2], count=2) + peer.reply(sent[0], count=0))
    settled = [e.request for e in events if isinstance(e, Settled)]
    assert settled == [commands[2], commands[0]]
    assert commands[2].result["count"] == 2 and commands[0].result["count"] == 0
    assert [f["queue"] for f in peer.read(session)] == ["q3", "q4"]  # two slots freed


def test_a_refusal_is_typed_and_names_the_spec_error():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "GetJob", "id": "nope"})
    session.receive_data(peer.refuse(peer.read(session)[0], "Job not found"))
    assert command.state is RequestState.REFUSED
    assert isinstance(command.error, BunqueueRefused)
    assert command.error.error == "Job not found"
    assert command.error.error_name == "job_not_found"
    assert command.error.requirement


def test_a_frame_without_req_id_is_a_pushed_frame_and_unknown_answers_are_dropped():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    events = session.receive_data(peer.encoder.encode({"type": "event", "event": {"x": 1}})
                                  + peer.encoder.encode({"ok": True, "reqId": "999"}))
    assert events == [PushedFrame({"type": "event", "event": {"x": 1}})]
    assert session.late_answers == 1


def test_undefined_in_an_answer_reaches_the_caller_as_none():
    """msgpackr writes JavaScript undefined as ext 0 (real servers do, in Auth and GetJob
    replies): the answer the caller gets holds None there, at any depth (bunqueue/v3,
    BQ-MSGPACK-201); an answer whose reqId is undefined answers nothing and is not a pushed
    frame either."""
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "GetJob", "id": "j"})
    (sent,) = peer.read(session)
    undefined = b"\xd4\x00\x00"
    body = (b"\x84\xa2ok\xc3\xa5reqId" + bytes([0xA0 | len(sent["reqId"])]) + sent["reqId"].encode()
            + b"\xa3job\x82\xa2id\xa1j\xa4data\x91" + undefined + b"\xa5extra" + undefined)
    events = session.receive_data(struct.pack(">I", len(body)) + body)
    assert command.result == {"ok": True, "reqId": sent["reqId"],
                              "job": {"id": "j", "data": [None]}, "extra": None}
    assert [type(e).__name__ for e in events] == ["Settled"]
    lost = b"\x83\xa2ok\xc2\xa5error\xafInvalid command\xa5reqId" + undefined
    assert session.receive_data(struct.pack(">I", len(lost)) + lost) == []
    assert session.late_answers == 1


def test_an_unencodable_command_is_refused_before_anything_is_written():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    with pytest.raises(BunqueueEncodeError, match="BQ-MSGPACK-7"):
        session.send({"cmd": "PUSH", "queue": "q", "data": {"n": 2**60 + 1}})
    assert peer.read(session) == [] and session.pending == 0


@pytest.fixture
def small_frames(tmp_path, monkeypatch):
    """A profile of our own, ``bunqueue/small``: bunqueue/v2 with 4 KiB frames (a spec copy
    with one overlay, as a user's profile would be)."""
    root = tmp_path / "spec"
    shutil.copytree(spec_dir(), root)
    (root / "overlays" / "small.yaml").write_text("limits:\n  max_frame_bytes:\n    value: 4096\n")
    profiles = root / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace(
        "\ndefaults:", "\n  bunqueue/small:\n    protocol: bunqueue\n    doc: 4 KiB frames.\n"
        "    overlays: [overlays/small.yaml]\ndefaults:", 1))
    monkeypatch.setenv("QUEUEWIRE_SPEC_DIR", str(root))
    clear_cache()
    yield load_profile("bunqueue/small")
    monkeypatch.undo()
    clear_cache()


def test_the_session_frames_both_ways_under_its_own_profile(small_frames):
    """The limits are the session's profile's, not the default's: a command over its
    max_frame_bytes is refused before it is written, and a reply frame declaring more is a
    protocol violation that takes the link down (BQ-FRAME-2)."""
    assert small_frames.model.max_frame_bytes == 4096
    clock = Clock()
    opts = ConnectionOptions.from_profile(small_frames, {"port": 6789, "ping_interval": 0})
    session, peer = BunqueueSession(small_frames, opts, clock=clock), Peer(PROFILE)
    ready(session, peer)
    with pytest.raises(BunqueueEncodeError, match="max_frame_bytes"):
        session.send({"cmd": "PUSH", "queue": "q", "data": {"blob": "x" * 5000}})
    assert peer.read(session) == []
    command = session.send({"cmd": "GetJob", "id": "1"})
    [request] = peer.read(session)
    events = session.receive_data(peer.reply(request, job={"id": "1", "data": {"blob": "x" * 5000}}))
    [down] = [e for e in events if isinstance(e, LinkDown)]
    assert isinstance(down.error, BunqueueProtocolViolation) and "max_frame_bytes" in str(down.error)
    assert command.state is RequestState.LOST and command.error is down.error


# ---------------------------------------------------------------------- timeouts, dead links

def test_a_command_times_out_and_its_late_answer_is_consumed():
    session, clock, peer = make(command_timeout=1000, ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    frame = peer.read(session)[0]
    assert session.next_tick() == pytest.approx(clock.t + 1.0)
    clock.t += 1.01
    events = session.tick()
    assert [e.request for e in events if isinstance(e, Settled)] == [command]
    assert isinstance(command.error, BunqueueTimeout) and command.state is RequestState.TIMED_OUT
    assert session.receive_data(peer.reply(frame, count=1)) == []
    assert session.late_answers == 1 and session.state is S.READY


def test_consecutive_timeouts_conclude_the_link_is_dead_and_fail_every_written_command():
    session, clock, peer = make(command_timeout=1000, max_command_timeouts=3, ping_interval=0)
    ready(session, peer)
    early = [session.send({"cmd": "Count", "queue": "q"}) for _ in range(3)]
    clock.t += 0.5
    late = session.send({"cmd": "Count", "queue": "late"})
    unsent_window = peer.read(session)
    assert len(unsent_window) == 4
    clock.t += 0.51
    events = session.tick()
    assert session.state is S.RECONNECTING
    assert all(isinstance(c.error, BunqueueTimeout) for c in early)
    # the command that had not timed out yet fails at once with Connection lost (BQ-CLIENT-6)
    assert isinstance(late.error, BunqueueConnectionLost) and "dead link" in str(late.error)
    down = next(e for e in events if isinstance(e, LinkDown))
    assert down.retry_at is not None and session.dead_links == 1


def test_an_answer_resets_the_timeout_count():
    session, clock, peer = make(command_timeout=1000, max_command_timeouts=2, ping_interval=0)
    ready(session, peer)
    session.send({"cmd": "Count", "queue": "a"})
    clock.t += 1.01
    session.tick()
    answered = session.send({"cmd": "Count", "queue": "b"})
    session.receive_data(peer.reply(peer.read(session)[-1], count=0))
    assert answered.state is RequestState.ANSWERED
    session.send({"cmd": "Count", "queue": "c"})
    clock.t += 1.01
    session.tick()
    assert session.state is S.READY  # 1, reset, 1: never 2 in a row


def test_failed_pings_conclude_the_link_is_dead():
    session, clock, peer = make(command_timeout=1000, ping_interval=5000, max_ping_failures=3)
    ready(session, peer)
    for failure in range(3):
        assert session.next_tick() == pytest.approx(clock.t + 5.0 if failure == 0 else
                                                      session.next_tick())
        clock.t = session.next_tick()
        session.tick()
        ping = peer.read(session)
        assert [f["cmd"] for f in ping] == ["Ping"]
        clock.t += 1.01
        session.tick()  # the Ping timed out
    assert session.state is S.RECONNECTING


def test_a_ping_answer_clears_the_failures():
    session, clock, peer = make(command_timeout=1000, ping_interval=5000, max_ping_failures=2)
    ready(session, peer)
    clock.t = session.next_tick()
    session.tick()
    clock.t += 1.01
    session.tick()  # failure 1
    clock.t = session.next_tick()
    session.tick()
    ping = peer.read(session)[-1]
    session.receive_data(peer.reply(ping, data={"pong": True}))
    clock.t = session.next_tick()
    session.tick()
    clock.t += 1.01
    session.tick()  # failure 1 again, not 2
    assert session.state is S.READY


def test_an_unanswered_hello_is_a_dead_link():
    session, clock, peer = make(command_timeout=1000)
    session.start()
    session.connected()
    clock.t += 1.01
    session.tick()
    assert session.state is S.RECONNECTING


# -------------------------------------------------------------------------- reconnecting

def test_the_backoff_follows_document_000():
    session, _, _ = make()
    o = session.options
    for attempt in range(12):
        base = min(o.reconnect_base_delay * o.reconnect_factor ** attempt, o.reconnect_max_delay)
        for _ in range(20):
            delay = session.backoff_delay(attempt) * 1000
            assert base * (1 - o.reconnect_jitter) <= delay <= base * (1 + o.reconnect_jitter)
    assert session.backoff_delay(30) * 1000 <= o.reconnect_max_delay * (1 + o.reconnect_jitter)


def test_unsent_commands_survive_a_reconnect_and_written_ones_fail_at_once():
    session, clock, peer = make(max_in_flight=1, ping_interval=0)
    ready(session, peer)
    written = session.send({"cmd": "Count", "queue": "a"})
    queued = session.send({"cmd": "Count", "queue": "b"})
    peer.read(session)
    events = session.receive_eof()
    assert isinstance(written.error, BunqueueConnectionLost)
    assert queued.state is RequestState.QUEUED
    down = next(e for e in events if isinstance(e, LinkDown))
    assert session.next_tick() == down.retry_at
    clock.t = down.retry_at
    assert any(isinstance(e, ConnectNow) for e in session.tick())
    assert session.state is S.CONNECTING
    ready_events = []
    session.connected()
    hello = peer.read(session)[0]
    ready_events += session.receive_data(peer.reply(hello, protocolVersion=2,
                                                    capabilities=["pipelining"]))
    assert [f["queue"] for f in peer.read(session)] == ["b"]
    assert session.reconnects == 1


def test_reconnect_off_gives_up():
    session, _, peer = make(reconnect=False, ping_interval=0)
    ready(session, peer)
    events = session.receive_eof()
    assert session.state is S.STOPPED
    assert any(isinstance(e, LinkDown) and e.retry_at is None for e in events)
    assert any(isinstance(e, Closed) for e in events)


def test_a_framing_error_tears_the_link_down():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    peer.read(session)
    session.receive_data(b"\xff\xff\xff\xff")
    assert session.state is S.RECONNECTING
    assert isinstance(command.error, BunqueueProtocolViolation)


# -------------------------------------------------------------------------------- stopping

def test_stop_drains_then_stops_and_refuses_new_commands():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    frame = peer.read(session)[0]
    session.stop()
    assert session.state is S.STOPPING
    with pytest.raises(BunqueueStateError):
        session.send({"cmd": "Count", "queue": "q"})
    events = session.receive_data(peer.reply(frame, count=3))
    assert command.result["count"] == 3
    assert session.state is S.STOPPED and any(isinstance(e, Closed) for e in events)


def test_abort_settles_pending_commands_as_stopped():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    session.abort()
    assert session.state is S.STOPPED
    assert isinstance(command.error, BunqueueSessionStopped)


# --------------------------------------------------------------------------------- options

def test_options_come_from_the_spec_and_refuse_unknown_keys():
    spec = load_profile(PROFILE).tree["client_defaults"]
    options = ConnectionOptions.from_profile(PROFILE)
    assert options.command_timeout == spec["commandTimeout"]["value"]
    assert options.max_in_flight == spec["maxInFlight"]["value"]
    assert options.pool_size == spec["poolSize"]["value"]
    assert ConnectionOptions.from_profile(PROFILE, {"commandTimeout": 5}).command_timeout == 5
    with pytest.raises(ClientConfigError, match="unknown option 'comand_timeout'"):
        ConnectionOptions.from_profile(PROFILE, {"comand_timeout": 5})
    with pytest.raises(ClientConfigError, match="reconnect_jitter"):
        ConnectionOptions.from_profile(PROFILE, {"reconnect_jitter": 2})


def test_the_docs_render_the_session_table(tmp_path):
    from queuewire import docs

    pages = {p.relative_to(tmp_path).as_posix(): p.read_text() for p in docs.render(tmp_path)}
    page = pages["bunqueue_v2/index.md"]
    assert session_mermaid() in page
    for state, spec_state in SPEC_STATES.items():
        assert f"| `{state.name}` | `{spec_state}` |" in page


# ------------------------------------------------ issue 31: behaviours a mutation run found

def test_an_ok_answer_with_an_error_field_is_answered_and_one_without_ok_is_refused():
    """``ok: true`` decides: a stray ``error`` beside it does not make the answer a refusal.
    Only where ``ok`` is not true does an ``error`` field refuse the command."""
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    events = session.receive_data(peer.reply(peer.read(session)[0], count=3, error="stray"))
    assert [e.request for e in events if isinstance(e, Settled)] == [command]
    assert command.state is RequestState.ANSWERED and command.error is None
    assert command.result["count"] == 3
    other = session.send({"cmd": "GetJob", "id": "nope"})
    frame = peer.read(session)[0]
    session.receive_data(peer.encoder.encode({"error": "Job not found",
                                              "reqId": frame["reqId"]}))
    assert other.state is RequestState.REFUSED
    assert isinstance(other.error, BunqueueRefused) and other.error.error == "Job not found"


def test_a_refusal_carries_the_servers_frame():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "GetJob", "id": "nope"})
    frame = peer.read(session)[0]
    session.receive_data(peer.encoder.encode({"ok": False, "error": "Job not found",
                                              "reqId": frame["reqId"], "extra": 1}))
    assert command.error.reply == {"ok": False, "error": "Job not found",
                                   "reqId": frame["reqId"], "extra": 1}
    assert BunqueueRefused("GetJob", "Job not found").reply == {}
    assert BunqueueRefused("GetJob", "Job not found", reply=None).reply == {}
    given = {"ok": False, "error": "x"}
    refused = BunqueueRefused("GetJob", "x", reply=given)
    assert refused.reply == given and refused.reply is not given  # a copy


class _FixedUniform(random.Random):
    """A random stream whose ``uniform`` answers a fixed fraction of its range's upper end
    (so the backoff's jitter is known), recording the ranges it was asked for."""

    def __init__(self, fraction: float) -> None:
        super().__init__(0)
        self.fraction, self.calls = fraction, []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return self.fraction * b


def _backoff_session(fraction: float) -> tuple[BunqueueSession, Clock, Peer, _FixedUniform]:
    clock, rng = Clock(), _FixedUniform(fraction)
    opts = ConnectionOptions.from_profile(PROFILE, {"port": 6789, "ping_interval": 0})
    return BunqueueSession(PROFILE, opts, clock=clock, rng=rng), clock, Peer(), rng


def test_the_first_reconnect_waits_the_base_delay_and_each_failure_multiplies_it():
    """BQ-CLIENT-2 through the session's inputs, jitter held at 0: failed connects wait base,
    base x factor, base x factor^2 (ms), the n-th ConnectNow is attempt n, and a link that
    reaches READY starts again from base."""
    session, clock, peer, rng = _backoff_session(0.0)
    o = session.options
    base, factor = o.reconnect_base_delay, o.reconnect_factor
    assert base * factor ** 2 < o.reconnect_max_delay  # the cap does not interfere
    session.start()
    waits = []
    for attempt in (1, 2, 3):
        (down,) = [e for e in session.connect_failed("refused") if isinstance(e, LinkDown)]
        waits.append(down.retry_at - clock.t)
        assert session.next_tick() == down.retry_at
        clock.t = down.retry_at - 0.0005
        assert session.tick() == [] and session.state is S.RECONNECTING
        clock.t = down.retry_at
        assert session.tick() == [ConnectNow(attempt)]
        assert session.state is S.CONNECTING
    assert waits == pytest.approx([base / 1000, base * factor / 1000,
                                   base * factor ** 2 / 1000])
    assert rng.calls == [(-o.reconnect_jitter, o.reconnect_jitter)] * 3
    session.connected()
    session.receive_data(peer.reply(peer.read(session)[0], protocolVersion=2,
                                    capabilities=["pipelining"]))
    assert session.state is S.READY
    (down,) = [e for e in session.receive_eof() if isinstance(e, LinkDown)]
    assert down.retry_at - clock.t == pytest.approx(base / 1000)  # the count was reset
    clock.t = down.retry_at
    assert session.tick() == [ConnectNow(1)]


def test_the_reconnect_jitter_varies_the_delay_by_its_fraction():
    """The jitter multiplies the delay by 1 + u, u drawn from [-jitter, +jitter]."""
    for fraction in (1.0, -1.0):
        session, clock, _, _ = _backoff_session(fraction)
        o = session.options
        session.start()
        (down,) = [e for e in session.connect_failed("refused") if isinstance(e, LinkDown)]
        expected = o.reconnect_base_delay * (1 + fraction * o.reconnect_jitter) / 1000
        assert down.retry_at - clock.t == pytest.approx(expected)


# ---------------------------------------- issue 31: survivors of a mutation run, by behaviour

def _settled(events: list) -> list:
    return [e.request for e in events if isinstance(e, Settled)]


def test_a_session_built_with_defaults_speaks_bunqueue_v2_and_reports_nothing_yet():
    session = BunqueueSession()
    assert session.profile.name == "bunqueue/v2"
    assert session.options == ConnectionOptions.from_profile("bunqueue/v2")
    profile = load_profile("bunqueue/2.9.5")
    other = BunqueueSession(profile, clock=Clock())
    assert other.profile is profile
    assert other.options == ConnectionOptions.from_profile(profile)
    assert other.protocol_version is None and other.capabilities == ()
    assert other.server_hello == {}
    # the window before negotiation: the option's, one without pipelining
    assert other.window == other.options.max_in_flight > 2
    assert make(pipelining=False)[0].window == 1


def test_req_ids_count_up_from_1_and_a_queued_command_keeps_the_one_it_was_given():
    session, _, peer = make(ping_interval=0)
    session.start()
    session.connected()
    early = session.send({"cmd": "Count", "queue": "q"})  # queued while negotiating
    hello = peer.read(session)[0]
    assert hello["reqId"] == "1"
    assert early.state is RequestState.QUEUED and early.req_id == "2" and early.frame
    session.receive_data(peer.reply(hello, protocolVersion=2, capabilities=["pipelining"]))
    later = session.send({"cmd": "Count", "queue": "r"})
    assert [(f["reqId"], f["queue"]) for f in peer.read(session)] == [("2", "q"), ("3", "r")]
    assert (early.req_id, early.id, later.req_id, later.id) == ("2", 2, "3", 3)
    assert early.frame == b"" and later.frame == b""  # a written frame is not kept


def test_the_hello_answer_gives_version_capabilities_and_the_servers_fields():
    session, _, peer = make(ping_interval=0, max_in_flight=7)
    events = ready(session, peer, capabilities=["pipelining", 5, "x"], server="bq 2.9.5")
    hello = {"protocolVersion": 2, "capabilities": ["pipelining", 5, "x"], "server": "bq 2.9.5"}
    assert events == [Ready(2, ("pipelining", "x"), 7, hello)]
    assert session.protocol_version == 2 and session.capabilities == ("pipelining", "x")
    assert session.server_hello == hello  # without ok and reqId


@pytest.mark.parametrize(("pipelining", "version", "caps", "window"), [
    (True, 2, ["pipelining"], 4),
    (True, 2, [], 1),                 # the server cannot pipeline
    (True, 1, ["pipelining"], 1),     # below protocol version 2
    (True, "2", ["pipelining"], 1),   # a version that is not an integer is no version
    (False, 2, ["pipelining"], 1),    # the client's own option
])
def test_the_window_is_one_unless_both_sides_pipeline_at_version_2(pipelining, version, caps,
                                                                   window):
    session, _, peer = make(ping_interval=0, max_in_flight=4, pipelining=pipelining)
    (event,) = ready(session, peer, protocolVersion=version, capabilities=caps)
    assert event.window == window == session.window
    assert event.protocol_version == session.protocol_version == (
        version if type(version) is int else None)
    commands = [session.send({"cmd": "Count", "queue": f"q{i}"}) for i in range(window + 2)]
    assert len(peer.read(session)) == window
    assert session.in_flight == window and session.pending == len(commands)


def test_a_refused_hello_after_auth_goes_on_as_v1_and_reports_the_refusal(caplog):
    session, _, peer = make(token="t", ping_interval=0)
    session.start()
    session.connected()
    session.receive_data(peer.reply(peer.read(session)[0]))
    hello = peer.read(session)[0]
    assert hello["cmd"] == "Hello"
    with caplog.at_level(logging.INFO, logger="queuewire.client.bunqueue"):
        events = session.receive_data(peer.refuse(hello, "Unknown command: Hello"))
    assert session.state is S.READY and session.protocol_version is None
    refusal = "Hello refused by the server: Unknown command: Hello [BQ-ENV-5]"
    assert events == [Ready(None, (), 1, {"refused": refusal})]
    assert session.server_hello == {"refused": refusal}
    (message,) = [r.getMessage() for r in caplog.records]
    for part in ("session: Hello refused (", refusal, "protocol v1", "one command at a time"):
        assert part in message


def test_a_refusal_names_the_command_the_message_and_the_rule():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    named = session.send({"cmd": "GetJob", "id": "nope"})
    bare = session.send({"cmd": "GetJob", "id": "x"})
    a, b = peer.read(session)
    session.receive_data(peer.refuse(a, "Job not found")
                         + peer.encoder.encode({"ok": False, "reqId": b["reqId"]}))
    error = named.error
    assert type(error) is BunqueueRefused  # not an auth error: only Auth's refusal is
    assert (error.command, error.error, error.requirement) == ("GetJob", "Job not found",
                                                              "BQ-JOB-13")
    assert str(error) == "GetJob refused by the server: Job not found [BQ-JOB-13]"
    # no error field: "refused", and no rule to cite
    assert (bare.error.error, bare.error.error_name, bare.error.requirement) == (
        "refused", None, None)
    assert str(bare.error) == "GetJob refused by the server: refused"


def test_a_refused_auth_closes_with_the_auth_error():
    session, _, peer = make(token="wrong")
    session.start()
    session.connected()
    events = session.receive_data(peer.refuse(peer.read(session)[0], "Invalid token"))
    error = session.error
    assert type(error) is BunqueueAuthError and error.command == "Auth"
    assert events == [Closed("Auth refused", error)]
    assert session.close_reason == "Auth refused"


def test_an_answer_of_the_wrong_shape_fails_its_command_and_the_link_stays_up():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    frame = peer.read(session)[0]
    events = session.receive_data(peer.reply(frame, count="x"))
    assert _settled(events) == [command] and command.state is RequestState.REFUSED
    error = command.error
    assert type(error) is BunqueueReplyInvalid
    assert (error.command, error.requirement) == ("Count", "BQ-CMD-Count")
    assert "/count" in error.problem
    assert error.reply == {"ok": True, "count": "x", "reqId": frame["reqId"]}
    assert str(error).startswith("Count: ") and "[BQ-CMD-Count]" in str(error)
    assert str(error).endswith(error.problem)
    assert session.state is S.READY
    plain = BunqueueReplyInvalid("Count", "bad")
    assert plain.requirement is None and plain.reply == {}
    assert str(plain) == "Count: the server's answer breaks the protocol: bad"


def test_odd_req_ids_in_answers_are_late_answers():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    req_id = peer.read(session)[0]["reqId"]
    events = session.receive_data(b"".join(
        peer.encoder.encode({"ok": True, "count": 1, "reqId": r})
        for r in ([req_id], int(req_id), "999")))
    assert events == [] and session.late_answers == 3
    assert command.state is RequestState.SENT and session.state is S.READY


def test_answers_before_a_framing_error_count_then_the_link_goes_down():
    session, clock, peer = make(ping_interval=0)
    ready(session, peer)
    answered = session.send({"cmd": "Count", "queue": "a"})
    lost = session.send({"cmd": "Count", "queue": "b"})
    first, _ = peer.read(session)
    events = session.receive_data(peer.reply(first, count=1) + b"\xff\xff\xff\xff")
    assert answered.state is RequestState.ANSWERED and answered.result["count"] == 1
    error = lost.error
    assert type(error) is BunqueueProtocolViolation
    assert isinstance(error.protocol_error, ProtocolError)
    assert str(error) == f"the server broke the protocol: {error.protocol_error}"
    assert "BQ-FRAME-2" in str(error)
    assert _settled(events) == [answered, lost]
    (down,) = [e for e in events if isinstance(e, LinkDown)]
    assert (down.reason, down.error) == (str(error), error) and down.retry_at > clock.t
    assert BunqueueProtocolViolation("bad bytes").protocol_error is None


def test_a_garbled_frame_is_skipped_and_the_frames_after_it_are_read(caplog):
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    first = session.send({"cmd": "Count", "queue": "a"})
    second = session.send({"cmd": "Count", "queue": "b"})
    a, b = peer.read(session)
    garbled = struct.pack(">I", 1) + b"\xc1"  # a whole frame whose payload is no MessagePack
    with caplog.at_level(logging.WARNING, logger="queuewire.client.bunqueue"):
        events = session.receive_data(peer.reply(a, count=1) + garbled + peer.reply(b, count=2))
    assert _settled(events) == [first, second]
    assert (first.result["count"], second.result["count"]) == (1, 2)
    assert session.state is S.READY
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("bunqueue session: skipped a frame") and "BQ-FRAME-3" in message


def test_a_lost_link_says_why_fails_what_was_written_and_when_it_retries():
    session, clock, peer, _ = _backoff_session(0.0)
    ready(session, peer)
    written = session.send({"cmd": "Count", "queue": "q"})
    peer.read(session)
    events = session.receive_eof()
    error = written.error
    assert type(error) is BunqueueConnectionLost
    assert str(error) == "Connection lost: the server closed the connection"
    assert events == [Settled(written), LinkDown(str(error), error, events[-1].retry_at)]
    assert events[-1].retry_at == pytest.approx(
        clock.t + session.options.reconnect_base_delay / 1000.0)


def test_connection_lost_wraps_what_the_shell_gives_and_keeps_a_client_error():
    for given, text in ((OSError("reset"), "Connection lost: reset"),
                        (None, "Connection lost")):
        session, _, peer = make(ping_interval=0)
        ready(session, peer)
        (down,) = session.connection_lost(given)
        assert type(down.error) is BunqueueConnectionLost and str(down.error) == text
        assert down.reason == text
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    mine = BunqueueTimeout("the shell gave up")
    (down,) = session.connection_lost(mine)
    assert down.error is mine and down.reason == "the shell gave up"


def test_a_failed_connect_names_the_address_or_keeps_a_client_error():
    session, _, _ = make()
    session.start()
    (down,) = session.connect_failed("refused")
    o = session.options
    assert type(down.error) is BunqueueConnectError
    assert isinstance(down.error, BunqueueConnectionLost) and isinstance(down.error, ClientConnectError)
    assert str(down.error) == down.reason == f"cannot connect to {o.host}:{o.port}: refused"
    assert down.error.__cause__ is None
    # what the socket raised: said in words, and chained as the cause
    session, _, _ = make()
    session.start()
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 6789)")
    (down,) = session.connect_failed(refused)
    assert type(down.error) is BunqueueConnectError and down.error.__cause__ is refused
    assert str(down.error) == (f"cannot connect to 127.0.0.1:6789: connection refused "
                               f"([Errno {errno.ECONNREFUSED}] Connect call failed ('127.0.0.1', 6789))")
    assert (down.error.host, down.error.port) == ("127.0.0.1", 6789)
    # the connect timeout in the words is connect_timeout, else command_timeout (seconds)
    for options, seconds in (({}, "30"), ({"connect_timeout": 1500}, "1.5")):
        session, _, _ = make(**options)
        session.start()
        (down,) = session.connect_failed(TimeoutError())
        assert down.reason == (f"cannot connect to 127.0.0.1:6789: no connection within the "
                               f"connect timeout ({seconds} s)")
    session, _, _ = make()
    session.start()
    mine = BunqueueTimeout("connect timed out")
    (down,) = session.connect_failed(mine)
    assert down.error is mine and down.reason == "connect timed out"


def test_reconnect_off_reports_the_link_down_and_the_close_with_the_same_error():
    session, _, peer = make(reconnect=False, ping_interval=0)
    ready(session, peer)
    written = session.send({"cmd": "Count", "queue": "q"})
    peer.read(session)
    events = session.receive_eof()
    error = written.error
    assert isinstance(error, BunqueueConnectionLost)
    assert events == [Settled(written), LinkDown(str(error), error, None),
                      Closed(str(error), error)]
    assert session.error is error and session.close_reason == str(error)


def test_a_link_lost_while_stopping_closes_with_its_error():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    written = session.send({"cmd": "Count", "queue": "q"})
    peer.read(session)
    session.stop()
    events = session.receive_eof()
    error = written.error
    assert isinstance(error, BunqueueConnectionLost)
    assert events == [Settled(written), Closed(str(error), error)]
    assert session.state is S.STOPPED


def test_stopping_reports_closed_stopped_and_abort_reports_aborted():
    session, _, _ = make()
    assert session.stop() == [Closed("stopped", None)]  # nothing to drain
    assert session.close_reason == "stopped" and session.error is None
    # a stop drained by an answer
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    session.stop()
    events = session.receive_data(peer.reply(peer.read(session)[0], count=1))
    assert events == [Settled(command), Closed("stopped", None)]
    # a stop drained by a timeout
    session, clock, peer = make(ping_interval=0, command_timeout=1000)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    session.stop()
    clock.t += 1.0
    assert session.tick() == [Settled(command), Closed("stopped", None)]
    assert isinstance(command.error, BunqueueTimeout)
    # abort with and without an error
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    why = BunqueueConnectionLost("the pool is closing")
    assert session.abort(why) == [Settled(command), Closed("aborted", why)]
    assert command.error is why and session.error is why
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    command = session.send({"cmd": "Count", "queue": "q"})
    assert session.abort() == [Settled(command), Closed("aborted", None)]
    assert type(command.error) is BunqueueSessionStopped
    assert str(command.error) == "Session stopped"  # document 003's words


def test_a_command_after_stop_is_refused_naming_it_and_the_state():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    session.send({"cmd": "Count", "queue": "q"})
    session.stop()
    with pytest.raises(BunqueueStateError, match=r"^Stats: the session is stopping"):
        session.send({"cmd": "Stats"})
    session.abort()
    with pytest.raises(BunqueueStateError, match=r"^Stats: the session is stopped"):
        session.send({"cmd": "Stats"})


def test_a_command_times_out_exactly_at_its_own_or_the_default_deadline():
    session, clock, peer = make(command_timeout=1000, ping_interval=0)
    ready(session, peer)
    start = clock.t
    long_poll = session.send({"cmd": "PULL", "queue": "q", "timeout": 5000}, timeout=6.5)
    count = session.send({"cmd": "Count", "queue": "q"})
    assert (long_poll.timeout, count.timeout) == (6.5, 1.0)
    assert (long_poll.deadline - start, count.deadline - start) == (6.5, 1.0)
    assert session.next_tick() == start + 1.0
    clock.t = start + 1.0  # exactly the deadline
    assert session.tick() == [Settled(count)]
    assert type(count.error) is BunqueueTimeout
    assert str(count.error).startswith("Command timeout")
    assert "Count got no answer within 1 s" in str(count.error)
    assert session.next_tick() == start + 6.5
    clock.t = start + 6.4
    assert session.tick() == [] and long_poll.state is RequestState.SENT


def test_a_timed_out_backlogged_command_is_skipped_and_the_window_holds():
    session, clock, peer = make(command_timeout=1000, ping_interval=0)
    ready(session, peer, protocolVersion=1, capabilities=[])  # window 1
    session.send({"cmd": "Count", "queue": "a"})
    doomed = session.send({"cmd": "Count", "queue": "b"}, timeout=0.5)
    kept = session.send({"cmd": "Count", "queue": "c"})
    session.send({"cmd": "Count", "queue": "d"})
    (a,) = peer.read(session)
    clock.t += 0.5
    assert session.tick() == [Settled(doomed)]  # timed out while waiting for the window
    assert peer.read(session) == []  # and the window is still full
    session.receive_data(peer.reply(a, count=0))
    assert [f["queue"] for f in peer.read(session)] == ["c"]  # b skipped, d waits
    assert kept.state is RequestState.SENT


def test_an_unanswered_hello_is_a_dead_link_at_its_deadline_each_time():
    session, clock, peer, _ = _backoff_session(0.0)
    session.start()
    for n in (1, 2):
        session.connected()
        start = clock.t
        assert [f["cmd"] for f in peer.read(session)] == ["Hello"]
        assert session.next_tick() == start + 1.0 * session.options.command_timeout / 1000
        clock.t = session.next_tick() - 0.001
        assert session.tick() == [] and session.state is S.NEGOTIATING
        clock.t = start + session.options.command_timeout / 1000
        (down,) = session.tick()
        assert session.state is S.RECONNECTING and session.dead_links == n
        timeout = session.options.command_timeout / 1000
        assert down.reason == str(down.error)
        assert down.reason == f"Connection lost: dead link: Hello got no answer within {timeout:g} s"
        clock.t = down.retry_at
        assert session.tick() == [ConnectNow(n)]
        assert session.reconnects == n


def test_a_dead_link_from_timeouts_cites_bq_client_4():
    session, clock, peer = make(command_timeout=1000, max_command_timeouts=3, ping_interval=0)
    ready(session, peer)
    for _ in range(3):
        session.send({"cmd": "Count", "queue": "q"})
    clock.t += 1.0
    down = next(e for e in session.tick() if isinstance(e, LinkDown))
    assert down.reason == str(down.error)
    assert down.reason.startswith("Connection lost: dead link: ")
    assert "3 consecutive command timeouts" in down.reason
    assert "maxCommandTimeouts 3, BQ-CLIENT-4" in down.reason


def test_pings_come_every_interval_yield_to_earlier_deadlines_and_resume_after_a_reconnect():
    session, clock, peer = make(command_timeout=1000, ping_interval=5000, max_ping_failures=3)
    ready(session, peer)
    start = clock.t
    assert session.next_tick() == start + 5.0
    count = session.send({"cmd": "Count", "queue": "q"})
    assert session.next_tick() == start + 1.0  # the command's deadline comes first
    session.receive_data(peer.reply(peer.read(session)[0], count=0))
    assert count.state is RequestState.ANSWERED and session.next_tick() == start + 5.0
    late = session.send({"cmd": "PULL", "queue": "q", "timeout": 9000}, timeout=9.5)
    assert session.next_tick() == start + 5.0  # the Ping comes first
    clock.t = start + 5.0
    session.tick()
    frames = peer.read(session)
    assert [f["cmd"] for f in frames] == ["PULL", "Ping"]
    session.receive_data(peer.reply(frames[1]))
    assert session.next_tick() == start + 9.5  # the PULL's deadline; the next Ping at 10
    session.receive_data(peer.reply(frames[0], job=None))
    assert late.state is RequestState.ANSWERED
    assert session.next_tick() == start + 10.0
    # a new link pings again
    session.receive_eof()
    clock.t = session.next_tick()
    session.tick()
    session.connected()
    session.receive_data(peer.reply(peer.read(session)[0], protocolVersion=2,
                                    capabilities=["pipelining"]))
    assert session.next_tick() == clock.t + 5.0
    clock.t += 5.0
    session.tick()
    assert [f["cmd"] for f in peer.read(session)] == ["Ping"]


def test_failed_pings_cite_bq_client_3_and_say_the_ping_timed_out():
    session, clock, peer = make(command_timeout=1000, ping_interval=5000, max_ping_failures=2)
    ready(session, peer)
    events = []
    for _ in range(2):
        clock.t = session.next_tick()
        session.tick()  # the Ping
        clock.t = session.next_tick()
        events = session.tick()  # its timeout
    down = next(e for e in events if isinstance(e, LinkDown))
    assert down.reason == str(down.error)
    assert "2 consecutive failed pings" in down.reason
    assert "maxPingFailures 2, BQ-CLIENT-3" in down.reason
    assert down.reason.endswith("the Ping timed out")


def test_the_backoff_has_no_floor_below_its_formula():
    clock, rng = Clock(), _FixedUniform(-1.0)
    opts = ConnectionOptions.from_profile(PROFILE, {"port": 6789, "reconnect_base_delay": 1,
                                                    "reconnect_jitter": 0.5})
    session = BunqueueSession(PROFILE, opts, clock=clock, rng=rng)
    assert session.backoff_delay(0) == pytest.approx(0.0005)  # 1 ms x (1 - 0.5)


def test_refusals_are_named_after_the_profiles_error_strings_most_specific_first():
    matcher = ErrorMatcher(load_profile(PROFILE))
    assert matcher.match("Unknown command: Frobnicate") == ("unknown_command", "BQ-ENV-5")
    assert matcher.match("Lock token required for job 42") == ("lock_token_required",
                                                               "BQ-LOCK-2")
    assert matcher.match("Invalid request: line 1\nline 2") == ("invalid_request", "BQ-ENV-6")
    assert matcher.match("Something else") == (None, None)
    error = SimpleNamespace
    profile = SimpleNamespace(model=SimpleNamespace(errors={
        "generic": error(message="Invalid {what}", requirement="R-1"),
        "specific": error(message="Invalid token for this queue", requirement="R-2"),
    }))
    matcher = ErrorMatcher(profile)
    assert matcher.match("Invalid token for this queue") == ("specific", "R-2")
    assert matcher.match("Invalid lock") == ("generic", "R-1")


def test_a_deep_reply_is_read_and_a_command_too_deep_for_the_server_is_not_sent():
    session, _, peer = make(ping_interval=0)
    ready(session, peer)
    limit = load_profile(PROFILE).model.max_nesting_depth
    deep: list = []
    for _ in range(limit + 5):
        deep = [deep]
    command = session.send({"cmd": "Count", "queue": "q"})
    events = session.receive_data(peer.reply(peer.read(session)[0], count=1, extra=deep))
    assert _settled(events) == [command] and command.state is RequestState.ANSWERED
    # frozensets go out as arrays: the check walks what the server will read, not the sets
    nested: frozenset = frozenset()
    for _ in range(limit + 5):
        nested = frozenset({nested})
    with pytest.raises(BunqueueEncodeError, match="BQ-MSGPACK-3") as raised:
        session.send({"cmd": "PUSH", "queue": "q", "data": {"s": nested}})
    assert f"max_nesting_depth {limit}" in str(raised.value)
    assert peer.read(session) == [] and session.pending == 0


def test_a_ping_held_back_by_a_full_window_is_not_due_until_a_slot_frees():
    """A Ping waits for room in the window; while it waits, next_tick() must not name its past
    due time (tick() would do nothing, and a shell that re-arms its timer for next_tick() would
    spin until the long poll is answered)."""
    session, clock, peer = make(command_timeout=60000, ping_interval=1000)
    ready(session, peer, protocolVersion=1, capabilities=[])  # window 1
    pull = session.send({"cmd": "PULL", "queue": "q", "timeout": 30000}, timeout=90)
    (frame,) = peer.read(session)
    clock.t += 2
    assert session.tick() == [] and peer.read(session) == []
    assert session.next_tick() == pull.deadline  # not the Ping's time, now past
    session.receive_data(peer.reply(frame, job=None))
    assert session.next_tick() <= clock.t  # the slot is free: the Ping is due
    session.tick()
    assert [f["cmd"] for f in peer.read(session)] == ["Ping"]


# ----------------------------------- issue 24: the first connect fails fast and loud

def _refused() -> ConnectionRefusedError:
    return ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 6789)")


def test_until_ready_once_a_failed_connect_fails_the_waiting_commands_with_it():
    session, clock, _ = make(ping_interval=0)
    assert session.ready_once is False and session.fails_fast is True
    session.start()
    early = session.send({"cmd": "Count", "queue": "a"}, timeout=0.5)
    waiting = session.send({"cmd": "Count", "queue": "b"})
    clock.t += 0.6
    assert _settled(session.tick()) == [early]  # timed out in the backlog: stays a timeout
    refused = _refused()
    events = session.connect_failed(refused)
    error = waiting.error
    assert type(error) is BunqueueConnectError and error.__cause__ is refused
    assert "connection refused" in str(error) and "127.0.0.1:6789" in str(error)
    assert events == [Settled(waiting), LinkDown(str(error), error, events[-1].retry_at)]
    assert waiting.state is RequestState.LOST
    assert isinstance(early.error, BunqueueTimeout) and early.state is RequestState.TIMED_OUT
    assert session.pending == 0 and session.state is S.RECONNECTING  # and it keeps trying
    assert events[-1].retry_at > clock.t


def test_a_command_during_the_first_backoff_asks_for_a_connect_now_and_fails_with_it():
    session, clock, _ = make(ping_interval=0, reconnect_base_delay=20000, reconnect_jitter=0)
    session.start()
    (down,) = session.connect_failed(_refused())
    assert session.next_tick() == down.retry_at == clock.t + 20.0
    clock.t += 1.0
    command = session.send({"cmd": "Count", "queue": "q"})
    assert session.next_tick() == clock.t  # the backoff is over: this command wants a connect
    assert session.tick() == [ConnectNow(1)] and session.state is S.CONNECTING
    events = session.connect_failed(_refused())
    assert _settled(events) == [command] and type(command.error) is BunqueueConnectError
    # a caller waiting without a command (entering a Queue) cuts the backoff short the same way
    clock.t += 1.0
    session.connect_soon()
    assert session.next_tick() == clock.t and session.tick() == [ConnectNow(2)]


def test_once_ready_a_failed_reconnect_keeps_the_backoff_and_the_waiting_commands():
    session, clock, peer = make(ping_interval=0, reconnect_base_delay=20000, reconnect_jitter=0)
    ready(session, peer)
    assert session.ready_once is True and session.fails_fast is False
    (down,) = session.receive_eof()
    clock.t += 1.0
    command = session.send({"cmd": "Count", "queue": "q"})
    session.connect_soon()
    assert session.next_tick() == down.retry_at  # document 000's backoff, not cut short
    clock.t = down.retry_at
    assert session.tick() == [ConnectNow(1)]
    events = session.connect_failed(_refused())
    assert _settled(events) == [] and command.state is RequestState.QUEUED  # waits on
    assert [type(e) for e in events] == [LinkDown]


def test_retry_first_connect_treats_the_first_connect_like_a_reconnect():
    session, clock, peer = make(ping_interval=0, reconnect_base_delay=20000, reconnect_jitter=0,
                                retry_first_connect=True)
    assert session.ready_once is False and session.fails_fast is False
    session.start()
    command = session.send({"cmd": "Count", "queue": "q"})
    (down,) = session.connect_failed(_refused())
    assert command.state is RequestState.QUEUED
    clock.t += 1.0
    session.send({"cmd": "Count", "queue": "r"})
    session.connect_soon()
    assert session.next_tick() == down.retry_at
    clock.t = down.retry_at
    assert session.tick() == [ConnectNow(1)]
    session.connected()
    hello = peer.read(session)[0]
    session.receive_data(peer.reply(hello, protocolVersion=2, capabilities=["pipelining"]))
    assert [f["queue"] for f in peer.read(session)] == ["q", "r"]  # the server came: sent


def test_retry_first_connect_must_be_a_bool():
    with pytest.raises(ClientConfigError, match="retry_first_connect must be True or False, got 'yes'"):
        ConnectionOptions.from_profile(PROFILE, {"retry_first_connect": "yes"})
