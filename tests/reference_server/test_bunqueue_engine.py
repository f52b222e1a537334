"""The bunqueue reference engine: every command's documented reply shape and real semantics,
the job lifecycle over a fake clock, long polls, stalls, locks, cron and the store seam.

Every request a test sends is first checked valid by ``BunqueueValidator`` (the shell's
contract: the engine only sees valid requests) and every reply is checked against its
command's schema (``reply_violations == ()``); error replies must carry a message of the
spec's ``errors`` table. Defaults, limits and error strings are read from the profile.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.bunqueue import UNDEFINED
from queuewire.codecs.validation import BunqueueValidator
from queuewire.fuzz.schema_gen import from_schema
from queuewire.reference_server.bunqueue import (
    LIFECYCLE_EVENTS,
    BunqueueEngine,
    EngineConfig,
    Event,
    MemoryStore,
    StorageStatus,
    Store,
    Wait,
    check_token,
    webhook_host_error,
    webhook_url_error,
)
from queuewire.reference_server.bunqueue import engine as bunqueue_engine
from queuewire.spec import load_profile, profile_names

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
VALIDATOR = BunqueueValidator(PROFILE)
DEFAULTS = MODEL.defaults
PUSH_DEFAULTS = {k: v["default"] for k, v in MODEL.commands["PUSH"].request["properties"].items()
                 if "default" in v}
T0 = 1_767_225_600_000.0  # 2026-01-01T00:00:00Z
SAFE = MODEL.safe_integer


def message(name: str, **fields: Any) -> str:
    return MODEL.errors[name].message.format(**fields)


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, ms: float) -> float:
        self.t += ms
        return self.t


class Harness:
    """An engine on a fake clock that records its events and checks every exchange."""

    def __init__(self, store: Store | None = None, clock: Clock | None = None, **config: Any):
        self.clock = clock or Clock()
        self.events: list[Event] = []
        self.engine = BunqueueEngine(now_ms=self.clock, notify=self.events.append,
                                     config=EngineConfig(**config), store=store)

    def __call__(self, cmd: str, conn: str | None = "c1", **fields: Any) -> dict | Wait:
        request = {"cmd": cmd, **fields}
        assert VALIDATOR.request_violations(request) == (), request
        reply = self.engine.handle(conn, request)
        if isinstance(reply, dict):
            self.check(cmd, reply)
        return reply

    @staticmethod
    def check(cmd: str, reply: dict) -> dict:
        assert VALIDATOR.reply_violations(cmd, reply) == (), reply
        if reply["ok"] is False:
            assert reply["error"] != MODEL.errors["internal_error"].message, reply
        return reply

    def ok(self, cmd: str, conn: str | None = "c1", **fields: Any) -> dict:
        reply = self(cmd, conn, **fields)
        assert isinstance(reply, dict) and reply["ok"] is True, reply
        return reply

    def err(self, cmd: str, error: str, conn: str | None = "c1", fmt: dict | None = None,
            **fields: Any) -> dict:
        reply = self(cmd, conn, **fields)
        assert isinstance(reply, dict) and reply == {"ok": False,
                                                     "error": message(error, **(fmt or {}))}
        return reply

    # shortcuts
    def push(self, queue: str = "q", data: Any = None, **opts: Any) -> str:
        return self.ok("PUSH", queue=queue, data={"n": 1} if data is None else data,
                       **opts)["id"]

    def pull(self, queue: str = "q", conn: str | None = "c1", **opts: Any) -> dict | None:
        return self.ok("PULL", conn, queue=queue, **opts)["job"]

    def state(self, job_id: str) -> str:
        return self.ok("GetState", id=job_id)["state"]

    def job(self, job_id: str) -> dict:
        return self.ok("GetJob", id=job_id)["job"]

    def tick(self, advance: float = 0) -> list[Event]:
        self.clock.advance(advance)
        return self.engine.tick()

    def retry(self, cmd: str, wait: Wait, conn: str | None = "c1") -> dict | Wait:
        reply = self.engine.retry(conn, wait)
        if isinstance(reply, dict):
            self.check(cmd, reply)
        return reply

    def expire(self, cmd: str, wait: Wait) -> dict:
        return self.check(cmd, self.engine.expire(wait))


@pytest.fixture
def h() -> Harness:
    return Harness()


def is_uuid7(text: str) -> bool:
    u = uuid.UUID(text)
    return u.version == 7 and str(u) == text


# =============================================================================================
# One scenario per command: the documented reply shape (checked by the harness) and values
# =============================================================================================
SCENARIOS: dict[str, Callable[[Harness], None]] = {}


def scenario(cmd: str):
    def register(fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
        assert cmd not in SCENARIOS
        SCENARIOS[cmd] = fn
        return fn
    return register


@scenario("PUSH")
def _push(h: Harness) -> None:
    job_id = h.push("emails", {"to": "a@b.c"}, priority=5, tags=["x"])
    assert is_uuid7(job_id)
    job = h.job(job_id)
    assert (job["queue"], job["data"], job["priority"], job["tags"]) == ("emails", {"to": "a@b.c"},
                                                                      5, ["x"])
    assert job["state"] == "waiting" and job["createdAt"] == T0 == job["runAt"]
    assert job["maxAttempts"] == PUSH_DEFAULTS["maxAttempts"]
    assert job["backoff"] == PUSH_DEFAULTS["backoff"] and job["attempts"] == 0
    assert h.ok("PUSH", queue="emails", data=1, jobId="order-1")["id"] == "order-1"


@scenario("PUSHB")
def _pushb(h: Harness) -> None:
    ids = h.ok("PUSHB", queue="q", jobs=[{"data": i, "priority": i} for i in range(3)])["ids"]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert [h.job(i)["data"] for i in ids] == [0, 1, 2]  # BQ-PUSH-11: request order
    again = h.ok("PUSHB", queue="q", jobs=[{"data": "a", "customId": "c1"},
                                           {"data": "b", "customId": "c1"}])["ids"]
    assert again == ["c1", "c1"] and h.ok("Count", queue="q")["count"] == 4


@scenario("PULL")
def _pull(h: Harness) -> None:
    assert h.ok("PULL", queue="q") == {"ok": True, "job": None}
    low, high = h.push(priority=1), h.push(priority=9)
    reply = h.ok("PULL", queue="q")
    assert reply["job"]["id"] == high and "token" not in reply  # no owner: no token key
    assert h.state(high) == "active" and h.state(low) == "waiting"
    locked = h.ok("PULL", queue="q", owner="w1")
    assert locked["job"]["id"] == low and is_uuid7(locked["token"])
    assert h.ok("PULL", queue="q", owner="w1") == {"ok": True, "job": None, "token": None}


@scenario("PULLB")
def _pullb(h: Harness) -> None:
    ids = [h.push(data=i) for i in range(5)]
    reply = h.ok("PULLB", queue="q", count=3, owner="w")
    assert [j["id"] for j in reply["jobs"]] == ids[:3]
    assert len(reply["tokens"]) == 3 and len(set(reply["tokens"])) == 3
    rest = h.ok("PULLB", queue="q", count=10)
    assert [j["id"] for j in rest["jobs"]] == ids[3:] and "tokens" not in rest


@scenario("ACK")
def _ack(h: Harness) -> None:
    job_id = h.push()
    h.pull()
    assert h.ok("ACK", id=job_id, result={"sent": True}) == {"ok": True}
    assert h.state(job_id) == "completed"
    assert h.ok("GetResult", id=job_id)["result"] == {"sent": True}
    h.err("ACK", "job_not_processing", id=job_id, fmt={"id": job_id})  # not active any more


@scenario("ACKB")
def _ackb(h: Harness) -> None:
    ids = [h.push(data=i) for i in range(3)]
    tokens = h.ok("PULLB", queue="q", count=3, owner="w")["tokens"]
    h.err("ACKB", "ackb_results_length", ids=ids, results=[1], tokens=tokens)
    h.err("ACKB", "lock_token_invalid", ids=ids, tokens=[tokens[0], tokens[0], tokens[2]],
          fmt={"id": ids[1]})
    assert [h.state(i) for i in ids] == ["active"] * 3  # all or nothing
    h.ok("ACKB", ids=ids, results=["r0", "r1", "r2"], tokens=tokens)
    assert [h.ok("GetResult", id=i)["result"] for i in ids] == ["r0", "r1", "r2"]


@scenario("FAIL")
def _fail(h: Harness) -> None:
    job_id = h.push()
    h.pull()
    assert h.ok("FAIL", id=job_id, error="boom") == {"ok": True}
    job = h.job(job_id)
    assert (job["state"], job["attempts"], job["failedReason"]) == ("delayed", 1, "boom")
    assert job["runAt"] == T0 + PUSH_DEFAULTS["backoff"]
    h.err("FAIL", "job_not_processing", id="nope", fmt={"id": "nope"})


@scenario("GetJob")
def _getjob(h: Harness) -> None:
    job_id = h.push(data={"k": [1, 2]})
    job = h.job(job_id)
    assert job["id"] == job_id and job["data"] == {"k": [1, 2]} and job["state"] == "waiting"
    assert "returnvalue" not in job and job["timeline"] == [{"state": "waiting",
                                                              "timestamp": T0}]
    h.err("GetJob", "job_not_found", id="missing")


@scenario("GetState")
def _getstate(h: Harness) -> None:
    job_id = h.push(delay=10)
    assert h.ok("GetState", id=job_id) == {"ok": True, "id": job_id, "state": "delayed"}
    h.err("GetState", "job_not_found", id="missing")


@scenario("GetResult")
def _getresult(h: Harness) -> None:
    job_id = h.push()
    assert h.ok("GetResult", id=job_id) == {"ok": True, "id": job_id, "result": None}
    h.pull()
    h.ok("ACK", id=job_id, result=[1, "two"])
    assert h.ok("GetResult", id=job_id)["result"] == [1, "two"]
    assert h.ok("GetResult", id="never")["result"] is None  # BQ-QUERY-3: null, not an error


@scenario("GetJobs")
def _getjobs(h: Harness) -> None:
    ids = [h.push(data=i) for i in range(5)]
    delayed = h.push(delay=100)
    h.pull()
    listed = h.ok("GetJobs", queue="q")["jobs"]
    assert [j["id"] for j in listed] == ids + [delayed]
    assert {j["id"]: j["state"] for j in listed}[ids[0]] == "active"
    waiting = h.ok("GetJobs", queue="q", state="waiting", limit=2, offset=1)["jobs"]
    assert [j["id"] for j in waiting] == ids[2:4]
    assert [j["id"] for j in h.ok("GetJobs", queue="q", state="delayed")["jobs"]] == [delayed]
    assert h.ok("GetJobs", queue="nothing")["jobs"] == []


@scenario("GetJobCounts")
def _getjobcounts(h: Harness) -> None:
    for _ in range(3):
        h.push()
    h.push(delay=5)
    h.pull()
    counts = h.ok("GetJobCounts", queue="q")["counts"]
    assert counts == {"waiting": 2, "delayed": 1, "active": 1, "completed": 0, "failed": 0}


@scenario("GetCountsPerPriority")
def _getcountsperpriority(h: Harness) -> None:
    for p in (0, 0, 5, -3):
        h.push(priority=p)
    h.push(priority=5, delay=10)  # queued (delayed) jobs count too
    h.pull()  # the 5 leaves the queue
    reply = h.ok("GetCountsPerPriority", queue="q")
    assert reply == {"ok": True, "queue": "q", "counts": {"-3": 1, "0": 2, "5": 1}}


@scenario("GetJobByCustomId")
def _getjobbycustomid(h: Harness) -> None:
    h.push(jobId="order-42", data={"order": 42})
    job = h.ok("GetJobByCustomId", customId="order-42")["job"]
    assert job["id"] == job["customId"] == "order-42" and "state" not in job
    generated = h.push()
    h.err("GetJobByCustomId", "job_not_found", customId=generated)  # not a custom id
    h.err("GetJobByCustomId", "job_not_found", customId="nope")


@scenario("Count")
def _count(h: Harness) -> None:
    a = h.push()
    h.push(delay=9)
    h.pull()
    h.ok("ACK", id=a)
    assert h.ok("Count", queue="q") == {"ok": True, "count": 2}
    assert h.ok("Count", queue="other")["count"] == 0


@scenario("GetProgress")
def _getprogress(h: Harness) -> None:
    job_id = h.push()
    h.err("GetProgress", "job_not_active", id=job_id, fmt={"state": "waiting"})
    h.pull()
    assert h.ok("GetProgress", id=job_id) == {"ok": True, "progress": 0, "message": None}


@scenario("GetChildrenValues")
def _getchildrenvalues(h: Harness) -> None:
    a, b = h.push(data="a"), h.push(data="b")
    parent = h.push(data="p", dependsOn=[a, b])
    h.pull()
    h.ok("ACK", id=a, result="A")
    assert h.ok("GetChildrenValues", id=parent) == {"ok": True, "data": {"values": {a: "A"}}}
    assert h.ok("GetChildrenValues", id="unknown")["data"] == {"values": {}}  # BQ-DEPS-2


@scenario("Cancel")
def _cancel(h: Harness) -> None:
    waiting, delayed, active = h.push(), h.push(delay=50), h.push()
    h.ok("Cancel", id=waiting)
    h.ok("Cancel", id=delayed)
    h.err("GetJob", "job_not_found", id=waiting)
    h.pull()
    h.err("Cancel", "job_not_cancellable", id=active)  # BQ-JOB-9
    h.err("Cancel", "job_not_cancellable", id="missing")


@scenario("Progress")
def _progress(h: Harness) -> None:
    job_id = h.push()
    h.err("Progress", "job_not_active", id=job_id, progress=10, fmt={"state": "waiting"})
    h.pull()
    h.ok("Progress", id=job_id, progress=42.5, message="halfway")
    assert h.ok("GetProgress", id=job_id) == {"ok": True, "progress": 42.5,
                                              "message": "halfway"}
    assert h.job(job_id)["progressMessage"] == "halfway"


@scenario("Update")
def _update(h: Harness) -> None:
    job_id = h.push(data={"v": 1})
    h.ok("Update", id=job_id, data={"v": 2})
    assert h.job(job_id)["data"] == {"v": 2}
    h.err("Update", "job_not_updatable", id="missing", data=1)


@scenario("ChangePriority")
def _changepriority(h: Harness) -> None:
    first, second = h.push(), h.push()
    h.ok("ChangePriority", id=second, priority=10)
    assert h.job(second)["priority"] == 10
    assert h.pull()["id"] == second
    h.err("ChangePriority", "job_not_queued", id=second, priority=1)  # active now
    assert h.ok("GetCountsPerPriority", queue="q")["counts"] == {"0": 1}
    assert h.pull()["id"] == first


@scenario("Promote")
def _promote(h: Harness) -> None:
    job_id = h.push(delay=60_000)
    assert h.pull() is None
    h.ok("Promote", id=job_id)
    assert h.state(job_id) == "waiting"
    assert h.pull()["id"] == job_id
    h.err("Promote", "job_not_delayed", id=job_id)


@scenario("MoveToDelayed")
def _movetodelayed(h: Harness) -> None:
    job_id = h.push()
    h.err("MoveToDelayed", "job_not_active", id=job_id, delay=5, fmt={"state": "waiting"})
    h.pull()
    h.ok("MoveToDelayed", id=job_id, delay=5000)
    job = h.job(job_id)
    assert (job["state"], job["runAt"]) == ("delayed", T0 + 5000)
    h.tick(4999)
    assert h.state(job_id) == "delayed"
    h.tick(1)
    assert h.state(job_id) == "waiting"


@scenario("Discard")
def _discard(h: Harness) -> None:
    job_id = h.push(maxAttempts=5)
    h.pull()
    h.ok("Discard", id=job_id)
    assert h.state(job_id) == "failed"
    assert [j["id"] for j in h.ok("Dlq", queue="q")["jobs"]] == [job_id]
    h.err("Discard", "job_not_found", id=job_id)  # already in the DLQ: no transition


@scenario("WaitJob")
def _waitjob(h: Harness) -> None:
    job_id = h.push()
    h.pull()
    h.ok("ACK", id=job_id, result="done")
    assert h.ok("WaitJob", id=job_id) == {"ok": True, "completed": True, "result": "done"}
    h.err("WaitJob", "job_not_found", id="missing")
    other = h.push()
    assert h.ok("WaitJob", id=other, timeout=0) == {"ok": True, "completed": False}


@scenario("Pause")
def _pause(h: Harness) -> None:
    h.push()
    h.ok("Pause", queue="q")
    assert h.pull() is None  # BQ-QUEUE-1
    assert h.ok("IsPaused", queue="q")["paused"] is True


@scenario("Resume")
def _resume(h: Harness) -> None:
    job_id = h.push()
    h.ok("Pause", queue="q")
    h.events.clear()
    h.ok("Resume", queue="q")
    assert Event("q", None, "resumed") in h.events
    assert h.pull()["id"] == job_id


@scenario("IsPaused")
def _ispaused(h: Harness) -> None:
    assert h.ok("IsPaused", queue="never-seen") == {"ok": True, "paused": False}
    h.ok("Pause", queue="q")
    assert h.ok("IsPaused", queue="q")["paused"] is True
    h.ok("Resume", queue="q")
    assert h.ok("IsPaused", queue="q")["paused"] is False


@scenario("Drain")
def _drain(h: Harness) -> None:
    h.push(), h.push()
    delayed = h.push(delay=100)
    assert h.ok("Drain", queue="q") == {"ok": True, "count": 2}
    assert h.ok("GetJobCounts", queue="q")["counts"]["waiting"] == 0
    assert h.state(delayed) == "delayed"  # BQ-QUEUE-2: waiting jobs only


@scenario("Obliterate")
def _obliterate(h: Harness) -> None:
    h.push(), h.push(delay=5)
    active = h.push(priority=9)
    h.pull()
    h.ok("Pause", queue="q")
    h.ok("Obliterate", queue="q")
    assert h.ok("Count", queue="q")["count"] == 0
    assert h.ok("IsPaused", queue="q")["paused"] is False
    assert "q" not in [q["name"] for q in h.ok("ListQueues")["queues"]]
    h.err("ACK", "job_not_processing", id=active, fmt={"id": active})


@scenario("Clean")
def _clean(h: Harness) -> None:
    old = h.push()
    h.pull()
    h.ok("ACK", id=old)
    h.clock.advance(10_000)
    young = h.push()
    reply = h.ok("Clean", queue="q", grace=5_000, state="completed")
    assert reply == {"ok": True, "count": 1}  # ids is bunqueue/2.9.5's (BQ-QUEUE-101)
    assert h.ok("GetJobs", queue="q", state="completed")["jobs"] == []
    assert h.ok("Clean", queue="q", grace=5_000)["count"] == 0  # young is 0 ms old
    assert h.state(young) == "waiting"


@scenario("ListQueues")
def _listqueues(h: Harness) -> None:
    h.push("a"), h.push("a", delay=5), h.push("b")
    h.pull("b")
    h.ok("Pause", queue="a")
    queues = {q["name"]: q for q in h.ok("ListQueues")["queues"]}
    assert queues["a"] == {"name": "a", "waiting": 1, "delayed": 1, "active": 0, "paused": True}
    assert queues["b"] == {"name": "b", "waiting": 0, "delayed": 0, "active": 1, "paused": False}


@scenario("Dlq")
def _dlq(h: Harness) -> None:
    ids = [h.push(data=i, maxAttempts=1) for i in range(3)]
    for _ in ids:
        h.ok("FAIL", id=h.pull()["id"], error="x")
    assert [j["id"] for j in h.ok("Dlq", queue="q")["jobs"]] == ids
    assert [j["id"] for j in h.ok("Dlq", queue="q", count=2)["jobs"]] == ids[:2]
    assert h.ok("Dlq", queue="empty")["jobs"] == []


@scenario("RetryDlq")
def _retrydlq(h: Harness) -> None:
    ids = [h.push(data=i, maxAttempts=1) for i in range(3)]
    for _ in ids:
        h.ok("FAIL", id=h.pull()["id"])
    assert h.ok("RetryDlq", queue="q", jobId=ids[1]) == {"ok": True, "count": 1}  # BQ-DLQ-1
    assert h.job(ids[1])["state"] == "waiting" and h.job(ids[1])["attempts"] == 0
    assert h.ok("RetryDlq", queue="q")["count"] == 2
    assert h.ok("GetJobCounts", queue="q")["counts"]["failed"] == 0


@scenario("PurgeDlq")
def _purgedlq(h: Harness) -> None:
    for _ in range(2):
        h.push(maxAttempts=1)
        h.ok("FAIL", id=h.pull()["id"])
    assert h.ok("PurgeDlq", queue="q") == {"ok": True, "count": 2}
    assert h.ok("Dlq", queue="q")["jobs"] == [] and h.ok("Count", queue="q")["count"] == 0


@scenario("RetryCompleted")
def _retrycompleted(h: Harness) -> None:
    a, b = h.push(), h.push()
    for _ in range(2):
        h.ok("ACK", id=h.pull()["id"], result="r")
    assert h.ok("RetryCompleted", queue="q", id=b) == {"ok": True, "count": 1}  # BQ-DLQ-2
    assert h.state(b) == "waiting" and h.ok("GetResult", id=b)["result"] is None
    assert h.ok("RetryCompleted", queue="q")["count"] == 1 and h.state(a) == "waiting"


@scenario("Cron")
def _cron(h: Harness) -> None:
    cron = h.ok("Cron", name="tick", queue="q", data={"x": 1}, repeatEvery=1000)["cron"]
    assert cron["name"] == "tick" and cron["schedule"] is None
    assert cron["repeatEvery"] == 1000 and cron["nextRun"] == T0 + 1000
    assert "timezone" not in cron
    h.err("Cron", "cron_no_schedule", name="bad", queue="q", data=1)
    h.err("Cron", "cron_invalid_expression", name="bad", queue="q", data=1, schedule="* * *",
          fmt={"detail": "Cron expression must have 5 fields, or 6 fields with leading seconds"})
    h.err("Cron", "cron_invalid_timezone", name="bad", queue="q", data=1, schedule="* * * * *",
          timezone="Mars/Olympus", fmt={"timezone": "Mars/Olympus"})
    h.err("Cron", "cron_invalid_repeat", name="bad", queue="q", data=1, repeatEvery=0)
    reply = h(cmd="Cron", name="bad", queue="q", data=1, schedule="0 0 31 2 *")
    assert reply["error"].startswith(message("cron_invalid_expression", detail=""))


@scenario("CronDelete")
def _crondelete(h: Harness) -> None:
    h.ok("Cron", name="c", queue="q", data=1, repeatEvery=100)
    h.ok("CronDelete", name="c")
    h.err("CronGet", "cron_not_found", name="c")
    h.err("CronDelete", "cron_not_found", name="c")
    h.tick(100)
    assert h.ok("Count", queue="q")["count"] == 0  # a deleted schedule never fires


@scenario("CronList")
def _cronlist(h: Harness) -> None:
    assert h.ok("CronList") == {"ok": True, "crons": []}
    h.ok("Cron", name="a", queue="q", data=1, repeatEvery=100, maxLimit=2)
    h.ok("Cron", name="b", queue="q", data=1, schedule="*/5 * * * *", timezone="Europe/Rome")
    crons = {c["name"]: c for c in h.ok("CronList")["crons"]}
    assert crons["a"]["maxLimit"] == 2 and crons["a"]["executions"] == 0
    assert crons["b"]["timezone"] == "Europe/Rome" and "maxLimit" not in crons["b"]
    assert crons["b"]["nextRun"] == T0 + 5 * 60_000


@scenario("CronGet")
def _cronget(h: Harness) -> None:
    h.ok("Cron", name="c", queue="q", data=1, repeatEvery=100)
    h.tick(100)
    cron = h.ok("CronGet", name="c")["cron"]
    assert cron["executions"] == 1 and cron["nextRun"] == T0 + 200
    h.err("CronGet", "cron_not_found", name="nope")


@scenario("AddLog")
def _addlog(h: Harness) -> None:
    job_id = h.push()
    assert h.ok("AddLog", id=job_id, message="started") == {"ok": True,
                                                            "data": {"added": True}}
    h.err("AddLog", "job_not_found", id="missing", message="x")


@scenario("GetLogs")
def _getlogs(h: Harness) -> None:
    job_id = h.push()
    h.ok("AddLog", id=job_id, message="one")
    h.clock.advance(5)
    h.ok("AddLog", id=job_id, message="two", level="warn")
    logs = h.ok("GetLogs", id=job_id)["data"]["logs"]
    assert logs == [{"message": "one", "level": "info", "timestamp": T0},
                    {"message": "two", "level": "warn", "timestamp": T0 + 5}]
    assert h.ok("GetLogs", id="missing")["data"]["logs"] == []


@scenario("Ping")
def _ping(h: Harness) -> None:
    h.clock.advance(123)
    assert h.ok("Ping") == {"ok": True, "data": {"pong": True, "time": T0 + 123}}


@scenario("Hello")
def _hello(h: Harness) -> None:
    reply = h.ok("Hello", protocolVersion=2)
    assert reply["protocolVersion"] == MODEL.protocol_version
    assert reply["capabilities"] == list(MODEL.capabilities) and reply["server"] == "bunqueue"


@scenario("Stats")
def _stats(h: Harness) -> None:
    for _ in range(3):
        h.push()
    h.push(delay=10_000)
    h.push(maxAttempts=1, priority=9)
    h.ok("FAIL", id=h.pull()["id"])
    h.ok("ACK", id=h.pull()["id"])
    h.pull()
    h.clock.advance(1000)
    stats = h.ok("Stats")["stats"]
    assert (stats["queued"], stats["processing"], stats["delayed"], stats["dlq"],
            stats["completed"]) == (1, 1, 1, 1, 1)
    assert stats["uptime"] == 1000
    assert stats["pushPerSec"] == pytest.approx(5 / 10)
    assert stats["pullPerSec"] == pytest.approx(3 / 10)


@scenario("Metrics")
def _metrics(h: Harness) -> None:
    a = h.push()
    h.clock.advance(100)
    h.pull()
    h.clock.advance(50)
    h.ok("ACK", id=a)
    m = h.ok("Metrics")["metrics"]
    assert (m["totalPushed"], m["totalPulled"], m["totalCompleted"], m["totalFailed"]) == (1, 1,
                                                                                          1, 0)
    assert m["avgLatencyMs"] == 100 and m["avgProcessingMs"] == 50
    assert m["activeConnections"] == 1 and m["sqliteSizeMb"] == 0 and m["memoryUsageMb"] > 0


@scenario("Prometheus")
def _prometheus(h: Harness) -> None:
    h.push("q1"), h.push("q1"), h.push("app:mail.v2")
    text = h.ok("Prometheus")["data"]["metrics"]
    sample = re.compile(r'^[a-z_]+(\{queue="(?:[^"\\]|\\.)*"\})? -?[0-9.e+]+$')
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), line
    assert "bunqueue_jobs_waiting 3" in text.splitlines()
    assert 'bunqueue_queue_jobs_waiting{queue="q1"} 2' in text
    assert 'bunqueue_queue_jobs_waiting{queue="app:mail.v2"} 1' in text
    assert "bunqueue_jobs_pushed_total 3" in text


@scenario("StorageStatus")
def _storagestatus(h: Harness) -> None:
    assert h.ok("StorageStatus") == {"ok": True, "data": {"diskFull": False, "error": None,
                                                         "since": None}}


@scenario("Heartbeat")
def _heartbeat(h: Harness) -> None:
    wid = h.ok("RegisterWorker", name="w", queues=["q"])["data"]["workerId"]
    h.clock.advance(DEFAULTS["workerTimeout"])
    assert h.ok("ListWorkers")["data"]["workers"][0]["lastSeen"] == T0
    assert h.ok("Heartbeat", id=wid) == {"ok": True, "data": {"ok": True}}
    worker = h.ok("ListWorkers")["data"]["workers"][0]
    assert worker["lastSeen"] == h.clock.t  # status (stale, active) is bunqueue/2.9.5's
    h.err("Heartbeat", "worker_not_found", id="ghost")


@scenario("JobHeartbeat")
def _jobheartbeat(h: Harness) -> None:
    job_id = h.push()
    h.err("JobHeartbeat", "job_heartbeat_refused", id=job_id)
    token = h.ok("PULL", queue="q", owner="w")["token"]
    h.clock.advance(1000)
    assert h.ok("JobHeartbeat", id=job_id, token=token) == {"ok": True, "data": {"ok": True}}
    assert h.job(job_id)["lastHeartbeat"] == T0 + 1000
    h.err("JobHeartbeat", "job_heartbeat_refused", id=job_id, token="wrong")


@scenario("JobHeartbeatB")
def _jobheartbeatb(h: Harness) -> None:
    ids = [h.push(), h.push()]
    tokens = h.ok("PULLB", queue="q", count=2, owner="w")["tokens"]
    reply = h.ok("JobHeartbeatB", ids=ids + ["missing"], tokens=[tokens[0], "bad", "x"])
    assert reply == {"ok": True, "data": {"ok": True, "count": 1}}


@scenario("RegisterWorker")
def _registerworker(h: Harness) -> None:
    data = h.ok("RegisterWorker", name="mailer", queues=["emails"])["data"]
    assert is_uuid7(data["workerId"]) and data["name"] == "mailer"
    assert data["queues"] == ["emails"] and data["registeredAt"] == T0
    chosen = h.ok("RegisterWorker", name="m2", queues=[], workerId="worker-1")["data"]
    assert chosen["workerId"] == "worker-1"


@scenario("UnregisterWorker")
def _unregisterworker(h: Harness) -> None:
    wid = h.ok("RegisterWorker", name="w", queues=["q"])["data"]["workerId"]
    assert h.ok("UnregisterWorker", workerId=wid) == {"ok": True, "data": {"removed": True}}
    assert h.ok("ListWorkers")["data"]["workers"] == []
    h.err("UnregisterWorker", "worker_not_found", workerId=wid)


@scenario("ListWorkers")
def _listworkers(h: Harness) -> None:
    wid = h.ok("RegisterWorker", name="w", queues=["q"], workerId="w-1")["data"]["workerId"]
    a, b, _ = h.push(), h.push(), h.push()
    for job_id in (a, b):
        token = h.ok("PULL", queue="q", owner=wid)["token"]
        h.ok("ACK" if job_id == a else "FAIL", id=job_id, token=token)
    h.ok("PULL", queue="q", owner=wid)
    data = h.ok("ListWorkers")["data"]
    (worker,) = data["workers"]
    assert (worker["id"], worker["activeJobs"], worker["processedJobs"],
            worker["failedJobs"]) == ("w-1", 1, 1, 1)
    assert data["stats"]["total"] == 1 and data["stats"]["activeJobs"] == 1


@scenario("AddWebhook")
def _addwebhook(h: Harness) -> None:
    data = h.ok("AddWebhook", url="https://hooks.example.com/x", events=["job.completed"],
                queue="q", secret="s3cret")["data"]
    assert data["url"] == "https://hooks.example.com/x" and data["queue"] == "q"
    assert data["events"] == ["job.completed"] and data["createdAt"] == T0
    h.err("AddWebhook", "webhook_url_localhost", url="http://localhost:8080/", events=[])
    valid = ", ".join(PROFILE.tree["webhook_events"]["events"])
    h.err("AddWebhook", "webhook_invalid_events", url="https://example.com/",
          events=["job.exploded"], fmt={"events": "job.exploded", "valid": valid})


@scenario("RemoveWebhook")
def _removewebhook(h: Harness) -> None:
    wid = h.ok("AddWebhook", url="https://example.com/", events=[])["data"]["webhookId"]
    assert h.ok("RemoveWebhook", webhookId=wid) == {"ok": True, "data": {"removed": True}}
    h.err("RemoveWebhook", "webhook_not_found", webhookId=wid)


@scenario("ListWebhooks")
def _listwebhooks(h: Harness) -> None:
    wid = h.ok("AddWebhook", url="https://example.com/h", events=["job.pushed"],
               secret="s")["data"]["webhookId"]
    h.push()
    (delivery,) = h.engine.webhook_deliveries()
    h.clock.advance(7)
    h.engine.webhook_result(delivery.webhook_id, ok=True)
    data = h.ok("ListWebhooks")["data"]
    (hook,) = data["webhooks"]
    assert (hook["id"], hook["successCount"], hook["failureCount"], hook["lastTriggered"],
            hook["enabled"]) == (wid, 1, 0, T0 + 7, True)
    assert "secret" not in hook and "queue" not in hook
    assert data["stats"] == {"total": 1, "enabled": 1}


@scenario("RateLimit")
def _ratelimit(h: Harness) -> None:
    for _ in range(5):
        h.push()
    h.ok("RateLimit", queue="q", limit=2)
    assert len(h.ok("PULLB", queue="q", count=5)["jobs"]) == 2  # BQ-RATE-2
    assert h.pull() is None
    h.clock.advance(1000)
    assert len(h.ok("PULLB", queue="q", count=5)["jobs"]) == 2
    # the validator refuses a non-finite limit (JSON has none); the engine still guards it
    assert h.engine.handle("c1", {"cmd": "RateLimit", "queue": "q", "limit": math.inf}) == {
        "ok": False, "error": message("limit_not_finite")}


@scenario("RateLimitClear")
def _ratelimitclear(h: Harness) -> None:
    for _ in range(3):
        h.push()
    h.ok("RateLimit", queue="q", limit=1)
    assert len(h.ok("PULLB", queue="q", count=3)["jobs"]) == 1
    h.ok("RateLimitClear", queue="q")
    assert len(h.ok("PULLB", queue="q", count=3)["jobs"]) == 2


@scenario("SetConcurrency")
def _setconcurrency(h: Harness) -> None:
    for _ in range(4):
        h.push()
    h.ok("SetConcurrency", queue="q", limit=2)
    first = h.ok("PULLB", queue="q", count=4)["jobs"]
    assert len(first) == 2 and h.pull() is None  # BQ-CONC-1
    h.ok("ACK", id=first[0]["id"])
    assert h.pull() is not None and h.pull() is None


@scenario("ClearConcurrency")
def _clearconcurrency(h: Harness) -> None:
    for _ in range(3):
        h.push()
    h.ok("SetConcurrency", queue="q", limit=1)
    assert h.pull() is not None and h.pull() is None
    h.events.clear()
    h.ok("ClearConcurrency", queue="q")
    assert any(e.queue == "q" for e in h.events)
    assert len(h.ok("PULLB", queue="q", count=5)["jobs"]) == 2


@scenario("Auth")
def _auth(h: Harness) -> None:
    # The engine holds no tokens: Auth is the shell's. Forwarded, it is bunqueue's answer with
    # no tokens configured.
    h.err("Auth", "invalid_token", token="anything")
    assert check_token(["alpha", "beta"], "beta") and not check_token(["alpha"], "alph")
    assert not check_token([], "x") and not check_token(["x"], 5)


def test_every_command_has_a_scenario():
    assert sorted(SCENARIOS) == sorted(MODEL.commands)
    assert len(SCENARIOS) == 62


@pytest.mark.parametrize("cmd", sorted(SCENARIOS))
def test_command(cmd, h):
    SCENARIOS[cmd](h)


# =============================================================================================
# Construction: the engine is driven by the spec
# =============================================================================================
def test_every_lifecycle_event_is_a_row_of_the_spec_table():
    events = {t.event for t in MODEL.job_lifecycle.transitions}
    assert set(LIFECYCLE_EVENTS) <= events


def test_an_engine_refuses_a_profile_whose_lifecycle_lacks_an_event():
    rows = tuple(t for t in MODEL.job_lifecycle.transitions if t.event != "RetryDlq")
    machine = dataclasses.replace(MODEL.job_lifecycle, transitions=rows)
    profile = dataclasses.replace(PROFILE, model=dataclasses.replace(MODEL,
                                                                     job_lifecycle=machine))
    with pytest.raises(ValueError, match="RetryDlq"):
        BunqueueEngine(profile)


def test_an_engine_refuses_a_profile_with_a_command_it_cannot_handle():
    commands = dict(MODEL.commands, Teleport=MODEL.commands["Ping"])
    profile = dataclasses.replace(PROFILE, model=dataclasses.replace(MODEL, commands=commands))
    with pytest.raises(ValueError, match="Teleport"):
        BunqueueEngine(profile)


def test_config_defaults_come_from_the_profile():
    engine = BunqueueEngine(now_ms=Clock())
    assert (engine.stall_interval, engine.max_stalls, engine.lock_ttl, engine.wait_job_timeout,
            engine.worker_timeout) == (DEFAULTS["stallInterval"], DEFAULTS["maxStalls"],
                                       DEFAULTS["lockTtl"], DEFAULTS["waitJobTimeout"],
                                       DEFAULTS["workerTimeout"])
    assert BunqueueEngine(now_ms=Clock(), config=EngineConfig(max_stalls=7)).max_stalls == 7


def test_a_job_carries_every_field_of_the_spec_job_object(h):
    job = h.job(h.push())
    documented = set(MODEL.definitions["Job"]["properties"])
    query_only = {"state", "returnvalue", "failedReason"}
    assert set(job) - query_only == documented - query_only


def test_every_error_the_engine_can_answer_is_in_the_spec():
    # the engine's modules: the package less its shells and stores
    package = Path(bunqueue_engine.__file__).parent
    shells = {"__init__.py", "tcp.py", "http.py", "waits.py", "store.py", "sqlite.py"}
    source = "\n".join(f.read_text() for f in sorted(package.rglob("*.py")) if f.name not in shells)
    refused = set(re.findall(r'Refused\("([a-z_]+)"', source))
    refused |= set(re.findall(r'"(webhook_url_[a-z_]+)"', source))
    # an error a profile adds (bunqueue/2.9.5's job_name_invalid) is in that profile's table
    every_profile = set().union(*(load_profile(p).model.errors
                                  for p in profile_names("bunqueue")))
    assert refused and refused <= every_profile, refused - every_profile
    # and every error of the spec is one the engine answers, except the shell's own
    shell_only = {"not_authenticated", "rate_limit_exceeded", "frame_too_large",
                  "invalid_command_format", "invalid_command", "invalid_request"}
    shell_only |= {"http_content_type", "http_origin_refused", "http_host_refused",
                   "http_connection_limit"}  # the HTTP shell's (BQ-SAFE-1, BQ-SAFE-2)
    unused = {name for name in MODEL.errors if f'"{name}"' not in source} - shell_only
    assert unused == set()
    for name in MODEL.errors:
        assert MODEL.errors[name].requirement in PROFILE.requirements


def test_unknown_command_is_an_error_reply(h):
    assert h.engine.handle("c", {"cmd": "Teleport"}) == {
        "ok": False, "error": message("unknown_command", cmd="Teleport")}


def test_undefined_options_count_as_absent(h):
    # msgpackr clients send unset options as JavaScript undefined (ext 0)
    reply = h.engine.handle("c", {"cmd": "PUSH", "queue": "q", "data": 1,
                                  "priority": UNDEFINED, "maxAttempts": UNDEFINED})
    job = h.job(reply["id"])
    assert job["priority"] == PUSH_DEFAULTS["priority"]
    assert job["maxAttempts"] == PUSH_DEFAULTS["maxAttempts"]


def test_integral_floats_are_integers(h):
    # msgpackr writes integers beyond 32 bits as float64
    job = h.job(h.push(priority=7.0, delay=5000.0))
    assert job["priority"] == 7 and isinstance(job["priority"], int)
    assert job["runAt"] == T0 + 5000


# =============================================================================================
# Ordering
# =============================================================================================
def test_priority_then_fifo(h):
    ids = {p: [h.push(data=(p, i), priority=p) for i in range(3)] for p in (1, 10, -5)}
    order = [h.pull()["id"] for _ in range(9)]
    assert order == ids[10] + ids[1] + ids[-5]  # BQ-PUSH-1, FIFO within a priority


def test_lifo_jobs_go_before_earlier_jobs_of_equal_priority(h):
    a = h.push(data="a")
    b = h.push(data="b", lifo=True)
    c = h.push(data="c", lifo=True)
    d = h.push(data="d")
    high = h.push(data="high", priority=1)
    assert [h.pull()["id"] for _ in range(5)] == [high, c, b, a, d]  # BQ-PUSH-2


def test_waiting_list_is_in_pull_order(h):
    a, b = h.push(), h.push(priority=3)
    assert [j["id"] for j in h.ok("GetJobs", queue="q", state="waiting")["jobs"]] == [b, a]


# =============================================================================================
# Delays, promotion, retries, DLQ
# =============================================================================================
def test_delay_elapses_on_tick_and_on_the_next_command(h):
    job_id = h.push(delay=1000)
    assert h.state(job_id) == "delayed" and h.pull() is None
    assert h.tick(999) == [] and h.state(job_id) == "delayed"
    events = h.tick(1)
    assert Event("q", job_id, "waiting") in events and h.state(job_id) == "waiting"
    later = h.push(delay=500)
    h.clock.advance(500)
    assert h.pull()["id"] == job_id and h.pull()["id"] == later  # no tick needed
    assert h.engine.next_deadline() is not None


def test_ticking_at_next_deadline_always_makes_progress(h):
    h.push(ttl=300)
    h.push(delay=700)
    h.ok("PULL", queue="q", owner="w", lockTtl=400)
    h.ok("Cron", name="c", queue="q", data=1, repeatEvery=250, maxLimit=4)
    h.push("r"), h.push("r")
    h.ok("RateLimit", queue="r", limit=1)
    h.pull("r"), h.pull("r")
    seen = []
    while (deadline := h.engine.next_deadline()) is not None and len(seen) < 50:
        assert not seen or deadline > h.clock.t  # a tick leaves no work due at its time
        h.clock.t = max(h.clock.t, deadline)
        h.engine.tick()
        seen.append(h.clock.t)
    assert len(seen) < 50, "next_deadline kept returning work"
    assert h.ok("CronGet", name="c")["cron"]["executions"] == 4


def test_exponential_backoff_then_dlq(h):
    job_id = h.push(maxAttempts=3, backoff=1000)
    runs = []
    for _attempt in range(3):
        while (job := h.pull()) is None:
            h.tick(1)
        runs.append(h.clock.t)
        h.ok("FAIL", id=job["id"], error=f"fail {_attempt}")
    # BQ-JOB-14: retries after backoff * 2^(attempts-1): +1000, then +2000
    assert [r - runs[0] for r in runs] == [0, 1000, 3000]
    job = h.job(job_id)
    assert (job["state"], job["attempts"], job["failedReason"]) == ("failed", 3, "fail 2")
    assert [j["id"] for j in h.ok("Dlq", queue="q")["jobs"]] == [job_id]
    failures = [e for e in job["timeline"] if e.get("error")]
    assert [e["attempt"] for e in failures] == [1, 2, 3]


def test_backoff_is_capped_at_the_delay_limit(h):
    job_id = h.push(maxAttempts=1000, backoff=PROFILE.limit("backoff").max)
    for _ in range(60):
        job = h.pull()
        h.ok("FAIL", id=job["id"])
        h.ok("Promote", id=job_id)
    h.pull()
    h.ok("FAIL", id=job_id)
    assert h.job(job_id)["runAt"] == h.clock.t + PROFILE.limit("delay").max


def test_backoff_zero_retries_at_once(h):
    job_id = h.push(backoff=0)
    h.pull()
    h.ok("FAIL", id=job_id)
    assert h.state(job_id) == "waiting"


def test_unrecoverable_fail_goes_straight_to_the_dlq(h):
    job_id = h.push(maxAttempts=5)
    h.pull()
    h.ok("FAIL", id=job_id, error="bad input", unrecoverable=True, stack=["at a", 5, "at b"])
    job = h.job(job_id)
    assert job["state"] == "failed" and job["stacktrace"] == ["at a", "at b"]


def test_retry_dlq_gives_a_job_its_attempts_back(h):
    job_id = h.push(maxAttempts=1)
    h.pull()
    h.ok("FAIL", id=job_id)
    h.ok("RetryDlq", queue="q")
    h.pull()
    h.ok("FAIL", id=job_id)
    assert h.state(job_id) == "failed"  # one attempt again, then the DLQ
    assert h.ok("RetryDlq", queue="q", jobId="not-there")["count"] == 0


def test_remove_on_fail(h):
    job_id = h.push(maxAttempts=1, removeOnFail=True)
    h.pull()
    h.ok("FAIL", id=job_id)
    h.err("GetJob", "job_not_found", id=job_id)
    assert h.ok("Dlq", queue="q")["jobs"] == []


# =============================================================================================
# Deduplication, custom ids, dependencies
# =============================================================================================
def test_unique_key_dedups_until_the_job_finishes(h):
    first = h.push(uniqueKey="k")
    assert h.push(uniqueKey="k") == first  # BQ-DEDUP-2
    assert h.push("other", uniqueKey="k") != first  # per queue
    h.pull()
    assert h.push(uniqueKey="k") == first  # still active
    h.ok("ACK", id=first)
    second = h.push(uniqueKey="k")
    assert second != first and h.ok("Count", queue="q")["count"] == 2


def test_unique_key_within_one_batch(h):
    ids = h.ok("PUSHB", queue="q", jobs=[{"data": 1, "uniqueKey": "k"},
                                         {"data": 2, "uniqueKey": "k"}])["ids"]
    assert ids[0] == ids[1] and h.ok("Count", queue="q")["count"] == 1


def test_custom_id_is_idempotent_across_push_and_pushb(h):
    assert h.push(jobId="x", data=1) == "x"
    assert h.push(jobId="x", data=2) == "x"
    assert h.ok("PUSHB", queue="q", jobs=[{"data": 3, "customId": "x"}])["ids"] == ["x"]
    assert h.job("x")["data"] == 1 and h.ok("Count", queue="q")["count"] == 1
    h.pull()
    h.ok("ACK", id="x")
    assert h.push(jobId="x") == "x"  # the completed job still exists: still idempotent


def test_depends_on_holds_a_job_until_its_dependencies_complete(h):
    a, b = h.push(data="a"), h.push(data="b")
    c = h.push(data="c", dependsOn=[a, b], priority=100)
    assert h.state(c) == "waiting"  # BQ-DEPS-5
    assert h.job(c)["childrenIds"] == [a, b]
    assert h.pull()["id"] == a  # c, though first by priority, is held
    h.ok("ACK", id=a, result=1)
    assert h.pull()["id"] == b
    assert h.pull() is None
    h.events.clear()
    h.ok("ACK", id=b, result=2)
    assert Event("q", c, "waiting") in h.events
    job = h.pull()
    assert job["id"] == c and job["childrenCompleted"] == 2
    assert h.ok("GetChildrenValues", id=c)["data"]["values"] == {a: 1, b: 2}


def test_a_completed_dependency_counts_even_after_removal(h):
    a = h.push(removeOnComplete=True)
    h.pull()
    h.ok("ACK", id=a, result="kept")
    b = h.push(dependsOn=[a])
    assert h.pull()["id"] == b
    assert h.ok("GetChildrenValues", id=b)["data"]["values"] == {a: "kept"}


def test_unknown_dependency_is_refused(h):
    h.err("PUSH", "dependency_not_found", queue="q", data=1, dependsOn=["ghost"],
          fmt={"id": "ghost"})
    h.err("PUSHB", "dependency_not_found", queue="q",
          jobs=[{"data": 1}, {"data": 2, "dependsOn": ["ghost"]}], fmt={"id": "ghost"})
    assert h.ok("Count", queue="q")["count"] == 0  # the batch added nothing


def test_pushb_dependencies_on_earlier_entries(h):
    ids = h.ok("PUSHB", queue="q", jobs=[{"data": 1, "customId": "first"},
                                         {"data": 2, "dependsOn": ["first"]}])["ids"]
    assert h.pull()["id"] == "first" and h.pull() is None
    h.ok("ACK", id="first")
    assert h.pull()["id"] == ids[1]


# =============================================================================================
# Locks and stalls
# =============================================================================================
def test_lock_token_is_required_and_checked(h):
    job_id = h.push()
    token = h.ok("PULL", queue="q", owner="w")["token"]
    h.err("ACK", "lock_token_required", id=job_id, fmt={"id": job_id})
    h.err("FAIL", "lock_token_invalid", id=job_id, token="nope", fmt={"id": job_id})
    assert h.state(job_id) == "active"
    h.ok("ACK", id=job_id, token=token)
    free = h.push()
    h.pull()  # no owner: no lock, any token is ignored
    h.ok("ACK", id=free, token="whatever")


def test_lock_expiry_requeues_and_voids_the_token(h):
    job_id = h.push()
    token = h.ok("PULL", queue="q", owner="w", lockTtl=1000)["token"]
    h.tick(999)
    assert h.state(job_id) == "active"
    events = h.tick(1)
    assert Event("q", job_id, "waiting") in events
    job = h.job(job_id)
    assert (job["state"], job["attempts"], job["stallCount"]) == ("waiting", 1, 1)  # BQ-LOCK-5
    h.err("ACK", "job_not_processing", id=job_id, token=token, fmt={"id": job_id})
    new_token = h.ok("PULL", queue="q", owner="w2")["token"]
    assert new_token != token
    h.err("ACK", "lock_token_invalid", id=job_id, token=token, fmt={"id": job_id})


def test_heartbeat_renews_the_lock(h):
    job_id = h.push()
    token = h.ok("PULL", queue="q", owner="w", lockTtl=1000)["token"]
    for _ in range(5):
        h.tick(900)
        h.ok("JobHeartbeat", id=job_id, token=token)
    assert h.state(job_id) == "active" and h.clock.t == T0 + 4500
    h.ok("ACK", id=job_id, token=token)


def test_stalls_requeue_then_dead_letter_after_max_stalls():
    h = Harness(stall_interval_ms=1000, max_stalls=3)
    job_id = h.push(maxAttempts=10)
    for stall in (1, 2):
        assert h.pull()["id"] == job_id
        h.tick(1000)  # BQ-STALL-1: no heartbeat for stallInterval
        job = h.job(job_id)
        assert (job["state"], job["stallCount"]) == ("waiting", stall)  # BQ-STALL-4
    h.pull()
    h.tick(1000)
    job = h.job(job_id)
    assert (job["state"], job["stallCount"]) == ("failed", 3)  # BQ-STALL-2
    assert [j["id"] for j in h.ok("Dlq", queue="q")["jobs"]] == [job_id]


def test_heartbeats_prevent_stalls():
    h = Harness(stall_interval_ms=1000)
    job_id = h.push()
    h.pull()
    for _ in range(10):
        h.tick(600)
        h.ok("JobHeartbeatB", ids=[job_id])  # BQ-STALL-3, no token: stall timer only
    assert h.state(job_id) == "active"
    h.tick(1000)
    assert h.state(job_id) == "waiting"


def test_a_stall_counts_as_an_attempt():
    h = Harness(stall_interval_ms=100, max_stalls=10)
    job_id = h.push(maxAttempts=2)
    for _ in range(2):
        h.pull()
        h.tick(100)
    assert h.state(job_id) == "failed"


def test_processing_timeout_fails_the_job(h):
    job_id = h.push(timeout=500, maxAttempts=2)
    h.pull()
    h.tick(499)
    assert h.state(job_id) == "active"
    h.tick(1)
    job = h.job(job_id)
    assert job["state"] == "delayed" and job["attempts"] == 1  # BQ-PUSH-5: as FAIL
    h.tick(PUSH_DEFAULTS["backoff"])
    h.pull()
    h.tick(500)
    assert h.state(job_id) == "failed"


def test_connection_close_requeues_its_active_jobs(h):
    a, b, c = h.push(), h.push(), h.push()
    h.ok("PULLB", "conn-A", queue="q", count=2, owner="w")
    h.pull(conn="conn-B")
    h.ok("RegisterWorker", "conn-A", name="w", queues=["q"], workerId="w")
    h.events.clear()
    assert h.engine.connection_closed("conn-A") == [a, b]  # BQ-CONN-1
    assert [h.state(x) for x in (a, b, c)] == ["waiting", "waiting", "active"]
    assert Event("q", a, "waiting") in h.events
    assert h.job(a)["attempts"] == 0
    assert h.ok("ListWorkers")["data"]["workers"] == []  # BQ-REG-3
    assert h.pull(conn="conn-B")["id"] == a  # back in its place


def test_http_pulls_belong_to_no_connection(h):
    job_id = h.push()
    h.pull(conn=None)
    assert h.engine.connection_closed("c1") == [] and h.state(job_id) == "active"


# =============================================================================================
# Long polls and WaitJob: Wait, retry, expire, events
# =============================================================================================
def test_pull_long_poll_is_woken_by_a_push(h):
    wait = h("PULL", queue="q", timeout=5000, owner="w")
    assert isinstance(wait, Wait) and wait.kind == "queue" and wait.key == "q"
    assert wait.deadline_ms == T0 + 5000
    assert h.retry("PULL", wait) is wait  # nothing yet: the very same wait
    assert len({wait, h("PULL", queue="q", timeout=5000, owner="w")}) == 2  # hashable, by id
    h.events.clear()
    h.clock.advance(1000)
    job_id = h.push("q", conn="producer")
    woken = [e for e in h.events if wait.wakes_on(e)]
    assert woken
    reply = h.retry("PULL", wait)
    assert reply["job"]["id"] == job_id and reply["token"]


def test_pull_long_poll_expires_with_null(h):
    wait = h("PULL", queue="q", timeout=100, owner="w")
    h.clock.advance(100)
    assert h.expire("PULL", wait) == {"ok": True, "job": None, "token": None}
    assert h.retry("PULL", wait) == {"ok": True, "job": None, "token": None}  # past deadline
    waitb = h("PULLB", queue="q", count=3, timeout=50)
    assert h.expire("PULLB", waitb) == {"ok": True, "jobs": []}


def test_pullb_long_poll_answers_what_is_there(h):
    wait = h("PULLB", queue="q", count=5, timeout=1000, owner="w")
    h.ok("PUSHB", queue="q", jobs=[{"data": 1}, {"data": 2}])
    reply = h.retry("PULLB", wait)
    assert len(reply["jobs"]) == 2 and len(reply["tokens"]) == 2


def test_expire_makes_a_last_attempt(h):
    wait = h("PULL", queue="q", timeout=100)
    h.engine.notify = None  # a shell that missed the event
    job_id = h.push()
    assert h.expire("PULL", wait)["job"]["id"] == job_id


def test_rate_limited_long_poll_is_woken_by_tick(h):
    h.push(), h.push()
    h.ok("RateLimit", queue="q", limit=1)
    assert h.pull() is not None
    wait = h("PULL", queue="q", timeout=5000)
    assert isinstance(wait, Wait)
    assert h.engine.next_deadline() == T0 + 1000
    events = h.tick(1000)
    assert any(wait.wakes_on(e) for e in events)
    assert h.retry("PULL", wait)["job"] is not None


def test_resume_and_capacity_wake_long_polls(h):
    h.push(), h.push()
    h.ok("SetConcurrency", queue="q", limit=1)
    first = h.pull()
    wait = h("PULL", queue="q", timeout=5000)
    h.events.clear()
    h.ok("ACK", id=first["id"])
    assert any(wait.wakes_on(e) for e in h.events)
    assert h.retry("PULL", wait)["job"] is not None


def test_waitjob_is_event_driven(h):
    job_id = h.push()
    wait = h("WaitJob", id=job_id, timeout=10_000)
    assert isinstance(wait, Wait) and wait.kind == "job" and wait.key == job_id
    assert wait.deadline_ms == T0 + 10_000
    h.pull(conn="worker")
    h.events.clear()
    h.ok("ACK", "worker", id=job_id, result={"answer": 42})
    assert any(wait.wakes_on(e) for e in h.events)  # no polling: the ACK announces it
    assert h.retry("WaitJob", wait) == {"ok": True, "completed": True,
                                        "result": {"answer": 42}}


def test_waitjob_times_out(h):
    job_id = h.push()
    wait = h("WaitJob", id=job_id)
    assert wait.deadline_ms == T0 + DEFAULTS["waitJobTimeout"]  # BQ-WAITJOB-2 default
    h.clock.advance(DEFAULTS["waitJobTimeout"])
    assert h.expire("WaitJob", wait) == {"ok": True, "completed": False}


def test_waitjob_on_a_job_removed_on_completion(h):
    job_id = h.push(removeOnComplete=True)
    wait = h("WaitJob", id=job_id)
    h.pull()
    h.ok("ACK", id=job_id, result="r")
    assert h.retry("WaitJob", wait) == {"ok": True, "completed": True, "result": "r"}
    assert h.ok("WaitJob", id=job_id)["completed"] is True  # from the result cache


def test_notify_runs_after_the_operation_and_may_reenter():
    clock = Clock()
    replies: list[Any] = []
    parked: list[Wait] = []

    def notify(event: Event) -> None:
        for wait in list(parked):
            if wait.wakes_on(event):
                reply = engine.retry("c2", wait)
                if isinstance(reply, dict):
                    parked.remove(wait)
                    replies.append(reply)

    engine = BunqueueEngine(now_ms=clock, notify=notify)
    parked.append(engine.handle("c2", {"cmd": "PULL", "queue": "q", "timeout": 1000}))
    pushed = engine.handle("c1", {"cmd": "PUSHB", "queue": "q",
                                  "jobs": [{"data": 1}, {"data": 2}]})
    assert [r["job"]["id"] for r in replies] == pushed["ids"][:1]
    assert engine.handle("c3", {"cmd": "GetJobCounts", "queue": "q"})["counts"]["active"] == 1


def test_a_failing_notify_does_not_break_the_engine():
    def notify(event: Event) -> None:
        raise RuntimeError("shell bug")

    engine = BunqueueEngine(now_ms=Clock(), notify=notify)
    assert engine.handle("c", {"cmd": "PUSH", "queue": "q", "data": 1})["ok"] is True


# =============================================================================================
# Queues: pause, drain, obliterate, clean
# =============================================================================================
def test_pause_blocks_pulls_and_resume_restores_them(h):
    ids = [h.push(data=i) for i in range(3)]
    h.ok("Pause", queue="q")
    assert h.ok("PULLB", queue="q", count=3)["jobs"] == []
    h.push()  # pushing to a paused queue still works
    h.ok("Resume", queue="q")
    assert [j["id"] for j in h.ok("PULLB", queue="q", count=3)["jobs"]] == ids


def test_drain_obliterate_clean_release_what_they_remove(h):
    a = h.push(uniqueKey="k")
    h.ok("Drain", queue="q")
    assert h.push(uniqueKey="k") != a  # the key went with the drained job
    h.ok("Obliterate", queue="q")
    assert h.push(uniqueKey="k") and h.ok("Count", queue="q")["count"] == 1


def test_clean_never_removes_active_jobs_and_respects_limit(h):
    ids = [h.push() for _ in range(4)]
    h.pull()
    h.clock.advance(100)
    reply = h.ok("Clean", queue="q", grace=50, limit=2)
    assert reply["count"] == 2
    assert [j["id"] for j in h.ok("GetJobs", queue="q", state="waiting")["jobs"]] == ids[3:]
    assert h.ok("Clean", queue="q", grace=50, state="active")["count"] == 0
    assert h.ok("Clean", queue="q", grace=50, state="bogus")["count"] == 0
    assert h.state(ids[0]) == "active"


# =============================================================================================
# Rate limits
# =============================================================================================
def test_rate_limit_below_one_per_second(h):
    for _ in range(3):
        h.push()
    h.ok("RateLimit", queue="q", limit=0.5)  # one job per 2 s
    assert h.pull() is not None and h.pull() is None
    h.clock.advance(1999)
    assert h.pull() is None
    h.clock.advance(1)
    assert h.pull() is not None


def test_rate_limit_is_a_sliding_window(h):
    for _ in range(6):
        h.push()
    h.ok("RateLimit", queue="q", limit=3)
    pulled_at = []
    for _ in range(40):
        if h.pull() is not None:
            pulled_at.append(h.clock.t)
        h.clock.advance(100)
    assert len(pulled_at) == 6
    for i in range(len(pulled_at) - 3):
        assert pulled_at[i + 3] - pulled_at[i] >= 1000  # never 4 within one second


# =============================================================================================
# Cron
# =============================================================================================
def test_cron_fires_in_its_timezone_across_dst():
    rome = ZoneInfo("Europe/Rome")
    start = datetime(2026, 3, 27, 12, 0, tzinfo=rome).timestamp() * 1000
    h = Harness(clock=Clock(start))
    cron = h.ok("Cron", name="daily", queue="reports", data={"r": 1}, schedule="0 9 * * *",
                timezone="Europe/Rome", priority=3)["cron"]
    expected = [datetime(2026, 3, d, 9, 0, tzinfo=rome).timestamp() * 1000 for d in (28, 29, 30)]
    assert cron["nextRun"] == expected[0]
    # 29 March 2026 is the switch to summer time in Rome: 09:00 is 07:00 UTC, not 08:00
    assert expected[2] - expected[1] == 24 * 3600_000
    assert expected[1] - expected[0] == 23 * 3600_000
    fired = []
    for when in expected:
        h.clock.t = when - 1
        h.engine.tick()
        assert h.ok("Count", queue="reports")["count"] == len(fired)
        h.clock.t = when
        h.engine.tick()
        fired.append(when)
        assert h.ok("Count", queue="reports")["count"] == len(fired)
    jobs = h.ok("GetJobs", queue="reports")["jobs"]
    assert [j["createdAt"] for j in jobs] == expected
    assert all(j["priority"] == 3 and j["data"] == {"r": 1} for j in jobs)
    assert h.ok("CronGet", name="daily")["cron"]["executions"] == 3


def test_cron_schedule_wins_over_repeat_every(h):
    cron = h.ok("Cron", name="both", queue="q", data=1, schedule="*/10 * * * *",
                repeatEvery=1000)["cron"]
    assert (cron["schedule"], cron["repeatEvery"], cron["nextRun"]) == ("*/10 * * * *", None,
                                                                       T0 + 600_000)


def test_cron_six_fields_carry_leading_seconds(h):
    cron = h.ok("Cron", name="s", queue="q", data=1, schedule="30 * * * * *")["cron"]
    assert cron["nextRun"] == T0 + 30_000


def test_cron_repeat_every_and_max_limit(h):
    h.ok("Cron", name="c", queue="q", data=1, repeatEvery=1000, maxLimit=3)
    for _ in range(5):
        h.tick(1000)
    assert h.ok("Count", queue="q")["count"] == 3  # BQ-CRON-6
    assert h.ok("CronGet", name="c")["cron"]["executions"] == 3


def test_cron_missed_runs_collapse_into_one(h):
    h.ok("Cron", name="c", queue="q", data=1, repeatEvery=1000)
    h.tick(10_500)
    assert h.ok("Count", queue="q")["count"] == 1
    assert h.ok("CronGet", name="c")["cron"]["nextRun"] == T0 + 11_000


def test_cron_upsert_keeps_executions(h):
    h.ok("Cron", name="c", queue="q", data=1, repeatEvery=100)
    h.tick(100)
    h.ok("Cron", name="c", queue="q2", data=2, repeatEvery=200)  # BQ-CRON-4
    cron = h.ok("CronGet", name="c")["cron"]
    assert cron["executions"] == 1 and cron["queue"] == "q2"
    assert len(h.ok("CronList")["crons"]) == 1
    h.tick(200)
    assert h.ok("Count", queue="q2")["count"] == 1 and h.ok("Count", queue="q")["count"] == 1


# =============================================================================================
# Job options
# =============================================================================================
def test_remove_on_complete(h):
    job_id = h.push(removeOnComplete=True)
    h.pull()
    h.ok("ACK", id=job_id, result=7)
    h.err("GetJob", "job_not_found", id=job_id)  # BQ-PUSH-6
    assert h.ok("GetResult", id=job_id)["result"] == 7
    assert h.ok("Count", queue="q")["count"] == 0


def test_ttl_expired_jobs_are_never_delivered(h):
    expiring = h.push(ttl=1000)
    delayed = h.push(ttl=1000, delay=2000)
    keeper = h.push()
    h.tick(999)
    assert h.state(expiring) == "waiting"
    h.tick(1)
    h.err("GetJob", "job_not_found", id=expiring)  # BQ-PUSH-4: ttl ms after creation
    h.err("GetJob", "job_not_found", id=delayed)
    assert h.pull()["id"] == keeper


def test_ttl_is_also_checked_at_pull_time(h):
    expiring = h.push(ttl=10)
    h.clock.advance(11)  # no tick
    assert h.pull() is None
    h.err("GetJob", "job_not_found", id=expiring)


def test_repeat_every_with_limit(h):
    h.push(data="r", repeat={"every": 1000, "limit": 2})
    created = []
    for _ in range(5):
        job = h.pull()
        if job is not None:
            created.append((job["createdAt"], job["repeat"]["count"]))
            h.ok("ACK", id=job["id"])
        h.tick(1000)
    # BQ-PUSH-9: the job and 2 repetitions, every 1000 ms from the previous run
    assert [c for _, c in created] == [0, 1, 2]
    assert h.ok("GetJobCounts", queue="q")["counts"]["completed"] == 3


def test_durable_push_is_written_before_the_reply():
    store = MemoryStore()
    h = Harness(store=store)
    job_id = h.push(durable=True)
    assert store.durable_puts == 1 and store.jobs[job_id]["durable"] is True
    assert store.jobs[job_id]["timeline"] == [{"state": "waiting", "timestamp": T0}]
    h.push()
    assert store.durable_puts == 1


def test_metrics_count_jobs_that_failed_for_good(h):
    retried = h.push(maxAttempts=2)
    h.pull()
    h.ok("FAIL", id=retried)  # will be retried: not a failure yet
    assert h.ok("Metrics")["metrics"]["totalFailed"] == 0
    h.ok("Promote", id=retried)
    h.pull()
    h.ok("FAIL", id=retried)
    h.ok("Discard", id=h.push())
    assert h.ok("Metrics")["metrics"]["totalFailed"] == 2
    assert h.ok("Stats")["stats"]["dlq"] == 2


def test_an_empty_custom_id_is_no_custom_id(h):
    a, b = h.push(jobId=""), h.push(jobId="")
    assert a != b and is_uuid7(a) and h.job(a)["customId"] is None


# =============================================================================================
# Store: an engine built on a store recovers what the previous one wrote
# =============================================================================================
def test_recovery_from_the_store():
    store, clock = MemoryStore(), Clock()
    first = Harness(store=store, clock=clock)
    waiting = first.push(priority=1)
    delayed = first.push(delay=5000, uniqueKey="u")
    active = first.push(priority=5)
    done = first.push(priority=9)
    first.pull()
    first.ok("ACK", id=done, result="ok")
    first.pull()
    first.ok("AddLog", id=waiting, message="hello")
    first.ok("Pause", queue="q")
    first.ok("Cron", name="c", queue="q", data=1, repeatEvery=60_000)
    first.ok("AddWebhook", url="https://example.com/", events=["job.completed"], secret="s")
    assert isinstance(store, Store)

    second = Harness(store=store, clock=clock)  # a restart
    assert second.state(active) == "waiting"  # its connection is gone
    assert second.state(delayed) == "delayed" and second.state(done) == "completed"
    assert second.ok("GetResult", id=done)["result"] == "ok"
    assert second.push(uniqueKey="u") == delayed
    assert second.ok("IsPaused", queue="q")["paused"] is True
    assert second.ok("GetLogs", id=waiting)["data"]["logs"][0]["message"] == "hello"
    assert second.ok("CronGet", name="c")["cron"]["nextRun"] == T0 + 60_000
    assert len(second.ok("ListWebhooks")["data"]["webhooks"]) == 1
    second.ok("Resume", queue="q")
    assert [second.pull()["id"] for _ in range(2)] == [active, waiting]
    new = second.push()
    assert second.job(new)["id"] not in (waiting, delayed, active, done)
    second.tick(5000)
    assert second.pull()["id"] == delayed


def test_a_failing_store_is_an_internal_error_not_a_crash():
    class Broken(MemoryStore):
        def put_job(self, record, *, durable=False):
            raise OSError("disk full")

    engine = BunqueueEngine(now_ms=Clock(), store=Broken())
    reply = engine.handle("c", {"cmd": "PUSH", "queue": "q", "data": 1, "durable": True})
    assert reply == {"ok": False, "error": message("internal_error")}
    assert engine.handle("c", {"cmd": "Count", "queue": "q"})["count"] == 0  # nothing half-added


def test_storage_status_comes_from_the_store():
    class Full(MemoryStore):
        def status(self):
            return StorageStatus(disk_full=True, error="ENOSPC", since=T0)

    h = Harness(store=Full())
    assert h.ok("StorageStatus")["data"] == {"diskFull": True, "error": "ENOSPC", "since": T0}


# =============================================================================================
# Webhooks
# =============================================================================================
BLOCKED_URLS = [
    ("http://localhost/", "webhook_url_localhost"),
    ("http://api.localhost:3000/", "webhook_url_localhost"),
    ("http://LOCALHOST./", "webhook_url_localhost"),
    ("http://%6c%6f%63%61%6c%68%6f%73%74/", "webhook_url_localhost"),
    ("http://127.0.0.1/", "webhook_url_loopback"),
    ("http://127.1/", "webhook_url_loopback"),
    ("http://2130706433/", "webhook_url_loopback"),
    ("http://0x7f000001/", "webhook_url_loopback"),
    ("http://0177.0.0.1/", "webhook_url_loopback"),
    ("http://[::1]/", "webhook_url_loopback"),
    ("http://[::ffff:127.0.0.1]/", "webhook_url_loopback"),
    ("http://[::ffff:7f00:1]/", "webhook_url_loopback"),
    ("http://[2002:7f00:1::1]/", "webhook_url_loopback"),
    ("http://\uff11\uff12\uff17.0.0.1/", "webhook_url_loopback"),
    ("http://10.0.0.5/", "webhook_url_private"),
    ("https://172.16.3.4/", "webhook_url_private"),
    ("http://192.168.1.1:8080/x", "webhook_url_private"),
    ("http://100.64.0.1/", "webhook_url_private"),
    ("http://224.0.0.1/", "webhook_url_private"),
    ("http://[fd00::1]/", "webhook_url_private_ula"),
    ("http://[fe80::1]/", "webhook_url_link_local"),
    ("http://169.254.169.254/latest/meta-data/", "webhook_url_link_local"),
    ("http://0.0.0.0/", "webhook_url_unspecified"),
    ("http://[::]/", "webhook_url_unspecified"),
    ("http://metadata.google.internal/", "webhook_url_metadata"),
    ("http://metadata/computeMetadata/v1/", "webhook_url_metadata"),
    ("ftp://example.com/", "webhook_url_protocol"),
    ("file:///etc/passwd", "webhook_url_protocol"),
    ("not a url", "webhook_url_invalid"),
    ("http://256.1.1.1/", "webhook_url_invalid"),
    ("http://example.com:99999/", "webhook_url_invalid"),
    ("", "webhook_url_required"),
]


@pytest.mark.parametrize(("url", "error"), BLOCKED_URLS)
def test_webhook_ssrf_refusal(url, error, h):
    h.err("AddWebhook", error, url=url, events=["job.completed"])  # BQ-WEBHOOK-1
    assert h.ok("ListWebhooks")["data"]["webhooks"] == []


@pytest.mark.parametrize("url", ["https://hooks.example.com/x", "http://8.8.8.8/",
                                 "https://[2606:4700::1111]/", "http://1.1.1.1:8443/p?q=1"])
def test_webhook_public_urls_are_accepted(url, h):
    h.ok("AddWebhook", url=url, events=["job.completed"])
    assert webhook_url_error(url) is None


def test_allow_private_webhooks_turns_the_address_checks_off():
    h = Harness(allow_private_webhooks=True)
    h.ok("AddWebhook", url="http://127.0.0.1:9000/hook", events=[])
    h.err("AddWebhook", "webhook_url_protocol", url="gopher://127.0.0.1/", events=[])
    assert h.engine.webhook_address_error("10.1.2.3") is None
    assert Harness().engine.webhook_address_error("10.1.2.3") == message("webhook_url_private")
    assert webhook_host_error("93.184.216.34") is None


def test_webhook_deliveries_carry_events_and_signatures(h):
    h.ok("AddWebhook", url="https://example.com/a", events=["job.completed", "job.failed"],
         queue="q", secret="key")
    h.ok("AddWebhook", url="https://example.com/b", events=["job.started"])
    job_id = h.push()
    h.push("other")
    h.pull()
    h.ok("ACK", id=job_id, result={"r": 1})
    deliveries = h.engine.webhook_deliveries()
    assert [(d.url, d.event) for d in deliveries] == [("https://example.com/b", "job.started"),
                                                      ("https://example.com/a", "job.completed")]
    done = deliveries[1]
    assert done.payload == {"event": "job.completed", "timestamp": T0, "jobId": job_id,
                            "queue": "q", "data": {"r": 1}}
    import hashlib
    import hmac
    assert done.signature(b"{}") == hmac.new(b"key", b"{}", hashlib.sha256).hexdigest()
    assert deliveries[0].signature(b"{}") is None
    assert h.engine.webhook_deliveries() == []  # drained


# =============================================================================================
# Robustness: any valid request gets a documented reply, never an exception
# =============================================================================================
# Numbers within JavaScript's safe integer range (what crosses the wire exactly); open request
# objects also get undocumented keys of any non-null JSON value, which the engine must ignore.
REQUESTS = st.one_of([from_schema(MODEL.commands[name].request, SAFE, extra={}).strategy
                      for name in sorted(MODEL.commands)])


FUZZ_EXAMPLES = int(os.environ.get("QUEUEWIRE_FUZZ_EXAMPLES", "150"))  # more, locally


def _seeded_engine() -> tuple[BunqueueEngine, Clock]:
    clock = Clock()
    engine = BunqueueEngine(now_ms=clock, config=EngineConfig(stall_interval_ms=50))
    for i in range(3):
        engine.handle("c", {"cmd": "PUSH", "queue": "emails", "data": i, "jobId": f"j{i}"})
    engine.handle("c", {"cmd": "PULL", "queue": "emails", "owner": "w"})
    return engine, clock


class _Errors(logging.Handler):
    """Collects what the engine logs at ERROR: a tick or notify that failed is logged, not
    raised, so the fuzz must look here too."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


ENGINE_ERRORS = _Errors()
logging.getLogger(bunqueue_engine.__name__).addHandler(ENGINE_ERRORS)


def _aim(request: dict, pick: int) -> dict:
    """Point a random request at the seeded jobs and queue (``pick`` < 3), so that the fuzz
    reaches the code paths of existing jobs, not only of unknown ids."""
    if pick >= 3:
        return request
    aimed = dict(request)
    for key in ("id", "jobId", "customId"):
        if key in aimed:
            aimed[key] = f"j{pick}"
    for key in ("ids", "dependsOn"):
        if key in aimed:
            aimed[key] = [f"j{pick}"] * len(aimed[key])
    if "queue" in aimed:
        aimed["queue"] = "emails"
    return aimed


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(REQUESTS, st.integers(0, 5)), min_size=1, max_size=8),
       st.integers(0, 5000))
def test_any_valid_request_gets_a_documented_reply(requests, step):
    ENGINE_ERRORS.records.clear()
    engine, clock = _seeded_engine()
    for generated, pick in requests:
        request = _aim(generated, pick)
        assert VALIDATOR.request_violations(request) == ()
        reply = engine.handle("c", request)
        if isinstance(reply, Wait):
            reply = engine.retry("c", reply) if pick % 2 else engine.expire(reply)
        if isinstance(reply, Wait):
            reply = engine.expire(reply)
        assert VALIDATOR.reply_violations(request["cmd"], reply) == (), (request, reply)
        if not reply["ok"]:
            assert reply["error"] != message("internal_error"), request
        clock.advance(step)
        engine.tick()
    assert ENGINE_ERRORS.records == []


# =============================================================================================
# Issue 31: lifecycle behaviours a mutation run found unpinned
# =============================================================================================
@pytest.mark.parametrize("name", ["", 5])
def test_a_push_name_that_is_no_job_name_gives_the_default_name(h, name):
    """bunqueue/v2 documents no PUSH name at all (job.yaml: a job's name is "default" when
    the push gave none; the 2.9.5 overlay's JobName is 1 to 256 characters): an empty or
    non-string name is no name, so the job is named "default", never "" or 5."""
    assert "name" not in MODEL.commands["PUSH"].request["properties"]
    default = MODEL.definitions["Job"]["properties"]["name"]["description"]
    assert '"default" when none was given' in default
    job_id = h.push(data={"n": 1}, name=name)
    job = h.job(job_id)  # the harness checks the reply's schema too: name is a string
    assert (job["name"], job["data"]) == ("default", {"n": 1})
    assert h.pull()["name"] == "default"
    assert h.job(h.push(name="send"))["name"] == "send"  # a real name is kept


def test_a_repeat_acked_late_catches_up_to_the_next_slot_after_now(h):
    """BQ-PUSH-9: repetitions every ``every`` ms from the previous run; a job acknowledged
    past one or more slots is repeated at the first slot after now, not at once: every 1000
    ms from T0, an ACK at T0 + 3500 schedules the next run at T0 + 4000."""
    first = h.push(data="r", repeat={"every": 1000})
    assert h.pull()["id"] == first
    h.clock.advance(3500)
    h.ok("ACK", id=first)
    (successor,) = [j for j in h.ok("GetJobs", queue="q", state="delayed")["jobs"]]
    assert successor["runAt"] == T0 + 4000
    assert successor["repeat"]["prevMillis"] == T0 + 4000
    assert successor["repeat"]["count"] == 1
    h.tick(499)
    assert h.state(successor["id"]) == "delayed"
    h.tick(1)
    assert h.pull()["id"] == successor["id"]


@pytest.mark.parametrize("how", ["Cancel", "removeOnComplete"])
def test_removing_a_job_deletes_its_logs(how):
    """A removed job's logs go with it, from the engine and from the store: a later job with
    the same custom id starts without them, and a restart does not bring them back."""
    store = MemoryStore()
    h = Harness(store=store)
    opts = {"removeOnComplete": True} if how == "removeOnComplete" else {}
    job_id = h.push(jobId="order-1", **opts)
    h.ok("AddLog", id=job_id, message="started")
    assert job_id in store.logs
    if how == "Cancel":
        h.ok("Cancel", id=job_id)
    else:
        h.pull()
        h.ok("ACK", id=job_id)
    h.err("GetJob", "job_not_found", id=job_id)
    assert job_id not in store.logs
    assert h.push(jobId="order-1") == job_id  # the same id, a new job
    assert h.ok("GetLogs", id=job_id)["data"]["logs"] == []
    again = Harness(store=store, clock=h.clock)
    assert again.ok("GetLogs", id=job_id)["data"]["logs"] == []


def test_a_job_whose_ttl_is_still_live_is_delivered_by_pull(h):
    """BQ-PUSH-4 removes a job ttl ms after its creation, not before: one ms short of that,
    with no tick in between, PULL delivers it (and PULLB likewise); at ttl ms it is gone."""
    single = h.push(ttl=1000)
    h.clock.advance(999)
    job = h.pull()
    assert job is not None and job["id"] == single and job["ttl"] == 1000
    assert h.state(single) == "active"
    batch = [h.push(ttl=1000, data={"n": i}) for i in range(3)]
    h.clock.advance(999)
    assert [j["id"] for j in h.ok("PULLB", queue="q", count=5)["jobs"]] == batch
    expiring = h.push(ttl=1000)
    h.clock.advance(1000)  # exactly ttl ms after creation: expired
    assert h.pull() is None
    h.err("GetJob", "job_not_found", id=expiring)
