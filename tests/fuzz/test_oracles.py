"""Each oracle fires against a deliberately broken small server, the failure shrinks to a
small case, and its transcript replays: FIXED against the reference server, STILL FAILING
against the broken one. The broken servers answer from the spec (minimal replies built from
each command's response schema, error strings from its errors table) and break one rule on
requests whose command starts with ``Get`` (common in generated cases)."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from queuewire.codecs.errors import ProtocolError
from queuewire.fuzz.campaign import campaign
from queuewire.fuzz.case import Case, read_transcript
from queuewire.fuzz.oracles import BunqueueJudge, expect_bunqueue
from queuewire.fuzz.runner import target
from queuewire.fuzz.shrink import replay
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

PROFILE = "bunqueue/v2"
BQ = load_profile(PROFILE)
SHRUNK_MAX_FRAMES = 2


class BrokenServer:
    """A bunqueue server in ~40 lines that answers every request with a minimal valid reply
    and breaks one rule (``mode``) on the requests whose cmd starts with ``Get``."""

    def __init__(self, mode: str):
        self.mode = mode
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set = set()
        self._messages = {n: e.message for n, e in BQ.model.errors.items()}
        self.broke = False

    async def __aenter__(self) -> BrokenServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.crash()

    async def crash(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()

    def _reply(self, req) -> list[dict]:
        if type(req) is not dict or not isinstance(req.get("cmd"), str):
            return [{"ok": False, "error": self._messages["invalid_command"]}]
        cmd = req["cmd"]
        if cmd not in BQ.model.commands:
            reply = {"ok": False, "error": self._messages["unknown_command"].format(cmd=cmd)}
        else:
            reply = minimal(dict(BQ.model.commands[cmd].response))
        if req.get("reqId", UNDEFINED) is not UNDEFINED:
            reply["reqId"] = req["reqId"]
        if cmd.startswith("Get"):
            if self.mode == "drop":
                return []
            if self.mode == "duplicate":
                return [reply, reply]
            if self.mode == "wrong_type":
                return [{**reply, "ok": "yes"}]
            if self.mode == "once" and not self.broke:   # a failure that does not come back
                self.broke = True
                return [{**reply, "ok": "yes"}]
        return [reply]

    async def _serve(self, reader, writer) -> None:
        self._writers.add(writer)
        dec, enc = FrameDecoder(BQ), FrameEncoder(BQ, wide_integers=True)
        try:
            while data := await reader.read(65536):
                while True:
                    try:
                        reqs, err = dec.feed(data), None
                    except ProtocolError as e:
                        reqs, err = e.frames, e
                    for req in reqs:
                        if self.mode == "crash" and type(req) is dict and \
                                str(req.get("cmd")).startswith("Get"):
                            await self.crash()
                            return
                        for reply in self._reply(req):
                            writer.write(enc.encode(reply))
                    if err is None:
                        break
                    if err.reaction == "close":
                        writer.close()
                        return
                    writer.write(enc.encode({"ok": False,
                                             "error": self._messages["invalid_command_format"]}))
                    data = b""
        finally:
            self._writers.discard(writer)
            writer.close()


# which oracle each mode must trip, by finding kind
MODES = {"crash": {"dead", "lost_reply"}, "drop": {"lost_reply"},
         "duplicate": {"duplicate_reply"}, "wrong_type": {"reply_schema"}}


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", sorted(MODES))
async def test_each_oracle_fires_shrinks_and_replays(mode, tmp_path):
    async with BrokenServer(mode) as broken:
        stats = await campaign("bunqueue", PROFILE, "127.0.0.1", broken.port, seed=11,
                               max_examples=300, artifacts=str(tmp_path), max_failures=1,
                               bound=0.5)
    assert stats.failures >= 1, mode
    original, saved, findings = stats.failed[0]
    small, path = saved.case, saved.path
    assert {f.kind for f in findings if f.fails} & MODES[mode], findings
    assert all(f.requirement and f.level == "FAIL" for f in findings if f.fails)
    case, doc = read_transcript(path)
    if mode == "crash":  # a dead server cannot judge smaller cases: kept whole, said so
        assert small.as_dict() == original.as_dict() and "not shrunk" in doc["note"]
        # ... and it ends the run there, saying where
        assert stats.down is not None and stats.down[0] == original.index, stats.down
        assert stats.stop_reason.startswith("the target stopped answering"), stats.stop_reason
    else:
        assert stats.down is None, stats.down
        assert len(small.frames) <= min(SHRUNK_MAX_FRAMES, len(original.frames))
    assert case.as_dict() == small.as_dict() and doc["findings"]
    assert doc["original"]["index"] == original.index
    # replay: FIXED against the reference server, STILL FAILING against the broken one
    async with target("embedded", "bunqueue", PROFILE) as (host, port):
        assert not (await replay(case, host, port)).failed
    async with BrokenServer(mode) as broken:
        again = await replay(case, "127.0.0.1", broken.port, bound=0.5)
    assert again.failed


@pytest.mark.asyncio
async def test_replay_cli_says_fixed_or_still_failing(tmp_path):
    async with BrokenServer("wrong_type") as broken:
        stats = await campaign("bunqueue", PROFILE, "127.0.0.1", broken.port, seed=3,
                               max_examples=300, artifacts=str(tmp_path), max_failures=1,
                               bound=0.5)
        path = stats.failed[0][1].path
        runner = CliRunner()
        still = await asyncio.to_thread(runner.invoke, main, [
            "fuzz", "replay", path, "--target", f"127.0.0.1:{broken.port}", "--bound", "0.5"])
    assert still.exit_code == 1 and "STILL FAILING" in still.output
    fixed = await asyncio.to_thread(runner.invoke, main,
                                    ["fuzz", "replay", path, "--target", "embedded"])
    assert fixed.exit_code == 0 and "FIXED" in fixed.output, fixed.output
    assert json.loads(open(path).read())["format"] == "queuewire-fuzz-transcript/1"


def test_judge_matches_shared_reqids_whatever_the_reply_order():
    enc = FrameEncoder(BQ)
    frames = [enc.encode({"cmd": "GetJob", "id": "x", "reqId": "1"}),
              enc.encode({"cmd": "Stats", "reqId": "1"})]
    exp = expect_bunqueue(Case("bunqueue", PROFILE, frames), BQ)
    judge = BunqueueJudge(BQ)
    stats = {**minimal(dict(BQ.model.commands["Stats"].response)), "reqId": "1"}
    err = {"ok": False, "error": "Job not found", "reqId": "1"}
    for replies in ([err, stats], [stats, err]):
        assert judge.judge(exp, replies, closed=False, timed_out=False) == []
    lost = judge.judge(exp, [stats], closed=False, timed_out=True)
    assert [(f.requirement, f.kind, f.fails) for f in lost] == [("BQ-PIPE-1", "lost_reply",
                                                                 True)]
    dup = judge.judge(exp, [stats, err, err], closed=False, timed_out=False)
    assert [f.kind for f in dup] == ["duplicate_reply"]


def test_close_reaction_demands_a_close():
    enc = FrameEncoder(BQ)
    huge = enc.prefix(BQ.model.max_frame_bytes + 1)
    case = Case("bunqueue", PROFILE, [enc.encode({"cmd": "Ping", "reqId": "a"}), huge])
    exp = expect_bunqueue(case, BQ)
    assert exp.close_error is not None and exp.close_error.reaction == "close"
    judge = BunqueueJudge(BQ)
    ping = {**minimal(dict(BQ.model.commands["Ping"].response)), "reqId": "a"}
    open_ = judge.judge(exp, [ping], closed=False, timed_out=True)
    assert [(f.requirement, f.kind) for f in open_] == [(exp.close_error.requirement,
                                                         "no_close")]
    refusal = BQ.model.errors["frame_too_large"].message.format(length=1, max=0)
    assert judge.judge(exp, [ping, {"ok": False, "error": refusal}], closed=True,
                       timed_out=False) == []
    assert judge.judge(exp, [ping], closed=True, timed_out=False) == []  # the reply is optional
    # the Ping read before the fatal frame and left unanswered by the close: the documents
    # demand both the close and an answer to every command, not their order (a reading)
    lost = judge.judge(exp, [], closed=True, timed_out=False)
    assert [(f.requirement, f.level, f.kind) for f in lost] == [
        ("BQ-PIPE-1", "NON-STRICT", "lost_before_close")]


@pytest.mark.asyncio
async def test_known_deviations_are_counted_not_shrunk_and_do_not_stop_the_run(tmp_path):
    async with BrokenServer("wrong_type") as broken:
        stats = await campaign("bunqueue", PROFILE, "127.0.0.1", broken.port, seed=11,
                               max_examples=200, artifacts=str(tmp_path), max_failures=1,
                               bound=0.5, known={"BQ-ENV-2", "BQ-ENV-4", "BQ-PIPE-1"} | {
                                   c.requirement for c in BQ.model.commands.values()})
    assert stats.cases == 200 and stats.failures == 0 and stats.failing_cases == 0
    assert stats.stop_reason == "played the 200 cases asked for (--max-examples)"
    known = {k: g for k, g in stats.groups.items() if k[1] == "KNOWN"}
    assert known and all(g.count >= 1 and g.example and g.example_case >= 0
                         for g in known.values())
    assert not list(tmp_path.glob("*.json"))   # nothing shrunk, nothing saved


@pytest.mark.asyncio
async def test_repeats_of_one_failure_are_grouped_and_shrunk_once(tmp_path):
    async with BrokenServer("wrong_type") as broken:
        stats = await campaign("bunqueue", PROFILE, "127.0.0.1", broken.port, seed=11,
                               max_examples=200, artifacts=str(tmp_path), max_failures=50,
                               bound=0.5)
    fails = {k: g for k, g in stats.groups.items() if k[1] == "FAIL"}
    assert stats.failures == len(stats.failed) <= len(fails)
    assert stats.failing_cases > stats.failures    # repeats counted, not shrunk again
    assert sum(g.count for g in fails.values()) >= stats.failing_cases
    saved = {g.path for g in fails.values() if g.path}
    assert saved and saved <= {str(p) for p in tmp_path.glob("*.json")}
    assert stats.stop_reason.startswith("played the 200 cases")


@pytest.mark.asyncio
async def test_the_run_says_it_stopped_for_max_failures(tmp_path):
    async with BrokenServer("wrong_type") as broken:
        stats = await campaign("bunqueue", PROFILE, "127.0.0.1", broken.port, seed=11,
                               max_examples=300, max_failures=1, bound=0.5)
    assert stats.failures == 1 and stats.cases < 300
    assert "--max-failures 1" in stats.stop_reason and "--known-failing" in stats.stop_reason


@pytest.mark.asyncio
async def test_a_failure_that_does_not_reproduce_is_not_saved(tmp_path):
    """The server breaks one reply, once: no case fails again on a fresh connection, so no
    transcript is written (a saved case always reproduces) and the run says why."""
    async with BrokenServer("once") as broken:
        stats = await campaign("bunqueue", PROFILE, "127.0.0.1", broken.port, seed=11,
                               max_examples=300, artifacts=str(tmp_path), max_failures=1,
                               bound=0.5)
    assert stats.failures == 1, stats.groups
    _case, saved, findings = stats.failed[0]
    assert saved.path is None and not saved.reproduced and "did not reproduce" in saved.note
    assert {f.kind for f in findings} == {"reply_schema"}
    assert not list(tmp_path.rglob("*.json"))
