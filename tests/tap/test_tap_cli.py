"""``queuewire tap``: help, clear usage errors, and a real run as a process (in front of
``queuewire serve bunqueue``) that writes the JSON and HTML reports and a recording."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.traffic import trace_format as trace
from serve_process import proxy_pings

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def test_help_names_every_option():
    result = CliRunner().invoke(main, ["tap", "--help"])
    assert result.exit_code == 0
    for option in ("--protocol", "--listen", "--upstream", "--profile", "--record",
                   "--rotate-bytes", "--json", "--html", "--forwarder"):
        assert option in result.output


def test_bad_upstream_is_a_one_line_usage_error():
    runner = CliRunner()
    for upstream, words in (("127.0.0.1", "is not HOST:PORT"), ("127.0.0.1:http", "not a number"),
                            ("127.0.0.1:70000", "out of range"),
                            ("no-such-host.invalid:6789", "cannot resolve")):
        result = runner.invoke(main, ["tap", "--protocol", "bunqueue", "--upstream", upstream])
        assert result.exit_code == 2, result.output
        assert words in result.output and "Traceback" not in result.output
    result = runner.invoke(main, ["tap", "--protocol", "bunqueue", "--upstream", "127.0.0.1:1",
                                  "--profile", "quicx/v1"])
    assert result.exit_code == 2 and "not a bunqueue profile" in result.output


@pytest.mark.parametrize("forwarder", ["threads", "epoll", "loop"])
def test_tap_process_reports_and_records(tmp_path, forwarder):
    json_path, html_path, record = tmp_path / "tap.json", tmp_path / "tap.html", tmp_path / "rec"
    frames, got, output = proxy_pings(["tap", "--protocol", "bunqueue", "--listen", "127.0.0.1:0",
                                  "--upstream", "127.0.0.1:{port}", "--json", str(json_path),
                                  "--html", str(html_path), "--record", str(record),
                                  "--forwarder", forwarder], 5)
    summary = json.loads(json_path.read_text())
    assert summary["verdict"] == "PASS"
    # no --profile, and Pings do not tell the profiles apart: the default, said so
    assert summary["profile_choice"]["line"] == "bunqueue/v2 (default: no distinguishing traffic)"
    assert "profile: bunqueue/v2 (default: no distinguishing traffic)" in output
    assert summary["commands"]["Ping"]["paired"] == 5
    page = html_path.read_text()
    assert "Ping" in page and "<table>" in page
    # headers are text, escaped once: an arrow, not the entity's escaped source
    assert "<th>frames c→s / s→c</th>" in page and "&amp;rarr;" not in page
    streams = trace.streams(record)
    assert streams[(1, "c2s")] == frames and streams[(1, "s2c")] == got
