"""The bunqueue oracle on what the real bunqueue 2.9.5 sent back to the fuzzer (issue 13): each
test replays, sans-IO, the requests of a shrunk transcript of a bounded run (seed 20261124)
and the replies the real server gave, and checks the verdict rests on the documents: what
they leave open is no MUST finding, and the stated rules next to it still are."""

from __future__ import annotations

import pytest

from queuewire.codecs.bunqueue import UNDEFINED, FrameEncoder
from queuewire.fuzz.case import Case
from queuewire.fuzz.oracles import BunqueueJudge, expect_bunqueue
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

PROFILE = "bunqueue/v2"
BQ = load_profile(PROFILE)
ENC = FrameEncoder(BQ, wide_integers=True)
JUDGE = BunqueueJudge(BQ, ("WaitJob", "PULL", "PULLB"))


def frame(msg: dict) -> bytes:
    return ENC.encode(msg)


def judge(frames: list[bytes], replies: list, *, closed: bool = False,
          timed_out: bool = False) -> list:
    return JUDGE.judge(expect_bunqueue(Case("bunqueue", PROFILE, frames), BQ), replies,
                       closed=closed, timed_out=timed_out)


def failing(findings: list) -> list[tuple[str, str]]:
    return [(f.requirement, f.kind) for f in findings if f.fails]


def valid(cmd: str, **extra) -> dict:
    return {**minimal(dict(BQ.model.commands[cmd].response)), **extra}


# -- two requests sharing a reqId, one answered by a reply that breaks its own shape --------
# (case 134: ListQueues and WaitJob both reqId "1"; the real ListQueues reply lists bare
# names, a known deviation; the WaitJob of an unknown job is refused. The oracle matched the
# error reply to ListQueues and judged the ListQueues reply as WaitJob's: "without completed")
SHARED = {
    "WaitJob": ({"cmd": "ListQueues"},
                {"ok": True, "queues": ["a", "emails"]},
                {"cmd": "WaitJob", "id": "U", "timeout": 0},
                {"ok": False, "error": "Job not found"},
                "BQ-CMD-ListQueues"),
    # case 63: CronList then Cron, reqId "0"; CronList's maxLimit null (BQ-ENV-7, a SHOULD)
    "Cron": ({"cmd": "CronList"},
             {"ok": True, "crons": [{"name": "n", "queue": "q", "schedule": None,
                                     "repeatEvery": 1000, "nextRun": 1, "executions": 0,
                                     "maxLimit": None}]},
             {"cmd": "Cron", "name": "daily-report", "queue": "a", "data": {"to": "a@b.com"}},
             {"ok": False, "error": "Cron job must have either schedule or repeatEvery"},
             None),
    # case 338: GetJobCounts with a queue name too long (answered ok: BQ-ENV-6, a SHOULD)
    # then JobHeartbeat of an unknown job, reqId "2"
    "JobHeartbeat": ({"cmd": "GetJobCounts", "queue": "a" * 257},
                     {"ok": True, "counts": {"waiting": 0, "delayed": 0, "active": 0,
                                             "completed": 0, "failed": 0}},
                     {"cmd": "JobHeartbeat", "id": "x"},
                     {"ok": False, "error": "Job not found or not active (or invalid token)"},
                     None),
    # seed 1, case 56: GetChildrenValues with an id of the wrong type (answered ok with a
    # valid reply: BQ-ENV-6, a SHOULD), RemoveWebhook of an unknown webhook, reqId "0"; the
    # first reply has the top-level fields of RemoveWebhook's reply too (data)
    "RemoveWebhook": ({"cmd": "GetChildrenValues", "id": -9007199254740993},
                      {"ok": True, "data": {"values": {}}},
                      {"cmd": "RemoveWebhook", "webhookId": "\x80"},
                      {"ok": False, "error": "Webhook not found"},
                      None),
}


@pytest.mark.parametrize("name", sorted(SHARED))
@pytest.mark.parametrize("swap", [False, True])
def test_a_shared_reqid_reply_is_judged_against_its_own_command(name, swap):
    first, first_reply, second, second_reply, known = SHARED[name]
    rid = "1"
    frames = [frame({**first, "reqId": rid}), frame({**second, "reqId": rid})]
    replies = [{**first_reply, "reqId": rid}, {**second_reply, "reqId": rid}]
    found = judge(frames, replies[::-1] if swap else replies)
    assert all(r != f"BQ-CMD-{name}" for r, _ in failing(found)), found
    assert {r for r, _ in failing(found)} == ({known} if known else set()), found


def test_a_shared_reqid_still_finds_the_reply_that_breaks_its_command():
    # the WaitJob answered with a success reply without "completed": that is WaitJob's
    frames = [frame({"cmd": "Ping", "reqId": "1"}),
              frame({"cmd": "WaitJob", "id": "U", "timeout": 0, "reqId": "1"})]
    replies = [valid("Ping", reqId="1"), {"ok": True, "reqId": "1"}]
    assert ("BQ-CMD-WaitJob", "reply_schema") in failing(judge(frames, replies))


# -- a reply echoing what an invalid request sent -----------------------------------------
def test_getstate_echoing_an_id_of_the_wrong_type_is_info():
    # cases 138 and 388: GetState id 115 / null answered ok with that id
    for bad_id in (115, None):
        found = judge([frame({"cmd": "GetState", "id": bad_id, "reqId": "1"})],
                      [{"ok": True, "id": bad_id, "state": "waiting", "reqId": "1"}])
        assert not failing(found), found
        kinds = {(f.requirement, f.level, f.kind) for f in found}
        assert ("BQ-ENV-6", "NON-STRICT", "accepted_invalid") in kinds
        assert ("BQ-CMD-GetState", "INFO", "echoed_invalid") in kinds
    # a valid request answered with another id's type is still the command's shape
    found = judge([frame({"cmd": "GetState", "id": "j1", "reqId": "1"})],
                  [{"ok": True, "id": 115, "state": "waiting", "reqId": "1"}])
    assert ("BQ-CMD-GetState", "reply_schema") in failing(found)
    # as is an invalid id answered with a different bad value
    found = judge([frame({"cmd": "GetState", "id": 115, "reqId": "1"})],
                  [{"ok": True, "id": 116, "state": "waiting", "reqId": "1"}])
    assert ("BQ-CMD-GetState", "reply_schema") in failing(found)


def test_registerworker_without_name_answered_with_no_name_is_info():
    # case 151: the real server registers a worker without name and answers name undefined
    data = {"workerId": "w-1", "name": UNDEFINED, "queues": [], "registeredAt": 1}
    found = judge([frame({"cmd": "RegisterWorker", "queues": [], "reqId": "2"})],
                  [{"ok": True, "data": data, "reqId": "2"}])
    assert not failing(found), found
    assert ("BQ-CMD-RegisterWorker", "echoed_invalid") in {(f.requirement, f.kind)
                                                           for f in found}
    # with a name sent, a reply without one breaks RegisterWorker's shape
    found = judge([frame({"cmd": "RegisterWorker", "name": "w", "queues": [], "reqId": "2"})],
                  [{"ok": True, "data": data, "reqId": "2"}])
    assert ("BQ-CMD-RegisterWorker", "reply_schema") in failing(found)


# -- a reqId that is no string -------------------------------------------------------------
@pytest.mark.parametrize("rid", [-636, {"k": 1}, [7, 5], b"ds\xc8\xae"])
def test_a_reqid_that_is_no_string_may_be_left_out_of_the_reply(rid):
    # cases 96, 97, 270, 142: no (or an empty) cmd and a reqId of another type; the real
    # server answers "Invalid command" without reqId (it echoes string reqIds only)
    frames = [frame({"queue": "q", "reqId": rid})]
    refused = {"ok": False, "error": "Invalid command"}
    found = judge(frames, [refused])
    assert not failing(found), found
    assert [(f.requirement, f.level, f.kind) for f in found] == [
        ("BQ-ENV-2", "NON-STRICT", "reqid_not_echoed")]
    assert judge(frames, [{**refused, "reqId": rid}]) == []      # echoed: nothing to say
    assert ("BQ-PIPE-1", "lost_reply") in failing(judge(frames, [], timed_out=True))
    # beside a request of its own in the no-reqId group (case 312: Dlq with reqId [7, 5]
    # answered with it echoed, then a payload that is no map, answered without reqId)
    frames = [frame({"cmd": "Dlq", "queue": "q", "reqId": [7, 5]}), ENC.prefix(1) + b"\x07"]
    replies = [{"ok": False, "error": "Invalid command"}, valid("Dlq", reqId=[7, 5])]
    for order in (replies, replies[::-1]):
        assert not failing(judge(frames, order)), judge(frames, order)


def test_a_string_reqid_left_out_is_still_a_failure():
    found = judge([frame({"cmd": "GetJob", "id": "x", "reqId": "7"})],
                  [{"ok": False, "error": "Job not found"}])
    assert set(failing(found)) == {("BQ-ENV-2", "reqid_not_echoed"), ("BQ-PIPE-1", "lost_reply")}


# -- a frame nested deeper than the limit a server may apply (BQ-MSGPACK-3, a MAY) --------
def deep(cmd: dict, depth: int = 259) -> bytes:
    """``cmd`` with ``data`` nested ``depth`` arrays deep (the fuzzer's depth:259 label)."""
    body = ENC.encode({**cmd, "data": 0})[4:]
    zero = body.rindex(b"\xa4data\x00") + 5
    payload = body[:zero] + b"\x91" * depth + body[zero:]
    return ENC.prefix(len(payload)) + payload


def test_a_too_deep_frame_may_be_read_and_answered_as_its_request():
    # cases 203, 316, 374, 394: msgpackr has no depth limit; the server answers the request
    move = deep({"cmd": "MoveToDelayed", "id": "", "delay": 1, "reqId": "2"})
    exp = expect_bunqueue(Case("bunqueue", PROFILE, [move]), BQ)
    assert [i.error.kind for i in exp.items if i.error] == ["too_deep"]
    assert exp.items[0].alt["cmd"] == "MoveToDelayed"
    answered = judge([move], [{"ok": False, "error": "Job not found", "reqId": "2"}])
    assert not failing(answered) and not answered, answered
    refused = {"ok": False, "error": BQ.model.errors["invalid_command_format"].message}
    assert not judge([move], [refused])                    # refused, as the spec's decoder
    lost = judge([move], [], timed_out=True)
    assert [(f.requirement, f.level) for f in lost] == [("BQ-MSGPACK-3", "INFO")]
    # with a non-string reqId, echoed (case 316: StorageStatus, reqId [])
    status = deep({"cmd": "StorageStatus", "reqId": []}, 256)
    assert not failing(judge([status], [valid("StorageStatus", reqId=[])]))
    # next to a request reusing its reqId (cases 150, 171, 201, 224): no duplicate reply
    pull = frame({"cmd": "PULL", "queue": "x_", "timeout": 1, "reqId": "2"})
    resume = deep({"cmd": "Resume", "queue": "q", "reqId": "2"}, 256)
    replies = [{"ok": True, "reqId": "2"}, {"ok": True, "job": None, "reqId": "2"}]
    for order in (replies, replies[::-1]):
        assert not failing(judge([resume, pull], order)), judge([resume, pull], order)


def test_a_depth_the_spec_requires_is_not_let_pass():
    # the lenient reading is only for a rule that is no MUST: a reply to another reqId
    # than any request's still is an unknown reqId
    found = judge([frame({"cmd": "Ping", "reqId": "1"})],
                  [valid("Ping", reqId="1"), valid("Ping", reqId="9")])
    assert ("BQ-ENV-2", "unknown_reqid") in failing(found)


# -- a frame error whose reply a later fatal frame's close cut off --------------------------
def test_a_frame_error_lost_to_a_demanded_close_is_a_reading():
    # cases 100, 349: frames with trailing bytes, then (same write) a prefix over 64 MB;
    # the real server closes at once with the one "Frame too large" reply (bunqueue's frame
    # parser throws on the prefix before the frames read with it are handled)
    trailing = bytes.fromhex("0000000b81a3636d64a450696e6700")
    huge = ENC.prefix(BQ.model.max_frame_bytes + 1)
    too_large = {"ok": False, "error": BQ.model.errors["frame_too_large"].message.format(
        length=BQ.model.max_frame_bytes + 1, max=BQ.model.max_frame_bytes)}
    found = judge([trailing, trailing, huge], [too_large], closed=True)
    assert [(f.requirement, f.level, f.kind) for f in found] == [
        ("BQ-MSGPACK-1", "NON-STRICT", "lost_before_close")]
    assert judge([trailing, huge], [too_large], closed=True) == []  # it may be that one's
    # alone, the trailing bytes must be answered: unanswered, that is still a failure
    found = judge([trailing], [], timed_out=True)
    assert failing(found) == [("BQ-MSGPACK-1", "lost_reply")]
