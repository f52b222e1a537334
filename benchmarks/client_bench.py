"""Client throughput: queuewire's Python client beside the official JS client (bunqueue 2.9.5).

Jobs per second for what an application does with a queue client, measured with the Python
client (``queuewire.client``: ``Queue``, ``Worker``, profile ``bunqueue/2.9.5``) and with the
official JavaScript client (npm ``bunqueue`` 2.9.5, ``bunqueue/client``, run under the bun
that ``make setup`` installs into tests/interop/node_modules; driven by
``client_bench_js.mjs``), against the same server in the same run:

* ``add-seq``     ``--n-seq`` jobs, one ``await queue.add("bench", {"i": i})`` at a time;
* ``add-gather``  ``--n-gather`` adds issued at once (``asyncio.gather`` / ``Promise.all``),
                  pipelined by the client;
* ``add-bulk``    ``--n-bulk`` jobs as ``add_bulk``/``addBulk`` calls of ``--batch`` (1000)
                  jobs, one call at a time;
* ``worker-cN``   ``--n-worker`` jobs pushed first (untimed, PUSHB of 1000), then the clock
                  runs from building a ``Worker`` with concurrency N (``--concurrency``,
                  default 8 and 50) and a processor that returns ``{"ok": True}`` at once,
                  until its N-th completion callback (both clients call it once the server
                  accepted the job's ACK). Each client keeps its own defaults otherwise
                  (ACK batching, PULLB size, polling).

Targets (``--targets``, default all three):

* ``ref``: the reference server as a process, ``python -m queuewire.cli serve bunqueue
  --port 0 --profile bunqueue/2.9.5`` (in memory);
* ``bq``: the real bunqueue 2.9.5 server under bun (``bunqueue start``, in memory, its
  per-connection rate limit lifted, storage env vars cleared), as server_bench.py starts it;
* ``embedded``: no server; the Python client's embedded mode (``Queue(..., embedded=True)``,
  the reference engine in process). The JS client's own embedded mode (``new Queue(name,
  {embedded: true})``, bunqueue's engine inside the bun process) is measured beside it as a
  reference point only: it is a different engine, not the same server.

The JS client's ``Queue.add`` over TCP goes through its AddBatcher by default (PUSHB of one
job when no batch is in flight, up to 50 while one is); the single-add workloads are
measured with it (``js``) and with ``autoBatch: {enabled: false}`` (``js-nobatch``, one
PUSH per add), and both are shown. The Python client's ``Queue(..., auto_batch=True)`` does
the same (off by default: a refused PUSHB fails every add batched in it), and its single adds
are measured both ways too (``py`` and ``py-batch``). The TCP goal takes each client's faster
variant.

Each measurement: a fresh queue, connected and pinged before the clock starts; wall clock
(``perf_counter`` / ``performance.now``) around the timed part; afterwards the job counts
are checked (``waiting == n``, or ``completed == n`` for a worker) and the queue is
obliterated. The client's process CPU time and the server's (``/proc/<pid>/stat``) over the
same window are recorded. ``--runs`` rounds (default 3), interleaved (Python first in even
rounds, JS first in odd ones), each after an untimed warm-up pass of every workload at a
tenth of its size; the tables show the **best** round per cell (every round is in the JSON).

``--cprofile WORKLOAD`` runs one Python-client workload under cProfile (profiling the timed
part only) and prints the top functions by cumulative and by own time instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import codec_bench  # machine()
import server_bench  # start_bunqueue, stop (the same server setup as that bench)

from queuewire.client import Queue, Worker

INTEROP = ROOT / "tests" / "interop"
BUN = INTEROP / "node_modules" / ".bin" / "bun"
JS_DRIVER = Path(__file__).resolve().parent / "client_bench_js.mjs"
HOST = "127.0.0.1"
PROFILE = "bunqueue/2.9.5"
TARGETS = ("ref", "bq", "embedded")
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")

#: the embedded add_bulk figure of document 002, and the TCP bar (Python / JS)
GOAL_EMBEDDED_BULK = 100_000
GOAL_TCP_RATIO = 1.0


# --------------------------------------------------------------------------- servers
def start_reference(log: Any) -> tuple[subprocess.Popen, int]:
    """``queuewire serve bunqueue --port 0 --profile bunqueue/2.9.5``; (process, port)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuewire.cli", "serve", "bunqueue", "--host", HOST,
         "--port", "0", "--profile", PROFILE],
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        match = LISTENING.search(line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            port = int(match.group(1))
            server_bench.wait_port(port, proc)
            return proc, port
    proc.kill()
    raise RuntimeError(f"the reference server did not report its port: {''.join(seen)!r}")


def proc_cpu(pid: int | None) -> float | None:
    """CPU seconds used so far by every thread of process ``pid`` (the scheduler's run time
    from /proc/<pid>/task/*/schedstat, in ns; threads that ended are not counted)."""
    if pid is None:
        return None
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for task in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


# --------------------------------------------------------------------------- workloads
def workloads(args: argparse.Namespace, scale: float = 1.0) -> list[dict]:
    def n(value: int) -> int:
        return max(1, int(value * scale))

    out = [{"label": "add-seq", "kind": "add-seq", "n": n(args.n_seq)},
           {"label": "add-gather", "kind": "add-gather", "n": n(args.n_gather)},
           {"label": "add-bulk", "kind": "add-bulk", "n": max(args.batch, n(args.n_bulk)),
            "batch": args.batch}]
    for c in args.concurrency:
        out.append({"label": f"worker-c{c}", "kind": "worker", "n": n(args.n_worker),
                    "concurrency": c})
    return out


async def _add_bulk_all(queue: Queue, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        jobs = [{"name": "bench", "data": {"i": i}} for i in range(start, min(n, start + batch))]
        added = await queue.add_bulk(jobs)
        if len(added) != len(jobs):
            raise RuntimeError(f"add_bulk returned {len(added)} of {len(jobs)} jobs")


async def _process(job: Any) -> dict:
    return {"ok": True}


async def py_one(w: dict, *, conn: dict | None, server_pid: int | None, prefix: str,
                 profiler: cProfile.Profile | None = None) -> dict:
    """One measurement of the Python client; returns its record."""
    label, kind, n = w["label"], w["kind"], w["n"]
    name = f"{prefix}-{label}"
    embedded = conn is None
    client_kw: dict[str, Any] = ({"embedded": True} if embedded else {"connection": conn})
    batch = bool(w.get("auto_batch"))
    async with Queue(name, profile=PROFILE, auto_batch=batch, **client_kw) as queue:
        await queue.wait_until_ready()
        await queue.get_job_counts()
        worker: Worker | None = None
        done = asyncio.Event()
        completed = 0
        first: float | None = None
        errors: list[BaseException] = []
        if kind == "worker":
            await _add_bulk_all(queue, n, 1000)

            def on_completed(job: Any, result: Any) -> None:
                nonlocal completed, first
                completed += 1
                if first is None:
                    first = time.perf_counter()
                if completed >= n:
                    done.set()

            def on_failure(*what: Any) -> None:
                errors.append(what[-1] if isinstance(what[-1], BaseException)
                              else RuntimeError(repr(what)))
                done.set()

        gc.collect()
        cpu0, srv0 = time.process_time(), proc_cpu(server_pid)
        if profiler is not None:
            profiler.enable()
        t0 = time.perf_counter()
        if kind == "add-seq":
            for i in range(n):
                await queue.add("bench", {"i": i})
        elif kind == "add-gather":
            await asyncio.gather(*(queue.add("bench", {"i": i}) for i in range(n)))
        elif kind == "add-bulk":
            await _add_bulk_all(queue, n, w["batch"])
        elif kind == "worker":
            worker = Worker(name, _process, profile=PROFILE, concurrency=w["concurrency"],
                            on_completed=on_completed, on_failed=on_failure,
                            on_error=on_failure, **client_kw)
            await worker.run()
            async with asyncio.timeout(max(120.0, n / 200)):
                await done.wait()
        else:
            raise ValueError(f"unknown workload kind {kind!r}")
        seconds = time.perf_counter() - t0
        if profiler is not None:
            profiler.disable()
        cpu1, srv1 = time.process_time(), proc_cpu(server_pid)
        if worker is not None:
            await worker.close()
        if errors:
            raise RuntimeError(f"{label}: the worker reported {errors[0]!r}")
        counts = await queue.get_job_counts()
        expect = "completed" if kind == "worker" else "waiting"
        ok = counts.get(expect) == n
        await queue.obliterate()
    if not ok:
        raise RuntimeError(f"{label}: expected {expect} == {n}, counts {counts}")
    return {"client": "py-batch" if batch else "py",
            "mode": "embedded" if embedded else "tcp", "label": label,
            "kind": kind, "n": n, "auto_batch": batch, "batch": w.get("batch"),
            "concurrency": w.get("concurrency"), "seconds": seconds,
            "client_cpu_s": cpu1 - cpu0,
            "server_cpu_s": None if srv0 is None or srv1 is None else srv1 - srv0,
            "jobs_per_s": n / seconds, "counts": counts, "ok": ok,
            "first_completion_s": None if first is None else first - t0}


def run_py(work: list[dict], warm: list[dict], *, port: int | None, server_pid: int | None,
           prefix: str) -> list[dict]:
    conn = None if port is None else {"host": HOST, "port": port, "command_timeout": 30000}

    async def main() -> list[dict]:
        for w in warm:
            await py_one(w, conn=conn, server_pid=None, prefix=f"{prefix}-warm")
        items = []
        for w in work:  # on TCP the single adds also with auto_batch, as JS's default is
            items.append(w)
            if conn is not None and w["kind"] in ("add-seq", "add-gather"):
                items.append({**w, "auto_batch": True})
        return [await py_one(w, conn=conn, server_pid=server_pid,
                             prefix=prefix + ("-b" if w.get("auto_batch") else ""))
                for w in items]

    return asyncio.run(main())


def js_workloads(work: list[dict], mode: str) -> list[dict]:
    """The JS list: on TCP the single-add workloads twice, with and without autoBatch."""
    out = []
    for w in work:
        if mode == "tcp" and w["kind"] in ("add-seq", "add-gather"):
            out.append({**w, "auto_batch": True})
            out.append({**w, "auto_batch": False})
        else:
            out.append(dict(w))
    return out


def run_js(work: list[dict], warm: list[dict], *, mode: str, port: int | None,
           server_pid: int | None, prefix: str) -> list[dict]:
    config = {"interop": str(INTEROP), "mode": mode, "port": port, "server_pid": server_pid}
    env = dict(os.environ)
    for var in ("BUNQUEUE_DATA_PATH", "BQ_DATA_PATH", "DATA_PATH", "SQLITE_PATH",
                "BUNQUEUE_STORAGE_DRIVER", "BUNQUEUE_POSTGRES_URL", "BUNQUEUE_EMBEDDED"):
        env.pop(var, None)
    env["LOG_LEVEL"] = "error"
    jsw = []
    for warm_flag, items in ((True, warm), (False, work)):
        for w in js_workloads(items, mode):
            suffix = "-nobatch" if w.get("auto_batch") is False else ""
            jsw.append({**w, "label": w["label"] + suffix, "warm": warm_flag})
    cfg = {**config, "prefix": prefix, "workloads": jsw}
    proc = subprocess.run([str(BUN), str(JS_DRIVER), json.dumps(cfg)], capture_output=True,
                          text=True, cwd=INTEROP, env=env, timeout=900, check=False)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    errors = [line for line in lines if "error" in line]
    if proc.returncode != 0 or errors:
        raise RuntimeError(f"JS driver failed (status {proc.returncode}): "
                           f"{errors or proc.stderr[-2000:]}")
    records = []
    for line in lines:
        if line.get("warm"):
            continue
        line["label"] = line["label"].removesuffix("-nobatch")
        line["client"] = "js" if line.get("auto_batch") is not False else "js-nobatch"
        records.append(line)
    return records


# --------------------------------------------------------------------------- one target
def run_target(target: str, args: argparse.Namespace, tmp: Path) -> list[dict]:
    work, warm = workloads(args), workloads(args, 0.1)
    log = (tmp / f"{target}.log").open("wb")
    proc: subprocess.Popen | None = None
    port: int | None = None
    try:
        if target == "ref":
            proc, port = start_reference(log)
        elif target == "bq":
            proc, port = server_bench.start_bunqueue(None, log)
        pid = proc.pid if proc is not None else None
        records: list[dict] = []
        for r in range(args.runs):
            order = ("py", "js") if r % 2 == 0 else ("js", "py")
            for client in order:
                if client not in args.clients:
                    continue
                prefix = f"cb-{target}-{client}-r{r}"
                t0 = time.monotonic()
                if client == "py":
                    got = run_py(work, warm, port=port, server_pid=pid, prefix=prefix)
                else:
                    got = run_js(work, warm, mode="embedded" if target == "embedded" else "tcp",
                                 port=port, server_pid=pid, prefix=prefix)
                for rec in got:
                    rec.update(target=target, round=r)
                records += got
                brief = ", ".join(f"{x['label']}{'' if x['client'] != 'js-nobatch' else '/nb'}"
                                  f" {x['jobs_per_s']:,.0f}" for x in got)
                print(f"  {target} round {r + 1}/{args.runs} {client} "
                      f"({time.monotonic() - t0:.1f} s): {brief}", flush=True)
        return records
    finally:
        if proc is not None:
            server_bench.stop(proc)
        log.close()


# --------------------------------------------------------------------------- summary
def summarize(records: list[dict]) -> dict:
    cells: dict[tuple, list[dict]] = {}
    for rec in records:
        cells.setdefault((rec["target"], rec["label"], rec["client"]), []).append(rec)
    summary = {}
    for (target, label, client), recs in cells.items():
        best = max(recs, key=lambda x: x["jobs_per_s"])
        rates = [x["jobs_per_s"] for x in recs]
        summary.setdefault(target, {}).setdefault(label, {})[client] = {
            "best": best["jobs_per_s"], "median": statistics.median(rates), "runs": rates,
            "n": best["n"],
            "client_cpu_us_per_job": 1e6 * best["client_cpu_s"] / best["n"],
            "server_cpu_us_per_job": (None if best["server_cpu_s"] is None
                                      else 1e6 * best["server_cpu_s"] / best["n"]),
            "wall_us_per_job": 1e6 * best["seconds"] / best["n"]}
    for labels in summary.values():
        for clients in labels.values():
            for mine, js in (("py", "js"), ("py", "js-nobatch"), ("py-batch", "js")):
                py = clients.get(mine, {}).get("best")
                other = clients.get(js, {}).get("best")
                if py and other:
                    clients.setdefault("ratios", {})[f"{mine}/{js}"] = py / other
    return summary


def goals(summary: dict) -> list[dict]:
    out = []
    bulk = summary.get("embedded", {}).get("add-bulk", {}).get("py", {}).get("best")
    if bulk is not None:
        out.append({"goal": f"embedded add_bulk >= {GOAL_EMBEDDED_BULK:,} jobs/s",
                    "value": bulk, "met": bulk >= GOAL_EMBEDDED_BULK})
    for target in ("ref", "bq"):
        for label, clients in summary.get(target, {}).items():
            py = max((clients.get(k, {}).get("best") or 0) for k in ("py", "py-batch"))
            js = max((clients.get(k, {}).get("best") or 0) for k in ("js", "js-nobatch"))
            if py and js:
                out.append({"goal": f"{target} {label}: Python / JS (each its faster variant) >= "
                                    f"{GOAL_TCP_RATIO:.1f}x",
                            "value": py / js, "met": py / js >= GOAL_TCP_RATIO})
    return out


def fmt_rate(cell: dict | None) -> str:
    return "" if not cell else f"{cell['best']:,.0f}"


def fmt_ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def print_tables(summary: dict, targets: list[str]) -> None:
    names = {"ref": "reference server (queuewire serve bunqueue, bunqueue/2.9.5 profile)",
             "bq": "real bunqueue 2.9.5 server (bun)",
             "embedded": "embedded (no server; JS embedded is bunqueue's own engine, reference only)"}
    for target in targets:
        labels = summary.get(target)
        if not labels:
            continue
        print(f"\n{names[target]}: jobs/s, best of runs")
        if target == "embedded":
            header = ["workload", "py embedded", "js embedded (ref.)", "py/js"]
        else:
            header = ["workload", "py", "py auto_batch", "js", "js autoBatch off", "py/js (off)",
                      "py batch/js"]
        rows = [header]
        for label, clients in labels.items():
            ratios = clients.get("ratios", {})
            if target == "embedded":
                rows.append([label, fmt_rate(clients.get("py")), fmt_rate(clients.get("js")),
                             fmt_ratio(ratios.get("py/js"))])
            else:
                off = ratios.get("py/js-nobatch")
                rows.append([label, fmt_rate(clients.get("py")),
                             fmt_rate(clients.get("py-batch")), fmt_rate(clients.get("js")),
                             fmt_rate(clients.get("js-nobatch")),
                             fmt_ratio(off if off is not None else ratios.get("py/js")),
                             fmt_ratio(ratios.get("py-batch/js"))])
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for j, row in enumerate(rows):
            print("  " + "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                                   for i, cell in enumerate(row)))
            if j == 0:
                print("  " + "  ".join("-" * w for w in widths))
        print("  CPU per job in the best run, µs (client / server):")
        for label, clients in labels.items():
            parts = []
            for client in ("py", "py-batch", "js", "js-nobatch"):
                cell = clients.get(client)
                if cell:
                    srv = cell["server_cpu_us_per_job"]
                    parts.append(f"{client} {cell['client_cpu_us_per_job']:.1f} / "
                                 f"{'-' if srv is None else f'{srv:.1f}'}")
            print(f"    {label:<12} " + "; ".join(parts))


def machine() -> dict:
    bun = subprocess.run([str(BUN), "--version"], capture_output=True, text=True,
                         check=False).stdout.strip()
    bq = json.loads((INTEROP / "node_modules" / "bunqueue" / "package.json").read_text())
    base = codec_bench.machine()  # nproc, cpu, platform, python, library versions
    return {**base, "bun": bun, "bunqueue": bq.get("version"),
            "loadavg_start": os.getloadavg()}


# --------------------------------------------------------------------------- cProfile mode
def run_cprofile(args: argparse.Namespace, tmp: Path) -> None:
    work = {w["label"]: w for w in workloads(args)}
    if args.cprofile not in work:
        raise SystemExit(f"--cprofile: unknown workload {args.cprofile!r}; "
                         f"one of {', '.join(work)}")
    target = args.cprofile_target
    log = (tmp / f"{target}.log").open("wb")
    proc = None
    port = None
    try:
        if target == "ref":
            proc, port = start_reference(log)
        elif target == "bq":
            proc, port = server_bench.start_bunqueue(None, log)
        conn = None if port is None else {"host": HOST, "port": port, "command_timeout": 30000}
        profiler = cProfile.Profile()

        async def main() -> dict:
            warm = workloads(args, 0.1)
            await py_one(next(w for w in warm if w["label"] == args.cprofile), conn=conn,
                         server_pid=None, prefix="cb-prof-warm")
            return await py_one(work[args.cprofile], conn=conn,
                                server_pid=proc.pid if proc else None, prefix="cb-prof",
                                profiler=profiler)

        rec = asyncio.run(main())
    finally:
        if proc is not None:
            server_bench.stop(proc)
        log.close()
    print(f"{args.cprofile} on {target} under cProfile: {rec['jobs_per_s']:,.0f} jobs/s "
          f"({rec['n']} jobs, {rec['seconds']:.2f} s wall, client CPU {rec['client_cpu_s']:.2f} s)")
    for order in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats(order).print_stats(args.cprofile_top)
        print(f"\n--- by {order} ---")
        print(buf.getvalue())


# --------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Prints tables of jobs/s (best of --runs) "
                    "and Python/JS ratios; see the module docstring and benchmarks/README.md "
                    "('Client benchmark') for what each workload does.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="workloads: add-seq (one add at a time), add-gather (all adds at once, "
               "pipelined), add-bulk (add_bulk of --batch jobs), worker-cN (push, then time a "
               "Worker of concurrency N until every job completed).\n"
               "targets: ref (reference server process), bq (real bunqueue 2.9.5 under bun), "
               "embedded (in-process; JS embedded shown as a reference point).\n"
               "examples:\n"
               "  .venv/bin/python benchmarks/client_bench.py --quick\n"
               "  .venv/bin/python benchmarks/client_bench.py --json /tmp/client_bench.json\n"
               "  .venv/bin/python benchmarks/client_bench.py --cprofile add-bulk")
    parser.add_argument("--quick", action="store_true",
                        help="small N and 1 round (well under a minute): a smoke run, not figures")
    parser.add_argument("--json", metavar="PATH", help="also write every measurement here")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"comma-separated, of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--clients", default="py,js",
                        help="comma-separated, of py, js (default: both)")
    parser.add_argument("--runs", type=int, default=3,
                        help="rounds per target; the best round per cell is shown (default 3)")
    parser.add_argument("--n-seq", type=int, default=5000, help="jobs for add-seq (5000)")
    parser.add_argument("--n-gather", type=int, default=20000,
                        help="jobs for add-gather (20000)")
    parser.add_argument("--n-bulk", type=int, default=100_000, help="jobs for add-bulk (100000)")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per add_bulk call (1000)")
    parser.add_argument("--n-worker", type=int, default=20000,
                        help="jobs for each worker-cN workload (20000)")
    parser.add_argument("--concurrency", default="8,50",
                        help="worker concurrencies, comma-separated (default 8,50)")
    parser.add_argument("--py-gc-threshold", type=int, metavar="N",
                        help="diagnosis only: gc.set_threshold(N) in this process (the Python "
                             "client, and the embedded engine) before measuring; 0 disables "
                             "the collector. Default: Python's own settings, as an "
                             "application has them (the reference server process tunes its "
                             "own collector either way)")
    parser.add_argument("--cprofile", metavar="WORKLOAD",
                        help="profile the Python client on this one workload (e.g. add-bulk, "
                             "worker-c50) and print the top functions; no benchmark tables")
    parser.add_argument("--cprofile-target", default="ref", choices=TARGETS,
                        help="server for --cprofile (default ref)")
    parser.add_argument("--cprofile-top", type=int, default=30,
                        help="rows per --cprofile listing (30)")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c]
    if args.quick:
        args.runs = 1
        args.n_seq, args.n_gather, args.n_bulk, args.n_worker = 1000, 3000, 10000, 3000
    args.targets = [t for t in args.targets.split(",") if t]
    args.clients = [c for c in args.clients.split(",") if c]
    for t in args.targets:
        if t not in TARGETS:
            parser.error(f"unknown target {t!r}")
    if ("bq" in args.targets or "js" in args.clients) and not BUN.exists():
        parser.error(f"{BUN} is missing (make setup): needed for the bq target and the JS client")

    if args.py_gc_threshold is not None:
        if args.py_gc_threshold <= 0:
            gc.disable()
        else:
            gc.set_threshold(args.py_gc_threshold, *gc.get_threshold()[1:])
        print(f"Python collector: {'disabled' if not gc.isenabled() else gc.get_threshold()} "
              f"(--py-gc-threshold; not the default)", flush=True)

    with tempfile.TemporaryDirectory(prefix="client_bench-") as tmpdir:
        tmp = Path(tmpdir)
        if args.cprofile:
            run_cprofile(args, tmp)
            return
        info = machine()
        started = time.monotonic()
        print(f"client_bench: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, "
              f"bun {info['bun']}, bunqueue {info['bunqueue']}, load {info['loadavg_start']}",
              flush=True)
        records: list[dict] = []
        for target in args.targets:
            records += run_target(target, args, tmp)
    summary = summarize(records)
    print_tables(summary, args.targets)
    verdicts = goals(summary)
    if verdicts:
        print("\ngoals:" + (" (--quick: small N, one round; a smoke run, not figures to judge "
                            "goals by)" if args.quick else ""))
        for g in verdicts:
            value = (f"{g['value']:,.0f} jobs/s" if "add_bulk" in g["goal"]
                     else f"{g['value']:.2f}x")
            print(f"  {g['goal']}: {value} -> {'met' if g['met'] else 'MISSED'}")
    elapsed = time.monotonic() - started
    info["loadavg_end"] = os.getloadavg()
    print(f"\nelapsed {elapsed:.0f} s; load average at the end {info['loadavg_end']}")
    if args.json:
        params = {k: getattr(args, k) for k in ("runs", "n_seq", "n_gather", "n_bulk", "batch",
                                                "n_worker", "concurrency", "targets", "clients",
                                                "quick", "py_gc_threshold")}
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "machine": info,
            "params": params, "statistic": "best of runs (jobs/s)", "summary": summary,
            "goals": verdicts, "records": records, "elapsed_s": elapsed}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
