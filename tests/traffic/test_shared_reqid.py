"""A client that reuses a reqId in flight (issue 23): the client is flagged on the uniqueness
rule, and the server's correct replies are not blamed for the client's ambiguity. (A long-poll
PULL and a Ping both sent as reqId "dup": the Ping is answered first, the PULL later.)"""

from __future__ import annotations

from queuewire.codecs.bunqueue import encode_frame
from queuewire.traffic.analyzer import Analyzer

PING = {"cmd": "Ping", "reqId": "dup"}
PULL = {"cmd": "PULL", "queue": "q", "timeout": 1000, "reqId": "dup"}
PONG = {"ok": True, "data": {"pong": True, "time": 1}, "reqId": "dup"}
NO_JOB = {"ok": True, "job": None, "reqId": "dup"}


def _tap(requests: list[dict], replies: list[dict]) -> dict:
    analyzer = Analyzer("bunqueue", "bunqueue/v2")
    analyzer.open(1, 1)
    analyzer.feed(1, "c2s", b"".join(encode_frame(m) for m in requests), 10)
    for i, reply in enumerate(replies):
        analyzer.feed(1, "s2c", encode_frame(reply), 20 + i)
    analyzer.close(1, 99)
    return analyzer.summary()


def _found(summary: dict) -> set[tuple[str, str, str]]:
    return {(f["requirement"], f["kind"], f["level"]) for f in summary["findings"]}


def test_correct_replies_to_a_shared_reqid_are_not_failed():
    summary = _tap([PULL, PING], [PONG, NO_JOB])
    found = _found(summary)
    # the client's reuse: document 000's "unique reqId identifiers" (BQ-PIPE-4, a MUST)
    assert ("BQ-PIPE-4", "reqid_in_flight", "FAIL") in found
    assert not [f for f in found if f[1] == "reply_schema"], found  # no blame on the server
    assert summary["totals"]["paired"] == 2


def test_a_reply_no_candidate_accepts_is_reported_but_not_failed():
    """When the reply fits none of the requests sharing its reqId, which one it broke cannot
    be told: it is reported (INFO, with the reason), never FAILed; nor is the next reply of
    that reqId, though only one request is left to answer (it was sent as shared)."""
    summary = _tap([PULL, PING], [{"ok": True, "reqId": "dup"}, NO_JOB])
    schema = [f for f in summary["findings"] if f["kind"] == "reply_schema"]
    assert schema and {f["level"] for f in schema} == {"INFO"}
    assert all("shared" in f["message"] for f in schema)


def test_a_reqid_used_once_is_still_judged_at_its_level():
    summary = _tap([PING], [{"ok": True, "reqId": "dup"}])
    assert ("BQ-CMD-Ping", "reply_schema", "FAIL") in _found(summary)
