"""Runs conformance cases against one target and collects a :class:`~.model.TargetRun`.

:func:`run_target` loads the profile's cases (or takes a given list), filters them with
``--select`` / ``--skip`` globs (``fnmatch`` on the case id), connects to ``HOST:PORT`` or
starts the embedded reference server, and runs the cases one after another (or ``jobs`` at
once, an ``exclusive`` case always alone: :class:`_Gate`). Each case gets a fresh
:class:`~.context.CaseContext` (its own connections, transcript, variables and unique queue
names), is bounded by a wall-clock limit, then runs its ``cleanup`` steps whatever happened
(:func:`run_cleanup`: recorded, never judged, the verdict is fixed before), and has every
connection closed at its end, so one case cannot leak into the next; a quicx case that
touched the daemon's one task queue also has the queue drained after it
(:func:`.steps_quicx.drain_daemon`), however it ended. A defect of the target that later
cases would meet again (a malformed message type, a daemon that closes after MSG_ERROR) is
reported by the first case that meets it; the others end INFO there, naming that case
(:meth:`.context.CaseContext.known_defect`). A case that raises, cannot
connect, or checks nothing is an ERROR with a one-line message; otherwise its verdict is
:func:`~.model.verdict_of` of its checks. Every result carries a one-line reproduction command,
and has the ``--auth-token`` masked (:func:`~.model.redact_result`) before anyone sees it, so
no report or case file can hold the token. For bunqueue the run first sends ``Hello`` once and
keeps the reply as ``server_info``. ``http_target`` (or the embedded bunqueue server's own HTTP
API) is where ``http:`` steps go; without one they make their case INFO. Coverage counts the
profile's requirement ids whose subject is not a client role (those are out of scope for a
server) and, among them, those cited by a case that ran and was judged (PASS, FAIL, NON-STRICT,
UNIMPLEMENTED) as *exercised*, and those cited only by INFO cases as *observed*. Where the
profile has a ``resources`` section (bunqueue), a :class:`~.residue.Housekeeper` takes an
inventory of the server before the first case and after the last, probes its health after
each case (outside the gate, a round shared by the cases that finish meanwhile), removes what
appeared and lists again: ``TargetRun.residue``, an observation beside the verdicts. ``progress``
receives ``("start", n)``, ``("case", CaseResult)`` per case, ``("break", Break)`` when a probe
that answered ok starts failing, ``("residue", RunResidue)`` after the last case, and
``("done", TargetRun)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import fnmatch
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..spec import Profile, default_profile, load_profile
from . import reproduce, residue, steps_bunqueue, steps_quicx
from .context import CaseAbort, CaseContext, StepError
from .httpapi import parse_http_target
from .loader import CaseError, load_dir, resolve_function
from .loader import load_cases as _load_cases
from .model import (
    Case,
    CaseResult,
    Check,
    Coverage,
    TargetRun,
    Transcript,
    Verdict,
    redact_result,
    redact_value,
    verdict_of,
)
from .reproduce import DEFAULT_TIMEOUT, server_argv
from .targets import EMBEDDED, embedded_target, parse_target
from .wire import ConnectError

__all__ = ["CaseError", "ExtraPass", "load_cases", "load_dir", "run_case", "run_cleanup",
           "run_pass", "run_target",
           "run_target_sync",
           "select_cases", "coverage_of", "reproduction"]

Progress = Callable[[str, Any], None]
CLIENT_ROLES = {"client"}  # bunqueue's client subject; quicx adds its peer roles
LOGIC_TIMEOUTS = 12        # a Python case may take this many --timeout periods
STEP_SLACK = 4             # a YAML case may take (steps + this) --timeout periods
# verdicts that judged the target: a requirement cited by such a case counts as exercised
JUDGED = frozenset({Verdict.PASS, Verdict.FAIL, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED})


def load_cases(protocol: str, profile: str | Profile | None = None) -> list[Case]:
    """Every packaged case of ``protocol`` applying to ``profile`` (default: the protocol's)."""
    return _load_cases(protocol, profile)


def select_cases(cases: Iterable[Case], select: Sequence[str] = (),
                 skip: Sequence[str] = ()) -> list[Case]:
    """Cases whose id matches a ``select`` glob (all when none) and no ``skip`` glob."""
    out = []
    for c in cases:
        if select and not any(fnmatch.fnmatchcase(c.id, g) for g in select):
            continue
        if any(fnmatch.fnmatchcase(c.id, g) for g in skip):
            continue
        out.append(c)
    return out


def reproduction(case: Case, protocol: str, target: str, profile: str, *,
                 auth_token: str | None = None, strict: bool = False,
                 timeout: float = DEFAULT_TIMEOUT, http_target: str | None = None) -> str:
    """The shell line that reruns ``case`` alone against ``target`` (a token is not echoed)."""
    argv = server_argv(protocol, target, profile, auth=bool(auth_token), strict=strict,
                       timeout=timeout, http_target=http_target, embedded=target == EMBEDDED)
    return reproduce.line(argv, "--select", case.id)


def coverage_of(profile: Profile, results: Iterable[CaseResult]) -> Coverage:
    client_roles = set(CLIENT_ROLES)
    elsewhere: set[str] = set()  # requirements of messages the suite's transport cannot reach
    if profile.protocol == "quicx":
        spec = profile.model
        client_roles |= set(spec.peer_roles)
        for m in spec.messages.values():
            if m.transport != spec.transport:
                elsewhere |= {r for r in (m.requirement, *(f.requirement for f in m.layout)) if r}

    def out_of_scope(rid: str, subject: str) -> bool:
        return subject in client_roles or rid in elsewhere

    applicable = tuple(r for r, req in profile.requirements.items()
                       if not out_of_scope(r, req.subject))
    out = tuple(r for r, req in profile.requirements.items() if out_of_scope(r, req.subject))
    results = list(results)
    judged = {rid for res in results if res.verdict in JUDGED for rid in res.case.requirements}
    seen = {rid for res in results if res.verdict is Verdict.INFO
            for rid in res.case.requirements}
    exercised = tuple(r for r in applicable if r in judged)
    observed = tuple(r for r in applicable if r in seen and r not in judged)
    return Coverage(applicable, exercised, out, observed)


async def run_case(case: Case, profile: Profile, host: str, port: int, *, timeout: float = 5.0,
                   auth_token: str | None = None, reproduction_line: str = "",
                   known_failing: bool = False,
                   http_target: tuple[str, int] | None = None,
                   defects: dict[Any, str] | None = None) -> CaseResult:
    """Run one case on a fresh context; never raises for a problem of the case or target.
    ``http_target``: the server's HTTP API for ``http:`` steps (None: those cases are INFO).
    ``defects``: the run's defects already reported (:meth:`.context.CaseContext.known_defect`),
    shared by its cases."""
    ctx = CaseContext(case, profile, host, port, timeout=timeout, auth_token=auth_token,
                      http_target=http_target, defects=defects)
    start = time.monotonic()
    error: str | None = None
    limit = timeout * (LOGIC_TIMEOUTS if case.logic else len(case.steps) + STEP_SLACK)
    try:
        await asyncio.wait_for(_body(ctx), limit)
    except CaseAbort:
        pass
    except ConnectError as exc:
        error = str(exc)
    except StepError as exc:
        error = f"step {ctx.step}: {exc}" if ctx.step is not None and not case.logic else str(exc)
    except CaseError as exc:
        error = str(exc)
    except TimeoutError:
        error = f"the case did not finish within {limit:g} s"
    except Exception as exc:  # noqa: BLE001 - a case that raises is an ERROR, never a crash
        error = _one_line(exc, case)
    # the verdict is decided here: cleanup below can add transcript events, nothing else
    checks, unimplemented, info = list(ctx.checks), ctx.unimplemented, ctx.info
    try:
        await run_cleanup(ctx)
    finally:
        try:
            await ctx.close_all()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        after = _AFTER_EXCLUSIVE.get(case.protocol)
        if case.exclusive and after is not None:
            await after(ctx)
    ctx.checks = checks
    verdict = verdict_of(checks, error=error, unimplemented=unimplemented, info=info)
    if verdict is Verdict.ERROR and error is None:
        error = "the case checked nothing (a pass must look at bytes on the wire)"
    result = CaseResult(case, verdict, checks, ctx.transcript, time.monotonic() - start,
                        error, reproduction_line, known_failing)
    return redact_result(result, auth_token)  # before anything shows or saves it


async def run_cleanup(ctx: CaseContext) -> None:
    """Run the case's ``cleanup`` steps, each on its own, whatever the steps did.

    Nothing here is judged: the context turns checks into transcript notes, and a step that
    fails (an error, a timeout, a closed connection, a variable never saved) is a note too."""
    case = ctx.case
    if not case.cleanup:
        return
    ctx.cleaning = True
    run_step = _STEP_RUNNERS[case.protocol]
    first = len(case.steps)
    try:
        for n, step in enumerate(case.cleanup, 1):
            ctx.begin_step(first + n)
            conn = int(step.get("conn", 1)) if isinstance(step, dict) else 0
            limit = max(float(step.get("timeout", ctx.timeout)), ctx.timeout) + 1.0 \
                if isinstance(step, dict) else ctx.timeout
            try:
                await asyncio.wait_for(run_step(ctx, dict(step)), limit)
            except CaseAbort:
                pass  # the failed check is already a note
            except TimeoutError:
                ctx.note(f"cleanup (not judged): step {ctx.step} did not finish within "
                         f"{limit:g} s", conn)
            except Exception as exc:  # noqa: BLE001 - cleanup never changes the verdict
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                ctx.note(f"cleanup (not judged): step {ctx.step} could not run: {text}", conn)
    finally:
        ctx.cleaning = False


async def _body(ctx: CaseContext) -> None:
    case = ctx.case
    if case.logic:
        fn = resolve_function(case.logic, case.source or case.id, "logic", want_async=True)
        await fn(ctx)
        return
    run_step = _STEP_RUNNERS[case.protocol]
    for n, step in enumerate(case.steps, 1):
        ctx.begin_step(n)
        await run_step(ctx, step)


# The step interpreter of each protocol: run_step(ctx, step) runs one YAML step.
_STEP_RUNNERS = {"bunqueue": steps_bunqueue.run_step, "quicx": steps_quicx.run_step}
# What runs after each case that touched server-wide state, however it ended: quicx drains
# the daemon's one task queue (bunqueue's cases have queues of their own, and the residue
# Housekeeper).
_AFTER_EXCLUSIVE = {"quicx": steps_quicx.drain_daemon}


def _one_line(exc: BaseException, case: Case) -> str:
    tb = exc.__traceback__
    where = ""
    while tb is not None:
        where = f" (at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno})"
        tb = tb.tb_next
    text = str(exc).splitlines()[0] if str(exc) else ""
    kind = "the logic function raised" if case.logic else "the case raised"
    return f"{kind} {type(exc).__name__}: {text}{where}"


class _Gate:
    """At most ``jobs`` cases at once, and an exclusive case (``Case.exclusive``: it reads or
    changes server-wide state) with no other: a readers-writer lock whose writers are the
    exclusive cases. A waiting exclusive case stops new cases from starting (it is not
    starved); cases are admitted in suite order, so a run is as deterministic as it can be."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.running = 0
        self.exclusive = False
        self.queue: list[tuple[bool, asyncio.Future[None]]] = []

    def _admit(self) -> None:
        while self.queue and not self.exclusive:
            excl, fut = self.queue[0]
            if fut.done():  # cancelled while waiting
                self.queue.pop(0)
                continue
            if excl and self.running:
                return
            if not excl and self.running >= self.jobs:
                return
            self.queue.pop(0)
            self.running += 1
            self.exclusive = excl
            fut.set_result(None)

    @contextlib.asynccontextmanager
    async def hold(self, exclusive: bool) -> AsyncIterator[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.append((exclusive, fut))
        self._admit()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()
            raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self.running -= 1
        self.exclusive = False
        self._admit()


async def preflight(host: str, port: int, timeout: float) -> str | None:
    """None when ``host:port`` accepts a connection, else the one-line reason."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, TimeoutError) as exc:
        what = "timed out" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        return f"cannot connect to {host}:{port}: {what}"
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return None


async def _server_info(profile: Profile, host: str, port: int, timeout: float,
                       auth_token: str | None) -> Any:
    """bunqueue: the Hello reply (None when the target does not answer one)."""
    if profile.protocol != "bunqueue" or "Hello" not in profile.model.commands:
        return None
    probe = Case("queuewire.hello", "Hello", "bunqueue", ())
    ctx = CaseContext(probe, profile, host, port, timeout=timeout, auth_token=auth_token)
    try:
        conn = await ctx.connect()
        reply = await conn.request({"cmd": "Hello",
                                    "protocolVersion": profile.model.protocol_version})
    except Exception:  # noqa: BLE001 - no server info is not an error of the run
        return None
    finally:
        await ctx.close_all()
    if isinstance(reply, dict) and reply.get("ok") is True:
        from ..codecs.validation import jsonable
        return redact_value(jsonable(reply), auth_token) if auth_token else jsonable(reply)
    return None


async def run_target(protocol: str, target: str, *, profile: str | Profile | None = None,
                     auth_token: str | None = None, strict: bool = False,
                     select: Sequence[str] = (), skip: Sequence[str] = (),
                     known_failing: Iterable[str] = (), timeout: float = 5.0,
                     progress: Progress | None = None,
                     cases: Sequence[Case] | None = None, jobs: int = 1,
                     http_target: str | None = None, remove_residue: bool = True,
                     probe_health: bool = True,
                     passes: Sequence[ExtraPass] = ()) -> TargetRun:
    """Run the suite (or ``cases``) against ``target`` ("HOST:PORT" or "embedded").

    ``http_target`` ("HOST:PORT"): the server's HTTP API, for the ``http:`` cases; the
    embedded bunqueue server sets its own. Without one those cases are INFO.

    ``jobs`` > 1 runs that many cases at once (each still has its own connections and
    transcript; results keep the suite's order, progress reports them as they finish). A case
    marked ``exclusive`` (it reads or changes server-wide state) runs with no other case at
    once, so the verdicts are those of a serial run.

    Where the profile has a ``resources`` section (:mod:`.residue`), the run takes an
    inventory of the server before the first case and after the last, removes what appeared
    (``remove_residue``; else it only reports it), lists again, and with ``probe_health``
    probes the server after each case; ``TargetRun.residue`` holds what it found.

    ``passes`` (:class:`ExtraPass`) run after the cases, each reported as one more case."""
    prof = profile if isinstance(profile, Profile) else load_profile(
        profile or default_profile(protocol))
    if prof.protocol != protocol:
        raise ValueError(f"profile {prof.name} is for {prof.protocol}, not {protocol}")
    where = parse_target(target)
    http_addr = parse_http_target(http_target) if http_target else None
    pool = list(cases) if cases is not None else load_cases(protocol, prof)
    chosen = select_cases((c for c in pool if c.protocol == protocol and c.applies_to(prof)),
                          select, skip)
    extras = [x for x in passes if x.case.id in
              {c.id for c in select_cases([x.case for x in passes], select, skip)}]
    known = set(known_failing)
    started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    notify = progress or (lambda kind, value: None)
    notify("start", len(chosen) + len(extras))
    label = EMBEDDED if where == EMBEDDED else f"{where[0]}:{where[1]}"

    keeper: residue.Housekeeper | None = None
    defects: dict[Any, str] = {}  # reported once per run (CaseContext.known_defect)

    async def run_one(case: Case, host: str, port: int, unreachable: str | None) -> CaseResult:
        repro = reproduction(case, protocol, label, prof.name, auth_token=auth_token,
                             strict=strict, timeout=timeout, http_target=http_target)
        if unreachable is not None:
            res = CaseResult(case, Verdict.ERROR, [], Transcript(), 0.0, unreachable, repro,
                             case.id in known)
        else:
            if keeper is not None:
                keeper.started(case.id)
            try:
                res = await run_case(case, prof, host, port, timeout=timeout,
                                     auth_token=auth_token, reproduction_line=repro,
                                     known_failing=case.id in known, http_target=http_addr,
                                     defects=defects)
            finally:
                if keeper is not None:
                    keeper.finished(case.id)
        notify("case", res)
        return res

    async def probed(case: Case, host: str, port: int) -> CaseResult:
        """The case, then (outside the gate) a health probe round begun after it."""
        res = await run_one(case, host, port, None)
        if keeper is not None:
            await keeper.checkpoint()
        return res

    async def run_all(host: str, port: int) -> tuple[list[CaseResult], Any, Any]:
        nonlocal keeper
        unreachable = await preflight(host, port, timeout)
        if unreachable:
            return [await run_one(c, host, port, unreachable) for c in chosen], None, None
        info = await _server_info(prof, host, port, timeout, auth_token)
        keeper = await residue.housekeeper(prof, host, port, timeout=timeout,
                                           auth_token=auth_token, remove=remove_residue,
                                           watch=probe_health, notify=notify)
        if jobs <= 1:
            results = [await probed(c, host, port) for c in chosen]
        else:
            gate = _Gate(jobs)

            async def gated(c: Case) -> CaseResult:
                async with gate.hold(c.exclusive):
                    res = await run_one(c, host, port, None)
                if keeper is not None:
                    await keeper.checkpoint()
                return res
            results = list(await asyncio.gather(*(gated(c) for c in chosen)))
        for x in extras:
            res = await run_pass(x, prof, host, port, reproduction(
                x.case, protocol, label, prof.name, auth_token=auth_token, strict=strict,
                timeout=timeout, http_target=http_target))
            notify("case", res)
            results.append(res)
        left = await keeper.end() if keeper is not None else None
        if left is not None and auth_token:
            left = residue.redact_residue(left, auth_token)
        return results, info, left

    if where == EMBEDDED:
        tokens = (auth_token,) if auth_token else ()
        async with embedded_target(protocol, prof, auth_tokens=tokens) as emb:
            if http_addr is None:
                http_addr = emb.http
            results, info, left = await run_all(emb.host, emb.port)
    else:
        results, info, left = await run_all(*where)
    run = TargetRun(target=label, protocol=protocol, profile=prof.name, results=results,
                    coverage=coverage_of(prof, results), started_at=started_at,
                    duration=time.monotonic() - t0, strict=strict, server_info=info,
                    rerun=server_argv(protocol, label, prof.name, auth=bool(auth_token),
                                      strict=strict, timeout=timeout, http_target=http_target,
                                      embedded=label == EMBEDDED),
                    residue=left)
    notify("done", run)
    return run


@dataclass(frozen=True)
class ExtraPass:
    """A judged pass over the whole target after the cases, reported as one more case: the
    CLI plugs the stateful fuzzer in this way (the conformance package does not import the
    fuzzers, its siblings). ``case`` gives its id, title and requirements (``--select`` and
    ``--skip`` match its id); ``run(host, port, profile)`` returns its checks and transcript
    notes; an exception it raises makes the pass an ERROR."""

    case: Case
    run: Callable[[str, int, Profile], Awaitable[tuple[list[Check], list[str]]]]


async def run_pass(extra: ExtraPass, profile: Profile, host: str, port: int,
                   reproduction_line: str = "") -> CaseResult:
    """Run one :class:`ExtraPass` as a case; never raises for a problem of the target."""
    start = time.monotonic()
    transcript = Transcript()
    error: str | None = None
    checks: list[Check] = []
    try:
        checks, notes = await extra.run(host, port, profile)
        for text in notes:
            transcript.add(0, "note", note=text)
    except Exception as exc:  # noqa: BLE001 - a pass that raises is an ERROR, never a crash
        error = _one_line(exc, extra.case)
    verdict = verdict_of(checks, error=error, info=extra.case.info)
    return CaseResult(extra.case, verdict, checks, transcript, time.monotonic() - start, error,
                      reproduction_line)


def run_target_sync(protocol: str, target: str, **kwargs: Any) -> TargetRun:
    """:func:`run_target` in a fresh event loop."""
    return asyncio.run(run_target(protocol, target, **kwargs))


def empty_transcript() -> Transcript:  # for callers building results by hand (replay)
    return Transcript()
