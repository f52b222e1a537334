"""Commands: RegisterWorker, UnregisterWorker, ListWorkers (workers.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..jobs import RegisteredWorker, uuid7
from ..model import Refused, int_option, only_documented
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


def _worker_wire(engine: BunqueueEngine, w: RegisteredWorker, now: float) -> dict:
    """Everything a worker record can carry; the handlers keep what the profile defines."""
    return {"id": w.id, "name": w.name, "queues": list(w.queues),
            "registeredAt": w.registered_at, "lastSeen": w.last_seen,
            "activeJobs": engine._owner_active.get(w.id, 0), "processedJobs": w.processed,
            "failedJobs": w.failed, "concurrency": w.concurrency, "hostname": w.hostname,
            "pid": w.pid,
            "status": "active" if now - w.last_seen < engine.worker_timeout else "stale",
            "uptime": now - w.registered_at}


@command("RegisterWorker")
def register_worker(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    given = req.get("workerId")
    wid = given if isinstance(given, str) and given else uuid7(now)
    started = req.get("startedAt")
    worker = RegisteredWorker(
        id=wid, name=req["name"], queues=list(req.get("queues") or []),
        registered_at=float(started) if isinstance(started, (int, float))
        and not isinstance(started, bool) else now,
        last_seen=now, concurrency=max(1, int_option(req.get("concurrency"), 1)),
        hostname=req["hostname"] if isinstance(req.get("hostname"), str)
        else "unknown", pid=int_option(req.get("pid"), 0), conn_id=conn_id)
    previous = engine._workers.get(wid)
    if previous is not None:  # re-registration keeps the counters
        worker.processed, worker.failed = previous.processed, previous.failed
    engine._workers[wid] = worker
    wire = _worker_wire(engine, worker, now)
    data = {"workerId": wid, **{k: v for k, v in wire.items() if k != "id"}}
    return {"ok": True,
            "data": only_documented(data, engine._reply_fields["RegisterWorker", ("data",)])}


@command("UnregisterWorker")
def unregister_worker(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    if engine._workers.pop(req["workerId"], None) is None:
        raise Refused("worker_not_found")
    return {"ok": True, "data": {"removed": True}}


@command("ListWorkers")
def list_workers(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    workers = [_worker_wire(engine, w, now) for w in engine._workers.values()]
    stats = {"total": len(workers),
             "active": sum(w["status"] == "active" for w in workers),
             "totalProcessed": sum(w["processedJobs"] for w in workers),
             "totalFailed": sum(w["failedJobs"] for w in workers),
             "activeJobs": sum(w["activeJobs"] for w in workers),
             "concurrencySlots": sum(w["concurrency"] for w in workers)}
    fields = engine._reply_fields["ListWorkers", ("data", "workers", "[]")]
    return {"ok": True, "data": {"workers": [only_documented(w, fields) for w in workers],
                                 "stats": stats}}
