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
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, cast

from ..judge import Verdict
from ..spec import load_profile
from ..traffic.inventory import Break, Residue
from .case import Case
from .oracles import Finding
from .residue import PROBE_EVERY, Housekeeping
from .runner import DEFAULT_BOUND, Runner
from .shrink import Saved, confirm_saved_sync, shrink_and_save_sync, signature
from .strategies import make_case, warm

REPORT_EVERY = 0.2   # seconds between a worker's progress messages
# Cases a worker plays between two cleanups (Runner.cleanup: Obliterate the queues its cases
# named). Without them the server's state grows for the whole campaign and with it the
# replies to listing commands; the fuzzer's cost per case grew with them (2,074 cases/s per
# fuzzer core over 60 s, 1,950 over 10 minutes).
CLEANUP_EVERY = 2000


#: a group of findings: (requirement, verdict label, kind); the label is FAIL, NON-STRICT or
#: KNOWN (a FAIL on a requirement the run was told is a known deviation)
GroupKey = tuple[str | None, str, str]
KNOWN = "KNOWN"


@dataclass
class Group:
    """Findings of one requirement, verdict and kind over a run: how many, in how many cases,
    and the first one seen (its case index and message; the saved transcript of its case, when
    it was the one shrunk and saved)."""

    count: int = 0
    example_case: int = -1
    example: str = ""
    path: str | None = None


@dataclass
class Stats:
    cases: int = 0
    failures: int = 0       # distinct failures (a new requirement and kind), each shrunk once
    failing_cases: int = 0  # cases with a FAIL not known: repeats of a failure included
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
    failed: list[tuple[Case, Saved, list[Finding]]] = field(default_factory=list)
    groups: dict[GroupKey, Group] = field(default_factory=dict)
    diffs: list[tuple[int, list, list]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)  # cases the generator broke on
    stop_reason: str = ""
    residue: Residue | None = None   # what the run left on the server (None: not taken)
    breaks: list[Break] = field(default_factory=list)   # probes the run's cases broke
    #: the case at which the target stopped answering for good (its index and what the last
    #: liveness check got), or None: the run then stops, nothing after it can be judged
    down: tuple[int, str] | None = None

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

    def add_groups(self, delta: dict[GroupKey, tuple[int, int, str]]) -> None:
        for key, (count, index, message) in delta.items():
            group = self.groups.setdefault(key, Group())
            if group.count == 0 or (index < group.example_case and group.path is None):
                group.example_case, group.example = index, message
            group.count += count


def group_findings(findings: list[Finding], known: AbstractSet[str],
                   into: dict[GroupKey, tuple[int, int, str]], index: int) -> None:
    """Count a case's FAIL and NON-STRICT findings into ``into`` by group (INFO is not
    grouped: it observes, it judges nothing)."""
    for f in findings:
        if f.level is Verdict.INFO:
            continue
        label = KNOWN if f.fails and f.requirement in known else str(f.level)
        key = (f.requirement, label, f.kind)
        count, first, message = into.get(key, (0, index, f.message))
        into[key] = (count + 1, first, message)


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
    auth_token: str | None = None
    known: frozenset[str] = frozenset()   # requirement ids whose FAILs are known deviations
    probe: bool = False                   # health probes every PROBE_EVERY cases


def _work(plan: _Plan, w: int, emit: Callable[[tuple], None], failures: Any,
          shrink_lock: Any) -> None:
    """Worker ``w``: cases ``start + w + k * stride``; sends ``("tick", counts...)`` every
    REPORT_EVERY seconds, ``("fail", ...)`` for each distinct failure (shrunk and saved once;
    its repeats are counted in the groups), ``("diff", ...)``, ``("error", ...)``, and
    ``("done",)`` at the end. A FAIL on a requirement in ``plan.known`` is counted, never
    shrunk, and does not count towards ``max_failures``."""
    runner = Runner(plan.protocol, plan.profile, plan.host, plan.port, bound=plan.bound,
                    reuse=plan.reuse, auth_token=plan.auth_token)
    other = Runner(plan.protocol, plan.profile, *plan.diff, bound=plan.bound,
                   reuse=plan.reuse, auth_token=plan.auth_token) if plan.diff else None
    cases = nonstrict = setup = failing = 0
    commands: set[str] = set()
    reqs: set[str] = set()
    groups: dict[GroupKey, tuple[int, int, str]] = {}
    seen: set[tuple[str | None, str]] = set()   # failures already shrunk by this worker
    next_tick = time.monotonic() + REPORT_EVERY
    next_cleanup = CLEANUP_EVERY
    known = plan.known
    house = Housekeeping(runner.profile, plan.host, plan.port, bound=plan.bound,
                         auth_token=plan.auth_token) if plan.probe else None
    window_first, window_began, window_left = plan.start + w, time.monotonic(), PROBE_EVERY

    def tick() -> None:
        nonlocal cases, nonstrict, setup, failing
        emit(("tick", cases, nonstrict, runner.connects, sorted(commands), sorted(reqs),
              setup, failing, dict(groups)))
        runner.connects = cases = nonstrict = setup = failing = 0
        commands.clear()
        reqs.clear()
        groups.clear()

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
            window_left -= 1
            if house is not None and window_left <= 0:
                probed = time.monotonic()
                emit(("health", f"cases {window_first}-{index}", window_began, probed,
                      house.probe(), probed))
                window_first, window_began, window_left = index + plan.stride, probed, \
                    PROBE_EVERY
            commands.update(lab[4:] for lab in case.labels if lab[:4] in ("cmd:", "msg:"))
            reqs |= res.covered
            if res.findings:
                nonstrict += sum(1 for f in res.findings if f.level is Verdict.NON_STRICT)
                group_findings(res.findings, known, groups, index)
            if other is not None:
                res2 = other.run(case)
                if res.kinds() != res2.kinds():
                    emit(("diff", index, res.kinds(), res2.kinds()))
            # the target down for good: this case is saved (the first suspect), then the
            # worker stops, for nothing after it can be judged
            down = _gone(runner) if any(f.kind == "dead" for f in res.findings) else None
            wanted = {sig for sig in signature(res.findings) if sig[0] not in known} \
                if res.failed else set()
            if wanted:
                failing += 1
            if wanted and not wanted <= seen:
                seen.update(wanted)
                with failures.get_lock():
                    failures.value += 1
                with shrink_lock:
                    saved = shrink_and_save_sync(res, plan.host, plan.port, plan.artifacts,
                                                 plan.bound, plan.auth_token, wanted=wanted)
                emit(("fail", case, saved, [f for f in res.findings
                                            if (f.requirement, f.kind) in wanted]))
            if down is not None:
                emit(("down", index, down))
                break
    finally:
        runner.close()
        if other is not None:
            other.close()
        tick()
        emit(("done",))


#: How often, and how far apart, a worker asks a target whose liveness check failed again
#: before it calls it down (a server restarting, or busy for a moment, is not down).
DOWN_CHECKS, DOWN_PAUSE = 3, 1.0


def _gone(runner: Runner) -> str | None:
    """What the last of :data:`DOWN_CHECKS` liveness checks got, when none answered; None
    when one did (the target is up after all)."""
    last = ""
    for attempt in range(DOWN_CHECKS):
        if attempt:
            time.sleep(DOWN_PAUSE)
        found = runner.alive()
        if not found:
            return None
        last = found[0].message
    return last


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
                   max_failures: int = 5, prewarm: bool | None = None,
                   auth_token: str | None = None,
                   known: AbstractSet[str] = frozenset(),
                   housekeeping: bool = True) -> Stats:
    """Cases ``start, start+1, ...`` of ``seed`` until ``max_examples`` or ``duration``
    (counted from after the warm-up), or until ``max_failures`` distinct failures were found.
    ``prewarm`` (default: when forking workers) fills the seed's valid-message corpus before
    the clock starts. ``auth_token``: every connection authenticates with it first.
    ``known``: requirement ids whose FAILs are the target's known deviations (counted and
    grouped, never shrunk, not failures). ``housekeeping`` (bunqueue): list what the server
    keeps before the first case, probe its health every :data:`~.residue.PROBE_EVERY` cases
    of a worker, and after the last case remove what appeared (:mod:`.residue`;
    :attr:`Stats.residue`, :attr:`Stats.breaks`), before the saved transcripts are replayed
    once more (:func:`~.shrink.confirm_saved_sync`). :attr:`Stats.stop_reason` says why the
    run stopped."""
    workers = max(1, workers)
    stats = Stats(workers=workers)
    if prewarm if prewarm is not None else workers > 1:
        t0 = time.monotonic()
        await asyncio.to_thread(warm, protocol, profile, seed)
        stats.warmup = time.monotonic() - t0
    house = Housekeeping(load_profile(profile), host, port, bound=bound,
                         auth_token=auth_token) if housekeeping else None
    if house is not None:
        await asyncio.to_thread(house.begin)
    cpu0 = _cpu()
    stats.started = time.monotonic()
    plan = _Plan(protocol, profile, host, port, seed, start,
                 start + max_examples if max_examples is not None else None,
                 stats.started + duration if duration else None, workers, artifacts, reuse,
                 bound, diff, max_failures, auth_token, frozenset(known),
                 probe=house is not None and house.active)

    def absorb(msg: tuple) -> None:
        kind = msg[0]
        if kind == "tick":
            _, cases, nonstrict, connects, commands, reqs, setup, failing, groups = msg
            stats.failing_cases += failing
            stats.add_groups(groups)
            stats.cases += cases
            stats.setup += setup
            stats.nonstrict += nonstrict
            stats.connects += connects
            stats.commands.update(commands)
            stats.requirements.update(reqs)
        elif kind == "fail":
            stats.failures += 1
            stats.failed.append(msg[1:])
            case, saved, findings = msg[1:]
            for f in findings:   # the group's example is the case that was saved
                group = stats.groups.setdefault((f.requirement, str(f.level), f.kind), Group())
                group.example_case, group.example, group.path = case.index, f.message, saved.path
        elif kind == "health" and house is not None:
            stats.breaks += house.window(*msg[1:])
        elif kind == "down":
            if stats.down is None or msg[1] < stats.down[0]:
                stats.down = (msg[1], msg[2])
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
    stats.stop_reason = _stop_reason(stats, plan, max_examples, duration)
    if house is not None:
        stats.residue = await asyncio.to_thread(house.end)
        stats.breaks = list(house.watch.breaks)
    if stats.failed and artifacts:
        saved = await asyncio.to_thread(
            confirm_saved_sync, [(case, entry) for case, entry, _ in stats.failed], host, port,
            bound, auth_token)
        stats.failed = [(case, entry, findings) for (case, entry), (_, _, findings)
                        in zip(saved, stats.failed, strict=True)]
        for _case, entry, findings in stats.failed:
            if entry.path is None:
                for f in findings:
                    group = stats.groups.get((f.requirement, str(f.level), f.kind))
                    if group is not None:
                        group.path = None
    return stats


def _stop_reason(stats: Stats, plan: _Plan, max_examples: int | None,
                 duration: float | None) -> str:
    """Why the run ended, in a sentence a user can act on."""
    if stats.down is not None:
        index, got = stats.down
        return (f"the target stopped answering at case {index} ({got}; asked "
                f"{DOWN_CHECKS} times, {DOWN_PAUSE:g} s apart), so nothing after it could be "
                f"judged. A case can hurt a server some time before it dies: the cases played "
                f"shortly before it are suspects too (the health windows below say when it "
                f"last answered its probes)")
    if stats.failures >= plan.max_failures:
        return (f"stopped after {stats.failures} distinct failures (--max-failures "
                f"{plan.max_failures}); raise it to survey further, or list the target's "
                f"known deviations with --known-failing")
    if max_examples is not None and stats.cases + len(stats.errors) >= max_examples:
        return f"played the {max_examples} cases asked for (--max-examples)"
    if duration is not None:
        return f"ran for the {duration:g} s asked for (--duration)"
    return "stopped"


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
