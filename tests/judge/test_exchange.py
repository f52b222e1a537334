"""The connection judge itself (:mod:`queuewire.judge.exchange`), frame by frame, without a tool
around it: what each registered check finds and at which verdict, how replies pair with
requests (by reqId, in order without one, within a group of requests sharing a reqId), and the
judge's bookkeeping (in flight, open ends, settle, counters). Fast and socket-free: this is the
file `make mutation` runs the module against first (tests/mutation/modules.toml).

The documents' reading behind each expectation is in the check's docstring; the requirement
ids and error strings come from the profile, never from this file, except where a test names
the rule it is about.
"""

from __future__ import annotations

import copy
from collections import deque

import pytest

from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder
from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.validation import BunqueueValidator
from queuewire.judge import Verdict
from queuewire.judge.exchange import (
    CHECKS,
    REQUEST_CHECKS,
    BunqueueExchange,
    Judgement,
    Pending,
    check,
    judge_reply,
    quiet_reply,
)
from queuewire.judge.findings import Finding
from queuewire.judge.verdicts import requirement_verdict
from queuewire.spec import load_profile

V2 = load_profile("bunqueue/v2")
REAL = load_profile("bunqueue/2.9.5")
J = Judgement(V2)
JR = Judgement(REAL)

PING_OK = {"ok": True, "data": {"pong": True, "time": 1}}
COUNT_OK = {"ok": True, "count": 3}


def _without(profile, *rules):
    """``profile`` without the requirements ``rules`` (a profile that does not state them)."""
    stripped = copy.copy(profile)
    object.__setattr__(stripped, "requirements",
                       {k: v for k, v in profile.requirements.items() if k not in rules})
    return stripped


BARE = _without(V2, "BQ-PIPE-4", "BQ-HELLO-1")


def _bad_frame() -> ProtocolError:
    """A real decoder error: one frame of malformed MessagePack."""
    with pytest.raises(ProtocolError) as caught:
        FrameDecoder(V2).feed(b"\x00\x00\x00\x01\xc1")
    return caught.value


def _ex(judgement=J, **kw) -> BunqueueExchange:
    """An exchange on connection 9 whose opening is already judged (Hello sent)."""
    ex = BunqueueExchange(judgement, 9, **kw)
    if ex.opening is not None:
        assert ex.request({"cmd": "Hello", "protocolVersion": 2, "reqId": "hello"}) == ("Hello", [])
        ex.reply({"ok": True, "protocolVersion": 2, "capabilities": ["pipelining"],
                  "server": "s", "version": "1", "reqId": "hello"})
    assert ex.opening is None and ex.waiting == 0
    return ex


def _keys(found) -> list[tuple]:
    return [(f.requirement, f.level, f.kind) for f in found]


# -- the judging material -------------------------------------------------------------------
def test_judgement_uses_the_validator_it_is_given_or_builds_one():
    validator = BunqueueValidator(V2)
    assert Judgement(V2, validator).validator is validator
    built = Judgement(V2).validator
    assert built is not validator and isinstance(built, BunqueueValidator)
    assert built.request_is_valid({"cmd": "Ping"})


def test_judgement_knows_the_profiles_commands():
    assert J.commands == frozenset(V2.model.commands)
    assert "PUSH" in J.commands and "Frobnicate" not in J.commands
    assert J.profile is V2


def test_the_reqid_rule_is_bq_pipe_4_where_stated_else_bq_pipe_3_as_a_reading():
    assert (J.unique_reqid, J.unique_reqid_verdict) == \
        ("BQ-PIPE-4", requirement_verdict(V2, "BQ-PIPE-4"))
    assert J.unique_reqid_verdict is Verdict.FAIL
    bare = Judgement(BARE)
    assert (bare.unique_reqid, bare.unique_reqid_verdict) == ("BQ-PIPE-3", Verdict.NON_STRICT)


def test_the_opening_is_judged_only_where_the_profile_states_it():
    assert J.judges_opening is True
    assert Judgement(BARE).judges_opening is False
    assert BunqueueExchange(Judgement(BARE)).opening is None


def test_the_event_type_is_the_profiles_pushed_frame_type():
    assert JR.event_type == "event"
    assert J.event_type is None   # bunqueue/v2 pushes no job events


def test_verdict_is_the_requirements_verdict():
    for rid in ("BQ-PIPE-4", "BQ-HELLO-1", "BQ-ENV-5", None):
        assert J.verdict(rid) == requirement_verdict(V2, rid)


def test_plausible_needs_every_required_field_and_no_other():
    assert J.plausible("Count", {"ok": True, "count": "not a number"})
    assert J.plausible("Count", {"ok": True, "count": 1, "reqId": "x"})
    assert not J.plausible("Count", {"ok": True})                       # count missing
    assert not J.plausible("Count", {"ok": True, "count": 1, "zz": 1})  # a field Count lacks
    assert not J.plausible("Count", {"ok": False, "count": 1})
    assert not J.plausible("Count", {"ok": 1, "count": 1})
    assert not J.plausible("Count", [("ok", True)])
    assert not J.plausible("Frobnicate", {"ok": True})


# -- the registry ---------------------------------------------------------------------------
def test_the_registry_names_each_check_with_where_it_runs_and_its_rule():
    assert {name: (c.on, c.requirement) for name, c in CHECKS.items()} == {
        "unreadable": ("unreadable", "BQ-FRAME-1"),
        "request_schema": ("request", "BQ-ENV-6"),
        "reqid_in_flight": ("request", "BQ-PIPE-4"),
        "reqid_missing": ("request", "BQ-PIPE-4"),
        "client_forms": ("request", "BQ-MSGPACK-203"),
        "no_hello": ("request", "BQ-HELLO-1"),
        "reply_schema": ("reply", "BQ-ENV-3"),
        "event_schema": ("event", "BQ-EVENT-102"),
    }
    for name, c in CHECKS.items():
        assert c.name == name and c.doc and c.doc == c.doc.strip() and callable(c.fn)
    assert REQUEST_CHECKS == ("unreadable", "request_schema", "reqid_in_flight", "reqid_missing",
                              "client_forms", "no_hello")


def test_check_registers_a_function_under_its_name():
    def probe(ex, frame):
        """  Says what it checks.  """
        return (Finding(Verdict.INFO, None, "probe", frame.command),)

    def bare(ex, frame):
        return ()

    try:
        assert check("probe", "request", "BQ-ENV-1")(probe) is probe
        assert check("bare", "reply", "BQ-ENV-3")(bare) is bare
        c = CHECKS["probe"]
        assert (c.name, c.on, c.requirement, c.doc, c.fn) == \
            ("probe", "request", "BQ-ENV-1", "Says what it checks.", probe)
        assert CHECKS["bare"].doc == ""
        ex = BunqueueExchange(J, checks=["probe"], count=True)   # count: every check runs
        assert ex.request({"cmd": "Ping"})[1] == [Finding(Verdict.INFO, None, "probe", "Ping")]
        assert ex.looked == {"probe": 1}
    finally:
        CHECKS.pop("probe", None)
        CHECKS.pop("bare", None)


def test_unknown_check_names_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown checks \['nope'\]; known: .*'reply_schema'"):
        BunqueueExchange(J, checks=["request_schema", "nope"])


def test_only_the_chosen_checks_run():
    ex = BunqueueExchange(J, checks=["request_schema"])
    assert ex.opening is None   # no_hello not chosen: the opening is not judged
    ex.request({"cmd": "Ping", "reqId": "a"})
    assert ex.request({"cmd": "Ping", "reqId": "a"})[1] == []   # reqid_in_flight not chosen
    assert ex.reply({"ok": True, "reqId": "a"})[1] == []         # reply_schema not chosen


# -- requests -------------------------------------------------------------------------------
def test_a_valid_request_is_in_flight_until_answered():
    ex = _ex()
    assert ex.request({"cmd": "Ping", "reqId": "a"}, 5) == ("Ping", [])
    assert ex.waiting == 1 and list(ex.in_flight) == ["a"]
    (pending,) = ex.open_ends()
    assert (pending.command, pending.sent, pending.key, pending.bad, pending.reqid_is_str) == \
        ("Ping", 5, "a", None, True)
    assert ex.reply({**PING_OK, "reqId": "a"}, 6) == (pending, [])
    assert ex.waiting == 0 and ex.unpaired is None


def test_a_frame_that_does_not_decode_breaks_its_decoders_rule():
    err = _bad_frame()
    ex = _ex()
    cmd, found = ex.request(None, 7, err)
    assert cmd == "(unreadable)"
    assert found == [Finding(J.verdict(err.requirement), err.requirement, err.kind, err.detail,
                             9, "c2s", None, 7)]
    # bunqueue answers it without reqId: it waits for that answer, in order
    (pending,) = ex.open_ends()
    assert (pending.command, pending.sent, pending.error) == ("(unreadable)", 7, err)
    answered, found = ex.reply({"ok": False, "error": "Invalid command format"}, 8)
    assert answered is pending and found == []
    # a server that does not answer one: nothing waits
    ex = _ex()
    ex.request(None, 7, err, expect_reply=False)
    assert ex.waiting == 0


def test_a_request_breaking_its_schema_is_found_per_violation():
    ex = _ex()
    request = {"cmd": "PULLB", "queue": "q", "count": 5000, "reqId": "c"}
    (violation,) = J.validator.request_violations(request)
    cmd, found = ex.request(request, 11)
    assert cmd == "PULLB"
    assert found == [Finding(J.verdict(violation.requirement), violation.requirement,
                             "request_schema", str(violation), 9, "c2s", "PULLB", 11)]
    (pending,) = ex.open_ends()
    assert pending.bad == (request, (violation,))


def test_a_request_that_is_not_a_map_has_no_command_and_no_reqid():
    ex = _ex()
    cmd, found = ex.request(["Ping"], 1)
    assert cmd == "(no cmd)"
    assert [f.kind for f in found] == ["request_schema"]
    assert ex.open_ends()[0].key is None
    cmd, _ = ex.request({"cmd": 5})
    assert cmd == "(no cmd)"


def test_a_reqid_reused_in_flight_breaks_bq_pipe_4():
    ex = _ex()
    assert ex.request({"cmd": "PULL", "queue": "q", "timeout": 5000, "reqId": "b"})[1] == []
    cmd, found = ex.request({"cmd": "Ping", "reqId": "b"}, 12)
    assert cmd == "Ping"
    assert found == [Finding(Verdict.FAIL, "BQ-PIPE-4", "reqid_in_flight",
                             "reqId 'b' is already in flight on this connection (its replies "
                             "cannot be told apart)", 9, "c2s", "Ping", 12)]
    ex.request({"cmd": "Ping", "reqId": "b"})
    assert ex.waiting == 3 and isinstance(ex.in_flight["b"], deque)
    # a reqId answered is free again
    ex2 = _ex()
    ex2.request({"cmd": "Ping", "reqId": "b"})
    ex2.reply({**PING_OK, "reqId": "b"})
    assert ex2.request({"cmd": "Ping", "reqId": "b"})[1] == []


def test_without_bq_pipe_4_a_reused_reqid_is_a_reading_of_bq_pipe_3():
    ex = BunqueueExchange(Judgement(BARE))
    ex.request({"cmd": "Ping", "reqId": 1})
    found = ex.request({"cmd": "Ping", "reqId": 1.0})[1]   # the same reqId by value
    (finding,) = [f for f in found if f.kind == "reqid_in_flight"]
    assert (finding.requirement, finding.level, finding.kind) == \
        ("BQ-PIPE-3", Verdict.NON_STRICT, "reqid_in_flight")


def test_a_request_without_reqid_while_others_wait_breaks_the_reqid_rule():
    ex = _ex()
    assert ex.request({"cmd": "Ping"})[1] == []   # nothing waits: no reqId needed
    cmd, found = ex.request({"cmd": "Count", "queue": "q"}, 13)
    assert found == [Finding(Verdict.FAIL, "BQ-PIPE-4", "reqid_missing",
                             "Count without reqId while 1 request(s) are in flight", 9, "c2s",
                             "Count", 13)]
    # one with a reqId while others wait is fine, and the count includes both kinds
    assert ex.request({"cmd": "Ping", "reqId": "z"})[1] == []
    (finding,) = ex.request({"cmd": "Ping"})[1]
    assert "while 3 request(s)" in finding.message
    # a frame that is not a map has no reqId to miss (its schema is what it breaks)
    assert [f.kind for f in ex.request("junk")[1]] == ["request_schema"]
    bare = BunqueueExchange(Judgement(BARE))
    bare.request({"cmd": "Ping", "reqId": "a"})
    (finding,) = bare.request({"cmd": "Ping"})[1]
    assert (finding.requirement, finding.level) == ("BQ-PIPE-3", Verdict.NON_STRICT)


def test_a_connection_that_does_not_open_with_hello_breaks_bq_hello_1():
    ex = BunqueueExchange(J, 3)
    cmd, found = ex.request({"cmd": "PUSH", "queue": "q", "data": {}, "reqId": "1"}, 2)
    assert found == [Finding(J.verdict("BQ-HELLO-1"), "BQ-HELLO-1", "no_hello",
                             "the connection opened with PUSH, not Hello (or Auth then Hello)",
                             3, "c2s", "PUSH", 2)]
    assert J.verdict("BQ-HELLO-1") is Verdict.NON_STRICT
    assert ex.opening is None   # judged once
    assert ex.request({"cmd": "PUSH", "queue": "q", "data": {}, "reqId": "2"})[1] == []


def test_auth_then_hello_opens_well_and_auth_then_another_does_not():
    ex = BunqueueExchange(J)
    assert ex.request({"cmd": "Auth", "token": "t"})[1] == []
    assert ex.opening == ["Auth"]   # cannot be told yet
    ex.reply({"ok": True})
    assert ex.request({"cmd": "Hello", "protocolVersion": 2})[1] == []
    assert ex.opening is None
    ex = BunqueueExchange(J)
    ex.request({"cmd": "Auth", "token": "t"})
    ex.reply({"ok": True})
    (finding,) = ex.request({"cmd": "Ping"})[1]
    assert finding.kind == "no_hello" and "opened with Auth then Ping," in finding.message
    ex = BunqueueExchange(J)
    (finding, *_) = ex.request([1])[1][::-1]
    assert finding.kind == "no_hello" and "opened with (no cmd)," in finding.message


def test_a_partial_recording_does_not_judge_the_opening():
    assert BunqueueExchange(J, partial=True).opening is None
    assert BunqueueExchange(J, partial=False).opening == []


# -- replies --------------------------------------------------------------------------------
def test_a_server_frame_that_does_not_decode_answers_nothing():
    err = _bad_frame()
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "a"})
    answered, found = ex.reply(None, 4, err)
    assert answered is None and ex.unpaired == "unreadable"
    assert found == [Finding(J.verdict(err.requirement), err.requirement, err.kind, err.detail,
                             9, "s2c", None, 4)]
    assert ex.waiting == 1


def test_a_reply_that_is_not_a_map():
    ex = _ex()
    answered, found = ex.reply(5, 3)
    assert answered is None and ex.unpaired == "no_request"
    assert found == [Finding(J.verdict("BQ-ENV-3"), "BQ-ENV-3", "invalid_reply",
                             "reply is not a map: 5", 9, "s2c", None, 3)]
    # with a request without reqId waiting, it answers that one (and is judged as its reply)
    ex.request({"cmd": "Ping"})
    answered, found = ex.reply([1], 4)
    assert answered.command == "Ping" and ex.unpaired is None
    assert [(f.requirement, f.kind, f.command) for f in found] == \
        [("BQ-ENV-3", "invalid_reply", "Ping")]
    assert ex.waiting == 0


def test_replies_without_reqid_answer_requests_without_one_in_order():
    ex = _ex()
    ex.request({"cmd": "Ping"})
    ex.request({"cmd": "Count", "queue": "q", "reqId": "k"})
    ex.request({"cmd": "Count", "queue": "q"})
    first, found = ex.reply(dict(PING_OK))
    assert first.command == "Ping" and found == []
    second, found = ex.reply(dict(COUNT_OK))
    assert second.command == "Count" and second.key is None and found == []
    assert [p.key for p in ex.open_ends()] == ["k"]


def test_a_reply_without_reqid_that_answers_nothing():
    ex = _ex()
    answered, found = ex.reply(dict(PING_OK), 8)
    assert answered is None and ex.unpaired == "no_request"
    assert found == [Finding(Verdict.INFO, None, "reply_unpaired", "a frame without reqId that "
                             "answers no request seen without one", 9, "s2c", None, 8)]
    ex = _ex(partial=True)
    assert ex.reply(dict(PING_OK)) == (None, []) and ex.unpaired == "no_request"


def test_a_reply_with_a_reqid_nothing_in_flight_carries():
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "a"})
    answered, found = ex.reply({**PING_OK, "reqId": "zz"}, 9)
    assert answered is None and (ex.unpaired, ex.unpaired_key) == ("unknown_reqid", "zz")
    assert found == [Finding(Verdict.NON_STRICT, "BQ-ENV-2", "reqid_unknown",
                             "a reply with reqId 'zz', which no request in flight carries",
                             9, "s2c", None, 9)]
    ex.reply({**PING_OK, "reqId": 2})
    assert ex.unpaired_key == ("num", 2)
    assert ex.reply({**PING_OK, "reqId": "a"})[0] is not None and ex.unpaired is None
    ex = _ex(partial=True)
    assert ex.reply({**PING_OK, "reqId": "zz"}) == (None, [])
    assert (ex.unpaired, ex.unpaired_key) == ("unknown_reqid", "zz")


def test_a_non_string_reqid_pairs_by_value_and_is_not_judged_as_a_field():
    ex = _ex()
    # the request breaks the envelope's reqId type (its own finding) ...
    assert _keys(ex.request({"cmd": "Ping", "reqId": 7})[1]) == \
        [("BQ-ENV-2", Verdict.FAIL, "request_schema")]
    (pending,) = ex.open_ends()
    assert (pending.key, pending.reqid_is_str) == (("num", 7), False)
    # ... and the reply echoing it is paired, and not blamed for the reqId it echoes (only for
    # accepting the request)
    answered, found = ex.reply({**PING_OK, "reqId": 7.0})
    assert answered is pending
    assert _keys(found) == [("BQ-ENV-6", Verdict.NON_STRICT, "accepted_invalid")]
    # as a string reqId is one (the reply's reqId is judged with the reply there)
    ex.request({"cmd": "Ping", "reqId": "s"})
    assert ex.reply({**PING_OK, "reqId": "s"})[1] == []


def test_a_pushed_job_event_answers_nothing_and_is_judged_by_its_schema():
    ex = _ex(JR)
    ex.request({"cmd": "Ping"})
    event = {"type": "event", "event": {"eventType": "pushed", "jobId": "1", "queue": "q",
                                        "timestamp": 1}}
    if not JR.validator.event_is_valid(event):   # the test's event must be a valid one
        pytest.fail(str(JR.validator.event_violations(event)))
    assert ex.reply(event, 5) == (None, []) and ex.unpaired == "event"
    bad = {"type": "event", "event": 5}
    violations = JR.validator.event_violations(bad)
    answered, found = ex.reply(bad, 6)
    assert answered is None and violations
    assert found == [Finding(JR.verdict(v.requirement), v.requirement, "event_schema", str(v),
                             9, "s2c", "(job event)", 6) for v in violations]
    assert ex.waiting == 1   # the Ping still waits
    # in a profile without pushed events, such a frame answers the request waiting
    ex = _ex()
    ex.request({"cmd": "Ping"})
    answered, _ = ex.reply(dict(event))
    assert answered.command == "Ping"


def test_a_reply_breaking_its_commands_schema_fails_it():
    ex = _ex()
    ex.request({"cmd": "Count", "queue": "q", "reqId": "c"})
    reply = {"ok": True, "count": "x", "reqId": "c"}
    (violation,) = J.validator.reply_violations("Count", reply)
    answered, found = ex.reply(reply, 10)
    assert found == [Finding(J.verdict(violation.requirement), violation.requirement,
                             "reply_schema", str(violation), 9, "s2c", "Count", 10)]
    assert found[0].level is Verdict.FAIL


# -- a reqId shared by requests in flight ---------------------------------------------------
def test_a_shared_reqid_reply_answers_the_first_request_it_fits():
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "b"})
    ex.request({"cmd": "Count", "queue": "q", "reqId": "b"})
    answered, found = ex.reply({**COUNT_OK, "reqId": "b"})
    assert answered.command == "Count" and found == []
    assert [p.command for p in ex.open_ends()] == ["Ping"]
    answered, found = ex.reply({**PING_OK, "reqId": "b"})
    assert answered.command == "Ping" and found == []
    assert ex.waiting == 0 and "b" not in ex.in_flight


def test_a_shared_reqid_reply_that_fits_none_is_judged_against_its_one_plausible_request():
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "b"})
    ex.request({"cmd": "Count", "queue": "q", "reqId": "b"})
    answered, found = ex.reply({"ok": True, "count": "x", "reqId": "b"})
    assert answered.command == "Count"
    assert _keys(found) == [("BQ-CMD-Count", Verdict.FAIL, "reply_schema")]


def test_a_shared_reqid_reply_that_tells_nothing_is_info_and_so_is_the_last_one():
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "b"})
    ex.request({"cmd": "Ping", "reqId": "b"})
    answered, found = ex.reply({"ok": True, "reqId": "b"}, 3)
    assert answered.command == "Ping"
    assert found and all(f.level is Verdict.INFO and f.kind == "reply_schema" for f in found)
    assert "its reqId is shared by requests in flight" in found[0].message
    # the last one: answered by elimination, but the earlier reply may have been its
    answered, found = ex.reply({"ok": True, "reqId": "b"})
    assert answered.command == "Ping" and found
    assert all(f.level is Verdict.INFO for f in found)
    assert ex.waiting == 0
    # a new group with that reqId starts afresh: a bad last reply is blamed again
    ex.request({"cmd": "Ping", "reqId": "b"})
    ex.request({"cmd": "Ping", "reqId": "b"})
    assert ex.reply({**PING_OK, "reqId": "b"})[1] == []
    answered, found = ex.reply({"ok": True, "reqId": "b"})
    assert _keys(found) == [("BQ-CMD-Ping", Verdict.FAIL, "reply_schema")]


def test_a_group_after_a_valid_reply_stays_a_group_of_one():
    ex = _ex()
    for _ in range(3):
        ex.request({"cmd": "Ping", "reqId": "g"})
    ex.reply({**PING_OK, "reqId": "g"})
    assert isinstance(ex.in_flight["g"], deque) and len(ex.in_flight["g"]) == 2
    ex.reply({**PING_OK, "reqId": "g"})
    assert isinstance(ex.in_flight["g"], deque) and ex.waiting == 1


# -- settle, open ends, counters ------------------------------------------------------------
def test_settle_takes_an_answered_request_out_of_flight():
    ex = _ex()
    ex.request({"cmd": "Ping"})
    ex.request({"cmd": "Ping", "reqId": "a"})
    ex.request({"cmd": "Ping", "reqId": 4})
    ex.request({"cmd": "Count", "queue": "q", "reqId": "g"})
    ex.request({"cmd": "Ping", "reqId": "g"})
    assert ex.settle({"cmd": "Ping", "reqId": "a"}).key == "a"
    assert ex.settle({"cmd": "Ping", "reqId": 4.0}).key == ("num", 4)
    assert ex.settle({"cmd": "Ping", "reqId": "g"}).command == "Count"   # the first of a group
    assert [p.command for p in ex.in_flight["g"]] == ["Ping"]
    assert ex.settle({"cmd": "Ping", "reqId": "g"}).command == "Ping"
    assert "g" not in ex.in_flight
    assert ex.settle({"cmd": "Ping"}).key is None
    assert ex.waiting == 0
    assert ex.settle({"cmd": "Ping"}) is None
    assert ex.settle({"cmd": "Ping", "reqId": "nope"}) is None
    ex.request("junk")
    assert ex.settle("junk").command == "(no cmd)"


def test_open_ends_lists_requests_without_reqid_first_then_the_rest():
    ex = _ex()
    ex.request({"cmd": "Count", "queue": "q", "reqId": "a"})
    ex.request({"cmd": "Ping"})
    ex.request({"cmd": "Ping", "reqId": "g"})
    ex.request({"cmd": "Count", "queue": "q", "reqId": "g"})
    ex.request({"cmd": "Stats"})
    assert [(p.command, p.key) for p in ex.open_ends()] == [
        ("Ping", None), ("Stats", None), ("Count", "a"), ("Ping", "g"), ("Count", "g")]
    assert ex.waiting == 5


def test_count_runs_every_check_on_every_frame():
    ex = BunqueueExchange(J, count=True)
    assert ex.request({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"})[1] == []
    ex.request({"cmd": "Ping", "reqId": "p"})
    ex.reply({**PING_OK, "reqId": "p"})   # a quiet reply, still looked at
    ex.request(None, 0, _bad_frame())
    assert dict(ex.looked) == {"request_schema": 2, "reqid_in_flight": 2, "reqid_missing": 2,
                               "client_forms": 2, "no_hello": 2, "reply_schema": 1,
                               "unreadable": 1}
    assert BunqueueExchange(J).looked is None


# -- judge_reply, the reply checks as a function --------------------------------------------
def _pending(command, request=None, **kw) -> Pending:
    bad = None
    if request is not None and not J.validator.request_is_valid(request):
        bad = (request, J.validator.request_violations(request))
    return Pending(command, 0, bad=bad, **kw)


def test_judge_reply_builds_whole_exchange_findings_by_default():
    (finding,) = judge_reply(J, _pending("Count"), {"ok": True, "count": "x"})
    assert finding.conn_id is None and finding.t_ns is None
    assert (finding.requirement, finding.level, finding.kind) == \
        ("BQ-CMD-Count", Verdict.FAIL, "reply_schema")
    assert judge_reply(J, _pending("Count"), dict(COUNT_OK)) == []


def test_judge_reply_uses_the_finding_builder_it_is_given():
    made = []

    def make(rid, kind, message, level=None):
        made.append((rid, kind, level))
        return Finding(Verdict.INFO, rid, kind, message)

    judge_reply(J, _pending("Count"), {"ok": True, "count": "x"}, finding=make)
    assert made == [("BQ-CMD-Count", "reply_schema", None)]


def test_a_reply_that_is_not_a_map_is_invalid():
    assert judge_reply(J, _pending("Ping"), "pong") == \
        [Finding(J.verdict("BQ-ENV-3"), "BQ-ENV-3", "invalid_reply", "reply is not a map: 'pong'")]


def test_a_frame_that_did_not_decode_must_be_answered_with_an_error():
    err = _bad_frame()
    pending = Pending("(unreadable)", 0, error=err)
    (finding,) = judge_reply(J, pending, {"ok": True})
    assert finding == Finding(J.verdict(err.requirement), err.requirement, "accepted_bad_frame",
                              f"{err.kind} answered {{'ok': True}}")
    assert [f.kind for f in judge_reply(J, pending, {"error": "Invalid command format"})] == \
        ["accepted_bad_frame"]
    assert judge_reply(J, pending, {"ok": False, "error": "Invalid command format"}) == []
    # an error reply to it is judged by the shared error shape
    assert _keys(judge_reply(J, pending, {"ok": False, "error": 5})) == \
        [("BQ-ENV-4", Verdict.FAIL, "reply_schema")]


def test_an_unknown_command_answered_ok_breaks_bq_env_5():
    assert judge_reply(J, _pending("Frobnicate"), {"ok": True, "count": "x"}) == \
        [Finding(J.verdict("BQ-ENV-5"), "BQ-ENV-5", "accepted_unknown",
                 "Frobnicate (not a command of the profile) answered ok")]
    assert judge_reply(J, _pending("Frobnicate"),
                       {"ok": False, "error": "Unknown command: Frobnicate"}) == []


def test_an_invalid_request_answered_ok_breaks_bq_env_6():
    request = {"cmd": "PULLB", "queue": "q", "count": 5000}
    pending = _pending("PULLB", request)
    found = judge_reply(J, pending, {"ok": True, "jobs": []})
    assert found == [Finding(J.verdict("BQ-ENV-6"), "BQ-ENV-6", "accepted_invalid",
                             f"PULLB breaking {pending.bad[1][0]} answered ok")]
    assert judge_reply(J, pending, {"ok": False, "error": "count must be at most 1000"}) != \
        found


def test_a_reply_giving_back_what_an_invalid_request_sent_is_info():
    request = {"cmd": "GetState", "id": 115}
    pending = Pending("GetState", 0, bad=(request, JR.validator.request_violations(request)))
    found = judge_reply(JR, pending, {"ok": True, "id": 115, "state": "waiting"})
    assert ("BQ-CMD-GetState", Verdict.INFO, "echoed_invalid") in _keys(found)
    assert all(f.level is not Verdict.FAIL for f in found)
    (echo,) = [f for f in found if f.kind == "echoed_invalid"]
    assert echo.message.startswith("reply to GetState: ") and "(as the request sent it)" in \
        echo.message
    # another bad value than the one sent is the reply's own
    found = judge_reply(JR, pending, {"ok": True, "id": 116, "state": "waiting"})
    assert ("BQ-CMD-GetState", Verdict.FAIL, "reply_schema") in _keys(found)


def test_an_undocumented_error_string_is_info():
    (finding,) = judge_reply(J, _pending("Ping"), {"ok": False, "error": "Kaput " + "x" * 100})
    assert (finding.requirement, finding.level, finding.kind) == \
        ("BQ-ENV-4", Verdict.INFO, "undocumented_error")
    assert finding.message == f"error string {('Kaput ' + 'x' * 100)!r:.80} is none of the spec's"
    # the spec's strings, their placeholders matching anything (even across lines), are not
    for error in ("Not authenticated", "Unknown command: a\nb", "Job not found"):
        assert judge_reply(J, _pending("Ping"), {"ok": False, "error": error}) == []
    # a spec string inside a longer one is not that string
    assert [f.kind for f in judge_reply(J, _pending("Ping"),
                                        {"ok": False, "error": "Oops: Job not found"})] == \
        ["undocumented_error"]
    # only an error reply's string is held against the spec's
    assert judge_reply(J, _pending("Ping"), {"error": "Kaput", **PING_OK}) == []


def test_quiet_reply_holds_only_for_a_valid_success_to_a_clean_request():
    assert quiet_reply(J, _pending("Ping"), dict(PING_OK))
    assert not quiet_reply(J, _pending("Ping"), {"ok": True})
    assert not quiet_reply(J, _pending("Ping"), [PING_OK])
    assert not quiet_reply(J, _pending("Ping"), {**PING_OK, "ok": 1})
    assert not quiet_reply(J, _pending("Frobnicate"), dict(PING_OK))
    request = {"cmd": "Ping", "x": UNDEFINED, "extra": 1}
    assert not quiet_reply(J, Pending("Ping", 0, bad=(request, ())), dict(PING_OK))
    assert not quiet_reply(J, Pending("Ping", 0, error=_bad_frame()), dict(PING_OK))
    assert not quiet_reply(J, Pending("Ping", 0, reqid_is_str=False), dict(PING_OK))


# -- what the first mutation run of the module found unpinned ------------------------------
def test_a_fresh_exchange_has_judged_nothing():
    ex = BunqueueExchange(J)
    assert (ex.last_bad, ex.last_reused, ex.last_waiting) == (None, False, 0)
    assert (ex.unpaired, ex.unpaired_key) == (None, None)


def test_times_default_to_zero_and_are_kept_on_every_path():
    ex = _ex()
    (finding,) = ex.request({"cmd": "Ping", "reqId": 5})[1]   # a non-string reqId
    assert finding.t_ns == 0
    ex.request({"cmd": "Ping", "reqId": 6}, 31)
    ex.request({"cmd": "Ping"}, 32)
    assert [p.sent for p in ex.open_ends()] == [32, 0, 31]
    (finding,) = ex.reply(5)[1]   # not a map: answers the request without reqId
    assert finding.t_ns == 0
    ex.request({"cmd": "Count", "queue": "q"}, 33)
    (finding,) = ex.reply({"ok": True, "count": "x"}, 34)[1]
    assert finding.t_ns == 34
    found = ex.reply({"ok": True, "reqId": 6}, 35)[1]
    assert found and {f.t_ns for f in found} == {35}


def test_a_request_without_reqid_keeps_what_it_broke_for_its_reply():
    ex = _ex()
    request = {"cmd": "PULLB", "queue": "q", "count": 5000}
    ex.request(request, 4)
    (pending,) = ex.open_ends()
    assert pending.sent == 4 and pending.bad is not None and pending.bad[0] is request
    found = ex.reply({"ok": True, "jobs": []}, 5)[1]
    assert _keys(found) == [("BQ-ENV-6", Verdict.NON_STRICT, "accepted_invalid")]


def test_a_third_request_with_a_reqid_in_flight_joins_its_group():
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "g"})
    ex.request({"cmd": "Count", "queue": "q", "reqId": "g"})
    ex.request({"cmd": "Stats", "reqId": "g"})
    assert [p.command for p in ex.open_ends()] == ["Ping", "Count", "Stats"]
    assert ex.settle({"reqId": "g"}).command == "Ping"
    assert ex.reply({**COUNT_OK, "reqId": "g"})[0].command == "Count"
    assert [p.command for p in ex.open_ends()] == ["Stats"]


def test_a_reply_that_is_not_a_map_is_judged_as_itself():
    ex = _ex()
    ex.request({"cmd": "Ping"})
    (finding,) = ex.reply("pong!", 3)[1]
    assert finding.message == "reply is not a map: 'pong!'"


def test_a_shared_reqid_reply_names_the_requirement_it_breaks():
    ex = _ex()
    ex.request({"cmd": "Ping", "reqId": "b"})
    ex.request({"cmd": "Ping", "reqId": "b"})
    (violation,) = J.validator.reply_violations("Ping", {"ok": True})
    (finding,) = ex.reply({"ok": True, "reqId": "b"}, 3)[1]
    assert finding == Finding(
        Verdict.INFO, violation.requirement, "reply_schema",
        f"{violation} (as a reply to Ping; its reqId is shared by requests in flight, so which "
        "one it answers cannot be told)", 9, "s2c", "Ping", 3)


def test_a_non_map_request_answered_by_a_broken_error_reply_is_the_replys_fault():
    ex = _ex()
    ex.request(["Ping"])
    assert _keys(ex.reply({"ok": False, "error": 5})[1]) == \
        [("BQ-ENV-4", Verdict.FAIL, "reply_schema")]


def test_only_the_fields_the_request_broke_and_sent_are_echoes():
    request = {"cmd": "GetState", "id": 115}
    pending = Pending("GetState", 0, bad=(request, JR.validator.request_violations(request)))
    # the state is the reply's own: not a field the request broke
    found = judge_reply(JR, pending, {"ok": True, "id": 115, "state": 5})
    assert ("BQ-JOB-1", Verdict.FAIL, "reply_schema") in _keys(found)
    assert ("BQ-CMD-GetState", Verdict.INFO, "echoed_invalid") in _keys(found)
    # a null id sent, none given back: absent is not null
    request = {"cmd": "GetState", "id": None}
    pending = Pending("GetState", 0, bad=(request, JR.validator.request_violations(request)))
    found = judge_reply(JR, pending, {"ok": True, "state": "waiting"})
    assert ("BQ-CMD-GetState", Verdict.FAIL, "reply_schema") in _keys(found)


def test_an_echo_is_found_inside_a_list_of_the_reply():
    request = {"cmd": "PULLB", "queue": 5, "count": 1}
    pending = Pending("PULLB", 0, bad=(request, JR.validator.request_violations(request)))
    found = judge_reply(JR, pending, {"ok": True, "jobs": [{"id": "1", "queue": 5, "data": {}}]})
    (echo,) = [f for f in found if f.kind == "echoed_invalid"]
    assert echo.level is Verdict.INFO and "/jobs/0/queue" in echo.message
    found = judge_reply(JR, pending, {"ok": True, "jobs": [{"id": "1", "queue": 6, "data": {}}]})
    assert "echoed_invalid" not in [f.kind for f in found]


def test_a_violation_path_is_read_as_a_json_pointer():
    from queuewire.judge.exchange import _fields

    assert _fields("/a~1b/c~0d/0", "x") == ["a/b", "c~d", "0"]
    assert _fields("", "\"name\" is a required property") == ["name"]
    assert _fields("/data", "\"a/b\" is a required property") == ["data", "a/b"]
    assert _fields("", "5 is not of type \"object\"") == []


def test_a_violation_at_no_field_is_never_an_echo():
    from queuewire.codecs.errors import Violation
    from queuewire.judge.exchange import _echoes

    request = {"cmd": "GetState", "id": 115}
    bad = JR.validator.request_violations(request)
    at_root = Violation("BQ-CMD-GetState", "MUST", "", "something is wrong")
    assert not _echoes(request, bad, {"ok": True}, at_root)
    (at_id,) = bad
    assert _echoes(request, bad, {"ok": True, "id": 115}, at_id)
    assert not _echoes([request], bad, {"ok": True, "id": 115}, at_id)


def test_long_values_are_cut_in_messages():
    assert judge_reply(J, _pending("Ping"), "x" * 98)[0].message == \
        f"reply is not a map: {'x' * 98!r}"            # a repr of exactly 100 characters
    message = judge_reply(J, _pending("Ping"), "x" * 99)[0].message
    assert message == "reply is not a map: " + repr("x" * 99)[:97] + "..."


def test_a_reply_is_judged_on_its_reqid_unless_the_request_sent_a_non_string_one():
    # a request with a string reqId: the reply's reqId is the envelope's string (BQ-ENV-2)
    found = judge_reply(J, _pending("Ping"), {**PING_OK, "reqId": 7})
    assert _keys(found) == [("BQ-ENV-2", Verdict.FAIL, "reply_schema")]
    # a request that sent 7: echoing it verbatim is what the server must do
    assert judge_reply(J, Pending("Ping", 0, reqid_is_str=False), {**PING_OK, "reqId": 7}) == []


# -- client_forms (bunqueue/v3's int64 rule, read from the request's bytes) --------------------
def test_client_forms_fail_a_v3_client_for_64_bit_integers_beyond_int32_and_extensions():
    """Under bunqueue/v3 a request whose bytes hold a uint64, an integer beyond int32 written
    as uint32 or an extension value FAILs the MUST its form breaks; the same bytes under a
    profile without msgpack.client_forms, or without the bytes, find nothing."""
    import struct

    import msgspec

    v3 = Judgement(load_profile("bunqueue/v3"))
    message = {"cmd": "PUSH", "queue": "q", "data": {"t": 2**40, "n": 3_000_000_000}}
    payload = (b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data\x82\xa1t\xcf" + struct.pack(">Q", 2**40)
               + b"\xa1n\xce" + struct.pack(">I", 3_000_000_000) + b"\xa1x\xd4\x00\x00")
    decoded = msgspec.msgpack.decode(payload, ext_hook=lambda code, data: UNDEFINED)
    assert decoded["data"] == message["data"]
    _, found = BunqueueExchange(v3).request(decoded, payload=payload)
    forms = [(f.requirement, f.level) for f in found if f.kind == "client_forms"]
    assert forms == [("BQ-MSGPACK-203", Verdict.FAIL), ("BQ-MSGPACK-204", Verdict.FAIL),
                     ("BQ-MSGPACK-202", Verdict.FAIL)]
    assert "2199023255552" not in found[0].message and "1099511627776" in found[0].message
    def kinds(found):
        return [f.kind for f in found if f.kind == "client_forms"]
    assert kinds(BunqueueExchange(JR).request(decoded, payload=payload)[1]) == []
    assert kinds(BunqueueExchange(v3).request(decoded)[1]) == []
    compact = msgspec.msgpack.encode({**message, "data": {"t": 2.0**40, "n": 3e9}})
    assert kinds(BunqueueExchange(v3).request(msgspec.msgpack.decode(compact),
                                              payload=compact)[1]) == []
