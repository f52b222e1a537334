"""The one reproduction builder (issue 23): the runner's line and a report's rebuilt line are
the same line, with every option of the run and never the token."""

from __future__ import annotations

from queuewire.conformance import reproduce
from queuewire.conformance.report.common import reproduction
from queuewire.conformance.runner import run_target_sync


def test_a_line_keeps_every_option_and_hides_the_token():
    argv = reproduce.server_argv("bunqueue", "10.0.0.1:6789", "bunqueue/v2", auth=True, strict=True,
                                 timeout=2.5, http_target="10.0.0.1:6790")
    text = reproduce.line(argv, "--select", "bunqueue.ping.*")
    assert text == ("queuewire conform server --protocol bunqueue --target 10.0.0.1:6789 --profile "
                    "bunqueue/v2 --http-target 10.0.0.1:6790 --auth-token \"$QUEUEWIRE_AUTH_TOKEN\" "
                    "--strict --timeout 2.5 --select 'bunqueue.ping.*'")
    embedded = reproduce.server_argv("bunqueue", "embedded", "bunqueue/v2", http_target="x:1",
                                     embedded=True)
    assert "--http-target" not in embedded and "--timeout" not in embedded
    client = reproduce.line(reproduce.client_argv("quicx", "quicx/v1", "python t.py", "/tmp/a b"),
                            "--scenario", "quicx.worker.ack")
    assert client.endswith("--testee 'python t.py' --testee-cwd '/tmp/a b' --scenario quicx.worker.ack")


def test_a_report_rebuilds_the_runners_line_from_the_run():
    run = run_target_sync("bunqueue", "embedded", select=["bunqueue.hello*"], timeout=3.0)
    assert run.results and run.rerun
    for result in run.results:
        stored = result.reproduction
        assert "--timeout 3" in stored and stored.startswith("queuewire conform server")
        result.reproduction = ""
        assert reproduction(run, result) == stored
