"""Where the bunqueue engine's state lives between restarts: the ``Store`` protocol and
``MemoryStore``.

The engine (:mod:`.engine`) keeps every job, queue and schedule in memory, with its
own indexes (priority order, delay and lock timers); that is what makes PUSH, PULL and ACK
O(log n). A store is the durable copy beside it, written through on every change and read
back once, when an engine is constructed on it. This is how bunqueue itself works (memory
first, SQLite behind a write buffer; document 001's ``durable: true`` "bypasses" the buffer).

Records are plain dicts of MessagePack-able values (job ``data`` and results are whatever
the client sent: maps, lists, strings, numbers, binary, timestamps), opaque to the store
except for a few keys it may index: a job record always has ``id``, ``queue`` and ``state``;
a cron record ``name`` and ``queue``; a webhook record ``id``. The engine never mutates a
record after handing it over; a store may keep the dict as it is.

Write semantics the engine relies on:

* ``put_*`` replaces the whole record with that key (an upsert); ``delete_*`` of a missing
  key is not an error.
* ``put_job(record, durable=False)`` may be buffered: it must be on disk after the next
  ``flush()``, which the shell calls on a timer (bunqueue flushes its buffer every few
  milliseconds). ``durable=True`` (BQ-PUSH-8) must be on disk when ``put_job`` returns: the
  engine calls it before it answers the PUSH, and before it changes anything in memory, so a
  failing durable write leaves no trace and is answered ``Internal server error``.
* A store method may raise. The engine answers the command that caused it with
  ``Internal server error`` (as bunqueue sanitises storage errors) and reports the problem
  through ``status()``, which StorageStatus answers.
* The ``iter_*`` methods are called only while an engine is being constructed; order does
  not matter (the engine orders jobs by their ``seq``).

Heartbeats (``lastHeartbeat``) are not written through: after a restart every active job is
returned to waiting anyway (its connection is gone, BQ-CONN-1), so they would be write load
for nothing. Registered workers, connections, metrics counters and pending webhook
deliveries are not stored at all: they describe the running process, not the queues.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Record = dict[str, Any]


@dataclass(frozen=True)
class StorageStatus:
    """What StorageStatus answers: ``disk_full``, the last ``error`` and ``since`` when (ms)."""

    disk_full: bool = False
    error: str | None = None
    since: float | None = None


@runtime_checkable
class Store(Protocol):
    """The persistence operations the engine uses; see the module docstring for semantics."""

    # jobs: one record per job, keyed by record["id"]
    def put_job(self, record: Record, *, durable: bool = False) -> None: ...
    def delete_job(self, job_id: str) -> None: ...
    def iter_jobs(self) -> Iterable[Record]: ...

    # cron schedules, keyed by record["name"]
    def put_cron(self, record: Record) -> None: ...
    def delete_cron(self, name: str) -> None: ...
    def iter_crons(self) -> Iterable[Record]: ...

    # webhooks, keyed by record["id"] (the record includes the signing secret)
    def put_webhook(self, record: Record) -> None: ...
    def delete_webhook(self, webhook_id: str) -> None: ...
    def iter_webhooks(self) -> Iterable[Record]: ...

    # per-queue settings (paused, rate limit, concurrency limit), keyed by queue name
    def put_queue(self, name: str, record: Record) -> None: ...
    def delete_queue(self, name: str) -> None: ...
    def iter_queues(self) -> Iterable[tuple[str, Record]]: ...

    # a job's log (AddLog), the whole list at once (it is bounded by the engine)
    def put_logs(self, job_id: str, entries: list[Record]) -> None: ...
    def delete_logs(self, job_id: str) -> None: ...
    def iter_logs(self) -> Iterable[tuple[str, list[Record]]]: ...

    def flush(self) -> None:
        """Make every buffered write durable."""

    def status(self) -> StorageStatus:
        """Disk health, for StorageStatus."""

    def size_bytes(self) -> int:
        """Size of the database on disk, for Metrics (sqliteSizeMb); 0 when not on disk."""


class MemoryStore:
    """A ``Store`` that keeps copies of the records in dicts: the default (bunqueue's own
    default storage is in-memory too), and a faithful stand-in for a disk store in tests,
    since an engine built on the same ``MemoryStore`` recovers what the previous one wrote.

    Records are kept as they are handed over (the engine never touches a record again) and
    copied one level deep on the way out, so that an engine recovering from the store cannot
    change what is stored behind its back. ``durable_puts`` and ``flushes`` count the calls,
    for tests of the durable path.
    """

    def __init__(self) -> None:
        self.jobs: dict[str, Record] = {}
        self.crons: dict[str, Record] = {}
        self.webhooks: dict[str, Record] = {}
        self.queues: dict[str, Record] = {}
        self.logs: dict[str, list[Record]] = {}
        self.durable_puts = 0
        self.flushes = 0

    def put_job(self, record: Record, *, durable: bool = False) -> None:
        self.jobs[record["id"]] = record
        if durable:
            self.durable_puts += 1

    def delete_job(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)

    def iter_jobs(self) -> Iterator[Record]:
        return (_copy(r) for r in list(self.jobs.values()))

    def put_cron(self, record: Record) -> None:
        self.crons[record["name"]] = record

    def delete_cron(self, name: str) -> None:
        self.crons.pop(name, None)

    def iter_crons(self) -> Iterator[Record]:
        return (_copy(r) for r in list(self.crons.values()))

    def put_webhook(self, record: Record) -> None:
        self.webhooks[record["id"]] = record

    def delete_webhook(self, webhook_id: str) -> None:
        self.webhooks.pop(webhook_id, None)

    def iter_webhooks(self) -> Iterator[Record]:
        return (_copy(r) for r in list(self.webhooks.values()))

    def put_queue(self, name: str, record: Record) -> None:
        self.queues[name] = record

    def delete_queue(self, name: str) -> None:
        self.queues.pop(name, None)

    def iter_queues(self) -> Iterator[tuple[str, Record]]:
        return ((n, _copy(r)) for n, r in list(self.queues.items()))

    def put_logs(self, job_id: str, entries: list[Record]) -> None:
        self.logs[job_id] = entries

    def delete_logs(self, job_id: str) -> None:
        self.logs.pop(job_id, None)

    def iter_logs(self) -> Iterator[tuple[str, list[Record]]]:
        return ((j, [dict(e) for e in es]) for j, es in list(self.logs.items()))

    def flush(self) -> None:
        self.flushes += 1

    def status(self) -> StorageStatus:
        return StorageStatus()

    def size_bytes(self) -> int:
        return 0


class NullStore(MemoryStore):
    """A ``Store`` that keeps no job records: what a server in memory uses (``queuewire serve
    bunqueue`` without ``--data-path``), since nothing outlives its process and nobody reads a
    copy back. ``keeps_jobs = False`` tells the engine not to build job records at all (the
    write-through of every job change is most of a PUSH's cost otherwise); schedules,
    webhooks, queue settings and logs are small and still kept, as a ``MemoryStore`` does.
    An engine constructed on a ``NullStore`` recovers no jobs."""

    keeps_jobs = False

    def put_job(self, record: Record, *, durable: bool = False) -> None:
        pass


def _copy(record: Record) -> Record:
    """One level deep: the record's own lists and maps (tags, timeline, repeat) are copied;
    job data and results, which the engine never mutates, are shared."""
    return {k: (copy.copy(v) if type(v) in (list, dict) and k not in _SHARED else v)
            for k, v in record.items()}


_SHARED = frozenset({"data", "returnvalue"})  # client payloads: replaced, never mutated
