"""Parking long polls on a bunqueue engine: one implementation for the TCP and HTTP shells.

The engine answers a PULL with a timeout, or a WaitJob, with a ``Wait`` instead of a reply.
A :class:`WaitRoom` holds it as a future keyed by what it waits on (``(wait.kind, wait.key)``):
``wake(event)`` resolves the futures an engine event concerns, the parked coroutine then asks
``engine.retry`` (which may answer or wait again), and at the deadline ``engine.expire``
answers. The engine keeps no record of parked waits, so a room can be dropped at any time;
``cancel_all`` releases every parked poll at shutdown.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .engine import BunqueueEngine
from .model import Event, Wait


class WaitRoom:
    def __init__(self, engine: BunqueueEngine):
        self.engine = engine
        self._waits: dict[tuple[str, str], set[asyncio.Future]] = {}

    async def park(self, conn_id: str | None, wait: Wait) -> dict[str, Any]:
        """Hold a long poll until an event wakes it (then ``retry``) or its deadline passes
        (then ``expire``); answers the reply."""
        loop = asyncio.get_running_loop()
        while True:
            key = (wait.kind, wait.key)
            future = loop.create_future()
            self._waits.setdefault(key, set()).add(future)
            try:
                timeout = max(0.0, (wait.deadline_ms - time.time() * 1000.0) / 1000.0)
                done, _ = await asyncio.wait((future,), timeout=timeout)
            finally:
                waiting = self._waits.get(key)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waits[key]
                future.cancel()
            if not done:
                return self.engine.expire(wait)
            again = self.engine.retry(conn_id, wait)
            if not isinstance(again, Wait):
                return again
            wait = again

    def __bool__(self) -> bool:
        """Whether any poll is parked (cheap: the notify hot path asks it per event batch)."""
        return bool(self._waits)

    @property
    def parked(self) -> int:
        """How many long polls are parked now."""
        return sum(len(futures) for futures in self._waits.values())

    def wake(self, event: Event) -> None:
        """Resolve the parked polls this engine event concerns."""
        for key in (("queue", event.queue), ("job", event.job_id)):
            if key[1] is None:
                continue
            for future in self._waits.get(key, ()):
                if not future.done():
                    future.set_result(event)

    def cancel_all(self) -> None:
        for futures in self._waits.values():
            for future in futures:
                future.cancel()
