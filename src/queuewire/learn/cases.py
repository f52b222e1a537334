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

from .machine import NONE, NOT_SENT, Learn, needs

__all__ = ["difference_case"]


def difference_case(learn: Learn, word: Sequence[str], spec_outputs: Sequence[str],
                    server_outputs: Sequence[str]) -> dict[str, Any]:
    """A case entry (a map of the case language) that replays ``word``."""
    steps: list[dict[str, Any]] = []
    requirements: list[str] = []
    job, saved = NONE, set[str]()
    for letter, expected in zip(word, spec_outputs):
        entry = learn.inputs[letter]
        reply_class, _, state = expected.partition("/")
        row = learn.rows.get((job, entry.get("event", "")))
        command = entry["send"]["cmd"]
        level: str | None = None
        if entry.get("creates") is not None:   # the state a new job is in
            rid = learn.observe.get("requirement") or f"BQ-CMD-{command}"
        elif row is not None:
            rid = row[1]
        elif entry.get("refusal"):
            rid = entry["refusal"]
        else:   # the table has no row here: that the event does nothing is a reading of it
            rid = next((r for (_, ev), (_, r) in learn.rows.items() if ev == entry.get("event")),
                       f"BQ-CMD-{command}")
            level = "SHOULD"
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
            steps.append({"send": {"cmd": learn.observe["send"]["cmd"],
                                   **{k: v for k, v in learn.observe["send"].items() if k != "cmd"}},
                          "doc": f"the job's state after {letter}",
                          "expect": {"ok": {learn.observe["field"]: state}, "requirement": rid,
                                     **({"level": level} if level else {})}})
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
