"""Recordings for the trace tests: a real workload through the tap (reference server, reference
clients, 127.0.0.1), or given byte chunks fed to the tap's analyzer and recorder (sans-IO),
each returning the tap's own summary of what it recorded, to compare the analysis with."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

from queuewire.client import Queue, Worker
from queuewire.client.quicx import QuicxProducer, QuicxWorker
from queuewire.reference_server.bunqueue import BunqueueServer
from queuewire.reference_server.quicx import QuicxServer
from queuewire.tap.proxy import TapServer
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.record import Recorder


async def _until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


async def _tapped(protocol: str, profile: str, port: int, out: Path, rotate: int | None,
                  body) -> dict:
    recorder = Recorder(out, protocol=protocol, profile=profile, rotate_bytes=rotate)
    analyzer = Analyzer(protocol, profile, sink=recorder.write)
    tap = await TapServer(analyzer, "127.0.0.1", port).start()
    try:
        await body(tap.port)
    finally:
        await tap.stop()
        recorder.close()
    return analyzer.summary()


async def bunqueue_workload(out: Path, *, profile: str = "bunqueue/v2",
                            rotate: int | None = None, jobs: int = 30) -> dict:
    """Producers and a worker of the reference client against the reference server, through
    the tap, recorded into ``out``; returns the tap's summary."""
    server = await BunqueueServer(profile, port=0).start()

    async def body(port: int) -> None:
        conn = {"port": port}
        done: list[str] = []
        async with Queue("trace-q", connection=conn, profile=profile) as queue:
            await queue.add("one", {"to": "a@b.c"}, priority=3)
            await queue.add_bulk([{"name": "bulk", "data": {"i": i}} for i in range(jobs - 2)])
            await queue.add("boom", {"fail": True}, attempts=1)

            async def process(job: Any) -> Any:
                if job.data.get("fail"):
                    done.append(job.id)
                    raise RuntimeError("fails on purpose")
                done.append(job.id)
                return {"ok": job.data}
            async with Worker("trace-q", process, connection=conn, profile=profile,
                              concurrency=4):
                await _until(lambda: len(done) == jobs)
            await queue.get_job_counts()
    try:
        return await _tapped("bunqueue", profile, server.port, out, rotate, body)
    finally:
        await server.stop()


async def quicx_workload(out: Path, *, profile: str = "quicx/v1", rotate: int | None = None,
                         tasks: int = 12) -> dict:
    """A quicx producer and worker through the tap to the reference daemon."""
    async with QuicxServer(profile, port=0) as server:
        async def body(port: int) -> None:
            seen: list[int] = []

            async def work(task: Any) -> None:
                seen.append(task.task_id)

            async with QuicxWorker(port=port, profile=profile, concurrency=2,
                                   heartbeat_interval=0.05, handlers={"work": work}):
                async with QuicxProducer(port=port, profile=profile) as producer:
                    await asyncio.gather(*(producer.submit("work", b"p" * i)
                                           for i in range(tasks)))
                await _until(lambda: server.stats().done == tasks, 10)
                await asyncio.sleep(0.12)   # idle heartbeats
        return await _tapped("quicx", profile, server.port, out, rotate, body)


def record_chunks(out: Path, protocol: str, profile: str,
                  conns: list[list[tuple[str, bytes]]], *, rotate: int | None = None,
                  close: bool = True) -> dict:
    """Feed each connection's (direction, bytes) chunks to the tap's analyzer with a recorder
    (no sockets); returns the tap's summary."""
    recorder = Recorder(out, protocol=protocol, profile=profile, rotate_bytes=rotate, run="t")
    analyzer = Analyzer(protocol, profile, sink=recorder.write)
    t = 1_700_000_000_000_000_000
    for cid, chunks in enumerate(conns, start=1):
        t += 1000
        analyzer.open(cid, t, client=f"127.0.0.1:{5000 + cid}", upstream="127.0.0.1:6789")
        for direction, data in chunks:
            t += 1000
            analyzer.feed(cid, direction, data, t)
        if close:
            t += 1000
            analyzer.close(cid, t, "eof")
    recorder.close()
    return analyzer.summary()


def _figures(totals: dict, commands: dict, requirements: list[dict], *, pairs: str,
             violations: str, cmd_pairs: str) -> dict:
    counts: Counter = Counter()
    for r in requirements:
        counts[(r["level"], r["requirement"], r["kind"])] += r["count"]
    return {
        "frames": totals["frames"], "bytes": totals["bytes"], "gaps": totals["gaps"],
        "requests": totals["requests"], "pairs": totals[pairs],
        "unanswered": totals["unanswered"], "violations": totals[violations],
        "commands": {k: (v["requests"], v[cmd_pairs], v["errors"])
                     for k, v in commands.items() if v["requests"] or v[cmd_pairs]},
        "requirements": dict(counts),
    }


def tap_figures(summary: dict) -> dict:
    """What both the tap and the trace analysis report, from the tap's summary."""
    return _figures(summary["totals"], summary["commands"], summary["requirements"],
                    pairs="paired", violations="findings", cmd_pairs="paired")


def trace_figures(summary: dict) -> dict:
    """The same figures from a ``trace analyze`` summary."""
    return _figures(summary["totals"], summary["commands"], summary["requirements"],
                    pairs="pairs", violations="violations", cmd_pairs="pairs")
