"""Runs the client scenarios against one testee and collects a :class:`~..model.TargetRun`.

For each scenario :func:`run_client` binds a fresh queue name and token, opens a session on
the :class:`~.server.ConformanceServer` with the scenario's behaviours and a fresh
:class:`~.checker.ClientChecker`, asks the testee to play the actions (:class:`~.testee.Testee`)
within a limit derived from the actions and options, lets late frames settle, and judges: the
``expect`` entries against the testee's results, the ``judge`` entries (:mod:`.judges`)
against what the server saw, and every frame's checks. The verdict is the server runner's
:func:`~..model.verdict_of`: ERROR when the testee broke (exited, no answer in time),
UNIMPLEMENTED when it reported an action ``unsupported``, INFO when a judgement found nothing
to judge and nothing failed. A scenario whose every failure repeats one an earlier scenario
of the run reported ends INFO naming it (:func:`once`): a client's defect is reported once,
under its rule. Results are the server runner's ``CaseResult`` (the scenario as a
``Case`` citing every requirement its checks cite), so the report package renders them
unchanged; coverage counts the profile's client and peer requirements.

Each scenario also says what it showed of the client's capabilities (pipelining, heartbeats,
reconnect, dead-link detection, auth, events: :mod:`.capabilities`); the run folds them into
its capability table, ``server_info["capabilities"]``, which the reports render.

What a scenario records is bounded (:mod:`.records`): its transcript is a
:class:`~.records.BoundedTranscript` (head and tail events, a note counting what was
omitted), the testee's answer is recorded whole only up to ``RECORD_ANSWER_CHARS`` of JSON,
and when the checker's records of requests or replies dropped some (a flood), a note says how
many the judgements did not see (every frame was still checked). A testee that breaks the
contract (exits, hangs, writes a line over its limit) makes that scenario an ERROR and the run
goes on with the next one.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ...spec import Profile
from ..model import (
    Case,
    CaseResult,
    Check,
    Coverage,
    TargetRun,
    Verdict,
    verdict_of,
)
from ..reproduce import client_argv, line
from .capabilities import Observation, Sighting, observe, table
from .judges import JUDGES, JudgeContext
from .quicx_judges import QUICX_JUDGES
from .quicx_server import QuicxConformanceServer
from .records import BoundedTranscript, clip
from .scenarios import Expectation, Scenario
from .server import ConformanceServer
from .testee import Testee, TesteeError

__all__ = ["CLIENT_SUBJECTS", "client_coverage", "run_client", "scenario_limit"]

CLIENT_SUBJECTS = ("client", "peer")
SETTLE = 0.15            # seconds for late frames (a batched ACK) after the testee answered
BASE_LIMIT = 10.0        # seconds a scenario may take besides its actions' own times
#: JSON characters of the testee's answer recorded in the transcript (a larger answer is
#: recorded as its clipped text; the results are judged in full)
RECORD_ANSWER_CHARS = 64 * 1024
#: characters of a note quoting the testee's own words (its reasons for unsupported actions)
NOTE_CHARS = 4000
JUDGED = frozenset({Verdict.PASS, Verdict.FAIL, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED})
Progress = Callable[[str, Any], None]
ALL_JUDGES = {**JUDGES, **QUICX_JUDGES}
SERVERS: dict[str, Any] = {"bunqueue": ConformanceServer, "quicx": QuicxConformanceServer}


def scenario_limit(actions: Sequence[dict[str, Any]], options: dict[str, Any]) -> float:
    """Seconds the testee may take for a scenario: its sleeps and process timeouts, a command
    timeout per action, and BASE_LIMIT."""
    total = BASE_LIMIT
    per = float(options.get("command_timeout", 5000)) / 1000.0
    for a in actions:
        total += float(a.get("ms", 0)) / 1000.0 + float(a.get("timeout_ms", 0)) / 1000.0 + per
    return total


def client_coverage(profile: Profile, results: Sequence[CaseResult]) -> Coverage:
    applicable = tuple(r for r, req in profile.requirements.items()
                       if req.subject in CLIENT_SUBJECTS)
    judged = {c.requirement for res in results if res.verdict in JUDGED for c in res.checks}
    judged |= {rid for res in results if res.verdict in JUDGED for rid in res.case.requirements}
    seen = {rid for res in results if res.verdict is Verdict.INFO for rid in res.case.requirements}
    out = tuple(r for r, req in profile.requirements.items() if req.subject not in CLIENT_SUBJECTS)
    return Coverage(applicable, tuple(r for r in applicable if r in judged), out,
                    tuple(r for r in applicable if r in seen and r not in judged))


def _expect(e: Expectation, results: list[dict[str, Any]]) -> Check:
    r = results[e.action] if e.action < len(results) and isinstance(results[e.action], dict) \
        else None
    want: dict[str, Any] = {}
    if e.ok is not None:
        want["ok"] = e.ok
    if e.error_type:
        want["error_type"] = e.error_type
    if e.error_contains:
        want["error_contains"] = e.error_contains
    if e.has_value:
        want["value"] = e.value
    if r is None:
        return Check(e.requirement, e.level, False, "result",  # type: ignore[arg-type]
                     f"action {e.action}: no result", want, None, e.action)
    wrong = []
    if e.ok is not None and bool(r.get("ok")) is not e.ok:
        wrong.append("ok")
    if e.error_type and r.get("error_type") != e.error_type:
        wrong.append("error_type")
    if e.error_contains and e.error_contains not in str(r.get("error", "")):
        wrong.append("error")
    if e.has_value and r.get("value") != e.value:
        wrong.append("value")
    what = "held" if not wrong else f"differs in {', '.join(wrong)}"
    return Check(e.requirement, e.level, not wrong, "result",  # type: ignore[arg-type]
                 f"action {e.action}: {what}", want, r, e.action)


def _recorded(answer: dict[str, Any]) -> Any:
    """The testee's answer as the transcript keeps it: whole, or clipped when its JSON is
    longer than RECORD_ANSWER_CHARS."""
    text = json.dumps(answer, default=str)
    if len(text) <= RECORD_ANSWER_CHARS:
        return answer
    return {"scenario": answer.get("scenario"), "clipped": clip(text, RECORD_ANSWER_CHARS)}


def reproduction(scenario: Scenario, testee: Testee, profile: str) -> str:
    """The shell line that reruns ``scenario`` alone against the same testee."""
    argv = client_argv(scenario.protocol, profile, testee.command, testee.cwd)
    return line(argv, "--scenario", scenario.id)


async def run_scenario(server: Any, testee: Testee, scenario: Scenario,
                       profile: Profile, sightings: list[Sighting] | None = None) -> CaseResult:
    """One scenario against ``testee``; what it showed of the client's capabilities
    (:mod:`.capabilities`) is appended to ``sightings``."""
    short = scenario.id.rsplit(".", 1)[-1][:20]
    queue = f"cc-{short}-{uuid.uuid4().hex[:6]}"
    token = f"qw-{uuid.uuid4().hex[:12]}"
    behaviour, options, actions = scenario.bind(queue, token)
    checker = server.new_checker(behaviour, options)
    transcript = BoundedTranscript()
    session = server.begin(behaviour, checker, transcript)
    request = {"scenario": scenario.id, "protocol": scenario.protocol, "profile": profile.name,
               "target": server.target, "actions": actions, "options": options}
    transcript.add(0, "note", decoded=request, note="asked the testee")
    start = time.monotonic()
    error: str | None = None
    results: list[dict[str, Any]] = []
    answered_at: float | None = None
    try:
        answer = await testee.run(request, scenario_limit(actions, options))
        raw = answer.get("results")
        if not isinstance(raw, list):
            raise TesteeError(f"the testee's answer has no results list: {answer!r}"[:300])
        results = [r if isinstance(r, dict) else {"ok": False, "error": repr(r)} for r in raw]
        transcript.add(0, "note", decoded=_recorded(answer), note="the testee answered")
        answered_at = session.now()
        await asyncio.sleep(SETTLE)
    except TesteeError as exc:
        error = str(exc)
    checks: list[Check] = []
    ctx = JudgeContext(session, checker, queue, actions, results)
    unsupported = [i for i, r in enumerate(results) if r.get("error_type") == "unsupported"]
    if error is None and not unsupported:
        # the judgements first: where one fails, it says why an action failed (a worker that
        # never sent MSG_READY), so it heads the scenario's verdict
        for j in scenario.judge:
            checks += await ALL_JUDGES[j.check](ctx, j)
        checks += [_expect(e, results) for e in scenario.expect]
    if sightings is not None:
        sightings += observe(Observation(
            scenario.id, scenario.protocol, profile, behaviour, options, actions, session.events,
            checker, session.now(), answered_at if error is None and not unsupported else None))
    server.end()
    checks += checker.checks()
    unseen = {name: getattr(getattr(checker, name, None), "omitted", 0)
              for name in ("requests", "replies", "received", "sent")}
    if any(unseen.values()):
        transcript.add(0, "note", note="records bounded: the judgements did not see "
                       + ", ".join(f"{n} {name}" for name, n in unseen.items() if n)
                       + " from the middle of the scenario (every frame was still checked)")
    for note in ctx.notes:
        transcript.add(0, "note", note=f"not exercised: {note}")
    for note in ctx.observations:
        transcript.add(0, "note", note=f"observed: {note}")
    if unsupported:
        transcript.add(0, "note", note=clip(
            f"the testee does not support action(s) {unsupported}: "
            + "; ".join(str(results[i].get("error", "")) for i in unsupported), NOTE_CHARS))
    info = bool(ctx.notes or ctx.observations) and all(c.ok for c in checks)
    verdict = verdict_of(checks, error=error, unimplemented=bool(unsupported) and error is None,
                         info=info)
    cited = tuple(dict.fromkeys([*scenario.requirements,
                                 *(c.requirement for c in checks if c.requirement)]))
    case = Case(id=scenario.id, title=scenario.title, protocol=scenario.protocol,
                requirements=cited, info=info, source=scenario.source,
                params={"server": behaviour, "options": options, "actions": actions})
    return CaseResult(case, verdict, checks, transcript, time.monotonic() - start, error=error,
                      reproduction=reproduction(scenario, testee, profile.name))


def _signature(check: Check) -> tuple[Any, str]:
    """A failed check, numbers aside: the same defect met again in another scenario (a task
    id, a connection number and a count differ from one scenario to the next)."""
    return check.requirement, re.sub(r"\d+", "N", check.message)


def once(result: CaseResult, seen: dict[tuple[Any, str], str]) -> CaseResult:
    """Report a client's defect once per run, under its rule: in a scenario, a failed check
    that repeats one an earlier scenario reported becomes an INFO note naming that scenario,
    and so do the action results that failed with it (an action a repeated defect kept from
    completing); the verdict is then that of what is left, INFO when nothing fresh failed. A
    fresh failure keeps its verdict. ``seen`` records the failures reported so far."""
    failed = [c for c in result.checks if not c.ok]
    if result.verdict not in (Verdict.FAIL, Verdict.NON_STRICT) or not failed:
        return result
    repeats = [c for c in failed if _signature(c) in seen]
    for c in failed:
        seen.setdefault(_signature(c), result.case.id)
    judged = [c for c in repeats if c.kind != "result"]
    if not judged:
        return result
    fresh = [c for c in failed if c not in repeats and c.kind != "result"]
    first = seen[_signature(judged[0])]
    note = Check(judged[0].requirement, "INFO", True, "blocked",
                 f"not judged again: {judged[0].message} (the defect scenario {first} "
                 f"reports, under {judged[0].requirement})", None, None)
    kept = [c for c in result.checks if c.ok or c in fresh]
    result.checks = kept + [note]
    result.verdict = verdict_of(result.checks, info=True)
    return result


async def run_client(testee: Testee, scenarios: Sequence[Scenario], profile: Profile, *,
                     host: str = "127.0.0.1", port: int = 0,
                     progress: Progress | None = None,
                     server: Any = None) -> TargetRun:
    """Every scenario against ``testee``; the conformance server listens on ``host:port``
    (or ``server`` is given, already started, and left running)."""
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    own = server is None
    if server is None:
        server = await SERVERS[profile.protocol](profile, host, port).start()
    if progress:
        progress("start", len(scenarios))
    results: list[CaseResult] = []
    sightings: list[Sighting] = []
    seen: dict[tuple[Any, str], str] = {}  # the failures reported so far, by signature
    try:
        for scenario in scenarios:
            result = once(await run_scenario(server, testee, scenario, profile, sightings),
                          seen)
            results.append(result)
            if progress:
                progress("case", result)
    finally:
        await testee.stop()
        if own:
            await server.stop()
    run = TargetRun(testee.label, profile.protocol,
                    profile.name, results, client_coverage(profile, results), started,
                    time.monotonic() - t0, server_info={"listen": server.target,
                                                        "testee": testee.command,
                                                        "capabilities": table(sightings, profile)},
                    rerun=client_argv(profile.protocol, profile.name, testee.command, testee.cwd),
                    select_flag="--scenario")
    if progress:
        progress("done", run)
    return run
