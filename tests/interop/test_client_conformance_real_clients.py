"""`queuewire conform client` with the REAL bunqueue clients as testees: the npm bunqueue 2.9.5
client under bun (tests/interop/bunqueue_js_testee.mjs) and the PyPI bunqueue-client (its
adapter in queuewire.conformance.client.adapters.bunqueue_pypi). A few scenarios each; the full
matrix is `make client-reports` (docs/conformance/clients/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from queuewire.conformance.client.runner import run_client
from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile

HERE = Path(__file__).parent
BUN = HERE / "node_modules" / ".bin" / "bun"
PROFILE = load_profile("bunqueue/2.9.5")


def chosen(*globs: str):
    return select_scenarios(load_scenarios("bunqueue", PROFILE), globs)


def opening_only(result) -> bool:
    """Whether a scenario's only failed checks are the opening's (neither real client sends
    Hello: BQ-HELLO-1, a SHOULD the registry judges on every connection, NON-STRICT)."""
    return all((c.requirement, c.kind, c.level) == ("BQ-HELLO-1", "no_hello", "SHOULD")
               for c in result.failed_checks)


@pytest.mark.asyncio
async def test_npm_client_survives_reordered_split_and_dead_links() -> None:
    if not BUN.exists() or not (HERE / "node_modules" / "bunqueue").is_dir():
        pytest.fail("bun/bunqueue are not installed in tests/interop: run `make setup`")
    testee = Testee(f"{BUN} bunqueue_js_testee.mjs", cwd=str(HERE), label="bunqueue-npm")
    run = await run_client(testee, chosen("*out-of-order", "*split", "*dead-link"), PROFILE)
    # the missing Hello is reported once, by the first scenario; the others pass otherwise
    # and end INFO naming it (a client's defect is one finding, issue 30)
    # (dead-link reconnects: a connection that opens with another command than before is a
    # fresh sighting, NON-STRICT again)
    verdicts = {r.case.id: r.verdict for r in run.results}
    assert verdicts["bunqueue.client.replies-out-of-order"] is Verdict.NON_STRICT
    assert verdicts["bunqueue.client.replies-split"] is Verdict.INFO
    assert verdicts["bunqueue.client.dead-link"] in (Verdict.INFO, Verdict.NON_STRICT)
    first, *rest = run.results
    assert opening_only(first) and first.failed_checks
    for r in rest:
        assert opening_only(r) and (r.verdict is Verdict.NON_STRICT or any(
            c.kind == "blocked" and first.case.id in c.message for c in r.checks))


@pytest.mark.asyncio
async def test_pypi_client_never_tears_a_dead_socket_down() -> None:
    pytest.importorskip("bunqueue")
    testee = Testee(f"{sys.executable} -m queuewire.conformance.client.adapters.bunqueue_pypi",
                    label="bunqueue-client")
    run = await run_client(testee, chosen("*split", "*dead-link"), PROFILE)
    by_id = {r.case.id: r for r in run.results}
    split = by_id["bunqueue.client.replies-split"]
    assert split.verdict is Verdict.NON_STRICT and opening_only(split)
    dead = by_id["bunqueue.client.dead-link"]
    # it reconnects after 3 timeouts, but its teardown close()s the socket while its reader
    # thread is blocked in recv() on it: CPython then sends no FIN (no shutdown() first), so the
    # server never sees the dead link torn down
    # BQ-CLIENT-6 describes what bunqueue's own client does after the detection: a SHOULD
    assert dead.verdict is Verdict.NON_STRICT
    assert {(c.requirement, c.level) for c in dead.failed_checks} == {("BQ-CLIENT-6", "SHOULD"),
                                                                    ("BQ-HELLO-1", "SHOULD")}


@pytest.mark.asyncio
async def test_int64_rule_under_v3_fails_the_npm_client_and_passes_the_pypi_client() -> None:
    """Protocol 3's int64 rule (upstream docs/protocol.md section 4: an integer outside int32
    goes as float64), judged from the frames' bytes: msgpackr writes 3000000000 as uint32, so
    the npm client FAILs BQ-MSGPACK-204 (and writes 1764000000000 as float64: no uint64,
    BQ-MSGPACK-203 holds); the PyPI client's guard writes both as float64."""
    if not BUN.exists() or not (HERE / "node_modules" / "bunqueue").is_dir():
        pytest.fail("bun/bunqueue are not installed in tests/interop: run `make setup`")
    v3 = load_profile("bunqueue/v3")
    scenarios = select_scenarios(load_scenarios("bunqueue", v3), ["*int64-rule"])
    assert [s.id for s in scenarios] == ["bunqueue.client.int64-rule"]
    npm = await run_client(Testee(f"{BUN} bunqueue_js_testee.mjs", cwd=str(HERE),
                                  label="bunqueue-npm"), scenarios, v3)
    (result,) = npm.results
    failed = {(c.requirement, c.kind) for c in result.failed_checks}
    assert result.verdict is Verdict.FAIL and ("BQ-MSGPACK-204", "client_forms") in failed
    assert ("BQ-MSGPACK-203", "client_forms") not in failed
    assert "3000000000 written as msgpack uint32" in next(
        c.message for c in result.failed_checks if c.requirement == "BQ-MSGPACK-204")
    pytest.importorskip("bunqueue")
    pypi = await run_client(Testee(f"{sys.executable} -m queuewire.conformance.client.adapters."
                                   "bunqueue_pypi", label="bunqueue-client"), scenarios, v3)
    (result,) = pypi.results
    assert not [c for c in result.failed_checks if c.kind == "client_forms"], result.failed_checks
    assert opening_only(result)


@pytest.mark.asyncio
async def test_not_found_rule_under_v3_fails_the_npm_client_that_hides_every_refusal() -> None:
    """Protocol 3 (docs/protocol.md section 6.2): a lookup maps "not found" to null and
    propagates every other error. The npm client's getJob answers null for any error reply
    (src/client/queue/operations/query.ts: `if (!response.ok || !response.job) return null`),
    so a refused GetJob FAILs BQ-QUERY-202; the PyPI client raises it, as the rule asks."""
    if not BUN.exists() or not (HERE / "node_modules" / "bunqueue").is_dir():
        pytest.fail("bun/bunqueue are not installed in tests/interop: run `make setup`")
    v3 = load_profile("bunqueue/v3")
    scenarios = select_scenarios(load_scenarios("bunqueue", v3), ["*not-found-is-null"])
    npm = await run_client(Testee(f"{BUN} bunqueue_js_testee.mjs", cwd=str(HERE),
                                  label="bunqueue-npm"), scenarios, v3)
    (result,) = npm.results
    failed = [c for c in result.failed_checks if c.requirement == "BQ-QUERY-202"]
    assert result.verdict is Verdict.FAIL and [c.message for c in failed] == [
        "action 1: differs in ok, error_type"], result.failed_checks
    pytest.importorskip("bunqueue")
    pypi = await run_client(Testee(f"{sys.executable} -m queuewire.conformance.client.adapters."
                                   "bunqueue_pypi", label="bunqueue-client"), scenarios, v3)
    (result,) = pypi.results
    assert opening_only(result), result.failed_checks
