"""Sans-IO codec for the quicx binary protocol: a strict incremental decoder and an encoder.

Nothing here opens a socket. :class:`QuicxDecoder` takes bytes as they arrive (``feed``) and
returns the complete frames, whatever the segmentation: the 6-byte header is validated as soon
as it is complete, *before* any payload is buffered, so a frame that claims 4 GiB is refused
from its header (or, where the profile allows it, buffered only as its bytes actually arrive;
nothing is allocated ahead). The header checks run in a fixed order: version, opcode known to
the profile, opcode not reserved and carried on TCP, direction allowed for the receiver's role,
length within ``max_payload_bytes``, the zero-length rule and the layout's size. The payload
is then walked field by field along the spec's layout to find the exact byte at fault (a
length field pointing past the frame, a field over its ``max-size`` limit, invalid text), and
decoded by the ``construct`` Struct the spec compiled from the same layout. Every error is a
:class:`ProtocolError` subclass that names the spec's error kind, requirement and reaction,
the absolute stream offset and, for ``reply``, the MSG_ERROR code to answer with. After a
``reply`` error the rest of the offending frame is skipped (without buffering) and decoding
resumes with the next ``feed`` (``feed(b"")`` resumes on buffered bytes); after a ``close``
error the decoder stays failed. Frames decoded before an error in the same call ride on the
exception's ``frames``. Reactions are the daemon's: a producer, worker or monitor cannot answer
MSG_ERROR, so a client-side decoder reacts as ``semantics.client_error_reaction`` says.
Opcodes, sizes, limits and error codes all come from the profile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from construct import ConstructError

from ..spec import Profile, load_profile
from ..spec.model import ProtocolErrorKind
from ..spec.quicx import DAEMON, LayoutField, MessageType, QuicxSpec
from .errors import EncodeError, FramingError, MessageError, PayloadError, ProtocolError

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
    "to_json",
]


# ----------------------------------------------------------------------------------- values

@dataclass(frozen=True)
class Message:
    """One decoded frame: message name and opcode, decoded fields, the frame's bytes (header
    included) and the absolute offset of its first byte in the stream."""

    name: str
    code: int
    fields: dict[str, Any]
    raw: bytes
    offset: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view: ``{type, code, fields}`` with bytes as lowercase hex."""
        return {"type": self.name, "code": self.code, "fields": to_json(self.fields)}


def to_json(fields: dict[str, Any]) -> dict[str, Any]:
    """Field values for JSON: integers and text as they are, bytes as lowercase hex."""
    return {k: v.hex() if isinstance(v, (bytes, bytearray, memoryview)) else v
            for k, v in fields.items()}


class _QuicxErrorMixin:
    """Adds the MSG_ERROR code a ``reply`` answers with (None for other reactions)."""

    def __init__(self, kind: ProtocolErrorKind, message: str, *, error_code: int | None = None,
                 error_name: str | None = None, **kwargs: Any):
        self.error_kind = kind
        self.error_code = error_code if kind.reaction == "reply" else None
        self.error_name = error_name if self.error_code is not None else None
        super().__init__(kind, message, **kwargs)  # type: ignore[call-arg]

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()  # type: ignore[misc]
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

@dataclass
class _Header:
    offset: int
    version: int
    msg_type: int
    length: int
    message: MessageType


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
        self.roles = _roles(self.spec, role)
        cap = self.spec.max_payload_bytes
        if max_payload is not None:
            cap = max_payload if cap is None else min(cap, max_payload)
        self.max_payload = cap
        self._is_daemon = self.roles is not None and DAEMON in self.roles
        self._client = self.roles is not None and not self._is_daemon
        hs = self.spec.header_size
        self._hsize = hs
        self._off = self.spec.header_offsets
        self._buf = bytearray()
        self._pos = 0              # absolute stream offset of self._buf[0]
        self._skip = 0             # bytes of a refused frame still to drop
        self._skip_start = 0       # offset of that frame
        self._pending: _Header | None = None
        self._failed: ProtocolError | None = None
        self._ended = False

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

    # -- input
    def feed(self, data: bytes | bytearray | memoryview = b"") -> list[Message]:
        """Add bytes; return the frames they complete. Raises a ProtocolError subclass."""
        if self._failed is not None:
            raise self._again()
        if self._ended:
            raise ValueError("feed() after eof()")
        view = memoryview(data).cast("B")
        if self._skip and not self._buf:  # drop a refused frame's bytes without buffering them
            n = min(self._skip, len(view))
            view = view[n:]
            self._skip -= n
            self._pos += n
        self._buf += view
        frames: list[Message] = []
        try:
            self._drain(frames)
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
        if self._skip or self._buf or self._pending is not None:
            start = self._skip_start if self._skip else self._pos
            have = self._pos + len(self._buf) - start
            exc = self._error(QuicxFramingError, "truncated",
                              f"stream ended {have} bytes into a frame", start)
            self._failed = exc
            raise exc

    # -- internals
    def _drain(self, frames: list[Message]) -> None:
        buf, hs = self._buf, self._hsize
        while True:
            if self._skip:
                n = min(self._skip, len(buf))
                del buf[:n]
                self._pos += n
                self._skip -= n
                if self._skip:
                    return
            hdr = self._pending
            if hdr is None:
                if len(buf) < hs:
                    return
                hdr = self._header(bytes(buf[:hs]))
                self._pending = hdr
            end = hs + hdr.length
            if len(buf) < end:
                return
            raw = bytes(buf[:end])
            del buf[:end]
            self._pos += end
            self._pending = None
            frames.append(self._payload(hdr, raw))

    def _refuse(self, cls: type[ProtocolError], kind: str, detail: str, where: int,
                frame: int, length: int) -> ProtocolError:
        """A header-level error: on ``reply`` consume the header and skip the payload."""
        exc = self._error(cls, kind, detail, where)
        if exc.reaction == "reply":
            del self._buf[:self._hsize]
            self._pos += self._hsize
            self._skip, self._skip_start = length, frame
        return exc

    def _header(self, head: bytes) -> _Header:
        spec, off = self.spec, self._off
        frame = self._pos
        h = spec.header_struct.parse(head)
        version, code, length = h.version, h.msg_type, h.len_payload

        def refuse(cls, kind, detail, field_id):
            return self._refuse(cls, kind, detail, frame + off[field_id], frame, length)

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
        return _Header(frame, version, code, length, msg)

    def _accepts(self, msg: MessageType) -> bool:
        if self.roles is None:
            return True
        if self._is_daemon:
            return msg.allows(receiver=DAEMON)
        return any(msg.allows(DAEMON, r) for r in self.roles)

    def _payload(self, hdr: _Header, raw: bytes) -> Message:
        msg = hdr.message
        base = hdr.offset + self._hsize
        payload = memoryview(raw)[self._hsize:]
        ints: dict[str, int] = {}
        pos = 0
        for f in msg.layout:
            if f.is_int:
                w = f.width
                ints[f.id] = int.from_bytes(payload[pos:pos + w], "big")  # header checked the prefix
                pos += w  # type: ignore[operator]
                continue
            n = self._blob_size(f, msg, ints, len(payload) - pos, base)
            if f.max_bytes is not None and n > f.max_bytes:
                raise self._error(QuicxPayloadError, f.errors.get("max-size", "field_too_long"),
                                  f"{msg.name}.{f.id} is {n} bytes, more than {f.max_bytes}",
                                  base + pos)
            if f.type == "str":
                try:
                    bytes(payload[pos:pos + n]).decode(f.encoding)  # type: ignore[arg-type]
                except UnicodeDecodeError as err:
                    raise self._error(QuicxPayloadError, f.errors.get("encoding", "invalid_text"),
                                      f"{msg.name}.{f.id} is not valid {f.encoding}: {err.reason}",
                                      base + pos + err.start) from None
            pos += n
        parsed = msg.struct.parse(bytes(payload))
        fields = {f.id: parsed[f.id] for f in msg.layout}
        return Message(name=msg.name, code=msg.code, fields=fields, raw=raw, offset=hdr.offset)

    def _blob_size(self, f: LayoutField, msg: MessageType, ints: dict[str, int], left: int,
                   base: int) -> int:
        if f.size_eos:
            return left
        n = f.size if isinstance(f.size, int) else ints[f.size]  # type: ignore[index]
        if n > left:
            where = base + msg.offsets.get(f.size, 0) if isinstance(f.size, str) else base
            raise self._error(QuicxPayloadError, f.errors.get("size", "payload_size"),
                              f"{msg.name}.{f.id} claims {n} bytes, {left} remain in the frame",
                              where)
        return n

    def _error(self, cls: type[ProtocolError], kind: str, detail: str, offset: int) -> ProtocolError:
        k = self.spec.error(kind)
        if self._client and k.reaction == "reply":
            k = dataclasses.replace(k, reaction=self.spec.flag("client_error_reaction"))
        code = self.spec.error_replies.get(kind)
        return cls(k, detail, offset=offset, error_code=code,
                   error_name=self.spec.error_names.get(code) if code is not None else None)

    def _again(self) -> ProtocolError:
        first = self._failed
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
    """

    def __init__(self, profile: Profile | str, role: str | None = None):
        self.profile, self.spec = _spec_of(profile)
        self.role = role
        if role is not None:
            _roles(self.spec, role)

    def _fail(self, detail: str) -> QuicxEncodeError:
        return QuicxEncodeError(self.spec.error("encode_error"), detail)

    def frame(self, msg_type: int, payload: bytes = b"", *, version: int | None = None,
              length: int | None = None) -> bytes:
        """A raw frame: header fields as given (length defaults to the payload's) + payload."""
        header = {"version": self.spec.version if version is None else version,
                  "msg_type": msg_type, "len_payload": len(payload) if length is None else length}
        try:
            return self.spec.header_struct.build(header) + bytes(payload)
        except ConstructError as exc:
            raise self._fail(f"header {header}: {exc}") from None

    def encode(self, name: str, **fields: Any) -> bytes:
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
                n = len(value.encode(f.encoding) if isinstance(value, str) else value)
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
