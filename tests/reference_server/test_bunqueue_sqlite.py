"""SqliteStore: the bunqueue Store protocol on real SQLite files: round trips of every record
kind, the write buffer (by count, by age, by flush()), the durable path (visible to another
connection as soon as put_job returns; no trace when it fails), disk-full reporting, engine
recovery across a restart, and SIGKILL crash tests of answered durable pushes."""

from __future__ import annotations

import datetime
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from queuewire.codecs.bunqueue import UNDEFINED
from queuewire.reference_server.bunqueue import BunqueueEngine, SqliteStore, StorageStatus, Store
from queuewire.reference_server.bunqueue.sqlite import SCHEMA_VERSION, SchemaError

HELPER = Path(__file__).with_name("bunqueue_sqlite_crash_helper.py")
NEVER = 1e12  # a flush interval no test reaches
T0 = 1_700_000_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def job(job_id: str, state: str = "waiting", **extra: Any) -> dict:
    return {"id": job_id, "queue": "q", "state": state, **extra}


def rows(path: Path, table: str) -> int:
    """Rows of a table as a second connection sees them."""
    with sqlite3.connect(path) as other:
        return other.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "bunqueue.db"


def test_is_a_store_in_wal_mode_with_a_schema_version(db):
    store = SqliteStore(db)
    assert isinstance(store, Store)
    with sqlite3.connect(db) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    store.close()


def test_a_newer_schema_is_refused(db):
    SqliteStore(db).close()
    with sqlite3.connect(db) as other:
        other.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaError):
        SqliteStore(db)


def test_every_record_kind_round_trips(db):
    payload = {"s": "x", "n": -1, "big": 2**53 + 1, "f": 1.5, "b": b"\x00\xff", "none": None,
               "list": [1, [2, {"k": True}]], 7: "int key", "u": UNDEFINED,
               "t": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)}
    records = {
        "job": job("j1", data=payload, tags=["a"], timeline=[{"state": "waiting",
                                                              "timestamp": T0}]),
        "cron": {"name": "c", "queue": "q", "repeatEvery": 1000, "data": payload},
        "webhook": {"id": "w", "url": "https://example.com/", "secret": "s"},
        "queue": {"paused": True, "rateLimit": 5, "concurrency": None},
        "logs": [{"message": "hello", "level": "info", "timestamp": T0}],
    }
    store = SqliteStore(db)
    store.put_job(records["job"])
    store.put_job(job("gone"))
    store.delete_job("gone")
    store.put_cron(records["cron"])
    store.put_webhook(records["webhook"])
    store.put_queue("q", records["queue"])
    store.put_logs("j1", records["logs"])
    for kind in ("cron", "webhook", "queue", "logs"):  # and deletes of each kind
        getattr(store, f"put_{kind}")(*(["x"] if kind in ("queue", "logs") else []),
                                      {"name": "x", "id": "x", "queue": "q"}
                                      if kind not in ("logs",) else [])
    store.delete_cron("x")
    store.delete_webhook("x")
    store.delete_queue("x")
    store.delete_logs("x")
    store.delete_job("never existed")  # not an error
    store.close()

    again = SqliteStore(db)
    assert list(again.iter_jobs()) == [records["job"]]
    assert list(again.iter_jobs())[0]["data"]["u"] is UNDEFINED
    assert list(again.iter_crons()) == [records["cron"]]
    assert list(again.iter_webhooks()) == [records["webhook"]]
    assert list(again.iter_queues()) == [("q", records["queue"])]
    assert list(again.iter_logs()) == [("j1", records["logs"])]
    again.put_job(job("j1", "active"))  # an upsert replaces the whole record
    assert list(again.iter_jobs()) == [job("j1", "active")]
    again.close()


def test_reads_see_buffered_writes(db):
    store = SqliteStore(db, flush_interval_ms=NEVER, max_buffered=10**6)
    store.put_job(job("a"))
    assert [r["id"] for r in store.iter_jobs()] == ["a"]
    assert store.buffered == 0  # iterating flushed first


def test_buffered_writes_are_flushed_by_count(db):
    store = SqliteStore(db, flush_interval_ms=NEVER, max_buffered=5)
    for i in range(4):
        store.put_job(job(f"j{i}"))
    store.put_job(job("j0", "active"))  # coalesces with j0: still 4 buffered
    assert store.buffered == 4 and rows(db, "jobs") == 0
    store.put_job(job("j4"))
    assert store.buffered == 0 and rows(db, "jobs") == 5 and store.commits == 1


def test_buffered_writes_are_flushed_by_flush(db):
    store = SqliteStore(db, flush_interval_ms=NEVER, max_buffered=10**6)
    store.put_job(job("a"))
    store.put_cron({"name": "c", "queue": "q"})
    store.delete_job("a")
    assert rows(db, "jobs") == 0 and rows(db, "crons") == 0
    store.flush()
    assert rows(db, "jobs") == 0 and rows(db, "crons") == 1
    store.flush()  # nothing buffered: no commit
    assert store.commits == 1


def test_buffered_writes_are_flushed_by_age_at_the_next_call(db):
    now = [0.0]
    store = SqliteStore(db, flush_interval_ms=10, max_buffered=10**6, clock=lambda: now[0])
    store.put_job(job("a"))
    now[0] = 0.009
    store.put_job(job("b"))
    assert rows(db, "jobs") == 0
    now[0] = 0.010  # the oldest write is 10 ms old
    store.status()
    assert rows(db, "jobs") == 2


def test_buffered_writes_are_flushed_by_bytes(db):
    store = SqliteStore(db, flush_interval_ms=NEVER, max_buffered=10**6,
                        max_buffered_bytes=10_000)
    store.put_job(job("a", data=b"x" * 5000))
    assert rows(db, "jobs") == 0
    store.put_job(job("b", data=b"x" * 5000))
    assert rows(db, "jobs") == 2


def test_a_durable_put_is_visible_to_another_connection_when_it_returns(db):
    store = SqliteStore(db, flush_interval_ms=NEVER, max_buffered=10**6)
    store.put_job(job("before"))
    store.put_job(job("d"), durable=True)
    with sqlite3.connect(db) as other:
        ids = {r[0] for r in other.execute("SELECT id FROM jobs")}
    assert ids == {"before", "d"}  # earlier buffered writes go with it, in order
    assert store.buffered == 0
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # back to NORMAL


def test_a_durable_put_uses_synchronous_full(db):
    store = SqliteStore(db)
    seen: list[str] = []
    real = store._db
    store._db = type("Spy", (), {
        "execute": lambda self, sql, *a: (seen.append(sql), real.execute(sql, *a))[1],
        "in_transaction": property(lambda self: real.in_transaction),
        "close": lambda self: real.close(),
    })()
    store.put_job(job("d"), durable=True)
    assert seen.index("PRAGMA synchronous=FULL") < seen.index("COMMIT") \
        < seen.index("PRAGMA synchronous=NORMAL")
    store.close()


def fill_up(store: SqliteStore) -> None:
    """Make the database full: no page beyond those it has now."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_is_reported_and_a_buffered_write_never_raises(db):
    now = [0.0]
    store = SqliteStore(db, flush_interval_ms=10, max_buffered=1, clock=lambda: now[0])
    fill_up(store)
    store.put_job(job("a", data=b"x" * 100_000))  # commit fails: no exception
    status = store.status()
    assert status.disk_full is True and "full" in status.error and status.since is not None
    assert store.buffered == 1  # kept for a retry
    store.flush()  # an explicit flush retries, and does not raise either
    assert store.status().since == status.since  # the issue started at the first failure
    store._db.execute("PRAGMA max_page_count = 1000000")
    now[0] = 1.0
    store.flush()
    assert store.status() == StorageStatus() and rows(db, "jobs") == 1


def test_a_durable_write_that_cannot_be_committed_raises_and_leaves_no_trace(db):
    store = SqliteStore(db, flush_interval_ms=NEVER, max_buffered=10**6)
    fill_up(store)
    with pytest.raises(sqlite3.OperationalError):
        store.put_job(job("d", data=b"x" * 100_000), durable=True)
    assert store.buffered == 0 and store.status().disk_full is True
    store._db.execute("PRAGMA max_page_count = 1000000")
    store.close()
    assert list(SqliteStore(db).iter_jobs()) == []


def test_the_engine_answers_a_failed_durable_push_with_an_error(db):
    store = SqliteStore(db)
    engine = BunqueueEngine(now_ms=Clock(), store=store)
    fill_up(store)
    reply = engine.handle("c", {"cmd": "PUSH", "queue": "q", "data": "x" * 100_000,
                                "durable": True})
    assert reply["ok"] is False
    assert engine.handle("c", {"cmd": "Count", "queue": "q"})["count"] == 0
    data = engine.handle("c", {"cmd": "StorageStatus"})["data"]
    assert data["diskFull"] is True and data["error"]


def test_size_bytes_counts_the_database_files(db):
    store = SqliteStore(db)
    store.put_job(job("a", data=b"x" * 50_000), durable=True)
    files = [Path(str(db) + s) for s in ("", "-wal", "-shm")]
    assert store.size_bytes() == sum(f.stat().st_size for f in files if f.exists()) > 50_000


# =============================================================================================
# An engine on a SqliteStore recovers what the previous one wrote
# =============================================================================================
def test_engine_recovery_across_a_restart(db):
    clock = Clock()

    def call(engine: BunqueueEngine, cmd: str, **fields: Any) -> dict:
        reply = engine.handle("c1", {"cmd": cmd, **fields})
        assert reply["ok"] is True, reply
        return reply

    store = SqliteStore(db)
    first = BunqueueEngine(now_ms=clock, store=store)
    waiting = call(first, "PUSH", queue="q", data={"w": 1}, priority=1)["id"]
    delayed = call(first, "PUSH", queue="q", data=2, delay=5000)["id"]
    active = call(first, "PUSH", queue="q", data=3, priority=5, durable=True)["id"]
    done = call(first, "PUSH", queue="q", data=4, priority=9)["id"]
    assert call(first, "PULL", queue="q")["job"]["id"] == done
    call(first, "ACK", id=done, result={"answer": 42})
    assert call(first, "PULL", queue="q")["job"]["id"] == active
    call(first, "AddLog", id=waiting, message="hello")
    call(first, "RateLimit", queue="q", limit=100)
    call(first, "Cron", name="c", queue="q", data=1, repeatEvery=60_000)
    call(first, "AddWebhook", url="https://example.com/", events=["job.completed"], secret="s")
    store.close()

    second = BunqueueEngine(now_ms=clock, store=SqliteStore(db))  # a restart
    state = {j: call(second, "GetState", id=j)["state"] for j in (waiting, delayed, active, done)}
    assert state == {waiting: "waiting", delayed: "delayed", active: "waiting",
                     done: "completed"}
    assert call(second, "GetResult", id=done)["result"] == {"answer": 42}
    assert call(second, "GetJob", id=waiting)["job"]["data"] == {"w": 1}
    assert call(second, "GetLogs", id=waiting)["data"]["logs"][0]["message"] == "hello"
    assert call(second, "CronGet", name="c")["cron"]["nextRun"] == T0 + 60_000
    assert len(call(second, "ListWebhooks")["data"]["webhooks"]) == 1
    assert [call(second, "PULL", queue="q")["job"]["id"] for _ in range(2)] == [active, waiting]


# =============================================================================================
# Crash tests: SIGKILL a child mid-stream; every answered durable push must survive
# =============================================================================================
def run_and_kill(db: Path, *, durable: bool, kill_after: int, count: int = 2000,
                 interval_ms: float = 10, max_buffered: int = 1000) -> list[str]:
    """Start the helper, SIGKILL it once it has answered ``kill_after`` pushes; return every
    id it printed (answered), including those printed between the kill decision and death."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, str(HELPER), str(db), str(count), "1" if durable else "0",
         str(interval_ms), str(max_buffered)],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        printed: list[str] = []
        while len(printed) < kill_after:
            line = child.stdout.readline().strip()
            assert line and line != "done", "the child finished before it could be killed"
            printed.append(line)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        printed += [x for x in child.stdout.read().split() if x != "done"]  # answered too
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return printed


def recovered(db: Path, ids: list[str]) -> list[str]:
    engine = BunqueueEngine(now_ms=Clock(), store=SqliteStore(db))
    found = []
    for i in ids:
        reply = engine.handle("c", {"cmd": "GetJob", "id": i})
        if reply["ok"]:
            assert reply["job"]["id"] == i and reply["job"]["state"] == "waiting"
            found.append(i)
    return found


@pytest.mark.parametrize("kill_after", [1, 37, 250])
def test_no_answered_durable_push_is_lost_to_sigkill(tmp_path, kill_after):
    db = tmp_path / "crash.db"
    printed = run_and_kill(db, durable=True, kill_after=kill_after)
    assert len(printed) >= kill_after
    assert recovered(db, printed) == printed


def test_buffered_pushes_killed_before_any_flush_are_lost(tmp_path):
    """The negative control: the same crash with non-durable pushes and a buffer that never
    flushes on its own loses every answered push, so the durable test can tell the two apart."""
    db = tmp_path / "crash.db"
    printed = run_and_kill(db, durable=False, kill_after=50, interval_ms=NEVER,
                           max_buffered=10**6)
    assert len(printed) >= 50
    assert recovered(db, printed) == []
