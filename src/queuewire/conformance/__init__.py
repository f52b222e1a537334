"""Black-box conformance of bunqueue and quicx servers over TCP.

The vocabulary (cases, checks, verdicts, transcripts, results) is :mod:`.model`; the case
language is ``cases/README.md``. :mod:`.loader` reads and checks the packaged YAML cases,
:mod:`.runner` runs them against a target (``HOST:PORT`` or an embedded reference server from
:mod:`.targets`) with the step interpreters :mod:`.steps_bunqueue` and :mod:`.steps_quicx`
over recorded connections (:mod:`.wire`), and Python cases get a :class:`.context.CaseContext`.
Reports read only the result classes. Imports here are lazy so that ``queuewire.conformance``
stays cheap for tools that only need the model.
"""

from __future__ import annotations

from typing import Any

from .model import (
    Case,
    CaseResult,
    Check,
    Coverage,
    TargetRun,
    Transcript,
    Verdict,
    WireEvent,
    jsonable_result,
    run_failed,
    verdict_of,
)

__all__ = ["Case", "CaseResult", "Check", "Coverage", "TargetRun", "Transcript", "Verdict",
           "WireEvent", "jsonable_result", "run_failed", "verdict_of", "load_cases",
           "run_target", "run_target_sync"]


def __getattr__(name: str) -> Any:
    if name in ("load_cases", "run_target", "run_target_sync"):
        from . import runner
        return getattr(runner, name)
    raise AttributeError(name)
