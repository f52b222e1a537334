"""Issue 22 item 11 (SQLite part): the files of a ``--data-path`` database hold webhook
signing secrets, so they are created readable and writable by their owner only (0600): the
database and the ``-wal``, ``-shm`` and ``-journal`` files beside it, whatever the process
umask. Checked with ``os.stat`` on the files a real ``queuewire serve bunqueue --data-path``
process wrote, started under a permissive umask (0), while it runs and after it stopped; and
an existing world-readable file from an older version is tightened when it is opened."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.reference_server.bunqueue import SqliteStore
from serve_process import start_serve, stop_serve

PRIVATE = oct(0o600)
SUFFIXES = ("", "-wal", "-shm", "-journal")
SECRET = "hunter2-signing-secret"


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(db: Path) -> dict[str, str]:
    """The permission bits (in octal) of each database file that exists."""
    out = {}
    for suffix in SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            out[db.name + suffix] = oct(stat.S_IMODE(os.stat(str(db) + suffix).st_mode))
    return out


def call(port: int, request: dict) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_frame({**request, "reqId": "1"}))
        decoder = FrameDecoder("bunqueue/v2")
        while True:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            frames = decoder.feed(chunk)
            if frames:
                return frames[0]


def test_a_servers_database_files_are_private_whatever_the_umask(tmp_path: Path):
    """Item 11: under umask 0, a server with --data-path that stored a webhook with a secret
    leaves its database, -wal and -shm files at mode 0600, running and after it stopped."""
    db = tmp_path / "bunqueue.db"
    with umask(0):  # the child inherits it: SQLite alone would create 0644 files
        proc, port = start_serve("bunqueue", "--data-path", str(db))
    try:
        reply = call(port, {"cmd": "AddWebhook", "url": "https://example.com/hook",
                            "events": ["job.completed"], "secret": SECRET})
        assert reply["ok"], reply
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the write buffer commits within ~10 ms
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as other:
                if other.execute("SELECT count(*) FROM webhooks").fetchone()[0]:
                    break
            time.sleep(0.02)
        else:
            raise AssertionError("the webhook never reached the database file")
        running = modes(db)
        assert {db.name, db.name + "-wal", db.name + "-shm"} <= set(running)
        assert running == dict.fromkeys(running, PRIVATE), f"running: {running}"
    finally:
        assert stop_serve(proc) == 0
    stopped = modes(db)
    assert db.name in stopped and stopped == dict.fromkeys(stopped, PRIVATE), \
        f"stopped: {stopped}"
    assert SECRET.encode() in b"".join(
        Path(str(db) + s).read_bytes() for s in ("", "-wal") if Path(str(db) + s).exists())


def test_an_existing_world_readable_database_is_tightened(tmp_path: Path):
    """Item 11: a database and its -wal left 0644 by an older version are 0600 once a store
    has opened them."""
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as old:
        old.execute("PRAGMA journal_mode=WAL")
        old.execute("CREATE TABLE t (x)")
        wal = sqlite3.connect(db)
        wal.execute("INSERT INTO t VALUES (1)")  # a -wal exists while this one is open
        wal.commit()
    for suffix in ("", "-wal"):
        if Path(str(db) + suffix).exists():
            os.chmod(str(db) + suffix, 0o644)
    with umask(0):
        store = SqliteStore(db)
        store.put_webhook({"id": "w", "secret": SECRET})
        store.flush()
        opened = modes(db)
        store.close()
    wal.close()
    assert opened and opened == dict.fromkeys(opened, PRIVATE), f"opened: {opened}"
