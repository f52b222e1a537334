"""Trace pipeline throughput: the Spark job (local[1], local[2]) beside the plain decoder.

A capture of ``--frames`` frames (5,000,000) is generated once: the reference bunqueue
server (embedded, in this process) answers a sample of real exchanges (Hello, PUSH, PULL
with a job, ACK, GetJobCounts, Ping), and ``--conns`` connections (16) replay that sample
round-robin with fresh reqIds, each request followed by its reply, written through the
tap's recorder (``traffic.record.Recorder``: the trace format of spec/trace.yaml, files
rotated at 64 MiB). Then, in one run, on the same files:

- ``plain``: :class:`queuewire.trace.decode.FileDecoder` over every file in this process
  (the decoder both engines run; rows built, as the Spark job builds them);
- ``spark local[N]``: a fresh session per master (start-up timed apart), then the decode
  job alone (``trace.spark.decode_frame``: ``binaryFile`` + ``mapInArrow`` with the same
  decoder, as ``trace analyze`` runs it; rows counted per table);
- with ``--full``, the whole ``queuewire trace analyze`` of each engine (Parquet writes,
  loose-end join, aggregates) as well.

Frames/s = frames / seconds of the decode. Goals (issue 14): local[2] at least 1.6x local[1];
Spark per core (local[1]) at least 0.7x the plain decoder. Each measurement is the median
of ``--runs`` (3) runs.

    .venv/bin/python benchmarks/trace_bench.py [--frames 5000000] [--conns 16] [--runs 3]
        [--dir DIR] [--full] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from queuewire.codecs.bunqueue import FrameEncoder
from queuewire.reference_server.bunqueue.embedded import EmbeddedServer
from queuewire.trace.decode import FileDecoder
from queuewire.traffic.record import Recorder

PROFILE = "bunqueue/v2"
GOALS = {"scaling_local2_over_local1": 1.6, "spark_per_core_over_plain": 0.7}


async def _sample() -> list[tuple[dict, dict]]:
    """Real (request, reply) pairs from the reference server, reqIds left for the caller."""
    server = await EmbeddedServer(PROFILE).start()
    try:
        conn = server.open()
        out = []

        async def ask(req: dict) -> dict:
            reply = await server.request(conn, {**req, "reqId": "0"})
            out.append((req, reply))
            return reply
        await ask({"cmd": "Hello", "protocolVersion": 2, "capabilities": ["pipelining"]})
        for i in range(4):
            await ask({"cmd": "PUSH", "queue": "bench", "data": {"to": f"user{i}@example.com",
                                                               "n": i}})
        pulled = await ask({"cmd": "PULL", "queue": "bench", "timeout": 0})
        job = pulled.get("job") or {}
        if job.get("id") is not None:
            ack = {"cmd": "ACK", "id": job["id"], "result": {"sent": True}}
            if pulled.get("token") is not None:
                ack["token"] = pulled["token"]
            await ask(ack)
        await ask({"cmd": "GetJobCounts", "queue": "bench"})
        await ask({"cmd": "Ping"})
        for req, reply in out:
            if reply.get("ok") is not True:
                raise SystemExit(f"the sample's {req['cmd']} was refused: {reply}")
        return out
    finally:
        await server.stop()


def generate(directory: Path, frames: int, conns: int) -> dict[str, Any]:
    """Write the capture; returns its size."""
    sample = asyncio.run(_sample())
    enc = FrameEncoder(PROFILE)
    rec = Recorder(directory, protocol="bunqueue", profile=PROFILE, run="bench")
    t = time.time_ns()
    pairs = frames // 2
    per_conn = [pairs // conns + (1 if c < pairs % conns else 0) for c in range(conns)]
    for c in range(conns):
        cid = c + 1
        rec.write("open", cid, "none", t, json.dumps(
            {"client": f"127.0.0.1:{40000 + cid}", "upstream": "127.0.0.1:6789",
             "listen": ""}).encode())
        for i in range(per_conn[c]):
            req, reply = sample[i % len(sample)]
            rid = f"{cid}-{i}"
            t += 1_000
            rec.write("frame", cid, "c2s", t, enc.encode({**req, "reqId": rid}))
            t += 20_000
            rec.write("frame", cid, "s2c", t, enc.encode({**reply, "reqId": rid}))
        rec.write("close", cid, "none", t, b'{"reason":"eof"}')
    rec.close()
    files = sorted(directory.glob("*.qwtrace"))
    return {"files": len(files), "bytes": sum(f.stat().st_size for f in files),
            "frames": sum(per_conn) * 2, "commands": [r["cmd"] for r, _ in sample]}


def plain(files: list[Path]) -> tuple[float, dict[str, int]]:
    dec = FileDecoder()
    counts: dict[str, int] = {}
    start = time.perf_counter()
    for f in files:
        for batch in dec.decode(f.read_bytes(), str(f)):
            for name in batch.column(0).to_pylist():
                counts[name] = counts.get(name, 0) + 1
    return time.perf_counter() - start, counts


def spark_decode(files: list[Path], master: str, runs: int) -> tuple[float, list[float],
                                                                     dict[str, int]]:
    from queuewire.trace import spark as qs
    start = time.perf_counter()
    s = qs.session(master)
    s.range(1).count()
    startup = time.perf_counter() - start
    times, counts = [], {}
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            out = qs.decode_frame(s, files)
            counts = {r["table"]: r["count"] for r in out.groupBy("table").count().collect()}
            times.append(time.perf_counter() - t0)
    finally:
        s.stop()
    return startup, times, counts


def full(files_dir: Path, engine: str, master: str | None) -> float:
    from queuewire.trace.analyze import analyze
    out = Path(tempfile.mkdtemp(prefix="qw-trace-bench-out-"))
    shutil.rmtree(out)
    try:
        t0 = time.perf_counter()
        analyze([files_dir], out, engine=engine, master=master, html=False)
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=5_000_000)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, help="keep the capture here (reused if present)")
    ap.add_argument("--full", action="store_true", help="also time the whole analyze per engine")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="qw-trace-bench-"))
    try:
        if not any(directory.glob("*.qwtrace")) if directory.exists() else True:
            directory.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            info = generate(directory, args.frames, args.conns)
            print(f"generated {info['frames']:,} frames in {info['files']} files "
                  f"({info['bytes'] / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s "
                  f"(sample: {', '.join(info['commands'])})", flush=True)
        files = sorted(directory.glob("*.qwtrace"))
        frames = None
        plain_times = []
        for _ in range(args.runs):
            dt, counts = plain(files)
            plain_times.append(dt)
            frames = counts.get("frames", 0)
        p = statistics.median(plain_times)
        print(f"plain decoder: {frames:,} frames in {p:.2f} s = {frames / p:,.0f} frames/s",
              flush=True)
        result: dict[str, Any] = {"frames": frames, "files": len(files),
                                  "bytes": sum(f.stat().st_size for f in files),
                                  "plain": {"seconds": p, "frames_per_s": frames / p,
                                            "runs": plain_times},
                                  "machine": {"cpus": os.cpu_count(),
                                              "python": platform.python_version()}}
        for master in ("local[1]", "local[2]"):
            startup, times, counts = spark_decode(files, master, args.runs)
            if counts.get("frames") != frames:
                raise SystemExit(f"{master} counted {counts.get('frames')} frames, the plain "
                                 f"decoder {frames}")
            m = statistics.median(times)
            result[master] = {"startup_s": startup, "seconds": m, "frames_per_s": frames / m,
                              "runs": times}
            print(f"spark {master}: start-up {startup:.1f} s; {frames / m:,.0f} frames/s "
                  f"({m:.2f} s)", flush=True)
        one, two = result["local[1]"]["frames_per_s"], result["local[2]"]["frames_per_s"]
        ratios = {"scaling_local2_over_local1": two / one,
                  "spark_per_core_over_plain": one / result["plain"]["frames_per_s"],
                  "spark_local2_per_core_over_plain": two / 2 / result["plain"]["frames_per_s"]}
        result["ratios"] = ratios
        for k, v in ratios.items():
            goal = GOALS.get(k)
            verdict = "" if goal is None else \
                f" (goal >= {goal:.1f}: {'met' if v >= goal else 'MISSED'})"
            print(f"{k}: {v:.2f}{verdict}")
        if args.full:
            result["full"] = {"local": full(directory, "local", None),
                              "spark local[2]": full(directory, "spark", "local[2]")}
            for k, v in result["full"].items():
                print(f"full analyze, {k}: {v:.1f} s = {frames / v:,.0f} frames/s")
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
