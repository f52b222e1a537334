"""The tap in front of the bunqueue reference server: a full reference-client workload without
a false verdict, a recording that holds exactly the bytes that crossed, a garbled frame passed
on unchanged and reported with its requirement, half-closes, refusals and backpressure."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from tap_helpers import SinkServer, raw_exchange, tapped, until

from queuewire.client import Queue, Worker
from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.reference_server.bunqueue import BunqueueServer
from queuewire.tap.proxy import TapServer
from queuewire.traffic import trace_format as trace
from queuewire.traffic.analyzer import Analyzer
from serve_process import start_serve, stop_serve

PROFILE = "bunqueue/v2"


def _frames(data: bytes) -> list[dict]:
    return FrameDecoder(PROFILE, check_depth=False).feed(data)


@pytest.mark.asyncio
async def test_reference_workload_has_no_false_verdict_and_every_request_is_paired(tmp_path):
    server = await BunqueueServer(PROFILE, port=0).start()
    try:
        async with tapped("bunqueue", server.port, profile=PROFILE, record=tmp_path) as (tap, analyzer):
            conn = {"port": tap.port}
            processed, failed = [], []
            async with Queue("tap-emails", connection=conn, profile=PROFILE) as queue:
                await queue.add("send", {"to": "a@b.c"}, priority=5, attempts=1)
                await queue.add_bulk([{"name": "bulk", "data": {"i": i}} for i in range(20)])
                await queue.add("explode", {"fail": True}, attempts=1)
                counts = await queue.get_job_counts()
                assert counts["waiting"] == 22

                async def process(job):
                    if job.data.get("fail"):
                        failed.append(job.id)
                        raise RuntimeError("this job fails on purpose")
                    await asyncio.sleep(0.05)  # long enough for a job heartbeat
                    processed.append(job.id)
                    return {"done": job.data}

                async with Worker("tap-emails", process, connection=conn, profile=PROFILE,
                                  concurrency=4, heartbeat_interval=20):
                    await until(lambda: len(processed) + len(failed) == 22, timeout=20)
                await queue.pause()
                await queue.resume()
                counts = await queue.get_job_counts()
                assert counts["completed"] == 21 and counts["failed"] == 1
        summary = analyzer.summary()
    finally:
        await server.stop()
    totals = summary["totals"]
    assert summary["requirements"] == [], summary["requirements"]  # no finding at any level
    assert totals["findings"] == {"FAIL": 0, "NON-STRICT": 0, "INFO": 0}
    assert totals["requests"] > 0 and totals["paired"] == totals["requests"]
    assert totals["unanswered"] == 0 and totals["gaps"] == 0
    commands = summary["commands"]
    for cmd in ("Hello", "PUSH", "PUSHB", "GetJobCounts", "PULLB", "ACKB", "FAIL",
                "JobHeartbeatB", "Pause", "Resume"):
        assert cmd in commands, f"{cmd} not seen: {sorted(commands)}"
        st = commands[cmd]
        assert st["paired"] == st["requests"] and st["latency"]["count"] == st["paired"]
    # the recording: per connection and direction, its frames re-frame into the frames the
    # tap counted, and hold every byte the proxy passed on
    streams = trace.streams(tmp_path)
    by_conn = {c["conn_id"]: c for c in summary["connections"]}
    for (conn_id, direction), data in streams.items():
        assert len(data) == by_conn[conn_id]["bytes"][direction]
        assert len(_frames(data)) == by_conn[conn_id]["frames"][direction]
    records = list(trace.read_dir(tmp_path))
    assert {r.type for r in records} == {"open", "frame", "eof", "close"} or \
        {r.type for r in records} == {"open", "frame", "close"} | {r.type for r in records if r.type == "eof"}
    assert sum(1 for r in records if r.type == "open") == len(by_conn)
    assert sum(1 for r in records if r.type == "close") == len(by_conn)


@pytest.mark.asyncio
async def test_recording_is_byte_exact_against_a_raw_exchange(tmp_path):
    """Frames whole and split, a garbled one, and a truncated frame at EOF: the recorded
    frame and gap records, concatenated, are exactly what was sent and received."""
    server = await BunqueueServer(PROFILE, port=0).start()
    ping = [encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(6)]
    garbled = b"\x00\x00\x00\x03\xc1\xc1\xc1"
    push = encode_frame({"cmd": "PUSH", "queue": "q", "data": {"x": "y" * 3000}, "reqId": "p"})
    truncated = encode_frame({"cmd": "Ping", "reqId": "never"})[:7]
    chunks = [ping[0] + ping[1], ping[2][:2], ping[2][2:] + garbled, push[:1000], push[1000:],
              ping[3] + ping[4] + ping[5], truncated]
    sent = b"".join(chunks)
    try:
        async with tapped("bunqueue", server.port, profile=PROFILE, record=tmp_path,
                          rotate_bytes=2048) as (tap, analyzer):
            received = await raw_exchange(tap.port, chunks)
        summary = analyzer.summary()
    finally:
        await server.stop()
    assert len(_frames(received)) == 8  # 6 pings, the push, the garbled frame's error reply
    streams = trace.streams(tmp_path)
    assert streams[(1, "c2s")] == sent
    assert streams[(1, "s2c")] == received
    everything = list(trace.read_dir(tmp_path))
    assert everything[0].type == "open" and everything[-1].type == "close"
    times = [r.t_ns for r in everything]
    assert times == sorted(times) and all(r.conn_id == 1 for r in everything)
    records = [r for r in everything if r.direction == "c2s"]
    assert [r.type for r in records] == ["frame"] * 8 + ["gap", "eof"]
    assert records[-2].detail == "truncated" and records[-2].payload == truncated
    assert [r.payload for r in records if r.type == "frame"][3] == garbled
    assert len(trace.trace_files(tmp_path)) > 1  # rotated at 2 KiB
    found = {(f["requirement"], f["kind"], f["level"]) for f in summary["findings"]}
    assert ("BQ-FRAME-3", "invalid_msgpack", "FAIL") in found
    assert ("BQ-FRAME-1", "truncated_frame", "FAIL") in found
    assert summary["totals"]["paired"] == 8


@pytest.mark.asyncio
async def test_garbled_frame_is_forwarded_unchanged_and_reported():
    upstream = await SinkServer().start()
    garbled = b"\x00\x00\x00\x06\x81\xa3cmd\xc1"          # a map whose value is a bad opcode
    too_big = (70_000_000).to_bytes(4, "big") + b"\xff" * 100  # over max_frame_bytes
    good = [encode_frame({"cmd": "Ping", "reqId": r}) for r in "ab"]
    sent = good[0] + garbled + good[1] + too_big + b"after the framing is lost"
    try:
        async with tapped("bunqueue", upstream.port, profile=PROFILE) as (tap, analyzer):
            await raw_exchange(tap.port, [sent[:9], sent[9:30], sent[30:]])
            await until(lambda: upstream.received and len(upstream.received[0]) == len(sent))
        summary = analyzer.summary()
    finally:
        await upstream.stop()
    assert bytes(upstream.received[0]) == sent
    kinds = [(f["kind"], f["requirement"], f["level"], f["direction"]) for f in summary["findings"]]
    assert ("invalid_msgpack", "BQ-FRAME-3", "FAIL", "c2s") in kinds
    assert ("frame_too_large", "BQ-FRAME-2", "FAIL", "c2s") in kinds
    assert not any(k[0] == "reqid_in_flight" for k in kinds)
    assert summary["totals"]["gaps"] >= 1


@pytest.mark.asyncio
async def test_request_and_reply_checks_cite_their_requirements():
    """A schema violation, a duplicate in-flight reqId and a reply to an unknown reqId."""
    reply = encode_frame({"ok": True, "reqId": "zzz"})
    upstream = await SinkServer(reply=reply).start()
    bad_priority = encode_frame({"cmd": "PUSH", "queue": "q", "data": {}, "priority": 10**9,
                                 "reqId": "1"})
    dup = encode_frame({"cmd": "Ping", "reqId": "1"})
    try:
        async with tapped("bunqueue", upstream.port, profile=PROFILE) as (tap, analyzer):
            await raw_exchange(tap.port, [bad_priority + dup], expect=len(reply))
        summary = analyzer.summary()
    finally:
        await upstream.stop()
    found = {(f["kind"], f["requirement"]) for f in summary["findings"]}
    assert ("request_schema", "BQ-LIMIT-4") in found
    assert any(k == "reqid_in_flight" for k, _ in found)
    assert ("reqid_unknown", "BQ-ENV-2") in found
    levels = {f["kind"]: f["level"] for f in summary["findings"]}
    assert levels["reqid_unknown"] == "NON-STRICT" and levels["unanswered"] == "INFO"


@pytest.mark.asyncio
async def test_half_close_passes_through_both_ways():
    upstream = await SinkServer().start()
    try:
        async with tapped("bunqueue", upstream.port, profile=PROFILE) as (tap, analyzer):
            frame = encode_frame({"cmd": "Ping", "reqId": "x"})
            got = await raw_exchange(tap.port, [frame])  # write_eof, then read to EOF
            assert got == b""  # the sink closes after our EOF reached it
            await until(lambda: analyzer.open_connections == 0)
        summary = analyzer.summary()
    finally:
        await upstream.stop()
    conn = summary["connections"][0]
    assert conn["close_reason"] == "eof"
    assert conn["frames"]["c2s"] == 1 and conn["unanswered"] == 1


@pytest.mark.asyncio
async def test_upstream_refusing_closes_the_client_and_is_reported():
    upstream = await SinkServer().start()
    port = upstream.port
    await upstream.stop()  # nothing listens there now
    async with tapped("bunqueue", port, profile=PROFILE) as (tap, analyzer):
        reader, writer = await asyncio.open_connection("127.0.0.1", tap.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    summary = analyzer.summary()
    assert summary["connections"][0]["close_reason"] == "upstream_refused"
    assert summary["findings"][0]["kind"] == "upstream_refused"


def _rss(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.asyncio
@pytest.mark.parametrize("forwarder", ["threads", "epoll", "loop"])
async def test_backpressure_bounds_the_taps_buffers(forwarder):
    """A client that writes 32 MiB to an upstream that reads slowly: the tap stops reading
    the client instead of buffering (most of the payload stays with the client), and every
    byte still arrives."""
    received = bytearray()
    gate = asyncio.Event()

    async def slow(reader, writer):
        await gate.wait()
        while data := await reader.read(65536):
            received.extend(data)
        writer.close()

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    payload = os.urandom(32 * 1024 * 1024)
    try:
        async with tapped("bunqueue", port, profile=PROFILE, forwarder=forwarder) as (tap, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", tap.port)
            writer.write(payload)
            await asyncio.sleep(0.5)
            # what the kernel's socket buffers hold on loopback aside, the client keeps it
            assert writer.transport.get_write_buffer_size() >= 8 * 1024 * 1024
            if forwarder == "loop":
                link = next(iter(tap.links.values()))
                buffered = link.upstream.transport.get_write_buffer_size()
                assert buffered <= 2 * tap.high_water + 1024 * 1024  # not the 32 MiB
            else:
                assert _rss(tap.process.pid) < 48 * 1024 * 1024  # holds one read, not MiBs
            gate.set()
            await writer.drain()
            writer.write_eof()
            await until(lambda: len(received) == len(payload), timeout=30)
            writer.close()
    finally:
        server.close()
    assert bytes(received) == payload


@pytest.mark.asyncio
async def test_analysis_backlog_is_bounded_and_every_byte_still_passes():
    """More traffic than the analysis keeps up with (a 64 KiB backlog bound): reading
    pauses until analysis catches up; every byte arrives and every frame is analysed."""
    upstream = await SinkServer().start()
    frames = b"".join(encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(100_000))
    analyzer = Analyzer("bunqueue", PROFILE, keep_events=False)
    tap = await TapServer(analyzer, "127.0.0.1", upstream.port, max_backlog=64 * 1024).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", tap.port)
        writer.write(frames)
        await writer.drain()
        await until(lambda: upstream.received and len(upstream.received[0]) == len(frames), 20)
        await until(lambda: analyzer.summary()["totals"]["frames"]["c2s"] == 100_000, 20)
        assert tap.throttle_count >= 1 and not tap.throttled
        writer.close()
    finally:
        await tap.stop()
        await upstream.stop()
    assert bytes(upstream.received[0]) == frames


@pytest.mark.asyncio
async def test_many_connections_at_once():
    server = await BunqueueServer(PROFILE, port=0).start()

    async def client(i: int) -> int:
        frames = b"".join(encode_frame({"cmd": "Ping", "reqId": f"{i}-{k}"}) for k in range(20))
        got = await raw_exchange(tap.port, [frames[:17], frames[17:]], expect=1)
        return len(got)

    try:
        async with tapped("bunqueue", server.port, profile=PROFILE) as (tap, analyzer):
            sizes = await asyncio.gather(*(client(i) for i in range(60)))
            await until(lambda: analyzer.open_connections == 0, 10)
        summary = analyzer.summary()
    finally:
        await server.stop()
    assert all(sizes)
    assert summary["totals"]["connections"] == 60
    assert summary["totals"]["requests"] == 1200
    # nothing fails; each connection opened with Ping, not Hello: one BQ-HELLO-1 each
    assert summary["totals"]["findings"]["FAIL"] == 0
    assert summary["totals"]["findings"]["NON-STRICT"] == 60
    assert {r["requirement"] for r in summary["requirements"] if r["level"] == "NON-STRICT"} == {"BQ-HELLO-1"}


class _BrokenAnalyzer(Analyzer):
    """An analyzer with a bug: every feed raises."""

    def feed(self, conn_id, direction, data, t_ns):
        raise RuntimeError("a bug in the analysis")


@pytest.mark.asyncio
async def test_a_failing_analysis_never_stops_the_traffic(caplog):
    server = await BunqueueServer(PROFILE, port=0).start()
    analyzer = _BrokenAnalyzer("bunqueue", PROFILE)
    tap = await TapServer(analyzer, "127.0.0.1", server.port).start()
    try:
        frames = b"".join(encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(10))
        got = await raw_exchange(tap.port, [frames])
        assert len(_frames(got)) == 10
        await until(lambda: tap.analysis_errors >= 1)
    finally:
        await tap.stop()
        await server.stop()


@pytest.mark.asyncio
async def test_pushed_job_events_pass_the_tap_without_a_finding():
    """bunqueue/2.9.5: a QueueEvents subscriber through the tap receives the events of a
    workload; the tap judges each pushed frame against job_events and finds nothing."""
    from queuewire.client.flow import QueueEvents

    profile = "bunqueue/2.9.5"
    server = await BunqueueServer(profile, port=0).start()
    try:
        async with tapped("bunqueue", server.port, profile=profile) as (tap, analyzer):
            conn = {"port": tap.port}
            seen: list[dict] = []
            events = QueueEvents("tap-events", connection=conn, profile=profile)
            events.on("*", seen.append)
            await events.start()
            try:
                async with Queue("tap-events", connection=conn, profile=profile) as queue:
                    await queue.add("a", {"x": 1})
                    async with Worker("tap-events", lambda job: {"ok": True}, connection=conn,
                                      profile=profile):
                        await until(lambda: any(e.get("eventType") == "completed" for e in seen),
                                    timeout=10)
            finally:
                await events.close()
        summary = analyzer.summary()
    finally:
        await server.stop()
    assert {"pushed", "completed"} <= {e.get("eventType") for e in seen}
    assert summary["requirements"] == [], summary["requirements"]
    assert summary["totals"]["events"] >= 2


@pytest.mark.asyncio
@pytest.mark.parametrize("forwarder", ["threads", "epoll", "loop"])
async def test_half_close_from_the_upstream_passes_through(forwarder):
    """The upstream says its piece and half-closes first: the client reads it to EOF, then
    still writes, and the upstream receives all of it before the connection ends."""
    got_upstream = bytearray()

    async def greeter(reader, writer):
        writer.write(b"hello")
        writer.write_eof()
        while data := await reader.read(65536):
            got_upstream.extend(data)
        writer.close()

    server = await asyncio.start_server(greeter, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with tapped("bunqueue", port, profile=PROFILE, forwarder=forwarder) as (tap, analyzer):
            reader, writer = await asyncio.open_connection("127.0.0.1", tap.port)
            assert await asyncio.wait_for(reader.read(), 5) == b"hello"
            frame = encode_frame({"cmd": "Ping", "reqId": "late"})
            writer.write(frame)
            writer.write_eof()
            await until(lambda: bytes(got_upstream) == frame)
            await until(lambda: analyzer.open_connections == 0)
            writer.close()
        summary = analyzer.summary()
    finally:
        server.close()
    conn = summary["connections"][0]
    assert conn["close_reason"] == "eof"
    assert conn["bytes"] == {"c2s": len(frame), "s2c": 5}


class _SlowAnalyzer(Analyzer):
    """An analyzer that holds its process's CPU (and GIL) for 0.3 s per chunk."""

    def feed(self, conn_id, direction, data, t_ns):
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
        return super().feed(conn_id, direction, data, t_ns)


@pytest.mark.asyncio
async def test_forwarding_never_waits_for_the_analysis():
    """The forwarding process moves a round trip while the analyzing process is busy for
    0.3 s per chunk (analysis at once, --analysis-lag 0): every request is answered in
    less than one chunk's analysis, and the analysis still sees every frame."""
    server, port = start_serve("bunqueue")  # a process: this one's loop is kept busy
    analyzer = _SlowAnalyzer("bunqueue", PROFILE)
    tap = await TapServer(analyzer, "127.0.0.1", port, lag_bytes=0).start()
    try:
        # the round trips are timed in a thread (it waits for this process's GIL at most a
        # switch interval, 5 ms, at a time)
        loop = asyncio.get_running_loop()
        times = await loop.run_in_executor(None, _round_trips, tap.port, 6)
        # through the in-loop forwarder each takes 0.3 to 0.6 s (one or two analyses)
        assert sorted(times)[3] < 0.1 and max(times) < 0.25, times
        await until(lambda: analyzer.summary()["totals"]["paired"] == 6, 20)
    finally:
        await tap.stop()
        stop_serve(server)


def _round_trips(port: int, n: int) -> list[float]:
    import socket

    times = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        dec = FrameDecoder(PROFILE, check_depth=False)
        for i in range(n):
            t0 = time.perf_counter()
            sock.sendall(encode_frame({"cmd": "Ping", "reqId": str(i)}))
            while not dec.feed(sock.recv(65536)):
                pass
            times.append(time.perf_counter() - t0)
    return times
