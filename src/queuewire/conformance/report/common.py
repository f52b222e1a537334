"""What every report format shares: a run's display label, the one-line reproduction, the
requirement lookup (level and text from the spec, never restated), a safe file name per case
id, the per-case JSON document, and the exit status of a set of runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..model import CaseResult, TargetRun, case_definition, jsonable_result, run_failed
from ..reproduce import line


def label(run: TargetRun) -> str:
    """A run's column name: its target and profile (``embedded (quicx/v1)``)."""
    return f"{run.target} ({run.profile})"


def reproduction(run: TargetRun, result: CaseResult) -> str:
    """The runner's one-line reproduction, or the same line rebuilt from the run's argv."""
    if result.reproduction or not run.rerun:
        return result.reproduction
    return line(run.rerun, run.select_flag, result.case.id)


def requirement_info(profile: str, rid: str) -> dict[str, Any]:
    """Level, subject and text of requirement ``rid`` in ``profile`` (from spec/), or a note
    that the profile does not define it."""
    try:
        from ...spec import load_profile

        req = load_profile(profile).requirements.get(rid)
    except Exception:  # noqa: BLE001 - an unknown profile in a saved report: show what we can
        req = None
    if req is None:
        return {"id": rid, "level": "?", "subject": "", "text": f"(not a requirement of {profile})",
                "cite": ""}
    return {"id": rid, "level": req.level, "subject": req.subject, "text": req.text,
            "cite": req.cite}


UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def case_filename(case_id: str) -> str:
    """A file name for a case id (ids are dotted names; anything else becomes ``_``)."""
    name = UNSAFE.sub("_", case_id).strip("._") or "case"
    return name + ".json"


def case_document(run: TargetRun, result: CaseResult) -> dict[str, Any]:
    """What ``--report-dir`` writes as ``cases/<id>.json`` and ``conform replay`` reads."""
    from ..replay import compact_events

    doc = jsonable_result(result)
    doc["transcript"] = compact_events(doc["transcript"])
    doc.update({"format": "queuewire-conformance-case/2", "protocol": run.protocol,
                "profile": run.profile, "target": run.target,
                "reproduction": reproduction(run, result),
                # the definition the case ran with: `conform replay` re-runs and re-judges it
                "case": case_definition(result.case)})
    return doc


def exit_status(runs: Sequence[TargetRun]) -> int:
    """0 when no case fails the run (:func:`model.run_failed`), 1 otherwise."""
    return 1 if run_failed(runs) else 0


def area_of(case: Any) -> str:
    """The area a case belongs to, from data it already carries: the second part of its id
    (``bunqueue.frame.too-large`` -> ``frame``), else the stem of its case file, else
    ``other``."""
    parts = case.id.split(".")
    if len(parts) >= 3 and parts[1]:
        return parts[1]
    source = (case.source or "").split(" ")[0].rsplit("/", 1)[-1]
    stem = source.rsplit(".", 1)[0] if source.endswith((".yaml", ".yml")) else ""
    return stem or "other"


def areas(results: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    """Verdict counts per area (areas sorted by name; every verdict present, zeros kept)."""
    from ..model import VERDICT_ORDER

    out: dict[str, dict[str, int]] = {}
    for r in results:
        row = out.setdefault(area_of(r.case), {v.value: 0 for v in VERDICT_ORDER})
        row[r.verdict.value] += 1
    return dict(sorted(out.items()))


def requirement_rows(run: TargetRun) -> list[dict[str, Any]]:
    """Every requirement of the run's profile, in the profile's order, with its level, subject,
    source (document, section, basis if the spec gives one), quote and the cases that cite
    it with their verdicts; ``in_scope`` is False for a client requirement."""
    try:
        from ...spec import load_profile

        reqs = load_profile(run.profile).requirements
    except Exception:  # noqa: BLE001 - a saved run of an unknown profile: nothing to list
        return []
    cited: dict[str, list[CaseResult]] = {}
    for r in run.results:
        for rid in r.case.requirements:
            cited.setdefault(rid, []).append(r)
    out_of_scope = set(run.coverage.out_of_scope)
    rows = []
    for rid, req in reqs.items():
        rows.append({"id": rid, "level": req.level, "subject": req.subject, "text": req.text,
                     "source": req.source, "section": req.section,
                     "basis": req.basis or "",
                     "quote": req.quote or "",
                     # another document's words that say otherwise (shown beside the quote)
                     "disagrees": [dict(d) for d in req.disagrees],
                     "in_scope": rid not in out_of_scope,
                     "cases": [(r.case.id, r.verdict.value) for r in cited.get(rid, [])]})
    return rows
