"""``queuewire trace record`` and ``trace import-pcap`` as processes and through click: a
recording of real traffic through the recorder, a pcap turned into trace files, one-line
errors for bad input."""

from __future__ import annotations

import re

from click.testing import CliRunner

from queuewire.cli import main
from queuewire.codecs.bunqueue import encode_frame
from queuewire.trace.pcap import write_pcap
from queuewire.traffic import trace_format as trace
from serve_process import proxy_pings

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def test_record_writes_exactly_the_bytes_that_crossed(tmp_path):
    out = tmp_path / "rec"
    frames, got, output = proxy_pings(["trace", "record", "--protocol", "bunqueue", "--upstream",
                                       "127.0.0.1:{port}", "--out", str(out), "--rotate-bytes",
                                       "1024"], 40)
    streams = trace.streams(out)
    assert streams[(1, "c2s")] == frames and streams[(1, "s2c")] == got
    assert len(trace.trace_files(out)) > 1          # rotated at 1 KiB
    assert "recorded 1 connection(s), 40 + 40 frames" in output
    # Pings alone do not tell the bunqueue profiles apart: the default is kept, and said
    assert "profile: bunqueue/v2 (default: no distinguishing traffic)" in output


def test_import_pcap_cli_and_its_errors(tmp_path):
    frames = [encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(3)]
    chunks = [("c2s", f, 1_700_000_000_000_000_000 + i) for i, f in enumerate(frames)]
    write_pcap(tmp_path / "cap.pcapng", [chunks], port=6789, fmt="pcapng")
    runner = CliRunner()
    result = runner.invoke(main, ["trace", "import-pcap", str(tmp_path / "cap.pcapng"),
                                  "--port", "6789", "--protocol", "bunqueue", "--out",
                                  str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    assert trace.streams(tmp_path / "rec")[(1, "c2s")] == b"".join(frames)
    assert "profile: bunqueue/v2 (default: no distinguishing traffic)" in result.output
    (tmp_path / "junk.pcap").write_bytes(b"not a capture at all")
    result = runner.invoke(main, ["trace", "import-pcap", str(tmp_path / "junk.pcap"),
                                  "--port", "6789", "--protocol", "bunqueue", "--out",
                                  str(tmp_path / "rec2")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "pcap" in result.output
    result = runner.invoke(main, ["trace", "import-pcap", str(tmp_path / "cap.pcapng"),
                                  "--port", "6789", "--protocol", "quicx", "--profile",
                                  "bunqueue/v2", "--out", str(tmp_path / "rec3")])
    assert result.exit_code == 2 and "not a quicx profile" in result.output
    result = runner.invoke(main, ["trace", "analyze", str(tmp_path / "rec"), "--out",
                                  str(tmp_path / "o"), "--engine", "local", "--master",
                                  "local[2]"])
    assert result.exit_code == 2 and "--master needs --engine spark" in result.output
