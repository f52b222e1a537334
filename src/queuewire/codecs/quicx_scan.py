"""The quicx decoder's frame loop, written once per decoder configuration from the spec's
layouts: one function that decodes a run of frames with no call per frame.

:class:`~.quicx.QuicxDecoder` decodes a frame in three steps: look the header's (version,
opcode) key up in its index, check the length against the range the opcode's length rules
accept, then run the layout's plan (:mod:`.quicx_plans`). Its general loop pays for a dict
lookup, a tuple unpacking and a function call per frame. A *scan* does the same work inlined:
:func:`scan_for` writes, for the decoder's accepted (version, opcode) pairs, one function
whose loop compares the header key with each accepted key in turn (``if key == 0x0101:``, in
opcode order), checks the length against that opcode's range written as literals, runs the
layout's plan statements (:func:`~.quicx_plans.decode_steps`, the very statements of the
compiled plan) and appends the :class:`~.quicx.Message` built with one ``tuple.__new__``.
Opcodes, names, lengths and layouts are all read from the decoder's table, itself derived
from the spec; nothing is restated here.

The scan never refuses anything. It returns the position of the first frame it does not
decode completely (the data ends inside the frame, the key or the length is not one it
accepts, a payload check fails, a layout without a fast plan), and the decoder's general loop
takes that frame: it runs the ordered header checks, keeps an incomplete frame pending, or
runs the plan, which raises the fault with its kind, detail and offset. So every error, and
the decoder's state after it, comes from the general path, and the scan only ever produces
frames the general path would produce, byte for byte and field for field:
tests/codecs/test_quicx_scan.py checks it on random streams (valid, invalid, cut anywhere)
against a decoder without a scan.

``scan(data, pos, base, append) -> pos``: ``data`` is the decoder's bytes, ``pos`` the first
frame to decode, ``base`` the stream offset of ``data[0]``, ``append`` the output list's
append. A decoder has two scans, one appending :class:`~.quicx.Message` s (``feed``) and one
appending rows ``(opcode, *field values in layout order)`` (``feed_rows``: no name, field
dict, raw bytes or offset per frame, about half the cost of a ``Message`` on a daemon's
inbound mix). Scans are cached by configuration (a decoder is made per connection; writing and
compiling a scan costs about a millisecond).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..spec.quicx import MessageType
from .quicx_plans import decode_steps, fields_dict

__all__ = ["Scan", "scan_for"]

#: ``scan(data, pos, base, append) -> pos`` (see the module docstring).
Scan = Callable[[bytes, int, int, Callable[[Any], None]], int]

_SCANS: dict[tuple, tuple[tuple[MessageType, ...], Scan]] = {}
_CACHED = 256  # configurations kept


def scan_for(entries: Mapping[int, tuple[int, int, MessageType]], versions: Iterable[int],
             header_format: str, top: int, message: type | None) -> Scan | None:
    """The scan of a decoder (cached).

    ``entries`` maps each opcode the decoder accepts to ``(lo, hi, msg)``: the shortest and
    longest payload its length checks accept, and its message type; ``versions`` are the
    accepted header versions; ``header_format`` the ``struct`` format reading the header as
    (u2 key of the u1 version and u1 opcode, length), ``top`` the largest length that
    format reads (no check is written for a bound it cannot exceed), ``message`` the
    :class:`~.quicx.Message` class, or None for a scan that appends rows instead
    (``(opcode, *field values in layout order)``, :meth:`~.quicx.QuicxDecoder.feed_rows`).
    None when nothing can be scanned."""
    versions = tuple(sorted(versions))
    key = (tuple((c, lo, hi, id(m)) for c, (lo, hi, m) in sorted(entries.items())), versions,
           header_format, top, message)
    cached = _SCANS.get(key)
    if cached is not None:
        return cached[1]
    if not versions or not entries:
        return None
    source, env = scan_source(entries, versions, header_format, top, message is None)
    env["Message"], env["new"] = message, tuple.__new__
    namespace: dict[str, Any] = {}
    exec(compile(source, "<quicx scan>", "exec"), env, namespace)  # noqa: S102
    scan = namespace["scan"]
    if len(_SCANS) >= _CACHED:  # many local payload caps (a fuzzer): start over
        _SCANS.clear()
    _SCANS[key] = (tuple(m for _, _, m in entries.values()), scan)  # keep the types alive
    return scan


def scan_source(entries: Mapping[int, tuple[int, int, MessageType]], versions: tuple[int, ...],
                header_format: str, top: int, rows: bool = False) -> tuple[str, dict[str, Any]]:
    """The source of a scan and the names it uses (see :func:`scan_for`)."""
    head = struct.Struct(header_format)
    env: dict[str, Any] = {"unpack": head.unpack_from}
    hs = head.size
    lines = ["def scan(data, pos, base, append):",
             "    size = len(data)",  # not n: the plan statements use n
             f"    while size - pos >= {hs}:",
             "        key, length = unpack(data, pos)",
             f"        end = pos + {hs} + length",
             "        if end > size:",
             "            return pos",
             f"        start = pos + {hs}"]
    first = True
    for code, (lo, hi, msg) in sorted(entries.items()):
        steps = decode_steps(msg, f"m{code}_", "return pos")
        if steps is None:  # no fast plan: the general loop walks it
            continue
        body, fields, names = steps
        env.update(names)
        keys = [v << 8 | code for v in versions]
        if len(keys) == 1:
            test = f"key == {keys[0]:#06x}"
        else:
            env[f"m{code}_keys"] = frozenset(keys)
            test = f"key in m{code}_keys"
        lines.append(f"        {'if' if first else 'elif'} {test}:  # {msg.name}")
        first = False
        lines += [f"            {line}" for line in _length_check(lo, hi, top)]
        lines += [f"            {line}" for line in body]
        if rows:
            lines.append(f"            append(({code},{''.join(f' {e},' for _, e in fields)}))")
        else:
            lines.append(f"            append(new(Message, ({msg.name!r}, {code}, "
                         f"{fields_dict(fields)}, data[pos:end], base + pos)))")
    if first:  # nothing to scan inline
        lines.append("        return pos")
    else:
        lines += ["        else:", "            return pos"]
    lines += ["        pos = end", "    return pos"]
    return "\n".join(lines) + "\n", env


def _length_check(lo: int, hi: int, top: int) -> list[str]:
    """The statements refusing (leaving to the general loop) a length outside ``lo..hi``."""
    if lo > hi:
        return ["return pos"]
    if lo == hi:
        return [f"if length{' != ' + str(lo) if lo else ''}:", "    return pos"]
    tests = ([f"length < {lo}"] if lo > 0 else []) + ([f"length > {hi}"] if hi < top else [])
    return [f"if {' or '.join(tests)}:", "    return pos"] if tests else []
