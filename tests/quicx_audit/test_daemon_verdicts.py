"""Issue 30's acceptance, daemon side: queuewire judges independent quicx/v1 daemons (the
family in ``daemon.py``, written from document 004 alone) as an implementer can trust.

* the correct daemon passes ``conform server`` (its stateful pass included) and a 30 s
  ``fuzz`` run;
* each design variant (a legitimate reading of 004) gets no FAIL, ERROR or UNIMPLEMENTED;
* each one-bug mutant is caught with a verdict that cites the rule it breaks, in bounded
  time (under 2 minutes), with at most a handful of failing cases beyond the correct
  daemon's own.

Every daemon is run once, concurrently, by a module fixture; the tests read the runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from audit_support import cases_with, load

from queuewire.cli.conform import stateful_passes
from queuewire.conformance.model import Verdict, deciding_check
from queuewire.conformance.runner import run_target
from queuewire.fuzz.campaign import campaign

HERE = Path(__file__).resolve().parent
PROFILE = "quicx/v1"
HANDFUL = 5          # failing cases a mutant may add beyond the correct daemon's
BOUND_S = 120.0      # a broken daemon's whole conformance run, stateful pass included
FUZZ_S = 30.0        # the correct daemon's fuzz run
TIMEOUT_S = 2.0      # conform --timeout: how long a step waits for an answer
PARALLEL = 8         # daemons judged at once (the runs mostly wait)


daemon = load("daemon")

#: mutant -> the requirements a verdict catching it may cite (the rule it breaks; where a
#: bug shows through two rules of 004, either)
CAUGHT_BY = {
    "task-typelen-off-by-one": {"QX-TASK-2", "QX-TASK-4", "QX-TASK-1"},
    "little-endian-lengths": {"QX-HDR-5"},
    "oversize-code-0x02": {"QX-ERR-4"},
    "lose-task-on-disconnect": {"QX-WORKER-1"},
    "swapped-stats": {"QX-STATS-5"},
    "ok-id-little-endian": {"QX-OK-1"},
    "no-pong": {"QX-HB-2"},
    "accept-bad-version": {"QX-HDR-3"},
    "no-wait": {"QX-READY-3", "QX-WAIT-1", "QX-MSG-8"},
    "wait-with-payload": {"QX-HDR-6"},
    "unknown-type-code-0x04": {"QX-ERR-3"},
    "done-keeps-slot": {"QX-DONE-2"},
}


async def _judge(variant: str, gate: asyncio.Semaphore) -> dict[str, Any]:
    async with gate, daemon.AuditDaemon(variant=variant) as d:
        started = time.monotonic()
        run = await run_target("quicx", f"127.0.0.1:{d.port}", profile=PROFILE,
                               timeout=TIMEOUT_S, passes=stateful_passes("quicx", 50, PROFILE))
        return {"run": run, "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    names = ["correct", *sorted(set(daemon.VARIANTS) - {"correct"}), *sorted(daemon.MUTANTS)]

    async def main() -> list[dict[str, Any]]:
        gate = asyncio.Semaphore(PARALLEL)
        return list(await asyncio.gather(*(_judge(n, gate) for n in names)))
    return dict(zip(names, asyncio.run(main())))


def test_every_mutant_has_an_expectation():
    assert set(CAUGHT_BY) == set(daemon.MUTANTS)


def test_the_correct_daemon_passes_conform(runs):
    run = runs["correct"]["run"]
    assert not cases_with(run, Verdict.FAIL, Verdict.ERROR, Verdict.UNIMPLEMENTED)
    assert sum(r.verdict is Verdict.PASS for r in run.results) >= 60
    stateful = next(r for r in run.results if r.case.id == "quicx.stateful.dispatch")
    assert stateful.verdict is Verdict.PASS


@pytest.mark.parametrize("variant", sorted(set(daemon.VARIANTS) - {"correct"}))
def test_a_design_variant_gets_no_fail_error_or_unimplemented(runs, variant):
    run = runs[variant]["run"]
    assert not cases_with(run, Verdict.FAIL, Verdict.ERROR, Verdict.UNIMPLEMENTED), variant


@pytest.mark.parametrize("mutant", sorted(CAUGHT_BY))
def test_a_mutant_is_caught_by_its_rule_in_bounded_time_with_few_failing_cases(runs, mutant):
    base = cases_with(runs["correct"]["run"], Verdict.FAIL, Verdict.NON_STRICT)
    run, seconds = runs[mutant]["run"], runs[mutant]["seconds"]
    new = {k: v for k, v in cases_with(run, Verdict.FAIL, Verdict.NON_STRICT).items()
           if k not in base}
    assert not cases_with(run, Verdict.ERROR), mutant
    cited = {deciding_check(r.checks).requirement for r in run.results if r.case.id in new}
    assert cited & CAUGHT_BY[mutant], (mutant, new)
    assert len(new) <= HANDFUL, (mutant, new)
    assert seconds < BOUND_S, (mutant, seconds)


@pytest.mark.asyncio
async def test_the_correct_daemon_passes_a_30_s_fuzz_run():
    async with daemon.AuditDaemon(variant="correct") as d:
        stats = await campaign("quicx", PROFILE, "127.0.0.1", d.port, seed=30,
                               duration=FUZZ_S, workers=1, prewarm=False, housekeeping=False)
    assert stats.cases > 1000
    assert stats.failures == 0, [(c.index, [str(f) for f in fs if f.fails])
                                 for c, _s, fs in stats.failed]


@pytest.mark.asyncio
@pytest.mark.parametrize("variant", ["whole-frame", "close-after-error", "refuse-pong",
                                     "heartbeats"])
async def test_a_design_variant_passes_a_short_fuzz_run(variant):
    async with daemon.AuditDaemon(variant=variant) as d:
        stats = await campaign("quicx", PROFILE, "127.0.0.1", d.port, seed=31,
                               duration=2.0, workers=1, prewarm=False, housekeeping=False)
    assert stats.cases > 50
    assert stats.failures == 0, [(c.index, [str(f) for f in fs if f.fails])
                                 for c, _s, fs in stats.failed]

