"""Replay a saved case's bytes against any server and compare what comes back
(``conform replay --raw``; by default ``conform replay`` re-runs and re-judges the case, see
:mod:`.rejudge`).

A case file is what ``queuewire conform server --report-dir DIR`` writes for every case that
did not pass (``DIR/cases/<case-id>.json``: :func:`~queuewire.conformance.model.jsonable_result`
plus ``protocol``, ``profile`` and ``target``). :func:`replay` opens one TCP connection per
recorded connection and walks the recorded events in order: before each send (and each close
the tester made) it waits, up to the timeout, until every connection has received as many
frames as it had at that point of the recording, and keeps the recorded pace (a send recorded
at 1.2 s is not made before 1.2 s). The bytes sent are exactly the recorded ones (big sends
are stored in the file as ``zlib_base64``, zlib-compressed, instead of ``hex``). A send the
transcript kept only in part (over ``wire.RECORD_LIMIT``, the 64 MiB framing probes) is
completed with zero bytes when its note says the rest was all zero bytes (exact); otherwise
the recorded part alone is sent and a warning says ``cannot replay exactly: N bytes were not
recorded``. Connections are the runner's
recorded :class:`~queuewire.conformance.wire.Connection`, so new replies are decoded the same
way as the recorded ones.

Values the server chose (job ids, webhook ids, quicx task ids) differ between runs, and a
case sends them back (``save:`` then ``${job}``). So while replaying, each new reply is paired
with its recorded one and every id-like value that differs (a string of 6+ characters, or an
integer under a key ending in ``id``) is remembered as recorded -> new; a later send that
contains a recorded value is decoded, rewritten and encoded again (bunqueue maps; quicx
messages), and sent as the server now expects. Sends that do not decode go out as recorded.

Replies are compared *in kind*, not byte for byte (job ids and timestamps differ between
runs): bunqueue ``ok`` / ``error`` / push frames, quicx message type (``error`` for the error
message), a decoding failure, and a close by the server. bunqueue replies are paired by
``reqId`` where they carry one (pipelined replies may come in any order), the rest by
position. :func:`load_case_file` refuses a malformed file with a one-line
:class:`ReplayError` naming the file and what is wrong.

A case file is data someone shared, so loading it is bounded before anything is allocated:
a file over :data:`CASE_FILE_MAX` bytes is refused from its size (``--max-file-bytes``), an
event's ``zlib_base64`` is inflated with a ``max_length`` (never past its declared ``bytes``
nor :func:`event_bound`), all events together hold at most :data:`CASE_BYTES_MAX` bytes, a
zero-byte completion may not make a send longer than the protocol's largest frame
(:func:`frame_bound`, from the spec), ``t`` must be a finite time, and while replaying no
pause between two recorded events exceeds the replay's timeout (a warning says it was
shortened). Zero bytes are written in pieces, never built in memory. The recorded auth token
is masked in case files (:func:`~queuewire.conformance.model.redact_result`): with
``--auth-token`` (or ``QUEUEWIRE_AUTH_TOKEN``) :func:`restore_token` puts it back into each
masked span, which needs a token of the recorded length.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import re
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..spec import Profile, SpecError, load_profile
from .model import CaseTranscript, form_of, redact_transcript
from .wire import QUICX_PAYLOAD_MAX, RECORD_LIMIT

DIRECTIONS = ("send", "recv", "close", "open", "note")
_TRUNCATED = re.compile(r"(\d+) bytes sent; the transcript keeps the first \d+"
                        r"(; the other \d+ are zero bytes)?")
COMPRESS_OVER = 64 * 1024  # events bigger than this are stored zlib-compressed in case files
_ROLE = re.compile(r" as (\w+)\s*$")
# Bounds of a case file (a shared file is data, see the module docstring). The runner writes
# files of a few MB: big sends are zlib-compressed and a transcript keeps at most ~64 MiB
# (model.CaseTranscript), so these leave room for every file it writes.
CASE_FILE_MAX = 64 << 20    # bytes of the file itself; refused before it is parsed
CASE_BYTES_MAX = 128 << 20  # bytes of all its events together, once decoded
CASE_EVENTS_MAX = 20_000    # events (a transcript keeps at most ~5000, plus notes)
# JSON nesting of a case file: decoded views are cut at wire.VIEW_DEPTH_MAX (64) levels and sit
# a few levels deep in the file; deeper input would only exhaust the recursion of its readers.
CASE_JSON_DEPTH_MAX = 128
ZERO_PIECE = bytes(1 << 20)  # zero bytes completing a send are written in pieces of this


class ReplayError(Exception):
    """The case file cannot be replayed (the message is one line for the user)."""


@dataclass
class Event:
    t: float
    conn: int
    direction: str
    data: bytes
    decoded: Any
    note: str
    redacted: tuple[tuple[int, int, str], ...] = ()  # masked secrets (offset, length, form)
    fill: int = 0  # zero bytes completing the send (its note says the rest were zeros)


@dataclass
class CaseFile:
    path: str
    id: str
    protocol: str
    profile: str
    target: str
    verdict: str
    events: list[Event]

    def conns(self) -> list[int]:
        return sorted({e.conn for e in self.events if e.conn > 0})

    def role(self, conn: int) -> str | None:
        for e in self.events:
            if e.conn == conn and e.direction == "open":
                m = _ROLE.search(e.note or "")
                if m:
                    return m.group(1)
        return None


@dataclass
class Received:
    """One thing a connection received, as compared: ``kind`` and a display ``view``."""

    kind: str
    view: Any
    req_id: str | None = None


@dataclass
class ReplayResult:
    case: CaseFile
    recorded: dict[int, list[Received]]
    new: dict[int, list[Received]]
    rows: list[tuple[int, Received | None, Received | None, bool]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return all(ok for *_, ok in self.rows)


def frame_bound(profile: Profile) -> tuple[int, str]:
    """The largest frame the protocol allows, header included, and the limit's name in the
    spec (bunqueue ``max_frame_bytes``; quicx ``max_payload_bytes``, no more than
    ``wire.QUICX_PAYLOAD_MAX`` where only the u32 field bounds it)."""
    spec = profile.model
    if profile.protocol == "bunqueue":
        return spec.max_frame_bytes + struct.calcsize(spec.len_format), "max_frame_bytes"
    cap = spec.max_payload_bytes
    payload = QUICX_PAYLOAD_MAX if cap is None else min(cap, QUICX_PAYLOAD_MAX)
    return spec.header_size + payload, "max_payload_bytes"


def event_bound(profile: Profile) -> int:
    """The most bytes one recorded event may hold: a send or frame the runner keeps
    (``wire.RECORD_LIMIT``), or one frame at the protocol's limit."""
    return max(RECORD_LIMIT, frame_bound(profile)[0])


def read_case_text(path: str | Path, max_bytes: int = CASE_FILE_MAX) -> str:
    """The text of a case file, refused from its size alone when over ``max_bytes``."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise ReplayError(f"cannot read {p}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise ReplayError(f"{p} is larger than {max_bytes} bytes, the most a case file may be "
                          f"(the runner writes files of a few MB; --max-file-bytes N to allow "
                          f"more)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ReplayError(f"{p} is not a UTF-8 JSON case file") from None


def parse_case_json(text: str, p: Path) -> Any:
    """The JSON of a case file, refused (one line) when malformed or nested deeper than
    :data:`CASE_JSON_DEPTH_MAX` levels."""
    deep = ReplayError(f"{p}: JSON nested deeper than {CASE_JSON_DEPTH_MAX} levels, more than "
                       "a case file holds")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{p} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise deep from None
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > CASE_JSON_DEPTH_MAX:
                raise deep
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return doc


def load_case_file(path: str | Path, *, max_bytes: int = CASE_FILE_MAX) -> CaseFile:
    """Read and check a saved case; ``ReplayError`` (one line) when it cannot be replayed."""
    p = Path(path)
    doc = parse_case_json(read_case_text(p, max_bytes), p)
    if not isinstance(doc, dict):
        raise ReplayError(f"{p}: a case file is a JSON object, not {type(doc).__name__}")
    for key in ("id", "protocol", "profile", "transcript"):
        if key not in doc:
            raise ReplayError(f"{p}: missing key {key!r} (write case files with "
                              f"'queuewire conform server --report-dir DIR')")
    protocol, profile = doc["protocol"], doc["profile"]
    try:
        prof = load_profile(str(profile))
    except SpecError as exc:
        raise ReplayError(f"{p}: {exc}") from None
    if prof.protocol != protocol:
        raise ReplayError(f"{p}: profile {profile} is a {prof.protocol} profile, not {protocol}")
    if not isinstance(doc["transcript"], list):
        raise ReplayError(f"{p}: 'transcript' must be a list of events")
    if len(doc["transcript"]) > CASE_EVENTS_MAX:
        raise ReplayError(f"{p}: {len(doc['transcript'])} events, more than the "
                          f"{CASE_EVENTS_MAX} a case file may hold")
    per_event, (frame_max, limit_name) = event_bound(prof), frame_bound(prof)
    events: list[Event] = []
    total = 0
    for i, ev in enumerate(doc["transcript"]):
        where = f"{p}: transcript[{i}]"
        if not isinstance(ev, dict):
            raise ReplayError(f"{where} is not an object")
        direction = ev.get("direction")
        if direction not in DIRECTIONS:
            raise ReplayError(f"{where}: direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
        conn = ev.get("conn")
        lowest = 0 if direction == "note" else 1  # note 0: HTTP exchanges, notes of the case
        if not isinstance(conn, int) or isinstance(conn, bool) or conn < lowest:
            raise ReplayError(f"{where}: conn must be a positive integer, not {conn!r}"
                              + (" (0 only for a note)" if conn == 0 else ""))
        try:
            data = event_bytes(ev, min(per_event, CASE_BYTES_MAX - total))
        except ValueError as exc:
            raise ReplayError(f"{where}: {exc}") from None
        total += len(data)
        t = ev.get("t", 0.0)
        if (not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t)
                or t < 0):
            raise ReplayError(f"{where}: t must be a finite number of seconds, at least 0, "
                              f"not {t!r}")
        note = str(ev.get("note") or "")
        fill = 0
        m = _TRUNCATED.search(note) if direction == "send" else None
        if m and m.group(2) and int(m.group(1)) > len(data):
            size = int(m.group(1))
            if size > frame_max:
                raise ReplayError(f"{where}: the note claims a send of {size} bytes completed "
                                  f"with zero bytes, more than the largest frame of {prof.name} "
                                  f"({frame_max} bytes: {limit_name} and the header)")
            fill = size - len(data)
        events.append(Event(float(t), conn, direction, data, ev.get("decoded"), note,
                            _spans(ev.get("redacted"), len(data), where), fill))
    if not any(e.direction == "send" for e in events):
        raise ReplayError(f"{p}: the transcript has no bytes sent by the tester: nothing to replay")
    return CaseFile(str(p), str(doc["id"]), protocol, str(profile), str(doc.get("target", "")),
                    str(doc.get("verdict", "")), events)


def _spans(value: Any, size: int, where: str) -> tuple[tuple[int, int, str], ...]:
    """The ``redacted`` spans of an event, checked to lie inside its bytes."""
    if value is None:
        return ()
    ok = isinstance(value, list) and all(
        isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                    for x in v[:2])
        and isinstance(v[2], str) and 0 <= v[0] and 0 < v[1] and v[0] + v[1] <= size
        for v in value)
    if not ok:
        raise ReplayError(f"{where}: 'redacted' must list [offset, length, form] spans inside "
                          "the event's bytes")
    return tuple((int(a), int(b), str(c)) for a, b, c in value)


def restore_token(data: bytes, spans: Any, token: str) -> bytes:
    """``data`` with ``token`` (in the form each span names) written back into its masked
    spans; ``ReplayError`` when the token's length is not the recorded one."""
    out = bytearray(data)
    for offset, length, form in spans:
        value = form_of(token, form)
        if len(value) != length:
            raise ReplayError(f"the recorded frames hold an auth token of another length "
                              f"({form} of {length} bytes, the token given makes {len(value)}): "
                              f"--raw resends the recorded bytes, so give the token they were "
                              f"recorded with (or replay without --raw)")
        out[offset:offset + length] = value
    return bytes(out)


def event_bytes(ev: dict[str, Any], limit: int = CASE_BYTES_MAX) -> bytes:
    """The bytes of a case-file event: ``hex``, or ``zlib_base64`` for big events, never more
    than ``limit`` (nor a ``zlib_base64`` event's declared ``bytes``) once decoded."""
    if "zlib_base64" in ev:
        declared = ev.get("bytes")
        if not isinstance(declared, int) or isinstance(declared, bool) or declared < 0:
            raise ValueError("a 'zlib_base64' event needs its size in 'bytes'")
        if declared > limit:
            raise ValueError(f"'bytes' {declared} is more than the {limit} bytes an event may "
                             "hold here")
        try:
            packed = base64.b64decode(ev["zlib_base64"], validate=True)
            z = zlib.decompressobj()
            data = z.decompress(packed, declared + 1)
        except (binascii.Error, zlib.error, TypeError, ValueError):
            raise ValueError("'zlib_base64' is not base64 of zlib data") from None
        if len(data) != declared or z.unconsumed_tail:
            raise ValueError(f"'zlib_base64' inflates to more than its declared {declared} "
                             f"bytes" if len(data) > declared or z.unconsumed_tail else
                             f"'zlib_base64' inflates to {len(data)} bytes, not its declared "
                             f"{declared}")
        return data
    text = ev.get("hex") or ""
    if isinstance(text, str) and len(text) > 2 * limit:
        raise ValueError(f"'hex' holds more than the {limit} bytes an event may hold here")
    try:
        return bytes.fromhex(text)
    except (ValueError, TypeError):
        raise ValueError("'hex' is not hexadecimal") from None


def compact_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Case-file events with every ``hex`` over :data:`COMPRESS_OVER` bytes stored as
    ``zlib_base64`` (``bytes`` keeps the size): the job-data probes repeat one character."""
    out = []
    for ev in events:
        h = ev.get("hex") or ""
        if len(h) > 2 * COMPRESS_OVER:
            data = bytes.fromhex(h)
            small = {k: v for k, v in ev.items() if k != "hex"}
            small["bytes"] = len(data)
            small["zlib_base64"] = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
            out.append(small)
        else:
            out.append(ev)
    return out


# -- classification ---------------------------------------------------------------------------
def _kind(protocol: str, view: Any) -> Received:
    if protocol == "bunqueue":
        if isinstance(view, dict):
            req = view.get("reqId")
            req_id = req if isinstance(req, str) else None
            if view.get("ok") is True:
                return Received("ok", view, req_id)
            if view.get("ok") is False:
                return Received("error", view, req_id)
            return Received("push", view, req_id)
        return Received("frame", view)
    if isinstance(view, dict) and "type" in view:
        name = str(view["type"])
        return Received("error" if "ERROR" in name.upper() else name, view)
    return Received("frame", view)


def received_of(protocol: str, events: list[Any]) -> dict[int, list[Received]]:
    """Per connection, what it received (frames, decoding failures, a close by the server)."""
    out: dict[int, list[Received]] = {}
    for e in events:
        if e.direction == "recv":
            if e.decoded is None:
                out.setdefault(e.conn, []).append(Received("undecoded", {"hex": e.data.hex()}))
            else:
                out.setdefault(e.conn, []).append(_kind(protocol, e.decoded))
        elif e.direction == "note" and str(e.note).startswith("decode error"):
            out.setdefault(e.conn, []).append(Received("garbled", e.decoded or e.note))
        elif e.direction == "close" and "tester" not in (e.note or ""):
            out.setdefault(e.conn, []).append(Received("close", e.note))
    return out


def _pair(recorded: list[Received], new: list[Received]) -> list[tuple[Received | None, Received | None]]:
    """Pair recorded and new items of one connection: by reqId when both carry one, else in
    order (close last)."""
    new_left = list(new)
    by_req: dict[str, Received] = {}
    for n in new_left:
        if n.req_id is not None and n.req_id not in by_req:
            by_req[n.req_id] = n
    pairs: list[tuple[Received | None, Received | None]] = []
    for r in recorded:
        if r.req_id is not None and r.req_id in by_req:
            n = by_req.pop(r.req_id)
            new_left.remove(n)
            pairs.append((r, n))
        else:
            pairs.append((r, None))
    rest = list(new_left)
    out: list[tuple[Received | None, Received | None]] = []
    for was, now in pairs:
        out.append((was, now if now is not None or not rest else rest.pop(0)))
    out.extend((None, n) for n in rest)
    return out


def compare(case: CaseFile, recorded: dict[int, list[Received]],
            new: dict[int, list[Received]]) -> list[tuple[int, Received | None, Received | None, bool]]:
    rows = []
    for conn in sorted(set(recorded) | set(new) | set(case.conns())):
        for r, n in _pair(recorded.get(conn, []), new.get(conn, [])):
            rows.append((conn, r, n, r is not None and n is not None and r.kind == n.kind))
    return rows


# -- id rewriting -----------------------------------------------------------------------------
def learn_ids(old: Any, new: Any, mapping: dict[Any, Any], key: str = "") -> None:
    """Record ``old -> new`` for every id-like scalar that differs at the same place."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in old:
            if k in new and k != "reqId":
                learn_ids(old[k], new[k], mapping, str(k))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for a, b in zip(old, new):
            learn_ids(a, b, mapping, key)
    elif isinstance(old, str) and isinstance(new, str) and old != new and len(old) >= 6:
        mapping[old] = new
    elif (isinstance(old, int) and isinstance(new, int) and not isinstance(old, bool)
          and old != new and key.lower().endswith("id")):
        mapping[(key, old)] = new


def _substitute(value: Any, mapping: dict[Any, Any], key: str = "") -> tuple[Any, bool]:
    if isinstance(value, dict):
        out, changed = {}, False
        for k, v in value.items():
            out[k], c = _substitute(v, mapping, str(k))
            changed |= c
        return out, changed
    if isinstance(value, list):
        items = [_substitute(v, mapping, key) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    if isinstance(value, str) and value in mapping:
        return mapping[value], True
    if isinstance(value, int) and not isinstance(value, bool) and (key, value) in mapping:
        return mapping[(key, value)], True
    return value, False


def rewrite(protocol: str, profile: Any, data: bytes, mapping: dict[Any, Any]) -> bytes:
    """``data`` with recorded ids replaced by the new ones; unchanged when nothing applies or
    the bytes are not whole, decodable frames (raw probes go out as recorded)."""
    if not mapping or not data:
        return data
    try:
        if protocol == "bunqueue":
            from ..codecs.bunqueue import FrameDecoder, FrameEncoder

            dec = FrameDecoder(profile, max_frame_bytes=(1 << 32) - 1)
            msgs = dec.feed(data)
            if dec.buffered or not msgs:
                return data
            out, any_change = [], False
            for m in msgs:
                m2, changed = _substitute(m, mapping)
                any_change |= changed
                out.append(m2)
            if not any_change:
                return data
            enc = FrameEncoder(profile)
            return b"".join(enc.encode(m) for m in out)
        from ..codecs.quicx import QuicxDecoder, QuicxEncoder

        qdec = QuicxDecoder(profile, None)
        qmsgs = qdec.feed(data)
        if qdec.buffered or not qmsgs:
            return data
        out_bytes, any_change = [], False
        qenc = QuicxEncoder(profile)
        for qm in qmsgs:
            fields, changed = _substitute(dict(qm.fields), mapping)
            any_change |= changed
            out_bytes.append(qenc.encode(qm.name, **fields) if changed else qm.raw)
        return b"".join(out_bytes) if any_change else data
    except Exception:  # noqa: BLE001 - anything odd: send exactly what was recorded
        return data


# -- replay -----------------------------------------------------------------------------------
async def replay(case: CaseFile, host: str, port: int, *, timeout: float = 5.0,
                 auth_token: str | None = None) -> ReplayResult:
    """Send the recorded bytes to ``host:port`` and collect what comes back (``auth_token``
    goes back into the spans where the recording masked it)."""
    from .wire import Connection

    prof = load_profile(case.profile)
    transcript = CaseTranscript()
    conns: dict[int, Connection] = {}
    warnings: list[str] = []
    recorded_seen: dict[int, int] = {}  # recorded received items so far, per conn
    recorded_items = received_of(case.protocol, case.events)

    def new_counts() -> dict[int, int]:
        got = received_of(case.protocol, transcript.events)
        return {c: len(v) for c, v in got.items()}

    async def settle() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = new_counts()
            if all(counts.get(c, 0) >= n for c, n in recorded_seen.items()
                   if c in conns and not conns[c].closed_by_us):
                return
            await asyncio.sleep(0.005)

    async def conn_of(num: int) -> Connection:
        if num not in conns:
            role = case.role(num) if case.protocol == "quicx" else None
            conns[num] = await Connection(transcript, num, host, port, case.protocol, prof,
                                          role).open(timeout)
        return conns[num]

    mapping: dict[Any, Any] = {}

    def learn() -> None:
        """Pair what arrived so far with the recording and learn the ids that changed."""
        got = received_of(case.protocol, transcript.events)
        for c, n in recorded_seen.items():
            for old, new in _pair(recorded_items.get(c, [])[:n], got.get(c, [])):
                if old is not None and new is not None and old.kind == new.kind:
                    learn_ids(old.view, new.view, mapping)

    if any(e.conn == 0 and isinstance(e.decoded, dict) and e.decoded.get("http") == "request"
           for e in case.events):
        warnings.append("the case's HTTP requests (connection 0) are not replayed; only its "
                        "TCP connections are")
    if any(e.conn == 0 and isinstance(e.decoded, dict) and "omitted_events" in e.decoded
           for e in case.events):
        warnings.append("the recorded transcript was cut (events omitted between its head and "
                        "tail): the replay is not exact")
    masked = [e for e in case.events if e.redacted and e.direction == "send"]
    if auth_token:
        for e in masked:
            restore_token(e.data, e.redacted, auth_token)  # a token of another length: refused now
    if masked and not auth_token:
        warnings.append("the recorded sends hold the auth token, masked in the file: they go "
                        "out masked (give --auth-token or set QUEUEWIRE_AUTH_TOKEN to send it)")
    start = time.monotonic()
    try:
        for ev in case.events:
            if ev.conn == 0:
                continue  # HTTP exchanges and notes about the case: nothing to send
            if ev.direction in ("recv", "note") or (ev.direction == "close" and "tester" not in ev.note):
                # Something the server did: count it, do not act.
                if ev.direction != "note" or ev.note.startswith("decode error"):
                    recorded_seen[ev.conn] = recorded_seen.get(ev.conn, 0) + 1
                continue
            if ev.direction == "open":
                await conn_of(ev.conn)
                continue
            await settle()
            delay = ev.t - (time.monotonic() - start)
            if delay > timeout:  # a pause longer than any wait of the run: keep the pace after
                warnings.append(f"conn {ev.conn}: the recorded pause of {delay:.3g} s before the "
                                f"{ev.direction} at {ev.t:.3g} s was shortened to the timeout "
                                f"({timeout:g} s)")
                start -= delay - timeout
                delay = timeout
            if delay > 0:
                await asyncio.sleep(delay)
            conn = await conn_of(ev.conn)
            if ev.direction == "close":
                await conn.close()
                continue
            if not conn.is_open:
                warnings.append(f"conn {ev.conn}: the server closed it before a recorded send "
                                f"at {ev.t * 1000:.0f} ms; not sent")
                continue
            learn()
            data = ev.data
            if ev.redacted and auth_token:
                data = restore_token(data, ev.redacted, auth_token)
            data = rewrite(case.protocol, prof, data, mapping)
            m = _TRUNCATED.search(ev.note)
            if m and not ev.fill and int(m.group(1)) > len(data):
                size = int(m.group(1))
                warnings.append(f"conn {ev.conn}: cannot replay exactly: "
                                f"{size - len(data)} bytes were not recorded (a send of "
                                f"{size} bytes at {ev.t * 1000:.0f} ms); sent the "
                                f"{len(data)} recorded bytes only")
            transcript.add(ev.conn, "send", data[:1 << 20], None, ev.note)
            await conn.write(data)
            left = ev.fill  # the rest was zero bytes (bounded at load): completing it is exact
            while left > 0:
                piece = ZERO_PIECE if left >= len(ZERO_PIECE) else ZERO_PIECE[:left]
                await conn.write(piece)
                left -= len(piece)
        await settle()
        # Anything the server sends beyond the recording shows up as an extra row.
        await asyncio.sleep(min(0.2, timeout))
    finally:
        for c in conns.values():
            await c.close()
    redact_transcript(transcript, auth_token)  # what a server echoes is shown, masked
    new = received_of(case.protocol, transcript.events)
    return ReplayResult(case, recorded_items, new, compare(case, recorded_items, new), warnings)


def replay_sync(case: CaseFile, host: str, port: int, *, timeout: float = 5.0,
                auth_token: str | None = None) -> ReplayResult:
    return asyncio.run(replay(case, host, port, timeout=timeout, auth_token=auth_token))


def short(item: Received | None, width: int = 70) -> str:
    """One line describing a received item for the side-by-side table."""
    if item is None:
        return "(nothing)"
    if item.kind == "close":
        return f"close: {item.view}"
    text = item.view if isinstance(item.view, str) else json.dumps(item.view, default=str,
                                                                   ensure_ascii=False)
    text = f"{item.kind}: {text}"
    return text if len(text) <= width else text[:width - 1] + "…"
