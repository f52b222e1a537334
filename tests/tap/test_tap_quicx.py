"""The tap in front of the reference quicx daemon: producers, workers (with heartbeats) and a
monitor through it without a false verdict; pairs by order and task id; a refused frame."""

from __future__ import annotations

import asyncio

import pytest
from tap_helpers import SinkServer, raw_exchange, tapped, until

from queuewire.client.quicx import QuicxMonitor, QuicxProducer, QuicxWorker
from queuewire.codecs.quicx import QuicxEncoder, decode
from queuewire.reference_server.quicx import QuicxServer
from queuewire.spec import load_profile, profile_names
from queuewire.traffic import trace_format as trace

PROFILES = profile_names("quicx")


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_reference_workload_has_no_false_verdict(profile, tmp_path):
    spec = load_profile(profile).model
    async with asyncio.timeout(30):
        async with QuicxServer(profile, port=0) as server:
            async with tapped("quicx", server.port, profile=profile, record=tmp_path) as (tap, analyzer):
                seen = []

                async def work(task):
                    seen.append(task.task_id)
                    await asyncio.sleep(0.02)

                def explode(task):
                    raise ValueError("on purpose")

                async with QuicxWorker(port=tap.port, profile=profile, concurrency=2,
                                       heartbeat_interval=0.05,
                                       handlers={"work": work, "explode": explode}):
                    async with QuicxProducer(port=tap.port, profile=profile) as producer:
                        results = await asyncio.gather(
                            *(producer.submit("work", b"p" * i) for i in range(10)),
                            producer.submit("explode", b""))
                    await until(lambda: server.stats().done + server.stats().failed == 11, 10)
                    await asyncio.sleep(0.15)  # a few idle heartbeats
                if spec.flag("stats_on_tcp"):
                    async with QuicxMonitor(port=tap.port, profile=profile) as monitor:
                        await monitor.stats()
            summary = analyzer.summary()
    assert len(results) == 11 and len(seen) == 10
    totals = summary["totals"]
    assert summary["requirements"] == [], summary["requirements"]
    assert totals["findings"] == {"FAIL": 0, "NON-STRICT": 0, "INFO": 0}
    commands = summary["commands"]
    assert commands["MSG_SUBMIT"]["requests"] == 11
    # MSG_OK pairs every submission; where results are forwarded, DONE/FAILED pair again
    forwarded = 11 if spec.flag("forward_results_to_producer") else 0
    assert commands["MSG_SUBMIT"]["paired"] == 11 + forwarded
    assert commands["MSG_TASK"]["paired"] == 11            # each task answered by its result
    assert commands["MSG_READY"]["paired"] >= 1
    if spec.flag("stats_on_tcp"):
        assert commands["MSG_STATS"]["paired"] == 1
    if "MSG_HEARTBEAT" in commands:
        hb = commands["MSG_HEARTBEAT"]
        assert hb["paired"] >= hb["requests"] - 2  # one may be in flight at close per link
    assert totals["gaps"] == 0
    # the recording re-decodes into the frames the tap counted
    by_conn = {c["conn_id"]: c for c in summary["connections"]}
    for (conn_id, direction), data in trace.streams(tmp_path).items():
        role = "daemon" if direction == "c2s" else ["producer", "worker", "monitor"]
        assert len(decode(profile, data, role)) == by_conn[conn_id]["frames"][direction]


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_refused_frame_is_reported_forwarded_and_paired_with_the_error(profile):
    enc = QuicxEncoder(profile)
    spec = load_profile(profile).model
    bad_version = enc.frame(spec.message("MSG_SUBMIT").code, b"\x01a", version=0x7F)
    submit = enc.submit("t", b"x")
    async with asyncio.timeout(20):
        async with QuicxServer(profile, port=0) as server:
            async with tapped("quicx", server.port, profile=profile) as (tap, analyzer):
                got = await raw_exchange(tap.port, [bad_version + submit[:3], submit[3:]],
                                         expect=1)
                await until(lambda: analyzer.summary()["totals"]["paired"] >= 2 or
                            analyzer.open_connections == 0)
            summary = analyzer.summary()
    assert got
    found = {(f["kind"], f["requirement"], f["level"]) for f in summary["findings"]}
    assert ("bad_version", "QX-HDR-3", "FAIL") in found
    assert summary["commands"]["(refused)"]["errors"] == 1
    assert summary["commands"]["MSG_SUBMIT"]["paired"] >= 1


@pytest.mark.asyncio
async def test_direction_rules_and_byte_exact_pass_through(tmp_path):
    """A client sends MSG_OK (a daemon's message) and an unknown opcode; a daemon (a sink
    that answers MSG_SUBMIT) sends it back: both directions judged by the codec's direction
    rules, every byte passed on and recorded as it was."""
    profile = "quicx/v1"
    enc = QuicxEncoder(profile)
    upstream = await SinkServer(reply=enc.submit("x", b"")).start()
    sent = enc.ok(5) + enc.frame(0x7E, b"??") + enc.ready()
    async with asyncio.timeout(20):
        async with tapped("quicx", upstream.port, profile=profile, record=tmp_path) as (tap, analyzer):
            got = await raw_exchange(tap.port, [sent], expect=len(enc.submit("x", b"")))
            await until(lambda: upstream.received and len(upstream.received[0]) == len(sent))
        summary = analyzer.summary()
    await upstream.stop()
    assert bytes(upstream.received[0]) == sent
    streams = trace.streams(tmp_path)
    assert streams[(1, "c2s")] == sent and streams[(1, "s2c")] == got
    found = {(f["kind"], f["direction"], f["requirement"]) for f in summary["findings"]}
    assert ("wrong_direction", "c2s", "QX-DIR-1") in found       # MSG_OK to the daemon
    assert ("unknown_type", "c2s", "QX-ERR-3") in found
    assert ("wrong_direction", "s2c", "QX-DIR-1") in found       # MSG_SUBMIT to a client
    levels = {f["kind"]: f["level"] for f in summary["findings"]}
    assert levels["wrong_direction"] == "NON-STRICT"                   # a decision: never a FAIL
