"""Passive profile detection (queuewire.traffic.detect) and the analyzer that holds the
traffic back until it decides: every frame built by the codecs from the profiles' data."""

from __future__ import annotations

import pytest

from queuewire.codecs.bunqueue import encode_frame
from queuewire.codecs.quicx import QuicxEncoder
from queuewire.spec import default_profile, load_profile, profile_names
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.detect import Detector, ProfileChoice
from queuewire.traffic.model import Pair

V1, N103 = load_profile("quicx/v1"), load_profile("quicx/1.0.3")
BQ2, BQ295 = load_profile("bunqueue/v2"), load_profile("bunqueue/2.9.5")


def _worker(profile) -> list[tuple[str, bytes]]:
    """A worker's conversation as ``profile`` writes it: READY, TASK, DONE."""
    enc = QuicxEncoder(profile)
    return [("c2s", enc.encode("MSG_READY")),
            ("s2c", enc.encode("MSG_TASK", task_id=7, task_type="work", payload=b"abc")),
            ("c2s", enc.encode("MSG_DONE", task_id=7))]


def _producer(profile) -> list[tuple[str, bytes]]:
    enc = QuicxEncoder(profile)
    return [("c2s", enc.encode("MSG_SUBMIT", task_type="work", payload=b"abc")),
            ("s2c", enc.encode("MSG_OK", task_id=7))]


def _detect(protocol: str, frames: list[tuple[str, bytes]], conn: int = 1) -> Detector:
    det = Detector(protocol)
    for direction, raw in frames:
        det.frame(conn, direction, raw)
    return det


def _hello_reply(profile, req_id: str = "h") -> dict:
    """The Hello reply a server of ``profile`` gives (its data: version and capabilities)."""
    return {"ok": True, "protocolVersion": profile.model.protocol_version,
            "capabilities": list(profile.model.capabilities), "server": "bunqueue",
            "version": "x", "reqId": req_id}


def _event(kind: str = "pushed") -> dict:
    return {"type": BQ295.tree["job_events"]["frame"]["properties"]["type"]["const"],
            "event": {"eventType": kind, "queue": "q", "jobId": "j1", "timestamp": 1}}


# -- quicx ------------------------------------------------------------------------------------
def test_a_v1_worker_is_told_by_the_opcode_of_its_task():
    det = _detect("quicx", _worker(V1))
    assert det.decided
    choice = det.choice()
    assert (choice.profile, choice.how) == ("quicx/v1", "detected")
    code = V1.model.messages["MSG_TASK"].code
    assert choice.evidence[0].startswith(f"daemon-to-client frames of type 0x{code:02x}")
    assert "quicx/v1 reads MSG_TASK" in choice.evidence[0]
    assert "quicx/1.0.3 refuses them" in choice.evidence[0]


def test_a_1_0_3_worker_and_a_producer_hearing_its_result_are_told_apart_from_v1():
    det = _detect("quicx", _worker(N103))
    choice = det.choice()
    assert (choice.profile, choice.how) == ("quicx/1.0.3", "detected")
    assert "quicx/1.0.3 reads MSG_TASK" in choice.line and "quicx/v1 refuses" in choice.line
    # a 1.0.3 producer: its task's MSG_DONE forwarded to it, which v1 cannot read that way
    forwarded = [*_producer(N103), ("s2c", QuicxEncoder(N103).encode("MSG_DONE", task_id=7))]
    det = _detect("quicx", forwarded)
    assert det.decided and det.choice().profile == "quicx/1.0.3"
    assert "reads MSG_DONE" in det.choice().evidence[0]


def test_traffic_both_quicx_profiles_read_alike_keeps_the_default():
    det = _detect("quicx", _producer(V1) * 3)
    assert not det.decided and not det.facts
    choice = det.choice()
    assert choice == ProfileChoice(default_profile("quicx"), "default", (),
                                   "no distinguishing traffic")
    assert choice.line == f"{default_profile('quicx')} (default: no distinguishing traffic)"
    assert det.frames == 6


def test_client_frames_count_only_when_the_server_says_nothing():
    enc = QuicxEncoder(N103)
    done = ("c2s", enc.encode("MSG_DONE", task_id=9))    # 1.0.3's opcode, a task v1 sends
    det = _detect("quicx", [done, done])
    assert not det.decided                               # the client's frames only
    choice = det.choice()
    assert (choice.profile, choice.how) == ("quicx/1.0.3", "detected")
    assert choice.evidence[0].startswith("client-to-daemon frames") and "(x2)" in choice.evidence[0]
    # a v1 daemon's frames outweigh a 1.0.3 client's (the server speaks for the wire)
    det = _detect("quicx", [done, done, *_worker(V1)[1:2]])
    assert det.decided and det.choice().profile == "quicx/v1"


def test_evidence_that_disagrees_does_not_decide():
    det = _detect("quicx", [*_worker(V1)[1:2], *_worker(N103)[1:2]])
    assert not det.decided
    choice = det.choice()
    assert (choice.profile, choice.how, choice.note) == (
        default_profile("quicx"), "default", "the traffic does not decide")
    assert len(choice.evidence) == 2 and "the traffic does not decide: " in choice.line


# -- bunqueue ---------------------------------------------------------------------------------
def fitting(claim: str, fits) -> str:
    """How a fact's evidence line names the bunqueue profiles it fits (``fits(profile)``):
    "only X <claim>", or "X, Y: <claim>; not Z" where several fit (bunqueue/v3 speaks what
    bunqueue/2.9.5 does)."""
    names = profile_names("bunqueue")
    yes = [n for n in names if fits(load_profile(n))]
    no = [n for n in names if n not in yes]
    return f"only {yes[0]} {claim}" if len(yes) == 1 else \
        f"{', '.join(yes)}: {claim}; not {', '.join(no)}"


@pytest.mark.parametrize("profile", [BQ2, BQ295], ids=lambda p: p.name)
def test_the_hello_reply_names_the_profile(profile):
    other = BQ295 if profile is BQ2 else BQ2
    det = _detect("bunqueue", [
        ("c2s", encode_frame({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"})),
        ("s2c", encode_frame(_hello_reply(profile)))])
    assert det.decided
    choice = det.choice()
    assert (choice.profile, choice.how) == (profile.name, "detected")
    version = profile.model.protocol_version
    assert choice.evidence[0] == (
        f"Hello reply: protocolVersion {version} (server bunqueue, version x): "
        + fitting(f"speaks protocol version {version}",
                  lambda p: p.model.protocol_version == version))
    caps = ", ".join(sorted(profile.model.capabilities))
    assert choice.evidence[1] == (
        f"Hello reply: capabilities [{caps}]: "
        + fitting("has exactly these capabilities",
                  lambda p: p.model.capabilities == profile.model.capabilities))
    assert choice.profile != other.name and f"only {other.name}" not in choice.line


def test_pushed_events_alone_name_2_9_5():
    """A capture that starts after the subscription: only the pushed frames tell."""
    det = _detect("bunqueue", [("s2c", encode_frame(_event(k)))
                               for k in ("pushed", "pulled", "completed")])
    assert det.decided
    choice = det.choice()
    assert (choice.profile, choice.how) == ("bunqueue/2.9.5", "detected")
    assert choice.evidence == ("pushed frames without reqId of type event (x3): "
                               + fitting("defines job_events", lambda p: "job_events" in p.tree),)


def test_a_command_only_one_profile_has_tells_by_its_answer():
    ok = _detect("bunqueue", [
        ("c2s", encode_frame({"cmd": "SubscribeEvents", "queue": "q", "reqId": 1})),
        ("s2c", encode_frame({"ok": True, "reqId": 1}))])
    assert ok.choice().profile == "bunqueue/2.9.5"
    assert ok.choice().evidence[0] == (
        "SubscribeEvents answered ok: "
        + fitting("defines SubscribeEvents", lambda p: "SubscribeEvents" in p.model.commands))
    unknown = BQ2.model.errors["unknown_command"].message.format(cmd="SubscribeEvents")
    refused = _detect("bunqueue", [   # without reqId: answered in order
        ("c2s", encode_frame({"cmd": "SubscribeEvents", "queue": "q"})),
        ("s2c", encode_frame({"ok": False, "error": unknown}))])
    assert refused.decided and refused.choice().profile == "bunqueue/v2"
    assert "refused as an unknown command: only bunqueue/v2 lacks SubscribeEvents" in \
        refused.choice().line


def test_bunqueue_traffic_every_profile_allows_is_no_evidence():
    frames = []
    for i in range(5):
        frames += [("c2s", encode_frame({"cmd": "Ping", "reqId": str(i)})),
                   ("s2c", encode_frame({"ok": True, "reqId": str(i)}))]
    det = _detect("bunqueue", frames)
    assert not det.facts
    assert det.choice().line == "bunqueue/v2 (default: no distinguishing traffic)"


def test_profile_choice_lines():
    assert ProfileChoice.given("quicx/1.0.3").line == "quicx/1.0.3 (from --profile)"
    many = ProfileChoice("p", "detected", tuple(f"e{i}" for i in range(6)))
    assert many.line == "p (detected: e0; e1; e2; e3; 2 more)"
    assert ProfileChoice("p", "recorded", (), "the recordings name p").as_dict() == {
        "profile": "p", "how": "recorded", "evidence": [], "note": "the recordings name p",
        "line": "p (recorded: the recordings name p)"}


# -- the analyzer that holds the traffic until the profile is known -------------------------
def _feed(analyzer: Analyzer, conns: list[list[tuple[str, bytes]]]) -> list:
    out: list = []
    t = 1_000
    for cid, chunks in enumerate(conns, start=1):
        t += 10
        out += analyzer.open(cid, t, client=f"c{cid}", upstream="u")
        for direction, data in chunks:
            t += 10
            out += analyzer.feed(cid, direction, data, t)
        t += 10
        out += analyzer.close(cid, t)
    return out


def _subscriber() -> list[tuple[str, bytes]]:
    return [("c2s", encode_frame({"cmd": "SubscribeEvents", "queue": "q", "reqId": "s"})),
            ("s2c", encode_frame({"ok": True, "reqId": "s"})),
            *(("s2c", encode_frame(_event(k))) for k in ("pushed", "pulled", "completed") * 20)]


def test_detecting_analyzer_judges_held_traffic_as_if_the_profile_were_given():
    seen: list[ProfileChoice] = []
    detecting = Analyzer("bunqueue", detect=True, on_profile=seen.append)
    assert detecting.choice is None
    events = _feed(detecting, [_subscriber()])
    assert [c.profile for c in seen] == ["bunqueue/2.9.5"]      # told once, when it decided
    assert any(isinstance(e, Pair) and e.command == "SubscribeEvents" for e in events)
    summary = detecting.summary()
    given = Analyzer("bunqueue", "bunqueue/2.9.5")
    _feed(given, [_subscriber()])
    expected = given.summary()
    assert summary["profile"] == "bunqueue/2.9.5"
    assert summary["profile_choice"]["how"] == "detected"
    assert "SubscribeEvents answered ok" in summary["profile_choice"]["line"]
    assert expected["profile_choice"]["line"] == "bunqueue/2.9.5 (from --profile)"
    for key in ("totals", "commands", "requirements", "connections"):
        assert summary[key] == expected[key], key
    assert summary["totals"]["events"] == 60
    assert not [r for r in summary["requirements"] if r["kind"] == "reply_unpaired"]
    # the default profile, which knows no pushed events, finds 60 unpaired frames in it
    default = Analyzer("bunqueue")
    _feed(default, [_subscriber()])
    unpaired = [r for r in default.summary()["requirements"] if r["kind"] == "reply_unpaired"]
    assert unpaired and unpaired[0]["count"] == 60
    assert default.summary()["profile_choice"]["line"] == "bunqueue/v2 (default: not detected)"


def test_nothing_distinguishing_is_held_until_the_end_then_judged_under_the_default():
    analyzer = Analyzer("quicx", detect=True)
    analyzer.open(1, 10, client="c", upstream="u")
    for i, (direction, data) in enumerate(_producer(V1) * 4):
        assert analyzer.feed(1, direction, data, 20 + i) == []   # held
    assert analyzer.open_connections == 0 and analyzer.choice is None
    analyzer.close_all(100)
    assert analyzer.choice is not None
    assert analyzer.choice.line == "quicx/v1 (default: no distinguishing traffic)"
    summary = analyzer.summary()
    assert summary["totals"]["paired"] == 4 and summary["connections"][0]["close_reason"] == \
        "tap_stopped"


def test_holding_is_bounded_and_says_how_far_it_looked():
    analyzer = Analyzer("bunqueue", detect=True, hold_bytes=100)
    out: list = []
    analyzer.open(1, 1, client="c", upstream="u")
    ping = encode_frame({"cmd": "Ping", "reqId": "1"})
    pong = encode_frame({"ok": True, "reqId": "1"})
    out += analyzer.feed(1, "c2s", ping, 2)
    out += analyzer.feed(1, "s2c", pong, 3)
    assert analyzer.choice is None and out == []
    while analyzer.choice is None:
        out += analyzer.feed(1, "c2s", ping, 4)
    held = analyzer.summary()["profile_choice"]
    assert held["how"] == "default" and held["note"].startswith(
        "no distinguishing traffic in the first ") and held["note"].endswith(" bytes")
    assert [e.command for e in out if isinstance(e, Pair)] == ["Ping"]   # the held pair
    # from then on, judged as it comes
    assert [e.command for e in analyzer.feed(1, "s2c", pong, 5) if isinstance(e, Pair)] == ["Ping"]


def test_detect_and_a_profile_exclude_each_other():
    with pytest.raises(ValueError, match="detect chooses the profile"):
        Analyzer("bunqueue", "bunqueue/v2", detect=True)
