"""queuewire's Python bunqueue client (:mod:`queuewire.client`) against the REAL bunqueue 2.9.5.

The server is npm ``bunqueue`` 2.9.5 run by the ``bun`` binary that ``make setup`` installs into
tests/interop/node_modules (see ``serve_process``); the client speaks profile
``bunqueue/2.9.5``. Three scenarios:

1. Exactly once: three producers (separate ``Queue`` objects, one on a pool of its own) add
   300 jobs concurrently, mixing ``add`` and ``add_bulk``, while two ``Worker`` objects at
   concurrency 4 process them. Every job is processed exactly once (processor invocations
   counted per job), ``on_completed`` sees every job once, each job comes back with the name
   and data it was added with, and the server's own GetJobCounts (asked by a fourth Queue)
   says completed == N, active == 0, waiting == 0.
2. A crash: the server stores jobs in SQLite (``BUNQUEUE_DATA_PATH``) and is SIGKILLed in the
   middle of a run while one Queue adds durable jobs continuously and one Worker processes
   them; it is restarted on the same ports and file. The adds that fail meanwhile raise
   typed errors (``BunqueueConnectionLost`` / ``BunqueueTimeout``: the server stays down
   longer than ``command_timeout``); every add that returned an id is processed (completed)
   at least once, i.e. no acknowledged job is lost (a job redelivered after the crash may run
   twice: counted and printed, not failed); the same Queue and Worker objects carry on after
   the restart (they reconnect by themselves) and the server ends with nothing waiting or
   active; nothing but the client's typed errors reaches the producer or the worker's
   ``on_error``.
3. A token: with ``AUTH_TOKENS`` set, a Queue with the token works and a Queue with a wrong one
   fails with ``BunqueueAuthError`` at once (not after ``command_timeout``).

In all three, no exception may escape into the event loop from the client's own tasks and
the client may log no ERROR. Every wait is bounded, so a client bug fails a test rather than
hanging it. Skipped, with the
reason, only where the bun/bunqueue install (``make setup``) is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuewire.client import (
    BunqueueAuthError,
    BunqueueConnectionLost,
    BunqueueTimeout,
    ClientError,
    Job,
    Queue,
    Worker,
)
from serve_process import (
    REAL_BUNQUEUE_MISSING,
    free_tcp_ports,
    kill_process_group,
    start_real_bunqueue,
    start_real_bunqueue_at,
    stop_serve,
)

PROFILE = "bunqueue/2.9.5"
HOST = "127.0.0.1"
WAIT = 60.0  # s: the bound on every wait for the server or the workers

pytestmark = pytest.mark.skipif(REAL_BUNQUEUE_MISSING is not None,
                                reason=REAL_BUNQUEUE_MISSING or "")


async def wait_for(predicate, what, timeout: float = WAIT, every: float = 0.02) -> None:
    """Poll ``predicate()`` (sync or async) until true; fail after ``timeout`` s saying what
    was awaited (``what``: a string, or a callable giving one at that time)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for "
                        f"{what() if callable(what) else what}")
        await asyncio.sleep(every)


@contextlib.contextmanager
def nothing_escapes(caplog: pytest.LogCaptureFixture) -> Iterator[list[dict]]:
    """Fail if the client leaks an exception out of its own tasks (the loop's exception
    handler: "Task exception was never retrieved", a failed callback) or logs an ERROR (its
    reader's, timer's or callbacks' last-resort ``log.exception``)."""
    loop = asyncio.get_running_loop()
    leaked: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: leaked.append(context))
    caplog.set_level(logging.WARNING, logger="queuewire")
    try:
        yield leaked
    finally:
        loop.set_exception_handler(previous)
    logged = [f"{r.name}: {r.getMessage()}" for r in caplog.records
              if r.levelno >= logging.ERROR and r.name.startswith("queuewire")]
    assert not logged, f"the client logged errors: {logged}"
    assert not leaked, f"exceptions escaped into the event loop: {leaked}"


@pytest.fixture
def real_bunqueue(tmp_path: Path) -> Iterator[int]:
    """The real bunqueue 2.9.5 in memory, on free ports; yields its TCP port."""
    proc, port, _ = start_real_bunqueue(tmp_path / "server.log")
    try:
        yield port
    finally:
        stop_serve(proc)


# ------------------------------------------------------------------------- 1. exactly once

N_PRODUCERS = 3
JOBS_PER_PRODUCER = 100
BULK = 10  # jobs per add_bulk


@pytest.mark.asyncio
async def test_every_job_processed_exactly_once_by_two_workers(
        real_bunqueue: int, caplog: pytest.LogCaptureFixture) -> None:
    conn = {"host": HOST, "port": real_bunqueue, "command_timeout": 5000,
            "reconnect_max_delay": 1000}
    # one producer on a pool of its own (pools are shared per connection options)
    own_pool = {**conn, "pool_size": 2}
    queue_name = "exactly-once"
    n_total = N_PRODUCERS * JOBS_PER_PRODUCER
    invocations: Counter[int] = Counter()           # data n -> processor calls
    by_worker: Counter[str] = Counter()
    names: dict[int, str] = {}                      # data n -> the job's name as delivered
    datas: dict[int, Any] = {}                      # data n -> the job's data as delivered
    completed: Counter[int] = Counter()             # data n -> on_completed calls
    results: dict[int, Any] = {}
    failures: list[tuple[Job, Exception]] = []
    errors: list[Exception] = []
    added_ids: dict[str, int] = {}                  # job id from add -> n

    def processor_for(worker: str):
        async def process(job: Job) -> dict:
            n = job.data["n"]
            invocations[n] += 1
            by_worker[worker] += 1
            names[n] = job.name
            datas[n] = job.data
            await asyncio.sleep(0.001 * (n % 3))
            return {"double": n * 2}
        return process

    def on_completed(job: Job, result: Any) -> None:
        completed[job.data["n"]] += 1
        results[job.data["n"]] = result

    async def produce(index: int, queue: Queue) -> None:
        base = index * JOBS_PER_PRODUCER
        n = base
        while n < base + JOBS_PER_PRODUCER:
            if (n // BULK) % 2 == 0:   # alternate: a bulk of BULK, then BULK single adds
                batch = [{"name": f"bulk-{k}", "data": {"n": k}, "opts": {"durable": True}}
                         for k in range(n, n + BULK)]
                jobs = await queue.add_bulk(batch)
                assert len(jobs) == BULK
                for job, k in zip(jobs, range(n, n + BULK)):
                    added_ids[job.id] = k
                n += BULK
            else:
                job = await queue.add(f"single-{n}", {"n": n}, durable=True)
                assert job.name == f"single-{n}"
                added_ids[job.id] = n
                n += 1

    def expected_name(n: int) -> str:
        return f"bulk-{n}" if (n // BULK) % 2 == 0 else f"single-{n}"

    started = time.monotonic()
    with nothing_escapes(caplog):
        async with Queue(queue_name, connection=conn, profile=PROFILE) as q0, \
                Queue(queue_name, connection=conn, profile=PROFILE) as q1, \
                Queue(queue_name, connection=own_pool, profile=PROFILE) as q2, \
                Queue(queue_name, connection=conn, profile=PROFILE) as monitor:
            async with Worker(queue_name, processor_for("w1"), connection=conn, profile=PROFILE,
                              concurrency=4, on_completed=on_completed,
                              on_failed=lambda job, exc: failures.append((job, exc)),
                              on_error=errors.append), \
                    Worker(queue_name, processor_for("w2"), connection=conn, profile=PROFILE,
                           concurrency=4, on_completed=on_completed,
                           on_failed=lambda job, exc: failures.append((job, exc)),
                           on_error=errors.append):
                async with asyncio.timeout(WAIT):
                    await asyncio.gather(*(produce(i, q) for i, q in enumerate((q0, q1, q2))))
                assert len(added_ids) == n_total, "the server gave two jobs the same id"
                await wait_for(lambda: sum(completed.values()) >= n_total,
                               f"on_completed for all {n_total} jobs")

                async def server_done() -> bool:
                    counts = await monitor.get_job_counts()
                    return counts.get("completed") == n_total and counts.get("active") == 0
                await wait_for(server_done, "the server to count every job completed",
                               every=0.1)
                await asyncio.sleep(0.3)   # a late redelivery would show up here
            counts = await monitor.get_job_counts()
            # the server's own record of a bulk job and a single one: name apart from data
            stored = {}
            for job_id, n in added_ids.items():
                if n in (0, BULK):
                    job = await monitor.get_job(job_id)
                    assert job is not None, f"the server does not know job {job_id} (n={n})"
                    stored[n] = (job.name, job.raw.get("data"))   # data as the server has it
    elapsed = time.monotonic() - started
    print(f"\n{n_total} jobs in {elapsed:.2f} s; per worker {dict(by_worker)}; "
          f"server counts {counts}")

    expected = set(range(n_total))
    assert not failures, f"jobs failed: {failures[:5]}"
    assert not errors, f"the workers reported errors: {errors[:5]}"
    assert set(invocations) == expected, (
        f"never processed: {sorted(expected - set(invocations))[:20]}")
    twice = {n: c for n, c in invocations.items() if c != 1}
    assert not twice, f"processed more than once: {twice}"
    assert set(completed) == expected and all(c == 1 for c in completed.values()), (
        f"on_completed missing {sorted(expected - set(completed))[:20]}, repeated "
        f"{ {n: c for n, c in completed.items() if c != 1} }")
    assert all(results[n] == {"double": 2 * n} for n in expected)
    wrong_names = {n: names[n] for n in expected if names[n] != expected_name(n)}
    assert not wrong_names, f"jobs delivered with another name than added: {wrong_names}"
    wrong_data = {n: datas[n] for n in expected if datas[n] != {"n": n}}
    assert not wrong_data, f"jobs delivered with other data than added: {wrong_data}"
    assert stored == {0: ("bulk-0", {"n": 0}), BULK: (f"single-{BULK}", {"n": BULK})}, stored
    assert len(by_worker) == 2 and min(by_worker.values()) > 0, (
        f"both workers should have taken jobs: {dict(by_worker)}")
    assert counts.get("completed") == n_total, counts
    assert counts.get("active") == 0, counts
    assert counts.get("waiting") == 0, counts
    assert counts.get("failed", 0) == 0, counts


# ---------------------------------------------------------------------- 2. SIGKILL, restart

PRODUCERS = 3             # concurrent add loops on the one Queue
KILL_AFTER_ACKED = 80     # durable jobs acknowledged before the kill
DOWN_FOR = 2.5            # s the server stays dead: longer than command_timeout (2 s)
MORE_AFTER_RESTART = 40   # jobs acknowledged after the restart
WORK = 0.02               # s per job


@pytest.mark.asyncio
async def test_sigkill_and_restart_loses_no_acknowledged_job(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port, http_port = free_tcp_ports(2)
    log = tmp_path / "server.log"
    env = {"BUNQUEUE_DATA_PATH": str(tmp_path / "bq.db")}
    proc = start_real_bunqueue_at(log, port, http_port, env=env)
    conn = {"host": HOST, "port": port, "command_timeout": 2000, "reconnect_max_delay": 500,
            "ping_interval": 1000}
    queue_name = "crash"
    acknowledged: dict[str, int] = {}       # job id -> n, for adds that returned an id
    acked_after_restart = 0
    invocations: Counter[str] = Counter()   # job id -> processor calls
    completed: Counter[str] = Counter()     # job id -> on_completed calls
    add_errors: Counter[str] = Counter()    # typed errors of the adds
    unexpected: list[BaseException] = []    # anything else the producer met
    worker_errors: list[Exception] = []     # on_error
    failures: list[tuple[Job, Exception]] = []
    counts: dict[str, int] = {}             # the server's GetJobCounts at the end
    phase = "before"
    restarted = asyncio.Event()
    stop_producing = asyncio.Event()

    async def process(job: Job) -> dict:
        invocations[job.id] += 1
        await asyncio.sleep(WORK)
        return {"n": job.data["n"]}

    numbers = iter(range(1, 1_000_000))

    async def produce(queue: Queue) -> None:
        nonlocal acked_after_restart
        while not stop_producing.is_set():
            n = next(numbers)
            try:
                job = await queue.add("crash-job", {"n": n}, durable=True)
            except (BunqueueConnectionLost, BunqueueTimeout) as exc:
                add_errors[f"{phase}: {type(exc).__name__}"] += 1
                await asyncio.sleep(0.05)
                continue
            except BaseException as exc:  # noqa: BLE001 - recorded and asserted on below
                unexpected.append(exc)
                raise
            assert job.name == "crash-job" and job.data == {"n": n}
            acknowledged[job.id] = n
            if restarted.is_set():
                acked_after_restart += 1
            await asyncio.sleep(0.01)

    try:
        with nothing_escapes(caplog):
            async with Queue(queue_name, connection=conn, profile=PROFILE) as queue, \
                    Worker(queue_name, process, connection=conn, profile=PROFILE, concurrency=2,
                           on_completed=lambda job, result: completed.update([job.id]),
                           on_failed=lambda job, exc: failures.append((job, exc)),
                           on_error=worker_errors.append) as worker:
                # PRODUCERS concurrent adds on the one Queue: some are on the wire at the kill
                producers = [asyncio.create_task(produce(queue)) for _ in range(PRODUCERS)]
                try:
                    await wait_for(lambda: len(acknowledged) >= KILL_AFTER_ACKED
                                   and len(completed) >= KILL_AFTER_ACKED // 4,
                                   "the first jobs to be added and processed")
                    phase = "outage"
                    assert kill_process_group(proc) == -9
                    killed_at = time.monotonic()
                    await asyncio.sleep(DOWN_FOR)
                    proc = start_real_bunqueue_at(log, port, http_port, env=env)
                    print(f"\nserver down for {time.monotonic() - killed_at:.2f} s; "
                          f"{len(acknowledged)} adds acknowledged before the kill")
                    restarted.set()
                    phase = "after restart"
                    await wait_for(lambda: acked_after_restart >= MORE_AFTER_RESTART,
                                   f"{MORE_AFTER_RESTART} adds acknowledged after the restart")
                    stop_producing.set()
                    async with asyncio.timeout(WAIT):
                        await asyncio.gather(*producers)
                finally:
                    stop_producing.set()
                    for producer in producers:
                        producer.cancel()
                    await asyncio.gather(*producers, return_exceptions=True)

                await wait_for(lambda: set(acknowledged) <= set(completed),
                               lambda: "every acknowledged job to be completed; not yet: "
                               f"{sorted(acknowledged[i] for i in set(acknowledged) - set(completed))}"
                               f" (processed but not completed: "
                               f"{len(set(acknowledged) & set(invocations) - set(completed))}; "
                               f"worker errors {worker_errors[-3:]})")
                # the same objects, still working: a round trip through each
                probe = await queue.add("probe", {"n": -1}, durable=True)
                await wait_for(lambda: probe.id in completed, "the probe job to be completed")
                assert worker.running and not worker.closed

                async def server_settled() -> bool:
                    counts.update(await queue.get_job_counts())
                    return counts.get("waiting") == 0 and counts.get("active") == 0
                await wait_for(server_settled, lambda: f"the server to settle: {counts}",
                               every=0.1)
    finally:
        kill_process_group(proc)

    lost = sorted(set(acknowledged) - set(invocations), key=lambda i: acknowledged[i])
    duplicates = {job_id: c for job_id, c in invocations.items() if c > 1}
    print(f"acknowledged {len(acknowledged)} ({acked_after_restart} after the restart); "
          f"processed {len(invocations)} distinct jobs, {len(duplicates)} more than once "
          f"{duplicates}; add errors {dict(add_errors)}; worker errors "
          f"{Counter(type(e).__name__ for e in worker_errors)} {worker_errors}; server counts {counts}")

    assert not unexpected, f"the producer met an untyped error: {unexpected!r}"
    assert not lost, f"acknowledged jobs never processed: {lost}"
    assert not failures, f"jobs failed: {failures[:5]}"
    assert sum(add_errors.values()) > 0, "no add failed while the server was dead"
    assert all(not key.startswith("before") for key in add_errors), add_errors
    untyped = [e for e in worker_errors if not isinstance(e, ClientError)]
    assert not untyped, f"the worker reported errors that are not ClientError: {untyped!r}"
    assert completed[probe.id] == 1
    assert counts.get("completed", 0) >= len(acknowledged) + 1, counts
    assert counts.get("failed", 0) == 0, counts


# ------------------------------------------------------------------------------ 3. a token

@pytest.mark.asyncio
async def test_token(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port, http_port = free_tcp_ports(2)
    proc = start_real_bunqueue_at(tmp_path / "server.log", port, http_port,
                                  env={"AUTH_TOKENS": "secret"})
    conn = {"host": HOST, "port": port, "command_timeout": 5000, "reconnect_max_delay": 500}
    try:
        with nothing_escapes(caplog):
            async with Queue("authed", connection={**conn, "token": "secret"},
                             profile=PROFILE) as queue:
                async with asyncio.timeout(10):
                    job = await queue.add("hello", {"n": 1})
                    assert job.id
                    assert (await queue.get_job_counts()).get("waiting") == 1

            async with Queue("authed", connection={**conn, "token": "wrong"},
                             profile=PROFILE) as queue:
                started = time.monotonic()
                with pytest.raises(BunqueueAuthError) as info:
                    async with asyncio.timeout(10):
                        await queue.add("hello", {"n": 2})
                took = time.monotonic() - started
                print(f"\nwrong token refused in {took * 1000:.0f} ms: {info.value}")
                assert took < 1.0, f"the refusal took {took:.2f} s (command_timeout is 5 s)"
                # and it stays refused: a second call fails too, typed and at once
                started = time.monotonic()
                with pytest.raises(ClientError) as again:
                    async with asyncio.timeout(10):
                        await queue.get_job_counts()
                assert time.monotonic() - started < 1.0
                print(f"then: {type(again.value).__name__}: {again.value}")

            async with Queue("authed", connection={**conn, "token": "secret"},
                             profile=PROFILE) as queue:
                async with asyncio.timeout(10):
                    counts = await queue.get_job_counts()
                assert counts.get("waiting") == 1, f"the refused add got through: {counts}"
    finally:
        stop_serve(proc)
