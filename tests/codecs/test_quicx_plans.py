"""The quicx encoder's fast path (struct plans compiled from the layouts) against its general
path (every check, then the layout's construct Struct): the same bytes for every message of
every vector file and for hypothesis-generated messages, and, for values the general path
refuses, the same error, because the plan hands everything but the plain case back to it.
The decoder's plans are covered by tests/codecs/test_quicx.py (round trips, vectors,
segmentation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.quicx import QuicxDecoder, QuicxEncodeError, QuicxEncoder
from queuewire.codecs.quicx_plans import Fault, decode_plan, walk_plan
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import MessageType, QuicxSpec

ROOT = Path(__file__).resolve().parents[2]
VECTOR_DIR = ROOT / "vectors" / "quicx"
PROFILES = profile_names("quicx")
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def model(name: str) -> QuicxSpec:
    return load_profile(name).model


def outcome(encode, name: str, fields: dict[str, Any]) -> tuple:
    """The frame, or the error's class and detail."""
    try:
        return ("frame", encode(name, **fields))
    except QuicxEncodeError as exc:
        return ("error", type(exc), exc.kind, exc.detail)


def assert_same(enc: QuicxEncoder, name: str, fields: dict[str, Any]) -> tuple:
    fast, general = outcome(enc.encode, name, fields), outcome(enc.encode_checked, name, fields)
    assert fast == general, (name, fields)
    plan = enc._plans.get(name)
    if plan is not None:  # the plan alone: the general path's bytes, or no answer
        assert plan(fields) in (None, general[1]), (name, fields)
    return fast


def test_every_sendable_message_has_a_plan():
    """A plan for each message the encoder may send (for a role: the messages it sends), and
    none for the others, which the general path refuses."""
    for profile in PROFILES:
        spec = model(profile)
        assert set(QuicxEncoder(profile)._plans) == {n for n in spec.messages if spec.allowed(n)}
        for role in spec.roles:
            assert set(QuicxEncoder(profile, role)._plans) == {
                n for n in spec.messages if spec.allowed(n, sender=role)}


# ------------------------------------------------------------------------------ vectors

def _decoded_vectors() -> list[tuple[str, str, bytes]]:
    """(profile, role, frame) of every vector that decodes to a frame."""
    out = []
    for path in sorted(VECTOR_DIR.glob("*.json")):
        for vec in json.loads(path.read_text(encoding="utf-8"))["vectors"]:
            if "decoded" in vec:
                out.append((vec["profile"], vec["role"], bytes.fromhex(vec["hex"])))
    return out


VECTORS = _decoded_vectors()


def test_the_vectors_have_frames_to_encode():
    assert {p for p, _, _ in VECTORS} == set(PROFILES)


@pytest.mark.parametrize("profile,role,frame", VECTORS)
def test_every_vector_frame_encodes_identically_by_both_paths(profile, role, frame):
    (msg,) = QuicxDecoder(profile, role).feed(frame)
    enc = QuicxEncoder(profile)
    given_fields = {k: v for k, v in msg.fields.items() if not k.startswith("len_")}
    for fields in (msg.fields, given_fields):
        got = assert_same(enc, msg.name, fields)
        assert got == ("frame", frame)


# ----------------------------------------------------------------------------- hypothesis

def values_for(msg: MessageType) -> st.SearchStrategy[dict]:
    """Field values, valid and not: in range and out, of the right type and of others,
    within limits and over them, text the encoding refuses, explicit length fields that
    agree or not, missing and unknown fields."""
    odd = st.sampled_from([None, True, 1.0, "1", b"1", bytearray(b"1"), memoryview(b"1"), -1])
    parts: dict[str, st.SearchStrategy] = {}
    for f in msg.layout:
        if f.is_int:
            top = f.max_value
            parts[f.id] = st.one_of(st.integers(0, top), st.sampled_from([0, top, top + 1]), odd)
        elif f.type == "str":
            cap = 300 if f.max_bytes is None else f.max_bytes + 2
            parts[f.id] = st.one_of(st.text(max_size=cap), st.just("\ud800"), odd,
                                    st.text(st.characters(max_codepoint=127), min_size=cap - 2,
                                            max_size=cap))
        else:
            n = f.size if isinstance(f.size, int) else 300
            parts[f.id] = st.one_of(st.binary(max_size=n + 1), st.binary(min_size=n, max_size=n),
                                    st.builds(bytearray, st.binary(max_size=8)), odd)
    ids = list(parts)
    return st.fixed_dictionaries(parts).flatmap(lambda d: st.tuples(
        st.just(d), st.sets(st.sampled_from(ids)) if ids else st.just(set()),
        st.booleans())).map(_shape)


def _shape(drawn: tuple[dict, set, bool]) -> dict:
    values, drop, extra = drawn
    out = {k: v for k, v in values.items() if k not in drop or not isinstance(v, int)}
    if extra:
        out["no_such_field"] = 1
    return out


CASES = [(p, n) for p in PROFILES for n in sorted(model(p).messages)]


@pytest.mark.parametrize("profile,name", CASES, ids=[f"{p}:{n}" for p, n in CASES])
@SETTINGS
@given(data=st.data())
def test_both_paths_agree_on_generated_values(profile, name, data):
    msg = model(profile).message(name)
    fields = data.draw(values_for(msg))
    if data.draw(st.booleans()):  # computed length fields: mostly dropped, sometimes given
        fields = {k: v for k, v in fields.items()
                  if not any(f.size == k for f in msg.layout)}
    for role in (None, *sorted({s for s, _ in msg.directions})):
        assert_same(QuicxEncoder(profile, role), name, fields)


@pytest.mark.parametrize("profile", PROFILES)
@SETTINGS
@given(data=st.data())
def test_valid_messages_take_the_plan(profile, data):
    """Plain values never fall back: the plan builds them, byte-identical to construct."""
    spec = model(profile)
    msg = data.draw(st.sampled_from([m for m in spec.messages.values() if spec.allowed(m.name)]))
    fields = {}
    for f in msg.layout:
        if any(g.size == f.id for g in msg.layout):
            continue
        if f.is_int:
            fields[f.id] = data.draw(st.integers(0, f.max_value))
        elif f.type == "str":
            fields[f.id] = data.draw(st.text(max_size=(f.max_bytes or 400) // 4))
        else:
            fields[f.id] = data.draw(st.binary(max_size=400))
    enc = QuicxEncoder(profile)
    frame = enc._plans[msg.name](fields)
    assert frame is not None and frame == enc.encode_checked(msg.name, **fields)
    try:
        (back,) = QuicxDecoder(profile, None).feed(frame)
    except ProtocolError as exc:  # pragma: no cover - a frame the encoder built must decode
        raise AssertionError(exc) from None
    assert {k: back.fields[k] for k in fields} == fields


# ------------------------------------------------------------------------ decoding plans

DECODABLE = [(p, n) for p in PROFILES for n, m in sorted(model(p).messages.items()) if m.layout]


@pytest.mark.parametrize("profile,name", DECODABLE, ids=[f"{p}:{n}" for p, n in DECODABLE])
@SETTINGS
@given(data=st.data())
def test_decoding_plans_agree_with_the_walk(profile, name, data):
    """The compiled decoding plan against the general walk (field by field, then construct):
    the same fields, or the same fault (kind, detail, stream offset), on any payload the
    header checks let through, valid or not, at any position in a buffer."""
    msg = model(profile).message(name)
    fast, walk = decode_plan(msg), walk_plan(msg)
    if msg.fixed_size is not None:
        payload = data.draw(st.binary(min_size=msg.fixed_size, max_size=msg.fixed_size))
    else:
        valid = msg.struct.build(data.draw(plain_values(msg)))  # the layout's construct Struct
        payload = data.draw(st.one_of(
            st.binary(min_size=msg.min_size, max_size=msg.min_size + 40),
            st.just(valid),
            st.builds(lambda i, b: valid[:i] + bytes([b]) + valid[i + 1:],
                      st.integers(0, max(0, len(valid) - 1)), st.integers(0, 255))))
        if len(payload) < msg.min_size:
            payload = valid
    lead = data.draw(st.binary(max_size=7))
    buf, start, base = lead + payload + b"\x00\x01", len(lead), data.draw(st.integers(0, 1 << 40))

    def outcome(plan):
        try:
            return ("fields", plan(buf, start, start + len(payload), base))
        except Fault as f:
            return ("fault", f.kind, f.detail, f.offset)

    assert outcome(fast) == outcome(walk)


def plain_values(msg: MessageType) -> st.SearchStrategy[dict]:
    parts: dict[str, st.SearchStrategy] = {}
    for f in msg.layout:
        if any(g.size == f.id for g in msg.layout):
            continue
        if f.is_int:
            parts[f.id] = st.integers(0, f.max_value)
        elif f.type == "str":
            parts[f.id] = st.text(max_size=(f.max_bytes or 80) // 4)
        elif isinstance(f.size, int):
            parts[f.id] = st.binary(min_size=f.size, max_size=f.size)
        else:
            parts[f.id] = st.binary(max_size=40)
    return st.fixed_dictionaries(parts)
