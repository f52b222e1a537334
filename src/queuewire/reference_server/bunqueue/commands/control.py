"""Commands: job control (Cancel, Progress, Update, ChangePriority, Promote, MoveToDelayed,
Discard, WaitJob) and queue control (Pause, Resume, IsPaused, Drain, Obliterate, Clean,
ListQueues), as spec/bunqueue/commands/control.yaml lists them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..jobs import QueueState
from ..model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    DISCARDED_ERROR,
    EV_DISCARD,
    EV_MOVE_TO_DELAYED,
    EV_PROMOTE,
    FAILED,
    WAITING,
    Refused,
    Wait,
    clamp_count,
    int_option,
    only_documented,
)
from .query import lookup_job
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("Cancel")
def cancel(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"], "job_not_cancellable")
    if job.state not in (WAITING, DELAYED):  # BQ-JOB-9
        raise Refused("job_not_cancellable")
    engine._remove(job, now)
    return {"ok": True}


@command("Progress")
def progress(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"])
    if job.state != ACTIVE:  # BQ-JOB-11
        raise Refused("job_not_active", state=job.state)
    job.progress = req["progress"]
    job.progress_message = req.get("message") if isinstance(req.get("message"), str) \
        else None
    engine._save(job)
    engine._webhook("job.progress", job, now, progress=job.progress,
                  message=job.progress_message)
    engine._job_event("progress", job, now, progress=job.progress)
    return {"ok": True}


@command("Update")
def update(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"], "job_not_updatable")
    job.data = req.get("data")
    engine._save(job)
    return {"ok": True}


@command("ChangePriority")
def change_priority(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"], "job_not_queued")
    if job.state not in (WAITING, DELAYED):
        raise Refused("job_not_queued")
    q = engine._queues[job.queue]
    pullable = job.state == WAITING and job.pending_deps == 0
    if pullable:
        q.waiting.discard(engine._wkey(job))
    engine._count_priority(q, job.priority, -1)
    job.priority = int_option(req["priority"])
    engine._count_priority(q, job.priority, +1)
    if pullable:
        q.waiting.add(engine._wkey(job))
    engine._save(job)
    return {"ok": True}


@command("Promote")
def promote(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"], "job_not_delayed")
    if not engine._allows(job, EV_PROMOTE):  # BQ-JOB-3
        raise Refused("job_not_delayed")
    job.run_at = now
    engine._move(job, EV_PROMOTE, now)
    return {"ok": True}


@command("MoveToDelayed")
def move_to_delayed(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"])
    if not engine._allows(job, EV_MOVE_TO_DELAYED):  # BQ-JOB-6: active jobs only
        raise Refused("job_not_active", state=job.state)
    job.run_at = now + max(0, int_option(req["delay"]))
    engine._move(job, EV_MOVE_TO_DELAYED, now)
    engine._settle_delayed(job, now)
    return {"ok": True}


@command("Discard")
def discard(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"])
    if not engine._allows(job, EV_DISCARD):  # BQ-JOB-7 (bunqueue: Job not found)
        raise Refused("job_not_found")
    job.failed_reason = DISCARDED_ERROR
    engine._move(job, EV_DISCARD, now, error=DISCARDED_ERROR)
    engine.total_failed += 1
    return {"ok": True}


@command("WaitJob")
def wait_job(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float,
                 deadline: float | None = None) -> dict | Wait:
    job_id = req["id"]
    if deadline is None and job_id not in engine._jobs and job_id not in engine._finished:
        raise Refused("job_not_found")
    reply = engine._wait_job_now(job_id, now, final=False)
    if reply is not None:
        return reply  # BQ-WAITJOB-1: at once when already completed
    if deadline is None:
        timeout = int_option(req.get("timeout"), int(engine.wait_job_timeout))
        deadline = now + max(0, timeout)
    if now >= deadline:
        return {"ok": True, "completed": False}  # BQ-WAITJOB-2
    return Wait("job", job_id, deadline, req, conn_id)


def set_queue(engine: BunqueueEngine, name: str, wake: str | None = None,
              **changes: Any) -> QueueState:
    """Change queue ``name``'s settings and store them; with ``wake`` (the reason), a queue
    holding waiting jobs is announced, so that parked pulls try again under the new settings."""
    q = engine._queue(name)
    for key, value in changes.items():
        setattr(q, key, value)
    if q.has_config():
        engine.store.put_queue(name, q.config())
    else:
        engine.store.delete_queue(name)
    if wake is not None and q.waiting:
        engine._emit(q.name, None, wake)
    return q


@command("Pause")
def pause(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    set_queue(engine, req["queue"], paused=True)  # BQ-QUEUE-1
    return {"ok": True}


@command("Resume")
def resume(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    if q is not None and q.paused:
        set_queue(engine, req["queue"], "resumed", paused=False)
    return {"ok": True}


@command("IsPaused")
def is_paused(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    return {"ok": True, "paused": bool(q and q.paused)}


@command("Drain")
def drain(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    ids = list(q.members[WAITING]) if q else []
    for job_id in ids:  # BQ-QUEUE-2: waiting jobs only
        engine._remove(engine._jobs[job_id], now)
    return {"ok": True, "count": len(ids)}


@command("Obliterate")
def obliterate(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    if q is not None:  # BQ-QUEUE-3: every job in every state, and the queue's settings
        for job_id in list(q.all):
            engine._remove(engine._jobs[job_id], now, remember=False)
        del engine._queues[q.name]
        engine._rate_blocked.discard(q.name)
        engine.store.delete_queue(q.name)
    return {"ok": True}


@command("Clean")
def clean(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    if q is None:
        return only_documented({"ok": True, "count": 0, "ids": []}, engine._reply_fields["Clean", ()])
    state = req.get("state")
    states = (WAITING, DELAYED, COMPLETED, FAILED) if state is None else \
        ((state,) if state in (WAITING, DELAYED, COMPLETED, FAILED) else ())  # BQ-QUEUE-5
    limit = clamp_count(req.get("limit"), None, len(q.all))
    cutoff = now - req["grace"]
    removed: list[str] = []
    for s in states:
        for job_id in list(q.members[s]):
            if len(removed) >= limit:
                break
            job = engine._jobs[job_id]
            age_from = job.finished_at if s in (COMPLETED, FAILED) else job.created_at
            if age_from is not None and age_from <= cutoff:  # BQ-QUEUE-4
                engine._remove(job, now)
                removed.append(job_id)
    return only_documented({"ok": True, "count": len(removed), "ids": removed},
                           engine._reply_fields["Clean", ()])


@command("ListQueues")
def list_queues(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    return {"ok": True, "queues": [
        {"name": q.name, "waiting": len(q.members[WAITING]),
         "delayed": len(q.members[DELAYED]), "active": len(q.members[ACTIVE]),
         "paused": q.paused} for q in engine._queues.values()]}
