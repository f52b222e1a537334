"""The quicx part of the model: header, message types with compiled payload layouts, error
codes, decoder errors and behaviour flags.

``spec/quicx/protocol.yaml`` describes every payload as a Kaitai-style field list
(``{id, type, size | size-eos, encoding, max-size}``). ``build`` turns each list into two
things: a tuple of :class:`LayoutField` (what a validating decoder walks to find the exact
byte at fault) and a ``construct`` ``Struct`` compiled from the same fields (``u1`` ->
``Int8ub``, ``u2be`` -> ``Int16ub``, ``u4be`` -> ``Int32ub``, ``u8be`` -> ``Int64ub``,
``size: len_x`` -> ``Bytes(this.len_x)``, ``size-eos`` -> ``GreedyBytes``, ``str`` -> text in its
encoding, and each ``len_x`` a ``Rebuild`` of its field's encoded length), so encoding and
decoding share one definition and no Struct is written by hand. :func:`struct_format` derives
the ``struct`` format of a run of integer fields from the same table (``u1`` -> ``B``,
``u4be`` -> ``L``, big-endian), for decoders that read fixed-width fields without construct
(the quicx codec's header and payload prefixes). Directions are normalised
to ``(sender, receiver)`` pairs with the daemon on exactly one side; a message may list
several roles (``from: [worker, daemon]``) and ``any``. Structural mistakes in the spec (a
duplicated opcode, a ``size`` naming no earlier length field, a layout whose size disagrees
with its limit, an error kind that is not declared) raise :class:`SpecError` at load time.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from construct import (
    Bytes,
    Construct,
    FormatField,
    GreedyBytes,
    Int8ub,
    Int16ub,
    Int32ub,
    Int64ub,
    Rebuild,
    StringEncoded,
    Struct,
    this,
)

from ._load import SpecError
from .model import (
    Limit,
    Profile,
    ProtocolErrorKind,
    StateMachine,
    error_kinds,
    frozen_map,
    state_machine,
)

#: Integer types of the layout language: construct class and width in bytes (all big-endian).
INT_TYPES: Mapping[str, tuple[FormatField[int, int], int]] = frozen_map({
    "u1": (Int8ub, 1), "u2be": (Int16ub, 2), "u4be": (Int32ub, 4), "u8be": (Int64ub, 8),
})
#: Variable types of the layout language.
BLOB_TYPES = frozenset({"bytes", "str"})
#: Role keywords of the layout language: the hub every connection ends at, and the wildcard.
DAEMON = "daemon"
ANY = "any"
PAYLOAD_RULES = frozenset({"required", "empty", "any"})
REACTIONS = frozenset({"close", "reply", "raise"})
#: Keys of an ``errors`` map: which check of a message or field reports which kind.
MESSAGE_CHECKS = frozenset({"size", "direction"})
FIELD_CHECKS = frozenset({"size", "max-size", "encoding"})


@dataclass(frozen=True)
class LayoutField:
    """One field of the header or of a payload layout."""

    id: str
    type: str
    doc: str
    requirement: str | None = None
    size: int | str | None = None       # a byte count, or the id of an earlier length field
    size_eos: bool = False              # the rest of the payload
    encoding: str | None = None         # Python codec name, for ``str``
    max_size: str | None = None         # name of the limit that bounds the field
    max_bytes: int | None = None        # that limit's ``max`` in this profile (None: unbounded)
    enum: str | None = None             # spec table the value refers to (error_codes, messages)
    errors: Mapping[str, str] = field(default_factory=frozen_map)
    # ``mirrors: {of: MSG_SUBMIT.task_type, requirement: QX-TASK-2}``: the value is that field
    # of the message this one answers, byte for byte; a mismatch breaks ``requirement``
    mirrors: str | None = None
    mirror_requirement: str | None = None

    @property
    def is_int(self) -> bool:
        return self.type in INT_TYPES

    @property
    def width(self) -> int | None:
        """Bytes the field always takes, or None when its size depends on the data."""
        if self.is_int:
            return INT_TYPES[self.type][1]
        return self.size if isinstance(self.size, int) else None

    @property
    def max_value(self) -> int | None:
        """Largest value of an integer field."""
        return (1 << (8 * INT_TYPES[self.type][1])) - 1 if self.is_int else None


@dataclass(frozen=True)
class MessageType:
    """A message of the profile: opcode, who may send it to whom, payload rule and layout."""

    name: str
    code: int
    doc: str
    doc_ref: str | None
    requirement: str | None
    payload: str                        # required | empty | any
    directions: frozenset[tuple[str, str]]
    layout: tuple[LayoutField, ...]
    struct: Construct[Any, Any] = field(repr=False, compare=False)
    fixed_size: int | None = None       # payload size when every field has a fixed width
    min_size: int = 0                   # bytes of the fixed-width fields
    offsets: Mapping[str, int] = field(default_factory=frozen_map, repr=False)  # fixed prefix
    reserved: bool = False              # the opcode is taken but the message is never sent
    transport: str = "tcp"
    errors: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def senders(self) -> frozenset[str]:
        return frozenset(s for s, _ in self.directions)

    @property
    def receivers(self) -> frozenset[str]:
        return frozenset(r for _, r in self.directions)

    def allows(self, sender: str | None = None, receiver: str | None = None) -> bool:
        """Whether ``sender`` may send this message to ``receiver`` (None matches any role)."""
        return any((sender is None or s == sender) and (receiver is None or r == receiver)
                   for s, r in self.directions)


@dataclass(frozen=True)
class ErrorCode:
    name: str
    code: int
    doc: str
    requirement: str | None


@dataclass(frozen=True)
class Flag:
    """A named behaviour of the profile (servers and clients read it instead of profile names)."""

    name: str
    value: Any
    doc: str
    requirement: str | None


@dataclass(frozen=True)
class QuicxSpec:
    title: str
    doc: str
    default_port: int
    transport: str
    roles: Mapping[str, str] = field(repr=False)   # role -> doc
    header: tuple[LayoutField, ...] = field(repr=False)
    header_size: int = 0
    # always built (build() passes it); keyword-only so it needs no default after header_size
    header_struct: Construct[Any, Any] = field(repr=False, kw_only=True)
    header_offsets: Mapping[str, int] = field(repr=False, default_factory=frozen_map)
    version: int = 0
    accepted_versions: frozenset[int] = frozenset()
    messages: Mapping[str, MessageType] = field(repr=False, default_factory=frozen_map)
    by_code: Mapping[int, MessageType] = field(repr=False, default_factory=frozen_map)
    error_codes: Mapping[str, ErrorCode] = field(repr=False, default_factory=frozen_map)
    error_names: Mapping[int, str] = field(repr=False, default_factory=frozen_map)
    protocol_errors: Mapping[str, ProtocolErrorKind] = field(repr=False, default_factory=frozen_map)
    error_replies: Mapping[str, int | None] = field(repr=False, default_factory=frozen_map)
    semantics: Mapping[str, Flag] = field(repr=False, default_factory=frozen_map)
    max_payload_bytes: int | None = None
    # one task between a producer and a worker (a dialogue table: rows say what each
    # connection receives); empty in a profile without it
    task_dialogue: StateMachine = field(repr=False, default_factory=lambda: StateMachine(
        "task_dialogue", "", (), ()))

    def message(self, name: str) -> MessageType:
        try:
            return self.messages[name]
        except KeyError:
            raise KeyError(f"no quicx message {name!r}") from None

    def opcode(self, code: int) -> MessageType | None:
        return self.by_code.get(code)

    def flag(self, name: str) -> Any:
        try:
            return self.semantics[name].value
        except KeyError:
            raise KeyError(f"no quicx semantics flag {name!r}") from None

    def error(self, kind: str) -> ProtocolErrorKind:
        try:
            return self.protocol_errors[kind]
        except KeyError:
            raise SpecError(f"protocol error kind {kind!r} is not declared in this profile") from None

    def error_code(self, name_or_code: str | int) -> int:
        """The numeric MSG_ERROR code of an error code name (numbers pass through)."""
        if isinstance(name_or_code, int):
            return name_or_code
        try:
            return self.error_codes[name_or_code].code
        except KeyError:
            raise KeyError(f"no quicx error code {name_or_code!r}") from None

    def reply_code(self, kind: str) -> int:
        """The MSG_ERROR code a protocol error kind is answered with; KeyError for a kind this
        profile declares no reply code for (one it closes on, or an unknown kind)."""
        code = self.error_replies[kind]
        if code is None:
            raise KeyError(f"quicx protocol error {kind!r} is answered with no error code")
        return code

    def allowed(self, name: str, sender: str | None = None, receiver: str | None = None) -> bool:
        """Whether message ``name`` may go from ``sender`` to ``receiver`` in this profile.

        Reserved messages and messages of another transport are never allowed on the wire.
        """
        msg = self.messages.get(name)
        return (msg is not None and not msg.reserved and msg.transport == self.transport
                and msg.allows(sender, receiver))

    @property
    def peer_roles(self) -> tuple[str, ...]:
        return tuple(r for r in self.roles if r != DAEMON)


# --------------------------------------------------------------------------------- building

def _encoding(name: str, where: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise SpecError(f"unknown encoding {name!r}", path=where) from None


def _field(raw: Mapping[str, Any], limits: Mapping[str, Limit], kinds: Mapping[str, ProtocolErrorKind],
           where: str) -> LayoutField:
    ftype = raw.get("type")
    fid = raw.get("id")
    if not fid:
        raise SpecError("a layout field needs an id", path=where)
    where = f"{where}/{fid}"
    if ftype not in INT_TYPES and ftype not in BLOB_TYPES:
        raise SpecError(f"unknown field type {ftype!r}", path=where)
    size, eos = raw.get("size"), bool(raw.get("size-eos", False))
    if ftype in BLOB_TYPES and (size is None) == (not eos):
        raise SpecError("a bytes or str field needs exactly one of size and size-eos", path=where)
    if ftype in INT_TYPES and (size is not None or eos):
        raise SpecError("an integer field takes no size", path=where)
    encoding = None
    if ftype == "str":
        if not raw.get("encoding"):
            raise SpecError("a str field needs an encoding", path=where)
        encoding = _encoding(raw["encoding"], where)
    max_size, max_bytes = raw.get("max-size"), None
    if max_size is not None:
        if max_size not in limits:
            raise SpecError(f"max-size names unknown limit {max_size!r}", path=where)
        max_bytes = limits[max_size].max
    errors = dict(raw.get("errors") or {})
    for check, kind in errors.items():
        if check not in FIELD_CHECKS:
            raise SpecError(f"unknown field check {check!r}", path=where)
        if kind not in kinds:
            raise SpecError(f"errors.{check} names undeclared kind {kind!r}", path=where)
    return LayoutField(
        id=fid, type=str(ftype), doc=raw.get("doc", ""), requirement=raw.get("requirement"),
        size=size, size_eos=eos, encoding=encoding, max_size=max_size,
        max_bytes=None if max_bytes is None else int(max_bytes), enum=raw.get("enum"),
        errors=frozen_map(errors),
        mirrors=(raw.get("mirrors") or {}).get("of"),
        mirror_requirement=(raw.get("mirrors") or {}).get("requirement"),
    )



#: A layout field built from its spec entry (public: the trace format's layouts use it too).
layout_field = _field

def _length_of(target: LayoutField) -> Callable[[Any], int]:
    """Rebuild function: the encoded length of ``target``'s value."""
    if target.type == "str":
        enc = target.encoding
        return lambda ctx: len(ctx[target.id].encode(enc))
    return lambda ctx: len(ctx[target.id])


def compile_layout(layout: Iterable[LayoutField], where: str = "") -> Struct:
    """A ``construct`` Struct equivalent to a field list (length fields rebuilt on encode)."""
    layout = tuple(layout)
    sized_by = {f.size: f for f in layout if isinstance(f.size, str)}
    seen: dict[str, LayoutField] = {}
    subcons = []
    for i, f in enumerate(layout):
        if f.is_int:
            con: Construct[Any, Any] = INT_TYPES[f.type][0]
            if f.id in sized_by:
                con = Rebuild(con, _length_of(sized_by[f.id]))
        else:
            if f.size_eos:
                if i != len(layout) - 1:
                    raise SpecError(f"size-eos field {f.id!r} must be last", path=where)
                con = GreedyBytes
            elif isinstance(f.size, int):
                con = Bytes(f.size)
            else:
                ref = seen.get(f.size) if isinstance(f.size, str) else None
                if ref is None or not ref.is_int:
                    raise SpecError(f"size of {f.id!r} names no earlier integer field {f.size!r}",
                                    path=where)
                con = Bytes(this[ref.id])  # ref.id is f.size: seen is keyed by id
            if f.type == "str":
                if f.encoding is None:
                    raise SpecError(f"str field {f.id!r} has no encoding", path=where)
                con = StringEncoded(con, f.encoding)
        subcons.append(f.id / con)
        seen[f.id] = f
    return Struct(*subcons)


def struct_format(fields: Iterable[LayoutField]) -> str:
    """The ``struct`` format of consecutive integer fields (big-endian, no padding), taken from
    the construct classes of :data:`INT_TYPES`: ``u1 u4be`` -> ``">BL"``. Any other field type
    has no fixed ``struct`` code and raises :class:`SpecError`."""
    codes = []
    for f in fields:
        if not f.is_int:
            raise SpecError(f"field {f.id!r} ({f.type}) is not a fixed-width integer")
        con, width = INT_TYPES[f.type]
        fmt = con.fmtstr  # construct's FormatField keeps its struct format, e.g. ">L"
        if fmt[0] != ">" or struct.calcsize(fmt) != width:
            raise SpecError(f"{f.type} is not a {width}-byte big-endian struct code ({fmt!r})")
        codes.append(fmt[1:])
    return ">" + "".join(codes)


def _expand(roles_spec: Any, roles: Mapping[str, Any], where: str) -> set[str]:
    names = [roles_spec] if isinstance(roles_spec, str) else list(roles_spec or ())
    out: set[str] = set()
    for name in names:
        if name == ANY:
            out.update(roles)
        elif name in roles:
            out.add(name)
        else:
            raise SpecError(f"unknown role {name!r}", path=where)
    return out


def _message(name: str, raw: Mapping[str, Any], roles: Mapping[str, Any], limits: Mapping[str, Limit],
             kinds: Mapping[str, ProtocolErrorKind], default_transport: str) -> MessageType:
    where = f"messages/{name}"
    if "code" not in raw:
        raise SpecError("a message needs a code", path=where)
    payload = raw.get("payload", "any")
    if payload not in PAYLOAD_RULES:
        raise SpecError(f"unknown payload rule {payload!r}", path=where)
    layout = tuple(_field(f, limits, kinds, f"{where}/layout") for f in raw.get("layout") or ())
    if (payload == "empty") != (not layout):
        raise SpecError("a message has an empty layout exactly when its payload is empty", path=where)
    directions = frozenset(
        (s, r)
        for s in _expand(raw.get("from"), roles, where)
        for r in _expand(raw.get("to"), roles, where)
        if (s == DAEMON) != (r == DAEMON)
    )
    if not directions:
        raise SpecError("a message needs a direction with the daemon at one end", path=where)
    errors = dict(raw.get("errors") or {})
    for check, kind in errors.items():
        if check not in MESSAGE_CHECKS:
            raise SpecError(f"unknown message check {check!r}", path=where)
        if kind not in kinds:
            raise SpecError(f"errors.{check} names undeclared kind {kind!r}", path=where)
    offsets, pos = {}, 0
    for f in layout:  # offsets of the fixed-width prefix (where length fields live)
        if f.width is None:
            break
        offsets[f.id] = pos
        pos += f.width
    widths = [f.width for f in layout]
    known = [w for w in widths if w is not None]
    fixed = sum(known) if len(known) == len(widths) else None
    declared = raw.get("size")
    if declared is not None and declared != fixed:
        raise SpecError(f"layout is {fixed} bytes, size says {declared}", path=where)
    return MessageType(
        name=name, code=int(raw["code"]), doc=raw.get("doc", ""), doc_ref=raw.get("doc-ref"),
        requirement=raw.get("requirement"), payload=payload, directions=directions,
        layout=layout, struct=compile_layout(layout, where), fixed_size=fixed,
        min_size=sum(known), offsets=frozen_map(offsets),
        reserved=bool(raw.get("reserved", False)),
        transport=raw.get("transport", default_transport), errors=frozen_map(errors),
    )


def build(profile: Profile) -> QuicxSpec:
    tree = profile.tree
    limits = profile.limits
    roles = {k: (v or {}).get("doc", "") for k, v in (tree.get("roles") or {}).items()}
    if DAEMON not in roles:
        raise SpecError("roles must include the daemon")
    raw_errors = tree.get("protocol_errors") or {}
    kinds = error_kinds(raw_errors)
    for kind, k in kinds.items():
        if k.reaction not in REACTIONS:
            raise SpecError(f"unknown reaction {k.reaction!r}", path=f"protocol_errors/{kind}")

    error_codes = {
        n: ErrorCode(name=n, code=int(e["code"]), doc=e.get("doc", ""), requirement=e.get("requirement"))
        for n, e in (tree.get("error_codes") or {}).items()
    }
    error_names: dict[int, str] = {}
    for e in error_codes.values():
        if e.code in error_names:
            raise SpecError(f"error code {e.code:#04x} used by {error_names[e.code]} and {e.name}")
        error_names[e.code] = e.name
    replies = {}
    for kind, raw in raw_errors.items():
        name = raw.get("error_code")
        if name is not None and name not in error_codes:
            raise SpecError(f"unknown error code {name!r}", path=f"protocol_errors/{kind}")
        replies[kind] = error_codes[name].code if name is not None else None

    transport = tree.get("transport", "tcp")
    messages = {n: _message(n, m, roles, limits, kinds, transport)
                for n, m in (tree.get("messages") or {}).items()}
    by_code: dict[int, MessageType] = {}
    for m in messages.values():
        if m.code in by_code:
            raise SpecError(f"opcode {m.code:#04x} used by {by_code[m.code].name} and {m.name}")
        by_code[m.code] = m

    hdr = tree["header"]
    header = tuple(_field(f, limits, kinds, "header") for f in hdr["fields"])
    header_widths = [f.width for f in header if f.width is not None]
    if len(header_widths) != len(header):
        raise SpecError("header fields must have fixed widths", path="header")
    header_size = sum(header_widths)
    if hdr.get("size") is not None and hdr["size"] != header_size:
        raise SpecError(f"header fields take {header_size} bytes, size says {hdr['size']}")
    header_offsets, pos = {}, 0
    for f, width in zip(header, header_widths):
        header_offsets[f.id] = pos
        pos += width

    versions = tree.get("versions") or {}
    max_payload = limits["max_payload_bytes"].max if "max_payload_bytes" in limits else None
    return QuicxSpec(
        title=tree.get("title", ""), doc=tree.get("doc", ""),
        default_port=int(tree.get("default_port", 0)), transport=transport,
        roles=frozen_map(roles), header=header, header_size=header_size,
        header_struct=compile_layout(header, "header"), header_offsets=frozen_map(header_offsets),
        version=int(versions["current"]),
        accepted_versions=frozenset(int(v) for v in versions.get("accepted", ())),
        messages=frozen_map(messages), by_code=frozen_map(by_code),
        error_codes=frozen_map(error_codes), error_names=frozen_map(error_names),
        protocol_errors=kinds, error_replies=frozen_map(replies),
        semantics=frozen_map({
            n: Flag(name=n, value=f.get("value"), doc=f.get("doc", ""),
                    requirement=f.get("requirement"))
            for n, f in (tree.get("semantics") or {}).items()
        }),
        max_payload_bytes=None if max_payload is None else int(max_payload),
        task_dialogue=state_machine("task_dialogue", tree.get("task_dialogue") or {}),
    )
