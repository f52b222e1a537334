"""quicx on the tap: framing by the 6-byte header, pairing by order and task id, verdicts.

quicx frames carry no request id. The daemon answers in order (the FIFO rule of
``client/quicx_session.py``): MSG_OK answers the oldest pending MSG_SUBMIT, MSG_TASK or
MSG_WAIT the oldest pending MSG_READY (QX-READY-3), MSG_STATS_RESPONSE the oldest MSG_STATS
(QX-STATS-2), MSG_PONG the oldest MSG_HEARTBEAT sent the other way (QX-HB-2), and MSG_ERROR
the oldest of whatever is pending that it can answer (a frame the daemon's decoder refuses,
a MSG_DONE or MSG_FAILED for a task this connection does not hold, or a pending request).
The task id then keys the rest: MSG_TASK's id is answered by the worker's MSG_DONE or
MSG_FAILED (QX-TASK-3), and where the profile forwards results to producers
(``forward_results_to_producer``) MSG_OK's id is answered by the forwarded DONE or FAILED.

Both directions are decoded with the codec: client to daemon as the daemon reads it, daemon
to client as a client that may play every client role reads it, so the codec's header,
layout and direction checks (QX-DIR-1, ...) are the findings, at the level of the
requirement each cites. An answer that pairs with nothing is INFO (the documents do not say
a daemon may not send it), and so are requests still pending at close.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxDecoder
from ..judge import Finding, Verdict, requirement_verdict
from ..spec import Profile
from ..spec.quicx import DAEMON, struct_format
from .bunqueue import OrphanFn, PairFn, Report
from .framing import Item, Stream
from .redact import Redact

# What answers what, by message name (the spec's keys). The answer pops the oldest pending
# request of its kinds on the connection.
_ANSWERS = {
    "MSG_OK": ("MSG_SUBMIT",),
    "MSG_TASK": ("MSG_READY",),
    "MSG_WAIT": ("MSG_READY",),
    "MSG_STATS_RESPONSE": ("MSG_STATS",),
}
_REQUESTS = ("MSG_SUBMIT", "MSG_READY", "MSG_STATS")
_RESULTS = ("MSG_DONE", "MSG_FAILED")
_HEARTBEAT, _PONG, _ERROR = "MSG_HEARTBEAT", "MSG_PONG", "MSG_ERROR"
_REFUSED = "(refused)"


class QuicxProtocol:
    name = "quicx"

    def __init__(self, profile: Profile, max_frame: int):
        self.profile = profile
        spec = self.spec = profile.model
        self.max_frame = max_frame
        #: None: the requests a quicx judge names are the spec's message types, a bounded set
        self.command_names: frozenset[str] | None = None
        #: quicx frames carry no credential (no ``x-secret`` in its spec language)
        self.redact: Redact | None = None
        order = [f.id for f in spec.header]
        head = struct.Struct(struct_format(spec.header))
        at = order.index("len_payload")
        #: the header as the spec lays it out (a struct): what a frame's fields are read with
        self.head = head
        self._len_at = at
        self.client_roles = tuple(r for r in spec.roles if r != DAEMON)
        self.forwards_results = bool(spec.flag("forward_results_to_producer"))
        self.ready_after_result = bool(spec.flag("ready_required_after_result"))
        for name in (*_ANSWERS, *_REQUESTS, *_RESULTS, _HEARTBEAT, _PONG, _ERROR):
            spec.message(name)  # a profile without one of them is not what this module reads

    def stream(self, direction: str) -> Stream:
        at, profile, spec = self._len_at, self.profile, self.spec
        role: Any = DAEMON if direction == "c2s" else self.client_roles
        return Stream(lambda: QuicxDecoder(profile, role), self.head, at, self.max_frame,
                      lambda dec, data: dec.feed(data),
                      lambda exc: spec.error(exc.kind).reaction == "reply")

    def connection(self, conn_id: int, report: Report, pair: PairFn,
                   orphan: OrphanFn | None = None) -> QuicxConn:
        """A judge for one connection; ``orphan`` as for bunqueue (an answer that may pair
        with a request in an earlier file of the connection)."""
        return QuicxConn(self, conn_id, report, pair, orphan)


class QuicxConn:
    """One connection's pending requests, tasks and results."""

    def __init__(self, proto: QuicxProtocol, conn_id: int, report: Report, pair: PairFn,
                 orphan: OrphanFn | None = None):
        self.proto = proto
        self._orphan = orphan
        # answers given to orphan, by kind of key: their FIFO rank among this file's orphans
        self._orphans = {"q": 0, "h": 0}
        self.conn_id = conn_id
        self._report = report
        self._pair = pair
        self._seq = 0
        # pending client requests in order: (seq, name, t_ns)
        self._pending: deque[tuple[int, str, int]] = deque()
        self._heartbeats: dict[str, deque[int]] = {"c2s": deque(), "s2c": deque()}
        self._tasks: dict[int, int] = {}      # task id given to this worker -> t_ns of MSG_TASK
        self._results: dict[int, int] = {}    # task id accepted for this producer -> t_ns of SUBMIT
        self._results_seen = 0                # results sent by this worker (re-arms READY)

    def _find(self, level: Verdict, requirement: str | None, direction: str, name: str | None,
              kind: str, message: str, t_ns: int) -> None:
        self._report(Finding(level, requirement, kind, message, self.conn_id, direction, name,
                             t_ns))

    def _error(self, direction: str, exc: ProtocolError, name: str | None, t_ns: int) -> None:
        self._find(requirement_verdict(self.proto.profile, exc.requirement), exc.requirement,
                   direction, name, exc.kind, exc.detail, t_ns)

    def _push(self, name: str, t_ns: int) -> None:
        self._seq += 1
        self._pending.append((self._seq, name, t_ns))

    def _orphaned(self, kind: str, t_ns: int, name: str, ok: bool, raw: bytes) -> bool:
        """Give an answer with nothing pending to ``orphan`` (keyed by its FIFO rank, or a
        task id); False when there is no ``orphan`` (then it is a finding)."""
        if self._orphan is None:
            return False
        if kind in self._orphans:
            key = f"{kind}:{self._orphans[kind]}"
            self._orphans[kind] += 1
        else:
            key = kind
        self._orphan(key, t_ns, name, ok, raw)
        return True

    def _pop(self, kinds: tuple[str, ...] | None) -> tuple[int, str, int] | None:
        for i, entry in enumerate(self._pending):
            if kinds is None or entry[1] in kinds:
                del self._pending[i]
                return entry
        return None

    # -- client to daemon
    def client_frame(self, item: Item, t_ns: int) -> str | None:
        """Judge a client frame; returns the request it makes (one the daemon answers), if
        it is one."""
        if item.error is not None:
            self._error("c2s", item.error, None, t_ns)
            self._push(_REFUSED, t_ns)  # the daemon answers it with MSG_ERROR
            return _REFUSED
        msg = item.message
        name = msg.name
        if name in _REQUESTS:
            self._push(name, t_ns)
            return name
        if name == _HEARTBEAT:
            self._heartbeats["c2s"].append(t_ns)
            return name
        elif name == _PONG:
            if self._heartbeats["s2c"]:
                sent = self._heartbeats["s2c"].popleft()
                self._pair(_HEARTBEAT, None, sent, t_ns, True, _PONG)
            else:
                self._find(Verdict.INFO, None, "c2s", name, "pong_unpaired",
                           "MSG_PONG without a MSG_HEARTBEAT from the daemon pending", t_ns)
        elif name in _RESULTS:
            task_id = msg.fields["task_id"]
            self._results_seen += 1
            given = self._tasks.pop(task_id, None)
            if given is None and self._orphaned(f"t:{task_id}", t_ns, name, name == "MSG_DONE",
                                                item.raw):
                return None
            if given is None:
                self._find(Verdict.NON_STRICT, "QX-DONE-3", "c2s", name, "task_unknown",
                           f"{name} for task {task_id}, which the daemon did not give "
                           "this connection (or it was already answered)", t_ns)
                self._push(_REFUSED, t_ns)  # the daemon answers it with MSG_ERROR
                return _REFUSED
            self._pair("MSG_TASK", task_id, given, t_ns, name == "MSG_DONE", name)
        return None

    # -- daemon to client
    def server_frame(self, item: Item, t_ns: int) -> bool:
        if item.error is not None:
            self._error("s2c", item.error, None, t_ns)
            return False
        msg = item.message
        name = msg.name
        if name == _PONG:
            if not self._heartbeats["c2s"]:
                if self._orphaned("h", t_ns, name, True, item.raw):
                    return True
                self._find(Verdict.INFO, None, "s2c", name, "pong_unpaired",
                           "MSG_PONG without a MSG_HEARTBEAT pending", t_ns)
                return False
            sent = self._heartbeats["c2s"].popleft()
            self._pair(_HEARTBEAT, None, sent, t_ns, True, _PONG)
            return True
        if name == _HEARTBEAT:
            self._heartbeats["s2c"].append(t_ns)
            return False
        if name in _RESULTS:  # a result forwarded to a producer
            task_id = msg.fields["task_id"]
            submitted = self._results.pop(task_id, None)
            if submitted is None and self._orphaned(f"r:{task_id}", t_ns, name,
                                                    name == "MSG_DONE", item.raw):
                return False
            if submitted is None:
                self._find(Verdict.INFO, None, "s2c", name, "result_unpaired",
                           f"{name} for task {task_id}, not accepted on this connection", t_ns)
                return False
            self._pair("MSG_SUBMIT", task_id, submitted, t_ns, name == "MSG_DONE", name)
            return False  # the submission was already paired by its MSG_OK
        if name == _ERROR:
            entry = self._pop(None)
            if entry is None and self._orphaned("q", t_ns, name, False, item.raw):
                return True
            if entry is None:
                self._find(Verdict.INFO, None, "s2c", name, "error_unpaired",
                           "MSG_ERROR while nothing from this client was pending", t_ns)
                return False
            self._pair(entry[1], entry[0], entry[2], t_ns, False, name)
            return True
        kinds = _ANSWERS.get(name)
        if kinds is None:
            return False
        entry = self._pop(kinds)
        if entry is None:
            if name == "MSG_TASK" and not self.proto.ready_after_result and self._results_seen:
                entry = None  # re-armed by a result (ready_required_after_result false)
            elif self._orphaned("q", t_ns, name, True, item.raw):
                if name == "MSG_TASK":
                    self._tasks[msg.fields["task_id"]] = t_ns
                return True
            else:
                self._find(Verdict.INFO, None, "s2c", name, "answer_unpaired",
                           f"{name} while no {' or '.join(kinds)} was pending", t_ns)
        if name == "MSG_TASK":
            self._tasks[msg.fields["task_id"]] = t_ns
        if entry is None:
            return False
        seq, request, sent = entry
        if name == "MSG_OK" and self.proto.forwards_results:
            self._results[msg.fields["task_id"]] = sent
        self._pair(request, seq, sent, t_ns, True, name)
        return True

    def open_ends(self) -> list[tuple[str, str, int]]:
        """What a later file of the connection may answer, as (match key, request, sent_ns):
        pending requests and heartbeats by FIFO rank, tasks given and submissions accepted by
        task id (the keys :meth:`_orphaned` gives there)."""
        out = [(f"q:{i}", name, t) for i, (_, name, t) in enumerate(self._pending)]
        out += [(f"h:{i}", _HEARTBEAT, t) for i, t in enumerate(self._heartbeats["c2s"])]
        out += [(f"t:{task}", "MSG_TASK", t) for task, t in self._tasks.items()]
        out += [(f"r:{task}", "MSG_SUBMIT", t) for task, t in self._results.items()]
        return out

    def unanswered(self) -> list[str]:
        out = [name for _, name, _ in self._pending]
        out.extend(_HEARTBEAT for _ in self._heartbeats["c2s"])
        return out
