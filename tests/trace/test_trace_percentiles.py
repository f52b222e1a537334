"""The tap and the trace say the same p50 and p99 for the same traffic (issue 24 item 8: they
said 40,061 and 41,943 µs): Ping pairs with chosen latencies, fed to the tap's analyzer with its
recorder (sans-IO), then the recording analysed by the trace's local engine; both summaries,
and both report pages, which state the one method in the same words."""

from __future__ import annotations

import html

import numpy as np

from queuewire.codecs.bunqueue import encode_frame
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal
from queuewire.tap.report import write_html as tap_html
from queuewire.trace.analyze import analyze
from queuewire.trace.html import render_html
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.model import PERCENTILE_METHOD
from queuewire.traffic.record import Recorder

BQ = "bunqueue/v2"
T0 = 1_700_000_000_000_000_000
#: latencies (ns) whose p50 and p99 fall between ranks, and far from a power-of-two bucket edge
LATENCIES = [37_000 + 1_913 * i + (i * i * 7_919) % 23_000 for i in range(41)] + [40_061_000, 41_943_000]


def _record(out) -> dict:
    commands = load_profile(BQ).model.commands
    reply = minimal(dict(commands["Ping"].response))
    recorder = Recorder(out, protocol="bunqueue", profile=BQ, run="t")
    analyzer = Analyzer("bunqueue", BQ, sink=recorder.write)
    analyzer.open(1, T0, client="127.0.0.1:5001", upstream="127.0.0.1:6789")
    t = T0
    for i, latency in enumerate(LATENCIES):
        t += 100_000_000
        analyzer.feed(1, "c2s", encode_frame({"cmd": "Ping", "reqId": str(i)}, BQ), t)
        analyzer.feed(1, "s2c", encode_frame({**reply, "reqId": str(i)}, BQ), t + latency)
    analyzer.close(1, t + 100_000_000, "eof")
    recorder.close()
    return analyzer.summary()


def test_tap_and_trace_report_the_same_percentiles_by_one_method(tmp_path):
    tap = _record(tmp_path / "rec")
    trace = analyze([tmp_path / "rec"], tmp_path / "out", engine="local")
    live, recorded = tap["commands"]["Ping"]["latency"], trace["commands"]["Ping"]["latency_us"]
    assert live["count"] == trace["commands"]["Ping"]["pairs"] == len(LATENCIES)
    for p in (50, 99):
        want = round(float(np.percentile(LATENCIES, p)) / 1000, 1)
        assert live[f"p{p}_us"] == recorded[f"p{p}"] == want, p
    # the p99 is interpolated between the two slowest ranks, not either of them
    assert 40_061.0 < live["p99_us"] < 41_943.0

    # both pages: the figures, and the method in the same sentence
    tap_html(tap, tmp_path / "tap.html")
    pages = {"tap": (tmp_path / "tap.html").read_text(encoding="utf-8"), "trace": render_html(trace)}
    for name, page in pages.items():
        assert html.escape(PERCENTILE_METHOD) in page, name
        assert f"{live['p50_us']:,.1f}" in page and f"{live['p99_us']:,.1f}" in page, name
