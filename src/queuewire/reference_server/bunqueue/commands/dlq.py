"""Commands: Dlq, RetryDlq, PurgeDlq, RetryCompleted (dlq.yaml)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..jobs import Job, job_to_wire
from ..model import COMPLETED, EV_RETRY_COMPLETED, EV_RETRY_DLQ, FAILED, clamp_count
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("Dlq")
def dlq(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    ids = list(q.members[FAILED]) if q else []
    if req.get("count") is not None:
        ids = ids[:clamp_count(req["count"], None, len(ids))]
    return {"ok": True, "jobs": [job_to_wire(engine._jobs[j]) for j in ids]}


def _requeue(engine: BunqueueEngine, job: Job, event: str, now: float) -> None:
    q = engine._queues[job.queue]
    if job.unique_key is not None and q.unique.get(job.unique_key) not in (None, job.id):
        job.unique_key = None  # another job holds the key now; this one gives it up
    job.run_at = now
    engine._move(job, event, now)


def _retry_from(engine: BunqueueEngine, queue: str, wanted: str | None, state: str, event: str,
                now: float, reset: Callable[[Any], None]) -> dict:
    """Move one job (``wanted``) or every job of ``state`` in ``queue`` back to waiting
    along ``event``'s row, after ``reset`` clears what the old run left; jobs of another
    queue or state are skipped. Answers the count moved."""
    q = engine._queues.get(queue)
    if q is None:
        return {"ok": True, "count": 0}
    ids = [wanted] if wanted is not None else list(q.members[state])
    count = 0
    for job_id in ids:
        job = engine._jobs.get(job_id)
        if job is None or job.queue != q.name or not engine._allows(job, event):
            continue
        reset(job)
        _requeue(engine, job, event, now)
        count += 1
    return {"ok": True, "count": count}


@command("RetryDlq")
def retry_dlq(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    def reset(job: Any) -> None:
        job.attempts = job.stall_count = 0

    # BQ-JOB-8, BQ-DLQ-1
    return _retry_from(engine, req["queue"], req.get("jobId"), FAILED, EV_RETRY_DLQ, now, reset)


@command("PurgeDlq")
def purge_dlq(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    ids = list(q.members[FAILED]) if q else []
    for job_id in ids:
        engine._remove(engine._jobs[job_id], now)
    return {"ok": True, "count": len(ids)}


@command("RetryCompleted")
def retry_completed(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    def reset(job: Any) -> None:
        job.has_result, job.returnvalue, job.completed_at = False, None, None
        job.progress, job.progress_message = 0, None

    # BQ-JOB-8, BQ-DLQ-2
    return _retry_from(engine, req["queue"], req.get("id"), COMPLETED, EV_RETRY_COMPLETED,
                            now, reset)
