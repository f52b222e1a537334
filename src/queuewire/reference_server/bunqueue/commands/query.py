"""Commands: GetJob, GetState, GetResult, GetJobs, the counts, GetJobByCustomId, GetProgress
and GetChildrenValues (query.yaml)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..jobs import Job, QueueState, job_to_wire
from ..model import ACTIVE, COMPLETED, DELAYED, WAITING, Refused, clamp_count
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


def lookup_job(engine: BunqueueEngine, job_id: Any, error: str = "job_not_found") -> Job:
    job = engine._jobs.get(job_id) if isinstance(job_id, str) else None
    if job is None:
        raise Refused(error, id=job_id)
    return job


def _full_wire(engine: BunqueueEngine, job: Job, state: bool = True) -> dict:
    out = job_to_wire(job)
    if state:
        out["state"] = job.state
    if job.has_result:
        out["returnvalue"] = job.returnvalue
    if job.failed_reason is not None:
        out["failedReason"] = job.failed_reason
    return out


@command("GetJob")
def get_job(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    return {"ok": True, "job": _full_wire(engine, lookup_job(engine, req["id"]))}  # BQ-QUERY-1


@command("GetState")
def get_state(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"])
    return {"ok": True, "id": job.id, "state": job.state}


@command("GetResult")
def get_result(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job_id = req["id"]
    job = engine._jobs.get(job_id)
    if job is not None:
        result = job.returnvalue if job.has_result else None
    else:  # BQ-QUERY-3: a removed job's result while the cache holds it, else null
        result = engine._finished.get(job_id)
    return {"ok": True, "id": job_id, "result": result}


def _iter_state(engine: BunqueueEngine, q: QueueState, state: str | None) -> Iterator[str]:
    if state is None:
        return iter(q.all)
    if state == WAITING:  # pull order first, then the jobs held by dependencies
        return itertools.chain((k[2] for k in q.waiting),
                               (j for j in q.members[WAITING]
                                if engine._jobs[j].pending_deps))
    if state == DELAYED:
        return iter(sorted(q.members[DELAYED],
                           key=lambda j: (engine._jobs[j].run_at, engine._jobs[j].seq)))
    return iter(q.members.get(state, ()))


@command("GetJobs")
def get_jobs(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    if q is None:
        return {"ok": True, "jobs": []}
    d = engine._defaults["GetJobs"]
    offset = clamp_count(req.get("offset"), d.get("offset", 0), len(q.all))
    limit = clamp_count(req.get("limit"), d.get("limit"), len(q.all))
    ids = itertools.islice(_iter_state(engine, q, req.get("state")), offset, offset + limit)
    return {"ok": True, "jobs": [_full_wire(engine, engine._jobs[j]) for j in ids]}


@command("GetJobCounts")
def get_job_counts(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    return {"ok": True, "counts": {s: len(q.members[s]) if q else 0 for s in engine.states}}


@command("GetCountsPerPriority")
def get_counts_per_priority(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    counts = {str(p): n for p, n in sorted(q.priorities.items())} if q else {}
    return {"ok": True, "queue": req["queue"], "counts": counts}


@command("GetJobByCustomId")
def get_job_by_custom_id(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = engine._jobs.get(req["customId"])
    if job is None or job.custom_id != req["customId"]:  # BQ-QUERY-2
        raise Refused("job_not_found")
    return {"ok": True, "job": _full_wire(engine, job, state=False)}


@command("Count")
def count(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    return {"ok": True, "count": len(q.all) if q else 0}


@command("GetProgress")
def get_progress(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"])
    if job.state != ACTIVE:
        raise Refused("job_not_active", state=job.state)
    return {"ok": True, "progress": job.progress, "message": job.progress_message}


@command("GetChildrenValues")
def get_children_values(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = engine._jobs.get(req["id"])
    values: dict[str, Any] = {}
    for child in job.depends_on if job is not None else ():  # BQ-DEPS-3
        dep = engine._jobs.get(child)
        if dep is not None and dep.state == COMPLETED:
            values[child] = dep.returnvalue
        elif dep is None and child in engine._finished:
            values[child] = engine._finished[child]
    return {"ok": True, "data": {"values": values}}  # BQ-DEPS-2: empty, never an error
