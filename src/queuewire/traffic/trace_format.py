"""The trace format of ``spec/trace.yaml``, loaded, and a reader for a directory of traces.

Nothing here restates the layout: :func:`trace_format` reads ``spec/trace.yaml`` and builds
the ``struct`` formats of the file header and the record header from their field types, the
way the quicx codec builds its header (``spec.quicx.struct_format``: ``u1 u2be u8be`` ->
``>BHQ``; a ``bytes`` field of fixed ``size`` n is ``ns``). The record types, directions
and gap reasons are maps from name to code, and the JSON the format holds (the meta, the
payloads of open, close and missing-gap records) has its keys' types from the spec
(:meth:`TraceFormat.json_rules`). :func:`parse_header` and :func:`scan` read a file's bytes
(the header's meta; the whole records as codes), for every reader:
:func:`read_file` turns them into :class:`Record` objects, :func:`read_dir` iterates the
records of every file of a directory, one connection after another, in file order, and the
trace pipeline's decoder (``queuewire.trace.decode``) scans the same way.
:class:`TraceFormat` is also what :mod:`.record` writes with.

A trace file is DATA from anywhere: a reader never trusts a length, a depth or a type in it.
:func:`load_json` is the one way its JSON is read: at most :data:`MAX_JSON_BYTES`, UTF-8,
nested at most :data:`MAX_JSON_DEPTH` deep (counted by a linear scan before the parser,
which recurses, ever sees it), a JSON object, and each key the spec defines of the spec's
type; anything else is a :class:`TraceError` naming the rule, never a traceback. A meta
length is checked before it is read, and :func:`scan` slices records out of the bytes it is
given without copying, so a record length that lies ends the scan (the file is cut short)
instead of allocating what it declares.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec import spec_dir
from ..spec._load import SpecError, read_yaml
from ..spec.quicx import LayoutField, layout_field, struct_format

TRACE_FILE = "trace.yaml"
#: The JSON a trace file holds (meta; open, close and missing payloads) is a few hundred bytes
#: as written; a reader takes this much (room for long host names and keys a later writer
#: adds), so checking and parsing it take bounded time and memory.
MAX_JSON_BYTES = 64 * 1024
#: How deep that JSON may nest. The format's objects are flat (every key it defines holds a
#: string or an integer); a key a reader does not know may hold a structure up to this deep,
#: far below the recursion limit of Python's JSON parser.
MAX_JSON_DEPTH = 16
#: The JSON types ``spec/trace.yaml`` gives keys, as Python types.
JSON_TYPES: Mapping[str, type] = {"string": str, "integer": int}


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a trace file, its codes turned into the spec's names."""

    type: str          # a record_types name: open, frame, gap, eof, close
    direction: str     # a directions name: none, c2s, s2c
    detail: str | None  # the gap_reasons name of a gap record, else None
    conn_id: int
    t_ns: int
    payload: bytes

    def json(self) -> dict[str, Any]:
        """The payload of an open, close or missing-gap record as the JSON object it is,
        checked as :func:`load_json` checks (a :class:`TraceError` if it is not one)."""
        return load_json(self.payload, f"the {self.detail or self.type} record",
                         trace_format().json_rules(self.type, self.detail))


@dataclass(frozen=True)
class TraceFormat:
    """``spec/trace.yaml`` as a model: the struct formats and the name <-> code tables."""

    version: int
    magic: bytes
    file_pattern: str
    file_glob: str
    rotate_bytes: int
    file_head: struct.Struct       # magic, format_version, len_meta
    record_head: struct.Struct     # the record_header fields, in order
    record_fields: tuple[str, ...]
    meta_keys: tuple[str, ...]
    record_types: Mapping[str, int]
    directions: Mapping[str, int]
    gap_reasons: Mapping[str, int]
    meta_json: Mapping[str, Mapping[str, Any]]          # meta key -> {type, minimum}
    payload_json: Mapping[str, Mapping[str, Mapping[str, Any]]]  # open, close, missing -> ...

    @functools.cached_property
    def at(self) -> Mapping[str, int]:
        """The place of each record_header field in a record header's values."""
        return {name: i for i, name in enumerate(self.record_fields)}

    def json_rules(self, record_type: str, gap_reason: str | None = None
                   ) -> Mapping[str, Mapping[str, Any]]:
        """The typed keys of a record's JSON payload (a gap's by its reason); {} for none."""
        return self.payload_json.get(gap_reason if record_type == "gap" and gap_reason
                                     else record_type, {})

    def name_of(self, table: Mapping[str, int], code: int) -> str:
        for name, c in table.items():
            if c == code:
                return name
        raise ValueError(f"code {code} is in no table entry ({dict(table)})")


def _fmt(fields: list[LayoutField]) -> str:
    """A ``struct`` format of fixed fields: integers by ``struct_format``, fixed bytes as ``ns``."""
    out = ">"
    for f in fields:
        if f.is_int:
            out += struct_format([f])[1:]
        elif f.type == "bytes" and isinstance(f.size, int):
            out += f"{f.size}s"
        else:
            raise SpecError(f"{f.id}: not a fixed-size field", file=TRACE_FILE)
    return out


@functools.cache
def trace_format() -> TraceFormat:
    """Load ``spec/trace.yaml`` (cached)."""
    tree = read_yaml(spec_dir() / TRACE_FILE)
    head_raw = tree["file_header"]["fields"]
    head = [layout_field(f, {}, {}, "file_header") for f in head_raw]
    fixed, var = head[:-1], head[-1]
    if var.size != fixed[-1].id:
        raise SpecError("file_header: the last field must be sized by the one before it",
                        file=TRACE_FILE)
    magic_raw = next(f for f in head_raw if f.get("contents_hex"))
    rec = [layout_field(f, {}, {}, "record_header") for f in tree["record_header"]["fields"]]

    def codes(section: str) -> dict[str, int]:
        return {name: int(entry["code"]) for name, entry in tree[section].items()}

    def typed(where: str, keys: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        out: dict[str, Mapping[str, Any]] = {}
        for key, entry in keys.items():
            if entry.get("type") not in JSON_TYPES:
                raise SpecError(f"{where}.{key}: type {entry.get('type')!r} is not one of "
                                f"{', '.join(JSON_TYPES)}", file=TRACE_FILE)
            out[key] = {k: entry[k] for k in ("type", "minimum") if k in entry}
        return out

    payload_json = {name: typed(f"{section}.{name}.json", entry["json"])
                    for section in ("record_types", "gap_reasons")
                    for name, entry in tree[section].items() if entry.get("json")}

    return TraceFormat(
        version=int(tree["format_version"]),
        magic=bytes.fromhex(magic_raw["contents_hex"]),
        file_pattern=tree["file_name"]["pattern"],
        file_glob=tree["file_name"]["glob"],
        rotate_bytes=int(tree["defaults"]["rotate_bytes"]["value"]),
        file_head=struct.Struct(_fmt(fixed)),
        record_head=struct.Struct(_fmt(rec)),
        record_fields=tuple(f.id for f in rec),
        meta_keys=tuple(tree["meta_keys"]),
        record_types=codes("record_types"),
        directions=codes("directions"),
        gap_reasons=codes("gap_reasons"),
        meta_json=typed("meta_keys", tree["meta_keys"]),
        payload_json=payload_json,
    )


class TraceError(Exception):
    """A file that is not a trace of a version this reader knows, or breaks the format's
    rules (a length, a depth, a type, a code); the message is one line naming the rule."""


_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests deeper than ``limit``: one pass over its brackets,
    quotes and backslashes (brackets inside strings do not count), stopping at the first
    level past the limit; linear, no recursion, whatever the text is."""
    depth, in_string, skip = 0, False, -1
    for m in _JSON_SPECIAL.finditer(text):
        i = m.start()
        if i < skip:
            continue
        c = text[i]
        if in_string:
            if c == "\\":
                skip = i + 2          # the escaped character is no quote
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return True
        elif c in "]}":
            depth -= 1
    return False


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (for messages)."""
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"),
                       (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def load_json(raw: bytes | memoryview, what: str,
              rules: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON object ``raw`` holds (``{}`` for no bytes), its keys in ``rules`` checked
    against their spec type and minimum; ``what`` names it in a :class:`TraceError` (see
    the module docstring for the rules)."""
    if not len(raw):
        return {}
    if len(raw) > MAX_JSON_BYTES:
        raise TraceError(f"{what}: {len(raw)} bytes of JSON, more than the {MAX_JSON_BYTES} "
                         "bytes a reader takes")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{what} is not UTF-8 (byte {exc.start}: {exc.reason})") from None
    if json_too_deep(text):
        raise TraceError(f"{what}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise TraceError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TraceError(f"{what} is not a JSON object (it is {json_type(value)})")
    for key, rule in rules.items():
        if key not in value:
            continue
        v, want = value[key], rule["type"]
        if not isinstance(v, JSON_TYPES[want]) or isinstance(v, bool):
            raise TraceError(f"{what}: {key} is {json_type(v)} {json.dumps(v)[:40]}, "
                             f"spec/trace.yaml says {want}")
        if "minimum" in rule and v < rule["minimum"]:
            raise TraceError(f"{what}: {key} is {v}, below the minimum {rule['minimum']}")
    return value


def parse_header(data: bytes | memoryview, fmt: TraceFormat | None = None
                 ) -> tuple[dict[str, Any], int]:
    """The meta object of the file header at the start of ``data``, and the offset of the
    first record."""
    fmt = fmt or trace_format()
    hs = fmt.file_head.size
    if len(data) < hs:
        raise TraceError("file shorter than its header")
    magic, version, len_meta = fmt.file_head.unpack_from(data, 0)
    if magic != fmt.magic:
        raise TraceError(f"not a trace file (magic {bytes(magic).hex()})")
    if version != fmt.version:
        raise TraceError(f"trace format_version {version}, this reader knows {fmt.version}")
    if len_meta > MAX_JSON_BYTES:
        raise TraceError(f"the file's meta: len_meta {len_meta} bytes, more than the "
                         f"{MAX_JSON_BYTES} bytes a reader takes")
    if len(data) < hs + len_meta:
        raise TraceError("file ends inside its meta")
    if not len_meta:
        raise TraceError("the file's meta is empty, not a JSON object")
    meta = load_json(data[hs:hs + len_meta], "the file's meta", fmt.meta_json)
    return meta, hs + len_meta


def read_header(fh: Any, fmt: TraceFormat | None = None) -> dict[str, Any]:
    """Read a file header from ``fh``; return its meta object."""
    fmt = fmt or trace_format()
    head = fh.read(fmt.file_head.size)
    if len(head) == fmt.file_head.size:
        # len_meta is the last fixed field; read no more than a reader takes (parse_header
        # refuses a longer meta), whatever it declares
        head += fh.read(min(fmt.file_head.unpack(head)[-1], MAX_JSON_BYTES))
    return parse_header(head, fmt)[0]


def scan(data: bytes | memoryview, pos: int, fmt: TraceFormat | None = None
         ) -> Iterator[tuple[tuple[int, ...], memoryview]]:
    """The whole records of ``data`` from ``pos`` on: each record header's values (in the
    order of ``record_fields``; :attr:`TraceFormat.at` names their places) and its payload.
    It stops at the end or before a record cut short (the caller tells the two apart by the
    bytes the records it got took)."""
    fmt = fmt or trace_format()
    hsize, unpack = fmt.record_head.size, fmt.record_head.unpack_from
    i_len = fmt.at["len_payload"]
    view = memoryview(data)
    end = len(view)
    while pos + hsize <= end:
        values = unpack(view, pos)
        start = pos + hsize
        pos = start + values[i_len]
        if pos > end:
            return
        yield values, view[start:pos]


def read_file(path: str | Path) -> Iterator[Record]:
    """The records of one trace file, in order. A file cut inside a record (the tap was
    killed) ends at the last whole record."""
    fmt = trace_format()
    types = {c: n for n, c in fmt.record_types.items()}
    dirs = {c: n for n, c in fmt.directions.items()}
    reasons = {c: n for n, c in fmt.gap_reasons.items()}
    gap = fmt.record_types["gap"]
    data = Path(path).read_bytes()
    _meta, pos = parse_header(data, fmt)
    at = fmt.at
    i_type, i_dir, i_detail = at["record_type"], at["direction"], at["detail"]
    i_conn, i_t = at["conn_id"], at["t_ns"]
    for values, payload in scan(data, pos, fmt):
        code, direction = values[i_type], values[i_dir]
        yield Record(types.get(code, str(code)), dirs.get(direction, str(direction)),
                     reasons.get(values[i_detail]) if code == gap else None, values[i_conn],
                     values[i_t], bytes(payload))


def trace_files(directory: str | Path) -> list[Path]:
    """The trace files of a directory, in name order (each connection's files in sequence)."""
    return sorted(Path(directory).glob(trace_format().file_glob))


def read_dir(directory: str | Path) -> Iterator[Record]:
    """Every record of every trace file in ``directory``: connection by connection, each
    connection's files in sequence, each file's records in order."""
    for path in trace_files(directory):
        yield from read_file(path)


def streams(directory: str | Path) -> dict[tuple[int, str], bytes]:
    """The bytes of each (conn_id, direction) as they crossed the tap: its frame and gap
    records concatenated (what the format guarantees they are), ``missing`` gaps left out
    (their payload describes bytes a capture did not hold)."""
    out: dict[tuple[int, str], list[bytes]] = {}
    for rec in read_dir(directory):
        if rec.type == "frame" or (rec.type == "gap" and rec.detail != "missing"):
            out.setdefault((rec.conn_id, rec.direction), []).append(rec.payload)
    return {k: b"".join(v) for k, v in out.items()}
