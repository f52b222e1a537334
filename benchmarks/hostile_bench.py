"""Hostile peers against the bunqueue reference server: does everyone else still get served?

Each scenario starts a fresh reference server as a process on 127.0.0.1 (with an auth token,
an HTTP port and webhooks to loopback allowed, so the tarpit can be local), lets one attacker
do the one thing issue 22 found, and meanwhile a probe connection (authenticated) sends a
Ping every 20 ms. Figures per scenario: the probe's Ping latency (median, p99, max), the
growth of the server's peak RSS (``VmHWM``) over its idle baseline, and what the server said
to the attacker. The issue's bounds: every Ping within 100 ms, growth under 150 MB.

* ``cron``: a Cron with a 1 MB six-field schedule, then 20 Crons with ``repeatEvery: 1``.
* ``polls``: one WebSocket sends 100,000 ``PULL timeout:60000`` (for at most 5 s: a server
  that stops reading it holds the rest in the attacker's socket); then 20 PUSHes to that
  queue, one every 100 ms, from another connection.
* ``preauth``: 16 connections that never authenticate each declare a 63 MiB frame and send
  its payload as fast as the server takes it.
* ``webhooks``: one legitimate hook on queue ``w`` (an endpoint on 127.0.0.2 that answers at
  once; the server bounds deliveries per host, and the tarpit is another host, 127.0.0.1),
  then 300 hooks on a tarpit (accepts, never answers), half on ``w`` and half on every queue;
  then 20 PUSHes to ``w``: figure also the legitimate hook's delivery delay (goal: all 20
  delivered, each within a second).

    .venv/bin/python benchmarks/hostile_bench.py                  # all four, about a minute
    .venv/bin/python benchmarks/hostile_bench.py --scenarios cron,polls --json /tmp/h.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import aiohttp  # noqa: E402
import msgpack  # noqa: E402
from aiohttp import web  # noqa: E402

from queuewire.codecs.bunqueue import FrameDecoder  # noqa: E402
from queuewire.spec import load_profile  # noqa: E402

HOST = "127.0.0.1"
LEGIT_HOST = "127.0.0.2"  # the legitimate webhook endpoint: another (loopback) host than the tarpit
TOKEN = "hostile-bench-token"
PROFILE = load_profile("bunqueue/v2")
SCENARIOS = ("cron", "polls", "preauth", "webhooks")
PING_BOUND_MS = 100.0
GROWTH_BOUND_MB = 150.0
MiB = 1024 * 1024
DELIVERY_BOUND_MS = 1000.0  # webhooks: every legitimate delivery within a second of its PUSH
OWN_GOAL = "scenario goal met"  # a note an attack sets when it has a goal of its own

LAUNCH = f"""
import asyncio, sys
from queuewire.reference_server.bunqueue import BunqueueServer, EngineConfig
async def main():
    server = BunqueueServer("bunqueue/v2", "{HOST}", 0, auth_tokens=["{TOKEN}"], http_port=0,
                            config=EngineConfig(allow_private_webhooks=True))
    await server.start()
    print(server.port, server.http.url, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class Client:
    """An authenticated TCP client that sends one request at a time."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder(PROFILE)
        self.n = 0

    async def open(self, port: int, auth: bool = True) -> Client:
        self.reader, self.writer = await asyncio.open_connection(HOST, port)
        if auth:
            reply = await self.call({"cmd": "Auth", "token": TOKEN})
            assert reply.get("ok"), reply
        return self

    async def call(self, request: dict, timeout: float = 30.0) -> dict:
        self.n += 1
        req_id = f"r{self.n}"
        self.writer.write(frame(dict(request, reqId=req_id)))
        async with asyncio.timeout(timeout):
            while True:
                for msg in self.decoder.feed(await self.reader.read(1 << 16) or b""):
                    if isinstance(msg, dict) and msg.get("reqId") == req_id:
                        return msg
                if self.reader.at_eof():
                    return {"ok": False, "error": "connection closed"}

    def close(self) -> None:
        self.writer.close()


async def probe(port: int, stop: asyncio.Event, out: list[float]) -> None:
    client = await Client().open(port)
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            await client.call({"cmd": "Ping"}, timeout=10.0)
        except TimeoutError:
            out.append(10_000.0)
            break
        out.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.02)
    client.close()


async def attack_cron(port: int, http_url: str, notes: dict) -> None:
    client = await Client().open(port)
    schedule = ",".join(["0-59"] * 200_000) + " * * * * *"
    reply = await client.call({"cmd": "Cron", "name": "big", "queue": "c", "data": {},
                               "schedule": schedule})
    notes["1 MB schedule"] = reply.get("error") or "accepted"
    accepted = 0
    for i in range(20):
        reply = await client.call({"cmd": "Cron", "name": f"fast{i}", "queue": "c",
                                   "data": {}, "repeatEvery": 1})
        accepted += bool(reply.get("ok"))
    notes["repeatEvery 1 accepted"] = f"{accepted} of 20"
    await asyncio.sleep(5)
    reply = await client.call({"cmd": "GetJobCounts", "queue": "c"})
    notes["jobs made in 5 s"] = reply.get("counts", {}).get("waiting")
    client.close()


async def attack_polls(port: int, http_url: str, notes: dict) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(http_url.rstrip("/") + "/ws", headers=headers) as ws:
        t0, sent = time.perf_counter(), 0
        try:  # a server that stops reading the socket (backpressure) makes send_str wait
            async with asyncio.timeout(5):
                for i in range(100_000):
                    await ws.send_str(json.dumps({"cmd": "PULL", "queue": "p",
                                                  "timeout": 60000, "reqId": f"w{i}"}))
                    sent += 1
        except TimeoutError:
            pass
        notes["polls written"] = f"{sent:,} in {time.perf_counter() - t0:.1f} s"
        pusher = await Client().open(port)
        for i in range(20):
            await pusher.call({"cmd": "PUSH", "queue": "p", "data": {"i": i}})
            await asyncio.sleep(0.1)
        answered = 0
        try:
            async with asyncio.timeout(2):
                async for _ in ws:
                    answered += 1
        except TimeoutError:
            pass
        notes["WebSocket replies read"] = answered
        pusher.close()


async def attack_preauth(port: int, http_url: str, notes: dict) -> None:
    size = 63 * MiB
    chunk = b"\x00" * MiB
    results: list[str] = []

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError as exc:
            results.append(f"connect: {exc}")
            return
        sent = 0
        try:
            writer.write(struct.pack(">I", size))
            async with asyncio.timeout(5):
                while sent < size:
                    writer.write(chunk)
                    await writer.drain()
                    sent += len(chunk)
            results.append(f"sent all {sent // MiB} MiB")
        except (TimeoutError, OSError) as exc:
            results.append(f"{type(exc).__name__} after {sent // MiB} MiB")
        writer.close()

    await asyncio.gather(*(one() for _ in range(16)))
    notes["attackers"] = sorted(set(results))


async def attack_webhooks(port: int, http_url: str, notes: dict) -> None:
    arrivals: dict[int, float] = {}

    async def legit(request: web.Request) -> web.Response:
        body = await request.json()
        job = (body.get("data") or {}).get("jobId") or body.get("jobId")
        arrivals[str(job)] = time.perf_counter()
        return web.json_response({"ok": True})

    async def tarpit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tarpit.open += 1
        tarpit.peak = max(tarpit.peak, tarpit.open)
        try:
            while await reader.read(1 << 16):
                pass
        except (asyncio.CancelledError, ConnectionError):
            pass  # the bench is ending, or the server gave up on this delivery
        finally:
            tarpit.open -= 1
            writer.close()

    tarpit.open = tarpit.peak = 0
    app = web.Application()
    app.router.add_post("/hook", legit)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, LEGIT_HOST, 0)
    await site.start()
    legit_port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the bound port
    pit = await asyncio.start_server(tarpit, HOST, 0)
    pit_port = pit.sockets[0].getsockname()[1]
    client = await Client().open(port)
    reply = await client.call({"cmd": "AddWebhook", "url": f"http://{LEGIT_HOST}:{legit_port}/hook",
                               "events": ["job.pushed"], "queue": "w"})
    assert reply.get("ok"), reply
    accepted, refusal = 0, None
    for i in range(300):
        req = {"cmd": "AddWebhook", "url": f"http://{HOST}:{pit_port}/x{i}",
               "events": ["job.pushed"]}
        if i % 2 == 0:
            req["queue"] = "w"
        reply = await client.call(req)
        accepted += bool(reply.get("ok"))
        refusal = refusal or reply.get("error")
    notes["tarpit hooks accepted"] = f"{accepted} of 300" + (f" ({refusal})" if refusal else "")
    pushed: dict[str, float] = {}
    for i in range(20):
        reply = await client.call({"cmd": "PUSH", "queue": "w", "data": {"i": i}})
        pushed[str(reply.get("id"))] = time.perf_counter()
        await asyncio.sleep(0.1)
    await asyncio.sleep(2)
    delays = [(arrivals[j] - t) * 1000 for j, t in pushed.items() if j in arrivals]
    notes["legit deliveries"] = f"{len(delays)} of 20"
    notes[OWN_GOAL] = len(delays) == 20 and max(delays) < DELIVERY_BOUND_MS
    if delays:
        notes["legit delivery delay ms (median / max)"] = \
            f"{statistics.median(delays):.1f} / {max(delays):.1f}"
    notes["tarpit connections open at once (peak)"] = tarpit.peak
    client.close()
    pit.close()
    await runner.cleanup()


ATTACKS = {"cron": attack_cron, "polls": attack_polls, "preauth": attack_preauth,
           "webhooks": attack_webhooks}


async def run_scenario(name: str) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH], stdout=subprocess.PIPE, text=True)
    try:
        port_s, http_url = proc.stdout.readline().split()
        port = int(port_s)
        warm = await Client().open(port)
        for _ in range(50):
            await warm.call({"cmd": "Ping"})
        warm.close()
        await asyncio.sleep(0.3)
        base_kb = status_kb(proc.pid, "VmHWM")
        stop, pings, notes = asyncio.Event(), [], {}
        prober = asyncio.create_task(probe(port, stop, pings))
        await asyncio.sleep(0.2)
        t0 = time.perf_counter()
        try:
            await ATTACKS[name](port, http_url, notes)
        except Exception as exc:  # noqa: BLE001 - the attacker failing is a figure too
            notes["attacker stopped by"] = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.5)
        stop.set()
        await prober
        alive = proc.poll() is None
        growth_mb = (status_kb(proc.pid, "VmHWM") - base_kb) / 1024 if alive else float("nan")
        pings_sorted = sorted(pings)
        p99 = pings_sorted[max(0, int(len(pings_sorted) * 0.99) - 1)] if pings else float("nan")
        result = {
            "scenario": name, "seconds": round(time.perf_counter() - t0, 1),
            "server alive": alive, "pings": len(pings),
            "ping median ms": round(statistics.median(pings), 2) if pings else None,
            "ping p99 ms": round(p99, 2), "ping max ms": round(max(pings), 2) if pings else None,
            "growth MB": round(growth_mb, 1), "notes": notes,
        }
        result["met"] = bool(alive and pings and max(pings) < PING_BOUND_MS
                             and growth_mb < GROWTH_BOUND_MB and notes.get(OWN_GOAL, True))
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help=f"comma-separated, of {', '.join(SCENARIOS)}")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    results = []
    print("| scenario | Ping median / p99 / max (ms) | RSS growth (MB) | met | what happened |")
    print("|---|---|---|---|---|")
    for name in args.scenarios.split(","):
        r = asyncio.run(run_scenario(name))
        results.append(r)
        notes = "; ".join(f"{k}: {v}" for k, v in r["notes"].items())
        alive = "" if r["server alive"] else " (server died)"
        print(f"| {name} | {r['ping median ms']} / {r['ping p99 ms']} / {r['ping max ms']} | "
              f"{r['growth MB']}{alive} | {'yes' if r['met'] else 'NO'} | {notes} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
