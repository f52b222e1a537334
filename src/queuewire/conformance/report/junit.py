"""The JUnit XML report: one ``<testsuite>`` per run, one ``<testcase>`` per case.

CI systems read JUnit, so verdicts map onto what they understand: FAIL becomes ``<failure>``
(message: the requirement that decided the verdict and the one-line reason, :func:`reason`;
body: that requirement's sentence in the documents, expected vs actual of each failed check,
the deciding one first, a line when the transcript was cut, and the reproduction line; values
as people read them: ``undefined``, long strings as their start and true size), ERROR becomes
``<error>``, UNIMPLEMENTED and NON-STRICT become ``<skipped>`` (or ``<failure>`` when the run
is strict, as they then fail it), INFO passes with what it observed in ``<system-out>``, and a
known-failing case is skipped while it fails and a failure when it passes (the list went
stale). The tree is built with ElementTree, which escapes markup; characters XML 1.0 cannot
carry at all (control bytes a server sent) are replaced by ``\\xNN`` first, so the file always
parses.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from ..matching import show
from ..model import (
    CaseResult,
    TargetRun,
    Verdict,
    deciding_check,
    describe_cut,
    failed_in_order,
    transcript_cut,
)
from .common import label, quote_line, quoted_requirements, reproduction

# Everything outside the XML 1.0 Char production.
_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(text: Any) -> str:
    """``text`` as a string XML 1.0 can hold: invalid characters become ``\\xNN``."""
    s = text if isinstance(text, str) else str(text)
    return _INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def _short(value: Any, limit: int = 2000) -> str:
    """A check value on one line as people read it (:func:`~..matching.show`: long strings as
    their start and true size, ``undefined`` as itself), at most ``limit`` characters."""
    if isinstance(value, str) and len(value) <= limit:
        return value
    return show(value, json_style=True, width=limit)


def reason(result: CaseResult) -> str:
    """One line: why the case did not pass, led by the requirement that decided the verdict
    (:func:`~..model.deciding_check`: for a FAIL a MUST, whatever failed before it)."""
    if result.error:
        return result.error.splitlines()[0] if result.error.strip() else "error"
    c = deciding_check(result.checks)
    if c is not None:
        failed = len(result.failed_checks)
        more = f" (+{failed - 1} more)" if failed > 1 else ""
        return f"{c.requirement or '-'} {c.level}: {c.message}{more}"
    return ""


def _details(run: TargetRun, result: CaseResult) -> str:
    lines = [quote_line(info, 400) for info in quoted_requirements(run.profile, result)]
    for c in failed_in_order(result.checks):
        lines.append(f"[{c.requirement or '-'} {c.level}] {c.kind}: {c.message}")
        lines.append(f"  expected: {_short(c.expected)}")
        lines.append(f"  actual:   {_short(c.actual)}")
    if result.error:
        lines.append(f"error: {result.error}")
    cut = transcript_cut(result.transcript)
    if cut:
        lines.append(describe_cut(cut))
    lines.append(f"reproduce: {reproduction(run, result)}")
    return "\n".join(lines)


def _testcase(suite: ET.Element, run: TargetRun, result: CaseResult) -> str:
    """Add one testcase; returns its JUnit outcome (pass, failure, error, skipped)."""
    case = result.case
    tc = ET.SubElement(suite, "testcase", {
        "classname": clean(case.id.rsplit(".", 1)[0] if "." in case.id else run.protocol),
        "name": clean(case.id), "time": f"{result.duration:.6f}",
    })
    props = ET.SubElement(tc, "properties")
    for rid in case.requirements:
        ET.SubElement(props, "property", {"name": "requirement", "value": clean(rid)})
    ET.SubElement(props, "property", {"name": "verdict", "value": result.verdict.value})
    v, strict = result.verdict, run.strict
    why = clean(reason(result))
    if result.known_failing:
        if v is Verdict.PASS:
            el = ET.SubElement(tc, "failure", {"message": "listed as known-failing but passed: "
                                                          "remove it from the list",
                                                "type": "stale-known-failing"})
            el.text = clean(f"reproduce: {reproduction(run, result)}")
            return "failure"
        ET.SubElement(tc, "skipped", {"message": clean(f"known failing ({v.value}): {why}")})
        return "skipped"
    if v is Verdict.FAIL or (strict and v in (Verdict.NON_STRICT, Verdict.UNIMPLEMENTED)):
        el = ET.SubElement(tc, "failure", {"message": why or v.value, "type": v.value})
        el.text = clean(_details(run, result))
        return "failure"
    if v is Verdict.ERROR:
        el = ET.SubElement(tc, "error", {"message": why or "error", "type": "ERROR"})
        el.text = clean(_details(run, result))
        return "error"
    if v in (Verdict.NON_STRICT, Verdict.UNIMPLEMENTED):
        ET.SubElement(tc, "skipped", {"message": clean(f"{v.value}: {why}" if why else v.value)})
        out = ET.SubElement(tc, "system-out")
        out.text = clean(_details(run, result))
        return "skipped"
    if v is Verdict.INFO:
        out = ET.SubElement(tc, "system-out")
        out.text = clean("\n".join(f"[{c.requirement or '-'}] {c.message}: {_short(c.actual)}"
                                   for c in result.checks) or "observed")
    return "pass"


def build(runs: Sequence[TargetRun]) -> ET.Element:
    root = ET.Element("testsuites", {"name": "queuewire conformance"})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for run in runs:
        suite = ET.SubElement(root, "testsuite", {
            "name": clean(f"{run.protocol} {label(run)}"), "timestamp": clean(run.started_at),
            "hostname": clean(run.target)})
        props = ET.SubElement(suite, "properties")
        for k, val in (("protocol", run.protocol), ("profile", run.profile),
                       ("target", run.target), ("strict", str(run.strict).lower()),
                       ("coverage", f"{len(run.coverage.exercised)}/{len(run.coverage.applicable)}")):
            ET.SubElement(props, "property", {"name": k, "value": clean(val)})
        n = {"failure": 0, "error": 0, "skipped": 0, "pass": 0}
        for result in run.results:
            n[_testcase(suite, run, result)] += 1
        suite.set("tests", str(len(run.results)))
        suite.set("failures", str(n["failure"]))
        suite.set("errors", str(n["error"]))
        suite.set("skipped", str(n["skipped"]))
        suite.set("time", f"{run.duration:.6f}")
        totals["tests"] += len(run.results)
        totals["failures"] += n["failure"]
        totals["errors"] += n["error"]
        totals["skipped"] += n["skipped"]
        totals["time"] += run.duration
    for k, total in totals.items():
        root.set(k, f"{total:.6f}" if isinstance(total, float) else str(total))
    return root


def render(runs: Sequence[TargetRun]) -> str:
    root = build(runs)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
