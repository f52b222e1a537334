"""What every report format shares: a run's display label, the one-line reproduction, the
requirement lookup (level and text from the spec, never restated), a safe file name per case
id, the per-case JSON document, and the exit status of a set of runs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..matching import is_undefined, probed_field, show, sized
from ..model import (
    CaseResult,
    TargetRun,
    WireEvent,
    case_definition,
    deciding_check,
    failed_in_order,
    jsonable_result,
    run_failed,
)
from ..reproduce import line
from ..wire import event_view


def label(run: TargetRun) -> str:
    """A run's column name: its target and profile (``embedded (quicx/v1)``)."""
    return f"{run.target} ({run.profile})"


def reproduction(run: TargetRun, result: CaseResult) -> str:
    """The runner's one-line reproduction, or the same line rebuilt from the run's argv."""
    if result.reproduction or not run.rerun:
        return result.reproduction
    return line(run.rerun, run.select_flag, result.case.id)


def requirement_info(profile: str, rid: str) -> dict[str, Any]:
    """Level, subject and text of requirement ``rid`` in ``profile`` (from spec/), or a note
    that the profile does not define it."""
    try:
        from ...spec import load_profile

        req = load_profile(profile).requirements.get(rid)
    except Exception:  # noqa: BLE001 - an unknown profile in a saved report: show what we can
        req = None
    if req is None:
        return {"id": rid, "level": "?", "subject": "", "text": f"(not a requirement of {profile})",
                "cite": "", "quote": "", "basis": ""}
    return {"id": rid, "level": req.level, "subject": req.subject, "text": req.text,
            "cite": req.cite, "quote": req.quote or "", "basis": req.basis or ""}


# -- what decided a verdict, and the documents' sentence --------------------------------------
def headline(result: CaseResult) -> tuple[str | None, str | None]:
    """The requirement (id, level) a report leads a case with: that of the check that decided
    its verdict (:func:`~..model.deciding_check`: for a FAIL a MUST), else (a case that passed,
    or an ERROR) the case's first requirement and no level."""
    c = deciding_check(result.checks)
    if c is not None:
        return c.requirement, str(c.level)
    return (result.case.requirements[0] if result.case.requirements else None), None


def quoted_requirements(profile: str, result: CaseResult) -> list[dict[str, Any]]:
    """The requirements whose sentence a case block shows: the deciding one first, then that of
    every other failed check (each once), as :func:`requirement_info` rows with ``decided``
    True for the first when a check decided the verdict."""
    first = deciding_check(result.checks)
    ids = [c.requirement for c in failed_in_order(result.checks) if c.requirement]
    rows: list[dict[str, Any]] = []
    for rid in dict.fromkeys(ids):
        info = requirement_info(profile, rid)
        info["decided"] = first is not None and rid == first.requirement and not rows
        rows.append(info)
    return rows


QUOTE_WIDTH = 110  # characters of a quote on one console line


def one_line(text: str, width: int = QUOTE_WIDTH) -> str:
    """``text`` on one line, cut at a word boundary before ``width`` characters with ``…``."""
    flat = " ".join(str(text).split())
    if len(flat) <= width:
        return flat
    cut = flat[:width - 1]
    if " " in cut[width // 2:]:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(",;:") + "…"


def quote_line(info: dict[str, Any], width: int = QUOTE_WIDTH) -> str:
    """One line saying where a requirement comes from and the sentence: ``BQ-JOB-1 (001#GetState):
    "state: 'waiting' | …"``; a requirement without a quote says what it rests on."""
    cite = f" ({info['cite']})" if info.get("cite") else ""
    if info.get("quote"):
        return f"{info['id']}{cite}: " + one_line(f"\"{info['quote']}\"", width)
    basis = info.get("basis") or "no basis given"
    return (f"{info['id']}{cite}: no sentence of the documents to quote ({basis}: "
            + one_line(info.get("text", ""), width) + ")")


# -- values as people read them ----------------------------------------------------------------
def pretty(value: Any, *, head: int = 64, long: int = 1024, _level: int = 0) -> str:
    """A decoded view or check value laid out as ``json.dumps(indent=1)`` does, except that
    ``undefined`` (MessagePack's, tagged ``{"$undefined": true}`` in views) is written
    ``undefined`` and a string longer than ``long`` characters, or one a view shortened, is its
    first ``head`` characters and its true size (:func:`~..matching.sized`). A string alone is
    shown as it is."""
    if isinstance(value, str) and _level == 0:
        shown = sized(value, head=head, long=long, json_style=True)
        return value if shown == json.dumps(value, ensure_ascii=False) else shown
    if isinstance(value, str):
        return sized(value, head=head, long=long, json_style=True)
    if is_undefined(value):
        return "undefined"
    pad, inner = " " * _level, " " * (_level + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: "
                 f"{pretty(v, head=head, long=long, _level=_level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        items = [inner + pretty(v, head=head, long=long, _level=_level + 1) for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, default=str, ensure_ascii=False)


# -- one case's evidence: the decisive exchanges ---------------------------------------------
EVIDENCE_BEFORE = 3  # exchanges shown before the decisive one
EVIDENCE_TRIM = 8  # trimmed only when more exchanges than this come before it
EVIDENCE_AFTER = 40  # events shown after the decisive step


@dataclass
class Evidence:
    """The part of a transcript a report shows for a case: ``events`` (from ``start``), the
    indexes of the decisive events in the transcript (``decisive``: the deciding check's step,
    or its request and reply), and what was left out before (``earlier_exchanges`` requests
    sent, ``earlier_events`` events) and after (``later_events``). The JSON report and the
    case files keep every event."""

    events: list[WireEvent]
    start: int = 0
    decisive: frozenset[int] = frozenset()
    earlier_exchanges: int = 0
    earlier_events: int = 0
    later_events: int = 0

    @property
    def trimmed(self) -> bool:
        return bool(self.earlier_events or self.later_events)


def _reqid_in(value: Any, depth: int = 0) -> Any:
    """The reqId of the reply a check's ``actual`` holds (the reply itself, or under
    ``reply``), else None."""
    if isinstance(value, dict) and depth < 3:
        if "reqId" in value and isinstance(value["reqId"], (str, int)):
            return value["reqId"]
        return _reqid_in(value.get("reply"), depth + 1)
    return None


def decisive_events(result: CaseResult) -> frozenset[int]:
    """The indexes of the events that decided the verdict: those recorded during the deciding
    check's step (or, for a case that errored at a step, that step's), else the request and
    reply whose reqId the deciding check's reply carries. Empty when the transcript cannot
    say (the reports then show it from its start)."""
    events = result.transcript.events
    c = deciding_check(result.checks)
    step = c.step if c is not None else None
    if step is None and c is None and result.error:
        m = re.match(r"step (\d+):", result.error)
        step = int(m.group(1)) if m else None
    if step is not None:
        found = frozenset(i for i, ev in enumerate(events) if ev.step == step and not ev.cleanup)
        if found:
            return found
    rid = _reqid_in(c.actual) if c is not None else None
    if rid is None:
        return frozenset()
    return frozenset(i for i, ev in enumerate(events) if ev.direction in ("send", "recv")
                     and isinstance(ev.decoded, dict) and ev.decoded.get("reqId") == rid)


def evidence(result: CaseResult, *, before: int = EVIDENCE_BEFORE, trim: int = EVIDENCE_TRIM,
             after: int = EVIDENCE_AFTER) -> Evidence:
    """The events a report shows for ``result``: every one, unless more than ``trim``
    exchanges (requests sent) come before the decisive events (:func:`decisive_events`);
    then the ``before`` exchanges before them, the decisive ones, and at most ``after``
    events after them, the rest counted."""
    events = result.transcript.events
    decisive = decisive_events(result)
    if not decisive:
        return Evidence(list(events))
    first, last = min(decisive), max(decisive)
    sends = [i for i in range(first) if events[i].direction == "send"]
    start = 0
    if len(sends) > trim:
        start = sends[-before] if before else first
    end = min(len(events), last + 1 + after)
    return Evidence(list(events[start:end]), start, decisive,
                    sum(1 for i in sends if i < start), start, len(events) - end)


def step_label(ev: WireEvent) -> str:
    """How a report names the step of an event (as the checks number it): ``5``, or
    ``7 (cleanup)``; empty outside steps."""
    if ev.step is None:
        return ""
    return f"{ev.step} (cleanup)" if ev.cleanup else str(ev.step)


def silent_step(case: Any, step: int) -> str | None:
    """What step ``step`` of a case written as steps did (a sleep records nothing): a few
    words for the transcript, or None."""
    steps = list(case.steps) + list(case.cleanup)
    if not case.steps or not 0 < step <= len(steps) or not isinstance(steps[step - 1], dict):
        return None
    s = steps[step - 1]
    if "sleep" in s:
        return f"sleep {s['sleep']} ms"
    return next((k for k in ("close", "send", "send_raw", "send_frames", "pipeline", "recv",
                             "http") if k in s), None)


# -- generated cases grouped by rule ---------------------------------------------------------
GROUP_MIN = 3  # generated cases with the same rule and verdict shown as one group from this many


@dataclass
class CaseGroup:
    """Generated cases (one generator, tag ``generated``) with the same shown verdict and
    deciding requirement, reported as one rule: ``prefix`` is their ids' common start
    (``bunqueue.limit.queue_name_length.*``), ``values`` what their deciding checks were
    sent, shortened with true sizes."""

    verdict: str
    requirement: str | None
    level: str | None
    members: list[CaseResult]
    prefix: str
    values: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """Each member's id after the common prefix (``Pause.queue``)."""
        cut = len(self.prefix) - 1  # the prefix ends in "*"
        return [r.case.id[cut:] or r.case.id for r in self.members]


def shown_verdict(r: CaseResult) -> str:
    """A case's verdict as reports show it: STALE for a known-failing case that passed."""
    return "STALE" if r.known_failing and r.verdict.value == "PASS" else r.verdict.value


def _common_prefix(ids: Sequence[str]) -> str:
    parts = [i.split(".") for i in ids]
    common: list[str] = []
    for column in zip(*parts):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return ".".join(common) + ".*" if common else "*"


def probed_values(result: CaseResult) -> list[str]:
    """What the failed checks of a generated limit case were sent in the field it probes
    (from the requests of their steps in the transcript), shortened with true sizes."""
    out: list[str] = []
    for c in failed_in_order(result.checks):
        for ev in result.transcript.events:
            if ev.direction != "send" or c.step is None or ev.step != c.step:
                continue
            probe = probed_field(result.case, event_view(ev, result.case.protocol))
            if probe is not None:
                out.append(f"{probe[0]} = {show(probe[1], head=16)}")
    return list(dict.fromkeys(out))


def grouped(results: Sequence[CaseResult], *, least: int = GROUP_MIN
            ) -> list[CaseResult | CaseGroup]:
    """``results`` in their order with generated cases of the same generator, shown verdict
    and deciding requirement (:func:`headline`) gathered into one :class:`CaseGroup` at the
    place of the first (from ``least`` members; fewer stay single cases)."""
    keys: dict[tuple, list[CaseResult]] = {}
    for r in results:
        if "generated" in r.case.tags and shown_verdict(r) != "PASS":
            keys.setdefault((r.case.source, shown_verdict(r), *headline(r)), []).append(r)
    big = {id(r): key for key, members in keys.items() if len(members) >= least
           for r in members}
    out: list[CaseResult | CaseGroup] = []
    done: set[tuple] = set()
    for r in results:
        key = big.get(id(r))
        if key is None:
            out.append(r)
        elif key not in done:
            done.add(key)
            members = keys[key]
            values = list(dict.fromkeys(v for m in members for v in probed_values(m)))
            out.append(CaseGroup(key[1], key[2], key[3], members,
                                 _common_prefix([m.case.id for m in members]), values))
    return out


def out_of_scope_subjects(run: TargetRun) -> str:
    """Who a run's out-of-scope requirements bind, from their subject in the spec: "client"
    for a server run, "server" for a client run ("client and peer" when both occur)."""
    subjects = {requirement_info(run.profile, rid)["subject"] for rid in run.coverage.out_of_scope}
    known = sorted(s for s in subjects if s)
    return " and ".join(known) if known else "other"


UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def case_filename(case_id: str) -> str:
    """A file name for a case id (ids are dotted names; anything else becomes ``_``)."""
    name = UNSAFE.sub("_", case_id).strip("._") or "case"
    return name + ".json"


def jsonable_view(result: CaseResult) -> dict[str, Any]:
    """:func:`~..model.jsonable_result` with each event's ``decoded`` as reports show it
    (:func:`~..wire.event_view`: a view whose string sizes a later shortening lost is decoded
    again from the bytes, so its markers give the true sizes)."""
    doc = jsonable_result(result)
    for ev, event in zip(doc["transcript"], result.transcript.events):
        ev["decoded"] = event_view(event, result.case.protocol)
    return doc


def case_document(run: TargetRun, result: CaseResult) -> dict[str, Any]:
    """What ``--report-dir`` writes as ``cases/<id>.json`` and ``conform replay`` reads."""
    from ..replay import compact_events

    doc = jsonable_view(result)
    doc["transcript"] = compact_events(doc["transcript"])
    doc.update({"format": "queuewire-conformance-case/2", "protocol": run.protocol,
                "profile": run.profile, "target": run.target,
                "reproduction": reproduction(run, result),
                # the definition the case ran with: `conform replay` re-runs and re-judges it
                "case": case_definition(result.case)})
    return doc


def not_passing(run: TargetRun) -> list[CaseResult]:
    """The cases a reader must look at, worst first: every verdict but PASS and INFO, and a
    known-failing case that passed (a stale entry)."""
    from ..model import VERDICT_ORDER, Verdict

    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    out = [r for r in run.results
           if r.verdict not in (Verdict.PASS, Verdict.INFO)
           or (r.known_failing and r.verdict is Verdict.PASS)]
    return sorted(out, key=lambda r: (rank[r.verdict], r.case.id))


def exit_status(runs: Sequence[TargetRun]) -> int:
    """0 when no case fails the run (:func:`model.run_failed`), 1 otherwise."""
    return 1 if run_failed(runs) else 0


def area_of(case: Any) -> str:
    """The area a case belongs to, from data it already carries: the second part of its id
    (``bunqueue.frame.too-large`` -> ``frame``), else the stem of its case file, else
    ``other``."""
    parts = case.id.split(".")
    if len(parts) >= 3 and parts[1]:
        return parts[1]
    source = (case.source or "").split(" ")[0].rsplit("/", 1)[-1]
    stem = source.rsplit(".", 1)[0] if source.endswith((".yaml", ".yml")) else ""
    return stem or "other"


def areas(results: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    """Verdict counts per area (areas sorted by name; every verdict present, zeros kept)."""
    from ..model import VERDICT_ORDER

    out: dict[str, dict[str, int]] = {}
    for r in results:
        row = out.setdefault(area_of(r.case), {v.value: 0 for v in VERDICT_ORDER})
        row[r.verdict.value] += 1
    return dict(sorted(out.items()))


def requirement_rows(run: TargetRun) -> list[dict[str, Any]]:
    """Every requirement of the run's profile, in the profile's order, with its level, subject,
    source (document, section, basis if the spec gives one), quote and the cases that cite
    it with their verdicts; ``in_scope`` is False for a requirement the run does not judge
    (a client requirement in a server run, a server requirement in a client run)."""
    try:
        from ...spec import load_profile

        reqs = load_profile(run.profile).requirements
    except Exception:  # noqa: BLE001 - a saved run of an unknown profile: nothing to list
        return []
    cited: dict[str, list[CaseResult]] = {}
    for r in run.results:
        for rid in r.case.requirements:
            cited.setdefault(rid, []).append(r)
    out_of_scope = set(run.coverage.out_of_scope)
    rows = []
    for rid, req in reqs.items():
        rows.append({"id": rid, "level": req.level, "subject": req.subject, "text": req.text,
                     "source": req.source, "section": req.section,
                     "basis": req.basis or "",
                     "quote": req.quote or "",
                     # another document's words that say otherwise (shown beside the quote)
                     "disagrees": [dict(d) for d in req.disagrees],
                     "in_scope": rid not in out_of_scope,
                     "cases": [(r.case.id, r.verdict.value) for r in cited.get(rid, [])]})
    return rows


# -- the capability table of a client run ---------------------------------------------------
#: the states of a capability cell (``conformance.client.capabilities`` derives them): the
#: wire shows the client using it; a scenario gave the client the chance and the wire does not
#: show it; no scenario gave the chance
USED, NOT_USED, NOT_OBSERVABLE = "used", "not used", "not observable"
CAPABILITY_STATES = (USED, NOT_USED, NOT_OBSERVABLE)
CAPABILITY_LEGEND = (f"{USED}: the wire shows it; {NOT_USED}: a scenario gave the client the "
                     f"chance and it did not; {NOT_OBSERVABLE}: no scenario gave the chance")


def capability_rows(run: TargetRun) -> list[dict[str, Any]]:
    """The capability table a client run carries (``server_info["capabilities"]``: rows of
    ``capability``, ``state``, ``evidence``, ``scenarios``); empty for a server run."""
    info = run.server_info if isinstance(run.server_info, dict) else {}
    rows = info.get("capabilities")
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, dict) and r.get("state") in CAPABILITY_STATES]


def capability_names(runs: Sequence[TargetRun]) -> list[str]:
    """The capabilities any of ``runs`` has a cell for, in their table order."""
    names: list[str] = []
    for run in runs:
        names += [str(r["capability"]) for r in capability_rows(run)
                  if str(r["capability"]) not in names]
    return names


def capability_state(run: TargetRun, name: str) -> str | None:
    return next((str(r["state"]) for r in capability_rows(run) if r["capability"] == name), None)


def support_note(runs: Sequence[TargetRun]) -> str | None:
    """What a client run without a failing case does not show: the capabilities the client
    did not use though a scenario gave it the chance (None when no such run has one)."""
    parts = []
    for run in runs:
        unused = [str(r["capability"]) for r in capability_rows(run) if r["state"] == NOT_USED]
        if unused and not run.failing():
            parts.append(f"{label(run)} has no failing case, which is not full support: it did "
                         f"not use {', '.join(unused)} though a scenario gave it the chance")
    return "; ".join(parts) + " (see the capability table)" if parts else None


def capability_lines(runs: Sequence[TargetRun]) -> list[str]:
    """The capability table of client runs as plain text lines (none for server runs): one
    line per run naming each capability's state, then :func:`support_note`."""
    shown = [run for run in runs if capability_rows(run)]
    if not shown:
        return []
    lines = [f"capabilities ({CAPABILITY_LEGEND}):"]
    for run in shown:
        cells = ", ".join(f"{r['capability']} {r['state']}" for r in capability_rows(run))
        lines.append(f"  {label(run)}: {cells}")
    note = support_note(shown)
    if note:
        lines.append(note)
    return lines
