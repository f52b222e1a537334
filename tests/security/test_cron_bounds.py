"""Issue 22 item 1, "Cron is a denial of service": the reference bunqueue server's bounds on
cron schedules (BQ-SAFE-1, spec/bunqueue/protocol.yaml ``safeguards``), over real TCP on
127.0.0.1 against an in-process ``BunqueueServer``.

What is pinned: a schedule longer than ``cron_schedule_chars`` is refused with
``cron_schedule_too_long`` before it is split or parsed, and the refusal of a 1 MB one does
not hold up another connection; ``repeatEvery`` below ``cron_min_interval`` is refused; the
``max_crons``-th + 1 new name is refused (an update is not); the firing rate of all schedules
together is held to ``cron_rate``; a schedule stored by an older version in a ``--data-path``
file is bounded the same way at start (an over-long one is skipped with a warning, never
parsed); and the catch-up after downtime fires a schedule once, not once per missed run.
Every bound and error string is read from the spec."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from latency import assert_prompt
from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.reference_server.bunqueue import BunqueueServer, SqliteStore
from queuewire.reference_server.bunqueue import timers as timers_module
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
SAFE = MODEL.safeguards
GUARD = 10.0          # seconds: a hang fails the test instead of stalling the run
PING_BOUND = 0.1      # seconds: the bound on a Ping answered during a refusal
MEGABYTE_SCHEDULE = ",".join(["0-59"] * 200_000) + " * * * * *"  # the reproduction


def message(name: str, **fields: Any) -> str:
    return MODEL.errors[name].message.format(**fields)


class Client:
    """Frames out, replies in, matched by reqId."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.enc, self.dec = FrameEncoder(PROFILE), FrameDecoder(PROFILE)
        self.replies: dict[str, dict] = {}
        self.ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, cmd: str, **fields: Any) -> str:
        req_id = str(next(self.ids))
        self.writer.write(self.enc.encode({"cmd": cmd, "reqId": req_id, **fields}))
        return req_id

    async def reply(self, req_id: str) -> dict:
        while req_id not in self.replies:
            data = await self.reader.read(1 << 16)
            if not data:
                raise EOFError("the server closed the connection")
            for frame in self.dec.feed(data):
                self.replies[str(frame.get("reqId"))] = frame
        return self.replies.pop(req_id)

    async def call(self, cmd: str, **fields: Any) -> dict:
        return await self.reply(self.send(cmd, **fields))

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def serve(test, **server_args: Any) -> None:
    """Run ``test(server, client)`` against a fresh server on an ephemeral port, under GUARD."""
    async def main() -> None:
        server = await BunqueueServer(PROFILE, port=0, **server_args).start()
        client = await Client.open(server.port)
        try:
            await test(server, client)
        finally:
            await client.close()
            await server.stop()
    asyncio.run(asyncio.wait_for(main(), GUARD))


def test_a_megabyte_schedule_is_refused_at_once_and_others_are_served():
    """Item 1, BQ-SAFE-1 cron_schedule_chars: the issue's 1 MB six-field schedule is refused
    with cron_schedule_too_long, and another connection's Pings sent while it is received
    and refused are each answered within 100 ms."""
    async def test(server, client):
        other = await Client.open(server.port)
        try:
            cron_id = client.send("Cron", name="big", queue="q", data={},
                                  schedule=MEGABYTE_SCHEDULE)
            cron_reply = asyncio.ensure_future(client.reply(cron_id))
            latencies: list[float] = []
            while not cron_reply.done() or len(latencies) < 10:
                started = time.perf_counter()
                assert (await other.call("Ping"))["ok"] is True
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.002)
            reply = cron_reply.result()
        finally:
            await other.close()
        assert_prompt(latencies, PING_BOUND, "Ping during the Cron")
        assert reply == {"ok": False, "reqId": cron_id, "error": message(
            "cron_schedule_too_long", length=len(MEGABYTE_SCHEDULE),
            max=SAFE["cron_schedule_chars"])}
        assert (await client.call("CronList"))["crons"] == []
    serve(test)


def test_the_length_bound_is_exact():
    """Item 1, BQ-SAFE-1 cron_schedule_chars: a valid schedule of exactly the bound is
    accepted; one character more (a space, still valid) is refused."""
    bound = SAFE["cron_schedule_chars"]
    minutes = ",".join(str(m % 60) for m in range(200))
    schedule = (minutes[:bound - 8].rstrip(",") + " * * * *").ljust(bound)
    assert len(schedule) == bound

    async def test(server, client):
        assert (await client.call("Cron", name="a", queue="q", data={}, schedule=schedule))["ok"]
        over = await client.call("Cron", name="b", queue="q", data={}, schedule=schedule + " ")
        assert over["error"] == message("cron_schedule_too_long", length=bound + 1, max=bound)
    serve(test)


def test_repeat_every_below_the_minimum_is_refused():
    """Item 1, BQ-SAFE-1 cron_min_interval: repeatEvery 1 (the issue's ~11,000 jobs/s) is
    refused with cron_interval_too_short; the minimum itself is accepted; 0 is still
    cron_invalid_repeat (BQ-CRON-3)."""
    low = SAFE["cron_min_interval"]

    async def test(server, client):
        reply = await client.call("Cron", name="c", queue="q", data={}, repeatEvery=1)
        assert reply["error"] == message("cron_interval_too_short", min=low)
        reply = await client.call("Cron", name="c", queue="q", data={}, repeatEvery=low - 1)
        assert reply["error"] == message("cron_interval_too_short", min=low)
        reply = await client.call("Cron", name="c", queue="q", data={}, repeatEvery=0)
        assert reply["error"] == message("cron_invalid_repeat")
        reply = await client.call("Cron", name="c", queue="q", data={}, repeatEvery=low)
        assert reply["ok"] and reply["cron"]["repeatEvery"] == low
    serve(test)


def test_one_cron_beyond_max_crons_is_refused_but_updates_are_not():
    """Item 1, BQ-SAFE-1 max_crons: the (max_crons + 1)-th name is refused with
    cron_limit_reached; updating an existing name at the cap is accepted (BQ-CRON-4)."""
    cap = SAFE["max_crons"]

    async def test(server, client):
        ids = [client.send("Cron", name=f"c{i}", queue="q", data={}, schedule="0 0 1 1 *")
               for i in range(cap)]
        for req_id in ids:
            assert (await client.reply(req_id))["ok"]
        reply = await client.call("Cron", name="one-more", queue="q", data={},
                                  schedule="0 0 1 1 *")
        assert reply["error"] == message("cron_limit_reached", max=cap)
        reply = await client.call("Cron", name="c7", queue="q2", data={}, schedule="0 0 2 1 *")
        assert reply["ok"] and reply["cron"]["queue"] == "q2"
        assert len((await client.call("CronList"))["crons"]) == cap
    serve(test)


def test_the_firing_rate_of_all_schedules_is_bounded():
    """Item 1, BQ-SAFE-1 cron_rate: schedules may fire cron_rate times a second together
    (an interval 1000 / repeatEvery, a six-field expression 1); the Cron that would take the
    total over it is refused with cron_rate_exceeded; an update replaces its own share; a
    deleted schedule gives its share back."""
    rate, low = SAFE["cron_rate"], SAFE["cron_min_interval"]
    per_cron = 1000 // low
    full = rate // per_cron
    assert full * per_cron == rate, "the test assumes the rate is a multiple of one share"

    async def test(server, client):
        for i in range(full):  # exactly the budget
            reply = await client.call("Cron", name=f"r{i}", queue="q", data={}, repeatEvery=low)
            assert reply["ok"], reply
        over = message("cron_rate_exceeded", max=rate)
        assert (await client.call("Cron", name="x", queue="q", data={},
                                  repeatEvery=low))["error"] == over
        assert (await client.call("Cron", name="x", queue="q", data={},
                                  schedule="* * * * * *"))["error"] == over
        # an update of r0 replaces its share: the same share, or a larger one refused
        assert (await client.call("Cron", name="r0", queue="q", data={}, repeatEvery=low))["ok"]
        assert (await client.call("Cron", name="r0", queue="q", data={},
                                  schedule="* * * * * *"))["ok"]  # its share: 10/s -> 1/s
        assert (await client.call("Cron", name="x", queue="q", data={},
                                  repeatEvery=low))["error"] == over  # 191 + 10 > 200
        assert (await client.call("CronDelete", name="r1"))["ok"]
        assert (await client.call("Cron", name="x", queue="q", data={},
                                  repeatEvery=low))["ok"]
    serve(test)


def _stored_cron(name: str, **fields: Any) -> dict:
    return {"name": name, "queue": "q", "data": {}, "schedule": None, "repeatEvery": None,
            "priority": 0, "maxLimit": None, "timezone": None, "jobName": "default",
            "nextRun": 0.0, "executions": 0, **fields}


def test_stored_schedules_are_bounded_at_start_without_parsing(tmp_path: Path, monkeypatch,
                                                               caplog):
    """Item 1, BQ-SAFE-1 for --data-path: a SQLite file written by an older version with a
    1 MB schedule and a repeatEvery of 1 is loaded without parsing the long schedule; both
    are skipped with a logged warning, the valid schedule beside them is kept."""
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    store.put_cron(_stored_cron("huge", schedule=MEGABYTE_SCHEDULE))
    store.put_cron(_stored_cron("fast", repeatEvery=1))
    store.put_cron(_stored_cron("fine", schedule="*/5 * * * *"))
    store.close()
    parsed: list[int] = []
    real = timers_module.croniter

    def spy(expr, *args, **kwargs):
        parsed.append(len(expr))
        return real(expr, *args, **kwargs)

    monkeypatch.setattr(timers_module, "croniter", spy)
    caplog.set_level(logging.WARNING)

    async def test(server, client):
        await asyncio.sleep(0.05)  # the stored nextRun (0) is due: a tick has run
        names = {c["name"] for c in (await client.call("CronList"))["crons"]}
        assert names == {"fine"}
        assert (await client.call("Count", queue="q"))["count"] == 1  # "fine" caught up once
    serve(test, data_path=path)
    assert max(parsed, default=0) <= SAFE["cron_schedule_chars"], \
        f"a stored schedule of {max(parsed)} characters was parsed"
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "huge" in warned and "fast" in warned


def test_catch_up_after_downtime_fires_once(tmp_path: Path):
    """Item 1, bounded catch-up (BQ-CRON-3): a minimum-interval schedule whose stored nextRun
    is a day old fires once at start, not once per missed run (864,000 jobs)."""
    path = tmp_path / "down.db"
    store = SqliteStore(path)
    day_ago = time.time() * 1000 - 86_400_000
    store.put_cron(_stored_cron("every", repeatEvery=SAFE["cron_min_interval"],
                                nextRun=day_ago))
    store.put_cron(_stored_cron("expr", schedule="* * * * * *", queue="q6", nextRun=day_ago))
    store.close()

    async def test(server, client):
        await asyncio.sleep(0.05)
        assert (await client.call("Count", queue="q"))["count"] <= 2
        assert (await client.call("Count", queue="q6"))["count"] <= 2
        cron = (await client.call("CronGet", name="every"))["cron"]
        assert cron["nextRun"] > time.time() * 1000 - 1000
    serve(test, data_path=path)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
