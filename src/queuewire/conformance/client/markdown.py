"""A Markdown page of client conformance runs (``conform client --markdown``), for docs/.

It reads only the model (:class:`~..model.TargetRun`): a matrix of scenario x client, the
capability table (per client, each capability used, not used or not observable; then in each
client's section every capability's evidence; and for a client without a failing case that did
not use a capability a scenario gave it the chance to use, the sentence saying that this is not
full support), then per client every scenario that did not pass with its failing checks
(requirement id, level and text from the spec, what was expected and seen) and the wire
evidence: the frames the check names, or else the scenario's last frames, each as hex and
decoded. The HTML and JSON reports carry the full transcripts; this page is what a reader of
the docs needs to see a deviation.

Every string that comes from the testee or the peer (the testee's name and command, its
stderr quoted in an ERROR, its error messages and results, the frames the client sent, the
messages of checks that quote them) is data, rendered so that no CommonMark/GFM/MyST reader
(GitHub, Sphinx) makes markup of it: :func:`text` backslash-escapes every character that can
open an inline construct (links, images, raw HTML, entities, emphasis, code, GFM autolinks and
table pipes, MyST roles and substitutions) and :func:`code` makes a code span whose delimiter
is longer than any backtick run inside; both turn line breaks into a visible ``\\n``, so
nothing can end a paragraph, a list item or a table row, start a heading or an HTML block.
The wire evidence is a fenced block whose fence is longer than any backtick run it holds, each
line indented, so it cannot be closed early.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..model import CaseResult, TargetRun, Verdict
from ..report.common import (
    CAPABILITY_LEGEND,
    capability_names,
    capability_rows,
    capability_state,
    label,
    requirement_info,
    support_note,
)
from .records import clip

__all__ = ["code", "render", "text"]

HEX_BYTES = 96      # bytes of hex shown per frame
EVIDENCE_EVENTS = 6  # frames shown when no check names one
ERROR_CHARS = 1500  # characters of an ERROR's message shown (the JSON report has it whole)

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# ASCII punctuation that can open an inline construct (CommonMark allows escaping any of it);
# ":" and the "." of "www." stop GFM's autolinks, "{" "}" MyST roles and substitutions
_INLINE = re.compile(r"[\\`*_{}\[\]<>!|~&:@$#]|(?<=[wW]{3})\.")
_TICKS = re.compile(r"`+")
_PLAIN_ID = re.compile(r"[\w.*-]+")


def _one_line(value: Any) -> str:
    return _LINE_BREAK.sub(r"\\n", str(value))


def text(value: Any) -> str:
    """``value`` as inline Markdown text that renders as itself (see the module docstring)."""
    return _INLINE.sub(lambda m: "\\" + m.group(0), _one_line(value))


def code(value: Any) -> str:
    """``value`` as an inline code span that renders as itself, on one line."""
    body = _one_line(value)
    if not body:
        return "` `"
    ticks = "`" * (1 + max((len(m) for m in _TICKS.findall(body)), default=0))
    pad = " " if "`" in body or (body.startswith(" ") and body.endswith(" ")) else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"


def _fence(lines: list[str]) -> str:
    longest = max((len(m) for line in lines for m in _TICKS.findall(line)), default=0)
    return "`" * max(3, longest + 1)


def _id(cid: str) -> str:
    """A scenario id: a code span when it is a plain dotted id (as the suite's are)."""
    return f"`{cid}`" if _PLAIN_ID.fullmatch(cid) else text(cid)


def _cell(run: TargetRun, cid: str) -> str:
    r = next((r for r in run.results if r.case.id == cid), None)
    return "-" if r is None else r.verdict.value


def _short(value: Any, limit: int = 300) -> str:
    dumped = json.dumps(value, default=str, ensure_ascii=False)
    return dumped if len(dumped) <= limit else dumped[:limit] + " ..."


def _evidence(r: CaseResult) -> list[str]:
    frames = [e for e in r.transcript.events if e.direction in ("recv", "send", "close", "open")]
    named = {json.dumps(c.actual, sort_keys=True, default=str) for c in r.failed_checks
             if isinstance(c.actual, dict) and "cmd" in c.actual}
    chosen = [e for e in frames if e.direction == "recv" and isinstance(e.decoded, list)
              and any(json.dumps(d, sort_keys=True, default=str) in named for d in e.decoded)]
    if not chosen:
        chosen = frames[-EVIDENCE_EVENTS:]
    out = []
    for e in chosen:
        who = {"recv": "client -> server", "send": "server -> client"}.get(e.direction,
                                                                           e.direction)
        line = f"    t={e.t:.3f}s conn {e.conn} {who}"
        if e.data:
            hx = e.data[:HEX_BYTES].hex(" ")
            more = f" ... ({len(e.data)} bytes)" if len(e.data) > HEX_BYTES else ""
            line += f"\n      hex: {hx}{more}"
        if e.decoded is not None:
            line += f"\n      decoded: {_short(e.decoded)}"
        if e.note:
            line += f"\n      note: {_one_line(e.note)}"
        out.append(line)
    return out


def _capabilities(runs: Sequence[TargetRun]) -> list[str]:
    """The capability table, one list item per client (a list, not a table: the page keeps
    one table, the scenario matrix)."""
    shown = [run for run in runs if capability_rows(run)]
    if not shown:
        return []
    lines = [f"Capabilities ({text(CAPABILITY_LEGEND)}):", ""]
    for run in shown:
        cells = ", ".join(f"{name} {capability_state(run, name) or '-'}"
                          for name in capability_names(shown))
        lines.append(f"- {text(label(run))}: {text(cells)}")
    lines.append("")
    note = support_note(shown)
    if note:
        lines += [f"**{text(note)}**", ""]
    return lines


def _evidence_rows(run: TargetRun) -> list[str]:
    rows = capability_rows(run)
    if not rows:
        return []
    return ["Capabilities:", "",
            *(f"- {text(r['capability'])}: **{text(r['state'])}** ({text(r.get('evidence', ''))})"
              for r in rows), ""]


def render(runs: Sequence[TargetRun], *, title: str = "Client conformance") -> str:
    lines = [f"# {title}", ""]
    if runs:
        lines += [f"Profile {runs[0].profile}; generated by `queuewire conform client` "
                  f"(`make client-reports`) on {runs[0].started_at}. Verdicts: FAIL breaks a MUST "
                  "of the documents, NON-STRICT a SHOULD (or a reading), INFO observed only "
                  "or a defect an earlier scenario already reports (each defect is reported "
                  "once, by the first scenario that meets it), ERROR the run broke. The HTML "
                  "and JSON reports beside this page hold every transcript.", ""]
    ids: list[str] = []
    for run in runs:
        ids += [r.case.id for r in run.results if r.case.id not in ids]
    lines.append("| scenario | " + " | ".join(text(label(run)) for run in runs) + " |")
    lines.append("|---|" + "---|" * len(runs))
    for cid in ids:
        lines.append(f"| {_id(cid)} | " + " | ".join(_cell(run, cid) for run in runs) + " |")
    lines.append("")
    lines += _capabilities(runs)
    for run in runs:
        counts = ", ".join(f"{n} {v}" for v, n in run.counts().items() if n)
        lines += [f"## {text(label(run))}", "", f"{len(run.results)} scenarios: {counts}; "
                  f"testee {code((run.server_info or {}).get('testee', ''))}.", ""]
        lines += _evidence_rows(run)
        bad = [r for r in run.results if r.verdict is not Verdict.PASS]
        if not bad:
            lines += ["Every scenario passed.", ""]
        for r in bad:
            lines += [f"### {_id(r.case.id)}: {r.verdict.value}", "", r.case.title + ".", ""]
            if r.error:
                lines += [f"The run broke: {code(clip(r.error, ERROR_CHARS))}", ""]
            for c in r.failed_checks:
                info = requirement_info(run.profile, c.requirement or "")
                lines.append(f"- **{c.requirement} {c.level}** ({info['text']}): "
                             f"{text(c.message)}; expected {code(_short(c.expected, 160))}, "
                             f"saw {code(_short(c.actual, 240))}")
            notes = [e.note for e in r.transcript.events if e.direction == "note"
                     and e.note.startswith(("not exercised", "observed", "the testee does not",
                                            "records bounded"))]
            lines += [f"- {text(n)}" for n in notes]
            evidence = _evidence(r)
            fence = _fence(evidence)
            lines += ["", "Wire evidence:", "", f"{fence}text", *evidence, fence, "",
                      f"Reproduce: {code(r.reproduction)}", ""]
    return "\n".join(lines).rstrip() + "\n"
