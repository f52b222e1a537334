"""Server throughput: the bunqueue reference server against the real bunqueue (npm, under bun).

One asyncio load generator (our ``FrameEncoder``/``FrameDecoder``) drives each target with:

* ``push-1c``  pipelined PUSH, ``--window`` (100) requests in flight on 1 connection;
* ``push-4c``  the same on 4 connections (``--jobs`` split between them);
* ``pushb``    PUSHB of ``--batch`` (100) jobs per command, ``--batch-window`` (10) in flight.

Targets, started by this script on 127.0.0.1 and stopped at the end:

* ``ref-mem`` / ``ref-sqlite``: ``queuewire serve bunqueue --port 0`` (with ``--data-path``);
* ``bq-mem`` / ``bq-sqlite``: ``bunqueue start`` from ``tests/interop/node_modules`` under bun
  (with ``--data-path``), with ``RATE_LIMIT_MAX_REQUESTS`` raised so the per-connection limit
  (10,000 requests per 60 s by default) does not interfere.

Each workload first runs ``--warmup`` jobs, then ``--jobs`` timed jobs; the rate is jobs/s
(wall clock, first send to last reply). The three workloads are run ``--runs`` (3) times per
target and the best rate of each is kept. Every reply is checked (``ok``, and 100 ids per PUSHB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import select
import socket
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

WORKLOADS = ("push-1c", "push-4c", "pushb")
TARGETS = ("ref-mem", "ref-sqlite", "bq-mem", "bq-sqlite")


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


async def drive(port: int, requests: list[dict], per_request_jobs: int, window: int) -> None:
    """Send ``requests`` on one connection with ``window`` in flight; check every reply."""
    enc, dec = FrameEncoder(), FrameDecoder()
    frames = [enc.encode(r) for r in requests]
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        sent = min(window, len(frames))
        writer.write(b"".join(frames[:sent]))
        done = 0
        while done < len(frames):
            data = await reader.read(65536)
            if not data:
                raise RuntimeError("server closed the connection")
            replies = dec.feed(data)
            for reply in replies:
                if not reply.get("ok"):
                    raise RuntimeError(f"error reply: {reply!r}")
                if per_request_jobs > 1 and len(reply.get("ids", ())) != per_request_jobs:
                    raise RuntimeError(f"PUSHB returned {len(reply.get('ids', ()))} ids")
            done += len(replies)
            if replies and sent < len(frames):
                nxt = min(len(frames), sent + len(replies))
                writer.write(b"".join(frames[sent:nxt]))
                sent = nxt
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


def build(workload: str, jobs: int, tag: str, args: argparse.Namespace) -> list[list[dict]]:
    """Per-connection request lists for ``jobs`` jobs."""
    queue = f"bench-{workload}-{tag}"
    if workload == "pushb":
        cmds = max(1, jobs // args.batch)
        return [[{"cmd": "PUSHB", "queue": queue, "reqId": str(c + 1),
                  "jobs": [{"name": "email", "data": job_data(c * args.batch + k)}
                           for k in range(args.batch)]} for c in range(cmds)]]
    conns = 4 if workload == "push-4c" else 1
    per = jobs // conns
    return [[{"cmd": "PUSH", "queue": queue, "name": "email",
              "data": job_data(c * per + i), "reqId": str(i + 1)} for i in range(per)]
            for c in range(conns)]


async def run_workload(port: int, workload: str, args: argparse.Namespace) -> float:
    batch = args.batch if workload == "pushb" else 1
    window = args.batch_window if workload == "pushb" else args.window
    warm = build(workload, args.warmup, "warm", args)
    await asyncio.gather(*(drive(port, reqs, batch, window) for reqs in warm))
    timed = build(workload, args.jobs, "timed", args)
    total = sum(len(reqs) for reqs in timed) * batch
    t0 = time.perf_counter()
    await asyncio.gather(*(drive(port, reqs, batch, window) for reqs in timed))
    return total / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000, help="timed jobs per workload")
    ap.add_argument("--warmup", type=int, default=2_000, help="warm-up jobs per workload")
    ap.add_argument("--window", type=int, default=100, help="PUSHes in flight per connection")
    ap.add_argument("--batch", type=int, default=100, help="jobs per PUSHB")
    ap.add_argument("--batch-window", type=int, default=10, help="PUSHBs in flight")
    ap.add_argument("--runs", type=int, default=3,
                    help="rounds of the three workloads per target; the best rate is kept")
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help=f"comma-separated subset of {','.join(TARGETS)}")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        if t not in TARGETS:
            ap.error(f"unknown target {t}")
    if any(t.startswith("bq-") for t in targets) and not (BUN.exists() and BUNQUEUE_CLI.exists()):
        ap.error(f"bun/bunqueue not installed under {INTEROP / 'node_modules'}")

    results: dict[str, dict[str, float]] = {w: {} for w in WORKLOADS}
    with tempfile.TemporaryDirectory(prefix="server-bench-") as tmp:
        for target in targets:
            data_path = os.path.join(tmp, f"{target}.db") if target.endswith("sqlite") else None
            with open(os.path.join(tmp, f"{target}.log"), "wb") as log:
                starter = start_reference if target.startswith("ref-") else start_bunqueue
                proc, port = starter(data_path, log)
                try:
                    for run in range(args.runs):
                        for workload in WORKLOADS:
                            rate = asyncio.run(run_workload(port, workload, args))
                            best = max(rate, results[workload].get(target, 0.0))
                            results[workload][target] = best
                            print(f"{target:>10} {workload:>8} run {run + 1}: {rate:10,.0f} jobs/s",
                                  flush=True)
                finally:
                    stop(proc)

    ratios: dict[str, dict[str, float]] = {}
    for w in WORKLOADS:
        r = results[w]
        for kind in ("mem", "sqlite"):
            if f"ref-{kind}" in r and f"bq-{kind}" in r:
                ratios.setdefault(w, {})[kind] = r[f"ref-{kind}"] / r[f"bq-{kind}"]

    print()
    header = f"| workload | {' | '.join(targets)} | ref/bq mem | ref/bq sqlite |"
    print(header)
    print("|---" * (len(targets) + 3) + "|")
    for w in WORKLOADS:
        cells = [f"{results[w][t]:,.0f}" for t in targets]
        rs = [f"{ratios.get(w, {})[k]:.2f}x" if k in ratios.get(w, {}) else "-"
              for k in ("mem", "sqlite")]
        print(f"| {w} | {' | '.join(cells)} | {' | '.join(rs)} |")

    if args.json:
        doc = {"jobs": args.jobs, "runs": args.runs, "warmup": args.warmup, "window": args.window,
               "batch": args.batch, "batch_window": args.batch_window,
               "python": sys.version.split()[0], "machine": platform.machine(),
               "cpus": os.cpu_count(), "jobs_per_s": results, "ratio_ref_over_bq": ratios}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
