"""``run_target(jobs=N)``: at most N cases at once, an ``exclusive`` case with no other; and
the ``exclusive`` key of the case language. (That a parallel run of each packaged suite gives
the serial verdicts is checked in test_bunqueue_suite.py and test_quicx_suite.py.)"""

from __future__ import annotations

import asyncio

import pytest

from queuewire.conformance import runner
from queuewire.conformance.loader import CaseError, load_text
from queuewire.conformance.model import Case, CaseResult, Transcript, Verdict

CASE = """
cases:
  - id: t.one
    title: one
    requirements: [BQ-ENV-1]
    exclusive: {value}
    steps:
      - send: {{cmd: Ping}}
"""


def test_exclusive_key_is_read_and_checked() -> None:
    assert load_text(CASE.format(value="true"), "t.yaml", "bunqueue")[0].exclusive is True
    assert load_text(CASE.format(value="false"), "t.yaml", "bunqueue")[0].exclusive is False
    with pytest.raises(CaseError, match="exclusive: takes true or false"):
        load_text(CASE.format(value="yes please"), "t.yaml", "bunqueue")


def test_packaged_suites_mark_server_wide_cases() -> None:
    bq = {c.id: c for c in runner.load_cases("bunqueue", "bunqueue/v2")}
    for cid in ("bunqueue.shape.Stats", "bunqueue.shape.ListQueues", "bunqueue.shape.ListWorkers",
                "bunqueue.shape.AddWebhook", "bunqueue.query.list-queues",
                "bunqueue.worker.listed", "bunqueue.monitor.stats-counts"):
        assert bq[cid].exclusive, cid
    assert not bq["bunqueue.shape.PUSH"].exclusive
    qx = {c.id: c for c in runner.load_cases("quicx", "quicx/v1")}
    assert qx["quicx.worker.fifo"].exclusive and qx["quicx.stats.response"].exclusive
    assert qx["quicx.split.submit-byte-by-byte"].exclusive  # its worker drains the queue
    assert not qx["quicx.vector.bad-version-0x00"].exclusive


def test_gate_runs_exclusive_cases_alone(monkeypatch) -> None:
    running: set[str] = set()
    seen: list[tuple[str, frozenset[str]]] = []
    peak = 0

    async def fake_run_case(case, *args, **kwargs):
        nonlocal peak
        running.add(case.id)
        peak = max(peak, len(running))
        seen.append((case.id, frozenset(running)))
        await asyncio.sleep(0.02)
        seen.append((case.id, frozenset(running)))
        running.discard(case.id)
        return CaseResult(case, Verdict.PASS, [], Transcript(), 0.02, None, "", False)

    monkeypatch.setattr(runner, "run_case", fake_run_case)
    cases = [Case(f"t.{i}", "t", "quicx", ("QX-HDR-1",), steps=({"sleep": 1},),
                  exclusive=i % 5 == 2) for i in range(20)]
    run = runner.run_target_sync("quicx", "embedded", profile="quicx/v1", cases=cases, jobs=4)
    assert [r.case.id for r in run.results] == [c.id for c in cases]
    exclusive = {c.id for c in cases if c.exclusive}
    for cid, others in seen:
        assert len(others) <= 4
        if cid in exclusive:
            assert others == {cid}, (cid, others)
    assert peak == 4
