"""``Queue``: document 002's job submission and every queue command, async, in snake_case.

A Queue names one queue and holds a :class:`~.transport.Transport`: the shared TCP pool for
its connection options (document 000), or the embedded reference engine (``embedded=True``).
Each method sends one command and returns the reply's meaningful field; a refusal raises
:class:`~.bunqueue_session.BunqueueRefused` (with the spec's name of the error when the
message is one of the profile's), a timeout :class:`~.bunqueue_session.BunqueueTimeout`, a lost
link :class:`~.bunqueue_session.BunqueueConnectionLost` (a server that cannot be reached:
:class:`~.bunqueue_session.BunqueueConnectError`, raised by ``async with`` or by the first
command within the connect timeout, unless ``retry_first_connect``), an answer of the wrong
shape (a field of the wrong type, or one a method needs missing)
:class:`~.bunqueue_session.BunqueueReplyInvalid`: all :class:`ClientError`. Commands
the methods do not cover are reachable through :meth:`Queue.command`. The method names are
the official client's in snake_case (``addBulk`` is ``add_bulk``, ``getJobCounts`` is
``get_job_counts``); where the official client has a sync and an ``Async`` variant, the one
method here is the async one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..spec import Profile, load_profile
from .bunqueue_session import BunqueueRefused, BunqueueReplyInvalid
from .job import Job, JobCodec
from .options import ClientConfigError, camel
from .transport import Transport, transport_for

__all__ = ["Queue", "open_transport"]

_NO_OPTIONS: Mapping[str, Any] = {}


def need(profile: Profile, reply: Mapping[str, Any], field: str, cmd: str) -> Any:
    """``reply[field]``, or :class:`BunqueueReplyInvalid` citing the command's requirement when
    the server left it out (the session has checked the types of the fields present, see
    :mod:`.replies`)."""
    if field in reply:
        return reply[field]
    command = profile.model.commands.get(cmd)
    raise BunqueueReplyInvalid(cmd, f"field /{field} is missing",
                               command.requirement if command else None, reply)


def open_transport(profile: Profile | str, connection: Any, embedded: bool,
                   data_path: str | os.PathLike[str] | None) -> Transport:
    return transport_for(profile, connection, embedded=embedded, data_path=data_path)


class Queue:
    """One queue. ``async with Queue("emails", connection={...}) as queue: ...``"""

    def __init__(self, name: str, *, connection: Mapping[str, Any] | Any = None,
                 profile: Profile | str = "bunqueue/v2", embedded: bool = False,
                 data_path: str | os.PathLike[str] | None = None,
                 default_job_options: Mapping[str, Any] | None = None,
                 auto_batch: bool | Mapping[str, Any] = False,
                 transport: Transport | None = None):
        if not isinstance(name, str) or not name:
            raise ClientConfigError(f"a queue name must be a non-empty string, got {name!r}")
        self.name = name
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self._connection, self._embedded, self._data_path = connection, embedded, data_path
        self.default_job_options = dict(default_job_options or {})
        self.codec = JobCodec(self.profile)
        self._transport = transport
        self._owns_transport = transport is None
        self._batcher: _AddBatcher | None = None
        if auto_batch:
            settings = dict(auto_batch) if isinstance(auto_batch, Mapping) else {}
            self._batcher = _AddBatcher(self, **settings)

    # -- lifecycle
    @property
    def transport(self) -> Transport:
        if self._transport is None:  # first use, inside the running loop
            self._transport = open_transport(self.profile, self._connection, self._embedded,
                                             self._data_path)
        return self._transport

    @property
    def embedded(self) -> bool:
        return self.transport.embedded

    async def __aenter__(self) -> Queue:
        """Open the transport and wait for the server: a server that cannot be reached raises
        (:class:`~.bunqueue_session.BunqueueConnectError`, with the OSError as its cause)."""
        try:
            await self.transport.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send what the add batcher holds, then release the transport (the shared pool closes
        with its last user)."""
        if self._batcher is not None:
            await self._batcher.drain()
        transport, self._transport = self._transport, None
        if transport is not None and self._owns_transport:
            await transport.close()

    async def wait_until_ready(self, timeout: float | None = None) -> None:
        """Return once the server answers a Ping (a server that cannot be reached raises at
        once unless ``retry_first_connect``: then the Ping waits up to ``timeout`` s)."""
        await self.command("Ping", timeout=timeout)

    async def command(self, cmd: str, *, timeout: float | None = None, **fields: Any) -> dict:
        """Send any command of the profile; returns the whole reply map. ``timeout`` in s."""
        return await self.transport.call({"cmd": cmd, **fields}, timeout)

    async def _q(self, cmd: str, **fields: Any) -> dict:
        return await self.transport.call({"cmd": cmd, "queue": self.name, **fields})

    def _field(self, reply: Mapping[str, Any], cmd: str, field: str, default: Any = None) -> Any:
        """The answer's meaningful field: one the reply schema requires must be there (else
        :class:`BunqueueReplyInvalid`), an optional one falls back to ``default``."""
        command = self.profile.model.commands.get(cmd)
        if command is not None and field in (command.response.get("required") or ()):
            return need(self.profile, reply, field, cmd)
        return reply.get(field, default)

    def _job(self, raw: Any, cmd: str = "GetJob") -> Job | None:
        if not isinstance(raw, Mapping):
            return None
        need(self.profile, raw, "id", cmd)
        return Job.from_wire(self.codec, raw, None, self)

    # -- adding jobs (PUSH, PUSHB)
    async def add(self, name: str | None, data: Any = None, **opts: Any) -> Job:
        """Add one job (PUSH). ``opts`` are the PUSH fields in snake_case: priority, delay,
        attempts, backoff, ttl, timeout, job_id, unique_key, depends_on, tags, durable, ..."""
        merged = {**self.default_job_options, **opts} if self.default_job_options else opts
        data = {} if data is None else data
        batcher = self._batcher
        if batcher is not None and not merged.get("durable"):
            try:
                entry = self.codec.bulk_entry(name, data, merged)
            except ClientConfigError:
                entry = None  # an option only PUSH has: sent alone
            if entry is not None:
                job_id = await batcher.add(entry)
                return Job(job_id, name or "default", data, self.name, {"opts": merged},
                           queue=self)
        payload = self.codec.push(self.name, name, data, merged)
        reply = await self.transport.call(payload)
        return Job(need(self.profile, reply, "id", "PUSH"), name or "default", data, self.name,
                   {"opts": merged}, queue=self)

    async def add_bulk(self, jobs: Iterable[Mapping[str, Any]]) -> list[Job]:
        """Add many jobs in one PUSHB: ``[{"name": ..., "data": ..., "opts": {...}}, ...]``."""
        given = list(jobs)
        defaults = self.default_job_options
        entry = self.codec.bulk_entry
        entries: list[dict] = []
        add = entries.append
        for job in given:
            opts = job.get("opts")
            if defaults:
                opts = {**defaults, **(opts or {})}
            add(entry(job.get("name"), job["data"] if "data" in job else {}, opts or _NO_OPTIONS))
        reply = await self._q("PUSHB", jobs=entries)
        ids = self._field(reply, "PUSHB", "ids") or []
        queue_name = self.name
        return [Job(job_id, job.get("name") or "default", job["data"] if "data" in job else {},
                    queue_name, {"opts": job.get("opts") or {}}, None, self)
                for job_id, job in zip(ids, given)]

    # -- reading jobs
    async def _lookup(self, payload: dict[str, Any]) -> dict | None:
        """A lookup's reply, or None for its not-found answer (the error the spec names as
        the command's ``not_found``: BQ-QUERY-202); any other refusal is raised (BQ-ENV-8: a
        "Not authenticated" is not a missing job)."""
        try:
            return await self.transport.call(payload)
        except BunqueueRefused as exc:
            if exc.error_name is not None and \
                    exc.error_name == self.profile.model.commands[payload["cmd"]].not_found:
                return None
            raise

    async def get_job(self, job_id: str) -> Job | None:
        """The job, or None when the server does not know it."""
        reply = await self._lookup({"cmd": "GetJob", "id": job_id})
        return None if reply is None else self._job(reply.get("job"))

    async def get_job_by_custom_id(self, custom_id: str) -> Job | None:
        """The job with that custom id, or None when the server knows none."""
        reply = await self._lookup({"cmd": "GetJobByCustomId", "customId": custom_id})
        return None if reply is None else self._job(reply.get("job"), "GetJobByCustomId")

    async def get_job_state(self, job_id: str) -> str:
        return self._field(await self.command("GetState", id=job_id), "GetState", "state", "unknown")

    async def get_job_result(self, job_id: str) -> Any:
        return self._field(await self.command("GetResult", id=job_id), "GetResult", "result")

    async def get_job_progress(self, job_id: str) -> Any:
        return self._field(await self.command("GetProgress", id=job_id), "GetProgress", "progress")

    async def get_jobs(self, state: str | None = None, start: int = 0, end: int = 100,
                       ) -> list[Job]:
        """Jobs of the queue (in ``state``), from ``start`` to ``end`` (exclusive)."""
        fields: dict[str, Any] = {"offset": start, "limit": max(0, end - start)}
        if state is not None:
            fields["state"] = state
        reply = await self._q("GetJobs", **fields)
        return [job for raw in reply.get("jobs") or [] if (job := self._job(raw, "GetJobs"))]

    async def get_job_counts(self) -> dict[str, int]:
        return dict(self._field(await self._q("GetJobCounts"), "GetJobCounts", "counts") or {})

    async def get_counts_per_priority(self) -> dict[str, int]:
        reply = await self._q("GetCountsPerPriority")
        return dict(self._field(reply, "GetCountsPerPriority", "counts") or {})

    async def count(self) -> int:
        return int(self._field(await self._q("Count"), "Count", "count", 0))

    async def get_children_values(self, job_id: str) -> Any:
        return self._field(await self.command("GetChildrenValues", id=job_id), "GetChildrenValues", "data")

    async def wait_job(self, job_id: str, timeout: float = 30000) -> Any:
        """Wait (WaitJob, ``timeout`` ms) until the job finished; returns the reply."""
        return await self.transport.call({"cmd": "WaitJob", "id": job_id, "timeout": timeout},
                                         timeout / 1000.0 + self._command_timeout())

    def _command_timeout(self) -> float:
        options = getattr(self.transport, "options", None)
        return options.command_timeout / 1000.0 if options is not None else 30.0

    # -- control
    async def pause(self) -> None:
        await self._q("Pause")

    async def resume(self) -> None:
        await self._q("Resume")

    async def is_paused(self) -> bool:
        return bool(self._field(await self._q("IsPaused"), "IsPaused", "paused"))

    async def drain(self) -> int:
        """Remove the waiting jobs; returns how many."""
        return int(self._field(await self._q("Drain"), "Drain", "count", 0))

    async def obliterate(self) -> None:
        await self._q("Obliterate")

    async def clean(self, grace: float, limit: int | None = None, state: str | None = None,
                    ) -> list[str]:
        """Remove finished jobs older than ``grace`` ms; returns their ids."""
        fields: dict[str, Any] = {"grace": grace}
        if limit is not None:
            fields["limit"] = limit
        if state is not None:
            fields["state"] = state
        return list(self._field(await self._q("Clean", **fields), "Clean", "ids") or [])

    async def remove(self, job_id: str) -> None:
        await self.command("Cancel", id=job_id)

    async def discard(self, job_id: str) -> None:
        await self.command("Discard", id=job_id)

    async def promote_job(self, job_id: str) -> None:
        await self.command("Promote", id=job_id)

    async def move_job_to_delayed(self, job_id: str, delay: float) -> None:
        await self.command("MoveToDelayed", id=job_id, delay=delay)

    async def update_job_progress(self, job_id: str, progress: Any,
                                  message: str | None = None) -> None:
        fields = {"id": job_id, "progress": progress}
        if message is not None:
            fields["message"] = message
        await self.command("Progress", **fields)

    async def update_job_data(self, job_id: str, data: Any) -> None:
        await self.command("Update", id=job_id, data=data)

    async def change_job_priority(self, job_id: str, priority: int) -> None:
        await self.command("ChangePriority", id=job_id, priority=priority)

    async def add_job_log(self, job_id: str, message: str) -> Any:
        return self._field(await self.command("AddLog", id=job_id, message=message), "AddLog", "data")

    async def get_job_logs(self, job_id: str) -> Any:
        return self._field(await self.command("GetLogs", id=job_id), "GetLogs", "data")

    # -- dead-letter queue
    async def get_dlq(self, count: int | None = None) -> list[Job]:
        fields = {} if count is None else {"count": count}
        reply = await self._q("Dlq", **fields)
        return [job for raw in reply.get("jobs") or [] if (job := self._job(raw, "Dlq"))]

    async def retry_dlq(self, job_id: str | None = None) -> int:
        fields = {} if job_id is None else {"jobId": job_id}
        return int(self._field(await self._q("RetryDlq", **fields), "RetryDlq", "count", 0))

    async def retry_completed(self, job_id: str | None = None) -> int:
        fields = {} if job_id is None else {"id": job_id}
        return int(self._field(await self._q("RetryCompleted", **fields), "RetryCompleted", "count", 0))

    async def purge_dlq(self) -> int:
        return int(self._field(await self._q("PurgeDlq"), "PurgeDlq", "count", 0))

    # -- schedules (Cron)
    async def upsert_job_scheduler(self, scheduler_id: str, *, pattern: str | None = None,
                                   every: float | None = None, data: Any = None,
                                   **fields: Any) -> Any:
        """A cron schedule (``pattern``) or a repeat interval (``every`` ms) for this queue."""
        payload: dict[str, Any] = {"name": scheduler_id, "queue": self.name,
                                   "data": {} if data is None else data}
        if pattern is not None:
            payload["schedule"] = pattern
        if every is not None:
            payload["repeatEvery"] = every
        payload.update({k if k in ("priority", "timezone") else camel(k): v
                        for k, v in fields.items()})
        return self._field(await self.command("Cron", **payload), "Cron", "cron")

    async def remove_job_scheduler(self, scheduler_id: str) -> None:
        await self.command("CronDelete", name=scheduler_id)

    async def get_job_scheduler(self, scheduler_id: str) -> Any:
        """The schedule, or None when the server knows none of that name."""
        reply = await self._lookup({"cmd": "CronGet", "name": scheduler_id})
        return None if reply is None else self._field(reply, "CronGet", "cron")

    async def get_job_schedulers(self) -> list[Any]:
        return list(self._field(await self.command("CronList"), "CronList", "crons") or [])

    # -- limits
    async def set_global_concurrency(self, limit: int) -> None:
        await self._q("SetConcurrency", limit=limit)

    async def remove_global_concurrency(self) -> None:
        await self._q("ClearConcurrency")

    async def set_global_rate_limit(self, limit: int) -> None:
        await self._q("RateLimit", limit=limit)

    async def remove_global_rate_limit(self) -> None:
        await self._q("RateLimitClear")

    # -- the server
    async def get_workers(self) -> Any:
        return self._field(await self.command("ListWorkers"), "ListWorkers", "data")

    async def get_metrics(self) -> Any:
        return self._field(await self.command("Metrics"), "Metrics", "metrics")

    async def list_queues(self) -> list[Any]:
        return list(self._field(await self.command("ListQueues"), "ListQueues", "queues") or [])

    async def ping(self) -> Any:
        return self._field(await self.command("Ping"), "Ping", "data")


class _AddBatcher:
    """``auto_batch``: concurrent ``add`` calls gathered into PUSHB, as the official client's
    AddBatcher does (a batch leaves at once when none is in flight, else at ``max_size`` jobs
    or ``max_delay`` ms). Off by default: the server refuses a PUSHB as a whole, so one
    invalid job fails the adds batched with it; ``durable`` adds always go alone."""

    def __init__(self, queue: Queue, max_size: int = 50, max_delay: float = 5):
        if max_size < 1 or max_delay < 0:
            raise ClientConfigError("auto_batch needs max_size >= 1 and max_delay >= 0 (ms)")
        self._queue = queue
        self._max_size, self._max_delay = max_size, max_delay / 1000.0
        self._pending: list[tuple[dict[str, Any], asyncio.Future]] = []
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()

    async def add(self, entry: dict[str, Any]) -> str:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((entry, future))
        if len(self._pending) >= self._max_size or not self._in_flight:
            self._flush()  # nothing in flight: at once (the adds that follow gather behind it)
        elif self._timer is None:
            self._timer = loop.call_later(self._max_delay, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            batch = self._pending[:self._max_size]
            del self._pending[:self._max_size]
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[dict[str, Any], asyncio.Future]]) -> None:
        try:
            reply = await self._queue.transport.call(
                {"cmd": "PUSHB", "queue": self._queue.name, "jobs": [e for e, _ in batch]})
            ids = self._queue._field(reply, "PUSHB", "ids") or []
            for i, (_, future) in enumerate(batch):
                if not future.done():
                    if i < len(ids):
                        future.set_result(str(ids[i]))
                    else:
                        future.set_exception(BunqueueRefused(
                            "PUSHB", f"the reply has {len(ids)} ids for {len(batch)} jobs"))
        except Exception as exc:  # noqa: BLE001 - every add of the batch gets the error
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        finally:
            self._in_flight -= 1
            if self._pending and not self._in_flight and self._timer is None:
                self._flush()

    async def drain(self) -> None:
        self._flush()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
