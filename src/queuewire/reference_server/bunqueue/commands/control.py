"""Commands: job control (Cancel, Progress, Update, ChangePriority, Promote, MoveToDelayed,
Discard, WaitJob) and queue control (Pause, Resume, IsPaused, Drain, Obliterate, Clean,
ListQueues), as spec/bunqueue/commands/control.yaml lists them."""

from __future__ import annotations

from typing import Any

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


class ControlCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: control
    # =========================================================================================
    def _cmd_Cancel(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_cancellable")
        if job.state not in (WAITING, DELAYED):  # BQ-JOB-9
            raise Refused("job_not_cancellable")
        self._remove(job, now)
        return {"ok": True}

    def _cmd_Progress(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if job.state != ACTIVE:  # BQ-JOB-11
            raise Refused("job_not_active", state=job.state)
        job.progress = req["progress"]
        job.progress_message = req.get("message") if isinstance(req.get("message"), str) \
            else None
        self._save(job)
        self._webhook("job.progress", job, now, progress=job.progress,
                      message=job.progress_message)
        self._job_event("progress", job, now, progress=job.progress)
        return {"ok": True}

    def _cmd_Update(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_updatable")
        job.data = req.get("data")
        self._save(job)
        return {"ok": True}

    def _cmd_ChangePriority(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_queued")
        if job.state not in (WAITING, DELAYED):
            raise Refused("job_not_queued")
        q = self._queues[job.queue]
        pullable = job.state == WAITING and job.pending_deps == 0
        if pullable:
            q.waiting.discard(self._wkey(job))
        self._count_priority(q, job.priority, -1)
        job.priority = int_option(req["priority"])
        self._count_priority(q, job.priority, +1)
        if pullable:
            q.waiting.add(self._wkey(job))
        self._save(job)
        return {"ok": True}

    def _cmd_Promote(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_delayed")
        if not self._allows(job, EV_PROMOTE):  # BQ-JOB-3
            raise Refused("job_not_delayed")
        job.run_at = now
        self._move(job, EV_PROMOTE, now)
        return {"ok": True}

    def _cmd_MoveToDelayed(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if not self._allows(job, EV_MOVE_TO_DELAYED):  # BQ-JOB-6: active jobs only
            raise Refused("job_not_active", state=job.state)
        job.run_at = now + max(0, int_option(req["delay"]))
        self._move(job, EV_MOVE_TO_DELAYED, now)
        self._settle_delayed(job, now)
        return {"ok": True}

    def _cmd_Discard(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if not self._allows(job, EV_DISCARD):  # BQ-JOB-7 (bunqueue: Job not found)
            raise Refused("job_not_found")
        job.failed_reason = DISCARDED_ERROR
        self._move(job, EV_DISCARD, now, error=DISCARDED_ERROR)
        self.total_failed += 1
        return {"ok": True}

    def _wait_job_now(self, job_id: Any, now: float, final: bool) -> dict | None:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is not None and job.state == COMPLETED:
            return {"ok": True, "completed": True, "result": job.returnvalue}
        if job is None and job_id in self._finished:
            return {"ok": True, "completed": True, "result": self._finished[job_id]}
        if job is None or final:  # removed while waited for: it can never complete
            return {"ok": True, "completed": False}
        return None

    def _cmd_WaitJob(self, conn_id: str | None, req: dict, now: float,
                     deadline: float | None = None) -> dict | Wait:
        job_id = req["id"]
        if deadline is None and job_id not in self._jobs and job_id not in self._finished:
            raise Refused("job_not_found")
        reply = self._wait_job_now(job_id, now, final=False)
        if reply is not None:
            return reply  # BQ-WAITJOB-1: at once when already completed
        if deadline is None:
            timeout = int_option(req.get("timeout"), self.wait_job_timeout)
            deadline = now + max(0, timeout)
        if now >= deadline:
            return {"ok": True, "completed": False}  # BQ-WAITJOB-2
        return Wait("job", job_id, deadline, req, conn_id)

    def _set_queue(self, name: str, **changes: Any) -> QueueState:
        q = self._queue(name)
        for key, value in changes.items():
            setattr(q, key, value)
        if q.has_config():
            self.store.put_queue(name, q.config())
        else:
            self.store.delete_queue(name)
        return q

    def _cmd_Pause(self, conn_id: str | None, req: dict, now: float) -> dict:
        self._set_queue(req["queue"], paused=True)  # BQ-QUEUE-1
        return {"ok": True}

    def _cmd_Resume(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None and q.paused:
            self._set_queue(req["queue"], paused=False)
            if q.waiting:
                self._emit(q.name, None, "resumed")
        return {"ok": True}

    def _cmd_IsPaused(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        return {"ok": True, "paused": bool(q and q.paused)}

    def _cmd_Drain(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        ids = list(q.members[WAITING]) if q else []
        for job_id in ids:  # BQ-QUEUE-2: waiting jobs only
            self._remove(self._jobs[job_id], now)
        return {"ok": True, "count": len(ids)}

    def _cmd_Obliterate(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None:  # BQ-QUEUE-3: every job in every state, and the queue's settings
            for job_id in list(q.all):
                self._remove(self._jobs[job_id], now, remember=False)
            del self._queues[q.name]
            self._rate_blocked.discard(q.name)
            self.store.delete_queue(q.name)
        return {"ok": True}

    def _cmd_Clean(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is None:
            return only_documented({"ok": True, "count": 0, "ids": []}, self._reply_fields["Clean", ()])
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
                job = self._jobs[job_id]
                age_from = job.finished_at if s in (COMPLETED, FAILED) else job.created_at
                if age_from is not None and age_from <= cutoff:  # BQ-QUEUE-4
                    self._remove(job, now)
                    removed.append(job_id)
        return only_documented({"ok": True, "count": len(removed), "ids": removed},
                               self._reply_fields["Clean", ()])

    def _cmd_ListQueues(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "queues": [
            {"name": q.name, "waiting": len(q.members[WAITING]),
             "delayed": len(q.members[DELAYED]), "active": len(q.members[ACTIVE]),
             "paused": q.paused} for q in self._queues.values()]}
