"""The bunqueue server's sans-IO connection: bytes in, actions out, no socket and no loop.

Every rule of :mod:`queuewire.reference_server.bunqueue.connection` is driven here with the
real gate and engine: replies in order with their reqIds, transport errors that keep the
stream going, the pre-auth frame bound (lifted by an Auth pipelined before the large frame,
else a refusal that closes), slots held by parked polls, and any segmentation giving the
same bytes out."""

from __future__ import annotations

import msgpack
import pytest

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder, encode_frame
from queuewire.reference_server.bunqueue import BunqueueEngine
from queuewire.reference_server.bunqueue.connection import BunqueueConnection, Close, Park
from queuewire.reference_server.bunqueue.gate import RequestGate

PROFILE = "bunqueue/v2"
TOKEN = "t0ken"


class Room:
    """The shell's wait room, as the connection sees it."""

    full = False


ROOM = Room()
GATES: dict[tuple[str, ...], RequestGate] = {}


def _conn(tokens: tuple[str, ...] = (), *, max_in_flight: int = 4,
          pre_auth: int | None = 64, room: Room = ROOM) -> BunqueueConnection:
    gate = GATES[tokens] = RequestGate(BunqueueEngine(PROFILE), tokens)
    return BunqueueConnection("c1", gate, FrameEncoder(PROFILE, wide_integers=True), room,
                              max_in_flight=max_in_flight, pre_auth_frame_bytes=pre_auth)


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


def test_a_payload_that_is_no_map_is_answered_and_the_stream_goes_on():
    conn = _conn()
    bad = msgpack.packb([1, 2])
    conn.receive_data(len(bad).to_bytes(4, "big") + bad + _frame({"cmd": "Ping", "reqId": "p"}))
    first, second = _replies(conn.next_actions())
    assert first["ok"] is False and "reqId" not in first
    assert first["error"] == GATES[()].error("invalid_command")["error"]
    assert second["ok"] is True and second["reqId"] == "p"


def test_a_large_frame_before_auth_is_refused_and_the_connection_closes():
    conn = _conn((TOKEN,), pre_auth=64)
    conn.receive_data(_frame({"cmd": "Ping", "reqId": "p"})
                      + _frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 200}}))
    actions = conn.next_actions()
    assert isinstance(actions[-1], Close) and conn.closed
    (refusal,) = FrameDecoder(PROFILE).feed(actions[-1].farewell)
    assert refusal["ok"] is False and "reqId" not in refusal
    assert str(64) in refusal["error"]
    # the request before it was answered first (refused: not authenticated)
    (before,) = _replies(actions)
    assert before["reqId"] == "p" and before["ok"] is False
    conn.receive_data(_frame({"cmd": "Ping"}))
    assert conn.next_actions() == []       # nothing after a close


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


def test_a_stream_that_ends_inside_a_frame_is_not_answered():
    conn = _conn()
    frame = _frame({"cmd": "Ping", "reqId": "p"})
    conn.receive_data(frame + frame[:5])
    conn.receive_eof()
    assert len(_replies(conn.next_actions())) == 1
