"""Sans-IO checks of every frame a client under test sends (bunqueue).

:class:`ClientChecker` is fed the bytes each connection of a scenario sent
(:meth:`ClientChecker.feed`) and told each reply the server sends
(:meth:`ClientChecker.replied`); it owns no socket and no clock (times are passed in). It
decodes with the codecs' :class:`~queuewire.codecs.bunqueue.FrameDecoder` and judges each
frame through the one registry of frame checks, a
:class:`~queuewire.judge.exchange.BunqueueExchange` per connection (the checks the tap, the
trace pipeline and the fuzz oracles apply): a frame that does not decode breaks the rule its
error cites (BQ-FRAME-1, BQ-MSGPACK-*); a request follows its command's schema (each
violation cites its own requirement: BQ-ENV-1, BQ-ENV-5, the limits); a reqId that no request
still in flight carries, and one on every request sent while another is in flight
(BQ-PIPE-4; a request the server never answered stays in flight); a connection opens with
Hello (BQ-HELLO-1). On top of those, the rules of a scenario only this checker knows: with a
token configured, nothing but Auth (and Hello, which document 000 sends first) before a
successful Auth (BQ-AUTH-1); ACK, ACKB and FAIL of a job pulled with an owner carry a lock
token the server gave for that job (BQ-LOCK-2: "The token must be passed to ACK or FAIL"),
and name a job the client pulled (a reading of the same requirement, SHOULD). What it saw
(requests, replies, pulls and heartbeats with their times) stays available to the judgements
(:mod:`.judges`). :meth:`ClientChecker.checks` gives one passing check per rule that held, with
the number of frames it looked at, and every violation as a failing check (the first
``MAX_FINDINGS`` of each rule).

What it keeps is bounded whatever the client sends (a hostile client may pipeline hundreds of
thousands of frames; every one is still checked and counted): requests, replies and
acknowledgements are :class:`~.records.HeadTail` records (the first ``RECORD_HEAD`` and the
last ``RECORD_TAIL``); a connection's in-flight reqIds are forgotten once answered; heartbeat
times are thinned so that any three consecutive ones span at least ``HEARTBEAT_RESOLUTION``
(a gap the cadence judgement measures changes by less than that); and job ids the client
names (heartbeats, ACKs) are recorded for at most ``RECORD_JOBS`` jobs besides those it
pulled. A field of the wrong type (``ids`` not a list, a token that is not a string) is a
schema violation the validator reports; the rules here then read it as absent.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...codecs.bunqueue import FrameDecoder
from ...codecs.errors import ProtocolError
from ...codecs.validation import BunqueueValidator, jsonable
from ...judge import Finding, level_for
from ...judge.exchange import CHECKS, REQUEST_CHECKS, BunqueueExchange, Judgement
from ...spec import Profile
from ..model import Check
from .records import HeadTail

__all__ = ["ClientChecker", "MAX_FINDINGS"]

MAX_FINDINGS = 5
ACK_CMDS = ("ACK", "FAIL")
#: seconds: heartbeat times closer than this are thinned (far below the cadence judgement's
#: slack, so its verdict does not move; a heartbeat flood then costs bounded memory)
HEARTBEAT_RESOLUTION = 0.005
#: job ids a client may name in heartbeats and ACKs without having pulled them that are
#: recorded (those are judged against nothing; the bound keeps a flood of invented ids cheap)
RECORD_JOBS = 10_000


def _items(value: Any) -> list[Any]:
    """A list field as a list; anything else (a schema violation already) as empty."""
    return list(value) if isinstance(value, (list, tuple)) else []


@dataclass
class _Conn:
    decoder: FrameDecoder
    exchange: BunqueueExchange
    authenticated: bool = False
    closed: bool = False


class ClientChecker:
    """The per-frame rules of one scenario, over all its connections."""

    def __init__(self, profile: Profile, *, token: str | None = None, replies: bool = False):
        """``replies``: judge the server's replies too (the registry's reply checks), for an
        exchange recorded elsewhere; off when the replies are the reference engine's own
        (a scenario: what it sends, fuzz plans included, is not what is under test)."""
        self.profile = profile
        self.token = token
        self.judge_replies = replies
        self.validator = BunqueueValidator(profile)
        self.judgement = Judgement(profile, self.validator)
        self.conns: dict[int, _Conn] = {}
        self.looked: Counter[tuple[str, str]] = Counter()  # (requirement, kind) -> frames seen
        self.findings: dict[tuple[str, str], list[Check]] = defaultdict(list)
        self.requests: HeadTail[tuple[float, int, dict]] = HeadTail()   # (t, conn, request)
        self.replies: HeadTail[tuple[float, int, dict, dict]] = HeadTail()  # (t, conn, req, reply)
        self.tokens: dict[str, set[str]] = defaultdict(set)  # job id -> lock tokens given
        self.pulled: dict[str, float] = {}                   # job id -> first time pulled
        self.finished: dict[str, float] = {}                 # job id -> ACK/FAIL request time
        self.heartbeats: dict[str, list[float]] = defaultdict(list)
        self.acks: HeadTail[tuple[str, str | None]] = HeadTail()  # (job id, token) acknowledged

    # -- recording
    def _level(self, rid: str, cap: str | None = None) -> str:
        req = self.profile.requirements.get(rid)
        level = req.level if req is not None else "SHOULD"
        if cap == "SHOULD" and level == "MUST":
            return "SHOULD"
        return level

    def _look(self, rid: str, kind: str) -> None:
        self.looked[(rid, kind)] += 1

    def _found(self, f: Finding, kind: str, actual: Any) -> None:
        """A finding of the registry's checks, as a failing check (its verdict as a level)."""
        self._violate(f.requirement, kind, f.message, actual=actual, level=level_for(f.level))

    def _violate(self, rid: str | None, kind: str, message: str, *, actual: Any = None,
                 expected: Any = None, cap: str | None = None, level: str | None = None) -> None:
        """A failing check of ``rid`` at ``level`` (default: the requirement's, capped at
        ``cap``); the first MAX_FINDINGS of each (requirement, kind) are kept."""
        key = (rid or "", kind)
        self.looked[key] += 1
        found = self.findings[key]
        if len(found) < MAX_FINDINGS:
            found.append(Check(rid, level or self._level(rid or "", cap), False, kind,  # type: ignore[arg-type]
                               message, expected, actual))

    # -- the connection's bytes
    def opened(self, conn: int) -> None:
        self.conns[conn] = _Conn(FrameDecoder(self.profile),
                                 BunqueueExchange(self.judgement, conn, count=True,
                                                  # the replies are the reference engine's own
                                                  checks=None if self.judge_replies
                                                  else REQUEST_CHECKS))

    def closed(self, conn: int) -> None:
        if conn in self.conns:
            self.conns[conn].closed = True

    def feed(self, conn: int, data: bytes, t: float) -> tuple[list[Any], ProtocolError | None]:
        """Decode ``data`` from connection ``conn``; returns the requests to answer (every
        decoded message, checked) and the framing error, if any (then nothing more is read
        from that connection when its reaction is ``close``)."""
        state = self.conns[conn]
        error: ProtocolError | None = None
        try:
            frames = state.decoder.feed_frames(data)
        except ProtocolError as err:
            frames, error = list(err.frames), err
        for frame in frames:
            self._look("BQ-FRAME-1", "framing")
            self.request(conn, frame.value, t, frame.payload)
        if error is not None:
            _, found = state.exchange.request(None, int(t * 1e9), error, expect_reply=False)
            for f in found:
                self._found(f, "framing", error.kind)
        return [frame.value for frame in frames], error

    def request(self, conn: int, msg: Any, t: float, payload: bytes | None = None) -> None:
        state = self.conns[conn]
        _, found = state.exchange.request(msg, int(t * 1e9), payload=payload)
        for f in found:
            self._found(f, f.kind, jsonable(msg))
        if type(msg) is not dict or not isinstance(msg.get("cmd"), str):
            return
        cmd = msg["cmd"]
        self.requests.append((t, conn, msg))
        # Auth first when a token is configured (BQ-AUTH-1; Hello may come first: doc 000)
        if self.token is not None:
            if cmd in ("Auth", "Hello") or state.authenticated:
                self._look("BQ-AUTH-1", "auth")
            else:
                self._violate("BQ-AUTH-1", "auth", f"{cmd} sent before a successful Auth",
                              actual=jsonable(msg), expected="Auth first")
        # lock tokens on ACK, ACKB, FAIL (BQ-LOCK-2); heartbeats for the cadence judge
        if cmd in ACK_CMDS or cmd == "ACKB":
            self._acks(cmd, msg, t)
        elif cmd in ("JobHeartbeat", "JobHeartbeatB"):
            ids = [msg.get("id")] if cmd == "JobHeartbeat" else _items(msg.get("ids"))
            for job_id in ids:
                self._heartbeat(str(job_id), t)

    def _known(self, job: str, seen: Mapping[str, Any]) -> bool:
        """Record something about ``job``? Always for a job pulled or already recorded."""
        return job in self.pulled or job in seen or len(seen) < RECORD_JOBS

    def _heartbeat(self, job: str, t: float) -> None:
        if not self._known(job, self.heartbeats):
            return
        marks = self.heartbeats[job]
        if len(marks) >= 2 and t - marks[-2] < HEARTBEAT_RESOLUTION:
            marks[-1] = t     # the middle one of three within the resolution goes
        else:
            marks.append(t)

    def _acks(self, cmd: str, msg: dict, t: float) -> None:
        if cmd == "ACKB":
            ids = _items(msg.get("ids"))
            tokens = msg.get("tokens")
            tokens = list(tokens) if isinstance(tokens, list) else [None] * len(ids)
        else:
            ids, tokens = [msg.get("id")], [msg.get("token")]
        for i, job_id in enumerate(ids):
            job = str(job_id)
            token = tokens[i] if i < len(tokens) else None
            self.acks.append((job, token))
            if self._known(job, self.finished):
                self.finished.setdefault(job, t)
            given = self.tokens.get(job)
            if job not in self.pulled:
                self._violate("BQ-LOCK-2", "ack-held", f"{cmd} of job {job}, which the client "
                              "never pulled", actual=jsonable(msg), cap="SHOULD")
            elif given and not (isinstance(token, str) and token in given):
                self._violate("BQ-LOCK-2", "lock-token",
                              f"{cmd} of job {job} with token {token!r}, not a token the server "
                              "gave for it", actual=jsonable(msg), expected=sorted(given))
            else:
                self._look("BQ-LOCK-2", "lock-token")

    # -- the server's replies
    def replied(self, conn: int, request: Any, reply: Mapping[str, Any], t: float) -> None:
        state = self.conns.get(conn)
        if state is None or type(request) is not dict:
            return
        if self.judge_replies:
            _, found = state.exchange.reply(dict(reply), int(t * 1e9))
            for f in found:
                self._found(f, f.kind, jsonable(reply))
        else:
            state.exchange.settle(request)
        self.replies.append((t, conn, request, dict(reply)))
        cmd = request.get("cmd")
        if cmd == "Auth" and reply.get("ok") is True:
            state.authenticated = True
        if cmd in ("PULL", "PULLB") and reply.get("ok") is True:
            jobs = [reply.get("job")] if cmd == "PULL" else _items(reply.get("jobs"))
            tokens = [reply.get("token")] if cmd == "PULL" else _items(reply.get("tokens"))
            for i, job in enumerate(jobs):
                if isinstance(job, Mapping) and job.get("id") is not None:
                    job_id = str(job["id"])
                    self.pulled.setdefault(job_id, t)
                    token = tokens[i] if i < len(tokens) else None
                    if isinstance(token, str):
                        self.tokens[job_id].add(token)

    # -- the verdict material
    def checks(self) -> list[Check]:
        out: list[Check] = []
        looked = Counter(self.looked)
        for state in self.conns.values():
            for name, seen in (state.exchange.looked or {}).items():
                if name != "unreadable":   # the frames that decoded are counted as framing
                    looked[(CHECKS[name].requirement, name)] += seen
        for (rid, kind), seen in sorted(looked.items()):
            found = self.findings.get((rid, kind))
            if found:
                out.extend(found)
                continue
            out.append(Check(rid, self._level(rid), True, kind,  # type: ignore[arg-type]
                             f"{seen} frame(s) checked: {kind} rule held"))
        return out
