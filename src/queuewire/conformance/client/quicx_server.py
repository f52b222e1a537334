"""quicx: the checker (sans-IO) and the conformance server (asyncio) clients connect to.

:class:`QuicxClientChecker` decodes what each connection of a producer, worker or monitor
sends with the codecs' :class:`~queuewire.codecs.quicx.QuicxDecoder` in the daemon's role
(every header and layout rule: a framing error cites the requirement the decoder names,
QX-HDR-*, QX-MSG-*, QX-SUBMIT-*, ...), and checks that MSG_DONE and MSG_FAILED name a task the
daemon handed that connection (QX-TASK-3). It records every message both ways with its time
for the judgements (:mod:`.quicx_judges`).

:class:`QuicxConformanceServer` serves like the reference daemon: each TCP connection is a
:class:`~queuewire.reference_server.quicx.QuicxConnection` of one
:class:`~queuewire.reference_server.quicx.QuicxEngine` (sans-IO), fed frame by frame, its
actions performed for whichever connection they name. The scenario's ``server`` behaviours
intercept: ``wait_storm`` ``{count}`` answers the first ``count`` MSG_READY with MSG_WAIT
whatever is queued; ``drop_after_task`` writes the first MSG_TASK then closes that connection
(the engine requeues the task, QX-WORKER-1); ``late_pong`` ``{ms}`` answers the client's
MSG_HEARTBEAT only after ``ms``; ``heartbeat`` ``{after_ms}`` sends the client a MSG_HEARTBEAT
that long after it connects (the client must answer MSG_PONG, QX-HB-2). A session exposes
what the bunqueue session does (``events``, ``transcript``, ``live``), so the runner drives
both alike.

Every session (a scenario, or a fuzz case) gets an engine of its own, so no task an earlier
one left queued reaches its worker. Fuzz mode (``queuewire fuzz --client --protocol quicx``,
:mod:`.fuzzing`): ``mangle``,
a callable ``(message, n, frame, fields)`` called with every frame the engine sends (``n``
counting that message's frames in the session), may return a plan ``{"writes": [bytes...],
"close": bool, "note": str, "intact": bool, "delay": seconds}`` to send instead: the writes
(``delay``: held back, with everything written on that connection after them, for that
long), then a close. The real frames are kept in ``QuicxSession.computed[(message, n)]``; a
plan that is not ``intact`` hands the connection no task (QX-TASK-3 then holds a result for
it against the client).

A flooding client costs bounded memory: frames are handled in the read loop (no task per
frame), the writes a read caused are drained before the next read (a client that does not read
stops its own reads), the checker keeps :class:`~.records.HeadTail` records of the messages
both ways, and a read's decoded frames are recorded head and tail (:mod:`.records`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...codecs.errors import ProtocolError
from ...codecs.quicx import Message, QuicxDecoder, QuicxEncoder, to_json
from ...reference_server.quicx import Close, QuicxConnection, QuicxEngine, Send
from ...spec import Profile
from ...spec.quicx import DAEMON
from ..model import Check, Transcript
from .listener import ScenarioListener
from .records import FRAMES_HEAD, FRAMES_TAIL, HeadTail, head_tail

__all__ = ["QuicxClientChecker", "QuicxConformanceServer"]

MAX_FINDINGS = 5
READ_SIZE = 64 * 1024


class QuicxClientChecker:
    """The per-frame rules of one quicx scenario, over all its connections."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self.decoders: dict[int, QuicxDecoder] = {}
        self.looked: Counter[tuple[str, str]] = Counter()
        self.findings: dict[tuple[str, str], list[Check]] = defaultdict(list)
        self.received: HeadTail[tuple[float, int, str, dict]] = HeadTail()  # client -> server
        self.sent: HeadTail[tuple[float, int, str, dict]] = HeadTail()      # server -> client
        self.given: dict[int, set[int]] = defaultdict(set)      # conn -> task ids handed to it

    def _level(self, rid: str) -> str:
        req = self.profile.requirements.get(rid)
        return req.level if req is not None else "SHOULD"

    def _violate(self, rid: str, kind: str, message: str, actual: Any = None) -> None:
        self.looked[(rid, kind)] += 1
        if len(self.findings[(rid, kind)]) < MAX_FINDINGS:
            self.findings[(rid, kind)].append(Check(rid, self._level(rid), False, kind,  # type: ignore[arg-type]
                                                    message, None, actual))

    def opened(self, conn: int) -> None:
        self.decoders[conn] = QuicxDecoder(self.profile, DAEMON)

    def feed(self, conn: int, data: bytes, t: float) -> tuple[list[Message], ProtocolError | None]:
        error = None
        try:
            msgs = self.decoders[conn].feed(data)
        except ProtocolError as err:
            msgs, error = list(err.frames), err
            self._violate(err.requirement, "framing", str(err), err.kind)
        for m in msgs:
            self.looked[("QX-HDR-1", "framing")] += 1
            self.received.append((t, conn, m.name, dict(m.fields)))
            if m.name in ("MSG_DONE", "MSG_FAILED"):
                task = m.fields.get("task_id")
                if task in self.given[conn]:
                    self.looked[("QX-TASK-3", "task-id")] += 1
                else:
                    self._violate("QX-TASK-3", "task-id", f"{m.name} for task {task}, not a task "
                                  f"handed to connection {conn}", m.as_dict())
        return msgs, error

    def replied(self, conn: int, name: str, fields: dict, t: float) -> None:
        self.sent.append((t, conn, name, fields))
        if name == "MSG_TASK":
            self.given[conn].add(fields["task_id"])  # a decoded MSG_TASK has every field

    def checks(self) -> list[Check]:
        out: list[Check] = []
        for (rid, kind), seen in sorted(self.looked.items()):
            found = self.findings.get((rid, kind))
            if found:
                out.extend(found)
            else:
                out.append(Check(rid, self._level(rid), True, kind,  # type: ignore[arg-type]
                                 f"{seen} frame(s) checked: {kind} rule held"))
        return out


@dataclass
class _QLive:
    conn: int
    writer: asyncio.StreamWriter
    qconn: QuicxConnection
    dead: bool = False
    closed_by: str | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    held: list[tuple[bytes, str, Any]] | None = None   # fuzz mode: writes held back (delay)


class QuicxSession:
    def __init__(self, owner: QuicxConformanceServer, behaviour: dict[str, Any],
                 checker: QuicxClientChecker, transcript: Transcript):
        self.owner, self.behaviour, self.checker, self.transcript = owner, behaviour, checker, transcript
        self.live: dict[int, _QLive] = {}
        self.by_engine: dict[int, _QLive] = {}
        self.events: list[dict[str, Any]] = []
        self.storm_left = int((behaviour.get("wait_storm") or {}).get("count", 0))
        self.storm_waits: list[tuple[float, int]] = []  # (t, conn) of each MSG_WAIT of the storm
        self.tasks_written = 0
        self.ended = False
        self._ids = 0
        # fuzz mode: (name, n, frame, fields) -> a plan, or None to send the frame as it is
        self.mangle: Callable[[str, int, bytes, dict], dict | None] | None = behaviour.get("mangle")
        self.computed: dict[tuple[str, int], dict] = {}   # fuzz mode: the real frames
        self._sent_counts: Counter[str] = Counter()
        # every scenario (and fuzz case) starts on an empty daemon: no task an earlier one
        # left queued reaches its worker (the scenario over, its connections are released)
        owner.engine = QuicxEngine(owner.profile)

    def now(self) -> float:
        return time.monotonic() - self.transcript.started

    def _decode_out(self, frame: bytes) -> tuple[str, dict]:
        try:
            (msg,) = QuicxDecoder(self.owner.profile, None).feed(frame)
            return msg.name, dict(msg.fields)
        except (ProtocolError, ValueError):
            return "?", {}

    def _write(self, live: _QLive, frame: bytes, note: str = "") -> None:
        if live.closed_by is not None:
            return
        name, fields = self._decode_out(frame)
        self.checker.replied(live.conn, name, fields, self.now())
        self._raw(live, frame, note, {"type": name, "fields": to_json(fields)})

    def _raw(self, live: _QLive, data: bytes, note: str = "", decoded: Any = None) -> None:
        if live.held is not None:
            live.held.append((data, note, decoded))
            return
        with contextlib.suppress(Exception):
            live.writer.write(data)
        self.transcript.add(live.conn, "send", data, decoded=decoded, note=note)

    def _mangled(self, live: _QLive, name: str, frame: bytes) -> bool:
        """Fuzz mode: offer the frame to ``mangle``; True when its plan was sent instead."""
        self._sent_counts[name] += 1
        n = self._sent_counts[name]
        _, fields = self._decode_out(frame)
        self.computed[(name, n)] = to_json(fields)
        assert self.mangle is not None  # called only in fuzz mode
        plan = self.mangle(name, n, frame, fields)
        if not plan:
            return False
        if plan.get("intact"):
            self.checker.replied(live.conn, name, fields, self.now())
        note = f"fuzz: {plan.get('note', '')}"
        if plan.get("delay"):
            if live.held is None:
                live.held = []
                live.timers.append(asyncio.get_running_loop().call_later(
                    float(plan["delay"]), self._release, live))
            note += f" (held back {float(plan['delay']) * 1000:.0f} ms)"
        for i, data in enumerate(plan["writes"]):
            self._raw(live, data, note if i == 0 else "", {"type": name, "mangled": True})
        if plan.get("close"):
            self._close(live, "server", note)
        return True

    def _release(self, live: _QLive) -> None:
        held, live.held = live.held or [], None
        if live.closed_by is None:
            for data, note, decoded in held:
                self._raw(live, data, note, decoded)

    def _close(self, live: _QLive, by: str, why: str) -> None:
        if live.closed_by is not None:
            return
        live.closed_by = by
        for timer in live.timers:
            timer.cancel()
        if by != "client":
            self.transcript.add(live.conn, "close", note=f"the server closed the connection: {why}")
        self.events.append({"t": self.now(), "what": "close", "conn": live.conn, "by": by})
        with contextlib.suppress(Exception):
            live.writer.close()
        self._perform(live.qconn.connection_lost(why))

    def _perform(self, actions: list[Any]) -> None:
        for action in actions:
            live = self.by_engine.get(action.conn)
            if live is None:
                continue
            if isinstance(action, Send):
                if self.mangle is None or not self._mangled(live, action.message, action.frame):
                    self._write(live, action.frame)
                if action.message == "MSG_TASK":
                    self.tasks_written += 1
                    if self.behaviour.get("drop_after_task") and self.tasks_written == 1:
                        self._close(live, "server", "dropped right after the first MSG_TASK")
            elif isinstance(action, Close):
                self._close(live, "server", action.reason)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._ids += 1
        conn = self._ids
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        live = _QLive(conn, writer, QuicxConnection(self.owner.engine))
        self.live[conn] = live
        self.by_engine[live.qconn.id] = live
        self.checker.opened(conn)
        self.transcript.add(conn, "open", note="client connected")
        self.events.append({"t": self.now(), "what": "open", "conn": conn})
        hb = self.behaviour.get("heartbeat")
        loop = asyncio.get_running_loop()
        if hb:
            live.timers.append(loop.call_later(float(hb.get("after_ms", 100)) / 1000.0,
                                               self._write, live,
                                               self.owner.encoder.encode("MSG_HEARTBEAT"),
                                               "the server's heartbeat"))
        try:
            while live.closed_by is None:
                data = await reader.read(READ_SIZE)
                if not data:
                    if live.closed_by is None:
                        self.transcript.add(conn, "close", note="the client closed the connection")
                        live.closed_by = "client"
                        self.events.append({"t": self.now(), "what": "close", "conn": conn,
                                            "by": "client"})
                        self._perform(live.qconn.receive_eof())
                    break
                msgs, error = self.checker.feed(conn, data, self.now())
                shown = head_tail(msgs, FRAMES_HEAD, FRAMES_TAIL, "frames of this read")
                self.transcript.add(conn, "recv", data, decoded=[
                    m.as_dict() if isinstance(m, Message) else m for m in shown]
                    + ([{"error": str(error)}] if error else []))
                for m in msgs:
                    if not self._intercept(live, m):
                        live.qconn.receive_data(m.raw)
                        self._perform(live.qconn.next_actions())
                if error is not None:
                    self._close(live, "server", f"protocol error: {error}")
                elif live.closed_by is None:
                    await writer.drain()   # what this read caused is out before the next read
        except (ConnectionError, OSError) as exc:
            if live.closed_by is None:
                live.closed_by = "client"
                self.transcript.add(conn, "close", note=f"connection lost: {exc}")
                self.events.append({"t": self.now(), "what": "close", "conn": conn, "by": "client"})
                self._perform(live.qconn.connection_lost(str(exc)))

    def _intercept(self, live: _QLive, m: Message) -> bool:
        b = self.behaviour
        if m.name == "MSG_READY" and self.storm_left > 0:
            self.storm_left -= 1
            self.storm_waits.append((self.now(), live.conn))
            self._write(live, self.owner.encoder.encode("MSG_WAIT"),
                        f"WAIT storm ({self.storm_left} more)")
            return True
        if m.name == "MSG_HEARTBEAT" and b.get("late_pong"):
            delay = float(b["late_pong"].get("ms", 1000)) / 1000.0
            live.timers.append(asyncio.get_running_loop().call_later(
                delay, self._write, live, self.owner.encoder.encode("MSG_PONG"),
                f"a PONG {delay * 1000:.0f} ms late"))
            return True
        return False

    def end(self) -> None:
        self.ended = True
        for live in self.live.values():
            for timer in live.timers:
                timer.cancel()
            if live.closed_by is None:
                live.closed_by = "end"
                with contextlib.suppress(Exception):
                    live.writer.transport.abort()
                self._perform(live.qconn.connection_lost("scenario over"))


class QuicxConformanceServer(ScenarioListener):
    """One listening port for a whole run, and a fresh reference engine per session."""

    def __init__(self, profile: Profile, host: str = "127.0.0.1", port: int = 0):
        super().__init__(profile, host, port)
        self.engine = QuicxEngine(profile)
        self.encoder = QuicxEncoder(profile)

    async def start(self) -> QuicxConformanceServer:
        await self._listen()
        return self

    async def stop(self) -> None:
        await self._stop_listening()

    def new_checker(self, behaviour: dict[str, Any], options: dict[str, Any]) -> QuicxClientChecker:
        return QuicxClientChecker(self.profile)

    def _new_session(self, behaviour: dict[str, Any], checker: QuicxClientChecker,
                     transcript: Transcript) -> QuicxSession:
        return QuicxSession(self, behaviour, checker, transcript)
