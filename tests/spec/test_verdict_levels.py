"""The verdicts of issue 25 ("Verdicts"), each pinned where it is decided: a FAIL rests on a
sentence of the documents, readings are SHOULD, and what queuewire decided where the documents
are silent only observes (spec/README.md, "Levels and basis").

* BQ-JOB-14 (retry delays) and BQ-DEPS-3 (dependsOn children) are decisions: their cases
  observe, so a server that does otherwise is INFO, while a stated MUST in the same case
  (BQ-DEPS-2) still fails it; BQ-JOB-15 is a reading (implied), not a statement.
* A range given as a comment in a type listing is an implied SHOULD, every one of them.
* BQ-CLIENT-6 is a SHOULD like the other statements of bunqueue's own client; the client
  scenarios cite a client requirement (BQ-ENV-8) for what a client reports of a refusal.
* BQ-HELLO-3 is judged: concurrent replies without Hello are NON-STRICT.
* "MB": a valid size between 10^6·N and 2^20·N bytes cites the band's SHOULD, one beyond both
  readings the limit's MUST.
"""

from __future__ import annotations

import asyncio

import pytest

from queuewire.conformance import bunqueue_logic
from queuewire.conformance.client.scenarios import load_scenarios
from queuewire.conformance.context import CaseContext
from queuewire.conformance.generate_bunqueue import limit_cases, reading_band
from queuewire.conformance.loader import load_cases
from queuewire.conformance.model import verdict_of
from queuewire.judge import Verdict, requirement_verdict
from queuewire.spec import load_profile

PROFILES = ("bunqueue/v2", "bunqueue/2.9.5")


def _case(profile: str, case_id: str):
    (case,) = [c for c in load_cases("bunqueue", profile) if c.id == case_id]
    return case


def _context(profile: str, case_id: str) -> CaseContext:
    return CaseContext(_case(profile, case_id), load_profile(profile), "127.0.0.1", 1)


def _verdict(ctx: CaseContext) -> Verdict:
    return verdict_of(ctx.checks, info=ctx.info)


# -- 1. no NON-STRICT without a sentence ------------------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("rid", ["BQ-JOB-14", "BQ-DEPS-3"])
def test_the_decisions_rest_on_no_quote(profile, rid):
    req = load_profile(profile).requirements[rid]
    assert (req.level, req.basis, req.source, req.quote) == ("SHOULD", "decision", "QW", None)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("case_id,rid", [("bunqueue.job.backoff-exponential", "BQ-JOB-14"),
                                         ("bunqueue.deps.children-values", "BQ-DEPS-3")])
def test_a_decision_not_followed_is_observed(profile, case_id, rid):
    assert _case(profile, case_id).info
    ctx = _context(profile, case_id)
    ctx.check(False, "jittered delays", requirement=rid)
    ctx.check(False, "a timing the documents do not give", requirement="BQ-JOB-5",
              level="SHOULD")
    assert _verdict(ctx) is Verdict.INFO
    assert [(c.requirement, c.level, c.ok) for c in ctx.checks] == [
        (rid, "INFO", True), ("BQ-JOB-5", "INFO", True)]
    assert ctx.checks[0].message.startswith("observed, not judged") and \
        ctx.checks[0].message.endswith("jittered delays")


@pytest.mark.parametrize("profile", PROFILES)
def test_a_stated_must_still_fails_an_observing_case(profile):
    ctx = _context(profile, "bunqueue.deps.children-values")
    ctx.check(False, "an error for a job without children", requirement="BQ-DEPS-2")
    assert _verdict(ctx) is Verdict.FAIL
    assert [(c.requirement, c.level, c.ok) for c in ctx.checks] == [("BQ-DEPS-2", "MUST", False)]


def test_a_judged_case_still_judges_its_should():
    ctx = _context("bunqueue/v2", "bunqueue.hello.absent")
    assert not ctx.info
    ctx.check(False, "a SHOULD not followed", requirement="BQ-JOB-15")
    assert _verdict(ctx) is Verdict.NON_STRICT
    assert [(c.level, c.ok) for c in ctx.checks] == [("SHOULD", False)]


@pytest.mark.parametrize("profile", PROFILES)
def test_ackb_all_or_nothing_is_a_reading(profile):
    req = load_profile(profile).requirements["BQ-JOB-15"]
    assert (req.level, req.basis) == ("SHOULD", "implied")
    assert requirement_verdict(load_profile(profile), "BQ-JOB-15") is Verdict.NON_STRICT


# -- 2. one rule for ranges written as comments ----------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
def test_every_range_comment_is_an_implied_should(profile):
    prof = load_profile(profile)
    raw = prof.tree["requirements"]
    ranged = {rid for rid, r in prof.requirements.items()
              if rid.startswith("BQ-LIMIT-") and r.quote and "//" in r.quote}
    assert ranged == {"BQ-LIMIT-10", "BQ-LIMIT-11", "BQ-LIMIT-12"}
    for rid in ranged:
        req = prof.requirements[rid]
        assert (req.level, req.basis, raw[rid]["kind"]) == ("SHOULD", "implied", "range-comment")
    kinds = {rid for rid, r in raw.items() if r.get("kind") == "range-comment"}
    assert kinds == ranged
    # the ranges a validation section or table states stay MUSTs
    for rid in ("BQ-LIMIT-1", "BQ-LIMIT-2", "BQ-LIMIT-3", "BQ-LIMIT-4", "BQ-LIMIT-9"):
        assert (prof.requirements[rid].level, prof.requirements[rid].basis) == ("MUST", "stated")


# -- 3. clients -------------------------------------------------------------------------------
@pytest.mark.parametrize("profile", PROFILES)
def test_bunqueue_s_own_client_is_a_should(profile):
    prof = load_profile(profile)
    raw = prof.tree["requirements"]
    sdk = {rid: prof.requirements[rid].level for rid, r in raw.items()
           if r.get("kind") == "client-sdk"}
    assert sdk["BQ-CLIENT-6"] == "SHOULD"
    assert {rid for rid, level in sdk.items() if level != "SHOULD"} == {"BQ-CLIENT-3",
                                                                         "BQ-CLIENT-4"}
    assert all(raw[rid].get("level-reason") for rid in ("BQ-CLIENT-3", "BQ-CLIENT-4"))
    assert requirement_verdict(prof, "BQ-CLIENT-6") is Verdict.NON_STRICT


@pytest.mark.parametrize("profile", PROFILES)
def test_a_client_s_refusals_cite_what_binds_clients(profile):
    prof = load_profile(profile)
    assert prof.requirements["BQ-ENV-4"].subject == "server"
    assert (prof.requirements["BQ-ENV-8"].subject, prof.requirements["BQ-ENV-8"].level,
            prof.requirements["BQ-ENV-8"].basis) == ("client", "SHOULD", "implied")
    refusals = [e for sc in load_scenarios("bunqueue", prof) for e in sc.expect
                if e.error_contains or e.ok is False and e.error_type is None]
    assert refusals and {e.requirement for e in refusals} == {"BQ-ENV-8"}
    for sc in load_scenarios("bunqueue", prof):
        cited = {e.requirement for e in sc.expect} | set(sc.requirements)
        assert "BQ-ENV-4" not in cited, sc.id


# -- 4. no Hello, still concurrent -----------------------------------------------------------
@pytest.mark.parametrize("order,verdict", [(["slow", "fast"], Verdict.PASS),
                                           (["fast", "slow"], Verdict.NON_STRICT),
                                           (["slow"], Verdict.NON_STRICT)])
def test_pipelined_replies_without_hello_are_judged(monkeypatch, order, verdict):
    async def replies_in(ctx, pull_timeout):
        return order

    monkeypatch.setattr(bunqueue_logic, "_slow_fast_order", replies_in)
    ctx = _context("bunqueue/v2", "bunqueue.hello.absent")
    assert not ctx.info
    asyncio.run(bunqueue_logic.no_hello_order(ctx))
    assert _verdict(ctx) is verdict
    assert [c.requirement for c in ctx.checks] == ["BQ-HELLO-3"]
    req = load_profile("bunqueue/v2").requirements["BQ-HELLO-3"]
    assert (req.level, req.basis) == ("SHOULD", "stated")


# -- 5. the reading of MB ---------------------------------------------------------------------
BANDS = {"job_data_bytes": ("BQ-LIMIT-15", "BQ-LIMIT-3", 10_000_000, 10 * 2**20),
         "max_frame_bytes": ("BQ-FRAME-4", "BQ-FRAME-2", 64_000_000, 64 * 2**20)}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("limit", sorted(BANDS))
def test_the_band_between_the_readings_is_a_should(profile, limit):
    prof = load_profile(profile)
    band, beyond, decimal, binary = BANDS[limit]
    lim = prof.limits[limit]
    assert (lim.max if lim.max is not None else lim.value) == binary
    assert lim.requirement == beyond
    assert (prof.requirements[band].level, prof.requirements[band].basis) == ("SHOULD", "implied")
    assert (prof.requirements[beyond].level, prof.requirements[beyond].basis) == ("MUST", "stated")
    assert reading_band(prof, limit, binary) == band
    assert reading_band(prof, limit, decimal + 1) == band
    assert reading_band(prof, limit, decimal) is None  # under both readings
    assert reading_band(prof, limit, binary + 1) is None  # beyond both: the limit's MUST


@pytest.mark.parametrize("profile", PROFILES)
def test_generated_data_limits_cite_the_band_inside_it_and_the_must_beyond(profile):
    cases = [c for c in limit_cases(profile) if c.id.startswith("bunqueue.limit.job_data_bytes.")]
    assert {c.id.split(".")[3] for c in cases} >= {"PUSH", "PUSHB", "Update"}
    for case in cases:
        steps = case.params["steps"] if case.params else case.steps
        probes = [s["expect"] for s in steps if "expect" in s and "requirement" in s["expect"]]
        assert [("ok" in e, e["requirement"]) for e in probes] == [
            (True, "BQ-LIMIT-15"), (True, "BQ-LIMIT-15"), (False, "BQ-LIMIT-3")], case.id
        assert case.requirements[:2] == ("BQ-LIMIT-3", "BQ-LIMIT-15")


@pytest.mark.parametrize("profile", PROFILES)
def test_a_frame_of_64_mib_is_judged_by_the_band(profile):
    case = _case(profile, "bunqueue.frame.length-at-limit")
    assert case.requirements[0] == "BQ-FRAME-4"
    assert _case(profile, "bunqueue.frame.length-over-limit").requirements == ("BQ-FRAME-2",)
    prof = load_profile(profile)
    assert reading_band(prof, "max_frame_bytes", prof.model.max_frame_bytes) == "BQ-FRAME-4"
