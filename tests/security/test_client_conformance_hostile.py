"""Issue 22, item 9 (client-conformance part): a hostile client under test must not exhaust a
``queuewire conform client`` run.

* A testee that writes a line over the testee contract's line limit: that scenario is an ERROR
  naming the limit, the testee is killed and started again, the next scenario still runs, and
  the run ends with the exit status of an ERROR, without a traceback.
* A client that floods the conformance server with pipelined frames: the server answers at
  most the spec's ``max_in_flight`` of one connection at a time (the rest wait, unread, in the
  socket: backpressure), so the number of asyncio tasks stays bounded; what the scenario
  records is bounded too (head and tail, an omitted-marker between), so memory stays bounded;
  and the scenario is still judged (every frame checked, a verdict that is not ERROR).

Every test runs on 127.0.0.1 with a guard timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queuewire.conformance.client.runner import run_client
from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile

QUEUEWIRE = Path(sys.executable).with_name("queuewire")
GUARD = 60.0          # seconds: a hang fails the test instead of stalling the suite
FLOOD_FRAMES = 100_000   # pipelined at once: 2000 times max_in_flight

HUGE_LINE_TESTEE = """\
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    if req["scenario"] == "bunqueue.client.basic":
        sys.stderr.write("about to write a 17 MiB line\\n"); sys.stderr.flush()
        sys.stdout.write("x" * (17 * 1024 * 1024) + "\\n"); sys.stdout.flush()
        continue
    results = [{"ok": False, "error": "not implemented", "error_type": "other"}
               for _ in req["actions"]]
    print(json.dumps({"scenario": req["scenario"], "results": results}), flush=True)
"""

FLOOD_TESTEE = """\
import json, socket, sys, threading
import msgpack

N = int(sys.argv[1])

def frame(msg):
    body = msgpack.packb(msg)
    return len(body).to_bytes(4, "big") + body

for line in sys.stdin:
    req = json.loads(line)
    host, _, port = req["target"].rpartition(":")
    queue = req["actions"][0]["queue"]
    blob = frame({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"}) + b"".join(
        frame({"cmd": "Count", "queue": queue, "reqId": str(i)}) for i in range(N))
    sock = socket.create_connection((host, int(port)), timeout=40)
    replies = [0]

    def read():
        buf = bytearray()
        while replies[0] < N + 1:
            try:
                data = sock.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            buf += data
            at = 0
            while len(buf) - at >= 4:
                n = int.from_bytes(buf[at:at + 4], "big")
                if len(buf) - at < 4 + n:
                    break
                at += 4 + n
                replies[0] += 1
            del buf[:at]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sock.sendall(blob)      # pipelined: every frame at once, without waiting for a reply
    reader.join(40)
    sock.close()
    sys.stderr.write(f"flood: {replies[0]} replies\\n")
    results = [{"ok": False, "error": f"flooded ({replies[0]} replies)", "error_type": "other"}
               for _ in req["actions"]]
    print(json.dumps({"scenario": req["scenario"], "results": results}), flush=True)
"""


def test_a_testee_line_over_the_limit_is_that_scenarios_error_and_the_run_goes_on(
        tmp_path: Path) -> None:
    """Item 9: a testee line over 16 MiB ended the whole run with a traceback."""
    script = tmp_path / "huge_line_testee.py"
    script.write_text(HUGE_LINE_TESTEE)
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [str(QUEUEWIRE), "conform", "client", "--protocol", "bunqueue", "--listen", "127.0.0.1:0",
         "--scenario", "bunqueue.client.basic", "--scenario", "bunqueue.client.auth",
         "--testee", f"{sys.executable} {script}", "--json", str(report)],
        check=False, capture_output=True, text=True, timeout=GUARD, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    (run,) = json.loads(report.read_text())["runs"]
    cases = {c["id"]: c for c in run["cases"]}
    basic, auth = cases["bunqueue.client.basic"], cases["bunqueue.client.auth"]
    assert basic["verdict"] == "ERROR", basic["verdict"]
    assert "16 MiB" in basic["error"] and "line" in basic["error"], basic["error"]
    assert len(basic["error"]) < 4000     # the offending line is not pasted into the report
    # the next scenario ran against a restarted testee and was judged
    assert auth["verdict"] not in ("ERROR", "SKIP"), auth
    assert auth["checks"], auth


def _rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.asyncio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the RSS")
async def test_a_pipelined_flood_costs_bounded_tasks_and_memory_and_is_still_judged(
        tmp_path: Path) -> None:
    """Item 9: the conformance server started a task per frame without bound."""
    script = tmp_path / "flood_testee.py"
    script.write_text(FLOOD_TESTEE)
    profile = load_profile("bunqueue/v2")
    max_in_flight = int(profile.limit("max_in_flight").value)
    chosen = select_scenarios(load_scenarios("bunqueue", profile), ["bunqueue.client.basic"])
    samples: list[tuple[int, float]] = []
    base_tasks, base_rss = len(asyncio.all_tasks()), _rss_mib()

    async def sample() -> None:
        while True:
            samples.append((len(asyncio.all_tasks()), _rss_mib()))
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    try:
        async with asyncio.timeout(GUARD):
            run = await run_client(Testee(f"{sys.executable} {script} {FLOOD_FRAMES}",
                                          label="flood"), chosen, profile)
    finally:
        sampler.cancel()
    (result,) = run.results
    peak_tasks = max(n for n, _ in samples) - base_tasks
    peak_rss = max(r for _, r in samples) - base_rss
    print(f"flood of {FLOOD_FRAMES} frames: {result.duration:.1f} s, peak tasks +{peak_tasks}, "
          f"peak RSS +{peak_rss:.0f} MiB, {len(result.transcript.events)} events recorded")
    # the scenario was judged: every frame went through the checker, the verdict is not ERROR
    assert result.verdict is not Verdict.ERROR, result.error
    framing = next(c for c in result.checks if c.requirement == "BQ-FRAME-1")
    assert framing.ok and f"{FLOOD_FRAMES + 1} frame(s)" in framing.message, framing.message
    # bounded tasks: at most max_in_flight answers of the one connection, plus the run's own
    assert peak_tasks <= max_in_flight + 10, peak_tasks
    # bounded records: the transcript keeps head and tail with an explicit omitted-marker
    assert len(result.transcript.events) <= 1000, len(result.transcript.events)
    assert any("omitted" in e.note for e in result.transcript.events if e.direction == "note")
    # bounded memory (the unbounded server grew by 316 MiB on a flood of 200,000 frames)
    assert peak_rss < 64, peak_rss


ODD_TYPES_TESTEE = """\
import json, socket, sys
import msgpack

def frame(msg):
    body = msgpack.packb(msg)
    return len(body).to_bytes(4, "big") + body

def replies(sock, want):
    buf, got = b"", []
    while len(got) < want:
        data = sock.recv(65536)
        if not data:
            break
        buf += data
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            n = int.from_bytes(buf[:4], "big")
            got.append(msgpack.unpackb(buf[4:4 + n], strict_map_key=False))
            buf = buf[4 + n:]
    return got

for line in sys.stdin:
    req = json.loads(line)
    host, _, port = req["target"].rpartition(":")
    queue = req["actions"][0]["queue"]
    with socket.create_connection((host, int(port)), timeout=3) as sock:
        sock.sendall(frame({"cmd": "Hello", "protocolVersion": 2, "reqId": "1"})
                     + frame({"cmd": "PUSH", "queue": queue, "data": {1: "int key", "b": 2},
                              "reqId": "2"}))
        replies(sock, 2)
        sock.sendall(frame({"cmd": "PULL", "queue": queue, "owner": "w", "reqId": "3"}))
        (pulled,) = replies(sock, 1)
        job = str((pulled.get("job") or {}).get("id"))
        sock.sendall(frame({"cmd": "ACK", "id": job, "token": ["not", "a", "string"], "reqId": "4"})
                     + frame({"cmd": "ACKB", "ids": 5, "tokens": 6, "reqId": "5"})
                     + frame({"cmd": "PUSHB", "queue": queue, "jobs": 7, "reqId": "6"})
                     + frame({"cmd": "JobHeartbeatB", "ids": 8, "reqId": "7"}))
        replies(sock, 4)
    results = [{"ok": False, "error": "odd types", "error_type": "other"} for _ in req["actions"]]
    print(json.dumps({"scenario": req["scenario"], "results": results}), flush=True)
"""


@pytest.mark.asyncio
async def test_fields_of_the_wrong_type_are_judged_not_a_crash(tmp_path: Path) -> None:
    """Item 9 (a hostile client ends the run): an ACK whose token is a list, an ACKB / PUSHB /
    JobHeartbeatB whose list field is a number, data with an integer key, crashed the checker
    and the judgements (TypeError) and so the whole run."""
    script = tmp_path / "odd_types_testee.py"
    script.write_text(ODD_TYPES_TESTEE)
    profile = load_profile("bunqueue/v2")
    # their judgements: acked_with_tokens (lock-expired), no_duplicate_push (rate-limited)
    chosen = select_scenarios(load_scenarios("bunqueue", profile),
                              ["bunqueue.client.lock-expired", "bunqueue.client.rate-limited"])
    async with asyncio.timeout(GUARD):
        run = await run_client(Testee(f"{sys.executable} {script}", label="odd"), chosen,
                               profile)
    assert [r.verdict for r in run.results] == [Verdict.FAIL, Verdict.FAIL], \
        [(r.case.id, r.verdict, r.error) for r in run.results]
    lock = next(r for r in run.results if r.case.id == "bunqueue.client.lock-expired")
    bad = [c for c in lock.failed_checks if c.requirement == "BQ-LOCK-2"]
    assert any(c.kind == "lock-token" and c.actual["token"] == ["not", "a", "string"]
               for c in bad), bad                     # the list token, judged by the checker
    assert any(c.kind == "behaviour" for c in bad), bad   # and by the judgement
    pushes = next(r for r in run.results if r.case.id == "bunqueue.client.rate-limited")
    assert any(c.requirement == "BQ-CLIENT-6" and c.ok for c in pushes.checks)  # judged


@pytest.mark.asyncio
async def test_a_connection_flood_is_served_up_to_a_bound() -> None:
    """Item 9 (what a hostile client's flood costs must be bounded): every connection got a
    handler and its buffers, without bound."""
    from queuewire.conformance.client.checker import ClientChecker
    from queuewire.conformance.client.listener import MAX_CONNECTIONS
    from queuewire.conformance.client.records import BoundedTranscript
    from queuewire.conformance.client.server import ConformanceServer

    profile = load_profile("bunqueue/v2")
    server = await ConformanceServer(profile).start()
    transcript = BoundedTranscript()
    server.begin({}, ClientChecker(profile), transcript)
    base = len(asyncio.all_tasks())
    writers = []
    try:
        async with asyncio.timeout(GUARD):
            for _ in range(MAX_CONNECTIONS + 100):
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writers.append(writer)
            await asyncio.sleep(0.2)
            peak = len(asyncio.all_tasks()) - base
    finally:
        for writer in writers:
            writer.close()
        server.end()
        await server.stop()
    assert peak <= MAX_CONNECTIONS + 2, peak
    assert any("MAX_CONNECTIONS" in e.note for e in transcript.events)
