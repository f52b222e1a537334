"""``spec lint`` flags a case check whose level would come from a requirement it does not test
(issue 30: MUST violations inside quicx.producer.utf8-task-type, quicx.worker.fifo and
quicx.heartbeat.from-producer came out NON-STRICT, their level taken from the case's first,
weaker requirement)."""

from __future__ import annotations

from click.testing import CliRunner

from queuewire.cli import main
from queuewire.conformance.case_lint import lint_cases
from queuewire.conformance.loader import load_text
from queuewire.spec import load_profile

V1 = load_profile("quicx/v1")


def _cases(steps: str, requirements: str):
    return load_text(f"""
cases:
  - id: t.lint
    title: a case
    requirements: {requirements}
    steps:
{steps}""", "test", "quicx", V1)


def test_a_task_check_led_by_a_should_is_flagged():
    cases = _cases("""      - role: worker
        send: {type: MSG_READY}
        expect: {message: {type: MSG_TASK, fields: {task_id: 7}}}
""", "[QX-QUEUE-1, QX-READY-3]")
    (issue,) = lint_cases(V1, cases)
    assert "step 1" in issue.path and "QX-QUEUE-1" in issue.message and "SHOULD" in issue.message
    assert "QX-TASK-1" in issue.message  # the rule the check does test


def test_its_own_requirement_or_level_or_a_case_requirement_it_tests_is_not_flagged():
    for expect in ("{message: {type: MSG_TASK, fields: {task_id: 7}}, requirement: QX-READY-3}",
                   "{message: {type: MSG_TASK, fields: {task_id: 7}}, level: SHOULD}"):
        assert lint_cases(V1, _cases(f"""      - role: worker
        send: {{type: MSG_READY}}
        expect: {expect}
""", "[QX-QUEUE-1]")) == []
    # the first case requirement it tests is taken, whatever the order
    assert lint_cases(V1, _cases("""      - role: worker
        send: {type: MSG_READY}
        expect: {message: {type: MSG_TASK, fields: {task_id: 7}}}
""", "[QX-QUEUE-1, QX-TASK-1]")) == []


def test_the_suite_is_clean_and_spec_lint_runs_the_case_lint():
    assert lint_cases("quicx/v1") == [] and lint_cases("quicx/1.0.3") == []
    out = CliRunner().invoke(main, ["spec", "lint", "--profile", "quicx/v1"])
    assert out.exit_code == 0, out.output
