"""The bunqueue server's sans-IO connection: bytes in, actions out, no socket and no loop.

Every rule of :mod:`queuewire.reference_server.bunqueue.connection` is driven here with the
real gate and engine: replies in order with their reqIds, transport errors that keep the
stream going, the pre-auth frame bound (lifted by an Auth pipelined before the large frame,
else a refusal that closes), slots held by parked polls, and any segmentation giving the
same bytes out; the rate window, the internal_error of a reply the wire cannot carry, a bug
closing its connection alone, the shells without frames."""

from __future__ import annotations

import logging

import msgpack
import pytest

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder, encode_frame
from queuewire.reference_server.bunqueue import BunqueueEngine
from queuewire.reference_server.bunqueue.connection import (
    BunqueueConnection,
    Close,
    Park,
    RateWindow,
)
from queuewire.reference_server.bunqueue.gate import RequestGate
from queuewire.reference_server.bunqueue.model import Wait
from queuewire.spec import load_profile

PROFILE = "bunqueue/v2"
TOKEN = "t0ken"


class Room:
    """The shell's wait room, as the connection sees it."""

    full = False


ROOM = Room()
GATES: dict[tuple[str, ...], RequestGate] = {}
LOGGER = "queuewire.reference_server.bunqueue"
MAX_FRAME = load_profile(PROFILE).model.max_frame_bytes
ERRORS = {name: e.message for name, e in load_profile(PROFILE).model.errors.items()}


def _conn(tokens: tuple[str, ...] = (), *, max_in_flight: int = 4,
          pre_auth: int | None = 64, room: Room = ROOM, rate: RateWindow | None = None,
          engine: BunqueueEngine | None = None) -> BunqueueConnection:
    gate = GATES[tokens] = RequestGate(engine or BunqueueEngine(PROFILE), tokens)
    return BunqueueConnection("c1", gate, FrameEncoder(PROFILE, wide_integers=True), room,
                              max_in_flight=max_in_flight, pre_auth_frame_bytes=pre_auth,
                              rate=rate)


def _error(name: str, **fields) -> str:
    """The profile's error message ``name``."""
    return ERRORS[name].format(**fields)


def _replies(actions: list) -> list:
    data = b"".join(a for a in actions if type(a) is bytes)
    return FrameDecoder(PROFILE).feed(data)


def _frame(obj) -> bytes:
    return encode_frame(obj, PROFILE)


def test_pipelined_requests_are_answered_in_order_with_their_req_ids():
    conn = _conn()
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "a"})
                      + _frame({"cmd": "PUSH", "queue": "q", "data": {}, "reqId": 7})
                      + _frame({"cmd": "Nope", "reqId": "z"}))
    replies = _replies(conn.next_actions())
    assert [r.get("reqId") for r in replies] == ["a", 7, "z"]
    assert replies[0]["ok"] is True and replies[2]["ok"] is False
    # a reqId that is no string is echoed as it came, and the request refused by its schema
    assert replies[1]["ok"] is False and "BQ-ENV" in replies[1]["error"]
    assert conn.handled == 3 and not conn.pending


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_any_segmentation_gives_the_same_bytes(step):
    stream = b"".join(_frame({"cmd": "IsPaused", "queue": "q", "reqId": str(i)})
                      for i in range(5))
    whole = _conn()
    whole.receive_data(stream)
    expected = b"".join(a for a in whole.next_actions())
    parts = _conn()
    got = b""
    for at in range(0, len(stream), step):
        parts.receive_data(stream[at:at + step])
        got += b"".join(a for a in parts.next_actions())
    assert got == expected and len(_replies([got])) == 5


@pytest.mark.parametrize(("payload", "error"), [
    (msgpack.packb([1, 2]), "invalid_command"),            # a payload that is no map
    (b"\xc1", "invalid_command_format"),                    # no MessagePack at all
    (msgpack.packb({"a": 1}) + b"\x00", "invalid_command_format"),   # bytes after the map
])
def test_a_refused_payload_is_answered_and_the_stream_goes_on(payload, error):
    conn = _conn()
    conn.receive_data(len(payload).to_bytes(4, "big") + payload
                      + _frame({"cmd": "Ping", "reqId": "p"}))
    actions = conn.next_actions()
    assert all(type(a) is bytes for a in actions) and not conn.closed and not conn.pending
    first, second = _replies(actions)
    assert first == {"ok": False, "error": _error(error)}      # no reqId: none was read
    assert second["ok"] is True and second["reqId"] == "p"


def test_a_reply_echoes_a_nil_req_id_and_a_request_without_one_gets_none():
    conn = _conn()
    conn.receive_data(_frame({"cmd": "Ping", "reqId": None}) + _frame({"cmd": "Ping"}))
    nil, absent = _replies(conn.next_actions())
    # a nil reqId breaks the envelope's schema (BQ-ENV-7), and is echoed in the refusal
    assert "reqId" in nil and nil["reqId"] is None and nil["ok"] is False
    assert "reqId" not in absent and absent["ok"] is True


@pytest.mark.parametrize("step", [1, 2, 3, 5, 10_000])
def test_a_large_frame_before_auth_is_refused_and_the_connection_closes(step):
    # its length prefix read back whatever the reads it came in (bytes of earlier reads)
    conn = _conn((TOKEN,), pre_auth=64)
    big = _frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200}})
    stream = _frame({"cmd": "Ping", "reqId": "p"}) + _frame({"cmd": "Ping", "reqId": "q"}) + big
    actions: list = []
    for at in range(0, len(stream), step):
        conn.receive_data(stream[at:at + step])
        actions += conn.next_actions()
        if conn.closed:
            break
    *answered, close = actions
    assert close == Close("frame too large", close.farewell)
    assert conn.closed and conn.close_reason == "frame too large" and not conn.pending
    (refusal,) = FrameDecoder(PROFILE).feed(close.farewell)
    assert refusal == {"ok": False, "error": _error("frame_too_large", length=len(big) - 4,
                                                    max=64)}
    # the requests before it were answered first (refused: not authenticated)
    assert [r["reqId"] for r in _replies(answered)] == ["p", "q"]
    if step >= len(stream):                  # one read: both requests and the refusal
        assert conn.handled == 3
    conn.receive_data(_frame({"cmd": "Ping"}))
    assert conn.next_actions() == []       # nothing after a close


def test_without_tokens_there_is_no_pre_auth_bound():
    conn = _conn(pre_auth=64)
    conn.receive_data(_frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200},
                              "reqId": "big"}))
    (reply,) = _replies(conn.next_actions(max_frames=1))   # one frame, answered at once
    assert reply["ok"] is True and reply["reqId"] == "big" and not conn.closed
    assert conn.handled == 1 and not conn.pending


def test_an_auth_pipelined_before_a_large_frame_lifts_the_bound_for_it():
    conn = _conn((TOKEN,), pre_auth=64)
    big = _frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200}, "reqId": "big"})
    stream = _frame({"cmd": "Auth", "token": TOKEN, "reqId": "auth"}) + big \
        + _frame({"cmd": "Ping", "reqId": "after"})
    conn.receive_data(stream[:len(stream) - 5])          # the last frame arrives later
    conn.receive_data(stream[len(stream) - 5:])
    replies = _replies(conn.next_actions())
    assert [r.get("reqId") for r in replies] == ["auth", "big", "after"]
    assert all(r["ok"] is True for r in replies) and not conn.closed
    # the stream goes on after it: later reads are answered as they come
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "later"}))
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["later"]


def test_reads_held_behind_a_refused_frame_are_read_on_in_order():
    conn = _conn((TOKEN,), pre_auth=64)
    auth = _frame({"cmd": "Auth", "token": TOKEN, "reqId": "auth"})
    big = _frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200}, "reqId": "big"})
    rest = big[10:] + _frame({"cmd": "Ping", "reqId": "after"})
    conn.receive_data(auth + big[:10])       # refused here, decided once Auth is answered
    conn.receive_data(rest[:50])             # held ...
    conn.receive_data(rest[50:120])          # ... and held
    conn.receive_data(rest[120:])
    replies = _replies(conn.next_actions())
    assert [(r["reqId"], r["ok"]) for r in replies] == [("auth", True), ("big", True),
                                                        ("after", True)]


def test_a_frame_limit_counts_the_refused_frame_and_leaves_the_rest_for_later():
    conn = _conn((TOKEN,), pre_auth=64)
    conn.receive_data(_frame({"cmd": "Auth", "token": TOKEN, "reqId": "auth"})
                      + _frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200},
                                "reqId": "big"})
                      + _frame({"cmd": "Ping", "reqId": "after"}))
    assert [r["reqId"] for r in _replies(conn.next_actions(max_frames=2))] == ["auth"]
    assert conn.handled == 2 and conn.pending
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["big", "after"]


def test_an_auth_lifts_the_bound_to_max_frame_bytes_and_no_further():
    auth = _frame({"cmd": "Auth", "token": TOKEN, "reqId": "auth"})
    at_max = _conn((TOKEN,), pre_auth=64)
    at_max.receive_data(auth + MAX_FRAME.to_bytes(4, "big") + b"\x81")
    actions = at_max.next_actions()
    assert [r["reqId"] for r in _replies(actions)] == ["auth"] and len(actions) == 1
    assert not at_max.closed               # the frame of max_frame_bytes is read on
    over = _conn((TOKEN,), pre_auth=64)
    over.receive_data(auth + (MAX_FRAME + 1).to_bytes(4, "big") + b"\x81")
    *answered, close = over.next_actions()
    assert [r["reqId"] for r in _replies(answered)] == ["auth"] and over.closed
    (refusal,) = FrameDecoder(PROFILE).feed(close.farewell)
    assert refusal["error"] == _error("frame_too_large", length=MAX_FRAME + 1, max=MAX_FRAME)


def test_progress_gives_the_frame_in_progress_in_the_connection_stream():
    conn = _conn((TOKEN,), pre_auth=64)
    auth = _frame({"cmd": "Auth", "token": TOKEN, "reqId": "auth"})
    ping = _frame({"cmd": "Ping", "reqId": "p"})
    assert conn.progress == (0, 0, b"", 0)
    conn.receive_data(auth[:10])
    assert conn.progress == (0, 10, auth[:10], 0)
    big = _frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200}, "reqId": "big"})
    chunk = auth[10:] + ping + big[:30]
    conn.receive_data(chunk)
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["auth", "p"]
    # Auth lifted the bound and the frame is read on by another decoder: its offset is
    # still where it starts in the stream (a frame intake tells a new frame by its offset)
    start = len(auth) + len(ping)
    assert conn.progress == (start, 30, big[:30], start)
    conn.receive_data(big[30:40])
    assert conn.progress == (start, 40, big[30:40], start + 30)
    conn.receive_data(big[40:])
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["big"]
    assert conn.progress == (start + len(big), 0, big[40:], start + 40)


def test_parked_polls_hold_slots_and_block_what_follows_until_one_is_answered():
    conn = _conn(max_in_flight=1)
    conn.receive_data(_frame({"cmd": "PULL", "queue": "empty", "timeout": 5000, "reqId": "w"})
                      + _frame({"cmd": "Ping", "reqId": "p"}))
    actions = conn.next_actions()
    assert len(actions) == 1 and isinstance(actions[0], Park)
    assert conn.blocked and conn.pending and conn.parked == 1
    assert conn.next_actions() == []       # still blocked: nothing is answered
    reply = GATES[()].engine.expire(actions[0].wait)
    (answered,) = FrameDecoder(PROFILE).feed(conn.answer(actions[0].request, reply))
    assert answered["reqId"] == "w" and answered["ok"] is True
    conn.unpark()
    assert not conn.blocked
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["p"]


def test_each_parked_poll_holds_a_slot_and_the_requests_between_are_answered():
    conn = _conn(max_in_flight=2)
    conn.receive_data(_frame({"cmd": "PULL", "queue": "e", "timeout": 5000, "reqId": "w1"})
                      + _frame({"cmd": "Ping", "reqId": "p1"})
                      + _frame({"cmd": "PULL", "queue": "e", "timeout": 5000, "reqId": "w2"})
                      + _frame({"cmd": "Ping", "reqId": "p2"}))
    first, between, second = conn.next_actions()
    assert type(first) is Park and first.request["reqId"] == "w1"
    assert [r["reqId"] for r in _replies([between])] == ["p1"]
    assert type(second) is Park and second.request["reqId"] == "w2"
    assert conn.parked == 2 and conn.blocked and conn.handled == 3
    conn.unpark()
    assert not conn.blocked and conn.parked == 1
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["p2"]


def test_an_unpark_with_no_poll_parked_frees_no_slot():
    conn = _conn(max_in_flight=1)
    conn.receive_data(_frame({"cmd": "PULL", "queue": "e", "timeout": 5000, "reqId": "w1"}))
    (first,) = conn.next_actions()
    assert type(first) is Park and conn.parked == 1
    conn.unpark()
    conn.unpark()                          # nothing parked: no slot to give back
    assert conn.parked == 0
    conn.receive_data(_frame({"cmd": "PULL", "queue": "e", "timeout": 5000, "reqId": "w2"})
                      + _frame({"cmd": "Ping", "reqId": "p"}))
    (park,) = conn.next_actions()
    assert park.request["reqId"] == "w2" and conn.blocked   # the one slot is held again


def test_a_full_wait_room_answers_a_poll_at_once_as_if_it_had_timed_out():
    full = Room()
    full.full = True
    conn = _conn(room=full)
    conn.receive_data(_frame({"cmd": "PULL", "queue": "empty", "timeout": 5000, "reqId": "w"}))
    (reply,) = _replies(conn.next_actions())
    assert reply["reqId"] == "w" and reply["ok"] is True and conn.parked == 0


def test_limits_on_frames_and_bytes_leave_the_rest_pending():
    conn = _conn()
    conn.receive_data(b"".join(_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(10)))
    assert len(conn.next_actions(max_frames=4)) == 4 and conn.handled == 4 and conn.pending
    assert len(conn.next_actions(max_bytes=1)) == 1 and conn.pending
    assert len(conn.next_actions()) == 5 and not conn.pending


def test_no_frame_is_handled_under_a_limit_of_none():
    conn = _conn()
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "p"}))
    assert conn.next_actions(max_frames=0) == [] and conn.handled == 0 and conn.pending
    assert conn.next_actions(max_frames=-1) == [] and conn.pending
    assert len(conn.next_actions(max_frames=1)) == 1 and conn.handled == 1


def test_replies_are_handled_until_their_bytes_reach_max_bytes():
    conn = _conn()
    conn.receive_data(b"".join(_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(7)))
    size = len(conn.next_actions(max_frames=1)[0])      # every reply here has this size
    assert len(conn.next_actions(max_bytes=size)) == 1
    assert len(conn.next_actions(max_bytes=size + 1)) == 2
    assert len(conn.next_actions(max_bytes=2 * size)) == 2
    assert len(conn.next_actions(max_bytes=2 * size)) == 1 and not conn.pending


def test_a_stream_that_ends_inside_a_frame_is_not_answered(caplog):
    caplog.set_level(logging.DEBUG, LOGGER)
    conn = _conn()
    frame = _frame({"cmd": "Ping", "reqId": "p"})
    conn.receive_data(frame + frame[:5])
    conn.receive_eof()
    assert len(_replies(conn.next_actions())) == 1 and not conn.pending
    # the truncated frame is noted, with the connection it came on
    (note,) = [r for r in caplog.records if r.name == LOGGER]
    assert note.levelno == logging.DEBUG
    assert "c1" in note.getMessage() and "truncated_frame" in note.getMessage()


def test_a_stream_that_ends_between_frames_or_after_a_close_notes_nothing(caplog):
    caplog.set_level(logging.DEBUG, LOGGER)
    frame = _frame({"cmd": "Ping", "reqId": "p"})
    between = _conn()
    between.receive_data(frame)
    between.receive_eof()
    assert len(_replies(between.next_actions())) == 1
    closed = _conn()
    closed.receive_data(frame[:5])
    closed.close("read error")
    closed.receive_eof()
    frameless = BunqueueConnection("ws-1", RequestGate(BunqueueEngine(PROFILE)), None, ROOM,
                                   framed=False)
    frameless.receive_eof()
    assert [r for r in caplog.records if r.name == LOGGER] == []


# -- closing


def test_close_drops_what_was_received_and_keeps_its_first_reason():
    conn = _conn()
    assert not conn.closed and conn.close_reason is None
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "a"}) + _frame({"cmd": "Ping"})[:3])
    assert conn.pending
    progress = conn.progress
    conn.close("server stopping")
    assert conn.closed and not conn.pending and conn.close_reason == "server stopping"
    assert conn.next_actions() == [] and conn.handled == 0
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "b"}))   # read after the close: dropped
    assert conn.progress == progress and not conn.pending
    conn.close("connection lost")
    assert conn.close_reason == "server stopping"


class BuggyEngine(BunqueueEngine):
    """An engine with a bug in one command (Stats)."""

    def handle(self, conn_id, request):
        if request.get("cmd") == "Stats":
            raise ZeroDivisionError("a bug")
        return super().handle(conn_id, request)


def test_a_bug_answering_a_request_closes_its_connection_alone(caplog):
    caplog.set_level(logging.ERROR, LOGGER)
    engine = BuggyEngine(PROFILE)
    conn = _conn(engine=engine)
    other = BunqueueConnection("c2", GATES[()], FrameEncoder(PROFILE), ROOM)
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "a"}) + _frame({"cmd": "Stats"})
                      + _frame({"cmd": "Ping", "reqId": "c"}))
    *answered, close = conn.next_actions()
    assert [r["reqId"] for r in _replies(answered)] == ["a"]   # the bug's request: none
    assert close == Close("internal error", abort=True)   # reset, nothing more written
    assert conn.closed and conn.close_reason == "internal error" and not conn.pending
    assert conn.handled == 2
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.ERROR and "c1" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    other.receive_data(_frame({"cmd": "Ping", "reqId": "o"}))
    (reply,) = _replies(other.next_actions())
    assert reply["ok"] is True and reply["reqId"] == "o" and not other.closed


# -- a reply the wire cannot carry (BQ-MSGPACK-8)


def _req_id_filling(request: dict, *others: dict) -> str:
    """A reqId with which the largest of these maps exactly fills a frame (max_frame_bytes)."""
    enc = FrameEncoder(PROFILE)
    largest = max(len(enc.payload({**m, "reqId": ""})) for m in (request, *others))
    return "r" * (MAX_FRAME - largest - 4)   # a str of 64 KiB or more has a 5-byte header


def test_a_reply_too_large_for_a_frame_is_answered_internal_error_with_its_req_id(caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    conn = _conn()
    conn.receive_data(_frame({"cmd": "PUSH", "queue": "q", "data": {}}))
    (pushed,) = _replies(conn.next_actions())
    get = {"cmd": "GetJob", "id": pushed["id"]}
    error = {"ok": False, "error": _error("internal_error")}
    req_id = _req_id_filling(get, error)
    conn.receive_data(_frame({**get, "reqId": req_id}))    # the job and the reqId: too large
    (reply,) = _replies(conn.next_actions())
    assert reply == {**error, "reqId": req_id}
    (warning,) = [r for r in caplog.records if r.name == LOGGER]
    assert warning.levelno == logging.WARNING
    assert "c1" in warning.getMessage() and "exceeds max_frame_bytes" in warning.getMessage()


def test_a_reply_whose_req_id_cannot_be_written_is_answered_internal_error_without_it():
    conn = _conn()
    ping = {"cmd": "Ping"}
    req_id = _req_id_filling(ping)          # the request fills a frame; its reply is larger
    conn.receive_data(_frame({**ping, "reqId": req_id}))
    (reply,) = _replies(conn.next_actions())
    assert reply == {"ok": False, "error": _error("internal_error")}
    assert conn.next_actions() == [] and not conn.closed


# -- the rate window (BQ-RATE-1), with an injected clock


class Clock:
    """Seconds, moved by the test."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_rate_window_allows_limit_requests_in_any_window():
    clock = Clock(100.0)
    rate = RateWindow(2, 10.0, clock)
    assert [rate.allow(), rate.allow(), rate.allow()] == [True, True, False]
    clock.now = 109.99
    assert rate.allow() is False
    clock.now = 110.0                       # both left the window as it reached them
    assert [rate.allow(), rate.allow(), rate.allow()] == [True, True, False]


def test_a_request_the_window_refuses_takes_no_place_in_it():
    clock = Clock(100.0)
    rate = RateWindow(2, 10.0, clock)
    assert rate.allow() is True
    clock.now = 102.0
    assert rate.allow() is True
    clock.now = 105.0
    assert rate.allow() is False            # refused at 105: not counted
    clock.now = 110.0                       # the one of 100 left; 102 is still in
    assert rate.allow() is True
    clock.now = 111.0
    assert rate.allow() is False
    clock.now = 112.0                       # the one of 102 left (105 was never in)
    assert rate.allow() is True


def test_transport_errors_and_requests_share_the_connection_rate_window():
    clock = Clock(100.0)
    conn = _conn(rate=RateWindow(3, 1.0, clock))
    bad = b"\x00\x00\x00\x01\xc1"
    conn.receive_data(bad + _frame({"cmd": "Ping", "reqId": "p"}) + bad + bad
                      + _frame({"cmd": "Ping", "reqId": "q"}))
    replies = _replies(conn.next_actions())
    assert [r["error"] if not r["ok"] else "ok" for r in replies] == [
        _error("invalid_command_format"), "ok", _error("invalid_command_format"),
        _error("rate_limit_exceeded"), _error("rate_limit_exceeded")]
    assert "reqId" not in replies[3] and replies[4]["reqId"] == "q"
    clock.now = 101.0
    conn.receive_data(bad)
    assert _replies(conn.next_actions()) == [{"ok": False,
                                              "error": _error("invalid_command_format")}]


# -- the connection of an engine's jobs; the shells without frames


def test_the_jobs_a_connection_takes_are_the_ones_its_close_gives_back():
    conn = _conn()
    conn.receive_data(_frame({"cmd": "PUSH", "queue": "q", "data": {}})
                      + _frame({"cmd": "PULL", "queue": "q"}))
    pushed, pulled = _replies(conn.next_actions())
    assert pulled["job"]["id"] == pushed["id"]
    assert GATES[()].engine.connection_closed("c2") == []
    assert GATES[()].engine.connection_closed(conn.id) == [pushed["id"]]   # BQ-CONN-1


def test_a_connection_without_frames_answers_decoded_requests():
    # as the WebSocket builds it: no encoder, authenticated at the upgrade
    gate = RequestGate(BunqueueEngine(PROFILE), (TOKEN,))
    clock = Clock(0.0)
    ws = BunqueueConnection("ws-1", gate, None, ROOM, framed=False, authenticated=True,
                            rate=RateWindow(2, 1.0, clock))
    assert ws.decoder is None and not ws.pending
    assert ws.request({"cmd": "Ping", "reqId": "x"})["ok"] is True   # the shell adds reqId
    wait = ws.request({"cmd": "PULL", "queue": "e", "timeout": 5000})
    assert type(wait) is Wait and wait.conn_id == "ws-1"
    assert ws.request({"cmd": "Ping"}) == gate.error("rate_limit_exceeded")
    # as the embedded server would with a token to present: Auth first
    embedded = BunqueueConnection("e1", gate, FrameEncoder(PROFILE), ROOM, framed=False)
    assert embedded.request({"cmd": "Ping"}) == gate.error("not_authenticated")
    assert embedded.request({"cmd": "Auth", "token": TOKEN}) == {"ok": True}
    assert embedded.request({"cmd": "Ping"})["ok"] is True


def test_without_hello_a_connection_is_sequential_and_a_hello_lifts_it():
    """BQ-HELLO-3: a client that sends no Hello is served as protocol v1, one command at a
    time (a parked poll holds the only slot); a Hello answered ok gives it max_in_flight."""
    gate = RequestGate(BunqueueEngine(PROFILE), ())
    conn = BunqueueConnection("c1", gate, FrameEncoder(PROFILE, wide_integers=True), ROOM,
                              max_in_flight=4, slots_before_hello=1)
    poll = {"cmd": "PULL", "queue": "empty", "timeout": 5000}
    conn.receive_data(_frame({**poll, "reqId": "w"}) + _frame({"cmd": "Ping", "reqId": "p"}))
    actions = conn.next_actions()
    assert [type(a) for a in actions] == [Park] and conn.blocked and conn.slots == 1
    conn.unpark()
    assert [r["reqId"] for r in _replies(conn.next_actions())] == ["p"]

    conn.receive_data(_frame({"cmd": "Hello", "protocolVersion": 2,
                              "capabilities": ["pipelining"], "reqId": "h"})
                      + _frame({**poll, "reqId": "w2"}) + _frame({"cmd": "Ping", "reqId": "p2"}))
    actions = conn.next_actions()
    assert conn.slots == 4 and not conn.blocked
    assert [type(a) for a in actions] == [bytes, Park, bytes]
    assert [r["reqId"] for r in _replies(actions)] == ["h", "p2"]


def test_a_refused_hello_leaves_the_connection_sequential():
    gate = RequestGate(BunqueueEngine(PROFILE), ())
    conn = BunqueueConnection("c1", gate, FrameEncoder(PROFILE, wide_integers=True), ROOM,
                              max_in_flight=4, slots_before_hello=1)
    conn.receive_data(_frame({"cmd": "Hello", "protocolVersion": "two", "reqId": "h"}))
    (reply,) = _replies(conn.next_actions())
    assert reply["ok"] is False and conn.slots == 1
