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
finding whose verdict is FAIL (a MUST the documents state) is a failure (``Finding.fails``),
the rest are NON-STRICT or INFO: the verdicts of :mod:`queuewire.judge`, as in the
conformance suite and the tap. The oracles and the requirements they rest on:

* every reply is valid for its request: a success reply matches the command's reply schema
  (each violation cites its own requirement), an error reply the shared error-reply schema
  (BQ-ENV-4); a reply that is no map breaks BQ-ENV-3; a reply frame that does not decode
  breaks the decoder error's requirement (quicx: MSG_ERROR codes, QX-ERR-*);
* no reply lost or duplicated for a reqId (BQ-PIPE-1: the server answers each one; the
  echoed reqId is unchanged, BQ-ENV-2); a protocol error answered by nothing cites its kind's
  requirement; nothing hangs past the runner's bound (a reply not there by then is lost);
  where the documents leave the server a choice, each choice is an answer: a reqId that is
  no string (001 types it ``reqId?: string``) may come back or not (not echoing it is a
  reading, SHOULD), and a frame the spec's decoder refuses by a rule that is not a MUST
  (BQ-MSGPACK-3, a MAY) may be refused or read and answered as the request it holds;
* a reply that only echoes what an invalid request sent (GetState's ``id`` for an ``id`` of
  the wrong type, RegisterWorker's ``name`` for a missing one) is no shape violation of its
  own: the request's is recorded (BQ-ENV-6), the echo is INFO;
* the connection closes where the spec demands it (a ``close`` kind, e.g. BQ-FRAME-2);
* the server stays alive: a fresh connection's Ping (BQ-CMD-Ping) or HEARTBEAT (QX-HB-2)
  is answered (the ``judge_alive_*`` functions).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import UNDEFINED, FrameDecoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import REPLY_PAYLOAD_MAX, QuicxDecoder, frame_spans
from ..codecs.validation import BunqueueValidator
from ..judge import Finding, Verdict, reading, reqid_key, requirement_verdict
from ..judge.exchange import REQUEST_CHECKS, BunqueueExchange, Judgement, Pending, judge_reply
from ..spec import Profile
from .case import Case


# -- bunqueue ---------------------------------------------------------------------------------
@dataclass
class Item:
    """One thing the server must answer: a decoded request, or a ``reply`` protocol error."""

    request: Any = None
    error: ProtocolError | None = None
    optional: bool = False   # the one error reply a server may send before it closes
    # for an ``error`` a server may let pass (its rule is no MUST): the request a decoder
    # without that rule reads from the frame, which the server may answer instead
    alt: dict | None = None

    @property
    def req_id(self) -> Any:
        if self.error is not None or type(self.request) is not dict:
            return UNDEFINED
        return self.request.get("reqId", UNDEFINED)

    @property
    def keys(self) -> tuple[Any, ...]:
        """The reply groups (``reqid_key`` of a reqId; None: no reqId) an answer may come in,
        its own first. A reqId that is no string (001 types it ``reqId?: string``) may be
        left out of the reply; a frame error is answered without reqId, or, where the
        server may read the frame (``alt``), with the reqId of the request it holds."""
        if self.error is not None:
            rid = self.alt.get("reqId", UNDEFINED) if self.alt is not None else UNDEFINED
            return (None,) if rid is UNDEFINED else (None, reqid_key(rid))
        rid = self.req_id
        if rid is UNDEFINED:
            return (None,)
        return (reqid_key(rid),) if type(rid) is str else (reqid_key(rid), None)


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
            exp.items.append(Item(error=err, alt=_lenient_read(case.stream, err, profile)))
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


def _lenient_read(stream: bytes, err: ProtocolError, profile: Profile) -> dict | None:
    """The request a frame holds when the spec's decoder refused it by a rule a server need
    not apply (a MAY: the nesting depth, BQ-MSGPACK-3; msgpackr has no limit), read by a
    decoder without that rule; None when the rule binds or the frame holds no request."""
    if requirement_verdict(profile, err.requirement) is not Verdict.INFO or err.offset is None:
        return None
    prefix = struct.Struct(profile.model.len_format)
    start = err.offset - prefix.size
    if start < 0:
        return None
    (length,) = prefix.unpack_from(stream, start)
    try:
        got = FrameDecoder(profile, check_depth=False).feed(stream[start:err.offset + length])
    except ProtocolError:
        return None
    return got[0] if len(got) == 1 and type(got[0]) is dict else None


class BunqueueJudge:
    """Judges the replies to one case (construct once per profile, reuse)."""

    def __init__(self, profile: Profile, waits: tuple[str, ...] = ()):
        self.profile = profile
        self.validator = BunqueueValidator(profile)
        self.waits = frozenset(waits)
        self.judgement = Judgement(profile, self.validator)

    def _finding(self, rid: str, kind: str, message: str) -> Finding:
        return Finding(requirement_verdict(self.profile, rid), rid, kind, message)

    def judge_requests(self, exp: Expected) -> list[Finding]:
        """What the case's own bytes break, judged by the registry's request checks as the
        tap and ``conform client`` judge a client (a fuzz case breaks rules on purpose: these
        are what it exercises, never the server's failures)."""
        exchange = BunqueueExchange(self.judgement, checks=REQUEST_CHECKS)
        out: list[Finding] = []
        for item in exp.items:
            out += exchange.request(item.request, 0, item.error)[1]
        if exp.close_error is not None:
            out += exchange.request(None, 0, exp.close_error)[1]
        return out

    def judge(self, exp: Expected, replies: list[Any], closed: bool, timed_out: bool,
              reply_errors: Sequence[ProtocolError] = (), half_closed: bool = False,
              reset: bool = False) -> list[Finding]:
        """``half_closed``: the client shut its side first; a long poll still parked then
        may be dropped (the documents say nothing of half-closed peers: INFO only).
        ``reset``: the connection was reset; after a ``close`` kind the spec demands the
        close, and a reset may discard replies already in flight (TCP), so those are INFO.

        Replies are grouped by reqId (those without one form a group of their own, with the
        protocol errors and the requests that had no reqId); an item that may be answered in
        more than one group (:attr:`Item.keys`) joins them. Inside a group, where requests
        share a reqId (reused, duplicated), replies are matched to requests by a maximum
        matching on "is a valid answer to", then on "has the fields of the command's
        reply" (so one odd reply is judged against its own command, not a neighbour's), so
        the verdict does not depend on reply order.
        """
        out: list[Finding] = []
        for err in reply_errors:
            out.append(self._finding(err.requirement, "undecodable_reply", str(err)))
        items = list(exp.items)
        if exp.close_error is not None:  # at most one error reply before the close
            items.append(Item(error=exp.close_error, optional=True))
        got: dict[Any, list[dict]] = {}
        for reply in replies:
            if type(reply) is not dict:
                out.append(self._finding("BQ-ENV-3", "invalid_reply",
                                         f"reply is not a map: {reply!r:.80}"))
                continue
            rid = reply.get("reqId", UNDEFINED)
            got.setdefault(None if rid is UNDEFINED else reqid_key(rid), []).append(reply)
        item_keys = [it.keys for it in items]
        groups: dict[Any, tuple[list[int], list[tuple[Any, dict]]]] = {}
        if all(len(keys) == 1 for keys in item_keys):
            for i, keys in enumerate(item_keys):
                groups.setdefault(keys[0], ([], []))[0].append(i)
            known = set(groups)   # the keys the requests gave
            for key, rs in got.items():
                groups.setdefault(key, ([], []))[1].extend((key, r) for r in rs)
        else:  # groups joined by the items answerable in several of them (union-find)
            parent: dict[Any, Any] = {}

            def find(k: Any) -> Any:
                while parent.setdefault(k, k) != k:
                    k = parent[k]
                return k

            for keys in item_keys:
                for k in keys[1:]:
                    parent[find(k)] = find(keys[0])
            for i, keys in enumerate(item_keys):
                groups.setdefault(find(keys[0]), ([], []))[0].append(i)
            for key, rs in got.items():
                groups.setdefault(find(key), ([], []))[1].extend((key, r) for r in rs)
            known = {k for keys in item_keys for k in keys}
        any_reqid: bool | None = None
        lost: list[Item] = []
        for its, answers in groups.values():
            if len(its) == 1 and len(answers) == 1 and answers[0][0] == item_keys[its[0]][0]:
                out += self._check(items[its[0]], answers[0][1])  # one request, its one reply
                continue
            pairs, spare_items, spare_replies = self._match([items[i] for i in its],
                                                            [item_keys[i] for i in its], answers)
            for item, key, reply, found in pairs:
                out += found
                if key is None and item.error is None and item.req_id is not UNDEFINED:
                    # 001 types the echoed reqId ``reqId?: string``: echoing one of another
                    # type is a reading of "the server echoes reqId back"
                    out.append(Finding(Verdict.NON_STRICT, "BQ-ENV-2", "reqid_not_echoed",
                                       f"reply {_short(reply)} to {_short(item.request)} "
                                       f"leaves out its reqId, which is no string"))
            lost += [i for i in spare_items if not i.optional]
            for key, reply in spare_replies:
                if key is None and any_reqid is None:
                    any_reqid = any(it.req_id is not UNDEFINED for it in exp.items)
                if key is None and any_reqid:
                    out.append(self._finding("BQ-ENV-2", "reqid_not_echoed",
                                             f"reply {_short(reply)} carries no reqId"))
                elif key is not None and key not in known:
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
                out.append(Finding(Verdict.INFO, "BQ-PIPE-1", "reset_after_close",
                                   f"no reply to {_short(item.request or (item.error and item.error.kind))}: "
                                   f"the connection was reset after the close "
                                   f"{exp.close_error.kind} demands"))
            elif item.error is not None and exp.close_error is not None and closed:
                # the frame error's reply lost to the close a later frame demands: as for a
                # command read before it (below), answering first is a reading
                level = requirement_verdict(self.profile, item.error.requirement)
                out.append(Finding(reading(level), item.error.requirement,
                                   "lost_before_close",
                                   f"{item.error.kind} not answered: the connection was "
                                   f"closed for the {exp.close_error.kind} that followed it"))
            elif item.error is not None:
                out.append(self._finding(item.error.requirement, "lost_reply",
                                         f"{item.error.kind} not answered ({why})"))
            elif half_closed and closed and self._parks(item):
                out.append(Finding(Verdict.INFO, "BQ-PIPE-1", "dropped_poll",
                                   f"long poll {_short(item.request)} dropped after the "
                                   f"client's half-close"))
            elif exp.close_error is not None and closed:
                # the documents demand the close (BQ-FRAME-2: "cause the connection to be
                # terminated") and an answer to every command (BQ-PIPE-1); that commands
                # read before the fatal frame are answered before the close is a reading
                out.append(Finding(Verdict.NON_STRICT, "BQ-PIPE-1", "lost_before_close",
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

    def _match(self, items: list[Item], keys: list[tuple[Any, ...]],
               replies: list[tuple[Any, dict]]
               ) -> tuple[list[tuple[Item, Any, dict, list[Finding]]], list[Item],
                          list[tuple[Any, dict]]]:
        """Pairs (item, reply key, reply, findings), unmatched items, unmatched replies; a
        reply pairs only with an item it may answer (its key among the item's ``keys``)."""
        if len(items) == 1 and len(replies) == 1 and replies[0][0] in keys[0]:
            key, reply = replies[0]
            return [(items[0], key, reply, self._check(items[0], reply))], [], []
        fits = {(i, r) for i in range(len(items)) for r in range(len(replies))
                if replies[r][0] in keys[i]}
        # which pairs are clean decides the matching; the findings are written only for the
        # pairs kept (a cross pair's slow-path violations over a large reply were the cost)
        clean = {(i, r) for i, r in fits if self._clean(items[i], replies[r][1])}
        owner: dict[int, int] = {}   # reply -> item

        def augment(i: int, seen: set[int], edges: set[tuple[int, int]]) -> bool:
            for r in range(len(replies)):
                if (i, r) in edges and r not in seen:
                    seen.add(r)
                    if r not in owner or augment(owner[r], seen, edges):
                        owner[r] = i
                        return True
            return False

        order = sorted(range(len(items)), key=lambda i: self._parks(items[i]))
        own = {(i, r) for i, r in fits if replies[r][0] == keys[i][0]}
        most = min(len(items), len(replies))
        matched: set[int] = set()

        def grow(edges: set[tuple[int, int]]) -> None:
            # augmenting never unmatches an item: each round can only add pairs, re-routing
            # earlier ones, so the rounds go from the best kind of answer to the weakest
            for i in order:  # a long poll last: it answers late, the others at once
                if len(matched) == most:
                    return
                if i not in matched and augment(i, set(), edges):
                    matched.add(i)

        grow(clean & own)   # a valid answer in the item's own group (its reqId echoed)
        if own != fits:
            grow(clean)
        # then the replies that answer no item cleanly: each to an item it is a valid reply
        # to (the request itself invalid), else to one whose command's reply fields it has
        # (re-routing earlier pairs where that matches more)
        shaped = clean
        if len(matched) < most:
            shaped = clean | {(i, r) for i, r in fits - clean
                              if self._clean(items[i], replies[r][1], request=False)}
            grow(shaped & own)
            if own != fits:
                grow(shaped)
        if len(matched) < most:
            plausible = shaped | {(i, r) for i, r in fits - shaped
                                  if self._plausible(items[i], replies[r][1])}
            grow(plausible & own)
            if own != fits:
                grow(plausible)
        free_items = [i for i in range(len(items)) if i not in matched
                      and not items[i].optional]
        free_items += [i for i in range(len(items)) if i not in matched and items[i].optional]
        free_replies = [r for r in range(len(replies)) if r not in owner]
        for r in list(free_replies):  # the rest pair up in order, with their findings
            i = next((i for i in free_items if (i, r) in own), None)
            if i is None:
                i = next((i for i in free_items if (i, r) in fits), None)
            if i is None:
                continue
            owner[r] = i
            free_items.remove(i)
            free_replies.remove(r)
        pairs = [(items[i], replies[r][0], replies[r][1], self._check(items[i], replies[r][1]))
                 for r, i in owner.items()]
        return pairs, [items[i] for i in free_items], [replies[r] for r in free_replies]

    def _plausible(self, item: Item, reply: dict) -> bool:
        """A success reply with every field its command's reply requires and none it does
        not name (whatever their values): the reply of that command, though not valid."""
        req = item.alt if item.error is not None else item.request
        cmd = req.get("cmd") if type(req) is dict else None
        return isinstance(cmd, str) and self.judgement.plausible(cmd, reply)

    def _parks(self, item: Item) -> bool:
        cmd = item.request.get("cmd") if type(item.request) is dict else None
        return isinstance(cmd, str) and cmd in self.waits

    def _clean(self, item: Item, reply: dict, request: bool = True) -> bool:
        """Whether :meth:`_check` would find nothing above INFO, decided on the validators'
        fast paths (``*_is_valid`` agree with ``*_violations``, whose levels are the spec's
        MUST/SHOULD/MAY); the one undecided shape runs the check itself. ``request=False``:
        whatever the request (an invalid one answered ok is no reason here)."""
        item = self._as_read(item, reply)
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
            if request and not self.validator.request_is_valid(req):
                return False   # an invalid request answered ok: BQ-ENV-6
        if not (cmd or not ok):
            return all(f.level is Verdict.INFO for f in self._check(item, reply))
        return self.validator.reply_is_valid(cmd or "", body, ok=ok)

    @staticmethod
    def _as_read(item: Item, reply: dict) -> Item:
        """A frame error the server may let pass, answered as the request the frame holds
        (a success, or a reply with a reqId): judged as that request."""
        if item.alt is not None and (reply.get("ok") is not False
                                     or reply.get("reqId", UNDEFINED) is not UNDEFINED):
            return Item(request=item.alt)
        return item

    def _check(self, item: Item, reply: dict) -> list[Finding]:
        """The registry's reply checks (:func:`~queuewire.judge.exchange.judge_reply`, as
        the tap judges a reply) on ``reply`` as the answer to ``item``."""
        return judge_reply(self.judgement, self._pending(self._as_read(item, reply)), reply)

    def _pending(self, item: Item) -> Pending:
        if item.error is not None:
            return Pending("(unreadable)", 0, error=item.error)
        req = item.request
        cmd = req.get("cmd") if type(req) is dict else None
        validator = self.validator
        bad = None if validator.request_is_valid(req) else (req, validator.request_violations(req))
        rid = item.req_id
        return Pending(cmd if isinstance(cmd, str) else "(no cmd)", 0, bad=bad,
                       reqid_is_str=rid is UNDEFINED or type(rid) is str)

    def judge_alive(self, reply: Any) -> list[Finding]:
        if type(reply) is dict and reply.get("ok") is True and \
                self.validator.reply_is_valid("Ping", {k: v for k, v in reply.items()
                                                       if k != "reqId"}):
            return []
        return [self._finding("BQ-CMD-Ping", "dead",
                              f"a fresh connection's Ping got {_short(reply)}")]


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
    #: refusals a daemon may leave unanswered (0 or 1): the last one, when the frame it
    #: refuses declared a payload the stream never completes. The spec's decoder refuses a
    #: bad version or type from the header at once; a daemon that reads a whole frame before
    #: it validates it never gets there, and 004 does not say when to reject, so both are
    #: accepted (the suite's own split and truncated cases want silence until a frame is in).
    optional: int = 0


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
    if exp.partial and exp.errors and _never_completes(case.stream, exp.errors[-1], dec):
        exp.optional = 1
    return exp


def _never_completes(stream: bytes, err: ProtocolError, dec: QuicxDecoder) -> bool:
    """Whether the frame ``err`` refused (from its header: ``err.offset`` is the refused
    field's) is the stream's last, cut short: it declared more payload than the stream holds.
    Frames follow each other by their declared lengths, as the decoder skips a refused one."""
    spans = frame_spans(dec.spec, stream)
    if err.offset is None or not spans or spans[-1].end <= len(stream):
        return False
    last = spans[-1]
    return last.start <= err.offset < last.start + dec.spec.header_size


#: refusals a daemon may make by a rule of its own before the one the spec's decoder names
LOCAL_REFUSALS = ("payload_too_large", "task_too_large", "queue_full")


class QuicxJudge:
    """Every frame the daemon sends decodes for a client; every ``reply`` error is answered
    by a MSG_ERROR with its code (more may come: refusals of well-formed frames)."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self.spec = QuicxDecoder(profile).spec
        self.clients = tuple(r for r in self.spec.roles if r != "daemon")

    def client_decoder(self) -> QuicxDecoder:
        """How the fuzzer reads the daemon: as a client would, a length past
        :data:`~..codecs.quicx.REPLY_PAYLOAD_MAX` refused at once (lengths sent little-endian
        are named so, QX-HDR-5) instead of waited for until the bound."""
        return QuicxDecoder(self.profile, self.clients, max_payload=REPLY_PAYLOAD_MAX)

    def _finding(self, rid: str | None, kind: str, message: str) -> Finding:
        return Finding(requirement_verdict(self.profile, rid), rid, kind, message)

    def judge(self, exp: QuicxExpected, replies: list[Any], closed: bool, timed_out: bool,
              reply_errors: Sequence[ProtocolError] = ()) -> list[Finding]:
        out = [self._finding(e.requirement, "undecodable_reply", str(e)) for e in reply_errors]
        got = Counter(m.fields.get("error_code") for m in replies if m.name == "MSG_ERROR")
        want = Counter(e.error_code for e in exp.errors)
        why = "timed out" if timed_out else "connection closed" if closed else "no reply"
        if reply_errors:
            # the daemon's frames stopped decoding (the finding above): what it sent after
            # that cannot be counted, so no answer is judged missing
            return out
        if sum(got.values()) < len(exp.errors) - exp.optional:
            # a daemon may cap payloads lower than the spec (a local policy the codec allows),
            # so a frame can be refused by another rule first: count MSG_ERRORs, not codes
            missing = self._unanswered(exp, [m.fields.get("error_code") for m in replies
                                             if m.name == "MSG_ERROR"])
            answered: int = sum(got.values())
            short = len(exp.errors) - answered
            if closed and answered > 0:  # it refused a frame, then closed (QX-ERR-6)
                rid = self.spec.semantics["open_after_error"].requirement
                which = "the frames after the connection closed: " + \
                    ", ".join(e.kind for e in missing)
            else:
                rid, which = self._blame(exp, missing, exact=len(missing) == short)
            out.append(self._finding(rid, "lost_reply",
                                     f"{short} of {len(exp.errors)} MSG_ERROR not sent "
                                     f"(missing: {which}; {why})"))
        elif sum(got.values()) >= len(exp.errors) and any(got[c] < n for c, n in want.items()):
            # a daemon may refuse a frame by a rule of its own first (a lower payload cap, a
            # full pool): a code of such a refusal is an observation; any other code in place
            # of the one the spec gives is a wrong answer, under the refusal's rule
            local = {self.spec.error_replies.get(k) for k in LOCAL_REFUSALS}
            missing = self._unanswered(exp, [m.fields.get("error_code") for m in replies
                                             if m.name == "MSG_ERROR"])
            extra = set(got) - set(want) - local
            if missing and extra:
                rid, which = self._blame(exp, missing)
                out.append(self._finding(rid, "wrong_error_code",
                                         f"MSG_ERROR codes {dict(got)} where the spec's decoder "
                                         f"gives {dict(want)} (not answered as the spec says: "
                                         f"{which})"))
            else:
                out.append(Finding(Verdict.INFO, "QX-ERR-3", "other_error_code",
                                   f"MSG_ERROR codes {dict(got)} where the spec's decoder "
                                   f"gives {dict(want)}"))
        if exp.close_error is not None and not closed:
            out.append(self._finding(exp.close_error.requirement, "no_close",
                                     f"connection not closed after {exp.close_error.kind}"))
        return out + self._answers(exp, replies, closed, sum(got.values()) > 0, why)

    def _answers(self, exp: QuicxExpected, replies: list[Any], closed: bool, refused: bool,
                 why: str) -> list[Finding]:
        """Every well-formed request the daemon read gets its answer: a MSG_HEARTBEAT a
        MSG_PONG (where any peer may send one, QX-HB-2), a MSG_READY a MSG_TASK or MSG_WAIT
        (where an empty queue is answered MSG_WAIT, QX-READY-3), a MSG_SUBMIT a MSG_OK or a
        refusal (QX-OK-1), a MSG_STATS a MSG_STATS_RESPONSE
        (where stats are served on this transport, QX-STATS-2) whose figures can be right
        (QX-STATS-5: the pool bytes used within its size, the idle workers among all). Answers
        lost after the daemon refused a frame and closed are its closing (QX-ERR-6)."""
        spec, out = self.spec, []
        want: list[tuple[str, tuple[str, ...], str]] = []
        if set(spec.peer_roles) <= set(spec.flag("heartbeat_from")):
            want.append(("MSG_HEARTBEAT", ("MSG_PONG",), "QX-HB-2"))
        if spec.flag("stats_on_tcp") and "MSG_STATS" in spec.messages:
            want.append(("MSG_STATS", ("MSG_STATS_RESPONSE",), "QX-STATS-2"))
        if spec.flag("wait_when_empty"):  # a READY is answered at once (else it is held)
            want.append(("MSG_READY", ("MSG_TASK", "MSG_WAIT"), "QX-READY-3"))
        # a MSG_SUBMIT is answered MSG_OK or refused: the answers beyond the spec's refusals
        want.append(("MSG_SUBMIT", ("MSG_OK", "MSG_ERROR"), "QX-OK-1"))
        after_close = spec.semantics["open_after_error"].requirement
        for asked, answers, rule in want:
            n = sum(m.name == asked for m in exp.messages)
            got = sum(m.name in answers for m in replies)
            if "MSG_ERROR" in answers:  # those that answer the refused frames do not count
                got -= min(sum(m.name == "MSG_ERROR" for m in replies), len(exp.errors))
            if got < n:
                out.append(self._finding(after_close if closed and refused else rule,
                                         "lost_reply", f"{n - got} of {n} {asked} not "
                                         f"answered {' or '.join(answers)} ({why})"))
        for m in replies:
            if m.name != "MSG_STATS_RESPONSE" or "pmad_bytes_total" not in m.fields:
                continue
            f = m.fields
            if f["pmad_bytes_used"] > f["pmad_bytes_total"] or \
                    f["workers_idle"] > f["workers_total"]:
                out.append(self._finding("QX-STATS-5", "stats_figures",
                                         f"MSG_STATS_RESPONSE figures that cannot be right: {f}"))
        return out

    def _blame(self, exp: QuicxExpected, missing: list[ProtocolError], exact: bool = True
               ) -> tuple[str | None, str]:
        """The rule and the refusals to blame for the ``missing`` answers: themselves, unless
        one shares its code with a refusal that was answered (then any of those may be the
        unanswered one: the rule they share, else the one every refusal rests on, QX-ERR-3)."""
        codes = {e.error_code for e in missing}
        candidates = [e for e in exp.errors if e.error_code in codes]
        if exact and len(candidates) == len(missing):
            return self.spec.error(missing[0].kind).answered_by, \
                ", ".join(e.kind for e in missing)
        rules = {self.spec.error(e.kind).answered_by for e in candidates}
        rid = rules.pop() if len(rules) == 1 else self.spec.error("unknown_type").answered_by
        return rid, "one of " + ", ".join(dict.fromkeys(e.kind for e in candidates))

    @staticmethod
    def _unanswered(exp: QuicxExpected, codes: list[Any]) -> list[ProtocolError]:
        """The expected refusals no MSG_ERROR answers, matching the codes received to the
        refusals in order (each code to the first refusal still open that wants it)."""
        open_ = list(exp.errors)
        for code in codes:
            hit = next((e for e in open_ if e.error_code == code), None)
            if hit is not None:
                open_.remove(hit)
        return open_

    def judge_alive(self, replies: list[Any]) -> list[Finding]:
        if any(m.name == "MSG_PONG" for m in replies):
            return []
        # the profile's own heartbeat rule where an overlay replaced it (1.0.3), else 004's
        rid = next((r for r in ("QX-HB-101", "QX-HB-2") if r in self.profile.requirements),
                   "QX-HB-2")
        return [self._finding(rid, "dead", f"a fresh connection's HEARTBEAT got "
                                           f"{[m.name for m in replies]}")]
