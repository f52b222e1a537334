"""The fused request decoder (``RequestDecoder.feed_checked``) against the general path
(``FrameDecoder.feed`` then ``BunqueueValidator.request_is_valid``): same messages, same
verdicts, same errors at the same offsets, same decoder state, on every vector and on random
valid, mutated and broken streams cut at random places. Also: the pattern translation
against jsonschema-rs, and the JSON size bound that lets the fast path skip measuring.

Nothing here restates the spec: commands, schemas and limits come from the loaded profile.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from queuewire.codecs.bunqueue_typed import (
    JSON_BYTES_PER_BYTE,
    RequestDecoder,
    char_class,
    for_validator,
)
from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.validation import BunqueueValidator, json_size
from queuewire.fuzz.strategies import bunqueue_strategies
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

PROFILE = load_profile("bunqueue/v2")
VALIDATOR = BunqueueValidator(PROFILE)
TYPED = for_validator(VALIDATOR)
ENCODE = FrameEncoder(PROFILE, wide_integers=True)
VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "bunqueue" / "bunqueue_v2.json"
RAW = msgspec.msgpack.Encoder(
    enc_hook=lambda o: msgspec.msgpack.Ext(*PROFILE.model.undefined_ext)).encode


def _value(v: Any) -> str:
    return repr(v)  # tells 1 from 1.0 and True, shows key order, and nan equals nan


def _error(exc: ProtocolError) -> tuple:
    return (type(exc).__name__, exc.kind, exc.requirement, exc.reaction, exc.detail,
            exc.offset, exc.path)


def general(data: bytes, cuts: list[int], eof: bool = True) -> list:
    """What a server reading with FrameDecoder.feed and request_is_valid sees, call by call."""
    dec = FrameDecoder(PROFILE)
    return _drive(dec, dec.feed, lambda msgs: [(m, VALIDATOR.request_is_valid(m))
                                                for m in msgs], data, cuts, eof)


def fused(data: bytes, cuts: list[int], eof: bool = True) -> list:
    dec = RequestDecoder(PROFILE, validator=VALIDATOR)
    return _drive(dec, dec.feed_checked, lambda pairs: pairs, data, cuts, eof)


def _drive(dec: Any, feed: Any, pairs: Any, data: bytes, cuts: list[int], eof: bool) -> list:
    log: list = []
    pieces = [data[i:j] for i, j in zip([0, *cuts], [*cuts, len(data)])]
    for piece in pieces:
        chunk = piece
        while True:
            try:
                got = pairs(feed(chunk))
            except ProtocolError as exc:
                log.append(("error", _error(exc),
                            [(_value(m), ok) for m, ok in pairs(exc.frames)],
                            dec.offset, dec.buffered))
                if exc.reaction == "close":
                    return log
                chunk = b""  # a reply error consumed its frame: read on
                continue
            log.append(([(_value(m), ok) for m, ok in got], dec.offset, dec.buffered))
            break
    if eof:
        try:
            dec.eof()
        except ProtocolError as exc:
            log.append(("eof", _error(exc)))
    return log


def assert_same(data: bytes, cuts: list[int] = (), eof: bool = True) -> list:
    want = general(data, list(cuts), eof)
    assert fused(data, list(cuts), eof) == want
    return want


# -- the vectors --------------------------------------------------------------------------------
def _vectors() -> list[dict]:
    return [v for v in json.loads(VECTORS.read_text())["vectors"]
            if v["kind"] == "stream" or v.get("direction") == "request"]


@pytest.mark.parametrize("vec", _vectors(), ids=lambda v: v["id"])
def test_vectors_agree(vec):
    if "hex" in vec:
        data = bytes.fromhex(vec["hex"])
    else:  # a request given as a value: the frame a client would send
        from queuewire.vectors.bunqueue import from_json
        data = ENCODE.encode(from_json(vec["value"]))
    assert_same(data, eof=vec.get("eof", True))
    cuts = sorted({1, 3, 4, 5, 7, len(data) // 2, len(data) - 1} - {0, len(data)})
    assert_same(data, [c for c in cuts if 0 < c < len(data)], eof=vec.get("eof", True))


# -- every command, valid and at the edges ------------------------------------------------------
@pytest.mark.parametrize("cmd", sorted(PROFILE.model.commands))
def test_minimal_request_of_every_command_agrees_and_takes_the_fast_path(cmd):
    msg = minimal(dict(PROFILE.model.commands[cmd].request))
    msg.pop("cmd", None)
    frame = ENCODE.encode({"cmd": cmd, **msg})
    assert_same(frame)
    if cmd not in TYPED.skipped and VALIDATOR.request_is_valid({"cmd": cmd, **msg}):
        # the fast path answered (not the general path): no validator call needed
        dec = RequestDecoder(PROFILE, validator=_Refusing())
        assert dec.feed_checked(frame) == [(FrameDecoder(PROFILE).feed(frame)[0], True)]


class _Refusing(BunqueueValidator):
    """A validator whose general path must not be reached."""

    def __init__(self) -> None:
        self.__dict__.update(VALIDATOR.__dict__)

    def request_is_valid(self, msg: Any) -> bool:
        raise AssertionError("general path taken")


def test_typed_checks_cover_the_request_schemas():
    # the commands left to the general path say why; they must stay the exception
    assert len(TYPED.skipped) <= len(PROFILE.model.commands) // 10, TYPED.skipped


BQ = bunqueue_strategies(PROFILE.name)


@pytest.mark.parametrize("beyond", [False, True])
def test_every_bound_at_and_beyond_agrees(beyond):
    for cmd, bounded in BQ.boundary_pairs():
        msg, _ = BQ.boundary_value(cmd, bounded, beyond)
        assert_same(BQ.encoder.encode(msg))


# -- random streams -----------------------------------------------------------------------------
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(case=BQ.case_strategy(seed=15), data=st.data())
def test_random_streams_agree(case, data):
    stream = case.stream
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)),
                                         max_size=4)))) if len(stream) > 1 else []
    assert_same(stream, cuts, eof=case.close)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(msg=BQ.valid().strategy, data=st.data())
def test_random_valid_requests_agree(msg, data):
    changes = data.draw(st.dictionaries(
        st.sampled_from([*msg, "reqId", "x"]),
        st.one_of(st.just(UNDEFINED), st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                  st.floats(), st.text(max_size=4), st.binary(max_size=3),
                  st.lists(st.text(max_size=2), max_size=2)),
        max_size=2))
    assert_same(ENCODE.encode(msg) if not changes else _frame({**msg, **changes}))


def _frame(msg: Any) -> bytes:
    try:
        return ENCODE.encode(msg)
    except ProtocolError:
        payload = RAW(msg)
        return ENCODE.prefix(len(payload)) + payload


@pytest.mark.parametrize("payload", [
    b"\x83\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\xd4\x00\x00",   # data undefined
    b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x01\xa3ttl\xd4\x00\x00",  # optional undefined
    b"\x83\xa3cmd\xa4PUSH\xa5queue\xa2q\n\xa4data\x01",      # "$" is not before a newline
    b"\x83\xa3cmd\xa4PUSH\xa5queue\xa2q\xc3\xa4data\x01",    # invalid UTF-8 in the name
    b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x01\xa5queue\xa1!",  # duplicate key
    b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x01\x05\x06",  # int key
    b"\x83\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x81\xc2\x01",  # {false: 1} in data
    b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x01\xa8priority\xcb\x40\x14\x00\x00\x00\x00"
    b"\x00\x00",                                             # priority 5.0
    b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x01\xa6repeat\x81\xa5every\x01",  # nested
    b"\x83\xa3cmd\xa5PUSHB\xa5queue\xa1q\xa4jobs\x91\x82\xa4data\x01\xa1x\x02",  # job extra
    b"\x83\xa3cmd\xa5PUSHB\xa5queue\xa1q\xa4jobs\x91\x81\xa4data\xd4\x00\x00",  # job undefined
    b"\x82\xa3cmd\xa3ACK\xa2id\xa1j",                         # the happy path
    b"\x82\xa2id\xa1j\xa3cmd\xa3ACK",                         # cmd not first
    b"\x81\xa3cmd\xa3ACK",                                    # required field missing
    b"\x82\xa3cmd\xa3ACK\xa2id\xc4\x01j",                     # bin where a str is required
    b"\x82\xa3cmd\xa3ACK\xa2id\xa1j\x00",                     # trailing byte
    b"\x92\xa3cmd\xa3ACK",                                    # not a map
    b"\x82\xa3cmd\xa8Progress\xa8progress\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN
    b"\x82\xa3cmd\xa8Progress\xa8progress\xcb\x40\x49\x00\x00\x00\x00\x00\x00",  # 50.0
])
def test_hand_written_frames_agree(payload):
    assert_same(ENCODE.prefix(len(payload)) + payload)


def test_deep_frame_after_good_ones_keeps_the_pairs():
    depth = PROFILE.model.max_nesting_depth
    deep: Any = 1
    for _ in range(depth + 2):
        deep = [deep]
    good = ENCODE.encode({"cmd": "Ping"})
    bad = _frame({"cmd": "PUSH", "queue": "q", "data": deep})
    log = assert_same(good + bad + good)
    assert log[0][0] == "error" and log[0][2] == [(_value({"cmd": "Ping"}), True)]


def test_large_job_data_is_measured_by_the_general_path():
    (path, limit, _), *_ = VALIDATOR.request_size_checks("PUSH")
    assert path == ("data",)
    for size in (limit // JSON_BYTES_PER_BYTE, limit - 10, limit + 10):
        assert_same(ENCODE.encode({"cmd": "PUSH", "queue": "q", "data": "x" * size}))


# -- the pieces ---------------------------------------------------------------------------------
def _patterns() -> set[str]:
    found = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            for k, v in node.items():
                if not k.startswith("x-"):  # x-keywordRequirements names a "pattern" too
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for command in PROFILE.model.commands.values():
        walk(json.loads(json.dumps(command.request, default=dict)))
    return found


@pytest.mark.parametrize("pattern", sorted(_patterns()))
@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.one_of(st.text(max_size=6), st.text("azAZ09_-.:\n \\^[]é", max_size=6)))
def test_char_class_matches_like_the_schema(pattern, text):
    translated = char_class(pattern)
    assert translated is not None, pattern
    chars, non_empty = translated
    ours = not (non_empty and not text) and not text.strip(chars)
    theirs = jsonschema_rs.validator_for({"type": "string", "pattern": pattern}).is_valid(text)
    assert ours == theirs, (pattern, text)


@pytest.mark.parametrize("pattern", ["^[a-z]+", "[a-z]+$", "^[\\d]+$", "^[^a]+$", "^a+$",
                                     "^[a-z]{2}$", "^[é]+$", "^[A-z]+$"])
def test_char_class_refuses_what_it_cannot_translate(pattern):
    assert char_class(pattern) is None


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(width=32),
              st.floats(), st.text(st.characters(max_codepoint=0x1F), max_size=4), st.text(),
              st.binary(max_size=4), st.just(UNDEFINED)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.none(), st.booleans(), st.integers(-40, 200),
                                  st.text(st.characters(max_codepoint=0x1F), max_size=3),
                                  st.floats(width=32), st.binary(max_size=2)),
                        inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(value=JSONISH)
def test_json_size_bound(value):
    """The bound the fast path relies on, with half its margin: JSON bytes per byte."""
    payload = RAW(value)
    try:
        decoded = PLAIN(payload)
    except (msgspec.DecodeError, ValueError):  # e.g. a map keyed by a map: refused anyway
        return
    assert json_size(decoded) <= JSON_BYTES_PER_BYTE // 2 * len(payload)


PLAIN = FrameDecoder(PROFILE)._decode
