"""The per-case runtime: variables, checks, connections. ``ctx`` of Python cases, and the state
the YAML step interpreters work on.

A :class:`CaseContext` is made fresh for each case by the runner and closed at its end (every
connection it opened is closed). It holds the case's :class:`~.model.CaseTranscript`, the list of
:class:`~.model.Check` objects the verdict is computed from, the variables (``${queue}``,
``save:`` results, ...) and the connections, numbered from 1 in the order they are opened.
:class:`Conn` wraps a recorded :class:`~.wire.Connection` with what both the interpreters and
Python cases need: bunqueue requests get a ``reqId`` and their replies are matched by it (an
inbox keeps every frame received and not yet claimed, so pipelined and out-of-order replies
and unsolicited frames are all found); quicx frames are taken in arrival order. Waiting is
always bounded by a deadline, never a fixed sleep. Subset matching (``$any``, ``$type``,
``$gte``, ``$lte``) and spec error-string matching are in :mod:`.matching`, below this
module, shared by both protocols and the HTTP checks.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from ..codecs.bunqueue import FrameEncoder
from ..codecs.quicx import QuicxEncoder
from ..judge import Verdict, reqid_key, verdict_for
from ..spec import Profile
from ..spec.model import Level
from .matching import view
from .model import Case, CaseTranscript, Check, CheckLevel
from .wire import Closed, Connection, Frame, Garbled, record_send

VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
CLOSED_AFTER_ERROR = "closed after MSG_ERROR"  # signatures of defects (known_defect)
DAEMON_FRAME = "frame"
ERROR_FIELD = "error_code"  # the quicx layout field that makes a message an error message
_LEVEL_RANK = {"MAY": 0, "SHOULD": 1, "MUST": 2}
QUEUE_PREFIX = "qw-"


class CaseAbort(Exception):
    """Stop the case's steps: a check already decided it (not an ERROR)."""


class StepError(Exception):
    """The case could not be run as written (an ERROR of the case, with this message)."""


class Conn:
    """One connection of a case, as cases use it. ``num`` counts from 1 within the case."""

    def __init__(self, ctx: CaseContext, wire: Connection):
        self.ctx = ctx
        self.wire = wire
        self.num = wire.num
        self.role = wire.role
        self.inbox: list[tuple[int, Frame]] = []  # (sequence number, frame) not yet claimed
        self.garbled: list[tuple[int, Garbled]] = []
        self.closed: str | None = None  # why the peer closed, once seen
        self.last_frame: Frame | None = None  # the last frame taken from the wire
        # quicx: a MSG_HEARTBEAT the daemon sends is answered MSG_PONG and kept out of the
        # inbox (as any worker does, QX-HB-2), unless a step waits for one
        self.expect_heartbeat = False
        self.heartbeats = 0  # daemon heartbeats answered so far
        self.seq = 0                    # items taken from the wire so far
        self.close_seq: int | None = None
        self.pending: set[Any] = set()  # reqIds sent and not yet answered (bunqueue)
        self._next_req = 0
        if ctx.protocol == "bunqueue":
            self._encoder: Any = FrameEncoder(ctx.profile)
        else:
            self._encoder = QuicxEncoder(ctx.profile)

    # -- Python-case API ------------------------------------------------------------------------
    def next_reqid(self) -> str:
        self.ctx._reqs += 1
        return f"r{self.ctx._reqs}"

    async def send(self, msg: Any = None, /, **fields: Any) -> Any:
        """Send one message. bunqueue: a map (a ``reqId`` is added if absent; returned).
        quicx: ``send("MSG_SUBMIT", task_type=..., payload=...)`` or ``send({type, fields})``."""
        if self.ctx.protocol == "bunqueue":
            msg = dict(msg or {}, **fields)
            if "reqId" not in msg:
                msg["reqId"] = self.next_reqid()
            await self.send_message(msg)
            return msg["reqId"]
        name, values = quicx_message(msg, fields)
        await self.send_quicx(name, values)
        return None

    async def request(self, msg: Any = None, /, timeout: float | None = None, **fields: Any) -> Any:
        """bunqueue: send and return the reply map matched by reqId; quicx: send and return
        the next message (a ``codecs.quicx.Message``). None when nothing came in time or the
        connection closed (see ``closed``)."""
        deadline = self.ctx.deadline(timeout)
        if self.ctx.protocol == "bunqueue":
            rid = await self.send(msg, **fields)
            frame = await self.wait_reply(rid, deadline)
            return None if frame is None else frame.value
        await self.send(msg, **fields)
        mark = len(self.garbled)
        frame = await self.wait_next(deadline, since=None)
        if frame is None:
            self._garbled_since(mark)
        return None if frame is None else frame.value

    async def recv(self, timeout: float | None = None) -> Any:
        """The next frame that answers no pending request (bunqueue map / quicx Message),
        or None."""
        mark = len(self.garbled)
        frame = await self.wait_next(self.ctx.deadline(timeout), since=None, unsolicited=True)
        if frame is None and self.ctx.protocol == "quicx":
            self._garbled_since(mark)
        return None if frame is None else frame.value

    def _garbled_since(self, mark: int) -> None:
        """quicx, a Python case: instead of the frame it waited for, the daemon sent bytes
        that break a MUST of the frame rules: that rule's finding (once per run), and the case
        stops (:meth:`CaseContext.daemon_frame`)."""
        if self.ctx.protocol != "quicx" or len(self.garbled) <= mark:
            return
        err = self.garbled[mark][1].error
        if self.ctx.level_of(err.get("requirement")) == "MUST":
            self.ctx.daemon_frame(err)

    async def send_raw(self, data: bytes | str, note: str = "", split: int = 0) -> None:
        if isinstance(data, str):
            data = bytes.fromhex(re.sub(r"\s+", "", data))
        await self._send(data, None, note or "raw bytes", split)

    async def close(self) -> None:
        await self.wire.close()

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Whether the peer closes the connection within ``timeout``."""
        return await self.wait_close(self.ctx.deadline(timeout))

    # -- sending (recorded) ---------------------------------------------------------------------
    async def send_message(self, msg: Mapping, split: int = 0) -> None:
        data = self._encode(msg)
        if "reqId" in msg:
            self.pending.add(reqid_key(msg["reqId"]))
        await self._send(data, view(msg), "", split)

    async def send_messages(self, msgs: Sequence[Mapping[str, Any]], split: int = 0) -> None:
        """Several frames in one write (or in ``split``-byte pieces); each is recorded."""
        parts = []
        for m in msgs:
            if "reqId" in m:
                self.pending.add(reqid_key(m["reqId"]))
            parts.append(self._encode(m))
        self._require_open()
        for m, p in zip(msgs, parts):
            record_send(self.ctx.transcript, self.num, p, view(m),
                        f"written in {split}-byte pieces" if split else "")
        await self.wire.write(b"".join(parts), split)

    def _encode(self, msg: Mapping) -> bytes:
        try:
            return self._encoder.encode(msg)
        except Exception as exc:  # noqa: BLE001 - the encoder's refusal is the case's mistake
            raise StepError(f"cannot encode {str(view(msg))[:120]}: {exc}") from None

    async def send_quicx(self, name: str, fields: Mapping[str, Any]) -> None:
        try:
            data = self._encoder.encode(name, **fields)
        except Exception as exc:  # noqa: BLE001 - the encoder's refusal is the case's mistake
            raise StepError(f"cannot encode {name}: {exc}") from None
        await self._send(data, {"type": name, "fields": view(fields)}, "")

    async def _send(self, data: bytes, decoded: Any, note: str, split: int = 0) -> None:
        self._require_open()
        await self.wire.send(data, decoded, note, split)

    @property
    def gone(self) -> str | None:
        """Why the peer closed this connection, when it did (seen or not yet taken)."""
        return self.closed or self.wire.closed_by_peer

    def closed_after_error(self) -> bool:
        """quicx: the daemon closed this connection right after sending it a MSG_ERROR."""
        last = self.last_frame
        return self.gone is not None and last is not None and self.ctx.protocol == "quicx" \
            and getattr(last.value, "name", None) in error_messages(self.ctx.profile.model)

    def _require_open(self) -> None:
        if self.closed_after_error():  # a finding about the daemon, not the case's mistake
            self.ctx.report_closed_after_error(self)
        if self.closed is not None or self.wire.closed_by_peer is not None:
            raise StepError(f"connection {self.num} was closed by the server "
                            f"({self.closed or self.wire.closed_by_peer}); use another conn:")
        if self.wire.closed_by_us:
            raise StepError(f"connection {self.num} was closed by the tester")

    # -- receiving ------------------------------------------------------------------------------
    async def pull(self, deadline: float) -> bool:
        """Take one item from the wire into the inbox; False when the deadline passed first
        or the connection is closed."""
        if self.closed is not None:
            return False
        item = await self.wire.next_item(deadline - time.monotonic())
        if item is None:
            return False
        if isinstance(item, Frame) and self._daemon_heartbeat(item):
            await self._pong()  # answered, not an item of the case
            return True
        self.seq += 1
        if isinstance(item, Frame):
            self.inbox.append((self.seq, item))
            self.last_frame = item
        elif isinstance(item, Garbled):
            self.garbled.append((self.seq, item))
        elif isinstance(item, Closed):
            self.closed = item.reason
            self.close_seq = self.seq
        return True

    def _daemon_heartbeat(self, frame: Frame) -> bool:
        return (self.ctx.protocol == "quicx" and not self.expect_heartbeat
                and getattr(frame.value, "name", None) == "MSG_HEARTBEAT"
                and "MSG_PONG" in self.ctx.profile.model.messages)

    async def _pong(self) -> None:
        """Answer the daemon's MSG_HEARTBEAT (QX-HB-1 lets it send one to an idle peer)."""
        self.heartbeats += 1
        self.ctx.note("the daemon sent MSG_HEARTBEAT; answered MSG_PONG (not a step)", self.num)
        if self.gone is None and not self.wire.closed_by_us:
            await self.send_quicx("MSG_PONG", {})

    def _take(self, pred, start: int = 0) -> Frame | None:
        """The first unclaimed frame from inbox position ``start`` on that ``pred`` accepts."""
        inbox = self.inbox
        for i in range(start, len(inbox)):
            seq, f = inbox[i]
            if pred(seq, f):
                del inbox[i]
                rid = reqid_of(f.value)
                if rid is not None:
                    self.pending.discard(rid)
                return f
        return None

    async def wait_reply(self, rid: Any, deadline: float) -> Frame | None:
        """The frame whose reqId is ``rid`` (None: deadline, close or garbage first)."""
        key = reqid_key(rid)
        return await self._wait_for(lambda _s, fr: reqid_of(fr.value) == key, deadline)

    async def _wait_for(self, pred, deadline: float, rescan: bool = False) -> Frame | None:
        """Take the first frame ``pred`` accepts, pulling more until the deadline. Each frame
        is looked at once (a flood of unclaimed frames costs linear, not quadratic, time)
        unless ``rescan`` (``pred`` depends on state that may change while waiting)."""
        seen = 0  # frames up to this sequence number were looked at
        while True:
            f = self._take(pred, bisect.bisect_right(self.inbox, seen, key=_seq_of))
            if f is not None:
                return f
            seen = 0 if rescan else self.seq
            if self.wire.decoder_stopped and not self.wire.items:
                return None  # no frame can come after bytes the decoder could not trust
            if not await self.pull(deadline):
                return None

    async def wait_next(self, deadline: float, since: int | None, unsolicited: bool = False
                        ) -> Frame | None:
        """The first unclaimed frame (received after item ``since`` when given; answering no
        pending request when ``unsolicited``)."""
        def pred(seq: int, fr: Frame) -> bool:
            if since is not None and seq <= since:
                return False
            return not (unsolicited and self.ctx.protocol == "bunqueue"
                        and reqid_of(fr.value) in self.pending)
        return await self._wait_for(pred, deadline, rescan=unsolicited)

    async def wait_close(self, deadline: float) -> bool:
        while self.closed is None:
            if not await self.pull(deadline):
                break
        return self.closed is not None

    async def wait_anything(self, deadline: float) -> bool:
        """Whether any new item (frame, garbage, close) arrives before the deadline."""
        start = self.seq
        while self.closed is None and self.seq == start:
            if not await self.pull(deadline):
                break
        return self.seq > start

    def frames_since(self, seq: int) -> list[Frame]:
        return [f for s, f in self.inbox if s > seq]

    def garbled_since(self, seq: int) -> list[Garbled]:
        return [g for s, g in self.garbled if s > seq]


class CaseContext:
    """What a case runs with. Python cases get it as ``ctx``."""

    def __init__(self, case: Case, profile: Profile, host: str, port: int, *,
                 timeout: float = 5.0, auth_token: str | None = None,
                 http_target: tuple[str, int] | None = None,
                 defects: dict[Any, str] | None = None):
        self.case = case
        # defects of the target already reported in this run: signature -> the case that
        # reported it (shared by the run's cases, see known_defect)
        self.defects: dict[Any, str] = {} if defects is None else defects
        self.http_target = http_target  # the server's HTTP API (--http-target), when known
        self.profile = profile
        self.protocol = profile.protocol
        self.host, self.port = host, port
        self.timeout = timeout
        self.auth_token = auth_token
        self.transcript = CaseTranscript()  # head and tail kept (model.py)
        self.checks: list[Check] = []
        self.conns: dict[int, Conn] = {}
        self.unimplemented = False
        self.info = case.info  # a logic case may decide at run time that it only observed
        self.step: int | None = None  # the step being run (checks record it)
        self.cleaning = False  # running the case's cleanup: checks become transcript notes
        self._reqs = 0
        self._queues = 3
        # variables of an optional save (path ending in ?) whose reply lacked the path
        self.unsaved: dict[str, str] = {}
        # quicx: the (message, field) each saved variable was read from
        self.origins: dict[str, tuple[str | None, str]] = {}
        slug = re.sub(r"[^a-zA-Z0-9_.:-]", "-", case.id)[:60]
        tag = uuid.uuid4().hex[:8]
        self.vars: dict[str, Any] = {
            "queue": f"{QUEUE_PREFIX}{slug}-{tag}",
            "queue2": f"{QUEUE_PREFIX}{slug}-{tag}-2",
            "queue3": f"{QUEUE_PREFIX}{slug}-{tag}-3",
            "profile": profile.name,
        }

    # -- variables ------------------------------------------------------------------------------
    def var(self, name: str) -> Any:
        """A variable's value (built-ins are made on demand: ``now``, ``uuid``, ``token``)."""
        if name == "now":
            return int(time.time() * 1000)
        if name == "uuid":
            return str(uuid.uuid4())
        if name == "token":
            if not self.auth_token:
                raise StepError("the case uses ${token} but no --auth-token was given")
            return self.auth_token
        try:
            return self.vars[name]
        except KeyError:
            if name in self.unsaved:
                raise StepError(f"variable ${{{name}}} is not set: the reply had no "
                                f"{self.unsaved[name]} (an optional save:)") from None
            raise StepError(f"variable ${{{name}}} is not set (a save: that failed, or a typo)") \
                from None

    def new_queue(self) -> str:
        """Another unique queue name for this case (beyond ``queue``, ``queue2``, ``queue3``)."""
        self._queues += 1
        return f"{self.vars['queue']}-{self._queues}"

    def set_var(self, name: str, value: Any) -> None:
        self.vars[name] = value
        self.unsaved.pop(name, None)

    def subst(self, node: Any, extra: Mapping[str, Any] | None = None) -> Any:
        """``node`` with every ``${name}`` replaced (a whole-string reference keeps its type)."""
        if isinstance(node, str):
            if "${" not in node:
                return node
            m = VAR.fullmatch(node)
            if m:
                return self._lookup(m.group(1), extra)
            return VAR.sub(lambda mm: str(self._lookup(mm.group(1), extra)), node)
        if isinstance(node, dict):
            return {self.subst(k, extra): self.subst(v, extra) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self.subst(v, extra) for v in node]
        return node

    def _lookup(self, name: str, extra: Mapping[str, Any] | None) -> Any:
        if extra and name in extra:
            return extra[name]
        return self.var(name)

    # -- checks ---------------------------------------------------------------------------------
    def level_of(self, requirement: str | None) -> Level:
        req = self.profile.requirements.get(requirement) if requirement else None
        return req.level if req is not None else "MUST"

    def default_requirement(self, tested: Sequence[str] = ()) -> str | None:
        """The requirement of a check that names none: the first of the case's requirements
        among ``tested`` (those the spec ties to what the check looks at: the message and
        fields it expects), else the case's first. ``spec lint`` flags a case whose check
        would take its level from a requirement it does not test."""
        reqs = self.case.requirements
        return next((r for r in reqs if r in tested), reqs[0] if reqs else None)

    def known_defect(self, signature: Any) -> str | None:
        """The case that already reported the defect ``signature`` in this run (None: this is
        its first report, now recorded as this case's). A defect of the target that every
        later case would meet again (a malformed message type, a daemon that closes after
        MSG_ERROR) is then reported once, under its rule, instead of once per case."""
        first = self.defects.setdefault(signature, self.case.id)
        return None if first == self.case.id else first

    def defect(self, signature: Any, requirement: str | None, what: str) -> NoReturn:
        """A defect of the target every later case would meet again: its failed check the
        first time in the run, else an INFO naming the case that reported it
        (:meth:`blocked`); the case stops either way."""
        first = self.known_defect(signature)
        if first is not None:
            self.blocked(first, what, requirement)
        where = "" if self.step is None else f"step {self.step}: "
        self.check(False, f"{where}{what}", requirement=requirement,
                   level=self.level_of(requirement), kind="defect")
        raise CaseAbort()

    def daemon_frame(self, error: Mapping[str, Any], context: str = "") -> NoReturn:
        """The daemon sent a frame that breaks a rule of the frames (``error``: the decoder's
        error): a :meth:`defect` under that rule (``context`` leads its message)."""
        rid = error.get("requirement")
        self.defect((DAEMON_FRAME, error.get("kind"), rid), rid, f"{context}the daemon sent "
                    f"a frame that breaks {rid}: {error.get('message', '')}")

    def report_closed_after_error(self, conn: Conn, context: str = "") -> NoReturn:
        """The case needs connection ``conn``, which the daemon closed after its MSG_ERROR:
        judged once per run by the requirement of the profile's ``open_after_error`` flag
        (QX-ERR-6, a reading: 004 does not say the daemon keeps the connection), then the
        case stops (:class:`CaseAbort`); ``context`` leads the message."""
        rid = self.profile.model.semantics["open_after_error"].requirement
        self.defect((CLOSED_AFTER_ERROR, rid), rid, f"{context}the daemon closed connection "
                    f"{conn.num} after its MSG_ERROR ({conn.gone})")

    def blocked(self, first: str, what: str, requirement: str | None) -> NoReturn:
        """End the case at a defect case ``first`` reported: an INFO observation (not a
        pass: the case is not judged past this step), then :class:`CaseAbort`."""
        self.info = True
        where = "" if self.step is None else f"step {self.step}: "
        self.check(True, f"{where}not judged further: {what} (the defect case "
                   f"{first} reports, under {requirement})", requirement=requirement,
                   level="INFO", kind="blocked")
        raise CaseAbort()

    def check(self, ok: bool, message: str, *, requirement: str | None = None,
              level: CheckLevel | None = None, kind: str = "behaviour", expected: Any = None,
              actual: Any = None) -> Check:
        """Record one judged expectation (defaults: the case's first requirement, its level).

        In a case that only observes (``info``: what the documents are silent on, or a
        queuewire decision), an expectation that does not hold and is no MUST is recorded as an
        INFO observation that held (as a reply's ``shape-observed`` is): only a MUST the
        documents state can fail such a case; anything else leaves it INFO."""
        rid = requirement or self.default_requirement()
        lvl: CheckLevel = level or self.level_of(rid)
        if not ok and self.info and not self.cleaning and verdict_for(lvl) is not Verdict.FAIL:
            lvl, ok = "INFO", True
            message = f"observed, not judged (the case only observes; {rid} is no stated " \
                      f"MUST): {message}"
        c = Check(rid, lvl, bool(ok), kind, message, view(expected), view(actual), self.step)
        if self.cleaning:  # only what went wrong is worth a note; the bytes are recorded
            if not ok:
                self.note(f"cleanup (not judged): {message}")
            return c
        self.checks.append(c)
        return c

    def begin_step(self, n: int) -> None:
        """Step ``n`` begins: its checks and the events it records carry its number (the
        transcript's, :class:`~.model.WireEvent`), whichever protocol's step it is."""
        self.step = n
        self.transcript.step, self.transcript.cleaning = n, self.cleaning

    def note(self, text: str, conn: int = 0) -> None:
        """A transcript note (``conn`` 0: about the case, not one connection)."""
        self.transcript.add(conn, "note", note=text)

    def deadline(self, timeout: float | None = None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    # -- connections ----------------------------------------------------------------------------
    async def connect(self, role: str | None = None, *, auth: bool = True) -> Conn:
        """Open a new connection (numbered after the existing ones). bunqueue: with an
        ``--auth-token``, it authenticates first unless ``auth=False``. quicx: ``role``
        (default producer) chooses how replies are decoded."""
        num = max(self.conns, default=0) + 1
        return await self._open(num, role, auth)

    async def conn(self, num: int = 1, role: str | None = None, auth: bool = True) -> Conn:
        """Connection ``num``, opened on first use. During cleanup a connection that was
        closed (by either side) is opened again under the same number."""
        c = self.conns.get(num)
        if c is not None and self.cleaning and (
                c.closed is not None or c.wire.closed_by_peer is not None or c.wire.closed_by_us):
            c = None
        if c is None:
            c = await self._open(num, role or (self.conns[num].role if num in self.conns else None),
                                 auth)
        return c

    async def _open(self, num: int, role: str | None, auth: bool) -> Conn:
        if self.protocol == "quicx":
            role = role or "producer"
        wire = Connection(self.transcript, num, self.host, self.port, self.protocol,
                          self.profile, role)
        await wire.open(self.timeout)
        c = Conn(self, wire)
        self.conns[num] = c
        if self.protocol == "bunqueue" and auth and self.auth_token:
            rid = f"auth{num}"
            await c.send_message({"cmd": "Auth", "token": self.auth_token, "reqId": rid})
            reply = await c.wait_reply(rid, self.deadline())
            if reply is None or not (isinstance(reply.value, dict) and reply.value.get("ok") is True):
                got = "no reply" if reply is None else reply.view
                raise StepError(f"connection {num}: Auth with --auth-token was refused: {got}")
        return c

    async def http(self, method: str, path: str, *, json: Any = None,
                   headers: Mapping[str, str] | None = None, auth: bool = True,
                   stream: bool = False, timeout: float | None = None) -> Any:
        """One request to the HTTP target, recorded (an ``httpapi.HttpReply``; its ``error``
        says why no response came). A StepError when the run has no HTTP target."""
        from . import httpapi

        if self.http_target is None:
            raise StepError("the case makes an HTTP request but the run has no --http-target")
        return await httpapi.request(self.transcript, self.http_target, method, path,
                                     json_body=json, headers=dict(headers or {}),
                                     token=self.auth_token if auth else None, stream=stream,
                                     timeout=self.timeout if timeout is None else timeout)

    async def close_all(self) -> None:
        for c in list(self.conns.values()):
            await c.close()


# ------------------------------------------------------------------------------ matching

def _seq_of(item: tuple[int, Frame]) -> int:
    return item[0]


def reqid_of(value: Any) -> Any:
    """The reqId identity of a decoded reply (the judge's rule), None when it is no map."""
    return reqid_key(value.get("reqId")) if isinstance(value, dict) else None


def get_path(value: Any, path: str) -> Any:
    """``jobs.0.id`` of a decoded reply; KeyError when a part is missing."""
    node = value
    for part in str(path).split(".") if path != "" else []:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        elif hasattr(node, "fields") and part in getattr(node, "fields", {}):
            node = node.fields[part]
        else:
            raise KeyError(path)
    return node


def strongest(levels: list[CheckLevel]) -> CheckLevel:
    return max(levels, key=lambda lv: _LEVEL_RANK.get(lv, 2)) if levels else "MUST"


def quicx_message(msg: Any, fields: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(msg, str):
        return msg, dict(fields)
    if isinstance(msg, dict) and "type" in msg:
        return msg["type"], dict(msg.get("fields") or {}, **fields)
    raise StepError(f"a quicx message is a type name or {{type, fields}}, not {msg!r}")


async def sleep_ms(ms: float) -> None:
    await asyncio.sleep(max(ms, 0) / 1000.0)


def error_messages(spec: Any) -> set[str]:
    """The quicx messages that carry an error code (MSG_ERROR), by the layout field."""
    return {m.name for m in spec.messages.values() if any(f.id == ERROR_FIELD for f in m.layout)}
