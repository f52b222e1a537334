"""The JSON report: every run, every case, coverage and the exit status, as one document.

The document is plain JSON built from the model alone: each case is
:func:`~queuewire.conformance.model.jsonable_result` (checks, transcript with bytes as hex;
decoded views as :func:`~.common.jsonable_view` gives them, with true string sizes),
each run carries its verdict counts (in all and per area), its requirement coverage (exercised, not exercised,
observed-only and out-of-scope ids, and the ratio) and the cases that fail it; a client run
also its capability table (``capabilities``: rows of capability, state, evidence and the
scenarios it rests on; ``support_note``: the sentence a run without a failing case gets when
its client did not use a capability a scenario gave it the chance to use, else null).
``exit_status`` at the top is what ``queuewire conform server`` exits with, so a CI job can
read one field. Nothing is lost or reformatted (``json.loads(dumps(runs)) == build(runs)``)
except the bytes of very large events: an event's hex is cut at ``EVENT_BYTES_CAP`` bytes
(``bytes`` keeps the full length, ``truncated`` says it was cut), and a decoded view or check
value whose JSON is longer than ``VALUE_CHARS_CAP`` becomes ``{"$truncated": n, "head":
...}``, so the framing and limit probes (up to 64 MiB) do not make a report of hundreds of
MB. The per-case replay files keep every recorded byte.

The JSON keeps every case (generated cases are not grouped) and every event of a transcript
(the other reports show the decisive exchanges). Each case says which of its checks decided
its verdict (``decided_by``, an index into ``checks``; null when none failed) and each event
the step it was recorded in (``step``, numbered as the checks' ``step``; ``cleanup`` true for a
cleanup step's). Decoded views are JSON, so what JSON cannot say is tagged, and the document
says so once under ``notation`` (:data:`NOTATION`): ``{"$undefined": true}`` is MessagePack's
``undefined`` (ext type 0, JavaScript's ``undefined``; the other reports write ``undefined``),
``{"$binary": hex}`` a binary value, ``{"$timestamp": iso}`` a timestamp, and a string ending
in ``…[N characters, shortened]`` (``…[N characters, B bytes, shortened]`` when not ASCII) a
string a view shortened, N its true length (the other reports write ``'aaaa…' (N characters,
size)``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from ..model import TargetRun
from .common import (
    areas,
    capability_rows,
    exit_status,
    jsonable_view,
    label,
    reproduction,
    support_note,
)

FORMAT = "queuewire-conformance-report/1"
#: What the tagged forms of decoded views mean (written into the document as ``notation``).
NOTATION = {
    "$undefined": '{"$undefined": true} is MessagePack undefined (ext type 0), JavaScript\'s '
                  "undefined: a field sent as undefined",
    "$binary": '{"$binary": "<hex>"} is a MessagePack binary value',
    "$timestamp": '{"$timestamp": "<ISO 8601>"} is a MessagePack timestamp',
    "shortened": 'a string ending in "…[N characters, shortened]" (or "…[N characters, B bytes, '
                 'shortened]") is a long string cut in the view: N is its true length, B its '
                 "UTF-8 size; the event's hex has the bytes",
    "$truncated": '{"$truncated": n, "head": "..."} is a value whose JSON (n characters) was '
                  "cut in this report",
    "step": "an event's step is the case step it was recorded in, numbered as a check's step",
    "decided_by": "a case's decided_by is the index in checks of the check that decided its "
                  "verdict",
}
EVENT_BYTES_CAP = 64 * 1024  # bytes of one transcript event kept in the report
VALUE_CHARS_CAP = 64 * 1024  # JSON characters of one decoded view / check value kept


def _cap(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = json.dumps(value, default=_default, ensure_ascii=False)
    if len(text) <= VALUE_CHARS_CAP:
        return value
    return {"$truncated": len(text), "head": text[:VALUE_CHARS_CAP]}


def build_run(run: TargetRun) -> dict[str, Any]:
    cov = run.coverage
    results = []
    for r in run.results:
        doc = jsonable_view(r)
        doc["reproduction"] = reproduction(run, r)
        for check in doc["checks"]:
            check["expected"] = _cap(check["expected"])
            check["actual"] = _cap(check["actual"])
        for ev in doc["transcript"]:
            ev["decoded"] = _cap(ev["decoded"])
            size = len(ev["hex"]) // 2
            ev["bytes"] = size
            if size > EVENT_BYTES_CAP:
                ev["hex"] = ev["hex"][:2 * EVENT_BYTES_CAP]
                ev["truncated"] = True
        results.append(doc)
    info = run.server_info
    capabilities = capability_rows(run)
    extra: dict[str, Any] = {}
    if capabilities:
        info = {k: v for k, v in info.items() if k != "capabilities"}  # shown below, once
        extra = {"capabilities": capabilities,
                 "support_note": support_note([run])}
    return {
        "label": label(run), "target": run.target, "protocol": run.protocol,
        "profile": run.profile, "strict": run.strict, "started_at": run.started_at,
        "duration": round(run.duration, 6), "server_info": info,
        "residue": run.residue.jsonable() if run.residue is not None else None, **extra,
        "counts": run.counts(), "total": len(run.results),
        "failing": [r.case.id for r in run.failing()],
        "areas": areas(run.results),  # verdict counts per area (report.common.area_of)
        "coverage": {
            "applicable": len(cov.applicable), "exercised": len(cov.exercised),
            "ratio": round(cov.ratio, 6), "exercised_ids": list(cov.exercised),
            "not_exercised_ids": list(cov.not_exercised), "out_of_scope_ids": list(cov.out_of_scope),
            "observed": len(cov.observed), "observed_ids": list(cov.observed),
        },
        "cases": results,
    }


def build(runs: Sequence[TargetRun]) -> dict[str, Any]:
    """The report document of ``runs``."""
    return {"format": FORMAT, "exit_status": exit_status(runs), "notation": NOTATION,
            "runs": [build_run(run) for run in runs]}


def dumps(runs: Sequence[TargetRun]) -> str:
    # default=str: a decoded value a runner left non-JSON (a timestamp, bytes) still prints.
    return json.dumps(build(runs), indent=2, default=_default, ensure_ascii=False) + "\n"


def write(runs: Sequence[TargetRun], fp: IO[str]) -> None:
    """:func:`dumps` into an open text file, piece by piece (no whole-report string: a run
    whose transcripts hold tens of MB of hex does not need that much again to be saved)."""
    json.dump(build(runs), fp, indent=2, default=_default, ensure_ascii=False)
    fp.write("\n")


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)
