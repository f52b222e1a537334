"""bunqueue on the tap: framing, and a connection judge over the one registry of checks.

The judging is :class:`queuewire.judge.exchange.BunqueueExchange`'s, shared with ``conform
client``'s checker and the fuzz oracles: requests judged by the validator (each violation at
the level of the requirement it cites), the reqId rules (BQ-PIPE-4), the opening (BQ-HELLO-1),
replies paired by reqId and judged against their request, pushed job events (BQ-EVENT-102)
against their frame's schema. This module adds what only the tap and the trace pipeline need:
the byte streams (:class:`~queuewire.traffic.framing.Stream`), the latency pairing (from the
frame that completed the request to the frame that completed the reply), the unanswered
requests at close (INFO: a client may close with long polls parked), and, for a later file of
a recorded connection, handing a reply nothing here was sent for to the trace pipeline's join.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ..codecs.bunqueue import FrameDecoder
from ..judge.exchange import NO_CMD, BunqueueExchange, Judgement
from ..judge.findings import Finding
from ..spec import Profile
from .framing import Item, Stream
from .redact import Redact, redactor

#: a finding the judge made on this connection (with where and when it was seen) -> None
Report = Callable[[Finding], None]
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
        self.judgement = Judgement(profile)
        self._prefix = struct.Struct(profile.model.len_format)
        self.max_frame = max_frame
        #: the commands the profile defines (and the mark of a frame without one): the
        #: analyzer's per-command table keeps a row for each, and a bounded few others
        self.command_names: frozenset[str] | None = frozenset((*profile.model.commands, NO_CMD))
        #: what a recording does to a client frame before it writes it (:mod:`.redact`)
        self.redact: Redact | None = redactor({
            name: c.secret_fields for name, c in profile.model.commands.items() if c.secret_fields})

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
    """One connection: its :class:`~queuewire.judge.exchange.BunqueueExchange`, with the
    findings handed to ``report`` and the answered requests to ``pair``."""

    __slots__ = ("_orphan", "_orphans", "_pair", "_payload_at", "_report", "conn_id", "exchange")

    def __init__(self, proto: BunqueueProtocol, conn_id: int, report: Report, pair: PairFn,
                 orphan: OrphanFn | None = None):
        self.conn_id = conn_id
        self._report = report
        self._pair = pair
        self._orphan = orphan
        self._orphans = 0     # answers without reqId given to orphan (their FIFO rank)
        self.exchange = BunqueueExchange(proto.judgement, conn_id, partial=orphan is not None)
        # where a frame's payload starts, when the profile has rules about how a client
        # writes values (msgpack.client_forms), which read the bytes; else None
        self._payload_at = proto._prefix.size if proto.judgement.client_forms else None

    def _tell(self, findings: list[Finding]) -> None:
        report = self._report
        for f in findings:
            report(f)

    # -- client to server
    def client_frame(self, item: Item, t_ns: int) -> str:
        """Judge a client frame; returns the command it asks for (every frame is a request)."""
        at = self._payload_at
        name, findings = self.exchange.request(
            item.message, t_ns, item.error,
            payload=None if at is None or item.error is not None else memoryview(item.raw)[at:])
        if findings:
            self._tell(findings)
        return name

    # -- server to client
    def server_frame(self, item: Item, t_ns: int) -> bool:
        """Judge a server frame; True when it answered a request."""
        exchange = self.exchange
        pending, findings = exchange.reply(item.message, t_ns, item.error)
        if findings:
            self._tell(findings)
        msg = item.message
        if pending is not None:
            self._pair(pending.command, None if pending.key is None else msg["reqId"], pending.sent,
                       t_ns, type(msg) is dict and msg.get("ok") is True, "reply")
            return True
        unpaired = exchange.unpaired
        if self._orphan is None or unpaired not in ("no_request", "unknown_reqid"):
            return False
        ok = type(msg) is dict and msg.get("ok") is True
        if unpaired == "no_request":
            self._orphan(f"n:{self._orphans}", t_ns, "reply", ok, item.raw)
            self._orphans += 1
        else:
            self._orphan(match_key(exchange.unpaired_key), t_ns, "reply", ok, item.raw)
        return True

    def open_ends(self) -> list[tuple[str, str, int]]:
        """The requests still waiting, as (match key, command, sent_ns): what a later file of
        the connection may answer (the keys :meth:`server_frame` gives ``orphan`` there)."""
        out = []
        rank = 0
        for p in self.exchange.open_ends():
            if p.key is None:
                out.append((f"n:{rank}", p.command, p.sent))
                rank += 1
            else:
                out.append((match_key(p.key), p.command, p.sent))
        return out

    def unanswered(self) -> list[str]:
        """The commands still waiting for a reply (at close)."""
        return [p.command for p in self.exchange.open_ends()]
