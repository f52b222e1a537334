"""Annotated hex dumps, in the spirit of Kaitai's hex view: a frame's bytes cut into the
fields they encode, each group labelled with its field, type and value, and the same groups
coloured in a 16-bytes-a-row hex view.

A dump is one raw HTML block (``<div class="qw-hexdump" ...>``) carrying the frame's bytes
and decoded value as data attributes (``data-hex``, ``data-value``, ``data-protocol``,
``data-profile``, ``data-role``), so the test suite can decode every example of the
published docs with the codecs and encode it back to the same bytes. The grouping is
computed here, independently of the codecs: from the spec's layouts (quicx) and from a
small MessagePack walker (bunqueue), so a dump that disagrees with the codec fails a test.
"""

from __future__ import annotations

import html
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

COLOURS = 8     # qw-c0 .. qw-c7 in docs/_static/queuewire.css
ROW = 16        # bytes per row of the hex view
SHOWN = 24      # bytes of a long field shown in the field table before eliding


@dataclass(frozen=True)
class Group:
    """Bytes ``start:end`` of a frame encode ``field`` (a ``kind``) with value ``value``."""

    start: int
    end: int
    field: str
    kind: str
    value: str
    depth: int = 0


# ----------------------------------------------------------------------------------- quicx

def _int_value(spec: Any, f: Any, value: int) -> str:
    if f.enum == "messages":
        msg = spec.by_code.get(value)
        return f"0x{value:02X} ({msg.name})" if msg else f"0x{value:02X} (unknown)"
    if f.enum == "error_codes":
        return f"0x{value:02X} ({spec.error_names.get(value, 'unknown')})"
    return f"{value} (0x{value:0{2 * (f.width or 1)}X})"


def _blob_value(raw: bytes, is_text: bool, encoding: str | None) -> str:
    if is_text:
        return json.dumps(raw.decode(encoding or "utf-8"), ensure_ascii=False)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    shown = raw[:SHOWN].hex(" ") + (" …" if len(raw) > SHOWN else "")
    if text is not None and text.isprintable() and text:
        return f"{len(raw)} bytes: {json.dumps(text, ensure_ascii=False)}"
    return f"{len(raw)} bytes: {shown}" if raw else "0 bytes (empty)"


def quicx_groups(spec: Any, data: bytes) -> list[Group]:
    """The groups of one quicx frame: the header fields, then the payload's layout."""
    groups, pos, header = [], 0, {}
    for f in spec.header:
        width = f.width
        (value,) = struct.unpack(">" + {1: "B", 2: "H", 4: "I", 8: "Q"}[width],
                                 data[pos:pos + width])
        header[f.id] = value
        groups.append(Group(pos, pos + width, f"header.{f.id}", f.type, _int_value(spec, f, value)))
        pos += width
    msg = spec.by_code.get(header.get("msg_type"))
    end = pos + header.get("len_payload", 0)
    if msg is None:
        if end > pos:
            groups.append(Group(pos, end, "payload", "bytes", _blob_value(data[pos:end], False, None)))
        return groups
    values: dict[str, int] = {}
    for f in msg.layout:
        if f.is_int:
            width = f.width
            (value,) = struct.unpack(">" + {1: "B", 2: "H", 4: "I", 8: "Q"}[width],
                                     data[pos:pos + width])
            values[f.id] = value
            groups.append(Group(pos, pos + width, f.id, f.type, _int_value(spec, f, value)))
            pos += width
            continue
        size = end - pos if f.size_eos else (f.size if isinstance(f.size, int) else values[f.size])
        raw = data[pos:pos + size]
        kind = f"{f.type}[{'rest' if f.size_eos else f.size}]"
        groups.append(Group(pos, pos + size, f.id, kind, _blob_value(raw, f.type == "str", f.encoding)))
        pos += size
    return groups


# -------------------------------------------------------------------------------- msgpack

_FIXED = {0xCA: ("float32", ">f"), 0xCB: ("float64", ">d"), 0xCC: ("uint8", ">B"),
          0xCD: ("uint16", ">H"), 0xCE: ("uint32", ">I"), 0xCF: ("uint64", ">Q"),
          0xD0: ("int8", ">b"), 0xD1: ("int16", ">h"), 0xD2: ("int32", ">i"), 0xD3: ("int64", ">q")}
_SIZED = {0xD9: ("str8", 1, "str"), 0xDA: ("str16", 2, "str"), 0xDB: ("str32", 4, "str"),
          0xC4: ("bin8", 1, "bin"), 0xC5: ("bin16", 2, "bin"), 0xC6: ("bin32", 4, "bin"),
          0xDC: ("array16", 2, "array"), 0xDD: ("array32", 4, "array"),
          0xDE: ("map16", 2, "map"), 0xDF: ("map32", 4, "map"),
          0xC7: ("ext8", 1, "ext"), 0xC8: ("ext16", 2, "ext"), 0xC9: ("ext32", 4, "ext")}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_EXT_NAMES = {0: "undefined", -1: "timestamp"}


def _short(text: str, limit: int = 60) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if len(quoted) <= limit else quoted[:limit - 2] + "…\" " + f"({len(text)} chars)"


class _Walker:
    """Cuts one MessagePack object into groups: a scalar (marker and content) is one group,
    a container's marker is one, then its members (a map key is a group of its own)."""

    def __init__(self, data: bytes, base: int):
        self.data, self.base = data, base
        self.groups: list[Group] = []

    def _add(self, start: int, end: int, path: str, kind: str, value: str, depth: int) -> None:
        self.groups.append(Group(self.base + start, self.base + end, path or "(payload)", kind,
                                 value, depth))

    def _uint(self, pos: int, width: int) -> int:
        return int.from_bytes(self.data[pos:pos + width], "big")

    def walk(self, pos: int, path: str, depth: int, key: bool = False) -> tuple[int, Any]:
        b = self.data[pos]
        value: Any
        if b <= 0x7F or b >= 0xE0:
            value = b if b <= 0x7F else b - 256
            self._add(pos, pos + 1, path, "positive fixint" if b <= 0x7F else "negative fixint",
                      str(value), depth)
            return pos + 1, value
        if b in (0xC0, 0xC2, 0xC3):
            kind, value = {0xC0: ("nil", None), 0xC2: ("false", False), 0xC3: ("true", True)}[b]
            self._add(pos, pos + 1, path, kind, json.dumps(value), depth)
            return pos + 1, value
        if b in _FIXED:
            kind, fmt = _FIXED[b]
            size = struct.calcsize(fmt)
            (value,) = struct.unpack(fmt, self.data[pos + 1:pos + 1 + size])
            self._add(pos, pos + 1 + size, path, kind, repr(value), depth)
            return pos + 1 + size, value
        if 0xA0 <= b <= 0xBF:
            return self._blob(pos, 1, b - 0xA0, "fixstr", "str", path, depth, key)
        if b in _SIZED:
            kind, width, family = _SIZED[b]
            n = self._uint(pos + 1, width)
            if family in ("str", "bin"):
                return self._blob(pos, 1 + width, n, kind, family, path, depth, key)
            if family == "ext":
                return self._ext(pos, 1 + width, n, kind, path, depth)
            return self._container(pos, 1 + width, n, kind, family, path, depth)
        if b in _FIXEXT:
            return self._ext(pos, 1, _FIXEXT[b], f"fixext{_FIXEXT[b]}", path, depth)
        if 0x80 <= b <= 0x8F:
            return self._container(pos, 1, b - 0x80, "fixmap", "map", path, depth)
        if 0x90 <= b <= 0x9F:
            return self._container(pos, 1, b - 0x90, "fixarray", "array", path, depth)
        raise ValueError(f"byte 0x{b:02x} at {self.base + pos} starts no MessagePack object")

    def _blob(self, pos: int, head: int, n: int, kind: str, family: str, path: str, depth: int,
              key: bool) -> tuple[int, Any]:
        raw = self.data[pos + head:pos + head + n]
        value: str | bytes
        if family == "str":
            value = raw.decode("utf-8")
            shown = _short(value)
        else:
            value = raw
            shown = f"{n} bytes: {raw[:SHOWN].hex(' ')}{' …' if n > SHOWN else ''}"
        label = f"{path} (key)" if key else path
        self._add(pos, pos + head + n, label, f"{kind} ({n})", shown, depth)
        return pos + head + n, value

    def _ext(self, pos: int, head: int, n: int, kind: str, path: str, depth: int) -> tuple[int, Any]:
        code = struct.unpack(">b", self.data[pos + head:pos + head + 1])[0]
        raw = self.data[pos + head + 1:pos + head + 1 + n]
        name = _EXT_NAMES.get(code, "extension")
        self._add(pos, pos + head + 1 + n, path, f"{kind} type {code}",
                  f"{name} ({raw.hex(' ') or 'no data'})", depth)
        return pos + head + 1 + n, None

    def _container(self, pos: int, head: int, n: int, kind: str, family: str, path: str,
                   depth: int) -> tuple[int, Any]:
        noun = "entries" if family == "map" else "items"
        self._add(pos, pos + head, path, f"{kind} ({n})", f"{n} {noun}", depth)
        pos += head
        for i in range(n):
            if family == "array":
                pos, _ = self.walk(pos, f"{path}[{i}]", depth + 1)
                continue
            key_start = pos
            pos, key = self.walk(pos, f"{path}." if path else "", depth + 1, key=True)
            name = key if isinstance(key, str) else str(key)
            # name the key group after its key: `data.to (key)`
            last = self.groups[-1]
            if last.start == self.base + key_start and last.field.endswith("(key)"):
                self.groups[-1] = Group(last.start, last.end, f"{path + '.' if path else ''}{name} (key)",
                                        last.kind, last.value, last.depth)
            pos, _ = self.walk(pos, f"{path}.{name}" if path else name, depth + 1)
        return pos, None


def bunqueue_groups(spec: Any, data: bytes) -> list[Group]:
    """The groups of one bunqueue frame: the length prefix, then the MessagePack payload."""
    width = struct.calcsize(spec.len_format)
    (length,) = struct.unpack(spec.len_format, data[:width])
    groups = [Group(0, width, "len_payload", f"u{8 * width}be", f"{length} (0x{length:0{2 * width}X})")]
    walker = _Walker(data[width:width + length], width)
    end, _ = walker.walk(0, "", 0)
    if end != length:
        raise ValueError(f"payload of {length} bytes holds {end} bytes of MessagePack")
    return groups + walker.groups


# --------------------------------------------------------------------------------- HTML

def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _attr(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False),
                       quote=True)


def hex_view(data: bytes, groups: list[Group]) -> str:
    """The bytes 16 a row, each coloured by its group and titled with its field."""
    owner: list[int | None] = [None] * len(data)
    for i, g in enumerate(groups):
        for pos in range(g.start, min(g.end, len(data))):
            owner[pos] = i
    rows = []
    for row in range(0, len(data), ROW):
        cells = []
        for pos in range(row, min(row + ROW, len(data))):
            who = owner[pos]
            if who is None:
                cells.append(f"{data[pos]:02x}")
            else:
                cells.append(f'<span class="qw-c{who % COLOURS}" title="{_attr(groups[who].field)}">'
                             f"{data[pos]:02x}</span>")
        text = "".join(f"{chr(b)}" if 0x20 <= b < 0x7F else "." for b in data[row:row + ROW])
        pad = "   " * (ROW - min(ROW, len(data) - row))
        rows.append(f'<span class="qw-off">{row:04x}</span>  {" ".join(cells)}{pad}  '
                    f'<span class="qw-ascii">{html.escape(text)}</span>')
    return "&#10;".join(rows)  # a character reference: no blank line ends the HTML block


def render(data: bytes, groups: list[Group], *, protocol: str, profile: str, role: str,
           value: Any, caption: str) -> list[str]:
    """One annotated dump as a raw HTML block (no blank line inside: MyST ends it there)."""
    rows = []
    for i, g in enumerate(groups):
        raw = data[g.start:g.end]
        shown = raw[:SHOWN].hex(" ") + (f" … ({len(raw)} bytes)" if len(raw) > SHOWN else "")
        indent = "&nbsp;&nbsp;" * g.depth
        rows.append(
            f'<tr class="qw-c{i % COLOURS}" data-start="{g.start}" data-end="{g.end}">'
            f"<td>{g.start}</td><td><code>{shown}</code></td>"
            f"<td>{indent}<code>{html.escape(g.field)}</code></td>"
            f"<td>{html.escape(g.kind)}</td><td>{html.escape(g.value)}</td></tr>")
    return [
        f'<div class="qw-hexdump" id="hex-{_slug(caption)}" data-protocol="{protocol}" '
        f'data-profile="{_attr(profile)}" '
        f'data-role="{_attr(role)}" data-hex="{data.hex()}" data-value="{_attr(value)}">',
        f'<p class="qw-hexdump-caption">{html.escape(caption)} ({len(data)} bytes)</p>',
        f'<pre class="qw-hexview">{hex_view(data, groups)}</pre>',
        '<table class="qw-fields"><thead><tr><th>offset</th><th>bytes</th><th>field</th>'
        "<th>type</th><th>value</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
        "</div>",
        "",
    ]
