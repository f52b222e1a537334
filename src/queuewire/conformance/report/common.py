"""What every report format shares: a run's display label, the one-line reproduction, the
requirement lookup (level and text from the spec, never restated), a safe file name per case
id, the per-case JSON document, and the exit status of a set of runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..model import CaseResult, TargetRun, jsonable_result, run_failed


def label(run: TargetRun) -> str:
    """A run's column name: its target and profile (``embedded (quicx/v1)``)."""
    return f"{run.target} ({run.profile})"


def reproduction(run: TargetRun, result: CaseResult) -> str:
    """The runner's one-line reproduction, or one built from the run when it gave none."""
    if result.reproduction:
        return result.reproduction
    target = run.target
    line = (f"queuewire conform server --protocol {run.protocol} --target {target} "
            f"--profile {run.profile} --select '{result.case.id}'")
    return line + (" --strict" if run.strict else "")


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
    doc.update({"format": "queuewire-conformance-case/1", "protocol": run.protocol,
                "profile": run.profile, "target": run.target,
                "reproduction": reproduction(run, result)})
    return doc


def exit_status(runs: Sequence[TargetRun]) -> int:
    """0 when no case fails the run (:func:`model.run_failed`), 1 otherwise."""
    return 1 if run_failed(runs) else 0
