"""Testee adapter for queuewire's own bunqueue client (``queuewire.client``: Queue, Worker).

Run: ``python -m queuewire.conformance.client.adapters.queuewire_client``. Options map onto
:class:`~queuewire.client.ConnectionOptions` (``command_timeout``, ``token``,
``ping_interval``, ``max_command_timeouts``, ``pool_size``) and
:class:`~queuewire.client.WorkerOptions` (``heartbeat_interval``, ``lock_ttl``); errors map
by class: BunqueueTimeout -> timeout, BunqueueConnectionLost -> connection_lost,
BunqueueRefused -> refused, any other ClientError -> other.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ....client import (
    BunqueueConnectionLost,
    BunqueueRefused,
    BunqueueTimeout,
    ClientError,
    Queue,
    Worker,
)
from .contract import Unsupported, error_type, fail, ok, serve

CONNECTION_OPTIONS = ("command_timeout", "token", "ping_interval", "max_command_timeouts",
                      "pool_size")
WORKER_OPTIONS = ("heartbeat_interval", "lock_ttl")
CLOSE_TIMEOUT = 2.0


class Player:
    def __init__(self, request: dict[str, Any]):
        host, _, port = str(request["target"]).rpartition(":")
        options = request.get("options") or {}
        self.profile = request.get("profile") or "bunqueue/v2"
        self.connection: dict[str, Any] = {"host": host, "port": int(port)}
        for key in CONNECTION_OPTIONS:
            if options.get(key) is not None:
                self.connection[key] = options[key]
        self.worker_options = {k: options[k] for k in WORKER_OPTIONS if options.get(k) is not None}
        self.queues: dict[str, Queue] = {}

    def queue(self, name: str) -> Queue:
        if name not in self.queues:
            self.queues[name] = Queue(name, connection=self.connection, profile=self.profile)
        return self.queues[name]

    async def act(self, action: dict[str, Any]) -> Any:
        op = action.get("op")
        if op == "add":
            job = await self.queue(action["queue"]).add(action.get("name"), action.get("data"))
            return {"id": job.id}
        if op == "add_many":
            queue = self.queue(action["queue"])
            jobs = await asyncio.gather(*(queue.add(action.get("name"), item)
                                          for item in action.get("items") or ()))
            return {"ids": [job.id for job in jobs]}
        if op == "count":
            return await self.queue(action["queue"]).count()
        if op == "get_job":
            found = await self.queue(action["queue"]).get_job(action["id"])
            return None if found is None else {"id": found.id}
        if op == "sleep":
            await asyncio.sleep(float(action.get("ms", 0)) / 1000.0)
            return None
        if op == "process":
            return await self.process(action)
        raise Unsupported(f"unknown op {op!r}")

    async def process(self, action: dict[str, Any]) -> Any:
        want = int(action.get("count", 1))
        work = float(action.get("work_ms", 0)) / 1000.0
        ids: list[str] = []
        errors: list[str] = []
        done = asyncio.Event()

        async def processor(job: Any) -> Any:
            ids.append(job.id)
            if work:
                await asyncio.sleep(work)
            if len(ids) >= want:
                done.set()
            return {"processed": job.id}

        worker = Worker(action["queue"], processor, connection=self.connection,
                        profile=self.profile, autorun=False,
                        on_error=lambda exc: errors.append(str(exc)), **self.worker_options)
        await worker.run()
        try:
            await asyncio.wait_for(done.wait(), float(action.get("timeout_ms", 10000)) / 1000.0)
        except TimeoutError:
            raise BunqueueTimeout(f"processed {len(ids)} of {want} job(s) in time") from None
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.close(), CLOSE_TIMEOUT + work)
        return {"ids": ids, "errors": errors}

    async def close(self) -> None:
        for queue in self.queues.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(queue.close(), CLOSE_TIMEOUT)


async def play(request: dict[str, Any]) -> list[dict[str, Any]]:
    player = Player(request)
    results = []
    try:
        for action in request.get("actions") or ():
            try:
                results.append(ok(await player.act(action)))
            except (ClientError, Unsupported) as exc:
                results.append(fail(exc, error_type(
                    exc, timeout=BunqueueTimeout, connection_lost=BunqueueConnectionLost,
                    refused=BunqueueRefused)))
    finally:
        await player.close()
    return results


if __name__ == "__main__":
    serve(play)
