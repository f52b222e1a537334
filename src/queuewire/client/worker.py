"""``Worker``: document 002's pull loop, job heartbeats, ACK batching and graceful close.

Design. A worker runs three loops over a :class:`~.transport.Transport` (the shared TCP pool
or the embedded engine): the **pull loop** asks PULLB for at most the free ``concurrency``
slots (a long poll of ``poll_timeout`` ms, with the lock owner and ``lock_ttl``, so every job
comes with a lock token) and starts one task per job; the **heartbeat loop** sends
JobHeartbeatB ``{ids, tokens}`` every ``heartbeat_interval`` for every job pulled and not yet
acknowledged (BQ-WORKER-4); the :class:`AckBatcher` gathers completions and sends ACKB ``{ids,
results, tokens}`` when ``ack_batch_size`` are waiting or ``ack_batch_delay`` ms after the
first (BQ-WORKER-2), retrying a batch that met a lost link or timed out (an ACK of a job
already acknowledged is refused harmlessly, a lost ACK costs a second run of the job). A
processor's exception FAILs the job with its message and is logged (ERROR, with the queue,
the job id and the traceback, on the ``queuewire.client.worker`` logger). ``run()`` (and
``async with``) waits for the server first: one that cannot be reached raises
:class:`~.bunqueue_session.BunqueueConnectError` (unless ``retry_first_connect``).
``on_completed(job, result)`` runs once the job's ACK was accepted, ``on_failed(job, error)``
once its FAIL was; ``on_error(error)`` gets what went wrong in the loops. Callbacks never
break the worker: their exceptions are logged. A pull error backs off
``min(100 * 2 ** (n - 1), 30000)`` ms, as the official worker does. ``close()`` follows
document 002's order (BQ-WORKER-3): stop the pull loop, stop the heartbeat, wait for the
active jobs, flush the pending ACKs, wait for the flushes in flight, close the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ..spec import Profile, load_profile
from .bunqueue_session import (
    BunqueueClientError,
    BunqueueConnectionLost,
    BunqueueRefused,
    BunqueueReplyInvalid,
    BunqueueTimeout,
)
from .job import Job, JobCodec
from .options import ClientConfigError, WorkerOptions
from .transport import Transport, transport_for

__all__ = ["AckBatcher", "Worker"]

log = logging.getLogger("queuewire.client.worker")

Processor = Callable[[Job], Any]
PULL_BACKOFF_BASE = 0.1   # s: the first pull retry after an error (the official worker's)
PULL_BACKOFF_MAX = 30.0   # s: the longest
ACK_RETRIES = (0.1, 0.2, 0.4)  # s: a batch that met a lost link is sent again after these


async def _call_back(callback: Callable[..., Any] | None, *args: Any) -> None:
    if callback is None:
        return
    try:
        result = callback(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:  # noqa: BLE001 - a callback's error never reaches the worker's loops
        log.exception("worker callback %r failed", getattr(callback, "__name__", callback))


class AckBatcher:
    """Completions gathered into ACKB batches: at most ``size`` or ``delay`` s apart."""

    def __init__(self, transport: Transport, size: int, delay: float,
                 on_done: Callable[[list[tuple[Job, Any]], Exception | None], Any]):
        self._transport = transport
        self._size, self._delay = size, delay
        self._on_done = on_done
        self._batch: list[tuple[Job, Any]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task] = set()

    def add(self, job: Job, result: Any) -> None:
        self._batch.append((job, result))
        if len(self._batch) >= self._size:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _send(self, batch: list[tuple[Job, Any]]) -> None:
        payload: dict[str, Any] = {"cmd": "ACKB", "ids": [job.id for job, _ in batch],
                                   "results": [result for _, result in batch]}
        if any(job.token for job, _ in batch):
            payload["tokens"] = [job.token or "" for job, _ in batch]
        error: Exception | None = None
        for pause in (*ACK_RETRIES, None):
            try:
                await self._transport.call(payload)
                error = None
                break
            except (BunqueueConnectionLost, BunqueueTimeout) as exc:  # the link died under it,
                error = exc  # or it waited out an outage unsent: send it again
            except BunqueueClientError as exc:
                error = exc
                break
            if pause is not None:
                await asyncio.sleep(pause)
        await _call_back(self._on_done, batch, error)

    async def drain(self) -> None:
        """Flush what is gathered and wait for every flush in flight."""
        self.flush()
        while self._flushes:
            await asyncio.gather(*list(self._flushes), return_exceptions=True)


class Worker:
    """Processes a queue's jobs with ``processor(job)`` (sync or async) until closed."""

    def __init__(self, queue: str, processor: Processor, *,
                 connection: Mapping[str, Any] | Any = None,
                 profile: Profile | str = "bunqueue/v2", embedded: bool = False,
                 data_path: str | os.PathLike[str] | None = None, autorun: bool = True,
                 on_completed: Callable[[Job, Any], Any] | None = None,
                 on_failed: Callable[[Job, Exception], Any] | None = None,
                 on_error: Callable[[Exception], Any] | None = None,
                 transport: Transport | None = None, **options: Any):
        if not callable(processor):
            raise ClientConfigError("processor must be callable (a function taking the job)")
        self.queue = queue
        self.processor = processor
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self.options = WorkerOptions.from_profile(self.profile, options)
        self.owner = self.options.owner or f"queuewire-{queue}-{uuid.uuid4().hex[:12]}"
        self.codec = JobCodec(self.profile)
        self.on_completed, self.on_failed, self.on_error = on_completed, on_failed, on_error
        self.autorun = autorun
        self._connection, self._embedded, self._data_path = connection, embedded, data_path
        self._transport = transport
        self._owns_transport = transport is None
        self._pulled: dict[str, Job] = {}     # pulled and not yet acknowledged: heartbeated
        self._active: set[asyncio.Task] = set()
        self._slot = asyncio.Event()
        self._stopping = asyncio.Event()
        self._loops: list[asyncio.Task] = []
        self._acks: AckBatcher | None = None
        self.processed = 0
        self.failed = 0
        self.running = False
        self.closed = False

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = transport_for(self.profile, self._connection,
                                            embedded=self._embedded, data_path=self._data_path)
        return self._transport

    # -- lifecycle
    async def __aenter__(self) -> Worker:
        if self.autorun:
            await self.run()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run(self) -> Worker:
        """Wait for the server (:meth:`~.transport.Transport.connect`: a server that cannot be reached
        raises, and the worker's transport is released), then start the pull and heartbeat
        loops and return."""
        if self.running or self.closed:
            return self
        self.running = True
        try:
            await self.transport.connect()
        except BaseException:
            self.running = False
            transport, self._transport = self._transport, None
            if transport is not None and self._owns_transport:
                await transport.close()
            raise
        options = self.options
        self._acks = AckBatcher(self.transport, options.ack_batch_size,
                                options.ack_batch_delay / 1000.0, self._acked)
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._pull_loop(), name=f"worker-{self.queue}-pull"),
                       loop.create_task(self._heartbeat_loop(), name=f"worker-{self.queue}-hb")]
        return self

    async def close(self, force: bool = False, timeout: float | None = None) -> None:
        """Graceful close in document 002's order (BQ-WORKER-3); ``force`` cancels the active
        jobs instead of waiting for them (their locks lapse and the server requeues them)."""
        if self.closed:
            return
        self.closed = True
        self._stopping.set()
        self._slot.set()
        pull, heartbeat = (self._loops + [None, None])[:2]
        for task in (pull, heartbeat):                   # 1. poll loop, 2. heartbeat
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._active:                                 # 3. active jobs
            if force:
                for task in self._active:
                    task.cancel()
            await asyncio.wait(list(self._active), timeout=timeout)
        if self._acks is not None:                       # 4. + 5. ACKs and their flushes
            await self._acks.drain()
        self.running = False
        transport, self._transport = self._transport, None
        if transport is not None and self._owns_transport:  # 6. connections
            await transport.close()

    # -- the loops
    async def _pull_loop(self) -> None:
        options = self.options
        concurrency = options.concurrency
        errors = 0
        transport = self.transport
        long_poll = options.poll_timeout / 1000.0
        command_timeout = getattr(getattr(transport, "options", None), "command_timeout", 30000)
        call_timeout = long_poll + command_timeout / 1000.0
        while not self._stopping.is_set():
            free = concurrency - len(self._active)
            if free <= 0:
                self._slot.clear()
                await self._slot.wait()
                continue
            count = min(free, options.batch_size or free)
            try:
                reply = await transport.call(
                    {"cmd": "PULLB", "queue": self.queue, "count": count,
                     "timeout": options.poll_timeout, "owner": self.owner,
                     "lockTtl": options.lock_ttl}, call_timeout)
            except BunqueueClientError as exc:
                errors += 1
                await self._report(exc)
                pause = min(PULL_BACKOFF_BASE * 2 ** (errors - 1), PULL_BACKOFF_MAX)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await self._stopping.wait()
                continue
            errors = 0
            jobs = reply.get("jobs") or []
            tokens = reply.get("tokens") or []
            for i, raw in enumerate(jobs):
                if not isinstance(raw, Mapping):
                    continue
                if "id" not in raw:  # a job it could never settle: the server's mistake
                    await self._report(BunqueueReplyInvalid(
                        "PULLB", f"field /jobs/{i}/id is missing",
                        self.profile.model.commands["PULLB"].requirement, reply))
                    continue
                token = tokens[i] if i < len(tokens) and isinstance(tokens[i], str) else None
                job = Job.from_wire(self.codec, raw, token)
                self._pulled[job.id] = job
                task = asyncio.get_running_loop().create_task(self._process(job))
                self._active.add(task)
                task.add_done_callback(self._finished)
            if not jobs and options.poll_timeout == 0:
                await asyncio.sleep(0.05)  # nothing to do and no long poll: do not spin

    def _finished(self, task: asyncio.Task) -> None:
        self._active.discard(task)
        self._slot.set()

    async def _process(self, job: Job) -> None:
        try:
            result = self.processor(job)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            self._pulled.pop(job.id, None)  # forced close: the lock lapses, the server requeues
            raise
        except Exception as exc:  # noqa: BLE001 - the job failed: FAIL it with the message
            log.error("worker %s: the processor raised on job %s (%s); failing the job",
                      self.queue, job.id, job.name, exc_info=exc)
            await self._fail(job, exc)
            return
        assert self._acks is not None
        self._acks.add(job, result)

    async def _fail(self, job: Job, exc: Exception) -> None:
        payload: dict[str, Any] = {"cmd": "FAIL", "id": job.id,
                                   "error": str(exc) or type(exc).__name__}
        if job.token:
            payload["token"] = job.token
        try:
            await self.transport.call(payload)
        except BunqueueClientError as error:
            await self._report(error)
            return
        finally:
            self._pulled.pop(job.id, None)
        self.failed += 1
        await _call_back(self.on_failed, job, exc)

    async def _acked(self, batch: list[tuple[Job, Any]], error: Exception | None) -> None:
        for job, _ in batch:
            self._pulled.pop(job.id, None)
        if error is not None:
            await self._report(error)
            return
        self.processed += len(batch)
        for job, result in batch:
            await _call_back(self.on_completed, job, result)

    async def _heartbeat_loop(self) -> None:
        interval = self.options.heartbeat_interval / 1000.0
        while True:
            await asyncio.sleep(interval)
            jobs = list(self._pulled.values())
            if not jobs:
                continue
            payload: dict[str, Any] = {"cmd": "JobHeartbeatB", "ids": [job.id for job in jobs]}
            if any(job.token for job in jobs):
                payload["tokens"] = [job.token or "" for job in jobs]
            try:
                await self.transport.call(payload)
            except BunqueueRefused as exc:  # a job the server no longer has locked for us
                await self._report(exc)
            except BunqueueClientError as exc:
                await self._report(exc)

    async def _report(self, error: Exception) -> None:
        log.warning("worker %s: %s", self.queue, error)
        await _call_back(self.on_error, error)
