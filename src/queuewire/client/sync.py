"""A small synchronous facade over the async SDK, for scripts.

``queuewire.client.sync.Queue`` and ``Worker`` take the async classes' arguments and run them
on one event loop in a daemon thread that this module owns; each method blocks until its
coroutine is done and raises what it raised. A Worker's processor runs on that loop too (a
plain function is fine; a slow one holds the loop, so give it ``concurrency=1``).

    from queuewire.client.sync import Queue, Worker
    with Queue("emails", connection={"port": 6789}) as queue:
        job = queue.add("send", {"to": "a@b.c"})
        print(queue.get_job_counts())
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

from . import queue as _queue
from . import worker as _worker

__all__ = ["Queue", "Worker", "run"]

_lock = threading.Lock()
_state: dict[str, asyncio.AbstractEventLoop] = {}


def _the_loop() -> asyncio.AbstractEventLoop:
    with _lock:
        loop = _state.get("loop")
        if loop is None or loop.is_closed():
            loop = _state["loop"] = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="queuewire-sync", daemon=True).start()
        return loop


def run(coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
    """Run ``coro`` on the facade's loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, _the_loop()).result(timeout)


class _Facade:
    _cls: type

    def __init__(self, *args: Any, **kwargs: Any):
        async def build() -> Any:
            return self._cls(*args, **kwargs)
        self._obj = run(build())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._obj, name)
        if inspect.iscoroutinefunction(attr):
            def call(*args: Any, **kwargs: Any) -> Any:
                return run(attr(*args, **kwargs))
            call.__name__ = name
            call.__doc__ = attr.__doc__
            return call
        return attr

    def __enter__(self) -> Any:
        run(self._obj.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        run(self._obj.close())


class Queue(_Facade):
    """The blocking twin of :class:`queuewire.client.Queue`."""

    _cls = _queue.Queue


class Worker(_Facade):
    """The blocking twin of :class:`queuewire.client.Worker` (``run()`` starts it; it works
    in the background until ``close()``)."""

    _cls = _worker.Worker
