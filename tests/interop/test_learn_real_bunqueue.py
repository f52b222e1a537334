"""`queuewire learn` against the REAL bunqueue 2.9.5 (from the release cache `make test` fills):
the job lifecycle is learned in seconds, its differences from the spec's table include the
known ones (a job pushed with a priority is 'prioritized', a state the table does not have; a
completed job is not found by its custom id; an active job with a lock is not discarded
without its token), each with its shortest input
sequence, and each runs as a conformance case whose verdict rests on the row's requirement.
The server is started with an auth token, so every connection authenticates, and its auth
session (Auth with the right and a wrong token, Hello, a command, a new connection) is learned
too: it equals the spec's table. The token never reaches a written file."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import releases  # noqa: E402

from queuewire.cli import main  # noqa: E402
from serve_process import free_tcp_ports  # noqa: E402


def test_learning_real_2_9_5_finds_the_known_differences(tmp_path: Path) -> None:
    if not releases.is_installed("2.9.5"):
        pytest.fail(f"bunqueue 2.9.5 is not in the release cache ({releases.cache_root()}): "
                    "run `make setup`")
    port, http_port = free_tcp_ports(2)
    token = "qw-learn-" + secrets.token_hex(8)
    proc = releases.start("2.9.5", tmp_path / "server.log", port, http_port,
                          env={"AUTH_TOKENS": token})
    runner = CliRunner(env={"QUEUEWIRE_AUTH_TOKEN": token})
    try:
        result = runner.invoke(main, [
            "learn", "--target", f"127.0.0.1:{port}", "--profile", "bunqueue/2.9.5", "--seed", "1",
            "--json", str(tmp_path / "learned.json"), "--report-dir", str(tmp_path / "report")])
        session = runner.invoke(main, [
            "learn", "--target", f"127.0.0.1:{port}", "--profile", "bunqueue/2.9.5",
            "--machine", "auth_session", "--json", str(tmp_path / "session.json")])
    finally:
        releases.stop(proc)
    assert session.exit_code == 0, session.output        # the auth session is the table's
    assert "learned 2 states (the table implies 2)" in session.output
    for written in tmp_path.rglob("*.json"):
        assert token not in written.read_text()
    assert result.exit_code == 1, result.output          # it differs
    doc = json.loads((tmp_path / "learned.json").read_text())
    found = {" ".join(d["inputs"]): (d["spec"][-1], d["server"][-1]) for d in doc["differences"]}
    # the known ones: a job pushed with a priority is 'prioritized'; a completed job is not
    # found by its custom id; a locked active job is not discarded without its token
    assert found["push_priority"] == ("ok/waiting/found", "ok/prioritized/found")
    assert found["push pull ack"] == ("ok/completed/found", "ok/completed/not found")
    assert found["push pull discard"] == ("ok/failed/found", "error/active/found")
    # found by learning: a cancelled job's GetState is ok with state 'unknown', not an error
    assert found["push cancel"] == ("ok/removed/not found", "ok/unknown/not found")
    assert doc["seconds"] < 600
    cases = {p.stem for p in (tmp_path / "report" / "cases").glob("*.json")}
    assert {"learn.job_lifecycle.push_priority", "learn.job_lifecycle.push-pull-ack",
            "learn.job_lifecycle.push-pull-discard"} <= cases
