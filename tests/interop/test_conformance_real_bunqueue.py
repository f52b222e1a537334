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

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuewire.conformance.known_failing import parse_known_failing
from queuewire.conformance.model import Verdict
from queuewire.conformance.runner import load_cases, run_target_sync
from serve_process import REAL_BUNQUEUE_MISSING, start_real_bunqueue, stop_serve

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KNOWN_FAILING = ROOT / "docs" / "conformance" / "bunqueue-2.9.5-known-failing.txt"
PROFILE = "bunqueue/v2"
HOST = "127.0.0.1"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or REAL_BUNQUEUE_MISSING is not None,
    reason=REAL_BUNQUEUE_MISSING or "node is missing: the real bunqueue server cannot be started")


@pytest.fixture(scope="module")
def real_bunqueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """The real bunqueue 2.9.5 server on free ports; yields its TCP and HTTP ports."""
    log = tmp_path_factory.mktemp("bunqueue") / "server.log"
    proc, port, http_port = start_real_bunqueue(log)
    try:
        yield port, http_port
    finally:
        stop_serve(proc)


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
