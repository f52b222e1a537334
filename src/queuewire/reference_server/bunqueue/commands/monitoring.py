"""Commands: Ping, Hello, Stats, Metrics, Prometheus, StorageStatus, Heartbeat, JobHeartbeat
and JobHeartbeatB (monitoring.yaml)."""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..model import ACTIVE, COMPLETED, DELAYED, FAILED, MB, WAITING, Refused
from ..store import StorageStatus
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("Ping")
def ping(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    return {"ok": True, "data": {"pong": True, "time": now}}


@command("Hello")
def hello(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    return {"ok": True, "protocolVersion": engine.spec.protocol_version,  # BQ-HELLO-2
            "capabilities": list(engine.spec.capabilities), "server": engine._hello_server,
            "version": engine.config.server_version}


def _totals(engine: BunqueueEngine) -> dict[str, int]:
    totals = dict.fromkeys(engine.states, 0)
    for q in engine._queues.values():
        for state, members in q.members.items():
            totals[state] += len(members)
    return totals


@command("Stats")
def stats(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    t = _totals(engine)
    return {"ok": True, "stats": {
        "queued": t[WAITING], "processing": t[ACTIVE], "delayed": t[DELAYED],
        "dlq": t[FAILED], "completed": t[COMPLETED], "uptime": now - engine.started_at,
        "pushPerSec": engine._push_meter.rate(now), "pullPerSec": engine._pull_meter.rate(now)}}


@command("Metrics")
def metrics(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    memory = engine.config.memory_usage_mb or _process_memory_mb
    return {"ok": True, "metrics": {
        "totalPushed": engine.total_pushed, "totalPulled": engine.total_pulled,
        "totalCompleted": engine.total_completed, "totalFailed": engine.total_failed,
        # queue latency: from runnable (runAt) to pulled, over every pull
        "avgLatencyMs": engine._latency_sum / engine.total_pulled if engine.total_pulled else 0.0,
        # processing time: from pulled to acknowledged, over every completion
        "avgProcessingMs": engine._processing_sum / engine.total_completed
        if engine.total_completed else 0.0,
        "memoryUsageMb": float(memory()),
        "sqliteSizeMb": engine.store.size_bytes() / MB,
        "activeConnections": len(engine._connections)}}


@command("Prometheus")
def prometheus(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    return {"ok": True, "data": {"metrics": prometheus_text(engine, now)}}


def prometheus_text(engine: BunqueueEngine, now: float | None = None) -> str:
    """Metrics in the Prometheus text exposition format (version 0.0.4), with bunqueue's
    metric names so that existing dashboards read them."""
    now = engine._now() if now is None else now
    t = _totals(engine)
    lines: list[str] = []

    def metric(name: str, kind: str, doc: str, samples: Iterable[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {_prom_number(v)}" for labels, v in samples)

    for state, name, doc in ((WAITING, "waiting", "Number of jobs waiting in queue"),
                             (DELAYED, "delayed", "Number of delayed jobs"),
                             (ACTIVE, "active", "Number of jobs being processed"),
                             (FAILED, "dlq", "Number of jobs in dead letter queue"),
                             (COMPLETED, "completed", "Number of completed jobs")):
        metric(f"bunqueue_jobs_{name}", "gauge", doc, [("", t[state])])
    for name, value, doc in (("pushed", engine.total_pushed, "Total jobs pushed"),
                             ("pulled", engine.total_pulled, "Total jobs pulled"),
                             ("completed", engine.total_completed, "Total jobs completed"),
                             ("failed", engine.total_failed, "Total jobs failed")):
        metric(f"bunqueue_jobs_{name}_total", "counter", doc, [("", value)])
    metric("bunqueue_uptime_seconds", "gauge", "Server uptime in seconds",
           [("", (now - engine.started_at) // 1000)])
    metric("bunqueue_cron_jobs_registered", "gauge", "Number of registered cron jobs",
           [("", len(engine._crons))])
    metric("bunqueue_workers_registered", "gauge", "Number of registered workers",
           [("", len(engine._workers))])
    metric("bunqueue_webhooks_registered", "gauge", "Number of registered webhooks",
           [("", len(engine._webhooks))])
    for state, name in ((WAITING, "waiting"), (DELAYED, "delayed"), (ACTIVE, "active"),
                        (COMPLETED, "completed"), (FAILED, "dlq")):
        metric(f"bunqueue_queue_jobs_{name}", "gauge", f"Number of {name} jobs per queue",
               [(f'{{queue="{_prom_label(q.name)}"}}', len(q.members[state]))
                for q in engine._queues.values()])
    return "\n".join(lines) + "\n"


@command("StorageStatus")
def storage_status(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    status: StorageStatus = engine.store.status()
    return {"ok": True, "data": {"diskFull": status.disk_full, "error": status.error,
                                 "since": status.since}}


@command("Heartbeat")
def heartbeat(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    worker = engine._workers.get(req["id"]) if isinstance(req["id"], str) else None
    if worker is None:
        raise Refused("worker_not_found")  # BQ-REG-2
    worker.last_seen = now  # BQ-REG-1
    return {"ok": True, "data": {"ok": True}}


def _heartbeat_job(engine: BunqueueEngine, job_id: Any, token: Any, now: float) -> bool:
    job = engine._jobs.get(job_id) if isinstance(job_id, str) else None
    if job is None or job.state != ACTIVE:
        return False
    if isinstance(token, str) and job.lock_token is not None:
        if not hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                   job.lock_token.encode()) \
                or (job.lock_expires is not None and now >= job.lock_expires):
            return False
        job.lock_expires = now + (job.lock_ttl or engine.lock_ttl)  # BQ-LOCK-3
        engine._timer(job.lock_expires, "lock", job)
    elif isinstance(token, str):
        return False  # a token for a job that holds no lock
    job.last_heartbeat = now  # BQ-STALL-3
    engine._timer(now + engine.stall_interval, "stall", job)
    return True


@command("JobHeartbeat")
def job_heartbeat(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    if not _heartbeat_job(engine, req["id"], req.get("token"), now):
        raise Refused("job_heartbeat_refused")
    return {"ok": True, "data": {"ok": True}}


@command("JobHeartbeatB")
def job_heartbeat_b(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    tokens = req.get("tokens") or []
    count = sum(_heartbeat_job(engine, job_id, tokens[i] if i < len(tokens) else None, now)
                for i, job_id in enumerate(req["ids"]))
    return {"ok": True, "data": {"ok": True, "count": count}}



def _process_memory_mb() -> float:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError, IndexError, AttributeError):
        try:
            import resource
        except ImportError:
            return 0.0
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024





def _prom_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prom_number(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)
