"""Judgements of quicx scenarios (``judge:`` entries of ``cases/client/quicx.yaml``).

Like :mod:`.judges`, each reads what crossed the wire (the
:class:`~.quicx_server.QuicxClientChecker`'s records, the session's connection events) and
takes its requirement id and level from the scenario file. ``late_pong_observed`` only
observes (the documents say nothing of a client's PONG deadline): it adds an observation and
no check, so its scenario ends INFO.
"""

from __future__ import annotations

from typing import Any, cast

from ..model import Check
from .judges import JudgeContext
from .quicx_server import QuicxClientChecker

__all__ = ["QUICX_JUDGES"]

SKIP = ("MSG_PONG", "MSG_HEARTBEAT")
HEARTBEAT_ANSWER_S = 0.5  # a connection open this long after the server's heartbeat must have answered


def quicx_checker(ctx: JudgeContext) -> QuicxClientChecker:
    """The checker of a quicx scenario (JudgeContext holds either protocol's)."""
    return cast(QuicxClientChecker, ctx.checker)


def _check(j: Any, ok: bool, message: str, expected: Any = None, actual: Any = None) -> Check:
    return Check(j.requirement, j.level, ok, "behaviour", message, expected, actual)


def _by_conn(ctx: JudgeContext) -> dict[int, list[tuple[float, str, dict]]]:
    out: dict[int, list[tuple[float, str, dict]]] = {}
    for t, conn, name, fields in quicx_checker(ctx).received:
        out.setdefault(conn, []).append((t, name, fields))
    return out


def _closed_by(ctx: JudgeContext, conn: int, who: str) -> bool:
    """Whether ``who`` (``server`` or ``client``) closed connection ``conn``."""
    return any(e["what"] == "close" and e["conn"] == conn and e.get("by") == who
               for e in ctx.session.events)


def _closed_at(ctx: JudgeContext, conn: int) -> float | None:
    return next((e["t"] for e in ctx.session.events if e["what"] == "close" and e["conn"] == conn),
                None)


async def ready_first(ctx: JudgeContext, j: Any) -> list[Check]:
    out = []
    for conn, msgs in sorted(_by_conn(ctx).items()):
        names = [n for _, n, _ in msgs if n not in SKIP]
        if "MSG_READY" not in names:
            continue
        out.append(_check(j, names[0] == "MSG_READY", f"worker connection {conn} began with "
                          f"{names[0]}", "MSG_READY first", names[:3]))
    if not out and any(a.get("op") == "work" for a in ctx.actions):
        # asked to work, the client never registered a connection as a worker
        sent = {conn: [n for _, n, _ in msgs][:3] for conn, msgs in _by_conn(ctx).items()}
        out.append(_check(j, False, "the client was asked to work and no connection sent "
                          "MSG_READY", "a worker connection beginning with MSG_READY", sent))
    if not out:
        ctx.notes.append("no connection sent MSG_READY")
    return out


async def submitted_as_asked(ctx: JudgeContext, j: Any) -> list[Check]:
    """Each ``submit`` action reaches the daemon as a MSG_SUBMIT of the task type and payload
    it was given (a type_len that does not count the type's bytes moves bytes between the two,
    and the frame still decodes)."""
    asked = [(a.get("type"), str(a.get("payload", "")).encode())
             for a in ctx.actions if a.get("op") == "submit"]
    got = [(f.get("task_type"), bytes(f.get("payload") or b""))
           for _, _, n, f in quicx_checker(ctx).received if n == "MSG_SUBMIT"]
    if not asked:
        ctx.notes.append("the scenario submits nothing")
        return []
    missing = [a for a in asked if a not in got]
    return [_check(j, not missing, f"{len(asked) - len(missing)} of {len(asked)} submit(s) "
                   "sent as MSG_SUBMIT of the task type and payload asked",
                   [list(map(repr, a)) for a in asked], [list(map(repr, g)) for g in got])]


async def ready_again(ctx: JudgeContext, j: Any) -> list[Check]:
    answered = missing = 0
    for _, msgs in _by_conn(ctx).items():
        names = [n for _, n, _ in msgs if n not in SKIP]
        for i, name in enumerate(names):
            if name in ("MSG_DONE", "MSG_FAILED"):
                if "MSG_READY" in names[i + 1:]:
                    answered += 1
                elif i + 1 < len(names):  # it went on without asking for its next task
                    missing += 1
                # else its last result: a worker that then stops needs no next task
    if not answered and not missing:
        ctx.notes.append("the worker answered no task")
        return []
    return [_check(j, missing == 0, f"{answered} result(s) followed by MSG_READY, {missing} not",
                   "MSG_READY after each MSG_DONE / MSG_FAILED", {"followed": answered,
                                                                  "not": missing})]


def _waits(ctx: JudgeContext) -> list[tuple[float, int]]:
    """The storm's MSG_WAITs when the server played one (a WAIT the engine sends a worker
    that is being stopped needs no READY), else every MSG_WAIT."""
    storm = getattr(ctx.session, "storm_waits", None)
    return list(storm) if storm else [(t, conn) for t, conn, name, _ in quicx_checker(ctx).sent
                                      if name == "MSG_WAIT"]


async def ready_after_wait(ctx: JudgeContext, j: Any) -> list[Check]:
    waits = _waits(ctx)
    if not waits:
        ctx.notes.append("the server sent no MSG_WAIT")
        return []
    msgs = _by_conn(ctx)
    bad = []
    for t, conn in waits:
        later = [u for u, n, _ in msgs.get(conn, []) if n == "MSG_READY" and u > t]
        closed = _closed_at(ctx, conn)
        client_closed = _closed_by(ctx, conn, "client")
        if not later or (client_closed and closed is not None and closed < later[0]):
            bad.append(round(t, 3))
    return [_check(j, not bad, f"{len(waits) - len(bad)} of {len(waits)} MSG_WAIT followed by "
                   "MSG_READY on the same open connection", "MSG_READY again, connection kept",
                   bad or len(waits))]


async def wait_backoff(ctx: JudgeContext, j: Any) -> list[Check]:
    waits = _waits(ctx)
    if not waits:
        ctx.notes.append("the server sent no MSG_WAIT")
        return []
    minimum = float(j.params.get("min_ms", 1)) / 1000.0
    msgs = _by_conn(ctx)
    gaps = []
    for t, conn in waits:
        later = [u for u, n, _ in msgs.get(conn, []) if n == "MSG_READY" and u > t]
        if later:
            gaps.append(later[0] - t)
    if not gaps:
        return [_check(j, False, "no MSG_READY after any MSG_WAIT", f">= {minimum * 1000:g} ms", None)]
    shortest = min(gaps)
    return [_check(j, shortest >= minimum, f"{len(gaps)} READY after WAIT, the shortest backoff "
                   f"{shortest * 1000:.1f} ms", f">= {minimum * 1000:g} ms",
                   round(shortest * 1000, 1))]


async def tasks_answered(ctx: JudgeContext, j: Any) -> list[Check]:
    given = {task for tasks in quicx_checker(ctx).given.values() for task in tasks}
    if not given:
        return [_check(j, False, "the server handed out no task", "a task run", None)]
    answered = {f.get("task_id") for _, _, n, f in quicx_checker(ctx).received
                if n in ("MSG_DONE", "MSG_FAILED")}
    # a task whose connection the server dropped could not be answered there (it was
    # requeued, QX-WORKER-1): the tasks owed are those on connections the server kept
    owed = {task for conn, tasks in quicx_checker(ctx).given.items()
            if not _closed_by(ctx, conn, "server") for task in tasks}
    missing = sorted(owed - answered)
    return [_check(j, not missing, f"{len(given) - len(missing)} of {len(given)} task(s) answered "
                   "with MSG_DONE or MSG_FAILED carrying their id", "every task answered",
                   missing or sorted(given))]


async def reconnected_worker(ctx: JudgeContext, j: Any) -> list[Check]:
    lost = [e for e in ctx.session.events if e["what"] == "close" and e.get("by") == "server"]
    if not lost:
        ctx.notes.append("no connection was lost: nothing to reconnect")
        return []
    t0 = lost[0]["t"]
    later = [e["conn"] for e in ctx.session.events if e["what"] == "open" and e["t"] > t0]
    msgs = _by_conn(ctx)
    ready = [c for c in later if any(n == "MSG_READY" for _, n, _ in msgs.get(c, []))]
    return [_check(j, bool(ready), f"{len(later)} connection(s) after the loss, {len(ready)} "
                   "sent MSG_READY", "a new worker connection", {"new": later, "ready": ready})]


async def answers_heartbeat(ctx: JudgeContext, j: Any) -> list[Check]:
    out = []
    msgs = _by_conn(ctx)
    for t, conn, name, _ in quicx_checker(ctx).sent:
        if name != "MSG_HEARTBEAT":
            continue
        pongs = [u for u, n, _ in msgs.get(conn, []) if n == "MSG_PONG" and u > t]
        closed = _closed_at(ctx, conn)
        if not pongs and closed is not None and closed - t < HEARTBEAT_ANSWER_S:
            continue  # closed too soon to judge
        out.append(_check(j, bool(pongs), f"connection {conn}: MSG_PONG "
                          + (f"{(pongs[0] - t) * 1000:.1f} ms after" if pongs else "never sent for")
                          + " the server's MSG_HEARTBEAT", "MSG_PONG",
                          round((pongs[0] - t) * 1000, 1) if pongs else None))
    if not out:
        ctx.notes.append("no connection stayed open after the server's heartbeat")
    return out


async def late_pong_observed(ctx: JudgeContext, j: Any) -> list[Check]:
    beats = [(t, c) for t, c, n, _ in quicx_checker(ctx).received if n == "MSG_HEARTBEAT"]
    closes = [e for e in ctx.session.events if e["what"] == "close" and e.get("by") == "client"]
    opens = [e for e in ctx.session.events if e["what"] == "open"]
    ctx.observations.append(
        f"the client sent {len(beats)} MSG_HEARTBEAT answered late; it closed {len(closes)} "
        f"connection(s) and opened {len(opens)} (the documents give a client no PONG deadline: "
        f"{j.requirement} is observed, not judged)")
    return []


QUICX_JUDGES = {f.__name__: f for f in (
    ready_first, submitted_as_asked, ready_again, ready_after_wait, wait_backoff, tasks_answered,
    reconnected_worker, answers_heartbeat, late_pong_observed)}
