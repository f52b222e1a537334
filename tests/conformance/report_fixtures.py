"""Synthetic conformance runs for the report tests: real encoded bunqueue frames in the
transcripts, one case of every verdict, built directly from the model (no runner)."""

from __future__ import annotations

from queuewire.codecs.bunqueue import encode_frame
from queuewire.conformance.model import (
    Case,
    CaseResult,
    Check,
    Coverage,
    TargetRun,
    Transcript,
    Verdict,
    verdict_of,
)
from queuewire.spec import load_profile

PROFILE = "bunqueue/v2"
PUSH = {"cmd": "PUSH", "queue": "qw-report-test", "data": {"n": 1}, "reqId": "r1"}
# The reply carries control characters and markup, as a hostile server might send.
EVIL = "bad \x00\x1b<script>alert(1)</script> & done"
ERROR_REPLY = {"ok": False, "error": EVIL, "reqId": "r1"}
OK_REPLY = {"ok": True, "id": "job-1", "reqId": "r1"}


def push_frame() -> bytes:
    return encode_frame(PUSH, PROFILE)


def requirement_ids(level: str, n: int) -> list[str]:
    reqs = load_profile(PROFILE).requirements
    return [k for k, r in reqs.items() if r.level == level and r.subject == "server"][:n]


MUST_A, MUST_B, MUST_C = requirement_ids("MUST", 3)
(SHOULD_A,) = requirement_ids("SHOULD", 1)


def transcript(reply: dict | None, *, close: bool = False) -> Transcript:
    t = Transcript(started=0.0)
    t.events.clear()
    t.add(1, "open", note="connected to 127.0.0.1:1")
    t.events[-1].t = 0.0001
    t.add(1, "send", push_frame(), PUSH)
    t.events[-1].t = 0.0012
    if reply is not None:
        t.add(1, "recv", encode_frame(reply, PROFILE), reply)
        t.events[-1].t = 0.0034
    if close:
        t.add(1, "close", note="closed by the peer (EOF)")
        t.events[-1].t = 0.0040
    return t


def result(case_id: str, checks: list[Check], *, reqs: tuple[str, ...], error: str | None = None,
           unimplemented: bool = False, info: bool = False, known_failing: bool = False,
           reply: dict | None = None, title: str = "") -> CaseResult:
    case = Case(id=case_id, title=title or f"synthetic {case_id}", protocol="bunqueue",
                requirements=reqs, command="PUSH", info=info, source="report_fixtures.py")
    verdict = verdict_of(checks, error=error, unimplemented=unimplemented, info=info)
    return CaseResult(case, verdict, checks, transcript(reply), 0.0125, error=error,
                      reproduction=f"queuewire conform server --protocol bunqueue --target "
                                   f"127.0.0.1:1 --select {case_id}",
                      known_failing=known_failing)


def results(*, stale: bool = False) -> list[CaseResult]:
    out = [
        result("bunqueue.synthetic.pass", [Check(MUST_A, "MUST", True, "reply", "PUSH answered ok",
                                                 {"ok": {}}, OK_REPLY, 0)],
               reqs=(MUST_A,), reply=OK_REPLY),
        result("bunqueue.synthetic.fail", [
            Check(MUST_B, "MUST", False, "reply", "PUSH must be answered ok, got: " + EVIL,
                  {"ok": {"id": {"$type": "str"}}}, ERROR_REPLY, 0),
            Check(MUST_B, "MUST", True, "extra-field", "extra field seen", None, ["x"], 0)],
            reqs=(MUST_B,), reply=ERROR_REPLY),
        result("bunqueue.synthetic.nonstrict", [
            Check(SHOULD_A, "SHOULD", False, "reply", "a SHOULD not followed", {"close": True},
                  "no close", 0)], reqs=(SHOULD_A,), reply=OK_REPLY),
        result("bunqueue.synthetic.error", [], reqs=(MUST_C,), error="cannot connect to 127.0.0.1:1"),
        result("bunqueue.synthetic.unimplemented", [
            Check(MUST_C, "MUST", False, "unimplemented", "unknown command", None,
                  {"ok": False, "error": "Unknown command: PUSH"}, 0)],
            reqs=(MUST_C,), unimplemented=True,
            reply={"ok": False, "error": "Unknown command: PUSH", "reqId": "r1"}),
        result("bunqueue.synthetic.info", [Check(MUST_A, "MUST", True, "behaviour", "observed",
                                                 None, {"seen": 1}, 0)],
               reqs=(MUST_A,), info=True, reply=OK_REPLY),
    ]
    if stale:  # a known-failing case that passes
        out.append(result("bunqueue.synthetic.stale", [Check(MUST_A, "MUST", True, "reply", "ok")],
                          reqs=(MUST_A,), known_failing=True, reply=OK_REPLY))
    return out


def run(*, target: str = "127.0.0.1:1", strict: bool = False, stale: bool = False,
        only: tuple[str, ...] | None = None) -> TargetRun:
    rs = results(stale=stale)
    if only is not None:
        rs = [r for r in rs if r.case.id.rsplit(".", 1)[1] in only]
    applicable = tuple(k for k, r in load_profile(PROFILE).requirements.items()
                       if r.subject != "client")
    exercised = tuple(dict.fromkeys(q for r in rs if r.verdict is not Verdict.ERROR
                                    for q in r.case.requirements))
    out_of_scope = tuple(k for k, r in load_profile(PROFILE).requirements.items()
                         if r.subject == "client")
    return TargetRun(target, "bunqueue", PROFILE, rs, Coverage(applicable, exercised, out_of_scope),
                     "2026-01-01T00:00:00Z", 0.5, strict=strict, server_info={"version": "synthetic"})
