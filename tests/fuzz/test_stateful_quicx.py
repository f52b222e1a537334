"""The stateful quicx dispatch fuzzer (queuewire.fuzz.stateful_quicx): clean against the
reference daemon in both profiles, and catching (and shrinking) deliberately broken daemons,
each by the requirement id of the rule they break. The model reads the profile's flags;
nothing here restates a message or a code."""

from __future__ import annotations

import time

import pytest

from queuewire.fuzz.stateful_quicx import (
    DispatchSpec,
    EmbeddedQuicx,
    dispatch_machine,
    run_stateful_quicx,
)
from queuewire.reference_server.quicx import QuicxEngine
from queuewire.spec import load_profile

SHRUNK_MAX_STEPS = 4     # a broken daemon's minimal reproduction is a handful of steps


@pytest.fixture(scope="module")
def target():
    with EmbeddedQuicx("quicx/v1") as server:
        yield server


def test_the_model_reads_the_profile_flags():
    v1, notes = DispatchSpec(load_profile("quicx/v1")), DispatchSpec(load_profile("quicx/1.0.3"))
    assert v1.wait_when_empty and v1.ready_after_result and v1.stats and not v1.forward
    assert not notes.wait_when_empty and not notes.ready_after_result and notes.forward
    assert v1.requeue and notes.requeue
    assert v1.ready_req == "QX-READY-3" and notes.ready_req == "QX-READY-101"
    with pytest.raises(ValueError):
        DispatchSpec(load_profile("bunqueue/v2"))


@pytest.mark.parametrize("profile", ["quicx/v1", "quicx/1.0.3"])
def test_the_reference_daemon_runs_clean(profile):
    started = time.monotonic()
    report = run_stateful_quicx("embedded", profile, max_examples=20, seed=20261124,
                                step_count=20)
    assert report.passed, report.summary()
    assert time.monotonic() - started < 30


def test_a_host_port_target_is_driven_over_tcp(target):
    report = run_stateful_quicx(f"{target.host}:{target.port}", "quicx/v1", max_examples=3,
                                seed=1)
    assert report.passed, report.summary()
    assert report.target == f"{target.host}:{target.port}"


def test_a_held_task_is_requeued_when_its_worker_goes(target):
    machine = dispatch_machine(target.host, target.port, "quicx/v1")()
    try:
        machine.submit("qw_a")
        machine.submit("qw_b")
        machine.ready(0)
        [held] = machine.workers[0].in_flight
        machine.disconnect(0)
        machine.daemon_agrees()
        assert list(machine.queue)[0] == held and machine.queue_because == "QX-WORKER-1"
        machine.ready(1)   # the requeued task comes first (QX-QUEUE-1)
        assert machine.workers[1].in_flight == [held]
        machine.finish(1, done=True, known=True)
        machine.finish(1, done=False, known=False)   # answered MSG_ERROR, nothing changes
        machine.daemon_agrees()
    finally:
        machine.teardown()


# -- broken daemons are caught and shrunk --------------------------------------------------------
class LosesTasks(QuicxEngine):
    """A task in flight on a worker whose connection closes is dropped, not requeued."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._requeue = False


class DispatchesTwice(QuicxEngine):
    """A task handed to a worker stays at the head of the queue: the next READY gets it too."""

    def _hand(self, peer, task, out):
        super()._hand(peer, task, out)
        self.queue.appendleft(task)


@pytest.mark.parametrize(("engine_class", "requirement", "level"), [
    (LosesTasks, "QX-WORKER-1", "SHOULD"),
    (DispatchesTwice, "QX-READY-3", "MUST"),
], ids=lambda v: v.__name__ if isinstance(v, type) else v)
def test_a_broken_daemon_is_caught_and_shrunk(engine_class, requirement, level):
    with EmbeddedQuicx("quicx/v1", engine=engine_class("quicx/v1")) as server:
        report = run_stateful_quicx(server, "quicx/v1", max_examples=300, seed=5,
                                    step_count=8)
    assert not report.passed, f"{engine_class.__name__} went unnoticed"
    assert (report.requirement, report.level) == (requirement, level), report.summary()
    assert 1 <= len(report.steps) <= SHRUNK_MAX_STEPS, report.summary()
    assert requirement in report.summary()


# -- queuewire fuzz --stateful ---------------------------------------------------------------------
def test_the_cli_runs_it_against_a_host_port(target):
    from click.testing import CliRunner

    from queuewire.cli import main
    result = CliRunner().invoke(main, ["fuzz", "--stateful", "--protocol", "quicx", "--target",
                                       f"{target.host}:{target.port}", "--max-examples", "3",
                                       "--seed", "1", "--steps", "10"])
    assert result.exit_code == 0, result.output
    assert "3 examples, no violation" in result.output


def test_the_cli_reports_a_violation_with_its_steps(tmp_path):
    from click.testing import CliRunner

    from queuewire.cli import main
    with EmbeddedQuicx("quicx/v1", engine=LosesTasks("quicx/v1")) as server:
        result = CliRunner().invoke(main, [
            "fuzz", "--stateful", "--protocol", "quicx", "--target",
            f"{server.host}:{server.port}", "--max-examples", "300", "--seed", "5", "--steps",
            "8", "--artifacts", str(tmp_path)])
    # a SHOULD not followed is NON-STRICT, as conform calls it, and does not fail the run
    assert result.exit_code == 0, result.output
    assert "NON-STRICT QX-WORKER-1 (SHOULD)" in result.output and "FAIL" not in result.output
    [path] = list(tmp_path.iterdir())
    assert '"requirement": "QX-WORKER-1"' in path.read_text()


def test_it_runs_clean_against_queuewire_serve_quicx():
    import re
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "queuewire.cli", "serve", "quicx", "--port",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"listening on ([\d.]+):(\d+)", line)
        assert match, line
        report = run_stateful_quicx(f"{match[1]}:{match[2]}", "quicx/v1", max_examples=20,
                                    seed=4, step_count=20)
        assert report.passed, report.summary()
    finally:
        proc.terminate()
        proc.wait(10)
