"""Tap overhead: pipelined requests through ``queuewire tap`` against the same server directly.

Three processes on 127.0.0.1: the reference server (``queuewire serve bunqueue --port 0``),
the tap in front of it (``queuewire tap --protocol bunqueue --upstream ...``, optionally with
``--record``), and this script, the load generator. The generator (an ``asyncio.Protocol``
with the codec's encoder and decoder) sends ``--requests`` (10,000) requests with reqIds in
bursts of ``--burst`` (100) frames written at once, the next burst when the last one's
replies are in, and times each request from the write of its burst to the read of its reply
(``perf_counter_ns``). Each workload alternates direct and tapped runs ``--runs`` times
(after a warm-up of each; the order of the targets rotates from one run to the next), so
drift affects both alike, and before each run it waits until
no process of the benchmark uses CPU (the tap finishing the analysis it deferred, see
``--analysis-lag``), so no run pays for the previous one; per target it reports the median of
the runs' p50 and p99 latencies and of their throughputs, then the added p50 and p99 (tap -
direct) and the throughput ratio (tap / direct), against the issue's goals: p50 added under
200 us, p99 added under 1 ms, throughput at least 0.5x direct. Workloads: ``ping`` (Ping,
the cheapest command: the tap's share is largest) and ``push`` (PUSH of a small job).
Every reply is checked (ok and its reqId).

    .venv/bin/python benchmarks/tap_bench.py [--requests 10000] [--burst 100] [--runs 5]
        [--record] [--bare] [--bare-loop] [--forwarder threads|epoll|loop] [--json FILE]

``--bare`` adds a third target: the tap's proxy with a no-op analyzer (its forwarding
process, and the analyzing process reading the forwarder's channel and dropping it), to show
what forwarding alone costs and what the analysis adds on top; ``--bare-loop`` adds the
in-loop forwarder with a no-op analyzer (the tap's forwarding before it had a process of its
own); ``--forwarder`` runs the tap (and ``--bare``) with that forwarder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder

HOST = "127.0.0.1"
LISTENING = re.compile(rb"listening on 127\.0\.0\.1:(\d+)")
GOALS = {"p50_added_us": 200.0, "p99_added_us": 1000.0, "throughput_ratio": 0.5}


class _NullAnalyzer:
    """For ``--bare``: the tap's proxy with nothing analysed (what forwarding alone costs)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def serve_bare(upstream_port: int, forwarder: str) -> None:
    """The tap's proxy (``tap_server``, with ``forwarder``) in front of ``upstream_port``
    with no analysis: the forwarder, and the analyzing process reading its channel."""
    import signal

    from queuewire.tap.proxy import tap_server

    async def run() -> None:
        tap = await tap_server(_NullAnalyzer(), HOST, upstream_port,  # type: ignore[arg-type]
                               forwarder=forwarder).start()
        print(f"bare proxy listening on {HOST}:{tap.port}", flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
    asyncio.run(run())


def start(args: list[str]) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, __file__, *args] if args[0].startswith("--serve-bare") else \
        [sys.executable, "-m", "queuewire.cli", *args]
    proc = subprocess.Popen(cmd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    assert proc.stdout is not None
    buf = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = LISTENING.search(buf)
            if m:
                return proc, int(m.group(1))
    proc.kill()
    raise RuntimeError(f"{args[:2]} did not start: {buf!r}")


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(2)  # SIGINT: the tap prints its summary
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.decode("utf-8", "replace") if out else ""


class _Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.decoder = FrameDecoder("bunqueue/v2", check_depth=False)
        self.waiting: dict[str, int] = {}
        self.latencies: list[int] = []
        self.burst_done: asyncio.Future | None = None
        self.bad = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        for msg in self.decoder.feed(data):
            sent = self.waiting.pop(msg.get("reqId"), None)
            if sent is None or msg.get("ok") is not True:
                self.bad += 1
                continue
            self.latencies.append(now - sent)
        if not self.waiting and self.burst_done is not None and not self.burst_done.done():
            self.burst_done.set_result(None)


def _request(workload: str, req_id: str) -> dict:
    if workload == "ping":
        return {"cmd": "Ping", "reqId": req_id}
    return {"cmd": "PUSH", "queue": "tap-bench", "data": {"n": req_id}, "reqId": req_id}


async def run_once(port: int, workload: str, n: int, burst: int, tag: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    enc = FrameEncoder("bunqueue/v2")
    frames = [(f"{tag}{i}", enc.encode(_request(workload, f"{tag}{i}"))) for i in range(n)]
    transport, client = await loop.create_connection(_Client, HOST, port)
    t0 = time.perf_counter()
    for start_at in range(0, n, burst):
        chunk = frames[start_at:start_at + burst]
        client.burst_done = loop.create_future()
        now = time.perf_counter_ns()
        for req_id, _ in chunk:
            client.waiting[req_id] = now
        transport.write(b"".join(f for _, f in chunk))
        await asyncio.wait_for(client.burst_done, 30)
    elapsed = time.perf_counter() - t0
    transport.close()
    lat = sorted(client.latencies)
    if client.bad or len(lat) != n:
        raise RuntimeError(f"{client.bad} bad replies, {len(lat)} of {n} answered")
    return {"p50_us": lat[n // 2] / 1000, "p99_us": lat[int(n * 0.99)] / 1000,
            "max_us": lat[-1] / 1000, "rps": n / elapsed}


def _cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` and of its children (the tap's forwarding process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12]) + sum(_cpu_ticks(int(c)) for c in children)


def wait_idle(procs: list[subprocess.Popen], timeout: float = 10.0) -> None:
    """Wait until none of ``procs`` uses CPU for 100 ms: the tap finishes analysing what it
    deferred (and the server its timers) before the next measurement starts, so no target
    is measured while another still works off the last run."""
    deadline = time.monotonic() + timeout
    last = [_cpu_ticks(p.pid) for p in procs]
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = [_cpu_ticks(p.pid) for p in procs]
        if now == last:
            return
        last = now


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "python": platform.python_version(), "loadavg": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workloads", default="ping,push")
    ap.add_argument("--record", action="store_true", help="run the tap with --record (a temp dir)")
    ap.add_argument("--analysis-lag", type=int, metavar="BYTES",
                    help="the tap's --analysis-lag (default: the tap's own default, 4 MiB)")
    ap.add_argument("--bare", action="store_true",
                    help="also measure the tap's proxy with no analysis (forwarding alone)")
    ap.add_argument("--forwarder", choices=["threads", "epoll", "loop"], default="threads",
                    help="the tap's --forwarder (and the bare proxy's)")
    ap.add_argument("--bare-loop", action="store_true",
                    help="also measure the in-loop forwarder with no analysis (the tap's "
                         "forwarding before it had a process of its own)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--serve-bare-loop", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bare or args.serve_bare_loop:
        serve_bare(args.serve_bare or args.serve_bare_loop,
                   "loop" if args.serve_bare_loop else args.forwarder)
        return 0

    server, server_port = start(["serve", "bunqueue", "--host", HOST, "--port", "0"])
    tmp = tempfile.TemporaryDirectory()
    tap_args = ["tap", "--protocol", "bunqueue", "--listen", f"{HOST}:0",
                "--upstream", f"{HOST}:{server_port}", "--json", str(Path(tmp.name) / "tap.json")]
    if args.record:
        tap_args += ["--record", str(Path(tmp.name) / "rec")]
    if args.analysis_lag is not None:
        tap_args += ["--analysis-lag", str(args.analysis_lag)]
    tap_args += ["--forwarder", args.forwarder]
    tap, tap_port = start(tap_args)
    targets = [("direct", server_port), ("tap", tap_port)]
    bares: dict[str, subprocess.Popen] = {}
    if args.bare:
        bares["bare"], bare_port = start(["--serve-bare", str(server_port),
                                          "--forwarder", args.forwarder])
        targets.append(("bare", bare_port))
    if args.bare_loop:
        bares["bare-loop"], bare_port = start(["--serve-bare-loop", str(server_port)])
        targets.append(("bare-loop", bare_port))
    results: dict[str, Any] = {}
    try:
        for workload in args.workloads.split(","):
            runs: dict[str, list[dict]] = {t: [] for t, _ in targets}
            for _target, port in targets:  # warm-up
                asyncio.run(run_once(port, workload, min(args.requests, 2000), args.burst, "w"))
            procs = [server, tap, *bares.values()]
            for r in range(args.runs):
                # the order rotates, so that no target is always the first after idling
                for target, port in targets[r % len(targets):] + targets[:r % len(targets)]:
                    wait_idle(procs)
                    runs[target].append(asyncio.run(
                        run_once(port, workload, args.requests, args.burst, f"{target}{r}-")))
            med = {t: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for t, rs in runs.items()}
            added = {"p50_added_us": med["tap"]["p50_us"] - med["direct"]["p50_us"],
                     "p99_added_us": med["tap"]["p99_us"] - med["direct"]["p99_us"],
                     "throughput_ratio": med["tap"]["rps"] / med["direct"]["rps"]}
            met = {"p50_added_us": added["p50_added_us"] < GOALS["p50_added_us"],
                   "p99_added_us": added["p99_added_us"] < GOALS["p99_added_us"],
                   "throughput_ratio": added["throughput_ratio"] >= GOALS["throughput_ratio"]}
            results[workload] = {"median": med, "added": added, "goals_met": met, "runs": runs}
            print(f"{workload}: direct p50 {med['direct']['p50_us']:.0f} us p99 "
                  f"{med['direct']['p99_us']:.0f} us {med['direct']['rps']:,.0f} req/s | tap p50 "
                  f"{med['tap']['p50_us']:.0f} us p99 {med['tap']['p99_us']:.0f} us "
                  f"{med['tap']['rps']:,.0f} req/s | added p50 {added['p50_added_us']:.0f} us, "
                  f"p99 {added['p99_added_us']:.0f} us, throughput x{added['throughput_ratio']:.2f} "
                  f"| goals {'met' if all(met.values()) else 'MISSED: ' + str(met)}")
            for name in bares:
                what = ("bare proxy (no analysis)" if name == "bare" else
                        "bare in-loop proxy (no analysis)")
                print(f"{workload}: {what} p50 {med[name]['p50_us']:.0f} us "
                      f"p99 {med[name]['p99_us']:.0f} us {med[name]['rps']:,.0f} req/s | added "
                      f"p50 {med[name]['p50_us'] - med['direct']['p50_us']:.0f} us, p99 "
                      f"{med[name]['p99_us'] - med['direct']['p99_us']:.0f} us, throughput "
                      f"x{med[name]['rps'] / med['direct']['rps']:.2f}")
    finally:
        for proc in bares.values():
            stop(proc)
        tap_out = stop(tap)
        stop(server)
    tap_summary = json.loads((Path(tmp.name) / "tap.json").read_text())
    t = tap_summary["totals"]
    print(f"tap saw {t['requests']} requests, {t['paired']} paired, findings {t['findings']}")
    if t["findings"]["FAIL"] or t["paired"] != t["requests"]:
        print(tap_out)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
             "params": vars(args), "goals": GOALS, "results": results,
             "tap_totals": t}, indent=2) + "\n")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
