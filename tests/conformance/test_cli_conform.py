"""``queuewire conform``: exit codes, the known-failing file, reports on disk, and ``replay``
against the real reference server over TCP."""

from __future__ import annotations

import json

import pytest
import report_fixtures as fx

from queuewire.conformance.known_failing import parse_known_failing
from queuewire.conformance.report import case_document, case_filename, write_reports


# -- known-failing file -----------------------------------------------------------------------
def test_known_failing_formats():
    text = """# my server's known deviations
bunqueue.push.a
bunqueue.push.b   # not fixed yet: issue 12
- bunqueue.push.c  # a YAML list works
bunqueue.push.d: reason in a YAML mapping

"""
    assert parse_known_failing(text, "kf.txt") == {
        "bunqueue.push.a": "", "bunqueue.push.b": "not fixed yet: issue 12",
        "bunqueue.push.c": "a YAML list works", "bunqueue.push.d": "reason in a YAML mapping"}


def test_known_failing_help_documents_the_format(cli):
    out = cli("conform", "server", "--help").output
    assert "--known-failing" in out and "one id per line" in out and "stale" in out
    for option in ("--target", "--strict", "--select", "--skip", "--report-dir", "--junit",
                   "--json", "--html", "--timeout", "--auth-token"):
        assert option in out


# -- replay -----------------------------------------------------------------------------------
def _case_file(tmp_path, which: str, mutate=None):
    run = fx.run()
    result = next(r for r in run.results if r.case.id == f"bunqueue.synthetic.{which}")
    doc = case_document(run, result)
    if mutate:
        mutate(doc)
    path = tmp_path / case_filename(result.case.id)
    path.write_text(json.dumps(doc))
    return path


def test_replay_matching_replies_exit_0(cli, tmp_path):
    # recorded: PUSH answered ok; the reference server answers ok too
    result = cli("conform", "replay", _case_file(tmp_path, "info"), "--target", "embedded", "--raw")
    assert result.exit_code == 0, result.output
    assert "all 1 received item(s) match in kind" in result.output
    assert "job-1" in result.output  # the recorded reply, shown beside the new one


def test_replay_differing_replies_exit_1(cli, tmp_path):
    # recorded: an error reply; the reference server answers ok
    result = cli("conform", "replay", _case_file(tmp_path, "fail"), "--target", "embedded", "--raw")
    assert result.exit_code == 1
    assert "1 of 1 received item(s) differ in kind" in result.output
    assert "error:" in result.output and "ok:" in result.output


def test_replay_expects_recorded_close(cli, tmp_path):
    def add_close(doc):
        doc["transcript"].append({"t": 0.004, "conn": 1, "direction": "close", "hex": "",
                                  "decoded": None, "note": "closed by the peer (EOF)"})
    # the reference server does not close after a valid PUSH: the close is missing now
    result = cli("conform", "replay", _case_file(tmp_path, "info", add_close), "--target",
                 "embedded", "--timeout", "0.3", "--raw")
    assert result.exit_code == 1
    assert "close: closed by the peer" in result.output and "(nothing)" in result.output


@pytest.mark.parametrize("content, message", [
    ("{", "is not JSON"),
    ("[]", "a case file is a JSON object"),
    ('{"id": "x", "protocol": "bunqueue", "profile": "bunqueue/v2"}', "missing key 'transcript'"),
    ('{"id": "x", "protocol": "bunqueue", "profile": "nope/v9", "transcript": []}', "nope/v9"),
    ('{"id": "x", "protocol": "quicx", "profile": "bunqueue/v2", "transcript": []}',
     "is a bunqueue profile, not quicx"),
    ('{"id": "x", "protocol": "bunqueue", "profile": "bunqueue/v2", "transcript": '
     '[{"t": 0, "conn": 1, "direction": "sideways", "hex": ""}]}', "direction 'sideways'"),
    ('{"id": "x", "protocol": "bunqueue", "profile": "bunqueue/v2", "transcript": '
     '[{"t": 0, "conn": 1, "direction": "send", "hex": "zz"}]}', "'hex' is not hexadecimal"),
    ('{"id": "x", "protocol": "bunqueue", "profile": "bunqueue/v2", "transcript": '
     '[{"t": 0, "conn": 0, "direction": "send", "hex": ""}]}', "conn must be a positive integer"),
    ('{"id": "x", "protocol": "bunqueue", "profile": "bunqueue/v2", "transcript": []}',
     "no bytes sent by the tester"),
])
def test_replay_bad_file_is_a_one_line_usage_error(cli, tmp_path, content, message):
    path = tmp_path / "case.json"
    path.write_text(content)
    result = cli("conform", "replay", path, "--target", "127.0.0.1:1", "--raw")
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_replay_missing_file_and_bad_target(cli, tmp_path):
    result = cli("conform", "replay", tmp_path / "nope.json", "--target", "127.0.0.1:1")
    assert result.exit_code == 2 and "cannot read" in result.output
    result = cli("conform", "replay", _case_file(tmp_path, "info"), "--target", "nohost")
    assert result.exit_code == 2 and "not HOST:PORT" in result.output


def test_replay_unreachable_target_is_one_line(cli, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli("conform", "replay", _case_file(tmp_path, "info"), "--target", f"127.0.0.1:{port}",
                 "--raw")
    assert result.exit_code == 1 and "cannot connect to 127.0.0.1" in result.output


def test_replay_of_a_report_dir_case_file(cli, tmp_path):
    write_reports([fx.run()], report_dir=tmp_path)
    path = tmp_path / "cases" / case_filename("bunqueue.synthetic.unimplemented")
    result = cli("conform", "replay", path, "--target", "embedded", "--protocol", "bunqueue",
                 "--raw")
    # recorded: "Unknown command"; the reference server knows PUSH
    assert result.exit_code == 1
    result = cli("conform", "replay", path, "--target", "embedded", "--protocol", "quicx",
                 "--raw")
    assert result.exit_code == 2 and "is a bunqueue case, not quicx" in result.output
    # re-judging needs a case to run: a synthetic one (no steps) is refused in one line
    result = cli("conform", "replay", path, "--target", "embedded")
    assert result.exit_code == 2 and "neither steps nor logic" in result.output


# -- exit status of `conform server` over synthetic runs ---------------------------------------
@pytest.fixture
def fake_runs(monkeypatch):
    """Make `conform server` get synthetic runs from the runner (only the CLI is under test
    here; the end-to-end tests below use the real runner)."""
    import queuewire.conformance.runner as runner

    state = {"only": None, "stale": False, "calls": []}

    def run_target_sync(protocol, target, **kw):
        state["calls"].append((protocol, target, kw))
        progress = kw.get("progress")
        run = fx.run(target=target, strict=kw.get("strict", False), only=state["only"],
                     stale=state["stale"])
        known = set(kw.get("known_failing") or ())
        for r in run.results:
            r.known_failing = r.case.id in known
        if progress:
            progress("start", len(run.results))
            for r in run.results:
                progress("case", r)
            progress("done", run)
        return run

    monkeypatch.setattr(runner, "run_target_sync", run_target_sync)
    return state


def test_exit_1_on_fail_with_reproduction_lines(cli, fake_runs):
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "127.0.0.1:1")
    assert result.exit_code == 1
    assert ("reproduce: queuewire conform server --protocol bunqueue --target 127.0.0.1:1 "
            "--select bunqueue.synthetic.fail") in result.output
    assert "bunqueue.synthetic.error" in result.output


def test_exit_0_on_non_strict_and_1_with_strict(cli, fake_runs):
    fake_runs["only"] = ("pass", "nonstrict", "info", "unimplemented")
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "127.0.0.1:1")
    assert result.exit_code == 0, result.output
    assert "no failing case" in result.output
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "127.0.0.1:1", "--strict")
    assert result.exit_code == 1
    assert fake_runs["calls"][-1][2]["strict"] is True


def test_known_failing_hides_a_fail_but_a_stale_entry_fails(cli, fake_runs, tmp_path):
    fake_runs["only"] = ("pass", "fail")
    kf = tmp_path / "known.txt"
    kf.write_text("bunqueue.synthetic.fail  # our server answers PUSH with an error\n")
    assert cli("conform", "server", "--protocol", "bunqueue", "--target", "127.0.0.1:1",
               "--known-failing", kf).exit_code == 0
    kf.write_text("bunqueue.synthetic.fail\nbunqueue.synthetic.pass  # fixed since\n")
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "127.0.0.1:1",
                 "--known-failing", kf)
    assert result.exit_code == 1
    assert "STALE" in result.output and "bunqueue.synthetic.pass" in result.output


def test_several_targets_and_report_files(cli, fake_runs, tmp_path):
    fake_runs["only"] = ("pass", "fail", "nonstrict")
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "127.0.0.1:1",
                 "--target", "embedded", "--report-dir", tmp_path / "out",
                 "--junit", tmp_path / "j.xml", "--json", tmp_path / "r.json",
                 "--html", tmp_path / "r.html")
    assert result.exit_code == 1
    assert [c[1] for c in fake_runs["calls"]] == ["127.0.0.1:1", "embedded"]
    assert "matrix" in result.output
    for name in ("report.html", "report.json", "junit.xml"):
        assert (tmp_path / "out" / name).is_file()
    case_files = sorted(p.name for p in (tmp_path / "out" / "cases").rglob("*.json"))
    assert case_files == sorted([case_filename("bunqueue.synthetic.fail"),
                                 case_filename("bunqueue.synthetic.nonstrict")] * 2)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["target"] for r in doc["runs"]] == ["127.0.0.1:1", "embedded"]
    assert doc["exit_status"] == 1
    assert "embedded (bunqueue/v2)" in (tmp_path / "r.html").read_text()


def test_usage_errors_exit_2(cli, fake_runs):
    assert cli("conform", "server", "--protocol", "bunqueue", "--target", "nohost").exit_code == 2
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                 "--profile", "quicx/v1")
    assert result.exit_code == 2 and "is a quicx profile, not bunqueue" in result.output
    assert cli("conform", "server", "--protocol", "bunqueue").exit_code == 2  # no --target
    assert cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
               "--known-failing", "/nonexistent/kf.txt").exit_code == 2
    assert not fake_runs["calls"]


def test_bad_known_failing_line_is_a_usage_error(cli, fake_runs, tmp_path):
    kf = tmp_path / "known.txt"
    kf.write_text("bunqueue.ok\n- [not, an, id]\n")
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                 "--known-failing", kf)
    assert result.exit_code == 2 and "known.txt:2" in result.output




# -- end to end: the real runner over TCP ------------------------------------------------------
def _passing_ids(n: int) -> list[str]:
    """A few bunqueue cases that pass against the embedded reference server."""
    from queuewire.conformance.model import Verdict
    from queuewire.conformance.runner import load_cases, run_target_sync

    ids = [c.id for c in load_cases("bunqueue", "bunqueue/v2") if not c.info][:8]
    run = run_target_sync("bunqueue", "embedded", select=ids)
    passing = [r.case.id for r in run.results if r.verdict is Verdict.PASS]
    assert len(passing) >= n, [(r.case.id, r.verdict.value) for r in run.results]
    return passing[:n]


def _sel(ids):
    return [a for i in ids for a in ("--select", i)]


def test_e2e_embedded_pass_writes_reports(cli, tmp_path):
    ids = _passing_ids(2)
    out = tmp_path / "out"
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                 *_sel(ids), "--report-dir", out)
    assert result.exit_code == 0, result.output
    assert "no failing case" in result.output and "requirement coverage" in result.output
    doc = json.loads((out / "report.json").read_text())
    assert [c["id"] for c in doc["runs"][0]["cases"]] == ids
    assert all(c["verdict"] == "PASS" for c in doc["runs"][0]["cases"])
    assert doc["runs"][0]["server_info"] is not None  # the Hello reply
    sent = [e for c in doc["runs"][0]["cases"] for e in c["transcript"] if e["direction"] == "send"]
    first = " ".join(f"{b:02x}" for b in bytes.fromhex(sent[0]["hex"])[:16])
    # a passing case's transcript is in the JSON, and in the HTML only when asked for
    assert first not in (out / "report.html").read_text()
    assert not (out / "cases").exists()  # only non-PASS cases get a replay file
    every = tmp_path / "every"
    again = cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                *_sel(ids), "--report-dir", every, "--html-transcripts", "all")
    assert again.exit_code == 0, again.output
    assert first in (every / "report.html").read_text()


def test_e2e_stale_known_failing_entry_fails_the_run(cli, tmp_path):
    ids = _passing_ids(1)
    kf = tmp_path / "known-failing.txt"
    kf.write_text(f"{ids[0]}  # was broken once\n")
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                 *_sel(ids), "--known-failing", kf)
    assert result.exit_code == 1
    assert "STALE" in result.output and ids[0] in result.output


def test_e2e_broken_server_fails_with_reproduction_and_replays(cli, tmp_path, closing_server):
    ids = _passing_ids(2)
    result = cli("conform", "server", "--protocol", "bunqueue", "--target",
                 f"127.0.0.1:{closing_server.port}", *_sel(ids), "--timeout", "0.5",
                 "--report-dir", tmp_path / "out", "--junit", tmp_path / "j.xml")
    assert result.exit_code == 1
    for cid in ids:
        assert f"--select '{cid}'" in result.output  # the runner's reproduction line
    import xml.etree.ElementTree as ET

    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert int(suite.get("failures")) + int(suite.get("errors")) == len(ids)
    files = sorted((tmp_path / "out" / "cases").glob("*.json"))
    assert [f.name for f in files] == sorted(case_filename(c) for c in ids)
    # the saved case replayed against a conforming server: replies differ from the recording
    replay = cli("conform", "replay", files[0], "--target", "embedded", "--timeout", "0.5",
                 "--raw")
    assert replay.exit_code == 1, replay.output
    assert "close: closed by the peer" in replay.output and "differ in kind" in replay.output


def test_e2e_nothing_selected_is_a_usage_error(cli):
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                 "--select", "no.such.case.*")
    assert result.exit_code == 2 and "no case ran" in result.output


def test_replay_rewrites_server_chosen_ids(cli, tmp_path):
    """The recording pushed a job, got id R, then asked GetJob R. Replayed, the server picks
    another id N: the GetJob must go out with N (else 'Job not found' would differ)."""
    from queuewire.codecs.bunqueue import encode_frame

    queue = "qw-replay-ids"
    push = {"cmd": "PUSH", "queue": queue, "data": {"n": 1}, "reqId": "r1"}
    get = {"cmd": "GetJob", "id": "recorded-job-id-0001", "reqId": "r2"}
    events = [
        {"t": 0.0, "conn": 1, "direction": "open", "hex": "", "decoded": None, "note": "connected"},
        {"t": 0.001, "conn": 1, "direction": "send", "hex": encode_frame(push).hex(), "decoded": push,
         "note": ""},
        {"t": 0.002, "conn": 1, "direction": "recv", "hex": "", "note": "",
         "decoded": {"ok": True, "id": "recorded-job-id-0001", "reqId": "r1"}},
        {"t": 0.003, "conn": 1, "direction": "send", "hex": encode_frame(get).hex(), "decoded": get,
         "note": ""},
        {"t": 0.004, "conn": 1, "direction": "recv", "hex": "", "note": "",
         "decoded": {"ok": True, "job": {"id": "recorded-job-id-0001", "queue": queue}, "reqId": "r2"}},
    ]
    path = tmp_path / "ids.json"
    path.write_text(json.dumps({"id": "synthetic.ids", "protocol": "bunqueue",
                                "profile": "bunqueue/v2", "target": "x:1", "transcript": events}))
    result = cli("conform", "replay", path, "--target", "embedded", "--timeout", "2", "--raw")
    assert result.exit_code == 0, result.output
    assert "all 2 received item(s) match in kind" in result.output


def test_embedded_run_ends_when_the_server_stops_mid_wakeup(tmp_path):
    """Regression: this case's retries wake the embedded server's timer and webhook loops just
    as the run stops the server; with asyncio.wait_for (Python 3.11) a loop swallowed the
    cancel and the command never exited."""
    import subprocess
    import sys

    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "queuewire.cli", "conform", "server", "--protocol", "bunqueue",
         "--target", "embedded", "--select", "bunqueue.job.backoff-exponential",
         "--json", str(out)],
        check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = json.loads(out.read_text())["runs"]
    # an observation (a queuewire decision, issue 25): INFO even where it holds
    assert [c["verdict"] for c in run["cases"]] == ["INFO"]
    assert all(ch["ok"] for c in run["cases"] for ch in c["checks"]), run["cases"]
