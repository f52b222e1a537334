"""Testee adapter for the PyPI ``bunqueue-client`` (import name ``bunqueue``; the test extra).

Run: ``python -m queuewire.conformance.client.adapters.bunqueue_pypi``. The client's API is
blocking, so each action runs in a thread. Options map onto its keyword arguments:
``command_timeout`` (ms -> its seconds), ``token``; ``heartbeat_interval`` (ms -> its
``heartbeat_interval_s``) and ``lock_ttl`` (its ``lock_ttl_ms``) for the Worker. It has no
pool size, ping interval or timeout budget options: those are ignored (the client's own
behaviour is what is judged) and named on stderr. Errors map by class: CommandTimeoutError
-> timeout, ConnectionClosedError -> connection_lost, CommandError and AuthError -> refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time
from typing import Any

from .contract import Unsupported, error_type, fail, ok, serve

IGNORED = ("ping_interval", "max_command_timeouts", "pool_size")


def _error_type(exc: BaseException) -> str:
    from bunqueue import errors

    return error_type(exc, timeout=(errors.CommandTimeoutError, TimeoutError),
                      connection_lost=(errors.ConnectionClosedError, ConnectionError),
                      refused=(errors.CommandError, errors.AuthError))


class Player:
    def __init__(self, request: dict[str, Any]):
        host, _, port = str(request["target"]).rpartition(":")
        self.options = request.get("options") or {}
        ignored = [k for k in IGNORED if self.options.get(k) is not None]
        if ignored:
            print(f"bunqueue-client has no option for {ignored}: ignored", file=sys.stderr,
                  flush=True)
        self.kw: dict[str, Any] = {"host": host, "port": int(port)}
        if self.options.get("token") is not None:
            self.kw["token"] = self.options["token"]
        self.queues: dict[str, Any] = {}

    def queue(self, name: str) -> Any:
        from bunqueue import Queue

        if name not in self.queues:
            timeout = float(self.options.get("command_timeout", 10000)) / 1000.0
            self.queues[name] = Queue(name, command_timeout=timeout, **self.kw)
        return self.queues[name]

    def act(self, action: dict[str, Any]) -> Any:
        op = action.get("op")
        if op == "add":
            return {"id": str(self.queue(action["queue"]).add(action.get("name"),
                                                                action.get("data")).id)}
        if op == "add_many":
            queue = self.queue(action["queue"])
            items = list(action.get("items") or ())
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
                jobs = list(pool.map(lambda item: queue.add(action.get("name"), item), items))
            return {"ids": [str(job.id) for job in jobs]}
        if op == "count":
            return self.queue(action["queue"]).count()
        if op == "get_job":
            job = self.queue(action["queue"]).get_job(action["id"])
            return None if job is None else {"id": str(job.id)}
        if op == "sleep":
            time.sleep(float(action.get("ms", 0)) / 1000.0)
            return None
        if op == "process":
            return self.process(action)
        raise Unsupported(f"unknown op {op!r}")

    def process(self, action: dict[str, Any]) -> Any:
        from bunqueue import Worker

        want = int(action.get("count", 1))
        work = float(action.get("work_ms", 0)) / 1000.0
        ids: list[str] = []
        errors: list[str] = []
        done = threading.Event()

        def processor(job: Any) -> Any:
            ids.append(str(job.id))
            if work:
                time.sleep(work)
            if len(ids) >= want:
                done.set()
            return {"processed": str(job.id)}

        extra: dict[str, Any] = {}
        if self.options.get("heartbeat_interval") is not None:
            extra["heartbeat_interval_s"] = float(self.options["heartbeat_interval"]) / 1000.0
        if self.options.get("lock_ttl") is not None:
            extra["lock_ttl_ms"] = int(self.options["lock_ttl"])
        worker = Worker(action["queue"], processor, concurrency=1, poll_timeout_ms=200,
                        **self.kw, **extra)
        worker.on("error", lambda err, *rest: errors.append(str(err)))
        try:
            if not done.wait(float(action.get("timeout_ms", 10000)) / 1000.0):
                raise TimeoutError(f"processed {len(ids)} of {want} job(s) in time")
        finally:
            worker.close(timeout=2 + work)
        return {"ids": ids, "errors": errors}

    def close(self) -> None:
        for queue in self.queues.values():
            try:
                queue.close()
            except Exception:  # noqa: BLE001 - closing after a scenario; nothing to report
                pass


async def play(request: dict[str, Any]) -> list[dict[str, Any]]:
    player = Player(request)
    results = []
    try:
        for action in request.get("actions") or ():
            try:
                results.append(ok(await asyncio.to_thread(player.act, action)))
            except Exception as exc:  # noqa: BLE001 - every client error becomes a result
                results.append(fail(exc, _error_type(exc)))
    finally:
        await asyncio.to_thread(player.close)
    return results


if __name__ == "__main__":
    serve(play)
