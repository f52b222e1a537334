"""Commands: RateLimit, RateLimitClear, SetConcurrency, ClearConcurrency (rate.yaml)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..model import Refused, int_option
from .control import set_queue
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("RateLimit")
def rate_limit(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    limit = req["limit"]
    if not isinstance(limit, (int, float)) or not math.isfinite(limit):
        raise Refused("limit_not_finite")
    q = set_queue(engine, req["queue"], "rate limit changed", rate_limit=limit)  # BQ-RATE-2
    q.pulls.clear()
    return {"ok": True}


@command("RateLimitClear")
def rate_limit_clear(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    if q is not None and q.rate_limit is not None:  # BQ-RATE-3
        q.pulls.clear()
        engine._rate_blocked.discard(q.name)
        set_queue(engine, q.name, "rate limit cleared", rate_limit=None)
    return {"ok": True}


@command("SetConcurrency")
def set_concurrency(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    set_queue(engine, req["queue"], "concurrency changed",
              concurrency=int_option(req["limit"]))  # BQ-CONC-1
    return {"ok": True}


@command("ClearConcurrency")
def clear_concurrency(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    q = engine._queues.get(req["queue"])
    if q is not None and q.concurrency is not None:  # BQ-CONC-2
        set_queue(engine, q.name, "concurrency cleared", concurrency=None)
    return {"ok": True}
