"""A fuzz campaign: cases ``start, start+1, ...`` of one seed, played by worker processes.

Design. The fuzzer's cost is on its own side (drawing cases, one system call per one-byte
segment, judging), so ``workers=N`` (N > 1) forks N processes, each a plain synchronous loop
over its own :class:`~.runner.Runner` and connection. Worker ``w`` plays the case indices
``start + w, start + w + N, ...``: its own stream of the run's cases, fixed by the seed and
the worker's index, while every case keeps its identity ``(seed, index)``, so a case is
still regenerated alone (``--start I --max-examples 1``) and replayed from its transcript, and
with ``max_examples`` the set of cases played does not depend on N (their order does). The
parent fills the seed's valid-message corpus once before forking (:func:`~.strategies.warm`,
about 0.1 s; the children inherit it), then only aggregates: each worker sends
its counts every :data:`REPORT_EVERY` seconds and each failure as it is found over a pipe,
which the parent reads in a thread so that an in-process server on its event loop keeps
serving. A failure is shrunk in the worker that found it, one shrink at a time across the
workers (a lock), and the run stops once ``max_failures`` were found (a shared counter).
``workers=1`` runs the same loop in a thread of this process (no fork): the tests' small
in-process servers and ``--target embedded`` use it.

Measurement. :class:`Stats` carries the fuzzer's CPU seconds over the run (this process
and its reaped workers, ``resource.getrusage``; with ``--target embedded`` the server's share
is in it too), the connections opened (``connects``), and the warm-up time spent before the
clock started, so that the CLI reports cases/s, cases/s per fuzzer core and connects per case.

Cleanup. Every :data:`CLEANUP_EVERY` cases a worker obliterates the queues its cases named
(:meth:`~.runner.Runner.cleanup`, counted in ``Stats.setup``, not as cases; its CPU is in the
fuzzer's): the server's state, and with it the size of the replies to listing commands and
the fuzzer's cost of judging them, stays near a fresh server's over a long campaign. The
oracles are unchanged: they judge every reply on its own, never against the state.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ..judge import Verdict
from .case import Case
from .oracles import Finding
from .runner import DEFAULT_BOUND, Runner, shrink_and_save_sync
from .strategies import make_case, warm

REPORT_EVERY = 0.2   # seconds between a worker's progress messages
# Cases a worker plays between two cleanups (Runner.cleanup: Obliterate the queues its cases
# named). Without them the server's state grows for the whole campaign and with it the
# replies to listing commands; the fuzzer's cost per case grew with them (2,074 cases/s per
# fuzzer core over 60 s, 1,950 over 10 minutes).
CLEANUP_EVERY = 2000


@dataclass
class Stats:
    cases: int = 0
    failures: int = 0
    nonstrict: int = 0
    connects: int = 0
    setup: int = 0          # commands sent between cases (cleanups), not counted as cases
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    cpu: float = 0.0        # the fuzzer's CPU seconds (user + system), workers included
    warmup: float = 0.0     # seconds spent filling the corpus before the clock started
    workers: int = 1
    commands: set[str] = field(default_factory=set)
    requirements: set[str] = field(default_factory=set)
    failed: list[tuple[Case, Case, str | None, list[Finding]]] = field(default_factory=list)
    diffs: list[tuple[int, list, list]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)  # cases the generator broke on

    @property
    def elapsed(self) -> float:
        return max(1e-9, (self.ended or time.monotonic()) - self.started)

    @property
    def rate(self) -> float:
        return self.cases / self.elapsed

    @property
    def cores(self) -> float:
        """Fuzzer CPU cores in use on average over the run."""
        return self.cpu / self.elapsed

    @property
    def per_core(self) -> float:
        return self.cases / self.cpu if self.cpu > 0 else 0.0


@dataclass
class _Plan:
    protocol: str
    profile: str
    host: str
    port: int
    seed: int
    start: int
    limit: int | None
    stop_at: float | None
    stride: int
    artifacts: str | None
    reuse: bool
    bound: float
    diff: tuple[str, int] | None
    max_failures: int


def _work(plan: _Plan, w: int, emit: Callable[[tuple], None], failures: Any,
          shrink_lock: Any) -> None:
    """Worker ``w``: cases ``start + w + k * stride``; sends ``("tick", counts...)`` every
    REPORT_EVERY seconds, ``("fail", ...)``, ``("diff", ...)``, ``("error", ...)``, and
    ``("done",)`` at the end."""
    runner = Runner(plan.protocol, plan.profile, plan.host, plan.port, bound=plan.bound,
                    reuse=plan.reuse)
    other = Runner(plan.protocol, plan.profile, *plan.diff, bound=plan.bound,
                   reuse=plan.reuse) if plan.diff else None
    cases = nonstrict = setup = 0
    commands: set[str] = set()
    reqs: set[str] = set()
    next_tick = time.monotonic() + REPORT_EVERY
    next_cleanup = CLEANUP_EVERY

    def tick() -> None:
        nonlocal cases, nonstrict, setup
        emit(("tick", cases, nonstrict, runner.connects, sorted(commands), sorted(reqs),
              setup))
        runner.connects = cases = nonstrict = setup = 0
        commands.clear()
        reqs.clear()

    try:
        i = plan.start + w
        while (plan.limit is None or i < plan.limit) and failures.value < plan.max_failures:
            now = time.monotonic()
            if plan.stop_at is not None and now >= plan.stop_at:
                break
            if now >= next_tick:
                tick()
                next_tick = now + REPORT_EVERY
            index, i = i, i + plan.stride
            next_cleanup -= 1
            if next_cleanup <= 0:
                next_cleanup = CLEANUP_EVERY
                setup += runner.cleanup()
                if other is not None:
                    setup += other.cleanup()
            try:
                case = make_case(plan.protocol, plan.profile, plan.seed, index)
            except Exception as exc:  # noqa: BLE001 - a generator bug: record, go on
                emit(("error", index, f"{type(exc).__name__}: {exc}"))
                continue
            res = runner.run(case)
            cases += 1
            commands.update(lab[4:] for lab in case.labels if lab[:4] in ("cmd:", "msg:"))
            reqs |= res.covered
            nonstrict += sum(1 for f in res.findings if f.level is Verdict.NON_STRICT)
            if other is not None:
                res2 = other.run(case)
                if res.kinds() != res2.kinds():
                    emit(("diff", index, res.kinds(), res2.kinds()))
            if res.failed:
                with failures.get_lock():
                    failures.value += 1
                with shrink_lock:
                    small, path = shrink_and_save_sync(res, plan.host, plan.port,
                                                       plan.artifacts, plan.bound)
                emit(("fail", case, small, path, res.findings))
    finally:
        runner.close()
        if other is not None:
            other.close()
        tick()
        emit(("done",))


def _child(plan: _Plan, w: int, conn: Any, failures: Any, shrink_lock: Any) -> None:
    """A forked worker: Ctrl-C ends it at once; it leaves the parent's event loop alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass
    try:
        _work(plan, w, conn.send, failures, shrink_lock)
    finally:
        conn.close()


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


async def campaign(protocol: str, profile: str, host: str, port: int, *, seed: int,
                   max_examples: int | None = None, duration: float | None = None,
                   workers: int = 1, artifacts: str | None = None, reuse: bool = True,
                   bound: float = DEFAULT_BOUND, diff: tuple[str, int] | None = None,
                   start: int = 0, on_progress: Callable[[Stats], None] | None = None,
                   max_failures: int = 5, prewarm: bool | None = None) -> Stats:
    """Cases ``start, start+1, ...`` of ``seed`` until ``max_examples`` or ``duration``
    (counted from after the warm-up). ``prewarm`` (default: when forking workers) fills the
    seed's valid-message corpus before the clock starts."""
    workers = max(1, workers)
    stats = Stats(workers=workers)
    if prewarm if prewarm is not None else workers > 1:
        t0 = time.monotonic()
        await asyncio.to_thread(warm, protocol, profile, seed)
        stats.warmup = time.monotonic() - t0
    cpu0 = _cpu()
    stats.started = time.monotonic()
    plan = _Plan(protocol, profile, host, port, seed, start,
                 start + max_examples if max_examples is not None else None,
                 stats.started + duration if duration else None, workers, artifacts, reuse,
                 bound, diff, max_failures)

    def absorb(msg: tuple) -> None:
        kind = msg[0]
        if kind == "tick":
            _, cases, nonstrict, connects, commands, reqs, setup = msg
            stats.cases += cases
            stats.setup += setup
            stats.nonstrict += nonstrict
            stats.connects += connects
            stats.commands.update(commands)
            stats.requirements.update(reqs)
        elif kind == "fail":
            stats.failures += 1
            stats.failed.append(msg[1:])
        elif kind == "diff":
            stats.diffs.append(msg[1:])
        elif kind == "error":
            stats.errors.append(msg[1:])
        if on_progress is not None and kind != "done":
            on_progress(stats)

    if workers == 1:
        await asyncio.to_thread(_work, plan, 0, absorb, _Counter(), threading.Lock())
    else:
        await _forked(plan, workers, absorb)
    stats.ended = time.monotonic()
    stats.cpu = _cpu() - cpu0
    return stats


class _Counter:
    """``multiprocessing.Value``'s face for the in-thread worker."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def get_lock(self) -> threading.Lock:
        return self._lock


async def _forked(plan: _Plan, workers: int, absorb: Callable[[tuple], None]) -> None:
    ctx = multiprocessing.get_context("fork")
    failures, lock = ctx.Value("i", 0), ctx.Lock()
    procs, conns = [], []
    for w in range(workers):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(plan, w, send, failures, lock), daemon=True,
                           name=f"queuewire-fuzz-{w}")
        proc.start()
        send.close()
        procs.append(proc)
        conns.append(recv)

    def pump() -> None:
        from multiprocessing.connection import Connection, wait
        live = list(conns)
        while live:
            # wait returns the ready ones of the connections it is given (typeshed: any kind)
            for conn in cast("list[Connection[Any, Any]]", wait(live)):
                try:
                    msg = conn.recv()
                except EOFError:
                    msg = ("done",)
                if msg[0] == "done":
                    live.remove(conn)
                    conn.close()
                absorb(msg)

    try:
        await asyncio.to_thread(pump)
    finally:
        for proc in procs:
            await asyncio.to_thread(proc.join, 5)
            if proc.is_alive():
                proc.terminate()
                await asyncio.to_thread(proc.join)
    bad = [p.exitcode for p in procs if p.exitcode]
    if bad:
        raise RuntimeError(f"a fuzz worker process ended with status {bad[0]}")
