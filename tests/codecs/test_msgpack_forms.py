"""``codecs.msgpack_forms``: the forms a payload wrote its values in, read from its bytes.

msgspec is the oracle: it writes every integer in its most compact form, so in what it
encodes an integer is reported exactly when its value is outside the range (int32 for
bunqueue/v3, BQ-MSGPACK-204) or needs 64 bits; floats, strings and binary values that hold
the marker bytes are never reported. Hand-made frames cover the forms msgspec does not choose
(a small value written as int64, extension values, ext 8/16/32).
"""

from __future__ import annotations

import struct

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from queuewire.codecs.msgpack_forms import WireForm, may_have_forms, sender_forms
from queuewire.spec import load_profile

INT32 = (-2**31, 2**31 - 1)
UINT32 = (-2**31, 2**32 - 1)

scalars = (st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False) | st.booleans()
           | st.none() | st.text(max_size=8) | st.binary(max_size=8)
           # strings and binary values made of the marker bytes: the walk steps over them
           | st.sampled_from(["\u03ce\u03cf", "\u0413\u0414"]) | st.just(b"\xcf\xd3\xc7\xce"))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=20)


def ints_in(value, out):
    if isinstance(value, bool):
        return out
    if isinstance(value, int):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            ints_in(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            ints_in(v, out)
    return out


@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from([INT32, UINT32]))
def test_reports_exactly_the_integers_outside_the_range_or_in_64_bits(value, int_range):
    payload = msgspec.msgpack.encode({"data": value})
    found = sender_forms(payload, int_range)
    low, high = int_range
    wide = [v for v in ints_in(value, []) if not low <= v <= high or not -2**31 <= v < 2**32]
    assert [f.value for f in found] == wide
    assert all(f.form in ("int32", "uint32", "int64", "uint64") for f in found)
    assert all(payload[f.offset] in (0xCE, 0xCF, 0xD2, 0xD3) for f in found)
    if found:
        assert may_have_forms(payload)


def test_small_value_written_in_64_bits_and_extensions():
    payload = (b"\x84\xa1a\xd3" + struct.pack(">q", 5) + b"\xa1b\xd4\x00\x00"
               + b"\xa1c\xc7\x03\x05xyz" + b"\xa1d\xce" + struct.pack(">I", 3_000_000_000))
    assert msgspec.msgpack.decode(payload, ext_hook=lambda code, data: code)["c"] == 5
    assert sender_forms(payload, INT32) == [
        WireForm(3, "int64", 5), WireForm(14, "ext", 0), WireForm(19, "ext", 5),
        WireForm(27, "uint32", 3_000_000_000)]
    assert sender_forms(payload, UINT32) == sender_forms(payload, INT32)[:3]
    assert len(sender_forms(b"\x93" + b"\xd3" + bytes(8) * 1 + b"\xd3" + bytes(8) + b"\xd3"
                            + bytes(8), INT32, limit=2)) == 2


def test_no_marker_byte_means_no_walk_and_nothing_found():
    payload = msgspec.msgpack.encode({"cmd": "PUSH", "queue": "q", "data": {"n": 12, "s": "x"}})
    assert not may_have_forms(payload) and sender_forms(payload, INT32) == []


def test_truncated_payload_ends_the_walk():
    payload = b"\x82\xa1a\xcf\x00\x00"
    assert sender_forms(payload, INT32) == [WireForm(3, "uint64", 0)]
    assert sender_forms(b"\xc1\xcf" + bytes(8), INT32) == []


def test_profiles_say_which_forms_a_client_may_not_write():
    assert dict(load_profile("bunqueue/v2").model.client_forms) == {}
    v3 = load_profile("bunqueue/v3").model
    assert v3.int_range == INT32
    assert {f: v3.client_forms[f] for f in ("uint64", "uint32", "ext")} == {
        "uint64": "BQ-MSGPACK-203", "uint32": "BQ-MSGPACK-204", "ext": "BQ-MSGPACK-202"}
