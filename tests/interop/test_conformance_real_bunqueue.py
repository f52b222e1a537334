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

The same run must leave the server as it found it (issue 24): the server holds a queue with a
job, a webhook and a schedule of its own before the run; after it, its queue, webhook and
cron lists, taken apart from the run over a plain socket, are exactly what they were (its own
things still there, nothing of the run's), the cases removed all they made themselves (the
run's removal found nothing), and no health probe broke. A second, small run pushes a job
into a queue named 490, which breaks bunqueue 2.9.5's Prometheus: the run names that case,
removes the queue, and Prometheus answers again.
"""

from __future__ import annotations

import shutil
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.conformance.known_failing import parse_known_failing
from queuewire.conformance.loader import load_text
from queuewire.conformance.model import Verdict
from queuewire.conformance.runner import load_cases, run_target_sync
from queuewire.spec import load_profile
from queuewire.traffic.inventory import Inventory, take
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


def exchange(port: int, requests: list[dict[str, Any]]) -> list[Any]:
    """Send ``requests`` on one new connection and return the replies, in order (a plain
    blocking socket: apart from the runner's own connections)."""
    decoder = FrameDecoder(PROFILE)
    replies: dict[str, Any] = {}
    with socket.create_connection((HOST, port), timeout=10.0) as sock:
        sock.sendall(b"".join(encode_frame(dict(r, reqId=f"i{n}"), PROFILE)
                              for n, r in enumerate(requests)))
        while len(replies) < len(requests):
            data = sock.recv(65536)
            assert data, "the real server closed the inventory connection"
            for msg in decoder.feed(data):
                replies[msg.get("reqId")] = msg
    return [replies[f"i{n}"] for n in range(len(requests))]


def lists(port: int) -> dict[str, set[Any]]:
    """The server's queue, webhook and cron lists: (kind, key) of each item."""
    resources = load_profile(PROFILE).model.resources
    inv: Inventory = take(resources, lambda reqs: exchange(port, reqs), kinds=LISTED)
    assert not inv.unlisted, inv.unlisted
    return {kind: {i.key for i in inv.of(kind)} for kind in LISTED}


LISTED = ("queues", "webhooks", "crons")
OWN = "interop-own-queue"  # the server's own things: the run must leave them alone


def test_real_bunqueue_deviates_only_where_documented(real_bunqueue: tuple[int, int]) -> None:
    port, http_port = real_bunqueue
    known = parse_known_failing(KNOWN_FAILING.read_text(), str(KNOWN_FAILING))
    ids = {case.id for case in load_cases("bunqueue", PROFILE)}
    unknown = sorted(set(known) - ids)
    assert not unknown, f"{KNOWN_FAILING.name} names cases the suite does not have: {unknown}"
    own = exchange(port, [
        {"cmd": "PUSH", "queue": OWN, "data": {"mine": True}},
        {"cmd": "AddWebhook", "url": "https://example.com/interop-own", "events": ["job.failed"],
         "queue": OWN},
        {"cmd": "Cron", "name": "interop-own-cron", "queue": OWN, "data": {},
         "schedule": "0 0 1 1 *"}])
    assert all(r.get("ok") is True for r in own), own
    found = lists(port)
    assert OWN in found["queues"] and "interop-own-cron" in found["crons"] and found["webhooks"]

    run = run_target_sync("bunqueue", f"{HOST}:{port}", profile=PROFILE,
                          http_target=f"{HOST}:{http_port}", known_failing=tuple(known),
                          timeout=5.0)

    # issue 24: the run leaves the lists as it found them, the cases cleaning up themselves
    assert lists(port) == found
    assert run.residue is not None, "a bunqueue run takes an inventory of the server"
    assert run.residue.clean and run.residue.residue.appeared == (), \
        "\n".join(run.residue.lines())

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


BREAKER = """
cases:
  - id: interop.before
    title: a job in a queue of the case's own
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {}}
        expect: {ok: {}}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
  - id: interop.number-queue
    title: a job in a queue named by a number (left behind)
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: 490, data: {}}
        expect: {any_of: [{ok: {}}, {error: true}]}
  - id: interop.after
    title: another job in a queue of the case's own
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {}}
        expect: {ok: {}}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
"""


def test_a_case_that_breaks_prometheus_is_named_and_its_queue_removed(
        real_bunqueue: tuple[int, int]) -> None:
    port, _ = real_bunqueue
    found = lists(port)
    cases = load_text(textwrap.dedent(BREAKER), "breaker.yaml", "bunqueue", PROFILE)
    run = run_target_sync("bunqueue", f"{HOST}:{port}", profile=PROFILE, cases=cases,
                          timeout=5.0)
    assert [r.verdict for r in run.results] == [Verdict.PASS] * 3  # an observation, no verdict
    res = run.residue
    assert res is not None
    assert [(b.probe, b.units) for b in res.breaks] == \
        [("Prometheus", ("interop.number-queue",))], res.lines()
    assert res.breaks[0].error.startswith("error 'value.replaceAll is not a function")
    assert res.breaks[0].recovered and res.still_broken == ()
    assert [(i.kind, i.key) for i in res.residue.removed] == [("queues", 490)]
    assert res.residue.left == ()
    assert lists(port) == found
