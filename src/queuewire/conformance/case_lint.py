"""Lint of the conformance cases against the spec they cite (part of ``queuewire spec lint``).

A case's check that names no requirement of its own takes one from the case (the first of
the case's requirements the spec ties to what the check looks at, else the case's first:
:meth:`~.context.CaseContext.default_requirement`), and so its level. When that requirement
is not one the check tests and is weaker than those it tests, a violation of a MUST would be
reported as NON-STRICT or INFO (issue 30: a MSG_TASK expectation in a case led by a SHOULD).
This lint finds such checks in the YAML cases, so that the author gives the outcome its own
``requirement`` (or an explicit ``level`` when the weaker level is meant).

Rules
-----
* An outcome of a quicx step (``expect``, or each entry of ``any_of``) without
  ``requirement`` and ``level``, which expects a message or an error code the spec ties to
  requirements (:func:`.steps_quicx.tested`), is flagged when the requirement it would take
  is not among them and its level is below the strongest of theirs.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..spec import Profile, load_profile
from ..spec.lint import LintIssue
from ..spec.model import Level
from .context import strongest
from .loader import load_cases
from .model import Case
from .steps_quicx import describe, tested


def lint_cases(profile: Profile | str, cases: Iterable[Case] | None = None) -> list[LintIssue]:
    """Every check of the profile's cases (or of ``cases``) whose level would come from a
    requirement it does not test (see the module docstring)."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    if prof.protocol != "quicx":
        return []
    pool = load_cases(prof.protocol, prof) if cases is None else cases
    return [issue for case in pool for issue in _case(prof, case)]


def _outcomes(step: dict) -> Iterable[dict]:
    expect = step.get("expect")
    if not isinstance(expect, dict):
        return []
    return [o for o in expect.get("any_of", [expect]) if isinstance(o, dict)]


def _level(prof: Profile, rid: str | None) -> Level:
    req = prof.requirements.get(rid) if rid else None
    return req.level if req is not None else "MUST"


def _case(prof: Profile, case: Case) -> Iterable[LintIssue]:
    spec = prof.model
    for n, step in enumerate((*case.steps, *case.cleanup), 1):
        if not isinstance(step, dict) or n > len(case.steps):
            continue  # cleanup is never judged
        for o in _outcomes(step):
            if "requirement" in o or "level" in o:
                continue
            ties = [r for r in tested(spec, o) if r in prof.requirements]
            if not ties:
                continue
            reqs = case.requirements
            took = next((r for r in reqs if r in ties), reqs[0] if reqs else None)
            level, tied = _level(prof, took), strongest([_level(prof, r) for r in ties])
            if took in ties or strongest([level, tied]) == level:
                continue
            yield LintIssue(prof.name, f"case {case.id} step {n}",
                            f"the check of {describe(o)} takes its level ({level}) from "
                            f"{took}, which it does not test; it tests {', '.join(ties)} "
                            f"({tied}): give the outcome its own requirement (or a level, if "
                            f"the weaker one is meant)")
