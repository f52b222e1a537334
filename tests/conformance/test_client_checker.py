"""The client checker (sans-IO): every rule it applies to a client's frames, without a socket."""

from __future__ import annotations

import pytest

from queuewire.codecs.bunqueue import encode_frame
from queuewire.conformance.client.checker import MAX_FINDINGS, ClientChecker
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")


HELLO = {"cmd": "Hello", "protocolVersion": 2, "reqId": "hello"}


def checker(token: str | None = None, *, hello: bool = True) -> ClientChecker:
    """A checker with connection 1 open; ``hello``: the client opened it with Hello, answered
    (BQ-HELLO-1 is not what the test is about)."""
    c = ClientChecker(PROFILE, token=token)
    c.opened(1)
    if hello:
        c.feed(1, encode_frame(HELLO), 0.0)
        c.replied(1, HELLO, {"ok": True, "reqId": "hello"}, 0.0)
    return c


def failed(c: ClientChecker) -> list[tuple[str | None, str, str]]:
    return [(k.requirement, k.level, k.kind) for k in c.checks() if not k.ok]


def test_a_well_behaved_client_passes_every_rule_it_met() -> None:
    c = checker(hello=False)
    c.feed(1, encode_frame({"cmd": "Hello", "protocolVersion": 2, "reqId": "1"}), 0.0)
    c.replied(1, {"cmd": "Hello", "reqId": "1"}, {"ok": True}, 0.1)
    c.feed(1, encode_frame({"cmd": "PUSH", "queue": "q", "data": {}, "reqId": "2"}), 0.2)
    checks = c.checks()
    assert checks and all(k.ok for k in checks)
    assert {(k.requirement, k.kind) for k in checks} >= {
        ("BQ-FRAME-1", "framing"), ("BQ-ENV-6", "request_schema"), ("BQ-PIPE-4", "reqid_in_flight"),
        ("BQ-PIPE-4", "reqid_missing"), ("BQ-HELLO-1", "no_hello")}
    assert [m["cmd"] for _, _, m in c.requests] == ["Hello", "PUSH"]


def test_a_connection_opened_without_hello_is_a_should_violation() -> None:
    """BQ-HELLO-1 (SHOULD), judged by the registry's check as the tap judges it."""
    c = checker(hello=False)
    c.feed(1, encode_frame({"cmd": "Ping", "reqId": "1"}), 0.0)
    assert failed(c) == [("BQ-HELLO-1", "SHOULD", "no_hello")]


def test_a_reqid_reused_while_in_flight_is_a_must_violation() -> None:
    c = checker()
    push = {"cmd": "PUSH", "queue": "q", "data": {}, "reqId": "7"}
    c.feed(1, encode_frame(push) + encode_frame(push), 0.0)
    assert ("BQ-PIPE-4", "MUST", "reqid_in_flight") in failed(c)


def test_a_reqid_may_be_reused_once_answered() -> None:
    c = checker()
    push = {"cmd": "PUSH", "queue": "q", "data": {}, "reqId": "7"}
    c.feed(1, encode_frame(push), 0.0)
    c.replied(1, push, {"ok": True, "id": "1"}, 0.1)
    c.feed(1, encode_frame(push), 0.2)
    assert failed(c) == []


def test_pipelining_without_reqid_is_a_violation() -> None:
    c = checker()
    c.feed(1, encode_frame({"cmd": "Ping"}) + encode_frame({"cmd": "Ping"}), 0.0)
    assert ("BQ-PIPE-4", "MUST", "reqid_missing") in failed(c)


def test_a_command_before_auth_fails_only_when_a_token_was_given() -> None:
    c = checker(token="t")   # Hello first (doc 000)
    c.feed(1, encode_frame({"cmd": "Count", "queue": "q", "reqId": "2"}), 0.1)
    assert failed(c) == [("BQ-AUTH-1", "MUST", "auth")]
    c2 = checker(token="t", hello=False)
    c2.feed(1, encode_frame({"cmd": "Auth", "token": "t", "reqId": "1"}), 0.0)
    c2.replied(1, {"cmd": "Auth", "reqId": "1"}, {"ok": True}, 0.1)
    c2.feed(1, encode_frame(HELLO), 0.15)
    c2.replied(1, HELLO, {"ok": True}, 0.15)
    c2.feed(1, encode_frame({"cmd": "Count", "queue": "q", "reqId": "2"}), 0.2)
    assert failed(c2) == []


def test_ack_must_carry_the_lock_token_of_the_pull() -> None:
    c = checker()
    pull = {"cmd": "PULL", "queue": "q", "owner": "w", "reqId": "1"}
    c.feed(1, encode_frame(pull), 0.0)
    c.replied(1, pull, {"ok": True, "job": {"id": "5"}, "token": "tok-5"}, 0.1)
    c.feed(1, encode_frame({"cmd": "ACK", "id": "5", "reqId": "2"}), 0.2)
    c.feed(1, encode_frame({"cmd": "ACKB", "ids": ["5"], "tokens": ["tok-5"], "reqId": "3"}), 0.3)
    assert failed(c) == [("BQ-LOCK-2", "MUST", "lock-token")]
    assert c.acks == [("5", None), ("5", "tok-5")]


def test_ack_of_a_job_never_pulled_is_a_should() -> None:
    c = checker()
    c.feed(1, encode_frame({"cmd": "ACK", "id": "9", "reqId": "1"}), 0.0)
    assert failed(c) == [("BQ-LOCK-2", "SHOULD", "ack-held")]


def test_framing_and_envelope_errors_cite_their_requirements() -> None:
    c = checker()
    c.feed(1, b"\x00\x00\x00\x01\x2a", 0.0)   # a frame holding 42: not a map
    assert [(rid, level) for rid, level, _ in failed(c)] == [("BQ-ENV-1", "MUST")]
    c2 = checker()
    _, error = c2.feed(1, b"\x00\x00\x00\x02\x2a\x2a", 0.0)   # two objects in one payload
    assert error is not None
    assert any(rid and rid.startswith(("BQ-MSGPACK", "BQ-FRAME")) for rid, _, _ in failed(c2))


def test_schema_violations_cite_the_validators_requirement() -> None:
    c = checker()
    c.feed(1, encode_frame({"cmd": "PULLB", "queue": "q", "count": 5000, "reqId": "1"}), 0.0)
    bad = [k for k in c.checks() if not k.ok]
    assert bad and bad[0].kind == "request_schema" and bad[0].requirement


def test_findings_are_capped_per_rule() -> None:
    c = checker()
    push = {"cmd": "PUSH", "queue": "q", "data": {}, "reqId": "7"}
    c.feed(1, b"".join(encode_frame(push) for _ in range(MAX_FINDINGS + 5)), 0.0)
    assert len([k for k in c.checks() if k.kind == "reqid_in_flight"]) == MAX_FINDINGS


@pytest.mark.parametrize("cmd", ["JobHeartbeat", "JobHeartbeatB"])
def test_heartbeats_are_recorded_per_job(cmd: str) -> None:
    c = checker()
    msg = {"cmd": cmd, "id": "3", "reqId": "1"} if cmd == "JobHeartbeat" else \
        {"cmd": cmd, "ids": ["3"], "tokens": ["t"], "reqId": "1"}
    c.feed(1, encode_frame(msg), 1.5)
    assert c.heartbeats["3"] == [1.5]
