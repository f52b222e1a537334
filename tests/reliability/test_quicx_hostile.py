"""Hostile peers against the quicx reference daemon over real loopback sockets: a flood on one
connection, a worker that asks for tasks and never reads, a peer that stops inside a frame, a
burst of connects. Each test enforces one flow-control rule of
:mod:`queuewire.reference_server._flow` together with the protocol rule it protects; the
bounds (100 ms, the high-water mark) are correctness bounds, not benchmarks. The daemon runs in
process on 127.0.0.1 with an ephemeral port, every scenario under a 30 s guard."""

from __future__ import annotations

import asyncio
import time

import pytest

from latency import assert_prompt
from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
from queuewire.reference_server._flow import (
    DEFAULT_LISTEN_BACKLOG,
    FRAMES_PER_TURN,
    OUTPUT_HIGH_WATER,
)
from queuewire.reference_server.quicx import QuicxServer
from queuewire.spec import load_profile

GUARD = 30.0               # seconds: a hang fails the test instead of stalling the run
LATENCY_BOUND = 0.1        # seconds: another connection's answer during a flood (the bound)

pytestmark = pytest.mark.asyncio


async def run(coro):
    """Await a scenario under the guard (``asyncio.timeout``: it never swallows a cancel)."""
    async with asyncio.timeout(GUARD):
        return await coro


async def connect(server: QuicxServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def heartbeat_latency(server: QuicxServer, enc: QuicxEncoder, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> float:
    """Seconds from writing a MSG_HEARTBEAT to reading its MSG_PONG (QX-HB-2)."""
    pong = enc.pong()
    start = time.perf_counter()
    writer.write(enc.heartbeat())
    assert await reader.readexactly(len(pong)) == pong
    return time.perf_counter() - start


async def closed_by_daemon(reader: asyncio.StreamReader, within: float) -> float | None:
    """Seconds until the daemon closes or resets the connection, or None if it stays open."""
    start = time.perf_counter()
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.perf_counter() - start


# ------------------------------------------------------------------------------- fairness

async def test_a_flood_on_one_connection_does_not_delay_another_connections_heartbeat():
    """QX-HB-2 (the receiver of a MSG_HEARTBEAT answers MSG_PONG) under the fairness rule
    (QX-FLOW-2, _flow.FRAMES_PER_TURN): while a peer pipelines MSG_STATS as fast as it can and reads the
    answers, another connection's heartbeat is answered within 100 ms. A daemon that handles
    a whole 64 KiB read (about 10,900 frames) before yielding made it wait seconds."""
    profile = "quicx/v1"
    assert load_profile(profile).model.flag("stats_on_tcp")
    enc = QuicxEncoder(profile)
    answer = len(enc.stats_response(queue_depth=0, workers_total=0, workers_idle=0,
                                    pmad_bytes_used=0, pmad_bytes_total=0))

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            flood_r, flood_w = await connect(server)
            received = 0
            blob = enc.stats() * 20_000

            async def flood_writer():
                while True:
                    flood_w.write(blob)
                    await flood_w.drain()

            async def flood_reader():
                nonlocal received
                while data := await flood_r.read(1 << 20):
                    received += len(data)

            flood = [asyncio.create_task(flood_writer()), asyncio.create_task(flood_reader())]
            try:
                hb_r, hb_w = await connect(server)
                while received < 100 * FRAMES_PER_TURN * answer:  # the flood is under way
                    await asyncio.sleep(0.01)
                before = received
                latencies: list[float] = []
                while len(latencies) < 10:
                    latencies.append(await heartbeat_latency(server, enc, hb_r, hb_w))
                    await asyncio.sleep(0.02)
                answered = (received - before) // answer
            finally:
                for task in flood:
                    task.cancel()
                await asyncio.gather(*flood, return_exceptions=True)
            assert_prompt(latencies, LATENCY_BOUND, "heartbeat during a flood")
            assert answered > 10 * FRAMES_PER_TURN, "the flood stopped during the measurement"

    await run(scenario())


# --------------------------------------------------------------------------- backpressure

async def test_a_worker_that_never_reads_costs_at_most_the_high_water_mark():
    """The backpressure rule (QX-FLOW-1, _flow.OUTPUT_HIGH_WATER) for frames the daemon writes to a
    connection on another's behalf: a worker that registers for many tasks (each MSG_READY a
    credit, QX-READY-101) and never reads is pushed tasks only until its unsent output is over
    the mark; the other tasks stay queued (QX-QUEUE-1) and go to a worker that reads, and the
    producer is answered throughout. A daemon that pushes every task to its credits buffers
    all of them for a peer that may never take them."""
    profile = "quicx/1.0.3"
    spec = load_profile(profile).model
    assert not spec.flag("wait_when_empty")  # READYs on an empty queue are held as credits
    enc = QuicxEncoder(profile)
    payload = b"x" * (spec.max_payload_bytes - 16)
    frame = len(enc.task(1, "t", payload))
    tasks = (2 * OUTPUT_HIGH_WATER + 8 * 1024 * 1024) // frame  # more than mark + kernel buffers
    bound = OUTPUT_HIGH_WATER + FRAMES_PER_TURN * frame

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            greedy_r, greedy_w = await connect(server)
            greedy_w.write(enc.ready() * tasks)  # and never read again
            await greedy_w.drain()
            hb_r, hb_w = await connect(server)
            await heartbeat_latency(server, enc, hb_r, hb_w)  # the READYs are handled
            assert server.stats().workers_total == 1
            prod_r, prod_w = await connect(server)
            decoder = QuicxDecoder(profile, "producer")
            oks, worst = 0, 0
            for start in range(0, tasks, 1000):
                n = min(1000, tasks - start)
                prod_w.write(enc.submit("t", payload) * n)
                while oks < start + n:  # the producer is answered throughout
                    oks += sum(m.name == "MSG_OK" for m in decoder.feed(await prod_r.read(65536)))
                worst = max(worst, *server.unsent_bytes().values())
            stats = server.stats()
            assert stats.accepted == tasks
            assert worst <= bound, f"{worst} bytes buffered for a peer that does not read"
            assert stats.queue_depth > 0 and stats.in_flight < tasks
            assert_prompt([await heartbeat_latency(server, enc, hb_r, hb_w) for _ in range(10)],
                          LATENCY_BOUND, "heartbeat")
            # the tasks held back go to a worker that reads
            ok_r, ok_w = await connect(server)
            ok_w.write(enc.ready())
            got = QuicxDecoder(profile, "worker").feed(await ok_r.read(65536))
            assert got and got[0].name == "MSG_TASK"
            greedy_w.transport.abort()

    await run(scenario())


# ------------------------------------------------------------------- half-received frames

PARTIAL_TIMEOUT = 0.3  # seconds, the test's own setting (the default is 60)


@pytest.mark.parametrize("case", ["header", "payload", "refused-payload"])
async def test_a_peer_silent_inside_a_frame_is_reset_after_the_timeout(case):
    """QX-HDR-7 (a stream that stops inside a frame is invalid) under the partial-frame rule
    (QX-FLOW-3, _flow.DEFAULT_PARTIAL_FRAME_TIMEOUT): a peer that sends part of a frame, or part of the
    payload the daemon skips after refusing a frame's header, and then nothing, is reset once
    the timeout has passed. The timeout counts silence, not the frame's age: a peer that
    sends its frame a few bytes at a time, each within the timeout, is answered (a frame may
    arrive in any number of reads), and a connection silent between frames stays open
    (QX-HB-3: idle connections are kept alive). A daemon without the timeout holds such a
    connection, and the buffer it fills, for ever."""
    profile = "quicx/v1"
    spec = load_profile(profile).model
    enc = QuicxEncoder(profile)
    submit = enc.submit("t", b"y" * 100)
    largest = QuicxServer(profile, port=0).engine.pool.largest_class
    sent = {"header": submit[:spec.header_size - 2],
            "payload": submit[:spec.header_size + 40],
            "refused-payload": enc.frame(spec.message("MSG_SUBMIT").code, b"\x01t" + b"z" * 100,
                                         length=largest + 1)}[case]

    async def slow_sender(server: QuicxServer) -> str:
        reader, writer = await connect(server)
        for i in range(0, len(submit), 25):
            writer.write(submit[i:i + 25])
            await asyncio.sleep(PARTIAL_TIMEOUT * 0.6)  # the whole frame takes longer
        (ok,) = QuicxDecoder(profile, "producer").feed(await reader.read(65536))
        writer.close()
        return ok.name

    async def scenario():
        async with QuicxServer(profile, port=0, partial_frame_timeout=PARTIAL_TIMEOUT) as server:
            idle_r, idle_w = await connect(server)
            await heartbeat_latency(server, enc, idle_r, idle_w)
            slow = asyncio.create_task(slow_sender(server))
            peer_r, peer_w = await connect(server)
            peer_w.write(sent)
            await peer_w.drain()
            if case == "refused-payload":  # the header is answered before the daemon skips
                (err,) = QuicxDecoder(profile, "producer").feed(await peer_r.read(65536))
                assert err.fields["error_code"] == spec.error_replies["payload_too_large"]
            after = await closed_by_daemon(peer_r, within=PARTIAL_TIMEOUT + 5)
            assert after is not None, "the connection was kept open"
            assert after >= PARTIAL_TIMEOUT - 0.05, f"reset after {after:.2f} s only"
            assert after < PARTIAL_TIMEOUT + 2
            assert await slow == "MSG_OK"
            # the idle connection, silent for longer than the timeout, is still served
            assert_prompt([await heartbeat_latency(server, enc, idle_r, idle_w) for _ in range(10)],
                          LATENCY_BOUND, "heartbeat")
            assert server.stats().connections == 1

    await run(scenario())


# -------------------------------------------------------------------------------- backlog

async def test_a_burst_of_200_connects_is_accepted_without_retries():
    """The listen backlog rule (_flow.DEFAULT_LISTEN_BACKLOG): 200 clients connecting at once
    are all accepted and answered at the first attempt. With asyncio's default backlog of 100
    the kernel drops the handshakes that overflow the accept queue and those clients connect
    only when their SYN is retransmitted, a second or more later."""
    clients = 200
    assert DEFAULT_LISTEN_BACKLOG >= clients
    profile = "quicx/v1"
    enc = QuicxEncoder(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            assert server.backlog == DEFAULT_LISTEN_BACKLOG

            async def client() -> tuple[float, asyncio.StreamWriter]:
                start = time.perf_counter()
                reader, writer = await connect(server)
                writer.write(enc.heartbeat())
                assert await reader.readexactly(len(enc.pong())) == enc.pong()
                return time.perf_counter() - start, writer

            results = await asyncio.gather(*(client() for _ in range(clients)))
            slowest = max(t for t, _ in results)
            assert server.stats().connections == clients
            for _, writer in results:
                writer.close()
            # a retransmitted SYN comes after at least one second on every common kernel
            assert slowest < 0.9, f"a connect took {slowest:.2f} s: it was retried"

    await run(scenario())
