"""Sans-IO codec for the quicx binary protocol: a strict incremental decoder and an encoder.

Nothing here opens a socket. :class:`QuicxDecoder` takes bytes as they arrive (``feed``) and
returns the complete frames, whatever the segmentation: the 6-byte header is validated as soon
as it is complete, *before* any payload is buffered, so a frame that claims 4 GiB is refused
from its header (or, where the profile allows it, buffered only as its bytes actually arrive;
nothing is allocated ahead). The header checks run in a fixed order: version, opcode known to
the profile, opcode not reserved and carried on TCP, direction allowed for the receiver's role,
length within ``max_payload_bytes``, the zero-length rule and the layout's size. The payload
is then walked field by field along the spec's layout, which finds the exact byte at fault (a
length field pointing past the frame, a field over its ``max-size`` limit, invalid text) and
yields the field values in the same pass. Every error is a :class:`ProtocolError` subclass
that names the spec's error kind, requirement and reaction, the absolute stream offset and,
for ``reply``, the MSG_ERROR code to answer with. After a ``reply`` error the rest of the
offending frame is skipped (without buffering) and decoding resumes with the next ``feed``
(``feed(b"")`` resumes on buffered bytes); after a ``close`` error the decoder stays failed.
Frames decoded before an error in the same call ride on the exception's ``frames``. Reactions
are the daemon's: a producer, worker or monitor cannot answer MSG_ERROR, so a client-side
decoder reacts as ``semantics.client_error_reaction`` says. Opcodes, sizes, limits and error
codes all come from the profile.

Fast path. Everything the checks and the layouts determine is worked out once per decoder,
from the profile, so that a frame costs one header unpack, one dict lookup, a range check and
its layout's plan:

* the header is read with a ``struct.Struct`` whose format is derived from the header's field
  types (:func:`~queuewire.spec.quicx.struct_format`: ``u1 u1 u4be`` -> ``>BBL``); the hot loop
  reads the u1 version and u1 opcode as one big-endian u2 key (``>HL``) and looks it up in an
  index of every accepted (version, opcode) pair;
* every opcode that passes the opcode checks for this receiver (known, not reserved, on TCP,
  direction allowed) gets an entry with the range of lengths the length checks accept (the
  payload cap, the zero-length rule, the fixed or minimum size). A header whose key is in the
  index and whose length is in range is valid; any other header goes through the ordered
  checks above, which name the first rule it breaks;
* each layout has a decoding plan (:mod:`.quicx_plans`, generated from the layout into
  :mod:`.quicx_plans_generated` by ``make generate``): its leading integer fields are one
  ``struct`` unpack, its variable fields are slices sized by those integers, a fixed size or
  the end of the frame, with the size, ``max-size`` and text checks of the walk. An empty
  layout decodes to ``{}`` without any parsing. A layout the plan cannot express (an integer
  after a variable field), or one the generated module does not have, falls back to the full
  walk followed by the layout's ``construct`` Struct (``MessageType.struct``);
* each ``feed`` decodes straight from the bytes it was given (joined to the buffered tail of
  the previous call, if any); only the incomplete tail (at most one frame) is kept, and a
  frame still incomplete is not looked at again until its last byte has arrived.
  :class:`Message` is a frozen named tuple, built with one ``tuple.__new__``;
* the frame loop itself is generated per profile and receiver (:mod:`.quicx_scan`, into
  :mod:`.quicx_scan_generated`): one function with a branch per opcode, each checking the
  length against the range this decoder accepts for it and running its layout's plan
  statements inline, so a run of valid frames costs no call, lookup or tuple unpacking per
  frame. The scan never raises: it stops at the first frame it does not decode completely
  (an error, an incomplete frame) and the general loop below takes that one frame, so errors
  and state are always the general path's (tests/codecs/test_quicx_scan.py compares the two
  on random streams).

A :class:`Message` per frame has a floor in CPython: the tuple subclass, the field dict, the
raw slice and the offset cost about as much again as the rest of a small frame's decoding
(benchmarks/codec_bench.py: a bare ``struct`` split 0.26 µs a frame, ``feed`` ~0.9 µs).
:meth:`QuicxDecoder.feed_rows` returns each frame as a plain tuple ``(opcode, *field values)``
instead, after the same checks, for a caller that dispatches on the opcode (~0.4 µs a frame on
the same stream).

The encoder has plans too (:func:`.quicx_plans.encode_plan`): header and integer prefix in one
``struct`` pack, then the variable fields; anything but plain values goes the general path
(every check, then the construct Struct), which stays the declarative layout and the
cross-check: tests/codecs/test_quicx_plans.py proves both paths give the same bytes, and the
decoding plans the same fields and faults as the walk.
"""

from __future__ import annotations

import dataclasses
import operator
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, NoReturn, cast

from construct import ConstructError

from ..spec import Profile, load_profile
from ..spec.model import ProtocolErrorKind
from ..spec.quicx import DAEMON, LayoutField, MessageType, QuicxSpec, struct_format
from .errors import EncodeError, FramingError, MessageError, PayloadError, ProtocolError
from .quicx_plans import DecodePlan as _Plan
from .quicx_plans import EncodePlan, Fault, decode_plan, encode_plan
from .quicx_scan import Scan, scan_for

__all__ = [
    "Message",
    "QuicxDecoder",
    "QuicxEncodeError",
    "QuicxEncoder",
    "QuicxFramingError",
    "QuicxMessageError",
    "QuicxPayloadError",
    "allowed",
    "decode",
    "encode",
    "from_text",
    "to_json",
]

# The decoder's entry for an opcode: (shortest and longest length the length checks accept,
# decoding plan, message name, opcode)
_Entry = tuple[int, int, _Plan | None, str, int]


# ----------------------------------------------------------------------------------- values

class Message(NamedTuple):
    """One decoded frame: message name and opcode, decoded fields, the frame's bytes (header
    included) and the absolute offset of its first byte in the stream.

    A frozen value: a named tuple (the decoder's hot loop builds it with one
    ``tuple.__new__``, about half the cost of filling a slotted dataclass), whose attributes
    cannot be set (:class:`dataclasses.FrozenInstanceError`)."""

    name: str
    code: int
    fields: dict[str, Any]
    raw: bytes
    offset: int

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view: ``{type, code, fields}`` with bytes as lowercase hex."""
        return {"type": self.name, "code": self.code, "fields": to_json(self.fields)}


class FrameSpan(NamedTuple):
    """Where one frame lies in a byte string, read from its header alone."""

    version: int
    code: int
    start: int   # offset of its header
    end: int     # start + header + declared length: past the data for a frame cut short


def frame_spans(spec: QuicxSpec, data: bytes) -> list[FrameSpan]:
    """The frames laid end to end in ``data``, each found from the one before by its
    header's declared length, as a receiver that skips a refused frame walks them; nothing is
    decoded or checked. A trailing piece shorter than a header is no frame; the last span's
    ``end`` past ``len(data)`` is a frame cut short."""
    head = struct.Struct(struct_format(spec.header))
    order = [f.id for f in spec.header]
    at_v, at_t, at_n = (order.index(k) for k in ("version", "msg_type", "len_payload"))
    out, pos = [], 0
    while pos + head.size <= len(data):
        fields = head.unpack_from(data, pos)
        end = pos + head.size + fields[at_n]
        out.append(FrameSpan(fields[at_v], fields[at_t], pos, end))
        pos = end
    return out


def swap_bytes(value: int, width: int) -> int:
    """``value`` as a ``width``-byte integer with its byte order reversed (what a peer that
    writes it little-endian puts on a big-endian wire)."""
    return int.from_bytes(value.to_bytes(width, "big"), "little")


def from_text(spec: QuicxSpec, name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Field values written as text (the case language, a learn section) as the encoder takes
    them: a ``bytes`` field of ``name``'s layout from ``hex:...`` (whitespace ignored) or
    else the text's UTF-8; every other value as it is. ``ValueError`` for bad hex."""
    out = dict(fields)
    for f in spec.messages[name].layout:
        v = out.get(f.id)
        if f.type == "bytes" and isinstance(v, str):
            if v.startswith("hex:"):
                try:
                    out[f.id] = bytes.fromhex("".join(v[4:].split()))
                except ValueError:
                    raise ValueError(f"{v[:40]!r} is not hex") from None
            else:
                out[f.id] = v.encode("utf-8")
    return out


def to_json(fields: dict[str, Any]) -> dict[str, Any]:
    """Field values for JSON: integers and text as they are, bytes as lowercase hex."""
    return {k: v.hex() if isinstance(v, (bytes, bytearray, memoryview)) else v
            for k, v in fields.items()}


class _QuicxErrorMixin(ProtocolError):
    """Adds the MSG_ERROR code a ``reply`` answers with (None for other reactions), and its
    name. A ProtocolError itself, so that it is typed as one; it comes first among the bases
    of each quicx error, before the ProtocolError subclass that gives the error's category."""

    error_kind: ProtocolErrorKind
    error_name: str | None

    def __init__(self, kind: ProtocolErrorKind, message: str, *, error_code: int | None = None,
                 error_name: str | None = None, **kwargs: Any):
        self.error_kind = kind
        self.error_code = error_code if kind.reaction == "reply" else None
        self.error_name = error_name if self.error_code is not None else None
        super().__init__(kind, message, **kwargs)

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out["error_code"] = self.error_code
        return out


class QuicxFramingError(_QuicxErrorMixin, FramingError):
    """The header or the stream is wrong: version, length rules, truncation."""


class QuicxMessageError(_QuicxErrorMixin, MessageError):
    """The opcode does not fit the profile or the receiver: unknown, reserved, wrong direction."""


class QuicxPayloadError(_QuicxErrorMixin, PayloadError):
    """The frame is intact but its payload breaks its layout."""


class QuicxEncodeError(_QuicxErrorMixin, EncodeError):
    """A message or value the encoder cannot put on the wire under the profile."""


def _spec_of(profile: Profile | str) -> tuple[Profile, QuicxSpec]:
    if isinstance(profile, str):
        profile = load_profile(profile)
    if profile.protocol != "quicx":
        raise ValueError(f"profile {profile.name} is not a quicx profile")
    return profile, profile.model


def _roles(spec: QuicxSpec, role: str | Iterable[str] | None) -> frozenset[str] | None:
    if role is None:
        return None
    roles = frozenset([role] if isinstance(role, str) else role)
    unknown = roles - set(spec.roles)
    if unknown or not roles:
        raise ValueError(f"unknown role(s) {sorted(unknown)}; known: {list(spec.roles)}")
    if DAEMON in roles and len(roles) > 1:
        raise ValueError("the daemon role cannot be combined with a client role")
    return roles


def allowed(profile: Profile | str, name: str, sender: str | None = None,
            receiver: str | None = None) -> bool:
    """Whether message ``name`` may be sent from ``sender`` to ``receiver`` in the profile."""
    return _spec_of(profile)[1].allowed(name, sender, receiver)


# ---------------------------------------------------------------------------------- decoder

class _Refused(Exception):
    """A refused header whose payload the decoder skips: carries the error to raise once the
    hot loop has consumed the header."""

    def __init__(self, error: ProtocolError):
        self.error = error


#: The bound a producer, worker or monitor puts on a daemon's frame where the profile bounds
#: payloads only by the u32 length field (quicx/v1): bunqueue's frame limit, 64 MiB. Past it a
#: length is refused at once (``byte_order`` when it fits read little-endian), not waited for.
REPLY_PAYLOAD_MAX = 64 << 20


class QuicxDecoder:
    """Incremental, strict decoder of a quicx byte stream as received by ``role``.

    ``role`` is the receiving side: ``"daemon"``, a client role (``"producer"``, ``"worker"``,
    ``"monitor"``), several client roles for a connection that plays more than one, or None to
    skip the direction check. ``max_payload`` may lower (never raise) the profile's
    ``max_payload_bytes`` as a local policy, e.g. under quicx/v1, whose only bound is the u32.
    """

    def __init__(self, profile: Profile | str, role: str | Iterable[str] | None = DAEMON, *,
                 max_payload: int | None = None):
        self.profile, self.spec = _spec_of(profile)
        spec = self.spec
        self.roles = _roles(spec, role)
        cap = spec.max_payload_bytes
        if max_payload is not None:
            cap = max_payload if cap is None else min(cap, max_payload)
        self.max_payload = cap
        self._is_daemon = self.roles is not None and DAEMON in self.roles
        self._client = self.roles is not None and not self._is_daemon
        hs = spec.header_size
        self._hsize = hs
        self._off = spec.header_offsets
        # the header as (version, msg_type, len_payload), whatever the field order
        head = struct.Struct(struct_format(spec.header))
        if head.size != hs:
            raise ValueError(f"header struct {head.format!r} is {head.size} bytes, not {hs}")
        order = [f.id for f in spec.header]
        pick = tuple(order.index(k) for k in ("version", "msg_type", "len_payload"))
        self._unpack: Callable[[bytes, int], tuple[Any, ...]]
        if pick == (0, 1, 2) and len(order) == 3:
            self._unpack = head.unpack_from
        else:
            unpack_head, getter = head.unpack_from, operator.itemgetter(*pick)
            self._unpack = lambda data, pos: getter(unpack_head(data, pos))
        # opcode -> (shortest and longest length the length checks accept, decoding plan,
        # message name, opcode), for the opcodes that pass the opcode checks for this receiver
        # len_payload is an integer field, so it has a max_value
        top = cast(int, spec.header[order.index("len_payload")].max_value)
        self._len_bytes = (top.bit_length() + 7) // 8
        self._plans: dict[int, _Entry] = {}
        for code, msg in spec.by_code.items():
            if msg.reserved or msg.transport != spec.transport or not self._accepts(msg):
                continue
            lo, hi = msg.min_size, top if cap is None else min(top, cap)
            if msg.payload == "empty":
                hi = min(hi, 0)
            if msg.payload == "required":
                lo = max(lo, 1)
            if msg.fixed_size is not None:
                lo, hi = max(lo, msg.fixed_size), min(hi, msg.fixed_size)
            self._plans[code] = (lo, hi, decode_plan(msg), msg.name, code)
        # the hot loop reads (key, len_payload) and looks the key up: for the u1 version and
        # u1 opcode that lead the header the key is both bytes as one big-endian u2 (one unpack,
        # one lookup for the version and opcode checks), for any other header the pair
        types = [spec.header[i].type for i in pick]
        self._u2_key = pick == (0, 1, 2) and len(order) == 3 and types[:2] == ["u1", "u1"]
        self._unpack_key: Callable[[bytes, int], tuple[Any, ...]]
        if self._u2_key:
            self._key_format = ">H" + head.format[3:]
            self._unpack_key = struct.Struct(self._key_format).unpack_from
        else:
            unpack3 = self._unpack
            self._unpack_key = lambda data, pos: (lambda v, c, n: ((v, c), n))(*unpack3(data, pos))
        self._versions = spec.accepted_versions  # builds the keyed index
        self._buf = bytearray()    # the unconsumed tail of the last feed (at most one frame)
        self._need = hs            # bytes the buffer needs before decoding can go on
        self._pos = 0              # absolute stream offset of self._buf[0]
        self._skip = 0             # bytes of a refused frame still to drop
        self._skip_start = 0       # offset of that frame
        self._pending: tuple[int, _Entry] | None = None  # checked header at self._buf[0]
        self._failed: ProtocolError | None = None
        self._ended = False

    @property
    def _versions(self) -> frozenset[int]:
        """The header versions the fast path accepts (the profile's; a test may widen them to
        model a lax daemon): setting them rebuilds the index the hot loop looks headers up in, and
        its scans (:mod:`.quicx_scan`)."""
        return self._accepted

    @_versions.setter
    def _versions(self, versions: Iterable[int]) -> None:
        self._accepted = frozenset(versions)
        self._scan: Scan | None = None  # the frame loop written for this table (quicx_scan)
        self._scan_rows: Scan | None = None
        # keyed by the version and opcode as one u2 (_u2_key), else as a pair
        self._keyed: dict[int, _Entry] | dict[tuple[int, int], _Entry]
        if self._u2_key:
            self._keyed = {v << 8 | c: e for v in self._accepted for c, e in self._plans.items()}
            by_code = self.spec.by_code
            table = {c: (lo, hi, by_code[c]) for c, (lo, hi, *_) in self._plans.items()}
            for out, kind in (("_scan", Message), ("_scan_rows", None)):
                setattr(self, out, scan_for(table, self._accepted, self._key_format, kind))
        else:
            self._keyed = {(v, c): e for v in self._accepted for c, e in self._plans.items()}

    # -- public state
    @property
    def offset(self) -> int:
        """Absolute stream offset of the first byte not yet consumed."""
        return self._pos

    @property
    def buffered(self) -> int:
        """Bytes held in the buffer (never more than what was fed)."""
        return len(self._buf)

    @property
    def failed(self) -> ProtocolError | None:
        """The ``close`` error that ended this decoder, if any."""
        return self._failed

    @property
    def in_frame(self) -> bool:
        """True when the bytes fed so far stop inside a frame: part of a header or payload is
        buffered, or a refused frame's payload is still being skipped (what :meth:`eof` would
        call truncated). A daemon times out a peer that goes silent in this state."""
        return bool(self._skip or self._buf or self._pending is not None)

    # -- input
    def feed(self, data: bytes | bytearray | memoryview = b"") -> list[Message]:
        """Add bytes; return the frames they complete. Raises a ProtocolError subclass."""
        return self._feed(data, False)

    def feed_rows(self, data: bytes | bytearray | memoryview = b"") -> list[tuple[Any, ...]]:
        """:meth:`feed`, with each frame as a plain tuple ``(opcode, *field values)`` (the
        values of ``Message.fields``, in layout order) instead of a :class:`Message`: no name,
        field dict, raw bytes or offset per frame, for a caller that dispatches on the opcode
        (a MSG_DONE is ``(code, task_id)``). Same checks, same errors (with rows in
        ``frames``), same decoder state; the two may be mixed on one stream."""
        return self._feed(data, True)

    def _feed(self, data: bytes | bytearray | memoryview, rows: bool) -> list[Any]:
        if self._failed is not None:
            raise self._again()
        if self._ended:
            raise ValueError("feed() after eof()")
        buf = self._buf
        if buf:
            buf += memoryview(data).cast("B") if type(data) is not bytes else data
            if len(buf) < self._need:  # still inside the same header or frame
                return []
            data = bytes(buf)
        elif type(data) is not bytes:
            view = memoryview(data).cast("B")
            if self._skip:  # drop a refused frame's bytes without copying them
                n = min(self._skip, len(view))
                view = view[n:]
                self._skip -= n
                self._pos += n
            data = bytes(view)
        frames: list[Any] = []
        try:
            self._run(data, frames, rows)
        except ProtocolError as exc:
            exc.frames = frames
            if exc.reaction != "reply":
                self._failed = exc
            raise
        return frames

    def eof(self) -> None:
        """The stream ended: raise ``truncated`` if it ended inside a frame."""
        if self._failed is not None:
            raise self._again()
        self._ended = True
        if self.in_frame:
            start = self._skip_start if self._skip else self._pos
            have = self._pos + len(self._buf) - start
            exc = self._error(QuicxFramingError, "truncated",
                              f"stream ended {have} bytes into a frame", start)
            self._failed = exc
            raise exc

    # -- internals
    def _run(self, data: bytes, frames: list[Any], rows: bool = False) -> None:
        """Decode the frames in ``data`` (the stream from ``self._pos`` on) into ``frames``
        (rows or :class:`Message` s); keep the incomplete tail in the buffer, whatever
        happens. The scan (:mod:`.quicx_scan`) decodes every frame it can inline; this loop
        takes each frame it leaves (an error, an incomplete frame) and goes back to it."""
        hs, n, base = self._hsize, len(data), self._pos
        pos = 0
        entry: _Entry | None
        append, new = frames.append, tuple.__new__
        unpack_key, keyed = self._unpack_key, self._keyed
        try:
            if self._skip:  # the rest of a refused frame
                pos = min(self._skip, n)
                self._skip -= pos
                if self._skip:
                    return
            pending = self._pending
            if pending is not None:  # a frame whose header an earlier call checked, at pos 0
                length, entry = pending
                end = hs + length
                if end > n:
                    return
                self._pending = None
                plan = entry[2]
                fields = {} if plan is None else plan(data, hs, end, base + hs)
                append((entry[4], *fields.values()) if rows
                       else new(Message, (entry[3], entry[4], fields, data[:end], base)))
                pos = end
            scan = self._scan_rows if rows else self._scan
            while n - pos >= hs:
                if scan is not None:  # every frame it can decode inline, then this loop's one
                    pos = scan(data, pos, base, append)
                    if n - pos < hs:
                        break
                key, length = unpack_key(data, pos)
                entry = keyed.get(key)
                if entry is None or not entry[0] <= length <= entry[1]:
                    self._refuse_header(data, pos, base)  # raises
                end = pos + hs + length
                if end > n:
                    self._pending = (length, entry)
                    break
                _, _, plan, name, code = entry
                fields = {} if plan is None else plan(data, pos + hs, end, base + pos + hs)
                append((code, *fields.values()) if rows
                       else new(Message, (name, code, fields, data[pos:end], base + pos)))
                pos = end
        except Fault as fault:
            pos = end  # the frame is consumed even if its payload is refused
            raise self._error(QuicxPayloadError, fault.kind, fault.detail, fault.offset) from None
        except _Refused as refused:  # a header the checks refuse (reaction reply): skip its payload
            pos += hs
            raise refused.error from None
        finally:
            self._pos = base + pos
            if pos < n:
                self._buf = bytearray(memoryview(data)[pos:])
            elif self._buf:
                self._buf = bytearray()
            pending = self._pending
            self._need = 1 if self._skip else hs if pending is None else hs + pending[0]

    def _refuse_header(self, data: bytes, pos: int, base: int) -> NoReturn:
        """Raise the error of the header at ``data[pos]``, which the fast path did not accept;
        a ``reply`` error is wrapped in :class:`_Refused` once the skip of its payload is set."""
        version, code, length = self._unpack(data, pos)
        try:
            self._check_header(version, code, length, base + pos)
        except ProtocolError as exc:
            if exc.reaction == "reply":  # the caller consumes the header, the payload is skipped
                self._skip, self._skip_start = length, base + pos
                raise _Refused(exc) from None
            raise
        raise AssertionError("a header the fast path refused passed every check")  # pragma: no cover

    def _check_header(self, version: int, code: int, length: int,
                      frame: int) -> _Entry:
        """The header checks in their order; the first broken rule is raised."""
        spec, off = self.spec, self._off

        def refuse(cls: type[_QuicxErrorMixin], kind: str, detail: str,
                   field_id: str) -> _QuicxErrorMixin:
            return self._error(cls, kind, detail, frame + off[field_id])

        if version not in spec.accepted_versions:
            raise refuse(QuicxFramingError, "bad_version",
                         f"version {version:#04x} is not accepted ({sorted(spec.accepted_versions)})",
                         "version")
        msg = spec.opcode(code)
        if msg is None:
            raise refuse(QuicxMessageError, "unknown_type",
                         f"opcode {code:#04x} is no message of {self.profile.name}", "msg_type")
        if msg.reserved:
            raise refuse(QuicxMessageError, "reserved_type",
                         f"opcode {code:#04x} ({msg.name}) is reserved in {self.profile.name}",
                         "msg_type")
        if msg.transport != spec.transport:
            raise refuse(QuicxMessageError, "not_on_tcp",
                         f"{msg.name} is carried on {msg.transport}, not {spec.transport}",
                         "msg_type")
        if not self._accepts(msg):
            kind = msg.errors.get("direction", "wrong_direction") if self._is_daemon else "wrong_direction"
            raise refuse(QuicxMessageError, kind,
                         f"{msg.name} is not sent to {'/'.join(sorted(self.roles or ()))}",
                         "msg_type")
        swapped = swap_bytes(length, self._len_bytes) if self._client else length
        if swapped < length and not self._fits(code, length) and self._fits(code, swapped):
            raise refuse(QuicxFramingError, "byte_order",
                         f"{msg.name} claims {length} bytes ({length:#010x}), which it cannot "
                         f"be; read little-endian the length is {swapped}, which fits: "
                         f"the length was sent in the wrong byte order", "len_payload")
        if self.max_payload is not None and length > self.max_payload:
            raise refuse(QuicxFramingError, "payload_too_large",
                         f"{msg.name} claims {length} bytes, more than {self.max_payload}",
                         "len_payload")
        if msg.payload == "empty" and length:
            raise refuse(QuicxFramingError, "payload_forbidden",
                         f"{msg.name} has no payload but length is {length}", "len_payload")
        if msg.payload == "required" and not length:
            raise refuse(QuicxFramingError, "payload_required",
                         f"{msg.name} needs a payload but length is 0", "len_payload")
        size_kind = msg.errors.get("size", "payload_size")
        if msg.fixed_size is not None and length != msg.fixed_size:
            raise refuse(QuicxFramingError, size_kind,
                         f"{msg.name} body is {msg.fixed_size} bytes, length is {length}",
                         "len_payload")
        if length < msg.min_size:
            raise refuse(QuicxFramingError, size_kind,
                         f"{msg.name} needs at least {msg.min_size} bytes, length is {length}",
                         "len_payload")
        return self._plans[code]  # every check passed: the fast path has this plan


    def _fits(self, code: int, length: int) -> bool:
        """Whether the length checks accept ``length`` for opcode ``code``."""
        plan = self._plans.get(code)
        return plan is not None and plan[0] <= length <= plan[1]

    def _accepts(self, msg: MessageType) -> bool:
        if self.roles is None:
            return True
        if self._is_daemon:
            return msg.allows(receiver=DAEMON)
        return any(msg.allows(DAEMON, r) for r in self.roles)

    def _error(self, cls: type[_QuicxErrorMixin], kind: str, detail: str,
               offset: int) -> _QuicxErrorMixin:
        k = self.spec.error(kind)
        if self._client and k.reaction == "reply":
            k = dataclasses.replace(k, reaction=self.spec.flag("client_error_reaction"))
        code = self.spec.error_replies.get(kind)
        return cls(k, detail, offset=offset, error_code=code,
                   error_name=self.spec.error_names.get(code) if code is not None else None)

    def _again(self) -> ProtocolError:
        # every error _run raises (so every _failed) is one of this module's, built by _error
        first = cast("_QuicxErrorMixin | None", self._failed)
        assert first is not None
        return type(first)(first.error_kind, f"decoder closed by an earlier error: {first.detail}",
                           offset=first.offset, error_code=first.error_code,
                           error_name=first.error_name)


def decode(profile: Profile | str, data: bytes, role: str | Iterable[str] | None = DAEMON) -> list[Message]:
    """Decode a complete stream (``feed`` then ``eof``); the first error is raised."""
    dec = QuicxDecoder(profile, role)
    frames = dec.feed(data)
    dec.eof()
    return frames


# ---------------------------------------------------------------------------------- encoder

class QuicxEncoder:
    """Builds frames for a profile. With ``role`` set, refuses messages that role does not send.

    ``encode(name, **fields)`` checks the message is sendable in the profile (not reserved, on
    TCP), every field is present and within its limit, and the payload within
    ``max_payload_bytes``; length fields (``len_*``) are computed (if given, they must agree, so
    a decoded message's ``fields`` encode back to its bytes). ``frame`` writes an arbitrary
    header and payload with no check at all, for tests and hostile vectors.

    Every message the encoder may send has an encoding plan (:func:`.quicx_plans.encode_plan`,
    compiled once from the layout): ``encode`` builds the frame with ``struct`` when the plan
    accepts the values and takes the general path, :meth:`encode_checked` (every check, then
    the layout's construct Struct), for anything else, so errors are always the general
    path's. The two give the same bytes (tests/codecs/test_quicx_plans.py).
    """

    def __init__(self, profile: Profile | str, role: str | None = None):
        self.profile, self.spec = _spec_of(profile)
        self.role = role
        if role is not None:
            _roles(self.spec, role)
        spec = self.spec
        self._plans: dict[str, EncodePlan] = {}
        for name, msg in spec.messages.items():
            if msg.reserved or msg.transport != spec.transport or (
                    role is not None and not msg.allows(sender=role)):
                continue  # the general path refuses it
            try:
                plan = encode_plan(msg, spec.header, {"version": spec.version, "msg_type": msg.code},
                                   spec.max_payload_bytes)
            except KeyError:  # a header with other fields than version, msg_type, len_payload
                plan = None
            if plan is not None:
                self._plans[name] = plan

    def _fail(self, detail: str) -> QuicxEncodeError:
        return QuicxEncodeError(self.spec.error("encode_error"), detail)

    def frame(self, msg_type: int, payload: bytes = b"", *, version: int | None = None,
              length: int | None = None) -> bytes:
        """A raw frame: header fields as given (length defaults to the payload's) + payload."""
        header = {"version": self.spec.version if version is None else version,
                  "msg_type": msg_type, "len_payload": len(payload) if length is None else length}
        try:
            frame: bytes = self.spec.header_struct.build(header) + bytes(payload)  # construct: Any
            return frame
        except ConstructError as exc:
            raise self._fail(f"header {header}: {exc}") from None
        except KeyError as exc:  # a header field other than version, msg_type and len_payload
            raise self._fail(f"header {header}: no value for field {exc}") from None

    def encode(self, name: str, **fields: Any) -> bytes:
        """One frame of message ``name``; raises :class:`QuicxEncodeError` (see the class)."""
        plan = self._plans.get(name)
        if plan is not None:
            frame = plan(fields)
            if frame is not None:
                return frame
        return self.encode_checked(name, **fields)

    def encode_checked(self, name: str, **fields: Any) -> bytes:
        """:meth:`encode` by the general path alone: every check, then the construct Struct."""
        spec = self.spec
        msg = spec.messages.get(name)
        if msg is None:
            raise self._fail(f"no message {name!r} in {self.profile.name}")
        if msg.reserved:
            raise self._fail(f"{name} is reserved in {self.profile.name}")
        if msg.transport != spec.transport:
            raise self._fail(f"{name} is carried on {msg.transport} in {self.profile.name}")
        if self.role is not None and not msg.allows(sender=self.role):
            raise self._fail(f"{self.role} does not send {name} in {self.profile.name}")
        computed = {f.size for f in msg.layout if isinstance(f.size, str)}
        known = {f.id for f in msg.layout}
        extra = set(fields) - known
        if extra:
            raise self._fail(f"{name} has no field(s) {sorted(extra)}")
        values: dict[str, Any] = {}
        for f in msg.layout:
            if f.id in computed:
                continue
            if f.id not in fields:
                raise self._fail(f"{name}.{f.id} is missing")
            values[f.id] = self._value(name, f, fields[f.id])
        for f in msg.layout:  # a len_* given explicitly must agree with its field
            if isinstance(f.size, str) and f.size in fields:
                value = values[f.id]
                n = len(value.encode(cast(str, f.encoding)) if isinstance(value, str) else value)
                if fields[f.size] != n:
                    raise self._fail(f"{name}.{f.size}={fields[f.size]} but {f.id} is {n} bytes")
        try:
            payload = msg.struct.build(values)
        except (ConstructError, UnicodeError, TypeError) as exc:
            raise self._fail(f"{name}: {exc}") from None
        cap = spec.max_payload_bytes
        if cap is not None and len(payload) > cap:
            raise self._fail(f"{name} payload is {len(payload)} bytes, more than {cap}")
        return self.frame(msg.code, payload)

    def _value(self, name: str, f: LayoutField, value: Any) -> Any:
        where = f"{name}.{f.id}"
        if f.is_int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._fail(f"{where} must be an integer")
            if not 0 <= value <= f.max_value:  # type: ignore[operator]
                raise self._fail(f"{where}={value} does not fit {f.type}")
            return value
        if f.type == "str":
            if not isinstance(value, str):
                raise self._fail(f"{where} must be text")
            try:
                n = len(value.encode(f.encoding))  # type: ignore[arg-type]
            except UnicodeError as exc:
                raise self._fail(f"{where}: {exc}") from None
        else:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise self._fail(f"{where} must be bytes")
            value = bytes(value)
            n = len(value)
        if isinstance(f.size, int) and n != f.size:
            raise self._fail(f"{where} must be {f.size} bytes, got {n}")
        if f.max_bytes is not None and n > f.max_bytes:
            raise self._fail(f"{where} is {n} bytes, more than {f.max_bytes} ({f.max_size})")
        return value

    # -- convenience builders (message and field names are the spec's keys)
    def submit(self, task_type: str, payload: bytes = b"") -> bytes:
        return self.encode("MSG_SUBMIT", task_type=task_type, payload=payload)

    def ok(self, task_id: int) -> bytes:
        return self.encode("MSG_OK", task_id=task_id)

    def error(self, error_code: str | int, message: str = "") -> bytes:
        """MSG_ERROR with an error code given by name (``"INVALID_MESSAGE"``) or number."""
        return self.encode("MSG_ERROR", error_code=self.spec.error_code(error_code), message=message)

    def error_for(self, exc: ProtocolError) -> bytes:
        """The MSG_ERROR a daemon answers a ``reply`` error with."""
        code = getattr(exc, "error_code", None)
        if code is None:
            raise self._fail(f"{exc.kind} is not answered with MSG_ERROR (reaction {exc.reaction})")
        return self.error(code, exc.detail)

    def ready(self) -> bytes:
        return self.encode("MSG_READY")

    def task(self, task_id: int, task_type: str, payload: bytes = b"") -> bytes:
        return self.encode("MSG_TASK", task_id=task_id, task_type=task_type, payload=payload)

    def done(self, task_id: int) -> bytes:
        return self.encode("MSG_DONE", task_id=task_id)

    def failed(self, task_id: int, reason: str = "") -> bytes:
        return self.encode("MSG_FAILED", task_id=task_id, reason=reason)

    def wait(self) -> bytes:
        return self.encode("MSG_WAIT")

    def heartbeat(self) -> bytes:
        return self.encode("MSG_HEARTBEAT")

    def pong(self) -> bytes:
        return self.encode("MSG_PONG")

    def stats(self) -> bytes:
        return self.encode("MSG_STATS")

    def stats_response(self, **fields: int) -> bytes:
        return self.encode("MSG_STATS_RESPONSE", **fields)


def encode(profile: Profile | str, name: str, **fields: Any) -> bytes:
    """One frame of message ``name`` under ``profile`` (see :meth:`QuicxEncoder.encode`)."""
    return QuicxEncoder(profile).encode(name, **fields)
