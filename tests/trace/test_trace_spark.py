"""The Spark engine (real PySpark in local mode, one session for the module): a recorded
reference workload, rotated so that pairs split across files, plus connections with injected
violations, analyse to the counts the tap saw and to exactly the local engine's summary;
the Parquet tables Spark wrote hold one row per frame, pair and violation."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from test_trace_decode import _violating_bunqueue
from trace_helpers import bunqueue_workload, record_chunks, tap_figures, trace_figures

from queuewire.trace import spark as qs
from queuewire.trace.analyze import analyze

BQ = "bunqueue/v2"


@pytest.fixture(scope="module")
def spark_session():
    session = qs.session("local[2]")
    yield session
    session.stop()


def _same_summary(a: dict, b: dict) -> None:
    for key in ("engine", "master", "elapsed_s", "inputs"):
        a.pop(key), b.pop(key)
    assert a == b


@pytest.mark.asyncio
async def test_spark_analysis_of_a_recorded_workload_is_exact(tmp_path, spark_session):
    rec = tmp_path / "rec"
    tap = await bunqueue_workload(rec, rotate=700)
    bad = record_chunks(tmp_path / "bad", "bunqueue", BQ, _violating_bunqueue(), rotate=1024)
    for f in (tmp_path / "bad").iterdir():     # one recording directory, two runs
        f.rename(rec / f.name)
    summary = analyze([rec], tmp_path / "spark", engine="spark", master="local[2]")
    assert summary["engine"] == "spark" and summary["master"] == "local[2]"
    local = analyze([rec], tmp_path / "local", engine="local")
    _same_summary(dict(summary), dict(local))
    # the counts the tap saw live, for both recordings together
    live, injected = tap_figures(tap), tap_figures(bad)
    figures = trace_figures(summary)
    for key in ("requests", "pairs", "unanswered", "gaps"):
        assert figures[key] == live[key] + injected[key], key
    for d in ("c2s", "s2c"):
        assert figures["frames"][d] == live["frames"][d] + injected["frames"][d]
    assert figures["requirements"] == injected["requirements"]   # the workload adds none
    assert summary["totals"]["split_pairs"] > 0 and summary["verdict"] == "FAIL"
    out = tmp_path / "spark"
    assert pq.read_table(out / "frames").num_rows == sum(figures["frames"].values())
    assert pq.read_table(out / "pairs").num_rows == figures["pairs"]
    assert pq.read_table(out / "violations").num_rows == sum(figures["violations"].values())
    ids = {r["requirement"] for r in pq.read_table(out / "violations").to_pylist()}
    assert "BQ-ENV-2" in ids
    assert (out / "summary.html").exists()
