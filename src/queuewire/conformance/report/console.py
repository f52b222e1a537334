"""The console report: a live progress bar while cases run, then summary tables (rich).

:class:`LiveProgress` is the ``progress=`` callback of ``run_target``: it receives
``("start", total)``, ``("case", CaseResult)`` per case and ``("done", TargetRun)``, and draws
one bar per run with the count of each verdict so far (it draws nothing when the console is
not a terminal, so logs stay clean). After the runs, :func:`print_summary` prints per run a
table of counts per verdict and the requirement coverage, then every case that did not pass
(FAIL, ERROR, NON-STRICT, UNIMPLEMENTED, stale known-failing) with the requirement that decided
its verdict (:func:`~.common.headline`: for a FAIL a MUST), a one-line reason, one line of that
requirement's sentence in the documents and the one-line reproduction (generated cases of one
rule and verdict are one row, :func:`~.common.grouped`, with the values tried), and the cases
whose transcript the runner cut;
with several runs it adds a matrix of case x run showing only the rows where the runs differ or
something did not pass. Client runs add their capability table (capability x client: used, not
used, not observable; :func:`~.common.capability_rows`) and, for a client without a failing
case that did not use a capability a scenario gave it the chance to use, the sentence saying
that this is not full support (:func:`~.common.support_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..model import NEEDS_TOKEN, VERDICT_ORDER, CaseResult, TargetRun, Verdict, transcript_cut
from .common import (
    CAPABILITY_LEGEND,
    NOT_OBSERVABLE,
    NOT_USED,
    USED,
    CaseGroup,
    capability_names,
    capability_rows,
    capability_state,
    grouped,
    headline,
    label,
    not_passing,
    one_line,
    quote_line,
    quoted_requirements,
    reproduction,
    requirement_info,
    support_note,
)
from .junit import reason

STYLE = {Verdict.PASS: "green", Verdict.FAIL: "bold red", Verdict.ERROR: "magenta",
         Verdict.NON_STRICT: "yellow", Verdict.UNIMPLEMENTED: "cyan", Verdict.INFO: "blue"}
CAPABILITY_STYLE = {USED: "green", NOT_USED: "yellow", NOT_OBSERVABLE: "dim"}
SHORT = {Verdict.PASS: "pass", Verdict.FAIL: "FAIL", Verdict.ERROR: "ERROR",
         Verdict.NON_STRICT: "non-strict", Verdict.UNIMPLEMENTED: "unimpl", Verdict.INFO: "info"}


def _counts_text(counts: dict[str, int]) -> str:
    parts = [f"[{STYLE[v]}]{counts[v.value]} {SHORT[v]}[/]" for v in VERDICT_ORDER if counts.get(v.value)]
    return " ".join(parts) or "-"


class LiveProgress:
    """A ``progress`` callback for ``run_target`` drawing a rich progress bar.

    Use it as a context manager around one or several runs::

        with LiveProgress(console, "embedded (bunqueue/v2)") as progress:
            run = await run_target(..., progress=progress)

    ``progress.new(description)`` starts a new bar for the next run on the same display.
    """

    def __init__(self, console: Console | None = None, description: str = "conformance"):
        self.console = console or Console(stderr=True)
        self.description = description
        self.enabled = self.console.is_terminal
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TextColumn("{task.fields[counts]}"),
                                  TimeElapsedColumn(), console=self.console, transient=False,
                                  disable=not self.enabled)
        self._task: Any = None
        self.counts: dict[str, int] = {}
        self.events: list[tuple[str, Any]] = []  # what was reported, for callers and tests

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def new(self, description: str) -> None:
        self.description = description
        self._task = None

    def __call__(self, event: str, payload: Any) -> None:
        self.events.append((event, payload))
        if event == "start":
            self.counts = {v.value: 0 for v in VERDICT_ORDER}
            self._task = self._progress.add_task(self.description, total=int(payload),
                                                 counts="")
        elif event == "case":
            result: CaseResult = payload
            self.counts[result.verdict.value] = self.counts.get(result.verdict.value, 0) + 1
            if self._task is None:
                self._task = self._progress.add_task(self.description, total=None, counts="")
            self._progress.update(self._task, advance=1, counts=_counts_text(self.counts))
        elif event == "done" and self._task is not None:
            run: TargetRun = payload
            self._progress.update(self._task, total=len(run.results), completed=len(run.results),
                                  counts=_counts_text(run.counts()))


def _summary_table(run: TargetRun) -> Table:
    cov = run.coverage
    table = Table(title=escape(f"{run.protocol} conformance: {label(run)}"), title_justify="left")
    for v in VERDICT_ORDER:
        table.add_column(v.value, justify="right", style=STYLE[v])
    table.add_column("total", justify="right")
    table.add_column("requirement coverage", justify="right")
    table.add_column("time", justify="right")
    counts = run.counts()
    table.add_row(*[str(counts[v.value]) for v in VERDICT_ORDER], str(len(run.results)),
                  f"{len(cov.exercised)}/{len(cov.applicable)} ({cov.ratio:.0%})",
                  f"{run.duration:.1f} s")
    return table


def _status(run: TargetRun, r: CaseResult) -> Text:
    if r.known_failing and r.verdict is Verdict.PASS:
        return Text("STALE", style="bold red")
    text = Text(r.verdict.value, style=STYLE[r.verdict])
    if r.known_failing:
        text.append(" (known)", style="dim")
    return text


def print_run(console: Console, run: TargetRun) -> None:
    console.print(_summary_table(run))
    if run.residue is not None:   # what the run left on the server, and the probes it broke
        for line in run.residue.lines():
            console.print(escape(line), highlight=False)
    cov = run.coverage
    observed = set(cov.observed)
    for what, ids in (("not exercised", tuple(r for r in cov.not_exercised if r not in observed)),
                      ("observed only (INFO cases, not judged)", cov.observed)):
        if ids:
            shown = ", ".join(ids[:20])
            more = f" ... and {len(ids) - 20} more" if len(ids) > 20 else ""
            console.print(f"[dim]{what} ({len(ids)}): {escape(shown)}{more}[/dim]",
                          highlight=False)
    needs_token = [r.case.id for r in run.results
                   if any(e.direction == "note" and e.note.startswith(NEEDS_TOKEN)
                          for e in r.transcript.events)]
    if needs_token:
        console.print(f"[dim]{NEEDS_TOKEN} ({len(needs_token)}): "
                      f"{escape(', '.join(needs_token))}; to cover them, run against a server "
                      f"started with auth tokens and pass --auth-token TOKEN[/dim]",
                      highlight=False)
    cut = [r.case.id for r in run.results if transcript_cut(r.transcript)]
    if cut:
        console.print(f"[yellow]transcript cut ({len(cut)}): {escape(', '.join(cut[:20]))}"
                      f"{' ...' if len(cut) > 20 else ''} (the server sent more than a case "
                      "records or reads; the reports say how much)[/yellow]", highlight=False)
    bad = not_passing(run)
    if not bad:
        return
    table = Table(title=f"cases to look at ({len(bad)})", title_justify="left", show_lines=False)
    table.add_column("verdict", no_wrap=True)
    table.add_column("case", no_wrap=True)
    table.add_column("requirement", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for item in grouped(bad):
        if isinstance(item, CaseGroup):
            table.add_row(*_group_row(run, item))
            continue
        r = item
        why: Text | Group
        if r.known_failing and r.verdict is Verdict.PASS:
            why = Text("listed as known-failing but passed: remove it from the list")
        else:
            quoted = quoted_requirements(run.profile, r)
            why = Text(reason(r))
            if quoted:
                why = Group(why, _quote_text(quote_line(quoted[0])))
        rid, level = headline(r)
        req = f"{rid} {level}" if rid and level else (rid or ", ".join(r.case.requirements[:2]))
        table.add_row(_status(run, r), Text(r.case.id), Text(req), why)
    console.print(table)


def _quote_text(line: str) -> Text:
    """The documents' sentence on one line of the table: cut to the column with an ellipsis."""
    return Text(line, style="dim", no_wrap=True, overflow="ellipsis")


def _group_row(run: TargetRun, group: CaseGroup) -> list[Text | Group]:
    """One row for generated cases of one rule: how many, which, the values tried, the
    sentence."""
    status = _status(run, group.members[0])
    names = ", ".join(group.names)
    why = Text(f"{len(group.members)} generated cases: {one_line(names, 160)}")
    if group.values:
        why.append(f"; values tried that failed: {one_line(', '.join(group.values), 200)}")
    req = f"{group.requirement} {group.level}" if group.level else (group.requirement or "-")
    if group.requirement:
        quote = _quote_text(quote_line(requirement_info(run.profile, group.requirement)))
        return [status, Text(group.prefix), Text(req), Group(why, quote)]
    return [status, Text(group.prefix), Text(req), why]


def print_reproductions(console: Console, runs: Sequence[TargetRun]) -> None:
    """One reproduction line per case that fails the run (what CI logs need)."""
    for run in runs:
        for r in run.failing():
            what = "STALE known-failing entry" if r.known_failing else r.verdict.value
            console.print(f"[red]✗[/red] {escape(r.case.id)} \\[{what}] reproduce: "
                          f"{escape(reproduction(run, r))}", highlight=False, soft_wrap=True)


def matrix(runs: Sequence[TargetRun], *, only_interesting: bool = True) -> Table:
    """Case x run verdicts side by side; rows where every run that ran the case passed (or
    only observed) are left out unless ``only_interesting`` is false."""
    table = Table(title="matrix", title_justify="left")
    table.add_column("case", no_wrap=True)
    for run in runs:
        table.add_column(escape(label(run)), no_wrap=True)
    by_run = [{r.case.id: r for r in run.results} for run in runs]
    ids: list[str] = []
    for run in runs:
        for r in run.results:
            if r.case.id not in ids:
                ids.append(r.case.id)
    for cid in ids:
        cells = [m.get(cid) for m in by_run]
        verdicts = {c.verdict for c in cells if c is not None}
        stale = any(c is not None and c.known_failing and c.verdict is Verdict.PASS for c in cells)
        # a case that does not apply to a run ("-") is no difference worth a row
        if only_interesting and verdicts <= {Verdict.PASS, Verdict.INFO} and not stale:
            continue
        row: list[Any] = [Text(cid)]
        for run, c in zip(runs, cells):
            row.append(Text("-", style="dim") if c is None else _status(run, c))
        table.add_row(*row)
    return table


def capability_table(runs: Sequence[TargetRun]) -> Table | None:
    """Capability x client run (the client runs' capability tables), or None without one."""
    shown = [run for run in runs if capability_rows(run)]
    if not shown:
        return None
    table = Table(title="capabilities", title_justify="left", caption=CAPABILITY_LEGEND,
                  caption_justify="left")
    table.add_column("capability", no_wrap=True)
    for run in shown:
        table.add_column(escape(label(run)), no_wrap=True)
    for name in capability_names(shown):
        cells = [capability_state(run, name) for run in shown]
        table.add_row(Text(name), *[Text(c or "-", style=CAPABILITY_STYLE.get(c or "", "dim"))
                                    for c in cells])
    return table


def print_summary(console: Console, runs: Sequence[TargetRun]) -> None:
    """Everything after the runs: per run summary and cases, the matrix, the capability
    table of client runs, reproductions and the overall result line."""
    for run in runs:
        print_run(console, run)
    if len(runs) > 1:
        table = matrix(runs)
        if table.row_count:
            table.title = f"matrix: {table.row_count} case(s) not passing on every target"
            console.print(table)
        else:
            console.print("matrix: every case passed on every target")
    capabilities = capability_table(runs)
    if capabilities is not None:
        console.print(capabilities)
    print_reproductions(console, runs)
    failing = sum(len(run.failing()) for run in runs)
    if failing:
        console.print(f"[bold red]conformance: {failing} case(s) fail the run[/bold red]")
    else:
        console.print("[bold green]conformance: no failing case[/bold green]")
    note = support_note(runs)
    if note:
        console.print(f"[yellow]{escape(note)}[/yellow]", highlight=False)
