"""A tool's own opening to a server that may want a token (issue 24, item 1): the bytes it
writes, how it reads the two replies, and what they say. Sans-IO: no socket here; the real
server is in tests/interop/test_auth_real_bunqueue.py."""

from __future__ import annotations

import pytest

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.judge.opening import (
    AUTH_REQ_ID,
    PROBE_REQ_ID,
    AuthCheck,
    AuthProblem,
    auth_refusal,
)
from queuewire.spec import load_profile

BQ = load_profile("bunqueue/v2")
NOT_AUTH = BQ.model.errors["not_authenticated"].message
BAD_TOKEN = BQ.model.errors["invalid_token"].message


def _sent(check: AuthCheck) -> list[dict]:
    return FrameDecoder(BQ).feed(check.data)


def _reply(req_id: str, **fields) -> bytes:
    return encode_frame({**fields, "reqId": req_id}, BQ)


def test_the_opening_is_auth_then_a_probe_or_the_probe_alone():
    assert _sent(AuthCheck(BQ, "tok")) == [{"cmd": "Auth", "token": "tok", "reqId": AUTH_REQ_ID},
                                           {"cmd": "Ping", "reqId": PROBE_REQ_ID}]
    assert _sent(AuthCheck(BQ, None)) == [{"cmd": "Ping", "reqId": PROBE_REQ_ID}]
    assert _sent(AuthCheck(BQ, "")) == [{"cmd": "Ping", "reqId": PROBE_REQ_ID}]
    assert _sent(AuthCheck(BQ, "tok", auth_only=True)) == [
        {"cmd": "Auth", "token": "tok", "reqId": AUTH_REQ_ID}]
    nothing = AuthCheck(BQ, None, auth_only=True)
    assert nothing.data == b"" and nothing.done and nothing.problem() is None


def test_it_is_done_once_both_replies_are_in_whatever_the_segments():
    check = AuthCheck(BQ, "tok")
    stream = _reply("other", ok=True) + _reply(AUTH_REQ_ID, ok=True) + _reply(PROBE_REQ_ID, ok=True)
    assert not check.done
    for i in range(len(stream) - 1):
        assert check.feed(stream[i:i + 1]) is False
    assert check.feed(stream[-1:]) is True and check.done
    assert "other" not in check.replies and check.leftover == 0
    assert check.problem() is None


def test_a_refused_probe_means_the_server_wants_a_token():
    check = AuthCheck(BQ, None, target="10.0.0.1:6789")
    check.feed(_reply(PROBE_REQ_ID, ok=False, error=NOT_AUTH))
    problem = check.problem()
    assert isinstance(problem, AuthProblem)
    assert (problem.error, problem.command, problem.reply_message, problem.requirement,
            problem.target) == ("not_authenticated", "Ping", NOT_AUTH, "BQ-AUTH-2",
                                "10.0.0.1:6789")
    assert str(problem) == (f"10.0.0.1:6789 wants authentication: it answered Ping with "
                            f"{NOT_AUTH!r} (BQ-AUTH-2)")


def test_a_refused_token_is_named_before_the_probe_it_caused():
    check = AuthCheck(BQ, "wrong")
    check.feed(_reply(AUTH_REQ_ID, ok=False, error=BAD_TOKEN)
               + _reply(PROBE_REQ_ID, ok=False, error=NOT_AUTH))
    problem = check.problem()
    assert problem is not None and (problem.error, problem.command, problem.requirement) == (
        "invalid_token", "Auth", "BQ-AUTH-3")
    assert "refused the token" in str(problem) and str(problem).startswith("the server ")


@pytest.mark.parametrize("reply, refusal", [
    ({"ok": False, "error": NOT_AUTH}, "not_authenticated"),
    ({"ok": False, "error": BAD_TOKEN}, "invalid_token"),
    ({"ok": False, "error": "Job not found"}, None),
    ({"ok": True, "error": NOT_AUTH}, None),          # not a refusal: ok is true
    ({"error": NOT_AUTH}, None),                       # ok must be false, not absent
    ({"ok": 0, "error": NOT_AUTH}, None),
    ([NOT_AUTH], None), (None, None), (NOT_AUTH, None),
])
def test_auth_refusal_is_exactly_the_profiles_two_errors(reply, refusal):
    assert auth_refusal(BQ, reply) == refusal


def test_a_server_that_floods_instead_of_answering_is_given_up_on():
    from queuewire.judge.opening import READ_LIMIT
    check = AuthCheck(BQ, "tok")
    noise = _reply("flood", ok=True, pad="x" * 1000)
    while check.received + len(noise) < READ_LIMIT:
        check.feed(noise)
        assert not check.flooded
    check.feed(noise)
    assert check.flooded and not check.done and check.problem() is None
    answered = AuthCheck(BQ, None)
    answered.feed(_reply(PROBE_REQ_ID, ok=True) + noise * (READ_LIMIT // len(noise) + 1))
    assert answered.done and not answered.flooded   # answered: nothing to give up on
