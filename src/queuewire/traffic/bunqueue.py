"""bunqueue on the tap: framing, request/reply pairing by reqId, and the verdicts.

Requests (client to server) are judged as the reference server judges them: the compiled
``request_is_valid`` first (the hot path), ``request_violations`` only for a request that
fails it, each violation a finding at the level of the requirement it cites. A request with a
reqId waits in the connection's in-flight table; the reply that echoes it is paired with it
(latency from the frame that completed the request to the frame that completed the reply) and
its shape judged by ``reply_violations`` for that command. A reply without reqId is a pushed
job event when it has the profile's ``job_events`` frame type (BQ-EVENT-102), its shape judged
against that frame's schema; otherwise it
answers, in order, a request that had no reqId or a frame the server could not read (which
bunqueue answers without reqId). What the documents do not settle is never a FAIL: a reqId
already in flight on the connection is NON-STRICT (replies are matched by reqId, BQ-PIPE-3: two
requests with one reqId cannot be told apart, a reading; a FAIL where the profile has
BQ-PIPE-4, document 000's "unique reqId identifiers"), a reply whose reqId no request
carried is NON-STRICT citing BQ-ENV-2 (either the echo was altered, or it answers nothing), and a
reply nothing can be paired with, or requests still unanswered at close (a client may close
with long polls parked), are INFO.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from ..codecs.bunqueue import UNDEFINED, FrameDecoder
from ..codecs.errors import ProtocolError
from ..codecs.validation import BunqueueValidator
from ..judge import OPENING_RULE, Verdict, opens_with_hello, reqid_key, requirement_verdict
from ..judge.opening import HELLO
from ..spec import Profile
from .framing import Item, Stream

#: (level, requirement, direction, command, kind, message) -> None
Report = Callable[[str, "str | None", str, "str | None", str, str], None]
#: (command, key, sent_ns, answered_ns, ok, answer) -> None
PairFn = Callable[[str, Any, int, int, bool, str], None]
#: (match key, t_ns, answer, ok, frame bytes) -> None: an answer whose request may be in an
#: earlier file of the connection (a recording rotated between them)
OrphanFn = Callable[[str, int, str, bool, bytes], None]


class BunqueueProtocol:
    """What the analyzer needs of bunqueue: streams per direction and a judge per connection."""

    name = "bunqueue"

    def __init__(self, profile: Profile, max_frame: int):
        self.profile = profile
        spec = profile.model
        self.validator = BunqueueValidator(profile)
        self._prefix = struct.Struct(spec.len_format)
        self.max_frame = max_frame
        frame = ((profile.tree.get("job_events") or {}).get("frame") or {})
        self.event_type = ((frame.get("properties") or {}).get("type") or {}).get("const")
        self.event_requirement = (profile.tree.get("job_events") or {}).get("requirement")
        self.commands = frozenset(spec.commands)
        # the stated rule where the profile has it (000: "unique reqId identifiers"), else
        # BQ-PIPE-3's "match by reqId" read as needing one (a reading: NON-STRICT)
        self.unique_reqid = "BQ-PIPE-4" if "BQ-PIPE-4" in profile.requirements else "BQ-PIPE-3"
        # how a client opens a connection (Hello first), where the profile has the rule
        self.judges_opening = OPENING_RULE in profile.requirements and HELLO in self.commands

    def reply_is_valid(self, cmd: str, ok: bool, msg: dict) -> bool:
        """The compiled check alone, as ``request_is_valid`` does for requests; only a reply
        that fails it takes ``reply_violations``."""
        return self.validator.reply_is_valid(cmd, msg, ok=ok)

    def stream(self, direction: str) -> Stream:
        profile = self.profile
        # requests obey max_nesting_depth; replies are read without it, as the client does
        check_depth = direction == "c2s"

        def feed(dec: FrameDecoder, data: Any) -> list:
            """A whole frame (the Stream feeds whole frames, or a header alone)."""
            return dec.feed_whole(data)

        return Stream(lambda: FrameDecoder(profile, check_depth=check_depth), self._prefix, 0,
                      self.max_frame, feed, lambda exc: exc.reaction == "reply")

    def connection(self, conn_id: int, report: Report, pair: PairFn,
                   orphan: OrphanFn | None = None) -> BunqueueConn:
        """A judge for one connection. With ``orphan``, the connection's earlier traffic is
        in another file: a reply nothing here was sent for goes to ``orphan`` (to be paired
        by the trace pipeline's join) instead of being a finding."""
        return BunqueueConn(self, conn_id, report, pair, orphan)


def match_key(req_id: Any) -> str:
    """A reqId (as the in-flight table keys it) as the string a join across files matches on,
    type-tagged so that "1" and 1 stay apart."""
    return "s:" + req_id if type(req_id) is str else "r:" + repr(req_id)


class BunqueueConn:
    """One connection's pairing state and verdicts."""

    __slots__ = ("_is_valid", "_no_id", "_opening", "_orphan", "_orphans", "_pair", "_report",
                 "conn_id", "in_flight", "proto")

    def __init__(self, proto: BunqueueProtocol, conn_id: int, report: Report, pair: PairFn,
                 orphan: OrphanFn | None = None):
        self.proto = proto
        self._orphan = orphan
        self._orphans = 0     # answers without reqId given to orphan (their FIFO rank)
        self.conn_id = conn_id
        self._report = report
        self._pair = pair
        self.in_flight: dict[Any, Any] = {}     # reqId -> (cmd, t_ns) or a deque of them
        self._no_id: deque[tuple[str, int]] = deque()  # requests answered without reqId
        self._is_valid = proto.validator.request_is_valid
        # the first commands, until the opening is judged (None: judged, or not judged here:
        # a later file of a recorded connection does not hold its opening)
        self._opening: list[str] | None = [] if proto.judges_opening and orphan is None else None

    def _error(self, direction: str, cmd: str | None, exc: ProtocolError) -> None:
        level = requirement_verdict(self.proto.profile, exc.requirement)
        self._report(level, exc.requirement, direction, cmd, exc.kind, exc.detail)

    # -- client to server
    def client_frame(self, item: Item, t_ns: int) -> str:
        """Judge a client frame; returns the command it asks for (every frame is a request)."""
        if item.error is not None:
            self._error("c2s", None, item.error)
            # bunqueue answers an unreadable frame without reqId (invalid_command_format)
            self._no_id.append(("(unreadable)", t_ns))
            return "(unreadable)"
        msg = item.message
        cmd = msg.get("cmd")
        name = cmd if type(cmd) is str else "(no cmd)"
        if self._opening is not None:
            self._judge_opening(name)
        if not self._is_valid(msg):
            validator = self.proto.validator
            for v in validator.request_violations(msg):
                level = requirement_verdict(self.proto.profile, v.requirement)
                self._report(level, v.requirement, "c2s", name, "request_schema", str(v))
        req_id = msg.get("reqId", UNDEFINED)
        if req_id is UNDEFINED:
            self._no_id.append((name, t_ns))
            return name
        key = req_id if type(req_id) is str else reqid_key(req_id)  # str: its own key
        entry = (name, t_ns)
        held = self.in_flight.get(key)
        if held is None:
            self.in_flight[key] = entry
            return name
        rid = self.proto.unique_reqid
        level = requirement_verdict(self.proto.profile, rid) if rid != "BQ-PIPE-3" else Verdict.NON_STRICT
        self._report(level, rid, "c2s", name, "reqid_in_flight",
                     f"reqId {req_id!r} is already in flight on this connection (its "
                     "replies cannot be told apart)")
        if type(held) is deque:
            held.append(entry)
        else:
            self.in_flight[key] = deque((held, entry))
        return name

    def _judge_opening(self, name: str) -> None:
        opening = self._opening
        assert opening is not None
        opening.append(name)
        opened_well = opens_with_hello(opening)
        if opened_well is None:
            return
        self._opening = None
        if not opened_well:
            level = requirement_verdict(self.proto.profile, OPENING_RULE)
            self._report(level, OPENING_RULE, "c2s", name, "no_hello",
                         f"the connection opened with {' then '.join(opening)}, not Hello "
                         "(or Auth then Hello)")

    # -- server to client
    def server_frame(self, item: Item, t_ns: int) -> bool:
        """Judge a server frame; True when it answered a request."""
        if item.error is not None:
            self._error("s2c", None, item.error)
            return False
        msg = item.message
        req_id = msg.get("reqId", UNDEFINED)
        if req_id is UNDEFINED:
            if self.proto.event_type is not None and msg.get("type") == self.proto.event_type:
                # a pushed job event (BQ-EVENT-102): answers nothing; its shape is judged
                validator = self.proto.validator
                if not validator.event_is_valid(msg):
                    for v in validator.event_violations(msg):
                        level = requirement_verdict(self.proto.profile, v.requirement)
                        self._report(level, v.requirement, "s2c", "(job event)", "event_schema",
                                     str(v))
                return False
            if not self._no_id:
                if self._orphan is not None:
                    self._orphan(f"n:{self._orphans}", t_ns, "reply", msg.get("ok") is True,
                                 item.raw)
                    self._orphans += 1
                    return True
                self._report(Verdict.INFO, None, "s2c", None, "reply_unpaired",
                             "a frame without reqId that answers no request seen without one")
                return False
            cmd, sent = self._no_id.popleft()
            self._judge_reply(cmd, msg, None, sent, t_ns)
            return True
        key = req_id if type(req_id) is str else reqid_key(req_id)  # str: its own key
        held = self.in_flight.pop(key, None)
        if held is None:
            if self._orphan is not None:
                self._orphan(match_key(key), t_ns, "reply", msg.get("ok") is True, item.raw)
                return True
            self._report(Verdict.NON_STRICT, "BQ-ENV-2", "s2c", None, "reqid_unknown",
                         f"a reply with reqId {req_id!r}, which no request in flight carries")
            return False
        if type(held) is not deque:
            cmd, sent = held
            self._judge_reply(cmd, msg, req_id, sent, t_ns)
            return True
        # the client sent this reqId more than once (already reported on the client): the
        # reply answers the first of those requests it is a valid reply to, in the order they
        # were sent (a long poll may be answered after a later Ping); when it fits none, which
        # one it broke cannot be told, so its shape is reported as INFO, not blamed on the server
        ok = msg.get("ok") is True
        fits = self._fits
        index = next((i for i, (c, _) in enumerate(held) if fits(c, ok, msg)), None)
        cmd, sent = held[index or 0]
        del held[index or 0]
        if held:  # the rest stay a group (a deque, even of one): their replies are as ambiguous
            self.in_flight[key] = held
        self._judge_reply(cmd, msg, req_id, sent, t_ns, shared=index is None)
        return True

    def _fits(self, cmd: str, ok: bool, msg: dict) -> bool:
        return cmd not in self.proto.commands or self.proto.reply_is_valid(cmd, ok, msg)

    def _judge_reply(self, cmd: str, msg: dict, key: Any, sent: int, t_ns: int,
                     shared: bool = False) -> None:
        ok = msg.get("ok") is True
        if cmd in self.proto.commands and not self.proto.reply_is_valid(cmd, ok, msg):
            for v in self.proto.validator.reply_violations(cmd, msg):
                if shared:
                    self._report(Verdict.INFO, v.requirement, "s2c", cmd, "reply_schema",
                                 f"{v} (as a reply to {cmd}; its reqId is shared by requests "
                                 "in flight, so which one it answers cannot be told)")
                    continue
                level = requirement_verdict(self.proto.profile, v.requirement)
                self._report(level, v.requirement, "s2c", cmd, "reply_schema", str(v))
        self._pair(cmd, key, sent, t_ns, ok, "reply")

    def open_ends(self) -> list[tuple[str, str, int]]:
        """The requests still waiting, as (match key, command, sent_ns): what a later file of
        the connection may answer (the keys :meth:`server_frame` gives ``orphan`` there)."""
        out = [(f"n:{i}", cmd, sent) for i, (cmd, sent) in enumerate(self._no_id)]
        for key, held in self.in_flight.items():
            for cmd, sent in (held if type(held) is deque else (held,)):
                out.append((match_key(key), cmd, sent))
        return out

    def unanswered(self) -> list[str]:
        """The commands still waiting for a reply (at close)."""
        out = [cmd for cmd, _ in self._no_id]
        for held in self.in_flight.values():
            out.extend(c for c, _ in (held if type(held) is deque else (held,)))
        return out
