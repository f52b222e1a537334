"""Commands: AddLog, GetLogs (logs.yaml)."""

from __future__ import annotations

from ..model import LOGS_PER_JOB_MAX, only_documented


class LogsCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: logs
    # =========================================================================================
    def _cmd_AddLog(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        entries = self._logs.setdefault(job.id, [])
        entries.append({"message": req["message"], "timestamp": now,
                        "level": req.get("level", self._defaults["AddLog"].get("level"))})
        if len(entries) > LOGS_PER_JOB_MAX:
            del entries[:len(entries) - LOGS_PER_JOB_MAX]
        self.store.put_logs(job.id, list(entries))
        return {"ok": True, "data": {"added": True}}

    def _cmd_GetLogs(self, conn_id: str | None, req: dict, now: float) -> dict:
        entries = self._logs.get(req["id"], []) if isinstance(req["id"], str) else []
        data = {"logs": [dict(e) for e in entries], "count": len(entries)}
        return {"ok": True, "data": only_documented(data, self._reply_fields["GetLogs", ("data",)])}
