"""The client scenario files: they load, cite defined requirements and never judge above them."""

from __future__ import annotations

import pytest

from queuewire.conformance.client.judges import JUDGES
from queuewire.conformance.client.scenarios import (
    ScenarioError,
    load_scenarios,
    select_scenarios,
)
from queuewire.spec import load_profile

LEVELS = ("MAY", "SHOULD", "MUST")


@pytest.mark.parametrize("profile", ["bunqueue/v2", "bunqueue/2.9.5", "bunqueue/v3"])
def test_packaged_scenarios_load_and_stay_within_their_requirements(profile: str) -> None:
    prof = load_profile(profile)
    scenarios = load_scenarios("bunqueue", prof)
    assert len(scenarios) >= 12
    for sc in scenarios:
        assert sc.id.startswith("bunqueue.client.")
        for item in (*sc.expect, *sc.judge):
            req = prof.requirements[item.requirement]
            assert LEVELS.index(item.level) <= LEVELS.index(req.level), (sc.id, item)
        for j in sc.judge:
            assert j.check in JUDGES


def test_the_issue_scenarios_are_there() -> None:
    ids = {s.id for s in load_scenarios("bunqueue", load_profile("bunqueue/v2"))}
    for part in ("replies-out-of-order", "replies-split", "replies-coalesced", "slow-reply",
                 "drop-mid-reply", "dead-link", "rate-limited", "not-authenticated",
                 "lock-expired", "restart", "heartbeat", "auth"):
        assert f"bunqueue.client.{part}" in ids


def test_a_scenario_runs_where_the_profile_has_its_requirements() -> None:
    """The protocol-3 scenarios cite requirements only bunqueue/v3 defines: they run there
    and nowhere else, with no profile name in the file."""
    v3 = {s.id for s in load_scenarios("bunqueue", load_profile("bunqueue/v3"))}
    for name in ("bunqueue/v2", "bunqueue/2.9.5"):
        other = {s.id for s in load_scenarios("bunqueue", load_profile(name))}
        assert v3 - other == {"bunqueue.client.int64-rule", "bunqueue.client.not-found-is-null"}
        assert other <= v3


def test_select_by_glob() -> None:
    scenarios = load_scenarios("bunqueue", load_profile("bunqueue/v2"))
    assert [s.id for s in select_scenarios(scenarios, ["*split*"])] == ["bunqueue.client.replies-split"]


BAD = [
    ("- {id: a, title: t, requirements: [BQ-NOPE-1], actions: [{op: sleep, ms: 1}], "
     "judge: [{check: reconnected, requirement: BQ-CLIENT-2}]}", "BQ-NOPE-1"),
    ("- {id: a, title: t, requirements: [], actions: [{op: fly}], "
     "judge: [{check: reconnected, requirement: BQ-CLIENT-2}]}", "unknown op"),
    ("- {id: a, title: t, requirements: [], actions: [{op: sleep, ms: 1}], "
     "judge: [{check: reconnected, requirement: BQ-CLIENT-2, level: MUST}]}", "not at most"),
    ("- {id: a, title: t, requirements: [], actions: [{op: sleep, ms: 1}]}", "judges nothing"),
    ("- {id: a, title: t, requirements: [], server: {explode: 1}, actions: [{op: sleep}], "
     "judge: [{check: reconnected, requirement: BQ-CLIENT-2}]}", "unknown server behaviour"),
    ("- {id: a, title: t, requirements: [], actions: [{op: sleep}], "
     "expect: [{action: 3, ok: true, requirement: BQ-CLIENT-2}]}", "no action 3"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_scenario_files_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenarios("bunqueue", load_profile("bunqueue/v2"), text="scenarios:\n" + text)
