"""What the tests and the survey of ``tests/quicx_audit`` share: the audit daemon and client
modules, loaded by path (the folder is no package, and their names must not clash with an
installed module), and the summary of a run's cases of given verdicts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent


def load(name: str) -> ModuleType:
    """``tests/quicx_audit/<name>.py`` as module ``quicx_audit_<name>``, loaded once."""
    key = f"quicx_audit_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def cases_with(run: Any, *verdicts: Any) -> dict[str, str]:
    """case id -> "VERDICT REQ-ID: why" for the cases of ``run`` with one of ``verdicts``
    (the requirement and message of the check each verdict rests on)."""
    from queuewire.conformance.model import deciding_check

    out = {}
    for r in run.results:
        if r.verdict in verdicts:
            check = deciding_check(r.checks)
            out[r.case.id] = f"{r.verdict} {check.requirement if check else ''}: " \
                             f"{(r.error or (check.message if check else ''))[:160]}"
    return out
