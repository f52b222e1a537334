"""Reports of conformance runs: console, JSON, JUnit XML, one static HTML file and Markdown.

Design: one module per format (``console``, ``json_report``, ``junit``, ``html``,
``markdown``), each reading only the vocabulary of :mod:`queuewire.conformance.model`
(``TargetRun``, ``CaseResult``, ``Check``, ``Transcript``) and never the runner, so all of them
say the same thing about a run and can render a saved one. What they share is in ``common``,
which they import (never this ``__init__``, which loads them): a run's display label, the
requirement lookup (level, text and quote from the spec, never restated), the requirement a
case is led with (the one that decided its verdict, :func:`~.common.headline`), the decisive
part of a transcript (:func:`~.common.evidence`), generated cases grouped by rule
(:func:`~.common.grouped`), values as people read them, a safe file name per case id and the
per-case JSON document that ``--report-dir`` writes and ``queuewire conform replay`` reads.
This ``__init__`` re-exports those and adds :func:`write_reports`, which writes every file the
CLI asks for in one call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from ..model import TargetRun, Verdict
from .common import (
    UNSAFE,
    case_document,
    case_filename,
    exit_status,
    label,
    reproduction,
    requirement_info,
)

__all__ = ["case_document", "case_filename", "exit_status", "label", "requirement_info",
           "write_reports", "reproduction"]


def write_reports(runs: Sequence[TargetRun], *, report_dir: str | Path | None = None,
                  junit: str | Path | None = None, json_path: str | Path | None = None,
                  html: str | Path | None = None, html_transcripts: str = "all",
                  html_extra: str = "") -> list[Path]:
    """Write every requested report; returns the paths written. ``report_dir`` gets
    ``report.html``, ``report.json``, ``junit.xml``, ``report.md`` (the Markdown report) and
    ``cases/<id>.json`` for each case whose verdict is not PASS (one sub-directory per run
    when there are several). ``html_transcripts``: the HTML pages hold the wire transcripts of
    every case (``"all"``) or of the cases that did not pass (``"failing"``); the JSON has
    them all either way. ``html_extra``: an HTML section the HTML pages show before the
    summary (``queuewire learn``: the machines and their differences)."""
    from . import html as html_report
    from . import json_report
    from . import junit as junit_report
    from . import markdown as markdown_report

    written: list[Path] = []

    def out(path: str | Path, text: str | Callable[[IO[str]], None]) -> None:
        """Write ``text``, or let ``text(fp)`` write itself piece by piece (the JSON files)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8") as fp:
            if callable(text):
                text(fp)
            else:
                fp.write(text)
        written.append(p)

    def case_file(doc: dict) -> Callable[[IO[str]], None]:
        def write(fp: IO[str]) -> None:
            json.dump(doc, fp, indent=2, default=str)
            fp.write("\n")
        return write

    if report_dir is not None:
        base = Path(report_dir)
        out(base / "report.html", html_report.render(runs, transcripts=html_transcripts, extra=html_extra))
        out(base / "report.json", lambda fp: json_report.write(runs, fp))
        out(base / "junit.xml", junit_report.render(runs))
        out(base / "report.md", markdown_report.render(runs))
        for run in runs:
            cases = base / "cases"
            if len(runs) > 1:
                cases = cases / UNSAFE.sub("_", label(run)).strip("_")
            for r in run.results:
                if r.verdict is not Verdict.PASS:
                    out(cases / case_filename(r.case.id), case_file(case_document(run, r)))
    if json_path is not None:
        out(json_path, lambda fp: json_report.write(runs, fp))
    if junit is not None:
        out(junit, junit_report.render(runs))
    if html is not None:
        out(html, html_report.render(runs, transcripts=html_transcripts, extra=html_extra))
    return written
