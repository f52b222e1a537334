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
  instead of reporting them. :mod:`.pipeline` joins the two on (run, conn_id, match key),
  the nearest later file first, and judges each joined answer with :func:`judge_split`;
  what stays unmatched becomes the finding the tap would have made (:func:`loose_finding`).

Rules: nothing here knows a field, limit or error of a protocol (those come from the
profile through the codecs); a file cut inside a record ends at its last whole record (the
recorder was killed), reported as an INFO finding; a file that is not a trace raises
:class:`~queuewire.traffic.trace_format.TraceError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ..codecs.errors import ProtocolError
from ..spec import Profile, load_profile
from ..traffic.analyzer import DEFAULT_MAX_FRAME, DIRECTIONS, PROTOCOLS
from ..traffic.model import INFO, verdict_of
from ..traffic.trace_format import TraceError, parse_header, scan, trace_format

#: Rows per yielded batch: large enough that Arrow's per-batch cost vanishes, small enough
#: that a 64 MiB file never holds all its rows at once.
BATCH_ROWS = 65_536

SCHEMA = pa.schema([
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
    ("level", pa.string()),          # violations: FAIL | WARN | INFO
    ("requirement", pa.string()),    # violations
    ("message", pa.string()),        # violations
    ("payload", pa.binary()),        # orphans: the answer frame, judged after the join
    ("info", pa.string()),           # conns: JSON of CONN_FIELDS
])
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
            self._head = self.proto._head

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

    def _proto(self, protocol: str, profile: str | None) -> _Proto:
        prof = load_profile(profile) if profile else None
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
        meta, pos = parse_header(data, self.fmt)
        protocol = self.protocol or meta.get("protocol")
        if protocol not in PROTOCOLS:
            raise TraceError(f"{name or 'trace file'}: unknown protocol {protocol!r}")
        p = self._proto(protocol, self.profile or meta.get("profile"))
        run = str(meta.get("run", ""))
        conn_id = int(meta.get("conn_id", 0))
        seq = int(meta.get("sequence", 0))
        rows = _Rows()
        yield from _FileRun(self, p, rows, run, conn_id, seq, protocol).run(data, pos)


class _FileRun:
    """The state of decoding one file (one connection's records, in order)."""

    def __init__(self, dec: FileDecoder, p: _Proto, rows: _Rows, run: str, conn_id: int,
                 seq: int, protocol: str):
        self.dec, self.p, self.rows = dec, p, rows
        self.run_id, self.conn_id, self.seq, self.protocol = run, conn_id, seq, protocol
        self.profile = p.profile
        self.streams = {d: p.proto.stream(d) for d in DIRECTIONS}
        self.t = 0
        self.direction = "none"
        # (command, key, ok, sent_ns, answer) of the pair the frame being judged completed
        self.answered: tuple | None = None
        self.judge = p.proto.connection(conn_id, self._report, self._pair,
                                        self._orphan if seq > 0 else None)

    # -- the judge's callbacks
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
            direction = dirs.get(values[i_dir], "none")
            self.t = t = values[i_t]
            detail, rec_conn = values[i_detail], values[i_conn]
            if rec_conn != self.conn_id:
                self._report(INFO, None, "none", None, "trace_conn_mismatch",
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
                info = _json(payload)
                conn.update(client=info.get("client"), upstream=info.get("upstream"),
                            opened_ns=t)
            elif kind == "close":
                for d in list(self.streams):
                    self._eof(d, t, n)
                conn.update(closed_ns=t, close_reason=_json(payload).get("reason"))
            n += 1
            if rows.n + len(rows.frames) >= limit:
                yield from rows.batches()
        if pos < end:
            self._report(INFO, None, "none", None, "trace_truncated",
                         f"the file ends inside a record ({end - pos} byte(s) after record {n})")
        for key, command, sent in self.judge.open_ends():
            rows.add("opens", run=self.run_id, conn_id=self.conn_id, seq=self.seq,
                     key=key, command=command, t_ns=sent)
        rows.add("conns", run=self.run_id, conn_id=self.conn_id, seq=self.seq,
                 info=json.dumps(conn, separators=(",", ":")))
        yield from rows.batches()

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
        lost = _json(payload).get("missing_bytes")
        self.rows.frames.append((self.run_id, self.conn_id, self.seq, n, direction, t,
                                 0, "gap", None, None, None,
                                 None, "missing", None, None, None, None))
        self._report(INFO, None, direction, None, "capture_gap",
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
            self._report(verdict_of(self.profile, error.requirement), error.requirement,
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
                    self._report(verdict_of(self.profile, err.requirement), err.requirement,
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


def _json(payload: memoryview) -> dict:
    try:
        out = json.loads(bytes(payload).decode("utf-8")) if len(payload) else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


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

