"""Commands: SubscribeEvents, UnsubscribeEvents (the bunqueue/2.9.5 overlay's job_events)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("SubscribeEvents")
def subscribe_events(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    if conn_id is not None:  # BQ-EVENT-101: one queue per connection, the latest wins
        engine._unsubscribe(conn_id)
        engine._subscription[conn_id] = req["queue"]
        engine._subscribers.setdefault(req["queue"], set()).add(conn_id)
    return {"ok": True}


@command("UnsubscribeEvents")
def unsubscribe_events(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    engine._unsubscribe(conn_id)
    return {"ok": True}
