"""Commands: RateLimit, RateLimitClear, SetConcurrency, ClearConcurrency (rate.yaml)."""

from __future__ import annotations

import math

from ..model import Refused, int_option


class RateCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: rate limiting
    # =========================================================================================
    def _cmd_RateLimit(self, conn_id: str | None, req: dict, now: float) -> dict:
        limit = req["limit"]
        if not isinstance(limit, (int, float)) or not math.isfinite(limit):
            raise Refused("limit_not_finite")
        q = self._set_queue(req["queue"], rate_limit=limit)  # BQ-RATE-2
        q.pulls.clear()
        if q.waiting:
            self._emit(q.name, None, "rate limit changed")
        return {"ok": True}

    def _cmd_RateLimitClear(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None and q.rate_limit is not None:  # BQ-RATE-3
            self._set_queue(q.name, rate_limit=None)
            q.pulls.clear()
            self._rate_blocked.discard(q.name)
            if q.waiting:
                self._emit(q.name, None, "rate limit cleared")
        return {"ok": True}

    def _cmd_SetConcurrency(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._set_queue(req["queue"], concurrency=int_option(req["limit"]))  # BQ-CONC-1
        if q.waiting:
            self._emit(q.name, None, "concurrency changed")
        return {"ok": True}

    def _cmd_ClearConcurrency(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None and q.concurrency is not None:  # BQ-CONC-2
            self._set_queue(q.name, concurrency=None)
            if q.waiting:
                self._emit(q.name, None, "concurrency cleared")
        return {"ok": True}
