"""Which profile does the traffic speak? Found from the frames themselves (passive detection).

Rules
-----
* **Candidates** are every profile of the protocol (``spec/profiles.yaml``); what each allows
  comes from its data (the base plus its overlays), never from its name.
* **Facts.** Each frame is read as every candidate would read it, and an observation on
  which the candidates disagree is a fact: for each candidate, whether its data allows
  what was seen. An observation every candidate allows (or none does) is no evidence and is
  not kept. Facts are counted, not repeated: 4,000 pushed events are one fact seen 4,000
  times.

  bunqueue (every frame decoded once: the profiles share the MessagePack rules), all of them
  the server's:

  - the reply to ``Hello`` (paired by reqId, or in order without one): its protocol version
    against each profile's ``protocol_version``, its capabilities against each profile's
    ``capabilities`` (the reply's fields are the Hello response properties that cite the
    ``protocol_version`` limit's requirement: the integer one and the array one);
  - a frame without reqId of a profile's pushed event type (``job_events.frame``): only the
    profiles with ``job_events`` push them;
  - the reply to a command only some profiles define (``SubscribeEvents``, ...): a success
    fits those that define it, the ``unknown_command`` error those that do not.

  quicx: every frame read by each candidate's codec in its direction (client to daemon as the
  daemon reads it, daemon to client as a client of any role does): the message it reads, or
  the protocol error it refuses the frame with. A header version, an opcode, a payload size
  or a direction only one profile allows is a fact. Daemon-to-client frames are the server's;
  client-to-daemon frames are the client's.
* **Choice.** A candidate's score is the share of facts it fits; the choice is *clear* when
  one candidate's share is strictly above every other's and at least one half, or when the
  candidates sharing the top score fit every fact alike and are one line of refinements
  (bunqueue/v3 refines bunqueue/2.9.5): then the plainest is chosen, as nothing seen shows
  what the others add. Facts that split the leaders decide nothing. The server's
  facts decide first (a client may speak another profile than the server it talks to); the
  client's count only when the server's do not decide. :attr:`Detector.decided` is true as
  soon as the server's facts are clear, so a caller that holds the traffic back until then
  (:class:`~.analyzer.Analyzer` with ``detect``) waits no longer than it must. Without a
  clear choice the protocol's default profile is kept, and :class:`ProfileChoice` says why.

Design
------
Sans-IO: :class:`Detector` is told whole frames (``frame(conn, direction, raw)``, the frame
with its length prefix or header, as :class:`~.framing.Stream` cuts them; :func:`frame_stream`
gives a stream that only cuts) and when a connection ends; it keeps the facts and, per
connection, the requests whose replies are evidence. :class:`ProfileChoice` is the outcome
as plain data (the profile, how it was chosen: ``detected``, ``given``, ``default`` or
``recorded``, and the evidence), with the one line the tools print.
"""

from __future__ import annotations

import re
import struct
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..codecs.bunqueue import UNDEFINED, FrameDecoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxDecoder
from ..judge.opening import HELLO
from ..judge.reqid import reqid_key
from ..spec import Profile, default_profile, load_profile, plainest, profile_names
from ..spec.quicx import DAEMON, struct_format
from .framing import Stream

__all__ = ["Detector", "Fact", "ProfileChoice", "frame_stream"]

#: How a profile is chosen: from the traffic, from --profile, the protocol's default, or
#: what the recording's files name (``trace analyze``).
HOW = ("detected", "given", "default", "recorded")
SIDES = {"s2c": "server", "c2s": "client"}
#: Evidence lines a :attr:`ProfileChoice.line` shows (the rest are in ``evidence``).
LINE_EVIDENCE = 4


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The profile traffic is judged under, how it was chosen, and why."""

    profile: str
    how: str                              # detected | given | default | recorded
    evidence: tuple[str, ...] = ()        # the facts, most telling first
    note: str = ""                        # default / recorded: why no detection decided

    @property
    def line(self) -> str:
        """``bunqueue/2.9.5 (detected: ...)``, ``... (from --profile)``, ``... (default: ...)``."""
        if self.how == "given":
            return f"{self.profile} (from --profile)"
        if self.how == "detected":
            shown = "; ".join(self.evidence[:LINE_EVIDENCE])
            more = len(self.evidence) - LINE_EVIDENCE
            return f"{self.profile} (detected: {shown}" + (f"; {more} more" if more > 0 else "") + ")"
        why = self.note + (": " + "; ".join(self.evidence[:LINE_EVIDENCE]) if self.evidence else "")
        return f"{self.profile} ({self.how}: {why})"

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "how": self.how, "evidence": list(self.evidence),
                "note": self.note, "line": self.line}

    @classmethod
    def given(cls, profile: str) -> ProfileChoice:
        return cls(profile, "given")


@dataclass(slots=True)
class Fact:
    """An observation the candidates disagree on: which of them it fits, and why."""

    side: str                     # server | client: whose frames show it
    what: str                     # what was seen
    why: str                      # what each candidate's data says about it
    fits: dict[str, bool]         # candidate -> its data allows it
    count: int = 0

    @property
    def text(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        return f"{self.what}{times}: {self.why}"


def _only(fits: dict[str, bool], claim: str) -> str:
    yes = [p for p, ok in fits.items() if ok]
    no = [p for p, ok in fits.items() if not ok]
    if len(yes) == 1:
        return f"only {yes[0]} {claim}"
    return f"{', '.join(yes)}: {claim}; not {', '.join(no)}"


def frame_stream(profile: Profile, max_frame: int) -> Stream:
    """A stream that only cuts a direction into whole frames by the protocol's length field
    (the items carry ``raw``, no message): the same framing for every profile of it."""
    if profile.protocol == "bunqueue":
        head, at = struct.Struct(profile.model.len_format), 0
    else:
        header = profile.model.header
        head, at = struct.Struct(struct_format(header)), [f.id for f in header].index("len_payload")
    return Stream(lambda: None, head, at, max_frame, lambda _dec, _data: [], lambda _exc: True)


def _template(message: str) -> re.Pattern[str]:
    """A spec error string as a regex: ``{name}`` placeholders match anything."""
    parts = re.split(r"\{[^{}]*\}", message)
    return re.compile("(?s)" + ".*".join(re.escape(p) for p in parts))


class Detector:
    """Passive profile detection for one protocol (see the module docstring)."""

    def __init__(self, protocol: str, candidates: Sequence[Profile] | None = None):
        self.protocol = protocol
        self.candidates = list(candidates) if candidates is not None else \
            [load_profile(n) for n in profile_names(protocol)]
        if not self.candidates:
            raise ValueError(f"no {protocol} profiles to choose from")
        self.names = [p.name for p in self.candidates]
        self.facts: dict[tuple[str, str, str], Fact] = {}
        self.frames = 0
        self.bytes = 0
        self._decided: bool | None = False   # None: to be worked out again (a new fact)
        if protocol == "bunqueue":
            self._reader: _BunqueueFacts | _QuicxFacts = _BunqueueFacts(self)
        else:
            self._reader = _QuicxFacts(self)

    # -- what the caller tells
    def frame(self, conn: Hashable, direction: str, raw: bytes) -> None:
        """One whole frame of connection ``conn`` in ``direction`` (c2s or s2c)."""
        self.frames += 1
        self.bytes += len(raw)
        self._reader.frame(conn, direction, raw)

    def closed(self, conn: Hashable) -> None:
        """Connection ``conn`` ended: forget what it waited for."""
        self._reader.closed(conn)

    def fact(self, direction: str, what: str, fits: dict[str, bool], why: str) -> None:
        if all(fits.values()) or not any(fits.values()):
            return  # every candidate (or none) allows it: no evidence
        side = SIDES[direction]
        key = (side, what, why)
        found = self.facts.get(key)
        if found is None:
            found = self.facts[key] = Fact(side, what, why, fits)
            self._decided = None
        found.count += 1

    # -- the outcome
    def _ranked(self, facts: list[Fact]) -> str | None:
        """The candidate the facts clearly point to, or None."""
        if not facts:
            return None
        share = {n: sum(f.fits[n] for f in facts) / len(facts) for n in self.names}
        top = max(share.values())
        tied = [n for n in self.names if share[n] == top]
        if top < 0.5 or any(len({f.fits[n] for n in tied}) > 1 for f in facts):
            return None   # too little, or the facts split the leaders: nothing decides
        # candidates every fact fits alike: the one the others refine (bunqueue/2.9.5 before
        # bunqueue/v3), as the facts showed nothing of what the others add
        return plainest(tied)

    def _server(self) -> list[Fact]:
        return [f for f in self.facts.values() if f.side == "server"]

    @property
    def decided(self) -> bool:
        """The server's facts point clearly to one candidate."""
        if self._decided is None:   # only a new fact changes it (counts do not: one vote each)
            self._decided = self._ranked(self._server()) is not None
        return self._decided

    def choice(self, default: str | None = None, *, limited: str = "") -> ProfileChoice:
        """The chosen profile with its evidence; without a clear choice, ``default`` (the
        protocol's default profile when None) and why. ``limited`` says how much traffic
        was looked at when the caller stopped early (e.g. "in the first 8 MiB")."""
        server = self._server()
        facts = list(self.facts.values())
        best = self._ranked(server)
        used = server
        if best is None:
            best, used = self._ranked(facts), facts
        if best is not None:
            ranked = sorted((f for f in used if f.fits[best]), key=lambda f: -f.count)
            against = [f for f in used if not f.fits[best]]
            return ProfileChoice(best, "detected", tuple(f.text for f in ranked) + tuple(
                f"but {f.text}" for f in against))
        fallback = default or default_profile(self.protocol)
        if not facts:
            note = "no distinguishing traffic" + (f" {limited}" if limited else "")
            return ProfileChoice(fallback, "default", (), note)
        return ProfileChoice(fallback, "default", tuple(f.text for f in facts),
                             "the traffic does not decide")


# -- bunqueue ---------------------------------------------------------------------------------
class _BunqueueConn:
    __slots__ = ("no_id", "waiting")

    def __init__(self) -> None:
        self.waiting: dict[Hashable, str] = {}      # reqId key -> command whose reply tells
        self.no_id: deque[str | None] = deque()     # requests without reqId, in order


class _BunqueueFacts:
    """The bunqueue facts: the Hello reply, pushed events, commands only some profiles have."""

    def __init__(self, det: Detector):
        self.det = det
        cands = det.candidates
        base = cands[0]
        self.decoder = FrameDecoder(base, check_depth=False)
        self._make = lambda: FrameDecoder(base, check_depth=False)
        envelope = (base.tree.get("envelope") or {}).get("reply") or {}
        self.envelope = set(envelope) if isinstance(envelope, dict) else set()
        # the event type each candidate pushes (None: it defines no job_events)
        self.event_type: dict[str, Any] = {}
        for p in cands:
            frame = (p.tree.get("job_events") or {}).get("frame") or {}
            self.event_type[p.name] = ((frame.get("properties") or {}).get("type") or {}).get("const")
        # Hello: each candidate's version and capabilities, and the reply fields carrying them
        self.hello: dict[str, tuple[int, frozenset[str]]] = {}
        self.hello_fields: tuple[str | None, str | None] = (None, None)
        for p in cands:
            cmd = p.model.commands.get(HELLO)
            if cmd is None:
                continue
            self.hello[p.name] = (p.model.protocol_version, frozenset(p.model.capabilities))
            rid = p.limit("protocol_version").requirement
            props = (cmd.response or {}).get("properties") or {}
            tied = {s.get("type"): k for k, s in props.items()
                    if isinstance(s, dict) and s.get("x-requirement") == rid}
            if self.hello_fields == (None, None):
                self.hello_fields = (tied.get("integer"), tied.get("array"))
        # commands some candidates define and others do not, and each one's unknown-command error
        sets = {p.name: set(p.model.commands) for p in cands}
        self.partial = set().union(*sets.values()) - set.intersection(*sets.values())
        self.defines = {c: {n: c in s for n, s in sets.items()} for c in self.partial}
        self.unknown = {p.name: _template(p.model.errors["unknown_command"].message)
                        for p in cands if "unknown_command" in p.model.errors}
        self.conns: dict[Hashable, _BunqueueConn] = {}

    def closed(self, conn: Hashable) -> None:
        self.conns.pop(conn, None)

    def _decode(self, raw: bytes) -> Any:
        try:
            msgs = self.decoder.feed_whole(raw)
        except ProtocolError:
            self.decoder = self._make()
            return UNDEFINED
        return msgs[0] if msgs else UNDEFINED

    def frame(self, conn: Hashable, direction: str, raw: bytes) -> None:
        msg = self._decode(raw)
        if type(msg) is not dict:
            return
        state = self.conns.get(conn)
        if state is None:
            state = self.conns[conn] = _BunqueueConn()
        rid = msg.get("reqId", UNDEFINED)
        if direction == "c2s":
            cmd = msg.get("cmd")
            tells = cmd if type(cmd) is str and (cmd == HELLO or cmd in self.partial) else None
            if rid is UNDEFINED:
                state.no_id.append(tells)
            elif tells is not None:
                state.waiting[rid if type(rid) is str else reqid_key(rid)] = tells
            return
        if rid is UNDEFINED:
            kind = msg.get("type")
            pushers = {n: t is not None and kind == t for n, t in self.event_type.items()}
            if any(pushers.values()):
                self.det.fact(direction, f"pushed frames without reqId of type {kind}",
                              pushers, _only(pushers, "defines job_events"))
                return
            command = state.no_id.popleft() if state.no_id else None
        else:
            command = state.waiting.pop(rid if type(rid) is str else reqid_key(rid), None)
        if command == HELLO:
            self._hello(direction, msg)
        elif command is not None:
            self._answered(direction, command, msg)

    def _hello(self, direction: str, reply: dict[str, Any]) -> None:
        if reply.get("ok") is not True:
            return
        vfield, cfield = self.hello_fields
        version = reply.get(vfield) if vfield else None
        if type(version) is int:
            rest = ", ".join(f"{k} {_show(v)}" for k, v in reply.items()
                             if k not in self.envelope and k not in (vfield, cfield))
            fits = {n: n in self.hello and self.hello[n][0] == version for n in self.det.names}
            self.det.fact(direction, f"Hello reply: {vfield} {version}"
                          + (f" ({rest})" if rest else ""), fits,
                          _only(fits, f"speaks protocol version {version}"))
        caps = reply.get(cfield) if cfield else None
        if isinstance(caps, list) and all(isinstance(c, str) for c in caps):
            have = frozenset(caps)
            fits = {n: n in self.hello and self.hello[n][1] == have for n in self.det.names}
            self.det.fact(direction, f"Hello reply: {cfield} {_show(sorted(have))}", fits,
                          _only(fits, "has exactly these capabilities"))

    def _answered(self, direction: str, command: str, reply: dict[str, Any]) -> None:
        defines = self.defines[command]
        if reply.get("ok") is True:
            self.det.fact(direction, f"{command} answered ok", defines,
                          _only(defines, f"defines {command}"))
            return
        error = reply.get("error")
        if reply.get("ok") is False and isinstance(error, str):
            lacks = {n: not d for n, d in defines.items()}
            if any(lacks[n] and pat.fullmatch(error) for n, pat in self.unknown.items()):
                self.det.fact(direction, f"{command} refused as an unknown command", lacks,
                              _only(lacks, f"lacks {command}"))


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- quicx ------------------------------------------------------------------------------------
class _QuicxFacts:
    """The quicx facts: how each candidate's codec reads each frame in its direction."""

    def __init__(self, det: Detector):
        self.det = det
        self.decoders: dict[tuple[str, str], QuicxDecoder] = {}
        self.profiles = {p.name: p for p in det.candidates}
        first = det.candidates[0].model
        self._head = struct.Struct(struct_format(first.header))
        order = [f.id for f in first.header]
        self._at = (order.index("version"), order.index("msg_type"))

    def _decoder(self, name: str, direction: str, fresh: bool = False) -> QuicxDecoder:
        key = (name, direction)
        dec = self.decoders.get(key)
        if dec is None or fresh:
            p = self.profiles[name]
            role: Any = DAEMON if direction == "c2s" else \
                tuple(r for r in p.model.roles if r != DAEMON)
            dec = self.decoders[key] = QuicxDecoder(p, role)
        return dec

    def closed(self, conn: Hashable) -> None:
        pass  # frames are read on their own: nothing is kept per connection

    def frame(self, conn: Hashable, direction: str, raw: bytes) -> None:
        readings: dict[str, str] = {}
        fits: dict[str, bool] = {}
        for name in self.det.names:
            try:
                msgs = self._decoder(name, direction).feed(raw)
            except ProtocolError as exc:
                self._decoder(name, direction, fresh=True)
                readings[name], fits[name] = f"refuses them ({exc.kind})", False
                continue
            if not msgs:
                return  # not a whole frame: nothing to say
            readings[name], fits[name] = f"reads {msgs[0].name}", True
        if all(fits.values()) or not any(fits.values()):
            return
        head = self._head.unpack_from(raw)
        version, code = head[self._at[0]], head[self._at[1]]
        where = "daemon-to-client" if direction == "s2c" else "client-to-daemon"
        self.det.fact(direction, f"{where} frames of type 0x{code:02x} (version {version})",
                      fits, "; ".join(f"{n} {r}" for n, r in readings.items()))
