"""The runner's slow trickles, interleavings across connections and cleanup, over real TCP:
against the reference server they are clean; against small servers broken in the way each
one is there to find (a server that routes replies by reqId across connections, one that
drops a connection whose frame arrives over time) they fail, shrink to a small case that
keeps what made it fail, and replay from their transcripts (``queuewire fuzz replay``)."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from queuewire.codecs.errors import ProtocolError
from queuewire.fuzz.case import Case, read_transcript
from queuewire.fuzz.runner import Runner, target
from queuewire.fuzz.shrink import replay, run_fresh, shrink_and_save
from queuewire.fuzz.strategies import make_case
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

PROFILE = "bunqueue/v2"
BQ = load_profile(PROFILE)
ENC = FrameEncoder(BQ)


class SmallServer:
    """A bunqueue server in a few lines answering every request with a minimal valid reply,
    broken one way: ``shared_reqids`` keeps one reqId table for all connections and sends a
    reply, 50 ms later, to the connection that last sent its reqId; ``stall`` closes a
    connection that holds part of a frame and sends nothing for 15 ms."""

    def __init__(self, mode: str):
        self.mode, self.port = mode, 0
        self._owner: dict = {}
        self._writers: set = set()

    async def __aenter__(self) -> SmallServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for w in list(self._writers):
            w.transport.abort()

    def _reply(self, req) -> dict:
        cmd = req.get("cmd") if type(req) is dict else None
        if cmd not in BQ.model.commands:
            return {"ok": False, "error": BQ.model.errors["invalid_command"].message}
        reply = minimal(dict(BQ.model.commands[cmd].response))
        if req.get("reqId", UNDEFINED) is not UNDEFINED:
            reply["reqId"] = req["reqId"]
        return reply

    async def _serve(self, reader, writer) -> None:
        self._writers.add(writer)
        loop = asyncio.get_running_loop()
        dec, enc = FrameDecoder(BQ), FrameEncoder(BQ, wide_integers=True)
        try:
            while True:
                timeout = 0.015 if self.mode == "stall" and dec.buffered else None
                try:
                    data = await asyncio.wait_for(reader.read(65536), timeout)
                except TimeoutError:
                    return   # "stalled": a partial frame 15 ms old
                if not data:
                    return
                try:
                    reqs = dec.feed(data)
                except ProtocolError:
                    return
                for req in reqs:
                    reply = enc.encode(self._reply(req))
                    key = repr(req.get("reqId")) if type(req) is dict else None
                    if self.mode == "shared_reqids" and key is not None:
                        self._owner[key] = writer
                        loop.call_later(0.05, lambda k=key, r=reply: self._owner[k].write(r))
                    else:
                        writer.write(reply)
        finally:
            self._writers.discard(writer)
            writer.close()


def _ping(req_id: str) -> bytes:
    return ENC.encode({"cmd": "Ping", "reqId": req_id})


def _failing(res) -> set[str]:
    return {f.kind for f in res.findings if f.fails}


# the same request, the same reqId, on two connections; connection 0's frame is split around
# connection 1's write
CROSSED = Case("bunqueue", PROFILE, [_ping("1"), _ping("1")], splits=[3, 20, 99],
               split_conns=[0, 1, 0], conns=[0, 1])
# one Ping: its first three bytes, 60 ms, the rest
TRICKLED = Case("bunqueue", PROFILE, [_ping("7")], splits=[3], pauses=[60])


@pytest.mark.asyncio
async def test_interleaved_and_trickled_cases_are_clean_against_the_reference_server():
    special = [c for c in (make_case("bunqueue", PROFILE, 5, i) for i in range(600))
               if c.conns or c.pauses][:24]
    assert any(c.conns for c in special) and any(c.pauses for c in special)
    async with target("embedded", "bunqueue", PROFILE) as (host, port):
        def play() -> tuple[list, int]:
            runner = Runner("bunqueue", PROFILE, host, port)
            try:
                return [runner.run(c) for c in [CROSSED, TRICKLED, *special]], runner.connects
            finally:
                runner.close()
        results, connects = await asyncio.to_thread(play)
    assert not [(r.case.index, [str(f) for f in r.findings if f.fails])
                for r in results if r.failed]
    crossed = results[0]
    assert all(len(rs) == 1 and rs[0]["reqId"] == "1" for rs in crossed.replies)
    # connection 0 is reused from case to case, the others are opened for their case
    assert connects >= 1 + sum(c.connections - 1 for c in special)
    assert {"BQ-PIPE-1", "BQ-CMD-Ping"} <= crossed.covered


@pytest.mark.asyncio
async def test_a_server_that_routes_replies_by_reqid_across_connections_fails(tmp_path):
    async with SmallServer("shared_reqids") as broken:
        res = await run_fresh("bunqueue", PROFILE, "127.0.0.1", broken.port, CROSSED, 0.5)
        # the same two frames on one connection are fine: the interleaving finds it
        one = await run_fresh("bunqueue", PROFILE, "127.0.0.1", broken.port,
                              CROSSED.replace(conns=[], split_conns=[], splits=[]), 0.5)
        assert {"lost_reply", "duplicate_reply"} <= _failing(res)
        # one connection got both replies, the other none; each finding names its connection
        assert all(f.message.startswith("connection ") for f in res.findings)
        assert not one.failed
        padded = CROSSED.replace(frames=[ENC.encode({"cmd": "Stats", "reqId": "9"}),
                                         *CROSSED.frames], conns=[1, 0, 1], seed=1, index=2)
        first = await run_fresh("bunqueue", PROFILE, "127.0.0.1", broken.port, padded, 0.5)
        saved_case = await shrink_and_save(first, "127.0.0.1", broken.port, str(tmp_path), 0.5)
        small, path = saved_case.case, saved_case.path
        assert len(small.frames) == 2 and small.connections == 2  # the Stats frame is gone
        case, doc = read_transcript(path)
        assert case == small and doc["case"]["conns"] and doc["findings"]
        assert (await replay(case, "127.0.0.1", broken.port, 0.5)).failed
        still = await asyncio.to_thread(CliRunner().invoke, main, [
            "fuzz", "replay", path, "--target", f"127.0.0.1:{broken.port}", "--bound", "0.5"])
    assert still.exit_code == 1 and "STILL FAILING" in still.output
    fixed = await asyncio.to_thread(CliRunner().invoke, main,
                                    ["fuzz", "replay", path, "--target", "embedded"])
    assert fixed.exit_code == 0 and "FIXED" in fixed.output, fixed.output


@pytest.mark.asyncio
async def test_a_server_that_drops_frames_arriving_over_time_fails_on_a_trickle(tmp_path):
    case = TRICKLED.replace(seed=1, index=3)
    async with SmallServer("stall") as broken:
        res = await run_fresh("bunqueue", PROFILE, "127.0.0.1", broken.port, case, 0.5)
        whole = await run_fresh("bunqueue", PROFILE, "127.0.0.1", broken.port,
                                case.replace(pauses=[], splits=[]), 0.5)
        assert "lost_reply" in _failing(res) and not whole.failed
        kept = await shrink_and_save(res, "127.0.0.1", broken.port, str(tmp_path), 0.5)
        small, path = kept.case, kept.path
        assert small.pauses == [60] and small.splits == [3]   # the pause is what fails: kept
        saved, doc = read_transcript(path)
        assert doc["case"]["pauses"] == [60] and saved == small
        assert (await replay(saved, "127.0.0.1", broken.port, 0.5)).failed
    async with target("embedded", "bunqueue", PROFILE) as (host, port):
        assert not (await replay(saved, host, port)).failed


@pytest.mark.asyncio
async def test_cleanup_obliterates_the_queues_the_cases_named():
    names = ["qw-test-a", "qw-test-b"]
    push = [ENC.encode({"cmd": "PUSH", "queue": q, "data": {}, "reqId": str(k)})
            for k, q in enumerate(names)]
    listing = Case("bunqueue", PROFILE, [ENC.encode({"cmd": "ListQueues", "reqId": "l"})])
    async with target("embedded", "bunqueue", PROFILE) as (host, port):
        def play() -> tuple:
            runner = Runner("bunqueue", PROFILE, host, port)
            try:
                runner.run(Case("bunqueue", PROFILE, push))
                before = runner.run(listing).replies[0]["queues"]
                sent = runner.cleanup()
                after = runner.run(listing)
                return before, sent, after, runner.queues, runner.cleanup()
            finally:
                runner.close()
        before, sent, after, noted, again = await asyncio.to_thread(play)
    assert set(names) <= {q["name"] for q in before}
    assert sent == 2 and again == 0 and not noted   # the names are forgotten once cleaned
    assert not after.failed and not {q["name"] for q in after.replies[0]["queues"]} & set(names)
