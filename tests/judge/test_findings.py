"""The one Finding (issue 23): what the tap, the trace pipeline and the fuzz oracles report."""

from __future__ import annotations

import json

from queuewire.judge import Finding, Verdict


def test_only_a_fail_fails():
    assert Finding(Verdict.FAIL, "BQ-FRAME-2", "too_long", "m").fails
    assert not Finding(Verdict.NON_STRICT, "BQ-ENV-2", "reqid_not_echoed", "m").fails
    assert not Finding(Verdict.INFO, None, "unanswered", "m").fails


def test_a_case_finding_and_a_wire_finding_as_json():
    case = Finding(Verdict.NON_STRICT, "BQ-PIPE-1", "lost_before_close", "no reply")
    assert json.loads(json.dumps(case.as_dict())) == {
        "requirement": "BQ-PIPE-1", "level": "NON-STRICT", "kind": "lost_before_close",
        "message": "no reply"}
    wire = Finding(Verdict.FAIL, "BQ-CMD-Ping", "reply_schema", "data missing", conn_id=3,
                   direction="s2c", command="Ping", t_ns=42)
    assert list(wire.as_dict()) == ["level", "requirement", "conn_id", "direction", "command", "kind",
                                    "message", "t_ns"]
    assert wire.as_dict()["conn_id"] == 3 and wire.as_dict()["t_ns"] == 42
    assert str(wire) == "[BQ-CMD-Ping FAIL] reply_schema: data missing"
