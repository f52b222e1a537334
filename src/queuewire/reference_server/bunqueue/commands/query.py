"""Commands: GetJob, GetState, GetResult, GetJobs, the counts, GetJobByCustomId, GetProgress
and GetChildrenValues (query.yaml)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from ..jobs import Job, QueueState, job_to_wire
from ..model import ACTIVE, COMPLETED, DELAYED, WAITING, Refused, clamp_count


class QueryCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: query
    # =========================================================================================
    def _job(self, job_id: Any, error: str = "job_not_found") -> Job:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise Refused(error, id=job_id)
        return job

    def _full_wire(self, job: Job, state: bool = True) -> dict:
        out = job_to_wire(job)
        if state:
            out["state"] = job.state
        if job.has_result:
            out["returnvalue"] = job.returnvalue
        if job.failed_reason is not None:
            out["failedReason"] = job.failed_reason
        return out

    def _cmd_GetJob(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "job": self._full_wire(self._job(req["id"]))}  # BQ-QUERY-1

    def _cmd_GetState(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        return {"ok": True, "id": job.id, "state": job.state}

    def _cmd_GetResult(self, conn_id: str | None, req: dict, now: float) -> dict:
        job_id = req["id"]
        job = self._jobs.get(job_id)
        if job is not None:
            result = job.returnvalue if job.has_result else None
        else:  # BQ-QUERY-3: a removed job's result while the cache holds it, else null
            result = self._finished.get(job_id)
        return {"ok": True, "id": job_id, "result": result}

    def _iter_state(self, q: QueueState, state: str | None) -> Iterator[str]:
        if state is None:
            return iter(q.all)
        if state == WAITING:  # pull order first, then the jobs held by dependencies
            return itertools.chain((k[2] for k in q.waiting),
                                   (j for j in q.members[WAITING]
                                    if self._jobs[j].pending_deps))
        if state == DELAYED:
            return iter(sorted(q.members[DELAYED],
                               key=lambda j: (self._jobs[j].run_at, self._jobs[j].seq)))
        return iter(q.members.get(state, ()))

    def _cmd_GetJobs(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is None:
            return {"ok": True, "jobs": []}
        d = self._defaults["GetJobs"]
        offset = clamp_count(req.get("offset"), d.get("offset", 0), len(q.all))
        limit = clamp_count(req.get("limit"), d.get("limit"), len(q.all))
        ids = itertools.islice(self._iter_state(q, req.get("state")), offset, offset + limit)
        return {"ok": True, "jobs": [self._full_wire(self._jobs[j]) for j in ids]}

    def _cmd_GetJobCounts(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        return {"ok": True, "counts": {s: len(q.members[s]) if q else 0 for s in self.states}}

    def _cmd_GetCountsPerPriority(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        counts = {str(p): n for p, n in sorted(q.priorities.items())} if q else {}
        return {"ok": True, "queue": req["queue"], "counts": counts}

    def _cmd_GetJobByCustomId(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._jobs.get(req["customId"])
        if job is None or job.custom_id != req["customId"]:  # BQ-QUERY-2
            raise Refused("job_not_found")
        return {"ok": True, "job": self._full_wire(job, state=False)}

    def _cmd_Count(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        return {"ok": True, "count": len(q.all) if q else 0}

    def _cmd_GetProgress(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if job.state != ACTIVE:
            raise Refused("job_not_active", state=job.state)
        return {"ok": True, "progress": job.progress, "message": job.progress_message}

    def _cmd_GetChildrenValues(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._jobs.get(req["id"])
        values: dict[str, Any] = {}
        for child in job.depends_on if job is not None else ():  # BQ-DEPS-3
            dep = self._jobs.get(child)
            if dep is not None and dep.state == COMPLETED:
                values[child] = dep.returnvalue
            elif dep is None and child in self._finished:
                values[child] = self._finished[child]
        return {"ok": True, "data": {"values": values}}  # BQ-DEPS-2: empty, never an error
