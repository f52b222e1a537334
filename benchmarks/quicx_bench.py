#!/usr/bin/env python
"""End-to-end task throughput of the quicx reference daemon and clients (tasks/s).

N :class:`~queuewire.client.quicx.QuicxProducer` s submit tasks through a
:class:`~queuewire.reference_server.quicx.QuicxServer` on 127.0.0.1 to M
:class:`~queuewire.client.quicx.QuicxWorker` s (each with ``--concurrency`` connections) whose
handler only records the task. Each producer keeps ``--window`` submissions in flight on its
one connection (the daemon answers them in order). A task counts as done when its worker
has run the handler and written MSG_DONE; where the profile forwards results
(``forward_results_to_producer``), the run ends when every producer has received its DONEs,
otherwise when every worker's handler has run. The clock runs from the first submission to
that point; connecting and a warm-up batch are outside it. The CPU time each process spends
in that interval is recorded too (per task, for the daemon and for the clients), which
stays meaningful when other jobs share the machine. Every run checks that each task
was run exactly once and that the daemon ends with an empty queue and pool.

Modes (both by default): ``split`` runs the daemon (the in-process ``QuicxServer`` API) in
its own process (``multiprocessing``, spawn) and the producers and workers in this one, so
the two sides use two cores as a real deployment would; ``single`` runs all of them on one
event loop in one process. Each configuration runs ``--runs`` times and keeps the best.
Prints a table; ``--json FILE`` writes the figures. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
try:
    import queuewire  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console
from rich.table import Table

from queuewire.client.quicx import QuicxMonitor, QuicxProducer, QuicxWorker
from queuewire.reference_server.quicx import QuicxServer
from queuewire.spec import load_profile, profile_names

TASK_TYPE = "bench"


# ------------------------------------------------------------------------ the daemon side

def _daemon_process(profile: str, pool_bytes: int, conn: Any) -> None:
    """Child process: serve on an ephemeral port, report it, stop on request with stats."""
    async def main() -> None:
        async with QuicxServer(profile, port=0, pool_bytes=pool_bytes) as server:
            conn.send(server.port)
            loop = asyncio.get_running_loop()
            while True:
                cmd = await loop.run_in_executor(None, conn.recv)
                if cmd == "stats":
                    conn.send(server.stats())
                elif cmd == "cpu":
                    conn.send(time.process_time())
                else:
                    break
    asyncio.run(main())


class Daemon:
    """The daemon under test, in this process or in a child."""

    def __init__(self, profile: str, pool_bytes: int, mode: str):
        self.profile, self.pool_bytes, self.mode = profile, pool_bytes, mode
        self.server: QuicxServer | None = None
        self.proc: Any = None

    async def start(self) -> int:
        if self.mode == "single":
            self.server = await QuicxServer(self.profile, port=0, pool_bytes=self.pool_bytes).start()
            return self.server.port
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.proc = ctx.Process(target=_daemon_process, args=(self.profile, self.pool_bytes, child),
                                daemon=True)
        self.proc.start()
        return await asyncio.get_running_loop().run_in_executor(None, self.pipe.recv)

    async def cpu(self) -> float | None:
        """The daemon process's CPU seconds (None when it shares this process)."""
        if self.server is not None:
            return None
        self.pipe.send("cpu")
        return await asyncio.get_running_loop().run_in_executor(None, self.pipe.recv)

    async def stats(self) -> Any:
        if self.server is not None:
            return self.server.stats()
        self.pipe.send("stats")
        return await asyncio.get_running_loop().run_in_executor(None, self.pipe.recv)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        else:
            self.pipe.send("stop")
            await asyncio.get_running_loop().run_in_executor(None, self.proc.join, 10)


# ---------------------------------------------------------------------------------- a run

async def one_run(profile: str, mode: str, producers: int, workers: int, concurrency: int,
                  tasks: int, window: int, payload_bytes: int, warmup: int) -> dict[str, Any]:
    spec = load_profile(profile).model
    forwarded = bool(spec.flag("forward_results_to_producer"))
    daemon = Daemon(profile, 256 * 1024 * 1024, mode)
    port = await daemon.start()
    runs: dict[bytes, int] = {}
    target = 0
    all_done = asyncio.Event()
    filler = b"x" * max(0, payload_bytes - 16)

    def handle(task: Any) -> None:
        runs[task.payload] = runs.get(task.payload, 0) + 1
        if len(runs) >= target:
            all_done.set()

    pool = [QuicxWorker(port=port, profile=profile, handlers={TASK_TYPE: handle},
                        concurrency=concurrency, backoff_min=0.001, backoff_max=0.01,
                        heartbeat_interval=None) for _ in range(workers)]
    for w in pool:
        await w.start()
    clients = [await QuicxProducer(port=port, profile=profile, timeout=60).connect()
               for _ in range(producers)]

    async def produce(client: QuicxProducer, ids: range) -> list[Any]:
        """``window`` lanes share the ids: at most ``window`` submissions in flight."""
        todo, results = iter(ids), []

        async def lane() -> None:
            for i in todo:
                results.append(await client.submit(TASK_TYPE, f"{i:015d}".encode() + b"|" + filler))
        await asyncio.gather(*(lane() for _ in range(window)))
        return results

    async def batch(start: int, count: int) -> tuple[float, float, float | None]:
        nonlocal target
        all_done.clear()
        target = start + count
        shares = [range(start + p, start + count, producers) for p in range(producers)]
        d0, c0 = await daemon.cpu(), time.process_time()
        t0 = time.perf_counter()
        results = await asyncio.gather(*(produce(c, s) for c, s in zip(clients, shares)))
        if not forwarded:
            await all_done.wait()
        elapsed = time.perf_counter() - t0
        c1, d1 = time.process_time(), await daemon.cpu()
        statuses = {r.status for rs in results for r in rs}
        assert statuses == {"done" if forwarded else "accepted"}, statuses
        return elapsed, c1 - c0, None if d0 is None or d1 is None else d1 - d0

    await batch(0, warmup)
    elapsed, client_cpu, daemon_cpu = await batch(warmup, tasks)
    for c in clients:
        await c.close()
    for w in pool:
        await w.stop()
    stats = await daemon.stats()
    figures = None
    if spec.flag("stats_on_tcp"):
        async with QuicxMonitor(port=port, profile=profile) as monitor:
            figures = await monitor.stats()
    await daemon.stop()
    total = warmup + tasks
    assert len(runs) == total and set(runs.values()) == {1}, "a task was lost or run twice"
    assert (stats.done, stats.queue_depth, stats.in_flight, stats.pool_bytes_used) == (total, 0, 0, 0)
    assert figures is None or figures["queue_depth"] == 0
    return {"profile": profile, "mode": mode, "producers": producers, "workers": workers,
            "concurrency": concurrency, "window": window, "payload_bytes": payload_bytes,
            "tasks": tasks, "seconds": elapsed, "tasks_per_s": tasks / elapsed,
            "client_cpu_us_per_task": client_cpu / tasks * 1e6,
            "daemon_cpu_us_per_task": None if daemon_cpu is None else daemon_cpu / tasks * 1e6,
            "result_forwarded": forwarded}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", action="append", choices=profile_names("quicx"),
                    help="profile(s) to run (default: every quicx profile)")
    ap.add_argument("--mode", action="append", choices=["split", "single"],
                    help="split: daemon in its own process; single: one process (default: both)")
    ap.add_argument("--producers", type=int, default=4, help="producer connections")
    ap.add_argument("--workers", type=int, default=4, help="QuicxWorker instances")
    ap.add_argument("--concurrency", type=int, default=4, help="connections per worker")
    ap.add_argument("--tasks", type=int, default=20000, help="timed tasks per run")
    ap.add_argument("--warmup", type=int, default=1000, help="untimed tasks before the timed ones")
    ap.add_argument("--window", type=int, default=64, help="submissions in flight per producer")
    ap.add_argument("--payload-bytes", type=int, default=64, help="task payload size")
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration; best kept")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    profiles = args.profile or profile_names("quicx")
    modes = args.mode or ["split", "single"]

    console = Console(width=None if sys.stdout.isatty() else 180)
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for profile in profiles:
            best = None
            all_runs = []
            for _ in range(args.runs):
                r = asyncio.run(one_run(profile, mode, args.producers, args.workers,
                                        args.concurrency, args.tasks, args.window,
                                        args.payload_bytes, args.warmup))
                all_runs.append(round(r["tasks_per_s"]))
                console.print(f"  {profile} {mode}: {r['tasks']} tasks in {r['seconds']:.2f} s "
                              f"= {r['tasks_per_s']:,.0f} tasks/s (load {os.getloadavg()[0]:.2f})")
                if best is None or r["tasks_per_s"] > best["tasks_per_s"]:
                    best = r
            assert best is not None
            best["runs_tasks_per_s"] = all_runs
            rows.append(best)

    table = Table(title="quicx end to end: producers -> daemon -> workers", title_justify="left")
    for col in ("profile", "mode", "producers", "workers x conns", "window", "tasks",
                "best s", "tasks/s", "runs (tasks/s)", "CPU µs/task daemon", "CPU µs/task clients",
                "ends at"):
        table.add_column(col, justify="right" if col not in ("profile", "mode", "ends at") else "left")
    for r in rows:
        table.add_row(r["profile"], r["mode"], str(r["producers"]),
                      f"{r['workers']} x {r['concurrency']}", str(r["window"]), f"{r['tasks']:,}",
                      f"{r['seconds']:.2f}", f"{r['tasks_per_s']:,.0f}",
                      " / ".join(f"{x:,}" for x in r["runs_tasks_per_s"]),
                      "-" if r["daemon_cpu_us_per_task"] is None else f"{r['daemon_cpu_us_per_task']:.0f}",
                      f"{r['client_cpu_us_per_task']:.0f}" + (" (all)" if r["mode"] == "single" else ""),
                      "DONE at producer" if r["result_forwarded"] else "worker ran it")
    console.print(table)
    if args.json:
        doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
               "machine": {"nproc": os.cpu_count(), "python": sys.version.split()[0],
                           "platform": platform.platform()},
               "params": vars(args), "results": rows}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
