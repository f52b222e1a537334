"""A difference between the learned machine and the spec's, as a conformance case.

:func:`difference_case` writes the shortest input word that tells the two machines apart as a
case of the case language (``conformance/cases/README.md``): each input becomes the step its
``learn`` entry sends, expecting what the spec's machine answers (``ok`` or any error reply),
saving what the entry saves where the table's row applies, then a ``GetState`` step expecting
the state the spec's machine is in. The steps cite the requirement of the table row each input
drives; where no row applies, the ``refusal`` requirement the input names, or else the
event's row requirement at most SHOULD (that the event does nothing there is a reading of the
table), so a FAIL rests on a stated rule. Data only: the command line runs it (``queuewire learn
--report-dir``), which writes the file ``queuewire conform replay`` runs again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .machine import NONE, NOT_SENT, Learn, needs, refusal

__all__ = ["deciding_rule", "difference_case"]


def _rule(learn: Learn, job: str, entry: Any) -> tuple[str, str | None]:
    """The requirement an input's step cites from the job's state, and the level it is capped
    at (None: the requirement's own)."""
    command = entry["send"]["cmd"]
    row = learn.rows.get((job, entry.get("event", "")))
    if entry.get("creates") is not None:   # the state a new job is in
        return learn.observe.get("requirement") or f"BQ-CMD-{command}", None
    if row is not None:
        return row[1], None
    if refusal(entry, job):
        return str(refusal(entry, job)), None
    # the table has no row here: that the event does nothing is a reading of it
    return next((r for (_, ev), (_, r) in learn.rows.items() if ev == entry.get("event")),
                f"BQ-CMD-{command}"), "SHOULD"


def deciding_rule(learn: Learn, word: Sequence[str], spec_outputs: Sequence[str],
                  server_outputs: Sequence[str]) -> tuple[str, str | None]:
    """The requirement (and level cap) of what the last output breaks: the last input's rule
    when the reply or the state differ, else the first lookup that differs."""
    spec_last, server_last = spec_outputs[-1].split("/"), server_outputs[-1].split("/")
    if spec_last[0] == server_last[0] and spec_last[1] != server_last[1] and \
            learn.gone in (spec_last[1], server_last[1]):   # what a vanished job reads as
        return learn.gone_requirement, None
    if spec_last[:2] == server_last[:2]:
        for name, a, b in zip(sorted(learn.lookups), spec_last[2:], server_last[2:]):
            if a != b:
                return learn.lookups[name].get("requirement", ""), None
    job = spec_outputs[-2].split("/")[1] if len(spec_outputs) > 1 else NONE
    return _rule(learn, job, learn.inputs[word[-1]])


def difference_case(learn: Learn, word: Sequence[str], spec_outputs: Sequence[str],
                    server_outputs: Sequence[str]) -> dict[str, Any]:
    """A case entry (a map of the case language) that replays ``word``."""
    steps: list[dict[str, Any]] = []
    requirements: list[str] = []
    job, saved = NONE, set[str]()
    for letter, expected in zip(word, spec_outputs):
        entry = learn.inputs[letter]
        reply_class, state, *found = expected.split("/")
        row = learn.rows.get((job, entry.get("event", "")))
        rid, level = _rule(learn, job, entry)
        if rid not in requirements:
            requirements.append(rid)
        if reply_class != NOT_SENT and needs(entry) <= saved:
            step: dict[str, Any] = {"send": dict(entry["send"]), "doc": f"input {letter}",
                                    "expect": {"ok": {}} if reply_class == "ok" else {"error": True}}
            step["expect"]["requirement"] = rid
            if level:
                step["expect"]["level"] = level
            applies = reply_class == "ok" and (row is not None or entry.get("creates") is not None)
            if applies and entry.get("saves"):
                step["save"] = dict(entry["saves"])
                saved |= set(entry["saves"])
            steps.append(step)
        if "job" in saved:
            if state == learn.gone:       # the job no longer exists: GetState is refused
                seen: dict[str, Any] = {"error": True, "requirement": learn.gone_requirement}
                if learn.gone_requirement not in requirements:
                    requirements.append(learn.gone_requirement)
            else:
                seen = {"ok": {learn.observe["field"]: state}, "requirement": rid,
                        **({"level": level} if level else {})}
            steps.append({"send": dict(learn.observe["send"]),
                          "doc": f"the job's state after {letter}", "expect": seen})
            for name, answer in zip(sorted(learn.lookups), found):
                lookup = learn.lookups[name]
                if answer == "found":
                    steps.append({"send": dict(lookup["send"]),
                                  "doc": f"{name} finds the job after {letter}",
                                  "expect": {"ok": {"job": {"id": "${job}"}},
                                             "requirement": lookup.get("requirement", rid)}})
                    if lookup.get("requirement") and lookup["requirement"] not in requirements:
                        requirements.append(lookup["requirement"])
        job = state
    name = "-".join(word)
    return {
        "id": f"learn.{learn.machine}.{name}",
        "title": (f"The shortest sequence where the server leaves the {learn.machine} table: "
                  f"{', '.join(word)} (the table says {spec_outputs[-1]}, the server answered "
                  f"{server_outputs[-1]})"),
        "requirements": requirements or ["BQ-JOB-1"],
        "steps": steps,
        "cleanup": [{"send": {"cmd": "Obliterate", "queue": "${queue}"}}],
    }
