"""A hostile server under test cannot exhaust the conformance runner (issue 22, item 9).

A fake bunqueue server on 127.0.0.1 answers every frame with an endless stream of frames
(the test bounds it at 300 MB). ``conform server`` runs against it as a process under an
address-space limit; its peak RSS is read from ``getrusage(RUSAGE_CHILDREN)`` of a wrapper
whose only child it is. The runner must stay small (what one case records and reads is
bounded: head and tail of the transcript, the rest counted) and the reports must say the
transcript was cut. A second, in-process test feeds a recorded connection a length prefix
over max_frame_bytes and then garbage: that is a framing finding, never a buffer.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuewire.codecs.bunqueue import FrameEncoder

FLOOD_BYTES = 300 * 10**6  # what the fake server sends at most, over all connections
RSS_LIMIT_MB = 200         # the runner's peak RSS must stay under this
GUARD = 60.0               # seconds before the runner counts as hung
WRAPPER = ("import resource, subprocess, sys\n"
           "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
           "r = subprocess.run(sys.argv[1:])\n"
           "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
           "file=sys.stderr)\n"
           "sys.exit(r.returncode)\n")


@contextmanager
def flooding_server(small_first: int) -> Iterator[tuple[int, list[int]]]:
    """On 127.0.0.1: answers the first bytes of every connection with unsolicited frames,
    ``small_first`` small ones then 32 KB ones, until FLOOD_BYTES were sent in all or the peer
    stops reading for a second. Yields (port, [bytes sent])."""
    enc = FrameEncoder("bunqueue/v2")
    small = enc.encode({"ok": True, "reqId": "flood"}) * small_first
    block = enc.encode({"ok": True, "reqId": "flood", "pad": "x" * 32000}) * 8
    sent = [0]
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    port: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not await reader.read(1 << 16):
                return
            writer.write(small)
            sent[0] += len(small)
            while sent[0] < FLOOD_BYTES:
                writer.write(block)
                sent[0] += len(block)
                await asyncio.wait_for(writer.drain(), 1.0)
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield port[0], sent
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@pytest.mark.parametrize("small_first", [0, 6000], ids=["32KB-frames", "6000-small-first"])
def test_endless_stream_keeps_the_runner_small_and_the_report_says_cut(tmp_path, small_first):
    """Item 9: a server answering every frame with an endless stream: the runner's peak RSS
    stays under RSS_LIMIT_MB, it finishes, and report.json / report.html say the transcript
    was cut: the tester stopped reading (receive budget) and, when the stream had more events
    than a transcript keeps, "N events / B bytes omitted"."""
    out = tmp_path / "out"
    with flooding_server(small_first) as (port, sent):
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER, sys.executable, "-m", "queuewire.cli", "conform",
             "server", "--protocol", "bunqueue", "--target", f"127.0.0.1:{port}",
             "--select", "bunqueue.shape.Ping", "--timeout", "0.5", "--report-dir", str(out)],
            capture_output=True, text=True, timeout=GUARD, check=False)
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, text[-3000:]
    rss_mb = int(proc.stderr.rsplit("MAXRSS", 1)[1].split()[0]) / 1024
    assert rss_mb < RSS_LIMIT_MB, f"the runner peaked at {rss_mb:.0f} MB ({sent[0]} bytes sent)"
    doc = json.loads((out / "report.json").read_text())
    case = doc["runs"][0]["cases"][0]
    cut = case.get("transcript_cut")
    assert cut, f"no transcript_cut in {list(case)}; {len(case['transcript'])} events kept"
    assert cut["unread_connections"] == [1], cut
    notes = [e["note"] for e in case["transcript"] if e["direction"] == "note"]
    assert any("stopped reading" in n for n in notes), notes[:5]
    if small_first:
        assert cut["omitted_events"] > 0 and cut["omitted_bytes"] > 0, cut
        assert any("omitted" in n for n in notes), notes[:5]
    assert "transcript cut" in (out / "report.html").read_text()
    case_file = json.loads((out / "cases" / "bunqueue.shape.Ping.json").read_text())
    assert case_file["transcript_cut"] == cut


@pytest.mark.asyncio
async def test_oversized_frame_then_garbage_is_a_finding_not_a_buffer():
    """Item 9: a prefix declaring more than max_frame_bytes, then 12 MiB of garbage: the
    connection notes a decode error, records a bounded head of the raw bytes, counts the rest
    and stops reading at its receive budget."""
    from queuewire.conformance.model import Transcript
    from queuewire.conformance.wire import Connection
    from queuewire.spec import load_profile

    profile = load_profile("bunqueue/v2")
    junk = bytes(range(256)) * 4096  # 1 MiB

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((profile.model.max_frame_bytes + 1).to_bytes(4, "big"))
        try:
            for _ in range(12):
                writer.write(junk)
                await asyncio.wait_for(writer.drain(), 2.0)
        except (OSError, TimeoutError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        t = Transcript()
        conn = await Connection(t, 1, "127.0.0.1", port, "bunqueue", profile).open(2.0)
        for _ in range(200):
            if conn.closed_by_peer is not None or conn.stopped_reading is not None:
                break
            await asyncio.sleep(0.05)
        await conn.close()
    recorded = sum(len(e.data) for e in t.events)
    assert any(e.note.startswith("decode error") for e in t.events)
    assert recorded <= 1 << 20, f"{recorded} bytes of garbage recorded"
    assert conn.stopped_reading is not None  # 12 MiB is over the receive budget
    assert any("not recorded" in e.note for e in t.events)


def test_case_transcript_keeps_head_and_tail_with_a_marker():
    """Item 9: a case transcript keeps its first and last events (by count and by bytes) and
    one note in between saying how many events and bytes were omitted."""
    from queuewire.conformance import model

    t = model.CaseTranscript()
    n = model.TRANSCRIPT_HEAD_EVENTS + model.TRANSCRIPT_TAIL_EVENTS + 500
    for i in range(n):
        t.add(1, "recv", b"x" * 10, {"i": i})
    head, tail = model.TRANSCRIPT_HEAD_EVENTS, model.TRANSCRIPT_TAIL_EVENTS
    assert len(t.events) == head + 1 + tail
    marker = t.events[head]
    assert marker.direction == "note" and "500 events / 5000 bytes omitted" in marker.note
    assert t.events[head - 1].decoded == {"i": head - 1}
    assert t.events[head + 1].decoded == {"i": head + 500} and t.events[-1].decoded == {"i": n - 1}
    assert t.cut == {"omitted_events": 500, "omitted_bytes": 5000, "unread_connections": []}

    big = bytes(16 << 20)  # one object, added several times: no 100 MB in the test
    t = model.CaseTranscript()
    for _ in range(6):
        t.add(1, "send", big)
    kept = sum(len(e.data) for e in t.events)
    assert kept <= model.TRANSCRIPT_HEAD_BYTES + model.TRANSCRIPT_TAIL_BYTES
    assert t.cut and t.cut["omitted_events"] == 2 and t.cut["omitted_bytes"] == 2 * len(big)
