"""The registry of bunqueue frame checks, and the one connection judge that applies them.

Rules
-----
* Every rule about a bunqueue frame on the wire is written once, here, as a registered check
  (:data:`CHECKS`, :func:`check`) with one signature, ``fn(exchange, frame) -> findings``:
  a check is shown one :class:`Frame` (a request, a reply with the request it answers, a
  pushed job event, or a frame that did not decode) and the :class:`BunqueueExchange` it
  belongs to, and gives :class:`~queuewire.judge.findings.Finding` values.
* A finding's verdict is :func:`~queuewire.judge.verdicts.requirement_verdict` of the
  requirement it cites, capped by :func:`~queuewire.judge.verdicts.reading` where the check
  rests on a reading; never decided by a tool.
* Every tool that judges bunqueue frames judges through :class:`BunqueueExchange`: the tap and
  the trace pipeline (:mod:`queuewire.traffic.bunqueue`), ``conform client``'s checker
  (:mod:`queuewire.conformance.client.checker`) and the fuzz oracles
  (:mod:`queuewire.fuzz.oracles`, whose reply checks are :func:`judge_reply`). What a tool adds
  on top is its own context: the checker's scenario rules (Auth first with a token, lock
  tokens on ACK), the oracles' case-level matching (lost and duplicated replies, closes).

Design
------
:class:`BunqueueExchange` is one connection seen from the middle, sans-IO like h11's
``Connection``: it is told each client frame (:meth:`BunqueueExchange.request`) and each
server frame (:meth:`BunqueueExchange.reply`), pairs replies with requests by reqId
(:func:`~queuewire.judge.reqid.reqid_key`; without one, in order), and returns the findings
of the registered checks. It keeps only the pairing state: for each request in flight its
command, the time it was sent and, for a request that broke a rule, the request and its
violations (what a reply to it is judged against: BQ-ENV-6, echoed fields).

The request path is the hot path of the tap: the validator's compiled ``request_is_valid``
first, the slow ``request_violations`` only for a request that fails it; likewise for
replies. The exchange establishes the facts the request checks read (the request broke its
schema, reused a reqId in flight, came without one while others wait, the opening is still
being judged) and runs them only when one holds; a reply runs the reply checks unless
:func:`quiet_reply` says there is nothing to find (a valid success reply to a valid request).
With ``count`` on (the checker's "N frames checked"), every check runs on every frame.

Seams
-----
``CHECKS`` is the registry (name -> :class:`Check`); the docs and the cross-tool test
(``tests/judge/test_one_registry.py``) read it. :func:`judge_reply` is the reply checks as a
function of (request, reply), for a tool that pairs replies itself (the fuzz oracles).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..codecs.bunqueue import UNDEFINED
from ..codecs.errors import ProtocolError, Violation
from ..codecs.msgpack_forms import WireForm, may_have_forms, sender_forms
from ..codecs.validation import BunqueueValidator
from ..spec import Profile
from .findings import Finding
from .opening import HELLO, OPENING_RULE, opens_with_hello
from .reqid import reqid_key
from .verdicts import Verdict, requirement_verdict

__all__ = ["CHECKS", "REQUEST_CHECKS", "BunqueueExchange", "Check", "Frame", "Judgement", "Pending",
           "check", "judge_reply", "quiet_reply"]

UNREADABLE = "(unreadable)"
NO_CMD = "(no cmd)"
EVENT = "(job event)"


@dataclass(slots=True)
class Pending:
    """A request in flight: its command, when it was sent, and (only when it broke a rule)
    the request and its violations."""

    command: str
    sent: int
    key: Any = None                     # its reqId's key (None: it had none)
    bad: tuple[Any, tuple[Violation, ...]] | None = None
    error: ProtocolError | None = None  # a frame that did not decode (answered without reqId)
    reqid_is_str: bool = True


@dataclass(slots=True)
class Frame:
    """What a check is shown: one frame of a connection."""

    direction: str                  # c2s | s2c
    message: Any                    # the decoded frame; None for one that did not decode
    t_ns: int
    command: str | None             # a request's command; a reply: its request's (None: none)
    error: ProtocolError | None = None
    request: Pending | None = None  # a reply: the request it answers (None: unpaired)
    shared: bool = False            # a reply whose reqId requests in flight share


@dataclass(frozen=True, slots=True)
class Check:
    """One registered rule: ``on`` which frames it runs (request, reply, event, unreadable),
    the requirement it judges by (its counter of frames looked at), what it says."""

    name: str
    on: str
    requirement: str
    doc: str
    fn: Callable[[BunqueueExchange, Frame], Iterable[Finding]]


#: The registry: every bunqueue frame rule, by name, in the order they run.
CHECKS: dict[str, Check] = {}


CheckFn = Callable[["BunqueueExchange", "Frame"], Iterable[Finding]]


def check(name: str, on: str, requirement: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn(exchange, frame) -> findings`` as the check ``name``."""
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = Check(name, on, requirement, (fn.__doc__ or "").strip(), fn)
        return fn
    return register


class Judgement:
    """A profile's judging material, built once and shared by every exchange: the validator,
    the rule each reqId check cites, the spec's error strings."""

    def __init__(self, profile: Profile, validator: BunqueueValidator | None = None):
        self.profile = profile
        self.validator = validator or BunqueueValidator(profile)
        spec = profile.model
        self.commands = frozenset(spec.commands)
        # the stated rule where the profile has it (000: "unique reqId identifiers"), else
        # BQ-PIPE-3's "match by reqId" read as needing one (a reading: NON-STRICT)
        self.unique_reqid = "BQ-PIPE-4" if "BQ-PIPE-4" in profile.requirements else "BQ-PIPE-3"
        self.unique_reqid_verdict = requirement_verdict(profile, self.unique_reqid) \
            if self.unique_reqid == "BQ-PIPE-4" else Verdict.NON_STRICT
        # how a client opens a connection (Hello first), where the profile has the rule
        self.judges_opening = OPENING_RULE in profile.requirements and HELLO in self.commands
        events = profile.tree.get("job_events") or {}
        frame = events.get("frame") or {}
        self.event_type = ((frame.get("properties") or {}).get("type") or {}).get("const")
        self.error_patterns = [e.pattern for e in spec.errors.values()]
        # forms of a value a client may not write (msgpack.client_forms: bunqueue/v3's int64
        # rule), read from a request's bytes when the tool has them
        self.client_forms = spec.client_forms
        self.int_range = spec.int_range

    def verdict(self, requirement: str | None) -> Verdict:
        return requirement_verdict(self.profile, requirement)

    def plausible(self, command: str, reply: Any) -> bool:
        """A success reply with every field ``command``'s reply requires and none it does not
        name (whatever their values): that command's reply, though perhaps not a valid one."""
        if type(reply) is not dict or reply.get("ok") is not True or command not in self.commands:
            return False
        validator = self.validator   # neither counts the envelope's reqId
        return not validator.missing_fields(command, reply, reply=True) and \
            not validator.extra_fields(command, reply, reply=True)


# -- the checks -------------------------------------------------------------------------------
@check("unreadable", "unreadable", "BQ-FRAME-1")
def _unreadable(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A frame that does not decode breaks the rule its decoder error cites (BQ-FRAME-*,
    BQ-MSGPACK-*)."""
    err = frame.error
    assert err is not None
    return (ex.finding(err.requirement, err.kind, err.detail, frame),)


@check("request_schema", "request", "BQ-ENV-6")
def _request_schema(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A request is a map with a string cmd (BQ-ENV-1) naming a command (BQ-ENV-5) whose
    schema it follows, limits included; each violation cites its own requirement."""
    bad = ex.last_bad
    if bad is None:
        return ()
    return [ex.finding(v.requirement, "request_schema", str(v), frame) for v in bad[1]]


@check("reqid_in_flight", "request", "BQ-PIPE-4")
def _reqid_in_flight(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A pipelining client gives every request a reqId no request still in flight on the
    connection carries (000: "unique reqId identifiers"; where a profile lacks BQ-PIPE-4,
    BQ-PIPE-3's "match by reqId" read as needing one, NON-STRICT)."""
    if not ex.last_reused:
        return ()
    j = ex.judgement
    return (ex.finding(j.unique_reqid, "reqid_in_flight",
                       f"reqId {frame.message.get('reqId')!r} is already in flight on this "
                       "connection (its replies cannot be told apart)", frame,
                       level=j.unique_reqid_verdict),)


@check("reqid_missing", "request", "BQ-PIPE-4")
def _reqid_missing(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A request sent while others are in flight carries a reqId (a pipelining client gives
    every request one, BQ-PIPE-4): without one, its reply cannot be matched."""
    waiting = ex.last_waiting
    if not waiting or type(frame.message) is not dict or "reqId" in frame.message:
        return ()
    j = ex.judgement
    return (ex.finding(j.unique_reqid, "reqid_missing", f"{frame.command} without reqId while "
                       f"{waiting} request(s) are in flight", frame, level=j.unique_reqid_verdict),)


@check("client_forms", "request", "BQ-MSGPACK-203")
def _client_forms(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A client writes none of the forms its profile's ``msgpack.client_forms`` forbid
    (bunqueue/v3: no msgpack int64/uint64 anywhere, BQ-MSGPACK-203; an integer outside int32
    as float64, BQ-MSGPACK-204; no extension type, BQ-MSGPACK-202), read from the request's
    bytes (a tool that passes them: the tap, the trace pipeline, ``conform client``)."""
    rules = ex.judgement.client_forms
    out = []
    for form in ex.last_forms:
        what = (f"extension type {form.value}" if form.form == "ext"
                else f"the integer {form.value} written as msgpack {form.form}")
        out.append(ex.finding(rules[form.form], "client_forms",
                              f"{what} at payload byte {form.offset}", frame))
    return out


@check("no_hello", "request", OPENING_RULE)
def _opening(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A client opens a connection with Hello, or Auth then Hello (BQ-HELLO-1, SHOULD)."""
    opening = ex.opening
    if opening is None:
        return ()
    opening.append(frame.command or NO_CMD)
    opened_well = opens_with_hello(opening)
    if opened_well is None:
        return ()
    ex.opening = None
    if opened_well:
        return ()
    return (ex.finding(OPENING_RULE, "no_hello",
                       f"the connection opened with {' then '.join(opening)}, not Hello "
                       "(or Auth then Hello)", frame),)


@check("reply_schema", "reply", "BQ-ENV-3")
def _reply(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A reply is valid for its request (:func:`judge_reply`): a success reply follows its
    command's reply schema and answers a known command (BQ-ENV-5) and a valid request
    (BQ-ENV-6); an error reply the shared error shape (BQ-ENV-4); a reply to a frame that did
    not decode is an error. Where requests in flight share its reqId, which one it answers
    cannot be told: its violations are INFO."""
    pending = frame.request
    if pending is None:
        return ()
    return judge_reply(ex.judgement, pending, frame.message, shared=frame.shared,
                       finding=lambda rid, kind, message, level=None:
                       ex.finding(rid, kind, message, frame, level=level))


@check("event_schema", "event", "BQ-EVENT-102")
def _event(ex: BunqueueExchange, frame: Frame) -> Iterable[Finding]:
    """A pushed job event (a frame without reqId of the profile's job event type) follows
    that frame's schema."""
    validator = ex.judgement.validator
    if validator.event_is_valid(frame.message):
        return ()
    return [ex.finding(v.requirement, "event_schema", str(v), frame)
            for v in validator.event_violations(frame.message)]


#: The checks of a client's frames (a request, a frame that did not decode): what a tool
#: runs that judges a client but not the server's replies (conform client, the fuzz cases).
REQUEST_CHECKS: tuple[str, ...] = tuple(name for name, c in CHECKS.items()
                                        if c.on in ("request", "unreadable"))


def judge_reply(j: Judgement, pending: Pending, reply: Any, *, shared: bool = False,
                finding: Callable[..., Finding] | None = None) -> list[Finding]:
    """The findings on ``reply`` as the answer to ``pending`` (see the ``reply_schema``
    check). ``finding(rid, kind, message, level=None)`` builds each (default: a Finding on a
    whole exchange)."""
    make = finding or (lambda rid, kind, message, level=None:
                       Finding(level if level is not None else j.verdict(rid), rid, kind, message))
    if type(reply) is not dict:
        return [make("BQ-ENV-3", "invalid_reply", f"reply is not a map: {_short(reply)}")]
    if pending.error is not None and reply.get("ok") is not False:
        return [make(pending.error.requirement, "accepted_bad_frame",
                     f"{pending.error.kind} answered {_short(reply)}")]
    cmd = pending.command
    body = reply
    if not pending.reqid_is_str and "reqId" in reply:
        body = {k: v for k, v in reply.items() if k != "reqId"}  # echoed verbatim
    ok = body.get("ok") is True
    out: list[Finding] = []
    bad = pending.bad
    if ok:   # (a frame that did not decode was answered ok: returned above)
        if cmd not in j.commands:
            return [make("BQ-ENV-5", "accepted_unknown",
                         f"{cmd} (not a command of the profile) answered ok")]
        if bad is not None:
            out.append(make("BQ-ENV-6", "accepted_invalid",
                            f"{cmd} breaking {bad[1][0]} answered ok"))
    # from here a success reply answers a known command; an error reply is judged by the
    # shared error shape, whatever its command
    validator = j.validator
    if validator.reply_is_valid(cmd, body, ok=ok):
        violations: tuple[Violation, ...] = ()
    else:
        violations = validator.reply_violations(cmd, body)
    for v in violations:
        if bad is not None and _echoes(bad[0], bad[1], body, v):
            # the request broke this field's rule and the reply gives back what it sent: the
            # request's fault (BQ-ENV-6); the documents' reply shapes are those of valid ones
            out.append(make(v.requirement, "echoed_invalid",
                            f"reply to {cmd}: {v} (as the request sent it)", Verdict.INFO))
        elif shared:
            out.append(make(v.requirement, "reply_schema",
                            f"{v} (as a reply to {cmd}; its reqId is shared by requests in "
                            "flight, so which one it answers cannot be told)", Verdict.INFO))
        else:
            out.append(make(v.requirement, "reply_schema", str(v)))
    error = reply.get("error")
    if reply.get("ok") is False and isinstance(error, str) and not any(
            p.fullmatch(error) for p in j.error_patterns):
        out.append(make("BQ-ENV-4", "undocumented_error",
                        f"error string {error!r:.80} is none of the spec's", Verdict.INFO))
    return out


def quiet_reply(j: Judgement, pending: Pending, reply: Any) -> bool:
    """True only when :func:`judge_reply` finds nothing: a success reply, valid for a known
    command, to a request that broke no rule (the hot path: the compiled check alone).
    False says nothing (judge_reply decides)."""
    return (type(reply) is dict and reply.get("ok") is True and pending.bad is None
            and pending.error is None and pending.reqid_is_str and pending.command in j.commands
            and j.validator.reply_is_valid(pending.command, reply))


# -- the exchange -----------------------------------------------------------------------------
class BunqueueExchange:
    """One bunqueue connection, judged frame by frame (see the module's Design).

    ``checks``: the names of the registered checks to run (default: all). ``partial``: the
    connection's opening and earlier traffic are elsewhere (a later file of a recording): the
    opening is not judged, and a reply nothing here was sent for is not a finding (the caller
    pairs it across files). ``count``: keep :attr:`looked` (frames each check looked at)."""

    __slots__ = ("_guessed", "_is_valid", "_no_id", "_on", "conn_id", "in_flight", "judgement",
                 "last_bad", "last_forms", "last_reused", "last_waiting", "looked", "opening",
                 "partial",
                 "unpaired", "unpaired_key")

    def __init__(self, judgement: Judgement, conn_id: int | None = None, *,
                 checks: Iterable[str] | None = None, partial: bool = False, count: bool = False):
        self.judgement = judgement
        self.conn_id = conn_id
        self.partial = partial
        names = list(CHECKS) if checks is None else list(checks)
        unknown = [n for n in names if n not in CHECKS]
        if unknown:
            raise ValueError(f"unknown checks {unknown}; known: {sorted(CHECKS)}")
        self._on: dict[str, list[Check]] = {}
        for name in names:
            self._on.setdefault(CHECKS[name].on, []).append(CHECKS[name])
        self.looked: Counter[str] | None = Counter() if count else None
        self.in_flight: dict[Any, Pending | deque[Pending]] = {}
        self._no_id: deque[Pending] = deque()   # requests answered without reqId, in order
        self._guessed: set[Any] = set()   # reqId groups where a reply's request was a guess
        self._is_valid = judgement.validator.request_is_valid
        judges_opening = judgement.judges_opening and not partial and "no_hello" in names
        self.opening: list[str] | None = [] if judges_opening else None
        # what the request being judged did (read by its checks)
        self.last_bad: tuple[Any, tuple[Violation, ...]] | None = None
        self.last_forms: list[WireForm] = []
        self.last_reused = False
        self.last_waiting = 0
        self.unpaired: str | None = None   # why the last reply answered nothing
        self.unpaired_key: Any = None

    def finding(self, rid: str | None, kind: str, message: str, frame: Frame,
                level: Verdict | None = None) -> Finding:
        return Finding(level if level is not None else self.judgement.verdict(rid), rid, kind,
                       message, self.conn_id, frame.direction, frame.command, frame.t_ns)

    def _run(self, on: str, frame: Frame) -> list[Finding]:
        out: list[Finding] = []
        looked = self.looked
        for c in self._on.get(on, ()):
            found = c.fn(self, frame)
            if found:
                out.extend(found)
            if looked is not None:
                looked[c.name] += 1
        return out

    # -- client to server
    def request(self, message: Any, t_ns: int = 0, error: ProtocolError | None = None, *,
                expect_reply: bool = True, payload: bytes | memoryview | None = None,
                ) -> tuple[str, list[Finding]]:
        """Judge a client frame (a decoded ``message``, or the ``error`` of one that did not
        decode); returns its command and the findings. It is then in flight until a reply
        answers it (for an ``error``, unless ``expect_reply`` is off: the caller's server
        does not answer one). ``payload``, the frame's MessagePack bytes (without the length
        prefix), lets the ``client_forms`` check read how values were written."""
        if error is not None:
            # bunqueue answers an unreadable frame without reqId (invalid_command_format)
            if expect_reply:
                self._no_id.append(Pending(UNREADABLE, t_ns, error=error))
            return UNREADABLE, self._run("unreadable", Frame("c2s", None, t_ns, None, error))
        is_map = type(message) is dict
        cmd = message.get("cmd") if is_map else None
        name = cmd if type(cmd) is str else NO_CMD
        bad = None if self._is_valid(message) else \
            (message, self.judgement.validator.request_violations(message))
        no_id = self._no_id
        in_flight = self.in_flight
        waiting = len(no_id) + len(in_flight)
        req_id = message.get("reqId", UNDEFINED) if is_map else UNDEFINED
        reused = False
        if req_id is UNDEFINED:
            no_id.append(Pending(name, t_ns, None, bad))
            quiet = bad is None and not waiting
        else:
            quiet = bad is None
            if type(req_id) is str:
                entry = Pending(name, t_ns, req_id, bad)
                key: Any = req_id
            else:
                key = reqid_key(req_id)
                entry = Pending(name, t_ns, key, bad, reqid_is_str=False)
            held = in_flight.get(key)
            if held is None:
                in_flight[key] = entry
            else:
                reused = True
                if isinstance(held, deque):
                    held.append(entry)
                else:
                    in_flight[key] = deque((held, entry))
        forms: list[WireForm] = []
        rules = self.judgement.client_forms
        if rules and payload is not None and may_have_forms(payload):
            forms = [f for f in sender_forms(payload, self.judgement.int_range) if f.form in rules]
        if quiet and not reused and not forms and self.opening is None and self.looked is None:
            return name, []   # none of the facts the request checks read: nothing to find
        self.last_bad, self.last_waiting, self.last_reused = bad, waiting, reused
        self.last_forms = forms
        return name, self._run("request", Frame("c2s", message, t_ns, name))

    # -- server to client
    def reply(self, message: Any, t_ns: int = 0, error: ProtocolError | None = None
              ) -> tuple[Pending | None, list[Finding]]:
        """Judge a server frame; returns the request it answered (None: none, and
        :attr:`unpaired` says why: "unreadable", "event", "no_request" (no reqId, and no
        request without one waits) or "unknown_reqid" (:attr:`unpaired_key` is its key))
        and the findings."""
        self.unpaired = None
        if error is not None:
            self.unpaired = "unreadable"
            return None, self._run("unreadable", Frame("s2c", None, t_ns, None, error))
        if type(message) is not dict:
            if not self._no_id:
                self.unpaired = "no_request"
                return None, [self.finding("BQ-ENV-3", "invalid_reply", "reply is not a map: "
                                           f"{_short(message)}", Frame("s2c", message, t_ns, None))]
            return self._answered(self._no_id.popleft(), message, t_ns)
        req_id = message.get("reqId", UNDEFINED)
        if req_id is UNDEFINED:
            j = self.judgement
            if j.event_type is not None and message.get("type") == j.event_type:
                # a pushed job event (BQ-EVENT-102): answers nothing; its shape is judged
                self.unpaired = "event"
                return None, self._run("event", Frame("s2c", message, t_ns, EVENT))
            if not self._no_id:
                self.unpaired = "no_request"
                if self.partial:
                    return None, []
                return None, [self.finding(   # the documents are silent: INFO
                    None, "reply_unpaired", "a frame without reqId that answers no request seen "
                    "without one", Frame("s2c", message, t_ns, None))]
            return self._answered(self._no_id.popleft(), message, t_ns)
        key = req_id if type(req_id) is str else reqid_key(req_id)
        held = self.in_flight.pop(key, None)
        if held is None:
            self.unpaired, self.unpaired_key = "unknown_reqid", key
            if self.partial:
                return None, []
            return None, [self.finding(
                "BQ-ENV-2", "reqid_unknown", f"a reply with reqId {req_id!r}, which no request "
                "in flight carries", Frame("s2c", message, t_ns, None), level=Verdict.NON_STRICT)]
        if not isinstance(held, deque):
            return self._answered(held, message, t_ns)
        # the client sent this reqId more than once (reported on the client): the reply
        # answers the first of those requests it is a valid reply to, in the order they were
        # sent (a long poll may be answered after a later Ping); else the one request whose
        # command's reply fields it has (the fuzz oracles' "plausible"), judged against it;
        # when neither tells, which one it broke cannot be told, so its shape is INFO, not
        # blamed on the server
        index = next((i for i, p in enumerate(held) if self._fits(p, message)), None)
        if index is None:
            plausible = [i for i, p in enumerate(held)
                         if self.judgement.plausible(p.command, message)]
            index = plausible[0] if len(plausible) == 1 else None
        # the last one left is answered by elimination, unless an earlier reply of the group
        # was a guess (then this one may be the guessed request's)
        shared = index is None and (len(held) > 1 or key in self._guessed)
        pending = held[index or 0]
        del held[index or 0]
        if held:  # the rest stay a group (a deque, even of one)
            self.in_flight[key] = held
            if shared:
                self._guessed.add(key)
        else:
            self._guessed.discard(key)
        return self._answered(pending, message, t_ns, shared=shared)

    def settle(self, request: Any) -> Pending | None:
        """``request`` was answered (the caller sent the reply itself, as ``conform client``'s
        server does): it is no longer in flight. Returns its entry (None: it was not)."""
        rid = request.get("reqId", UNDEFINED) if type(request) is dict else UNDEFINED
        if rid is UNDEFINED:
            return self._no_id.popleft() if self._no_id else None
        key = rid if type(rid) is str else reqid_key(rid)
        held = self.in_flight.pop(key, None)
        if isinstance(held, deque):
            first = held.popleft()
            if held:
                self.in_flight[key] = held
            return first
        return held

    def _fits(self, pending: Pending, message: dict[str, Any]) -> bool:
        return all(f.level is Verdict.INFO for f in judge_reply(self.judgement, pending, message))

    def _answered(self, pending: Pending, message: Any, t_ns: int,
                  shared: bool = False) -> tuple[Pending | None, list[Finding]]:
        if self.looked is None and quiet_reply(self.judgement, pending, message):
            return pending, []
        frame = Frame("s2c", message, t_ns, pending.command, request=pending, shared=shared)
        return pending, self._run("reply", frame)

    # -- what is left
    def open_ends(self) -> list[Pending]:
        """The requests still waiting for a reply: those without reqId in order, then the
        rest."""
        out = list(self._no_id)
        for held in self.in_flight.values():
            out.extend(held if isinstance(held, deque) else (held,))
        return out

    @property
    def waiting(self) -> int:
        """How many requests wait for a reply."""
        return len(self._no_id) + sum(len(h) if isinstance(h, deque) else 1
                                      for h in self.in_flight.values())


_REQUIRED = re.compile(r'"(.*)" is a required property')


def _fields(path: str, message: str) -> list[str]:
    """The field path a violation names: its JSON pointer, plus the missing property of a
    "required" one."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    m = _REQUIRED.fullmatch(message)
    return parts + [m.group(1)] if m else parts


def _echoes(request: Any, bad: tuple[Violation, ...], reply: dict[str, Any], v: Violation) -> bool:
    """Whether reply violation ``v`` is at a field of the request's own violations (``bad``)
    and the reply holds there exactly what the request sent (both absent counts)."""
    if type(request) is not dict:
        return False
    where = _fields(v.path, v.message)
    if not where:
        return False
    name = where[-1]
    broken = {f[0] for f in (_fields(b.path, b.message) for b in bad) if f}
    if name not in broken:
        return False
    value: Any = reply
    for part in where:
        if type(value) is dict:
            value = value.get(part, UNDEFINED)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False
    return reqid_key(value) == reqid_key(request.get(name, UNDEFINED))


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 100 else text[:97] + "..."
