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


def out_of_scope_subjects(run: TargetRun) -> str:
    """Who a run's out-of-scope requirements bind, from their subject in the spec: "client"
    for a server run, "server" for a client run ("client and peer" when both occur)."""
    subjects = {requirement_info(run.profile, rid)["subject"] for rid in run.coverage.out_of_scope}
    known = sorted(s for s in subjects if s)
    return " and ".join(known) if known else "other"


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
    it with their verdicts; ``in_scope`` is False for a requirement the run does not judge
    (a client requirement in a server run, a server requirement in a client run)."""
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


# -- the capability table of a client run ---------------------------------------------------
#: the states of a capability cell (``conformance.client.capabilities`` derives them): the
#: wire shows the client using it; a scenario gave the client the chance and the wire does not
#: show it; no scenario gave the chance
USED, NOT_USED, NOT_OBSERVABLE = "used", "not used", "not observable"
CAPABILITY_STATES = (USED, NOT_USED, NOT_OBSERVABLE)
CAPABILITY_LEGEND = (f"{USED}: the wire shows it; {NOT_USED}: a scenario gave the client the "
                     f"chance and it did not; {NOT_OBSERVABLE}: no scenario gave the chance")


def capability_rows(run: TargetRun) -> list[dict[str, Any]]:
    """The capability table a client run carries (``server_info["capabilities"]``: rows of
    ``capability``, ``state``, ``evidence``, ``scenarios``); empty for a server run."""
    info = run.server_info if isinstance(run.server_info, dict) else {}
    rows = info.get("capabilities")
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, dict) and r.get("state") in CAPABILITY_STATES]


def capability_names(runs: Sequence[TargetRun]) -> list[str]:
    """The capabilities any of ``runs`` has a cell for, in their table order."""
    names: list[str] = []
    for run in runs:
        names += [str(r["capability"]) for r in capability_rows(run)
                  if str(r["capability"]) not in names]
    return names


def capability_state(run: TargetRun, name: str) -> str | None:
    return next((str(r["state"]) for r in capability_rows(run) if r["capability"] == name), None)


def support_note(runs: Sequence[TargetRun]) -> str | None:
    """What a client run without a failing case does not show: the capabilities the client
    did not use though a scenario gave it the chance (None when no such run has one)."""
    parts = []
    for run in runs:
        unused = [str(r["capability"]) for r in capability_rows(run) if r["state"] == NOT_USED]
        if unused and not run.failing():
            parts.append(f"{label(run)} has no failing case, which is not full support: it did "
                         f"not use {', '.join(unused)} though a scenario gave it the chance")
    return "; ".join(parts) + " (see the capability table)" if parts else None


def capability_lines(runs: Sequence[TargetRun]) -> list[str]:
    """The capability table of client runs as plain text lines (none for server runs): one
    line per run naming each capability's state, then :func:`support_note`."""
    shown = [run for run in runs if capability_rows(run)]
    if not shown:
        return []
    lines = [f"capabilities ({CAPABILITY_LEGEND}):"]
    for run in shown:
        cells = ", ".join(f"{r['capability']} {r['state']}" for r in capability_rows(run))
        lines.append(f"  {label(run)}: {cells}")
    note = support_note(shown)
    if note:
        lines.append(note)
    return lines
