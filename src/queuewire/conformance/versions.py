"""The version matrix: how each published release of a server fares, case by case, and why
its behaviour changed from the release before.

What it is
----------
Given, for every release of a server in release order, what ``conform detect`` found and the
``conform server`` reports of its runs (under the profile that describes the release, and
under the base profile for comparison), :func:`build_matrix` lays out

* a grid per profile run: case x release, each cell the case's verdict (blank where the case
  did not run under that release's profile);
* the detected profile of each release, beside the profile ``spec/profiles.yaml`` says
  describes it (``releases:``), and whether they agree;
* for each case, the releases where its verdict changed (a deviation that appeared, one that
  was fixed);
* for each pair of adjacent releases, every verdict that changed in the matching-profile runs,
  explained by the difference of the two releases' profiles (``queuewire spec diff``): a
  change is *explained* when the diff touches a requirement the case cites, or the case runs
  under one of the two profiles only; otherwise it is listed as not explained by a profile
  difference (the implementation changed: a fix or a regression).

Design
------
Sans-IO and pure: it takes the JSON documents the CLI writes (``conform detect --json``,
``conform server --json``) and returns a :class:`Matrix`, which :func:`render_markdown` and
:func:`render_html` turn into the published page. Installing and starting releases is the
driver's job (``tests/interop/version_matrix.py``, ``make version-matrix``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..judge import Verdict
from ..spec import load_profile
from ..spec.diff import Change, diff_profiles

__all__ = ["CaseChange", "Matrix", "Release", "build_matrix", "render_html", "render_markdown",
           "touched_requirements"]

_REQUIREMENT = re.compile(r"^[A-Z]{2}-[A-Za-z0-9]+-[A-Za-z0-9]+$")


@dataclass(frozen=True)
class Release:
    """One release: its version, the profile the spec says describes it (None: none does),
    ``conform detect``'s JSON, and its ``conform server`` runs by profile (a report's run)."""

    version: str
    profile: str | None
    detect: Mapping[str, Any]
    runs: Mapping[str, Mapping[str, Any]]
    seconds: float | None = None   # how long its conformance runs took, when measured

    def verdicts(self, profile: str) -> dict[str, str]:
        run = self.runs.get(profile) or {}
        return {c["id"]: c["verdict"] for c in run.get("cases") or ()}

    def requirements(self, profile: str) -> dict[str, tuple[str, ...]]:
        run = self.runs.get(profile) or {}
        return {c["id"]: tuple(c.get("requirements") or ()) for c in run.get("cases") or ()}


@dataclass(frozen=True)
class CaseChange:
    """A case whose verdict differs between two adjacent releases (matching-profile runs)."""

    case: str
    old: str | None      # None: the case did not run under the older release's profile
    new: str | None
    explained_by: tuple[str, ...]   # the diff's changes that touch it (subjects); () = none

    @property
    def explained(self) -> bool:
        return bool(self.explained_by)


@dataclass
class Matrix:
    releases: list[Release]
    base: str                                  # the profile every release also ran under
    grids: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    changes: list[tuple[str, str, list[CaseChange]]] = field(default_factory=list)
    history: dict[str, list[tuple[str, str | None, str | None]]] = field(default_factory=dict)

    @property
    def versions(self) -> list[str]:
        return [r.version for r in self.releases]

    def detected(self, release: Release) -> str | None:
        best: str | None = release.detect.get("best")
        return best

    @property
    def unexplained(self) -> int:
        return sum(1 for _, _, cs in self.changes for c in cs if not c.explained)


def touched_requirements(changes: Iterable[Change]) -> dict[str, list[str]]:
    """Requirement id -> the subjects of the diff's changes that touch it: a requirement
    added, removed or changed, one a changed node cites (``requirement``, ``x-requirement``)
    in its old or new value, and ``BQ-CMD-<X>`` for a change under command ``X``."""
    out: dict[str, list[str]] = {}

    def note(rid: str, change: Change) -> None:
        subjects = out.setdefault(rid, [])
        if change.subject not in subjects:
            subjects.append(change.subject)

    def cited(value: Any) -> Iterable[str]:
        if isinstance(value, str) and _REQUIREMENT.match(value):
            yield value
        elif isinstance(value, Mapping):
            for v in value.values():
                yield from cited(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from cited(v)

    for change in changes:
        parts = change.path.split(".")
        if parts[0] == "requirements" and len(parts) > 1:
            note(parts[1], change)
        if parts[0] == "commands" and len(parts) > 1:
            note(f"BQ-CMD-{parts[1].split('[')[0]}", change)
        for rid in (*cited(change.old), *cited(change.new)):
            note(rid, change)
    return out


def build_matrix(releases: Sequence[Release], base: str) -> Matrix:
    """The matrix of ``releases`` (in release order); ``base`` is the profile every release
    ran under besides its own (bunqueue/v2: the documents)."""
    m = Matrix(list(releases), base)
    profiles = {"matching": None, base: base}
    for label, fixed in profiles.items():
        grid: dict[str, dict[str, str]] = {}
        for r in releases:
            prof = fixed or r.profile
            if prof is None:
                continue
            for case, verdict in r.verdicts(prof).items():
                grid.setdefault(case, {})[r.version] = verdict
        m.grids[label] = dict(sorted(grid.items()))
    for case, row in m.grids["matching"].items():
        steps: list[tuple[str, str | None, str | None]] = []
        before: str | None = None
        for i, r in enumerate(releases):
            now = row.get(r.version)
            if i and now != before:
                steps.append((r.version, before, now))
            before = now
        if steps:
            m.history[case] = steps
    for older, newer in zip(releases, releases[1:]):
        m.changes.append((older.version, newer.version, _changes(older, newer)))
    return m


def _changes(older: Release, newer: Release) -> list[CaseChange]:
    if older.profile is None or newer.profile is None:
        return []
    a, b = older.verdicts(older.profile), newer.verdicts(newer.profile)
    reqs = {**older.requirements(older.profile), **newer.requirements(newer.profile)}
    touched = (touched_requirements(diff_profiles(load_profile(older.profile),
                                                  load_profile(newer.profile)))
               if older.profile != newer.profile else {})
    out: list[CaseChange] = []
    for case in sorted(set(a) | set(b)):
        old, new = a.get(case), b.get(case)
        if old == new:
            continue
        if old is None or new is None:
            only = newer.profile if old is None else older.profile
            why: tuple[str, ...] = (f"the case runs under {only} only",)
        else:
            why = tuple(dict.fromkeys(s for rid in reqs.get(case, ()) for s in touched.get(rid, ())))
        out.append(CaseChange(case, old, new, why))
    return out


# -- rendering ---------------------------------------------------------------------------------
def _cell(verdict: str | None) -> str:
    return {"PASS": "pass", "FAIL": "**FAIL**", "ERROR": "**ERROR**", "NON-STRICT": "non-strict",
            "INFO": "info", "UNIMPLEMENTED": "unimpl."}.get(verdict or "", "")


def render_markdown(m: Matrix, *, produced_by: str = "", run_time: str = "") -> str:
    """The page: releases and profiles, the changes between releases (explained or not),
    each case's history, and the grids (only the rows that are not the same in every
    release, then a count of the rest)."""
    lines = ["# bunqueue releases, case by case", ""]
    if produced_by:
        lines += [produced_by, ""]
    if run_time:
        lines += [run_time, ""]
    lines += ["## Releases and their profiles", "",
              "| release | profile (spec/profiles.yaml) | detected | agree | "
              f"{m.base} verdicts | own-profile verdicts |", "|---|---|---|---|---|---|"]
    for r in m.releases:
        det = m.detected(r)
        agree = "yes" if det == r.profile else "**no**"
        lines.append(f"| {r.version} | {r.profile or '-'} | {det or '-'} | {agree} | "
                     f"{_counts(r, m.base)} | {_counts(r, r.profile)} |")
    lines += ["", "## What changed from one release to the next", "",
              "Verdicts under each release's own profile. *Explained*: the difference of the "
              "two releases' profiles (`queuewire spec diff`) touches a requirement the case "
              "cites, or the case runs under one of the profiles only. *Not explained by a "
              "profile difference*: the implementation changed (a fix or a regression).", ""]
    for old, new, changes in m.changes:
        explained = [c for c in changes if c.explained]
        other = [c for c in changes if not c.explained]
        lines.append(f"### {old} → {new}")
        lines.append("")
        if not changes:
            lines += ["No verdict changed.", ""]
            continue
        for c in explained:
            lines.append(f"- `{c.case}`: {c.old or '-'} → {c.new or '-'}; explained by "
                         + ", ".join(c.explained_by[:4])
                         + (f" (+{len(c.explained_by) - 4})" if len(c.explained_by) > 4 else ""))
        for c in other:
            lines.append(f"- `{c.case}`: {c.old or '-'} → {c.new or '-'}; **not explained by a "
                         "profile difference**")
        lines.append("")
    lines += ["## Deviations by release", "",
              "For each case whose verdict is not the same in every release: where it changed.",
              "", "| case | changes |", "|---|---|"]
    for case, steps in m.history.items():
        text = "; ".join(f"{v}: {a or '-'} → {b or '-'}" for v, a, b in steps)
        lines.append(f"| `{case}` | {text} |")
    for label, grid in m.grids.items():
        title = "each release's own profile" if label == "matching" else label
        varying = {c: row for c, row in grid.items()
                   if len({row.get(v) for v in m.versions}) > 1}
        lines += ["", f"## Grid: {title}", "",
                  f"{len(grid)} cases; {len(grid) - len(varying)} have the same verdict in "
                  "every release and are left out.", "",
                  "| case | " + " | ".join(m.versions) + " |",
                  "|---|" + "---|" * len(m.versions)]
        for case, row in varying.items():
            lines.append(f"| `{case}` | " + " | ".join(_cell(row.get(v)) for v in m.versions)
                         + " |")
    return "\n".join(lines) + "\n"


def _counts(r: Release, profile: str | None) -> str:
    if profile is None or profile not in r.runs:
        return "-"
    counts = r.runs[profile].get("counts") or {}
    return " ".join(f"{k} {counts[k]}" for k in (v.value for v in Verdict) if counts.get(k))


def render_html(m: Matrix, *, produced_by: str = "") -> str:
    """The grid under each release's own profile as one HTML table (a cell per verdict,
    coloured), with the releases' profiles in the header; self-contained, no script."""
    colour = {"PASS": "#d8f0d8", "FAIL": "#f4c7c3", "ERROR": "#f4c7c3", "NON-STRICT": "#fce8b2",
              "INFO": "#e8eaed", "UNIMPLEMENTED": "#e1d5f0"}
    esc = html.escape
    head = "".join(f"<th>{esc(r.version)}<br><small>{esc(r.profile or '-')}</small></th>"
                   for r in m.releases)
    rows = []
    for case, row in m.grids.get("matching", {}).items():
        cells = "".join(
            f'<td style="background:{colour.get(row.get(v, ""), "#fff")}">{esc(row.get(v, ""))}</td>'
            for v in m.versions)
        rows.append(f"<tr><td><code>{esc(case)}</code></td>{cells}</tr>")
    return ("<!doctype html><html><head><meta charset=utf-8><title>bunqueue releases</title>"
            "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:2px 4px}</style></head><body>"
            f"<h1>bunqueue releases, case by case</h1><p>{esc(produced_by)}</p>"
            f"<table><tr><th>case</th>{head}</tr>{''.join(rows)}</table></body></html>\n")
