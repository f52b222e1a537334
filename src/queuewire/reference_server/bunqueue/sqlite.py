"""A bunqueue :class:`~.store.Store` on a real SQLite file (the stdlib ``sqlite3``).

The database runs in WAL mode with ``synchronous=NORMAL``, and every record is one row,
``(key, blob)`` in the table of its kind (jobs also keep ``queue`` and ``state`` columns for
inspection), the blob being the record serialized as MessagePack by msgspec: records hold
whatever the client sent (binary, timestamps, maps with non-string keys), which JSON would
not round-trip; JavaScript ``undefined`` inside a payload is written as a store-private
extension type. A ``schema_version`` table holds :data:`SCHEMA_VERSION`; a file written by
a newer schema is refused rather than misread. Non-durable writes go to an in-memory write
buffer keyed by (table, key), so repeated writes of one job coalesce into its latest record;
the buffer is committed in one transaction by :meth:`SqliteStore.flush` (which the shell
calls on a timer and at shutdown) and automatically, at the next store call, once it holds
``max_buffered`` records or ``max_buffered_bytes`` bytes or its oldest write is older than
``flush_interval_ms``. A durable ``put_job`` (BQ-PUSH-8) adds its record to the buffer and
commits the whole buffer at once with ``synchronous=FULL`` (the WAL is fsynced) before it
returns, so it is never reordered before earlier writes; if that commit fails its record is
taken back out of the buffer and the error is raised, so the engine answers the PUSH with an
error and keeps nothing. A failing buffered commit never raises: the writes stay in the
buffer, are retried no sooner than ``flush_interval_ms`` later (or at the next explicit
``flush()``), and the error (``diskFull`` for SQLITE_FULL) is what :meth:`SqliteStore.status`
reports until a commit succeeds again. One connection, used from the shell's single asyncio
thread.
The database and every file SQLite keeps beside it are readable by their owner only (0600,
whatever the umask): webhook records hold their signing secrets.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from ...codecs.bunqueue import UNDEFINED
from .store import Record, StorageStatus

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# A non-durable write reaches the disk at the latest at the first of: the shell's flush()
# timer, the first store call made FLUSH_INTERVAL_MS or more after it was buffered, or the
# buffer reaching MAX_BUFFERED records / MAX_BUFFERED_BYTES bytes. 10 ms is "every few
# milliseconds", as store.py describes bunqueue's own buffer: with the shell's timer at
# the same period, a crash loses at most the last ~10-20 ms of non-durable writes, while a busy
# server still commits many records per transaction instead of one each (a commit, not a
# row, is what costs). 1000 records bound how long one flush stalls the event loop (a few
# ms); 16 MiB bound the memory held by payloads not yet written (one job's data may be up to
# 10 MB, so for large payloads the byte bound is the one that bites).
FLUSH_INTERVAL_MS = 10.0
MAX_BUFFERED = 1000
MAX_BUFFERED_BYTES = 16 * 1024 * 1024
# The store's own MessagePack extension code for JavaScript ``undefined`` inside a payload.
# It is a property of this file format, not of the wire (the codec maps the wire's own).
UNDEFINED_EXT = 1
# A database file and the two WAL-mode files beside it: what size_bytes() adds up
FILE_SUFFIXES = ("", "-wal", "-shm")
# Every file SQLite may keep for the database (a -journal in rollback mode, or while the
# journal mode changes), and their permissions: owner only, since webhook records hold their
# signing secrets (issue 22). SQLite gives a -wal, -shm or -journal the mode of the database
# file, so the database is created with it; the others are set too, for files an older
# version left world-readable.
PRIVATE_SUFFIXES = (*FILE_SUFFIXES, "-journal")
PRIVATE_MODE = 0o600

_TABLES = {"jobs": "id", "crons": "name", "webhooks": "id", "queues": "name", "logs": "job_id"}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, queue TEXT NOT NULL,
                                 state TEXT NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS crons (name TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS webhooks (id TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS logs (job_id TEXT PRIMARY KEY, record BLOB NOT NULL);
"""

_DELETE = None  # a buffered delete


def _enc_hook(obj: Any) -> Any:
    if obj is UNDEFINED:
        return msgspec.msgpack.Ext(UNDEFINED_EXT, b"")
    raise TypeError(f"cannot store a {type(obj).__name__}")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == UNDEFINED_EXT:
        return UNDEFINED
    raise ValueError(f"unknown extension type {code} in a stored record")


_encode = msgspec.msgpack.Encoder(enc_hook=_enc_hook).encode
_decode = msgspec.msgpack.Decoder(ext_hook=_ext_hook).decode


class SchemaError(RuntimeError):
    """The file was written by a schema this code does not know."""


class SqliteStore:
    """A ``Store`` on the SQLite database at ``path`` (created if missing); see the module doc.

    ``clock`` (monotonic seconds) is for tests of the age bound. ``close()`` flushes and closes.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 flush_interval_ms: float = FLUSH_INTERVAL_MS,
                 max_buffered: int = MAX_BUFFERED,
                 max_buffered_bytes: int = MAX_BUFFERED_BYTES,
                 clock: Callable[[], float] = time.monotonic):
        self.path = os.fspath(path)
        self.flush_interval_ms = flush_interval_ms
        self.max_buffered = max(1, max_buffered)
        self.max_buffered_bytes = max_buffered_bytes
        self._clock = clock
        # (table, key) -> (extra columns, blob) or _DELETE; insertion order is irrelevant
        self._buffer: dict[tuple[str, str], tuple[tuple, bytes] | None] = {}
        self._buffered_bytes = 0
        self._oldest: float | None = None   # clock() when the oldest buffered write came in
        self._retry_at = 0.0                 # no automatic flush before this after a failure
        self._status = StorageStatus()
        self.commits = 0                     # successful commits, for tests and metrics
        _create_private(self.path)
        self._db = sqlite3.connect(self.path, isolation_level=None)  # explicit BEGIN/COMMIT
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        _make_private(self.path, PRIVATE_SUFFIXES)
        row = self._db.execute("SELECT version FROM schema_version").fetchone()
        if row is None:
            self._db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        elif row[0] != SCHEMA_VERSION:
            self._db.close()
            raise SchemaError(f"{self.path}: schema version {row[0]}, expected {SCHEMA_VERSION}")

    # -- jobs ------------------------------------------------------------------------------------
    def put_job(self, record: Record, *, durable: bool = False) -> None:
        key = ("jobs", record["id"])
        if not durable:
            self._put(key, (record["queue"], record["state"]), record)
            return
        previous = self._buffer.get(key, _MISSING)
        blob = _encode(record)  # an unencodable record raises before anything is buffered
        self._set(key, ((record["queue"], record["state"]), blob))
        try:
            self._commit(full=True)
        except Exception:
            # leave no trace: the engine answers the PUSH with an error and keeps nothing
            if previous is _MISSING:
                self._unset(key)
            else:
                self._set(key, previous)
            raise

    def delete_job(self, job_id: str) -> None:
        self._delete(("jobs", job_id))

    def iter_jobs(self) -> Iterator[Record]:
        return (r for _, r in self._rows("jobs"))

    # -- crons, webhooks, queues, logs ----------------------------------------------------------
    def put_cron(self, record: Record) -> None:
        self._put(("crons", record["name"]), (), record)

    def delete_cron(self, name: str) -> None:
        self._delete(("crons", name))

    def iter_crons(self) -> Iterator[Record]:
        return (r for _, r in self._rows("crons"))

    def put_webhook(self, record: Record) -> None:
        self._put(("webhooks", record["id"]), (), record)

    def delete_webhook(self, webhook_id: str) -> None:
        self._delete(("webhooks", webhook_id))

    def iter_webhooks(self) -> Iterator[Record]:
        return (r for _, r in self._rows("webhooks"))

    def put_queue(self, name: str, record: Record) -> None:
        self._put(("queues", name), (), record)

    def delete_queue(self, name: str) -> None:
        self._delete(("queues", name))

    def iter_queues(self) -> Iterator[tuple[str, Record]]:
        return iter(self._rows("queues"))

    def put_logs(self, job_id: str, entries: list[Record]) -> None:
        self._put(("logs", job_id), (), entries)

    def delete_logs(self, job_id: str) -> None:
        self._delete(("logs", job_id))

    def iter_logs(self) -> Iterator[tuple[str, list[Record]]]:
        return iter(self._rows("logs"))

    # -- health and lifecycle -------------------------------------------------------------------
    def flush(self) -> None:
        """Commit the write buffer (``synchronous=NORMAL``). Never raises: a failure is kept
        in ``status()`` and logged, and the writes stay buffered for the next attempt."""
        if self._buffer:
            self._try_commit()

    def status(self) -> StorageStatus:
        self._maybe_flush()
        return self._status

    def size_bytes(self) -> int:
        total = 0
        for suffix in FILE_SUFFIXES:
            try:
                total += os.path.getsize(self.path + suffix)
            except OSError:
                pass
        return total

    @property
    def buffered(self) -> int:
        """Writes waiting in the buffer."""
        return len(self._buffer)

    def close(self) -> None:
        """Flush (a failure is logged and kept in status) and close the connection."""
        self.flush()
        self._db.close()

    # -- the write buffer -----------------------------------------------------------------------
    def _put(self, key: tuple[str, str], extra: tuple, value: Any) -> None:
        try:
            blob = _encode(value)
        except (TypeError, ValueError, OverflowError) as exc:  # never raise for a buffered write
            log.error("bunqueue store: cannot serialize %s %r: %s", key[0], key[1], exc)
            self._fail(exc)
            return
        self._set(key, (extra, blob))
        self._maybe_flush()

    def _delete(self, key: tuple[str, str]) -> None:
        self._set(key, _DELETE)
        self._maybe_flush()

    def _set(self, key: tuple[str, str], entry: tuple[tuple, bytes] | None) -> None:
        self._unset(key)
        self._buffer[key] = entry
        self._buffered_bytes += len(entry[1]) if entry is not None else 0
        if self._oldest is None:
            self._oldest = self._clock()

    def _unset(self, key: tuple[str, str]) -> None:
        old = self._buffer.pop(key, None)
        if old is not None:
            self._buffered_bytes -= len(old[1])
        if not self._buffer:
            self._oldest, self._buffered_bytes = None, 0

    def _maybe_flush(self) -> None:
        if self._oldest is None:
            return
        now = self._clock()
        if now < self._retry_at:
            return
        if len(self._buffer) >= self.max_buffered \
                or self._buffered_bytes >= self.max_buffered_bytes \
                or (now - self._oldest) * 1000.0 >= self.flush_interval_ms:
            self._try_commit()

    def _try_commit(self) -> None:
        try:
            self._commit(full=False)
        except Exception:  # noqa: BLE001 - recorded in status() by _commit; never into the engine
            log.exception("bunqueue store: flush of %d writes failed", len(self._buffer))
            self._retry_at = self._clock() + self.flush_interval_ms / 1000.0

    def _commit(self, *, full: bool) -> None:
        """Write the whole buffer in one transaction, or nothing (the buffer is kept)."""
        db = self._db
        try:
            if full:
                db.execute("PRAGMA synchronous=FULL")  # set outside the transaction it governs
            try:
                db.execute("BEGIN IMMEDIATE")
                for (table, key), entry in self._buffer.items():
                    column = _TABLES[table]
                    if entry is None:
                        db.execute(f"DELETE FROM {table} WHERE {column} = ?", (key,))
                    else:
                        extra, blob = entry
                        marks = ", ?" * (len(extra) + 2)
                        db.execute(f"INSERT OR REPLACE INTO {table} VALUES ({marks[2:]})",
                                   (key, *extra, blob))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                if full:
                    db.execute("PRAGMA synchronous=NORMAL")
        except Exception as exc:
            self._fail(exc)  # disk full, I/O error, locked database, or a bug: all in status()
            raise
        self._buffer.clear()
        self._oldest, self._buffered_bytes, self._retry_at = None, 0, 0.0
        self.commits += 1
        if self._status != StorageStatus():
            log.info("bunqueue store: writes succeed again after %s", self._status.error)
            self._status = StorageStatus()

    def _fail(self, exc: Exception) -> None:
        full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL \
            or "disk is full" in str(exc)
        since = self._status.since if self._status.since is not None else time.time() * 1000.0
        self._status = StorageStatus(disk_full=full,
                                     error=str(exc), since=since)

    def _rows(self, table: str) -> list[tuple[str, Any]]:
        """Every (key, value) of a table, buffered writes included (they are flushed first;
        if that fails they are overlaid on what the file holds)."""
        self.flush()
        column = _TABLES[table]
        rows = {key: blob for key, blob
                in self._db.execute(f"SELECT {column}, record FROM {table}")}
        for (t, key), entry in self._buffer.items():
            if t == table:
                if entry is None:
                    rows.pop(key, None)
                else:
                    rows[key] = entry[1]
        return [(key, _decode(blob)) for key, blob in rows.items()]


_MISSING: Any = object()


def _on_disk(path: str) -> bool:
    """Whether sqlite3.connect(path) opens a file (not ``:memory:`` nor a temporary "")."""
    return path not in ("", ":memory:")


def _create_private(path: str) -> None:
    """Create the database file, if it does not exist yet, with PRIVATE_MODE whatever the
    umask (so SQLite's companion files inherit it), and tighten an existing one."""
    if not _on_disk(path):
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_MODE)
    except OSError:
        return  # sqlite3.connect reports it, with SQLite's own words
    try:
        os.fchmod(fd, PRIVATE_MODE)
    except OSError as exc:  # not its owner: the file stays as it is, and we say so
        log.warning("bunqueue store: cannot make %s private (mode %o): %s", path,
                    PRIVATE_MODE, exc)
    finally:
        os.close(fd)


def _make_private(path: str, suffixes: tuple[str, ...]) -> None:
    """Set PRIVATE_MODE on each of the database's files that exists."""
    if not _on_disk(path):
        return
    for suffix in suffixes:
        try:
            os.chmod(path + suffix, PRIVATE_MODE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("bunqueue store: cannot make %s private (mode %o): %s", path + suffix,
                        PRIVATE_MODE, exc)
