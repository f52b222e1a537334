"""The quicx decoder's scan (:mod:`queuewire.codecs.quicx_scan`, the frame loop written from
the layouts) and its rows (``feed_rows``) against the general path: on seeded random streams
of valid, hostile and truncated frames, cut anywhere, for every profile and receiver, a
decoder with its scan and a decoder without it return the same frames (name, opcode, fields,
raw bytes, offset), raise the same errors (class, kind, detail, offset, requirement, reaction,
MSG_ERROR code, frames before it) and are left in the same state after every ``feed``; and
``feed_rows`` gives ``(opcode, *fields.values())`` of those frames, with the same errors and
state."""

from __future__ import annotations

import random
from typing import Any

import pytest

from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
from queuewire.codecs.quicx_scan import scan_source
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import DAEMON, MessageType, QuicxSpec

PROFILES = profile_names("quicx")
#: (profile, receiver, max_payload, widened versions) configurations compared
CONFIGS = [(p, role, cap, wide) for p in PROFILES
           for role in (DAEMON, "producer", "worker", "monitor", ("producer", "worker"), None)
           for cap, wide in ((None, False), (300, False), (None, True))
           if not (wide and role != DAEMON)]
STREAMS = 120  # per configuration


def model(name: str) -> QuicxSpec:
    return load_profile(name).model


# ------------------------------------------------------------------------ random streams

def _value(rng: random.Random, f: Any, spec: QuicxSpec) -> Any:
    if f.is_int:
        return rng.choice([0, 1, f.max_value, rng.randrange(f.max_value + 1)])
    bound = f.max_bytes if f.max_bytes is not None else 200
    n = rng.choice([0, 1, bound, rng.randrange(bound + 1)]) if f.size is None or f.size_eos \
        or isinstance(f.size, str) else f.size
    if f.type == "str":
        return "".join(rng.choice("ab_é€x") for _ in range(n // 3 if rng.random() < .3 else n))
    return rng.randbytes(n)


def _payload(rng: random.Random, msg: MessageType, spec: QuicxSpec) -> bytes:
    """A payload of ``msg``'s layout (built by its construct Struct), valid or broken."""
    sized = {f.size for f in msg.layout if isinstance(f.size, str)}
    values = {f.id: _value(rng, f, spec) for f in msg.layout if f.id not in sized}
    for f in msg.layout:  # text and bytes within the length field's range
        if isinstance(f.size, str):
            width = next(g for g in msg.layout if g.id == f.size).max_value
            raw = values[f.id].encode(f.encoding) if f.type == "str" else values[f.id]
            while len(raw) > width:
                values[f.id] = values[f.id][:-1]
                raw = values[f.id].encode(f.encoding) if f.type == "str" else values[f.id]
    try:
        payload = msg.struct.build(values)
    except Exception:  # noqa: BLE001 - a fixed-size field drawn the wrong size
        payload = rng.randbytes(msg.min_size)
    roll = rng.random()
    if roll < 0.08 and payload:  # a byte changed: a length past the frame, invalid UTF-8
        i = rng.randrange(len(payload))
        payload = payload[:i] + bytes([rng.choice([0x80, 0xFF, 0xC3, 0, 200])]) + payload[i + 1:]
    elif roll < 0.12:
        payload = payload[:rng.randrange(len(payload) + 1)]
    elif roll < 0.15:
        payload += rng.randbytes(rng.randrange(1, 5))
    return payload


def random_stream(rng: random.Random, profile: str, role: Any = DAEMON) -> bytes:
    """Frames of every message of the profile, mostly of those ``role`` receives, now and
    then with a wrong version, opcode or length, a broken payload, junk, or cut short."""
    spec = model(profile)
    enc = QuicxEncoder(profile)
    messages = list(spec.messages.values())
    roles = {role} if isinstance(role, str) else set(role or spec.roles)
    inbound = [m for m in messages if any(r in roles for _, r in m.directions)] or messages
    parts = []
    for _ in range(rng.randrange(1, 14)):
        roll = rng.random()
        if roll < 0.04:  # junk
            parts.append(rng.randbytes(rng.randrange(1, 12)))
            continue
        msg = rng.choice(inbound if rng.random() < 0.85 else messages)
        payload = _payload(rng, msg, spec)
        version = spec.version if rng.random() > 0.05 else rng.choice([0, 2, 0xFF])
        code = msg.code if rng.random() > 0.04 else rng.randrange(256)
        length = len(payload) if rng.random() > 0.04 else rng.choice(
            [0, len(payload) + 1, max(0, len(payload) - 1), 1 << 20])
        parts.append(enc.frame(code, payload, version=version, length=length))
    stream = b"".join(parts)
    if rng.random() < 0.3:
        stream = stream[:rng.randrange(len(stream) + 1)]
    return stream


def chunks_of(rng: random.Random, stream: bytes) -> list[bytes]:
    if rng.random() < 0.15:
        return [stream[i:i + 1] for i in range(len(stream))]
    cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(0, 6)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]


# ----------------------------------------------------------------------------- outcomes

def state(dec: QuicxDecoder) -> tuple:
    return (dec.offset, bytes(dec._buf), dec._need, dec._skip, dec._skip_start, dec._pending,
            dec.in_frame, dec.buffered, dec.failed is None, dec._ended)


def error(exc: ProtocolError, rows: bool) -> tuple:
    return (type(exc), exc.kind, exc.detail, exc.offset, exc.requirement, exc.reaction,
            exc.error_code, exc.error_name, [frame(m, rows) for m in exc.frames])


def frame(m: Any, rows: bool) -> tuple:
    return m if rows else (type(m), m.name, m.code, m.fields, type(m.raw), m.raw, m.offset)


def as_rows(outcome: list) -> list:
    """A Message outcome as ``feed_rows`` would give it."""
    def row(f):
        return (f[2], *f[3].values())
    out = []
    for kind, *rest in outcome:
        if kind == "frames":
            out.append(("frames", [row(f) for f in rest[0]], rest[1]))
        elif kind == "error":
            err, st = rest
            out.append(("error", (*err[:-1], [row(f) for f in err[-1]]), st))
        else:
            out.append((kind, *rest))
    return out


def outcome(dec: QuicxDecoder, chunks: list[bytes], rows: bool = False) -> list:
    """Feed as a daemon does (go on after ``reply`` errors), then ``eof``: every result and
    the decoder's state after each call."""
    feed = dec.feed_rows if rows else dec.feed
    out: list = []
    for chunk in [*chunks, None]:
        data = chunk
        while True:
            try:
                if data is None:
                    dec.eof()
                    out.append(("eof", state(dec)))
                else:
                    out.append(("frames", [frame(m, rows) for m in feed(data)], state(dec)))
                break
            except ProtocolError as exc:
                out.append(("error", error(exc, rows), state(dec)))
                if exc.reaction != "reply":
                    return out
                data = b""
    return out


def decoders(profile: str, role: Any, cap: int | None, wide: bool) -> tuple[QuicxDecoder, QuicxDecoder]:
    fast, general = QuicxDecoder(profile, role, max_payload=cap), QuicxDecoder(profile, role, max_payload=cap)
    if wide:  # a lax daemon taking any version byte (tests/conformance does the same)
        fast._versions = general._versions = frozenset(range(256))
    general._scan = general._scan_rows = None
    return fast, general


# -------------------------------------------------------------------------------- tests

@pytest.mark.parametrize("profile,role,cap,wide", CONFIGS)
def test_scan_equals_the_general_loop_on_random_streams(profile, role, cap, wide):
    fast, _ = decoders(profile, role, cap, wide)
    assert fast._scan is not None and fast._scan_rows is not None
    rng = random.Random(f"{profile}/{role}/{cap}/{wide}")
    for _ in range(STREAMS):
        stream = random_stream(rng, profile, role)
        chunks = chunks_of(rng, stream)
        fast, general = decoders(profile, role, cap, wide)
        expected = outcome(general, chunks)
        assert outcome(fast, chunks) == expected, stream.hex()
        fast, general = decoders(profile, role, cap, wide)
        assert outcome(fast, chunks, rows=True) == as_rows(expected), stream.hex()
        assert outcome(general, chunks, rows=True) == as_rows(expected), stream.hex()


@pytest.mark.parametrize("profile", PROFILES)
def test_rows_and_messages_mix_on_one_stream(profile):
    rng = random.Random(profile)
    for _ in range(STREAMS):
        chunks = chunks_of(rng, random_stream(rng, profile))
        expected = as_rows(outcome(decoders(profile, DAEMON, None, False)[1], chunks))
        dec = QuicxDecoder(profile, DAEMON)
        got: list = []
        for i, chunk in enumerate([*chunks, None]):
            data = chunk
            while True:
                try:
                    if data is None:
                        dec.eof()
                        got.append(("eof", state(dec)))
                    else:
                        msgs = (dec.feed_rows(data) if i % 2 else
                                [(m.code, *m.fields.values()) for m in dec.feed(data)])
                        got.append(("frames", msgs, state(dec)))
                    break
                except ProtocolError as exc:
                    err = error(exc, True)
                    if not (i % 2):
                        err = (*err[:-1], [(m.code, *m.fields.values()) for m in exc.frames])
                    got.append(("error", err, state(dec)))
                    if exc.reaction != "reply":
                        break
                    data = b""
            if got and got[-1][0] == "error" and got[-1][1][5] != "reply":
                break
        assert got == expected


def test_every_decodable_opcode_is_scanned_inline():
    """Each opcode a daemon accepts has its branch in the generated scan the decoder runs (the
    daemon's of its profile), written from its layout (no restated opcode: the codes and names
    are the profile's)."""
    for profile in PROFILES:
        dec = QuicxDecoder(profile, DAEMON)
        spec = dec.spec
        for scan, kind in ((dec._scan, "messages"), (dec._scan_rows, "rows")):
            assert scan.__module__ == "queuewire.codecs.quicx_scan_generated"
            factory = f"{kind}_{profile.replace('/', '_').replace('.', '_')}_{DAEMON}"
            # one accepted version: the scan comparing (version, opcode) keys
            assert scan.__qualname__ == f"{factory}.<locals>.keyed_scan"
        source, _ = scan_source(load_profile(profile), DAEMON)
        for code in dec._plans:
            name = spec.by_code[code].name
            assert f"code == {code:#04x}:  # {name}" in source          # the general scan
            assert f"key == key_{code:02x}:  # {name}" in source        # the keyed one
            assert f"key_{code:02x} = version << 8 | {code:#04x}  # {name}" in source


def test_a_lax_daemon_takes_every_version_byte():
    """Versions widened to every byte (a lax daemon, as tests/conformance models one): frames
    of version 0x80 and up are keyed like the others, inline and through the general loop."""
    for profile in PROFILES:
        enc = QuicxEncoder(profile)
        ready = model(profile).message("MSG_READY").code
        stream = b"".join(enc.frame(ready, version=v) for v in (0x00, 0x7F, 0x80, 0xFE, 0xFF)) + enc.done(3)
        for dec in decoders(profile, DAEMON, None, True):
            msgs = dec.feed(stream)
            assert [(m.name, m.raw[0], m.offset) for m in msgs[:5]] == [
                ("MSG_READY", v, 6 * i) for i, v in enumerate((0x00, 0x7F, 0x80, 0xFE, 0xFF))]
            assert msgs[5].fields == {"task_id": 3}
        for dec in decoders(profile, DAEMON, None, True):
            assert dec.feed_rows(stream) == [(ready,)] * 5 + [(msgs[5].code, 3)]
        fast, _ = decoders(profile, DAEMON, None, True)   # several versions: the general scan
        assert fast._scan.__qualname__.endswith("<locals>.scan")
        assert fast._scan_rows.__qualname__.endswith("<locals>.scan")
