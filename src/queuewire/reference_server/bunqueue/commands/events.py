"""Commands: SubscribeEvents, UnsubscribeEvents (the bunqueue/2.9.5 overlay's job_events)."""

from __future__ import annotations


class EventsCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: job events (profiles with job_events, such as bunqueue/2.9.5)
    # =========================================================================================
    def _cmd_SubscribeEvents(self, conn_id: str | None, req: dict, now: float) -> dict:
        if conn_id is not None:  # BQ-EVENT-101: one queue per connection, the latest wins
            self._unsubscribe(conn_id)
            self._subscription[conn_id] = req["queue"]
            self._subscribers.setdefault(req["queue"], set()).add(conn_id)
        return {"ok": True}

    def _cmd_UnsubscribeEvents(self, conn_id: str | None, req: dict, now: float) -> dict:
        self._unsubscribe(conn_id)
        return {"ok": True}
