"""The learned machine, the spec's and their differences as a Markdown page (Mermaid diagrams).

A diagram draws a machine's states and the transitions that move the job or answer ``ok``;
the self-loops that change nothing (a refusal, an input not sent) are left out, or the
picture would be all loops. The states of the learned machine are named by the job state its
outputs show (``waiting``, ``prioritized``, ...), numbered where two learned states show the
same one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .machine import NONE, Mealy

__all__ = ["markdown"]


def _names(machine: Mealy) -> dict[Any, str]:
    seen: dict[str, int] = {}
    out: dict[Any, str] = {machine.initial: NONE}
    for state in machine.states:
        if state in out:
            continue
        shown = next((o.split("/")[1] for (s, _), (o, n) in machine.table.items()
                      if n == state), "?")
        seen[shown] = seen.get(shown, 0) + 1
        out[state] = shown if seen[shown] == 1 else f"{shown}_{seen[shown]}"
    return out


def _mermaid(machine: Mealy) -> list[str]:
    names = _names(machine)
    lines = ["```{mermaid}", "stateDiagram-v2", f"    [*] --> {names[machine.initial]}"]
    for state in machine.states:
        for letter in machine.inputs:
            output, nxt = machine.table[(state, letter)]
            if nxt == state or output.startswith("-"):
                continue
            lines.append(f"    {names[state]} --> {names[nxt]}: {letter} / {output.partition('/')[0]}")
    lines.append("```")
    return lines


def markdown(title: str, intro: str, table: Mealy, learned: Mealy,
             differences: Sequence[tuple[list[str], list[str], list[str]]],
             verdicts: Sequence[tuple[str, str, str]]) -> str:
    """The page: ``verdicts`` is (case id, requirement and level, verdict) per difference."""
    lines = [f"# {title}", "", intro, "",
             f"The table implies {len(table.states)} states; the server showed "
             f"{len(learned.states)}.", ""]
    if differences:
        lines += ["## Differences", "",
                  "Each is the shortest input sequence after which the server answers otherwise "
                  "than the table (an output is the reply class, then the job's state), run "
                  "as a conformance case (replayable with `queuewire conform replay`).", "",
                  "| inputs | the table says | the server answered | case | rule | verdict |",
                  "|---|---|---|---|---|---|"]
        for (word, spec_out, server_out), (case, rule, verdict) in zip(differences, verdicts):
            lines.append(f"| {' '.join(word)} | {spec_out[-1]} | {server_out[-1]} | `{case}` | "
                         f"{rule} | {verdict} |")
    else:
        lines += ["The machines are equivalent over these inputs."]
    lines += ["", "## The table's machine", ""] + _mermaid(table)
    lines += ["", "## The learned machine", ""] + _mermaid(learned)
    return "\n".join(lines) + "\n"
