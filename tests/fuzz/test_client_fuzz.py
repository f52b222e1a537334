"""Client fuzzing (``queuewire fuzz --client``): a bounded run against queuewire's own client
adapter passes; against deliberately broken testees (one that crashes on a reply it cannot
take, one that stops answering) the crash and hang oracles fire, the failure is saved and
replays (STILL FAILING against the broken testee, FIXED against queuewire's client). Seed 1's
case 0 breaks the type of ``ok`` in its only action's reply, so each broken testee fails on
the first case."""

from __future__ import annotations

import json
import os
import shlex
import sys

from click.testing import CliRunner

from queuewire.cli import main
from queuewire.fuzz.replies import (
    ClientCase,
    judge_client,
    make_client_case,
    normalize,
    reply_plan,
)
from queuewire.judge import requirement_verdict
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
ADAPTER = f"{shlex.quote(sys.executable)} -m queuewire.conformance.client.adapters.queuewire_client"
BROKEN = os.path.join(os.path.dirname(__file__), "broken_client_testee.py")


def broken(mode: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(BROKEN)} {mode}"


def fuzz(*args: str):
    return CliRunner().invoke(main, ["fuzz", "--client", "--protocol", "bunqueue", *args])


def test_a_bounded_run_against_queuewire_client_passes():
    result = fuzz("--testee", ADAPTER, "--max-examples", "16", "--seed", "1")
    assert result.exit_code == 0, result.output
    assert "16 client cases" in result.output and "0 failing" in result.output


def test_the_crash_oracle_fires_and_the_failure_replays(tmp_path):
    result = fuzz("--testee", broken("crash"), "--max-examples", "1", "--seed", "1",
                  "--artifacts", str(tmp_path))
    # BQ-CLIENT-6 is a SHOULD (it describes bunqueue's own client), yet a testee that dies
    # on the server's bytes fails the fuzz run all the same (replies.counts)
    assert result.exit_code == 1, result.output
    assert "[BQ-CLIENT-6 NON-STRICT] crash" in result.output
    [path] = [str(p) for p in tmp_path.iterdir()]
    doc = json.loads(open(path).read())
    assert doc["format"] == "queuewire-client-fuzz-transcript/1" and doc["wire"]
    assert doc["case"]["seed"] == 1 and doc["case"]["index"] == 0
    still = CliRunner().invoke(main, ["fuzz", "replay", path, "--testee", broken("crash")])
    assert still.exit_code == 1 and "STILL FAILING" in still.output, still.output
    fixed = CliRunner().invoke(main, ["fuzz", "replay", path, "--testee", ADAPTER])
    assert fixed.exit_code == 0 and "FIXED" in fixed.output, fixed.output


def test_the_hang_oracle_fires_and_the_failure_replays(tmp_path):
    result = fuzz("--testee", broken("hang"), "--max-examples", "1", "--seed", "1",
                  "--bound", "0.5", "--artifacts", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "[BQ-CLIENT-4 FAIL] hang" in result.output
    [path] = [str(p) for p in tmp_path.iterdir()]
    still = CliRunner().invoke(main, ["fuzz", "replay", path, "--testee", broken("hang"),
                                      "--bound", "0.5"])
    assert still.exit_code == 1 and "STILL FAILING" in still.output, still.output


def test_a_client_case_is_regenerated_from_seed_and_index_and_survives_json():
    a = normalize(make_client_case("bunqueue/v2", 7, 123))
    b = normalize(make_client_case("bunqueue/v2", 7, 123))
    assert a.as_dict() == b.as_dict()
    again = ClientCase.from_dict(json.loads(json.dumps(a.as_dict())))
    reply = {"ok": True, "id": "j1", "count": 3, "reqId": "2"}
    assert reply_plan(again, reply, PROFILE) == reply_plan(a, reply, PROFILE)


def test_the_verdicts_cite_requirements_at_their_levels():
    replies = {("PUSH", 1): {"ok": True, "id": "j1", "reqId": "1"}}
    ok = [{"ok": True, "value": {"id": "j1"}}]
    lie = ClientCase("bunqueue", "bunqueue/v2", [{"op": "add", "queue": "q"}], 0,
                     {"kind": "lie", "how": "long", "delta": 3})
    [f] = judge_client(lie, PROFILE, results=ok, failure=None, hung=False, replies=replies)
    assert (f.requirement, f.kind, f.fails) == ("BQ-FRAME-1", "accepted_broken_reply", True)
    timeout = [{"ok": False, "error": "Command timeout", "error_type": "timeout"}]
    assert judge_client(lie, PROFILE, results=timeout, failure=None, hung=False,
                        replies=replies) == []
    # a reply of the wrong shape binds its sender: a client taking it is NON-STRICT at most
    wrong = ClientCase("bunqueue", "bunqueue/v2", [{"op": "add", "queue": "q"}], 0,
                       {"kind": "wrong_type", "value": 5, "pick": 0})
    [f] = judge_client(wrong, PROFILE, results=ok, failure=None, hung=False, replies=replies)
    assert f.requirement == "BQ-ENV-6" and f.level == requirement_verdict(PROFILE, "BQ-ENV-6")
    assert not f.fails
    # a duplicated reply must not answer anything else: a wrong value is BQ-PIPE-5
    dup = ClientCase("bunqueue", "bunqueue/v2", [{"op": "add", "queue": "q"}], 0,
                     {"kind": "duplicate", "coalesced": True})
    [f] = judge_client(dup, PROFILE, results=[{"ok": True, "value": {"id": "j0"}}],
                       failure=None, hung=False, replies=replies)
    assert (f.requirement, f.kind, f.fails) == ("BQ-PIPE-5", "wrong_value", True)
    # an exception the client leaked fails every action through the adapter: one finding, on
    # the target's mutation (NON-STRICT for a reply of the wrong shape, FAIL for a lying frame)
    leaked = [{"ok": False, "error": "adapter error: KeyError('id')", "error_type": "other"}]
    [f] = judge_client(wrong, PROFILE, results=leaked, failure=None, hung=False,
                       replies=replies)
    assert (f.kind, f.fails) == ("untyped_error", False)
    [f] = judge_client(lie, PROFILE, results=leaked, failure=None, hung=False, replies=replies)
    assert (f.requirement, f.kind, f.fails) == ("BQ-FRAME-1", "untyped_error", True)
