"""Which profile does a server speak? Probe it and score every profile of its protocol.

Every probe is derived from the profiles' data, and only probes on which the candidate
profiles disagree are sent (a probe all profiles agree on is no evidence). A probe has, per
profile, the *expected* observation (a short normalised string, or None when the profile's
data says nothing about it) and the *observed* one; a profile scores a point per probe whose
expectation equals the observation, out of the probes it has an expectation for.

bunqueue (one connection through the runner's :class:`~.context.CaseContext`, ``Auth`` first
when a token is given):

* ``Hello`` once per distinct ``protocol_version`` of the profiles: a profile speaking that
  version expects ``ok protocolVersion=V capabilities=[...]`` (its own capabilities);
* every command some profiles have and others lack (``SubscribeEvents``, ...), sent with its
  required fields: ``known`` (any reply but the spec's ``unknown_command`` error) or
  ``unknown command``;
* where the profiles' ``semantics.legacy_data_name`` differ: ``PUSH`` with ``data.name`` and
  no top-level name, then ``GetJob``: ``name taken from data`` or ``name kept in data`` (the
  probe queue is obliterated afterwards).

quicx (raw frames; the header layout is the profiles' ``header``):

* one frame with an empty payload, on a fresh connection, for every opcode up to one past the
  highest: where a profile's data fixes the daemon's reaction (an opcode it does not define:
  ``unknown_type``; a reserved one: ``reserved_type``; one not on TCP: ``not_on_tcp``; one
  only the daemon sends: ``wrong_direction``; its error message from a peer:
  ``inbound_error``), the expectation is that protocol error's reaction: ``frame 0xTT,
  payload 0xCC…`` (the error message's opcode and the error code's value) or ``closed``;
* ``MSG_SUBMIT`` then ``MSG_READY`` on a second connection: the opcode of the ``MSG_TASK``
  that comes back (the task is then completed with the matching profile's ``MSG_DONE``).

The best profile is the one with the highest share of matching probes; the match is *clear*
when that share is at least one half and strictly higher than every other profile's, except
profiles that refine the best one (its overlays and more: bunqueue/v3 refines bunqueue/2.9.5)
and fit every probe alike: where the probes cannot tell them apart, the plainest of them is
named and the others are listed as fitting too (``also_fit``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..spec import Profile, load_profile, plainest, profile_names
from ..spec.bunqueue import error_pattern
from .model import Case


@dataclass
class Probe:
    name: str
    sent: str
    expected: dict[str, str | None]  # profile -> expected observation (None: no expectation)
    observed: str = "(not run)"

    def verdict(self, profile: str) -> bool | None:
        exp = self.expected.get(profile)
        return None if exp is None else exp == self.observed


@dataclass
class Detection:
    protocol: str
    target: str
    profiles: list[str]
    probes: list[Probe] = field(default_factory=list)

    def score(self, profile: str) -> tuple[int, int]:
        votes = [p.verdict(profile) for p in self.probes]
        return sum(1 for v in votes if v), sum(1 for v in votes if v is not None)

    def ratio(self, profile: str) -> float:
        hit, of = self.score(profile)
        return hit / of if of else 0.0

    def _tied(self) -> list[str]:
        """The profiles with the highest share of matching probes."""
        top = max((self.ratio(p) for p in self.profiles), default=0.0)
        return [p for p in self.profiles if self.ratio(p) == top] if top > 0 else []

    @property
    def best(self) -> str | None:
        """The profile the probes fit best; of several that fit equally, the one the others
        refine (:func:`~queuewire.spec.plainest`: bunqueue/2.9.5 before bunqueue/v3, which
        adds only what no probe told apart)."""
        tied = self._tied()
        return (plainest(tied) or tied[0]) if tied else None

    @property
    def tied(self) -> list[str]:
        """The other profiles that fit the probes as well as :attr:`best`."""
        best = self.best
        return [p for p in self._tied() if p != best]

    @property
    def clear(self) -> bool:
        best = self.best
        if best is None or self.ratio(best) < 0.5:
            return False
        tied = self._tied()
        # profiles that tie only because the probes split them are not alike: no clear match
        alike = all(len({probe.verdict(p) for p in tied}) == 1 for probe in self.probes)
        return alike and plainest(tied) == best

    def as_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol, "target": self.target, "best": self.best,
            "clear": self.clear, "also_fit": self.tied,
            "scores": {p: {"matched": self.score(p)[0], "of": self.score(p)[1],
                           "ratio": round(self.ratio(p), 3)} for p in self.profiles},
            "probes": [{"name": p.name, "sent": p.sent, "expected": p.expected,
                        "observed": p.observed,
                        "matches": {n: p.verdict(n) for n in self.profiles}}
                       for p in self.probes],
        }


def candidates(protocol: str) -> list[Profile]:
    return [load_profile(n) for n in profile_names() if load_profile(n).protocol == protocol]


def _distinct(probes: list[Probe]) -> list[Probe]:
    """Only the probes some two profiles disagree on."""
    return [p for p in probes if len(set(p.expected.values())) > 1]


# -- bunqueue ---------------------------------------------------------------------------------
def _hello_view(reply: Any) -> str:
    if reply is None:
        return "no reply"
    if not isinstance(reply, dict):
        return f"not a map: {str(reply)[:60]}"
    if reply.get("ok") is not True:
        return f"error: {str(reply.get('error'))[:80]}"
    caps = reply.get("capabilities")
    caps_text = sorted(map(str, caps)) if isinstance(caps, list) else caps
    return f"ok protocolVersion={reply.get('protocolVersion')} capabilities={caps_text}"


def _dummy(schema: Any, name: str, queue: str) -> Any:
    """A value for a required request field, from its schema type."""
    if name == "queue" or name.endswith("queue"):
        return queue
    kind = schema.get("type") if isinstance(schema, dict) else None
    kind = kind[0] if isinstance(kind, list) and kind else kind
    values: dict[Any, Any] = {"integer": 1, "number": 1, "boolean": False, "array": [], "object": {},
                              "null": None}
    return values.get(kind, f"qw-detect-{name}")


def bunqueue_probes(profiles: Sequence[Profile], queue: str) -> list[tuple[Probe, Any]]:
    """(probe, what to send) for bunqueue: the probe's expectations come from the profiles."""
    out: list[tuple[Probe, Any]] = []
    versions = sorted({p.model.protocol_version for p in profiles})
    for v in versions:
        exp = {p.name: (f"ok protocolVersion={v} capabilities={sorted(p.model.capabilities)}"
                        if p.model.protocol_version == v else None) for p in profiles}
        out.append((Probe(f"Hello v{v}", f"Hello protocolVersion={v}", exp),
                    ("hello", {"cmd": "Hello", "protocolVersion": v})))
    names = [set(p.model.commands) for p in profiles]
    for cmd in sorted(set().union(*names) - set.intersection(*names)):
        owner = next(p for p in profiles if cmd in p.model.commands)
        command = owner.model.commands[cmd]
        props = (command.request or {}).get("properties", {}) if isinstance(command.request,
                                                                            dict) else {}
        msg = {"cmd": cmd}
        for f in command.required_fields:
            if f not in ("cmd", "reqId"):
                msg[f] = _dummy(props.get(f), f, queue)
        exp = {p.name: "known" if cmd in p.model.commands else "unknown command"
               for p in profiles}
        out.append((Probe(f"command {cmd}", ", ".join(f"{k}={v}" for k, v in msg.items()), exp),
                    ("command", msg)))
    flags = {p.name: bool(((p.tree.get("semantics") or {}).get("legacy_data_name") or {})
                          .get("value")) for p in profiles}
    if len(set(flags.values())) > 1:
        exp = {n: "name taken from data" if f else "name kept in data" for n, f in flags.items()}
        out.append((Probe("job name in data", f"PUSH queue={queue} data={{name: qw-detect, "
                          "n: 1} then GetJob", exp), ("legacy-name", queue)))
    return out


async def detect_bunqueue(profiles: Sequence[Profile], host: str, port: int, *,
                          timeout: float, auth_token: str | None) -> list[Probe]:
    from .context import CaseContext

    queue = f"qw-detect-{uuid.uuid4().hex[:8]}"
    plan = bunqueue_probes(profiles, queue)
    unknown = error_pattern(profiles[0].model.errors["unknown_command"].message)
    ctx = CaseContext(Case("queuewire.detect", "detect", "bunqueue", ()), profiles[0], host,
                      port, timeout=timeout, auth_token=auth_token)
    try:
        conn = await ctx.connect()
        for probe, (kind, what) in plan:
            if kind == "hello":
                probe.observed = _hello_view(await conn.request(dict(what)))
            elif kind == "command":
                reply = await conn.request(dict(what))
                if reply is None:
                    probe.observed = "no reply"
                elif reply.get("ok") is False and unknown.fullmatch(str(reply.get("error"))):
                    probe.observed = "unknown command"
                else:
                    probe.observed = "known"
            else:
                probe.observed = await _legacy_name(conn, what)
    finally:
        await ctx.close_all()
    return _distinct([p for p, _ in plan])


async def _legacy_name(conn: Any, queue: str) -> str:
    pushed = await conn.request({"cmd": "PUSH", "queue": queue,
                                 "data": {"name": "qw-detect", "n": 1}})
    try:
        if not isinstance(pushed, dict) or pushed.get("ok") is not True:
            return f"PUSH refused: {_hello_view(pushed)}"
        got = await conn.request({"cmd": "GetJob", "id": pushed.get("id")})
        job = got.get("job") if isinstance(got, dict) else None
        if not isinstance(job, dict):
            return f"GetJob: {_hello_view(got)}"
        data = job.get("data")
        if job.get("name") == "qw-detect" and not (isinstance(data, dict) and "name" in data):
            return "name taken from data"
        if isinstance(data, dict) and data.get("name") == "qw-detect":
            return "name kept in data"
        return f"name {job.get('name')!r}, data {data!r}"[:100]
    finally:
        await conn.request({"cmd": "Obliterate", "queue": queue})


# -- quicx ------------------------------------------------------------------------------------
def _reaction(p: Profile, code: int) -> str | None:
    """What ``p`` says the daemon does with an empty-payload frame of ``code`` from a fresh
    peer connection, as an observation string (None: the data does not say)."""
    m = p.model
    perr = m.protocol_errors
    msg = next((x for x in m.messages.values() if x.code == code), None)
    kind: str | None
    if msg is None:
        kind = "unknown_type"
    elif msg.reserved:
        kind = "reserved_type" if "reserved_type" in perr else "unknown_type"
    elif msg.transport != "tcp":
        kind = "not_on_tcp" if "not_on_tcp" in perr else None
    elif msg.name == "MSG_ERROR" and "inbound_error" in perr:
        kind = "inbound_error"
    elif not set(msg.senders) & set(m.peer_roles):
        kind = "wrong_direction"
    else:
        kind = None
    if kind is None or kind not in perr:
        return None
    pe = perr[kind]
    if pe.reaction == "close":
        return "closed"
    if pe.reaction == "reply" and pe.error_code:
        return f"frame 0x{m.messages['MSG_ERROR'].code:02x}, payload 0x" \
               f"{m.error_codes[pe.error_code].code:02x}…"
    return None


async def _read_frame(reader: asyncio.StreamReader, p: Profile, timeout: float
                      ) -> tuple[int, bytes] | str:
    m = p.model
    try:
        head = await asyncio.wait_for(reader.readexactly(m.header_size), timeout)
        h = m.header_struct.parse(head)
        body = await asyncio.wait_for(reader.readexactly(h.len_payload), timeout)
    except asyncio.IncompleteReadError as exc:
        return "closed" if not exc.partial else "closed mid-frame"
    except TimeoutError:
        return "no reply"
    except (ConnectionError, OSError):
        return "closed"
    return h.msg_type, body


def _view(frame: tuple[int, bytes] | str) -> str:
    if isinstance(frame, str):
        return frame
    t, body = frame
    return f"frame 0x{t:02x}" + (f", payload 0x{body[0]:02x}…" if body else ", empty")


async def detect_quicx(profiles: Sequence[Profile], host: str, port: int, *,
                       timeout: float) -> list[Probe]:
    from ..codecs.quicx import QuicxEncoder

    ref = profiles[0]
    top = max(x.code for p in profiles for x in p.model.messages.values())
    probes: list[Probe] = []
    for code in range(1, top + 2):
        exp = {p.name: _reaction(p, code) for p in profiles}
        if len({e for e in exp.values() if e is not None}) + (None in exp.values()) < 2:
            continue  # every profile says the same (or nothing): no evidence
        probe = Probe(f"opcode 0x{code:02x}", f"one frame type 0x{code:02x}, empty payload", exp)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        try:
            writer.write(QuicxEncoder(ref).frame(code))
            await writer.drain()
            probe.observed = _view(await _read_frame(reader, ref, timeout))
        finally:
            writer.close()
        probes.append(probe)
    probes.extend(await _task_probe(profiles, host, port, timeout))
    return probes


async def _task_probe(profiles: Sequence[Profile], host: str, port: int,
                      timeout: float) -> list[Probe]:
    from ..codecs.quicx import QuicxEncoder

    task_type = f"qw-detect-{uuid.uuid4().hex[:6]}"
    submits = {QuicxEncoder(p).encode("MSG_SUBMIT", task_type=task_type, payload=b"detect")
               for p in profiles}
    readies = {QuicxEncoder(p).encode("MSG_READY") for p in profiles}
    codes = {p.name: p.model.messages["MSG_TASK"].code for p in profiles}
    if len(submits) > 1 or len(readies) > 1 or len(set(codes.values())) < 2:
        return []  # the profiles disagree on how to ask, or agree on the answer
    probe = Probe("MSG_TASK opcode", "MSG_SUBMIT, then MSG_READY on a second connection",
                  {n: f"task frame 0x{c:02x}" for n, c in codes.items()})
    ref = profiles[0]
    conns = []
    try:
        for data in (submits.pop(), readies.pop()):
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            conns.append((reader, writer))
            writer.write(data)
            await writer.drain()
        ok = await _read_frame(conns[0][0], ref, timeout)
        task = await _read_frame(conns[1][0], ref, timeout)
        if isinstance(task, tuple):
            probe.observed = f"task frame 0x{task[0]:02x}"
            match = next((p for p in profiles if p.model.messages["MSG_TASK"].code == task[0]),
                         None)
            if match is not None and len(task[1]) >= 4:  # complete it, as that profile says
                done = QuicxEncoder(match).encode("MSG_DONE",
                                                  task_id=int.from_bytes(task[1][:4], "big"))
                conns[1][1].write(done)
                await conns[1][1].drain()
                await asyncio.sleep(min(0.1, timeout))
        else:
            probe.observed = f"{task} (MSG_SUBMIT: {_view(ok)})"
    finally:
        for _, writer in conns:
            writer.close()
    return [probe]


# -- entry point ------------------------------------------------------------------------------
async def detect(protocol: str, host: str, port: int, *, timeout: float = 2.0,
                 auth_token: str | None = None, target: str = "") -> Detection:
    """Probe ``host:port`` and score every profile of ``protocol``; raises OSError when the
    target cannot be reached."""
    profiles = candidates(protocol)
    if protocol == "bunqueue":
        probes = await detect_bunqueue(profiles, host, port, timeout=timeout,
                                       auth_token=auth_token)
    else:
        probes = await detect_quicx(profiles, host, port, timeout=timeout)
    return Detection(protocol, target or f"{host}:{port}", [p.name for p in profiles], probes)
