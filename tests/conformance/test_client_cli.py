"""``queuewire conform client`` end to end: a testee process, the reports, the exit status."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from queuewire.cli import main

BROKEN = Path(__file__).parent / "client_testees" / "broken_bunqueue.py"
OWN = f"{sys.executable} -m queuewire.conformance.client.adapters.queuewire_client"


def test_conform_client_runs_a_testee_and_writes_every_report(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = CliRunner().invoke(main, [
        "conform", "client", "--protocol", "bunqueue", "--listen", "127.0.0.1:0",
        "--scenario", "bunqueue.client.basic", "--scenario", "*split*",
        "--testee", OWN, "--testee", f"{sys.executable} {BROKEN} dup-reqid",
        "--testee-name", "queuewire-client", "--report-dir", str(out),
        "--junit", str(tmp_path / "j.xml"), "--html", str(tmp_path / "r.html"),
        "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 1, result.output   # the broken testee fails the run
    for name in ("report.html", "report.json", "junit.xml"):
        assert (out / name).is_file()
    doc = json.loads((tmp_path / "r.json").read_text())
    runs = {run["label"]: run for run in doc["runs"]}
    assert set(runs) == {"queuewire-client (bunqueue/v2)", "broken_bunqueue.py (bunqueue/v2)"}
    own = runs["queuewire-client (bunqueue/v2)"]
    assert own["counts"]["PASS"] == 2 and not own["failing"]
    assert "bunqueue.client.basic" in runs["broken_bunqueue.py (bunqueue/v2)"]["failing"]
    html = (tmp_path / "r.html").read_text()
    assert "bunqueue.client.replies-split" in html and "BQ-PIPE-4" in html
    assert "matrix" in result.output
    assert "conform client" in result.output   # the reproduction line of the failing scenario


def test_conform_client_exits_0_when_the_client_passes(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "conform", "client", "--protocol", "bunqueue", "--scenario", "bunqueue.client.auth",
        "--testee", OWN])
    assert result.exit_code == 0, result.output
    assert "no failing case" in result.output


def test_conform_client_usage_errors() -> None:
    runner = CliRunner()
    r = runner.invoke(main, ["conform", "client", "--protocol", "bunqueue", "--testee", "x",
                             "--scenario", "nothing.*"])
    assert r.exit_code == 2 and "no bunqueue client scenario" in r.output
    r = runner.invoke(main, ["conform", "client", "--protocol", "bunqueue", "--testee", "x",
                             "--listen", "nowhere"])
    assert r.exit_code == 2


def test_the_testee_per_scenario_mode_starts_a_fresh_process_for_each(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = tmp_path / "pid_testee.py"
    script.write_text(
        "import json, os, sys\n"
        f"log = open({str(pids)!r}, 'a')\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    log.write(f'{os.getpid()}\\n'); log.flush()\n"
        "    results = [{'ok': False, 'error': 'not implemented', 'error_type': 'other'}"
        " for _ in req['actions']]\n"
        "    print(json.dumps({'scenario': req['scenario'], 'results': results}), flush=True)\n")
    args = ["conform", "client", "--protocol", "bunqueue", "--scenario", "bunqueue.client.basic",
            "--scenario", "bunqueue.client.auth", "--testee", f"{sys.executable} {script}"]
    CliRunner().invoke(main, args)
    once = pids.read_text().split()
    pids.unlink()
    CliRunner().invoke(main, [*args, "--testee-per-scenario"])
    fresh = pids.read_text().split()
    assert len(once) == 2 and len(set(once)) == 1       # one process for both scenarios
    assert len(fresh) == 2 and len(set(fresh)) == 2     # a process for each
