"""Profiles found, not assumed (issue 24 item 4), against the REAL bunqueue 2.9.5 server.

``queuewire tap`` (a process, no ``--profile``) stands between a small workload and the real
server (npm ``bunqueue`` 2.9.5 under the ``bun`` binary of tests/interop, loopback only): a
subscriber (Hello, SubscribeEvents) and a worker (Hello, PUSH, PULL, ACK) whose jobs make the
server push ``pushed``, ``pulled`` and ``completed`` event frames to the subscriber. The tap
records the connections; the recorded bytes are written as a pcap (the TCP segments
around them are synthetic: no packet capture tool is needed) and imported with
``queuewire trace import-pcap``, with and without ``--profile``, and analysed with ``queuewire
trace analyze``. Each tool must name bunqueue/2.9.5 with its evidence, and find no
``reply_unpaired`` in the pushed events, unless told another profile, which it must say.
Skipped, with the reason, where node or the bun/bunqueue install is missing.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.spec import load_profile, profile_names
from queuewire.trace.pcap import conversation, import_pcap, write_pcap, write_segments
from queuewire.traffic import trace_format as trace
from serve_process import REAL_BUNQUEUE_MISSING, start_real_bunqueue, stop_serve

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or REAL_BUNQUEUE_MISSING is not None,
    reason=REAL_BUNQUEUE_MISSING or "node is missing: the real bunqueue server cannot be started")

JOBS = 10
EVENT_TYPE = load_profile("bunqueue/2.9.5").tree["job_events"]["frame"]["properties"]["type"]["const"]
EVENTS_PER_JOB = ("pushed", "pulled", "completed")
EVENTS = JOBS * len(EVENTS_PER_JOB)
#: the profiles that speak protocol 3 (bunqueue/2.9.5, and bunqueue/v3 over it) and the others
V3_SPEAKERS = [n for n in profile_names("bunqueue") if load_profile(n).model.protocol_version == 3]
OTHERS = [n for n in profile_names("bunqueue") if n not in V3_SPEAKERS]
DETECTED = ("profile: bunqueue/2.9.5 (detected: Hello reply: protocolVersion 3 (server bunqueue, "
            f"version 2.9.5): {', '.join(V3_SPEAKERS)}: speaks protocol version 3; not "
            f"{', '.join(OTHERS)}")


class _Peer:
    """A bunqueue connection that sends requests with reqIds and reads replies and events."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder("bunqueue/2.9.5", check_depth=False)
        self.frames: list[Any] = []
        self.sent = 0

    @classmethod
    async def open(cls, port: int) -> _Peer:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def _more(self) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), 10)
        assert data, "the connection closed"
        self.frames += self.decoder.feed(data)

    async def call(self, **msg: Any) -> dict:
        self.sent += 1
        rid = str(self.sent)
        self.writer.write(encode_frame({**msg, "reqId": rid}))
        await self.writer.drain()
        while True:
            for f in self.frames:
                if isinstance(f, dict) and f.get("reqId") == rid:
                    self.frames.remove(f)
                    assert f.get("ok") is True, f
                    return f
            await self._more()

    async def events(self, count: int) -> list[dict]:
        while len(got := [f for f in self.frames if f.get("type") == EVENT_TYPE]) < count:
            await self._more()
        return got

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def _workload(port: int) -> list[dict]:
    """A subscriber, then a worker; returns the events the subscriber heard."""
    listener = await _Peer.open(port)
    await listener.call(cmd="Hello", protocolVersion=3, capabilities=["pipelining"])
    await listener.call(cmd="SubscribeEvents", queue="detect-q")
    worker = await _Peer.open(port)
    await worker.call(cmd="Hello", protocolVersion=3, capabilities=["pipelining"])
    for i in range(JOBS):
        await worker.call(cmd="PUSH", queue="detect-q", data={"i": i})
    for i in range(JOBS):
        job = (await worker.call(cmd="PULL", queue="detect-q"))["job"]
        await worker.call(cmd="ACK", id=job["id"], result={"i": i})
    events = await listener.events(EVENTS)
    await worker.close()
    await listener.close()
    return events


@pytest.fixture(scope="module")
def tapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The workload through ``queuewire tap`` (no --profile) in front of the real server:
    the tap's output and JSON summary, its recording, and the recording as a pcap."""
    tmp = tmp_path_factory.mktemp("real295")
    proc, port, _http = start_real_bunqueue(tmp / "server.log")
    rec, summary_path = tmp / "rec", tmp / "tap.json"
    tap = subprocess.Popen([sys.executable, "-m", "queuewire.cli", "tap", "--protocol",
                            "bunqueue", "--listen", "127.0.0.1:0", "--upstream",
                            f"127.0.0.1:{port}", "--record", str(rec), "--json",
                            str(summary_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert tap.stdout is not None
        line = tap.stdout.readline()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(tap.stdout.read()), daemon=True)
        reader.start()
        events = asyncio.run(_workload(int(match.group(1))))
        tap.send_signal(signal.SIGINT)
        assert tap.wait(timeout=30) == 0
        reader.join(timeout=10)
    finally:
        if tap.poll() is None:
            tap.kill()
        stop_serve(proc)
    # the recording as a capture: each connection's bytes, as they crossed, in TCP segments
    conns: dict[int, list[tuple[str, bytes, int]]] = {}
    for r in trace.read_dir(rec):
        if r.type == "frame":
            conns.setdefault(r.conn_id, []).append((r.direction, r.payload, r.t_ns))
    pcap = write_pcap(tmp / "cap.pcap", [conns[c] for c in sorted(conns)], port=port, mss=1400)
    return {"tmp": tmp, "port": port, "output": line + "".join(rest), "events": events,
            "summary": json.loads(summary_path.read_text()), "rec": rec, "pcap": pcap,
            "conns": conns}


def _kinds(requirements: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in requirements:
        out[r["kind"]] = out.get(r["kind"], 0) + r["count"]
    return out


def test_the_real_server_pushed_every_event(tapped):
    assert sorted(e["event"]["eventType"] for e in tapped["events"]) == \
        sorted(EVENTS_PER_JOB * JOBS)


def test_the_tap_names_2_9_5_live_and_records_under_it(tapped):
    assert DETECTED in tapped["output"], tapped["output"]
    summary = tapped["summary"]
    assert summary["profile"] == "bunqueue/2.9.5"
    assert summary["profile_choice"]["how"] == "detected"
    assert summary["totals"]["events"] == EVENTS
    assert "reply_unpaired" not in _kinds(summary["requirements"])
    for f in trace.trace_files(tapped["rec"]):
        with open(f, "rb") as fh:
            assert trace.read_header(fh)["profile"] == "bunqueue/2.9.5"


def test_import_pcap_names_2_9_5_for_its_traffic(tapped):
    out = tapped["tmp"] / "imported"
    result = CliRunner().invoke(main, ["trace", "import-pcap", str(tapped["pcap"]), "--port",
                                       str(tapped["port"]), "--protocol", "bunqueue", "--out",
                                       str(out)])
    assert result.exit_code == 0, result.output
    assert DETECTED in result.output, result.output
    stats = import_pcap(tapped["pcap"], port=tapped["port"], out_dir=tapped["tmp"] / "api",
                        protocol="bunqueue")
    assert stats.profile_choice["profile"] == "bunqueue/2.9.5"
    assert stats.summary["totals"]["events"] == EVENTS
    assert "reply_unpaired" not in _kinds(stats.summary["requirements"])
    # analysed without --profile: the traffic names it again
    analysed = tapped["tmp"] / "analysis"
    result = CliRunner().invoke(main, ["trace", "analyze", str(out), "--out", str(analysed),
                                       "--engine", "local", "--no-html"])
    assert result.exit_code == 0, result.output
    assert DETECTED in result.output, result.output
    summary = json.loads((analysed / "summary.json").read_text())
    assert summary["profile"] == "bunqueue/2.9.5"
    assert summary["profile_choice"]["how"] == "detected"
    assert "reply_unpaired" not in _kinds(summary["requirements"])


def test_profile_overrides_and_says_so(tapped):
    out = tapped["tmp"] / "as-v2"
    result = CliRunner().invoke(main, ["trace", "import-pcap", str(tapped["pcap"]), "--port",
                                       str(tapped["port"]), "--protocol", "bunqueue",
                                       "--profile", "bunqueue/v2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "profile: bunqueue/v2 (from --profile)" in result.output
    stats = import_pcap(tapped["pcap"], port=tapped["port"], out_dir=tapped["tmp"] / "api-v2",
                        protocol="bunqueue", profile="bunqueue/v2")
    assert stats.profile_choice["line"] == "bunqueue/v2 (from --profile)"
    # judged as told: bunqueue/v2 knows no pushed events, so each is an unpaired frame
    assert _kinds(stats.summary["requirements"])["reply_unpaired"] == EVENTS
    # the recording names bunqueue/v2; analysed without --profile, the traffic decides
    analysed = tapped["tmp"] / "analysis-v2"
    result = CliRunner().invoke(main, ["trace", "analyze", str(out), "--out", str(analysed),
                                       "--engine", "local", "--no-html"])
    assert result.exit_code == 0, result.output
    assert DETECTED in result.output and "but the recordings name bunqueue/v2" in result.output


def test_a_capture_started_after_the_subscription_is_named_by_the_pushed_events(tapped):
    """Only the subscriber's connection, from after its SubscribeEvents reply (no SYN, no
    Hello): the pushed event frames are the evidence."""
    listener = tapped["conns"][1]
    replies = [i for i, (d, _, _) in enumerate(listener) if d == "s2c"]
    later = listener[replies[1] + 1:]           # after the Hello and SubscribeEvents replies
    assert later and all(d == "s2c" for d, _, _ in later)
    path = write_segments(tapped["tmp"] / "late.pcap",
                          conversation(later, port=tapped["port"], handshake=False))
    result = CliRunner().invoke(main, ["trace", "import-pcap", str(path), "--port",
                                       str(tapped["port"]), "--protocol", "bunqueue", "--out",
                                       str(tapped["tmp"] / "late")])
    assert result.exit_code == 0, result.output
    # decided at the first one (the rest are judged under the profile it names)
    with_events = [n for n in profile_names("bunqueue") if "job_events" in load_profile(n).tree]
    without = [n for n in profile_names("bunqueue") if n not in with_events]
    assert (f"profile: bunqueue/2.9.5 (detected: pushed frames without reqId of type "
            f"{EVENT_TYPE}: {', '.join(with_events)}: defines job_events; not "
            f"{', '.join(without)})") in result.output
    stats = import_pcap(path, port=tapped["port"], out_dir=tapped["tmp"] / "late-api",
                        protocol="bunqueue")
    assert stats.frames["s2c"] == EVENTS and stats.summary["totals"]["events"] == EVENTS
    assert not stats.summary["requirements"]
