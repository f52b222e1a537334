"""Compiled plans of the quicx layouts: how :mod:`.quicx` decodes and encodes a payload
without walking construct for every frame.

The spec's layouts (``spec/quicx/protocol.yaml``, compiled by :mod:`queuewire.spec.quicx` into
:class:`~queuewire.spec.quicx.LayoutField` tuples and a ``construct`` Struct per message) stay
the one declarative source. This module derives, once per message and profile, a *plan*: the
``struct`` format of the layout's leading integer fields (from the same type table,
:func:`~queuewire.spec.quicx.struct_format`) and a tuple of steps for its variable fields
(sized by one of those integers, a fixed size or the end of the frame, with the field's
``max-size`` and text encoding). Neither direction consults the construct Struct on the fast
path; both fall back to it for what the plan cannot express.

* **Decoding** (:func:`decode_plan`): ``plan(data, start, end, offset)`` returns the fields of a
  payload whose header the decoder already checked (so its length is within the layout's
  fixed or minimum size). Integers come from one unpack, variable fields are slices with the
  size, ``max-size`` and UTF-8 checks of the walk, which name the exact byte at fault by
  raising :class:`Fault`. A layout with an integer after a variable field has no fast plan:
  :func:`walk_plan` walks it field by field and then parses it with the construct Struct.
* **Encoding** (:func:`encode_plan`): ``plan(fields)`` returns the whole frame, header
  included (header and integer prefix are one ``struct`` pack, then the variable fields), or
  None when the values are anything but the plain case: a missing or unknown field, a value
  of another type than exactly ``int`` / ``str`` / ``bytes``, a value out of its field's range
  or over its limit, text the encoding refuses, a length field given explicitly that
  disagrees, a payload over ``max_payload_bytes``. The encoder then takes its general path,
  which checks every value, builds with the construct Struct and names the error. The plan
  never refuses on its own, so it can only ever produce the bytes the general path would
  produce; tests/codecs/test_quicx_plans.py proves it for every vector and for
  hypothesis-generated messages, valid and invalid.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from ..spec.quicx import LayoutField, MessageType, struct_format

__all__ = ["DecodePlan", "EncodePlan", "Fault", "decode_plan", "decode_steps", "encode_plan",
           "fields_dict", "walk_plan"]

#: ``plan(data, start, end, offset)``: the fields of the payload ``data[start:end]``, whose
#: first byte is at stream ``offset``.
DecodePlan = Callable[[bytes, int, int, int], dict[str, Any]]
#: ``plan(fields)``: the frame of the message with these field values, or None (general path).
EncodePlan = Callable[[Mapping[str, Any]], "bytes | None"]


class Fault(Exception):
    """A payload rule broken inside a decoding plan; the decoder turns it into a
    ``QuicxPayloadError`` with its own reaction (plans know no receiver role)."""

    def __init__(self, kind: str, detail: str, offset: int):
        self.kind, self.detail, self.offset = kind, detail, offset


def _split(layout: tuple[LayoutField, ...]) -> tuple[tuple[LayoutField, ...], tuple[LayoutField, ...]] | None:
    """The layout as (leading integers, variable fields), or None when an integer follows a
    variable field (no fast plan)."""
    n = 0
    while n < len(layout) and layout[n].is_int:
        n += 1
    prefix, blobs = layout[:n], layout[n:]
    return None if any(f.is_int for f in blobs) else (prefix, blobs)


# ---------------------------------------------------------------------------------- decoding

#: Compiled plans by message type (id, with the type kept alive beside its plan): a decoder
#: is made per connection, and compiling a plan costs about a third of a millisecond.
_DECODE_PLANS: dict[int, tuple[MessageType, DecodePlan | None]] = {}


def decode_plan(msg: MessageType) -> DecodePlan | None:
    """The decoding plan of ``msg``'s layout (compiled once per message type, then cached);
    None for an empty layout (fields ``{}``)."""
    cached = _DECODE_PLANS.get(id(msg))
    if cached is not None and cached[0] is msg:
        return cached[1]
    plan = _compile_decode_plan(msg)
    _DECODE_PLANS[id(msg)] = (msg, plan)
    return plan


def _compile_decode_plan(msg: MessageType) -> DecodePlan | None:
    """The decoding plan of ``msg``'s layout; None for an empty layout (fields ``{}``).

    The plan is straight-line Python written for the layout (:func:`_decode_source`) and
    compiled once, as :mod:`dataclasses` writes ``__init__``: no loop over the fields and no
    per-field tuple of parameters at run time, which halves the cost of a SUBMIT against a
    generic walk of the same steps. Field ids only ever appear as ``repr`` string literals."""
    if not msg.layout:
        return None
    split = _split(msg.layout)
    if split is None:
        return walk_plan(msg)
    source, env = _decode_source(msg, *split)
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<quicx plan {msg.name}>", "exec"), env, namespace)  # noqa: S102
    plan = namespace["plan"]
    plan.__qualname__ = plan.__name__ = f"decode_{msg.name}"
    return plan


def _decode_source(msg: MessageType, prefix: tuple[LayoutField, ...],
                   blobs: tuple[LayoutField, ...]) -> tuple[str, dict[str, Any]]:
    """The source of ``msg``'s decoding plan and the names it uses (see :func:`decode_plan`):
    :func:`_steps` in a function that returns the fields, each fault raised as :class:`Fault`."""
    lines, fields, env = _steps(msg, prefix, blobs, "", None)
    body = "".join(f"    {line}\n" for line in lines)
    return f"def plan(data, start, end, offset):\n{body}    return {fields_dict(fields)}\n", env


def decode_steps(msg: MessageType, tag: str,
                 on_fault: str) -> tuple[list[str], list[tuple[str, str]], dict[str, Any]] | None:
    """The decoding plan of ``msg`` as straight-line statements, for a caller that writes them
    into its own code (:mod:`.quicx_scan` inlines one per opcode in its frame loop): the
    statements (unindented), each field's id and the expression of its value once they
    have run (in layout order), and the names they use, each prefixed with ``tag``. They
    read the payload ``data[start:end]`` (names in the caller's scope) and set the locals
    ``i<k>``, ``b<k>``, ``n`` and ``p``;
    where the plan would raise a :class:`Fault`, they run the statement ``on_fault`` instead
    (e.g. ``return pos``: leave the frame to the plan, which names the fault). The checks are
    the plan's, in its order. ``([], [], {})`` for an empty layout; None for a layout
    without a fast plan (an integer after a variable field: :func:`walk_plan`)."""
    if not msg.layout:
        return [], [], {}
    split = _split(msg.layout)
    if split is None:
        return None
    return _steps(msg, *split, tag, on_fault)


def fields_dict(fields: list[tuple[str, str]]) -> str:
    """The expression of the fields dict from :func:`decode_steps`' (id, expression) pairs."""
    return "{" + ", ".join(f"{fid!r}: {expr}" for fid, expr in fields) + "}"


def _steps(msg: MessageType, prefix: tuple[LayoutField, ...], blobs: tuple[LayoutField, ...],
           tag: str, on_fault: str | None) -> tuple[list[str], list[tuple[str, str]], dict[str, Any]]:
    """The statements of a plan (see :func:`decode_steps`); ``on_fault`` None raises the
    :class:`Fault` (the plan's ``offset`` argument is the payload's stream offset). The checks
    and their order are :func:`walk_plan`'s; tests/codecs/test_quicx_plans.py compares the two
    on generated payloads, faults included."""
    env: dict[str, Any] = {"Fault": Fault, "UnicodeDecodeError": UnicodeDecodeError}

    def fault(k: str, which: int, detail: str, at: str, cause: str = "") -> str:
        if on_fault is not None:
            return on_fault
        return f"raise Fault({k}[{which}], f'{{{k}[3]}} {detail}', {at}){cause}"

    lines: list[str] = []
    ints = [f"i{k}" for k in range(len(prefix))]
    width = struct.calcsize(struct_format(prefix)) if prefix else 0
    if len(prefix) == 1 and prefix[0].type == "u1":
        lines.append("i0 = data[start]")
    elif prefix:
        env[f"{tag}unpack"] = struct.Struct(struct_format(prefix)).unpack_from
        lines.append(f"{', '.join(ints)}, = {tag}unpack(data, start)")
    out = [(f.id, ints[k]) for k, f in enumerate(prefix)]
    if blobs:
        lines.append(f"p = start + {width}")
    ids = [f.id for f in prefix]
    for j, f in enumerate(blobs):
        label = f"{msg.name}.{f.id}"
        k = f"{tag}k{j}"
        env[k] = (f.errors.get("size", "payload_size"), f.errors.get("max-size", "field_too_long"),
                  f.errors.get("encoding", "invalid_text"), label)
        bound = None  # the largest n can be without a check (a u1 length is at most 255)
        if f.size_eos:
            if f.max_bytes is not None:
                lines.append("n = end - p")
        else:
            if isinstance(f.size, int):
                lines.append(f"n = {f.size}")
                at = "offset"
            else:
                lines.append(f"n = {ints[ids.index(f.size)]}")
                at = f"offset + {msg.offsets.get(f.size, 0)}"
                bound = prefix[ids.index(f.size)].max_value
            lines += ["if n > end - p:",
                      "    " + fault(k, 0, "claims {n} bytes, {end - p} remain in the frame", at)]
        if f.max_bytes is not None and (bound is None or bound > f.max_bytes):
            lines += [f"if n > {f.max_bytes}:",
                      "    " + fault(k, 1, f"is {{n}} bytes, more than {f.max_bytes}",
                                     "offset + p - start")]
        stop = "end" if f.size_eos else "p + n"
        if f.type == "str":
            lines += ["try:",
                      f"    b{j} = data[p:{stop}].decode({f.encoding!r})",
                      "except UnicodeDecodeError as err:",
                      "    " + fault(k, 2, f"is not valid {f.encoding}: {{err.reason}}",
                                     "offset + p - start + err.start", " from None")]
        else:
            lines.append(f"b{j} = data[p:{stop}]")
        if j < len(blobs) - 1:
            lines.append("p += n")
        out.append((f.id, f"b{j}"))
    return lines, out, env


def walk_plan(msg: MessageType) -> DecodePlan:
    """The general plan, for any layout: walk the fields to find the byte at fault, then
    decode with the layout's construct Struct."""
    name = msg.name

    def walk(data: bytes, start: int, end: int, base: int) -> dict[str, Any]:
        payload = memoryview(data)[start:end]
        ints: dict[str, int] = {}
        pos = 0
        for f in msg.layout:
            if f.is_int:
                w = f.width
                ints[f.id] = int.from_bytes(payload[pos:pos + w], "big")  # type: ignore[operator]
                pos += w  # type: ignore[operator]
                continue
            left = len(payload) - pos
            if f.size_eos:
                n = left
            else:
                n = f.size if isinstance(f.size, int) else ints[f.size]  # type: ignore[index]
                if n > left:
                    where = base + msg.offsets.get(f.size, 0) if isinstance(f.size, str) else base
                    raise Fault(f.errors.get("size", "payload_size"),
                                f"{name}.{f.id} claims {n} bytes, {left} remain in the frame",
                                where)
            if f.max_bytes is not None and n > f.max_bytes:
                raise Fault(f.errors.get("max-size", "field_too_long"),
                            f"{name}.{f.id} is {n} bytes, more than {f.max_bytes}", base + pos)
            if f.type == "str":
                try:
                    bytes(payload[pos:pos + n]).decode(f.encoding)  # type: ignore[arg-type]
                except UnicodeDecodeError as err:
                    raise Fault(f.errors.get("encoding", "invalid_text"),
                                f"{name}.{f.id} is not valid {f.encoding}: {err.reason}",
                                base + pos + err.start) from None
            pos += n
        parsed = msg.struct.parse(bytes(payload))
        return {f.id: parsed[f.id] for f in msg.layout}
    return walk


# ---------------------------------------------------------------------------------- encoding

def encode_plan(msg: MessageType, header: tuple[LayoutField, ...], header_values: Mapping[str, int],
                max_payload: int | None) -> EncodePlan | None:
    """The encoding plan of ``msg`` (see the module docstring): None when its layout has no
    fast plan. ``header`` is the spec's header layout, ``header_values`` the values of its
    fields but ``len_payload`` (version, opcode), ``max_payload`` the profile's payload cap."""
    split = _split(msg.layout)
    if split is None:
        return None
    prefix, blobs = split
    order = [f.id for f in header]
    at = order.index("len_payload")
    before = tuple(header_values[k] for k in order[:at])
    after = tuple(header_values[k] for k in order[at + 1:])
    pack = struct.Struct(struct_format(header) + struct_format(prefix)[1:]).pack
    computed = {f.size: f.id for f in blobs if isinstance(f.size, str)}
    given = tuple((i, f.id) for i, f in enumerate(prefix) if f.id not in computed)
    n_given, n_all = len(msg.layout) - len(computed), len(msg.layout)
    cap = max_payload

    if not blobs:  # integers only: a fixed-size payload
        size = msg.fixed_size
        ids = tuple(fid for _, fid in given)

        def ints(fields: Mapping[str, Any]) -> bytes | None:
            if len(fields) != n_given:
                return None
            try:
                values = [fields[i] for i in ids]
            except KeyError:
                return None
            for v in values:
                if type(v) is not int:
                    return None
            if cap is not None and size > cap:  # type: ignore[operator]
                return None
            try:
                return pack(*before, size, *after, *values)
            except struct.error:  # a value out of its field's range
                return None
        return ints

    width = struct.calcsize(struct_format(prefix))
    slots = [0] * len(prefix)
    index = {f.id: i for i, f in enumerate(prefix)}
    # variable fields: (id, encoding or None for bytes, fixed size, max bytes, index of the
    # length field in the prefix, its id)
    steps = tuple((f.id, f.encoding if f.type == "str" else None,
                   f.size if isinstance(f.size, int) else None, f.max_bytes,
                   index[f.size] if isinstance(f.size, str) else None,
                   f.size if isinstance(f.size, str) else None) for f in blobs)

    def variable(fields: Mapping[str, Any]) -> bytes | None:
        count = len(fields)
        if count != n_given and count != n_all:
            return None
        values = slots.copy()
        parts = []
        total = width
        try:
            for i, fid in given:
                v = fields[fid]
                if type(v) is not int:
                    return None
                values[i] = v
            for fid, enc, fixed, max_bytes, ref, ref_id in steps:
                v = fields[fid]
                if enc is not None:
                    if type(v) is not str:
                        return None
                    v = v.encode(enc)
                elif type(v) is not bytes:
                    return None
                n = len(v)
                if (fixed is not None and n != fixed) or (max_bytes is not None and n > max_bytes):
                    return None
                if ref is not None:
                    if count == n_all and fields[ref_id] != n:
                        return None
                    values[ref] = n
                parts.append(v)
                total += n
        except (KeyError, UnicodeError):
            return None
        if cap is not None and total > cap:
            return None
        try:
            head = pack(*before, total, *after, *values)
        except struct.error:  # a value or a length out of its field's range
            return None
        return head + b"".join(parts)
    return variable
