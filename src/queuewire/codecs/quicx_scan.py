"""The quicx decoder's frame loop, generated from the spec's layouts: one function per quicx
profile that decodes a run of frames with no call per frame.

:class:`~.quicx.QuicxDecoder` decodes a frame in three steps: look the header's (version,
opcode) key up in its index, check the length against the range the opcode's length rules
accept, then run the layout's plan (:mod:`.quicx_plans`). Its general loop pays for a dict
lookup, a tuple unpacking and a function call per frame. A *scan* does the same work inlined:
one function whose loop unpacks the header, checks its version, compares the opcode with each
of the profile's in turn (``if code == 0x01:``, in opcode order), checks the length against
that opcode's range, runs the layout's plan statements (:func:`~.quicx_plans.decode_steps`,
the very statements of the generated plan) and appends the :class:`~.quicx.Message` built
with one ``tuple.__new__``.

The scans are written by :func:`scans_module` into :mod:`.quicx_scan_generated` (``make generate``;
tests/test_generated_code.py checks the file is current), one pair per quicx profile: a
factory of the scan appending :class:`~.quicx.Message` s (``feed``) and one of the scan
appending rows ``(opcode, *field values in layout order)`` (``feed_rows``: no name, field
dict, raw bytes or offset per frame, about half the cost of a ``Message`` on a daemon's inbound
mix). Opcodes, names and layouts are read from the profile; what depends on the decoder (its
role, its local payload cap, the versions it accepts) is data: :func:`scan_for` hands the
factory the accepted versions and each accepted opcode's length range, and an opcode the
decoder does not accept gets an empty range. A decoder whose table the generated branches do not
cover (each accepted opcode's message name and plan key, :func:`~.quicx_plans.plan_key`, must
be the branch's: a spec edited since the file was generated, a test's own spec) gets no scan and
decodes every frame with its general loop.

A factory builds one of two scans. When the decoder accepts one version (every profile does),
the version and the opcode are read together as one u2 key and each branch compares it with a
number the factory computed (``key == key_01``), so a frame of another version matches no
branch; a decoder accepting several versions (a lax daemon in tests) gets the scan that looks
the version up, then compares the opcode. A message of fixed size checks its length with one
comparison (``length != fix_06``; an opcode the decoder does not accept gets -1, which no
length is). These are what the ``exec()`` scans this file replaced had inlined as constants:
without them the generated loops cost ~5 % more (benchmarks/README.md, "Before and after").

The scan never refuses anything. It returns the position of the first frame it does not
decode completely (the data ends inside the frame, the version, the opcode or the length is
not one it accepts, a payload check fails, a layout without a fast plan), and the decoder's
general loop takes that frame: it runs the ordered header checks, keeps an incomplete frame
pending, or runs the plan, which raises the fault with its kind, detail and offset. So every
error, and the decoder's state after it, comes from the general path, and the scan only ever
produces frames the general path would produce, byte for byte and field for field:
tests/codecs/test_quicx_scan.py checks it on random streams (valid, invalid, cut anywhere)
against a decoder without a scan.

``scan(data, pos, base, append) -> pos``: ``data`` is the decoder's bytes, ``pos`` the first
frame to decode, ``base`` the stream offset of ``data[0]``, ``append`` the output list's
append.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..spec import Profile, load_profile, profile_names
from ..spec.quicx import DAEMON, MessageType, QuicxSpec, struct_format
from .quicx_plans import decode_steps, def_lines, fields_dict, plan_key, wrap_items
from .quicx_scan_generated import SCANS

__all__ = ["Scan", "scan_for", "scan_source", "scans_module"]

#: ``scan(data, pos, base, append) -> pos`` (see the module docstring).
Scan = Callable[[bytes, int, int, Callable[[Any], None]], int]


def scan_for(entries: Mapping[int, tuple[int, int, MessageType]], versions: Iterable[int],
             header_format: str, message: type[tuple[Any, ...]] | None) -> Scan | None:
    """The scan of a decoder, from the generated ones (:mod:`.quicx_scan_generated`).

    ``entries`` maps each opcode the decoder accepts to ``(lo, hi, msg)``: the shortest and
    longest payload its length checks accept, and its message type; ``versions`` are the
    accepted header versions; ``header_format`` the ``struct`` format reading the header as
    (u2 key of the u1 version and u1 opcode, length); ``message`` the
    :class:`~.quicx.Message` class, or None for a scan that appends rows instead
    (``(opcode, *field values in layout order)``, :meth:`~.quicx.QuicxDecoder.feed_rows`).
    None when nothing can be scanned, or no generated scan has this table's branches."""
    accepted = frozenset(versions)
    if not accepted or not entries:
        return None
    wanted = {code: _branch(msg) for code, (_, _, msg) in entries.items()}
    limits = {code: (lo, hi) for code, (lo, hi, _) in entries.items()}
    fits = [(len(branches), messages, rows) for key_format, branches, messages, rows in SCANS.values()
            if key_format == header_format
            and all(branches.get(code) == branch for code, branch in wanted.items())]
    if not fits:
        return None
    _, messages, rows = min(fits, key=lambda fit: fit[0])  # the fewest branches to go through
    return rows(accepted, limits) if message is None else messages(accepted, limits, message)


def _branch(msg: MessageType) -> tuple[str, str] | None:
    """What a generated branch of ``msg``'s opcode must be: its name and plan key (None: no
    branch, a layout without a fast plan)."""
    key = plan_key(msg)
    return None if key is None else (msg.name, key)


# ---------------------------------------------------------------------------------- generation

def scans_module(profiles: Sequence[Profile] | None = None) -> str:
    """The text of :mod:`.quicx_scan_generated` (``make generate`` writes it): for each of
    ``profiles`` (default: every quicx profile) whose header leads with a u1 version and a
    u1 opcode, the factories ``messages_<profile>(versions, limits, Message)`` and
    ``rows_<profile>(versions, limits)`` (:func:`scan_source`), and ``SCANS``, the table
    :func:`scan_for` picks them from."""
    if profiles is None:
        profiles = [load_profile(name) for name in profile_names("quicx")]
    sources: list[str] = []
    table: list[str] = []
    unpackers: dict[str, str] = {}
    for profile in profiles:
        spec: QuicxSpec = profile.model
        head = _header(spec)
        if head is None:
            continue
        for receiver in (DAEMON, None):
            for rows in (False, True):
                text, used = scan_source(profile, receiver, rows)
                sources.append(text)
                unpackers.update(used)
            branches = [f"{msg.code:#04x}: {_branch(msg)!r}" for msg in _decodable(spec, receiver)]
            table += [f"    {_key(profile, receiver)!r}: (",
                      f"        {_key_format(head)!r},",
                      *wrap_items("        {", branches, "},", width=110),
                      f"        {_factory(profile, receiver, False)}, {_factory(profile, receiver, True)}),"]
    names = ", ".join(sorted(p.name for p in profiles))
    out = [
        '"""The quicx decoder\'s frame loops, one pair per quicx profile.',
        "",
        *textwrap.wrap(
            "Generated by `make generate` (python -m queuewire.codecs.codegen) from the opcodes "
            f"and layouts of spec/quicx ({names}) by queuewire.codecs.quicx_scan.scans_module(); "
            "do not edit: tests/test_generated_code.py fails until the file is regenerated. "
            ":func:`queuewire.codecs.quicx_scan.scan_for` picks the pair whose branches are the "
            "decoder's (each opcode's message name and plan key) and makes the scan with the "
            "decoder's accepted versions and length ranges; the module docstring of "
            "queuewire.codecs.quicx_scan says what a scan does and does not do.", 96),
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Callable, Mapping",
        "from struct import Struct",
        "from typing import Any",
        "",
        "#: ``scan(data, pos, base, append) -> pos``",
        "Scan = Callable[[bytes, int, int, Callable[[Any], None]], int]",
        "Limits = Mapping[int, tuple[int, int]]",
        "#: the length range of an opcode the decoder does not accept: no length",
        "NONE = (1, 0)",
        "",
        *(f"{name} = Struct({fmt!r}).unpack_from" for name, fmt in sorted(unpackers.items())),
        *("\n\n" + text for text in sources),
        "",
        "",
        "#: by profile and receiver: (the decoder's header key format, each opcode's branch as",
        "#: (message name, plan key), the factory of the Message scan, the factory of the rows scan)",
        "SCANS: dict[str, tuple[str, dict[int, tuple[str, str]],",
        "                       Callable[[frozenset[int], Limits, type[tuple[Any, ...]]], Scan],",
        "                       Callable[[frozenset[int], Limits], Scan]]] = {",
        *table,
        "}",
    ]
    return "\n".join(out) + "\n"


def _header(spec: QuicxSpec) -> str | None:
    """The ``struct`` format of ``spec``'s header when it is (u1 version, u1 opcode, length),
    the only header a decoder scans (:attr:`~.quicx.QuicxDecoder._u2_key`); else None."""
    ids, types = [f.id for f in spec.header], [f.type for f in spec.header]
    if ids != ["version", "msg_type", "len_payload"] or types[:2] != ["u1", "u1"]:
        return None
    return struct_format(spec.header)


def _key_format(head: str) -> str:
    """The ``struct`` format reading a ``head`` header (u1 version, u1 opcode, length) as a
    u2 key of version and opcode, and the length."""
    return ">H" + head[3:]


def _decodable(spec: QuicxSpec, receiver: str | None) -> list[MessageType]:
    """The messages a decoder for ``receiver`` (None: any) may accept (not reserved, on the
    profile's transport) whose layout has a fast plan, by opcode."""
    return [msg for _, msg in sorted(spec.by_code.items())
            if not msg.reserved and msg.transport == spec.transport
            and (receiver is None or msg.allows(receiver=receiver))
            and decode_steps(msg, "return pos") is not None]


def scan_source(profile: Profile, receiver: str | None,
                rows: bool = False) -> tuple[str, dict[str, str]]:
    """The source of the factory of ``profile``'s scan for ``receiver`` (None: any),
    ``messages_<profile>_<receiver>`` (appending a ``Message`` per frame) or
    ``rows_<profile>_<receiver>`` (a row, with ``rows``), and the ``struct`` unpackers it uses
    (name -> format). Its branches are the messages ``receiver`` may accept, in opcode order.
    The factory takes the accepted versions, the length range of each accepted opcode (an
    opcode without one gets ``NONE``, which no length is in) and, for messages, the
    ``Message`` class."""
    spec: QuicxSpec = profile.model
    head = _header(spec)
    assert head is not None
    size = spec.header_size
    unpack = f"unpack_{head[1:]}"
    unpackers = {unpack: head}
    decodable = _decodable(spec, receiver)
    params = "versions: frozenset[int], limits: Limits" + (
        "" if rows else ", Message: type[tuple[Any, ...]]")
    what = "a row (opcode, *field values)" if rows else "a Message"
    lines = [*def_lines(_factory(profile, receiver, rows), params, "Scan", 0),
             *textwrap.wrap(f'"""The scan of {profile.name} appending {what} per frame, for '
                            f'{_receiving(receiver)}."""',
                            106, initial_indent="    ", subsequent_indent="    ")]
    for msg in decodable:
        c = f"{msg.code:02x}"
        lines.append(f"    lo_{c}, hi_{c} = limits.get({msg.code:#04x}, NONE)  # {msg.name}")
        if msg.fixed_size is not None:  # one length or none: one comparison per frame
            lines.append(f"    fix_{c} = lo_{c} if lo_{c} == hi_{c} else -1")
    if not rows:
        lines.append("    new = tuple.__new__")
    branches: list[list[str]] = []  # the branch bodies, after the test of their opcode
    for msg in decodable:
        steps = decode_steps(msg, "return pos")
        assert steps is not None
        body, fields, used = steps
        unpackers.update(used)
        c = f"{msg.code:02x}"
        test = f"length != fix_{c}" if msg.fixed_size is not None else \
            f"length < lo_{c} or length > hi_{c}"
        block = [f"    if {test}:", "        return pos", *("    " + line for line in body)]
        if rows:
            items = [str(msg.code), *(expr for _, expr in fields)]
            block += wrap_items("    append((", items, ",))" if len(items) == 1 else "))", 94)
        else:
            value = fields_dict(fields)
            if len(value) > 64:  # a long dict first, on lines of its own
                block += wrap_items("    fields = {", [f"{fid!r}: {expr}" for fid, expr in fields],
                                    "}", 94)
                value = "fields"
            block += wrap_items("    append(new(Message, (", [
                repr(msg.name), str(msg.code), value, "data[pos:end]", "base + pos"], ")))", 94)
        branches.append(block)
    # one accepted version (every profile's): the version and the opcode are read as one u2
    # key and each branch compares it with one number; several (a lax decoder): the version
    # is looked up, then the opcode compared
    key_format = _key_format(head)
    key_unpack = f"unpack_{key_format[1:]}"
    unpackers[key_unpack] = key_format
    if decodable:
        lines += ["    if len(versions) == 1:",
                  "        (version,) = versions",
                  *(f"        key_{m.code:02x} = version << 8 | {m.code:#04x}  # {m.name}"
                    for m in decodable), ""]
        lines += _scan_lines("keyed_scan", size, f"key, length = {key_unpack}(data, pos)", "end > size",
                             [f"key == key_{m.code:02x}" for m in decodable], decodable,
                             branches, 8)
        lines += ["        return keyed_scan", ""]
    lines += _scan_lines("scan", size, f"version, code, length = {unpack}(data, pos)",
                         "end > size or version not in versions",
                         [f"code == {m.code:#04x}" for m in decodable], decodable, branches, 4)
    lines += ["    return scan"]
    return "\n".join(lines), unpackers


def _scan_lines(name: str, size: int, read: str, refuse: str, tests: list[str],
                decodable: list[MessageType], branches: list[list[str]], indent: int) -> list[str]:
    """The source of one scan function ``name``: each frame's header ``read``, the ``refuse``
    test that leaves a frame to the general loop, then one branch per message (its ``tests``)."""
    pad = " " * indent
    lines = [pad + f"def {name}(data: bytes, pos: int, base: int, append: Callable[[Any], None]) -> int:",
             pad + "    size = len(data)",  # not n: the plan statements use n
             pad + f"    while size - pos >= {size}:",
             pad + f"        {read}",
             pad + f"        end = pos + {size} + length",
             pad + f"        if {refuse}:",
             pad + "            return pos",
             pad + f"        start = pos + {size}"]
    for i, (test, msg, block) in enumerate(zip(tests, decodable, branches)):
        lines.append(pad + f"        {'if' if i == 0 else 'elif'} {test}:  # {msg.name}")
        lines += [pad + "        " + line for line in block]
    if decodable:
        lines += [pad + "        else:", pad + "            return pos"]
    else:  # nothing to scan inline
        lines.append(pad + "        return pos")
    return [*lines, pad + "        pos = end", pad + "    return pos"]


def _factory(profile: Profile, receiver: str | None, rows: bool) -> str:
    """The name of ``profile``'s scan factory for ``receiver`` in the generated module."""
    ident = re.sub(r"\W", "_", profile.name)
    return f"{'rows' if rows else 'messages'}_{ident}_{receiver or 'any'}"


def _key(profile: Profile, receiver: str | None) -> str:
    """The key of a pair of scans in the generated ``SCANS``."""
    return f"{profile.name} {receiver or 'any'}"


def _receiving(receiver: str | None) -> str:
    return f"a {receiver}'s decoder" if receiver else "a decoder of any role(s)"
