"""Bounded fuzz campaigns (a few seconds each, two forked workers) against both reference
servers find nothing, the workers share out the case indices, and the ``queuewire fuzz``
command runs, reports and sets its exit status."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.fuzz.campaign import campaign
from queuewire.fuzz.runner import target

SECONDS = 2.0


@pytest.mark.asyncio
@pytest.mark.parametrize("protocol, profile, reuse", [
    ("bunqueue", "bunqueue/v2", True),
    ("bunqueue", "bunqueue/v2", False),
    ("bunqueue", "bunqueue/2.9.5", True),
    ("quicx", "quicx/v1", True),
    ("quicx", "quicx/1.0.3", True),
])
async def test_a_bounded_run_against_the_reference_server_is_clean(protocol, profile, reuse):
    async with target("embedded", protocol, profile) as (host, port):
        stats = await campaign(protocol, profile, host, port, seed=2026, duration=SECONDS,
                               reuse=reuse, workers=2, prewarm=False)
    assert stats.cases > 50
    assert stats.failures == 0, [(c.index, [str(f) for f in fs if f.fails])
                                 for c, _s, fs in stats.failed]
    assert stats.requirements  # the run covered requirement ids
    if protocol == "bunqueue":
        assert len(stats.commands) > 30


@pytest.mark.asyncio
async def test_forked_workers_play_each_index_once_and_report_cpu_and_connects():
    async with target("embedded", "bunqueue", "bunqueue/v2") as (host, port):
        one = await campaign("bunqueue", "bunqueue/v2", host, port, seed=5, max_examples=120,
                             start=40)
        three = await campaign("bunqueue", "bunqueue/v2", host, port, seed=5,
                               max_examples=120, start=40, workers=3, prewarm=False)
    assert one.cases == three.cases == 120
    assert one.commands == three.commands and one.requirements == three.requirements
    assert three.cpu > 0 and 0 < three.connects <= 2 * three.cases


def test_cli_fuzz_runs_and_exits_zero_when_clean():
    result = CliRunner().invoke(main, ["fuzz", "--protocol", "bunqueue", "--target", "embedded",
                                       "--max-examples", "150", "--seed", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "150 cases" in result.output and "0 failing" in result.output
    assert "cases/s per core" in result.output and "connects" in result.output


def test_cli_fuzz_diff_against_itself_reports_no_difference():
    async def run() -> tuple:
        async with target("embedded", "quicx", "quicx/v1") as (h, p):
            return await asyncio.to_thread(CliRunner().invoke, main, [
                "fuzz", "--protocol", "quicx", "--target", f"127.0.0.1:{p}", "--diff",
                f"127.0.0.1:{p}", "--max-examples", "40", "--seed", "1", "--quiet"])
    result = asyncio.run(run())
    assert result.exit_code == 0, result.output
    assert "differ in kind" not in result.output


def test_cli_fuzz_needs_protocol_and_target():
    result = CliRunner().invoke(main, ["fuzz"])
    assert result.exit_code == 2 and "--protocol" in result.output


def test_cli_fuzz_says_how_to_install_hypothesis_when_missing():
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "from queuewire.cli import main\n"
            "main(['fuzz', '--protocol', 'bunqueue', '--target', 'embedded'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          timeout=60)
    assert proc.returncode != 0
    assert "pip install 'queuewire[fuzz]'" in proc.stderr


@pytest.mark.asyncio
async def test_workers_clean_up_the_queues_their_cases_named(monkeypatch):
    """Setup commands between cases keep the server's state small; they are no cases."""
    from queuewire.codecs.bunqueue import FrameEncoder
    from queuewire.fuzz import campaign as campaign_module
    from queuewire.fuzz.case import Case
    from queuewire.fuzz.shrink import run_fresh
    from queuewire.spec import load_profile

    listing = Case("bunqueue", "bunqueue/v2", [FrameEncoder(load_profile("bunqueue/v2")).encode(
        {"cmd": "ListQueues", "reqId": "l"})])
    left = {}
    for every in (25, 10**9):
        monkeypatch.setattr(campaign_module, "CLEANUP_EVERY", every)
        async with target("embedded", "bunqueue", "bunqueue/v2") as (host, port):
            stats = await campaign("bunqueue", "bunqueue/v2", host, port, seed=5,
                                   max_examples=100, housekeeping=False)
            res = await run_fresh("bunqueue", "bunqueue/v2", host, port, listing)
        assert stats.cases == 100 and stats.failures == 0
        left[every] = (len(res.replies[0]["queues"]), stats.setup)
    (cleaned, setup), (kept, none) = left[25], left[10**9]
    assert setup > 0 and none == 0
    assert cleaned < kept / 2, left


@pytest.mark.asyncio
async def test_a_run_leaves_the_server_as_it_found_it():
    """Housekeeping: what the cases made (queues, webhooks, crons, workers) is removed at the
    end; the lists are those from before the run, and the run says so."""
    from queuewire.fuzz.residue import Housekeeping
    from queuewire.spec import load_profile
    from queuewire.traffic.inventory import take

    profile = load_profile("bunqueue/v2")
    async with target("embedded", "bunqueue", "bunqueue/v2") as (host, port):
        house = Housekeeping(profile, host, port)
        mine = await asyncio.to_thread(house.exchange, [
            {"cmd": "PUSH", "queue": "users-own", "data": {"n": 1}},
            {"cmd": "Cron", "name": "users-cron", "queue": "users-own", "repeatEvery": 60000,
             "data": {}}])
        assert all(r and r.get("ok") for r in mine), mine
        before = await asyncio.to_thread(take, house.resources, house.exchange)
        stats = await campaign("bunqueue", "bunqueue/v2", host, port, seed=5,
                               max_examples=400)
        after = await asyncio.to_thread(take, house.resources, house.exchange)
    assert stats.residue is not None and stats.residue.appeared, "the cases made nothing?"
    assert stats.residue.clean and not stats.breaks, stats.residue
    assert set(after.items) == set(before.items) and not after.new_since(before)
    assert any(i.key == "users-own" for i in after.items.values())   # what was there stays
