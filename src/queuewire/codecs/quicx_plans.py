"""Plans of the quicx layouts: how :mod:`.quicx` decodes and encodes a payload without
walking construct for every frame.

The spec's layouts (``spec/quicx/protocol.yaml``, compiled by :mod:`queuewire.spec.quicx` into
:class:`~queuewire.spec.quicx.LayoutField` tuples and a ``construct`` Struct per message) stay
the one declarative source. This module derives, per message and profile, a *plan*: the
``struct`` format of the layout's leading integer fields (from the same type table,
:func:`~queuewire.spec.quicx.struct_format`) and steps for its variable fields (sized by one
of those integers, a fixed size or the end of the frame, with the field's ``max-size`` and
text encoding). Neither direction consults the construct Struct on the fast path; both fall
back to it for what the plan cannot express.

* **Decoding** (:func:`decode_plan`): ``plan(data, start, end, offset)`` returns the fields of a
  payload whose header the decoder already checked (so its length is within the layout's
  fixed or minimum size). Integers come from one unpack, variable fields are slices with the
  size, ``max-size`` and UTF-8 checks of the walk, which name the exact byte at fault by
  raising :class:`Fault`. The plan is straight-line Python written for the layout (no loop
  over the fields, no per-field tuple of parameters at run time: half the cost of a SUBMIT
  against a generic walk of the same steps), generated ahead of time: :func:`plans_module`
  writes the plan of every layout of every quicx profile into :mod:`.quicx_plans_generated`
  (``make generate``; tests/test_generated_code.py fails while the file is stale), and
  :func:`decode_plan` takes a message's plan from there by :func:`plan_key`, a digest of the
  statements the generator writes for it now. A layout with an integer after a variable
  field has no fast plan, and one the generated module does not have (a spec edited since,
  a test's own layout) gets none either: :func:`walk_plan` walks it field by field and then
  parses it with the construct Struct. tests/codecs/test_quicx_plans.py compares the plans
  with the walk, fields and faults.
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

import hashlib
import re
import struct
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from ..spec import Profile, load_profile, profile_names
from ..spec.quicx import LayoutField, MessageType, struct_format
from .quicx_plans_generated import decode_plans

__all__ = ["DecodePlan", "EncodePlan", "Fault", "decode_plan", "decode_steps", "def_lines",
           "encode_plan", "fields_dict", "layout_summary", "plan_key", "plan_lines", "plans_module",
           "walk_plan", "wrap_items"]

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

#: Decoding plans by message type (id, with the type kept alive beside its plan): a decoder
#: is made per connection, and finding a plan writes its statements to key them.
_DECODE_PLANS: dict[int, tuple[MessageType, DecodePlan | None]] = {}
_PLAN_KEYS: dict[int, tuple[MessageType, str | None]] = {}
#: The generated plans (:mod:`.quicx_plans_generated`) by :func:`plan_key`.
_GENERATED: dict[str, DecodePlan] = decode_plans(Fault)


def decode_plan(msg: MessageType) -> DecodePlan | None:
    """The decoding plan of ``msg``'s layout (looked up once per message type, then cached);
    None for an empty layout (fields ``{}``). It is the generated plan
    (:mod:`.quicx_plans_generated`) of the layout's :func:`plan_key`, or the walk (:func:`walk_plan`)
    for a layout without a fast plan (an integer after a variable field) or without a
    generated one: a spec edited since ``make generate``, which tests/test_generated_code.py
    reports. So a stale file can slow decoding down, never change what it decodes."""
    cached = _DECODE_PLANS.get(id(msg))
    if cached is not None and cached[0] is msg:
        return cached[1]
    plan: DecodePlan | None = None
    if msg.layout:
        key = plan_key(msg)
        plan = _GENERATED.get(key) if key is not None else None
        if plan is None:
            plan = walk_plan(msg)
    _DECODE_PLANS[id(msg)] = (msg, plan)
    return plan


def plan_key(msg: MessageType) -> str | None:
    """The key of ``msg``'s plan: a digest of its name and its statements as :func:`plan_lines`
    writes them now, so a plan generated from another layout, or by another version of this
    module, never matches. None for a layout without a fast plan. Cached per message type."""
    cached = _PLAN_KEYS.get(id(msg))
    if cached is not None and cached[0] is msg:
        return cached[1]
    lines = plan_lines(msg)
    text = "\n".join([msg.name, *lines]) if lines is not None else None
    key = None if text is None else hashlib.sha256(text.encode()).hexdigest()[:16]
    _PLAN_KEYS[id(msg)] = (msg, key)
    return key


def plan_lines(msg: MessageType) -> list[str] | None:
    """The body of ``msg``'s decoding plan ``plan(data, start, end, offset)``, unindented: the
    statements of :func:`decode_steps`, each fault raised as :class:`Fault` (``offset`` is the
    payload's stream offset), then the ``return`` of the fields. ``["return {}"]`` for an
    empty layout, None for a layout without a fast plan."""
    steps = decode_steps(msg, None)
    if steps is None:
        return None
    lines, fields, _ = steps
    return [*lines, *wrap_items("return {", [f"{fid!r}: {expr}" for fid, expr in fields], "}")]


def decode_steps(msg: MessageType, on_fault: str | None) -> tuple[list[str], list[tuple[str, str]],
                                                                  dict[str, str]] | None:
    """The decoding plan of ``msg`` as straight-line statements, for a writer that puts them in
    its own code (:func:`plans_module`; :mod:`.quicx_scan` inlines one per opcode in its frame
    loop): the statements (unindented), each field's id and the expression of its value once
    they have run (in layout order), and the ``struct`` unpackers they call (name -> format:
    ``unpack_BL`` reads ``">BL"``), which the writer defines. They read the payload
    ``data[start:end]`` (names in the writer's scope) and set the locals ``i<k>``, ``b<k>``,
    ``n`` and ``p``; where the plan raises a :class:`Fault`, they run the statement
    ``on_fault`` instead (e.g. ``return pos``: leave the frame to the plan, which names the
    fault), or, for None, raise it with literal kind, detail and offset (``offset`` is the
    payload's stream offset). The checks are :func:`walk_plan`'s, in its order.
    ``([], [], {})`` for an empty layout; None for a layout without a fast plan (an integer
    after a variable field: :func:`walk_plan`)."""
    if not msg.layout:
        return [], [], {}
    split = _split(msg.layout)
    if split is None:
        return None
    return _steps(msg, *split, on_fault)


def fields_dict(fields: list[tuple[str, str]]) -> str:
    """The expression of the fields dict from :func:`decode_steps`' (id, expression) pairs."""
    return "{" + ", ".join(f"{fid!r}: {expr}" for fid, expr in fields) + "}"


def wrap_items(head: str, items: list[str], tail: str, width: int | None = None) -> list[str]:
    """``head + ", ".join(items) + tail`` as lines of at most ``width`` columns (default: a
    statement of a plan), the items of a line after the first aligned under the first item."""
    width = _WIDTH if width is None else width
    pieces = [item + ", " for item in items[:-1]] + [item + tail for item in items[-1:]]
    lines, line, empty = [], head, True
    for piece in pieces:
        if not empty and len(line + piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = " " * len(head)
        line, empty = line + piece, False
    return [*lines, line if pieces else head + tail]


def _steps(msg: MessageType, prefix: tuple[LayoutField, ...], blobs: tuple[LayoutField, ...],
           on_fault: str | None) -> tuple[list[str], list[tuple[str, str]], dict[str, str]]:
    """The statements of a plan (see :func:`decode_steps`). The checks and their order are
    :func:`walk_plan`'s; tests/codecs/test_quicx_plans.py compares the two on generated
    payloads, faults included."""
    unpackers: dict[str, str] = {}

    def fault(kind: str, detail: str, at: str, cause: str = "") -> list[str]:
        if on_fault is not None:
            return [on_fault]
        text = "f" + repr(label.replace("{", "{{").replace("}", "}}") + " " + detail)
        one = f"raise Fault({kind!r}, {text}, {at}){cause}"
        if len(one) <= _WIDTH:
            return [one]
        pad = " " * len("raise Fault(")
        texts = [text] if len(pad + text) < _WIDTH else [repr(label), "f" + repr(" " + detail)]
        return [f"raise Fault({kind!r},", *(pad + t for t in texts[:-1]), f"{pad}{texts[-1]},",
                f"{pad}{at}){cause}"]

    lines: list[str] = []
    ints = [f"i{k}" for k in range(len(prefix))]
    width = struct.calcsize(struct_format(prefix)) if prefix else 0
    if len(prefix) == 1 and prefix[0].type == "u1":
        lines.append("i0 = data[start]")
    elif prefix:
        fmt = struct_format(prefix)
        name = f"unpack_{fmt[1:]}"
        unpackers[name] = fmt
        lines.append(f"{', '.join(ints)}{',' if len(ints) == 1 else ''} = {name}(data, start)")
    out = [(f.id, ints[k]) for k, f in enumerate(prefix)]
    if blobs:
        lines.append(f"p = start + {width}" if width else "p = start")
    ids = [f.id for f in prefix]
    for j, f in enumerate(blobs):
        label = f"{msg.name}.{f.id}"
        size_kind = f.errors.get("size", "payload_size")
        bound = None  # the largest n can be without a check (a u1 length is at most 255)
        if f.size_eos:
            if f.max_bytes is not None:
                lines.append("n = end - p")
        else:
            if isinstance(f.size, int):
                lines.append(f"n = {f.size}")
                at = "offset"
            else:
                ref = ids.index(str(f.size))
                lines.append(f"n = {ints[ref]}")
                where = msg.offsets.get(str(f.size), 0)
                at = f"offset + {where}" if where else "offset"
                bound = prefix[ref].max_value
            lines += ["if n > end - p:",
                      *_indent(fault(size_kind, "claims {n} bytes, {end - p} remain in the frame",
                                     at))]
        if f.max_bytes is not None and (bound is None or bound > f.max_bytes):
            lines += [f"if n > {f.max_bytes}:",
                      *_indent(fault(f.errors.get("max-size", "field_too_long"),
                                     f"is {{n}} bytes, more than {f.max_bytes}", "offset + p - start"))]
        stop = "end" if f.size_eos else "p + n"
        if f.type == "str":
            lines += ["try:",
                      f"    b{j} = data[p:{stop}].decode({f.encoding!r})",
                      f"except UnicodeDecodeError{' as err' if on_fault is None else ''}:",
                      *_indent(fault(f.errors.get("encoding", "invalid_text"),
                                     f"is not valid {f.encoding}: {{err.reason}}",
                                     "offset + p - start + err.start", " from None"))]
        else:
            lines.append(f"b{j} = data[p:{stop}]")
        if j < len(blobs) - 1:
            lines.append("p += n")
        out.append((f.id, f"b{j}"))
    return lines, out, unpackers


#: The longest line of a plan's statements: they sit up to three levels deep in the generated
#: modules, whose lines stay within 110 columns.
_WIDTH = 110 - 12


def _indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]


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
                    if count == n_all and fields[cast(str, ref_id)] != n:  # ref_id is set with ref
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


# ---------------------------------------------------------------------------------- generation

def plans_module(profiles: Sequence[Profile] | None = None) -> str:
    """The text of :mod:`.quicx_plans_generated` (``make generate`` writes it): the decoding plan of
    every layout with a fast plan in ``profiles`` (default: every quicx profile), one function
    per distinct plan (a layout two profiles share has one), named ``decode_<message>`` (or
    ``decode_<message>_<profile>`` for a second layout of the same message), inside the
    factory ``decode_plans(Fault)`` that returns them by :func:`plan_key`."""
    if profiles is None:
        profiles = [load_profile(name) for name in profile_names("quicx")]
    plans: dict[str, tuple[str, MessageType, list[str], list[str]]] = {}  # key -> name, ...
    unpackers: dict[str, str] = {}
    for profile in profiles:
        for msg in sorted(profile.model.messages.values(), key=lambda m: m.code):
            steps = decode_steps(msg, None) if msg.layout else None
            if steps is None:
                continue
            key = plan_key(msg)
            assert key is not None
            if key in plans:
                if profile.name not in plans[key][3]:
                    plans[key][3].append(profile.name)
                continue
            unpackers.update(steps[2])
            name = f"decode_{msg.name}"
            if any(other == name for other, *_ in plans.values()):
                name += "_" + re.sub(r"\W", "_", profile.name)
            plans[key] = (name, msg, plan_lines(msg) or [], [profile.name])
    names = sorted({p.name for p in profiles})
    out = [
        '"""Decoding plans of the quicx layouts: one straight-line function per layout.',
        "",
        *textwrap.wrap(
            "Generated by `make generate` (python -m queuewire.codecs.codegen) from the layouts of "
            f"spec/quicx ({', '.join(names)}) by queuewire.codecs.quicx_plans.plans_module(); do not "
            "edit: tests/test_generated_code.py fails until the file is regenerated. "
            ":func:`queuewire.codecs.quicx_plans.decode_plan` takes a message type's plan from "
            "here by its key (a digest of the plan's statements, as the generator writes them): "
            "a layout whose plan is not here is walked field by field instead.", 96),
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Callable",
        "from struct import Struct",
        "from typing import Any",
        "",
        "#: ``plan(data, start, end, offset)``: the fields of the payload ``data[start:end]``.",
        "Plan = Callable[[bytes, int, int, int], dict[str, Any]]",
        "",
        *(f"{name} = Struct({fmt!r}).unpack_from" for name, fmt in sorted(unpackers.items())),
        "",
        "",
        "def decode_plans(Fault: Callable[[str, str, int], Exception]) -> dict[str, Plan]:",
        '    """The plans by key; each raises ``Fault(kind, detail, stream offset)``',
        '    (:class:`queuewire.codecs.quicx_plans.Fault`) where its payload breaks the layout."""',
    ]
    for name, msg, lines, used_by in plans.values():
        out += ["",
                *def_lines(name, "data: bytes, start: int, end: int, offset: int", "dict[str, Any]", 4),
                *textwrap.wrap(f'"""{msg.name} of {", ".join(used_by)}: {layout_summary(msg)}."""',
                               100, initial_indent=" " * 8, subsequent_indent=" " * 8),
                *_indent(lines, " " * 8)]
    out += ["", "    return {",
            *(f"        {key!r}: {name}," for key, (name, *_) in plans.items()),
            "    }"]
    return "\n".join(out) + "\n"


def layout_summary(msg: MessageType) -> str:
    """``msg``'s layout in a line: ``len_type u1, task_type str[len_type] utf-8 max 255, payload
    bytes[..]`` (``[..]``: to the end of the frame)."""
    parts = []
    for f in msg.layout:
        if f.is_int:
            parts.append(f"{f.id} {f.type}")
            continue
        text = f"{f.id} {f.type}[{'..' if f.size_eos else f.size}]"
        if f.type == "str":
            text += f" {f.encoding}"
        if f.max_bytes is not None:
            text += f" max {f.max_bytes}"
        parts.append(text)
    return ", ".join(parts)


def def_lines(name: str, params: str, returns: str, indent: int) -> list[str]:
    """A ``def`` line, its parameters on a second line when it would pass 110 columns."""
    pad = " " * indent
    line = f"{pad}def {name}({params}) -> {returns}:"
    if len(line) <= 110:
        return [line]
    return [f"{pad}def {name}(", f"{pad}        {params}) -> {returns}:"]
