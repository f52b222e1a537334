"""Trace files to rows: the decoder both engines of ``queuewire trace analyze`` run.

One call of :meth:`FileDecoder.decode` reads one trace file (``spec/trace.yaml``) and yields
Arrow record batches of one schema, :data:`SCHEMA`, whose ``table`` column says which table
a row belongs to. The frames are framed, decoded, paired and judged by the tap's own core
(:mod:`queuewire.traffic`: the protocol's ``Stream`` per direction and its judge per
connection), fed record by record, so a recording analysed here gets exactly the verdicts
the tap gave it live. Rows:

- ``frames``: one per frame or gap record (its size, direction, timestamp, the command it
  asks for or answers, its reqId or task id, the codec's error kind, the protocol version it
  announces);
- ``pairs``: a request and the answer that paired with it (latency from the record that
  completed the request to the one that completed the answer);
- ``violations``: the findings, each with its level and requirement id;
- ``conns``: one per file: the connection's open and close records;
- ``opens`` and ``orphans``: the pairing's loose ends at the file's edges. A connection
  whose recording rotated into several files is decoded file by file (files are the unit of
  parallelism), so a request near the end of one file may be answered in the next: the file
  lists its requests still waiting (``opens``, by match key), and a later file of the
  connection gives the answers it cannot pair to ``orphans`` (with the answer's bytes)
  instead of reporting them. :mod:`.loose` joins the two on (run, conn_id, match key),
  the nearest later file first, and judges each joined answer with :func:`.loose.judge_split`;
  what stays unmatched becomes the finding the tap would have made (:func:`.loose.loose_finding`).

Rules: nothing here knows a field, limit or error of a protocol (those come from the
profile through the codecs); a file cut inside a record ends at its last whole record (the
recorder was killed), reported as an INFO finding; a file that is not a trace, or breaks a
rule of ``spec/trace.yaml``, raises :class:`~queuewire.traffic.trace_format.TraceError`
with a one-line message naming the file, the record and the rule: JSON that is too long,
too deep, not UTF-8 or of the wrong types (``trace_format.load_json``), a record type,
direction or gap reason whose code is in none of the spec's tables, an unknown protocol or
profile (:func:`profile_named`), and a number past what the tables hold (t_ns and conn_id
are Arrow int64, the sequence int32: :func:`file_identity`). The Spark engine cannot raise
across executors, so its workers turn a TraceError into one :data:`ERROR_TABLE` row
(:func:`error_batch`) that the driver raises again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NoReturn, cast

import pyarrow as pa

from ..codecs.errors import ProtocolError
from ..judge import Finding, Verdict, requirement_verdict
from ..spec import Profile, SpecError, load_profile, profile_names
from ..traffic.analyzer import DEFAULT_MAX_FRAME, DIRECTIONS, PROTOCOLS
from ..traffic.quicx import QuicxProtocol
from ..traffic.trace_format import TraceError, load_json, parse_header, scan, trace_format

#: Rows per yielded batch: large enough that Arrow's per-batch cost vanishes, small enough
#: that a 64 MiB file never holds all its rows at once.
BATCH_ROWS = 65_536
#: The largest t_ns and conn_id the tables hold (Arrow int64; nanoseconds reach the year
#: 2262); the format's u8be fields can say more.
INT64_MAX = 2**63 - 1
#: The largest file sequence the tables hold (their seq column is Arrow int32).
INT32_MAX = 2**31 - 1
#: The ``table`` of a row that carries a decoder's TraceError out of a Spark executor.
ERROR_TABLE = "error"

_SCHEMA_FIELDS: list[tuple[str, pa.DataType]] = [
    ("table", pa.string()),          # frames | violations | conns | opens | orphans
    ("run", pa.string()),            # the recording run (conn ids are unique within one)
    ("conn_id", pa.int64()),
    ("seq", pa.int32()),             # the file's sequence among the connection's files
    ("idx", pa.int64()),             # frames: record index in the file
    ("direction", pa.string()),
    ("t_ns", pa.int64()),            # when (frames: the record that completed the frame)
    ("size", pa.int64()),            # frames: bytes of the frame or gap
    ("record", pa.string()),         # frames: frame | gap
    ("kind", pa.string()),           # frames: request | answer | event; violations: a key
    ("command", pa.string()),        # the command (bunqueue; a reply: its request's) or message
    ("key", pa.string()),            # frames: reqId / task id / what paired; match key
    ("ok", pa.bool_()),              # frames (answers), orphans: not an error answer
    ("error", pa.string()),          # frames: the codec's error kind, or the gap reason
    ("version", pa.string()),        # frames: the protocol version the frame announces
    ("paired", pa.string()),         # frames completing a pair: the request's command
    ("sent_ns", pa.int64()),         # ... and when the request was complete
    ("answer", pa.string()),         # ... and what answered (reply, MSG_OK, ...); orphans
    ("level", pa.string()),          # violations: FAIL | NON-STRICT | INFO
    ("requirement", pa.string()),    # violations
    ("message", pa.string()),        # violations
    ("payload", pa.binary()),        # orphans: the answer frame, judged after the join
    ("info", pa.string()),           # conns: JSON of CONN_FIELDS
]
SCHEMA = pa.schema(_SCHEMA_FIELDS)
COLUMNS = tuple(SCHEMA.names)

#: The columns of each table's rows in :data:`SCHEMA` (a pair is a column set of the frame
#: that completed it; conns carry their few fields as JSON: narrow rows cost less to move).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "frames": ("run", "conn_id", "seq", "idx", "direction", "t_ns", "size", "record", "kind",
               "command", "key", "ok", "error", "version", "paired", "sent_ns", "answer"),
    "violations": ("run", "conn_id", "seq", "t_ns", "direction", "level", "requirement", "kind",
                   "command", "message"),
    "conns": ("run", "conn_id", "seq", "info"),
    "opens": ("run", "conn_id", "seq", "key", "command", "t_ns"),
    "orphans": ("run", "conn_id", "seq", "key", "t_ns", "answer", "ok", "payload"),
}
#: What a conns row's info holds.
CONN_FIELDS = ("client", "upstream", "opened_ns", "closed_ns", "close_reason", "protocol",
               "profile")
#: The output tables besides frames and violations: pairs (the frames that completed one,
#: and the pairs joined across files) and conns (info expanded).
PAIR_COLUMNS = ("run", "conn_id", "seq", "command", "key", "sent_ns", "answered_ns", "ok",
                "answer", "split")
CONN_COLUMNS = ("run", "conn_id", "seq", *CONN_FIELDS)
PAIR_FIELDS = tuple((f.name, f.type) for f in SCHEMA if f.name in PAIR_COLUMNS) + (
    ("answered_ns", pa.int64()), ("split", pa.bool_()))
CONN_TYPES = {"opened_ns": pa.int64(), "closed_ns": pa.int64()}


def profile_named(name: str, where: str) -> Profile:
    """The profile ``name``; a :class:`TraceError` naming it and the known ones if there is
    none (a trace's meta is data: its profile may be anything)."""
    try:
        return load_profile(name)
    except SpecError:
        raise TraceError(f"{where}: unknown profile {name!r} (known: "
                         f"{', '.join(profile_names())})") from None


def file_identity(meta: dict[str, Any], where: str) -> tuple[str, int, int]:
    """(run, conn_id, sequence) of a file's meta (its types already checked by
    ``parse_header``), each within what the tables hold."""
    conn_id, seq = meta.get("conn_id", 0), meta.get("sequence", 0)
    if conn_id > INT64_MAX:
        raise TraceError(f"{where}: the meta's conn_id {conn_id} is past {INT64_MAX}, the "
                         "largest the tables hold (int64)")
    if seq > INT32_MAX:
        raise TraceError(f"{where}: the meta's sequence {seq} is past {INT32_MAX}, the "
                         "largest the tables hold (int32)")
    return str(meta.get("run", "")), conn_id, seq


def error_batch(message: str) -> pa.RecordBatch:
    """One :data:`ERROR_TABLE` row of :data:`SCHEMA` carrying ``message``."""
    return pa.RecordBatch.from_arrays(
        [pa.array([ERROR_TABLE] if f.name == "table" else [message] if f.name == "message"
                  else [None], f.type) for f in SCHEMA], schema=SCHEMA)


class _Rows:
    """Rows per table as tuples in the order of :data:`TABLE_COLUMNS` (the hot path appends a
    frame's tuple directly); :meth:`batches` turns them into :data:`SCHEMA` batches, the
    columns a table does not have as nulls."""

    def __init__(self) -> None:
        self.lists: dict[str, list[tuple]] = {t: [] for t in TABLE_COLUMNS}
        self.frames = self.lists["frames"]
        self.n = 0

    def add(self, table: str, **row: Any) -> None:
        self.lists[table].append(tuple(row.get(c) for c in TABLE_COLUMNS[table]))
        self.n += 1

    def batches(self) -> list[pa.RecordBatch]:
        out = []
        for table, rows in self.lists.items():
            if not rows:
                continue
            n = len(rows)
            have = dict(zip(TABLE_COLUMNS[table], zip(*rows)))
            arrays = []
            for f in SCHEMA:
                if f.name == "table":
                    arrays.append(pa.array([table] * n, pa.string()))
                elif f.name in have:
                    arrays.append(pa.array(have[f.name], f.type))
                else:
                    arrays.append(pa.nulls(n, f.type))
            out.append(pa.RecordBatch.from_arrays(arrays, schema=SCHEMA))
            rows.clear()
        self.n = 0
        return out


class _Proto:
    """A protocol adapter of :mod:`queuewire.traffic` for one profile, and what the decoder
    reads of it (the version a frame announces)."""

    def __init__(self, protocol: str, profile: Profile, max_frame: int):
        self.name = protocol
        self.profile = profile
        self.proto = PROTOCOLS[protocol](profile, max_frame)
        self.hello, self.hello_field = None, None
        self.version_at: int | None = None
        if protocol == "bunqueue":
            # the command whose request announces the protocol version, and its field: the
            # first required field of Hello's request schema (spec/bunqueue/commands)
            cmd = profile.model.commands.get("Hello")
            required = (cmd.request.get("required") or []) if cmd is not None else []
            fields = [f for f in required if f != "cmd"]
            if fields:
                self.hello, self.hello_field = "Hello", fields[0]
        else:
            names = [f.id for f in profile.model.header]
            self.version_at = names.index("version") if "version" in names else None
            self._head = cast(QuicxProtocol, self.proto).head

    def version(self, direction: str, item: Any, command: str | None) -> str | None:
        if item.message is None:
            return None
        if self.version_at is not None:
            return str(self._head.unpack_from(item.raw)[self.version_at])
        if command == self.hello and direction == "c2s" and isinstance(item.message, dict):
            v = item.message.get(self.hello_field)
            return None if v is None else str(v)
        return None


class FileDecoder:
    """Decodes trace files into :data:`SCHEMA` batches. ``protocol`` and ``profile`` force
    what each file's meta says (a recording made under another profile, judged under this
    one)."""

    def __init__(self, protocol: str | None = None, profile: str | None = None, *,
                 max_frame: int = DEFAULT_MAX_FRAME, batch_rows: int = BATCH_ROWS):
        self.protocol, self.profile = protocol, profile
        self.max_frame = max_frame
        self.batch_rows = batch_rows
        self.fmt = trace_format()
        self._protos: dict[tuple[str, str], _Proto] = {}

    def _proto(self, protocol: str, profile: str | None, where: str) -> _Proto:
        prof = profile_named(profile, where) if profile else None
        key = (protocol, prof.name if prof else "")
        p = self._protos.get(key)
        if p is None:
            if prof is None:
                from ..spec import default_profile
                prof = load_profile(default_profile(protocol))
            if prof.protocol != protocol:
                raise TraceError(f"profile {prof.name} is not a {protocol} profile")
            p = self._protos[key] = _Proto(protocol, prof, self.max_frame)
        return p

    def decode(self, data: bytes | memoryview, name: str = "") -> Iterator[pa.RecordBatch]:
        """The rows of one trace file, in batches of at most ``batch_rows``."""
        data = memoryview(data)
        where = name or "trace file"
        try:
            meta, pos = parse_header(data, self.fmt)
        except TraceError as exc:
            raise TraceError(f"{where}: {exc}") from None
        protocol = self.protocol or meta.get("protocol")
        if protocol not in PROTOCOLS:
            raise TraceError(f"{where}: unknown protocol {protocol!r} (known: "
                             f"{', '.join(PROTOCOLS)})")
        p = self._proto(protocol, self.profile or meta.get("profile"), where)
        run, conn_id, seq = file_identity(meta, where)
        rows = _Rows()
        yield from _FileRun(self, p, rows, run, conn_id, seq, protocol, where).run(data, pos)


class _FileRun:
    """The state of decoding one file (one connection's records, in order)."""

    def __init__(self, dec: FileDecoder, p: _Proto, rows: _Rows, run: str, conn_id: int,
                 seq: int, protocol: str, where: str):
        self.dec, self.p, self.rows, self.where = dec, p, rows, where
        self.run_id, self.conn_id, self.seq, self.protocol = run, conn_id, seq, protocol
        self.profile = p.profile
        self.streams = {d: p.proto.stream(d) for d in DIRECTIONS}
        self.t = 0
        self.direction = "none"
        # (command, key, ok, sent_ns, answer) of the pair the frame being judged completed
        self.answered: tuple | None = None
        self.judge = p.proto.connection(conn_id, self._judged, self._pair,
                                        self._orphan if seq > 0 else None)

    # -- the judge's callbacks
    def _judged(self, f: Finding) -> None:
        self._report(f.level, f.requirement, f.direction or "none", f.command, f.kind, f.message)

    def _report(self, level: str, requirement: str | None, direction: str, command: str | None,
                kind: str, message: str) -> None:
        self.rows.add("violations", run=self.run_id, conn_id=self.conn_id, seq=self.seq,
                      t_ns=self.t, direction=direction, level=level, requirement=requirement,
                      kind=kind, command=command, message=message)

    def _pair(self, command: str, key: Any, sent: int, answered: int, ok: bool,
              answer: str) -> None:
        # the pair is a column set of the frame being judged (one pair per frame at most)
        self.answered = (command, None if key is None else str(key), ok, sent, answer)

    def _orphan(self, key: str, t_ns: int, answer: str, ok: bool, raw: bytes) -> None:
        self.answered = (None, key, ok, None, answer)
        self.rows.add("orphans", run=self.run_id, conn_id=self.conn_id, seq=self.seq,
                      key=key, t_ns=t_ns, answer=answer, ok=ok, payload=bytes(raw),
                      direction=self.direction)

    # -- records
    def run(self, data: memoryview, pos: int) -> Iterator[pa.RecordBatch]:
        fmt = self.dec.fmt
        hsize = fmt.record_head.size
        missing = fmt.gap_reasons.get("missing", -1)
        types = {c: n for n, c in fmt.record_types.items()}
        dirs = {c: n for n, c in fmt.directions.items()}
        reasons = {c: n for n, c in fmt.gap_reasons.items()}
        end = len(data)
        rows, limit = self.rows, self.dec.batch_rows
        conn: dict[str, Any] = {"protocol": self.protocol, "profile": self.profile.name}
        at = fmt.at
        i_type, i_dir, i_detail = at["record_type"], at["direction"], at["detail"]
        i_conn, i_t = at["conn_id"], at["t_ns"]
        n = 0
        for values, payload in scan(data, pos, fmt):
            pos += hsize + len(payload)
            kind = types.get(values[i_type])
            direction = dirs.get(values[i_dir])
            self.t = t = values[i_t]
            detail, rec_conn = values[i_detail], values[i_conn]
            if kind is None or direction is None or t > INT64_MAX or (
                    kind == "gap" and detail not in reasons):
                self._refuse(n, values, types, dirs, reasons)
            if rec_conn != self.conn_id:
                self._report(Verdict.INFO, None, "none", None, "trace_conn_mismatch",
                             f"record {n} has conn_id {rec_conn}, the file's meta "
                             f"{self.conn_id}")
            if kind == "gap" and detail == missing:
                self._hole(direction, payload, t, n)
            elif kind in ("frame", "gap"):
                if direction in self.streams:
                    self._chunk(direction, bytes(payload), t, n)
            elif kind == "eof":
                self._eof(direction, t, n)
            elif kind == "open":
                info = self._json(payload, n, kind)
                conn.update(client=info.get("client"), upstream=info.get("upstream"),
                            opened_ns=t)
            elif kind == "close":
                for d in list(self.streams):
                    self._eof(d, t, n)
                conn.update(closed_ns=t,
                            close_reason=self._json(payload, n, kind).get("reason"))
            n += 1
            if rows.n + len(rows.frames) >= limit:
                yield from rows.batches()
        if pos < end:
            self._report(Verdict.INFO, None, "none", None, "trace_truncated",
                         f"the file ends inside a record ({end - pos} byte(s) after record {n})")
        for key, command, sent in self.judge.open_ends():
            rows.add("opens", run=self.run_id, conn_id=self.conn_id, seq=self.seq,
                     key=key, command=command, t_ns=sent)
        rows.add("conns", run=self.run_id, conn_id=self.conn_id, seq=self.seq,
                 info=json.dumps(conn, separators=(",", ":")))
        yield from rows.batches()

    def _refuse(self, n: int, values: tuple, types: dict, dirs: dict, reasons: dict) -> NoReturn:
        """The TraceError for record ``n``, whose header breaks a rule of the format."""
        at = self.dec.fmt.at
        code, direction = values[at["record_type"]], values[at["direction"]]
        t, detail = values[at["t_ns"]], values[at["detail"]]
        where = f"{self.where}: record {n}"
        if code not in types:
            raise TraceError(f"{where}: record_type {code} is none of spec/trace.yaml's "
                             f"record_types ({_codes(types)})")
        if direction not in dirs:
            raise TraceError(f"{where}: direction {direction} is none of spec/trace.yaml's "
                             f"directions ({_codes(dirs)})")
        if t > INT64_MAX:
            raise TraceError(f"{where}: t_ns {t} is past {INT64_MAX}, the largest time the "
                             "tables hold (int64 nanoseconds: the year 2262)")
        raise TraceError(f"{where}: a gap whose detail {detail} is none of spec/trace.yaml's "
                         f"gap_reasons ({_codes(reasons)})")

    def _json(self, payload: memoryview, n: int, kind: str, reason: str | None = None) -> dict:
        return load_json(payload, f"{self.where}: record {n} ({reason or kind})",
                         self.dec.fmt.json_rules(kind, reason))

    def _chunk(self, direction: str, payload: bytes, t: int, n: int) -> None:
        self.direction = direction
        self._items(direction, self.streams[direction].feed(payload), t, n)

    def _hole(self, direction: str, payload: memoryview, t: int, n: int) -> None:
        """A ``missing`` gap (a pcap import's hole), as ``Analyzer.hole`` made it: a frame it
        cut short is a truncated gap without verdict, then the hole, an INFO finding, and
        every later chunk of the direction unframed."""
        stream = self.streams.get(direction)
        if stream is not None:
            self.direction = direction
            self._items(direction, stream.eof()[0], t, n)
            stream.lost = True
        lost = self._json(payload, n, "gap", "missing").get("missing_bytes")
        self.rows.frames.append((self.run_id, self.conn_id, self.seq, n, direction, t,
                                 0, "gap", None, None, None,
                                 None, "missing", None, None, None, None))
        self._report(Verdict.INFO, None, direction, None, "capture_gap",
                     f"{lost} byte(s) {direction} are missing from the capture; the "
                     "direction's later bytes are recorded unframed (framing_lost)")

    def _eof(self, direction: str, t: int, n: int) -> None:
        stream = self.streams.pop(direction, None)
        if stream is None:
            return
        self.direction = direction
        items, error = stream.eof()
        self._items(direction, items, t, n)
        if error is not None:
            self._report(requirement_verdict(self.profile, error.requirement), error.requirement,
                         direction, None, error.kind, error.detail)

    def _items(self, direction: str, items: list, t: int, n: int) -> None:
        judge, p, frames = self.judge, self.p, self.rows.frames
        run, conn_id, seq = self.run_id, self.conn_id, self.seq   # TABLE_COLUMNS["frames"]
        c2s = direction == "c2s"
        for item in items:
            if item.gap is not None:
                frames.append((run, conn_id, seq, n, direction, t, len(item.raw), "gap", None,
                               None, None, None, item.gap, None, None, None, None))
                if item.error is not None:
                    err: ProtocolError = item.error
                    self._report(requirement_verdict(self.profile, err.requirement), err.requirement,
                                 direction, None, err.kind, err.detail)
                continue
            self.answered = None
            ok = paired = sent = answer = None
            if c2s:
                command = judge.client_frame(item, t)
                role = "request" if command is not None else None
            else:
                judge.server_frame(item, t)
                command, role = None, "event"
            key = _frame_key(item.message)
            if self.answered is not None:
                paired, pkey, ok, sent, answer = self.answered
                if not c2s:   # a reply is about its request's command
                    command, role = paired, "answer"
                    if pkey is not None:
                        key = pkey
            frames.append((run, conn_id, seq, n, direction, t, len(item.raw), "frame", role,
                           command if command is not None else _name(item.message), key, ok,
                           item.error.kind if item.error is not None else None,
                           p.version(direction, item, command),
                           paired if sent is not None else None, sent,
                           answer if sent is not None else None))


def _codes(table: dict[int, str]) -> str:
    return ", ".join(f"{name} {code}" for code, name in sorted(table.items()))


def _frame_key(message: Any) -> str | None:
    """A frame's own key: a bunqueue reqId, or a quicx task id."""
    if isinstance(message, dict):
        rid = message.get("reqId")
        return None if rid is None or not isinstance(rid, (str, int)) else str(rid)
    fields = getattr(message, "fields", None)
    if isinstance(fields, dict) and "task_id" in fields:
        return str(fields["task_id"])
    return None


def _name(message: Any) -> str | None:
    """What an unpaired frame is: a quicx message's name, a bunqueue event's type."""
    name = getattr(message, "name", None)
    if name is not None:
        return name
    if isinstance(message, dict):
        kind = message.get("type")
        return kind if isinstance(kind, str) else None
    return None

