"""Commands: Cron, CronDelete, CronList, CronGet (cron.yaml)."""

from __future__ import annotations

import heapq
from typing import Any

from ..jobs import _Cron
from ..model import CRON_FIELDS, DEFAULT_JOB_NAME, _documented, _int, _Refused
from ..timers import _zone


class CronCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: cron
    # =========================================================================================
    def _cmd_Cron(self, conn_id: str | None, req: dict, now: float) -> dict:
        schedule = req.get("schedule")
        repeat_every = req.get("repeatEvery")
        tz = req.get("timezone")
        if schedule is None and repeat_every is None:
            raise _Refused("cron_no_schedule")  # BQ-CRON-7
        if tz is not None:
            _zone(tz)
        if schedule is not None:
            repeat_every = None  # schedule wins when both are given
            fields_ = schedule.split()
            if not schedule.startswith("@") and len(fields_) not in CRON_FIELDS:
                raise _Refused("cron_invalid_expression", detail="Cron expression must have "
                               "5 fields, or 6 fields with leading seconds")
        elif _int(repeat_every) <= 0:
            raise _Refused("cron_invalid_repeat")
        existing = self._crons.get(req["name"])
        cron = _Cron(name=req["name"], queue=req["queue"], data=req.get("data"),
                     schedule=schedule, repeat_every=_int(repeat_every) if repeat_every else None,
                     priority=_int(req.get("priority"), 0),
                     max_limit=_int(req["maxLimit"]) if req.get("maxLimit") is not None else None,
                     timezone=tz, job_name=req["jobName"] if isinstance(req.get("jobName"), str)
                     else DEFAULT_JOB_NAME, next_run=0.0,
                     executions=existing.executions if existing else 0,  # BQ-CRON-4: upsert
                     generation=next(self._cron_gen))
        cron.next_run = self._cron_next_run(cron, now)
        self._crons[cron.name] = cron
        self.store.put_cron(cron.to_record())
        if not cron.at_limit():
            heapq.heappush(self._cron_heap, (cron.next_run, cron.generation, cron.name))
        return {"ok": True, "cron": _documented(cron.wire(), self._reply_fields["Cron", ("cron",)])}

    def _cron(self, name: Any) -> _Cron:
        cron = self._crons.get(name) if isinstance(name, str) else None
        if cron is None:
            raise _Refused("cron_not_found")  # BQ-CRON-5
        return cron

    def _cmd_CronDelete(self, conn_id: str | None, req: dict, now: float) -> dict:
        cron = self._cron(req["name"])
        del self._crons[cron.name]
        self.store.delete_cron(cron.name)
        return {"ok": True}

    def _cmd_CronList(self, conn_id: str | None, req: dict, now: float) -> dict:
        fields = self._reply_fields["CronList", ("crons", "[]")]
        return {"ok": True, "crons": [_documented(c.wire(), fields) for c in self._crons.values()]}

    def _cmd_CronGet(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "cron": _documented(self._cron(req["name"]).wire(),
                                                self._reply_fields["CronGet", ("cron",)])}
