"""The trace decoder and the local engine, without Spark: a recorded workload analyses to the
counts the tap saw live; injected violations come out with the tap's requirement ids; a
recording rotated into many files (pairs split across them) analyses like an unrotated one;
a pcap of the same bytes like the recording."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from trace_helpers import (
    bunqueue_workload,
    quicx_workload,
    record_chunks,
    tap_figures,
    trace_figures,
)

from queuewire.codecs.bunqueue import encode_frame
from queuewire.codecs.quicx import QuicxEncoder
from queuewire.trace import loose
from queuewire.trace.analyze import analyze, find_inputs
from queuewire.trace.decode import FileDecoder
from queuewire.trace.pcap import write_pcap
from queuewire.traffic.trace_format import TraceError, trace_files

BQ = "bunqueue/v2"
QUEUEWIRE = str(Path(sys.executable).with_name("queuewire"))


def _local(inputs, out) -> dict:
    return analyze(inputs if isinstance(inputs, list) else [inputs], out, engine="local")


def _table(out, name):
    return pq.read_table(out / name)


@pytest.mark.asyncio
@pytest.mark.parametrize("rotate", [None, 600])
async def test_bunqueue_workload_analyses_to_the_counts_the_tap_saw(tmp_path, rotate):
    tap = await bunqueue_workload(tmp_path / "rec", rotate=rotate)
    files = trace_files(tmp_path / "rec")
    if rotate:
        assert len(files) > 2 * tap["totals"]["connections"]   # really rotated
    summary = _local(tmp_path / "rec", tmp_path / "out")
    assert trace_figures(summary) == tap_figures(tap)
    assert summary["verdict"] == "PASS" and summary["requirements"] == []
    assert summary["totals"]["requests"] == summary["totals"]["pairs"] > 10
    # what the workload did: 28 bulk jobs in one PUSHB, 2 PUSHes, every job pulled and settled
    cmds = summary["commands"]
    assert cmds["PUSH"]["requests"] == 2 and cmds["PUSHB"]["requests"] == 1
    assert cmds["Hello"]["requests"] == summary["totals"]["connections"]
    if rotate:
        assert summary["totals"]["split_pairs"] > 0
    else:
        assert summary["totals"]["split_pairs"] == 0
    # the tables: every frame a row, every pair a row, latencies from the recording
    frames = _table(tmp_path / "out", "frames")
    assert frames.num_rows == sum(tap["totals"]["frames"].values())
    pairs = _table(tmp_path / "out", "pairs").to_pylist()
    assert len(pairs) == tap["totals"]["paired"]
    assert all(p["answered_ns"] >= p["sent_ns"] for p in pairs)
    assert sum(p["split"] for p in pairs) == summary["totals"]["split_pairs"]
    assert summary["versions"] == [{"version": "2", "frames": summary["totals"]["connections"]}]
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summary
    assert "<svg" in (tmp_path / "out" / "summary.html").read_text()


@pytest.mark.asyncio
@pytest.mark.parametrize("rotate", [None, 300])
async def test_quicx_workload_pairs_by_order_and_task_id_across_files(tmp_path, rotate):
    tap = await quicx_workload(tmp_path / "rec", rotate=rotate)
    summary = _local(tmp_path / "rec", tmp_path / "out")
    assert trace_figures(summary) == tap_figures(tap)
    assert summary["commands"]["MSG_SUBMIT"]["requests"] == 12
    assert summary["commands"]["MSG_TASK"]["pairs"] == 12     # each task by its MSG_DONE
    assert {v["version"] for v in summary["versions"]} == {"1"}
    if rotate:
        assert summary["totals"]["split_pairs"] > 0


def _violating_bunqueue() -> list[list[tuple[str, bytes]]]:
    ping = encode_frame({"cmd": "Ping", "reqId": "1"})
    return [
        [("c2s", encode_frame({"cmd": "PUSH", "reqId": "a"})),          # no queue, no data
         ("s2c", encode_frame({"ok": False, "error": "queue is required", "reqId": "a"})),
         ("c2s", ping), ("c2s", ping),                                  # reqId reused in flight
         ("s2c", encode_frame({"ok": True, "reqId": "1"})),
         ("s2c", encode_frame({"ok": True, "reqId": "1"})),
         ("s2c", encode_frame({"ok": True, "reqId": "zz"})),            # answers nothing
         ("c2s", b"\x00\x00\x00\x03\xc1\xc1\xc1"),                       # not MessagePack
         ("s2c", encode_frame({"ok": False, "error": "Invalid command format"})),
         ("c2s", encode_frame({"cmd": "GetJobCounts", "queue": "q", "reqId": "w"}))],  # unanswered
        [("c2s", encode_frame({"cmd": "Ping", "reqId": 7})),             # reqId not a string
         ("s2c", encode_frame({"ok": True, "reqId": 7}))],
    ]


@pytest.mark.parametrize("rotate", [None, 1024])
def test_injected_violations_carry_the_tap_s_requirement_ids(tmp_path, rotate):
    tap = record_chunks(tmp_path / "rec", "bunqueue", BQ, _violating_bunqueue(), rotate=rotate)
    summary = _local(tmp_path / "rec", tmp_path / "out")
    figures = trace_figures(summary)
    assert figures == tap_figures(tap)
    ids = {(r["level"], r["requirement"]) for r in summary["requirements"]}
    assert ("FAIL", "BQ-ENV-2") in ids          # reqId must be a string
    assert any(lv == "NON-STRICT" and rid == "BQ-ENV-2" for lv, rid in ids)  # reply to nothing
    assert summary["verdict"] == "FAIL"
    kinds = {r["kind"] for r in summary["requirements"]}
    assert {"request_schema", "reqid_unknown", "unanswered"} <= kinds
    assert summary["totals"]["unanswered"] == 1
    violations = _table(tmp_path / "out", "violations").to_pylist()
    assert len(violations) == sum(summary["totals"]["violations"].values())
    assert all(v["level"] in ("FAIL", "NON-STRICT", "INFO") and v["message"] for v in violations)


def test_a_rotated_recording_analyses_like_the_unrotated_one(tmp_path):
    """The loose ends of every file boundary: pairs split across files are joined, a reply
    to nothing stays a NON-STRICT, an unanswered request stays INFO, whatever the rotation."""
    conns = _violating_bunqueue()
    base = record_chunks(tmp_path / "whole", "bunqueue", BQ, conns)
    whole = trace_figures(_local(tmp_path / "whole", tmp_path / "o1"))
    for rotate in (1024, 1100, 1300):
        record_chunks(tmp_path / f"r{rotate}", "bunqueue", BQ, conns, rotate=rotate)
        assert trace_figures(_local(tmp_path / f"r{rotate}", tmp_path / f"o{rotate}")) == whole
    assert whole == tap_figures(base)


def test_a_pcap_of_the_traffic_analyses_like_its_recording(tmp_path):
    bq = _violating_bunqueue()
    record_chunks(tmp_path / "bqrec", "bunqueue", BQ, bq)
    t0 = 1_700_000_000_000_000_000
    write_pcap(tmp_path / "bq.pcap", [[(d, b, t0 + i * 1000) for i, (d, b) in enumerate(c)]
                                      for c in bq], port=6789)
    from queuewire.trace.pcap import import_pcap
    import_pcap(tmp_path / "bq.pcap", port=6789, out_dir=tmp_path / "bqpcap",
                protocol="bunqueue", profile=BQ)
    a = trace_figures(_local(tmp_path / "bqrec", tmp_path / "o1"))
    b = trace_figures(_local(tmp_path / "bqpcap", tmp_path / "o2"))
    assert a == b and a["violations"]["FAIL"] > 0


def test_match_pairs_the_nearest_files_only():
    o = [{"run": "r", "conn_id": 1, "seq": s, "key": "s:1", "command": c, "t_ns": s}
         for s, c in ((0, "A"), (2, "B"))]
    r = [{"run": "r", "conn_id": 1, "seq": s, "key": "s:1", "t_ns": 10 + s} for s in (1, 3, 4)]
    matched, opens_left, orphans_left = loose.match(o, r)
    assert sorted((a["command"], b["seq"]) for a, b in matched) == [("A", 1), ("B", 3)]
    assert opens_left == [] and [x["seq"] for x in orphans_left] == [4]
    # another connection, or an earlier file, never matches
    other = [{"run": "r", "conn_id": 2, "seq": 5, "key": "s:1", "t_ns": 1}]
    early = [{"run": "r", "conn_id": 1, "seq": 0, "key": "s:1", "t_ns": 1}]
    assert loose.match(o[1:], other + early)[0] == []


def test_a_file_cut_inside_a_record_ends_at_the_last_whole_one(tmp_path):
    record_chunks(tmp_path / "rec", "bunqueue", BQ, _violating_bunqueue()[:1])
    path = trace_files(tmp_path / "rec")[0]
    data = path.read_bytes()
    def rows(data: bytes) -> list[dict]:
        return [r for b in FileDecoder().decode(data) for r in b.to_pylist()]
    whole, cut = rows(data), rows(data[:-5])     # the close record loses its payload's end
    kinds = [r["kind"] for r in cut if r["table"] == "violations"]
    assert "trace_truncated" in kinds and "trace_truncated" not in [
        r["kind"] for r in whole if r["table"] == "violations"]
    assert [r for r in cut if r["table"] == "frames"] == [
        r for r in whole if r["table"] == "frames"]
    assert '"close_reason":"eof"' in [r for r in whole if r["table"] == "conns"][0]["info"]
    assert "close_reason" not in [r for r in cut if r["table"] == "conns"][0]["info"]
    with pytest.raises(TraceError, match="not a trace file"):
        list(FileDecoder().decode(b"GARBAGE!" + data[8:]))


def test_inputs_and_profiles_are_checked(tmp_path):
    record_chunks(tmp_path / "bq", "bunqueue", BQ, _violating_bunqueue()[:1])
    enc = QuicxEncoder("quicx/v1")
    record_chunks(tmp_path / "qx", "quicx", "quicx/v1", [[("c2s", enc.heartbeat())]])
    with pytest.raises(TraceError, match="mix protocols"):
        analyze([tmp_path / "bq", tmp_path / "qx"], tmp_path / "o", engine="local")
    with pytest.raises(TraceError, match="no trace files"):
        find_inputs([tmp_path / "o"]) if (tmp_path / "o").mkdir() is None else None
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(TraceError, match="not empty"):
        analyze([tmp_path / "bq"], tmp_path / "full", engine="local")
    with pytest.raises(TraceError, match="not a quicx profile"):
        analyze([tmp_path / "bq"], tmp_path / "o2", engine="local", protocol="quicx",
                profile=BQ)


def test_cli_analyze_local_prints_the_summary_and_exits_1_on_a_fail(tmp_path):
    record_chunks(tmp_path / "rec", "bunqueue", BQ, _violating_bunqueue())
    run = subprocess.run([QUEUEWIRE, "trace", "analyze",
                          str(tmp_path / "rec"), "--out", str(tmp_path / "out"), "--engine",
                          "local"], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1, run.stderr
    assert "FAIL" in run.stdout and "BQ-ENV-2" in run.stdout
    assert (tmp_path / "out" / "summary.html").exists()
    bad = subprocess.run([QUEUEWIRE, "trace", "analyze",
                          str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "no such file or directory" in bad.stderr
    assert "Traceback" not in bad.stderr
    helped = subprocess.run([QUEUEWIRE, "trace", "--help"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert helped.returncode == 0
    for command in ("record", "import-pcap", "analyze"):
        assert command in helped.stdout
