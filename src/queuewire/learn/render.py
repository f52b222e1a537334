"""The learned machine, the spec's and their differences as text: a Markdown page (Mermaid
diagrams), a Graphviz file and an HTML section for the conformance report.

A diagram draws a machine's states and the transitions that move it or answer something; the
self-loops that change nothing (a refusal of the job lifecycle, an input not sent) are left
out, or the picture would be all loops. A state of the table's machine is named by its table
state; a learned state by the job state its outputs show (the job lifecycle: ``waiting``,
``prioritized``, ...), else by the table state it is first met with when both machines run
the same inputs; numbered where two states get the same name.
"""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Sequence
from typing import Any

from .machine import NONE, NOT_SENT, Mealy

__all__ = ["graphviz", "html_section", "markdown", "names"]


def _unique(base: dict[Any, str]) -> dict[Any, str]:
    seen: dict[str, int] = {}
    out = {}
    for state, name in base.items():
        seen[name] = seen.get(name, 0) + 1
        out[state] = name if seen[name] == 1 else f"{name}_{seen[name]}"
    return out


def names(machine: Mealy, table: Mealy | None = None) -> dict[Any, str]:
    """A readable name per state of ``machine`` (``table``: the spec's, to name learned
    states by the table state they pair with)."""
    base: dict[Any, str] = {}
    if isinstance(machine.initial, tuple):          # the table's own: (table state, saved)
        for s in machine.states:
            base[s] = str(s[0])
        return _unique(base)
    job_like = all(o.count("/") >= 1 for (o, _) in machine.table.values())
    if job_like:
        base[machine.initial] = NONE
        for state in machine.states:
            if state not in base:
                base[state] = next((o.split("/")[1] for (s, _), (o, n) in machine.table.items()
                                    if n == state), "?")
        return _unique(base)
    pair = {} if table is None else _pairs(machine, table)
    for i, state in enumerate(machine.states):
        base[state] = pair.get(state, f"q{i}")
    return _unique(base)


def _pairs(learned: Mealy, table: Mealy) -> dict[Any, str]:
    """Each learned state's table state, where a breadth-first run of both meets it first."""
    start = (learned.initial, table.initial)
    seen, todo, out = {start}, deque([start]), {learned.initial: str(table.initial[0])}
    while todo:
        a, b = todo.popleft()
        for letter in learned.inputs:
            na, nb = learned.table[(a, letter)][1], table.table[(b, letter)][1]
            out.setdefault(na, str(nb[0]))
            if (na, nb) not in seen:
                seen.add((na, nb))
                todo.append((na, nb))
    return out


def _edges(machine: Mealy, table: Mealy | None) -> list[tuple[str, str, str]]:
    shown = names(machine, table)
    out = []
    for state in machine.states:
        for letter in machine.inputs:
            output, nxt = machine.table[(state, letter)]
            if output.startswith(NOT_SENT) or (nxt == state and ("/" in output or output == "quiet")):
                continue
            label = output.partition("/")[0] if "/" in output else output
            out.append((shown[state], shown[nxt], f"{letter} / {label}"))
    return out


def _mermaid(machine: Mealy, table: Mealy | None = None) -> list[str]:
    shown = names(machine, table)
    lines = ["```{mermaid}", "stateDiagram-v2", f"    [*] --> {shown[machine.initial]}"]
    lines += [f"    {a} --> {b}: {label}" for a, b, label in _edges(machine, table)]
    lines.append("```")
    return lines


def graphviz(title: str, table: Mealy, learned: Mealy) -> str:
    """Both machines in one Graphviz digraph, a cluster each."""
    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"digraph {q(title)} {{", "  rankdir=LR;", "  node [shape=ellipse];"]
    for key, label, machine, ref in (("table", "the table", table, None),
                                     ("learned", "learned", learned, table)):
        shown = names(machine, ref)
        lines.append(f"  subgraph cluster_{key} {{")
        lines.append(f"    label={q(label)};")
        lines.append(f"    {key}__start [shape=point];")
        lines.append(f"    {key}__start -> {q(key + ':' + shown[machine.initial])};")
        for state in machine.states:
            lines.append(f"    {q(key + ':' + shown[state])} [label={q(shown[state])}];")
        for a, b, text in _edges(machine, ref):
            lines.append(f"    {q(key + ':' + a)} -> {q(key + ':' + b)} [label={q(text)}];")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _table_rows(machine: Mealy, ref: Mealy | None) -> list[tuple[str, str, str, str]]:
    shown = names(machine, ref)
    return [(shown[s], letter, machine.table[(s, letter)][0], shown[machine.table[(s, letter)][1]])
            for s in machine.states for letter in machine.inputs]


def html_section(title: str, intro: str, table: Mealy, learned: Mealy,
                 differences: Sequence[Any], verdicts: Sequence[tuple[str, str, str]]) -> str:
    """An HTML section for the conformance report: the differences (each with its case and
    verdict) and both machines as transition tables."""
    e = html.escape
    parts = [f"<h2>{e(title)}</h2>", f"<p>{e(intro)}</p>",
             f"<p>The table implies {len(table.states)} states; the server showed "
             f"{len(learned.states)}.</p>"]
    if differences:
        parts.append("<table><tr><th>inputs</th><th>the table says</th><th>the server "
                     "answered</th><th>case</th><th>rule</th><th>verdict</th></tr>")
        for d, (case, rule, verdict) in zip(differences, verdicts):
            parts.append(f"<tr><td><code>{e(' '.join(d.word))}</code></td><td>{e(d.spec[-1])}</td>"
                         f"<td>{e(d.server[-1])}</td><td><code>{e(case)}</code></td>"
                         f"<td>{e(rule)}</td><td>{e(verdict)}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>The machines are equivalent over these inputs.</p>")
    for label, machine, ref in (("The table's machine", table, None),
                                ("The learned machine", learned, table)):
        parts.append(f"<details><summary>{e(label)} ({len(machine.states)} states)</summary>"
                     "<table><tr><th>from</th><th>input</th><th>output</th><th>to</th></tr>")
        parts += [f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(c)}</td><td>{e(d)}</td></tr>"
                  for a, b, c, d in _table_rows(machine, ref)]
        parts.append("</table></details>")
    return "\n".join(parts) + "\n"


def markdown(title: str, intro: str, table: Mealy, learned: Mealy,
             differences: Sequence[Any], verdicts: Sequence[tuple[str, str, str]]) -> str:
    """The page: ``differences`` are :class:`~.subject.Difference`; ``verdicts`` is (case id,
    requirement and level, verdict) per difference."""
    lines = [f"# {title}", "", intro, "",
             f"The table implies {len(table.states)} states; the server showed "
             f"{len(learned.states)}.", ""]
    if differences:
        lines += ["## Differences", "",
                  "Each is the shortest input sequence after which the server answers otherwise "
                  "than the table, run as a conformance case (replayable with `queuewire "
                  "conform replay`).", "",
                  "| inputs | the table says | the server answered | case | rule | verdict |",
                  "|---|---|---|---|---|---|"]
        for d, (case, rule, verdict) in zip(differences, verdicts):
            lines.append(f"| {' '.join(d.word)} | {d.spec[-1]} | {d.server[-1]} | `{case}` | "
                         f"{rule} | {verdict} |")
    else:
        lines += ["The machines are equivalent over these inputs."]
    lines += ["", "## The table's machine", ""] + _mermaid(table)
    lines += ["", "## The learned machine", ""] + _mermaid(learned, table)
    return "\n".join(lines) + "\n"
