"""The bunqueue engine's job lifecycle (src/.../bunqueue/lifecycle.py), move by move, as a
client and the shell see it: replies, GetJob's fields (timeline, failedReason, stacktrace,
repeat), the webhook deliveries and pushed job events each move queues, Metrics, Stats,
ListWorkers and the store's records.

test_bunqueue_engine.py holds every command to its documented reply and drives the lifecycle
through whole scenarios; these tests pin the details of each move it leaves open (what a
FAIL, a stall, a repeat, an expired long poll or a bare push records and announces), on an
engine with a fake clock, each in a few milliseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from queuewire.reference_server.bunqueue import BunqueueEngine, EngineConfig, MemoryStore, Wait
from queuewire.reference_server.bunqueue.model import THROUGHPUT_WINDOW_S
from queuewire.spec import load_profile

T0 = 1_767_225_600_000.0  # 2026-01-01T00:00:00Z
HOOK = "https://example.com/hook"
ALL_HOOK_EVENTS = ["job.pushed", "job.started", "job.completed", "job.failed", "job.progress"]


class Rig:
    """An engine on a fake clock that keeps what it hands the shell: the events for
    ``notify``, the job event frames it publishes (``SubscribeEvents``, bunqueue/2.9.5) and the
    webhook deliveries, with a MemoryStore behind it."""

    def __init__(self, profile: Any = "bunqueue/2.9.5", *, watch: bool = False,
                 **config: Any):
        self.t = T0
        self.store = MemoryStore()
        self.notified: list = []
        self.frames: list[dict] = []
        self.engine = BunqueueEngine(profile, now_ms=lambda: self.t, notify=self.notified.append,
                                     store=self.store,
                                     config=EngineConfig(allow_private_webhooks=True, **config))
        self.engine.publish = lambda conns, frame: self.frames.append(frame["event"])
        if watch:
            self.ok("AddWebhook", url=HOOK, events=ALL_HOOK_EVENTS)
            self.ok("SubscribeEvents", "sub", queue="q")

    def __call__(self, cmd: str, conn: str | None = "c1", **fields: Any) -> dict | Wait:
        return self.engine.handle(conn, {"cmd": cmd, **fields})

    def ok(self, cmd: str, conn: str | None = "c1", **fields: Any) -> dict:
        reply = self(cmd, conn, **fields)
        assert isinstance(reply, dict) and reply["ok"] is True, reply
        return reply

    def push(self, queue: str = "q", **opts: Any) -> str:
        opts.setdefault("data", {"n": 1})
        return self.ok("PUSH", queue=queue, **opts)["id"]

    def pull(self, queue: str = "q", conn: str | None = "c1", **opts: Any) -> dict | None:
        return self.ok("PULL", conn, queue=queue, **opts)["job"]

    def job(self, job_id: str) -> dict:
        return self.ok("GetJob", id=job_id)["job"]

    def jobs(self, state: str, queue: str = "q") -> list[dict]:
        return self.ok("GetJobs", queue=queue, state=state)["jobs"]

    def metrics(self) -> dict:
        return self.ok("Metrics")["metrics"]

    def tick(self, advance: float = 0) -> None:
        self.t += advance
        self.engine.tick()

    def hooks(self) -> list[tuple[str, dict]]:
        """The webhook deliveries since the last call: (event, payload)."""
        return [(d.event, d.payload) for d in self.engine.webhook_deliveries()]

    def events(self) -> list[dict]:
        """The job event frames published since the last call."""
        out, self.frames[:] = list(self.frames), []
        return out


def _thaw(value: Any) -> Any:
    """A profile's (read-only) schema as plain dicts and lists, to edit a copy."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value


NO_DEFAULT = object()


def _profile_with_job_defaults(**defaults: Any):
    """bunqueue/v2 with other defaults in PUSH's and PUSHB's entry schemas (NO_DEFAULT: none):
    the engine reads a job's defaults from the profile, so a profile may make bare pushes LIFO
    or prioritized, or leave an option without a default."""
    base = load_profile("bunqueue/v2")
    model = base.model

    def with_defaults(schema: Any) -> dict:
        schema = _thaw(schema)
        for key, value in defaults.items():
            if value is NO_DEFAULT:
                schema["properties"][key].pop("default", None)
            else:
                schema["properties"][key]["default"] = value
        return schema

    push, pushb = model.commands["PUSH"], model.commands["PUSHB"]
    pushb_request = _thaw(pushb.request)
    pushb_request["properties"]["jobs"]["items"] = with_defaults(
        pushb_request["properties"]["jobs"]["items"])
    commands = dict(model.commands, PUSH=dataclasses.replace(push, request=with_defaults(push.request)),
                    PUSHB=dataclasses.replace(pushb, request=pushb_request))
    return dataclasses.replace(base, model=dataclasses.replace(model, commands=commands))


# =============================================================================================
# Creating jobs: the batch paths (_create_job, _create_jobs) and the general path
# =============================================================================================
def test_bare_pushes_follow_the_profile_priority_and_lifo_defaults():
    """A bare PUSH (_create_job) and a bare PUSHB (_create_jobs) take priority and lifo from
    the profile's defaults, like a general push: under defaults priority 5 and lifo, the
    newest job of priority 5 is pulled first whichever path made it, and all of them before a
    job of priority 1."""
    r = Rig(_profile_with_job_defaults(priority=5, lifo=True))
    a = r.ok("PUSH", queue="q", name="bare", data=1)["id"]
    b = r.ok("PUSH", queue="q", name="bare", data=2)["id"]
    low = r.push(priority=1)
    d, e = r.ok("PUSHB", queue="q", jobs=[{"name": "bare", "data": 3},
                                          {"name": "bare", "data": 4}])["ids"]
    f = r.push(tags=["general"])  # the general path, same defaults
    assert [r.job(x)["priority"] for x in (a, d, f)] == [5, 5, 5]
    assert all(r.job(x)["lifo"] is True for x in (a, d, f))
    pulled = r.ok("PULLB", queue="q", count=10)["jobs"]
    assert [j["id"] for j in pulled] == [f, e, d, b, a, low]
    assert r.ok("GetCountsPerPriority", queue="q")["counts"] == {}


def test_a_general_push_takes_every_absent_option_from_the_profile_defaults():
    """_create: each option a push leaves out is the profile's default (here none of the
    spec's): priority, maxAttempts, backoff, delay, lifo, removeOnComplete, removeOnFail,
    durable; a PUSHB entry likewise."""
    defaults = {"priority": 4, "maxAttempts": 1, "backoff": 7, "delay": 250, "lifo": True,
                "removeOnComplete": True, "removeOnFail": True, "durable": True}
    r = Rig(_profile_with_job_defaults(**defaults))
    general = r.push(tags=["t"])
    bare = r.ok("PUSH", queue="q", name="n", data=1)["id"]  # a default delay: general path
    (entry,) = r.ok("PUSHB", queue="q", jobs=[{"name": "n", "data": 2}])["ids"]
    for job_id in (general, bare, entry):
        job = r.job(job_id)
        got = {k: job[k] for k in defaults if k != "delay"}
        assert got == {k: v for k, v in defaults.items() if k != "delay"}, job_id
        assert (job["state"], job["runAt"]) == ("delayed", T0 + 250)
    assert r.store.durable_puts == 3
    r.tick(250)
    r.ok("PULLB", queue="q", count=3)
    r.ok("FAIL", id=general, error="e")  # maxAttempts 1: failed for good, and removed
    assert r("GetJob", id=general)["ok"] is False


def test_a_profile_without_delay_or_priority_defaults_gives_zero():
    """Delay and priority fall back to 0 when the profile's PUSH schema has no default for
    them: a job pushed without them is waiting now, at priority 0."""
    r = Rig(_profile_with_job_defaults(delay=NO_DEFAULT, priority=NO_DEFAULT))
    for job_id in (r.push(tags=["t"]), r.ok("PUSH", queue="q", name="n", data=1)["id"]):
        job = r.job(job_id)
        assert (job["state"], job["runAt"], job["priority"]) == ("waiting", T0, 0)


def test_bare_pushes_announce_each_job_and_write_buffered_records():
    """A bare PUSH and a bare PUSHB deliver one job.pushed webhook and one pushed job event per
    job, write each job's record with a buffered (not durable) write, and count every job in
    Stats pushPerSec."""
    r = Rig(watch=True)
    one = r.ok("PUSH", queue="q", name="bare", data=1)["id"]
    three = r.ok("PUSHB", queue="q", jobs=[{"name": "bare", "data": i} for i in range(3)])["ids"]
    assert r.hooks() == [("job.pushed", {"event": "job.pushed", "timestamp": T0, "jobId": i,
                                         "queue": "q"}) for i in [one, *three]]
    assert r.events() == [{"eventType": "pushed", "queue": "q", "jobId": i, "timestamp": T0}
                          for i in [one, *three]]
    assert r.store.durable_puts == 0
    assert sorted(rec["id"] for rec in r.store.iter_jobs()) == sorted([one, *three])
    r.t += 1000
    assert r.ok("Stats")["stats"]["pushPerSec"] == 4 / THROUGHPUT_WINDOW_S


def test_a_durable_push_is_the_only_durable_write():
    """BQ-PUSH-8: only a job pushed with durable gets a durable write."""
    r = Rig()
    r.push()
    r.ok("PUSHB", queue="q", jobs=[{"data": 1, "priority": 2}])
    assert r.store.durable_puts == 0
    r.push(durable=True)
    assert r.store.durable_puts == 1


def test_the_general_push_reads_each_option_and_ignores_ill_typed_ones():
    """_create: a negative delay is no delay; ttl and timeout are kept; a uniqueKey or
    groupId that is not a string, and tags that are not strings, are ignored; a repeat that
    is not a map is no repeat."""
    r = Rig()
    dep = r.push()
    job_id = r.push(delay=-50, ttl=9000, timeout=700, uniqueKey=5, groupId=["g"],
                    dependsOn=[dep], tags=["a", 1, "b"], repeat=3, lifo=True,
                    removeOnComplete=True, removeOnFail=True)
    job = r.job(job_id)
    assert (job["state"], job["runAt"], job["ttl"], job["timeout"]) == ("waiting", T0, 9000, 700)
    assert (job["uniqueKey"], job["groupId"], job["repeat"]) == (None, None, None)
    assert (job["dependsOn"], job["tags"]) == ([dep], ["a", "b"])
    assert (job["lifo"], job["removeOnComplete"], job["removeOnFail"]) == (True, True, True)
    kept = r.job(r.push(uniqueKey="u", groupId="g", delay=10))
    assert (kept["uniqueKey"], kept["groupId"], kept["state"], kept["runAt"]) == \
        ("u", "g", "delayed", T0 + 10)


# =============================================================================================
# Dependencies
# =============================================================================================
def test_a_dependency_completed_and_still_kept_counts_as_completed():
    """BQ-DEPS-1: a job whose dependency has completed (and is still in the engine, not only
    in the result cache) is pullable at once."""
    r = Rig()
    dep = r.push()
    r.pull()
    r.ok("ACK", id=dep, result="r")
    child = r.push(dependsOn=[dep])
    assert r.job(child)["childrenCompleted"] == 1
    assert r.pull()["id"] == child


def test_dependents_become_pullable_in_push_order_when_their_dependency_completes():
    """When a dependency completes, its dependents become pullable in the order they were
    pushed, each announced to a waiting long poll; one with another dependency left waits."""
    r = Rig()
    dep, other = r.push(), r.push()
    first, second = r.push(dependsOn=[dep]), r.push(dependsOn=[dep])
    both = r.push(dependsOn=[dep, other])
    assert r.pull()["id"] == dep
    r.notified.clear()
    r.ok("ACK", id=dep)
    assert [e.job_id for e in r.notified if e.reason == "waiting"] == [first, second]
    assert r.job(both)["childrenCompleted"] == 1
    assert [r.pull()["id"] for _ in range(3)] == [other, first, second]
    assert r.pull() is None
    r.ok("ACK", id=other)
    assert r.pull()["id"] == both


# =============================================================================================
# The result cache
# =============================================================================================
def test_the_result_cache_keeps_the_latest_results_of_removed_jobs():
    """BQ-QUERY-3: GetResult answers a removed job's result while the cache holds it. The
    cache holds result_cache_size results, the most recently remembered ones: remembering an
    id again makes it the newest."""
    r = Rig(result_cache_size=2)

    def done(custom: str, result: Any) -> None:
        r.push(jobId=custom, removeOnComplete=True)
        assert r.pull()["id"] == custom
        r.ok("ACK", id=custom, result=result)

    def results() -> list:
        return [r.ok("GetResult", id=x)["result"] for x in ("a", "b", "c")]

    done("a", 1)
    done("b", 2)
    assert results() == [1, 2, None]  # exactly the cache's size: both kept
    done("a", 10)  # "a" again: now the newest
    done("c", 3)  # one too many: the oldest ("b") goes
    assert results() == [10, None, 3]


# =============================================================================================
# Pulling: rate limits
# =============================================================================================
def test_a_rate_limit_of_zero_hands_out_nothing():
    """BQ-RATE-2: a limit of 0 jobs per second lets no pull through."""
    r = Rig()
    r.push()
    r.ok("RateLimit", queue="q", limit=0)
    assert r.pull() is None
    r.tick(5000)
    assert r.pull() is None
    r.ok("RateLimitClear", queue="q")
    assert r.pull() is not None


def test_a_fractional_rate_limit_above_one_is_its_whole_part_per_second():
    """BQ-RATE-2: 1.5 jobs per second allow floor(1.5) = 1 pull per second (never more than
    the limit), not one per 1/1.5 s."""
    r = Rig()
    for _ in range(3):
        r.push()
    r.ok("RateLimit", queue="q", limit=1.5)
    assert r.pull() is not None
    assert r.pull() is None
    r.t += 700
    assert r.pull() is None
    r.t += 300
    assert r.pull() is not None


# =============================================================================================
# Pulling: what a pull records
# =============================================================================================
def test_a_pull_records_its_worker_lock_and_latency_and_announces_the_start():
    """_take: the job's timeline gets an active entry naming the worker; a pull with an owner
    gets a lock token; Metrics averages the latency from runAt; a job.started webhook and a
    pulled job event go out; the job belongs to the pulling connection."""
    r = Rig(watch=True)
    job_id = r.push(delay=100)
    r.hooks(), r.events()
    r.t += 250
    reply = r.ok("PULL", "c7", queue="q", owner="w1")
    assert reply["job"]["id"] == job_id and isinstance(reply["token"], str)
    job = r.job(job_id)
    assert job["timeline"][-1] == {"state": "active", "timestamp": T0 + 250, "worker": "w1"}
    assert (job["startedAt"], job["lastHeartbeat"]) == (T0 + 250, T0 + 250)
    assert r.metrics()["avgLatencyMs"] == 150.0
    assert r.hooks() == [("job.started", {"event": "job.started", "timestamp": T0 + 250,
                                          "jobId": job_id, "queue": "q"})]
    assert r.events() == [{"eventType": "pulled", "queue": "q", "jobId": job_id,
                           "timestamp": T0 + 250}]
    assert r.engine.connection_closed("c7") == [job_id]


def test_a_pull_without_owner_has_no_worker_in_the_timeline():
    r = Rig()
    job_id = r.push()
    r.pull()
    assert r.job(job_id)["timeline"][-1] == {"state": "active", "timestamp": T0}


# =============================================================================================
# Long polls that expire
# =============================================================================================
def test_an_expired_waitjob_answers_the_result_if_the_job_completed_meanwhile():
    """BQ-WAITJOB-1/2: a WaitJob that expires answers completed with the result when the job
    completed before the expiry was handled, else completed false."""
    r = Rig()
    job_id = r.push()
    wait = r("WaitJob", id=job_id, timeout=1000)
    assert isinstance(wait, Wait)
    r.t += 1000
    assert r.engine.expire(wait) == {"ok": True, "completed": False}
    r.pull()
    r.ok("ACK", id=job_id, result={"r": 1})
    assert r.engine.expire(wait) == {"ok": True, "completed": True, "result": {"r": 1}}


def test_a_waitjob_on_a_reused_custom_id_waits_for_the_live_job_not_the_removed_one():
    """A completed job removed on completion leaves its result behind (WaitJob after removal
    answers it); a new job pushed with the same custom id is another job: WaitJob waits for
    it, and the old result does not answer for it."""
    r = Rig()
    first = r.push(jobId="same", removeOnComplete=True)
    r.pull()
    r.ok("ACK", id=first, result={"run": 1})
    assert r("WaitJob", id=first, timeout=0) == {"ok": True, "completed": True, "result": {"run": 1}}
    second = r.push(jobId="same")
    assert second == first   # the custom id names the new job
    wait = r("WaitJob", id=second, timeout=1000)
    assert isinstance(wait, Wait)
    r.t += 1000
    assert r.engine.expire(wait) == {"ok": True, "completed": False}


def test_an_expired_pull_takes_one_job_for_its_connection():
    """An expiring PULL makes a last attempt: one job (the next stays waiting), pulled for the
    connection that parked the poll (closing it requeues the job)."""
    r = Rig()
    wait = r("PULL", "c9", queue="q", timeout=500)
    assert isinstance(wait, Wait)
    first, second = r.push(), r.push()
    r.t += 500
    reply = r.engine.expire(wait)
    assert reply == {"ok": True, "job": reply["job"]} and reply["job"]["id"] == first
    assert [r.job(x)["state"] for x in (first, second)] == ["active", "waiting"]
    assert r.engine.connection_closed("c9") == [first]


def test_an_expired_pull_takes_one_job_whatever_count_it_carries():
    """PULL has no count: an undocumented count key in an open request changes nothing, the
    last attempt of an expiring PULL still takes one job."""
    r = Rig()
    wait = r("PULL", queue="q", timeout=500, count=3)
    assert isinstance(wait, Wait)
    first, second = r.push(), r.push()
    assert r.engine.expire(wait)["job"]["id"] == first
    assert r.job(second)["state"] == "waiting"


def test_an_expired_pullb_takes_up_to_its_count_with_tokens():
    """An expiring PULLB makes a last attempt for up to its count, with a token per job when
    it names an owner; with nothing there it answers an empty list (and its tokens)."""
    r = Rig()
    wait = r("PULLB", queue="q", count=3, owner="w", timeout=500)
    assert isinstance(wait, Wait)
    ids = [r.push() for _ in range(5)]
    reply = r.engine.expire(wait)
    assert [j["id"] for j in reply["jobs"]] == ids[:3] and len(reply["tokens"]) == 3
    assert r.ok("GetJobCounts", queue="q")["counts"]["waiting"] == 2
    empty = r("PULLB", queue="none", count=3, owner="w", timeout=500)
    assert r.engine.expire(empty) == {"ok": True, "jobs": [], "tokens": []}
    single = r("PULL", queue="none", owner="w", timeout=500)
    assert r.engine.expire(single) == {"ok": True, "job": None, "token": None}


# =============================================================================================
# Completing a job
# =============================================================================================
def test_an_ack_records_and_announces_the_completion():
    """_complete: returnvalue and completedAt, the worker's processedJobs, Metrics
    totalCompleted and avgProcessingMs, a job.completed webhook and a completed job event
    carrying the result, a completed timeline entry."""
    r = Rig(watch=True)
    wid = r.ok("RegisterWorker", name="w", queues=["q"], workerId="w1")["data"]["workerId"]
    job_id = r.push()
    lock = r.ok("PULL", queue="q", owner=wid)["token"]
    r.hooks(), r.events()
    r.t += 40
    r.ok("ACK", id=job_id, result=[1, 2], token=lock)
    job = r.job(job_id)
    assert (job["state"], job["returnvalue"], job["completedAt"]) == ("completed", [1, 2], T0 + 40)
    assert job["timeline"][-1] == {"state": "completed", "timestamp": T0 + 40}
    metrics = r.metrics()
    assert (metrics["totalCompleted"], metrics["avgProcessingMs"]) == (1, 40.0)
    worker = r.ok("ListWorkers")["data"]["workers"][0]
    assert (worker["processedJobs"], worker["failedJobs"], worker["activeJobs"]) == (1, 0, 0)
    assert r.hooks() == [("job.completed", {"event": "job.completed", "timestamp": T0 + 40,
                                            "jobId": job_id, "queue": "q", "data": [1, 2]})]
    assert r.events() == [{"eventType": "completed", "queue": "q", "jobId": job_id,
                           "timestamp": T0 + 40, "data": [1, 2]}]


# =============================================================================================
# Repeat (BQ-PUSH-9)
# =============================================================================================
def _ack_at(r: Rig, job_id: str, at: float) -> dict:
    """Pull ``job_id`` at ``at`` ms after T0, ACK it, and answer its successor (the one job of
    the queue delayed or waiting)."""
    r.t = T0 + at
    assert r.pull()["id"] == job_id
    r.ok("ACK", id=job_id)
    rest = r.jobs("delayed") + r.jobs("waiting")
    assert len(rest) == 1, rest
    return r.job(rest[0]["id"])


def test_a_repeat_carries_every_option_of_the_job_to_its_successor():
    """The next repetition is the same job again: data, name, priority, attempts, backoff,
    ttl, timeout, uniqueKey, tags, groupId, lifo, the remove flags and durability."""
    r = Rig()
    opts = {"data": {"d": 1}, "name": "nightly", "priority": 7, "maxAttempts": 5,
            "backoff": 250, "ttl": 600_000, "timeout": 9000, "uniqueKey": "u1",
            "tags": ["t"], "groupId": "g", "lifo": True, "removeOnFail": True,
            "durable": True}
    job_id = r.push(repeat={"every": 1000}, **opts)
    assert r.store.durable_puts == 1
    nxt = _ack_at(r, job_id, 0)
    assert r.store.durable_puts == 2
    wire = {"data": nxt["data"], "name": nxt["name"], "priority": nxt["priority"],
            "maxAttempts": nxt["maxAttempts"], "backoff": nxt["backoff"], "ttl": nxt["ttl"],
            "timeout": nxt["timeout"], "uniqueKey": nxt["uniqueKey"], "tags": nxt["tags"],
            "groupId": nxt["groupId"], "lifo": nxt["lifo"],
            "removeOnFail": nxt["removeOnFail"], "durable": nxt["durable"]}
    assert wire == opts
    assert nxt["repeat"] == {"every": 1000, "count": 1, "prevMillis": T0 + 1000}
    assert (nxt["state"], nxt["runAt"]) == ("delayed", T0 + 1000)


def test_a_repeat_removed_on_completion_still_repeats():
    r = Rig()
    job_id = r.push(repeat={"every": 1000}, removeOnComplete=True)
    r.pull()
    r.ok("ACK", id=job_id)
    (nxt,) = r.ok("GetJobs", queue="q")["jobs"]
    assert nxt["id"] != job_id and r.job(nxt["id"])["removeOnComplete"] is True
    assert r("GetJob", id=job_id)["ok"] is False


def test_a_repeat_is_scheduled_from_its_previous_slot():
    """The next slot is prevMillis + every (the job's runAt the first time): a repeat that
    names prevMillis continues from it, not from now or runAt."""
    r = Rig()
    job_id = r.push(repeat={"every": 1000, "prevMillis": T0 + 5000})
    nxt = _ack_at(r, job_id, 0)
    assert nxt["runAt"] == T0 + 6000
    assert nxt["repeat"] == {"every": 1000, "count": 1, "prevMillis": T0 + 6000}


@pytest.mark.parametrize(("acked_at", "next_slot"), [
    (100, 1000),    # before the next slot: that slot
    (999, 1000),
    (1000, 2000),   # exactly on it: the slot after (the next run is after now)
    (2999, 3000),
    (3000, 4000),
    (3500, 4000),   # late: catch up to the first slot after now
])
def test_a_late_repeat_catches_up_to_the_first_slot_after_now(acked_at, next_slot):
    r = Rig()
    job_id = r.push(repeat={"every": 1000})
    nxt = _ack_at(r, job_id, acked_at)
    assert nxt["runAt"] == T0 + next_slot and nxt["state"] == "delayed"
    assert nxt["repeat"]["prevMillis"] == T0 + next_slot


def test_a_repeat_stops_at_its_limit_and_needs_a_positive_interval():
    """A job with count c repeats while c < limit; a repeat without a positive every, or
    without every at all, does not repeat (and its ACK still succeeds); every=1 does."""
    r = Rig()
    last = r.push(repeat={"every": 1000, "limit": 2, "count": 2})
    r.pull()
    r.ok("ACK", id=last)
    for repeat in ({"every": 0}, {"limit": 3}, {"every": -5}):
        job_id = r.push(repeat=repeat)
        r.pull()
        r.ok("ACK", id=job_id)
    assert r.ok("GetJobs", queue="q", state="delayed")["jobs"] == []
    assert r.ok("GetJobs", queue="q", state="waiting")["jobs"] == []
    fast = r.push(repeat={"every": 1, "limit": 5})
    nxt = _ack_at(r, fast, 0)
    assert (nxt["runAt"], nxt["repeat"]["count"]) == (T0 + 1, 1)


# =============================================================================================
# FAIL (BQ-JOB-5, BQ-JOB-14)
# =============================================================================================
def test_a_failure_with_attempts_left_is_retried_after_the_backoff():
    """A FAIL with attempts left: attempts + 1, failedReason, a delayed timeline entry with
    the error and attempt, runAt after backoff * 2^(attempts - 1); a job.failed webhook, a
    failed job event (terminal false) then a retried one (prev failed); the worker's
    failedJobs counts it; Metrics totalFailed does not (the job is not failed for good)."""
    r = Rig(watch=True)
    wid = r.ok("RegisterWorker", name="w", queues=["q"], workerId="w1")["data"]["workerId"]
    job_id = r.push(backoff=100, maxAttempts=3, data={"x": 1})
    token = r.ok("PULL", queue="q", owner=wid)["token"]
    r.hooks(), r.events()
    r.t += 10
    r.ok("FAIL", id=job_id, error="boom", token=token)
    job = r.job(job_id)
    assert (job["state"], job["attempts"], job["failedReason"]) == ("delayed", 1, "boom")
    assert job["runAt"] == T0 + 10 + 100
    assert job["timeline"][-1] == {"state": "delayed", "timestamp": T0 + 10, "error": "boom",
                                   "attempt": 1}
    assert r.hooks() == [("job.failed", {"event": "job.failed", "timestamp": T0 + 10,
                                         "jobId": job_id, "queue": "q", "error": "boom"})]
    stamp = {"queue": "q", "jobId": job_id, "timestamp": T0 + 10}
    assert r.events() == [{"eventType": "failed", **stamp, "error": "boom", "data": {"x": 1},
                           "terminal": False},
                          {"eventType": "retried", **stamp, "prev": "failed"}]
    assert r.ok("ListWorkers")["data"]["workers"][0]["failedJobs"] == 1
    assert r.metrics()["totalFailed"] == 0
    r.tick(100)
    r.pull()
    r.t += 5
    r.ok("FAIL", id=job_id, error="again")
    job = r.job(job_id)
    assert (job["attempts"], job["runAt"]) == (2, r.t + 200)  # 100 * 2^1


def test_a_failure_without_an_error_keeps_the_previous_reason():
    r = Rig()
    job_id = r.push(backoff=0, maxAttempts=5)
    r.pull()
    r.ok("FAIL", id=job_id, error="first")
    r.pull()
    r.ok("FAIL", id=job_id)
    job = r.job(job_id)
    assert (job["failedReason"], job["attempts"]) == ("first", 2)
    assert job["timeline"][-2:] == [{"state": "delayed", "timestamp": T0, "attempt": 2},
                                    {"state": "waiting", "timestamp": T0}]


def test_a_failure_keeps_the_string_lines_of_its_stack_up_to_the_limit():
    """FAIL's stack: its string lines, the first STACKTRACE_LINES (10); none left is null."""
    r = Rig()
    job_id = r.push(backoff=0, maxAttempts=5)
    r.pull()
    lines = [f"at f{i}" for i in range(12)]
    r.ok("FAIL", id=job_id, error="e", stack=[lines[0], 5, *lines[1:]])
    assert r.job(job_id)["stacktrace"] == lines[:10]
    r.pull()
    r.ok("FAIL", id=job_id, error="e", stack=[1, None])
    assert r.job(job_id)["stacktrace"] is None


def test_backoff_one_waits_one_millisecond_and_zero_retries_at_once():
    """BQ-JOB-14: a backoff of 1 ms still delays (1 * 2^0); 0 makes the job waiting at once,
    with a delayed then a waiting entry in its timeline."""
    r = Rig()
    one = r.push(backoff=1)
    r.pull()
    r.ok("FAIL", id=one, error="e")
    assert (r.job(one)["state"], r.job(one)["runAt"]) == ("delayed", T0 + 1)
    zero = r.push(backoff=0)
    r.pull()
    r.ok("FAIL", id=zero, error="e")
    job = r.job(zero)
    assert (job["state"], job["runAt"]) == ("waiting", T0)
    assert [e["state"] for e in job["timeline"]] == ["waiting", "active", "delayed", "waiting"]


def test_a_retry_whose_time_has_come_is_announced_waiting_by_the_fail_itself():
    """A retry with no backoff left to wait (backoff 0), like MoveToDelayed with delay 0, is
    waiting when the FAIL returns: its "waiting" event is handed to notify with the FAIL's
    own operation (a parked PULL is woken at once), not at the next command or tick."""
    r = Rig()
    job_id = r.push(backoff=0)
    r.pull()
    r.notified.clear()
    r.engine.handle("c1", {"cmd": "FAIL", "id": job_id, "error": "e"})
    assert [(e.job_id, e.reason) for e in r.notified if e.reason == "waiting"] == \
        [(job_id, "waiting")]
    r.pull()
    r.notified.clear()
    r.engine.handle("c1", {"cmd": "MoveToDelayed", "id": job_id, "delay": 0})
    assert [(e.job_id, e.reason) for e in r.notified if e.reason == "waiting"] == \
        [(job_id, "waiting")]
    delayed = r.push(backoff=5)
    r.pull()
    r.notified.clear()
    r.engine.handle("c1", {"cmd": "FAIL", "id": delayed, "error": "e"})
    assert [e for e in r.notified if e.reason == "waiting"] == []


def test_a_final_failure_goes_to_the_dlq_and_counts_once():
    """The last attempt's FAIL: failed for good, a failed timeline entry with the error and
    attempt, a terminal failed job event and no retried one, Metrics totalFailed + 1."""
    r = Rig(watch=True)
    job_id = r.push(maxAttempts=1)
    r.pull()
    r.hooks(), r.events()
    r.ok("FAIL", id=job_id, error="fatal")
    job = r.job(job_id)
    assert (job["state"], job["attempts"], job["failedReason"]) == ("failed", 1, "fatal")
    assert job["timeline"][-1] == {"state": "failed", "timestamp": T0, "error": "fatal",
                                   "attempt": 1}
    assert [e["eventType"] for e in r.events()] == ["failed"]
    assert r.metrics()["totalFailed"] == 1
    assert [j["id"] for j in r.ok("Dlq", queue="q")["jobs"]] == [job_id]


def test_a_final_failure_with_remove_on_fail_removes_the_job():
    """BQ-PUSH-7: removed, from the engine and the store."""
    r = Rig()
    job_id = r.push(maxAttempts=1, removeOnFail=True)
    r.pull()
    r.ok("FAIL", id=job_id, error="fatal")
    assert r("GetJob", id=job_id)["ok"] is False
    assert [rec["id"] for rec in r.store.iter_jobs()] == []
    assert r.metrics()["totalFailed"] == 1


# =============================================================================================
# Stalls (BQ-STALL-1/2/4, BQ-LOCK-5)
# =============================================================================================
def test_a_stall_with_stalls_left_requeues_and_announces_it():
    """A stall: stallCount and attempts + 1, a waiting timeline entry with error "stalled"
    and the attempt, a job.failed webhook (error "stalled") and a stalled job event; no
    failedReason yet and Metrics totalFailed unchanged."""
    r = Rig(watch=True, stall_interval_ms=1000, max_stalls=3)
    job_id = r.push(maxAttempts=5)
    r.pull()
    r.hooks(), r.events()
    r.tick(1000)
    job = r.job(job_id)
    assert (job["state"], job["stallCount"], job["attempts"]) == ("waiting", 1, 1)
    assert "failedReason" not in job
    assert job["timeline"][-1] == {"state": "waiting", "timestamp": T0 + 1000,
                                   "error": "stalled", "attempt": 1}
    assert r.hooks() == [("job.failed", {"event": "job.failed", "timestamp": T0 + 1000,
                                         "jobId": job_id, "queue": "q", "error": "stalled"})]
    assert r.events() == [{"eventType": "stalled", "queue": "q", "jobId": job_id,
                           "timestamp": T0 + 1000}]
    assert r.metrics()["totalFailed"] == 0


def test_the_last_stall_fails_the_job_with_its_reason():
    """At maxStalls stalls the job fails for good: failedReason "Job stalled N times", a
    failed timeline entry, Metrics totalFailed + 1."""
    r = Rig(stall_interval_ms=1000, max_stalls=2)
    job_id = r.push(maxAttempts=10)
    for _ in range(2):
        r.pull()
        r.tick(1000)
    job = r.job(job_id)
    assert (job["state"], job["stallCount"], job["attempts"]) == ("failed", 2, 2)
    assert job["failedReason"] == "Job stalled 2 times"
    assert job["timeline"][-1] == {"state": "failed", "timestamp": r.t, "error": "stalled",
                                   "attempt": 2}
    assert r.metrics()["totalFailed"] == 1


def test_a_stall_on_the_last_attempt_fails_the_job():
    """A stall counts as an attempt: on the job's last attempt it fails for good although
    stalls are left; a stall before it does not."""
    r = Rig(stall_interval_ms=1000, max_stalls=10)
    job_id = r.push(maxAttempts=2)
    r.pull()
    r.tick(1000)
    assert r.job(job_id)["state"] == "waiting"
    r.pull()
    r.tick(1000)
    job = r.job(job_id)
    assert (job["state"], job["attempts"], job["failedReason"]) == \
        ("failed", 2, "Job stalled 2 times")


def test_an_expired_lock_fails_the_job_with_the_lock_reason():
    """BQ-LOCK-5: a lock that expires stalls the job; at the last stall the reason says the
    lock expired."""
    r = Rig(stall_interval_ms=60_000, max_stalls=1)
    job_id = r.push()
    r.pull(owner="w", lockTtl=500)
    r.tick(500)
    job = r.job(job_id)
    assert (job["state"], job["failedReason"]) == ("failed", "Lock expired; job stalled 1 times")


def test_a_last_stall_with_remove_on_fail_removes_the_job():
    r = Rig(stall_interval_ms=1000, max_stalls=1)
    job_id = r.push(removeOnFail=True)
    r.pull()
    r.tick(1000)
    assert r("GetJob", id=job_id)["ok"] is False
    assert r.metrics()["totalFailed"] == 1


# =============================================================================================
# State changes: membership, priority counts, timeline, records
# =============================================================================================
def test_priority_counts_follow_waiting_and_delayed_jobs_only():
    """GetCountsPerPriority counts a queue's waiting and delayed jobs per priority: a pull
    takes the job out, a retry (delayed) puts it back, a job failed for good is not counted,
    and a priority with no job left is not listed."""
    r = Rig()
    a, b = r.push(priority=3, maxAttempts=2, backoff=10), r.push(priority=3)
    r.push(priority=1, delay=50)
    counts = lambda: r.ok("GetCountsPerPriority", queue="q")["counts"]  # noqa: E731
    assert counts() == {"1": 1, "3": 2}
    assert r.pull()["id"] == a
    assert counts() == {"1": 1, "3": 1}
    r.ok("FAIL", id=a, error="e")
    assert counts() == {"1": 1, "3": 2}
    r.tick(10)
    r.pull()
    r.ok("FAIL", id=a, error="e")
    assert counts() == {"1": 1, "3": 1}
    r.ok("Cancel", id=b)
    assert counts() == {"1": 1}


def test_a_job_leaves_the_pull_order_whichever_way_it_leaves_waiting():
    """A waiting job that is discarded or cancelled is out of the pull order: the next pull
    gets the next job; GetJobCounts counts each job in one state only."""
    r = Rig()
    a, b, c = r.push(), r.push(), r.push()
    r.ok("Discard", id=a)
    r.ok("Cancel", id=b)
    assert r.pull()["id"] == c
    assert r.pull() is None
    counts = r.ok("GetJobCounts", queue="q")["counts"]
    assert (counts["waiting"], counts["active"], counts["failed"]) == (0, 1, 1)


def test_bare_jobs_get_their_own_timeline_at_their_first_change():
    """The jobs of a bare PUSHB share one first timeline entry; each gets its own timeline
    when its state first changes (a discard here, a pull there)."""
    r = Rig()
    a, b = r.ok("PUSHB", queue="q", jobs=[{"name": "n", "data": 1}, {"name": "n", "data": 2}])["ids"]
    one = r.ok("PUSH", queue="q", name="n", data=3)["id"]
    r.t += 5
    r.ok("Discard", id=a)
    r.ok("Discard", id=one)
    assert r.job(a)["timeline"] == [{"state": "waiting", "timestamp": T0},
                                    {"state": "failed", "timestamp": T0 + 5,
                                     "error": r.job(a)["failedReason"]}]
    assert [e["state"] for e in r.job(one)["timeline"]] == ["waiting", "failed"]
    assert r.job(b)["timeline"] == [{"state": "waiting", "timestamp": T0}]


def test_the_timeline_keeps_the_last_twenty_entries():
    """bunqueue keeps a job's last 20 state changes (TIMELINE_MAX): the oldest go first."""
    r = Rig()
    job_id = r.push(backoff=0, maxAttempts=100)
    for cycle in range(7):  # active, delayed, waiting per cycle: 1 + 21 entries
        r.t = T0 + 100 * (cycle + 1)
        r.pull()
        r.ok("FAIL", id=job_id, error=f"e{cycle}")
    timeline = r.job(job_id)["timeline"]
    assert len(timeline) == 20
    assert timeline[0] == {"state": "delayed", "timestamp": T0 + 100, "error": "e0",
                           "attempt": 1}
    assert timeline[-1] == {"state": "waiting", "timestamp": T0 + 700}


def test_the_store_record_follows_every_state_change():
    """Every move writes the job's record through (buffered, not durable)."""
    r = Rig()
    job_id = r.push(maxAttempts=1)
    record = lambda: {rec["id"]: rec for rec in r.store.iter_jobs()}[job_id]  # noqa: E731
    assert record()["state"] == "waiting"
    r.pull()
    assert record()["state"] == "active"
    r.ok("FAIL", id=job_id, error="e")
    assert record()["state"] == "failed"
    assert r.store.durable_puts == 0


class _NoJobsStore(MemoryStore):
    """A store that declares it keeps no job records, and counts what it is handed anyway."""

    keeps_jobs = False

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[str] = []

    def put_job(self, record: Any, *, durable: bool = False) -> None:
        self.handed.append(record["id"])


def test_a_store_that_keeps_no_jobs_is_handed_no_job_records():
    """A store with keeps_jobs false (NullStore) is never handed a job record, whatever the
    job goes through."""
    store = _NoJobsStore()
    engine = BunqueueEngine(now_ms=lambda: T0, store=store)
    job_id = engine.handle("c1", {"cmd": "PUSH", "queue": "q", "data": 1, "tags": ["t"]})["id"]
    engine.handle("c1", {"cmd": "PUSH", "queue": "q", "name": "n", "data": 1})
    engine.handle("c1", {"cmd": "PULL", "queue": "q"})
    engine.handle("c1", {"cmd": "FAIL", "id": job_id, "error": "e"})
    assert engine.handle("c1", {"cmd": "GetJob", "id": job_id})["job"]["attempts"] == 1
    assert store.handed == []


# =============================================================================================
# Leaving active: locks, workers, connections
# =============================================================================================
def test_a_worker_active_jobs_count_each_job_it_still_holds():
    """ListWorkers activeJobs: the jobs pulled under the worker's id not yet finished."""
    r = Rig()
    wid = r.ok("RegisterWorker", name="w", queues=["q"], workerId="w1")["data"]["workerId"]
    a, b = r.push(), r.push()
    tokens = r.ok("PULLB", queue="q", count=2, owner=wid)["tokens"]
    active = lambda: r.ok("ListWorkers")["data"]["workers"][0]["activeJobs"]  # noqa: E731
    assert active() == 2
    r.ok("ACK", id=a, token=tokens[0])
    assert active() == 1
    r.ok("FAIL", id=b, token=tokens[1], error="e")
    assert active() == 0


def test_a_job_leaving_active_is_announced_and_forgets_its_connection():
    """Leaving active hands notify a "left active" event, and the job no longer belongs to the
    connection that pulled it: pulled again over HTTP (no connection), closing that first
    connection leaves it active."""
    r = Rig()
    job_id = r.push(backoff=0)
    r.pull(conn="c1")
    r.notified.clear()
    r.engine.handle("c1", {"cmd": "FAIL", "id": job_id, "error": "e"})
    assert (("q", job_id, "left active") in
            [(e.queue, e.job_id, e.reason) for e in r.notified])
    assert r.pull(conn=None)["id"] == job_id
    assert r.engine.connection_closed("c1") == []
    assert r.job(job_id)["state"] == "active"


def test_failing_and_stalling_reset_the_start_time():
    """startedAt is the current activation's: null again once the job is back in delayed or
    waiting."""
    r = Rig(stall_interval_ms=1000, max_stalls=5)
    job_id = r.push(backoff=10, maxAttempts=5)
    r.pull()
    r.ok("FAIL", id=job_id, error="e")
    assert r.job(job_id)["startedAt"] is None
    r.tick(10)
    r.pull()
    assert r.job(job_id)["startedAt"] == T0 + 10
    r.tick(1000)
    assert (r.job(job_id)["state"], r.job(job_id)["startedAt"]) == ("waiting", None)


# =============================================================================================
# Unique keys, custom ids, dependencies at push time, removal
# =============================================================================================
def test_a_unique_key_is_held_while_the_job_is_queued_or_active():
    """BQ-DEDUP-1/2: a push with a held uniqueKey answers the holder's id, while the holder is
    waiting, delayed or active; once it completes (or is cancelled) the key is free again."""
    r = Rig()
    first = r.push(uniqueKey="u")
    assert r.push(uniqueKey="u") == first
    r.pull()
    assert r.push(uniqueKey="u") == first  # active: still held
    r.ok("ACK", id=first)
    second = r.push(uniqueKey="u")
    assert second != first
    assert r.push(uniqueKey="u", delay=100) == second
    r.ok("Cancel", id=second)
    third = r.push(uniqueKey="u")
    assert third not in (first, second)
    assert r.push(uniqueKey="other") not in (first, second, third)


def test_a_finishing_job_frees_its_unique_key_only_if_it_holds_it():
    """A completed job pushed back (RetryCompleted) while another job holds its uniqueKey does
    not take the key, and finishing again does not free the other job's key."""
    r = Rig()
    old = r.push(uniqueKey="u", jobId="old")
    r.pull()
    r.ok("ACK", id=old)
    holder = r.push(uniqueKey="u", priority=-1)
    r.ok("RetryCompleted", queue="q", id=old)
    assert r.pull()["id"] == old
    r.ok("ACK", id=old)
    assert r.push(uniqueKey="u") == holder


def test_custom_ids_and_dependencies_at_push_time():
    """BQ-CUSTOMID-1: a custom id already used answers that job (also within one PUSHB);
    BQ-DEPS-4: a dependency that is neither a job nor a remembered result is refused, naming
    it; an earlier entry of the same PUSHB is a known dependency."""
    r = Rig()
    a = r.push(jobId="a")
    assert r.push(jobId="a", data=2) == a
    ids = r.ok("PUSHB", queue="q", jobs=[{"data": 1, "customId": "b"},
                                         {"data": 2, "customId": "b"},
                                         {"data": 3, "dependsOn": ["b", "a"]}])["ids"]
    assert ids[:2] == ["b", "b"] and r.job("b")["data"] == 1
    assert r.job(ids[2])["dependsOn"] == ["b", "a"]
    assert r("PUSH", queue="q", data=1, dependsOn=["a", "ghost"]) == \
        {"ok": False, "error": r.engine.error_message("dependency_not_found", id="ghost")}
    assert r("PUSHB", queue="q", jobs=[{"data": 1, "dependsOn": ["later"]},
                                       {"data": 2, "customId": "later"}])["ok"] is False


def test_removing_a_job_forgets_it_as_a_dependent():
    """A removed job is no longer waited on by its dependencies' completion: a new job under
    its custom id with a dependency of its own still waits for that one, and the other
    dependents are released."""
    r = Rig()
    dep, other = r.push(), r.push()
    r.push(jobId="b", dependsOn=[dep])
    sibling = r.push(dependsOn=[dep])
    r.ok("Cancel", id="b")
    r.push(jobId="b", dependsOn=[other])
    assert r.pull()["id"] == dep
    r.ok("ACK", id=dep)
    assert r.pull()["id"] == other
    assert r.pull()["id"] == sibling
    assert r.pull() is None  # "b" still waits for other
    r.ok("ACK", id=other)
    assert r.pull()["id"] == "b"


def test_obliterate_forgets_results_and_drain_removes_logs():
    """Obliterate removes every job without remembering completed ones' results; removing a
    job with logs removes its logs from the engine and the store."""
    r = Rig()
    done = r.push()
    r.pull()
    r.ok("ACK", id=done, result="r")
    r.ok("Obliterate", queue="q")
    assert r.ok("GetResult", id=done)["result"] is None
    logged = r.push()
    r.ok("AddLog", id=logged, message="m")
    assert logged in dict(r.store.iter_logs())
    r.ok("Drain", queue="q")
    assert r.ok("GetLogs", id=logged)["data"]["logs"] == []
    assert logged not in dict(r.store.iter_logs())


# =============================================================================================
# Counters that add up (each survived a mutant that sets them to 1 instead of adding 1)
# =============================================================================================
def test_a_worker_counts_every_job_it_completed_or_failed():
    """ListWorkers processedJobs and failedJobs count each ACK and each FAIL of a job pulled
    under the worker's id, not only the first."""
    r = Rig()
    wid = r.ok("RegisterWorker", name="w", queues=["q"], workerId="w1")["data"]["workerId"]
    ids = [r.push(maxAttempts=1) for _ in range(5)]
    tokens = r.ok("PULLB", queue="q", count=5, owner=wid)["tokens"]
    for job_id, token in zip(ids[:3], tokens[:3]):
        r.ok("ACK", id=job_id, token=token)
    for job_id, token in zip(ids[3:], tokens[3:]):
        r.ok("FAIL", id=job_id, token=token, error="e")
    worker = r.ok("ListWorkers")["data"]["workers"][0]
    assert (worker["processedJobs"], worker["failedJobs"]) == (3, 2)


def test_total_failed_counts_every_final_failure_and_last_stall():
    """Metrics totalFailed adds one per job failed for good, by FAIL or by its last stall."""
    r = Rig(stall_interval_ms=1000, max_stalls=1)
    for _ in range(2):
        job_id = r.push(maxAttempts=1)
        r.pull()
        r.ok("FAIL", id=job_id, error="fatal")
    assert r.metrics()["totalFailed"] == 2
    for _ in range(2):
        r.push()
        r.pull()
        r.tick(1000)
    assert r.metrics()["totalFailed"] == 4


def test_dependents_are_released_in_push_order_whatever_their_ids():
    """A completed dependency releases its dependents in push order, not in the order of their
    ids (custom ids here run backwards) nor in a set's order."""
    r = Rig()
    dep = r.push()
    names = [f"job-{n:02d}" for n in range(20, 0, -1)]
    for name in names:
        r.push(jobId=name, dependsOn=[dep])
    r.pull()
    r.notified.clear()
    r.ok("ACK", id=dep)
    assert [e.job_id for e in r.notified if e.reason == "waiting"] == names
    assert [r.pull()["id"] for _ in names] == names


def test_removing_a_job_leaves_another_holder_of_its_unique_key_alone():
    """BQ-DEDUP-1: removing a finished job whose uniqueKey another job now holds keeps the key
    held by that job."""
    r = Rig()
    old = r.push(uniqueKey="u")
    r.pull()
    r.ok("ACK", id=old)
    holder = r.push(uniqueKey="u")
    assert holder != old
    r.ok("Clean", queue="q", grace=0, state="completed")
    assert r("GetJob", id=old)["ok"] is False
    assert r.push(uniqueKey="u") == holder


def test_a_dependency_named_twice_is_waited_for_once():
    """dependsOn [A, A]: the job waits for A once, becomes pullable when A completes, and counts
    A once in childrenCompleted; so after a restart from the store."""
    r = Rig()
    dep = r.push()
    child = r.push(dependsOn=[dep, dep])
    assert r.job(child)["childrenCompleted"] == 0
    assert r.pull()["id"] == dep
    r.ok("ACK", id=dep)
    assert r.job(child)["childrenCompleted"] == 1
    assert r.pull()["id"] == child
    r2 = Rig()
    dep2 = r2.push()
    child2 = r2.push(dependsOn=[dep2, dep2])
    again = BunqueueEngine("bunqueue/2.9.5", now_ms=lambda: r2.t, store=r2.store,
                           config=EngineConfig(allow_private_webhooks=True))
    assert again.handle("c1", {"cmd": "GetJob", "id": child2})["job"]["childrenCompleted"] == 0
    assert again.handle("c1", {"cmd": "PULL", "queue": "q"})["job"]["id"] == dep2
    assert again.handle("c1", {"cmd": "ACK", "id": dep2})["ok"] is True
    assert again.handle("c1", {"cmd": "PULL", "queue": "q"})["job"]["id"] == child2


# =============================================================================================
# Ill-typed options and missing defaults on the general path (_create)
# =============================================================================================
def test_an_ill_typed_option_takes_the_profile_default_not_zero():
    """_create: priority, delay, maxAttempts and backoff that are not integers are the
    profile's defaults (here none of the spec's); with tags (the general path's extras) and
    without."""
    defaults = {"priority": 4, "maxAttempts": 2, "backoff": 7, "delay": 250}
    r = Rig(_profile_with_job_defaults(**defaults))
    bad = {"priority": "x", "maxAttempts": "x", "backoff": "x", "delay": "x"}
    for job_id in (r.push(tags=["t"], **bad), r.push(**bad)):
        job = r.job(job_id)
        assert {k: job[k] for k in ("priority", "maxAttempts", "backoff")} == \
            {"priority": 4, "maxAttempts": 2, "backoff": 7}
        assert (job["state"], job["runAt"]) == ("delayed", T0 + 250)


def test_an_option_without_a_profile_default_falls_back_to_its_own():
    """With no default in the profile's PUSH schema: an absent or ill-typed priority or delay
    is 0, backoff None (the job's own); lifo, removeOnComplete, removeOnFail and durable are
    off, on the general path (tags) and the plain one."""
    names = ("lifo", "removeOnComplete", "removeOnFail", "durable")
    r = Rig(_profile_with_job_defaults(priority=NO_DEFAULT, delay=NO_DEFAULT, backoff=NO_DEFAULT,
                                       **{n: NO_DEFAULT for n in names}))
    for job_id in (r.push(tags=["t"], priority="x", delay="x"), r.push(priority="x", delay="x"),
                   r.push(tags=["t"]), r.push()):
        job = r.job(job_id)
        assert (job["priority"], job["state"], job["runAt"]) == (0, "waiting", T0)
        assert [job[n] for n in names if n != "durable"] == [False, False, False]
    assert r.store.durable_puts == 0


def test_pushed_jobs_are_announced_and_counted_at_their_time():
    """_create: a pushed job goes to the job.pushed webhook and the pushed job event with the
    push's time, and counts in Metrics totalPushed."""
    r = Rig(watch=True)
    r.hooks(), r.events()
    r.t += 5
    job_id = r.push(tags=["t"])
    assert r.hooks() == [("job.pushed", {"event": "job.pushed", "timestamp": T0 + 5,
                                         "jobId": job_id, "queue": "q"})]
    assert [(e["eventType"], e["jobId"], e["timestamp"]) for e in r.events()] == \
        [("pushed", job_id, T0 + 5)]
    assert r.metrics()["totalPushed"] == 1


# =============================================================================================
# The legacy envelope's data.name (BQ-NAME-102, bunqueue/2.9.5)
# =============================================================================================
def test_a_legacy_data_name_becomes_the_jobs_name_and_leaves_the_data():
    """Under bunqueue/2.9.5 a PUSH without a top-level name whose data has a string name: the
    job's name is data.name, and its data is the rest (the request's own map untouched); with
    a top-level name, data keeps its name. Under bunqueue/v2 data is never split."""
    r = Rig("bunqueue/2.9.5")
    data = {"name": "mail", "to": "a@b.c"}
    job = r.job(r.push(data=data))
    assert (job["name"], job["data"]) == ("mail", {"to": "a@b.c"})
    assert data == {"name": "mail", "to": "a@b.c"}
    job = r.job(r.push(name="top", data={"name": "inner", "x": 1}))
    assert (job["name"], job["data"]) == ("top", {"name": "inner", "x": 1})
    job = r.job(r.push(data={"name": 5, "x": 1}))
    assert (job["name"], job["data"]) == ("default", {"name": 5, "x": 1})
    v2 = Rig("bunqueue/v2")
    job = v2.job(v2.push(data={"name": "mail", "to": "a@b.c"}))
    assert (job["name"], job["data"]) == ("default", {"name": "mail", "to": "a@b.c"})


@pytest.mark.parametrize("length, ok", [(0, False), (1, True), (256, True), (257, False)])
def test_a_legacy_data_name_obeys_the_job_name_length(length, ok):
    """BQ-NAME-102: data.name of a legacy envelope is 1 to 256 characters under bunqueue/2.9.5
    (job_name_length), as a top-level name; refused with job_name_invalid otherwise. A
    top-level name makes data.name plain data; bunqueue/v2 has no such rule."""
    r = Rig("bunqueue/2.9.5")
    reply = r("PUSH", queue="q", data={"name": "n" * length})
    if ok:
        assert reply["ok"] is True
    else:
        assert reply == {"ok": False, "error": r.engine.error_message("job_name_invalid")}
    for extra in ({}, {"tags": ["t"]}):   # no option and one
        assert r("PUSH", queue="q", name="top", data={"name": "n" * length}, **extra)["ok"] is True
    v2 = Rig("bunqueue/v2")
    assert v2("PUSH", queue="q", data={"name": "n" * length})["ok"] is True


def test_the_timeline_keeps_twenty_entries_whichever_path_writes_them():
    """TIMELINE_MAX through _timeline itself (the general paths: batch paths off, as
    test_bunqueue_batch runs them): 1 + 2 x 10 changes leave the last 20, and the 20th change
    keeps all 20."""
    for cycles, first in ((10, T0 + 1000), (9, T0)):   # 22 changes, and exactly 20
        r = Rig(stall_interval_ms=1000, max_stalls=100)
        r.engine._batch_paths = False
        job_id = r.push(maxAttempts=100)
        for _ in range(cycles):
            r.pull()
            r.tick(1000)
        r.pull()
        timeline = r.job(job_id)["timeline"]
        assert len(timeline) == 20
        assert (timeline[0]["state"], timeline[0]["timestamp"], timeline[-1]["state"]) == \
            ("waiting", first, "active")


def test_a_rate_window_reopening_is_announced_only_to_a_queue_it_held_back():
    """BQ-RATE-2: a pull the rate limit refuses while jobs wait marks the queue; the tick that
    sees its window reopen announces it ("rate window"), so parked long polls retry. A queue
    whose pulls the limit never refused gets no announcement."""
    r = Rig()
    for _ in range(3):
        r.push()
    r.ok("RateLimit", queue="q", limit=2)
    assert r.pull() is not None and r.pull() is not None
    assert r.pull() is None                      # the window is full, a job waits
    assert r.engine.next_deadline() == T0 + 1000
    r.notified.clear()
    r.tick(1000)
    assert [(e.queue, e.reason) for e in r.notified] == [("q", "rate window")]
    quiet = Rig()
    quiet.push(), quiet.push(), quiet.push()
    quiet.ok("RateLimit", queue="q", limit=2)
    assert quiet.pull() is not None and quiet.pull() is not None   # room each time: none held back
    quiet.notified.clear()
    quiet.tick(1000)
    assert [e.reason for e in quiet.notified] == []


def test_a_pull_skips_and_removes_jobs_whose_time_to_live_ran_out():
    """BQ-PUSH-4: a waiting job whose ttl has run out is removed when a pull reaches it, and
    the pull goes on to the next job; a job whose ttl is still live is handed out."""
    for batch_paths in (True, False):
        r = Rig()
        r.engine._batch_paths = batch_paths
        old = r.push(ttl=10)
        live = r.push(ttl=60_000)
        plain = r.push()
        r.t += 10
        assert [j["id"] for j in r.ok("PULLB", queue="q", count=5)["jobs"]] == [live, plain]
        assert r("GetJob", id=old)["ok"] is False


def test_the_queue_latency_of_a_job_pulled_when_it_became_runnable_is_zero():
    """Metrics avgLatencyMs: from runAt to the pull; a pull at runAt adds 0 (not a minimum
    of 1 ms), a pull 30 ms later adds 30 (on the general path; test_bunqueue_batch holds the
    batch path to it)."""
    r = Rig()
    r.engine._batch_paths = False
    r.push()
    r.pull()
    assert r.metrics()["avgLatencyMs"] == 0
    r.push()
    r.t += 30
    r.pull()
    assert r.metrics()["avgLatencyMs"] == 15


def test_an_owner_that_is_not_a_string_takes_no_lock():
    """BQ-LOCK-1: only a string owner locks the pulled job (a token in the reply)."""
    r = Rig()
    r.push(), r.push()
    reply = r.ok("PULL", queue="q", owner=5)
    assert reply["job"] is not None and reply.get("token") is None
    assert isinstance(r.ok("PULL", queue="q", owner="w")["token"], str)


def test_a_pull_waits_for_its_timeout_even_of_one_millisecond():
    """BQ-PULL-1: a PULL with timeout 1 on an empty queue is a long poll (a Wait), one with
    timeout 0 (or an ill-typed one, the profile's default 0) answers at once."""
    r = Rig()
    assert isinstance(r("PULL", queue="q", timeout=1), Wait)
    assert r("PULL", queue="q", timeout=0) == {"ok": True, "job": None}
    assert r("PULL", queue="q", timeout="x") == {"ok": True, "job": None}


def test_a_profile_default_pull_timeout_makes_a_bare_pull_a_long_poll():
    """The PULL schema's default timeout is the profile's: under a default of 500 ms a PULL
    without timeout (or with an ill-typed one) on an empty queue waits until then."""
    base = load_profile("bunqueue/v2")
    pull = base.model.commands["PULL"]
    request = _thaw(pull.request)
    request["properties"]["timeout"]["default"] = 500
    commands = dict(base.model.commands, PULL=dataclasses.replace(pull, request=request))
    r = Rig(dataclasses.replace(base, model=dataclasses.replace(base.model, commands=commands)))
    for req in ({}, {"timeout": "x"}):
        wait = r("PULL", queue="q", **req)
        assert isinstance(wait, Wait) and wait.deadline_ms == T0 + 500


def test_a_lock_token_is_refused_from_the_moment_the_lock_expires():
    """BQ-LOCK-2: the token is valid until lockTtl has passed, refused at that instant (before
    any tick stalls the job); a token that is not valid text (a lone surrogate, which JSON over
    HTTP can carry) is refused, not a crash."""
    r = Rig()
    job_id = r.push()
    token = r.ok("PULL", queue="q", owner="w", lockTtl=500)["token"]
    assert r("ACK", id=job_id, token="\ud800") == \
        {"ok": False, "error": r.engine.error_message("lock_token_invalid", id=job_id)}
    r.t += 499
    assert r.ok("JobHeartbeat", id=job_id, token=token)
    other = r.push()
    token2 = r.ok("PULL", queue="q", owner="w", lockTtl=500)["token"]
    r.t += 500
    assert r("ACK", id=other, token=token2) == \
        {"ok": False, "error": r.engine.error_message("lock_token_invalid", id=other)}


def test_a_repeated_custom_id_answers_its_job_whatever_else_the_entry_says():
    """BQ-CUSTOMID-1: a push whose custom id is taken answers that job, and nothing else in
    it is judged (an unknown dependency included): within one PUSHB too."""
    r = Rig()
    r.push(jobId="a")
    assert r.ok("PUSH", queue="q", data=1, jobId="a", dependsOn=["ghost"])["id"] == "a"
    ids = r.ok("PUSHB", queue="q", jobs=[{"data": 1, "customId": "b"},
                                         {"data": 2, "customId": "b", "dependsOn": ["ghost"]}])["ids"]
    assert ids == ["b", "b"] and r.job("b")["data"] == 1


def test_a_dependency_completed_before_the_push_is_not_waited_on_again():
    """A job depending on a completed job and a pending one waits only for the pending one:
    completing the first again (RetryCompleted) does not release it early."""
    r = Rig()
    done = r.push()
    r.pull()
    r.ok("ACK", id=done)
    pending = r.push(priority=-1)
    child = r.push(dependsOn=[done, pending])
    r.ok("RetryCompleted", queue="q", id=done)
    assert r.pull()["id"] == done
    r.ok("ACK", id=done)
    assert r.pull()["id"] == pending
    assert r.pull() is None
    r.ok("ACK", id=pending)
    assert r.pull()["id"] == child


@pytest.mark.parametrize("defaults", [{"delay": 250}, {"delay": 1}, {"durable": True}])
def test_a_default_delay_or_durability_alone_keeps_bare_pushes_off_the_plain_path(defaults):
    """_job_defaults_of: a profile whose pushes default to a delay, or to durability, makes
    every bare PUSH and PUSHB entry a delayed, or durably written, job (the general path: the
    batch path makes neither by default)."""
    r = Rig(_profile_with_job_defaults(**defaults))
    ids = [r.ok("PUSH", queue="q", name="n", data=1)["id"],
           *r.ok("PUSHB", queue="q", jobs=[{"name": "n", "data": 2}])["ids"]]
    delayed = "delay" in defaults
    assert [r.job(i)["state"] for i in ids] == ["delayed" if delayed else "waiting"] * 2
    assert r.store.durable_puts == (0 if delayed else 2)


def test_a_bare_push_takes_a_default_of_one_attempt():
    """_job_defaults_of: the batch path's maxAttempts is the profile's default, even 1."""
    r = Rig(_profile_with_job_defaults(maxAttempts=1))
    ids = [r.ok("PUSH", queue="q", name="n", data=1)["id"],
           *r.ok("PUSHB", queue="q", jobs=[{"name": "n", "data": 2}])["ids"]]
    assert [r.job(i)["maxAttempts"] for i in ids] == [1, 1]


@pytest.mark.parametrize("value", [True, NO_DEFAULT])
def test_a_bare_push_takes_its_flags_from_the_profile_defaults(value):
    """_job_defaults_of: lifo, removeOnComplete and removeOnFail of a bare PUSH and a bare
    PUSHB entry are the profile's defaults (here all on), or off without one."""
    names = ("lifo", "removeOnComplete", "removeOnFail")
    r = Rig(_profile_with_job_defaults(**{n: value for n in names}))
    ids = [r.ok("PUSH", queue="q", name="n", data=1)["id"],
           *r.ok("PUSHB", queue="q", jobs=[{"name": "n", "data": 2}])["ids"]]
    for job_id in ids:
        job = r.job(job_id)
        assert [job[n] for n in names] == [value is True] * 3
