"""One recorded exchange with known violations, judged by every tool that judges bunqueue frames:
conform client's checker, the fuzz oracles, the tap and the trace pipeline (its local engine:
the same decoder Spark runs, without Spark). All four judge through the one registry of checks
(:mod:`queuewire.judge.exchange`), so they report the same requirement ids at the same
verdicts.

The exchange breaks, on the client's side: no Hello first (BQ-HELLO-1, SHOULD), a reqId reused
while in flight (BQ-PIPE-4, MUST), a limit (a PUSH priority above the 000 table's maximum), an
unknown command (BQ-ENV-5, SHOULD); on the server's side: a reply missing a field of its command's reply.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.conformance.client.checker import ClientChecker
from queuewire.fuzz.case import Case
from queuewire.fuzz.oracles import BunqueueJudge, expect_bunqueue
from queuewire.judge import Verdict, verdict_for
from queuewire.judge.exchange import CHECKS
from queuewire.spec import load_profile
from queuewire.trace.analyze import analyze
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.record import Recorder

PROFILE_NAME = "bunqueue/v2"
PROFILE = load_profile(PROFILE_NAME)

# (client request, server reply): in this order on one connection, every request sent first
EXCHANGE = [
    ({"cmd": "PUSH", "queue": "q", "data": {"n": 1}, "reqId": "a"}, {"ok": True, "id": "1",
                                                                       "reqId": "a"}),
    ({"cmd": "Ping", "reqId": "b"}, {"ok": True, "data": {"pong": True, "time": 1}, "reqId": "b"}),
    ({"cmd": "Count", "queue": "q", "reqId": "b"}, {"ok": True, "count": 1, "reqId": "b"}),
    ({"cmd": "PUSH", "queue": "q", "data": {}, "priority": 2_000_000, "reqId": "c"},
     {"ok": False, "error": "priority must be at most 1000000", "reqId": "c"}),
    ({"cmd": "Frobnicate", "reqId": "d"}, {"ok": False, "error": "Unknown command: Frobnicate",
                                            "reqId": "d"}),
    ({"cmd": "PUSH", "queue": "q", "data": {"n": 2}, "reqId": "e"}, {"ok": True, "reqId": "e"}),
]
HELLO_REPLY = {"ok": True, "protocolVersion": 2, "capabilities": ["pipelining"], "server": "bunqueue",
               "version": "2.0.0", "reqId": "h"}

#: what the exchange breaks, as (requirement, verdict): the test's own reading of the documents
EXPECTED = {
    ("BQ-HELLO-1", Verdict.NON_STRICT),   # opened with PUSH
    ("BQ-PIPE-4", Verdict.FAIL),          # reqId "b" reused while in flight
    ("BQ-ENV-5", Verdict.NON_STRICT),     # Frobnicate
    ("BQ-CMD-PUSH", Verdict.FAIL),        # the second PUSH's reply has no id
}


def _limit_requirement() -> str:
    """The requirement the priority limit cites (from the validator, not restated here)."""
    from queuewire.codecs.validation import BunqueueValidator
    (v,) = BunqueueValidator(PROFILE).request_violations(EXCHANGE[3][0])
    return v.requirement


def _judged(pairs) -> set[tuple[str, Verdict]]:
    """(requirement, verdict) above INFO."""
    return {(rid, Verdict(level)) for rid, level in pairs if rid and Verdict(level) is not Verdict.INFO}


def _wire(exchange: list) -> tuple[bytes, bytes]:
    """The client's bytes and the server's, of an exchange of (request, reply)."""
    return (b"".join(encode_frame(req) for req, _ in exchange),
            b"".join(encode_frame(rep) for _, rep in exchange))


def _checker(exchange: list) -> set[tuple[str, Verdict]]:
    client, server = _wire(exchange)
    checker = ClientChecker(PROFILE, replies=True)
    checker.opened(1)
    frames, error = checker.feed(1, client, 0.0)
    assert error is None and len(frames) == len(exchange)
    for (request, _), reply in zip(exchange, FrameDecoder(PROFILE).feed(server)):
        checker.replied(1, request, reply, 0.1)
    return _judged((c.requirement, verdict_for(c.level)) for c in checker.checks() if not c.ok)


def _oracles(exchange: list) -> set[tuple[str, Verdict]]:
    judge = BunqueueJudge(PROFILE)
    exp = expect_bunqueue(Case("bunqueue", PROFILE_NAME, [encode_frame(r) for r, _ in exchange]),
                          PROFILE)
    replies = FrameDecoder(PROFILE).feed(_wire(exchange)[1])
    findings = judge.judge_requests(exp) + judge.judge(exp, replies, closed=False, timed_out=False)
    return _judged((f.requirement, f.level) for f in findings)


def _tapped_bytes(client: bytes, server: bytes, profile: str = PROFILE_NAME,
                  sink=None) -> Analyzer:
    """The tap's analyzer after one connection that carried ``client`` and ``server``."""
    analyzer = Analyzer("bunqueue", profile, sink=sink)
    analyzer.open(1, 1_000, client="127.0.0.1:5001", upstream="127.0.0.1:6789")
    analyzer.feed(1, "c2s", client, 2_000)
    analyzer.feed(1, "s2c", server, 3_000)
    analyzer.close(1, 4_000, "eof")
    return analyzer


def _tapped(exchange: list, sink=None) -> Analyzer:
    return _tapped_bytes(*_wire(exchange), sink=sink)


def _tap_bytes(client: bytes, server: bytes, profile: str = PROFILE_NAME) -> set[tuple[str, Verdict]]:
    findings = _tapped_bytes(client, server, profile).summary()["findings"]
    return _judged((f["requirement"], f["level"]) for f in findings)


def _tap(exchange: list) -> set[tuple[str, Verdict]]:
    return _tap_bytes(*_wire(exchange))


def _trace_bytes(client: bytes, server: bytes, tmp_path, profile: str = PROFILE_NAME
                 ) -> set[tuple[str, Verdict]]:
    recorder = Recorder(tmp_path / "rec", protocol="bunqueue", profile=profile, run="t")
    _tapped_bytes(client, server, profile, sink=recorder.write)
    recorder.close()
    analyze([tmp_path / "rec"], tmp_path / "out", engine="local", html=False)
    rows = pq.read_table(tmp_path / "out" / "violations").to_pylist()
    return _judged((r["requirement"], r["level"]) for r in rows)


def _trace(exchange: list, tmp_path) -> set[tuple[str, Verdict]]:
    return _trace_bytes(*_wire(exchange), tmp_path)


def test_the_exchange_breaks_what_it_means_to():
    """The test's own premise, from the spec: the limit is a MUST of the profile."""
    assert PROFILE.requirements[_limit_requirement()].level == "MUST"


def test_every_tool_reports_the_same_requirements_at_the_same_verdicts(tmp_path):
    expected = EXPECTED | {(_limit_requirement(), Verdict.FAIL)}
    results = {"checker": _checker(EXCHANGE), "oracles": _oracles(EXCHANGE), "tap": _tap(EXCHANGE),
               "trace": _trace(EXCHANGE, tmp_path)}
    for tool, found in results.items():
        assert found == expected, (tool, json.dumps(sorted(found), default=str))


def test_the_registry_names_each_check_once_with_a_requirement():
    assert len(CHECKS) == len({c.name for c in CHECKS.values()})
    for c in CHECKS.values():
        assert c.on in ("request", "reply", "event", "unreadable") and c.requirement and c.doc


@pytest.mark.parametrize("tool", ["checker", "oracles", "tap"])
@pytest.mark.parametrize("broken", [{"ok": True, "data": {"pong": 1}}, {"ok": True, "odd": 1}])
def test_a_broken_reply_to_a_shared_reqid_is_judged_alike_by_every_tool(tool, broken):
    """Two requests in flight with one reqId (the client's fault, BQ-PIPE-4). A valid reply
    answers its own request; the other reply is judged against the request left (by
    elimination) or the one whose command's reply fields it has: every tool blames the server
    for the Ping reply's shape."""
    exchange = [({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"}, HELLO_REPLY),
                ({"cmd": "Count", "queue": "q", "reqId": "b"}, {"ok": True, "count": 1, "reqId": "b"}),
                ({"cmd": "Ping", "reqId": "b"}, {**broken, "reqId": "b"})]
    assert _with(exchange, tool) == {("BQ-PIPE-4", Verdict.FAIL), ("BQ-CMD-Ping", Verdict.FAIL)}


def test_a_reply_that_fits_none_of_a_shared_reqid_is_info_on_the_tap():
    """Online, the tap cannot tell which of two requests sharing a reqId a reply that fits
    neither answers: its shape is INFO there (the fuzz oracles, which see every reply of a case
    at once, match it by elimination: the one place the tools may differ, and only on the
    client's ambiguity)."""
    exchange = [({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"}, HELLO_REPLY),
                ({"cmd": "Ping", "reqId": "b"}, {"ok": True, "odd": 1, "reqId": "b"}),
                ({"cmd": "Count", "queue": "q", "reqId": "b"}, {"ok": True, "count": 1, "reqId": "b"})]
    assert _tap(exchange) == {("BQ-PIPE-4", Verdict.FAIL)}


@pytest.mark.parametrize("tool", ["checker", "oracles", "tap"])
def test_a_clean_exchange_gives_no_finding_above_info(tool):
    """The same tools on a well-behaved exchange: Hello first, unique reqIds, valid replies."""
    exchange = [({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"}, HELLO_REPLY),
                ({"cmd": "Ping", "reqId": "p"}, {"ok": True, "data": {"pong": True, "time": 1},
                                                 "reqId": "p"})]
    assert _with(exchange, tool) == set()


TOOLS = {"checker": _checker, "oracles": _oracles, "tap": _tap}


def _with(exchange: list, tool: str) -> set[tuple[str, Verdict]]:
    return TOOLS[tool](exchange)


def test_the_quiet_reply_shortcut_never_hides_a_finding():
    """quiet_reply (the tap's hot path) says "nothing to find" only where judge_reply finds
    nothing: real replies of the reference engine, each also with a field dropped, a field
    added, ok flipped, and as the answer to an invalid request or an unknown command."""
    from queuewire.judge.exchange import Judgement, Pending, judge_reply, quiet_reply
    from queuewire.reference_server.bunqueue import BunqueueEngine

    engine = BunqueueEngine(PROFILE_NAME)
    requests = [{"cmd": "PUSH", "queue": "q", "data": {"n": 1}}, {"cmd": "Ping"},
                {"cmd": "Count", "queue": "q"}, {"cmd": "PULL", "queue": "q"},
                {"cmd": "GetJobCounts", "queue": "q"}, {"cmd": "ListQueues"},
                {"cmd": "Stats"}, {"cmd": "PULL", "queue": "empty"}]
    j = Judgement(PROFILE)
    checked = 0
    for request in requests:
        reply = engine.handle("c1", request)
        assert isinstance(reply, dict)
        variants = [reply, {**reply, "extra": 1}, {**reply, "ok": not reply.get("ok")}]
        variants += [{k: v for k, v in reply.items() if k != key} for key in reply]
        for variant in variants:
            for pending in (Pending(request["cmd"], 0),
                            Pending(request["cmd"], 0, bad=(request, (None,))),
                            Pending("Frobnicate", 0)):
                if quiet_reply(j, pending, variant):
                    assert judge_reply(j, pending, variant) == [], (pending, variant)
                    checked += 1
    assert checked >= len(requests)   # the shortcut was taken, on the untouched replies at least


def test_the_int64_rule_of_v3_is_judged_from_the_bytes_alike_by_checker_tap_and_trace(tmp_path):
    """bunqueue/v3's msgpack.client_forms: a request that writes a timestamp as uint64 and
    3000000000 as uint32 (as msgpack-python and msgpackr do) FAILs BQ-MSGPACK-203 and
    BQ-MSGPACK-204 in the checker (conform client, fuzz --client), the tap and the trace
    pipeline, each reading the frame's bytes; the same bytes under bunqueue/2.9.5 break
    neither (its profile has no such rule)."""
    import struct

    name = "bunqueue/v3"
    v3 = load_profile(name)
    payload = (b"\x84\xa3cmd\xa4PUSH\xa5queue\xa1q\xa5reqId\xa1a\xa4data\x82\xa1t\xcf"
               + struct.pack(">Q", 1764000000000) + b"\xa1n\xce" + struct.pack(">I", 3_000_000_000))
    client = struct.pack(">I", len(payload)) + payload
    server = encode_frame({"ok": True, "id": "1", "reqId": "a"}, v3)
    expected = {("BQ-MSGPACK-203", Verdict.FAIL), ("BQ-MSGPACK-204", Verdict.FAIL)}

    def forms(found):
        return {f for f in found if f[0] in ("BQ-MSGPACK-203", "BQ-MSGPACK-204")}

    checker = ClientChecker(v3, replies=True)
    checker.opened(1)
    (request,), error = checker.feed(1, client, 0.0)
    assert error is None
    checker.replied(1, request, FrameDecoder(v3).feed(server)[0], 0.1)
    by_checker = forms(_judged((c.requirement, verdict_for(c.level))
                               for c in checker.checks() if not c.ok))

    by_tap = forms(_tap_bytes(client, server, name))
    by_trace = forms(_trace_bytes(client, server, tmp_path, name))
    assert by_checker == by_tap == by_trace == expected, (by_checker, by_tap, by_trace)
    assert forms(_tap_bytes(client, server, "bunqueue/2.9.5")) == set()
