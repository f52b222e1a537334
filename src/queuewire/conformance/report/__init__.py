"""Reports of conformance runs: console, JSON, JUnit XML and one static HTML file.

Every report reads only the vocabulary of :mod:`queuewire.conformance.model` (``TargetRun``,
``CaseResult``, ``Check``, ``Transcript``), so all of them say the same thing about a run. This
package holds what they share: a run's display label, the requirement lookup (level and text
from the spec, never restated), a safe file name per case id, the per-case JSON document that
``--report-dir`` writes and ``queuewire conform replay`` reads, and :func:`write_reports`,
which writes every file the CLI asks for in one call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..model import CaseResult, TargetRun, Verdict, jsonable_result, run_failed

__all__ = ["case_document", "case_filename", "exit_status", "label", "requirement_info",
           "write_reports", "reproduction"]


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


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def case_filename(case_id: str) -> str:
    """A file name for a case id (ids are dotted names; anything else becomes ``_``)."""
    name = _UNSAFE.sub("_", case_id).strip("._") or "case"
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


def write_reports(runs: Sequence[TargetRun], *, report_dir: str | Path | None = None,
                  junit: str | Path | None = None, json_path: str | Path | None = None,
                  html: str | Path | None = None) -> list[Path]:
    """Write every requested report; returns the paths written. ``report_dir`` gets
    ``report.html``, ``report.json``, ``junit.xml`` and ``cases/<id>.json`` for each case
    whose verdict is not PASS (one sub-directory per run when there are several)."""
    from . import html as html_report
    from . import json_report
    from . import junit as junit_report

    written: list[Path] = []

    def out(path: str | Path, text: str) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        written.append(p)

    if report_dir is not None:
        base = Path(report_dir)
        out(base / "report.html", html_report.render(runs))
        out(base / "report.json", json_report.dumps(runs))
        out(base / "junit.xml", junit_report.render(runs))
        for run in runs:
            cases = base / "cases"
            if len(runs) > 1:
                cases = cases / _UNSAFE.sub("_", label(run)).strip("_")
            for r in run.results:
                if r.verdict is not Verdict.PASS:
                    out(cases / case_filename(r.case.id),
                        json.dumps(case_document(run, r), indent=2, default=str) + "\n")
    if json_path is not None:
        out(json_path, json_report.dumps(runs))
    if junit is not None:
        out(junit, junit_report.render(runs))
    if html is not None:
        out(html, html_report.render(runs))
    return written
