"""Server throughput matrix: the bunqueue reference server against the real bunqueue 2.9.5.

Every cell is one workload on one server, both servers measured in the same run, in memory
and on SQLite:

* workloads: ``push`` (PUSH of one job), ``pushb`` (PUSHB of 100 jobs), ``worker`` (the
  worker cycle: PULLB of 10 with ``owner`` and ``lockTtl``, then ACKB of those 10 with their
  lock tokens, on a queue filled beforehand), ``mixed`` (producers and workers at once: half
  the chains PUSH, half run the worker cycle on a queue filled beforehand);
* entry shapes (``push`` and ``pushb``): the same jobs as each client writes them
  (``SHAPES``: queuewire's and the JS client's PUSH, the JS client's PUSHB entries, the PyPI
  client's, and a PUSH or PUSHB entry with common options);
* 1 and 4 connections; 10 and 100 requests in flight per connection (``pushb``: 10 and 100
  batches in flight; ``worker``/``mixed``: that many request chains per connection, each
  sending its next request when its last reply arrives).

Targets, started here on 127.0.0.1 and stopped at the end: ``ref`` is ``queuewire serve
bunqueue --port 0`` (``--data-path`` for SQLite); ``bq`` is ``bunqueue start`` from
``tests/interop/node_modules`` under bun (``--data-path``), with the per-connection rate
limit lifted. Each cell runs ``--jobs`` (20,000) timed jobs after a warm-up; each server gets
a fresh process per storage. Reported per cell: jobs/s (wall clock, first request to last
reply), the server's CPU time per job (utime + stime from /proc/PID/stat before and after:
on a shared two-core machine the steadier figure), the load generator's CPU per job (its
processes' own rusage: it must not be the bottleneck), and the ratios ref/bq (jobs/s: higher
is better for ref; CPU per job: lower is). The load generator runs one process per
connection up to ``--gen-procs`` (2), asyncio inside each. Every reply is checked (``ok``;
PUSHB returns 100 ids; the worker's ACKB acknowledges what PULLB gave).

    .venv/bin/python benchmarks/server_bench.py [--jobs 20000] [--runs 1] [--json FILE]
        [--servers ref,bq] [--storage mem,sqlite] [--workloads push,pushb,worker,mixed]
        [--shapes queuewire,js,pypi,options]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import os
import platform
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder

ROOT = Path(__file__).resolve().parent.parent
INTEROP = ROOT / "tests" / "interop"
BUN = INTEROP / "node_modules" / ".bin" / "bun"
BUNQUEUE_CLI = INTEROP / "node_modules" / "bunqueue" / "dist" / "cli" / "index.js"
QUEUEWIRE = ROOT / ".venv" / "bin" / "queuewire"
HOST = "127.0.0.1"

WORKLOADS = ("push", "pushb", "worker", "mixed")
SERVERS = ("ref", "bq")
STORAGE = ("mem", "sqlite")
CONNS = (1, 4)
INFLIGHT = (10, 100)
BATCH = 100        # jobs per PUSHB
PULL = 10          # jobs per PULLB
CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection((HOST, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not accept connections within {timeout} s")


def start_reference(data_path: str | None, log: Any) -> tuple[subprocess.Popen, int]:
    cmd = [str(QUEUEWIRE), "serve", "bunqueue", "--host", HOST, "--port", "0"]
    if data_path:
        cmd += ["--data-path", data_path]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, cwd=ROOT)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30.0
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if "listening on 127.0.0.1:" in line:
                    port = int(line.split("listening on 127.0.0.1:", 1)[1].split(";")[0].split()[0])
                    wait_port(port, proc)
                    return proc, port
        elif proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"reference server did not report its port; stdout: {buf!r}")


def start_bunqueue(data_path: str | None, log: Any) -> tuple[subprocess.Popen, int]:
    port, http_port = free_port(), free_port()
    while http_port == port:
        http_port = free_port()
    cmd = [str(BUN), str(BUNQUEUE_CLI), "start", "--host", HOST, "--tcp-port", str(port),
           "--http-port", str(http_port)]
    if data_path:
        cmd += ["--data-path", data_path]
    env = dict(os.environ)
    for var in ("BUNQUEUE_DATA_PATH", "BQ_DATA_PATH", "DATA_PATH", "SQLITE_PATH",
                "BUNQUEUE_STORAGE_DRIVER", "BUNQUEUE_POSTGRES_URL", "AUTH_TOKENS"):
        env.pop(var, None)
    env["RATE_LIMIT_MAX_REQUESTS"] = "1000000000"
    env["RATE_LIMIT_WINDOW_MS"] = "60000"
    env["LOG_LEVEL"] = "error"
    env["PATH"] = f"{BUN.parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=INTEROP, env=env)
    try:
        wait_port(port, proc)
    except Exception:
        proc.kill()
        raise
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def job_data(i: int) -> dict:
    return {"to": f"user{i % 997}@example.com", "template": "welcome", "n": i}


def server_cpu(pid: int) -> float:
    """utime + stime of a process (and of its waited-for children), in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK


class Gen(asyncio.Protocol):
    """One connection of the load generator, as cheap as it can be: request chains as small
    state machines keyed by reqId; every reply is checked, the chain's next request encoded at
    once, and all the requests a read's replies call for go out in one write."""

    def __init__(self, done: asyncio.Future):
        self.enc, self.dec = FrameEncoder(), FrameDecoder()
        self.ids = itertools.count(1)
        self.chains: dict[str, Any] = {}
        self.transport: Any = None
        self.done_fut = done
        self.live = 0
        self.jobs = 0
        self.out: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self, chain: Any, msg: dict) -> None:
        rid = str(next(self.ids))
        self.chains[rid] = chain
        self.out.append(self.enc.encode({**msg, "reqId": rid}))

    def start(self, chains: list) -> None:
        self.live = len(chains)
        for chain in chains:
            msg = chain.first()
            if msg is None:
                self.live -= 1
            else:
                self.send(chain, msg)
        self.flush()

    def flush(self) -> None:
        if self.out:
            self.transport.write(b"".join(self.out))
            self.out.clear()
        if self.live == 0 and not self.done_fut.done():
            self.done_fut.set_result(self.jobs)

    def data_received(self, data: bytes) -> None:
        try:
            for reply in self.dec.feed(data):
                chain = self.chains.pop(reply.get("reqId"))
                if reply.get("ok") is not True:
                    raise RuntimeError(f"error reply: {reply!r}")
                nxt = chain.next(reply)
                if nxt is None:
                    self.live -= 1
                    self.jobs += chain.jobs
                else:
                    self.send(chain, nxt)
        except Exception as exc:  # noqa: BLE001 - reported through the future
            if not self.done_fut.done():
                self.done_fut.set_exception(exc)
            return
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done_fut.done():
            self.done_fut.set_exception(RuntimeError("server closed the connection"))


#: How each client writes one job (the same jobs in every shape): queuewire's client and the
#: official JS client's PUSH send name and data; the JS client (``bunqueue/client`` 2.9.5,
#: ``operations/add/bulk.js``) adds ``removeOnComplete: false, removeOnFail: false`` to every
#: PUSHB entry; the PyPI ``bunqueue-client`` (``options.job_payload``) puts the name inside data
#: and sends no top-level name; ``options`` is a PUSH (a PUSHB entry) with the common options.
SHAPES = ("queuewire", "js", "pypi", "options")
PUSH_SHAPES = ("queuewire", "pypi", "options")   # the JS client's PUSH is queuewire's shape


def job_entry(shape: str, n: int, custom_key: str, queue: str) -> dict:
    data = job_data(n)
    if shape == "pypi":
        return {"data": {"name": "email", **data}}
    entry = {"name": "email", "data": data}
    if shape == "js" and custom_key == "customId":
        entry |= {"removeOnComplete": False, "removeOnFail": False}
    elif shape == "options":
        entry |= {"priority": n % 5, "delay": 1000, "maxAttempts": 3, "backoff": 1000,
                  custom_key: f"{queue}-{n}"}  # custom ids are server-wide: one per job
    return entry


class Producer:
    """PUSH (batch 1) or PUSHB chains sharing a budget of jobs, in one client's shape."""

    def __init__(self, queue: str, budget: list[int], batch: int, tag: int,
                 shape: str = "queuewire"):
        self.queue, self.budget, self.batch, self.tag = queue, budget, batch, tag
        self.shape = shape
        self.jobs = 0

    def first(self) -> dict | None:
        return self._push()

    def _push(self) -> dict | None:
        if self.budget[0] <= 0:
            return None
        self.budget[0] -= self.batch
        n = self.tag + self.jobs
        if self.batch == 1:
            return {"cmd": "PUSH", "queue": self.queue, **job_entry(self.shape, n, "jobId", self.queue)}
        return {"cmd": "PUSHB", "queue": self.queue,
                "jobs": [job_entry(self.shape, n + k, "customId", self.queue)
                         for k in range(self.batch)]}

    def next(self, reply: dict) -> dict | None:
        if self.batch > 1 and len(reply.get("ids") or ()) != self.batch:
            raise RuntimeError(f"PUSHB returned {len(reply.get('ids') or ())} ids")
        self.jobs += self.batch
        return self._push()


class Worker:
    """The worker cycle: PULLB of PULL with owner and lockTtl, then ACKB with the tokens."""

    def __init__(self, queue: str, budget: list[int], owner: str):
        self.queue, self.budget, self.owner = queue, budget, owner
        self.jobs = 0
        self.pulling = True

    def first(self) -> dict | None:
        return self._pull()

    def _pull(self) -> dict | None:
        if self.budget[0] <= 0:
            return None
        self.budget[0] -= PULL
        self.pulling = True
        return {"cmd": "PULLB", "queue": self.queue, "count": PULL, "owner": self.owner,
                "lockTtl": 30000, "timeout": 0}

    def next(self, reply: dict) -> dict | None:
        if not self.pulling:
            return self._pull()
        jobs = reply.get("jobs") or []
        if not jobs:
            return None            # the queue ran dry: this chain ends
        self.jobs += len(jobs)
        self.pulling = False
        ack: dict = {"cmd": "ACKB", "ids": [j["id"] for j in jobs]}
        if reply.get("tokens"):
            ack["tokens"] = reply["tokens"]
        return ack


async def _fill(port: int, queue: str, jobs: int) -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    _, gen = await loop.create_connection(lambda: Gen(done), HOST, port)
    budget = [jobs]
    gen.start([Producer(queue, budget, BATCH, 0) for _ in range(10)])
    await done
    gen.transport.close()


async def _gen(port: int, cell: dict, conns: int, jobs: int, index: int, start: Any) -> dict:
    """One generator process's connections; returns jobs done and the timed span."""
    loop = asyncio.get_running_loop()
    gens = []
    for _ in range(conns):
        _, gen = await loop.create_connection(lambda: Gen(loop.create_future()), HOST, port)
        gens.append(gen)
    await loop.run_in_executor(None, start.wait)
    t0 = time.perf_counter()
    w, q = cell["workload"], cell["queue"]
    for c, gen in enumerate(gens):
        per_conn = jobs // conns
        tag = (index * 100 + c) * 10**8  # every chain's jobs distinct (custom ids too)
        if w in ("push", "pushb"):
            budget = [per_conn]
            batch = BATCH if w == "pushb" else 1
            chains: list = [Producer(q, budget, batch, tag + k * 10**5, cell["shape"])
                            for k in range(cell["inflight"])]
        elif w == "worker":
            budget = [per_conn]
            chains = [Worker(q, budget, f"w{index}-{c}") for _ in range(cell["inflight"])]
        else:   # mixed: half the chains produce, half work, half the jobs each
            half = max(1, cell["inflight"] // 2)
            pb, wb = [per_conn // 2], [per_conn - per_conn // 2]
            chains = [Producer(q + "-in", pb, 1, tag) for _ in range(half)]
            chains += [Worker(q, wb, f"w{index}-{c}") for _ in range(half)]
        gen.start(chains)
    done = sum(await asyncio.gather(*(g.done_fut for g in gens)))
    t1 = time.perf_counter()
    for gen in gens:
        gen.transport.close()
    return {"jobs": done, "t0": t0, "t1": t1}


def _child(port: int, cell: dict, conns: int, jobs: int, index: int, start: Any,
           out: Any) -> None:
    try:
        res = asyncio.run(_gen(port, cell, conns, jobs, index, start))
        ru = resource.getrusage(resource.RUSAGE_SELF)
        res["cpu"] = ru.ru_utime + ru.ru_stime
        out.send(res)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.send({"error": repr(exc)})


def run_cell(proc: subprocess.Popen, port: int, cell: dict, jobs: int, gen_procs: int) -> dict:
    """One cell: fill (for workers), then the timed jobs across generator processes."""
    if cell["workload"] in ("worker", "mixed"):
        fill = jobs if cell["workload"] == "worker" else jobs // 2 + BATCH
        asyncio.run(_fill(port, cell["queue"], fill + PULL * cell["inflight"] * cell["conns"]))
    nprocs = min(gen_procs, cell["conns"])
    ctx = mp.get_context("fork")
    start = ctx.Event()
    pipes, children = [], []
    for i in range(nprocs):
        conns = cell["conns"] // nprocs + (1 if i < cell["conns"] % nprocs else 0)
        recv, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, args=(port, cell, conns, jobs * conns // cell["conns"],
                                                 i, start, send))
        child.start()
        pipes.append(recv)
        children.append(child)
    time.sleep(0.3)                     # every connection open
    cpu0 = server_cpu(proc.pid)
    start.set()
    results = [p.recv() for p in pipes]
    cpu1 = server_cpu(proc.pid)
    for child in children:
        child.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"cell {cell}: {errors[0]}")
    done = sum(r["jobs"] for r in results)
    span = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    return {"jobs": done, "seconds": span, "jobs_per_s": done / span,
            "server_cpu_us_per_job": (cpu1 - cpu0) / done * 1e6,
            "gen_cpu_us_per_job": sum(r["cpu"] for r in results) / done * 1e6}


def cells(args: argparse.Namespace) -> list[dict]:
    out = []
    for w in args.workloads:
        shapes = [s for s in args.shapes if w == "pushb" or w == "push" and s in PUSH_SHAPES] \
            if w in ("push", "pushb") else [None]
        out += [{"workload": w, "shape": s, "conns": c, "inflight": f}
                for s in shapes for c in CONNS for f in INFLIGHT]
    return out


def cell_key(cell: dict) -> str:
    shape = f"[{cell['shape']}]" if cell["shape"] else ""
    return f"{cell['workload']}{shape}/{cell['conns']}c/{cell['inflight']}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000, help="timed jobs per cell")
    ap.add_argument("--runs", type=int, default=1, help="runs per cell (the median is kept)")
    ap.add_argument("--gen-procs", type=int, default=2, help="load generator processes (max)")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--storage", default=",".join(STORAGE))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help="entry shapes of the push and pushb workloads (push: "
                         f"{', '.join(PUSH_SHAPES)}; the JS client's PUSH is queuewire's)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()
    args.workloads = [w for w in args.workloads.split(",") if w]
    servers = [s for s in args.servers.split(",") if s]
    storages = [s for s in args.storage.split(",") if s]
    args.shapes = [s for s in args.shapes.split(",") if s]
    for name, got, known in (("workload", args.workloads, WORKLOADS), ("server", servers, SERVERS),
                             ("storage", storages, STORAGE), ("shape", args.shapes, SHAPES)):
        for g in got:
            if g not in known:
                ap.error(f"unknown {name} {g!r} (known: {', '.join(known)})")
    if "bq" in servers and not (BUN.exists() and BUNQUEUE_CLI.exists()):
        ap.error(f"bun/bunqueue not installed under {INTEROP / 'node_modules'} (make setup)")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="server-bench-") as tmp:
        for storage in storages:
            for server in servers:
                data = os.path.join(tmp, f"{server}-{storage}.db") if storage == "sqlite" else None
                with open(os.path.join(tmp, f"{server}-{storage}.log"), "wb") as log:
                    starter = start_reference if server == "ref" else start_bunqueue
                    proc, port = starter(data, log)
                    try:
                        warm = {"workload": "push", "shape": "queuewire", "conns": 1,
                                "inflight": 100, "queue": "warm"}
                        run_cell(proc, port, warm, 2000, 1)
                        for n, cell in enumerate(cells(args)):
                            runs = []
                            for r in range(args.runs):
                                named = {**cell, "queue": f"b-{cell['workload']}-{n}-{r}"}
                                runs.append(run_cell(proc, port, named, args.jobs,
                                                     args.gen_procs))
                            key = cell_key(cell)
                            med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
                            results.setdefault(storage, {}).setdefault(key, {})[server] = med
                            print(f"{storage:>6} {server:>3} {key:>16}: {med['jobs_per_s']:>9,.0f} "
                                  f"jobs/s, server {med['server_cpu_us_per_job']:6.1f} us/job, "
                                  f"generator {med['gen_cpu_us_per_job']:6.1f} us/job", flush=True)
                    finally:
                        stop(proc)
    print()
    print("| storage | cell | ref jobs/s | bq jobs/s | ref/bq | ref CPU us/job | bq CPU us/job "
          "| bq/ref CPU | goal | generator CPU us/job ref / bq |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    wins = total = 0
    for storage, by_cell in results.items():
        for key, per in by_cell.items():
            if "ref" not in per or "bq" not in per:
                continue
            ref, bq = per["ref"], per["bq"]
            speed = ref["jobs_per_s"] / bq["jobs_per_s"]
            cpu = bq["server_cpu_us_per_job"] / max(ref["server_cpu_us_per_job"], 1e-9)
            ok = speed >= 1.0 and cpu >= 1.0
            wins += ok
            total += 1
            per["ratio"] = {"jobs_per_s": speed, "cpu_bq_over_ref": cpu, "goal_met": ok}
            print(f"| {storage} | {key} | {ref['jobs_per_s']:,.0f} | {bq['jobs_per_s']:,.0f} | "
                  f"{speed:.2f}x | {ref['server_cpu_us_per_job']:.1f} | "
                  f"{bq['server_cpu_us_per_job']:.1f} | {cpu:.2f}x | {'met' if ok else 'MISSED'} | "
                  f"{ref['gen_cpu_us_per_job']:.0f} / {bq['gen_cpu_us_per_job']:.0f} |")
    if total:
        print(f"\ngoal (ref >= 1.0x bq jobs/s and at most its CPU per job) met in {wins} of "
              f"{total} cells")
    if args.json:
        doc = {"jobs": args.jobs, "runs": args.runs, "gen_procs": args.gen_procs,
               "python": sys.version.split()[0], "machine": platform.machine(),
               "cpus": os.cpu_count(), "results": results}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
