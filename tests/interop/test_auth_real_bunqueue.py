"""Every queuewire command that talks to a server, against the REAL bunqueue 2.9.5 started with
a token (``AUTH_TOKENS``): with the token (by ``--auth-token`` or ``$QUEUEWIRE_AUTH_TOKEN``)
the command works and judges no refusal; without it, or with a wrong one, it stops before
judging with one error that names the refusal, its requirement and how to give a token
(issue 24, item 1). The token never appears in what the commands print.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve_process import (
    REAL_BUNQUEUE_MISSING,
    free_tcp_ports,
    kill_process_group,
    start_real_bunqueue_at,
)

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or REAL_BUNQUEUE_MISSING is not None,
    reason=REAL_BUNQUEUE_MISSING or "node is missing: the real bunqueue server cannot be started")

TOKEN = "qw-interop-s3cret"
ENV_VAR = "QUEUEWIRE_AUTH_TOKEN"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("auth") / "server.log"
    port, http_port = free_tcp_ports(2)
    proc = start_real_bunqueue_at(log, port, http_port, env={"AUTH_TOKENS": TOKEN})
    try:
        yield f"127.0.0.1:{port}"
    finally:
        kill_process_group(proc)


def _qw(*args: str, token: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if token is not None:
        env[ENV_VAR] = token
    run = subprocess.run([sys.executable, "-m", "queuewire.cli", *args], capture_output=True,
                         text=True, timeout=timeout, env=env, check=False)
    assert TOKEN not in run.stdout + run.stderr, "the token was printed"
    return run


def _refused(run: subprocess.CompletedProcess, *, wrong: bool = False) -> None:
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Traceback" not in out, out
    if wrong:
        assert "refused the token" in out and "'Invalid token'" in out and "BQ-AUTH-3" in out, out
        assert "check the token" in out, out
    else:
        assert "wants authentication" in out and "'Not authenticated'" in out, out
        assert "BQ-AUTH-2" in out and "--auth-token" in out and ENV_VAR in out, out


def test_fuzz_authenticates_every_connection_or_stops(server: str, tmp_path: Path) -> None:
    args = ("fuzz", "--protocol", "bunqueue", "--profile", "bunqueue/2.9.5", "--target", server,
            "--max-examples", "150", "--seed", "7", "--quiet", "--max-failures", "150",
            "--bound", "5", "--artifacts", str(tmp_path / "out"))
    without = _qw(*args)
    _refused(without)
    assert "cases in" not in without.stdout      # stopped before the first case
    _refused(_qw(*args, token="not-the-token"), wrong=True)
    # the variable and the option both authenticate every connection the run opens (reused,
    # fresh per case, several per interleaved case, liveness probes): no refusal is judged
    for run in (_qw(*args, token=TOKEN), _qw(*args, "--auth-token", TOKEN)):
        out = run.stdout + run.stderr
        assert run.returncode in (0, 1), out
        assert "150 cases" in run.stdout, out
        assert "Not authenticated" not in out and "duplicate_reply" not in out, out
    for path in (tmp_path / "out").glob("*.json"):   # a saved reproduction names the variable
        assert TOKEN not in path.read_text()
    if "replay: queuewire fuzz replay" in run.stdout:
        assert f'--auth-token "${ENV_VAR}"' in run.stdout


def test_fuzz_replay_and_stateful_need_the_token(server: str, tmp_path: Path) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps({
        "format": "queuewire-fuzz-transcript/1",
        "case": {"protocol": "bunqueue", "profile": "bunqueue/2.9.5", "seed": 1, "index": 0,
                 "frames": [], "labels": []},
        "findings": [], "replies": [], "original": None, "note": None}))
    _refused(_qw("fuzz", "replay", str(transcript), "--target", server))
    stateful = ("fuzz", "--stateful", "--protocol", "bunqueue", "--profile", "bunqueue/2.9.5",
                "--target", server, "--max-examples", "3", "--steps", "5", "--seed", "1")
    _refused(_qw(*stateful))
    ran = _qw(*stateful, token=TOKEN)
    assert "Not authenticated" not in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    # it ran its steps authenticated: a verdict on the job lifecycle, not on a refusal
    assert ran.returncode in (0, 1) and "stateful bunqueue/2.9.5 against" in ran.stdout, ran.stdout


def test_conform_detect_server_and_replay_need_the_token(server: str, tmp_path: Path) -> None:
    detect = ("conform", "detect", "--protocol", "bunqueue", "--target", server, "--json")
    _refused(_qw(*detect))
    found = _qw(*detect, token=TOKEN)
    assert found.returncode == 0, found.stdout + found.stderr
    assert json.loads(found.stdout)["best"] == "bunqueue/2.9.5"

    # a case the real server fails under the documents' profile, so its case file is written
    conform = ("conform", "server", "--protocol", "bunqueue", "--profile", "bunqueue/v2",
               "--target", server, "--select", "bunqueue.hello.version",
               "--report-dir", str(tmp_path / "report"))
    _refused(_qw(*conform))
    ran = _qw(*conform, token=TOKEN)
    assert ran.returncode == 1 and "Not authenticated" not in ran.stdout, ran.stdout + ran.stderr
    cases = sorted((tmp_path / "report" / "cases").glob("*.json"))
    assert cases, ran.stdout
    assert TOKEN not in cases[0].read_text()
    replay = ("conform", "replay", str(cases[0]), "--target", server)
    _refused(_qw(*replay))
    _refused(_qw(*replay, "--raw"))
    again = _qw(*replay, token=TOKEN)
    assert "STILL FAILING" in again.stdout and "REGRESSED" not in again.stdout, again.stdout


def _send(sock, frames: list[dict], replies: int) -> list[dict]:
    from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
    from queuewire.spec import load_profile
    sock.sendall(b"".join(encode_frame(f) for f in frames))
    decoder, got = FrameDecoder(load_profile("bunqueue/2.9.5")), []
    while len(got) < replies:
        data = sock.recv(65536)
        assert data, f"the connection closed after {got}"
        got += decoder.feed(data)
    return got


def test_a_tap_recording_holds_no_credential(server: str, tmp_path: Path) -> None:
    """A client authenticates and registers a webhook with a signing secret through
    `queuewire tap --record`; the recording keeps every frame at its length, with stars where
    the token and the secret were, and `trace analyze` reads it back."""
    import signal
    import socket
    import time

    hook_secret = "qw-webhook-signing-s3cret"
    (listen,) = free_tcp_ports(1)
    record = tmp_path / "rec"
    tap = subprocess.Popen(
        [sys.executable, "-m", "queuewire.cli", "tap", "--protocol", "bunqueue", "--listen",
         f"127.0.0.1:{listen}", "--upstream", server, "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert tap.stdout is not None
        first = tap.stdout.readline()      # printed once the tap listens
        assert "listening on" in first, first
        with socket.create_connection(("127.0.0.1", listen), timeout=10) as sock:
            auth, pong = _send(sock, [{"cmd": "Auth", "reqId": "1", "token": TOKEN},
                                      {"cmd": "Ping", "reqId": "2"}], 2)
            assert auth["ok"] is True and pong["ok"] is True, (auth, pong)
            (added,) = _send(sock, [{"cmd": "AddWebhook", "reqId": "3",
                                     "url": "https://hooks.example.invalid/q",
                                     "events": ["job.completed"], "secret": hook_secret}], 1)
            assert added["ok"] is True, added
            (removed,) = _send(sock, [{"cmd": "RemoveWebhook", "reqId": "4",
                                       "webhookId": added["data"]["webhookId"]}], 1)
            assert removed["ok"] is True, removed   # the server is left as found
        time.sleep(0.3)
    finally:
        tap.send_signal(signal.SIGINT)
        out, _ = tap.communicate(timeout=30)
        out = first + out
    assert TOKEN not in out and hook_secret not in out, out
    files = sorted(record.iterdir())
    assert files, out
    on_disk = b"".join(p.read_bytes() for p in files)
    assert TOKEN.encode() not in on_disk and hook_secret.encode() not in on_disk
    assert b"*" * len(TOKEN) in on_disk and b"*" * len(hook_secret) in on_disk
    analyzed = _qw("trace", "analyze", str(record), "--engine", "local", "--out",
                   str(tmp_path / "analysis"))
    assert analyzed.returncode in (0, 1), analyzed.stdout + analyzed.stderr
    assert "Traceback" not in analyzed.stdout + analyzed.stderr
    summary = "".join(p.read_text(errors="replace") for p in (tmp_path / "analysis").rglob("*.json"))
    assert "AddWebhook" in summary and TOKEN not in summary, analyzed.stdout
