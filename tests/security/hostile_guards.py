"""Guards for the hostile-file tests of issue 22 item 10: a wall-clock guard (SIGALRM, so a
hang or a quadratic path fails the test instead of stalling the run) and a CLI run that
measures its time and the peak memory the Python allocator handed out (tracemalloc: a read
of a length a file merely declares shows up here even when the pages are never touched)."""

from __future__ import annotations

import signal
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass

from click.testing import CliRunner, Result

from queuewire.cli import main

GUARD_S = 30              # a hang fails the test instead of stalling the run
FAST_S = 5.0              # what one small hostile file may take, on a loaded 2-core machine
MEMORY_BYTES = 64 << 20   # what one small hostile file may make a reader allocate


@contextmanager
def time_guard(seconds: float = GUARD_S):
    def expire(_sig, _frame):
        raise TimeoutError(f"still running after the {seconds} s guard")
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Run:
    result: Result
    seconds: float
    peak: int           # bytes, tracemalloc's peak during the run

    @property
    def shown(self) -> str:
        return f"{self.result.output}\n{self.result.exception!r}"


def run_cli(args: list[str], guard: float = GUARD_S) -> Run:
    """``queuewire ARGS`` in process (click's runner), under the time guard."""
    runner = CliRunner()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with time_guard(guard):
            result = runner.invoke(main, args)
    finally:
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Run(result, seconds, peak)


def assert_refused(run: Run, *expected: str, seconds: float = FAST_S) -> str:
    """Exit 2 with a one-line error naming each of ``expected``, no traceback, quickly and
    in bounded memory."""
    out = run.result.output
    assert run.result.exit_code == 2, f"exit {run.result.exit_code}, not a clear error: {run.shown}"
    assert "Traceback" not in out, run.shown
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, run.shown
    for word in expected:
        assert word in errors[0], f"{word!r} not named in: {run.shown}"
    assert run.seconds < seconds, f"{run.seconds:.1f} s for a small file"
    assert run.peak < MEMORY_BYTES, f"{run.peak >> 20} MiB allocated for a small file"
    return errors[0]
