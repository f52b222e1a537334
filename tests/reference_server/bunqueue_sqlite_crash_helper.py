"""Run by test_bunqueue_sqlite's crash tests as a child process, which the test SIGKILLs.

Usage: python bunqueue_sqlite_crash_helper.py PATH COUNT DURABLE FLUSH_INTERVAL_MS MAX_BUFFERED

Builds a BunqueueEngine on a SqliteStore at PATH and handles COUNT PUSH requests (with
``durable`` as given), printing each job id only after ``handle()`` answered it: a printed
id is an answered PUSH. Then it waits to be killed, never flushing or closing the store.
"""

import sys
import time

from queuewire.reference_server.bunqueue import BunqueueEngine, SqliteStore


def main() -> None:
    path, count, durable, interval, max_buffered = sys.argv[1:6]
    store = SqliteStore(path, flush_interval_ms=float(interval), max_buffered=int(max_buffered))
    engine = BunqueueEngine(store=store)
    print("ready", flush=True)
    for i in range(int(count)):
        reply = engine.handle("c1", {"cmd": "PUSH", "queue": "q", "data": {"i": i},
                                     "durable": durable == "1"})
        assert reply["ok"] is True, reply
        print(reply["id"], flush=True)  # answered
    print("done", flush=True)
    time.sleep(3600)  # the parent kills us; no flush, no close


if __name__ == "__main__":
    main()
