"""The bunqueue conformance suite against the REAL bunqueue 2.9.5 server.

The server is npm ``bunqueue`` 2.9.5 run by the ``bun`` binary that ``make setup`` installs
into tests/interop/node_modules, started here on 127.0.0.1 with free TCP and HTTP ports,
in-memory storage and its per-connection rate limit lifted (the suite sends far more than its
default allows). The whole bunqueue suite (profile bunqueue/v2, i.e. documents 000-002; its
HTTP API cases too, given the server's HTTP port) runs against it with
``docs/conformance/bunqueue-2.9.5-known-failing.txt`` as the known-failing list: those are
the server's deviations from the documents, each checked by hand and described with its wire
evidence in ``docs/conformance/bunqueue-2.9.5.md``.

The test fails when the run fails (a case not on the list FAILs, i.e. a new deviation or a
suite regression; or a listed case PASSes, i.e. the list went stale), when any case is an
ERROR, and when the list is not exactly the set of FAIL cases (an entry that names no case,
or a listed case that only shows as NON-STRICT). Skipped, with the reason, only where node
or the bun/bunqueue install is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuewire.conformance.known_failing import parse_known_failing
from queuewire.conformance.model import Verdict
from queuewire.conformance.runner import load_cases, run_target_sync

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUN = HERE / "node_modules" / ".bin" / "bun"
BUNQUEUE_CLI = HERE / "node_modules" / "bunqueue" / "dist" / "cli" / "index.js"
KNOWN_FAILING = ROOT / "docs" / "conformance" / "bunqueue-2.9.5-known-failing.txt"
PROFILE = "bunqueue/v2"
HOST = "127.0.0.1"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not BUN.exists() or not BUNQUEUE_CLI.exists(),
    reason="node, or bun/bunqueue in tests/interop/node_modules (`make setup`), is missing: "
           "the real bunqueue server cannot be started")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"bunqueue exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection((HOST, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"bunqueue did not listen on {HOST}:{port} within {timeout} s: "
                f"{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def real_bunqueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """The real bunqueue 2.9.5 server on free ports; yields its TCP and HTTP ports."""
    port, http_port = _free_port(), _free_port()
    while http_port == port:
        http_port = _free_port()
    env = dict(os.environ)
    for var in ("BUNQUEUE_DATA_PATH", "BQ_DATA_PATH", "DATA_PATH", "SQLITE_PATH",
                "BUNQUEUE_STORAGE_DRIVER", "BUNQUEUE_POSTGRES_URL", "AUTH_TOKENS"):
        env.pop(var, None)
    env.update(RATE_LIMIT_MAX_REQUESTS="1000000000", RATE_LIMIT_WINDOW_MS="60000",
               LOG_LEVEL="error", PATH=f"{BUN.parent}{os.pathsep}{env.get('PATH', '')}")
    log = tmp_path_factory.mktemp("bunqueue") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(BUN), str(BUNQUEUE_CLI), "start", "--host", HOST, "--tcp-port", str(port),
             "--http-port", str(http_port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=HERE, env=env)
    try:
        _wait_port(port, proc, log)
        yield port, http_port
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_real_bunqueue_deviates_only_where_documented(real_bunqueue: tuple[int, int]) -> None:
    port, http_port = real_bunqueue
    known = parse_known_failing(KNOWN_FAILING.read_text(), str(KNOWN_FAILING))
    ids = {case.id for case in load_cases("bunqueue", PROFILE)}
    unknown = sorted(set(known) - ids)
    assert not unknown, f"{KNOWN_FAILING.name} names cases the suite does not have: {unknown}"

    run = run_target_sync("bunqueue", f"{HOST}:{port}", profile=PROFILE,
                          http_target=f"{HOST}:{http_port}", known_failing=tuple(known),
                          timeout=5.0)

    errors = [f"{r.case.id}: {r.error}" for r in run.results if r.verdict is Verdict.ERROR]
    assert not errors, "cases that could not run against the real server:\n" + "\n".join(errors)
    failing = [f"{r.case.id} [{r.verdict.value}]"
               + (" is listed as known-failing but passes: remove it" if r.known_failing else
                  ": " + "; ".join(f"{c.requirement} {c.message}" for c in r.failed_checks))
               for r in run.failing()]
    assert not failing, "the run against the real bunqueue 2.9.5 fails:\n" + "\n".join(failing)
    fails = {r.case.id for r in run.results if r.verdict is Verdict.FAIL}
    assert fails == set(known), (
        f"{KNOWN_FAILING.name} must list exactly the FAIL cases; listed but not FAIL: "
        f"{sorted(set(known) - fails)}; FAIL but not listed: {sorted(fails - set(known))}")
