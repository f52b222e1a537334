"""The client conformance runner end to end over loopback: queuewire's own client passes every
bunqueue scenario; deliberately broken testees FAIL with the requirement they break."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from queuewire.conformance.client.runner import run_client, scenario_limit
from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile

BROKEN = Path(__file__).parent / "client_testees" / "broken_bunqueue.py"
OWN = f"{sys.executable} -m queuewire.conformance.client.adapters.queuewire_client"


def scenarios(profile: str, *globs: str):
    return select_scenarios(load_scenarios("bunqueue", load_profile(profile)), globs)


@pytest.mark.asyncio
async def test_queuewire_client_passes_the_protocol_3_scenarios() -> None:
    """Under bunqueue/v3 the client writes integers beyond int32 as float64 (BQ-MSGPACK-203,
    204, judged from its bytes) and maps only a lookup's not-found answer to None
    (BQ-QUERY-202)."""
    v3 = load_profile("bunqueue/v3")
    chosen = select_scenarios(load_scenarios("bunqueue", v3), ["*int64-rule", "*not-found-is-null"])
    run = await run_client(Testee(OWN, label="queuewire-client"), chosen, v3)
    assert [(r.case.id, r.verdict) for r in run.results] == [
        ("bunqueue.client.int64-rule", Verdict.PASS),
        ("bunqueue.client.not-found-is-null", Verdict.PASS)], [r.failed_checks for r in run.results]
    checked = {c.kind for r in run.results for c in r.checks}
    assert "client_forms" in checked


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["bunqueue/v2"])
async def test_queuewire_client_passes_every_bunqueue_scenario(profile: str) -> None:
    chosen = scenarios(profile)
    run = await run_client(Testee(OWN, label="queuewire-client"), chosen, load_profile(profile))
    verdicts = {r.case.id: r.verdict for r in run.results}
    bad = {r.case.id: [(c.requirement, c.message) for c in r.failed_checks] or r.error
           for r in run.results if r.verdict is not Verdict.PASS}
    assert not bad, bad
    assert len(verdicts) == len(chosen) >= 12
    for r in run.results:   # a pass looked at bytes: every result has wire events and checks
        assert any(e.direction == "recv" and e.data for e in r.transcript.events), r.case.id
        assert r.checks and all(c.requirement for c in r.checks)
    assert run.coverage.exercised and "BQ-PIPE-4" in run.coverage.exercised
    # the capability table: the wire shows every capability a scenario gives the chance to
    cells = {r["capability"]: r for r in run.server_info["capabilities"]}
    assert {k: c["state"] for k, c in cells.items()} == {
        "pipelining": "used", "heartbeats": "used", "reconnect": "used",
        "dead-link detection": "used", "auth": "used",
        "events": "not observable"}     # bunqueue/v2 has no command of the events category
    assert cells["dead-link detection"]["scenarios"] == ["bunqueue.client.dead-link"]
    assert cells["auth"]["scenarios"] == ["bunqueue.client.auth"]
    assert "bunqueue.client.replies-out-of-order" in cells["pipelining"]["scenarios"]


async def broken(mode: str, *globs: str):
    testee = Testee(f"{sys.executable} {BROKEN} {mode}", label=f"broken-{mode}")
    return await run_client(testee, scenarios("bunqueue/v2", *globs), load_profile("bunqueue/v2"))


def failing(result) -> set[tuple[str | None, str]]:
    return {(c.requirement, c.level) for c in result.failed_checks}


@pytest.mark.asyncio
async def test_a_command_before_auth_fails_bq_auth_1() -> None:
    run = await broken("no-auth", "bunqueue.client.auth")
    (result,) = run.results
    assert result.verdict is Verdict.FAIL
    assert ("BQ-AUTH-1", "MUST") in failing(result)


@pytest.mark.asyncio
async def test_duplicate_reqids_fail_bq_pipe_4() -> None:
    run = await broken("dup-reqid", "bunqueue.client.basic")
    (result,) = run.results
    assert result.verdict is Verdict.FAIL
    assert ("BQ-PIPE-4", "MUST") in failing(result)
    bad = next(c for c in result.failed_checks if c.requirement == "BQ-PIPE-4")
    assert bad.actual["reqId"] == "7"    # the offending frame, as the wire carried it


@pytest.mark.asyncio
async def test_an_ack_without_its_lock_token_fails_bq_lock_2() -> None:
    run = await broken("ack-no-token", "bunqueue.client.basic")
    (result,) = run.results
    assert ("BQ-LOCK-2", "MUST") in failing(result)


@pytest.mark.asyncio
async def test_a_testee_that_exits_is_an_error_not_a_verdict() -> None:
    run = await broken("exit", "bunqueue.client.basic", "bunqueue.client.auth")
    assert [r.verdict for r in run.results] == [Verdict.ERROR, Verdict.ERROR]
    assert "exited" in (run.results[0].error or "")


def test_scenario_limit_counts_sleeps_timeouts_and_commands() -> None:
    limit = scenario_limit([{"op": "sleep", "ms": 1000}, {"op": "process", "timeout_ms": 2000}],
                           {"command_timeout": 500})
    assert limit == pytest.approx(10 + 1 + 2 + 2 * 0.5)
