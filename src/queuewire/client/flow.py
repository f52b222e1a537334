"""``FlowProducer`` (job chains), ``QueueGroup`` (namespaces) and ``QueueEvents`` (job events).

* :class:`FlowProducer` builds document 002's chains: ``add_chain([A, B, C])`` pushes A, then
  B with ``dependsOn: [A]``, then C with ``dependsOn: [B]``; the server holds each job until
  its dependency completed (BQ-DEP-1). Each step may name its own queue.
* :class:`QueueGroup` isolates queues under a namespace, as the official client does: queue
  ``name`` of group ``ns`` is the queue ``ns:name``.
* :class:`QueueEvents` listens to a queue's job events where the profile has SubscribeEvents
  (bunqueue/2.9.5, BQ-EVENT-101): it holds a link of its own (the server sends one
  connection one queue's events), subscribes again after every reconnect, and hands each
  pushed ``{type: "event", event: {...}}`` frame to the callbacks registered for its
  ``eventType`` (or ``"*"``) and to :meth:`QueueEvents.next_event`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..spec import Profile, load_profile
from .bunqueue_pool import Pool, acquire_pool, release_pool
from .bunqueue_session import BunqueueSessionStopped
from .options import ClientConfigError, ConnectionOptions
from .queue import Queue
from .transport import EmbeddedTransport, Transport, transport_for
from .worker import Processor, Worker

__all__ = ["FlowProducer", "QueueEvents", "QueueGroup"]

log = logging.getLogger("queuewire.client.bunqueue")


class FlowProducer:
    """Adds chains of dependent jobs."""

    def __init__(self, *, connection: Mapping[str, Any] | Any = None,
                 profile: Profile | str = "bunqueue/v2", embedded: bool = False,
                 data_path: str | os.PathLike[str] | None = None):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self._args = (connection, embedded, data_path)
        self._transport: Transport | None = None

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            connection, embedded, data_path = self._args
            self._transport = transport_for(self.profile, connection, embedded=embedded,
                                            data_path=data_path)
        return self._transport

    async def __aenter__(self) -> FlowProducer:
        """Open the transport and wait for the server (as entering a Queue does)."""
        try:
            await self.transport.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()

    async def add_chain(self, steps: Iterable[Mapping[str, Any]]) -> list[str]:
        """Push ``[{"queue": ..., "name": ..., "data": ..., "opts": {...}}, ...]`` in order,
        each step depending on the one before; returns the job ids."""
        ids: list[str] = []
        for i, step in enumerate(steps):
            if "queue" not in step:
                raise ClientConfigError(f"chain step {i} has no queue")
            opts = dict(step.get("opts") or {})
            if ids:
                opts["depends_on"] = [*opts.get("depends_on", ()), ids[-1]]
            queue = Queue(step["queue"], profile=self.profile, transport=self.transport)
            job = await queue.add(step.get("name"), step.get("data", {}), **opts)
            ids.append(job.id)
        return ids


class QueueGroup:
    """Queues and workers under a namespace: ``group.get_queue("emails")`` is ``ns:emails``."""

    def __init__(self, namespace: str, *, connection: Mapping[str, Any] | Any = None,
                 profile: Profile | str = "bunqueue/v2", embedded: bool = False,
                 data_path: str | os.PathLike[str] | None = None):
        if not namespace:
            raise ClientConfigError("a QueueGroup needs a namespace")
        self.prefix = namespace if namespace.endswith(":") else f"{namespace}:"
        self._kw: dict[str, Any] = {"connection": connection, "profile": profile, "embedded": embedded,
                    "data_path": data_path}
        self.queues: dict[str, Queue] = {}

    def get_queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = Queue(self.prefix + name, **self._kw)
        return queue

    def get_worker(self, name: str, processor: Processor, **options: Any) -> Worker:
        return Worker(self.prefix + name, processor, **self._kw, **options)

    async def list_queues(self) -> list[str]:
        """The server's queues in this namespace (without the prefix)."""
        queue = Queue(self.prefix + "_", **self._kw)
        try:
            names = await queue.list_queues()
        finally:
            await queue.close()
        out = []
        for item in names:
            name = item.get("name") if isinstance(item, Mapping) else item
            if isinstance(name, str) and name.startswith(self.prefix):
                out.append(name[len(self.prefix):])
        return out

    async def pause_all(self) -> None:
        await asyncio.gather(*(q.pause() for q in self.queues.values()))

    async def resume_all(self) -> None:
        await asyncio.gather(*(q.resume() for q in self.queues.values()))

    async def drain_all(self) -> int:
        return sum(await asyncio.gather(*(q.drain() for q in self.queues.values())))

    async def obliterate_all(self) -> None:
        await asyncio.gather(*(q.obliterate() for q in self.queues.values()))

    async def close(self) -> None:
        await asyncio.gather(*(q.close() for q in self.queues.values()))


class QueueEvents:
    """A queue's job events (SubscribeEvents, bunqueue/2.9.5)."""

    def __init__(self, queue: str, *, connection: Mapping[str, Any] | Any = None,
                 profile: Profile | str = "bunqueue/2.9.5", embedded: bool = False,
                 data_path: str | os.PathLike[str] | None = None):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        if "SubscribeEvents" not in self.profile.model.commands:
            raise ClientConfigError(f"profile {self.profile.name} has no SubscribeEvents: "
                                    f"its servers push no job events")
        self.queue = queue
        self._listeners: dict[str, list[Callable[[dict[str, Any]], Any]]] = {}
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=10000)
        self.dropped = 0
        self._pool: Pool | None = None
        self._embedded: EmbeddedTransport | None = None
        self._args = (connection, embedded, data_path)

    def on(self, event_type: str, callback: Callable[[dict[str, Any]], Any]) -> None:
        """Call ``callback(event)`` for each event of ``event_type`` ("*": every event)."""
        self._listeners.setdefault(event_type, []).append(callback)

    async def start(self) -> QueueEvents:
        connection, embedded, data_path = self._args
        if embedded:
            self._embedded = EmbeddedTransport(self.profile, data_path=data_path)
            self._embedded.subscribe(self._frame)
            await self._embedded.call({"cmd": "SubscribeEvents", "queue": self.queue})
            return self
        options = ConnectionOptions.coerce(self.profile, connection).replace(pool_size=1)
        self._pool = pool = acquire_pool(self.profile, options, shared=False)
        try:
            await pool.connect()  # a server that cannot be reached raises (BunqueueConnectError)
        except BaseException:
            await self.close()
            raise
        link = pool.links[0]
        link.subscribers.append(self._frame)
        first: asyncio.Future = asyncio.get_running_loop().create_future()

        def resubscribe() -> None:  # on every READY: a new connection has no subscription
            future = link.send_nowait({"cmd": "SubscribeEvents", "queue": self.queue})
            link.flush()

            def done(f: asyncio.Future) -> None:
                error = None if f.cancelled() else f.exception()
                if not first.done():
                    if error is None:
                        first.set_result(None)
                    else:
                        first.set_exception(error)  # refused: start() raises it
                elif error is not None:
                    log.warning("QueueEvents %s: re-subscribing failed: %s", self.queue, error)

            future.add_done_callback(done)

        link.on_ready.append(resubscribe)
        if link.ready:
            resubscribe()
        stopped = asyncio.ensure_future(link.wait_stopped())
        try:
            await asyncio.wait((first, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not first.done():  # the link stopped first (a refused token, say)
            error = link.session.error
            await self.close()
            raise error if isinstance(error, Exception) else BunqueueSessionStopped(
                "Session stopped before SubscribeEvents was answered")
        if first.exception() is not None:
            await self.close()
        first.result()  # raises a refusal
        return self

    async def __aenter__(self) -> QueueEvents:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _frame(self, frame: dict[str, Any]) -> None:
        event = frame.get("event") if frame.get("type") == "event" else None
        if not isinstance(event, Mapping) or event.get("queue") != self.queue:
            return
        event = dict(event)
        try:
            self._inbox.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
        for key in (str(event.get("eventType")), "*"):
            for callback in self._listeners.get(key, ()):
                callback(event)

    async def next_event(self, timeout: float | None = None) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            return await self._inbox.get()

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await release_pool(pool)
        transport, self._embedded = self._embedded, None
        if transport is not None:
            await transport.close()
