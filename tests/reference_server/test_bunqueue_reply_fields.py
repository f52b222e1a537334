"""The reference server answers, under each bunqueue profile, the reply shapes that profile
defines and no more: every command of the profile is run against a :class:`BunqueueEngine`
holding state (so every list a reply carries is non-empty), and
``BunqueueValidator.undocumented_fields`` of every reply is empty. Fields bunqueue 2.9.5 sends
beyond documents 000-002 (cron jobName and priority, worker extras, GetLogs count, Clean ids)
are the ``bunqueue/2.9.5`` overlay's, so ``bunqueue/v2`` must leave them out and
``bunqueue/2.9.5`` keep them."""

from __future__ import annotations

from typing import Any

import pytest

from queuewire.codecs.validation import BunqueueValidator
from queuewire.reference_server.bunqueue import BunqueueEngine, EngineConfig
from queuewire.spec import load_profile, profile_names

T0 = 1_767_225_600_000.0  # 2026-01-01T00:00:00Z
Q = "q1"


class Driver:
    """An engine of one profile on a fake clock; every reply is checked for undocumented
    fields and kept per command."""

    def __init__(self, profile: str):
        self.profile = load_profile(profile)
        self.t = T0
        self.engine = BunqueueEngine(self.profile, now_ms=lambda: self.t,
                                     config=EngineConfig(allow_private_webhooks=True))
        self.validator = BunqueueValidator(self.profile)
        self.undocumented: dict[str, dict[str, bool]] = {}
        self.replies: dict[str, list[dict]] = {}

    def call(self, cmd: str, **fields: Any) -> dict:
        reply = self.engine.handle("c1", {"cmd": cmd, **fields})
        assert isinstance(reply, dict), (cmd, reply)
        self.replies.setdefault(cmd, []).append(reply)
        extra = self.validator.undocumented_fields(cmd, reply, reply=True)
        if extra:
            self.undocumented.setdefault(cmd, {}).update(extra)
        return reply

    def ok(self, cmd: str, **fields: Any) -> dict:
        reply = self.call(cmd, **fields)
        assert reply["ok"] is True, (cmd, fields, reply)
        return reply


def exercise(d: Driver) -> None:
    """Every command of the bunqueue profiles, with state built first."""
    d.call("Auth", token="not-configured")  # the engine holds no tokens: an error reply
    d.ok("Hello", protocolVersion=2)
    d.ok("Ping")
    d.ok("PUSH", queue=Q, data={"x": 1}, priority=5, maxAttempts=1, jobId="custom-1",
         ttl=10**7, timeout=10**6, uniqueKey="u1")
    d.ok("PUSHB", queue=Q, jobs=[{"data": {"i": i}, "maxAttempts": 1} for i in range(6)])
    d.ok("PUSH", queue=Q, data={"later": True}, delay=100_000)
    worker = d.ok("RegisterWorker", name="w", queues=[Q], concurrency=2, hostname="h",
                  pid=7)["data"]["workerId"]
    pulled = d.ok("PULL", queue=Q, owner=worker)
    job, token = pulled["job"]["id"], pulled["token"]
    d.ok("AddLog", id=job, message="hello", level="warn")
    assert d.ok("GetLogs", id=job)["data"]["logs"]
    d.ok("Progress", id=job, progress=50, message="half")
    d.ok("GetProgress", id=job)
    d.ok("JobHeartbeat", id=job, token=token)
    d.ok("Heartbeat", id=worker)
    d.ok("ACK", id=job, result={"r": 1}, token=token)
    batch = d.ok("PULLB", queue=Q, count=3, owner=worker)
    ids, tokens = [j["id"] for j in batch["jobs"]], batch["tokens"]
    assert len(ids) == 3
    d.ok("JobHeartbeatB", ids=ids, tokens=tokens)
    d.ok("ACKB", ids=ids[:1], results=[{"ok": 1}], tokens=tokens[:1])
    d.ok("FAIL", id=ids[1], error="boom", token=tokens[1])
    d.ok("FAIL", id=ids[2], error="boom", token=tokens[2])
    for cmd in ("GetJob", "GetState", "GetResult", "GetChildrenValues", "WaitJob"):
        d.ok(cmd, id=job)
    for state in (None, "waiting", "completed", "failed", "delayed", "active"):
        d.ok("GetJobs", queue=Q, **({"state": state} if state else {}))
    for cmd in ("GetJobCounts", "GetCountsPerPriority", "Count"):
        d.ok(cmd, queue=Q)
    d.ok("GetJobByCustomId", customId="custom-1")
    assert d.ok("Dlq", queue=Q)["jobs"]
    assert d.ok("ListWorkers")["data"]["workers"]
    d.ok("Cron", name="c1", queue=Q, data={}, schedule="*/5 * * * *", priority=3, maxLimit=10,
         timezone="Europe/Rome")
    d.ok("Cron", name="c2", queue=Q, data={}, repeatEvery=1000)
    d.ok("CronGet", name="c1")
    d.t += 5000
    d.engine.tick()  # c2 fires: executions > 0
    d.ok("CronGet", name="c2")
    assert len(d.ok("CronList")["crons"]) == 2
    hook = d.ok("AddWebhook", url="http://127.0.0.1:9/hook", events=["job.completed"], queue=Q,
                secret="s")
    assert d.ok("ListWebhooks")["data"]["webhooks"]
    d.ok("RateLimit", queue=Q, limit=100)
    d.ok("SetConcurrency", queue=Q, limit=5)
    assert d.ok("ListQueues")["queues"]
    for cmd in ("Stats", "Metrics", "Prometheus", "StorageStatus"):
        d.ok(cmd)
    d.ok("RateLimitClear", queue=Q)
    d.ok("ClearConcurrency", queue=Q)
    d.ok("Pause", queue=Q)
    d.ok("IsPaused", queue=Q)
    d.ok("Resume", queue=Q)
    waiting = [j["id"] for j in d.ok("GetJobs", queue=Q, state="waiting")["jobs"]]
    d.ok("Update", id=waiting[0], data={"y": 2})
    d.ok("ChangePriority", id=waiting[0], priority=9)
    active = d.ok("PULL", queue=Q)["job"]["id"]
    d.ok("MoveToDelayed", id=active, delay=1000)
    d.ok("Promote", id=active)
    d.ok("RetryDlq", queue=Q)
    d.ok("PurgeDlq", queue=Q)
    d.ok("RetryCompleted", queue=Q)
    d.ok("Discard", id=d.ok("PULL", queue=Q)["job"]["id"])
    d.ok("Cancel", id=waiting[-1])
    d.t += 10_000
    assert d.ok("Clean", queue=Q, grace=0)["count"] > 0
    d.ok("Clean", queue=Q, grace=0, state="completed")
    d.ok("Clean", queue="no-such-queue", grace=0)
    d.ok("Drain", queue=Q)
    d.ok("Obliterate", queue=Q)
    d.ok("CronDelete", name="c1")
    d.ok("RemoveWebhook", webhookId=hook["data"]["webhookId"])
    d.ok("UnregisterWorker", workerId=worker)
    if "SubscribeEvents" in d.profile.model.commands:
        d.ok("SubscribeEvents", queue=Q)
        d.ok("UnsubscribeEvents")


@pytest.mark.parametrize("profile", profile_names("bunqueue"))
def test_every_reply_carries_only_fields_the_profile_defines(profile: str) -> None:
    d = Driver(profile)
    exercise(d)
    assert set(d.replies) == set(d.profile.model.commands), "a command was not exercised"
    assert d.undocumented == {}


def test_the_extension_profile_keeps_what_bunqueue_2_9_5_sends() -> None:
    """The fields the real server sends beyond the documents, which its clients may read,
    are still answered under bunqueue/2.9.5 and left out under bunqueue/v2."""
    extras = {"Cron": ("cron", {"executions", "jobName", "priority", "maxLimit"}),
              "CronGet": ("cron", {"jobName", "priority"}),
              "RegisterWorker": ("data", {"concurrency", "hostname", "pid", "status",
                                          "lastSeen", "activeJobs", "processedJobs",
                                          "failedJobs"}),
              "GetLogs": ("data", {"count"})}
    runs = {name: Driver(name) for name in ("bunqueue/v2", "bunqueue/2.9.5")}
    for d in runs.values():
        exercise(d)
    for cmd, (key, fields) in extras.items():
        first_295 = runs["bunqueue/2.9.5"].replies[cmd][0]
        first_v2 = runs["bunqueue/v2"].replies[cmd][0]
        assert fields <= set(first_295[key]), (cmd, first_295)
        assert not fields & set(first_v2[key]), (cmd, first_v2)
    workers = {n: d.replies["ListWorkers"][0]["data"]["workers"][0] for n, d in runs.items()}
    assert {"concurrency", "hostname", "pid", "status", "uptime"} <= set(workers["bunqueue/2.9.5"])
    assert not {"concurrency", "hostname", "pid", "status", "uptime"} & set(workers["bunqueue/v2"])
    crons = {n: d.replies["CronList"][0]["crons"][0] for n, d in runs.items()}
    assert {"jobName", "priority"} <= set(crons["bunqueue/2.9.5"])
    assert not {"jobName", "priority"} & set(crons["bunqueue/v2"])
    cleaned = {n: d.replies["Clean"][0] for n, d in runs.items()}
    assert cleaned["bunqueue/2.9.5"]["ids"] and "ids" not in cleaned["bunqueue/v2"]
    assert cleaned["bunqueue/2.9.5"]["count"] == cleaned["bunqueue/v2"]["count"] > 0


def test_worker_status_goes_stale_under_the_extension_profile() -> None:
    """BQ-REG-3 through the status field bunqueue/2.9.5 defines (BQ-REG-101)."""
    d = Driver("bunqueue/2.9.5")
    timeout = d.profile.model.defaults["workerTimeout"]
    worker = d.ok("RegisterWorker", name="w", queues=[Q])["data"]
    assert worker["status"] == "active"
    d.t += timeout
    listed = d.ok("ListWorkers")["data"]["workers"][0]
    assert listed["status"] == "stale" and listed["uptime"] == timeout
    d.ok("Heartbeat", id=worker["workerId"])
    assert d.ok("ListWorkers")["data"]["workers"][0]["status"] == "active"
    assert d.undocumented == {}
