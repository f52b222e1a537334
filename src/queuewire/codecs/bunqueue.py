"""bunqueue framing and MessagePack, sans-IO: bytes in, messages out, no sockets.

A frame is a u32 big-endian payload length and one MessagePack map. ``FrameDecoder.feed``
takes bytes as they arrive and returns every complete message, identically whether the stream
comes whole, byte by byte or in random chunks. The design rules:

* The declared length is checked against ``max_frame_bytes`` as soon as its four bytes are
  in, before any payload is buffered, so a 4 GiB claim costs nothing (BQ-FRAME-2).
* An incomplete frame is buffered as a list of chunks and joined once, when it is complete,
  so a 64 MiB frame in 64 KiB reads costs O(n), not O(n^2).
* Payloads are decoded by msgspec, which is strict (trailing bytes, truncated containers,
  invalid UTF-8 are errors with byte offsets) and never allocates for a declared container
  size beyond the bytes present. Nesting beyond ``max_nesting_depth`` is refused, judged from
  the bytes a level at a time (:func:`payload_nests_deeper`): a value with fewer container
  marker bytes than the levels left is never opened.
* An error is a typed ``ProtocolError`` naming its requirement and reaction. A ``reply`` error
  consumes only its frame: what came before is in ``error.frames`` and ``feed(b"")``
  continues after it. A ``close`` error kills the decoder.

JavaScript ``undefined`` (msgpackr's ext 0) decodes to the ``UNDEFINED`` singleton and the
encoder writes it back; integers beyond 32 bits are written as float64, as msgpackr does,
because the reference implementation reads 64-bit integers as BigInt (BQ-MSGPACK-7).
"""

from __future__ import annotations

import itertools
import re
import struct
from dataclasses import dataclass
from typing import Any

import msgspec

from ..spec import Profile, load_profile
from .errors import EncodeError, FramingError, PayloadError, ProtocolError

# MessagePack container markers: fixmap 0x80-0x8f, fixarray 0x90-0x9f, array16/32, map16/32.
# A payload with at most `depth` of these bytes cannot nest deeper than `depth`;
# translate(None, NOT_CONTAINER) deletes every other byte, leaving just the candidates.
NOT_CONTAINER = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF))
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
# Every integer beyond int32/uint32 has ten digits or more: a message whose JSON text has no
# such integer token holds no integer FrameEncoder must rewrite.
#: An integer token of ten digits or more in msgspec's JSON text: a float is always written
#: with a "." or an exponent (1764000000000.0, 1e16), so digits next to one of those are a
#: float's, never an integer's; digits inside strings may match (then the exact walk decides).
_WIDE_INT_TOKEN = re.compile(rb"(?<![.\d])\d{10,}(?![.\deE])")
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_TEN_ZEROS = b"0" * 10
# Reads a payload back as plain dicts, lists and ints (extensions kept as Ext).
_PLAIN_DECODE = msgspec.msgpack.Decoder(
    ext_hook=lambda code, data: msgspec.msgpack.Ext(code, bytes(data))).decode


class _Undefined:
    """JavaScript ``undefined``: msgpackr's fixext 1 type 0. Reads as an absent value."""

    __slots__ = ()
    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "undefined"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNDEFINED"


UNDEFINED = _Undefined()


class _UnknownExtension(Exception):
    def __init__(self, code: int, size: int):
        self.code, self.size = code, size


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded frame with where it sat in the stream (for transcripts, the tap, the CLI)."""

    offset: int      # absolute stream offset of the length prefix
    length: int      # payload length
    payload: bytes   # raw MessagePack payload
    value: Any       # decoded object


def bunqueue_profile(profile: Profile | str | None) -> Profile:
    if isinstance(profile, Profile):
        return profile
    return load_profile(profile or "bunqueue/v2")


def nests_too_deep(payload: bytes | memoryview, obj: Any, limit: float) -> bool:
    """Whether the message encoded as ``payload`` nests deeper than ``limit`` (BQ-MSGPACK-3),
    for a sender that checks what it is about to write (``obj``: what it encoded) or a
    decoder that checks what it read (``obj``: the decoded map): :func:`payload_nests_deeper` on the
    bytes (what a server sees, whatever mapping or sequence types ``obj`` was built from), or
    the walk over ``obj`` where msgspec cannot read them back."""
    try:
        return payload_nests_deeper(payload, limit)
    except RecursionError:
        return True
    except (msgspec.DecodeError, ValueError, TypeError):  # an extension msgspec rejects
        return depth_exceeds(obj, limit)


_RAW_MAP = msgspec.msgpack.Decoder(dict[Any, msgspec.Raw]).decode
_RAW_ARRAY = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
_MAP_MARKERS = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))
_ARRAY_MARKERS = frozenset((*range(0x90, 0xA0), 0xDC, 0xDD))


def payload_nests_deeper(payload: bytes | memoryview, limit: float) -> bool:
    """Whether the MessagePack value ``payload`` holds containers nested deeper than ``limit``
    (the top-level container is level 1), read from the bytes a level at a time: a value
    with no more container marker bytes than the levels it may still hold cannot exceed them
    (the cheap count), and only a container that fails the count has its members sliced out
    (``msgspec.Raw``, no copy) and looked at. A PUSHB of a thousand entries costs a count per
    entry, not a walk over every map of every job. Raises what msgspec raises on bytes it
    cannot read (the caller decides)."""
    stack: list[tuple[Any, float]] = [(payload, limit)]  # (a value's bytes, levels it may hold)
    while stack:
        raw, left = stack.pop()
        if len(raw) <= left:  # a value of n bytes holds at most n containers
            continue
        view = memoryview(raw)
        first = view[0]
        if first not in _MAP_MARKERS and first not in _ARRAY_MARKERS:
            continue  # a scalar or an extension: no container
        if left < 1:
            return True
        if len(view.tobytes().translate(None, NOT_CONTAINER)) <= left:
            continue
        members = _RAW_MAP(view).values() if first in _MAP_MARKERS else _RAW_ARRAY(view)
        stack.extend(zip(members, itertools.repeat(left - 1)))
    return False


def undefined_to_none(obj: Any) -> Any:
    """``obj`` with every ``UNDEFINED`` (msgpackr's ext 0) replaced by None, at any depth: the
    null a caller hands on (bunqueue/v3, BQ-MSGPACK-201); ``obj`` itself when it holds none."""
    if obj is UNDEFINED:
        return None
    if type(obj) is dict:
        return {k: undefined_to_none(v) for k, v in obj.items()}
    if type(obj) is list:
        return [undefined_to_none(v) for v in obj]
    return obj


def depth_exceeds(obj: Any, limit: float) -> bool:
    """Whether containers in ``obj`` nest deeper than ``limit`` (the top-level map is level 1).

    Iterative, so it is safe on any input the decoder produced.
    """
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if type(node) is dict else node
        for child in children:
            if type(child) is dict or type(child) is list or type(child) is tuple:
                stack.append((child, depth + 1))
    return False


class FrameDecoder:
    """Incremental decoder for one direction of a bunqueue connection."""

    def __init__(self, profile: Profile | str | None = None, *, max_frame_bytes: int | None = None,
                 check_depth: bool = True):
        self.profile = bunqueue_profile(profile)
        spec = self.profile.model
        self._errors = spec.protocol_errors
        self.max_frame_bytes = spec.max_frame_bytes if max_frame_bytes is None else max_frame_bytes
        # max_nesting_depth is a rule for requests (BQ-MSGPACK-3); a client reading replies
        # (a job whose data is at the limit sits deeper in its reply) passes
        # check_depth=False and keeps only msgspec's own recursion guard
        self.max_depth: float = spec.max_nesting_depth if check_depth else float("inf")
        undef_code, undef_data = spec.undefined_ext
        #: how many JavaScript undefined values (ext 0) the decoder has read: a caller that
        #: hands values on as null (a client, BQ-MSGPACK-201) converts only when it moved
        self.undefined_seen = 0
        me = self

        def ext_hook(code: int, data: memoryview) -> Any:
            if code == undef_code and data == undef_data:
                me.undefined_seen += 1
                return UNDEFINED
            raise _UnknownExtension(code, len(data))

        self._decode = msgspec.msgpack.Decoder(ext_hook=ext_hook).decode
        self._prefix = struct.Struct(spec.len_format)  # len_payload (BQ-FRAME-1)
        self._chunks: list[bytes] = []
        self._have = 0          # bytes buffered in _chunks
        self._need = self._prefix.size  # bytes needed before the next frame can be read
        self._base = 0          # stream offset of the first buffered byte
        self._dead: ProtocolError | None = None

    # -- public API ---------------------------------------------------------------------------
    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return self._have

    @property
    def offset(self) -> int:
        """Stream offset of the next frame: bytes consumed so far."""
        return self._base

    def feed(self, data: bytes | bytearray | memoryview = b"") -> list[Any]:
        """Add bytes; return the decoded messages of every frame now complete."""
        return self._run(data, False)

    def feed_frames(self, data: bytes | bytearray | memoryview = b"") -> list[Frame]:
        """Like ``feed`` but returns ``Frame`` records with offsets and raw payloads."""
        return self._run(data, True)

    def feed_whole(self, frame: bytes) -> list[Any]:
        """``feed`` for a caller that has already cut the stream into whole frames (a proxy):
        one frame decoded straight away when nothing is buffered and it breaks no rule;
        otherwise, and for every frame those rules refuse, ``feed`` itself, whose typed error
        is the verdict."""
        size = self._prefix.size
        n = len(frame) - size
        if n > 0 and not self._have and self._dead is None and n <= self.max_frame_bytes \
                and self._prefix.unpack_from(frame)[0] == n:
            payload = frame[size:]
            try:
                value = self._decode(payload)
            except Exception:  # noqa: BLE001 - classified by feed() below
                return self.feed(frame)
            if type(value) is dict and (n <= self.max_depth or
                                        not nests_too_deep(payload, value, self.max_depth)):
                self._base += len(frame)
                return [value]
        return self.feed(frame)

    def eof(self) -> None:
        """The peer closed its side: buffered bytes mean a truncated frame (BQ-FRAME-1)."""
        if self._dead is not None:
            raise self._dead
        if self._have:
            self._fail(FramingError, "truncated_frame",
                       f"stream ended with {self._have} bytes of an incomplete frame "
                       f"({self._need} needed)", self._base, [])

    # -- core ---------------------------------------------------------------------------------
    def _fail(self, cls: type[ProtocolError], kind: str, msg: str, offset: int, out: list[Any]) -> None:
        err = cls(self._errors[kind], msg, offset=offset, frames=out)
        if err.reaction == "close":
            self._dead = err
            self._chunks, self._have = [], 0
        raise err

    def _run(self, data: Any, raw: bool) -> list[Any]:
        if self._dead is not None:
            raise self._dead
        if data:
            if type(data) is not bytes:  # the caller may reuse its buffer: keep a copy
                data = bytes(data)
            self._chunks.append(data)
            self._have += len(data)
        if self._have < self._need and not (
                self._need - self._prefix.size > self.max_frame_bytes
                and self._have >= self._prefix.size):
            return []  # (a prefix already in that declares too much is judged below, now)
        chunks = self._chunks
        buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        n = len(buf)
        out: list[Any] = []
        append = out.append
        unpack_from = self._prefix.unpack_from
        prefix_size = self._prefix.size
        decode = self._decode
        max_len = self.max_frame_bytes
        max_depth = self.max_depth
        pos = 0
        view = memoryview(buf)
        try:
            while n - pos >= prefix_size:
                (length,) = unpack_from(buf, pos)
                if length > max_len:
                    self._fail(FramingError, "frame_too_large",
                               f"frame declares {length} bytes, more than max_frame_bytes "
                               f"{max_len}", self._base + pos, out)
                start = pos + prefix_size
                end = start + length
                if end > n:
                    break
                payload = view[start:end]
                try:
                    value = decode(payload)
                except Exception as exc:  # noqa: BLE001 - classified below; never escapes untyped
                    at = self._base + start
                    pos = end  # the frame boundary is intact: consume it
                    self._payload_error(exc, payload, at, out, buf, pos)
                if type(value) is not dict:
                    at = self._base + start
                    pos = end
                    self._keep(buf, pos)
                    self._fail(PayloadError, "not_a_map",
                               f"payload is a {type(value).__name__}, not a map", at, out)
                if length > max_depth and nests_too_deep(payload, value, max_depth):
                    at = self._base + start
                    pos = end
                    self._keep(buf, pos)
                    self._fail(PayloadError, "too_deep",
                               f"containers nest deeper than max_nesting_depth {max_depth}",
                               at, out)
                if raw:
                    append(Frame(self._base + pos, length, bytes(payload), value))
                else:
                    append(value)
                pos = end
        finally:
            view.release()
        self._keep(buf, pos)
        return out

    def _keep(self, buf: Any, pos: int) -> None:
        """Drop the consumed ``pos`` bytes of ``buf``; set what the next frame needs."""
        if self._dead is not None:
            return
        tail = bytes(buf[pos:]) if pos < len(buf) else b""
        self._base += pos
        self._chunks = [tail] if tail else []
        self._have = len(tail)
        size = self._prefix.size
        self._need = size + self._prefix.unpack_from(tail)[0] if len(tail) >= size else size

    def _payload_error(self, exc: Exception, payload: memoryview, start: int, out: list[Any],
                       buf: Any, pos: int) -> None:
        self._keep(buf, pos)
        length = len(payload)
        if length == 0:
            self._fail(PayloadError, "empty_frame", "frame has an empty payload", start, out)
        if isinstance(exc, _UnknownExtension):
            self._fail(PayloadError, "unknown_extension",
                       f"extension type {exc.code} ({exc.size} bytes) is not allowed",
                       start, out)
        if isinstance(exc, RecursionError):
            self._fail(PayloadError, "too_deep",
                       f"containers nest deeper than max_nesting_depth {self.max_depth}",
                       start, out)
        if isinstance(exc, UnicodeDecodeError):
            self._fail(PayloadError, "invalid_utf8", f"str is not valid UTF-8 ({exc.reason})",
                       start, out)
        text = str(exc)
        m = _BYTE_AT.search(text)
        at = start + int(m.group(1)) if m else start
        if "truncated" in text:
            self._fail(PayloadError, "container_too_large",
                       f"a declared size runs past the end of the {length}-byte payload",
                       start, out)
        if "trailing characters" in text:
            self._fail(PayloadError, "trailing_bytes",
                       f"bytes follow the MessagePack object ({text})", at, out)
        if "hashable" in text:
            self._fail(PayloadError, "invalid_map_key", f"a map is used as a map key ({text})",
                       start, out)
        self._fail(PayloadError, "invalid_msgpack", f"malformed MessagePack ({text})", start, out)


# -- encoding ---------------------------------------------------------------------------------


class FrameEncoder:
    """Writes messages as frames the reference implementation (msgpackr) reads correctly.

    Integers outside the 32-bit ranges are written as float64 (BQ-MSGPACK-7). One a float64
    cannot hold exactly is refused with an :class:`EncodeError`, unless ``wide_integers`` is
    set: then it is written unchanged as a 64-bit MessagePack integer. A server sets it, since
    such an integer can only have come from a client (a reqId to echo, job data to deliver) and
    BQ-MSGPACK-8 asks for it back as it came rather than for no reply at all."""

    def __init__(self, profile: Profile | str | None = None, *, wide_integers: bool = False):
        self.profile = bunqueue_profile(profile)
        spec = self.profile.model
        self._errors = spec.protocol_errors
        self.max_frame_bytes = spec.max_frame_bytes
        undef_code, undef_data = spec.undefined_ext
        undefined = msgspec.msgpack.Ext(undef_code, undef_data)

        def enc_hook(obj: Any) -> Any:
            if obj is UNDEFINED:
                return undefined
            raise TypeError(f"cannot encode {type(obj).__name__}")

        self._encode = msgspec.msgpack.Encoder(enc_hook=enc_hook).encode
        self._json = msgspec.json.Encoder(enc_hook=lambda obj: None).encode
        self._prefix = struct.Struct(spec.len_format)
        self._int_min, self._int_max = spec.int_range
        self._safe = spec.safe_integer
        self._wide = wide_integers

    def payload(self, obj: Any) -> bytes:
        """The MessagePack payload of ``obj`` (no length prefix)."""
        try:
            data = self._encode(obj)
        except (TypeError, OverflowError, ValueError) as exc:
            raise EncodeError(self._errors["encode_error"], str(exc)) from None
        # 0xcf / 0xd3 are the 64-bit integer markers; their absence proves there is nothing
        # to rewrite. They also occur inside other values (207 is cc cf), so a second,
        # C-speed test follows: an integer outside the 32-bit ranges has at least 10 digits,
        # and the JSON text of a message without one has no integer token that long (a
        # float's digits, such as a millisecond timestamp's, do not count: they come with a
        # "." or an exponent). Only a message that passes both is walked (exactly) in Python.
        if (b"\xcf" in data or b"\xd3" in data) and self._may_be_wide(obj):
            # walk the payload read back as plain maps and lists, so an integer inside any
            # mapping or sequence type msgspec writes (or a map key) is found
            try:
                plain = _PLAIN_DECODE(data)
            except (msgspec.DecodeError, ValueError) as exc:  # an extension msgspec rejects
                raise EncodeError(self._errors["encode_error"], str(exc)) from None
            data = self._encode(self._floatify(plain))
        return data

    def _may_be_wide(self, obj: Any) -> bool:
        try:
            text = self._json(obj)
        except Exception:  # noqa: BLE001 - keys JSON cannot write, ...: walk to be sure
            return True
        # the token needs ten digits in a row: the text with every digit made "0" holds ten
        # zeros in a row first (a C-speed search; the regex, 20x slower, only then)
        if _TEN_ZEROS not in text.translate(_DIGITS_AS_ZERO):
            return False
        return _WIDE_INT_TOKEN.search(text) is not None

    def prefix(self, length: int) -> bytes:
        """The length prefix of a payload of ``length`` bytes (for hand-built frames)."""
        return self._prefix.pack(length)

    def encode(self, obj: Any) -> bytes:
        """One frame: the length prefix and the payload."""
        data = self.payload(obj)
        if len(data) > self.max_frame_bytes:
            raise EncodeError(self._errors["encode_error"],
                              f"payload of {len(data)} bytes exceeds max_frame_bytes "
                              f"{self.max_frame_bytes}")
        return self._prefix.pack(len(data)) + data

    def _floatify(self, obj: Any) -> Any:
        if type(obj) is int:
            if self._int_min <= obj <= self._int_max:
                return obj
            if -self._safe <= obj <= self._safe:
                return float(obj)
            if self._wide:
                return obj  # BQ-MSGPACK-8: unchanged, as the 64-bit integer it came as
            raise EncodeError(self._errors["encode_error"],
                              f"integer {obj} is beyond float64's exact range (BQ-MSGPACK-7)")
        if type(obj) is dict:
            return {self._floatify(k): self._floatify(v) for k, v in obj.items()}
        if type(obj) in (list, tuple):
            return [self._floatify(v) for v in obj]
        return obj


def encode_frame(obj: Any, profile: Profile | str | None = None) -> bytes:
    """Convenience: one frame with the default encoder of ``profile``."""
    return _default_encoder(profile).encode(obj)


_ENCODERS: dict[str, FrameEncoder] = {}


def _default_encoder(profile: Profile | str | None) -> FrameEncoder:
    # keyed by name, but only for that very profile: a variant built under the same name
    # (dataclasses.replace with other limits) gets an encoder of its own
    prof = bunqueue_profile(profile)
    enc = _ENCODERS.get(prof.name)
    if enc is None or enc.profile is not prof:
        enc = _ENCODERS[prof.name] = FrameEncoder(prof)
    return enc
