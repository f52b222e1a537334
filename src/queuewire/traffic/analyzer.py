"""The tap's sans-IO core: bytes in (per connection and direction, with a timestamp),
frames, findings and pairs out; no sockets, no clock.

``Analyzer.feed(conn_id, direction, data, t_ns)`` frames ``data`` (:mod:`.framing`), hands
every whole frame to the protocol's judge (:mod:`.bunqueue`, :mod:`.quicx`), and returns what
that produced (:class:`queuewire.judge.Finding` and :class:`~.model.Pair` objects); the same events
are folded into bounded aggregates (per connection, per command, per requirement) that
:meth:`Analyzer.summary` returns as plain data for the reports. When a ``sink`` is given
(the recorder's ``write``), every frame and gap is passed to it with the timestamp of the
chunk that completed it, and open, eof and close as they happen, so a recording is the
exact byte stream, but for credentials: a client frame's secret fields (``x-secret`` in the
spec) are overwritten with stars of the same length first (:mod:`.redact`). Findings are
kept in full up to ``max_findings``; beyond that only their counts grow. The per-command
table has a row per command the profile defines and at most :data:`MAX_OTHER_COMMANDS` more.

With ``detect`` (no profile given), the profile is found from the traffic
(:mod:`.detect`): every call is held back (open, bytes, eofs, holes, closes) while the
frames are only cut and shown to a :class:`~.detect.Detector`; once the server's frames
decide, or ``hold_bytes`` bytes (or :data:`MAX_HELD_CALLS` calls) are held, or the
traffic ends (:meth:`Analyzer.close_all`,
:meth:`Analyzer.settle`), the profile is chosen (the protocol's default when nothing
decides) and the held calls are analysed under it, in order, as if it had been known from
the start; the call that settled it returns their findings and pairs. The choice is made
once and not revisited. :attr:`Analyzer.choice` (and the summary's ``profile_choice``)
says which profile, how it was chosen and why; ``on_profile`` is told it (the recorder
writes the profile into each file's meta, so the tap sets it there before the first file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..judge import FINDING_VERDICTS, Finding, Verdict, requirement_verdict
from ..spec import Profile, default_profile, load_profile
from .bunqueue import BunqueueProtocol
from .detect import Detector, ProfileChoice, frame_stream
from .model import CommandStats, ConnStats, Pair
from .quicx import QuicxProtocol

PROTOCOLS: dict[str, type[BunqueueProtocol] | type[QuicxProtocol]] = {"bunqueue": BunqueueProtocol,
                                                                   "quicx": QuicxProtocol}
DIRECTIONS = ("c2s", "s2c")
#: A frame the tap buffers for analysis; a longer one is passed on as raw gap records.
DEFAULT_MAX_FRAME = 64 * 1024 * 1024 + 64
MAX_CLOSED_CONNECTIONS = 10_000
#: Bytes a detecting analyzer holds back, at most, before it chooses without a decision.
DEFAULT_HOLD_BYTES = 8 * 1024 * 1024
#: Calls it holds, at most (many tiny chunks cost more than their bytes).
MAX_HELD_CALLS = 200_000

#: Command names the per-command table keeps beyond those the profile defines; a peer that
#: sends made-up names past these shares one row, :data:`OTHER_COMMANDS`, so its bytes cannot
#: grow the table (nor the latencies each row keeps, :data:`.model.MAX_SAMPLES`).
MAX_OTHER_COMMANDS = 64
OTHER_COMMANDS = "(other commands)"

Sink = Callable[..., None]   # (record_type, conn_id, direction, t_ns, payload, reason)


class _Conn:
    __slots__ = ("judge", "stats", "streams")

    def __init__(self, judge: Any, stats: ConnStats, streams: dict):
        self.judge = judge
        self.stats = stats
        self.streams = streams


class Analyzer:
    """Frames, pairs and judges the traffic of many connections of one protocol."""

    def __init__(self, protocol: str, profile: str | Profile | None = None, *,
                 sink: Sink | None = None, max_frame: int = DEFAULT_MAX_FRAME,
                 max_findings: int = 1000, keep_events: bool = True, detect: bool = False,
                 hold_bytes: int = DEFAULT_HOLD_BYTES,
                 on_profile: Callable[[ProfileChoice], None] | None = None):
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
        if detect and profile is not None:
            raise ValueError("detect chooses the profile: give no profile with it")
        given = profile is not None
        if isinstance(profile, str) or profile is None:
            profile = load_profile(profile or default_profile(protocol))
        if profile.protocol != protocol:
            raise ValueError(f"profile {profile.name} is not a {protocol} profile")
        self.protocol, self.profile = protocol, profile
        self.max_frame = max_frame
        self.proto = PROTOCOLS[protocol](profile, max_frame)
        #: how the profile was chosen; None while a detecting analyzer holds the traffic
        self.choice: ProfileChoice | None = (
            None if detect else ProfileChoice.given(profile.name) if given
            else ProfileChoice(profile.name, "default", (), "not detected"))
        self.on_profile = on_profile
        self.detector: Detector | None = Detector(protocol) if detect else None
        self.hold_bytes = hold_bytes
        self._held: list[tuple[str, tuple]] | None = [] if detect else None
        self._held_bytes = 0
        self._cut: dict[tuple[int, str], Any] = {}   # (conn_id, direction) -> framing Stream
        self.sink = sink
        self.max_findings = max_findings
        self.keep_events = keep_events
        self._conns: dict[int, _Conn] = {}
        self._closed: list[ConnStats] = []
        self.closed_dropped = 0
        self.findings: list[Finding] = []
        self.finding_counts: dict[tuple, int] = {}
        self.commands: dict[str, CommandStats] = {}
        self._others = 0    # rows of names the profile does not define (MAX_OTHER_COMMANDS)
        self.levels = dict.fromkeys(FINDING_VERDICTS, 0)
        self.started_ns: int | None = None
        self.last_ns = 0
        self._events: list[Any] = []
        self._cur: _Conn | None = None
        self._t = 0
        self._dir = "none"

    # -- events the shell reports ----------------------------------------------------------
    def open(self, conn_id: int, t_ns: int, *, client: str = "", upstream: str = "",
             listen: str = "") -> list:
        """A client connected and the tap reached the upstream."""
        if self._held is not None:
            return self._hold("open", (conn_id, t_ns, client, upstream, listen))
        return self._open(conn_id, t_ns, client, upstream, listen)

    def _open(self, conn_id: int, t_ns: int, client: str, upstream: str, listen: str) -> list:
        if self.started_ns is None:
            self.started_ns = t_ns
        stats = ConnStats(conn_id, client=client, upstream=upstream, opened_ns=t_ns)
        conn = _Conn(None, stats, {d: self.proto.stream(d) for d in DIRECTIONS})
        conn.judge = self.proto.connection(conn_id, self._reporter(conn), self._pairer(conn))
        self._conns[conn_id] = conn
        if self.sink is not None:
            self.sink("open", conn_id, "none", t_ns, json.dumps(
                {"client": client, "upstream": upstream, "listen": listen}).encode())
        return []

    def refused(self, conn_id: int, t_ns: int, *, client: str, upstream: str, error: str) -> list:
        """The upstream could not be reached for a new client (the shell closed the client)."""
        if self._held is not None:
            return self._hold("refused", (conn_id, t_ns, client, upstream, error))
        return self._refused(conn_id, t_ns, client, upstream, error)

    def _refused(self, conn_id: int, t_ns: int, client: str, upstream: str, error: str) -> list:
        if self.started_ns is None:
            self.started_ns = t_ns
        stats = ConnStats(conn_id, client=client, upstream=upstream, opened_ns=t_ns,
                          closed_ns=t_ns, close_reason="upstream_refused")
        self._finding(stats, Finding(Verdict.INFO, None, "upstream_refused",
                                     f"the upstream {upstream} refused the connection: {error}",
                                     conn_id=conn_id, direction="none", t_ns=t_ns))
        self._keep_closed(stats)
        return []

    def feed(self, conn_id: int, direction: str, data: bytes, t_ns: int) -> list:
        """Bytes that crossed the tap; returns the findings and pairs they completed."""
        if self._held is not None:
            return self._hold_feed(conn_id, direction, data, t_ns)
        conn = self._conns.get(conn_id)
        if conn is None:  # bytes after the connection was closed (the tap stopping)
            return []
        self.last_ns = t_ns
        stats = conn.stats
        stats.bytes[direction] += len(data)
        events: list[Any] = []
        self._events = events
        self._cur, self._t, self._dir = conn, t_ns, direction
        items = conn.streams[direction].feed(data)
        self._items(conn, direction, items, t_ns)
        return events

    def _items(self, conn: _Conn, direction: str, items: list, t_ns: int) -> None:
        stats, sink, judge = conn.stats, self.sink, conn.judge
        conn_id = stats.conn_id
        c2s = direction == "c2s"
        redact = self.proto.redact if c2s and sink is not None else None
        handle = judge.client_frame if c2s else judge.server_frame
        commands = self.commands
        frames = 0
        for item in items:
            if item.gap is not None:
                stats.gaps += 1
                if sink is not None:
                    sink("gap", conn_id, direction, t_ns, item.raw, item.gap)
                if item.error is not None:
                    err = item.error
                    self._report(conn, requirement_verdict(self.profile, err.requirement), err.requirement,
                                 direction, None, err.kind, err.detail)
                continue
            frames += 1
            if sink is not None:
                sink("frame", conn_id, direction, t_ns,
                     item.raw if redact is None else redact(item.raw, item.message))
            if c2s:
                cmd = handle(item, t_ns)
                if cmd is not None:
                    stats.requests += 1
                    st = commands.get(cmd)
                    if st is None:
                        st = self._cmd(cmd)
                    st.requests += 1
            elif not handle(item, t_ns) and item.error is None:
                stats.events += 1
        stats.frames[direction] += frames

    def eof(self, conn_id: int, direction: str, t_ns: int) -> list:
        """The side ``direction`` comes from closed its half (the shell passed the EOF on)."""
        if self._held is not None:
            self._cut.pop((conn_id, direction), None)
            return self._hold("eof", (conn_id, direction, t_ns))
        conn = self._conns.get(conn_id)
        if conn is None:
            return []
        events: list[Any] = []
        self._events = events
        self._cur, self._t, self._dir = conn, t_ns, direction
        self._end_stream(conn, direction, t_ns)
        if self.sink is not None:
            self.sink("eof", conn_id, direction, t_ns)
        return events

    def hole(self, conn_id: int, direction: str, missing_bytes: int, t_ns: int) -> list:
        """``missing_bytes`` bytes of ``direction`` crossed but are not in the capture (a
        pcap import): a frame they cut short is a ``truncated`` gap (no verdict: the peer
        did not cut it), then a ``missing`` gap record (payload JSON ``{"missing_bytes": n}``)
        and an INFO ``capture_gap`` finding; the direction's framing cannot be trusted after
        it, so every later chunk is a ``framing_lost`` gap."""
        if self._held is not None:
            self._cut[(conn_id, direction)] = None   # its frames can no longer be cut
            return self._hold("hole", (conn_id, direction, missing_bytes, t_ns))
        conn = self._conns.get(conn_id)
        if conn is None:
            return []
        events: list[Any] = []
        self._events = events
        self._cur, self._t, self._dir = conn, t_ns, direction
        stream = conn.streams.get(direction)
        if stream is not None:
            self._items(conn, direction, stream.eof()[0], t_ns)  # the decoder's verdict: dropped
            stream.lost = True
        conn.stats.gaps += 1
        if self.sink is not None:
            self.sink("gap", conn_id, direction, t_ns,
                      json.dumps({"missing_bytes": missing_bytes}).encode(), "missing")
        self._report(conn, Verdict.INFO, None, direction, None, "capture_gap",
                     f"{missing_bytes} byte(s) {direction} are missing from the capture; the "
                     "direction's later bytes are recorded unframed (framing_lost)")
        return events

    def _end_stream(self, conn: _Conn, direction: str, t_ns: int) -> None:
        stream = conn.streams.get(direction)
        if stream is None:
            return
        items, error = stream.eof()
        self._items(conn, direction, items, t_ns)
        if error is not None:
            level = requirement_verdict(self.profile, error.requirement)
            self._report(conn, level, error.requirement, direction, None, error.kind, error.detail)
        del conn.streams[direction]

    def close(self, conn_id: int, t_ns: int, reason: str = "eof") -> list:
        """The connection ended (both halves closed, a reset, or the tap stopping)."""
        if self._held is not None:
            for d in DIRECTIONS:
                self._cut.pop((conn_id, d), None)
            if self.detector is not None:
                self.detector.closed(conn_id)
            return self._hold("close", (conn_id, t_ns, reason))
        conn = self._conns.pop(conn_id, None)
        if conn is None:
            return []
        events: list[Any] = []
        self._events = events
        self._cur, self._t = conn, t_ns
        for direction in DIRECTIONS:
            self._dir = direction
            self._end_stream(conn, direction, t_ns)
        left = conn.judge.unanswered()
        stats = conn.stats
        stats.unanswered = len(left)
        if left:
            names = ", ".join(sorted(set(left)))
            self._report(conn, Verdict.INFO, None, "none", None, "unanswered",
                         f"{len(left)} request(s) unanswered when the connection closed ({names})")
        stats.closed_ns, stats.close_reason = t_ns, reason
        if self.sink is not None:
            self.sink("close", conn_id, "none", t_ns, json.dumps({"reason": reason}).encode())
        self._keep_closed(stats)
        return events

    def close_all(self, t_ns: int, reason: str = "tap_stopped") -> None:
        """The traffic ends: every open connection is closed (``reason``); a detection still
        undecided chooses now."""
        if self._held is not None:
            open_ids = {a[0] for name, a in self._held if name == "open"} - \
                {a[0] for name, a in self._held if name == "close"}
            for conn_id in sorted(open_ids):
                self.close(conn_id, t_ns, reason)
            self.settle()
            return
        for conn_id in list(self._conns):
            self.close(conn_id, t_ns, reason)

    # -- detection ------------------------------------------------------------------------
    def _hold(self, name: str, args: tuple) -> list:
        assert self._held is not None
        self._held.append((name, args))
        return []

    def _hold_feed(self, conn_id: int, direction: str, data: bytes, t_ns: int) -> list:
        assert self._held is not None and self.detector is not None
        data = data if type(data) is bytes else bytes(data)
        key = (conn_id, direction)
        stream = self._cut.get(key, False)
        if stream is False:
            stream = self._cut[key] = frame_stream(self.profile, self.max_frame)
        if stream is not None:
            frame = self.detector.frame
            for item in stream.feed(data):
                if item.gap is None:   # (a gap here is an oversized frame: not read)
                    frame(conn_id, direction, item.raw)
        self._held_bytes += len(data)
        self._held.append(("feed", (conn_id, direction, data, t_ns)))
        if self.detector.decided or self._held_bytes >= self.hold_bytes \
                or len(self._held) >= MAX_HELD_CALLS:
            return self.settle()
        return []

    def settle(self) -> list:
        """Choose the profile now (a detecting analyzer: from what it saw; else nothing to
        do) and analyse the held traffic under it; returns the findings and pairs it made."""
        held = self._held
        if held is None or self.detector is None:
            return []
        limited = ""
        if not self.detector.decided and (self._held_bytes >= self.hold_bytes
                                          or len(held) >= MAX_HELD_CALLS):
            limited = f"in the first {self._held_bytes:,} bytes"
        choice = self.detector.choice(limited=limited)
        self._held = None
        self._cut.clear()
        self.choice = choice
        if choice.profile != self.profile.name:
            self.profile = load_profile(choice.profile)
            self.proto = PROTOCOLS[self.protocol](self.profile, self.max_frame)
        if self.on_profile is not None:
            self.on_profile(choice)
        out: list[Any] = []
        for name, args in held:
            done = getattr(self, "_" + name if name in ("open", "refused") else name)(*args)
            if done:
                out.extend(done)
        return out

    # -- aggregation ----------------------------------------------------------------------
    def _keep_closed(self, stats: ConnStats) -> None:
        if len(self._closed) < MAX_CLOSED_CONNECTIONS:
            self._closed.append(stats)
        else:
            self.closed_dropped += 1

    def _row(self, name: str) -> str:
        """The per-command row ``name`` is counted in: its own while the profile defines it
        or fewer than :data:`MAX_OTHER_COMMANDS` other names have rows, else
        :data:`OTHER_COMMANDS`."""
        if name in self.commands:
            return name
        known = self.proto.command_names
        if known is None or name in known:
            return name
        if self._others < MAX_OTHER_COMMANDS:
            self._others += 1
            self.commands[name] = CommandStats()
            return name
        return OTHER_COMMANDS

    def _cmd(self, name: str) -> CommandStats:
        name = self._row(name)
        st = self.commands.get(name)
        if st is None:
            st = self.commands[name] = CommandStats()
        return st

    def _reporter(self, conn: _Conn) -> Callable[[Finding], None]:
        def report(finding: Finding) -> None:   # the connection judge's findings, as made
            self._count(conn, finding)
        return report

    def _report(self, conn: _Conn, level: str, requirement: str | None, direction: str,
                command: str | None, kind: str, message: str) -> None:
        """A finding of the analyzer's own (framing, gaps, unanswered requests)."""
        self._count(conn, Finding(Verdict(level), requirement, kind, message,
                                  conn_id=conn.stats.conn_id, direction=direction,
                                  command=command, t_ns=self._t))

    def _count(self, conn: _Conn, finding: Finding) -> None:
        self._finding(conn.stats, finding)
        if finding.command is not None:
            self._cmd(finding.command).findings[finding.level] += 1

    def _finding(self, stats: ConnStats, finding: Finding) -> None:
        stats.findings[finding.level] += 1
        self.levels[finding.level] += 1
        key = (finding.level, finding.requirement, finding.kind,
               None if finding.command is None else self._row(finding.command))
        self.finding_counts[key] = self.finding_counts.get(key, 0) + 1
        if len(self.findings) < self.max_findings:
            self.findings.append(finding)
        if self.keep_events:
            self._events.append(finding)

    def _pairer(self, conn: _Conn) -> Callable[..., None]:
        stats = conn.stats
        commands = self.commands

        def pair(command: str, key: Any, sent: int, answered: int, ok: bool, answer: str) -> None:
            st = commands.get(command)
            if st is None:
                st = self._cmd(command)
            st.paired += 1
            if not ok:
                st.errors += 1
            st.latency.add(answered - sent)
            stats.paired += 1
            if self.keep_events:
                self._events.append(Pair(stats.conn_id, command, key, sent, answered, ok, answer))
        return pair

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def connection_stats(self) -> list[ConnStats]:
        return [*self._closed, *(c.stats for c in self._conns.values())]

    def summary(self) -> dict[str, Any]:
        """Everything the reports show, as plain data (JSON-ready)."""
        conns = self.connection_stats()
        totals: dict[str, Any] = {
            "connections": len(conns) + self.closed_dropped,
            "open": len(self._conns),
            "frames": {d: sum(c.frames[d] for c in conns) for d in DIRECTIONS},
            "bytes": {d: sum(c.bytes[d] for c in conns) for d in DIRECTIONS},
            "gaps": sum(c.gaps for c in conns),
            "requests": sum(c.requests for c in conns),
            "paired": sum(c.paired for c in conns),
            "unanswered": sum(c.unanswered for c in conns),
            "events": sum(c.events for c in conns),
            "findings": dict(self.levels),
        }
        self.settle()
        choice = self.choice
        return {
            "protocol": self.protocol, "profile": self.profile.name,
            "profile_choice": choice.as_dict() if choice is not None else None,
            "started_ns": self.started_ns, "last_ns": self.last_ns,
            "verdict": Verdict.FAIL if self.levels[Verdict.FAIL] else Verdict.PASS,
            "totals": totals,
            "commands": {k: v.as_dict() for k, v in sorted(self.commands.items())},
            "requirements": [
                {"level": lv, "requirement": rid, "kind": kind, "command": cmd, "count": n,
                 "text": self.profile.requirements[rid].text
                 if rid in self.profile.requirements else None}
                for (lv, rid, kind, cmd), n in sorted(
                    self.finding_counts.items(), key=lambda kv: (FINDING_VERDICTS.index(kv[0][0]), -kv[1]))],
            "findings": [f.as_dict() for f in self.findings],
            "findings_dropped": max(0, sum(self.levels.values()) - len(self.findings)),
            "connections": [c.as_dict() for c in conns],
            "connections_dropped": self.closed_dropped,
        }
