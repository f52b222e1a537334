"""What ``queuewire learn`` writes: JSON, Graphviz, a Markdown page, and a conformance report of
the differences run as cases (with the machines in its HTML)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import err_console

__all__ = ["write_outputs"]


def _rows(machine: Any, table: Any = None) -> list[dict[str, Any]]:
    from ..learn.render import names

    shown = names(machine, table)
    return [{"from": shown[s], "input": letter, "output": machine.table[(s, letter)][0],
             "to": shown[machine.table[(s, letter)][1]]}
            for s in machine.states for letter in machine.inputs]


def write_outputs(subject: Any, learned: Any, diffs: Sequence[Any], *, command: str, target: str,
                  seed: int, auth_token: str | None, timeout: float, json_out: Path | None,
                  dot_out: Path | None, report_dir: Path | None, markdown: Path | None) -> None:
    """Write every output asked for (the token never: cases say ``${token}``)."""
    from ..learn.render import graphviz, html_section
    from ..learn.render import markdown as page

    prof, machine = subject.profile, subject.machine
    title = f"{prof.name}: the {machine}, learned"
    intro = (f"`{command}`: {learned.queries} queries, {learned.requests} requests, "
             f"{learned.seconds:.1f} s. Inputs: {', '.join(subject.section.inputs)}.")
    if json_out is not None:
        json_out.write_text(json.dumps({
            "profile": prof.name, "machine": machine, "target": target, "seed": seed,
            "queries": learned.queries, "requests": learned.requests,
            "seconds": round(learned.seconds, 3),
            "learned": _rows(learned.machine, subject.table), "spec": _rows(subject.table),
            "differences": [{"inputs": d.word, "spec": d.spec, "server": d.server,
                             "requirement": d.requirement, "level": d.level, "case": d.case}
                            for d in diffs],
        }, indent=1) + "\n")
    if dot_out is not None:
        dot_out.write_text(graphviz(title, subject.table, learned.machine), encoding="utf-8")
    verdicts: list[tuple[str, str, str]] = []
    if report_dir is not None or markdown is not None:
        run, verdicts = _run_cases(subject, diffs, target, auth_token, timeout)
        if report_dir is not None:
            from ..conformance.report import write_reports

            section = html_section(title, intro.replace("`", ""), subject.table,
                                   learned.machine, diffs, verdicts)
            write_reports([run], report_dir=report_dir, html_extra=section)
            err_console.print(f"wrote {report_dir}; replay a difference with `queuewire conform "
                              f"replay {report_dir}/cases/<id>.json --target {target}`",
                              highlight=False)
    if markdown is not None:
        markdown.write_text(page(title, intro, subject.table, learned.machine, diffs, verdicts),
                            encoding="utf-8")


def _run_cases(subject: Any, diffs: Sequence[Any], target: str, auth_token: str | None,
               timeout: float) -> tuple[Any, list[tuple[str, str, str]]]:
    """Run each difference as a conformance case against the target: the run and (case id,
    rule, verdict) per difference."""
    from ..conformance.loader import parse_case
    from ..conformance.runner import run_target_sync

    prof, protocol = subject.profile, subject.profile.protocol
    parsed = [parse_case(d.case, "queuewire learn", protocol, prof) for d in diffs]
    run = run_target_sync(protocol, target, profile=prof, cases=parsed, auth_token=auth_token,
                          timeout=timeout)
    from ..conformance.model import deciding_check

    out = []
    for d, r in zip(diffs, run.results):
        verdict = r.verdict.value
        decided = deciding_check(r.checks)
        if decided is not None and decided.requirement != d.requirement:
            # another rule of the case decided it (a reply that breaks its schema, say)
            verdict += f" (by {decided.requirement}, {decided.level})"
        out.append((r.case.id, d.rule, verdict))
        err_console.print(f"{r.case.id}: {verdict}", highlight=False)
    return run, out
