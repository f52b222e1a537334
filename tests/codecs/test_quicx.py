"""The quicx codec: round trips of every message built from the layouts (hypothesis),
segmentation invariance, every language-neutral vector, the differences between profiles,
hostile input (a claimed 4 GiB frame, truncation) and the encoder's refusals. Expected values
are read from the profile, never restated here."""

from __future__ import annotations

import dataclasses
import itertools
import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.errors import (
    EncodeError,
    FramingError,
    MessageError,
    PayloadError,
    ProtocolError,
)
from queuewire.codecs.quicx import (
    Message,
    QuicxDecoder,
    QuicxEncoder,
    allowed,
    decode,
    encode,
)
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import DAEMON, MessageType, QuicxSpec
from queuewire.vectors import file_name
from queuewire.vectors.quicx import check_vector, document, render

ROOT = Path(__file__).resolve().parents[2]
VECTOR_DIR = ROOT / "vectors" / "quicx"
PROFILES = profile_names("quicx")
BASE, OVERLAY = "quicx/v1", "quicx/1.0.3"
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def model(name: str) -> QuicxSpec:
    return load_profile(name).model


def sendable(name: str) -> list[MessageType]:
    spec = model(name)
    return [m for m in spec.messages.values() if spec.allowed(m.name)]


def run(profile, role, chunks) -> list[tuple]:
    """Feed ``chunks`` as a daemon would: go on after ``reply`` errors, stop at ``close``.
    The outcome is a list of ('frame', name, fields, offset) and ('error', kind, offset)."""
    dec = QuicxDecoder(profile, role)
    out: list[tuple] = []

    def frames(msgs):
        out.extend(("frame", m.name, m.fields, m.offset) for m in msgs)

    for chunk in [*chunks, None]:
        data = chunk
        while True:
            try:
                if data is None:
                    dec.eof()
                else:
                    frames(dec.feed(data))
                break
            except ProtocolError as exc:
                frames(exc.frames)
                out.append(("error", exc.kind, exc.offset))
                if exc.reaction != "reply":
                    return out
                data = b""
    return out


# ------------------------------------------------------------------- layout-driven strategies

def field_strategies(spec: QuicxSpec, msg: MessageType) -> st.SearchStrategy[dict]:
    """Values for every field of ``msg`` the encoder does not compute, within the profile's
    limits: integers over their width, text and bytes within max-size and the payload cap."""
    computed = {f.size for f in msg.layout if isinstance(f.size, str)}
    cap = min(spec.max_payload_bytes or 4096, 4096)
    sized = {f.id: min(f.max_bytes if f.max_bytes is not None else 1 << 30,
                       next(x for x in msg.layout if x.id == f.size).max_value)
             for f in msg.layout if isinstance(f.size, str)}
    budget = cap - msg.min_size - sum(sized.values())
    parts = {}
    for f in msg.layout:
        if f.id in computed:
            continue
        if f.is_int:
            parts[f.id] = st.integers(0, f.max_value)
            continue
        bound = sized.get(f.id) if isinstance(f.size, str) else f.size
        if f.size_eos:
            bound = budget if f.max_bytes is None else min(budget, f.max_bytes)
        if f.type == "str":
            parts[f.id] = st.text(max_size=bound // 4) | st.text(st.characters(max_codepoint=127),
                                                                  max_size=bound)
        elif isinstance(f.size, int):
            parts[f.id] = st.binary(min_size=f.size, max_size=f.size)
        else:
            parts[f.id] = st.binary(max_size=bound)
    return st.fixed_dictionaries(parts)


CASES = [(p, m.name, d) for p in PROFILES for m in sendable(p) for d in sorted(m.directions)]


@pytest.mark.parametrize("profile,name,direction", CASES, ids=[f"{p}:{n}:{s}->{r}" for p, n, (s, r) in CASES])
@SETTINGS
@given(data=st.data())
def test_round_trip_every_message(profile, name, direction, data):
    spec = model(profile)
    msg = spec.message(name)
    sender, receiver = direction
    fields = data.draw(field_strategies(spec, msg))
    frame = QuicxEncoder(profile, role=sender).encode(name, **fields)
    (got,) = decode(profile, frame, role=receiver)
    assert got.name == name and got.code == msg.code and got.offset == 0 and got.raw == frame
    assert {k: v for k, v in got.fields.items() if k in fields} == fields
    assert QuicxEncoder(profile).encode(name, **{k: got.fields[k] for k in fields}) == frame
    assert QuicxEncoder(profile).encode(name, **got.fields) == frame  # len_* fields agree


# ------------------------------------------------------------------------ segmentation

def _bad_frames(profile: str) -> list[bytes]:
    """Malformed frames a daemon answers and skips (reaction reply)."""
    spec, enc = model(profile), QuicxEncoder(profile)
    done, ready = spec.message("MSG_DONE"), spec.message("MSG_READY")
    bad = [
        enc.frame(ready.code, version=max(spec.accepted_versions) + 1),
        enc.frame(max(spec.by_code) + 1, b"xyz"),
        enc.frame(done.code, bytes(done.fixed_size + 1)),
        enc.frame(ready.code, b"\x00\x01"),
        enc.frame(spec.message("MSG_SUBMIT").code, b"\x05ab"),
    ]
    if spec.max_payload_bytes is not None and spec.max_payload_bytes < 4096:
        bad.append(enc.frame(spec.message("MSG_SUBMIT").code, bytes(spec.max_payload_bytes + 1)))
    return bad


@st.composite
def daemon_streams(draw, profile: str) -> bytes:
    spec = model(profile)
    inbound = [m for m in sendable(profile) if m.allows(receiver=DAEMON)]
    bad = _bad_frames(profile)
    parts = []
    for _ in range(draw(st.integers(1, 8))):
        if bad and draw(st.integers(0, 4)) == 0:
            parts.append(draw(st.sampled_from(bad)))
        else:
            msg = draw(st.sampled_from(inbound))
            fields = draw(field_strategies(spec, msg))
            parts.append(QuicxEncoder(profile).encode(msg.name, **fields))
    stream = b"".join(parts)
    if draw(st.booleans()):  # end inside a frame now and then
        stream = stream[: draw(st.integers(0, len(stream)))]
    return stream


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_segmentation_invariance(profile, data):
    stream = data.draw(daemon_streams(profile))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    whole = run(profile, DAEMON, [stream])
    assert run(profile, DAEMON, chunks) == whole
    assert run(profile, DAEMON, [stream[i:i + 1] for i in range(len(stream))]) == whole
    offsets = [o[3] for o in whole if o[0] == "frame"]
    assert offsets == sorted(offsets)


def test_frames_before_an_error_ride_on_the_exception():
    enc = QuicxEncoder(BASE)
    spec = model(BASE)
    good = enc.ready() + enc.done(7)
    bad = enc.frame(spec.message("MSG_DONE").code, b"\x00\x00\x07")
    dec = QuicxDecoder(BASE, DAEMON)
    with pytest.raises(FramingError) as info:
        dec.feed(good + bad + enc.heartbeat())
    exc = info.value
    assert [m.name for m in exc.frames] == ["MSG_READY", "MSG_DONE"]
    assert exc.kind == "done_body_size" and exc.offset == len(good) + spec.header_offsets["len_payload"]
    assert exc.requirement == spec.error("done_body_size").requirement
    assert exc.reaction == "reply" and exc.error_code == spec.error_replies["done_body_size"]
    (hb,) = dec.feed(b"")  # the bad frame was skipped; decoding resumes on buffered bytes
    assert hb.name == "MSG_HEARTBEAT" and hb.offset == len(good + bad)


# ----------------------------------------------------------------------------- vectors

def _vectors() -> list[dict]:
    out = []
    for path in sorted(VECTOR_DIR.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["protocol"] == "quicx" and all(v["profile"] == doc["profile"] for v in doc["vectors"])
        out += doc["vectors"]
    return out


VECTORS = _vectors()


def test_vector_files_cover_every_profile():
    assert {VECTOR_DIR / file_name(p) for p in PROFILES} <= set(VECTOR_DIR.glob("*.json"))


@pytest.mark.parametrize("name", PROFILES)
def test_vector_files_are_current_and_deterministic(name):
    text = render(document(name))
    assert text == render(document(name))
    assert (VECTOR_DIR / file_name(name)).read_text(encoding="utf-8") == text, \
        "stale vectors: run queuewire vectors generate"


@pytest.mark.parametrize("vec", VECTORS, ids=[v["id"] for v in VECTORS])
def test_vector(vec):
    data = bytes.fromhex(vec["hex"])
    dec = QuicxDecoder(vec["profile"], vec["role"])
    if "decoded" in vec:
        frames = dec.feed(data)
        dec.eof()
        assert len(frames) == 1
        assert frames[0].as_dict() == vec["decoded"]
        return
    frames = []
    with pytest.raises(ProtocolError) as info:
        frames += dec.feed(data)
        dec.eof()
    exc = info.value
    got = {"kind": exc.kind, "requirement": exc.requirement, "reaction": exc.reaction,
           "error_code": exc.error_code, "offset": exc.offset}
    assert got == vec["error"]
    assert len(frames + exc.frames) == vec["frames_before"]
    assert exc.requirement in load_profile(vec["profile"]).requirements


def test_check_vector_reports_mismatches():
    vec = next(v for v in VECTORS if "error" in v)
    assert check_vector(load_profile(vec["profile"]), vec) is None
    wrong = dict(vec, error=dict(vec["error"], offset=vec["error"]["offset"] + 1))
    assert "expected" in check_vector(load_profile(vec["profile"]), wrong)
    pos = next(v for v in VECTORS if "decoded" in v)
    assert check_vector(load_profile(pos["profile"]), pos) is None
    assert check_vector(load_profile(pos["profile"]), dict(pos, hex=pos["hex"][:-2])) is not None


def test_vectors_cover_the_briefed_cases():
    kinds = {(v["profile"], v["error"]["kind"]) for v in VECTORS if "error" in v}
    for p in PROFILES:
        for kind in ("bad_version", "unknown_type", "payload_forbidden", "payload_required",
                     "done_body_size", "submit_type_len", "truncated", "wrong_direction"):
            assert (p, kind) in kinds
    assert {(OVERLAY, k) for k in ("reason_too_long", "payload_too_large", "reserved_type",
                                   "not_on_tcp", "inbound_error")} <= kinds
    ids = {v["id"] for v in VECTORS}
    cap = model(OVERLAY).max_payload_bytes
    assert {f"{OVERLAY}/max_payload_bytes/{n}" for n in (cap - 1, cap, cap + 1)} <= ids
    positives = {(v["profile"], v["decoded"]["type"]) for v in VECTORS if "decoded" in v}
    for p in PROFILES:
        assert {(p, m.name) for m in sendable(p)} <= positives


# ------------------------------------------------------------------ profile differences

def test_renumbered_opcodes_between_profiles():
    v1, v103 = model(BASE), model(OVERLAY)
    task_v1 = QuicxEncoder(BASE).task(1, "t", b"p")
    with pytest.raises(MessageError) as info:  # a v1 TASK is a worker-to-daemon DONE in 1.0.3
        decode(OVERLAY, task_v1, role="worker")
    assert info.value.kind == "wrong_direction"
    (done,) = decode(OVERLAY, QuicxEncoder(OVERLAY).done(9), role=DAEMON)
    assert done.name == "MSG_DONE" and done.code == v103.message("MSG_DONE").code
    (misread,) = decode(OVERLAY, QuicxEncoder(BASE).done(9), role=DAEMON)
    assert misread.name == "MSG_FAILED" and misread.fields == {"task_id": 9, "reason": ""}
    assert v1.message("MSG_DONE").code != v103.message("MSG_DONE").code


def test_results_are_forwarded_to_the_producer_only_in_1_0_3():
    frame = QuicxEncoder(OVERLAY).failed(3, "boom")
    (msg,) = decode(OVERLAY, frame, role="producer")
    assert msg.fields["reason"] == "boom"
    assert allowed(OVERLAY, "MSG_DONE", DAEMON, "producer")
    assert not allowed(BASE, "MSG_DONE", DAEMON, "producer")


def test_wait_is_reserved_in_1_0_3():
    spec = model(OVERLAY)
    wait = spec.message("MSG_WAIT")
    with pytest.raises(EncodeError):
        QuicxEncoder(OVERLAY).wait()
    with pytest.raises(MessageError) as info:
        decode(OVERLAY, QuicxEncoder(OVERLAY).frame(wait.code), role=DAEMON)
    exc = info.value
    assert exc.kind == "reserved_type" and exc.reaction == "reply"
    assert exc.error_code == spec.error_replies["reserved_type"] == spec.error_code("UNKNOWN_TASK_TYPE")
    assert exc.requirement == wait.requirement
    (msg,) = decode(BASE, QuicxEncoder(BASE).wait(), role="worker")
    assert msg.name == "MSG_WAIT"


def test_heartbeat_and_stats_directions_per_profile():
    assert allowed(BASE, "MSG_HEARTBEAT", DAEMON, "worker")
    assert not allowed(OVERLAY, "MSG_HEARTBEAT", DAEMON, "worker")
    assert allowed(OVERLAY, "MSG_HEARTBEAT", "worker", DAEMON)
    assert allowed(BASE, "MSG_STATS", "monitor", DAEMON)
    assert not allowed(OVERLAY, "MSG_STATS", "monitor", DAEMON)
    with pytest.raises(MessageError) as info:
        decode(OVERLAY, QuicxEncoder(BASE).stats(), role=DAEMON)
    assert info.value.kind == "not_on_tcp"


def test_inbound_error_closes_in_1_0_3_and_is_answered_in_v1():
    for name in PROFILES:
        spec = model(name)
        frame = QuicxEncoder(name).error("QUEUE_FULL", "x")
        dec = QuicxDecoder(name, DAEMON)
        with pytest.raises(MessageError) as info:
            dec.feed(frame)
        closes = spec.flag("inbound_error_closes")
        assert (info.value.reaction == "close") == closes
        if closes:  # the decoder stays failed
            assert dec.failed is not None
            with pytest.raises(MessageError):
                dec.feed(QuicxEncoder(name).ready())
        else:
            assert info.value.error_code == spec.error_replies[info.value.kind]
            assert [m.name for m in dec.feed(QuicxEncoder(name).ready())] == ["MSG_READY"]


# ------------------------------------------------------------------------ hostile input

def test_claimed_4gib_frame_allocates_nothing():
    for name in PROFILES:
        spec = model(name)
        enc = QuicxEncoder(name)
        submit = spec.message("MSG_SUBMIT")
        width = {f.id: f for f in spec.header}["len_payload"].max_value
        header = enc.frame(submit.code, length=width)
        dec = QuicxDecoder(name, DAEMON)
        tracemalloc.start()
        try:
            if spec.max_payload_bytes is not None and width > spec.max_payload_bytes:
                with pytest.raises(FramingError) as info:
                    dec.feed(header)
                exc = info.value
                assert exc.kind == "payload_too_large"
                assert exc.offset == spec.header_offsets["len_payload"]
                assert exc.error_code == spec.error_replies["payload_too_large"]
                assert exc.requirement == spec.error("payload_too_large").requirement
                assert dec.feed(bytes(1 << 16)) == [] and dec.buffered == 0  # skipped, not kept
            else:
                assert dec.feed(header) == [] and dec.buffered == spec.header_size
                assert dec.feed(bytes(1000)) == [] and dec.buffered == spec.header_size + 1000
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20
        with pytest.raises(FramingError) as info:
            dec.eof()
        assert info.value.kind == "truncated" and info.value.offset == 0


def test_local_payload_cap_in_v1():
    spec = model(BASE)
    dec = QuicxDecoder(BASE, DAEMON, max_payload=16)
    with pytest.raises(FramingError) as info:
        dec.feed(QuicxEncoder(BASE).submit("t", bytes(16)))
    assert info.value.kind == "payload_too_large"
    assert info.value.error_code == spec.error_replies["payload_too_large"]


@pytest.mark.parametrize("cut", [1, 5, 6, 7, 12])
def test_truncated_frames(cut):
    frame = QuicxEncoder(BASE).submit("send_email", b"{}")
    prefix = QuicxEncoder(BASE).heartbeat()
    dec = QuicxDecoder(BASE, DAEMON)
    assert [m.name for m in dec.feed(prefix + frame[:cut])] == ["MSG_HEARTBEAT"]
    with pytest.raises(FramingError) as info:
        dec.eof()
    exc = info.value
    assert exc.kind == "truncated" and exc.reaction == "close" and exc.offset == len(prefix)
    assert exc.requirement == model(BASE).error("truncated").requirement
    with pytest.raises(FramingError):
        dec.feed(b"")
    assert exc.as_dict()["error_code"] is None


def test_type_len_past_the_frame():
    spec = model(BASE)
    submit = spec.message("MSG_SUBMIT")
    payload = bytes([200]) + b"abc"
    with pytest.raises(PayloadError) as info:
        decode(BASE, QuicxEncoder(BASE).frame(submit.code, payload))
    exc = info.value
    assert exc.kind == "submit_type_len" and exc.offset == spec.header_size + submit.offsets["len_type"]


def test_client_side_errors_close():
    spec = model(BASE)
    bad_ok = QuicxEncoder(BASE).frame(spec.message("MSG_OK").code, b"\x00")
    with pytest.raises(FramingError) as info:
        decode(BASE, bad_ok, role="producer")
    assert info.value.reaction == spec.flag("client_error_reaction")
    assert info.value.error_code is None


def test_error_reply_round_trip():
    spec = model(BASE)
    enc = QuicxEncoder(BASE)
    with pytest.raises(ProtocolError) as info:
        decode(BASE, enc.frame(spec.message("MSG_READY").code, version=0))
    reply = enc.error_for(info.value)
    (msg,) = decode(BASE, reply, role="worker")
    assert msg.name == "MSG_ERROR" and msg.fields["error_code"] == info.value.error_code
    assert spec.error_names[msg.fields["error_code"]] == info.value.error_name


# ------------------------------------------------------------------------------ encoder

@pytest.mark.parametrize("profile", PROFILES)
def test_encoder_refusals(profile):
    spec = model(profile)
    enc = QuicxEncoder(profile)
    cases = [
        lambda: enc.submit("x" * (profile_limit(profile, "task_type_bytes") + 1)),
        lambda: enc.ok(-1),
        lambda: enc.ok(1 << 32),
        lambda: enc.ok(True),
        lambda: enc.encode("MSG_NOPE"),
        lambda: enc.encode("MSG_OK"),
        lambda: enc.encode("MSG_OK", task_id=1, extra=2),
        lambda: enc.encode("MSG_READY", task_id=1),
        lambda: enc.submit(b"bytes-not-text"),
        lambda: enc.encode("MSG_SUBMIT", len_type=3, task_type="ab", payload=b""),
        lambda: enc.frame(0x100),
        lambda: QuicxEncoder(profile, role="worker").submit("t"),
    ]
    reason = profile_limit(profile, "max_reason_bytes")
    if reason is not None:
        cases.append(lambda: enc.failed(1, "r" * (reason + 1)))
    if spec.max_payload_bytes is not None and spec.max_payload_bytes < 1 << 20:
        cases.append(lambda: enc.submit("t", bytes(spec.max_payload_bytes)))
    for case in cases:
        with pytest.raises(EncodeError) as info:
            case()
        assert info.value.kind == "encode_error" and info.value.reaction == "raise"


def profile_limit(profile: str, name: str):
    return load_profile(profile).limits[name].max


def test_message_is_a_frozen_value():
    (msg,) = decode(BASE, encode(BASE, "MSG_OK", task_id=5), role="producer")
    assert isinstance(msg, Message)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.name = "x"  # type: ignore[misc]
    assert msg.as_dict() == {"type": "MSG_OK", "code": msg.code, "fields": {"task_id": 5}}


def test_decoder_arguments():
    with pytest.raises(ValueError):
        QuicxDecoder(BASE, "janitor")
    with pytest.raises(ValueError):
        QuicxDecoder("bunqueue/v2")
    dec = QuicxDecoder(BASE, ["producer", "worker"])  # a connection playing two roles
    enc = QuicxEncoder(BASE)
    assert [m.name for m in dec.feed(enc.ok(1) + enc.task(2, "t"))] == ["MSG_OK", "MSG_TASK"]
    dec.eof()
    with pytest.raises(ValueError):
        dec.feed(b"")
    everything = QuicxDecoder(BASE, None)
    assert [m.name for m in everything.feed(enc.task(1, "t") + enc.ready())] == ["MSG_TASK", "MSG_READY"]
