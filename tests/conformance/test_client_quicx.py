"""Client conformance for quicx: the checker's rules, and queuewire's own quicx producer and
worker against the adversarial quicx scenarios over loopback."""

from __future__ import annotations

import sys

import pytest

from queuewire.codecs.quicx import QuicxEncoder
from queuewire.conformance.client.quicx_server import QuicxClientChecker
from queuewire.conformance.client.runner import run_client
from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile

V1 = load_profile("quicx/v1")
OWN = f"{sys.executable} -m queuewire.conformance.client.adapters.queuewire_quicx"


def test_a_result_for_a_task_never_handed_out_breaks_qx_task_3() -> None:
    enc = QuicxEncoder(V1)
    c = QuicxClientChecker(V1)
    c.opened(1)
    c.replied(1, "MSG_TASK", {"task_id": 7}, 0.0)
    c.feed(1, enc.encode("MSG_DONE", task_id=7) + enc.encode("MSG_DONE", task_id=8), 0.1)
    bad = [(k.requirement, k.level) for k in c.checks() if not k.ok]
    assert bad == [("QX-TASK-3", "MUST")]
    assert [name for _, _, name, _ in c.received] == ["MSG_DONE", "MSG_DONE"]


def test_a_bad_header_cites_the_decoders_requirement() -> None:
    c = QuicxClientChecker(V1)
    c.opened(1)
    _, error = c.feed(1, b"\x07\x04\x00\x00\x00\x00", 0.0)   # version 7
    assert error is not None
    assert any(not k.ok and k.requirement.startswith("QX-") for k in c.checks())


def test_scenarios_per_profile() -> None:
    v1 = {s.id for s in load_scenarios("quicx", V1)}
    p103 = {s.id for s in load_scenarios("quicx", load_profile("quicx/1.0.3"))}
    assert {"quicx.client.wait-storm", "quicx.client.task-then-disconnect",
            "quicx.client.late-pong", "quicx.client.heartbeat-answered"} <= v1
    assert "quicx.client.wait-storm" not in p103 and "quicx.client.task-then-disconnect" in p103


@pytest.mark.asyncio
async def test_queuewire_quicx_client_passes_the_quicx_scenarios() -> None:
    chosen = select_scenarios(load_scenarios("quicx", V1),
                              ["quicx.client.basic", "quicx.client.ready-again",
                               "quicx.client.wait-storm", "quicx.client.task-then-disconnect",
                               "quicx.client.heartbeat-answered", "quicx.client.late-pong"])
    run = await run_client(Testee(OWN, label="queuewire-quicx"), chosen, V1)
    observed = {"quicx.client.late-pong": Verdict.INFO}    # judged by no requirement
    bad = {r.case.id: [(c.requirement, c.message) for c in r.failed_checks] or r.error
           for r in run.results if r.verdict is not observed.get(r.case.id, Verdict.PASS)}
    assert not bad, bad
    assert len(run.results) == 6
    cells = {r["capability"]: r for r in run.server_info["capabilities"]}
    assert {k: c["state"] for k, c in cells.items()} == {
        "pipelining": "not observable",   # the quicx contract asks for no concurrent submits
        "heartbeats": "used", "reconnect": "used", "dead-link detection": "used",
        "auth": "not observable", "events": "not observable"}   # quicx has neither
    assert "MSG_HEARTBEAT" in cells["heartbeats"]["evidence"]
    assert cells["dead-link detection"]["scenarios"] == ["quicx.client.late-pong"]
    assert cells["reconnect"]["scenarios"] == ["quicx.client.task-then-disconnect"]
