"""A quicx daemon may read a whole frame before it validates it: 004 says nothing about when a
bad version or type is refused (issue 30, item 1). The fuzzer's oracle accepts both such a
daemon and one that refuses from the header at once: a refusal whose frame declares more
payload than the case ever sends may go unanswered, while a refusal of a frame that did
arrive whole must still be answered."""

from __future__ import annotations

import struct

import pytest

from queuewire.fuzz.campaign import campaign
from queuewire.fuzz.case import Case
from queuewire.fuzz.oracles import QuicxJudge, expect_quicx
from queuewire.reference_server.quicx.connection import QuicxConnection
from queuewire.reference_server.quicx.tcp import QuicxServer
from queuewire.spec import load_profile
from queuewire.spec.quicx import struct_format

PROFILE = "quicx/v1"
SPEC = load_profile(PROFILE).model
HEAD = struct.Struct(struct_format(SPEC.header))
AT = [f.id for f in SPEC.header].index("len_payload")
VERSION = SPEC.header[0]   # the version field leads the header


class WholeFrameConnection(QuicxConnection):
    """A design variant: bytes reach the protocol only as whole frames (a length over the
    largest size class is still refused from the header: nothing could ever complete it)."""

    def __init__(self, engine):
        super().__init__(engine)
        self.held = b""

    def receive_data(self, data: bytes) -> None:
        buf = self.held + bytes(data)
        cut = 0
        while len(buf) - cut >= HEAD.size:
            declared = HEAD.unpack_from(buf, cut)[AT]
            if declared > self.engine.pool.largest_class:
                cut = len(buf)
                break
            if len(buf) - cut < HEAD.size + declared:
                break
            cut += HEAD.size + declared
        self.held = buf[cut:]
        super().receive_data(buf[:cut])


class WholeFrameServer(QuicxServer):
    connection = WholeFrameConnection


def _bad_version(declared: int, sent: int) -> bytes:
    fields = [0] * len(SPEC.header)
    fields[0] = 0xEE                      # no accepted version
    fields[1] = 1
    fields[AT] = declared
    return HEAD.pack(*fields) + b"x" * sent


def test_a_refusal_of_a_frame_that_never_completes_may_go_unanswered():
    judge, profile = QuicxJudge(load_profile(PROFILE)), load_profile(PROFILE)
    cut_short = Case("quicx", PROFILE, [_bad_version(100, 3)])
    exp = expect_quicx(cut_short, profile)
    assert len(exp.errors) == 1 and exp.optional == 1
    assert judge.judge(exp, [], closed=False, timed_out=True) == []
    whole = Case("quicx", PROFILE, [_bad_version(3, 3)])
    exp = expect_quicx(whole, profile)
    assert exp.optional == 0
    (lost,) = judge.judge(exp, [], closed=False, timed_out=True)
    assert lost.kind == "lost_reply" and lost.fails


@pytest.mark.asyncio
async def test_a_daemon_that_validates_whole_frames_passes_a_bounded_fuzz_run():
    async with WholeFrameServer(PROFILE, port=0) as server:
        stats = await campaign("quicx", PROFILE, "127.0.0.1", server.port, seed=2026,
                               duration=3.0, workers=1, prewarm=False, housekeeping=False)
    assert stats.cases > 50
    assert stats.failures == 0, [(c.index, [str(f) for f in fs if f.fails])
                                 for c, _s, fs in stats.failed]


# -- what the plain fuzzer's quicx oracle says of answers (issue 30, items 3 and 6) -----------
def _frames(*names_fields) -> Case:
    from queuewire.codecs.quicx import QuicxEncoder
    enc = QuicxEncoder(PROFILE)
    return Case("quicx", PROFILE, [enc.encode(n, **f) for n, f in names_fields])


def test_a_heartbeat_or_stats_left_unanswered_is_a_finding_under_its_rule():
    judge, profile = QuicxJudge(load_profile(PROFILE)), load_profile(PROFILE)
    exp = expect_quicx(_frames(("MSG_HEARTBEAT", {}), ("MSG_STATS", {}), ("MSG_READY", {}),
                               ("MSG_SUBMIT", {"task_type": "t", "payload": b"p"})), profile)
    lost = judge.judge(exp, [], closed=True, timed_out=False)
    assert {(f.requirement, f.kind) for f in lost} == {
        ("QX-HB-2", "lost_reply"), ("QX-STATS-2", "lost_reply"), ("QX-READY-3", "lost_reply"),
        ("QX-OK-1", "lost_reply")}
    assert all(f.fails for f in lost)


def test_answers_lost_after_a_refusal_and_a_close_are_the_close_not_the_rules():
    from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
    judge, profile = QuicxJudge(load_profile(PROFILE)), load_profile(PROFILE)
    enc = QuicxEncoder(PROFILE)
    case = Case("quicx", PROFILE, [_bad_version(3, 3), enc.heartbeat(), _bad_version(2, 2)])
    exp = expect_quicx(case, profile)
    refusal = QuicxDecoder(PROFILE, "producer").feed(enc.error("INVALID_MESSAGE", "v"))
    (close,) = {f.requirement for f in judge.judge(exp, refusal, closed=True, timed_out=False)}
    assert close == SPEC.semantics["open_after_error"].requirement   # QX-ERR-6, a SHOULD


def test_a_missing_refusal_is_named_by_the_codes_that_did_come():
    from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
    judge, profile = QuicxJudge(load_profile(PROFILE)), load_profile(PROFILE)
    enc = QuicxEncoder(PROFILE)
    unknown_type = HEAD.pack(*[1, 0xEE, 0][:len(SPEC.header)])
    exp = expect_quicx(Case("quicx", PROFILE, [unknown_type, _bad_version(2, 2),
                                               enc.heartbeat()]), profile)
    assert [e.kind for e in exp.errors] == ["unknown_type", "bad_version"]
    one = QuicxDecoder(PROFILE, "producer").feed(enc.error("INVALID_MESSAGE", "?"))
    one += QuicxDecoder(PROFILE, "producer").feed(enc.pong())
    (lost,) = judge.judge(exp, one, closed=False, timed_out=True)
    assert lost.kind == "lost_reply" and "one of unknown_type, bad_version" in lost.message
    assert lost.requirement == "QX-ERR-3"   # the rule both refusals rest on, not either one


def test_stats_figures_that_cannot_be_right_are_a_should_finding():
    from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
    judge, profile = QuicxJudge(load_profile(PROFILE)), load_profile(PROFILE)
    enc = QuicxEncoder(PROFILE)
    exp = expect_quicx(_frames(("MSG_STATS", {})), profile)
    reply = QuicxDecoder(PROFILE, "monitor").feed(enc.stats_response(
        queue_depth=0, workers_total=1, workers_idle=2, pmad_bytes_used=9, pmad_bytes_total=8))
    (odd,) = judge.judge(exp, reply, closed=True, timed_out=False)
    assert odd.requirement == "QX-STATS-5" and odd.kind == "stats_figures" and not odd.fails
