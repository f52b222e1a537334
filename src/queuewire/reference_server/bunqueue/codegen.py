"""Writes the bunqueue reference server's generated modules: ``python -m
queuewire.reference_server.bunqueue.codegen`` (``make generate``) re-emits them, ``--check``
only says which differ from what their generator writes now (tests/test_generated_code.py does
the same check). The convention is :mod:`queuewire.codecs.codegen`'s.

* ``jobs_generated.py``: the constructor of the jobs PUSH and PUSHB create
  (:func:`~.jobs.plain_job_module`, from the fields of :class:`~.jobs.Job`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from ...codecs.codegen import main as write_generated
from .jobs import plain_job_module

__all__ = ["GENERATED"]

HERE = Path(__file__).resolve().parent
#: each generated file and the function that writes its text
GENERATED: dict[Path, Callable[[], str]] = {
    HERE / "jobs_generated.py": plain_job_module,
}


if __name__ == "__main__":
    sys.exit(write_generated(generated=GENERATED))
