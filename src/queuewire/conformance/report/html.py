"""The HTML report: one static, self-contained file (inline CSS and a few lines of JS).

Sections: a summary matrix (one column per run: counts per verdict, coverage, result), for
client runs the capability table (capability x client: used, not used, not observable, each
cell with its evidence; and for a client without a failing case that did not use a capability
a scenario gave it the chance to use, the sentence saying that this is not full support), the
verdict counts per area of each run (the area is the second part of a case id,
``bunqueue.frame.*`` -> ``frame``: :func:`~.common.area_of`), the requirement coverage of each
run with the ids not exercised, the requirement view (every requirement of the profile with
its level, source, quote and the cases citing it with their verdicts; requirements no case
cites are marked so, and those out of scope say whom they bind: client requirements in a
server run, server requirements in a client run), a case x run verdict matrix linking to the
details, and per run, area by area, every case as a ``<details>`` element: title, verdict
and the one-line reason led by the requirement that decided the verdict
(:func:`~.common.headline`: for a FAIL a MUST, whatever failed before it), the requirements with
their level and text from the spec, the documents' sentence (quote) of the deciding requirement
and of every failed check's, expected vs actual of every check (the deciding one marked), the
error and reproduction line, and the wire transcript of every connection (the step of each
event as the checks number it, time since the case started, connection, direction, a hex dump
and the decoded view, both directions). Generated cases of one rule and verdict (the queue-name
probes of twenty commands, say) are gathered in one group that names the values tried
(:func:`~.common.grouped`), each case still inside it. A case that did not pass shows the
decisive exchanges of its transcript: the deciding check's step and the few before it, with the
number of earlier exchanges omitted (:func:`~.common.evidence`; the JSON report has them all).
Transcripts of passing cases are left out unless ``transcripts="all"`` (``conform server
--html-transcripts``, whose default is ``failing``): an all-PASS run's page is then a fraction
of the size. Values read as people read them: ``undefined`` (MessagePack ext 0) as itself, a
long or shortened string as its start and true size. Checkboxes filter cases by verdict, each
explained where offered (STALE: listed as known-failing but passed); without JS every case is
still there (FAIL and ERROR open). Every string from a run is escaped with
:func:`html.escape`, since servers under test choose the bytes. Hex dumps and decoded views
are capped per event so a 64 MiB frame does not make a 200 MB page; the cap is stated where
it applies. A case whose transcript the runner cut (events omitted between its head and tail,
a connection it stopped reading) says so above its transcript.

The server residue section (a run that carries :class:`~..model.RunResidue`, i.e. a server
profile with a ``resources`` section) says per run whether the server was left as found, what
the cases left on it per resource kind, what the run removed, what is still there with the
reason, what could not be listed, and the health probes that broke with the cases running since
their last ok answer (each linking to its case). Every list is cut at :data:`RESIDUE_CAP`
entries (per kind where grouped by kind) with the number left out; the JSON report has them
all. A run without it (a profile without resources, an unreachable target) gets one line.
Nothing there is a verdict.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..model import (
    VERDICT_ORDER,
    CaseResult,
    Check,
    RunResidue,
    TargetRun,
    Verdict,
    WireEvent,
    deciding_check,
    describe_cut,
    transcript_cut,
)
from ..wire import event_view
from .common import (
    CAPABILITY_LEGEND,
    NOT_OBSERVABLE,
    NOT_USED,
    USED,
    CaseGroup,
    area_of,
    areas,
    capability_names,
    capability_rows,
    evidence,
    exit_status,
    grouped,
    label,
    out_of_scope_subjects,
    pretty,
    quoted_requirements,
    reproduction,
    requirement_info,
    requirement_rows,
    shown_verdict,
    silent_step,
    step_label,
    support_note,
)
from .junit import reason

if TYPE_CHECKING:  # a residue's items; the report stays as cheap to import as the model
    from ...traffic.inventory import Item

HEX_CAP = 1024  # bytes of hex dump shown per event
DECODED_CAP = 8000  # characters of decoded JSON shown per event
EVENTS_CAP = 400  # events shown per case
RESIDUE_CAP = 50  # entries shown per residue list (per kind where grouped by kind)
#: ``render(transcripts=...)`` / ``conform server --html-transcripts``: the wire transcript of
#: every case, or only of the cases that did not pass (every verdict but PASS, and STALE)
TRANSCRIPTS = ("all", "failing")

#: What each verdict filter shows, said where the filters are offered.
VERDICT_MEANING = {
    "FAIL": "a MUST the documents state was not followed; fails the run",
    "ERROR": "the run itself broke (unreachable target, a step that could not run); fails "
             "the run",
    "UNIMPLEMENTED": "the target answered the command under test as an unknown command",
    "NON-STRICT": "only a SHOULD (a reading or a queuewire decision) was not followed",
    "INFO": "observation only, not judged",
    "PASS": "every check held",
    "STALE": "listed in the --known-failing file but passed: the list is out of date (remove "
             "the entry); a STALE case fails the run",
}

COLOR = {"PASS": "#1a7f37", "FAIL": "#cf222e", "ERROR": "#8250df", "NON-STRICT": "#bf8700",
         "UNIMPLEMENTED": "#0969da", "INFO": "#57606a", "STALE": "#cf222e"}
CAPABILITY_COLOR = {USED: "#1a7f37", NOT_USED: "#bf8700", NOT_OBSERVABLE: "#8c959f"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;
  margin:0 auto;
  max-width:1400px;
  padding:1em 2em;
  color:#1f2328}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right}
.v{display:inline-block;
  border-radius:4px;
  padding:0 6px;
  color:#fff;
  font-weight:600;
  font-size:.85em;
  white-space:nowrap}
pre{margin:0;
  font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
  white-space:pre-wrap;
  word-break:break-all}
details.case{border:1px solid #d0d7de;border-radius:6px;margin:.4em 0;padding:.3em .8em}
details.case>summary{cursor:pointer}details.case[open]>summary{margin-bottom:.5em}
.ok{color:#1a7f37}.bad{color:#cf222e}.dim{color:#57606a}
tr.send td{background:#f0f7ff}tr.recv td{background:#f4fff4}
tr.close td,tr.open td,tr.note td{background:#fafafa}
.filters label{margin-right:1em}code{font-size:.95em}
.legend{margin:.2em 0 .6em 0;padding-left:1.2em}.legend li{margin:0}
tr.decided td{outline:2px solid #cf222e}td.step{white-space:nowrap}
pre.hex{white-space:pre;word-break:normal}
tr.omitted td,tr.silent td{background:#fff8c5;font-style:italic}
details.group{border:1px dashed #8c959f;border-radius:6px;margin:.4em 0;padding:.3em .8em}
blockquote.quote{margin:.2em 0 .4em 1.2em}
.idlist code{display:inline-block;margin:0 .4em .2em 0}
td.z{color:#8c959f;text-align:right}blockquote{margin:0;padding-left:.6em;border-left:3px solid #d0d7de}
"""

JS = """
function qwFilter(){
  var on={};document.querySelectorAll('.filters input').forEach(function(b){on[b.value]=b.checked;});
  document.querySelectorAll('[data-verdict]').forEach(function(e){e.style.display=on[e.dataset.verdict]===false?'none':'';});
}
function qwOpen(){
  var e=location.hash?document.getElementById(decodeURIComponent(location.hash.slice(1))):null;
  for(;e;e=e.parentElement){if(e.tagName==='DETAILS'){e.open=true;}}
}
window.addEventListener('hashchange',qwOpen);
document.addEventListener('DOMContentLoaded',function(){
  document.querySelectorAll('.filters input').forEach(function(b){b.addEventListener('change',qwFilter);});
  qwOpen();
});
"""


def e(value: Any) -> str:
    """Escape anything for HTML text or attribute values."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def hexdump(data: bytes, cap: int = HEX_CAP) -> str:
    """Offset, 16 hex bytes and their ASCII per line (plain text, not yet escaped)."""
    lines = []
    for off in range(0, min(len(data), cap), 16):
        chunk = data[off:off + 16]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hx:<47}  {asc}")
    if len(data) > cap:
        lines.append(f"... {len(data) - cap} more bytes ({len(data)} in all)")
    return "\n".join(lines)


def _json(value: Any, cap: int = DECODED_CAP) -> str:
    """A decoded view or check value as people read it (:func:`~.common.pretty`: ``undefined``
    as itself, long strings as their start and true size), cut at ``cap`` characters."""
    if value is None:
        return ""
    s = pretty(value)
    return s if len(s) <= cap else s[:cap] + f"\n... ({len(s)} characters in all)"


def badge(verdict: str) -> str:
    return f'<span class="v" style="background:{COLOR.get(verdict, "#57606a")}">{e(verdict)}</span>'


def _shown_verdict(r: CaseResult) -> str:
    return shown_verdict(r)


def _anchor(i: int, case_id: str) -> str:
    return f"r{i}-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in case_id)


def _summary(runs: Sequence[TargetRun]) -> str:
    head = "".join(f"<th>{e(label(r))}</th>" for r in runs)
    rows = []
    for v in VERDICT_ORDER:
        cells = "".join(f'<td class="n">{r.counts()[v.value]}</td>' for r in runs)
        rows.append(f"<tr><th>{badge(v.value)}</th>{cells}</tr>")
    rows.append("<tr><th>cases</th>" + "".join(f'<td class="n">{len(r.results)}</td>' for r in runs)
                + "</tr>")
    rows.append("<tr><th>requirement coverage</th>" + "".join(
        f'<td class="n">{len(r.coverage.exercised)}/{len(r.coverage.applicable)} '
        f"({r.coverage.ratio:.0%})</td>" for r in runs) + "</tr>")
    rows.append("<tr><th>duration</th>" + "".join(f'<td class="n">{r.duration:.1f} s</td>'
                                                   for r in runs) + "</tr>")
    if any(r.residue is not None for r in runs):
        rows.append('<tr class="residue"><th>server residue</th>'
                    + "".join(_residue_cell(i, r) for i, r in enumerate(runs)) + "</tr>")
    rows.append("<tr><th>result</th>" + "".join(
        f'<td>{badge("FAIL") + " " + str(len(r.failing())) + " failing" if r.failing() else badge("PASS")}'
        f"{' (strict)' if r.strict else ''}</td>" for r in runs) + "</tr>")
    return f"<table><tr><th></th>{head}</tr>{''.join(rows)}</table>"


def _coverage(i: int, run: TargetRun) -> str:
    cov = run.coverage
    missing = cov.not_exercised
    items = []
    for rid in missing:
        info = requirement_info(run.profile, rid)
        items.append(f'<code title="{e(info["level"] + ": " + info["text"])}">{e(rid)}</code>')
    observed = set(cov.observed)
    body = (f"<p>{len(cov.exercised)} of {len(cov.applicable)} applicable requirement ids "
            f"exercised, i.e. judged ({cov.ratio:.1%}); {len(observed)} observed only (cited by "
            f"INFO cases alone); {len(cov.out_of_scope)} out of scope "
            f"({e(out_of_scope_subjects(run))} requirements).</p>")
    unseen = [item for rid, item in zip(missing, items) if rid not in observed]
    seen = [item for rid, item in zip(missing, items) if rid in observed]
    if unseen:
        body += (f'<details open><summary>not exercised ({len(unseen)})</summary>'
                 f'<p class="idlist">{"".join(unseen)}</p></details>')
    if seen:
        body += (f'<details open><summary>observed only, not judged ({len(seen)})</summary>'
                 f'<p class="idlist">{"".join(seen)}</p></details>')
    if cov.out_of_scope:
        body += (f'<details><summary>out of scope ({len(cov.out_of_scope)})</summary><p class="idlist">'
                 + "".join(f"<code>{e(x)}</code>" for x in cov.out_of_scope) + "</p></details>")
    return f'<h3 id="cov{i}">{e(label(run))}</h3>{body}'


def _capabilities(runs: Sequence[TargetRun]) -> str:
    """Capability x client run, each cell its state and evidence; empty without client runs."""
    shown = [run for run in runs if capability_rows(run)]
    if not shown:
        return ""
    head = "".join(f"<th>{e(label(r))}</th>" for r in shown)
    rows = []
    for name in capability_names(shown):
        cells = []
        for run in shown:
            row = next((r for r in capability_rows(run) if r["capability"] == name), None)
            if row is None:
                cells.append('<td class="dim">-</td>')
                continue
            color = CAPABILITY_COLOR.get(str(row["state"]), "#57606a")
            cells.append(f'<td data-state="{e(row["state"])}"><span class="v" '
                         f'style="background:{color}">{e(row["state"])}</span>'
                         f'<div class="dim">{e(row.get("evidence", ""))}</div></td>')
        rows.append(f'<tr class="capability" data-capability="{e(name)}"><th>{e(name)}</th>'
                    f'{"".join(cells)}</tr>')
    note = support_note(shown)
    return (f'<h2>Capabilities</h2><p>What each client was seen to do ({e(CAPABILITY_LEGEND)})'
            f'.</p><table class="capabilities"><tr><th>capability</th>{head}</tr>'
            f'{"".join(rows)}</table>'
            + (f'<p class="bad" id="support-note">{e(note)}</p>' if note else ""))


# -- server residue ---------------------------------------------------------------------------
def _more(n: int, cap: int = RESIDUE_CAP) -> str:
    return f'<p class="dim">... and {n - cap} more (see the JSON report)</p>' if n > cap else ""


def _residue_state(found: RunResidue) -> str:
    """A few words: left as found, else how many things are still there, unlisted, broken."""
    if found.clean:
        return "left as found"
    res = found.residue
    parts = [f"{n} {what}" for n, what in ((len(res.left), "still there"),
                                           (len(res.unlisted), "not listed"),
                                           (len(found.breaks), "probe(s) broke")) if n]
    return ", ".join(parts)


def _residue_cell(i: int, run: TargetRun) -> str:
    if run.residue is None:
        return '<td class="dim">-</td>'
    cls = "ok" if run.residue.clean else "bad"
    return f'<td><a class="{cls}" href="#residue{i}">{e(_residue_state(run.residue))}</a></td>'


def _kinds_of(found: RunResidue, items: Sequence[Item]) -> list[str]:
    """The run's kinds in the profile's order, then any other kind an item names."""
    return list(dict.fromkeys([*found.kinds, *(item.kind for item in items)]))


def _by_kind(found: RunResidue, items: Sequence[Item]) -> str:
    """The items grouped by kind, each kind cut at :data:`RESIDUE_CAP`."""
    out = []
    for kind in _kinds_of(found, items):
        members = [item for item in items if item.kind == kind]
        if not members:
            continue
        names = "".join(f"<code>{e(item.text())}</code>" for item in members[:RESIDUE_CAP])
        more = (f' <span class="dim">and {len(members) - RESIDUE_CAP} more</span>'
                if len(members) > RESIDUE_CAP else "")
        out.append(f'<p class="idlist" data-kind="{e(kind)}"><b>{e(kind)}</b> '
                   f"({len(members)}): {names}{more}</p>")
    return "".join(out)


def _units(i: int, run: TargetRun, units: Sequence[str]) -> str:
    """The cases a break is blamed on, each linking to its details, cut at RESIDUE_CAP."""
    if not units:
        return '<span class="dim">no case was running</span>'
    known = {r.case.id for r in run.results}
    shown = " ".join(f'<a href="#{_anchor(i, u)}"><code>{e(u)}</code></a>' if u in known
                     else f"<code>{e(u)}</code>" for u in units[:RESIDUE_CAP])
    more = (f' <span class="dim">and {len(units) - RESIDUE_CAP} more</span>'
            if len(units) > RESIDUE_CAP else "")
    return shown + more


def _residue(i: int, run: TargetRun) -> str:
    """What the run left on the server and the probes its cases broke (model.RunResidue)."""
    head = f'<h3 id="residue{i}">{e(label(run))}</h3>'
    found = run.residue
    if found is None:
        return (head + '<p class="dim residue-none">not inventoried (the profile lists no '
                "resources, or the target could not be reached)</p>")
    res = found.residue
    cls = "ok" if found.clean else "bad"
    parts = [f'<p class="residue-state {cls}" data-clean="{str(found.clean).lower()}">'
             f"<b>{'clean' if found.clean else 'not clean'}</b>: {e(found.summary())}</p>"]
    left_items = [left.item for left in res.left]
    if res.appeared or res.left:
        rows = []
        for kind in _kinds_of(found, [*res.appeared, *left_items]):
            counts = [sum(item.kind == kind for item in items)
                      for items in (res.appeared, res.removed, left_items)]
            cells = "".join(f'<td class="{"n" if n else "z"}">{n}</td>' for n in counts)
            rows.append(f'<tr class="residue-kind" data-kind="{e(kind)}"><th>{e(kind)}</th>'
                        f"{cells}</tr>")
        parts.append('<table class="residue-kinds"><tr><th>kind</th><th>appeared</th>'
                     f'<th>removed by the run</th><th>still there</th></tr>{"".join(rows)}'
                     "</table>")
    if res.left:
        order = {k: n for n, k in enumerate(_kinds_of(found, left_items))}
        ranked = sorted(res.left, key=lambda left: order[left.item.kind])
        rows = [f'<tr class="residue-left" data-kind="{e(left.item.kind)}"><td><code>'
                f"{e(left.item.text())}</code></td><td>{e(left.reason)}</td></tr>"
                for left in ranked[:RESIDUE_CAP]]
        parts.append(f'<details open class="residue-left"><summary>still there '
                     f"({len(res.left)})</summary><table><tr><th>what</th><th>why</th></tr>"
                     f'{"".join(rows)}</table>{_more(len(res.left))}</details>')
    if res.removed:
        parts.append(f'<details class="residue-removed"><summary>removed by the run '
                     f"({len(res.removed)})</summary>{_by_kind(found, res.removed)}</details>")
    if res.appeared:
        parts.append(f'<details class="residue-appeared"><summary>left by the cases '
                     f"({len(res.appeared)})</summary>{_by_kind(found, res.appeared)}</details>")
    if res.unlisted:
        listed = list(res.unlisted.items())
        rows = [f"<tr><td><code>{e(what)}</code></td><td>{e(why)}</td></tr>"
                for what, why in listed[:RESIDUE_CAP]]
        parts.append(f'<details open class="residue-unlisted"><summary>could not be listed '
                     f"({len(listed)})</summary><table><tr><th>list</th><th>why</th></tr>"
                     f'{"".join(rows)}</table>{_more(len(listed))}</details>')
    if found.probes:
        parts.append('<p class="dim">health probes: '
                     + ", ".join(f"<code>{e(p)}</code>" for p in found.probes) + "</p>")
    if found.breaks:
        rows = []
        for brk in found.breaks[:RESIDUE_CAP]:
            if brk.recovered:
                after = f'<span class="ok">answers ok again {e(brk.recovered_after)}</span>'
            elif brk.probe in found.still_broken:
                after = '<span class="bad">still failing</span>'
            else:
                after = ""
            rows.append(f'<tr class="residue-break" data-probe="{e(brk.probe)}"><td><code>'
                        f"{e(brk.probe)}</code></td><td>{e(brk.error)}</td>"
                        f"<td>{_units(i, run, brk.units)}</td><td>{after}</td></tr>")
        parts.append(f'<p class="bad">{len(found.breaks)} probe(s) answered ok before and then '
                     "failed after a case:</p><table class=\"residue-breaks\"><tr><th>probe</th>"
                     "<th>now answers</th><th>cases running since its last ok answer</th>"
                     f'<th>after the run</th></tr>{"".join(rows)}</table>'
                     f"{_more(len(found.breaks))}")
    if found.failing_before:
        items = list(found.failing_before.items())
        parts.append('<p class="dim residue-failing-before">failing before the run (not '
                     "watched): " + "; ".join(f"<code>{e(name)}</code>: {e(err)}"
                                              for name, err in items[:RESIDUE_CAP])
                     + (f" and {len(items) - RESIDUE_CAP} more" if len(items) > RESIDUE_CAP
                        else "") + "</p>")
    return f'{head}<div class="residue" id="residue-run{i}">{"".join(parts)}</div>'


def _residues(runs: Sequence[TargetRun]) -> str:
    """The server residue section; empty when no run carries one."""
    if all(run.residue is None for run in runs):
        return ""
    return ("<h2>Server residue</h2><p>What each run found on the server before its first case "
            "and after its last, what it removed, and the health probes a case broke: "
            "observations beside the verdicts, never a verdict.</p>"
            + "".join(_residue(i, run) for i, run in enumerate(runs)))


def _area_anchor(i: int, area: str) -> str:
    return f"a{i}-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in area)


def _areas(i: int, run: TargetRun) -> str:
    """Verdict counts per area of one run, each area linking to its cases."""
    table = areas(run.results)
    head = "".join(f"<th>{badge(v.value)}</th>" for v in VERDICT_ORDER)
    rows = []
    for area, counts in table.items():
        cells = "".join(f'<td class="{"n" if counts[v.value] else "z"}">{counts[v.value]}</td>'
                        for v in VERDICT_ORDER)
        worst = next((v.value for v in VERDICT_ORDER if counts[v.value]), "PASS")
        rows.append(f'<tr class="area" data-area="{e(area)}" data-worst="{e(worst)}"><th>'
                    f'<a href="#{_area_anchor(i, area)}">{e(area)}</a></th>{cells}'
                    f'<td class="n">{sum(counts.values())}</td></tr>')
    return (f'<h3 id="areas{i}">{e(label(run))}</h3><table class="areas"><tr><th>area</th>'
            f'{head}<th>cases</th></tr>{"".join(rows)}</table>')


def _requirements(i: int, run: TargetRun) -> str:
    """Every requirement of the run's profile: level, source, quote and the citing cases."""
    rows = []
    reqs = requirement_rows(run)
    uncited = 0
    for req in reqs:
        source = " ".join(x for x in (req["source"], req["section"] and f"§ {req['section']}") if x)
        basis = f'<div class="dim">basis: {e(req["basis"])}</div>' if req["basis"] else ""
        quote = f"<blockquote>{e(req['quote'])}</blockquote>" if req["quote"] else ""
        quote += "".join(f'<blockquote class="disagrees">but {e(d.get("doc", ""))}, '
                         f'{e(d.get("section", ""))}: {e(d.get("quote", ""))}</blockquote>'
                         for d in req["disagrees"])
        if req["cases"]:
            cited = " ".join(f'<a href="#{_anchor(i, cid)}" title="{e(cid)}">{badge(v)}</a> '
                             f"<code>{e(cid)}</code><br>" for cid, v in req["cases"])
            status = "cited"
        elif not req["in_scope"]:
            status = req["subject"] or "other"
            cited = f'<span class="dim">out of scope ({e(status)} requirement)</span>'
        else:
            cited, status = '<span class="bad">cited by no case</span>', "uncited"
            uncited += 1
        rows.append(f'<tr class="req" data-req="{e(req["id"])}" data-status="{status}">'
                    f'<td><code>{e(req["id"])}</code></td><td>{e(req["level"])}</td>'
                    f'<td>{e(req["subject"])}</td><td>{e(source)}{basis}</td>'
                    f'<td>{e(req["text"])}{quote}</td><td>{cited}</td></tr>')
    return (f'<details id="reqs{i}"{" open" if len(reqs) <= 60 else ""}><summary>'
            f"{e(label(run))}: {len(reqs)} requirements, {uncited} in scope and cited by no "
            f"case</summary><table><tr><th>id</th><th>level</th><th>subject</th><th>source</th>"
            f"<th>requirement and quote</th><th>cases citing it</th></tr>{''.join(rows)}"
            f"</table></details>")


def _matrix(runs: Sequence[TargetRun]) -> str:
    ids: list[str] = []
    seen: set[str] = set()
    for run in runs:
        for r in run.results:
            if r.case.id not in seen:
                seen.add(r.case.id)
                ids.append(r.case.id)
    by_run = [{r.case.id: r for r in run.results} for run in runs]
    head = "".join(f"<th>{e(label(r))}</th>" for r in runs)
    rows = []
    for cid in ids:
        cells = []
        worst = None
        for i, m in enumerate(by_run):
            res = m.get(cid)
            if res is None:
                cells.append('<td class="dim">-</td>')
                continue
            shown = _shown_verdict(res)
            worst = shown if worst is None or shown != "PASS" else worst
            cells.append(f'<td><a href="#{_anchor(i, cid)}">{badge(shown)}</a></td>')
        rows.append(f'<tr data-verdict="{e(worst or "PASS")}"><td><code>{e(cid)}</code></td>'
                    f'{"".join(cells)}</tr>')
    return f'<table><tr><th>case</th>{head}</tr>{"".join(rows)}</table>'


def _check_row(c: Check, decided: bool = False) -> str:
    mark = '<span class="ok">✓</span>' if c.ok else '<span class="bad">✗</span>'
    if decided:
        mark += ' <span class="bad" title="the check that decided the verdict">decided</span>'
    row = '<tr class="decided">' if decided else "<tr>"
    return (f"{row}<td>{mark}</td><td><code>{e(c.requirement or '-')}</code></td><td>{e(c.level)}</td>"
            f"<td>{e(c.kind)}</td><td>{e(c.message)}"
            f"{'' if c.step is None else ' <span class=dim>(step ' + e(c.step) + ')</span>'}</td>"
            f"<td><pre>{e(_json(c.expected))}</pre></td><td><pre>{e(_json(c.actual))}</pre></td></tr>")


def _event_row(ev: WireEvent, protocol: str = "", decisive: bool = False) -> str:
    arrow = {"send": "tester → server", "recv": "server → tester", "close": "close",
             "open": "open", "note": "note"}.get(ev.direction, ev.direction)
    data = hexdump(ev.data) if ev.data else ""
    decoded = _json(event_view(ev, protocol))
    note = f'<div class="dim">{e(ev.note)}</div>' if ev.note else ""
    size = f" <span class=dim>({len(ev.data):,} B)</span>" if ev.data else ""
    cls = e(ev.direction) + (" decisive" if decisive else "")
    step = e(step_label(ev)) + (' <b class="bad" title="decisive">◀</b>' if decisive else "")
    return (f'<tr class="{cls}"><td class="step">{step}</td>'
            f'<td class="n">{ev.t * 1000:.1f} ms</td>'
            f"<td>{ev.conn}</td><td>{e(arrow)}{size}</td><td><pre class=\"hex\">{e(data)}</pre>{note}</td>"
            f"<td><pre>{e(decoded)}</pre></td></tr>")


def _transcript(r: CaseResult) -> str:
    """The wire transcript of a case: every event of a passing one (up to EVENTS_CAP), the
    decisive exchanges of one that did not pass (:func:`~.common.evidence`), each event with its
    step; a step that recorded nothing (a sleep) gets a row saying so."""
    events = r.transcript.events
    shown = evidence(r) if r.verdict is not Verdict.PASS else None
    window = shown.events if shown is not None else list(events)
    start = shown.start if shown is not None else 0
    decisive = shown.decisive if shown is not None else frozenset()
    rows = []
    if shown is not None and shown.earlier_events:
        rows.append(f'<tr class="omitted"><td colspan="6">{shown.earlier_exchanges} earlier '
                    f"exchanges ({shown.earlier_events} events) omitted: the JSON report has "
                    "them</td></tr>")
    last: int | None = None
    for k, ev in enumerate(window[:EVENTS_CAP]):
        if ev.step is not None and not ev.cleanup and last is not None and ev.step > last + 1:
            for gap in range(last + 1, ev.step):
                what = silent_step(r.case, gap)
                if what is not None:
                    rows.append(f'<tr class="silent"><td class="step">{gap}</td>'
                                f'<td colspan="5">step {gap}: {e(what)} (nothing on the wire)'
                                "</td></tr>")
        if ev.step is not None and not ev.cleanup:
            last = ev.step
        rows.append(_event_row(ev, r.case.protocol, start + k in decisive))
    more = ""
    if len(window) > EVENTS_CAP:
        more = (f'<p class="dim">... {len(window) - EVENTS_CAP} more events '
                f"(see the JSON report)</p>")
    if shown is not None and shown.later_events:
        rows.append(f'<tr class="omitted"><td colspan="6">{shown.later_events} later events '
                    "omitted: the JSON report has them</td></tr>")
    what = (f"{len(events)} events" if shown is None or not shown.trimmed
            else f"{len(window)} of {len(events)} events: the decisive exchanges")
    return (f"<details{' open' if r.verdict is not Verdict.PASS else ''}><summary>wire "
            f"transcript ({what})</summary><table><tr><th>step</th><th>time</th>"
            f"<th>conn</th><th>direction</th><th>bytes (hex)</th><th>decoded</th></tr>"
            f"{''.join(rows)}</table>{more}</details>")


def _quotes(run: TargetRun, r: CaseResult) -> str:
    """The documents' sentence of the deciding requirement and of each failed check's."""
    out = []
    for info in quoted_requirements(run.profile, r):
        what = "decided the verdict" if info["decided"] else "a failed check cites it"
        cite = f" <span class=dim>({e(info['cite'])})</span>" if info["cite"] else ""
        if info["quote"]:
            said = f'<blockquote class="quote">{e(info["quote"])}</blockquote>'
        else:
            said = (f'<blockquote class="quote dim">no sentence of the documents to quote '
                    f'({e(info["basis"] or "no basis given")}): {e(info["text"])}</blockquote>')
        out.append(f'<div class="req-quote" data-req="{e(info["id"])}"><code>{e(info["id"])}'
                   f"</code> <b>{e(info['level'])}</b> <span class=dim>{what}</span>{cite}"
                   f"{said}</div>")
    return "".join(out)


def _case(i: int, run: TargetRun, r: CaseResult, transcripts: str = "all") -> str:
    shown = _shown_verdict(r)
    first = deciding_check(r.checks)
    reqs = []
    ids = [first.requirement] if first is not None and first.requirement else []
    for rid in dict.fromkeys(ids + list(r.case.requirements)):
        info = requirement_info(run.profile, rid)
        lead = ' <span class="bad">decided the verdict</span>' if ids and rid == ids[0] else ""
        reqs.append(f"<li><code>{e(rid)}</code> <b>{e(info['level'])}</b>{lead} {e(info['text'])}"
                    f"{' <span class=dim>(' + e(info['cite']) + ')</span>' if info['cite'] else ''}</li>")
    parts = [f"<p><b>{e(r.case.title)}</b> <span class=dim>({r.duration * 1000:.0f} ms"
             f"{', ' + e(r.case.source) if r.case.source else ''})</span></p>",
             f"<ul>{''.join(reqs)}</ul>" if reqs else "", _quotes(run, r)]
    if shown == "STALE":
        parts.append('<p class="bad">Listed as known-failing but passed: remove it from the list.</p>')
    elif r.known_failing:
        parts.append('<p class="dim">Listed as known-failing.</p>')
    if r.error:
        parts.append(f'<p class="bad">error:</p><pre>{e(r.error)}</pre>')
    if r.checks:
        parts.append("<table><tr><th></th><th>requirement</th><th>level</th><th>kind</th>"
                     "<th>check</th><th>expected</th><th>actual</th></tr>"
                     + "".join(_check_row(c, c is first) for c in r.checks) + "</table>")
    if r.verdict is not Verdict.PASS:
        parts.append(f"<p>reproduce: <code>{e(reproduction(run, r))}</code></p>")
    cut = transcript_cut(r.transcript)
    if cut:
        parts.append(f'<p class="bad">{e(describe_cut(cut))}</p>')
    events = r.transcript.events
    if events and (transcripts == "all" or shown != "PASS"):
        parts.append(_transcript(r))
    elif events:
        parts.append(f'<p class="dim transcript-left-out">wire transcript ({len(events)} events) '
                     "left out of this page because the case passed: the JSON report has it, "
                     "and <code>--html-transcripts all</code> puts it here</p>")
    is_open = " open" if shown in ("FAIL", "ERROR", "STALE") else ""
    why = reason(r) if r.verdict is not Verdict.PASS else ""
    return (f'<details class="case" id="{_anchor(i, r.case.id)}" data-verdict="{e(shown)}"{is_open}>'
            f"<summary>{badge(shown)} <code>{e(r.case.id)}</code> {e(r.case.title)}"
            f"{' — <span class=dim>' + e(why) + '</span>' if why else ''}</summary>"
            f"{''.join(parts)}</details>")


def _group(i: int, run: TargetRun, group: CaseGroup, transcripts: str) -> str:
    """Generated cases of one rule and verdict: one block naming the rule, the cases and the
    values tried, the cases inside it."""
    info = requirement_info(run.profile, group.requirement) if group.requirement else None
    rule = (f"<p>decided by <code>{e(info['id'])}</code> <b>{e(group.level or info['level'])}</b> "
            f"{e(info['text'])}</p>" if info else "")
    quote = (f'<blockquote class="quote">{e(info["quote"])}</blockquote>'
             if info and info["quote"] else "")
    values = (f"<p>values tried that failed: {', '.join(f'<code>{e(v)}</code>' for v in group.values)}</p>"
              if group.values else "")
    names = " ".join(f"<code>{e(n)}</code>" for n in group.names)
    lead = f" — {e(group.requirement)} {e(group.level or '')}" if group.requirement else ""
    return (f'<details class="group" data-verdict="{e(group.verdict)}" '
            f'data-group="{e(group.prefix)}"><summary>{badge(group.verdict)} '
            f"<code>{e(group.prefix)}</code> {len(group.members)} generated cases of one rule"
            f"<span class=dim>{lead}</span></summary>{rule}{quote}{values}"
            f'<p class="idlist">{names}</p>'
            + "".join(_case(i, run, r, transcripts) for r in group.members) + "</details>")


def _legend() -> str:
    return ('<ul class="legend">' + "".join(f"<li>{badge(v)} {e(VERDICT_MEANING[v])}</li>"
                                            for v in [*(x.value for x in VERDICT_ORDER), "STALE"])
            + "</ul>")


def render(runs: Sequence[TargetRun], *, title: str = "queuewire conformance report",
           transcripts: str = "all", extra: str = "") -> str:
    """The whole report as one HTML document. ``transcripts``: ``"all"``, or ``"failing"`` to
    leave out the wire transcripts of passing cases (:data:`TRANSCRIPTS`). ``extra``: an HTML
    section (already escaped by its maker) shown before the summary."""
    if transcripts not in TRANSCRIPTS:
        raise ValueError(f"transcripts must be one of {', '.join(TRANSCRIPTS)}, not {transcripts!r}")
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    status = exit_status(runs)
    verdicts = [v.value for v in VERDICT_ORDER] + ["STALE"]
    filters = "".join(f'<label title="{e(VERDICT_MEANING[v])}"><input type="checkbox" '
                      f'value="{e(v)}" checked> {badge(v)}</label>' for v in verdicts)
    cases = []
    for i, run in enumerate(runs):
        order = {v: k for k, v in enumerate(VERDICT_ORDER)}
        by_area: dict[str, list[CaseResult]] = {}
        for r in run.results:
            by_area.setdefault(area_of(r.case), []).append(r)
        body = []
        for area, members in sorted(by_area.items()):
            members.sort(key=lambda r: (order[r.verdict], r.case.id))
            counts = ", ".join(f"{n} {v}" for v, n in
                               ((v.value, sum(r.verdict is v for r in members))
                                for v in VERDICT_ORDER) if n)
            body.append(f'<h4 id="{_area_anchor(i, area)}" class="area">{e(area)} '
                        f'<span class=dim>({counts})</span></h4>'
                        + "".join(_group(i, run, item, transcripts) if isinstance(item, CaseGroup)
                                  else _case(i, run, item, transcripts)
                                  for item in grouped(members)))
        cases.append(f'<h3 id="run{i}">{e(label(run))} <span class=dim>({e(run.protocol)}, '
                     f"started {e(run.started_at)})</span></h3>" + "".join(body))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title><style>{CSS}</style><script>{JS}</script></head>
<body>
<h1>{e(title)}</h1>
<p>Generated {e(now)} by <code>queuewire conform</code>. Result: {badge("FAIL") + " exit status 1"
 if status else badge("PASS") + " exit status 0"}.</p>
{extra}<h2>Summary</h2>
{_summary(runs)}
{_capabilities(runs)}
{_residues(runs)}
<h2>Areas</h2>
{"".join(_areas(i, run) for i, run in enumerate(runs))}
<h2>Requirement coverage</h2>
{"".join(_coverage(i, run) for i, run in enumerate(runs))}
<h2>Requirements</h2>
<p>Every requirement of the profile with its level, where it comes from and the cases that
cite it, with their verdicts.</p>
{"".join(_requirements(i, run) for i, run in enumerate(runs))}
<h2>Cases</h2>
<p class="filters">Show: {filters}</p>
<p class="dim">What each filter shows (STALE comes from <code>--known-failing</code>: a case that
file lists as failing passed this time, so the file must lose that entry):</p>
{_legend()}
{"" if transcripts == "all" else '<p class="dim">Wire transcripts of passing cases are left '
 'out of this page (<code>--html-transcripts all</code> keeps them); the JSON report has every '
 'transcript.</p>'}
<details{' open' if len(runs) > 1 else ''}><summary>case × target matrix</summary>{_matrix(runs)}</details>
{"".join(cases)}
</body></html>
"""
