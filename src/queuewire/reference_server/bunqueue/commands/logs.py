"""Commands: AddLog, GetLogs (logs.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import LOGS_PER_JOB_MAX, only_documented
from .query import lookup_job
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("AddLog")
def add_log(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = lookup_job(engine, req["id"])
    entries = engine._logs.setdefault(job.id, [])
    entries.append({"message": req["message"], "timestamp": now,
                    "level": req.get("level", engine._defaults["AddLog"].get("level"))})
    if len(entries) > LOGS_PER_JOB_MAX:
        del entries[:len(entries) - LOGS_PER_JOB_MAX]
    engine.store.put_logs(job.id, list(entries))
    return {"ok": True, "data": {"added": True}}


@command("GetLogs")
def get_logs(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    entries = engine._logs.get(req["id"], []) if isinstance(req["id"], str) else []
    data = {"logs": [dict(e) for e in entries], "count": len(entries)}
    return {"ok": True, "data": only_documented(data, engine._reply_fields["GetLogs", ("data",)])}
