"""The reference bunqueue server under the extension profile ``bunqueue/2.9.5``, over real TCP
on 127.0.0.1, against the same server under ``bunqueue/v2``: Hello (version 3,
separate-job-name), SubscribeEvents / UnsubscribeEvents and the event frames pushed without
reqId (shape validated against the profile's ``job_events.frame`` schema), the job name sent
apart from data and the legacy ``data.name`` envelope. Every value compared comes from the
profiles; every scenario runs under a timeout guard."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import jsonschema
import pytest

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.codecs.validation import BunqueueValidator
from queuewire.reference_server.bunqueue import BunqueueServer, EngineConfig
from queuewire.spec import load_profile

EXT = load_profile("bunqueue/2.9.5")
BASE = load_profile("bunqueue/v2")
GUARD = 20.0  # seconds: a hang fails the test instead of stalling the run
QUIET = 0.2   # seconds of silence that count as "no frame"

pytestmark = pytest.mark.asyncio


def event_schema() -> dict:
    """The profile's event frame schema, standalone (its $defs attached)."""
    tree = EXT.tree
    frame = dict(tree["job_events"]["frame"])
    frame["$defs"] = {"JobEvent": tree["definitions"]["JobEvent"]}
    return frame


EVENT_VALIDATOR = jsonschema.Draft202012Validator(event_schema())


async def run(coro):
    return await asyncio.wait_for(coro, GUARD)


class Client:
    """Frames out, frames in; replies matched by reqId, pushed frames (no reqId) kept apart."""

    def __init__(self, profile, reader, writer):
        self.profile = profile
        self.reader, self.writer = reader, writer
        self.enc, self.dec = FrameEncoder(profile), FrameDecoder(profile)
        self.validator = BunqueueValidator(profile)
        self.replies: list[dict] = []
        self.pushed: list[dict] = []
        self.ids = itertools.count(1)

    @classmethod
    async def open(cls, profile, port: int) -> Client:
        return cls(profile, *await asyncio.open_connection("127.0.0.1", port))

    async def _read(self, timeout: float) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), timeout)
        if not data:
            raise EOFError("the server closed the connection")
        for frame in self.dec.feed(data):
            (self.replies if "reqId" in frame else self.pushed).append(frame)

    async def call(self, cmd: str, **fields: Any) -> dict:
        req_id = str(next(self.ids))
        self.writer.write(self.enc.encode({"cmd": cmd, **fields, "reqId": req_id}))
        while True:
            for i, msg in enumerate(self.replies):
                if msg["reqId"] == req_id:
                    reply = self.replies.pop(i)
                    del reply["reqId"]
                    if reply["ok"]:
                        assert self.validator.reply_violations(cmd, reply) == (), (cmd, reply)
                    return reply
            await self._read(5.0)

    async def ok(self, cmd: str, **fields: Any) -> dict:
        reply = await self.call(cmd, **fields)
        assert reply["ok"] is True, (cmd, reply)
        return reply

    async def events(self, n: int) -> list[dict]:
        """The next ``n`` pushed frames, each checked against the profile's frame schema."""
        while len(self.pushed) < n:
            await self._read(5.0)
        out, self.pushed = self.pushed[:n], self.pushed[n:]
        for frame in out:
            errors = list(EVENT_VALIDATOR.iter_errors(frame))
            assert not errors, (frame, errors)
        return [f["event"] for f in out]

    async def no_event(self) -> bool:
        try:
            while not self.pushed:
                await self._read(QUIET)
        except TimeoutError:
            return True
        return False

    async def close(self) -> None:
        self.writer.close()


async def test_hello_answers_the_profile_s_version_and_capabilities():
    async def scenario():
        for profile in (EXT, BASE):
            async with BunqueueServer(profile, port=0) as server:
                c = await Client.open(profile, server.port)
                reply = await c.ok("Hello", protocolVersion=profile.model.protocol_version)
                assert reply["protocolVersion"] == profile.limit("protocol_version").value
                assert reply["capabilities"] == list(profile.tree["capabilities"])
                await c.close()
        assert EXT.limit("protocol_version").value != BASE.limit("protocol_version").value
    await run(scenario())


async def test_subscribe_events_is_unknown_under_v2_and_known_under_2_9_5():
    async def scenario():
        async with BunqueueServer(BASE, port=0) as server:
            c = await Client.open(BASE, server.port)
            reply = await c.call("SubscribeEvents", queue="q")
            assert reply == {"ok": False, "error": BASE.model.errors["unknown_command"]
                             .message.format(cmd="SubscribeEvents")}
            await c.close()
        async with BunqueueServer(EXT, port=0) as server:
            c = await Client.open(EXT, server.port)
            assert await c.ok("SubscribeEvents", queue="q") == {"ok": True}
            assert await c.ok("UnsubscribeEvents") == {"ok": True}
            bad = await c.call("SubscribeEvents", queue="bad queue!")
            # SubscribeEvents only looks the queue up: the name rule is the reading BQ-LIMIT-14
            assert bad["ok"] is False and "BQ-LIMIT-14" in bad["error"]
            await c.close()
    await run(scenario())


async def test_subscribed_connection_gets_the_job_s_events_without_reqid():
    async def scenario():
        async with BunqueueServer(EXT, port=0) as server:
            watcher = await Client.open(EXT, server.port)
            worker = await Client.open(EXT, server.port)
            await watcher.ok("SubscribeEvents", queue="ev")
            job_id = (await worker.ok("PUSH", queue="ev", name="n", data={"x": 1},
                                      maxAttempts=2, backoff=0))["id"]
            pulled = await worker.ok("PULL", queue="ev", owner="w1")
            await worker.ok("Progress", id=job_id, progress=40)
            await worker.ok("FAIL", id=job_id, token=pulled["token"], error="boom")
            again = await worker.ok("PULL", queue="ev", owner="w1")
            await worker.ok("ACK", id=job_id, token=again["token"], result={"r": 2})
            events = await watcher.events(7)
            assert [e["eventType"] for e in events] == [
                "pushed", "pulled", "progress", "failed", "retried", "pulled", "completed"]
            assert {e["jobId"] for e in events} == {job_id}
            assert {e["queue"] for e in events} == {"ev"}
            assert events[2]["progress"] == 40
            assert (events[3]["error"], events[3]["data"], events[3]["terminal"]) == \
                ("boom", {"x": 1}, False)
            assert events[4]["prev"] == "failed"
            assert events[6]["data"] == {"r": 2}
            # the worker's own connection is not subscribed: it got replies only
            assert worker.pushed == []
            await watcher.close()
            await worker.close()
    await run(scenario())


async def test_a_final_failure_is_terminal_and_a_stall_is_announced():
    async def scenario():
        config = EngineConfig(stall_interval_ms=100, max_stalls=5)
        async with BunqueueServer(EXT, port=0, config=config, tick_interval=0.02) as server:
            watcher = await Client.open(EXT, server.port)
            worker = await Client.open(EXT, server.port)
            await watcher.ok("SubscribeEvents", queue="fin")
            a = (await worker.ok("PUSH", queue="fin", data=1, maxAttempts=1))["id"]
            await worker.ok("PULL", queue="fin")
            await worker.ok("FAIL", id=a, error="fatal")
            b = (await worker.ok("PUSH", queue="fin", data=2, maxAttempts=5))["id"]
            await worker.ok("PULL", queue="fin")  # never heartbeated: stalls
            events = await watcher.events(6)
            assert [(e["eventType"], e["jobId"]) for e in events] == [
                ("pushed", a), ("pulled", a), ("failed", a), ("pushed", b), ("pulled", b),
                ("stalled", b)]
            assert events[2]["terminal"] is True
            await watcher.close()
            await worker.close()
    await run(scenario())


async def test_one_queue_per_connection_unsubscribe_and_close_end_the_events():
    async def scenario():
        async with BunqueueServer(EXT, port=0) as server:
            c = await Client.open(EXT, server.port)
            p = await Client.open(EXT, server.port)
            await c.ok("SubscribeEvents", queue="a")
            await c.ok("SubscribeEvents", queue="b")  # replaces a
            await p.ok("PUSH", queue="a", data=1)
            b = (await p.ok("PUSH", queue="b", data=2))["id"]
            [event] = await c.events(1)
            assert (event["eventType"], event["jobId"], event["queue"]) == ("pushed", b, "b")
            assert await c.no_event()
            await c.ok("UnsubscribeEvents")
            await p.ok("PUSH", queue="b", data=3)
            assert await c.no_event()
            await c.ok("SubscribeEvents", queue="b")
            await c.close()
            while server.connection_count > 1:  # the server has seen the close
                await asyncio.sleep(0.01)
            assert server.engine._subscribers == {}  # closing ended the subscription
            await p.ok("PUSH", queue="b", data=4)
            await p.close()
    await run(scenario())


async def test_subscribe_events_is_behind_the_auth_gate():
    async def scenario():
        async with BunqueueServer(EXT, port=0, auth_tokens=["s3cret"]) as server:
            c = await Client.open(EXT, server.port)
            reply = await c.call("SubscribeEvents", queue="q")
            assert reply == {"ok": False,
                             "error": EXT.model.errors["not_authenticated"].message}
            await c.ok("Auth", token="s3cret")
            await c.ok("SubscribeEvents", queue="q")
            await c.close()
    await run(scenario())


@pytest.mark.parametrize("profile", [EXT, BASE], ids=lambda p: p.name)
async def test_job_name_apart_from_data_and_the_legacy_envelope(profile):
    legacy = bool(((profile.tree.get("semantics") or {}).get("legacy_data_name") or {})
                  .get("value"))
    assert legacy is (profile is EXT)

    async def scenario():
        async with BunqueueServer(profile, port=0) as server:
            c = await Client.open(profile, server.port)
            top = (await c.ok("PUSH", queue="nm", name="send", data={"name": "x", "k": 1}))["id"]
            env = (await c.ok("PUSH", queue="nm", data={"name": "legacy", "k": 2}))["id"]
            plain = (await c.ok("PUSH", queue="nm", data=[1, 2]))["id"]
            ids = (await c.ok("PUSHB", queue="nm", jobs=[{"data": {"name": "b1", "k": 3}},
                                                        {"name": "b2", "data": 4}]))["ids"]
            jobs = {i: (await c.ok("GetJob", id=i))["job"] for i in [top, env, plain, *ids]}
            assert (jobs[top]["name"], jobs[top]["data"]) == ("send", {"name": "x", "k": 1})
            assert (jobs[plain]["name"], jobs[plain]["data"]) == ("default", [1, 2])
            assert (jobs[ids[1]]["name"], jobs[ids[1]]["data"]) == ("b2", 4)
            if legacy:
                assert (jobs[env]["name"], jobs[env]["data"]) == ("legacy", {"k": 2})
                assert (jobs[ids[0]]["name"], jobs[ids[0]]["data"]) == ("b1", {"k": 3})
                too_long = "x" * int(profile.limit("job_name_length").max + 1)
                for data in ({"name": ""}, {"name": too_long}):
                    reply = await c.call("PUSH", queue="nm", data=data)
                    assert reply == {"ok": False, "error":
                                     profile.model.errors["job_name_invalid"].message}
                reply = await c.call("PUSH", queue="nm", name="", data=1)
                assert reply["ok"] is False and "BQ-NAME-101" in reply["error"]
            else:
                assert (jobs[env]["name"], jobs[env]["data"]) == \
                    ("default", {"name": "legacy", "k": 2})
                assert (jobs[ids[0]]["name"], jobs[ids[0]]["data"]) == \
                    ("default", {"name": "b1", "k": 3})
            await c.close()
    await run(scenario())
