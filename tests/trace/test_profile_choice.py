"""``trace analyze`` chooses the profile from the recordings' traffic, else from what the
files name, else the protocol's default, and says which and why (recordings made sans-IO
with the tap's analyzer and recorder)."""

from __future__ import annotations

import json

import pytest
from trace_helpers import record_chunks

from queuewire.codecs.bunqueue import encode_frame
from queuewire.codecs.quicx import QuicxEncoder
from queuewire.spec import load_profile
from queuewire.trace.analyze import analyze, detect_files, find_inputs, settle_profile
from queuewire.traffic.trace_format import TraceError

PINGS = [[("c2s", encode_frame({"cmd": "Ping", "reqId": str(i)})),
          ("s2c", encode_frame({"ok": True, "reqId": str(i)}))] for i in range(2)]


def _hello(profile: str) -> list[list[tuple[str, bytes]]]:
    model = load_profile(profile).model
    return [[("c2s", encode_frame({"cmd": "Hello", "protocolVersion": 2, "reqId": "h"})),
             ("s2c", encode_frame({"ok": True, "protocolVersion": model.protocol_version,
                                   "capabilities": list(model.capabilities),
                                   "server": "bunqueue", "version": "x", "reqId": "h"}))]]


def _settle(*dirs, protocol=None, profile=None):
    return settle_profile(find_inputs(list(dirs)), protocol, profile)


def test_without_distinguishing_traffic_the_recorded_profile_is_kept(tmp_path):
    record_chunks(tmp_path / "r", "bunqueue", "bunqueue/2.9.5", PINGS)
    prof, choice = _settle(tmp_path / "r")
    assert prof.name == "bunqueue/2.9.5" and choice.how == "recorded"
    assert choice.line == ("bunqueue/2.9.5 (recorded: the recordings name bunqueue/2.9.5; "
                           "no distinguishing traffic)")


def test_the_traffic_overrides_what_the_files_name_and_says_so(tmp_path):
    record_chunks(tmp_path / "a", "bunqueue", "bunqueue/2.9.5", PINGS)
    record_chunks(tmp_path / "b", "bunqueue", "bunqueue/2.9.5", _hello("bunqueue/v2"))
    prof, choice = _settle(tmp_path / "a", tmp_path / "b")
    assert prof.name == "bunqueue/v2" and choice.how == "detected"
    assert choice.evidence[0].startswith("Hello reply: protocolVersion 2")
    assert choice.evidence[-1] == "but the recordings name bunqueue/2.9.5"
    # told: no detection at all
    prof, choice = _settle(tmp_path / "a", tmp_path / "b", profile="bunqueue/2.9.5")
    assert (prof.name, choice.line) == ("bunqueue/2.9.5", "bunqueue/2.9.5 (from --profile)")


def test_recordings_of_several_profiles_that_the_traffic_cannot_tell_apart_are_refused(tmp_path):
    record_chunks(tmp_path / "a", "bunqueue", "bunqueue/2.9.5", PINGS)
    record_chunks(tmp_path / "b", "bunqueue", "bunqueue/v2", PINGS)
    with pytest.raises(TraceError, match="several profiles .* their traffic does not tell "
                                         "which: choose one with --profile"):
        _settle(tmp_path / "a", tmp_path / "b")
    # one Hello reply among them decides
    record_chunks(tmp_path / "c", "bunqueue", "bunqueue/v2", _hello("bunqueue/2.9.5"))
    prof, choice = _settle(tmp_path / "a", tmp_path / "b", tmp_path / "c")
    assert prof.name == "bunqueue/2.9.5"
    assert choice.evidence[-1] == "but the recordings name bunqueue/2.9.5, bunqueue/v2"


def test_detection_reads_no_further_than_its_limit(tmp_path):
    record_chunks(tmp_path / "a", "bunqueue", "bunqueue/v2", PINGS * 20)
    files = find_inputs([tmp_path / "a"])
    choice, detected = detect_files(files, "bunqueue", limit=100)
    assert not detected
    assert choice.note.startswith("no distinguishing traffic in the first ")
    assert choice.note.endswith(" bytes of frames")


def test_analyze_writes_the_choice_into_the_summary(tmp_path):
    enc = QuicxEncoder(load_profile("quicx/1.0.3"))
    worker = [("c2s", enc.encode("MSG_READY")),
              ("s2c", enc.encode("MSG_TASK", task_id=3, task_type="w", payload=b"p")),
              ("c2s", enc.encode("MSG_DONE", task_id=3))]
    record_chunks(tmp_path / "q", "quicx", "quicx/v1", [worker])   # recorded under v1
    summary = analyze([tmp_path / "q"], tmp_path / "out", engine="local", html=False)
    assert summary["profile"] == "quicx/1.0.3"
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["profile_choice"] == summary["profile_choice"]
    assert written["profile_choice"]["how"] == "detected"
    assert "quicx/1.0.3 reads MSG_TASK" in written["profile_choice"]["line"]
    assert written["profile_choice"]["evidence"][-1] == "but the recordings name quicx/v1"
    # judged under 1.0.3: the task and its result pair, and nothing is refused
    assert summary["totals"]["violations"]["FAIL"] == 0
    assert summary["commands"]["MSG_TASK"]["pairs"] == 1
