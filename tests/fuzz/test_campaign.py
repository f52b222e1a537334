"""Bounded fuzz campaigns (a few seconds each) against both reference servers find nothing,
and the ``queuewire fuzz`` command runs, reports and sets its exit status."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.fuzz.runner import campaign, target

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
                               reuse=reuse, workers=2)
    assert stats.cases > 50
    assert stats.failures == 0, [(c.index, [str(f) for f in fs if f.fails])
                                 for c, _s, _p, fs in stats.failed]
    assert stats.requirements  # the run covered requirement ids
    if protocol == "bunqueue":
        assert len(stats.commands) > 30


def test_cli_fuzz_runs_and_exits_zero_when_clean():
    result = CliRunner().invoke(main, ["fuzz", "--protocol", "bunqueue", "--target", "embedded",
                                       "--max-examples", "150", "--seed", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "150 cases" in result.output and "0 failing" in result.output


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
