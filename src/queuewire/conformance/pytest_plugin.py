"""pytest plugin: run the conformance suite against a server as pytest items.

Registered as the ``pytest11`` entry point ``queuewire``, so installing queuewire is enough::

    pytest --queuewire-target 127.0.0.1:6789 --queuewire-protocol bunqueue

Without ``--queuewire-target`` the plugin only adds its options: it collects nothing and imports
nothing beyond this module, so it cannot disturb a test run. With it, one item per case of the
protocol and profile is added to the session (node id = the case id, so ``-k`` and
``--deselect`` work as usual; ``--queuewire-select`` / ``--queuewire-skip`` take the CLI's
globs). The first item to run executes every selected case in one
``run_target`` call (one embedded server, one connection plan) and caches the results; each
item then reports its own case: FAIL and ERROR fail with the failed checks (requirement,
level, expected, actual) and the reproduction line, NON-STRICT and UNIMPLEMENTED fail only
with ``--queuewire-strict``, INFO and UNIMPLEMENTED (not strict) are skipped with their
reason, and NON-STRICT (not strict) passes with a report section saying what was not followed.
A case listed in ``--queuewire-known-failing`` is xfail while it fails and a failure once it
passes (the list went stale), as in the CLI.
"""

from __future__ import annotations

import glob
import json
from typing import Any

import pytest

_RESULTS = pytest.StashKey[dict]()
_KNOWN = pytest.StashKey[dict[str, str]]()  # case id -> reason, from --queuewire-known-failing


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("queuewire", "queuewire conformance (run the suite against a server)")
    group.addoption("--queuewire-target", metavar="HOST:PORT|embedded", default=None,
                    help="Run the queuewire conformance cases against this server ('embedded': "
                         "the reference server in process). Without it the plugin does nothing.")
    group.addoption("--queuewire-protocol", choices=("bunqueue", "quicx"), default="bunqueue",
                    help="Protocol of the target (default: bunqueue).")
    group.addoption("--queuewire-profile", metavar="PROFILE", default=None,
                    help="Spec profile (default: the protocol's default profile).")
    group.addoption("--queuewire-auth-token", metavar="TOKEN", default=None,
                    help="Token for the cases that authenticate.")
    group.addoption("--queuewire-strict", action="store_true", default=False,
                    help="Also fail NON-STRICT (a SHOULD not followed) and UNIMPLEMENTED cases.")
    group.addoption("--queuewire-select", action="append", default=[], metavar="GLOB",
                    help="Collect only cases whose id matches (fnmatch glob); repeatable.")
    group.addoption("--queuewire-skip", action="append", default=[], metavar="GLOB",
                    help="Leave out cases whose id matches; repeatable.")
    group.addoption("--queuewire-timeout", type=float, default=5.0, metavar="S",
                    help="Seconds to wait for each expected reply (default: 5).")
    group.addoption("--queuewire-known-failing", metavar="FILE", default=None,
                    help="Case ids expected to fail (the CLI's --known-failing format): such a "
                         "case is reported as xfail; one that passes fails (the list is stale).")
    group.addoption("--queuewire-http-target", metavar="HOST:PORT", default=None,
                    help="The server's HTTP API (bunqueue) for the HTTP cases; without it they "
                         "are INFO ('embedded' sets its own).")


def _settings(config: pytest.Config) -> dict[str, Any]:
    from ..spec import default_profile

    protocol = config.getoption("queuewire_protocol")
    return {"target": config.getoption("queuewire_target"), "protocol": protocol,
            "profile": config.getoption("queuewire_profile") or default_profile(protocol),
            "auth_token": config.getoption("queuewire_auth_token"),
            "strict": config.getoption("queuewire_strict"),
            "timeout": config.getoption("queuewire_timeout"),
            "http_target": config.getoption("queuewire_http_target"),
            "known_failing": config.getoption("queuewire_known_failing")}


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselection, which runs in this hook too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if not config.getoption("queuewire_target"):
        return
    from ..spec import SpecError, load_profile
    from .runner import load_cases, select_cases
    from .targets import parse_target

    s = _settings(config)
    try:
        parse_target(s["target"])
        if s["http_target"]:
            from .httpapi import parse_http_target

            parse_http_target(s["http_target"])
        prof = load_profile(s["profile"])
        if s["known_failing"]:
            from .known_failing import read_known_failing

            config.stash[_KNOWN] = read_known_failing(s["known_failing"])
    except (ValueError, SpecError) as exc:
        raise pytest.UsageError(f"queuewire: {exc}") from None
    if prof.protocol != s["protocol"]:
        raise pytest.UsageError(f"queuewire: profile {s['profile']} is a {prof.protocol} profile, "
                                f"not {s['protocol']}")
    try:
        cases = load_cases(s["protocol"], s["profile"])
    except ValueError as exc:  # a case file the loader refused: one line, not a traceback
        raise pytest.UsageError(f"queuewire: {exc}") from None
    cases = select_cases(cases, config.getoption("queuewire_select"),
                         config.getoption("queuewire_skip"))
    for case in cases:
        items.append(ConformanceItem.from_parent(session, name=case.id, nodeid=case.id, case=case))


class ConformanceFailure(Exception):
    """A case whose verdict fails (the message is the report)."""


class ConformanceItem(pytest.Item):
    def __init__(self, *, case: Any, **kw: Any):
        super().__init__(**kw)
        self.case = case
        for tag in case.tags:
            self.keywords[tag] = True

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"queuewire conformance case {self.case.id}"

    def _results(self) -> dict[str, Any]:
        config = self.config
        if _RESULTS not in config.stash:
            from .runner import run_target_sync

            s = _settings(config)
            ids = [i.case.id for i in self.session.items if isinstance(i, ConformanceItem)]
            known: dict[str, str] = config.stash.get(_KNOWN, {})
            run = run_target_sync(s["protocol"], s["target"], profile=s["profile"],
                                  auth_token=s["auth_token"], strict=s["strict"],
                                  select=tuple(glob.escape(i) for i in ids),
                                  timeout=s["timeout"], http_target=s["http_target"],
                                  known_failing=tuple(known))
            config.stash[_RESULTS] = {"run": run, "by_id": {r.case.id: r for r in run.results}}
        return config.stash[_RESULTS]

    def runtest(self) -> None:
        from .model import Verdict
        from .report import reproduction

        cached = self._results()
        run, result = cached["run"], cached["by_id"].get(self.case.id)
        if result is None:
            raise ConformanceFailure(f"{self.case.id}: the runner returned no result for this case")
        strict = self.config.getoption("queuewire_strict")
        v = result.verdict
        self.user_properties.append(("verdict", v.value))
        self.user_properties.append(("requirements", ",".join(self.case.requirements)))
        if result.known_failing:
            reason = self.config.stash.get(_KNOWN, {}).get(self.case.id) or "known failing"
            if v is Verdict.PASS:
                raise ConformanceFailure(f"{self.case.id}: listed in --queuewire-known-failing "
                                         f"({reason}) but PASSES: the list is stale, remove it")
            if v in (Verdict.FAIL, Verdict.ERROR, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED):
                pytest.xfail(f"known failing ({reason}): {v.value}: {_reason(result)}")
        if v in (Verdict.FAIL, Verdict.ERROR) or (strict and v in (Verdict.NON_STRICT,
                                                                   Verdict.UNIMPLEMENTED)):
            raise ConformanceFailure(_describe(result, reproduction(run, result)))
        if v is Verdict.UNIMPLEMENTED:
            pytest.skip(f"UNIMPLEMENTED: {_reason(result)}")
        if v is Verdict.INFO:
            observed = "; ".join(f"{c.message}: {_short(c.actual)}" for c in result.checks)
            pytest.skip(f"INFO (observation only): {observed or result.case.title}")
        if v is Verdict.NON_STRICT:
            self.add_report_section("call", "queuewire", "NON-STRICT (passes without "
                                    "--queuewire-strict):\n" + _describe(result, ""))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


def _short(value: Any, limit: int = 400) -> str:
    s = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return s if len(s) <= limit else s[:limit] + "..."


def _reason(result: Any) -> str:
    from .report.junit import reason

    return reason(result) or result.case.title


def _describe(result: Any, repro: str) -> str:
    lines = [f"{result.case.id}: {result.verdict.value} — {result.case.title}"]
    if result.error:
        lines.append(f"  error: {result.error}")
    for c in result.failed_checks:
        lines.append(f"  [{c.requirement or '-'} {c.level}] {c.kind}: {c.message}")
        lines.append(f"    expected: {_short(c.expected)}")
        lines.append(f"    actual:   {_short(c.actual)}")
    if repro:
        lines.append(f"  reproduce: {repro}")
    return "\n".join(lines)
