"""Flow control under hostile and heavy peers: memory per greedy peer, latency during a flood.

Measured on servers started by this script on 127.0.0.1 as processes (so that RSS is theirs
alone and the load generator shares no event loop with them):

* ``ref``: ``queuewire serve bunqueue`` (in memory); ``bq``: the real bunqueue 2.9.5 from
  ``tests/interop/node_modules`` under bun (skipped with a note when it is not installed);
* ``quicx-v1`` / ``quicx-1.0.3``: ``queuewire serve quicx`` with each profile.

Workloads (bunqueue targets):

* ``getjob-read``: one job of ``--job-kb`` (512) KiB, then ``--requests`` (3,000) GetJob of it
  pipelined in one write by a client that reads every reply. Figure: the growth of the
  server's peak RSS (``VmHWM`` in /proc) over the run, and the wall time.
* ``getjob-noread``: the same requests from a client that never reads; after ``--stall`` (3) s
  the growth of the server's RSS (``VmRSS``), and the latency of 10 Pings on a fresh
  connection meanwhile.

Workload for every target:

* ``flood``: ``--flooders`` (2) connections write pipelined requests with a costly reply as
  fast as they can (bunqueue ``Stats``, quicx ``MSG_STATS``, or ``MSG_HEARTBEAT`` under
  quicx/1.0.3, which serves stats on a Unix socket only; 3,000 per write) and read what
  comes back; meanwhile a fresh connection sends ``--probes`` (50) Pings (quicx
  MSG_HEARTBEAT), one at a time; figure: their latency (median, p99, max).

The issue's bounds: RSS growth under 100 MB for getjob-read, another connection answered
within 100 ms during a flood. The real bunqueue is measured with the same client, as a
reference point a fair outsider would want beside ours.

    .venv/bin/python benchmarks/flow_bench.py            # all targets, ~1 minute
    .venv/bin/python benchmarks/flow_bench.py --targets ref,quicx-v1 --json /tmp/flow.json
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import msgpack  # noqa: E402
from server_bench import BUN, BUNQUEUE_CLI, HOST, QUEUEWIRE, start_bunqueue, stop  # noqa: E402

from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder  # noqa: E402
from queuewire.spec import load_profile  # noqa: E402

TARGETS = ("ref", "bq", "quicx-v1", "quicx-1.0.3")
MiB = 1024 * 1024


# -- servers ------------------------------------------------------------------------------------
def start_queuewire(*args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([str(QUEUEWIRE), "serve", *args, "--host", HOST, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        stop(proc)
        raise RuntimeError(f"queuewire serve {' '.join(args)} did not start: {line!r}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, int(line.split(f"listening on {HOST}:", 1)[1].split(";")[0].split()[0])


def proc_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), MiB))
        if not chunk:
            raise EOFError("the server closed the connection")
        buf += chunk
    return bytes(buf)


# -- bunqueue -----------------------------------------------------------------------------------
def bq_frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


def bq_recv(sock: socket.socket) -> Any:
    head = recv_exactly(sock, 4)
    return msgpack.unpackb(recv_exactly(sock, struct.unpack(">I", head)[0]))


def bq_ping(port: int) -> float:
    with connect(port) as sock:
        start = time.perf_counter()
        sock.sendall(bq_frame({"cmd": "Ping", "reqId": "probe"}))
        reply = bq_recv(sock)
        elapsed = time.perf_counter() - start
    if reply.get("ok") is not True:
        raise RuntimeError(f"Ping answered {reply!r}")
    return elapsed


def bq_push_big(port: int, kib: int) -> str:
    with connect(port) as sock:
        sock.sendall(bq_frame({"cmd": "PUSH", "queue": "big", "data": {"blob": "x" * kib * 1024}}))
        reply = bq_recv(sock)
    if reply.get("ok") is not True:
        raise RuntimeError(f"PUSH answered {reply!r}")
    return reply["id"]


def getjob_read(pid: int, port: int, args: argparse.Namespace) -> dict:
    job_id = bq_push_big(port, args.job_kb)
    requests = b"".join(bq_frame({"cmd": "GetJob", "id": job_id, "reqId": str(i)})
                        for i in range(args.requests))
    before = proc_bytes(pid, "VmHWM")
    start = time.perf_counter()
    answered = 0
    with connect(port) as sock:
        def send() -> None:
            try:
                sock.sendall(requests)
            except OSError:
                pass  # the server closed the connection: counted below

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            for i in range(args.requests):
                reply = bq_recv(sock)
                if reply.get("ok") is not True or reply.get("reqId") != str(i):
                    raise RuntimeError(f"GetJob {i} answered {str(reply)[:200]}")
                answered += 1
        except (ConnectionError, EOFError):
            pass  # the real bunqueue closes a connection whose write queue is over 64 MiB
        sender.join()
    return {"peak_rss_growth_mb": (proc_bytes(pid, "VmHWM") - before) / MiB,
            "seconds": time.perf_counter() - start, "replies": answered,
            "closed_by_server": float(answered < args.requests)}


def getjob_noread(pid: int, port: int, args: argparse.Namespace) -> dict:
    job_id = bq_push_big(port, args.job_kb)
    requests = memoryview(b"".join(bq_frame({"cmd": "GetJob", "id": job_id, "reqId": str(i)})
                                   for i in range(args.requests)))
    before = proc_bytes(pid, "VmRSS")
    greedy = connect(port)
    greedy.setblocking(False)
    sent = 0
    deadline = time.monotonic() + args.stall
    while time.monotonic() < deadline:
        try:
            sent += greedy.send(requests[sent:]) if sent < len(requests) else 0
        except BlockingIOError:
            pass
        time.sleep(0.01)
    pings = [bq_ping(port) for _ in range(10)]
    grown = (proc_bytes(pid, "VmRSS") - before) / MiB
    greedy.close()
    return {"rss_growth_mb": grown, "requests_sent_kb": sent / 1024,
            "ping_max_ms": max(pings) * 1000}


# -- quicx --------------------------------------------------------------------------------------
class QuicxProbe:
    def __init__(self, profile: str):
        self.encoder = QuicxEncoder(profile)
        self.profile = profile

    def heartbeat(self, port: int) -> float:
        decoder = QuicxDecoder(self.profile, role=None)  # any receiver
        with connect(port) as sock:
            start = time.perf_counter()
            sock.sendall(self.encoder.encode("MSG_HEARTBEAT"))
            while True:
                msgs = decoder.feed(sock.recv(65536))
                if msgs:
                    break
            elapsed = time.perf_counter() - start
        if msgs[0].name != "MSG_PONG":
            raise RuntimeError(f"MSG_HEARTBEAT answered {msgs[0].name}")
        return elapsed


# -- flood (both protocols) ---------------------------------------------------------------------
def flood(port: int, request: bytes, probe: Any, args: argparse.Namespace) -> dict:
    stop_flood = threading.Event()
    chunk = request * 3000

    def flooder() -> None:
        with connect(port) as sock:
            sock.settimeout(0.05)
            while not stop_flood.is_set():
                try:
                    sock.sendall(chunk)
                except (TimeoutError, BlockingIOError):
                    pass
                try:
                    while sock.recv(MiB):
                        pass
                except (TimeoutError, BlockingIOError):
                    pass

    threads = [threading.Thread(target=flooder, daemon=True) for _ in range(args.flooders)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        latencies = []
        for _ in range(args.probes):
            latencies.append(probe(port))
            time.sleep(0.02)
    finally:
        stop_flood.set()
        for t in threads:
            t.join(5)
    latencies.sort()
    return {"median_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
            "max_ms": latencies[-1] * 1000}


# -- driver -------------------------------------------------------------------------------------
def run_target(target: str, args: argparse.Namespace, log: Any) -> dict | None:
    if target == "bq":
        if not (BUN.exists() and BUNQUEUE_CLI.exists()):
            print("bq: the real bunqueue is not installed (make setup); skipped")
            return None
        proc, port = start_bunqueue(None, log)
    elif target == "ref":
        proc, port = start_queuewire("bunqueue")
    else:
        proc, port = start_queuewire("quicx", "--profile", target.replace("quicx-", "quicx/"))
    try:
        if target in ("ref", "bq"):
            return {"getjob-read": getjob_read(proc.pid, port, args),
                    "getjob-noread": getjob_noread(proc.pid, port, args),
                    "flood": flood(port, bq_frame({"cmd": "Stats"}), bq_ping, args)}
        profile = target.replace("quicx-", "quicx/")
        probe = QuicxProbe(profile)
        # quicx/1.0.3 serves MSG_STATS on a Unix socket only: there the flood is heartbeats
        name = "MSG_STATS" if load_profile(profile).model.flag("stats_on_tcp") else "MSG_HEARTBEAT"
        return {"flood": flood(port, probe.encoder.encode(name), probe.heartbeat, args)}
    finally:
        stop(proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: " + ", ".join(TARGETS))
    ap.add_argument("--job-kb", type=int, default=512, help="size of the job GetJob reads (KiB)")
    ap.add_argument("--requests", type=int, default=3000, help="GetJob requests in the pipeline")
    ap.add_argument("--stall", type=float, default=3.0, help="seconds the non-reading peer is held")
    ap.add_argument("--flooders", type=int, default=2, help="flooding connections")
    ap.add_argument("--probes", type=int, default=50, help="latency probes during a flood")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets: {', '.join(sorted(unknown))}")
    results: dict[str, Any] = {"machine": f"{platform.machine()}, {platform.python_version()}",
                               "targets": {}}
    with tempfile.TemporaryFile() as log:
        for target in targets:
            print(f"{target}: running", flush=True)
            result = run_target(target, args, log)
            if result is not None:
                results["targets"][target] = result
                for workload, figures in result.items():
                    shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
                    print(f"  {workload:14} {shown}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
