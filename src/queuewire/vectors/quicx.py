"""Language-neutral quicx test vectors, generated from the spec and checked by the codec.

``generate(profile_name)`` walks the profile's model and writes down byte streams with their
expected outcome, so that an implementation in any language can be checked without
queuewire: feed ``hex`` to a decoder acting as ``role`` (the receiving side), then signal
end of stream. A *positive* vector decodes to exactly one frame, ``decoded`` =
``{type, code, fields}`` (integers as numbers, text as strings, ``bytes`` fields as
lowercase hex). A *negative* vector fails with ``error`` = ``{kind, requirement, reaction,
error_code, offset}`` (``offset`` is the absolute byte offset, ``error_code`` the MSG_ERROR
code a daemon answers with, or null). The set is derived from the spec, not listed by hand:
every message in every direction, every fixed size at -1 / +1, every length field pointing
past the frame, every text field with invalid UTF-8, every limit at max-1 / max / max+1 where
the profile bounds it with a size small enough to write out, every message at every role
that must refuse it, and the messages of the other profiles of the protocol where their
opcode, direction or availability differs (refused, or silently read as another message).
Nothing random is used, so the files are byte-for-byte reproducible:
``queuewire vectors generate`` rewrites ``vectors/quicx/<profile>.json`` in the shared format
of ``vectors/README.md`` (``{format, protocol, profile, vectors}``), ``queuewire vectors
check`` fails when they are stale and runs ``check_vector`` on each vector.
"""

from __future__ import annotations

from typing import Any

from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxDecoder, QuicxEncoder
from ..spec import load_profile, profile_names
from ..spec.quicx import DAEMON, LayoutField, MessageType, QuicxSpec
from ._common import FORMAT, dump

PROTOCOL = "quicx"
#: Only limits this small are written out byte for byte (a u32 bound is not).
MAX_MATERIALIZED = 1 << 16
#: Sample values: plain test data, not protocol facts.
SAMPLE_SIZED_TEXT = "send_email"
SAMPLE_REST_TEXT = "disk full: état ✓"
SAMPLE_REST_BYTES = b'{"to":"user@gmail.com"}'
BAD_UTF8 = b"ok\xc3("  # a lead byte followed by a non-continuation byte


def _sample_int(spec: QuicxSpec, f: LayoutField) -> int:
    if f.enum == "error_codes" and spec.error_codes:
        return min(e.code for e in spec.error_codes.values())
    return int.from_bytes(bytes(range(1, f.width + 1)), "big")  # type: ignore[operator]


def sample_fields(spec: QuicxSpec, msg: MessageType) -> dict[str, Any]:
    """Deterministic valid field values for ``msg`` (length fields left to the encoder)."""
    computed = {f.size for f in msg.layout if isinstance(f.size, str)}
    out: dict[str, Any] = {}
    for f in msg.layout:
        if f.id in computed:
            continue
        if f.is_int:
            out[f.id] = _sample_int(spec, f)
        elif f.type == "str":
            out[f.id] = SAMPLE_SIZED_TEXT if isinstance(f.size, str) else SAMPLE_REST_TEXT
        elif isinstance(f.size, int):
            out[f.id] = bytes(i % 256 for i in range(f.size))
        else:
            out[f.id] = SAMPLE_REST_BYTES
    return out


def pack(msg: MessageType, values: dict[str, Any], overrides: dict[str, int] | None = None) -> bytes:
    """A payload written field by field with no checks: text may be given as raw bytes and
    any length field overridden, which is how malformed payloads are made."""
    overrides = overrides or {}
    blobs = {}
    for f in msg.layout:
        if not f.is_int:
            v = values[f.id]
            # bytes(str) raises as str.encode(None) would: a str value needs the field's encoding
            blobs[f.id] = v.encode(f.encoding) if isinstance(v, str) and f.encoding else bytes(v)
    lengths = {f.size: len(blobs[f.id]) for f in msg.layout if isinstance(f.size, str)}
    out = bytearray()
    for f in msg.layout:
        if f.is_int:
            v = overrides.get(f.id, lengths.get(f.id, values.get(f.id)))
            out += int(v).to_bytes(f.width, "big")  # type: ignore[arg-type]
        else:
            out += blobs[f.id]
    return bytes(out)


class _Builder:
    def __init__(self, profile_name: str):
        self.profile = load_profile(profile_name)
        self.spec: QuicxSpec = self.profile.model
        self.enc = QuicxEncoder(self.profile)
        self.vectors: list[dict[str, Any]] = []
        self.ids: set[str] = set()

    def _id(self, suffix: str) -> str:
        vid = f"{self.profile.name}/{suffix}"
        if vid in self.ids:
            raise AssertionError(f"duplicate vector id {vid}")
        self.ids.add(vid)
        return vid

    def _run(self, role: str, data: bytes) -> tuple[list, ProtocolError | None]:
        dec = QuicxDecoder(self.profile, role)
        frames: list = []
        try:
            frames += dec.feed(data)
            dec.eof()
        except ProtocolError as exc:
            return frames + exc.frames, exc
        return frames, None

    def positive(self, suffix: str, sender: str, receiver: str, data: bytes,
                 expect: dict[str, Any] | None = None, **extra: Any) -> None:
        frames, err = self._run(receiver, data)
        if err is not None or len(frames) != 1:
            raise AssertionError(f"{suffix}: expected one frame, got {frames} / {err}")
        decoded = frames[0].as_dict()
        if expect is not None:
            want = {k: v for k, v in frames[0].fields.items() if k in expect}
            if want != expect:
                raise AssertionError(f"{suffix}: round trip gave {want}, not {expect}")
        self.vectors.append({"id": self._id(suffix), "profile": self.profile.name,
                             "direction": f"{sender}->{receiver}", "role": receiver,
                             "hex": data.hex(), "decoded": decoded, **extra})

    def negative(self, suffix: str, receiver: str, data: bytes, *, sender: str | None = None,
                 expect_kind: str | None = None, **extra: Any) -> None:
        frames, err = self._run(receiver, data)
        if err is None:
            raise AssertionError(f"{suffix}: expected an error, decoded {frames}")
        if expect_kind is not None and err.kind != expect_kind:
            raise AssertionError(f"{suffix}: expected {expect_kind}, got {err}")
        vec: dict[str, Any] = {"id": self._id(suffix), "profile": self.profile.name}
        if sender is not None:
            vec["direction"] = f"{sender}->{receiver}"
        vec.update({
            "role": receiver, "hex": data.hex(),
            "error": {"kind": err.kind, "requirement": err.requirement, "reaction": err.reaction,
                      "error_code": getattr(err, "error_code", None), "offset": err.offset},
            "frames_before": len(frames), **extra,
        })
        self.vectors.append(vec)

    def sendable(self) -> list[MessageType]:
        return [m for m in self.spec.messages.values() if self.spec.allowed(m.name)]

    def first(self, *, receiver: str, payload: str | None = None) -> MessageType:
        for m in self.sendable():
            if m.allows(receiver=receiver) and (payload is None or m.payload == payload):
                return m
        raise AssertionError(f"no message to {receiver} with payload {payload}")

    def direction(self, m: MessageType) -> tuple[str, str]:
        """The canonical direction of ``m``: to the daemon if it can go there, else the first
        receiver in the order the spec declares its roles."""
        order = {r: i for i, r in enumerate(self.spec.roles)}
        return min(m.directions, key=lambda d: (d[1] != DAEMON, order[d[1]], order[d[0]]))

    # ------------------------------------------------------------------ the vector families
    def every_message(self) -> None:
        for m in self.sendable():
            fields = sample_fields(self.spec, m)
            for s, r in sorted(m.directions):
                self.positive(f"{m.name}/{s}->{r}", s, r, self.enc.encode(m.name, **fields), fields)

    def variants(self) -> None:
        """Edge values of every field: empty and full-size blobs, integer maxima, each enum."""
        for m in self.sendable():
            s, r = self.direction(m)
            base = sample_fields(self.spec, m)
            for f in m.layout:
                if f.id not in base:
                    continue
                cases: list[tuple[str, Any]] = []
                if f.is_int:
                    cases.append(("max", f.max_value))
                    if f.enum == "error_codes":
                        cases += [(e.name, e.code) for e in self.spec.error_codes.values()]
                elif f.width is None:
                    cases.append(("empty", "" if f.type == "str" else b""))
                    if f.max_bytes is not None and f.max_bytes <= MAX_MATERIALIZED:
                        cases.append(("at-max", "é" * (f.max_bytes // 2) + "x" * (f.max_bytes % 2)
                                      if f.type == "str" else b"\xab" * f.max_bytes))
                for label, value in cases:
                    fields = dict(base, **{f.id: value})
                    try:
                        data = self.enc.encode(m.name, **fields)
                    except ProtocolError:
                        continue  # over the payload cap in this profile: probed below
                    self.positive(f"{m.name}/{f.id}={label}", s, r, data, fields)

    def header_errors(self) -> None:
        spec, enc = self.spec, self.enc
        empty = self.first(receiver=DAEMON, payload="empty")
        s = self.direction(empty)[0]
        for v in sorted({0x00, max(spec.accepted_versions) + 1, 0xFF} - spec.accepted_versions):
            self.negative(f"bad_version/{v:#04x}", DAEMON, enc.frame(empty.code, version=v),
                          sender=s, expect_kind="bad_version")
        top = max(spec.by_code)
        for c in sorted({0x00, top + 1, 0xFF} - set(spec.by_code)):
            self.negative(f"unknown_type/{c:#04x}", DAEMON, enc.frame(c), expect_kind="unknown_type")
        self.negative(f"payload_forbidden/{empty.name}", DAEMON, enc.frame(empty.code, b"\x00"),
                      sender=s, expect_kind="payload_forbidden")
        for m in self.sendable():
            s, r = self.direction(m)
            if m.payload == "required":
                self.negative(f"payload_required/{m.name}", r, enc.frame(m.code), sender=s,
                              expect_kind="payload_required")
            kind = m.errors.get("size", "payload_size")
            if m.fixed_size is not None and m.fixed_size:
                for n in (m.fixed_size - 1, m.fixed_size + 1):
                    self.negative(f"{kind}/{m.name}/{n}", r, enc.frame(m.code, bytes(n)),
                                  sender=s, expect_kind=kind)
            elif m.fixed_size is None and m.min_size > 1:
                n = m.min_size - 1
                self.negative(f"{kind}/{m.name}/{n}", r, enc.frame(m.code, bytes(n)),
                              sender=s, expect_kind=kind)

    def payload_errors(self) -> None:
        for m in self.sendable():
            s, r = self.direction(m)
            values = sample_fields(self.spec, m)
            for f in m.layout:
                if isinstance(f.size, str):  # the length field claims one byte past the frame
                    good = pack(m, values)
                    pos = m.offsets[f.size]
                    width = next(x.width for x in m.layout if x.id == f.size)
                    assert width is not None  # a length field is an integer of a fixed width
                    claim = len(good) - pos - width + 1
                    limit = 1 << (8 * width)
                    if claim < limit:
                        payload = pack(m, values, {f.size: claim})
                        self.negative(f"{f.errors.get('size', 'payload_size')}/{m.name}.{f.id}", r,
                                      self.enc.frame(m.code, payload), sender=s,
                                      expect_kind=f.errors.get("size", "payload_size"))
                if f.type == "str":
                    payload = pack(m, dict(values, **{f.id: BAD_UTF8}))
                    kind = f.errors.get("encoding", "invalid_text")
                    self.negative(f"{kind}/{m.name}.{f.id}", r, self.enc.frame(m.code, payload),
                                  sender=s, expect_kind=kind)
                if f.max_bytes is not None and f.max_bytes < MAX_MATERIALIZED and f.size_eos:
                    over = (b"r" if f.type == "str" else b"\x00") * (f.max_bytes + 1)
                    kind = f.errors.get("max-size", "field_too_long")
                    payload = pack(m, dict(values, **{f.id: over}))
                    if self.spec.max_payload_bytes is None or len(payload) <= self.spec.max_payload_bytes:
                        self.negative(f"{kind}/{m.name}.{f.id}/{f.max_bytes + 1}", r,
                                      self.enc.frame(m.code, payload), sender=s, expect_kind=kind)

    def stream_errors(self) -> None:
        enc = self.enc
        sub = self.first(receiver=DAEMON, payload="required")
        s = self.direction(sub)[0]
        good = enc.encode(sub.name, **sample_fields(self.spec, sub))
        hs = self.spec.header_size
        self.negative("truncated/header", DAEMON, good[:hs // 2], sender=s, expect_kind="truncated")
        self.negative("truncated/payload", DAEMON, good[:-2], sender=s, expect_kind="truncated")
        self.negative("truncated/after-frame", DAEMON, good + good[:hs - 1], sender=s,
                      expect_kind="truncated")
        huge = {f.id: f for f in self.spec.header}["len_payload"].max_value
        assert huge is not None  # the header's length field is an integer
        cap = self.spec.max_payload_bytes
        kind = "truncated" if cap is None or huge <= cap else "payload_too_large"
        self.negative(f"claimed-{huge}-bytes/{sub.name}", DAEMON,
                      enc.frame(sub.code, b"", length=huge), sender=s, expect_kind=kind)
        if cap is not None and cap <= MAX_MATERIALIZED:
            fields = sample_fields(self.spec, sub)
            blob = next(f for f in reversed(sub.layout) if f.size_eos)
            fixed = len(pack(sub, dict(fields, **{blob.id: b""})))
            for total in (cap - 1, cap):
                data = enc.encode(sub.name, **dict(fields, **{blob.id: b"\x00" * (total - fixed)}))
                self.positive(f"max_payload_bytes/{total}", s, DAEMON, data)
            payload = pack(sub, dict(fields, **{blob.id: b"\x00" * (cap + 1 - fixed)}))
            self.negative(f"max_payload_bytes/{cap + 1}", DAEMON, enc.frame(sub.code, payload),
                          sender=s, expect_kind="payload_too_large")

    def refusals(self) -> None:
        """Each message at every role that must refuse it, and the unavailable messages."""
        spec = self.spec
        for m in spec.messages.values():
            values = sample_fields(spec, m)
            data = self.enc.frame(m.code, pack(m, values) if m.layout else b"")
            if not spec.allowed(m.name):  # reserved or not on this transport: every role refuses
                for role in spec.roles:
                    self.negative(f"unavailable/{m.name}/to-{role}", role, data)
                continue
            for role in spec.roles:
                if not m.allows(receiver=role):
                    self.negative(f"refused/{m.name}/to-{role}", role, data)

    def other_profiles(self) -> None:
        """Messages of the protocol's other profiles where this profile differs."""
        spec = self.spec
        for other_name in profile_names(PROTOCOL):
            if other_name == self.profile.name:
                continue
            other = load_profile(other_name).model
            oenc = QuicxEncoder(other_name)
            for om in other.messages.values():
                if not other.allowed(om.name):
                    continue
                mine = spec.messages.get(om.name)
                data = oenc.encode(om.name, **sample_fields(other, om))
                for s, r in sorted(om.directions):
                    if (mine is not None and mine.code == om.code and spec.allowed(om.name, s, r)
                            and mine.layout == om.layout):
                        continue  # same bytes, same meaning
                    suffix = f"from-{other_name.replace('/', '_')}/{om.name}/{s}->{r}"
                    note: dict[str, Any] = {"other": {"profile": other_name, "type": om.name}}
                    _, err = self._run(r, data)
                    if err is None:
                        self.positive(suffix, s, r, data, **note)
                    else:
                        self.negative(suffix, r, data, sender=s, **note)


def generate(profile_name: str) -> list[dict[str, Any]]:
    """Every vector of one quicx profile, in a fixed order."""
    b = _Builder(profile_name)
    b.every_message()
    b.variants()
    b.header_errors()
    b.payload_errors()
    b.stream_errors()
    b.refusals()
    b.other_profiles()
    return b.vectors


def document(profile_name: str) -> dict[str, Any]:
    """The vector file of a profile, in the shared format of ``vectors/README.md``."""
    return {"format": FORMAT, "protocol": PROTOCOL, "profile": profile_name,
            "vectors": generate(profile_name)}


def render(doc: dict[str, Any]) -> str:
    return dump(doc)


def check_vector(profile: Any, vec: dict[str, Any]) -> str | None:
    """Run one vector through the codec: a description of the mismatch, or None."""
    dec = QuicxDecoder(profile, vec["role"])
    frames: list = []
    error: ProtocolError | None = None
    try:
        frames += dec.feed(bytes.fromhex(vec["hex"]))
        dec.eof()
    except ProtocolError as exc:
        frames += exc.frames
        error = exc
    if "decoded" in vec:
        if error is not None:
            return f"unexpected error {error}"
        got = [m.as_dict() for m in frames]
        return None if got == [vec["decoded"]] else f"decoded {got}, expected {vec['decoded']}"
    if error is None:
        return f"expected error {vec['error']['kind']}, decoded {[m.name for m in frames]}"
    found = {"kind": error.kind, "requirement": error.requirement, "reaction": error.reaction,
             "error_code": getattr(error, "error_code", None), "offset": error.offset}
    if found != vec["error"]:
        return f"error {found}, expected {vec['error']}"
    if len(frames) != vec["frames_before"]:
        return f"{len(frames)} frames before the error, expected {vec['frames_before']}"
    return None
