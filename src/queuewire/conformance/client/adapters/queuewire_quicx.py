"""Testee adapter for queuewire's quicx producer and worker (``queuewire.client.quicx``).

Run: ``python -m queuewire.conformance.client.adapters.queuewire_quicx``. ``submit`` uses a
:class:`~queuewire.client.quicx.QuicxProducer` (``timeout`` ms bounds MSG_OK; with
``wait_result`` the forwarded result is awaited too) and answers ``{"id", "status"}``;
``work`` runs a :class:`~queuewire.client.quicx.QuicxWorker` with a handler per type (taking
``work_ms``) until ``count`` tasks ran, then stops it gracefully, answering ``{"ids"}``.
``heartbeat_interval`` and ``pong_timeout`` (ms) go to both. Errors: QuicxTimeout -> timeout,
QuicxConnectionLost -> connection_lost, QuicxRefused -> refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ....client.quicx import QuicxProducer, QuicxWorker
from ....client.quicx_session import QuicxConnectionLost, QuicxRefused, QuicxTimeout
from ....client.session import ClientError
from .contract import Unsupported, error_type, fail, ok, serve


class Player:
    def __init__(self, request: dict[str, Any]):
        host, _, port = str(request["target"]).rpartition(":")
        self.host, self.port = host, int(port)
        self.profile = request.get("profile") or "quicx/v1"
        o = request.get("options") or {}
        self.timeout = float(o.get("timeout", 10000)) / 1000.0
        self.link: dict[str, Any] = {}
        if o.get("heartbeat_interval") is not None:
            self.link["heartbeat_interval"] = float(o["heartbeat_interval"]) / 1000.0
        if o.get("pong_timeout") is not None:
            self.link["pong_timeout"] = float(o["pong_timeout"]) / 1000.0
        self.producer: QuicxProducer | None = None

    async def act(self, action: dict[str, Any]) -> Any:
        op = action.get("op")
        if op == "submit":
            if self.producer is None:
                self.producer = await QuicxProducer(self.host, self.port, profile=self.profile,
                                                    timeout=self.timeout, **self.link).connect()
            payload = str(action.get("payload", "")).encode()
            if action.get("wait_result"):
                res = await self.producer.submit(action["type"], payload, result_timeout=float(
                    action.get("timeout_ms", 10000)) / 1000.0)
                return {"id": res.task_id, "status": res.status}
            sub = self.producer.session.submit(action["type"], payload)
            self.producer._link.dispatch([])  # noqa: SLF001 - send without awaiting the result
            await self.producer._link.drain()  # noqa: SLF001
            for _ in range(int(self.timeout * 100)):
                if sub.task_id is not None:
                    return {"id": sub.task_id, "status": sub.state.value}
                if sub.error is not None:
                    raise sub.error
                await asyncio.sleep(0.01)
            raise QuicxTimeout(f"no MSG_OK within {self.timeout} s")
        if op == "work":
            return await self.work(action)
        if op == "sleep":
            await asyncio.sleep(float(action.get("ms", 0)) / 1000.0)
            return None
        raise Unsupported(f"unknown op {op!r}")

    async def work(self, action: dict[str, Any]) -> Any:
        want = int(action.get("count", 1))
        work = float(action.get("work_ms", 0)) / 1000.0
        ids: list[int] = []
        done = asyncio.Event()

        async def handler(task: Any) -> None:
            if work:
                await asyncio.sleep(work)
            ids.append(task.task_id)   # counted once run to its end (a dropped link cancels it)
            if len(ids) >= want:
                done.set()

        worker = QuicxWorker(self.host, self.port, profile=self.profile,
                             handlers={t: handler for t in action.get("types") or ()},
                             **self.link)
        await worker.start()
        try:
            await asyncio.wait_for(done.wait(), float(action.get("timeout_ms", 10000)) / 1000.0)
        except TimeoutError:
            raise QuicxTimeout(f"ran {len(ids)} of {want} task(s) in time") from None
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.stop(timeout=2 + work), 3 + work)
        return {"ids": ids}

    async def close(self) -> None:
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.producer.close(grace=1), 2)


async def play(request: dict[str, Any]) -> list[dict[str, Any]]:
    player = Player(request)
    results = []
    try:
        for action in request.get("actions") or ():
            try:
                results.append(ok(await player.act(action)))
            except (ClientError, Unsupported, TimeoutError) as exc:
                results.append(fail(exc, error_type(
                    exc, timeout=(QuicxTimeout, TimeoutError),
                    connection_lost=QuicxConnectionLost, refused=QuicxRefused)))
    finally:
        await player.close()
    return results


if __name__ == "__main__":
    serve(play)
