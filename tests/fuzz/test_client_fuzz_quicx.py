"""Client fuzzing of quicx producers and workers (``queuewire fuzz --client --protocol
quicx``): a bounded run against queuewire's own quicx adapter passes; against a deliberately
broken producer (one that crashes on a frame it cannot take, one that stops answering) the
crash and hang oracles fire, the failure is saved and replays (STILL FAILING against the
broken testee, FIXED against queuewire's client). Seed 33's case 0 cuts its only MSG_OK short
and closes. The mutations are data over the spec's layouts: the sans-IO tests below check the
frames they make and the verdicts, citing the requirement each breaks."""

from __future__ import annotations

import json
import os
import shlex
import struct
import sys

from click.testing import CliRunner

from queuewire.cli import main
from queuewire.codecs.quicx import encode
from queuewire.fuzz.replies import (
    QX_MUTATIONS,
    ClientCase,
    judge_client,
    make_quicx_client_case,
    quicx_reply_plan,
    reply_key,
    shrink_candidates,
)
from queuewire.spec import load_profile
from queuewire.spec.quicx import struct_format

PROFILE = load_profile("quicx/v1")
SPEC = PROFILE.model
HEADER = struct.Struct(struct_format(SPEC.header))
ADAPTER = f"{shlex.quote(sys.executable)} -m queuewire.conformance.client.adapters.queuewire_quicx"
BROKEN = os.path.join(os.path.dirname(__file__), "broken_quicx_testee.py")
SEED = "33"   # case 0: cut_close on the MSG_OK of a single submit


def broken(mode: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(BROKEN)} {mode}"


def fuzz(*args: str):
    return CliRunner().invoke(main, ["fuzz", "--client", "--protocol", "quicx", *args])


def submit(n: int = 1) -> list[dict]:
    return [{"op": "submit", "type": "t", "payload": f"p{k}"} for k in range(n)]


# -- over TCP, with testees ----------------------------------------------------------------------
def test_a_bounded_run_against_queuewire_quicx_client_passes():
    result = fuzz("--testee", ADAPTER, "--max-examples", "8", "--seed", "1")
    assert result.exit_code == 0, result.output
    assert "8 client cases" in result.output and "0 failing" in result.output


def test_the_crash_oracle_fires_and_the_failure_replays(tmp_path):
    result = fuzz("--testee", broken("crash"), "--max-examples", "1", "--seed", SEED,
                  "--artifacts", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "[QX-HDR-7 FAIL] crash" in result.output
    [path] = [str(p) for p in tmp_path.iterdir()]
    doc = json.loads(open(path).read())
    assert doc["format"] == "queuewire-client-fuzz-transcript/1" and doc["wire"]
    assert doc["case"]["protocol"] == "quicx" and doc["case"]["recipe"]["kind"] == "cut_close"
    assert any(str(e["note"]).startswith("fuzz:") for e in doc["wire"])
    still = CliRunner().invoke(main, ["fuzz", "replay", path, "--testee", broken("crash")])
    assert still.exit_code == 1 and "STILL FAILING" in still.output, still.output
    fixed = CliRunner().invoke(main, ["fuzz", "replay", path, "--testee", ADAPTER])
    assert fixed.exit_code == 0 and "FIXED" in fixed.output, fixed.output


def test_the_hang_oracle_fires_and_the_failure_replays(tmp_path):
    result = fuzz("--testee", broken("hang"), "--max-examples", "1", "--seed", SEED,
                  "--bound", "0.5", "--artifacts", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "[QX-HDR-7 FAIL] hang" in result.output
    [path] = [str(p) for p in tmp_path.iterdir()]
    still = CliRunner().invoke(main, ["fuzz", "replay", path, "--testee", broken("hang"),
                                      "--bound", "0.5"])
    assert still.exit_code == 1 and "STILL FAILING" in still.output, still.output


def test_a_bunqueue_profile_is_refused_for_quicx():
    result = fuzz("--testee", ADAPTER, "--profile", "bunqueue/v2", "--max-examples", "1")
    assert result.exit_code == 2 and "not a quicx profile" in result.output


# -- sans-IO: the cases, the frames, the verdicts -------------------------------------------------
def test_a_case_is_regenerated_from_seed_and_index_and_survives_json():
    kinds = set()
    for i in range(60):
        a = make_quicx_client_case("quicx/v1", 7, i)
        assert a.as_dict() == make_quicx_client_case("quicx/v1", 7, i).as_dict()
        again = ClientCase.from_dict(json.loads(json.dumps(a.as_dict())))
        name, _ = reply_key(a, a.target)
        frame = encode(PROFILE, "MSG_OK", task_id=9) if name == "MSG_OK" else \
            encode(PROFILE, "MSG_TASK", task_id=9, task_type="fz_a", payload=b"xy")
        assert quicx_reply_plan(again, frame, PROFILE) == quicx_reply_plan(a, frame, PROFILE)
        kinds.add(a.recipe["kind"])
    assert kinds == set(QX_MUTATIONS)


def _case(recipe: dict, actions: list[dict] | None = None, target: int = 0) -> ClientCase:
    return ClientCase("quicx", "quicx/v1", actions or submit(), target, recipe,
                      {"timeout": 300})


def test_the_frames_are_mutated_by_the_spec_layouts():
    ok = encode(PROFILE, "MSG_OK", task_id=0x0A42)
    task = encode(PROFILE, "MSG_TASK", task_id=7, task_type="resize", payload=b"img")
    [w] = quicx_reply_plan(_case({"kind": "version", "version": 2}), ok, PROFILE)["writes"]
    assert w[0] == 2 and w[1:] == ok[1:]
    lie = quicx_reply_plan(_case({"kind": "lie", "how": "long", "delta": 3}), ok, PROFILE)
    assert HEADER.unpack_from(lie["writes"][0])[2] == 4 + 3
    cut = quicx_reply_plan(_case({"kind": "cut_close", "fraction": 50}), ok, PROFILE)
    assert cut["close"] and cut["writes"] == [ok[:5]]
    split = quicx_reply_plan(_case({"kind": "split"}), ok, PROFILE)
    assert b"".join(split["writes"]) == ok and len(split["writes"]) == len(ok) and split["intact"]
    work = submit() + [{"op": "work", "types": ["resize"], "count": 1, "timeout_ms": 3000}]
    bad = quicx_reply_plan(_case({"kind": "bad_body", "how": "type_len", "delta": 1,
                                  "bytes": "00", "task": 1}, work, 1), task, PROFILE)
    [w] = bad["writes"]
    assert w[HEADER.size + 4] == len(w) - HEADER.size - 4 + 1   # type length past the frame
    wrong = quicx_reply_plan(_case({"kind": "unknown_type", "how": "wrong_direction",
                                    "pick": 0}), ok, PROFILE)
    assert not SPEC.opcode(wrong["writes"][0][1]).allows("daemon", "producer")
    late = quicx_reply_plan(_case({"kind": "late"}), ok, PROFILE)
    assert late["writes"] == [ok] and late["delay"] > 0.3


def test_the_verdicts_cite_requirements_at_their_levels():
    replies = {("MSG_OK", 1): {"task_id": 1}, ("MSG_OK", 2): {"task_id": 2}}
    took = [{"ok": True, "value": {"id": 1, "status": "accepted"}}]
    timeout = [{"ok": False, "error": "no MSG_OK", "error_type": "timeout"}]

    def judge(case, results, wire=None):
        return judge_client(case, PROFILE, results=results, failure=None, hung=False,
                            replies=replies, wire=wire)
    version = _case({"kind": "version", "version": 2})
    [f] = judge(version, took)
    assert (f.requirement, f.kind, f.fails) == ("QX-HDR-2", "accepted_broken_reply", True)
    assert judge(version, timeout) == []
    # an MSG_OK body of the wrong size binds its sender: a client taking it is NON-STRICT
    [f] = judge(_case({"kind": "bad_body", "how": "ok_size", "delta": 1, "bytes": "00"}), took)
    assert f.requirement == "QX-OK-1" and not f.fails
    # a late MSG_OK taken for the next submission's is a wrong id (MUST); after a duplicate
    # the documents do not say a client must notice, so the same is NON-STRICT
    swapped = [{"ok": False, "error": "t", "error_type": "timeout"},
               {"ok": True, "value": {"id": 1, "status": "accepted"}}]
    [f] = judge(_case({"kind": "late"}, submit(2)), swapped)
    assert (f.requirement, f.kind, f.fails) == ("QX-OK-1", "wrong_value", True)
    [f] = judge(_case({"kind": "duplicate", "coalesced": True}, submit(2)), swapped)
    assert (f.requirement, f.kind, f.fails) == ("QX-OK-1", "wrong_value", False)
    # a worker that answers a task broken on its connection took it (the wire says so)
    work = submit() + [{"op": "work", "types": ["t"], "count": 1, "timeout_ms": 3000}]
    case = _case({"kind": "bad_body", "how": "type_len", "delta": 1, "bytes": "00",
                  "task": 1}, work, 1)
    wire = [{"conn": 2, "dir": "send", "note": "fuzz: type length"},
            {"conn": 2, "dir": "recv", "note": "",
             "decoded": [{"type": "MSG_DONE", "fields": {"task_id": 1}}]}]
    ran = took + [{"ok": True, "value": {"ids": [1]}}]
    [f] = judge(case, ran, wire)
    assert (f.requirement, f.kind, f.fails) == ("QX-TASK-4", "accepted_broken_reply", True)
    assert judge(case, ran, wire[:1]) == []   # closed and ran it again on a new connection
    # no answer at all: crash or hang, on the rule of the broken frame
    [f] = judge_client(version, PROFILE, results=None, failure="exit 1", hung=False,
                       replies=replies)
    assert (f.requirement, f.kind, f.fails) == ("QX-HDR-2", "crash", True)


def test_a_work_target_shrinks_to_one_task():
    work = submit(3) + [{"op": "work", "types": ["t"], "count": 3, "timeout_ms": 3000}]
    case = _case({"kind": "version", "version": 9, "task": 3}, work, 3)
    first = shrink_candidates(case)[0]
    assert [a["op"] for a in first.actions] == ["submit", "work"]
    assert first.actions[1]["count"] == 1 and first.recipe["task"] == 1
    assert reply_key(first, first.target) == ("MSG_TASK", 1)


def test_a_worker_that_runs_a_broken_task_is_caught_on_the_wire(tmp_path):
    """A worker that answers a MSG_TASK whose type length runs past the frame took it
    (QX-TASK-4, the wire shows its MSG_DONE on that connection); queuewire's worker closes
    the connection instead (QX-DIR-2), and its work ends in a typed error."""
    work = submit() + [{"op": "work", "types": ["t"], "count": 1, "timeout_ms": 1000}]
    case = _case({"kind": "bad_body", "how": "type_len", "delta": 2, "bytes": "00",
                  "task": 1}, work, 1)
    path = tmp_path / "case.json"
    path.write_text(json.dumps({"format": "queuewire-client-fuzz-transcript/1",
                                "case": case.as_dict()}))
    still = CliRunner().invoke(main, ["fuzz", "replay", str(path), "--testee",
                                      broken("trusting")])
    assert still.exit_code == 1 and "STILL FAILING" in still.output, still.output
    assert "[QX-TASK-4 FAIL] accepted_broken_reply" in still.output
    fixed = CliRunner().invoke(main, ["fuzz", "replay", str(path), "--testee", ADAPTER])
    assert fixed.exit_code == 0 and "FIXED" in fixed.output, fixed.output
