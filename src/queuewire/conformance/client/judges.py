"""Judgements of what the conformance server saw during a scenario (``judge:`` entries).

Each judgement is an async function ``(ctx, judgement) -> list[Check]`` registered in
:data:`JUDGES` under the name a scenario file uses; the requirement id and level come from the
file (:class:`~.scenarios.Judgement`), never from here. A judgement looks at bytes that crossed
the wire (the checker's decoded requests and replies, the session's connection events) or at
the reference engine's state those bytes produced; when the client never did what a judgement
needs (no two requests in flight to reorder, no job held long enough to need a heartbeat) it
says so in :attr:`JudgeContext.notes` and the scenario ends INFO rather than passing
without evidence.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ...codecs.validation import jsonable
from ...judge import opens_with_hello
from ..model import Check
from .checker import ClientChecker
from .server import Session

__all__ = ["JUDGES", "JudgeContext", "HEARTBEAT_SLACK_MS"]

#: a heartbeat is in time when no gap between the pull, the heartbeats and the ACK of a job
#: exceeds twice the heartbeat interval plus this (scheduling and batching jitter)
HEARTBEAT_SLACK_MS = 150.0


@dataclass
class JudgeContext:
    session: Session | Any  # the bunqueue Session or a quicx_server.QuicxSession
    checker: ClientChecker | Any
    queue: str
    actions: list[dict[str, Any]]
    results: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)  # "not exercised" observations
    observations: list[str] = field(default_factory=list)  # what an observing judge saw

    async def engine(self, request: dict[str, Any]) -> dict[str, Any]:
        embedded = self.session.owner.embedded
        conn = embedded.open()
        try:
            return await embedded.request(conn, request)
        finally:
            embedded.close(conn)


Judgement = Any  # scenarios.Judgement (not imported: the scenario loader imports this module)
Judge = Callable[[JudgeContext, Judgement], Awaitable[list[Check]]]


def _check(j: Judgement, ok: bool, message: str, expected: Any = None,
           actual: Any = None) -> Check:
    return Check(j.requirement, j.level, ok, "behaviour", message, expected, actual)  # type: ignore[arg-type]


def _cmds_by_conn(ctx: JudgeContext) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for _, conn, msg in ctx.checker.requests:
        out.setdefault(conn, []).append(str(msg.get("cmd")))
    return out


async def hello_first(ctx: JudgeContext, j: Judgement) -> list[Check]:
    out = []
    for conn, cmds in sorted(_cmds_by_conn(ctx).items()):
        head = cmds[:2]
        ok = opens_with_hello(head) is True  # the judge's rule, as the tap applies it
        out.append(_check(j, ok, f"connection {conn} began with {head}",
                          "Hello first (or Auth, Hello)", head))
    if not out:
        ctx.notes.append("no connection sent a command")
    return out


async def authenticated_every_connection(ctx: JudgeContext, j: Judgement) -> list[Check]:
    out = []
    for conn, cmds in sorted(_cmds_by_conn(ctx).items()):
        others = [i for i, c in enumerate(cmds) if c not in ("Auth", "Hello")]
        if not others:
            continue
        ok = "Auth" in cmds[:others[0]]
        out.append(_check(j, ok, f"connection {conn}: Auth before {cmds[others[0]]}"
                          if ok else f"connection {conn} sent {cmds[others[0]]} without Auth first",
                          "Auth before other commands", cmds[:others[0] + 1]))
    if not out:
        ctx.notes.append("no connection sent a command other than Auth and Hello")
    return out


async def all_completed(ctx: JudgeContext, j: Judgement) -> list[Check]:
    reply = await ctx.engine({"cmd": "GetJobCounts", "queue": ctx.queue})
    counts = reply.get("counts") or {}
    pending = {k: counts.get(k, 0) for k in ("waiting", "active", "delayed") if counts.get(k)}
    ok = not pending and counts.get("completed", 0) > 0
    return [_check(j, ok, f"queue {ctx.queue}: {counts}", "every job completed", counts)]


def _data_of(action: dict[str, Any]) -> list[Any]:
    if action.get("op") == "add_many":
        return list(action.get("items") or ())
    return [action.get("data")]


def _ids_of(result: dict[str, Any]) -> list[Any]:
    value = result.get("value")
    if isinstance(value, dict) and isinstance(value.get("ids"), list):
        return list(value["ids"])
    if isinstance(value, dict) and "id" in value:
        return [value["id"]]
    return []


def _matches(sent: Any, stored: Any) -> bool:
    if isinstance(sent, dict) and isinstance(stored, dict):
        return all(stored.get(k) == v for k, v in sent.items())
    return sent == stored


async def replies_matched(ctx: JudgeContext, j: Judgement) -> list[Check]:
    index = int(j.params.get("action", 0))
    result = ctx.results[index] if index < len(ctx.results) else {}
    sent = _data_of(ctx.actions[index])
    ids = _ids_of(result)
    if not result.get("ok") or len(ids) != len(sent):
        return [_check(j, False, f"action {index} gave {len(ids)} job id(s) for {len(sent)} "
                       "job(s): nothing to match", len(sent), result)]
    wrong = []
    for data, job_id in zip(sent, ids):
        reply = await ctx.engine({"cmd": "GetJob", "id": str(job_id)})
        job = reply.get("job")
        if not isinstance(job, dict):
            job = {}
        if not _matches(data, job.get("data")):
            wrong.append({"sent": data, "id": job_id, "server_has": job.get("data")})
    return [_check(j, not wrong, f"{len(ids) - len(wrong)} of {len(ids)} job ids match the data "
                   "the client pushed under them", "each id names the job of its own data",
                   wrong or ids)]


async def reordered(ctx: JudgeContext, j: Judgement) -> list[Check]:
    flushed = [e for e in ctx.session.transcript.events
               if e.direction == "send" and isinstance(e.decoded, list) and len(e.decoded) > 1]
    if not flushed:
        ctx.notes.append("the client never had two requests in flight on one connection: the "
                         "replies could not be reordered")
        return []
    n = max(len(e.decoded) for e in flushed)
    return [_check(j, True, f"{len(flushed)} write(s) carried up to {n} replies in reverse order")]


async def no_duplicate_push(ctx: JudgeContext, j: Judgement) -> list[Check]:
    seen: dict[str, int] = {}
    for _, _, msg in ctx.checker.requests:
        jobs = msg.get("jobs") if msg.get("cmd") == "PUSHB" else None
        entries = [msg] if msg.get("cmd") == "PUSH" else \
            list(jobs) if isinstance(jobs, (list, tuple)) else []
        for entry in entries:
            if isinstance(entry, dict):
                key = json.dumps(jsonable([entry.get("name"), entry.get("data")]),
                                 sort_keys=True, default=str)
                seen[key] = seen.get(key, 0) + 1
    twice = {k: n for k, n in seen.items() if n > 1}
    return [_check(j, not twice, f"{len(seen)} distinct job(s) pushed, "
                   f"{len(twice)} of them more than once", "each job pushed once", twice or None)]


async def reconnected(ctx: JudgeContext, j: Judgement) -> list[Check]:
    events = ctx.session.events
    lost = [e for e in events if e["what"] == "restart" or (e["what"] == "open" and e.get("dead"))
            or (e["what"] == "close" and e.get("by") == "server")]
    if not lost:
        ctx.notes.append("no connection was lost: nothing to reconnect")
        return []
    t0 = lost[0]["t"]
    later = [e["conn"] for e in events if e["what"] == "open" and e["t"] > t0 and not e.get("dead")]
    served = [r for r in ctx.checker.replies if r[0] > t0 and r[3].get("ok") is True
              and r[2].get("cmd") not in ("Hello", "Auth", "Ping")]
    ok = bool(later) and bool(served)
    delay = None
    if later:
        delay = round(next(e["t"] for e in events if e["conn"] == later[0]) - t0, 3)
    return [_check(j, ok, f"{len(later)} new connection(s) after the loss (first after "
                   f"{delay} s), {len(served)} command(s) served after it",
                   "a new connection, and commands served after the loss",
                   {"new": later, "delay_s": delay})]


async def closed_dead_link(ctx: JudgeContext, j: Judgement) -> list[Check]:
    dead = [e for e in ctx.session.events if e["what"] == "open" and e.get("dead")]
    closed = [e for e in ctx.session.events
              if e["what"] == "close" and e.get("dead") and e.get("by") == "client"]
    sent = {c: n for c, n in ((e["conn"], sum(1 for r in ctx.checker.requests if r[1] == e["conn"]))
                              for e in dead)}
    return [_check(j, bool(closed), f"{len(closed)} of {len(dead)} unanswered connection(s) "
                   f"closed by the client (requests sent on each: {sent})",
                   "the client tears the dead link down", sent)]


async def heartbeat_cadence(ctx: JudgeContext, j: Judgement) -> list[Check]:
    interval = float(j.params.get("interval_ms", 10000))
    limit = (2 * interval + HEARTBEAT_SLACK_MS) / 1000.0
    out = []
    for job, pulled in ctx.checker.pulled.items():
        done = ctx.checker.finished.get(job)
        if done is None or done - pulled <= limit:
            continue
        marks = [pulled] + [t for t in ctx.checker.heartbeats.get(job, []) if pulled <= t <= done]
        marks.append(done)
        gap = max(b - a for a, b in zip(marks, marks[1:]))
        out.append(_check(j, gap <= limit, f"job {job} held {done - pulled:.3f} s: "
                          f"{len(marks) - 2} heartbeat(s), longest gap {gap:.3f} s",
                          f"a gap of at most {limit:.3f} s", round(gap, 3)))
    if not out:
        ctx.notes.append("no job was held longer than twice the heartbeat interval")
    return out


async def acked_with_tokens(ctx: JudgeContext, j: Judgement) -> list[Check]:
    acked = [(job, token) for job, token in ctx.checker.acks if job in ctx.checker.pulled]
    if not acked:
        return [_check(j, False, "the client never acknowledged or failed a job it pulled",
                       "an ACK, ACKB or FAIL with the job's token", None)]
    bad = [(job, tok) for job, tok in acked if job in ctx.checker.tokens
           and not (isinstance(tok, str) and tok in ctx.checker.tokens[job])]
    return [_check(j, not bad, f"{len(acked)} acknowledgement(s), {len(bad)} without a token "
                   "the server gave", "the lock token of the pull", bad or acked)]


JUDGES: dict[str, Judge] = {f.__name__: f for f in (
    hello_first, authenticated_every_connection, all_completed, replies_matched, reordered,
    no_duplicate_push, reconnected, closed_dead_link, heartbeat_cadence, acked_with_tokens)}
