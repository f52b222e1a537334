"""The quicx codec: round trips of every message built from the layouts (hypothesis),
segmentation invariance, every language-neutral vector, the differences between profiles,
hostile input (a claimed 4 GiB frame, truncation) and the encoder's refusals. Expected values
are read from the profile, never restated here."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import struct
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
from queuewire.spec import clear_cache, load_profile, profile_names, spec_dir
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


# ------------------------------------------------------------------ what an error says

def _refusal(profile, role, frame, *, max_payload=None, prefix=b""):
    dec = QuicxDecoder(profile, role, max_payload=max_payload)
    with pytest.raises(ProtocolError) as info:
        dec.feed(prefix + frame)
    return dec, info.value


def _header_refusals():
    """(id, profile, role, max_payload, frame, kind, detail, header field at fault): one row
    per header rule, in the order the decoder checks them, with the detail it must give."""
    v1, v103 = model(BASE), model(OVERLAY)
    e1, e103 = QuicxEncoder(BASE), QuicxEncoder(OVERLAY)
    ready, done1 = v1.message("MSG_READY"), v1.message("MSG_DONE")
    unknown = max(v1.by_code) + 1
    wait, stats = v103.message("MSG_WAIT"), v103.message("MSG_STATS")
    submit, done = v103.message("MSG_SUBMIT"), v103.message("MSG_DONE")
    cap = v103.max_payload_bytes
    bad_version = max(v1.accepted_versions) + 1
    task, failed, ok = v1.message("MSG_TASK"), v1.message("MSG_FAILED"), v1.message("MSG_OK")
    short = 2
    return [
        ("version", BASE, DAEMON, None, e1.frame(ready.code, version=bad_version), "bad_version",
         f"version {bad_version:#04x} is not accepted ({sorted(v1.accepted_versions)})", "version"),
        ("unknown", BASE, DAEMON, None, e1.frame(unknown, b"x"), "unknown_type",
         f"opcode {unknown:#04x} is no message of {BASE}", "msg_type"),
        ("reserved", OVERLAY, DAEMON, None, e103.frame(wait.code), "reserved_type",
         f"opcode {wait.code:#04x} (MSG_WAIT) is reserved in {OVERLAY}", "msg_type"),
        ("transport", OVERLAY, DAEMON, None, e103.frame(stats.code), "not_on_tcp",
         f"MSG_STATS is carried on {stats.transport}, not {v103.transport}", "msg_type"),
        ("direction", BASE, "producer", None, e1.frame(ready.code), "wrong_direction",
         "MSG_READY is not sent to producer", "msg_type"),
        ("direction-two-roles", BASE, ["worker", "producer"], None, e1.frame(ready.code),
         "wrong_direction", "MSG_READY is not sent to producer/worker", "msg_type"),
        ("too-large", OVERLAY, DAEMON, None, e103.frame(submit.code, bytes(cap + 1)),
         "payload_too_large", f"MSG_SUBMIT claims {cap + 1} bytes, more than {cap}", "len_payload"),
        ("local-cap", BASE, DAEMON, 16, e1.frame(ready.code, bytes(17)), "payload_too_large",
         "MSG_READY claims 17 bytes, more than 16", "len_payload"),
        # a length right at the cap is within it: the body size rule is the one broken
        ("at-the-cap", OVERLAY, DAEMON, None, e103.frame(done.code, bytes(cap)), "done_body_size",
         f"MSG_DONE body is {done.fixed_size} bytes, length is {cap}", "len_payload"),
        ("forbidden", BASE, DAEMON, None, e1.frame(ready.code, bytes(short)), "payload_forbidden",
         f"MSG_READY has no payload but length is {short}", "len_payload"),
        ("required", BASE, DAEMON, None, e1.frame(v1.message("MSG_SUBMIT").code), "payload_required",
         "MSG_SUBMIT needs a payload but length is 0", "len_payload"),
        ("fixed-size", BASE, DAEMON, None, e1.frame(done1.code, bytes(short)), "done_body_size",
         f"MSG_DONE body is {done1.fixed_size} bytes, length is {short}", "len_payload"),
        ("fixed-size-client", BASE, "producer", None, e1.frame(ok.code, bytes(short)), "payload_size",
         f"MSG_OK body is {ok.fixed_size} bytes, length is {short}", "len_payload"),
        # no fixed size: the minimum is the rule, and the detail names it
        ("minimum", BASE, DAEMON, None, e1.frame(failed.code, bytes(short)), "payload_size",
         f"MSG_FAILED needs at least {failed.min_size} bytes, length is {short}", "len_payload"),
        ("minimum-client", BASE, "worker", None, e1.frame(task.code, bytes(short)), "payload_size",
         f"MSG_TASK needs at least {task.min_size} bytes, length is {short}", "len_payload"),
    ]


REFUSALS = _header_refusals()


@pytest.mark.parametrize("case", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_header_refusals_name_the_rule_they_apply(case):
    """Each header rule gives its own kind and a detail naming the message, the value on the
    wire and the bound it breaks (what a daemon logs and answers in MSG_ERROR's text), at the
    offset of the header field at fault; ``as_dict`` is that error, MSG_ERROR code included."""
    _, profile, role, cap, frame, kind, detail, at = case
    spec = model(profile)
    prefix = QuicxEncoder(profile).frame(spec.message("MSG_HEARTBEAT").code, version=spec.version)
    dec, exc = _refusal(profile, role, frame, max_payload=cap, prefix=prefix)
    assert (exc.kind, exc.detail) == (kind, detail)
    assert exc.offset == len(prefix) + spec.header_offsets[at]
    reply = exc.reaction == "reply"
    code = spec.error_replies[kind] if reply else None
    assert (exc.error_code, exc.error_name) == (code, spec.error_names.get(code))
    assert exc.as_dict() == {"kind": kind, "requirement": exc.requirement, "reaction": exc.reaction,
                             "error_code": code, "message": detail, "offset": exc.offset,
                             "path": None, "violations": []}
    assert (dec.failed is None) == reply


def test_a_closed_decoder_repeats_its_error():
    """After a ``close`` error every later call raises it again (same class, kind, offset),
    its detail saying the decoder was closed by it."""
    spec = model(BASE)
    enc = QuicxEncoder(BASE)
    prefix = enc.ok(1)
    dec, first = _refusal(BASE, "producer", enc.frame(spec.message("MSG_READY").code), prefix=prefix)
    assert first.reaction == "close" and dec.failed is first
    for again in (lambda: dec.feed(enc.ok(2)), lambda: dec.feed_rows(b""), dec.eof):
        with pytest.raises(MessageError) as info:
            again()
        exc = info.value
        assert (type(exc), exc.kind, exc.offset) == (type(first), first.kind, len(prefix) + 1)
        assert exc.detail == f"decoder closed by an earlier error: {first.detail}"
        assert (exc.error_code, exc.reaction, exc.requirement) == (None, "close", first.requirement)


def test_truncation_says_how_far_into_the_frame_the_stream_ended():
    """``truncated`` points at the frame the stream ended in and counts the bytes of it that
    arrived, including a refused frame whose payload was being skipped."""
    enc = QuicxEncoder(OVERLAY)
    spec = model(OVERLAY)
    prefix = enc.heartbeat() + enc.done(1)
    frame = enc.submit("t", b"abcdef")
    dec = QuicxDecoder(OVERLAY, DAEMON)
    assert len(dec.feed(prefix + frame[:9])) == 2
    with pytest.raises(FramingError) as info:
        dec.eof()
    assert (info.value.offset, info.value.detail) == (len(prefix), "stream ended 9 bytes into a frame")
    # a refused frame: its header is consumed at once, the bytes of its payload as they come
    big = enc.frame(spec.message("MSG_SUBMIT").code, length=spec.max_payload_bytes + 10)
    dec = QuicxDecoder(OVERLAY, DAEMON)
    with pytest.raises(FramingError):
        dec.feed(prefix + big + bytes(4))
    assert dec.feed(bytearray(3)) == [] and dec.offset == len(prefix + big) + 7 and dec.in_frame
    with pytest.raises(FramingError) as info:
        dec.eof()
    assert (info.value.offset, info.value.detail) == (
        len(prefix), f"stream ended {len(big) + 7} bytes into a frame")


def test_feed_after_eof_is_a_usage_error():
    dec = QuicxDecoder(BASE, DAEMON)
    dec.eof()
    for call in (dec.feed, dec.feed_rows):
        with pytest.raises(ValueError, match=r"^feed\(\) after eof\(\)$"):
            call(QuicxEncoder(BASE).ready())


def test_feed_without_bytes_resumes_after_a_refused_frame():
    """``feed()`` and ``feed_rows()`` with no argument feed nothing new: they decode what a
    ``reply`` error left buffered behind the refused frame."""
    enc = QuicxEncoder(BASE)
    bad = enc.frame(model(BASE).message("MSG_READY").code, b"zz")
    for rows in (False, True):
        dec = QuicxDecoder(BASE, DAEMON)
        feed = dec.feed_rows if rows else dec.feed
        with pytest.raises(FramingError):
            feed(bad + enc.done(5))
        got = feed()
        assert got == ([(model(BASE).message("MSG_DONE").code, 5)] if rows
                       else [decode(BASE, enc.done(5))[0]._replace(offset=len(bad))])
        assert dec.offset == len(bad + enc.done(5)) and not dec.in_frame


# ------------------------------------------------------------------ bytes-like input

def test_any_bytes_like_input_decodes_like_bytes():
    """``feed`` takes bytes, bytearray and memoryview (any item format: the view's raw bytes),
    whole or cut anywhere, into an empty or a partly filled buffer, and while the payload of
    a refused frame is being dropped: the frames, their offsets and the decoder's state are
    those of the same bytes fed as ``bytes``, and what it returns is bytes, never a view."""
    spec = model(OVERLAY)
    enc = QuicxEncoder(OVERLAY)
    refused = enc.frame(spec.message("MSG_SUBMIT").code, bytes(spec.max_payload_bytes + 3))
    stream = (enc.ready() + enc.submit("t", b"\x00\xff" * 5) + refused + enc.done(9)
              + enc.failed(4, "no") + refused + enc.heartbeat())
    assert len(stream) % 2 == 0

    def kinds(data):
        return [bytes(data), bytearray(data), memoryview(data),
                memoryview(bytearray(data)).cast("H") if len(data) % 2 == 0 else memoryview(data)]

    def outcome(chunks):
        """What a daemon gets (going on after each refused frame), state after each call."""
        dec, out = QuicxDecoder(OVERLAY, DAEMON), []
        for chunk in chunks:
            while True:
                try:
                    frames = dec.feed(chunk)
                    break
                except FramingError as exc:
                    frames = exc.frames
                    out.append((exc.kind, exc.offset))
                    chunk = b""
                finally:
                    out.append([(m.name, m.fields, m.raw, m.offset) for m in frames])
                    out.append((dec.offset, dec.buffered, dec.in_frame))
                    for m in frames:
                        assert type(m.raw) is bytes
                        assert all(type(v) in (int, str, bytes) for v in m.fields.values())
        return out

    cuts = [[stream], [stream[:4], stream[4:40], stream[40:]],
            [stream[i:i + 2] for i in range(0, len(stream), 2)],
            [stream[:len(refused) + 30], stream[len(refused) + 30:]]]
    for chunks in cuts:
        expected = outcome(chunks)
        names = [f[0] for part in expected if isinstance(part, list) for f in part]
        assert names == ["MSG_READY", "MSG_SUBMIT", "MSG_DONE", "MSG_FAILED", "MSG_HEARTBEAT"]
        for i in range(1, 4):
            assert outcome([kinds(c)[i] for c in chunks]) == expected


# ------------------------------------------------------------------ the encoder's answers

def _encoder_refusals():
    """(id, call, detail): each refusal of the encoder, with the detail it gives."""
    e1, e103 = QuicxEncoder(BASE), QuicxEncoder(OVERLAY)
    v1, v103 = model(BASE), model(OVERLAY)
    task_type = next(f for f in v1.message("MSG_SUBMIT").layout if f.id == "task_type")
    reason = next(f for f in v103.message("MSG_FAILED").layout if f.id == "reason")
    cap = v103.max_payload_bytes
    header = {"version": v1.version, "msg_type": 0x100, "len_payload": 0}
    return [
        ("unknown", lambda: e1.encode("MSG_NOPE"), f"no message 'MSG_NOPE' in {BASE}"),
        ("reserved", e103.wait, f"MSG_WAIT is reserved in {OVERLAY}"),
        ("transport", e103.stats,
         f"MSG_STATS is carried on {v103.message('MSG_STATS').transport} in {OVERLAY}"),
        ("role", lambda: QuicxEncoder(BASE, "worker").submit("t"),
         f"worker does not send MSG_SUBMIT in {BASE}"),
        ("unknown-fields", lambda: e1.encode("MSG_READY", zz=1, task_id=2),
         "MSG_READY has no field(s) ['task_id', 'zz']"),
        ("missing", lambda: e1.encode("MSG_OK"), "MSG_OK.task_id is missing"),
        ("length-disagrees", lambda: e1.encode("MSG_SUBMIT", len_type=3, task_type="ab", payload=b""),
         "MSG_SUBMIT.len_type=3 but task_type is 2 bytes"),
        ("over-the-cap", lambda: e103.submit("t", bytes(cap)),
         f"MSG_SUBMIT payload is {cap + 2} bytes, more than {cap}"),
        ("not-an-integer", lambda: e1.ok(True), "MSG_OK.task_id must be an integer"),
        ("out-of-range", lambda: e1.ok(-1), "MSG_OK.task_id=-1 does not fit u4be"),
        ("not-text", lambda: e1.submit(b"t"), "MSG_SUBMIT.task_type must be text"),
        ("not-encodable", lambda: e1.submit("\ud800"),
         "MSG_SUBMIT.task_type: 'utf-8' codec can't encode character '\\ud800' in position 0: "
         "surrogates not allowed"),
        ("not-bytes", lambda: e1.submit("t", "p"), "MSG_SUBMIT.payload must be bytes"),
        ("over-max-size", lambda: e1.submit("x" * (task_type.max_bytes + 1)),
         f"MSG_SUBMIT.task_type is {task_type.max_bytes + 1} bytes, more than "
         f"{task_type.max_bytes} ({task_type.max_size})"),
        ("over-max-size-1.0.3", lambda: e103.failed(1, "é" * reason.max_bytes),
         f"MSG_FAILED.reason is {2 * reason.max_bytes} bytes, more than {reason.max_bytes} "
         f"({reason.max_size})"),
        ("header", lambda: e1.frame(0x100), f"header {header}: "),
    ]


ENCODER_REFUSALS = _encoder_refusals()


@pytest.mark.parametrize("case", ENCODER_REFUSALS, ids=[c[0] for c in ENCODER_REFUSALS])
def test_encoder_refusals_say_what_is_wrong(case):
    """The detail of each refusal names the message, the field and the rule (a caller's
    programming error is found from it): the same from ``encode`` and ``encode_checked``."""
    _, call, detail = case
    with pytest.raises(EncodeError) as info:
        call()
    exc = info.value
    assert exc.detail.startswith(detail) if detail.endswith(": ") else exc.detail == detail
    assert (exc.kind, exc.reaction, exc.error_code, exc.offset) == ("encode_error", "raise", None, None)


def test_error_for_answers_a_reply_error_with_its_code_and_detail():
    """The MSG_ERROR a daemon sends for a ``reply`` error carries its code and its detail as
    the message; an error that is not answered (``close``) is refused, saying why."""
    spec = model(BASE)
    enc = QuicxEncoder(BASE, DAEMON)
    _, exc = _refusal(BASE, DAEMON, enc.frame(spec.message("MSG_READY").code, b"zz"))
    (msg,) = decode(BASE, enc.error_for(exc), role="worker")
    assert msg.fields == {"error_code": exc.error_code, "message": exc.detail}
    dec = QuicxDecoder(BASE, DAEMON)
    dec.feed(enc.heartbeat()[:3])
    with pytest.raises(FramingError) as info:
        dec.eof()
    with pytest.raises(EncodeError) as refused:
        enc.error_for(info.value)
    assert refused.value.detail == "truncated is not answered with MSG_ERROR (reaction close)"


def test_convenience_builders_default_to_empty_fields():
    """``submit``, ``task``, ``failed`` and ``error`` leave the payload, reason and message
    empty unless given, ``pong`` and ``stats_response`` build their messages: each is the
    frame ``encode`` builds from the spec's field names."""
    for profile in PROFILES:
        spec, enc = model(profile), QuicxEncoder(profile)
        pairs = [(enc.submit("t"), ("MSG_SUBMIT", {"task_type": "t", "payload": b""})),
                 (enc.task(3, "t"), ("MSG_TASK", {"task_id": 3, "task_type": "t", "payload": b""})),
                 (enc.failed(4), ("MSG_FAILED", {"task_id": 4, "reason": ""})),
                 (enc.error("QUEUE_FULL"), ("MSG_ERROR", {"error_code": spec.error_code("QUEUE_FULL"),
                                                          "message": ""})),
                 (enc.pong(), ("MSG_PONG", {}))]
        if spec.allowed("MSG_STATS_RESPONSE"):
            stats = {f.id: i + 1 for i, f in enumerate(spec.message("MSG_STATS_RESPONSE").layout)}
            pairs.append((enc.stats_response(**stats), ("MSG_STATS_RESPONSE", stats)))
        for frame, (name, fields) in pairs:
            assert frame == encode(profile, name, **fields)
            (msg,) = decode(profile, frame, role=None)
            assert msg.name == name and {k: msg.fields[k] for k in fields} == fields
    assert model(BASE).allowed("MSG_STATS_RESPONSE")


def test_allowed_matches_sender_and_receiver_on_their_own():
    """``allowed`` with only a sender, or only a receiver, checks that side alone."""
    for profile in PROFILES:
        spec = model(profile)
        for msg in sendable(profile):
            for role in spec.roles:
                assert allowed(profile, msg.name, sender=role) == any(s == role for s, _ in msg.directions)
                assert allowed(profile, msg.name, receiver=role) == any(r == role for _, r in msg.directions)
                assert allowed(profile, msg.name, role, DAEMON) == ((role, DAEMON) in msg.directions)
    assert not allowed(BASE, "MSG_SUBMIT", sender="worker")
    assert not allowed(BASE, "MSG_SUBMIT", receiver="worker")


# ------------------------------------------------------------------ a profile of our own

CUSTOM, FLAGGED = "quicx/custom", "quicx/flagged"
OWN_OVERLAYS = {
    # the length first, two versions, no cap, a task type limit its u1 length cannot carry,
    # STATS on TCP (its response has a fixed-size bytes field), a direction kind of its own
    # for MSG_READY, a message whose payload is required but whose layout has no minimum
    CUSTOM: """\
header:
  fields:
    - {id: len_payload, type: u4be, requirement: QX-HDR-5}
    - {id: version, type: u1, requirement: QX-HDR-2}
    - {id: msg_type, type: u1, enum: messages, requirement: QX-HDR-4}
versions: {current: 0x02, accepted: [0x01, 0x02]}
limits: {max_payload_bytes: {max: null}, task_type_bytes: {max: 300}}
messages:
  MSG_READY: {errors: {direction: inbound_error}}
  MSG_STATS: {transport: tcp}
  MSG_STATS_RESPONSE: {transport: tcp}
  MSG_NOTE:
    code: 0x0D
    from: worker
    to: daemon
    payload: required
    layout:
      - {id: text, type: str, encoding: utf-8, size-eos: true}
""",
    # quicx's header with a flags byte after the length
    FLAGGED: """\
header:
  size: 7
  fields:
    - {id: version, type: u1, requirement: QX-HDR-2}
    - {id: msg_type, type: u1, enum: messages, requirement: QX-HDR-4}
    - {id: len_payload, type: u4be, requirement: QX-HDR-5}
    - {id: flags, type: u1}
""",
}


@pytest.fixture
def own_profiles(tmp_path, monkeypatch):
    """Profiles of our own, as a user would write them (a spec copy with one more overlay
    each): ``quicx/custom`` is quicx/1.0.3 with the changes of ``OWN_OVERLAYS``,
    ``quicx/flagged`` quicx/v1 with a 7-byte header."""
    root = tmp_path / "spec"
    shutil.copytree(spec_dir(), root)
    entries = ""
    for name, overlay in OWN_OVERLAYS.items():
        file = f"overlays/{name.split('/')[1]}.yaml"
        (root / file).write_text(overlay)
        base = "overlays/quicx-1.0.3.yaml, " if name == CUSTOM else ""
        entries += f"\n  {name}:\n    protocol: quicx\n    doc: ours.\n    overlays: [{base}{file}]"
    profiles = root / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace("\ndefaults:", entries + "\ndefaults:", 1))
    monkeypatch.setenv("QUEUEWIRE_SPEC_DIR", str(root))
    clear_cache()
    yield {name: load_profile(name) for name in OWN_OVERLAYS}
    monkeypatch.undo()
    clear_cache()


def test_the_codec_follows_a_profile_with_another_header(own_profiles):
    """Nothing in the codec assumes quicx's header order or its single version: under a
    profile whose header starts with the length, every message encodes with the header in
    that order, decodes back (Message or rows, whole or byte by byte, either version), and
    each refusal points at the header field it is about."""
    custom_profile = own_profiles[CUSTOM]
    spec = custom_profile.model
    assert [f.id for f in spec.header] == ["len_payload", "version", "msg_type"]
    enc = QuicxEncoder(custom_profile)
    head = bytes(range(73))
    frames = [enc.submit("t", b"p"), enc.ready(), enc.failed(2, "r"), enc.error(1, "m"), enc.stats(),
              enc.encode("MSG_STATS_RESPONSE", header=head, size_classes=b"\x01\x02")]
    assert [struct.unpack_from(">LBB", f) for f in frames] == [
        (len(f) - 6, spec.version, spec.message(n).code) for f, n in zip(frames, [
            "MSG_SUBMIT", "MSG_READY", "MSG_FAILED", "MSG_ERROR", "MSG_STATS", "MSG_STATS_RESPONSE"])]
    older = struct.pack(">LBB", 4, min(spec.accepted_versions), spec.message("MSG_DONE").code) + b"\0\0\0\7"
    stream = b"".join(frames) + older
    dec = QuicxDecoder(custom_profile, None)
    msgs = dec.feed(stream)
    assert [m.name for m in msgs] == ["MSG_SUBMIT", "MSG_READY", "MSG_FAILED", "MSG_ERROR", "MSG_STATS",
                                      "MSG_STATS_RESPONSE", "MSG_DONE"]
    assert msgs[5].fields == {"header": head, "size_classes": b"\x01\x02"}
    assert msgs[6].fields == {"task_id": 7}
    assert [m.offset for m in msgs] == [stream.index(m.raw) for m in msgs]
    bytewise = QuicxDecoder(custom_profile, None)
    assert [m for i in range(len(stream)) for m in bytewise.feed(stream[i:i + 1])] == msgs
    rows = [(m.code, *m.fields.values()) for m in msgs]
    assert QuicxDecoder(custom_profile, None).feed_rows(stream) == rows
    with pytest.raises(EncodeError) as info:
        enc.encode("MSG_STATS_RESPONSE", header=head[:-1], size_classes=b"")
    assert info.value.detail == "MSG_STATS_RESPONSE.header must be 73 bytes, got 72"
    assert enc.stats_response(header=head, size_classes=b"") == enc.encode_checked(
        "MSG_STATS_RESPONSE", header=head, size_classes=b"")
    # within the profile's limit but not within its length field: the layout refuses it
    with pytest.raises(EncodeError) as info:
        enc.submit("x" * 256)
    assert info.value.detail.startswith("MSG_SUBMIT: ") and "len_type" in info.value.detail
    assert enc.submit("x" * 255)[6:8] == b"\xffx"
    off = spec.header_offsets
    ready = spec.message("MSG_READY").code
    refusals = [  # (frame, receiver, kind, offset)
        (struct.pack(">LBB", 0, 3, ready), DAEMON, "bad_version", off["version"]),
        (struct.pack(">LBB", 0, spec.version, 0x7F), DAEMON, "unknown_type", off["msg_type"]),
        (struct.pack(">LBB", 1, spec.version, ready), DAEMON, "payload_forbidden", off["len_payload"]),
        # a client refuses an off-direction message as wrong_direction, whatever the kind
        # the profile gives it for the daemon
        (enc.ready(), "producer", "wrong_direction", off["msg_type"]),
        (enc.error(1, "m"), DAEMON, "inbound_error", off["msg_type"]),
    ]
    assert spec.max_payload_bytes is None  # no cap but the length field's and a local one
    big = enc.submit("t", bytes(5000))
    assert [m.name for m in QuicxDecoder(custom_profile, DAEMON).feed(big)] == ["MSG_SUBMIT"]
    refusals.append((big, DAEMON, "payload_too_large", off["len_payload"]))
    # required: a payload, however short its layout may be
    (note,) = QuicxDecoder(custom_profile, DAEMON).feed(enc.encode("MSG_NOTE", text="é"))
    assert note.fields == {"text": "é"}
    refusals.append((enc.frame(note.code), DAEMON, "payload_required", off["len_payload"]))
    for frame, role, kind, at in refusals:
        first = enc.heartbeat() if role == DAEMON else enc.ok(1)
        with pytest.raises(ProtocolError) as info:
            QuicxDecoder(custom_profile, role, max_payload=4096).feed(first + frame)
        assert (info.value.kind, info.value.offset) == (kind, len(first) + at)


def test_roles_and_profiles_are_checked_when_the_codec_is_built():
    """A decoder or encoder refuses, with a message naming the mistake, a profile of another
    protocol (by name or loaded), a role the profile does not have, no role at all and the
    daemon combined with a client role; a one-role list is that role, a profile given loaded
    is the one given by name."""
    known = list(model(BASE).roles)
    bad = [(("bunqueue/v2",), "profile bunqueue/v2 is not a quicx profile"),
           ((load_profile("bunqueue/v2"),), "profile bunqueue/v2 is not a quicx profile"),
           ((BASE, "janitor"), f"unknown role(s) ['janitor']; known: {known}"),
           ((BASE, ["worker", "janitor", "clerk"]), f"unknown role(s) ['clerk', 'janitor']; known: {known}"),
           ((BASE, []), f"unknown role(s) []; known: {known}"),
           ((BASE, [DAEMON, "worker"]), "the daemon role cannot be combined with a client role")]
    for args, message in bad:
        for build in (QuicxDecoder, QuicxEncoder):
            if build is QuicxEncoder and len(args) > 1 and not isinstance(args[1], str):
                continue
            with pytest.raises(ValueError) as info:
                build(*args)
            assert str(info.value) == message
    enc = QuicxEncoder(load_profile(BASE), "worker")
    assert (enc.profile, enc.role) == (load_profile(BASE), "worker")
    frame = enc.ready()
    assert [m.name for m in QuicxDecoder(load_profile(BASE), [DAEMON]).feed(frame)] == ["MSG_READY"]
    with pytest.raises(MessageError):
        QuicxDecoder(BASE, ["worker"]).feed(frame)


def test_payload_refusals_name_the_field_and_the_byte_at_fault():
    """A payload that breaks its layout is refused at the byte of the field at fault, with a
    detail naming the field and what is wrong with it, for every receiver."""
    v1, v103 = model(BASE), model(OVERLAY)
    e1, e103 = QuicxEncoder(BASE), QuicxEncoder(OVERLAY)
    submit, task, failed = v1.message("MSG_SUBMIT"), v1.message("MSG_TASK"), v103.message("MSG_FAILED")
    cases = [  # (profile, receiver, frame, kind, payload offset, detail)
        (BASE, DAEMON, e1.frame(submit.code, b"\x05ab"), "submit_type_len", submit.offsets["len_type"],
         "MSG_SUBMIT.task_type claims 5 bytes, 2 remain in the frame"),
        (BASE, "worker", e1.frame(task.code, b"\0\0\0\1\x05ab"), "task_type_len", task.offsets["len_type"],
         "MSG_TASK.task_type claims 5 bytes, 2 remain in the frame"),
        (BASE, DAEMON, e1.frame(submit.code, b"\x02\xff\xfe"), "invalid_text", 1,
         "MSG_SUBMIT.task_type is not valid utf-8: invalid start byte"),
        (OVERLAY, DAEMON, e103.frame(failed.code, b"\0\0\0\1" + b"r" * 65), "reason_too_long", 4,
         "MSG_FAILED.reason is 65 bytes, more than 64"),
    ]
    for profile, role, frame, kind, at, detail in cases:
        prefix = QuicxEncoder(profile).pong() if role == "worker" else QuicxEncoder(profile).heartbeat()
        _, exc = _refusal(profile, role, frame, prefix=prefix)
        assert isinstance(exc, PayloadError)
        at_byte = len(prefix) + model(profile).header_size + at
        assert (exc.kind, exc.offset, exc.detail) == (kind, at_byte, detail)


def test_the_cap_given_to_the_decoder_only_lowers_the_profile_s():
    """``max_payload`` is a local policy under the profile's ``max_payload_bytes``: a lower
    one refuses more, a higher one is no licence to take what the profile refuses."""
    spec = model(OVERLAY)
    cap = spec.max_payload_bytes
    enc = QuicxEncoder(OVERLAY)
    over = enc.frame(spec.message("MSG_SUBMIT").code, b"\x01t" + bytes(cap - 1))
    for local in (cap + 1, 4 * cap, None):
        with pytest.raises(FramingError) as info:
            QuicxDecoder(OVERLAY, DAEMON, max_payload=local).feed(over)
        assert info.value.detail == f"MSG_SUBMIT claims {cap + 1} bytes, more than {cap}"
    with pytest.raises(FramingError) as info:
        QuicxDecoder(OVERLAY, DAEMON, max_payload=10).feed(enc.submit("t", bytes(9)))
    assert info.value.detail == "MSG_SUBMIT claims 11 bytes, more than 10"
    assert QuicxDecoder(OVERLAY, DAEMON, max_payload=10).feed(enc.submit("t", bytes(8)))[0].raw


def test_an_incomplete_frame_waits_for_its_last_byte():
    """A frame whose header is checked but whose payload is still arriving is held with its
    checked header and the byte count it needs (the module docstring's fast path: it is not
    looked at again until its last byte arrives); a refused frame's payload is dropped byte
    by byte as it comes, even a byte that came with its header."""
    spec = model(BASE)
    enc = QuicxEncoder(BASE)
    hs = spec.header_size
    frame = enc.submit("t", bytes(40))
    dec = QuicxDecoder(BASE, DAEMON)
    assert dec._need == hs and dec._pending is None
    assert dec.feed(frame[:3]) == [] and (dec._need, dec._pending) == (hs, None)
    assert dec.feed(frame[3:10]) == [] and dec._need == len(frame)
    assert dec._pending is not None and dec._pending[0] == len(frame) - hs
    assert dec.feed(frame[10:-1]) == [] and dec._need == len(frame) and dec.buffered == len(frame) - 1
    (msg,) = dec.feed(frame[-1:])
    assert msg.raw == frame and (dec._need, dec._pending, dec.buffered) == (hs, None, 0)
    refused = enc.frame(spec.message("MSG_READY").code, b"abc")
    with pytest.raises(FramingError):
        dec.feed(refused[:hs + 1])
    assert (dec._need, dec.offset, dec.buffered) == (1, len(frame) + hs, 1)
    assert dec.feed() == [] and (dec._need, dec.offset, dec.buffered) == (1, len(frame) + hs + 1, 0)
    assert dec.feed(refused[hs + 1:] + enc.ready()) == [decode(BASE, enc.ready())[0]._replace(
        offset=len(frame) + len(refused))]


def test_the_decoder_reads_a_header_with_a_field_of_its_own(own_profiles):
    """A header with a field quicx does not have (a flags byte after the length) is read
    around it: any flags value, frames whole or byte by byte, refusals at the right field;
    the encoder, which has no value for that field, refuses with an EncodeError that says so."""
    flagged = own_profiles[FLAGGED]
    spec = flagged.model
    assert spec.header_size == 7 and spec.header_offsets["flags"] == 6

    def frame(name, payload=b"", flags=0, version=spec.version, length=None):
        code = spec.message(name).code if isinstance(name, str) else name
        size = len(payload) if length is None else length
        return struct.pack(">BBLB", version, code, size, flags) + payload

    stream = (frame("MSG_READY", flags=0xFF) + frame("MSG_DONE", b"\0\0\0\x07", 1)
              + frame("MSG_SUBMIT", b"\x01tp"))
    msgs = QuicxDecoder(flagged, DAEMON).feed(stream)
    assert [(m.name, m.fields, m.offset) for m in msgs] == [
        ("MSG_READY", {}, 0), ("MSG_DONE", {"task_id": 7}, 7),
        ("MSG_SUBMIT", {"len_type": 1, "task_type": "t", "payload": b"p"}, 18)]
    bytewise = QuicxDecoder(flagged, DAEMON)
    assert [m for i in range(len(stream)) for m in bytewise.feed(stream[i:i + 1])] == msgs
    for bad, kind, at in [(frame("MSG_READY", version=9), "bad_version", "version"),
                          (frame(0x7F), "unknown_type", "msg_type"),
                          (frame("MSG_DONE", b"\0"), "done_body_size", "len_payload")]:
        with pytest.raises(ProtocolError) as info:
            QuicxDecoder(flagged, DAEMON).feed(stream + bad)
        assert (info.value.kind, info.value.offset, len(info.value.frames)) == (
            kind, len(stream) + spec.header_offsets[at], 3)
    # the encoder has no value for the flags: it refuses to build a frame (no fast path, the
    # general path says why) rather than fail with a KeyError
    enc = QuicxEncoder(flagged)
    header = {"version": spec.version, "msg_type": spec.message("MSG_READY").code, "len_payload": 0}
    for build in (enc.ready, lambda: enc.frame(header["msg_type"])):
        with pytest.raises(EncodeError) as refused:
            build()
        assert refused.value.detail == f"header {header}: no value for field 'flags'"


def test_a_length_sent_little_endian_is_named_at_once_by_a_client():
    """A daemon that writes the header length little-endian (issue 30): a client decoder
    names QX-HDR-5 from the header alone instead of waiting for hundreds of megabytes; the
    daemon's decoder answers such a frame by the length rule it breaks, as before."""
    enc = QuicxEncoder("quicx/v1")
    for frame, role in ((enc.ok(5), "producer"), (enc.task(7, "send_email", b"xyz"), "worker"),
                        (enc.stats_response(queue_depth=1, workers_total=2, workers_idle=1,
                                            pmad_bytes_used=3, pmad_bytes_total=9), "monitor")):
        swapped = frame[:2] + struct.pack("<I", len(frame) - 6) + frame[6:]
        dec = QuicxDecoder("quicx/v1", role, max_payload=64 << 20)
        with pytest.raises(ProtocolError) as info:
            dec.feed(swapped[:6])   # the header alone is enough
        assert info.value.kind == "byte_order" and info.value.requirement == "QX-HDR-5"
        assert info.value.reaction == "close" and str(len(frame) - 6) in str(info.value)
    # a length too short is not taken for a swapped one (its swap is larger, not plausible)
    short = enc.frame(load_profile("quicx/v1").model.message("MSG_TASK").code, b"\x00" * 4)
    with pytest.raises(ProtocolError) as info:
        QuicxDecoder("quicx/v1", "worker").feed(short)
    assert info.value.kind != "byte_order"
    # the daemon's own decoder keeps judging lengths by their rules
    sub = enc.submit("t", b"x")
    with pytest.raises(ProtocolError) as info:
        QuicxDecoder("quicx/v1", "daemon", max_payload=1 << 20).feed(
            sub[:2] + struct.pack("<I", len(sub) - 6) + sub[6:])
    assert info.value.kind == "payload_too_large"
