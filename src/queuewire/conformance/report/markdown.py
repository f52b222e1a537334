"""The Markdown report of server conformance runs (``report.md`` of ``--report-dir``), and the
pieces a hand-written page can take from it.

Per run: the verdict counts, then the cases to look at (every verdict but PASS and INFO, and
STALE known-failing entries), each led by the requirement that decided its verdict
(:func:`~.common.headline`: for a FAIL a MUST, whatever failed before it) with the documents'
sentence (quote) under it, generated cases of one rule and verdict gathered in one line with
the values tried (:func:`~.common.grouped`). Then each such case (a group: its first case, with
the others named): the deciding requirement and every failed check's, each with its level,
basis, text and quote; the failed checks, the deciding one first; and the wire evidence, the
decisive exchanges only (:func:`~.common.evidence`: the deciding check's step and the few
before it, ``N earlier exchanges omitted``; the JSON report has every event), each line
numbered by the step the checks cite (``s5``).

Values are written as people read them (:func:`js`): JavaScript-like objects, ``undefined``
for MessagePack's undefined, a long or shortened string as its start and true size
(``"aaaa…" (10,485,760 characters, 10 MiB)``). Every string from a server is put in code spans
or fenced blocks, never as Markdown (:func:`code`, :func:`fence`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..matching import is_undefined, sized
from ..model import VERDICT_ORDER, CaseResult, TargetRun, WireEvent, failed_in_order
from ..wire import event_view
from .common import (
    CaseGroup,
    evidence,
    grouped,
    label,
    not_passing,
    one_line,
    quoted_requirements,
    reproduction,
    requirement_info,
    shown_verdict,
    silent_step,
    step_label,
)
from .junit import reason

_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
EVENT_WIDTH = 400  # characters of one decoded event on an evidence line


def js(value: Any, *, head: int = 16, long: int = 100) -> str:
    """A decoded view as a JavaScript-like literal on one line: ``{ok: true, id: undefined}``,
    strings longer than ``long`` characters (or shortened by the view) as their first ``head``
    characters and their true size."""
    if isinstance(value, str):
        return sized(value, head=head, long=long, json_style=True)
    if is_undefined(value):
        return "undefined"
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = str(k) if _KEY.fullmatch(str(k)) else json.dumps(str(k), ensure_ascii=False)
            items.append(f"{key}: {js(v, head=head, long=long)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(js(v, head=head, long=long) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, default=str, ensure_ascii=False)


def code(text: str) -> str:
    """``text`` as one inline code span that shows it as it is (one line, backticks fenced)."""
    flat = " ".join(str(text).split())
    run = max((len(m) for m in re.findall(r"`+", flat)), default=0)
    tick = "`" * (run + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{tick}{pad}{flat}{pad}{tick}"


def fence(lines: Sequence[str], info: str = "text") -> str:
    """Lines in a fenced block whose fence no line can close."""
    run = max((len(m) for line in lines for m in re.findall(r"`{3,}", line)), default=0)
    tick = "`" * max(3, run + 1)
    return f"{tick}{info}\n" + "\n".join(lines) + f"\n{tick}\n"


def quote_block(text: str) -> str:
    """A Markdown block quote of ``text`` (a spec sentence), escaped so it reads as written."""
    body = re.sub(r"([\\`*_\[\]<>])", r"\\\1", " ".join(str(text).split()))
    return f"> {body}"


def event_line(ev: WireEvent, protocol: str, decisive: bool = False) -> str:
    """One transcript event: ``s5 c1 -> {cmd: "PUSH", …}`` (``<-`` received, ``--`` a close or
    a note), ``◀`` on the decisive ones."""
    step = f"s{step_label(ev)}" if ev.step is not None else "  "
    mark = "  ◀" if decisive else ""
    if ev.direction in ("send", "recv"):
        arrow = "->" if ev.direction == "send" else "<-"
        view = event_view(ev, protocol)
        body = js(view) if view is not None else f"{len(ev.data):,} bytes, not decoded"
        if len(body) > EVENT_WIDTH:
            body = body[:EVENT_WIDTH - 1] + "…"
        note = f"  ({one_line(ev.note, 160)})" if ev.note else ""
        return f"{step} c{ev.conn} {arrow} {body}{note}{mark}"
    what = ev.direction if ev.direction != "note" else "note"
    return f"{step} c{ev.conn} -- {what}: {one_line(ev.note, 200)}{mark}"


def evidence_block(result: CaseResult) -> str:
    """The decisive exchanges of a case's transcript as a fenced block, with what was left out
    said in place, and a line for each step that recorded nothing (a sleep)."""
    shown = evidence(result)
    lines = []
    if shown.earlier_events:
        lines.append(f"… {shown.earlier_exchanges} earlier exchanges ({shown.earlier_events} "
                     "events) omitted (see the JSON report)")
    last: int | None = None
    for k, ev in enumerate(shown.events):
        if ev.direction == "open":
            continue
        if ev.step is not None and not ev.cleanup and last is not None and ev.step > last + 1:
            for gap in range(last + 1, ev.step):
                what = silent_step(result.case, gap)
                if what is not None:
                    lines.append(f"s{gap}    {what} (nothing on the wire)")
        if ev.step is not None and not ev.cleanup:
            last = ev.step
        lines.append(event_line(ev, result.case.protocol, shown.start + k in shown.decisive))
    if shown.later_events:
        lines.append(f"… {shown.later_events} later events omitted (see the JSON report)")
    if not lines:
        lines.append("(no events)")
    return fence(lines)


def requirement_lines(run: TargetRun, result: CaseResult) -> list[str]:
    """The deciding requirement and every failed check's: id, level, basis, cite, text, and
    the documents' sentence as a block quote."""
    out = []
    for info in quoted_requirements(run.profile, result):
        lead = " — decided the verdict" if info["decided"] else ""
        basis = f", {info['basis']}" if info["basis"] else ""
        cite = f", {info['cite']}" if info["cite"] else ""
        out.append(f"- **{info['id']}** ({info['level']}{basis}{cite}){lead}: "
                   f"{one_line(info['text'], 1000)}")
        if info["quote"]:
            out.append("  " + quote_block(info["quote"]))
        else:
            out.append("  (no sentence of the documents to quote: "
                       f"{info['basis'] or 'no basis given'})")
    return out


def case_section(run: TargetRun, result: CaseResult, level: int = 4) -> str:
    """One case that did not pass: requirements and quotes, failed checks, evidence, how to
    reproduce it."""
    out = [f"{'#' * level} {shown_verdict(result)} {code(result.case.id)}: "
           f"{one_line(result.case.title, 200)}"]
    quoted = requirement_lines(run, result)
    if quoted:
        out += ["", *quoted]
    if result.error:
        out += ["", f"Error: {code(one_line(result.error, 400))}"]
    failed = failed_in_order(result.checks)
    if failed:
        out += ["", "Failed checks (the deciding one first):", ""]
        out += [f"- {c.requirement or '-'} {c.level}: {code(one_line(c.message, 400))}"
                for c in failed]
    if result.known_failing and result.verdict.value == "PASS":
        out += ["", "Listed as known-failing but passed (STALE): remove it from the list."]
    out += ["", "Wire evidence (`->` sent by the suite, `<-` received, `cN` the connection, `sN` "
                "the step the checks cite, `◀` the decisive step):", "",
            evidence_block(result), f"Reproduce: {code(reproduction(run, result))}", ""]
    return "\n".join(out)


def _case_line(run: TargetRun, result: CaseResult) -> list[str]:
    why = ("listed as known-failing but passed: remove it from the list"
           if result.known_failing and result.verdict.value == "PASS" else reason(result))
    lines = [f"- **{shown_verdict(result)}** {code(result.case.id)}: {code(one_line(why, 300))}"]
    quoted = quoted_requirements(run.profile, result)
    if quoted and quoted[0]["quote"]:
        lines.append("  " + quote_block(one_line(quoted[0]["quote"], 300)))
    return lines


def _group_line(run: TargetRun, group: CaseGroup) -> list[str]:
    rule = f"{group.requirement} {group.level or ''}".strip() if group.requirement else "-"
    lines = [f"- **{group.verdict}** {code(group.prefix)}: {len(group.members)} generated cases "
             f"of one rule ({rule}): " + ", ".join(code(n) for n in group.names)]
    if group.values:
        lines.append("  values tried that failed: " + ", ".join(code(v) for v in group.values))
    if group.requirement:
        info = requirement_info(run.profile, group.requirement)
        if info["quote"]:
            lines.append("  " + quote_block(one_line(info["quote"], 300)))
    return lines


def run_section(run: TargetRun) -> str:
    """One run: counts, the cases to look at, and each of them in detail."""
    counts = run.counts()
    cov = run.coverage
    verdicts = [v.value for v in VERDICT_ORDER]
    out = [f"## {label(run)}", "",
           "| " + " | ".join(verdicts) + " | total | requirement coverage |",
           "|" + "---:|" * (len(verdicts) + 2),
           "| " + " | ".join(str(counts[v]) for v in verdicts)
           + f" | {len(run.results)} | {len(cov.exercised)}/{len(cov.applicable)} "
             f"({cov.ratio:.0%}) |", ""]
    bad = not_passing(run)
    if not bad:
        out += ["Every case passed (or only observed).", ""]
        return "\n".join(out)
    items = grouped(bad)
    out += [f"### Cases to look at ({len(bad)})", ""]
    for item in items:
        out += _group_line(run, item) if isinstance(item, CaseGroup) else _case_line(run, item)
    out += ["", "### The cases in detail", ""]
    for item in items:
        if isinstance(item, CaseGroup):
            others = ", ".join(code(n) for n in item.names[1:])
            out += [f"#### {item.verdict} {code(item.prefix)}: {len(item.members)} generated "
                    f"cases of one rule", "",
                    f"The first is shown; the others ({others}, after {code(item.prefix[:-1])}) "
                    "fail the same way"
                    + (f" with: {', '.join(code(v) for v in item.values)}" if item.values
                       else "") + ".", "",
                    case_section(run, item.members[0], level=5)]
        else:
            out.append(case_section(run, item))
    return "\n".join(out)


def render(runs: Sequence[TargetRun], *, title: str = "queuewire conformance report") -> str:
    """The whole Markdown report of ``runs``."""
    head = [f"# {title}", "",
            "Each case below is led by the requirement that decided its verdict (for a FAIL a "
            "MUST) and the documents' sentence; its evidence is the decisive exchanges of the "
            "transcript (the JSON report has every event). Values: `undefined` is MessagePack's "
            "undefined; a long string is shown as its start and true size.", ""]
    return "\n".join(head) + "\n" + "\n".join(run_section(run) for run in runs)
