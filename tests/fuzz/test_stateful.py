"""The stateful job-lifecycle fuzzer (queuewire.fuzz.stateful): clean against the reference
server, and catching (and shrinking) deliberately broken servers, each by the requirement id
of the transition they break. The model is the spec's job_lifecycle table; nothing here
restates a state either: states are read from the table's rows through SpecLifecycle."""

from __future__ import annotations

import time

import pytest

from queuewire.fuzz.stateful import (
    EmbeddedTarget,
    LifecycleViolation,
    SpecLifecycle,
    lifecycle_machine,
    quiet_config,
    run_stateful,
)
from queuewire.reference_server.bunqueue import BunqueueEngine, NullStore
from queuewire.spec import load_profile

PROFILE = "bunqueue/v2"
SHRUNK_MAX_STEPS = 5     # a broken server's minimal reproduction is a handful of commands


@pytest.fixture(scope="module")
def profile():
    return load_profile(PROFILE)


@pytest.fixture(scope="module")
def target(profile):
    with EmbeddedTarget(profile) as server:
        yield server


def _embedded(profile, engine_class):
    return EmbeddedTarget(profile, engine=engine_class(profile, store=NullStore(),
                                                       config=quiet_config(profile)))


# -- the model is the table ---------------------------------------------------------------------
def test_the_model_is_read_from_the_lifecycle_table(profile):
    spec = SpecLifecycle(profile)
    machine = profile.model.job_lifecycle
    assert spec.states == machine.states
    for t in machine.transitions:  # every row is found by its (state, event)
        assert spec._rows[(t.source, t.event)] is t
    # the roles come from the commands' rows, and agree with each other
    assert spec.fail_final.target == spec.dlq
    assert spec.fail_retry.target == spec.delayed
    assert spec.delay_elapsed.source == spec.delayed
    assert spec.conn_closed.source == spec.active == spec.rows_of("PULL")[0].target
    assert {spec.waiting, spec.delayed} <= set(spec.initial)
    assert spec.row(spec.pullable, "ACK") is None  # no row: the command is refused
    assert spec.level(spec.fail_final.requirement) == "MUST"


# -- the reference server is clean -------------------------------------------------------------
def test_the_reference_server_runs_clean(target):
    started = time.monotonic()
    report = run_stateful(target, PROFILE, max_examples=30, seed=20261123,
                          extra_settings={"stateful_step_count": 25})
    assert report.passed, report.summary()
    assert time.monotonic() - started < 30


def test_a_host_port_target_is_driven_over_tcp(target):
    report = run_stateful(f"{target.host}:{target.port}", PROFILE, max_examples=5, seed=1)
    assert report.passed, report.summary()
    assert report.target == f"{target.host}:{target.port}"


def test_an_unparsable_target_is_refused():
    with pytest.raises(ValueError):
        run_stateful("no-port-here", PROFILE, max_examples=1)


def test_unsaid_attempts_after_retry_dlq_are_learnt_from_the_server(target):
    """Whether RetryDlq resets attempts is unsaid: the model keeps both readings and the
    next FAIL picks the one the server follows (the reference server resets them)."""
    machine = lifecycle_machine(target.host, target.port, PROFILE)()
    try:
        job_id = machine.push(0, False, 2, False)
        for _ in range(2):
            machine.pull(owned=True, then="FAIL", kind="current")
            machine.server_agrees()
        job = machine.model[job_id]
        assert job.state == machine.spec.dlq and job.attempts == {2}
        machine.retry_dlq(job_id=None)
        assert job.attempts == {0, 2}
        machine.pull(owned=True, then="FAIL", kind="current")
        machine.server_agrees()
        assert job.attempts == {1} and job.state == machine.spec.waiting
    finally:
        machine.teardown()


def test_a_stale_token_is_refused_and_changes_nothing(target):
    machine = lifecycle_machine(target.host, target.port, PROFILE)()
    try:
        job_id = machine.push(0, False, 3, True)
        machine.pull(owned=True, then="FAIL", kind="current")   # now delayed, token stale
        machine.promote(job_id=job_id)
        machine.pull(owned=True, then="ACK", kind="stale")      # refused: BQ-LOCK-2
        machine.server_agrees()
        assert machine.model[job_id].state == machine.spec.active
        machine.finish(job_id=job_id, cmd="ACK", kind="current")
        machine.server_agrees()
    finally:
        machine.teardown()


# -- broken servers are caught and shrunk -------------------------------------------------------
class ForgetsTheDlq(BunqueueEngine):
    """A FAIL with no attempts left schedules one more retry instead of the DLQ."""

    def _fail(self, job, error, now, *, final=False, stack=None):
        if not final and job.attempts + 1 >= job.max_attempts:
            job.max_attempts = job.attempts + 2
        super()._fail(job, error, now, final=final, stack=stack)


class IgnoresPriority(BunqueueEngine):
    """Waiting jobs are handed out in push order whatever their priority."""

    @staticmethod
    def _wkey(job):
        return (0, job.seq, job.id)


class AcceptsAnyToken(BunqueueEngine):
    """A locked job is finished with any token at all (but not without one)."""

    def _check_lock(self, job, token, now):
        if job.lock_token is not None and isinstance(token, str):
            return
        super()._check_lock(job, token, now)


class PauseIsIgnored(BunqueueEngine):
    """Pause is recorded (IsPaused says so) but PULL still hands jobs out."""

    def _budget(self, q, now):
        paused, q.paused = q.paused, False
        try:
            return super()._budget(q, now)
        finally:
            q.paused = paused


@pytest.mark.parametrize(("engine_class", "requirement"), [
    (ForgetsTheDlq, "BQ-JOB-5"),
    (IgnoresPriority, "BQ-PUSH-1"),
    (AcceptsAnyToken, "BQ-LOCK-2"),
    (PauseIsIgnored, "BQ-QUEUE-1"),
], ids=lambda v: v.__name__ if isinstance(v, type) else v)
def test_a_broken_server_is_caught_and_shrunk(profile, engine_class, requirement):
    with _embedded(profile, engine_class) as server:
        report = run_stateful(server, profile, max_examples=600, seed=8, step_count=10)
    assert not report.passed, f"{engine_class.__name__} went unnoticed"
    assert report.requirement == requirement, report.summary()
    assert report.level == "MUST"
    assert 1 <= len(report.steps) <= SHRUNK_MAX_STEPS, report.summary()
    assert requirement in report.summary()


def test_a_violation_names_its_requirement_and_level(profile):
    exc = SpecLifecycle(profile).violation("BQ-JOB-5", "job x is 'delayed'")
    assert isinstance(exc, LifecycleViolation) and isinstance(exc, AssertionError)
    assert str(exc).startswith("BQ-JOB-5 (MUST): ")


def test_queuewire_fuzz_stateful_runs_it(target):
    from click.testing import CliRunner

    from queuewire.cli import main
    result = CliRunner().invoke(main, ["fuzz", "--stateful", "--protocol", "bunqueue",
                                       "--target", f"{target.host}:{target.port}",
                                       "--max-examples", "3", "--seed", "1", "--steps", "10"])
    assert result.exit_code == 0, result.output
    assert "3 examples, no violation" in result.output
    refused = CliRunner().invoke(main, ["fuzz", "--stateful", "--protocol", "bunqueue",
                                        "--profile", "quicx/v1", "--max-examples", "1"])
    assert refused.exit_code == 2 and "not a bunqueue profile" in refused.output
