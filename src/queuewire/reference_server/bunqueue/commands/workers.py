"""Commands: RegisterWorker, UnregisterWorker, ListWorkers (workers.yaml)."""

from __future__ import annotations

from ..jobs import RegisteredWorker, uuid7
from ..model import Refused, int_option, only_documented


class WorkersCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: workers
    # =========================================================================================
    def _worker_wire(self, w: RegisteredWorker, now: float) -> dict:
        """Everything a worker record can carry; the handlers keep what the profile defines."""
        return {"id": w.id, "name": w.name, "queues": list(w.queues),
                "registeredAt": w.registered_at, "lastSeen": w.last_seen,
                "activeJobs": self._owner_active.get(w.id, 0), "processedJobs": w.processed,
                "failedJobs": w.failed, "concurrency": w.concurrency, "hostname": w.hostname,
                "pid": w.pid,
                "status": "active" if now - w.last_seen < self.worker_timeout else "stale",
                "uptime": now - w.registered_at}

    def _cmd_RegisterWorker(self, conn_id: str | None, req: dict, now: float) -> dict:
        wid = req.get("workerId") if isinstance(req.get("workerId"), str) and req["workerId"] \
            else uuid7(now)
        started = req.get("startedAt")
        worker = RegisteredWorker(
            id=wid, name=req["name"], queues=list(req.get("queues") or []),
            registered_at=float(started) if isinstance(started, (int, float))
            and not isinstance(started, bool) else now,
            last_seen=now, concurrency=max(1, int_option(req.get("concurrency"), 1)),
            hostname=req["hostname"] if isinstance(req.get("hostname"), str)
            else "unknown", pid=int_option(req.get("pid"), 0), conn_id=conn_id)
        previous = self._workers.get(wid)
        if previous is not None:  # re-registration keeps the counters
            worker.processed, worker.failed = previous.processed, previous.failed
        self._workers[wid] = worker
        wire = self._worker_wire(worker, now)
        data = {"workerId": wid, **{k: v for k, v in wire.items() if k != "id"}}
        return {"ok": True,
                "data": only_documented(data, self._reply_fields["RegisterWorker", ("data",)])}

    def _cmd_UnregisterWorker(self, conn_id: str | None, req: dict, now: float) -> dict:
        if self._workers.pop(req["workerId"], None) is None:
            raise Refused("worker_not_found")
        return {"ok": True, "data": {"removed": True}}

    def _cmd_ListWorkers(self, conn_id: str | None, req: dict, now: float) -> dict:
        workers = [self._worker_wire(w, now) for w in self._workers.values()]
        stats = {"total": len(workers),
                 "active": sum(w["status"] == "active" for w in workers),
                 "totalProcessed": sum(w["processedJobs"] for w in workers),
                 "totalFailed": sum(w["failedJobs"] for w in workers),
                 "activeJobs": sum(w["activeJobs"] for w in workers),
                 "concurrencySlots": sum(w["concurrency"] for w in workers)}
        fields = self._reply_fields["ListWorkers", ("data", "workers", "[]")]
        return {"ok": True, "data": {"workers": [only_documented(w, fields) for w in workers],
                                     "stats": stats}}
