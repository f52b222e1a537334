"""The oracles, sans-IO: what a server must do with a case's bytes, and the verdict on what
it did.

``expect_*`` runs the case's byte stream through the spec's own decoder in the server's
role. Every decoded request must be answered; every protocol error says by its ``reaction``
what the server must do: ``reply`` (one error reply, without reqId since the server cannot
know it, and go on) or ``close`` (the connection ends, after at most one error reply); a
stream that ends inside a frame is closed unanswered (BQ-FRAME-1 / QX-HDR-7).

``judge_*`` takes the replies that came back (decoded by the client-side decoder), whether the
connection closed and whether the wait timed out, and returns :class:`Finding` values, each
citing a requirement id and carrying that requirement's level from the profile; only a
finding on a MUST is a failure (``Finding.fails``), the rest are NON-STRICT or INFO, as in
the conformance suite. The oracles and the requirements they rest on:

* every reply is valid for its request: a success reply matches the command's reply schema
  (each violation cites its own requirement), an error reply the shared error-reply schema
  (BQ-ENV-4); a reply that is no map breaks BQ-ENV-3; a reply frame that does not decode
  breaks the decoder error's requirement (quicx: MSG_ERROR codes, QX-ERR-*);
* no reply lost or duplicated for a reqId (BQ-PIPE-1: the server answers each one; the
  echoed reqId is unchanged, BQ-ENV-2); a protocol error answered by nothing cites its kind's
  requirement; nothing hangs past the runner's bound (a reply not there by then is lost);
* the connection closes where the spec demands it (a ``close`` kind, e.g. BQ-FRAME-2);
* the server stays alive: a fresh connection's Ping (BQ-CMD-Ping) or HEARTBEAT (QX-HB-2)
  is answered (:func:`judge_alive_*`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import UNDEFINED, FrameDecoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxDecoder
from ..codecs.validation import BunqueueValidator
from ..spec import Profile
from .case import Case


@dataclass(frozen=True)
class Finding:
    requirement: str
    level: str          # MUST | SHOULD | MAY | INFO
    kind: str           # invalid_reply | lost_reply | duplicate_reply | no_close | dead | ...
    message: str

    @property
    def fails(self) -> bool:
        return self.level == "MUST"

    def as_dict(self) -> dict[str, str]:
        return {"requirement": self.requirement, "level": self.level, "kind": self.kind,
                "message": self.message}

    def __str__(self) -> str:
        return f"[{self.requirement} {self.level}] {self.kind}: {self.message}"


def level_of(profile: Profile, rid: str) -> str:
    req = profile.requirements.get(rid)
    return req.level if req is not None else "INFO"


def canon(value: Any) -> Any:
    """A hashable, wire-faithful key for a reqId (an integer sent as float64 comes back the
    same number; NaN equals NaN; containers compare by content)."""
    if value is UNDEFINED:
        return ("undefined",)
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        if value.is_integer():
            return ("num", int(value))
        return ("num", value)
    if isinstance(value, int):
        return ("num", value)
    if isinstance(value, dict):
        return ("map", tuple(sorted((repr(canon(k)), canon(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(canon(v) for v in value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bin", bytes(value))
    return (type(value).__name__, repr(value))


# -- bunqueue ---------------------------------------------------------------------------------
@dataclass
class Item:
    """One thing the server must answer: a decoded request, or a ``reply`` protocol error."""

    request: Any = None
    error: ProtocolError | None = None
    optional: bool = False   # the one error reply a server may send before it closes

    @property
    def req_id(self) -> Any:
        if self.error is not None or type(self.request) is not dict:
            return UNDEFINED
        return self.request.get("reqId", UNDEFINED)


@dataclass
class Expected:
    items: list[Item] = field(default_factory=list)
    close_error: ProtocolError | None = None   # a ``close`` kind: the server must close
    partial: bool = False                      # the stream ends inside a frame

    @property
    def must_close_write(self) -> bool:
        """The client has to half-close: nothing else completes the stream."""
        return self.partial or self.close_error is not None


def expect_bunqueue(case: Case, profile: Profile) -> Expected:
    dec = FrameDecoder(profile)
    exp = Expected()
    data = case.stream
    while True:
        try:
            exp.items += [Item(request=m) for m in dec.feed(data)]
            break
        except ProtocolError as err:
            exp.items += [Item(request=m) for m in err.frames]
            if err.reaction == "close":
                exp.close_error = err
                return exp
            exp.items.append(Item(error=err))
            data = b""
    exp.partial = dec.buffered > 0
    if exp.partial:
        # after a ``reply`` error the decoder judges a prefix already buffered only when
        # more bytes come; a server reading further bytes (or a fresh decoder) refuses an
        # oversized one at once, so ask a fresh decoder about the tail
        try:
            FrameDecoder(profile).feed(data_tail(case.stream, dec.offset))
        except ProtocolError as err:
            if err.reaction == "close":
                exp.close_error = err
    return exp


def data_tail(stream: bytes, offset: int) -> bytes:
    return stream[offset:]


class BunqueueJudge:
    """Judges the replies to one case (construct once per profile, reuse)."""

    def __init__(self, profile: Profile, waits: tuple[str, ...] = ()):
        self.profile = profile
        self.validator = BunqueueValidator(profile)
        spec = profile.model
        self.waits = frozenset(waits)
        self.error_patterns = [re.compile(_template(e.message)) for e in spec.errors.values()]

    def _finding(self, rid: str, kind: str, message: str) -> Finding:
        return Finding(rid, level_of(self.profile, rid), kind, message)

    def judge(self, exp: Expected, replies: list[Any], closed: bool, timed_out: bool,
              reply_errors: list[ProtocolError] = (), half_closed: bool = False,
              reset: bool = False) -> list[Finding]:
        """``half_closed``: the client shut its side first; a long poll still parked then
        may be dropped (the documents say nothing of half-closed peers: INFO only).
        ``reset``: the connection was reset; after a ``close`` kind the spec demands the
        close, and a reset may discard replies already in flight (TCP), so those are INFO.

        Replies are grouped by reqId (those without one form a group of their own, with the
        protocol errors and the requests that had no reqId); inside a group, where requests
        share a reqId (reused, duplicated), replies are matched to requests by a maximum
        matching on "is a valid answer to", so the verdict does not depend on reply order.
        """
        out: list[Finding] = []
        for err in reply_errors:
            out.append(self._finding(err.requirement, "undecodable_reply", str(err)))
        items: dict[Any, list[Item]] = {}
        for item in exp.items:
            rid = item.req_id
            items.setdefault(None if rid is UNDEFINED else canon(rid), []).append(item)
        got: dict[Any, list[dict]] = {}
        for reply in replies:
            if type(reply) is not dict:
                out.append(self._finding("BQ-ENV-3", "invalid_reply",
                                         f"reply is not a map: {reply!r:.80}"))
                continue
            rid = reply.get("reqId", UNDEFINED)
            got.setdefault(None if rid is UNDEFINED else canon(rid), []).append(reply)
        if exp.close_error is not None:  # at most one error reply before the close
            items.setdefault(None, []).append(Item(error=exp.close_error, optional=True))
        lost: list[Item] = []
        for key in set(items) | set(got):
            its, rs = items.get(key, []), got.get(key, [])
            pairs, spare_items, spare_replies = self._match(its, rs)
            for _item, _reply, found in pairs:
                out += found
            lost += [i for i in spare_items if not i.optional]
            for reply in spare_replies:
                if key is None and any(i.req_id is not UNDEFINED for i in exp.items):
                    out.append(self._finding("BQ-ENV-2", "reqid_not_echoed",
                                             f"reply {_short(reply)} carries no reqId"))
                elif key is not None and key not in items:
                    out.append(self._finding("BQ-ENV-2", "unknown_reqid",
                                             f"reply carries reqId {reply['reqId']!r} "
                                             f"no request had"))
                else:
                    out.append(self._finding("BQ-PIPE-1", "duplicate_reply",
                                             f"reply {_short(reply)} answers no request "
                                             f"(one more than the requests)"))
        why = "timed out" if timed_out else ("connection closed" if closed else "no reply")
        for item in lost:
            if reset and exp.close_error is not None:
                out.append(Finding("BQ-PIPE-1", "INFO", "reset_after_close",
                                   f"no reply to {_short(item.request or item.error.kind)}: "
                                   f"the connection was reset after the close "
                                   f"{exp.close_error.kind} demands"))
            elif item.error is not None:
                out.append(self._finding(item.error.requirement, "lost_reply",
                                         f"{item.error.kind} not answered ({why})"))
            elif half_closed and closed and self._parks(item):
                out.append(Finding("BQ-PIPE-1", "INFO", "dropped_poll",
                                   f"long poll {_short(item.request)} dropped after the "
                                   f"client's half-close"))
            elif exp.close_error is not None and closed:
                # the documents demand the close (BQ-FRAME-2: "cause the connection to be
                # terminated") and an answer to every command (BQ-PIPE-1); that commands
                # read before the fatal frame are answered before the close is a reading
                out.append(Finding("BQ-PIPE-1", "SHOULD", "lost_before_close",
                                   f"no reply to {_short(item.request)}: the connection was "
                                   f"closed for the {exp.close_error.kind} that followed it "
                                   f"before it was answered"))
            else:
                out.append(self._finding("BQ-PIPE-1", "lost_reply",
                                         f"no reply to {_short(item.request)} ({why})"))
        if exp.close_error is not None and not closed:
            out.append(self._finding(exp.close_error.requirement, "no_close",
                                     f"connection not closed after {exp.close_error.kind}"))
        return out

    def _match(self, items: list[Item], replies: list[dict]
               ) -> tuple[list[tuple[Item, dict, list[Finding]]], list[Item], list[dict]]:
        """Pairs (with their findings), unmatched items, unmatched replies."""
        if len(items) == 1 and len(replies) == 1:
            return [(items[0], replies[0], self._check(items[0], replies[0]))], [], []
        # which pairs are clean decides the matching; the findings are written only for the
        # pairs kept (a cross pair's slow-path violations over a large reply were the cost)
        clean = {(i, r) for i in range(len(items)) for r in range(len(replies))
                 if self._clean(items[i], replies[r])}
        owner: dict[int, int] = {}   # reply -> item

        def augment(i: int, seen: set[int]) -> bool:
            for r in range(len(replies)):
                if (i, r) in clean and r not in seen:
                    seen.add(r)
                    if r not in owner or augment(owner[r], seen):
                        owner[r] = i
                        return True
            return False

        for i in sorted(range(len(items)), key=lambda i: self._parks(items[i])):
            augment(i, set())  # a long poll last: it answers late, the others at once
        matched = set(owner.values())
        free_items = [i for i in range(len(items)) if i not in matched
                      and not items[i].optional]
        free_items += [i for i in range(len(items)) if i not in matched and items[i].optional]
        free_replies = [r for r in range(len(replies)) if r not in owner]
        for r in list(free_replies):  # the rest pair up in order, with their findings
            if not free_items:
                break
            owner[r] = free_items.pop(0)
            free_replies.remove(r)
        pairs = [(items[i], replies[r], self._check(items[i], replies[r]))
                 for r, i in owner.items()]
        return pairs, [items[i] for i in free_items], [replies[r] for r in free_replies]

    def _parks(self, item: Item) -> bool:
        cmd = item.request.get("cmd") if type(item.request) is dict else None
        return isinstance(cmd, str) and cmd in self.waits

    def _clean(self, item: Item, reply: dict) -> bool:
        """Whether :meth:`_check` would find nothing above INFO, decided on the validators'
        fast paths (``*_is_valid`` agree with ``*_violations``, whose levels are the spec's
        MUST/SHOULD/MAY); the one undecided shape runs the check itself."""
        if item.error is not None:
            if reply.get("ok") is not False:
                return False
            return self.validator.reply_is_valid("", reply, ok=False)
        req = item.request
        cmd = req.get("cmd") if type(req) is dict else None
        body = reply
        rid = item.req_id
        if rid is not UNDEFINED and type(rid) is not str:
            body = {k: v for k, v in reply.items() if k != "reqId"}
        ok = body.get("ok") is True
        if reply.get("ok") is True:
            if not isinstance(cmd, str) or cmd not in self.profile.model.commands:
                return False
            if not self.validator.request_is_valid(req):
                return False   # an invalid request answered ok: BQ-ENV-6
        if not (cmd or not ok):
            return all(f.level == "INFO" for f in self._check(item, reply))
        return self.validator.reply_is_valid(cmd or "", body, ok=ok)

    def _check(self, item: Item, reply: dict) -> list[Finding]:
        out: list[Finding] = []
        body = reply
        if item.error is not None:
            if reply.get("ok") is not False:
                return [self._finding(item.error.requirement, "accepted_bad_frame",
                                      f"{item.error.kind} answered {_short(reply)}")]
            cmd = ""
        else:
            req = item.request
            cmd = req.get("cmd") if type(req) is dict else None
            rid = item.req_id
            if rid is not UNDEFINED and type(rid) is not str:
                body = {k: v for k, v in reply.items() if k != "reqId"}  # echoed verbatim
            if reply.get("ok") is True:
                if not isinstance(cmd, str) or cmd not in self.profile.model.commands:
                    return [self._finding("BQ-ENV-5", "accepted_unknown",
                                          f"{_short(req)} answered ok")]
                bad = () if self.validator.request_is_valid(req) else \
                    self.validator.request_violations(req)
                if bad:
                    out.append(self._finding("BQ-ENV-6", "accepted_invalid",
                                             f"{cmd} breaking {bad[0]} answered ok"))
        ok = body.get("ok") is True
        if self.validator.reply_is_valid(cmd or "", body, ok=ok) if (cmd or not ok) else False:
            violations: tuple = ()
        else:
            violations = self.validator.reply_violations(cmd or "", body)
        for v in violations:
            out.append(Finding(v.requirement, v.level, "invalid_reply",
                               f"reply to {cmd or 'a bad frame'}: {v}"))
        if reply.get("ok") is False and isinstance(reply.get("error"), str) and not any(
                p.fullmatch(reply["error"]) for p in self.error_patterns):
            out.append(Finding("BQ-ENV-4", "INFO", "undocumented_error",
                               f"error string {reply['error']!r:.80} is none of the spec's"))
        return out

    def judge_alive(self, reply: Any) -> list[Finding]:
        if type(reply) is dict and reply.get("ok") is True and \
                self.validator.reply_is_valid("Ping", {k: v for k, v in reply.items()
                                                       if k != "reqId"}):
            return []
        return [self._finding("BQ-CMD-Ping", "dead",
                              f"a fresh connection's Ping got {_short(reply)}")]


def _template(message: str) -> str:
    """A spec error string as a regex: ``{name}`` placeholders match anything."""
    parts = re.split(r"\{[^{}]*\}", message)
    return "(?s)" + ".*".join(re.escape(p) for p in parts)


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 100 else text[:97] + "..."


# -- quicx ------------------------------------------------------------------------------------
@dataclass
class QuicxExpected:
    errors: list[ProtocolError] = field(default_factory=list)  # ``reply`` kinds, in order
    messages: list[Any] = field(default_factory=list)
    close_error: ProtocolError | None = None
    partial: bool = False


def expect_quicx(case: Case, profile: Profile) -> QuicxExpected:
    dec = QuicxDecoder(profile)
    exp = QuicxExpected()
    data = case.stream
    while True:
        try:
            exp.messages += dec.feed(data)
            break
        except ProtocolError as err:
            exp.messages += err.frames
            if err.reaction == "close":
                exp.close_error = err
                return exp
            exp.errors.append(err)
            data = b""
    exp.partial = dec.in_frame
    return exp


class QuicxJudge:
    """Every frame the daemon sends decodes for a client; every ``reply`` error is answered
    by a MSG_ERROR with its code (more may come: refusals of well-formed frames)."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self.spec = QuicxDecoder(profile).spec
        self.clients = tuple(r for r in self.spec.roles if r != "daemon")

    def client_decoder(self) -> QuicxDecoder:
        return QuicxDecoder(self.profile, self.clients)

    def _finding(self, rid: str, kind: str, message: str) -> Finding:
        return Finding(rid, level_of(self.profile, rid), kind, message)

    def judge(self, exp: QuicxExpected, replies: list[Any], closed: bool, timed_out: bool,
              reply_errors: list[ProtocolError] = ()) -> list[Finding]:
        out = [self._finding(e.requirement, "undecodable_reply", str(e)) for e in reply_errors]
        got = Counter(m.fields.get("error_code") for m in replies if m.name == "MSG_ERROR")
        want = Counter(e.error_code for e in exp.errors)
        why = "timed out" if timed_out else "connection closed" if closed else "no reply"
        if sum(got.values()) < len(exp.errors):
            # a daemon may cap payloads lower than the spec (a local policy the codec allows),
            # so a frame can be refused by another rule first: count MSG_ERRORs, not codes
            err = exp.errors[sum(got.values())]
            out.append(self._finding(err.requirement, "lost_reply",
                                     f"{len(exp.errors) - sum(got.values())} of "
                                     f"{len(exp.errors)} MSG_ERROR not sent (first missing: "
                                     f"{err.kind}; {why})"))
        elif any(got[c] < n for c, n in want.items()):
            out.append(Finding("QX-ERR-3", "INFO", "other_error_code",
                               f"MSG_ERROR codes {dict(got)} where the spec's decoder "
                               f"gives {dict(want)}"))
        if exp.close_error is not None and not closed:
            out.append(self._finding(exp.close_error.requirement, "no_close",
                                     f"connection not closed after {exp.close_error.kind}"))
        return out

    def judge_alive(self, replies: list[Any]) -> list[Finding]:
        if any(m.name == "MSG_PONG" for m in replies):
            return []
        # the profile's own heartbeat rule where an overlay replaced it (1.0.3), else 004's
        rid = next((r for r in ("QX-HB-101", "QX-HB-2") if r in self.profile.requirements),
                   "QX-HB-2")
        return [self._finding(rid, "dead", f"a fresh connection's HEARTBEAT got "
                                           f"{[m.name for m in replies]}")]
