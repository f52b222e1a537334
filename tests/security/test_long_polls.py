"""Issue 22 item 4, TCP and shared parts: long polls without bound (BQ-SAFE-1
``max_parked_polls``, BQ-PULL-1, BQ-WAITJOB-1).

The reference server parks at most ``safeguards.max_parked_polls`` long polls (PULL and PULLB
with a timeout, WaitJob) over every shell of one engine (TCP, HTTP, WebSocket); one beyond is
answered at once as if its timeout had elapsed (the protocol's own "no job" answer), never
refused, never queued. An event wakes FIFO only as many parked polls as it may serve: a PUSH
of one job one PULL (the oldest), a PUSHB of n up to n (a PULLB counting as many as it may
take); a woken poll that finds nothing keeps its place and deadline, and a wake-up given to a
poll that goes away before using it passes to the next one.

The done-when figure (250 connections x 50 polls: the cap is reached, a PUSH then another
connection's Ping) runs the server as a process so that its RSS is its own; the others run
it in process over real loopback sockets, counting ``engine.retry`` (one call per woken poll)
to see how many polls an event woke.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import aiohttp
import msgpack
import pytest

from queuewire.codecs.bunqueue import FrameDecoder
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer
from queuewire.reference_server.bunqueue.waits import WaitRoom
from queuewire.spec import load_profile
from serve_process import free_tcp_ports, proc_status_bytes, recv_frame, start_serve, stop_serve

PROFILE = load_profile("bunqueue/v2")
CAP = PROFILE.model.safeguards["max_parked_polls"]
MAX_IN_FLIGHT = int(PROFILE.limit("max_in_flight").value)
GUARD = 20.0          # seconds: a hang fails the test instead of stalling the run
LATENCY_BOUND = 0.1   # seconds: the bound for another connection's Ping
RSS_BOUND = 150 * 1024 * 1024  # bytes: the bound for the server's growth

pytestmark = pytest.mark.asyncio


def frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


class Peer:
    """A raw asyncio connection whose replies are collected by a reader task."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(PROFILE, check_depth=False)
        self.replies: list[Any] = []
        self.arrived = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, port: int) -> Peer:
        """A connection that negotiated protocol v2 (pipelining) with Hello first: without
        it the server serves it sequentially, as v1 (BQ-HELLO-3)."""
        peer = cls(*await asyncio.open_connection("127.0.0.1", port))
        spec = PROFILE.model
        peer.send({"cmd": "Hello", "protocolVersion": spec.protocol_version,
                   "capabilities": list(spec.capabilities), "reqId": "hello"})
        assert (await peer.reply("hello"))["ok"] is True
        return peer

    async def _read(self) -> None:
        while data := await self.reader.read(1 << 16):
            self.replies.extend(self.decoder.feed(data))
            self.arrived.set()

    def send(self, *objs: Any) -> None:
        self.writer.write(b"".join(frame(o) for o in objs))

    async def reply(self, req_id: str, timeout: float = 5.0) -> Any:
        try:
            async with asyncio.timeout(timeout):
                while True:
                    for r in self.replies:
                        if r.get("reqId") == req_id:
                            self.replies.remove(r)
                            return r
                    self.arrived.clear()
                    await self.arrived.wait()
        except TimeoutError:
            raise AssertionError(f"no reply to {req_id!r} within {timeout} s") from None

    async def call(self, obj: dict, timeout: float = 5.0) -> Any:
        self.send(obj)
        return await self.reply(obj["reqId"], timeout)

    async def close(self) -> None:
        self.writer.close()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def count_retries(engine: BunqueueEngine) -> list[int]:
    """Count the engine's ``retry`` calls: one per woken poll."""
    calls = [0]
    retry = engine.retry

    def counted(conn_id: Any, wait: Any) -> Any:
        calls[0] += 1
        return retry(conn_id, wait)

    engine.retry = counted  # type: ignore[method-assign]
    return calls


async def until(predicate, timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        await asyncio.sleep(0.005)


async def park(server: BunqueueServer, peer: Peer, request: dict) -> None:
    """Send a long poll and wait until the server has parked it (so the order is known)."""
    before = server.parked_polls
    peer.send(request)
    await until(lambda: server.parked_polls == before + 1, what=f"{request} parked")


# -- 1. the done-when figure: the cap is reached, and a PUSH wakes one poll, not all ----------


def _call(sock: socket.socket, obj: dict) -> tuple[Any, float]:
    start = time.perf_counter()
    sock.sendall(frame(obj))
    reply = recv_frame(sock)
    return reply, time.perf_counter() - start


async def test_12500_long_polls_hit_the_cap_and_a_push_leaves_a_ping_under_100ms():
    """Issue 22 item 4, done-when figure (TCP and HTTP), BQ-SAFE-1 ``max_parked_polls``: 250
    connections x 50 ``PULL timeout:60000`` (12,500 polls, over the cap of 10,000): the polls
    beyond the cap are answered at once with the "no job" reply, as is an HTTP long poll (the
    cap is shared by the shells); then each PUSH wakes one poll, so another connection's Ping
    sent right after it is answered within 100 ms, each job reaches exactly one poll, and the
    server grows by under 150 MB."""
    conns, per_conn, pushes = 250, 50, 20
    http_port = free_tcp_ports(1)[0]
    proc, port = start_serve("bunqueue", "--http-port", str(http_port))
    problems: list[str] = []
    peers: list[Peer] = []
    try:
        before = proc_status_bytes(proc.pid, "VmHWM")
        for _ in range(conns):
            peers.append(await Peer.open(port))
        for c, peer in enumerate(peers):
            peer.send(*({"cmd": "PULL", "queue": "lp", "timeout": 60000, "reqId": f"{c}.{i}"}
                        for i in range(per_conn)))
        over = conns * per_conn - CAP

        def answered() -> list[Any]:
            return [r for p in peers for r in p.replies]
        deadline = time.monotonic() + 8.0
        while len(answered()) < over and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        early = answered()
        if len(early) != over or any(r != {"ok": True, "job": None, "reqId": r["reqId"]}
                                     for r in early):
            problems.append(f"{len(early)} of the {over} polls beyond the cap answered at once "
                            f"(first: {early[:2]})")
        async with aiohttp.ClientSession() as http:
            body: Any = "no reply within 3 s"
            try:
                async with asyncio.timeout(3.0), http.get(
                        f"http://127.0.0.1:{http_port}/queues/lp/jobs?timeout=60000") as resp:
                    body = await resp.json()
            except TimeoutError:
                pass
            if body != {"ok": True, "job": None}:
                problems.append(f"an HTTP long poll beyond the cap got: {body}")
        for p in peers:
            p.replies.clear()
        latencies, pushed = [], set()
        with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as producer, \
                socket.create_connection(("127.0.0.1", port), timeout=GUARD) as pinger:
            for s in (producer, pinger):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(pushes):
                reply, _ = _call(producer, {"cmd": "PUSH", "queue": "lp", "data": {"i": i}})
                pushed.add(reply["id"])
                reply, took = _call(pinger, {"cmd": "Ping", "reqId": f"ping{i}"})
                assert reply.get("ok") is True, reply
                latencies.append(took)
                await asyncio.sleep(0.02)  # the woken polls' replies are read meanwhile
        deadline = time.monotonic() + 5.0
        while sum(r["job"] is not None for r in answered()) < pushes \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # a job handed out twice would show now
        got = [r["job"]["id"] for r in answered() if r.get("job") is not None]
        if sorted(got) != sorted(pushed):
            problems.append(f"{len(pushed)} jobs pushed, {len(got)} handed to parked polls "
                            f"({len(set(got))} distinct)")
        worst = max(latencies)
        if worst >= LATENCY_BOUND:
            problems.append(f"a Ping after a PUSH took up to {worst * 1000:.0f} ms "
                            f"(median {sorted(latencies)[pushes // 2] * 1000:.0f} ms)")
        grown = proc_status_bytes(proc.pid, "VmHWM") - before
        if grown >= RSS_BOUND:
            problems.append(f"the server grew by {grown / 2 ** 20:.0f} MiB")
    finally:
        for p in peers:
            await p.close()
        stop_serve(proc)
    assert not problems, "; ".join(problems)


# -- 2. an event wakes FIFO as many polls as it may serve --------------------------------------
async def test_a_push_wakes_only_the_oldest_parked_pull_and_a_pushb_of_n_wakes_n():
    """Issue 22 item 4 (wake FIFO only as many waiters as there are jobs): with five PULLs
    parked, a PUSH wakes one (the oldest: one ``retry``), a PUSHB of two the next two."""
    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0) as server:
        retries = count_retries(server.engine)
        peers = [await Peer.open(server.port) for _ in range(5)]
        for i, peer in enumerate(peers):
            await park(server, peer, {"cmd": "PULL", "queue": "f", "timeout": 60000,
                                      "reqId": f"w{i}"})
        producer = await Peer.open(server.port)
        first = await producer.call({"cmd": "PUSH", "queue": "f", "data": 1, "reqId": "p1"})
        assert (await peers[0].reply("w0"))["job"]["id"] == first["id"]
        await until(lambda: server.parked_polls == 4)
        assert retries[0] == 1, f"one PUSH woke {retries[0]} parked polls"
        both = await producer.call({"cmd": "PUSHB", "queue": "f", "reqId": "p2",
                                    "jobs": [{"data": 2}, {"data": 3}]})
        got = [(await peers[i].reply(f"w{i}"))["job"]["id"] for i in (1, 2)]
        assert got == both["ids"]
        await until(lambda: server.parked_polls == 2)
        assert retries[0] == 3, f"a PUSHB of 2 woke {retries[0] - 1} parked polls"
        assert peers[3].replies == [] and peers[4].replies == []
        for p in (*peers, producer):
            await p.close()


async def test_a_pullb_waiter_counts_by_what_it_may_take():
    """Issue 22 item 4 (PULLB waiters count by what they may take): a PULLB of 3 parked first
    and two PULLs after it; a PUSHB of 4 gives the PULLB three jobs and the first PULL one,
    waking exactly those two; the second PULL stays parked."""
    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0) as server:
        retries = count_retries(server.engine)
        batch, single, last = [await Peer.open(server.port) for _ in range(3)]
        await park(server, batch, {"cmd": "PULLB", "queue": "b", "count": 3, "timeout": 60000,
                                   "reqId": "b"})
        await park(server, single, {"cmd": "PULL", "queue": "b", "timeout": 60000, "reqId": "s"})
        await park(server, last, {"cmd": "PULL", "queue": "b", "timeout": 60000, "reqId": "l"})
        producer = await Peer.open(server.port)
        ids = (await producer.call({"cmd": "PUSHB", "queue": "b", "reqId": "p",
                                    "jobs": [{"data": i} for i in range(4)]}))["ids"]
        assert [j["id"] for j in (await batch.reply("b"))["jobs"]] == ids[:3]
        assert (await single.reply("s"))["job"]["id"] == ids[3]
        await until(lambda: server.parked_polls == 1)
        await asyncio.sleep(0.05)
        assert retries[0] == 2, f"a PUSHB of 4 woke {retries[0]} polls (a PULLB of 3, a PULL)"
        assert last.replies == []
        for p in (batch, single, last, producer):
            await p.close()


async def test_a_woken_poll_that_finds_nothing_keeps_its_place():
    """Issue 22 item 4 (a woken waiter that finds nothing must not lose its place): a PUSH
    wakes the oldest poll, but a plain PULL pipelined right behind the PUSH takes the job
    first; the woken poll parks again ahead of the younger one, so the next PUSH is its."""
    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0) as server:
        retries = count_retries(server.engine)
        old, young = await Peer.open(server.port), await Peer.open(server.port)
        await park(server, old, {"cmd": "PULL", "queue": "k", "timeout": 60000, "reqId": "old"})
        await park(server, young, {"cmd": "PULL", "queue": "k", "timeout": 60000,
                                   "reqId": "young"})
        thief = await Peer.open(server.port)
        thief.send({"cmd": "PUSH", "queue": "k", "data": 1, "reqId": "p"},
                   {"cmd": "PULL", "queue": "k", "reqId": "steal"})
        assert (await thief.reply("steal"))["job"] is not None
        await until(lambda: retries[0] >= 1)
        await asyncio.sleep(0.05)
        assert retries[0] == 1, f"one PUSH woke {retries[0]} polls"
        assert server.parked_polls == 2 and old.replies == [] and young.replies == []
        second = await thief.call({"cmd": "PUSH", "queue": "k", "data": 2, "reqId": "p2"})
        assert (await old.reply("old"))["job"]["id"] == second["id"]
        await asyncio.sleep(0.05)
        assert young.replies == [] and server.parked_polls == 1
        for p in (old, young, thief):
            await p.close()


async def test_a_wake_up_given_to_a_poll_that_goes_away_passes_to_the_next():
    """Issue 22 item 4 (no wake-up may be lost): the oldest poll is woken by a PUSH and its
    task cancelled (its connection closed) before it runs; the job goes to the next poll."""
    engine = BunqueueEngine(PROFILE)
    room = WaitRoom(engine)
    engine.notify = room.wake
    polls = []
    async with asyncio.timeout(GUARD):
        for name in ("gone", "next"):
            wait = engine.handle(name, {"cmd": "PULL", "queue": "w", "timeout": 60000})
            polls.append(asyncio.create_task(room.park(name, wait)))
            await asyncio.sleep(0)
        assert room.parked == 2
        pushed = engine.handle("p", {"cmd": "PUSH", "queue": "w", "data": 1})
        polls[0].cancel()  # before it could run: its wake-up is the only one
        reply = await polls[1]
        assert reply["job"]["id"] == pushed["id"]
        assert polls[0].cancelled() and room.parked == 0


async def test_waitjob_polls_are_all_woken_by_their_job():
    """BQ-WAITJOB-1 under the FIFO wake: every WaitJob on a job is answered when it
    completes (a job event is not a queue's job to hand out once)."""
    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0) as server:
        worker = await Peer.open(server.port)
        job = await worker.call({"cmd": "PUSH", "queue": "wj", "data": 1, "reqId": "p"})
        await worker.call({"cmd": "PULL", "queue": "wj", "reqId": "pull"})
        waiters = [await Peer.open(server.port) for _ in range(3)]
        for i, w in enumerate(waiters):
            await park(server, w, {"cmd": "WaitJob", "id": job["id"], "timeout": 60000,
                                   "reqId": f"j{i}"})
        await worker.call({"cmd": "ACK", "id": job["id"], "result": 7, "reqId": "a"})
        for i, w in enumerate(waiters):
            reply = await w.reply(f"j{i}")
            assert reply["completed"] is True and reply["result"] == 7
        for p in (*waiters, worker):
            await p.close()


# -- 3. the cap is shared by every shell and answers as a timeout ------------------------------
async def test_the_cap_is_shared_by_tcp_and_http_and_answers_as_a_timeout():
    """BQ-SAFE-1 ``max_parked_polls`` over all shells of one engine (lowered on the shared
    ParkingLot to keep the test small; its default is the spec's): with the cap taken by two
    TCP polls and one HTTP poll, a TCP PULL, a PULLB, a WaitJob and an HTTP poll are answered
    at once with their "timed out" replies; a PUSH wakes the oldest poll, and its place can
    be taken again."""
    from queuewire.reference_server.bunqueue.waits import ParkingLot

    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0, http_port=0) as server:
        lot = ParkingLot.for_engine(server.engine)
        assert lot.limit == CAP
        lot.limit = 3
        url = server.http.url
        a, b, c = [await Peer.open(server.port) for _ in range(3)]
        await park(server, a, {"cmd": "PULL", "queue": "cap", "timeout": 60000, "reqId": "a"})
        await park(server, b, {"cmd": "PULL", "queue": "cap", "timeout": 60000, "reqId": "b"})
        async with aiohttp.ClientSession() as http:
            held = asyncio.create_task(http.get(f"{url}/queues/cap/jobs?timeout=60000"))
            await until(lambda: lot.parked == 3, what="the HTTP poll parked")
            assert (await c.call({"cmd": "PULL", "queue": "cap", "timeout": 60000,
                                  "reqId": "c1"}, timeout=2.0)) == \
                {"ok": True, "job": None, "reqId": "c1"}
            assert (await c.call({"cmd": "PULLB", "queue": "cap", "count": 5, "timeout": 60000,
                                  "reqId": "c2"}, timeout=2.0)) == \
                {"ok": True, "jobs": [], "reqId": "c2"}
            job = await c.call({"cmd": "PUSH", "queue": "other", "data": 1, "reqId": "c3"})
            assert (await c.call({"cmd": "WaitJob", "id": job["id"], "timeout": 60000,
                                  "reqId": "c4"}, timeout=2.0)) == \
                {"ok": True, "completed": False, "reqId": "c4"}
            async with asyncio.timeout(2.0), \
                    http.get(f"{url}/queues/cap/jobs?timeout=60000") as resp:
                assert await resp.json() == {"ok": True, "job": None}
            pushed = await c.call({"cmd": "PUSH", "queue": "cap", "data": 2, "reqId": "c5"})
            assert (await a.reply("a"))["job"]["id"] == pushed["id"]
            await until(lambda: lot.parked == 2)
            await park(server, c, {"cmd": "PULL", "queue": "cap", "timeout": 60000,
                                   "reqId": "c6"})
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
        for p in (a, b, c):
            await p.close()
