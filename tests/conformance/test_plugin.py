"""The pytest plugin (entry point ``pytest11``), run through pytester against the embedded
reference server and against a small broken server over real TCP."""

from __future__ import annotations

import pytest

from queuewire.conformance.model import Verdict
from queuewire.conformance.runner import load_cases, run_target_sync

pytest_plugins = ["pytester"]


def test_inactive_without_target(pytester):
    pytester.makepyfile(test_mine="def test_mine():\n    assert True\n")
    result = pytester.runpytest("--collect-only", "-q")
    result.assert_outcomes()
    assert result.ret == 0
    collected = [line for line in result.outlines if "::" in line]
    assert collected == ["test_mine.py::test_mine"]
    help_text = pytester.runpytest("--help").stdout.str()
    for option in ("--queuewire-target", "--queuewire-protocol", "--queuewire-profile",
                   "--queuewire-auth-token", "--queuewire-strict"):
        assert option in help_text


def test_collects_one_item_per_case(pytester):
    result = pytester.runpytest("--collect-only", "-q", "--queuewire-target", "embedded",
                                "--queuewire-protocol", "quicx", "--queuewire-profile", "quicx/v1")
    ids = [c.id for c in load_cases("quicx", "quicx/v1")]
    assert ids
    assert [line for line in result.outlines if line in set(ids)] == ids


def test_bad_target_is_a_usage_error(pytester):
    result = pytester.runpytest("--queuewire-target", "nohost")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not HOST:PORT" in result.stderr.str()


def _expected(protocol: str, profile: str, ids: list[str]) -> dict[str, int]:
    run = run_target_sync(protocol, "embedded", profile=profile, select=ids)
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for r in run.results:
        if r.verdict in (Verdict.FAIL, Verdict.ERROR):
            out["failed"] += 1
        elif r.verdict in (Verdict.UNIMPLEMENTED, Verdict.INFO):
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def _select(ids: list[str]) -> list[str]:
    return [a for i in ids for a in ("--queuewire-select", i)]


def test_runs_cases_against_embedded_server(pytester):
    ids = [c.id for c in load_cases("quicx", "quicx/v1")][:4]
    expected = _expected("quicx", "quicx/v1", ids)
    result = pytester.runpytest("--queuewire-target", "embedded", "--queuewire-protocol", "quicx",
                                "--queuewire-profile", "quicx/v1", *_select(ids))
    result.assert_outcomes(**expected)
    assert sum(expected.values()) == len(ids)


def test_failing_case_fails_with_checks_and_reproduction(pytester, closing_server):
    cases = [c for c in load_cases("bunqueue", "bunqueue/v2") if not c.info][:2]
    target = f"127.0.0.1:{closing_server.port}"
    result = pytester.runpytest("--queuewire-target", target, "--queuewire-protocol", "bunqueue",
                                "--queuewire-timeout", "0.5", *_select([c.id for c in cases]))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1
    assert f"reproduce: queuewire conform server --protocol bunqueue --target {target}" in out
    assert "expected:" in out or "error:" in out


def test_known_failing_cases_are_xfail_and_a_passing_entry_is_stale(pytester, closing_server):
    """Against a server that breaks everything, a listed case is xfail; against the embedded
    reference server the same listed case passes, which fails the run (stale list)."""
    (case,) = [c for c in load_cases("bunqueue", "bunqueue/v2") if not c.info][:1]
    known = pytester.path / "known.txt"
    known.write_text(f"{case.id}  # closes every connection\n")
    args = ("--queuewire-protocol", "bunqueue", "--queuewire-timeout", "0.5",
            "--queuewire-known-failing", str(known), *_select([case.id]))
    broken = pytester.runpytest("-rx", "--queuewire-target", f"127.0.0.1:{closing_server.port}",
                                *args)
    broken.assert_outcomes(xfailed=1)
    assert broken.ret == pytest.ExitCode.OK
    assert "known failing (closes every connection)" in broken.stdout.str()
    healthy = pytester.runpytest("--queuewire-target", "embedded", *args)
    healthy.assert_outcomes(failed=1)
    assert "the list is stale" in healthy.stdout.str()


def test_unreadable_known_failing_file_is_a_usage_error(pytester):
    result = pytester.runpytest("--queuewire-target", "embedded",
                                "--queuewire-known-failing", str(pytester.path / "missing.txt"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot read known-failing file" in result.stderr.str()
