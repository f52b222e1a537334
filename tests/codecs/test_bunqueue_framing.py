"""bunqueue framing and MessagePack: segmentation invariance, round trips of every command,
msgpackr interop vectors, hostile input and error recovery.

Limits, requirement ids, reactions and extension codes are read from the loaded profile; the
only constants written here are MessagePack's own format markers (the MessagePack
specification, not the bunqueue spec) and hand-written interop bytes from msgpackr.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import pickle
import re
import resource
import signal
import struct
from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.bunqueue import (
    UNDEFINED,
    Frame,
    FrameDecoder,
    FrameEncoder,
    depth_exceeds,
    encode_frame,
    nests_too_deep,
    payload_nests_deeper,
)
from queuewire.codecs.errors import (
    EncodeError,
    FramingError,
    PayloadError,
    ProtocolError,
)
from queuewire.codecs.validation import BunqueueValidator, to_json_model
from queuewire.fuzz.schema_gen import from_schema
from queuewire.spec import default_profile, load_profile

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
ERRORS = MODEL.protocol_errors
MAX_FRAME = PROFILE.limits["max_frame_bytes"].value
MAX_DEPTH = PROFILE.limits["max_nesting_depth"].value
VALIDATOR = BunqueueValidator(PROFILE)
COMMANDS = sorted(MODEL.commands)

# -- the length prefix, as the spec declares it (framing.fields.len_payload: u4be) -----------
_LEN_FIELD = next(f for f in PROFILE.tree["framing"]["fields"] if f["id"] == "len_payload")
_m = re.fullmatch(r"u(\d+)(be|le)", _LEN_FIELD["type"])
assert _m, _LEN_FIELD
PREFIX_BYTES = int(_m.group(1))
PREFIX_ORDER = {"be": "big", "le": "little"}[_m.group(2)]


def prefix(length: int) -> bytes:
    return length.to_bytes(PREFIX_BYTES, PREFIX_ORDER)


def frame(payload: bytes) -> bytes:
    return prefix(len(payload)) + payload


def ext_byte(code: int) -> bytes:
    return struct.pack("b", code)


UNDEF_CODE, UNDEF_DATA = MODEL.undefined_ext
# fixext 1 (0xd4) is MessagePack's marker for a one-byte extension payload.
UNDEFINED_BYTES = b"\xd4" + ext_byte(UNDEF_CODE) + UNDEF_DATA
TIMESTAMP = ext_byte(MODEL.timestamp_ext)


def expect(kind: str, err: ProtocolError, cls: type[ProtocolError]) -> None:
    """``err`` is the typed error of protocol error ``kind`` with the spec's requirement."""
    spec = ERRORS[kind]
    assert isinstance(err, cls), (type(err), err)
    assert err.kind == kind, str(err)
    assert err.requirement == spec.requirement
    assert err.reaction == spec.reaction
    assert spec.requirement in str(err)
    assert spec.requirement in PROFILE.requirements


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail instead of hanging: a decoder must answer hostile bytes promptly."""

    def fire(signum, frame):
        raise TimeoutError(f"took more than {seconds}s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def maxrss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def feed_all(decoder: FrameDecoder, chunks) -> list:
    out = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out


# =============================================================================================
# Segmentation invariance
# =============================================================================================
SAFE_INT = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
SCALARS = (
    st.none()
    | st.booleans()
    | SAFE_INT
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.binary(max_size=40)
    | st.just(UNDEFINED)
    | st.datetimes(timezones=st.just(dt.UTC))
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12,
)
MESSAGES = st.lists(st.dictionaries(st.text(max_size=8), VALUES, max_size=6),
                    min_size=1, max_size=6)




@settings(max_examples=150, deadline=None)
@given(msgs=MESSAGES, data=st.data())
def test_segmentation_invariance(msgs, data):
    stream = b"".join(encode_frame(m) for m in msgs)
    whole = FrameDecoder(PROFILE)
    assert whole.feed(stream) == msgs
    assert whole.buffered == 0 and whole.offset == len(stream)

    bytewise = FrameDecoder(PROFILE)
    assert feed_all(bytewise, (stream[i:i + 1] for i in range(len(stream)))) == msgs
    assert bytewise.buffered == 0 and bytewise.offset == len(stream)

    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12), label="cuts")
    bounds = [0, *sorted(cuts), len(stream)]
    pieces = [stream[a:b] for a, b in pairwise(bounds)]
    assert b"".join(pieces) == stream
    chunked = FrameDecoder(PROFILE)
    assert feed_all(chunked, pieces) == msgs
    chunked.eof()  # nothing left over: no truncation error


@settings(max_examples=100, deadline=None)
@given(msgs=MESSAGES, data=st.data())
def test_feed_frames_offsets_are_absolute(msgs, data):
    encoded = [encode_frame(m) for m in msgs]
    stream = b"".join(encoded)
    starts = [sum(map(len, encoded[:i])) for i in range(len(encoded))]
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10), label="cuts")
    bounds = [0, *sorted(cuts), len(stream)]
    decoder = FrameDecoder(PROFILE)
    frames: list[Frame] = []
    for a, b in pairwise(bounds):
        frames += decoder.feed_frames(stream[a:b])
    assert [f.offset for f in frames] == starts
    for f, raw, msg in zip(frames, encoded, msgs):
        assert isinstance(f, Frame)
        assert f.length == len(raw) - PREFIX_BYTES
        assert f.payload == raw[PREFIX_BYTES:]
        assert stream[f.offset:f.offset + PREFIX_BYTES] == prefix(f.length)
        assert stream[f.offset + PREFIX_BYTES:f.offset + PREFIX_BYTES + f.length] == f.payload
        assert f.value == msg
    assert len(frames) == len(msgs)


def test_mixed_feed_and_feed_frames_share_offsets():
    msgs = [{"cmd": "Ping", "reqId": str(i)} for i in range(4)]
    encoded = [encode_frame(m) for m in msgs]
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed(encoded[0] + encoded[1]) == msgs[:2]
    frames = decoder.feed_frames(encoded[2] + encoded[3][:3])
    assert [f.offset for f in frames] == [len(encoded[0]) + len(encoded[1])]
    frames = decoder.feed_frames(encoded[3][3:])
    assert [f.offset for f in frames] == [sum(map(len, encoded[:3]))]
    assert decoder.offset == sum(map(len, encoded))


def test_accepts_bytearray_and_memoryview_chunks():
    msgs = [{"cmd": "Ping", "reqId": "a"}, {"cmd": "Ping", "reqId": "b"}]
    stream = b"".join(encode_frame(m) for m in msgs)
    decoder = FrameDecoder(PROFILE)
    out = decoder.feed(bytearray(stream[:5]))
    out += decoder.feed(memoryview(stream)[5:11])
    out += decoder.feed(stream[11:])
    assert out == msgs


# =============================================================================================
# Round trip of every command, request and reply
# =============================================================================================
SAFE = 2**53 - 1  # bunqueue numbers are JavaScript numbers (BQ-MSGPACK-7)


# Open objects also get undocumented keys (a peer may send more than the schema names): any
# JSON value a JavaScript peer can hold, null included (integers within the safe range).
EXTRA = {"anyOf": [{}, {"type": "null"}]}
_STRATEGIES: dict[tuple[str, bool], st.SearchStrategy] = {}


def message_strategy(cmd: str, reply: bool) -> st.SearchStrategy:
    """Messages valid under the command's schema, drawn by the fuzzer's schema generator
    (its hypothesis side, so failures shrink); numbers within JavaScript's safe integer range,
    which is all that crosses the wire exactly (BQ-MSGPACK-7)."""
    key = (cmd, reply)
    if key not in _STRATEGIES:
        command = MODEL.commands[cmd]
        schema = command.response if reply else command.request
        _STRATEGIES[key] = from_schema(schema, SAFE, extra=EXTRA).strategy
    return _STRATEGIES[key]


def test_profile_has_62_commands_to_round_trip():
    assert len(COMMANDS) == 62


def _round_trip(msg: dict) -> dict:
    raw = encode_frame(msg, PROFILE)
    decoder = FrameDecoder(PROFILE)
    (decoded,) = decoder.feed(raw)
    assert decoded == msg
    assert decoder.buffered == 0
    # what came off the wire encodes to the very same bytes
    assert encode_frame(decoded, PROFILE) == raw
    return decoded


@pytest.mark.parametrize("cmd", COMMANDS)
def test_minimal_request_round_trips_and_validates(cmd, bq_minimal):
    msg = bq_minimal(cmd)
    assert msg["cmd"] == cmd
    for variant in (msg, {**msg, "reqId": "42"}):
        decoded = _round_trip(variant)
        assert VALIDATOR.request_violations(decoded) == ()
        assert VALIDATOR.request_is_valid(decoded)
        assert VALIDATOR.missing_fields(cmd, decoded) == []
        assert VALIDATOR.extra_fields(cmd, decoded) == []


@pytest.mark.parametrize("cmd", COMMANDS)
def test_minimal_reply_round_trips_and_validates(cmd, bq_minimal):
    msg = bq_minimal(cmd, reply=True)
    assert msg["ok"] is True
    for variant in (msg, {**msg, "reqId": "42"}):
        decoded = _round_trip(variant)
        assert VALIDATOR.reply_violations(cmd, decoded) == ()
        assert VALIDATOR.missing_fields(cmd, decoded, reply=True) == []


@pytest.mark.parametrize("cmd", COMMANDS)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_requests_round_trip_and_validate(cmd, data):
    msg = data.draw(message_strategy(cmd, False), label="request")
    decoded = _round_trip(msg)
    assert VALIDATOR.request_violations(decoded) == ()
    assert VALIDATOR.request_is_valid(decoded)


@pytest.mark.parametrize("cmd", COMMANDS)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_replies_round_trip_and_validate(cmd, data):
    msg = data.draw(message_strategy(cmd, True), label="reply")
    decoded = _round_trip(msg)
    assert VALIDATOR.reply_violations(cmd, decoded) == ()


# =============================================================================================
# msgpackr interop vectors (bytes as the real server writes them; see the research notes)
# =============================================================================================
def decode_one(payload: bytes) -> Any:
    decoder = FrameDecoder(PROFILE)
    out = decoder.feed(frame(payload))
    assert len(out) == 1 and decoder.buffered == 0
    return out[0]


def test_map16_maps_decode():
    assert decode_one(bytes.fromhex("de0001a16101")) == {"a": 1}
    assert decode_one(bytes.fromhex("de0000")) == {}
    # map32 with an honest count is fine too
    assert decode_one(bytes.fromhex("df00000001a16101")) == {"a": 1}


def test_real_ping_reply_decodes_and_validates():
    # msgpackr's Ping reply without reqId: map16, float64 time, reqId undefined (ext 0).
    payload = bytes.fromhex(
        "de0003a26f6bc3a464617461de0002a4706f6e67c3a474696d65cb427a1fdceedd3000"
        "a57265714964") + UNDEFINED_BYTES
    msg = decode_one(payload)
    assert msg["ok"] is True
    assert msg["data"]["pong"] is True
    assert isinstance(msg["data"]["time"], float)
    assert msg["data"]["time"] == struct.unpack(">d", bytes.fromhex("427a1fdceedd3000"))[0]
    assert msg["reqId"] is UNDEFINED
    assert VALIDATOR.reply_violations("Ping", msg) == ()
    assert "reqId" not in to_json_model(msg)


def test_real_frame_too_large_reply_is_an_error_reply_for_any_command():
    text = f"Frame too large: {MAX_FRAME + 1} bytes exceeds maximum {MAX_FRAME}"
    payload = (bytes.fromhex("de0003a26f6bc2a56572726f72") + b"\xd9" + bytes([len(text)])
               + text.encode() + bytes.fromhex("a57265714964") + UNDEFINED_BYTES)
    msg = decode_one(payload)
    assert msg == {"ok": False, "error": text, "reqId": UNDEFINED}
    for cmd in COMMANDS:
        assert VALIDATOR.reply_violations(cmd, msg) == ()


def test_undefined_ext_decodes_to_singleton_and_encodes_back():
    msg = decode_one(b"\x81\xa1a" + UNDEFINED_BYTES)
    assert msg == {"a": UNDEFINED}
    assert msg["a"] is UNDEFINED
    assert not UNDEFINED
    payload = FrameEncoder(PROFILE).payload({"a": UNDEFINED})
    assert payload == b"\x81\xa1a" + UNDEFINED_BYTES


def test_undefined_required_field_is_missing():
    # {cmd: "PUSH", queue: "emails", data: undefined}, as msgpackr writes it
    payload = (b"\xde\x00\x03" + b"\xa3cmd\xa4PUSH" + b"\xa5queue\xa6emails"
               + b"\xa4data" + UNDEFINED_BYTES)
    msg = decode_one(payload)
    assert msg["data"] is UNDEFINED
    required = MODEL.commands["PUSH"].required_fields
    assert "data" in required
    assert VALIDATOR.missing_fields("PUSH", msg) == ["data"]
    violations = VALIDATOR.request_violations(msg)
    assert violations, "a required field set to undefined must count as missing"
    assert any("data" in v.message for v in violations)
    assert all(v.requirement in PROFILE.requirements for v in violations)
    # the fast path must agree with the full verdict
    assert VALIDATOR.request_is_valid(msg) is False


def test_undefined_optional_field_is_absent():
    payload = (b"\xde\x00\x05" + b"\xa3cmd\xa4PUSH" + b"\xa5queue\xa6emails"
               + b"\xa4data\x80" + b"\xa8priority" + UNDEFINED_BYTES
               + b"\xa5reqId" + UNDEFINED_BYTES)
    msg = decode_one(payload)
    assert msg["priority"] is UNDEFINED
    assert VALIDATOR.request_violations(msg) == ()
    assert VALIDATOR.request_is_valid(msg)
    # a documented field set to undefined is absent; an undocumented one is a field all the same
    assert VALIDATOR.extra_fields("PUSH", msg) == []
    assert VALIDATOR.extra_fields("PUSH", {**msg, "notInSpec": UNDEFINED}) == ["notInSpec"]
    assert to_json_model(msg) == {"cmd": "PUSH", "queue": "emails", "data": {}}


def test_float64_timestamps_decode_as_float_and_validate_as_integers():
    stamp = bytes.fromhex("cb4279b76daa800000")  # 1767225600000 ms, as msgpackr writes it
    msg = decode_one(b"\x83\xa3cmd\xa5Clean\xa5queue\xa1q\xa5grace" + stamp)
    assert type(msg["grace"]) is float and msg["grace"] == 1767225600000
    assert MODEL.commands["Clean"].request["properties"]["grace"]["type"] == "integer"
    assert VALIDATOR.request_violations(msg) == ()
    assert VALIDATOR.request_is_valid(msg)
    # a limit beyond 32 bits: the maximum as float64 is valid, one more is not
    ttl = PROFILE.limits["ttl"]
    for value, ok in ((ttl.max, True), (ttl.max + 1, False)):
        raw = b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\xc0\xa3ttl" + b"\xcb" + struct.pack(
            ">d", value)
        msg = decode_one(raw)
        assert type(msg["ttl"]) is float
        violations = VALIDATOR.request_violations(msg)
        assert (violations == ()) is ok, violations
        if not ok:
            assert [v.requirement for v in violations] == [ttl.requirement]
    # a non-integral float in an integer field is not an integer
    bad = decode_one(b"\x83\xa3cmd\xa5Clean\xa5queue\xa1q\xa5grace\xcb" + struct.pack(">d", 1.5))
    assert VALIDATOR.request_violations(bad)
    assert not VALIDATOR.request_is_valid(bad)


def test_float32_decodes():
    msg = decode_one(b"\x81\xa1f\xca" + struct.pack(">f", 1.5))
    assert msg == {"f": 1.5}


@pytest.mark.parametrize("value, tail", [
    (5, b"\x05"),
    (127, b"\x7f"),
    (-32, b"\xe0"),
    (2**32 - 1, b"\xce\xff\xff\xff\xff"),
    (-(2**31), b"\xd2\x80\x00\x00\x00"),
    (2**32, b"\xcb" + struct.pack(">d", 2**32)),
    (2**40, b"\xcb" + struct.pack(">d", 2**40)),
    (-(2**31) - 1, b"\xcb" + struct.pack(">d", -(2**31) - 1)),
    (2**53 - 1, b"\xcb" + struct.pack(">d", 2**53 - 1)),
    (1767225600000, bytes.fromhex("cb4279b76daa800000")),
])
def test_encoder_writes_integers_as_msgpackr_does(value, tail):
    enc = FrameEncoder(PROFILE)
    payload = enc.payload({"v": value})
    assert payload == b"\x81\xa1v" + tail
    # never a 64-bit integer marker
    assert b"\xcf" not in payload and b"\xd3" not in payload
    # nested too
    nested = enc.payload({"v": [{"w": value}]})
    assert nested == b"\x81\xa1v\x91\x81\xa1w" + tail
    assert decode_one(payload) == {"v": value}


def test_the_encoders_fast_test_agrees_with_the_exact_walk_and_skips_float_timestamps():
    """The encoder walks a message in Python only when its bytes hold a 64-bit integer marker
    and its JSON text an integer token of ten digits or more; float timestamps (whose bytes
    often hold 0xcf or 0xd3) no longer send a reply down the walk, and the bytes are those
    of the exact walk for every message."""
    import random

    enc = FrameEncoder(PROFILE)
    walks = []
    exact = enc._floatify
    enc._floatify = lambda obj: walks.append(1) or exact(obj)
    rng = random.Random(20261124)
    for _ in range(3000):
        values = [rng.choice([rng.random() * 2e12, float(rng.randrange(10**12, 2 * 10**12)),
                              rng.randrange(-2**40, 2**40), rng.randrange(0, 2**31),
                              f"s{rng.randrange(10**12)}", [rng.randrange(-2**50, 2**50)]])
                  for _ in range(6)]
        msg = {"ok": True, "v": values, "t": rng.random() * 2e12}
        assert enc.payload(msg) == msgspec.msgpack.encode(exact(msg))
    walks.clear()
    stamps = [float(1767225600000 + i) for i in range(4096)]
    hits = [t for t in stamps if b"\xcf" in struct.pack(">d", t) or b"\xd3" in struct.pack(">d", t)]
    assert hits  # such timestamps exist ...
    enc.payload({"ok": True, "jobs": [{"createdAt": t, "runAt": t} for t in hits]})
    assert walks == []  # ... and cost no walk


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 2**63, 2**53, 2**64 - 1])
def test_encoder_refuses_integers_float64_cannot_carry(value):
    with pytest.raises(EncodeError) as info:
        encode_frame({"v": value}, PROFILE)
    expect("encode_error", info.value, EncodeError)
    numbers = PROFILE.tree["msgpack"]["numbers"]["requirement"]
    assert info.value.requirement == numbers
    assert numbers in str(info.value)
    with pytest.raises(EncodeError):
        encode_frame({"v": [1, {"w": value}]}, PROFILE)


def test_encoder_refuses_unencodable_objects():
    with pytest.raises(EncodeError) as info:
        encode_frame({"v": object()}, PROFILE)
    expect("encode_error", info.value, EncodeError)


def test_timestamp_extension_decodes_to_datetime():
    # fixext 4 (32-bit seconds), as msgpackr writes a whole-second Date
    msg = decode_one(b"\x81\xa1t\xd6" + TIMESTAMP + bytes.fromhex("6955b900"))
    assert msg == {"t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}
    # fixext 8 (30-bit nanoseconds, 34-bit seconds), a Date with milliseconds
    secs, nanos = 1767225600, 500_000_000
    msg = decode_one(b"\x81\xa1t\xd7" + TIMESTAMP + ((nanos << 34) | secs).to_bytes(8, "big"))
    assert msg["t"] == dt.datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=dt.UTC)
    # and a datetime goes back out as the timestamp extension
    payload = FrameEncoder(PROFILE).payload({"t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)})
    assert payload == b"\x81\xa1t\xd6" + TIMESTAMP + bytes.fromhex("6955b900")


def test_non_string_keys_decode_and_read_js_style():
    msg = decode_one(b"\x82\x01\x02\x92\x01\x02\x03")  # {1: 2, [1, 2]: 3}
    assert msg == {1: 2, (1, 2): 3}
    assert to_json_model(msg) == {"1": 2, "1,2": 3}


def test_binary_decodes_to_bytes():
    assert decode_one(b"\x81\xa1b\xc4\x03abc") == {"b": b"abc"}


# =============================================================================================
# Hostile input
# =============================================================================================
def hostile(payload_or_stream: bytes, *, framed: bool = True) -> ProtocolError:
    """Feed hostile bytes (whole, then byte by byte); return the typed error."""
    stream = frame(payload_or_stream) if framed else payload_or_stream
    errors = []
    for chunks in ([stream], [stream[i:i + 1] for i in range(len(stream))]):
        decoder = FrameDecoder(PROFILE)
        with deadline(10), pytest.raises(ProtocolError) as info:
            for chunk in chunks:
                decoder.feed(chunk)
        errors.append(info.value)
    assert errors[0].kind == errors[1].kind and errors[0].offset == errors[1].offset
    return errors[0]


def test_length_prefix_all_ones_is_refused_before_buffering():
    before = maxrss_kib()
    decoder = FrameDecoder(PROFILE)
    claim = 2 ** (8 * PREFIX_BYTES) - 1
    with deadline(5), pytest.raises(FramingError) as info:
        decoder.feed(prefix(claim))
    err = info.value
    expect("frame_too_large", err, FramingError)
    assert err.reaction == "close"
    assert err.offset == 0
    assert str(claim) in str(err)
    assert decoder.buffered == 0
    # the decoder is dead: everything afterwards raises the same error
    with pytest.raises(FramingError) as again:
        decoder.feed(encode_frame({"cmd": "Ping"}))
    assert again.value is err
    with pytest.raises(FramingError):
        decoder.feed(b"")
    with pytest.raises(FramingError):
        decoder.eof()
    assert maxrss_kib() - before < 8 * 1024


def test_length_prefix_split_over_feeds_is_checked_when_complete():
    decoder = FrameDecoder(PROFILE)
    bad = prefix(MAX_FRAME + 1)
    assert decoder.feed(bad[:1]) == []
    assert decoder.feed(bad[1:-1]) == []
    with pytest.raises(FramingError) as info:
        decoder.feed(bad[-1:] + b"x" * 100)
    expect("frame_too_large", info.value, FramingError)
    assert decoder.buffered == 0


def test_length_exactly_max_frame_bytes_is_a_valid_header():
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed(prefix(MAX_FRAME)) == []
    assert decoder.buffered == PREFIX_BYTES
    assert decoder.feed(b"\x80") == []  # still waiting for the rest
    assert decoder.buffered == PREFIX_BYTES + 1
    with pytest.raises(FramingError) as info:
        decoder.eof()
    expect("truncated_frame", info.value, FramingError)


def test_length_max_plus_one_is_refused_with_offset_after_good_frames():
    good = [encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(2)]
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(FramingError) as info:
        decoder.feed(b"".join(good) + prefix(MAX_FRAME + 1))
    err = info.value
    expect("frame_too_large", err, FramingError)
    assert err.offset == sum(map(len, good))
    assert err.frames == [{"cmd": "Ping", "reqId": "0"}, {"cmd": "Ping", "reqId": "1"}]
    assert str(MAX_FRAME) in str(err)


def test_custom_max_frame_bytes():
    decoder = FrameDecoder(PROFILE, max_frame_bytes=8)
    assert decoder.feed(frame(b"\x81\xa1a\x01")) == [{"a": 1}]
    with pytest.raises(FramingError) as info:
        decoder.feed(prefix(9))
    expect("frame_too_large", info.value, FramingError)
    assert info.value.offset == PREFIX_BYTES + 4


# MessagePack headers (MessagePack spec): array32 dd, map32 df, str32 db, bin32 c6, ext32 c9,
# each claiming 2**32-1 elements or bytes inside a frame of a few bytes.
HUGE = b"\xff\xff\xff\xff"
HUGE_CLAIMS = {
    "array32": b"\xdd" + HUGE,
    "map32": b"\xdf" + HUGE,
    "str32": b"\xdb" + HUGE,
    "bin32": b"\xc6" + HUGE,
    "ext32": b"\xc9" + HUGE + b"\x05",
    "array32 in map": b"\x81\xa1a\xdd" + HUGE + b"\x01",
    "map32 in map": b"\x81\xa1a\xdf" + HUGE + b"\xa1b\x01",
    "str32 in map": b"\x81\xa1a\xdb" + HUGE + b"abc",
    "bin32 in map": b"\x81\xa1a\xc6" + HUGE + b"abc",
    "map32 top": b"\xdf" + HUGE + b"\xa1a\x01",
}


@pytest.mark.parametrize("name", list(HUGE_CLAIMS))
def test_huge_container_claims_are_refused_without_allocating(name):
    payload = HUGE_CLAIMS[name]
    before = maxrss_kib()
    err = hostile(payload)
    expect("container_too_large", err, PayloadError)
    assert PREFIX_BYTES <= err.offset <= PREFIX_BYTES + len(payload)
    assert maxrss_kib() - before < 8 * 1024  # a 4 GiB claim costs no memory


def nested(depth: int) -> bytes:
    """{"a": [[...[]...]]} with ``depth`` container levels, the top-level map being level 1."""
    assert depth >= 2
    return b"\x81\xa1a" + b"\x91" * (depth - 2) + b"\x90"


def nested_value(depth: int) -> dict:
    inner: list = []
    for _ in range(depth - 2):
        inner = [inner]
    return {"a": inner}


def test_depth_definition_top_level_map_is_level_one():
    assert depth_exceeds({}, 1) is False
    assert depth_exceeds({}, 0) is True
    assert depth_exceeds({"a": []}, 2) is False
    assert depth_exceeds({"a": []}, 1) is True
    assert depth_exceeds({"a": [[]]}, 3) is False
    assert depth_exceeds({"a": [[]]}, 2) is True
    assert depth_exceeds({"a": [{"b": {}}]}, 4) is False
    assert depth_exceeds({"a": [{"b": {}}]}, 3) is True
    assert depth_exceeds(nested_value(MAX_DEPTH), MAX_DEPTH) is False
    assert depth_exceeds(nested_value(MAX_DEPTH + 1), MAX_DEPTH) is True
    assert depth_exceeds(nested_value(100_000), MAX_DEPTH) is True  # iterative, no recursion


def test_nesting_exactly_max_depth_is_accepted():
    assert decode_one(nested(MAX_DEPTH)) == nested_value(MAX_DEPTH)


def test_nesting_one_over_max_depth_is_refused():
    err = hostile(nested(MAX_DEPTH + 1))
    expect("too_deep", err, PayloadError)
    assert err.offset == PREFIX_BYTES


def test_nesting_600_deep_is_refused():
    # deeper than the limit, shallower than Python's recursion limit
    err = hostile(nested(600))
    expect("too_deep", err, PayloadError)


def test_nesting_of_maps_over_max_depth_is_refused():
    payload = b"\x81\xa1a" * MAX_DEPTH + b"\x80"  # MAX_DEPTH + 1 maps
    err = hostile(payload)
    expect("too_deep", err, PayloadError)


@pytest.mark.parametrize("payload", [
    b"\x81\xa1a" + b"\x91" * 10_000 + b"\x90",
    b"\x81\xa1a" + b"\x91" * 10_000,  # and truncated as well
    b"\x81\xa1a" + b"\xdc\x00\x01" * 10_000 + b"\x90",  # array16 headers
])
def test_ten_thousand_deep_nesting_is_refused_without_recursion_error(payload):
    err = hostile(payload)
    assert isinstance(err, PayloadError)
    assert err.kind in ("too_deep", "container_too_large")
    expect(err.kind, err, PayloadError)


def test_ten_thousand_deep_nesting_is_too_deep():
    err = hostile(b"\x81\xa1a" + b"\x91" * 10_000 + b"\x90")
    expect("too_deep", err, PayloadError)


def test_many_container_like_bytes_in_strings_are_not_nesting():
    # bytes 0x80-0x9f inside a bin/str look like container markers to a byte filter
    value = {"a": b"\x91" * 5000, "b": "\u0091" * 3000, "c": [[[]]]}
    assert decode_one(FrameEncoder(PROFILE).payload(value)) == value


@pytest.mark.parametrize("payload", [
    b"\x81\xa1a\xa2\xc3\x28",          # invalid continuation byte in a value
    b"\x81\xa2\xc3\x28\x01",           # ... in a map key
    b"\x81\xa1a\xa3\xed\xa0\x80",      # an encoded surrogate
    b"\x81\xa1a\xa1\xff",              # a byte that is never UTF-8
    b"\x81\xa1a\x91\xa2\xe2\x82",      # truncated sequence in an array
])
def test_invalid_utf8_is_refused(payload):
    err = hostile(payload)
    expect("invalid_utf8", err, PayloadError)


def test_trailing_bytes_are_refused_at_their_offset():
    obj = b"\x81\xa1a\x01"
    err = hostile(obj + b"\x00\x01")
    expect("trailing_bytes", err, PayloadError)
    assert err.offset == PREFIX_BYTES + len(obj)


def test_empty_payload_is_refused():
    err = hostile(b"")
    expect("empty_frame", err, PayloadError)
    assert err.offset == PREFIX_BYTES


@pytest.mark.parametrize("payload", [
    b"\x05", b"\xc0", b"\xc2", b"\xc3", b"\xa3abc", b"\x92\x01\x02", b"\xcb" + bytes(8),
    b"\xc4\x01x", UNDEFINED_BYTES,
])
def test_top_level_that_is_not_a_map_is_refused(payload):
    err = hostile(payload)
    expect("not_a_map", err, PayloadError)
    assert err.offset == PREFIX_BYTES


@pytest.mark.parametrize("payload", [
    b"\x81\xa1a\xd4\x05\x01",                         # fixext 1, type 5
    b"\x81\xa1a\xd4" + ext_byte(UNDEF_CODE) + b"\x01",  # the undefined type, other data
    b"\x81\xa1a\xd5" + ext_byte(UNDEF_CODE) + b"\x00\x00",  # the undefined type, 2 bytes
    b"\x81\xa1a\xc7\x03\x42abc",                      # ext 8, msgpackr's BigInt (0x42)
    b"\x81\xa1a\xd6\x73\x00\x00\x00\x00",             # fixext 4, type 0x73 (Set)
])
def test_unknown_extensions_are_refused(payload):
    err = hostile(payload)
    expect("unknown_extension", err, PayloadError)


def test_map_used_as_map_key_is_refused():
    payload = b"\x81\x81\xa1k\x01\x02"
    err = hostile(payload)
    expect("invalid_map_key", err, PayloadError)
    assert PREFIX_BYTES <= err.offset <= PREFIX_BYTES + len(payload)


def test_never_used_byte_is_invalid_msgpack():
    err = hostile(b"\x81\xa1a\xc1")
    expect("invalid_msgpack", err, PayloadError)


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 5, 9])
def test_truncated_frame_at_eof(cut):
    good = encode_frame({"cmd": "Ping", "reqId": "x"})
    partial = encode_frame({"cmd": "Ping", "reqId": "y"})[:cut]
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed(good + partial) == [{"cmd": "Ping", "reqId": "x"}]
    assert decoder.buffered == cut
    with pytest.raises(FramingError) as info:
        decoder.eof()
    err = info.value
    expect("truncated_frame", err, FramingError)
    assert err.offset == len(good)
    with pytest.raises(FramingError):
        decoder.feed(good)


def test_eof_after_complete_frames_is_clean():
    whole = encode_frame({"cmd": "Ping"})
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed(whole) == [{"cmd": "Ping"}]
    assert decoder.buffered == 0 and decoder.offset == len(whole)
    assert decoder.eof() is None
    assert decoder.eof() is None  # a clean end stays clean
    assert decoder.buffered == 0 and decoder.offset == len(whole)
    assert FrameDecoder(PROFILE).eof() is None  # nothing at all is a clean end too
    # ... and a single byte more is not: it is a truncated frame, where that byte begins
    truncated = FrameDecoder(PROFILE)
    assert truncated.feed(whole + whole[:1]) == [{"cmd": "Ping"}]
    with pytest.raises(FramingError) as info:
        truncated.eof()
    expect("truncated_frame", info.value, FramingError)
    assert info.value.offset == len(whole)


def test_hostile_inputs_never_escape_untyped():
    """A sweep of short garbage payloads: each is a dict or a typed ProtocolError."""
    import random

    rng = random.Random(1234)
    interesting = bytes([0x80, 0x81, 0x8F, 0x90, 0x91, 0x9F, 0xA1, 0xC0, 0xC1, 0xC4, 0xC6, 0xC7,
                         0xC9, 0xCA, 0xCB, 0xCF, 0xD3, 0xD4, 0xD6, 0xD7, 0xD8, 0xD9, 0xDB, 0xDC,
                         0xDD, 0xDE, 0xDF, 0xFF, 0x00, 0x61])
    for _ in range(2000):
        payload = bytes(rng.choice(interesting) for _ in range(rng.randint(0, 12)))
        decoder = FrameDecoder(PROFILE)
        try:
            out = decoder.feed(frame(payload))
        except ProtocolError as err:
            assert err.kind in ERRORS
            assert err.requirement == ERRORS[err.kind].requirement
        else:
            assert len(out) == 1 and type(out[0]) is dict


# =============================================================================================
# Error recovery
# =============================================================================================
GOOD = [{"cmd": "Ping", "reqId": str(i)} for i in range(3)]
BAD_PAYLOADS = {
    "trailing_bytes": b"\x80\x00",
    "not_a_map": b"\x05",
    "empty_frame": b"",
    "invalid_utf8": b"\x81\xa1a\xa1\xff",
    "unknown_extension": b"\x81\xa1a\xd4\x05\x01",
    "container_too_large": b"\x81\xa1a\xdd" + HUGE,
    "too_deep": nested(MAX_DEPTH + 1),
    "invalid_map_key": b"\x81\x80\x01",
}


# where each error applies, relative to the bad frame's payload
BAD_OFFSETS = {"trailing_bytes": 1, "not_a_map": 0, "empty_frame": 0, "invalid_utf8": 0,
               "unknown_extension": 0, "container_too_large": 0, "too_deep": 0}


@pytest.mark.parametrize("kind", list(BAD_PAYLOADS))
@pytest.mark.parametrize("chunk", [None, 1, 3, 7])
def test_reply_error_consumes_only_its_frame(kind, chunk):
    assert ERRORS[kind].reaction == "reply"
    before = [encode_frame(m) for m in GOOD[:2]]
    bad = frame(BAD_PAYLOADS[kind])
    after = encode_frame(GOOD[2])
    stream = b"".join(before) + bad + after
    bad_at = sum(map(len, before))
    chunks = [stream] if chunk is None else [stream[i:i + chunk]
                                             for i in range(0, len(stream), chunk)]
    decoder = FrameDecoder(PROFILE)
    got, errors = [], []
    for piece in chunks:
        try:
            got += decoder.feed(piece)
        except ProtocolError as err:
            errors.append(err)
            got += err.frames
            got += decoder.feed(b"")
    assert len(errors) == 1, errors
    err = errors[0]
    expect(kind, err, PayloadError)
    if kind in BAD_OFFSETS:
        assert err.offset == bad_at + PREFIX_BYTES + BAD_OFFSETS[kind]
    else:  # the decoder's byte position inside the payload
        assert bad_at + PREFIX_BYTES <= err.offset <= bad_at + len(bad)
    assert got == GOOD
    assert decoder.offset == len(stream) and decoder.buffered == 0
    decoder.eof()


def test_reply_error_frames_and_resume_in_one_feed():
    stream = (encode_frame(GOOD[0]) + encode_frame(GOOD[1]) + frame(b"\x05")
              + encode_frame(GOOD[2]) + encode_frame(GOOD[0])[:3])
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(PayloadError) as info:
        decoder.feed(stream)
    assert info.value.frames == GOOD[:2]
    assert info.value.offset == len(encode_frame(GOOD[0])) * 2 + PREFIX_BYTES
    assert decoder.feed(b"") == [GOOD[2]]
    assert decoder.buffered == 3
    assert decoder.feed(encode_frame(GOOD[0])[3:]) == [GOOD[0]]


def test_reply_error_frames_in_feed_frames_are_frame_records():
    first = encode_frame(GOOD[0])
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(PayloadError) as info:
        decoder.feed_frames(first + frame(b"\xc0") + encode_frame(GOOD[1]))
    (rec,) = info.value.frames
    assert isinstance(rec, Frame) and rec.offset == 0 and rec.value == GOOD[0]
    (nxt,) = decoder.feed_frames()
    assert nxt.offset == len(first) + PREFIX_BYTES + 1
    assert nxt.value == GOOD[1]


def test_two_bad_frames_in_a_row():
    stream = frame(b"\x05") + frame(b"") + encode_frame(GOOD[0])
    decoder = FrameDecoder(PROFILE)
    kinds = []
    got: list = []
    data = stream
    for _ in range(3):
        try:
            got += decoder.feed(data)
            break
        except ProtocolError as err:
            kinds.append(err.kind)
            got += err.frames
            data = b""
    assert kinds == ["not_a_map", "empty_frame"]
    assert got == [GOOD[0]]


def test_close_error_keeps_earlier_frames_in_error():
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(FramingError) as info:
        decoder.feed(encode_frame(GOOD[0]) + prefix(MAX_FRAME + 1) + encode_frame(GOOD[1]))
    assert info.value.frames == [GOOD[0]]
    assert info.value.reaction == "close"
    with pytest.raises(FramingError):
        decoder.feed(b"")


# =============================================================================================
# A maximum-size frame in 64 KiB reads
# =============================================================================================
def test_max_size_frame_in_64k_chunks():
    enc = FrameEncoder(PROFILE)
    overhead = len(enc.payload({"b": b""})) - 1 + 4  # bin8 header becomes bin32
    body = bytes(MAX_FRAME - overhead)
    raw = enc.encode({"b": body})
    assert len(raw) == PREFIX_BYTES + MAX_FRAME
    with pytest.raises(EncodeError) as info:
        enc.encode({"b": body + b"\x00"})
    expect("encode_error", info.value, EncodeError)

    decoder = FrameDecoder(PROFILE)
    view = memoryview(raw)
    step = 64 * 1024
    out = []
    with deadline(60):
        for i in range(0, len(raw), step):
            out += decoder.feed(view[i:i + step])
    assert len(out) == 1
    assert len(out[0]["b"]) == len(body) and out[0]["b"] == body
    assert decoder.buffered == 0 and decoder.offset == len(raw)


def _decode_all(chunks):
    """Every frame and error a decoder gives for ``chunks``, going on after reply errors."""
    dec, out = FrameDecoder("bunqueue/v2"), []
    for chunk in chunks:
        data = chunk
        while True:
            try:
                out += [("frame", f.get("cmd")) for f in dec.feed(data)]
            except ProtocolError as err:
                out += [("frame", f.get("cmd")) for f in err.frames]
                out.append(("error", err.kind, err.reaction))
                if err.reaction == "close":
                    return out
                data = b""
                continue
            break
    return out


def test_a_prefix_declaring_too_much_after_a_reply_error_is_judged_however_the_bytes_come():
    """Found by the fuzzer: after a reply error the decoder judged an over-long prefix it had
    already buffered only when more bytes arrived, so whole and byte-by-byte feeds differed."""
    enc = FrameEncoder("bunqueue/v2")
    stream = (enc.encode({"cmd": "Ping", "reqId": "1"}) + struct.pack(">I", 3) + b"\xc1\xc1\xc1"
              + struct.pack(">I", 2**31))
    whole = _decode_all([stream])
    assert whole == [("frame", "Ping"), ("error", "invalid_msgpack", "reply"),
                     ("error", "frame_too_large", "close")]
    assert _decode_all([stream[i:i + 1] for i in range(len(stream))]) == whole


# =============================================================================================
# Issue 31: behaviours a mutation run found unpinned
# =============================================================================================
def test_feed_whole_advances_the_stream_offset_by_each_whole_frame():
    """``feed_whole`` decodes a whole frame without buffering it, and still moves the stream
    offset past it: the offset it reports, and the offset of a later error or frame record,
    count every byte before them."""
    first, second = encode_frame(GOOD[0]), encode_frame(GOOD[1])
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed_whole(first) == [GOOD[0]]
    assert decoder.offset == len(first) and decoder.buffered == 0
    assert decoder.feed_whole(second) == [GOOD[1]]
    assert decoder.offset == len(first) + len(second)
    with pytest.raises(PayloadError) as info:
        decoder.feed_whole(frame(b"\x05"))  # refused: feed() judges it, at its offset
    expect("not_a_map", info.value, PayloadError)
    assert info.value.offset == len(first) + len(second) + PREFIX_BYTES
    after = len(first) + len(second) + PREFIX_BYTES + 1
    assert decoder.offset == after
    (record,) = decoder.feed_frames(first)
    assert record.offset == after and record.value == GOOD[0]


def test_a_message_json_cannot_write_is_walked_for_wide_integers():
    """The encoder's cheap test for integers beyond 32 bits reads the message's JSON text;
    a message that has none (a None map key) must still be walked, so 2**40 is written as
    float64 (BQ-MSGPACK-7), never as uint64."""
    payload = FrameEncoder(PROFILE).payload({None: 1, "n": 2**40})
    # fixmap 2, nil: 1, "n": float64 2**40 (MessagePack's own markers)
    assert payload == b"\x82\xc0\x01\xa1n\xcb" + struct.pack(">d", 2**40)
    assert b"\xcf" not in payload


# -- profiles: the decoder and encoder work for the profile they are given ---------------------
DEFAULT = load_profile(default_profile("bunqueue"))
# A variant under the same name, as tests build them (dataclasses.replace): a little-endian
# prefix, 64-byte frames and 3 levels of nesting, so using the wrong profile shows.
SMALL = dataclasses.replace(PROFILE, model=dataclasses.replace(
    MODEL, len_format="<I", max_frame_bytes=64, max_nesting_depth=3))


def test_decoder_and_encoder_use_the_profile_they_are_given_or_the_default():
    """No profile means the protocol's default profile; a name loads that profile; a
    ``Profile`` is used as it is, limits and prefix included."""
    default = load_profile(DEFAULT.name)  # at call time: other tests may have cleared the cache
    assert FrameDecoder().profile is default and FrameEncoder().profile is default
    assert FrameDecoder("bunqueue/2.9.5").profile is load_profile("bunqueue/2.9.5")
    assert FrameEncoder("bunqueue/2.9.5").profile is load_profile("bunqueue/2.9.5")
    msg = {"cmd": "Ping", "reqId": "1"}
    payload = msgspec.msgpack.encode(msg)
    little = len(payload).to_bytes(PREFIX_BYTES, "little") + payload
    decoder = FrameDecoder(SMALL)
    assert decoder.profile is SMALL and decoder.max_frame_bytes == 64
    assert decoder.feed(little) == [msg]
    encoder = FrameEncoder(SMALL)
    assert encoder.profile is SMALL and encoder.encode(msg) == little
    assert encoder.prefix(len(payload)) == little[:PREFIX_BYTES]  # for hand-built frames
    assert FrameEncoder(PROFILE).prefix(len(payload)) == prefix(len(payload))
    with pytest.raises(EncodeError) as info:
        encoder.encode({"b": bytes(64)})
    expect("encode_error", info.value, EncodeError)
    n = len(encoder.payload({"b": bytes(64)}))
    assert info.value.detail == f"payload of {n} bytes exceeds max_frame_bytes 64"


def test_encode_frame_writes_with_the_profile_it_is_given():
    """``encode_frame`` keeps one encoder per profile; a variant built under a profile's name
    is its own profile, not the cached encoder of the other (it used to get that one: its
    prefix and limits ignored)."""
    msg = {"cmd": "Ping", "reqId": "1"}
    payload = msgspec.msgpack.encode(msg)
    assert encode_frame(msg) == frame(payload) == encode_frame(msg, PROFILE)
    assert encode_frame(msg, SMALL) == len(payload).to_bytes(PREFIX_BYTES, "little") + payload
    with pytest.raises(EncodeError):
        encode_frame({"b": bytes(64)}, SMALL)
    assert encode_frame(msg, PROFILE) == frame(payload)  # and the default one is back
    assert encode_frame(msg, "bunqueue/2.9.5") == frame(payload)


# -- UNDEFINED -----------------------------------------------------------------------------------
def test_undefined_prints_as_javascript_and_pickles_as_the_singleton():
    """A decoded message shows JavaScript's name for the value (logs, the CLI, assertion
    diffs), and survives pickling (multiprocessing, the fuzzer's corpora) as the singleton
    every ``is UNDEFINED`` test relies on."""
    assert repr(UNDEFINED) == "undefined"
    assert repr({"reqId": UNDEFINED}) == "{'reqId': undefined}"
    assert pickle.loads(pickle.dumps({"reqId": UNDEFINED}))["reqId"] is UNDEFINED
    assert copy.deepcopy([UNDEFINED])[0] is UNDEFINED


# -- the decoder's inputs --------------------------------------------------------------------
def test_depth_counts_tuples_as_containers():
    """Arrays a caller built as tuples (and arrays msgspec decodes as tuples) nest too."""
    assert depth_exceeds({"a": ([],)}, 3) is False
    assert depth_exceeds({"a": ([],)}, 2) is True
    assert depth_exceeds({"a": (1, 2)}, 1) is True


def test_feed_without_bytes_continues_after_a_reply_error():
    """``feed()`` (no argument) is how a caller picks up the frames after a reply error."""
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(PayloadError):
        decoder.feed(frame(b"\x05") + encode_frame(GOOD[0]))
    assert decoder.feed() == [GOOD[0]]
    assert decoder.feed_frames() == [] and decoder.buffered == 0


@pytest.mark.parametrize("kind", [bytearray, lambda b: memoryview(bytearray(b))])
def test_a_chunk_the_caller_reuses_is_copied(kind):
    """A reader that reuses its buffer (readinto) may overwrite a chunk once ``feed`` returns:
    the part of a frame it held must stay as it was."""
    whole = encode_frame(GOOD[0])
    for cut in (PREFIX_BYTES - 1, 7):  # part of the prefix, and more
        decoder = FrameDecoder(PROFILE)
        chunk = kind(whole[:cut])
        assert decoder.feed(chunk) == []
        chunk[:] = b"\xff" * cut
        assert decoder.feed(kind(whole[cut:])) == [GOOD[0]]


def test_a_decoder_for_replies_does_not_limit_nesting():
    """max_nesting_depth is a rule for requests (BQ-MSGPACK-3): ``check_depth=False`` (a
    client reading replies) decodes a message nested deeper, by feed and by feed_whole."""
    deep = nested(MAX_DEPTH + 1)
    decoder = FrameDecoder(PROFILE, check_depth=False)
    assert decoder.feed(frame(deep)) == [nested_value(MAX_DEPTH + 1)]
    assert decoder.feed_whole(frame(nested(600))) == [nested_value(600)]
    with pytest.raises(PayloadError) as info:  # still an error when msgspec cannot go deeper
        decoder.feed(frame(b"\x81\xa1a" + b"\x91" * 10_000 + b"\x90"))
    expect("too_deep", info.value, PayloadError)


# -- error details: what the user reads --------------------------------------------------------
def _msgspec_says(payload: bytes) -> str:
    with pytest.raises(msgspec.DecodeError) as info:
        msgspec.msgpack.decode(payload)
    return str(info.value)


TRAILING, MAP_KEY, OPCODE = b"\x80\x00\x01", b"\x81\x81\xa1k\x01\x02", b"\x81\xa1a\xc1"
# (payload, kind, where in the payload it applies, the error's detail)
DETAILS = [
    (b"", "empty_frame", 0, "frame has an empty payload"),
    (b"\x05", "not_a_map", 0, "payload is a int, not a map"),
    (b"\xa3abc", "not_a_map", 0, "payload is a str, not a map"),
    (b"\x81\xa1a\xd4\x05\x01", "unknown_extension", 0, "extension type 5 (1 bytes) is not allowed"),
    (b"\x81\xa1a\xc7\x03\x42abc", "unknown_extension", 0,
     "extension type 66 (3 bytes) is not allowed"),
    (b"\x81\xa1a\xa1\xff", "invalid_utf8", 0, "str is not valid UTF-8 (invalid start byte)"),
    (b"\x81\xa1a\xdd" + HUGE, "container_too_large", 0,
     "a declared size runs past the end of the 8-byte payload"),
    (nested(MAX_DEPTH + 1), "too_deep", 0,
     f"containers nest deeper than max_nesting_depth {MAX_DEPTH}"),
    (b"\x81\xa1a" + b"\x91" * 10_000 + b"\x90", "too_deep", 0,  # msgspec's own recursion guard
     f"containers nest deeper than max_nesting_depth {MAX_DEPTH}"),
    (TRAILING, "trailing_bytes", 1, f"bytes follow the MessagePack object ({_msgspec_says(TRAILING)})"),
    (MAP_KEY, "invalid_map_key", 0, f"a map is used as a map key ({_msgspec_says(MAP_KEY)})"),
    (OPCODE, "invalid_msgpack", 0, f"malformed MessagePack ({_msgspec_says(OPCODE)})"),
]


@pytest.mark.parametrize("payload, kind, at, detail", DETAILS)
def test_payload_errors_say_what_is_wrong_where_and_keep_the_frames_before(payload, kind, at,
                                                                          detail):
    """Each refusal names its rule, says what is wrong (a user reads it in the tap, the CLI and
    the server's error reply), points at the bad frame's payload, and hands back the good
    frame that came before it in the same feed."""
    good = encode_frame(GOOD[0])
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(PayloadError) as info:
        decoder.feed(good + frame(payload))
    err = info.value
    expect(kind, err, PayloadError)
    assert err.detail == detail
    assert err.offset == len(good) + PREFIX_BYTES + at
    assert err.frames == [GOOD[0]]


def test_a_truncated_frame_says_how_many_bytes_it_has_and_needs():
    """At eof the error tells a short prefix (the prefix's own size needed) from a prefix
    whose frame did not all come (prefix and declared payload needed)."""
    whole = encode_frame(GOOD[0])
    for cut, needed in ((PREFIX_BYTES - 1, PREFIX_BYTES), (PREFIX_BYTES, len(whole)),
                        (len(whole) - 1, len(whole))):
        decoder = FrameDecoder(PROFILE)
        assert decoder.feed(whole + whole[:cut]) == [GOOD[0]]
        with pytest.raises(FramingError) as info:
            decoder.eof()
        expect("truncated_frame", info.value, FramingError)
        assert info.value.detail == (f"stream ended with {cut} bytes of an incomplete frame "
                                     f"({needed} needed)")
        assert info.value.frames == [] and info.value.offset == len(whole)


# -- feed_whole: whole frames straight to the decoder, everything else through feed --------------
def _spy_on_feed(decoder: FrameDecoder) -> list:
    """The chunks ``decoder.feed`` is called with from now on."""
    calls: list = []
    real = decoder.feed

    def feed(data=b""):
        calls.append(bytes(data))
        return real(data)

    decoder.feed = feed
    return calls


def test_feed_whole_decodes_a_whole_frame_without_feed():
    """What ``feed_whole`` is for (a proxy's hot path): a whole frame that breaks no rule is
    decoded straight away, not buffered through ``feed``; from a one-byte map to a frame of
    exactly max_frame_bytes, and a long frame whose many container bytes are not nesting."""
    wide = {"a": [[] for _ in range(MAX_DEPTH + 10)]}  # more container bytes than the limit
    frames = [encode_frame(GOOD[0]), frame(b"\x80"), encode_frame(wide)]
    decoder = FrameDecoder(PROFILE)
    calls = _spy_on_feed(decoder)
    assert [decoder.feed_whole(f) for f in frames] == [[GOOD[0]], [{}], [wide]]
    assert calls == []
    assert decoder.offset == sum(map(len, frames)) and decoder.buffered == 0
    exact = encode_frame(GOOD[1])
    at_limit = FrameDecoder(PROFILE, max_frame_bytes=len(exact) - PREFIX_BYTES)
    calls = _spy_on_feed(at_limit)
    assert at_limit.feed_whole(exact) == [GOOD[1]] and calls == []


def test_feed_whole_leaves_every_other_frame_to_feed():
    """Whatever the fast path may not judge goes to ``feed``, whose answer is the verdict:
    bytes already buffered (the frame continues them), a dead decoder, a prefix that does not
    match the frame, a frame over max_frame_bytes, bad MessagePack, nesting too deep."""
    second = encode_frame(GOOD[1])
    # buffered: a prefix declaring len(second) bytes, so `second` is that frame's payload,
    # whose first byte (the prefix's 0) is followed by trailing bytes
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed(prefix(len(second))) == []
    calls = _spy_on_feed(decoder)
    with pytest.raises(PayloadError) as info:
        decoder.feed_whole(second)
    expect("trailing_bytes", info.value, PayloadError)
    assert calls == [second]

    # dead: the close error again
    decoder = FrameDecoder(PROFILE)
    with pytest.raises(FramingError) as closed:
        decoder.feed(prefix(MAX_FRAME + 1))
    with pytest.raises(FramingError) as again:
        decoder.feed_whole(second)
    assert again.value is closed.value

    # a prefix declaring one byte more than the frame holds: feed waits for it
    payload = msgspec.msgpack.encode(GOOD[0])
    short = prefix(len(payload) + 1) + payload
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed_whole(short) == [] and decoder.buffered == len(short)

    # over max_frame_bytes
    decoder = FrameDecoder(PROFILE, max_frame_bytes=len(payload) - 1)
    with pytest.raises(FramingError) as info:
        decoder.feed_whole(frame(payload))
    expect("frame_too_large", info.value, FramingError)

    for bad, kind in ((b"\xc1", "invalid_msgpack"), (nested(MAX_DEPTH + 1), "too_deep"),
                      (b"", "empty_frame")):
        decoder = FrameDecoder(PROFILE)
        with pytest.raises(PayloadError) as info:
            decoder.feed_whole(frame(bad))
        expect(kind, info.value, PayloadError)
        assert info.value.offset == PREFIX_BYTES

    # shorter than a prefix: buffered
    decoder = FrameDecoder(PROFILE)
    assert decoder.feed_whole(second[:PREFIX_BYTES - 1]) == []
    assert decoder.buffered == PREFIX_BYTES - 1


def test_nests_too_deep_judges_what_a_server_would_read():
    """A sender's check before it writes (BQ-MSGPACK-3): the depth of the payload as a server
    reads it back, the top-level map being level 1; a payload msgspec cannot read back for
    its depth is too deep; one with an extension msgspec refuses is judged on the object."""
    def check(obj: Any, limit: int = 3) -> bool:
        return nests_too_deep(msgspec.msgpack.encode(obj), obj, limit)

    assert check({}) is False
    assert check({"a": [[]]}) is False
    assert check({"a": [[[]]]}) is True
    assert check({"a": [[], [], [], []], "b": {}}) is False  # many containers, none deep
    assert check({"a": [[], [[[]]]]}) is True
    deep = b"\x81\xa1a" + b"\x91" * 10_000 + b"\x90"
    assert nests_too_deep(deep, {}, MAX_DEPTH) is True
    # 1500 levels (more than msgspec reads back) and 500 more arrays beside them: with a limit
    # of as many as its container bytes, the count alone proves the depth within the limit
    wide_and_deep = (b"\x82\xa1a" + b"\x91" * 1498 + b"\x90"
                     + b"\xa1b\xdc" + (499).to_bytes(2, "big") + b"\x90" * 499)
    assert nests_too_deep(wide_and_deep, {}, 2000) is False
    bad_stamp = msgspec.msgpack.Ext(MODEL.timestamp_ext, b"abc")  # 3 bytes: not a timestamp
    assert check({"t": bad_stamp, "a": [], "b": [], "c": [[]]}) is False
    assert check({"t": bad_stamp, "a": [], "b": [], "c": [[[]]]}) is True


# -- the encoder -----------------------------------------------------------------------------
def test_encoder_errors_say_what_cannot_be_written():
    """An encode error tells the caller which value it could not write."""
    enc = FrameEncoder(PROFILE)
    with pytest.raises(EncodeError) as info:
        enc.payload({"v": object()})
    expect("encode_error", info.value, EncodeError)
    assert info.value.detail == "cannot encode object"
    numbers = PROFILE.tree["msgpack"]["numbers"]["requirement"]
    for value in (2**63, -(2**63)):
        with pytest.raises(EncodeError) as info:
            enc.payload({"v": [value]})
        assert info.value.detail == f"integer {value} is beyond float64's exact range ({numbers})"
    # an extension the encoder would have to read back (to rewrite a wide integer) and cannot
    msg = {"t": msgspec.msgpack.Ext(MODEL.timestamp_ext, b"abc"), "n": 2**40}
    with pytest.raises(EncodeError) as info:
        enc.payload(msg)
    expect("encode_error", info.value, EncodeError)
    assert info.value.detail == _msgspec_says(msgspec.msgpack.encode(msg))


def test_a_server_encoder_writes_wide_integers_as_they_came():
    """``wide_integers=True`` (a server echoing a client's reqId or job data, BQ-MSGPACK-8)
    writes an integer float64 cannot hold as the 64-bit integer it came as; the default
    refuses it."""
    server = FrameEncoder(PROFILE, wide_integers=True)
    assert server.payload({"v": 2**63}) == b"\x81\xa1v\xcf" + struct.pack(">Q", 2**63)
    assert server.payload({"v": -(2**63)}) == b"\x81\xa1v\xd3" + struct.pack(">q", -(2**63))
    assert server.payload({"v": 2**40}) == b"\x81\xa1v\xcb" + struct.pack(">d", 2**40)
    with pytest.raises(EncodeError):
        FrameEncoder(PROFILE).payload({"v": 2**63})


def test_integers_at_the_32_bit_bounds_stay_integers_in_a_message_that_is_rewritten():
    """Only integers beyond int32/uint32 become float64: in a message the encoder rewrites
    (it holds 2**40), -2**31 and 2**32-1 are still written as integers."""
    msg = {"lo": -(2**31), "hi": 2**32 - 1, "w": 2**40, "k": [-(2**31) - 1, 2**32]}
    expected = {"lo": -(2**31), "hi": 2**32 - 1, "w": float(2**40),
                "k": [float(-(2**31) - 1), float(2**32)]}
    assert FrameEncoder(PROFILE).payload(msg) == msgspec.msgpack.encode(expected)


def test_undefined_does_not_send_a_message_down_the_walk():
    """A reply with ``reqId: undefined`` (as bunqueue sends them) and float timestamps whose
    bytes hold a 64-bit integer marker is written without the Python walk, like one without
    ``undefined``."""
    enc = FrameEncoder(PROFILE)
    walks = []
    exact = enc._floatify
    enc._floatify = lambda obj: walks.append(1) or exact(obj)
    stamps = [float(1767225600000 + i) for i in range(4096)]
    hit = next(t for t in stamps if b"\xcf" in struct.pack(">d", t))
    msg = {"ok": True, "time": hit, "reqId": UNDEFINED}
    assert enc.payload(msg) == b"\x83\xa2ok\xc3\xa4time\xcb" + struct.pack(">d", hit) + (
        b"\xa5reqId" + UNDEFINED_BYTES)
    assert walks == []


# -- nesting read from the bytes (payload_nests_deeper) ----------------------------------------
_scalars = st.one_of(st.none(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                     st.text(max_size=6), st.binary(max_size=6),
                     st.sampled_from(["\x80\x90\xdc", b"\x80\x9f\xde\xdf"]))  # marker bytes
_nested = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=60)


@settings(max_examples=400, deadline=None)
@given(value=_nested, limit=st.integers(0, 12))
def test_nesting_read_from_the_bytes_agrees_with_the_walk(value: Any, limit: int) -> None:
    """BQ-MSGPACK-3 the sender checks from its payload's bytes a level at a time (strings and
    binaries full of container marker bytes included) and answers as the walk over the
    decoded value does."""
    message = {"top": value}
    assert payload_nests_deeper(msgspec.msgpack.encode(message), limit) \
        == depth_exceeds(message, limit)


def test_a_wide_push_is_read_a_level_at_a_time_and_a_deep_one_is_caught() -> None:
    entries = [{"name": "e", "data": {"n": i, "tags": ["a", {"b": [1]}]}} for i in range(2_000)]
    wide = msgspec.msgpack.encode({"cmd": "PUSHB", "queue": "q", "jobs": entries})
    # 7 levels: the message, jobs, an entry, its data, tags, {"b": ...}, [1]
    assert payload_nests_deeper(wide, 7) is False
    assert payload_nests_deeper(wide, 6) is True
    deep: Any = 1
    for _ in range(300):
        deep = {"x": [deep]}
    assert payload_nests_deeper(msgspec.msgpack.encode(deep), 256) is True


_I32 = (-2**31, 2**32 - 1)  # int32 .. uint32: written as integers; beyond: float64
_wide_values = st.recursive(
    st.one_of(st.integers(-2**53 + 1, 2**53 - 1), st.floats(allow_nan=False, allow_infinity=False),
              st.sampled_from([2**32, 2**32 - 1, -2**31, -2**31 - 1, 9_999_999_999, 10**10,
                               -9_999_999_999, 1_764_000_000_000]),  # the 32-bit and 10-digit edges
              st.text(alphabet="0123456789.eE-x", max_size=14)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=3), inner, max_size=4)),
    max_leaves=30)


def _as_sent(value: Any) -> Any:
    if type(value) is int and not _I32[0] <= value <= _I32[1]:
        return float(value)
    if type(value) is list:
        return [_as_sent(v) for v in value]
    if type(value) is dict:
        return {k: _as_sent(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(value=_wide_values)
def test_every_integer_beyond_32_bits_is_written_as_float64(value: Any) -> None:
    """BQ-MSGPACK-7 whatever the message: the encoder's cheap tests (64-bit markers in the
    bytes, ten digits in a row in the JSON text, then the token regex) never let a wide
    integer through as an integer, digits in strings and floats' digits included."""
    message = {"cmd": "PUSH", "data": value}
    sent = msgspec.msgpack.decode(FrameEncoder(PROFILE).payload(message))
    assert sent == _as_sent(message)
    assert [type(x) for x in _leaves(sent)] == [type(x) for x in _leaves(_as_sent(message))]


def _leaves(value: Any) -> list:
    if type(value) is list:
        return [x for v in value for x in _leaves(v)]
    if type(value) is dict:
        return [x for v in value.values() for x in _leaves(v)]
    return [value]
