"""What a client under test was seen to do, capability by capability: the capability table.

A client run that ends with no failing scenario has not thereby shown full support: a client
that never pipelines, never sends a heartbeat and never notices a dead link passes the
scenarios whose judgements need those behaviours at SHOULD, or as INFO (nothing to judge).
So every client run carries a table, one cell per capability, read off what crossed the
wire in each scenario (the checker's records of the frames both ways, the session's
connection events: opened, closed and by whom, a restart):

``used``            the wire shows it in some scenario (the evidence names the scenario);
``not used``        a scenario gave the client the chance and the wire never shows it;
``not observable``  no scenario gave the chance (none selected, the profile has no such
                    command, or the testee could not play the scenario: ERROR, or an action
                    it reported ``unsupported``).

The capabilities, their chance and their use:

pipelining          chance: a scenario asks for concurrent adds (``add_many``); use: a request
                    sent on a connection while an earlier request on it was still to be
                    answered (the server answered it later). Scenarios where the server's
                    record of a reply does not say when the client could first read it
                    (``delay``, ``dead``: held past the client's timeout or never sent;
                    ``split``: recorded once its last 1-byte segment is out) are left out.
                    quicx: a producer's request (a message only the producer role sends the
                    daemon) sent before the daemon's answer to the one before it.
heartbeats          chance: the options give a ``heartbeat_interval`` and the client held a
                    pulled job (bunqueue) or a connection (quicx) longer than twice that plus
                    the cadence judgement's slack; use: a heartbeat sent, a command (message)
                    of the profile whose name says heartbeat (JobHeartbeat, JobHeartbeatB,
                    Heartbeat; MSG_HEARTBEAT).
reconnect           chance: the server closed a connection (or restarted) before the testee
                    answered; use: a connection opened after that carried a request.
dead-link detection chance: bunqueue's ``dead`` scenario (a connection never answered),
                    quicx's ``late_pong`` one (the daemon's PONG held back); use: bunqueue, a
                    connection opened after the client's first unanswered request on the dead
                    one, and served; quicx, the client closed a connection while a heartbeat of
                    its was still unanswered.
auth                chance: the server requires a token the client was given; use: a command
                    of the profile's ``auth`` category sent.
events              chance: a worker ran (``process``; the documents' Worker subscribes to its
                    queue's events) in a profile with commands of the ``events`` category; use:
                    one of those commands sent. The conformance server does not push events,
                    so consuming them is not observed.

Command and message names come from the spec (categories, names), never from a list here.
:func:`observe` gives one scenario's :class:`Sighting` list; :func:`table` folds a run's
sightings into the rows :mod:`queuewire.conformance.report` renders (``server_info
["capabilities"]``); :func:`summary_lines` is the console's text of the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...spec import Profile
from ...spec.quicx import DAEMON
from ..model import TargetRun
from ..report.common import NOT_OBSERVABLE, NOT_USED, USED, capability_lines
from .judges import HEARTBEAT_SLACK_MS
from .scenarios import ACTIONS

__all__ = ["CAPABILITIES", "Observation", "Sighting", "observe", "summary_lines", "table"]

PIPELINING, HEARTBEATS, RECONNECT = "pipelining", "heartbeats", "reconnect"
DEAD_LINK, AUTH, EVENTS = "dead-link detection", "auth", "events"
CAPABILITIES = (PIPELINING, HEARTBEATS, RECONNECT, DEAD_LINK, AUTH, EVENTS)
#: the testee contract's concurrent action (docs/conformance/client-testee.md)
CONCURRENT = "add_many"
#: the quicx role whose requests the daemon answers one by one (MSG_SUBMIT -> MSG_OK)
PRODUCER = "producer"
#: behaviours under which the server's record of a reply does not say when the client could
#: first have read it: held past the client's timeout or never sent (``delay``, ``dead``), or
#: recorded once its last 1-byte segment is out (``split``)
UNTIMED = ("delay", "dead", "split")
#: what gives each capability its chance, said when no played scenario had it
CHANCE = {
    PIPELINING: "concurrent adds (add_many)",
    HEARTBEATS: "a heartbeat_interval and a job or connection held longer than twice it",
    RECONNECT: "a connection dropped by the server",
    DEAD_LINK: "a silent peer (bunqueue: dead; quicx: late_pong)",
    AUTH: "a server requiring a token it gave the client",
    EVENTS: "a worker (process)",
}


@dataclass(frozen=True)
class Sighting:
    """One scenario's word on one capability: the client used it, or had the chance and did
    not (``used`` False)."""

    capability: str
    scenario: str
    used: bool
    evidence: str


@dataclass
class Observation:
    """What one scenario recorded, as :func:`observe` reads it."""

    scenario: str
    protocol: str
    profile: Profile
    behaviour: dict[str, Any]
    options: dict[str, Any]
    actions: list[dict[str, Any]]
    events: list[dict[str, Any]]   # the session's connection events
    checker: Any                   # the scenario's ClientChecker or QuicxClientChecker
    now: float                     # seconds since the scenario started (its end)
    answered_at: float | None      # when the testee answered (None: it did not play it)


# -- names from the spec
def heartbeat_names(profile: Profile) -> frozenset[str]:
    """The profile's commands (bunqueue) or messages (quicx) whose name says heartbeat."""
    return frozenset(n for n in _names(profile) if "heartbeat" in n.lower())


def category_commands(profile: Profile, category: str) -> frozenset[str]:
    commands = getattr(profile.model, "commands", None) or {}
    return frozenset(c.name for c in commands.values() if c.category == category)


def _names(profile: Profile) -> Iterable[str]:
    model = profile.model
    return getattr(model, "commands", None) or getattr(model, "messages", None) or ()


def _producer_messages(profile: Profile) -> tuple[frozenset[str], frozenset[str]]:
    """quicx: the messages only a producer sends the daemon, and those only the daemon sends
    that reach a producer (its answers)."""
    messages = getattr(profile.model, "messages", None) or {}
    asks = frozenset(m.name for m in messages.values() if m.directions == {(PRODUCER, DAEMON)})
    answers = frozenset(m.name for m in messages.values() if m.directions
                        and all(src == DAEMON for src, _ in m.directions)
                        and (DAEMON, PRODUCER) in m.directions)
    return asks, answers


# -- what the wire says, per protocol
def _sent(o: Observation) -> list[tuple[float, int, str]]:
    """(time, connection, command or message name) of every request the client sent."""
    if o.protocol == "quicx":
        return [(t, conn, name) for t, conn, name, _ in o.checker.received]
    return [(t, conn, str(msg.get("cmd"))) for t, conn, msg in o.checker.requests]


def _depth(marks: list[tuple[float, int]]) -> int:
    """The most requests in flight at once, from (time, +1 sent / -1 answered) marks (an
    answer at the same time as a request counts first)."""
    depth = most = 0
    for _, step in sorted(marks):
        depth += step
        most = max(most, depth)
    return most


def _in_flight(o: Observation) -> tuple[int, int]:
    """(the most requests in flight at once on one connection, that connection), counting
    only requests the server answered."""
    marks: dict[int, list[tuple[float, int]]] = {}
    if o.protocol == "quicx":
        asks, answers = _producer_messages(o.profile)
        frames = sorted([(t, 1, conn, name) for t, conn, name, _ in o.checker.received
                         if name in asks]
                        + [(t, 0, conn, name) for t, conn, name, _ in o.checker.sent
                           if name in answers])
        waiting: dict[int, list[float]] = {}
        for t, sent, conn, _ in frames:   # the daemon answers a producer's requests in order
            if sent:
                waiting.setdefault(conn, []).append(t)
            elif waiting.get(conn):
                marks.setdefault(conn, []).extend([(waiting[conn].pop(0), 1), (t, -1)])
    else:
        answered = {id(req): t for t, _, req, _ in o.checker.replies}
        for t, conn, msg in o.checker.requests:
            if id(msg) in answered:
                marks.setdefault(conn, []).extend([(t, 1), (answered[id(msg)], -1)])
    best = max(((_depth(m), conn) for conn, m in marks.items()), default=(0, 0))
    return best


def _pipelining(o: Observation) -> Sighting | None:
    if any(o.behaviour.get(b) for b in UNTIMED):
        return None
    most, conn = _in_flight(o)
    if most > 1:
        return Sighting(PIPELINING, o.scenario, True,
                        f"{most} requests in flight at once on connection {conn}")
    wide = [a for a in o.actions if a.get("op") == CONCURRENT and len(a.get("items") or ()) > 1]
    if o.answered_at is None or not wide:
        return None
    return Sighting(PIPELINING, o.scenario, False,
                    f"asked for {len(wide[0]['items'])} concurrent adds, the client sent each "
                    "request after the answer to the one before")


def _held_longer(o: Observation, limit: float) -> str | None:
    """What the client held longer than ``limit`` seconds: a pulled job (bunqueue) or a
    connection (quicx), or None."""
    if o.protocol == "quicx":
        opened = {e["conn"]: e["t"] for e in o.events if e["what"] == "open"}
        closed = {e["conn"]: e["t"] for e in o.events if e["what"] == "close"}
        long = [c for c, t in opened.items() if closed.get(c, o.now) - t > limit]
        return f"connection {long[0]} open longer than {limit:.3f} s" if long else None
    for job, pulled in o.checker.pulled.items():
        if o.checker.finished.get(job, o.now) - pulled > limit:
            return f"job {job} held longer than {limit:.3f} s"
    return None


def _heartbeats(o: Observation) -> Sighting | None:
    names = heartbeat_names(o.profile)
    sent = [(conn, name) for _, conn, name in _sent(o) if name in names]
    if sent:
        kinds = ", ".join(sorted({name for _, name in sent}))
        return Sighting(HEARTBEATS, o.scenario, True,
                        f"{len(sent)} heartbeat(s) sent ({kinds})")
    interval = float(o.options.get("heartbeat_interval") or 0)
    if o.answered_at is None or interval <= 0:
        return None
    held = _held_longer(o, (2 * interval + HEARTBEAT_SLACK_MS) / 1000.0)
    if held is None:
        return None
    return Sighting(HEARTBEATS, o.scenario, False,
                    f"heartbeat_interval {interval:g} ms, {held}: no "
                    f"{' or '.join(sorted(names))} sent")


def _reconnect(o: Observation) -> Sighting | None:
    drops = [e for e in o.events if e["what"] == "restart"
             or (e["what"] == "close" and e.get("by") == "server")]
    if not drops:
        return None
    t0 = drops[0]["t"]
    talked = {conn for _, conn, _ in _sent(o)}
    later = [e["conn"] for e in o.events
             if e["what"] == "open" and e["t"] > t0 and e["conn"] in talked]
    if later:
        return Sighting(RECONNECT, o.scenario, True,
                        f"the server dropped connection(s) at {t0:.3f} s; the client opened "
                        f"connection {later[0]} after it and went on")
    if o.answered_at is None or t0 > o.answered_at:
        return None
    return Sighting(RECONNECT, o.scenario, False,
                    f"the server dropped connection(s) at {t0:.3f} s; the client opened no "
                    "connection after it")


def _dead_link(o: Observation) -> Sighting | None:
    if o.protocol == "quicx":
        return _silent_pong(o)
    if not o.behaviour.get("dead"):
        return None
    dead = {e["conn"] for e in o.events if e["what"] == "open" and e.get("dead")}
    asked = [t for t, conn, _ in _sent(o) if conn in dead]
    if not asked:
        return None if o.answered_at is None else Sighting(
            DEAD_LINK, o.scenario, False, "the client sent nothing on the silent connection")
    served = {conn for _, conn, _, _ in o.checker.replies}
    moved = [e["conn"] for e in o.events if e["what"] == "open" and not e.get("dead")
             and e["t"] > asked[0] and e["conn"] in served]
    if moved:
        return Sighting(DEAD_LINK, o.scenario, True,
                        f"the first connection was never answered; the client moved to "
                        f"connection {moved[0]} (opened after its first unanswered request) "
                        "and was served")
    if o.answered_at is None:
        return None
    return Sighting(DEAD_LINK, o.scenario, False,
                    f"the first connection was never answered; the client sent {len(asked)} "
                    "request(s) on it and opened no connection that was served")


def _silent_pong(o: Observation) -> Sighting | None:
    late = o.behaviour.get("late_pong")
    if not late:
        return None
    hold = float(late.get("ms", 1000)) / 1000.0
    names = heartbeat_names(o.profile)
    beats = [(t, conn) for t, conn, name in _sent(o) if name in names]
    gave_up = [e["conn"] for e in o.events if e["what"] == "close" and e.get("by") == "client"
               and any(c == e["conn"] and t < e["t"] < t + hold for t, c in beats)]
    if gave_up:
        return Sighting(DEAD_LINK, o.scenario, True,
                        f"the daemon held its PONGs {hold * 1000:g} ms; the client closed "
                        f"{len(gave_up)} connection(s) with a heartbeat unanswered")
    if o.answered_at is None:
        return None
    return Sighting(DEAD_LINK, o.scenario, False,
                    f"the daemon held its PONGs {hold * 1000:g} ms; the client sent "
                    f"{len(beats)} heartbeat(s) and closed no connection waiting for an answer")


def _category(o: Observation, capability: str, category: str, chance: bool,
              why: str) -> Sighting | None:
    names = category_commands(o.profile, category)
    if not names:
        return None
    sent = sorted({name for _, _, name in _sent(o) if name in names})
    if sent:
        return Sighting(capability, o.scenario, True, f"{', '.join(sent)} sent")
    if o.answered_at is None or not chance:
        return None
    return Sighting(capability, o.scenario, False,
                    f"{why}: no {' or '.join(sorted(names))} sent")


def observe(o: Observation) -> list[Sighting]:
    """One scenario's sightings (a capability the scenario says nothing of has none)."""
    token = bool(o.behaviour.get("auth_token") and o.options.get("token"))
    worker = any(a.get("op") == "process" for a in o.actions)
    found = [_pipelining(o), _heartbeats(o), _reconnect(o), _dead_link(o),
             _category(o, AUTH, "auth", token, "the server required the token it gave"),
             _category(o, EVENTS, "events", worker, "a worker ran")]
    return [s for s in found if s is not None]


def table(sightings: Sequence[Sighting], profile: Profile) -> list[dict[str, Any]]:
    """The capability rows of a run: ``capability``, ``state``, ``evidence`` (the first
    scenario's word) and ``scenarios`` (those that used it, or that gave the chance)."""
    rows = []
    for name in CAPABILITIES:
        mine = [s for s in sightings if s.capability == name]
        used = [s for s in mine if s.used]
        chosen = used or mine
        if chosen:
            state = USED if used else NOT_USED
            evidence = f"{chosen[0].scenario}: {chosen[0].evidence}"
        else:
            state, evidence = NOT_OBSERVABLE, _unobservable(name, profile)
        rows.append({"capability": name, "state": state, "evidence": evidence,
                     "scenarios": list(dict.fromkeys(s.scenario for s in chosen))})
    return rows


def _unobservable(name: str, profile: Profile) -> str:
    if name == PIPELINING and CONCURRENT not in ACTIONS.get(profile.protocol, {}):
        return f"the {profile.protocol} testee contract has no concurrent action"
    category = {AUTH: "auth", EVENTS: "events"}.get(name)
    if category and not category_commands(profile, category):
        return f"{profile.name} has no command of the {category} category"
    return f"no played scenario had {CHANCE[name]}"


def summary_lines(runs: Sequence[TargetRun]) -> list[str]:
    """The capability table of client runs as console lines (one per run), and, when no
    run fails, the sentence that says no failing case is not full support."""
    return capability_lines(runs)
