"""Black-box conformance of bunqueue and quicx servers over TCP.

Design: the conformance layer sits above the codecs, the vector generator and the reference
servers (which it starts only as embedded targets) and below the CLI; its modules import one
another without cycles (checked by the import contracts in ``pyproject.toml``). The
vocabulary (cases, checks, verdicts, transcripts, results) is :mod:`.model`; the case language
is ``cases/README.md``. :mod:`.loader` reads and checks the packaged YAML cases and the
generated ones (:mod:`.generate_bunqueue`, :mod:`.generate_quicx`, built from the spec and
the test vectors), :mod:`.runner` runs them against a target (``HOST:PORT`` or an embedded
reference server from :mod:`.targets`) with the step interpreters :mod:`.steps_bunqueue` and
:mod:`.steps_quicx` over recorded connections (:mod:`.wire`; HTTP in :mod:`.httpapi`), and
Python cases (:mod:`.bunqueue_logic`, :mod:`.quicx_logic`) get a
:class:`.context.CaseContext`; subset and error-string matching, which the interpreters and
the HTTP checks share, is :mod:`.matching`, below them all. :mod:`.replay` sends a saved
case's bytes again, :mod:`.rejudge` re-runs a saved case and compares its checks with the
saved ones, :mod:`.residue` leaves a server as the run found it (inventories before and after,
removal of what appeared, health probes after each case), :mod:`.detect` probes a server for
the profile it speaks, :mod:`.pytest_plugin`
runs cases as pytest items, and the reports (:mod:`.report`) read only the result classes.
Imports here are lazy so that ``queuewire.conformance`` stays cheap for tools that only need
the model.
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
