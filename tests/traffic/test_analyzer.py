"""The sans-IO core and the trace format, without sockets: segmentation does not change a
verdict, every byte lands in one frame or gap, oversized frames pass as gaps, the recorder
rotates and the reader reads back exactly what was written."""

from __future__ import annotations

import json

import pytest

from queuewire.codecs.bunqueue import encode_frame
from queuewire.codecs.quicx import QuicxEncoder
from queuewire.spec import spec_dir
from queuewire.spec._load import read_yaml
from queuewire.traffic import trace_format as trace
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.model import Latency
from queuewire.traffic.record import Recorder

PROFILE = "bunqueue/v2"


def _traffic() -> tuple[bytes, bytes]:
    requests = b"".join(encode_frame({"cmd": "Ping", "reqId": f"r{i}"}) for i in range(20))
    requests += b"\x00\x00\x00\x02\xc1\xc1"  # garbled
    requests += encode_frame({"cmd": "PUSH", "queue": "bad name!", "data": {}, "reqId": "x"})
    replies = b"".join(encode_frame({"ok": True, "reqId": f"r{i}"}) for i in range(20))
    replies += encode_frame({"ok": False, "error": "Invalid command format"})
    replies += encode_frame({"ok": False, "error": "Invalid request", "reqId": "x"})
    return requests, replies


def _run(chunk: int) -> tuple[dict, list]:
    records: list = []
    analyzer = Analyzer("bunqueue", PROFILE, sink=lambda *r: records.append(r))
    analyzer.open(1, 1)
    requests, replies = _traffic()
    for data, direction in ((requests, "c2s"), (replies, "s2c")):
        for i in range(0, len(data), chunk):
            analyzer.feed(1, direction, data[i:i + chunk], 10 + i)
    analyzer.close(1, 99)
    return analyzer.summary(), records


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 100_000])
def test_segmentation_changes_no_verdict_and_loses_no_byte(chunk):
    summary, records = _run(chunk)
    reference, _ = _run(100_000)
    assert summary["requirements"] == reference["requirements"]
    assert summary["totals"] == reference["totals"]
    assert summary["totals"]["paired"] == 22 and summary["totals"]["requests"] == 22
    kinds = {(r["requirement"], r["kind"], r["level"]) for r in summary["requirements"]}
    assert ("BQ-FRAME-3", "invalid_msgpack", "FAIL") in kinds
    assert any(k == "request_schema" for _, k, _ in kinds)
    requests, replies = _traffic()
    for direction, data in (("c2s", requests), ("s2c", replies)):
        got = b"".join(r[4] for r in records if r[0] in ("frame", "gap") and r[2] == direction)
        assert got == data


def test_an_oversized_frame_passes_as_gaps_and_framing_resumes():
    analyzer = Analyzer("quicx", "quicx/v1", max_frame=64)
    enc = QuicxEncoder("quicx/v1")
    big = enc.submit("t", b"x" * 500)
    small = enc.submit("t", b"y")
    analyzer.open(1, 0)
    data = small + big + small
    for i in range(0, len(data), 50):
        analyzer.feed(1, "c2s", data[i:i + 50], i)
    summary = analyzer.summary()
    conn = summary["connections"][0]
    assert conn["frames"]["c2s"] == 2 and conn["gaps"] >= 1


def test_unpaired_quicx_answers_are_info():
    analyzer = Analyzer("quicx", "quicx/v1")
    enc = QuicxEncoder("quicx/v1")
    analyzer.open(1, 0)
    analyzer.feed(1, "s2c", enc.ok(7) + enc.pong(), 5)
    levels = {f["kind"]: f["level"] for f in analyzer.summary()["findings"]}
    assert levels == {"answer_unpaired": "INFO", "pong_unpaired": "INFO"}


def test_every_trace_spec_entry_has_a_doc():
    tree = read_yaml(spec_dir() / "trace.yaml")
    missing = []
    for section in ("file_header", "record_header"):
        missing += [f"{section}.{f['id']}" for f in tree[section]["fields"] if not f.get("doc")]
    for section in ("meta_keys", "record_types", "directions", "gap_reasons"):
        missing += [f"{section}.{k}" for k, v in tree[section].items() if not v.get("doc")]
    assert not missing
    fmt = trace.trace_format()
    assert fmt.record_head.size == 24 and fmt.file_head.size == 14


def test_recorder_rotates_and_the_reader_reads_back(tmp_path):
    rec = Recorder(tmp_path, protocol="bunqueue", profile=PROFILE, rotate_bytes=200, run="R")
    rec.write("open", 3, "none", 1, json.dumps({"client": "c"}).encode())
    payloads = [bytes([i]) * 60 for i in range(10)]
    for i, p in enumerate(payloads):
        rec.write("frame", 3, "c2s" if i % 2 else "s2c", 100 + i, p)
    rec.write("gap", 3, "c2s", 200, b"zz", "truncated")
    rec.write("close", 3, "none", 300, b'{"reason":"eof"}')
    rec.close()
    files = trace.trace_files(tmp_path)
    assert len(files) > 3 and files[0].name == "R-c0000000003-00000.qwtrace"
    with open(files[1], "rb") as fh:
        assert trace.read_header(fh)["sequence"] == 1
    records = list(trace.read_dir(tmp_path))
    assert [r.type for r in records] == ["open"] + ["frame"] * 10 + ["gap", "close"]
    assert [r.payload for r in records[1:11]] == payloads
    assert records[11].detail == "truncated" and records[0].json() == {"client": "c"}
    assert records[-1].json() == {"reason": "eof"}
    # a file cut inside a record ends at the last whole record
    last = files[-1]
    last.write_bytes(last.read_bytes()[:-3])
    before = [r.type for r in trace.read_file(last)]
    assert "close" not in before


def test_reader_refuses_what_is_not_a_trace(tmp_path):
    bad = tmp_path / "x.qwtrace"
    bad.write_bytes(b"NOTATRACE" * 3)
    with pytest.raises(trace.TraceError):
        list(trace.read_file(bad))


def test_latency_histogram_percentiles_are_close():
    lat = Latency()
    values = list(range(1_000, 1_001_000, 1_000))
    for v in values:
        lat.add(v)
    assert abs(lat.percentile(0.5) - 500_000) / 500_000 < 0.13
    assert abs(lat.percentile(0.99) - 990_000) / 990_000 < 0.13
    assert lat.summary()["max_us"] == 1000.0


def test_pushed_job_events_are_judged_against_the_profile_s_event_frame():
    """bunqueue/2.9.5 pushes job events (BQ-EVENT-102): a valid one answers nothing and is no
    finding; a malformed one is a finding citing the job_events requirement; under
    bunqueue/v2, which has no events, the same frame answers nothing and is INFO."""
    good = encode_frame({"type": "event", "event": {"eventType": "pushed", "queue": "q",
                                                    "jobId": "7", "timestamp": 1.5e12}})
    bad = encode_frame({"type": "event", "event": {"eventType": "exploded", "queue": 5}})
    a = Analyzer("bunqueue", "bunqueue/2.9.5")
    a.open(1, 1)
    assert a.feed(1, "s2c", good, 2) == []
    found = a.feed(1, "s2c", bad, 3)
    assert found and {f.requirement for f in found} == {"BQ-EVENT-102"}
    assert {f.kind for f in found} == {"event_schema"} and {f.level for f in found} == {"NON-STRICT"}
    assert a.summary()["totals"]["paired"] == 0
    v2 = Analyzer("bunqueue", "bunqueue/v2")
    v2.open(1, 1)
    assert [f.level for f in v2.feed(1, "s2c", good, 2)] == ["INFO"]
