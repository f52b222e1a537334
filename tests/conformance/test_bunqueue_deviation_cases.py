"""The cases of issue 25 ("Deviations missed", cases/bunqueue/deviations.yaml).

Each passes against the reference server and, against a reference server made to answer as
bunqueue 2.9.5 does on the wire (subclassed here, never edited), gets the verdict the
documents support: FAIL on a stated MUST, NON-STRICT on a reading. The webhook cases remove
every webhook the lenient server registered (their cleanup), so no run leaves residue.
"""

from __future__ import annotations

from typing import Any

import pytest

from queuewire.codecs.bunqueue import UNDEFINED
from queuewire.codecs.validation import BunqueueValidator
from queuewire.conformance.model import TargetRun, Verdict
from queuewire.conformance.runner import load_cases, run_target
from queuewire.conformance.targets import EMBEDDED_TICK
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer, EngineConfig
from queuewire.reference_server.bunqueue.gate import RequestGate

PROFILE = "bunqueue/v2"
SELECT = "bunqueue.*"
#: case id -> its verdict against a server answering as bunqueue 2.9.5 does
EXPECTED = {
    "bunqueue.webhook.ssrf-trailing-dot": Verdict.FAIL,
    "bunqueue.webhook.ssrf-resolver-aliases": Verdict.NON_STRICT,
    "bunqueue.log.level-undocumented": Verdict.NON_STRICT,
    "bunqueue.job.cancel-reply-keys": Verdict.PASS,  # an undocumented key is INFO, never more
    "bunqueue.customid.lookup-failed": Verdict.FAIL,
    "bunqueue.queue.get-jobs-paused-waiting": Verdict.FAIL,
    "bunqueue.queue.get-jobs-priority-waiting": Verdict.FAIL,
    "bunqueue.job.discard-locked-active": Verdict.FAIL,
    "bunqueue.job.update-completed": Verdict.FAIL,
    "bunqueue.monitor.metrics-active-connections": Verdict.NON_STRICT,
}
IDS = tuple(EXPECTED)


class _Like295Engine(BunqueueEngine):
    """The reference engine answering as bunqueue 2.9.5 did on the wire (issue 25): a
    cancelled job's reply carries ``id: undefined``; GetJobByCustomId does not find a failed
    job; GetJobs with state waiting leaves out jobs with a priority and jobs of a paused
    queue; Discard refuses a job pulled with an owner; Update refuses a finished job; Metrics
    says activeConnections 0."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.locked: set[str] = set()

    def _state(self, conn_id: str | None, job_id: Any) -> Any:
        reply = super().handle(conn_id, {"cmd": "GetState", "id": job_id})
        return reply.get("state") if isinstance(reply, dict) else None

    def handle(self, conn_id, request):
        cmd = request.get("cmd")
        if cmd == "Discard" and request.get("id") in self.locked:
            return {"ok": False, "error": f"Lock token required for job {request['id']}"}
        if cmd == "Update" and self._state(conn_id, request.get("id")) in ("completed", "failed"):
            return {"ok": False, "error": "Job not found or cannot be updated"}
        reply = super().handle(conn_id, request)
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            return reply
        if cmd == "Cancel":
            reply = {**reply, "id": UNDEFINED}
        elif cmd == "PULL" and request.get("owner") and reply.get("job"):
            self.locked.add(reply["job"]["id"])
        elif cmd == "GetJobByCustomId" and self._state(conn_id, reply["job"]["id"]) == "failed":
            reply = {"ok": False, "error": "Job not found"}
        elif cmd == "GetJobs" and request.get("state") == "waiting":
            paused = super().handle(conn_id, {"cmd": "IsPaused", "queue": request["queue"]})
            keep = [] if paused.get("paused") else [j for j in reply["jobs"]
                                                    if not j.get("priority")]
            reply = {**reply, "jobs": keep}
        elif cmd == "Metrics":
            reply = {**reply, "metrics": {**reply["metrics"], "activeConnections": 0}}
        return reply


class _AnyLogLevel:
    """The request validator, but AddLog's level may be anything (as on 2.9.5)."""

    def __init__(self, inner: BunqueueValidator):
        self.inner = inner

    def request_is_valid(self, msg) -> bool:
        return not self.request_violations(msg)

    def request_violations(self, msg):
        return tuple(v for v in self.inner.request_violations(msg)
                     if not (msg.get("cmd") == "AddLog" and v.path == "/level"))

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _Like295Server(BunqueueServer):
    """Webhook URLs are not checked for addresses (2.9.5 lets the names of issue 25 through),
    AddLog takes any level, and the engine is :class:`_Like295Engine`."""

    def __init__(self) -> None:
        engine = _Like295Engine(PROFILE, config=EngineConfig(allow_private_webhooks=True))
        super().__init__(PROFILE, "127.0.0.1", 0, tick_interval=EMBEDDED_TICK, engine=engine)
        self.gate = RequestGate(self.engine, self.gate.tokens,
                                validator=_AnyLogLevel(BunqueueValidator(self.profile)))


async def _run(server: BunqueueServer) -> TargetRun:
    async with server:
        return await run_target("bunqueue", f"127.0.0.1:{server.port}", profile=PROFILE,
                                select=IDS)


def _verdicts(run: TargetRun) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def _why(run: TargetRun) -> str:
    return "\n".join(f"{r.verdict} {r.case.id}: {r.error or [c.message for c in r.failed_checks]}"
                     for r in run.results)


def test_the_cases_load_with_existing_requirements() -> None:
    cases = {c.id: c for c in load_cases("bunqueue", PROFILE)}
    for case_id in IDS:
        assert case_id in cases, case_id
        assert cases[case_id].requirements
    for case_id in ("bunqueue.webhook.ssrf-trailing-dot", "bunqueue.webhook.ssrf-resolver-aliases",
                    "bunqueue.monitor.metrics-active-connections"):
        assert cases[case_id].exclusive, case_id  # server-wide objects and figures


@pytest.mark.asyncio
async def test_every_case_passes_against_the_reference_server() -> None:
    run = await _run(BunqueueServer(PROFILE, "127.0.0.1", 0, tick_interval=EMBEDDED_TICK))
    assert _verdicts(run) == dict.fromkeys(IDS, Verdict.PASS), _why(run)
    assert run.residue is not None and not run.residue.residue.appeared


@pytest.mark.asyncio
async def test_a_server_answering_as_2_9_5_gets_the_documented_verdicts() -> None:
    run = await _run(_Like295Server())
    assert _verdicts(run) == EXPECTED, _why(run)
    # the webhooks the lenient server registered were removed by the cases' cleanup
    assert run.residue is not None and not run.residue.residue.appeared, run.residue.lines()
    by_id = {r.case.id: r for r in run.results}
    dot = by_id["bunqueue.webhook.ssrf-trailing-dot"]
    assert [c.level for c in dot.failed_checks] == ["MUST", "MUST"]  # both URLs judged
    aliases = by_id["bunqueue.webhook.ssrf-resolver-aliases"]
    assert [c.level for c in aliases.failed_checks] == ["SHOULD"] * 4
    sent = [e.decoded.get("cmd") for e in aliases.transcript.events
            if e.direction == "send" and isinstance(e.decoded, dict)]
    assert sent == ["AddWebhook"] * 4 + ["RemoveWebhook"] * 4


@pytest.mark.asyncio
async def test_refused_webhooks_leave_the_cleanup_nothing_to_remove() -> None:
    run = await _run(BunqueueServer(PROFILE, "127.0.0.1", 0, tick_interval=EMBEDDED_TICK))
    dot = next(r for r in run.results if r.case.id == "bunqueue.webhook.ssrf-trailing-dot")
    sent = [e.decoded.get("cmd") for e in dot.transcript.events
            if e.direction == "send" and isinstance(e.decoded, dict)]
    assert sent == ["AddWebhook", "AddWebhook"]
    assert all(c.ok for c in dot.checks)


@pytest.mark.asyncio
async def test_an_undocumented_key_is_reported_whatever_its_value() -> None:
    run = await _run(_Like295Server())
    cancel = next(r for r in run.results if r.case.id == "bunqueue.job.cancel-reply-keys")
    extra = [c for c in cancel.checks if c.kind == "extra-field"]
    assert extra and extra[0].level == "INFO" and "id" in extra[0].actual
    assert cancel.verdict is Verdict.PASS
