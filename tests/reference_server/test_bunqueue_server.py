"""The bunqueue reference server over real TCP on 127.0.0.1: every command, reqId echo,
pipelining under the spec's max_in_flight, Hello, the authentication gate, the rate limit,
protocol errors (frame too large, invalid payloads, a truncated frame), long polls woken from
another connection, the release of a disconnected worker's jobs, and ``queuewire serve
bunqueue`` as a process. Error strings and limits are read from the profile; every scenario
runs under a timeout guard."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import sys
from typing import Any

import pytest

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.codecs.validation import BunqueueValidator
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
VALIDATOR = BunqueueValidator(PROFILE)
MAX_IN_FLIGHT = int(PROFILE.limit("max_in_flight").value)
GUARD = 20.0   # seconds: a hang fails the test instead of stalling the run
QUIET = 0.2    # seconds of silence that count as "no answer"


def message(name: str, **fields: Any) -> str:
    return MODEL.errors[name].message.format(**fields)


def documented(error: str) -> bool:
    """Whether ``error`` is an instance of a message of the spec's errors table."""
    for e in MODEL.errors.values():
        pattern = re.escape(e.message)
        pattern = re.sub(r"\\\{\w+\\\}", ".*", pattern)
        if re.fullmatch(pattern, error, re.S):
            return True
    return False


async def run(coro):
    return await asyncio.wait_for(coro, GUARD)


class Client:
    """A small test client: frames out, frames in, replies matched by reqId."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.enc = FrameEncoder(PROFILE)
        self.dec = FrameDecoder(PROFILE)
        self.inbox: list[dict] = []
        self.ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, obj: Any) -> None:
        self.writer.write(self.enc.encode(obj))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def recv(self, timeout: float = 5.0) -> dict:
        while not self.inbox:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise EOFError("the server closed the connection")
            self.inbox.extend(self.dec.feed(data))
        return self.inbox.pop(0)

    async def reply_to(self, req_id: Any, timeout: float = 5.0) -> dict:
        while True:
            for i, msg in enumerate(self.inbox):
                if msg.get("reqId") == req_id:
                    return self.inbox.pop(i)
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise EOFError("the server closed the connection")
            self.inbox.extend(self.dec.feed(data))

    async def call(self, cmd: str, **fields: Any) -> dict:
        """Send ``cmd`` with ``fields`` (any ``timeout`` is the command's) and await its reply."""
        req_id = str(next(self.ids))
        self.send({"cmd": cmd, **fields, "reqId": req_id})
        reply = await self.reply_to(req_id)
        assert reply.pop("reqId") == req_id
        assert VALIDATOR.reply_violations(cmd, reply) == (), (cmd, reply)
        return reply

    async def ok(self, cmd: str, **fields: Any) -> dict:
        reply = await self.call(cmd, **fields)
        assert reply["ok"] is True, (cmd, reply)
        return reply

    async def closed(self, timeout: float = 5.0) -> bool:
        """Whether the server closes the connection (after whatever it still sends)."""
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
                if not data:
                    return True
                self.inbox.extend(self.dec.feed(data))
        except ConnectionResetError:
            return True

    async def silent(self) -> bool:
        try:
            await self.recv(QUIET)
        except TimeoutError:
            return True
        return False

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


# =============================================================================================
# Every command
# =============================================================================================
ACTIVE_JOB = {"ACK", "ACKB", "FAIL", "Progress", "GetProgress", "JobHeartbeat", "JobHeartbeatB",
              "MoveToDelayed"}
DELAYED_JOB = {"Promote"}


async def prepare(c: Client, cmd: str) -> dict:
    """A minimal valid request for ``cmd``, with the state it acts on set up first."""
    req = minimal(dict(MODEL.commands[cmd].request))
    queue = req.get("queue", "emails")
    if "id" in req or "ids" in req:
        if cmd in ("Heartbeat",):
            wid = (await c.ok("RegisterWorker", name="w", queues=[queue]))["data"]["workerId"]
            req["id"] = wid
        else:
            opts = {"delay": 60_000} if cmd in DELAYED_JOB else {}
            job_id = (await c.ok("PUSH", queue=queue, data={"n": 1}, **opts))["id"]
            if cmd in ACTIVE_JOB or cmd == "WaitJob":
                assert (await c.ok("PULL", queue=queue))["job"]["id"] == job_id
            if cmd == "WaitJob":
                await c.ok("ACK", id=job_id, result={"done": True})
            if "id" in req:
                req["id"] = job_id
            else:
                req["ids"] = [job_id]
    elif cmd == "UnregisterWorker":
        req["workerId"] = (await c.ok("RegisterWorker", name="w",
                                      queues=["emails"]))["data"]["workerId"]
    elif cmd == "RemoveWebhook":
        req["webhookId"] = (await c.ok("AddWebhook", url="https://example.com/h",
                                       events=[]))["data"]["webhookId"]
    elif cmd in ("CronGet", "CronDelete"):
        await c.ok("Cron", name=req["name"], queue="emails", data={}, repeatEvery=60_000)
    elif cmd == "Cron":
        req["repeatEvery"] = 60_000
    elif cmd == "GetJobByCustomId":
        await c.ok("PUSH", queue="emails", data={}, jobId=req["customId"])
    elif cmd in ("PULL", "PULLB", "Count", "GetJobs", "Drain", "Clean"):
        await c.ok("PUSH", queue=queue, data={"n": 1})
    assert VALIDATOR.request_violations(req) == (), req
    return req


@pytest.mark.parametrize("cmd", sorted(MODEL.commands))
@pytest.mark.asyncio
async def test_every_command_answers_a_valid_reply(cmd):
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            req = await prepare(c, cmd)
            req["reqId"] = "r-1"
            c.send(req)
            reply = await c.reply_to("r-1")
            assert reply.pop("reqId") == "r-1"
            assert VALIDATOR.reply_violations(cmd, reply) == (), reply
            if reply["ok"] is False:
                assert documented(reply["error"]), reply
                assert reply["error"] != message("internal_error")
                assert cmd == "Auth", reply  # Auth with no tokens configured: Invalid token
                assert reply["error"] == message("invalid_token")
            await c.close()

    await run(scenario())


def test_the_commands_are_the_spec_s():
    assert len(MODEL.commands) == 62


# =============================================================================================
# Envelope, Hello, Auth, rate limit
# =============================================================================================
@pytest.mark.asyncio
async def test_reqid_is_echoed_verbatim_and_absent_when_not_sent():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            c.send({"cmd": "Ping", "reqId": "ümlaut-ä-1"})
            assert (await c.recv())["reqId"] == "ümlaut-ä-1"
            c.send({"cmd": "Ping"})
            reply = await c.recv()
            assert "reqId" not in reply and reply["ok"] is True
            c.send({"cmd": "GetJob", "id": "nope", "reqId": "e"})
            assert await c.recv() == {"ok": False, "error": message("job_not_found"),
                                      "reqId": "e"}
            c.send({"cmd": "Nope", "reqId": "u"})
            assert await c.recv() == {"ok": False, "error": message("unknown_command", cmd="Nope"),
                                      "reqId": "u"}
            await c.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_hello_announces_the_spec_s_version_and_capabilities():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            reply = await c.ok("Hello", protocolVersion=MODEL.protocol_version,
                               capabilities=list(MODEL.capabilities))
            assert reply["protocolVersion"] == MODEL.protocol_version
            assert reply["capabilities"] == list(MODEL.capabilities)
            await c.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_schema_violation_names_the_requirement_and_path():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            too_high = PROFILE.limit("priority").max + 1
            reply = await c.call("PUSH", queue="q", data={}, priority=too_high)
            assert reply["ok"] is False and documented(reply["error"])
            prefix = message("invalid_request", detail="")
            assert reply["error"].startswith(prefix)
            assert "BQ-LIMIT-4" in reply["error"] and "/priority" in reply["error"]
            await c.ok("Ping")  # the connection goes on
            await c.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_auth_gate():
    async def scenario():
        async with BunqueueServer(port=0, auth_tokens=["alpha", "s3cret"]) as server:
            c = await Client.open(server.port)
            for cmd, fields in (("Ping", {}), ("Hello", {"protocolVersion": 2}),
                                ("PUSH", {"queue": "q", "data": {}})):
                assert await c.call(cmd, **fields) == {"ok": False,
                                                       "error": message("not_authenticated")}
            assert await c.call("Auth", token="wrong") == {"ok": False,
                                                           "error": message("invalid_token")}
            assert await c.call("Ping") == {"ok": False, "error": message("not_authenticated")}
            assert await c.call("Auth", token="s3cret") == {"ok": True}
            await c.ok("Ping")
            await c.ok("PUSH", queue="q", data={})
            # a failed Auth after a success does not de-authenticate (bunqueue's behaviour)
            assert (await c.call("Auth", token="wrong"))["ok"] is False
            await c.ok("Ping")
            other = await Client.open(server.port)  # authentication is per connection
            assert await other.call("Ping") == {"ok": False,
                                                "error": message("not_authenticated")}
            await other.close()
            await c.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_rate_limit_per_connection():
    async def scenario():
        async with BunqueueServer(port=0, rate_limit=(5, 60.0)) as server:
            c = await Client.open(server.port)
            for _ in range(5):
                await c.ok("Ping")
            assert await c.call("Ping") == {"ok": False, "error": message("rate_limit_exceeded")}
            other = await Client.open(server.port)
            await other.ok("Ping")
            await other.close()
            await c.close()

    await run(scenario())


# =============================================================================================
# Pipelining
# =============================================================================================
@pytest.mark.asyncio
async def test_300_pipelined_requests_in_one_write_are_all_answered():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            enc = FrameEncoder(PROFILE)
            frames = []
            for i in range(300):
                req = ({"cmd": "PUSH", "queue": "pipe", "data": {"i": i}} if i % 2 else
                       {"cmd": "Ping"})
                frames.append(enc.encode({**req, "reqId": f"p{i}"}))
            c.send_raw(b"".join(frames))
            seen = {}
            while len(seen) < 300:
                reply = await c.recv()
                assert reply["ok"] is True, reply
                seen[reply["reqId"]] = reply
            assert set(seen) == {f"p{i}" for i in range(300)}
            assert all("id" in seen[f"p{i}"] for i in range(1, 300, 2))
            assert (await c.ok("Count", queue="pipe"))["count"] == 150
            await c.close()

    await run(scenario())


class CountingEngine(BunqueueEngine):
    """Counts the long polls outstanding (handled as a Wait, not yet answered)."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.outstanding = self.peak = 0

    def _track(self, before_wait: bool, result: Any) -> Any:
        is_wait = not isinstance(result, dict)
        if not before_wait and is_wait:
            self.outstanding += 1
            self.peak = max(self.peak, self.outstanding)
        elif before_wait and not is_wait:
            self.outstanding -= 1
        return result

    def handle(self, conn_id, request):
        return self._track(False, super().handle(conn_id, request))

    def retry(self, conn_id, wait):
        return self._track(True, super().retry(conn_id, wait))

    def expire(self, wait):
        return self._track(True, super().expire(wait))


@pytest.mark.asyncio
async def test_pipelined_long_polls_never_exceed_max_in_flight():
    async def scenario():
        engine = CountingEngine("bunqueue/v2")
        async with BunqueueServer(port=0, engine=engine) as server:
            c = await Client.open(server.port)
            # pipelining is protocol v2's: Hello first (BQ-HELLO-3)
            await c.ok("Hello", protocolVersion=MODEL.protocol_version,
                       capabilities=list(MODEL.capabilities))
            n = 300
            enc = FrameEncoder(PROFILE)
            c.send_raw(b"".join(enc.encode({"cmd": "PULL", "queue": "lp", "timeout": 10_000,
                                            "reqId": f"w{i}"}) for i in range(n)))
            for _ in range(100):
                if engine.outstanding == MAX_IN_FLIGHT:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert engine.outstanding == MAX_IN_FLIGHT  # the rest wait, unread
            producer = await Client.open(server.port)
            producer.send_raw(b"".join(
                enc.encode({"cmd": "PUSH", "queue": "lp", "data": {"i": i}, "reqId": str(i)})
                for i in range(n)))
            got = {}
            while len(got) < n:
                reply = await c.recv()
                assert reply["ok"] is True and reply["job"] is not None, reply
                got[reply["reqId"]] = reply["job"]["id"]
            assert len(set(got.values())) == n
            assert engine.peak == MAX_IN_FLIGHT and engine.outstanding == 0
            await producer.close()
            await c.close()

    await run(scenario())


# =============================================================================================
# Protocol errors
# =============================================================================================
@pytest.mark.asyncio
async def test_frame_too_large_is_answered_once_then_closed():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            enc = FrameEncoder(PROFILE)
            c.send_raw(enc.encode({"cmd": "Ping", "reqId": "before"}) + b"\xff\xff\xff\xff")
            assert await c.closed()
            errors = [m for m in c.inbox if m["ok"] is False]
            assert errors == [{"ok": False, "error": message(
                "frame_too_large", length=0xFFFFFFFF, max=MODEL.max_frame_bytes)}]
            assert c.inbox[-1] == errors[0]  # the error is the last frame
            # a prefix split over two writes is read back too
            c2 = await Client.open(server.port)
            big = MODEL.max_frame_bytes + 1
            c2.send_raw(big.to_bytes(4, "big")[:2])
            await c2.writer.drain()
            await asyncio.sleep(0.05)
            c2.send_raw(big.to_bytes(4, "big")[2:])
            assert await c2.closed()
            assert c2.inbox == [{"ok": False, "error": message(
                "frame_too_large", length=big, max=MODEL.max_frame_bytes)}]
            # the server is unharmed
            c3 = await Client.open(server.port)
            await c3.ok("Ping")
            await c3.close()

    await run(scenario())


@pytest.mark.parametrize(("payload", "error"), [
    (b"", "invalid_command_format"),
    (b"\xc1", "invalid_command_format"),
    (b"\x81\xa3cmd\xa4Ping\x00", "invalid_command_format"),  # trailing byte
    (b"\x82\xa3cmd", "invalid_command_format"),             # truncated map
    (b"\xd4\x05\x01", "invalid_command_format"),            # unknown extension
    (b"\x92\x01\x02", "invalid_command"),                   # an array, not a map
    (b"\x81\xa5reqId\xa1x", "invalid_command"),             # no cmd
])
@pytest.mark.asyncio
async def test_invalid_payload_is_answered_and_the_connection_continues(payload, error):
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            enc = FrameEncoder(PROFILE)
            c.send_raw(enc.prefix(len(payload)) + payload)
            reply = await c.recv()
            assert reply["ok"] is False and reply["error"] == message(error), reply
            if b"reqId" not in payload:
                assert "reqId" not in reply
            await c.ok("Ping")
            await c.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_without_hello_a_half_close_drops_the_poll_and_answers_what_followed_it():
    """Protocol v1 (no Hello, BQ-HELLO-3): a long poll holds the connection's one slot, so the
    Ping pipelined behind it waits. When the peer closes its half, the parked poll is dropped
    (as at any end of stream) and the Ping is still answered before the connection closes."""
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            enc = FrameEncoder(PROFILE)
            c.send_raw(enc.encode({"cmd": "PULL", "queue": "v1", "timeout": 10_000,
                                   "reqId": "poll"}) + enc.encode({"cmd": "Ping", "reqId": "p"}))
            await asyncio.sleep(0.2)
            assert c.inbox == []          # sequential: the Ping waits behind the poll
            c.writer.write_eof()
            assert await c.closed()
            assert [m["reqId"] for m in c.inbox] == ["p"]

    await run(scenario())


@pytest.mark.asyncio
async def test_truncated_frame_at_close_is_closed_unanswered():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            c = await Client.open(server.port)
            enc = FrameEncoder(PROFILE)
            c.send_raw(enc.encode({"cmd": "Ping", "reqId": "whole"}) + enc.prefix(10) + b"abc")
            c.writer.write_eof()
            assert await c.closed()
            assert [m["reqId"] for m in c.inbox] == ["whole"]
            for _ in range(100):
                if server.connection_count == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.connection_count == 0
            c2 = await Client.open(server.port)
            await c2.ok("Ping")
            await c2.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_a_bug_closes_only_its_connection(caplog):
    class Buggy(BunqueueEngine):
        def handle(self, conn_id, request):
            if request.get("cmd") == "Stats":
                raise RuntimeError("boom")
            return super().handle(conn_id, request)

    async def scenario():
        async with BunqueueServer(port=0, engine=Buggy("bunqueue/v2")) as server:
            a = await Client.open(server.port)
            b = await Client.open(server.port)
            a.send({"cmd": "Stats", "reqId": "1"})
            assert await a.closed()
            await b.ok("Ping")
            await b.close()

    await run(scenario())
    assert "boom" in caplog.text


@pytest.mark.asyncio
async def test_hostile_bytes_never_hurt_the_server():
    import random

    rng = random.Random(20261121)
    enc = FrameEncoder(PROFILE)

    async def scenario():
        async with BunqueueServer(port=0) as server:
            for _ in range(30):
                c = await Client.open(server.port)
                junk = bytearray(rng.randbytes(rng.randrange(1, 300)))
                if rng.random() < 0.7:  # a plausible prefix, so payload errors are reached too
                    junk[:4] = enc.prefix(rng.randrange(0, len(junk) + 8))
                c.send_raw(bytes(junk) + enc.encode({"cmd": "Ping", "reqId": "z"}))
                c.writer.write_eof()
                assert await c.closed()
                assert all(m["ok"] is False or m.get("reqId") == "z" for m in c.inbox)
            good = await Client.open(server.port)
            await good.ok("Ping")
            await good.close()

    await run(scenario())


# =============================================================================================
# Long polls and connection lifecycle
# =============================================================================================
@pytest.mark.asyncio
async def test_long_poll_pull_is_woken_by_a_push_on_another_connection():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            worker = await Client.open(server.port)
            producer = await Client.open(server.port)
            worker.send({"cmd": "PULL", "queue": "lp", "timeout": 10_000, "reqId": "w"})
            assert await worker.silent()
            job_id = (await producer.ok("PUSH", queue="lp", data={"x": 1}))["id"]
            reply = await worker.recv(2.0)
            assert reply["reqId"] == "w" and reply["job"]["id"] == job_id
            # with nothing pushed, the poll ends empty at its timeout
            loop = asyncio.get_running_loop()
            start = loop.time()
            reply = await worker.call("PULL", queue="lp", timeout=150)
            assert reply == {"ok": True, "job": None}
            assert loop.time() - start >= 0.14
            await producer.close()
            await worker.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_waitjob_is_woken_by_ack():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            worker = await Client.open(server.port)
            waiter = await Client.open(server.port)
            job_id = (await worker.ok("PUSH", queue="q", data={}))["id"]
            assert (await worker.ok("PULL", queue="q"))["job"]["id"] == job_id
            waiter.send({"cmd": "WaitJob", "id": job_id, "timeout": 10_000, "reqId": "wj"})
            assert await waiter.silent()
            await worker.ok("ACK", id=job_id, result={"sum": 3})
            reply = await waiter.recv(2.0)
            assert reply["reqId"] == "wj" and reply["ok"] is True
            assert VALIDATOR.reply_violations("WaitJob", reply) == ()
            assert reply["completed"] is True and reply["result"] == {"sum": 3}
            await waiter.close()
            await worker.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_disconnect_releases_the_active_job():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            a = await Client.open(server.port)
            job_id = (await a.ok("PUSH", queue="q", data={}))["id"]
            assert (await a.ok("PULL", queue="q"))["job"]["id"] == job_id
            b = await Client.open(server.port)
            assert (await b.ok("PULL", queue="q"))["job"] is None
            b.send({"cmd": "PULL", "queue": "q", "timeout": 10_000, "reqId": "b"})
            assert await b.silent()
            await a.close()  # BQ-CONN-1: the job goes back to waiting and wakes b
            reply = await b.recv(2.0)
            assert reply["reqId"] == "b" and reply["job"]["id"] == job_id
            await b.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_closing_a_connection_drops_its_parked_polls():
    async def scenario():
        async with BunqueueServer(port=0) as server:
            a = await Client.open(server.port)
            a.send({"cmd": "PULL", "queue": "q", "timeout": 10_000, "reqId": "a"})
            await asyncio.sleep(0.05)
            await a.close()
            b = await Client.open(server.port)
            job_id = (await b.ok("PUSH", queue="q", data={}))["id"]
            assert (await b.ok("PULL", queue="q"))["job"]["id"] == job_id  # not taken by a
            assert server.parked_polls == 0
            await b.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_a_peer_gone_with_every_slot_parked_is_noticed():
    async def scenario():
        engine = CountingEngine("bunqueue/v2")
        async with BunqueueServer(port=0, engine=engine) as server:
            a = await Client.open(server.port)
            enc = FrameEncoder(PROFILE)
            a.send_raw(b"".join(enc.encode({"cmd": "PULL", "queue": "gone", "timeout": 10_000,
                                            "reqId": f"a{i}"}) for i in range(200)))
            for _ in range(100):
                if engine.outstanding == MAX_IN_FLIGHT:
                    break
                await asyncio.sleep(0.01)
            await a.close()
            for _ in range(200):
                if server.connection_count == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.connection_count == 0 and server.parked_polls == 0
            b = await Client.open(server.port)
            job_id = (await b.ok("PUSH", queue="gone", data={}))["id"]
            assert (await b.ok("PULL", queue="gone"))["job"]["id"] == job_id
            await b.close()

    await run(scenario())


@pytest.mark.asyncio
async def test_delayed_job_becomes_pullable_by_the_timer():
    async def scenario():
        async with BunqueueServer(port=0, tick_interval=5.0) as server:
            c = await Client.open(server.port)
            job_id = (await c.ok("PUSH", queue="d", data={}, delay=100))["id"]
            reply = await c.call("PULL", queue="d", timeout=3000)
            assert reply["job"]["id"] == job_id  # woken by tick() at the deadline
            await c.close()

    await run(scenario())


# =============================================================================================
# queuewire serve bunqueue
# =============================================================================================
async def start_cli(*args: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queuewire.cli", "serve", "bunqueue", "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    assert match, line + (await proc.stderr.read()).decode()
    return proc, int(match.group(1))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.asyncio
async def test_cli_serves_and_stops_cleanly(sig):
    async def scenario():
        proc, port = await start_cli("--auth-tokens", "t1,t2")
        try:
            c = await Client.open(port)
            assert (await c.call("Ping"))["error"] == message("not_authenticated")
            assert await c.call("Auth", token="t2") == {"ok": True}
            assert (await c.ok("Ping"))["data"]["pong"] is True
            await c.close()
        finally:
            proc.send_signal(sig)
            out, err = await asyncio.wait_for(proc.communicate(), 15)
        assert proc.returncode == 0, err.decode()
        assert b"bunqueue server stopped" in out and b"Traceback" not in err

    await run(scenario())


@pytest.mark.asyncio
async def test_cli_bad_options_are_clear_errors():
    async def cli(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "queuewire.cli", "serve", "bunqueue", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 15)
        return proc.returncode, (out + err).decode()

    async def scenario():
        code, text = await cli("--profile", "bunqueue/9")
        assert code == 2 and "bunqueue/9" in text and "Traceback" not in text
        code, text = await cli("--auth-tokens", ",", "--port", "0")
        assert code == 2 and "--auth-tokens" in text
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = taken.sockets[0].getsockname()[1]
        try:
            code, text = await cli("--port", str(port))
        finally:
            taken.close()
            await taken.wait_closed()
        assert code == 1 and "cannot listen" in text and "Traceback" not in text

    await run(scenario())
