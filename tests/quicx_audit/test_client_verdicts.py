"""Issue 30's acceptance, client side: ``conform client`` judges independent quicx/v1
clients (the raw-socket testee in ``client.py``, written from document 004 alone) as an
implementer can trust: the correct client and its design variants get no FAIL, ERROR or
UNIMPLEMENTED (a worker that stops after its last result, with or without one more
MSG_READY; one that does not reconnect after a drop is NON-STRICT at most, 004 does not make
it reconnect); each one-bug mutant is caught citing the rule it breaks, with at most a handful
of failing scenarios (a defect every scenario meets is reported by the first), in bounded
time. Every testee is run once, concurrently, by a module fixture."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from audit_support import cases_with, load

from queuewire.conformance.client.runner import run_client
from queuewire.conformance.client.scenarios import load_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict, deciding_check
from queuewire.spec import load_profile

HERE = Path(__file__).resolve().parent
V1 = load_profile("quicx/v1")
HANDFUL = 3
BOUND_S = 120.0

client = load("client")

#: testee -> the requirements a verdict catching it may cite
CAUGHT_BY = {
    "no-ready": {"QX-READY-2"},
    "done-wrong-id": {"QX-TASK-3"},
    "done-little-endian": {"QX-TASK-3"},
    "no-pong": {"QX-HB-2"},
    "submit-typelen-off-by-one": {"QX-SUBMIT-1"},
    "no-ready-after-wait": {"QX-WAIT-2"},
    # a producer that reads its socket only while it waits for MSG_OK leaves the daemon's
    # MSG_HEARTBEAT unanswered: 004 has the receiver reply, so that is caught too
    "sync-producer": {"QX-HB-2"},
}
VARIANTS = sorted(set(client.VARIANTS) - set(CAUGHT_BY))


async def _judge(name: str) -> dict[str, Any]:
    testee = Testee(f"{sys.executable} {HERE / 'client.py'} --variant {name}", label=name)
    started = time.monotonic()
    run = await run_client(testee, load_scenarios("quicx", V1), V1)
    return {"run": run, "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    names = [*VARIANTS, *sorted(client.MUTANTS), "sync-producer"]

    async def main() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(_judge(n) for n in names)))
    return dict(zip(names, asyncio.run(main())))


def test_every_mutant_has_an_expectation():
    assert set(client.MUTANTS) <= set(CAUGHT_BY)
    assert "correct" in VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_correct_client_or_design_variant_gets_no_fail_error_or_unimplemented(runs, variant):
    run = runs[variant]["run"]
    assert not cases_with(run, Verdict.FAIL, Verdict.ERROR, Verdict.UNIMPLEMENTED), variant
    assert sum(r.verdict is Verdict.PASS for r in run.results) >= 4


@pytest.mark.parametrize("mutant", sorted(CAUGHT_BY))
def test_a_client_mutant_is_caught_by_its_rule_with_few_failing_scenarios(runs, mutant):
    run, seconds = runs[mutant]["run"], runs[mutant]["seconds"]
    failing = cases_with(run, Verdict.FAIL, Verdict.NON_STRICT)
    assert not cases_with(run, Verdict.ERROR), mutant
    cited = {deciding_check(r.checks).requirement for r in run.results
             if r.case.id in failing}
    assert cited & CAUGHT_BY[mutant], (mutant, failing)
    assert len(failing) <= HANDFUL, (mutant, failing)
    assert seconds < BOUND_S, (mutant, seconds)
