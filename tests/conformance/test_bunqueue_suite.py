"""The bunqueue conformance suite against the reference server, and against broken ones.

The whole suite runs once against the embedded reference server (no FAIL, no ERROR, at least
MIN_CASES cases, at least MIN_COVERAGE of the profile's server requirements). Then servers
each broken in one rule, made by subclassing the reference server or its engine (never by
editing it), run a slice of the suite: exactly the cases that judge that rule must FAIL and
every other case of the slice must not. The Auth cases run against a reference server with a
token configured, correct and with its authentication gate removed.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from queuewire.codecs.bunqueue import UNDEFINED
from queuewire.codecs.validation import BunqueueValidator
from queuewire.conformance.model import TargetRun, Verdict
from queuewire.conformance.runner import load_cases, run_target, run_target_sync
from queuewire.conformance.targets import EMBEDDED_TICK
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer
from queuewire.reference_server.bunqueue.connection import BunqueueConnection
from queuewire.reference_server.bunqueue.gate import RequestGate
from queuewire.spec import load_profile, profile_names

PROFILE = "bunqueue/v2"
MIN_CASES = 300
MIN_COVERAGE = 0.90
TOKEN = "qw-test-token"
BAD = (Verdict.FAIL, Verdict.ERROR)


def _summary(run: TargetRun, verdicts: Iterable[Verdict] = BAD) -> list[str]:
    out = []
    for r in run.results:
        if r.verdict in verdicts:
            why = r.error or "; ".join(c.message for c in r.failed_checks[:2])
            out.append(f"{r.verdict} {r.case.id}: {why[:300]}")
    return out


async def _run(server: BunqueueServer, select: tuple[str, ...], **kwargs) -> TargetRun:
    async with server:
        return await run_target("bunqueue", f"127.0.0.1:{server.port}", profile=PROFILE,
                                select=select, **kwargs)


def _failing(run: TargetRun) -> set[str]:
    return {r.case.id for r in run.results if r.verdict is Verdict.FAIL}


@pytest.fixture(scope="module")
def embedded_run() -> TargetRun:
    return run_target_sync("bunqueue", "embedded", profile=PROFILE)


def test_reference_server_passes_every_must_case(embedded_run: TargetRun) -> None:
    assert not _summary(embedded_run), "\n".join(_summary(embedded_run))
    assert len(embedded_run.results) >= MIN_CASES


def _residue_problems(run: TargetRun) -> list[str]:
    """What the run left on the server (the cases' own cleanup must remove it all: nothing
    appears between the inventories) or broke, as report lines; [] for a clean run."""
    assert run.residue is not None, "a bunqueue run takes an inventory of the server"
    res = run.residue
    assert "queues" in res.kinds and "webhooks" in res.kinds and "Prometheus" in res.probes
    if res.clean and not res.residue.appeared:
        return []
    return res.lines()


def test_the_suite_leaves_the_reference_server_as_it_found_it(embedded_run: TargetRun) -> None:
    assert not _residue_problems(embedded_run), "\n".join(_residue_problems(embedded_run))


def test_requirement_coverage(embedded_run: TargetRun) -> None:
    cov = embedded_run.coverage
    assert cov.ratio >= MIN_COVERAGE, f"not exercised: {cov.not_exercised}"
    profile = load_profile(PROFILE)
    server_ids = {r for r, q in profile.requirements.items() if q.subject != "client"}
    cited = {rid for c in load_cases("bunqueue", PROFILE) for rid in c.requirements}
    assert len(server_ids & cited) / len(server_ids) >= MIN_COVERAGE


def test_every_command_has_a_shape_case() -> None:
    profile = load_profile(PROFILE)
    cases = load_cases("bunqueue", PROFILE)
    shaped = {c.command for c in cases if "shape" in c.tags}
    judged = {c.command for c in cases if c.command}
    for name in profile.model.commands:
        assert name in shaped or name in judged, f"no case sends {name}"


def test_every_bunqueue_profile_loads() -> None:
    for name in profile_names("bunqueue"):
        cases = load_cases("bunqueue", name)
        assert len(cases) >= MIN_CASES, name


def test_every_limit_use_is_probed() -> None:
    profile = load_profile(PROFILE)
    ids = {c.id for c in load_cases("bunqueue", PROFILE)}
    for limit in profile.limits.values():
        if any(use[1][0] in ("definitions", "commands") for use in limit.uses):
            assert any(i.startswith(f"bunqueue.limit.{limit.name}.") for i in ids), limit.name


# -- broken servers -----------------------------------------------------------------------------
SLICE = ("bunqueue.env.*", "bunqueue.frame.single", "bunqueue.frame.coalesced",
         "bunqueue.shape.*", "bunqueue.lock.*", "bunqueue.hello.*", "bunqueue.job.push-pull-ack",
         "bunqueue.job.priority-order", "bunqueue.queue.pause-resume",
         "bunqueue.limit.queue_name_length.PUSH.*", "bunqueue.limit.queue_name_length.Pause.*",
         "bunqueue.limit.priority.PUSH.*")


class _AsciiReqIdConnection(BunqueueConnection):
    """Breaks BQ-ENV-2: a reqId is echoed with its non-ASCII characters replaced."""

    __slots__ = ()

    @staticmethod
    def with_req_id(request, reply):
        reply = BunqueueConnection.with_req_id(request, reply)
        rid = reply.get("reqId", UNDEFINED)
        if isinstance(rid, str):
            reply["reqId"] = rid.encode("ascii", "replace").decode("ascii")
        return reply


class _AsciiReqIdServer(BunqueueServer):
    """A server whose connections break BQ-ENV-2 (:class:`_AsciiReqIdConnection`)."""

    connection = _AsciiReqIdConnection


def _lenient_gate(server: BunqueueServer, dropped: str) -> RequestGate:
    """The server's request gate with a validator that lets rule ``dropped`` pass."""
    validator = _LenientValidator(BunqueueValidator(server.profile), dropped)
    return RequestGate(server.engine, server.gate.tokens, validator=validator)


class _LongQueueNameServer(BunqueueServer):
    """Breaks BQ-LIMIT-1: queue names longer than the limit are accepted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = _lenient_gate(self, "BQ-LIMIT-1")


class _LenientValidator:
    def __init__(self, inner, dropped: str):
        self.inner, self.dropped = inner, dropped

    def request_is_valid(self, msg) -> bool:
        return not self.request_violations(msg)

    def request_violations(self, msg):
        return tuple(v for v in self.inner.request_violations(msg)
                     if v.requirement != self.dropped)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _NoLockEngine(BunqueueEngine):
    """Breaks BQ-LOCK-2: ACK, ACKB and FAIL ignore lock tokens."""

    def _check_lock(self, job, token, now):
        return None


class _HelloV3Engine(BunqueueEngine):
    """Breaks BQ-HELLO-2: Hello announces the next protocol version."""

    def handle(self, conn_id, request):
        reply = super().handle(conn_id, request)
        if isinstance(reply, dict) and request.get("cmd") == "Hello" and reply.get("ok"):
            reply = dict(reply, protocolVersion=reply["protocolVersion"] + 1)
        return reply


class _NoAuthGate(RequestGate):
    def answer(self, conn, request):
        conn.authenticated = True
        return super().answer(conn, request)


class _NoAuthGateServer(BunqueueServer):
    """Breaks BQ-AUTH-2: with tokens configured, commands before Auth are served anyway."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = _NoAuthGate(self.engine, self.gate.tokens)


def _server(cls=BunqueueServer, engine_cls=None, **kwargs) -> BunqueueServer:
    engine = engine_cls(PROFILE) if engine_cls else None
    return cls(PROFILE, "127.0.0.1", 0, tick_interval=EMBEDDED_TICK, engine=engine, **kwargs)


BROKEN = {
    "reqid-not-verbatim": (lambda: _server(_AsciiReqIdServer), {"bunqueue.env.reqid-echo"}),
    # PUSH adds jobs: the name rule is stated (BQ-LIMIT-1); Pause only looks the queue up, and
    # its rule (BQ-LIMIT-13) is still applied by this server
    "long-queue-names": (lambda: _server(_LongQueueNameServer),
                         {"bunqueue.limit.queue_name_length.PUSH.queue"}),
    # bunqueue.lock.pullb-tokens also breaks, but on BQ-LOCK-4, a reading (NON-STRICT)
    "lock-tokens-ignored": (lambda: _server(engine_cls=_NoLockEngine),
                            {"bunqueue.lock.ack-without-token", "bunqueue.lock.ack-wrong-token",
                             "bunqueue.lock.fail-wrong-token", "bunqueue.lock.other-jobs-token",
                             "bunqueue.lock.ackb-without-tokens"}),
    "hello-version": (lambda: _server(engine_cls=_HelloV3Engine), {"bunqueue.hello.version"}),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.asyncio
async def test_broken_server_fails_exactly_the_matching_cases(name: str) -> None:
    make, expected = BROKEN[name]
    run = await _run(make(), SLICE)
    assert len(run.results) > 80
    errors = _summary(run, (Verdict.ERROR,))
    assert not errors, "\n".join(errors)
    assert _failing(run) == expected, "\n".join(_summary(run))
    for r in run.results:
        if r.case.id in expected:
            assert any(c.requirement for c in r.failed_checks if c.level == "MUST")


@pytest.mark.asyncio
async def test_auth_cases_with_a_token() -> None:
    run = await _run(_server(auth_tokens=(TOKEN,)),
                     ("bunqueue.auth.*", "bunqueue.job.push-pull-ack", "bunqueue.env.*"),
                     auth_token=TOKEN)
    assert not _summary(run), "\n".join(_summary(run))
    assert {r.case.id for r in run.results} >= {"bunqueue.auth.required",
                                                "bunqueue.auth.invalid-token"}


@pytest.mark.asyncio
async def test_auth_gate_removed_is_detected() -> None:
    run = await _run(_server(_NoAuthGateServer, auth_tokens=(TOKEN,)),
                     ("bunqueue.auth.*", "bunqueue.job.push-pull-ack"), auth_token=TOKEN)
    assert _failing(run) == {"bunqueue.auth.required", "bunqueue.auth.invalid-token"}, \
        "\n".join(_summary(run))


def test_parallel_run_gives_the_serial_verdicts(embedded_run: TargetRun) -> None:
    """--jobs 8 (exclusive cases alone) judges every case as the serial run does."""
    parallel = run_target_sync("bunqueue", "embedded", profile=PROFILE, jobs=8)
    assert [r.case.id for r in parallel.results] == [r.case.id for r in embedded_run.results]
    differ = [f"{s.case.id}: serial {s.verdict}, parallel {p.verdict}: "
              f"{(p.error or '; '.join(c.message for c in p.failed_checks))[:200]}"
              for s, p in zip(embedded_run.results, parallel.results) if s.verdict != p.verdict]
    assert not differ, "\n".join(differ)
    assert not _residue_problems(parallel), "\n".join(_residue_problems(parallel))


class _LookupNamesServer(BunqueueServer):
    """Breaks BQ-LIMIT-13, a reading: commands that only look a queue up take any name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = _lenient_gate(self, "BQ-LIMIT-13")


@pytest.mark.asyncio
async def test_breaking_a_reading_is_non_strict_not_fail() -> None:
    """The levels policy: a requirement that is a reading of the documents (basis implied) is
    a SHOULD, so a server that breaks it is NON-STRICT and the run does not fail."""
    run = await _run(_server(_LookupNamesServer),
                     ("bunqueue.limit.queue_name_length.Pause.*",
                      "bunqueue.limit.queue_name_length.PUSH.*"))
    verdicts = {r.case.id: r.verdict for r in run.results}
    assert verdicts == {"bunqueue.limit.queue_name_length.Pause.queue": Verdict.NON_STRICT,
                        "bunqueue.limit.queue_name_length.PUSH.queue": Verdict.PASS}
    (pause,) = [r for r in run.results if r.verdict is Verdict.NON_STRICT]
    assert {c.requirement for c in pause.failed_checks} == {"BQ-LIMIT-13"}
    assert load_profile(PROFILE).requirements["BQ-LIMIT-13"].basis == "implied"


class _NullTimezoneEngine(BunqueueEngine):
    """Answers every Cron, CronGet and CronList entry with ``timezone: null`` when none is
    set, as bunqueue 2.9.5 does: an optional field the documents type string | undefined."""

    def handle(self, conn_id, request):
        reply = super().handle(conn_id, request)
        if isinstance(reply, dict) and reply.get("ok") is True:
            entries = [reply["cron"]] if isinstance(reply.get("cron"), dict) else \
                reply.get("crons") if isinstance(reply.get("crons"), list) else []
            for entry in entries:
                entry.setdefault("timezone", None)
        return reply


@pytest.mark.asyncio
async def test_a_behaviour_case_does_not_judge_another_commands_reply_shape() -> None:
    """Cron's reply shape is judged by the cases that cite it (BQ-CMD-Cron: the shape cases,
    cron.add-get-list-delete, cron.priority), where the null is the only failing check (BQ-ENV-7,
    SHOULD); every other cron case uses Cron as a step and keeps its verdict."""
    reference = await _run(_server(), ("bunqueue.cron.*", "bunqueue.shape.Cron*"))
    run = await _run(_server(engine_cls=_NullTimezoneEngine),
                     ("bunqueue.cron.*", "bunqueue.shape.Cron*"))
    before = {r.case.id: r.verdict for r in reference.results}
    assert set(before.values()) == {Verdict.PASS}
    changed = {r.case.id for r in run.results if r.verdict is not before[r.case.id]}
    judging = {r.case.id for r in run.results if "BQ-CMD-Cron" in r.case.requirements
               or "BQ-CMD-CronGet" in r.case.requirements
               or "BQ-CMD-CronList" in r.case.requirements}
    assert changed and changed <= judging, sorted(changed - judging)
    assert len(before) - len(judging) >= 8  # behaviour cases that kept their verdict
    for r in run.results:
        if r.case.id in changed:
            assert r.verdict is Verdict.NON_STRICT
            assert {c.requirement for c in r.failed_checks} == {"BQ-ENV-7"}
    observed = [c for r in run.results if r.case.id not in judging for c in r.checks
                if c.kind == "shape-observed"]
    assert observed and all(c.ok and c.level == "INFO" for c in observed)


@pytest.mark.asyncio
async def test_auth_cases_without_a_token_are_not_counted_as_covered() -> None:
    """Without --auth-token the suite cannot tell a server with tokens from one without, so
    the cases that need one only observe (INFO, a note saying how to cover them) and their
    requirements count as observed, not exercised; with a token they are judged."""
    select = ("bunqueue.auth.required", "bunqueue.auth.invalid-token")
    run = await _run(_server(), select)
    assert {r.case.id: r.verdict for r in run.results} == dict.fromkeys(select, Verdict.INFO)
    assert {"BQ-AUTH-2", "BQ-AUTH-3"} <= set(run.coverage.observed)
    assert not {"BQ-AUTH-2", "BQ-AUTH-3"} & set(run.coverage.exercised)
    for r in run.results:
        assert any(e.direction == "note" and "--auth-token" in e.note for e in r.transcript.events)
    judged = await _run(_server(auth_tokens=(TOKEN,)), select, auth_token=TOKEN)
    assert {r.verdict for r in judged.results} == {Verdict.PASS}
    assert {"BQ-AUTH-2", "BQ-AUTH-3"} <= set(judged.coverage.exercised)
