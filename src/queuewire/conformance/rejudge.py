"""Replay that re-judges: run a saved case again and say, check by check, what changed.

A case file (``cases/<case-id>.json`` from ``--report-dir``) holds the case's checks and, since
format ``queuewire-conformance-case/2``, the case's own definition (``"case"``: steps, cleanup,
logic reference, params; :func:`~.model.case_definition`). :func:`load_saved` takes that
definition, so a replay runs the case as it was when the file was written even if the suite
changed since; an older file (format 1, no ``"case"``) is run with the suite's case of the same
id under the file's profile, and refused with a one-line :class:`~.replay.ReplayError` when
the suite has no such case. The definition is checked against the case language
(:func:`~.loader.check_case`) before it runs.

A case file is data: nothing it names is imported. A case with ``logic`` (Python) runs only as
the *installed* suite defines it: the file's ``logic`` and ``params`` must be those of the
suite's case of the same id under the file's profile, else the file is refused
(:class:`~.replay.ReplayError` naming the rule) before any module is looked up. Steps are
interpreted, never executed, but their sizes are data too: a ``send_raw`` whose ``repeat`` or
``body_bytes`` would build more than the protocol's largest frame
(:func:`~.replay.frame_bound`, from the spec) is refused, and so is a file over the size bound
(:data:`~.replay.CASE_FILE_MAX`, ``--max-file-bytes``).

:func:`rejudge` runs the case with the runner's own :func:`~.runner.run_case` (fresh
connections, the same step interpreters and judgement, cleanup) and :func:`compare_checks`
pairs the new checks with the saved ones: first by step, kind and requirement, then by step
and kind (an ``any_of`` step cites the requirement of the outcome that matched, so a fixed
step may cite another one), each key's checks in order. Each pair gets a status: ``PASS``
(held then and now), ``FIXED`` (failed then, holds now), ``STILL FAILING``, ``REGRESSED``
(held then, fails now), ``NEW`` / ``NEW FAILURE`` (checked only now: the case got further)
and ``NOT CHECKED`` (checked only then). The overall verdict is ``FIXED`` (or ``PASS`` when
nothing had failed) when no check fails now and the new case verdict is PASS or INFO;
otherwise ``STILL FAILING`` when a saved failure fails again or is no longer reached,
``REGRESSED`` when only new failures remain, ``ERROR`` when the run broke.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..spec import Profile, SpecError, load_profile
from .loader import CaseError, check_case, load_cases
from .model import Case, CaseResult, Check, Verdict, case_from_definition
from .replay import CASE_FILE_MAX, ReplayError, frame_bound, parse_case_json, read_case_text

PASSED = frozenset({Verdict.PASS, Verdict.INFO})


@dataclass
class SavedCase:
    path: str
    case: Case
    profile: Profile
    target: str  # what the file was recorded against
    verdict: str
    error: str | None
    checks: list[Check]
    definition: str  # "embedded in the file" or "from the suite (...)"


@dataclass
class Row:
    status: str
    old: Check | None
    new: Check | None

    @property
    def check(self) -> Check:
        c = self.new or self.old
        assert c is not None
        return c


@dataclass
class Rejudged:
    saved: SavedCase
    result: CaseResult
    rows: list[Row] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """FIXED, PASS, STILL FAILING, REGRESSED or ERROR (see the module docstring)."""
        if self.result.verdict is Verdict.ERROR:
            return "ERROR"
        failing_now = any(not c.ok for c in self.result.checks)
        if not failing_now and self.result.verdict in PASSED:
            was_ok = self.saved.verdict in ("PASS", "INFO") and not any(
                not c.ok for c in self.saved.checks)
            return "PASS" if was_ok else "FIXED"
        statuses = {r.status for r in self.rows}
        if statuses & {"STILL FAILING"} or any(
                r.status == "NOT CHECKED" and not r.check.ok for r in self.rows):
            return "STILL FAILING"
        if statuses & {"REGRESSED", "NEW FAILURE"}:
            return "REGRESSED"
        return "STILL FAILING"  # e.g. UNIMPLEMENTED again, with no failing check

    @property
    def ok(self) -> bool:
        return self.verdict in ("FIXED", "PASS")

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r.status == status)


def _check(d: Any, where: str) -> Check:
    if not isinstance(d, dict) or "ok" not in d:
        raise ReplayError(f"{where} is not a check object")
    return Check(requirement=d.get("requirement"), level=d.get("level") or "MUST",
                 ok=bool(d["ok"]), kind=str(d.get("kind") or ""),
                 message=str(d.get("message") or ""), expected=d.get("expected"),
                 actual=d.get("actual"), step=d.get("step"))


def _suite_case(p: Path, prof: Profile, case_id: str) -> Case | None:
    try:
        suite = {c.id: c for c in load_cases(prof.protocol, prof)}
    except CaseError as exc:
        raise ReplayError(f"{p}: the suite does not load: {exc}") from None
    return suite.get(case_id)


def _installed_logic(p: Path, prof: Profile, case: Case) -> Case:
    """The installed suite's case for a file's logic case: same id, ``logic`` and ``params``
    (see the module docstring), else a ReplayError. Nothing the file names is imported."""
    suite = _suite_case(p, prof, case.id)
    rule = ("a case file is data: a Python (logic) case runs only as the installed suite "
            "defines it")
    if suite is None or not suite.logic:
        raise ReplayError(f"{p}: case {case.id} names logic {case.logic!r} but the installed "
                          f"suite has no logic case {case.id} for {prof.name} ({rule})")
    if case.logic != suite.logic:
        raise ReplayError(f"{p}: case {case.id} names logic {case.logic!r}, not the installed "
                          f"suite's {suite.logic!r} ({rule})")
    if json.dumps(case.params, sort_keys=True, default=str) != json.dumps(
            suite.params, sort_keys=True, default=str):
        raise ReplayError(f"{p}: case {case.id} has params other than the installed suite's "
                          f"({rule}, with its own params)")
    return suite


def _check_sizes(p: Path, prof: Profile, case: Case) -> None:
    """Refuse ``send_raw`` steps that would build more than the protocol's largest frame."""
    bound, name = frame_bound(prof)
    for n, step in enumerate((*case.steps, *case.cleanup), 1):
        body = step.get("send_raw") if isinstance(step, dict) else None
        if not isinstance(body, dict):
            continue
        where = f"{p}: case {case.id} step {n}: send_raw"
        for key in ("repeat", "body_bytes"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ReplayError(f"{where}: {key} must be a whole number written in the file, "
                                  f"not {value!r}")
            unit = len("".join(str(body.get("hex") or "").split())) // 2 if key == "repeat" else 1
            if value * max(unit, 1) > bound:
                raise ReplayError(f"{where}: {key} {value} would send {value * max(unit, 1)} "
                                  f"bytes, more than the largest frame of {prof.name} ({bound} "
                                  f"bytes: {name} and the header)")


def load_saved(path: str | Path, *, max_bytes: int = CASE_FILE_MAX) -> SavedCase:
    """Read a case file for re-judging; ``ReplayError`` (one line) when it cannot be."""
    p = Path(path)
    doc = parse_case_json(read_case_text(p, max_bytes), p)
    if not isinstance(doc, dict):
        raise ReplayError(f"{p}: a case file is a JSON object, not {type(doc).__name__}")
    for key in ("id", "protocol", "profile"):
        if key not in doc:
            raise ReplayError(f"{p}: missing key {key!r} (write case files with "
                              f"'queuewire conform server --report-dir DIR')")
    try:
        prof = load_profile(str(doc["profile"]))
    except SpecError as exc:
        raise ReplayError(f"{p}: {exc}") from None
    if prof.protocol != doc["protocol"]:
        raise ReplayError(f"{p}: profile {prof.name} is a {prof.protocol} profile, "
                          f"not {doc['protocol']}")
    raw_checks = doc.get("checks", [])
    if not isinstance(raw_checks, list):
        raise ReplayError(f"{p}: 'checks' must be a list")
    checks = [_check(c, f"{p}: checks[{i}]") for i, c in enumerate(raw_checks)]
    if "case" in doc:
        try:
            case = case_from_definition(doc["case"])
            if case.id != doc["id"] or case.protocol != prof.protocol:
                raise ValueError(f"'case' is {case.protocol} case {case.id}, not {doc['id']}")
            if not case.steps and not case.logic:
                raise ValueError("'case' has neither steps nor logic: nothing to run "
                                 "(resend its bytes with --raw)")
        except (ValueError, TypeError) as exc:
            raise ReplayError(f"{p}: {str(exc).splitlines()[0]}") from None
        if case.logic:  # resolved in the installed suite, before anything is imported
            case = _installed_logic(p, prof, case)
            definition = "from the installed suite (a logic case)"
        else:
            _check_sizes(p, prof, case)
            try:
                check_case(case, prof)
            except (ValueError, TypeError) as exc:  # CaseError is a ValueError
                raise ReplayError(f"{p}: {str(exc).splitlines()[0]}") from None
            definition = "embedded in the file"
    else:
        found = _suite_case(p, prof, str(doc["id"]))
        if found is None:
            raise ReplayError(f"{p}: case {doc['id']} is not in this suite for {prof.name} and "
                              "the file (an older format) does not embed it: resend its bytes "
                              "with --raw")
        case = found
        definition = "from the suite (the file does not embed it)"
    return SavedCase(str(p), case, prof, str(doc.get("target") or ""),
                     str(doc.get("verdict") or ""), doc.get("error"), checks, definition)


def compare_checks(old: Sequence[Check], new: Sequence[Check]) -> list[Row]:
    """Pair saved and new checks (see the module docstring) and give each pair its status."""
    pairs: dict[int, int] = {}  # old index -> new index
    used: set[int] = set()
    keys = (lambda c: (c.step, c.kind, c.requirement), lambda c: (c.step, c.kind))
    for key in keys:
        for i, o in enumerate(old):
            if i in pairs:
                continue
            for j, n in enumerate(new):
                if j not in used and key(n) == key(o):
                    pairs[i] = j
                    used.add(j)
                    break
    rows = []
    for i, o in enumerate(old):
        if i not in pairs:
            rows.append(Row("NOT CHECKED", o, None))
            continue
        n = new[pairs[i]]
        status = {(True, True): "PASS", (False, True): "FIXED", (False, False): "STILL FAILING",
                  (True, False): "REGRESSED"}[(o.ok, n.ok)]
        rows.append(Row(status, o, n))
    rows.extend(Row("NEW" if n.ok else "NEW FAILURE", None, n)
                for j, n in enumerate(new) if j not in used)
    return rows


async def rejudge(saved: SavedCase, host: str, port: int, *, timeout: float = 5.0,
                  auth_token: str | None = None,
                  http_target: tuple[str, int] | None = None) -> Rejudged:
    """Run the saved case against ``host:port`` and compare its checks with the saved ones."""
    from .runner import run_case

    result = await run_case(saved.case, saved.profile, host, port, timeout=timeout,
                            auth_token=auth_token, http_target=http_target)
    return Rejudged(saved, result, compare_checks(saved.checks, result.checks))


def describe(c: Check | None, width: int = 160) -> str:
    """One line for a check: its message, else what was expected and what came."""
    if c is None:
        return "(not checked)"
    text = c.message or f"expected {c.expected!r}, got {c.actual!r}"
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"
