"""How a MessagePack payload wrote its values: the forms a decoded value no longer shows.

What it is for
--------------
A decoder gives ``5`` whether the bytes were ``05`` (positive fixint) or ``d3 00 .. 05``
(int64), and ``None`` (or ``UNDEFINED``) for an extension value. Rules about the bytes a sender
writes need the form: protocol 3 of bunqueue forbids a client msgpack int64/uint64 anywhere in
a frame, wants an integer outside int32 written as float64, and forbids a client extension
types (BQ-MSGPACK-202 to 204, upstream's docs/protocol.md section 4: "the single most common
way to write a broken client"). :func:`sender_forms` finds them in the payload's bytes.

Design
------
A payload that decoded is well formed, so one pass over its tokens, in order, reads every
value: a container's header is followed by its items inline, so no stack is needed; only
str, bin and ext bodies are stepped over. :func:`may_have_forms` is the fast path: a search
for the marker bytes of the forms looked for (C speed), and the walk only when one is there
(a marker byte inside a string or a binary value is a false alarm the walk settles). The
walk is linear in the payload and allocates only what it reports, so hostile bytes cost at
most their own size; a payload that does not decode is never given to it (the decoder's
error is the verdict), and a truncated one ends the walk where the bytes end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WireForm", "may_have_forms", "sender_forms"]

#: The marker bytes of the forms :func:`sender_forms` reports: ext 8/16/32 (c7-c9), uint32 and
#: uint64 (ce, cf), int32 and int64 (d2, d3), fixext 1-16 (d4-d8).
_MARKERS = re.compile(rb"[\xc7-\xc9\xce\xcf\xd2-\xd8]")
# bytes of the length field after a str/bin/ext marker, and the fixed sizes of the others
_LEN_BYTES = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC7: 1, 0xC8: 2, 0xC9: 4}
_FIXED = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xD0: 1, 0xD1: 2, 0xDC: 2, 0xDD: 4, 0xDE: 2,
          0xDF: 4}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_WIDE = {0xCE: ("uint32", 4, False), 0xCF: ("uint64", 8, False), 0xD2: ("int32", 4, True),
         0xD3: ("int64", 8, True)}


@dataclass(frozen=True, slots=True)
class WireForm:
    """One value written in a form a rule is about: ``form`` is ``int64``, ``uint64``,
    ``int32`` or ``uint32`` (``value`` the integer) or ``ext`` (``value`` the type code), at
    byte ``offset`` of the payload."""

    offset: int
    form: str
    value: int


def may_have_forms(payload: bytes | memoryview) -> bool:
    """False when the payload cannot hold a form :func:`sender_forms` reports (no marker
    byte at all): the cheap test before the walk."""
    return _MARKERS.search(payload) is not None


def sender_forms(payload: bytes | memoryview, int_range: tuple[int, int],
                 limit: int = 64) -> list[WireForm]:
    """Every 64-bit integer, every integer written as an integer outside ``int_range``
    (inclusive) and every extension value of ``payload``, at any depth, in order; at most
    ``limit`` of them (a frame that breaks the rule a million times is reported by its first
    ones)."""
    data = bytes(payload)
    low, high = int_range
    out: list[WireForm] = []
    pos, end = 0, len(data)
    while pos < end and len(out) < limit:
        b = data[pos]
        if b <= 0x7F or b >= 0xE0 or 0x80 <= b <= 0x9F or b in (0xC0, 0xC2, 0xC3):
            pos += 1                      # fixint, fixmap, fixarray, nil, bool
        elif 0xA0 <= b <= 0xBF:
            pos += 1 + (b & 0x1F)         # fixstr
        elif b in _WIDE:
            form, size, signed = _WIDE[b]
            value = int.from_bytes(data[pos + 1:pos + 1 + size], "big", signed=signed)
            if size == 8 or not low <= value <= high:
                out.append(WireForm(pos, form, value))
            pos += 1 + size
        elif b in _FIXED:
            pos += 1 + _FIXED[b]          # floats, small ints, container headers
        elif b in _FIXEXT:
            out.append(WireForm(pos, "ext", int.from_bytes(data[pos + 1:pos + 2], "big",
                                                           signed=True)))
            pos += 2 + _FIXEXT[b]
        elif b in _LEN_BYTES:
            n = _LEN_BYTES[b]
            size = int.from_bytes(data[pos + 1:pos + 1 + n], "big")
            if b >= 0xC7 and b <= 0xC9:   # ext 8/16/32: a type byte, then the body
                out.append(WireForm(pos, "ext", int.from_bytes(data[pos + 1 + n:pos + 2 + n],
                                                               "big", signed=True)))
                pos += 1
            pos += 1 + n + size
        else:                             # 0xc1 (never used): not MessagePack; stop
            break
    return out
