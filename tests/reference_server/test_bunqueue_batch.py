"""The bunqueue engine's batch paths (src/.../bunqueue/batch.py, issues 15 and 26).

PUSH and PUSHB create their jobs in one pass (``_create_jobs``), PULL and PULLB take the head
of the waiting list in one pass (``_take_head``) and ACKB settles its jobs in one pass
(``_complete_run``); ``_batch_paths`` off, the engine takes the general path (``_create`` per
job, ``_take``'s loop of ``_move``, ``_complete`` per job). Pushes come in the entry shapes
clients send (name and data only; with any of the options, some at their defaults; the name
inside data, as the PyPI client sends it) with custom ids that collide. These tests run the same
randomized command sequences (hypothesis) on two engines, one with the batch paths and one
without, and after every step compare the encoded reply frames byte for byte, the events
handed to ``notify``, the job events published, the webhook deliveries, the store's records
and the engine's whole state (every job field, queue membership in order, the waiting list,
priority counts, timer heaps, locks, connections, counters and float sums). Ids and lock
tokens are drawn from a random stream that both engines read from the same seed at each step
(the batch path draws the same bytes in the same order), so nothing needs normalising; the
clock is a fake one both share.
"""

from __future__ import annotations

import operator
import random
import uuid
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.bunqueue import FrameEncoder
from queuewire.codecs.validation import BunqueueValidator
from queuewire.reference_server.bunqueue import BunqueueEngine, MemoryStore
from queuewire.reference_server.bunqueue import jobs as jobs_module
from queuewire.reference_server.bunqueue.jobs import Job, _Waiting
from queuewire.reference_server.bunqueue.model import EngineConfig
from queuewire.reference_server.bunqueue.store import NullStore
from queuewire.spec import load_profile

PROFILE = "bunqueue/2.9.5"
QUEUES = ("q1", "q2")
CONNS = ("c1", "c2", None)


class _Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000.0

    def __call__(self) -> float:
        return self.t


class _StreamPool:
    """A stand-in for jobs._random: the bytes of one step's seed, read in order."""

    def __init__(self) -> None:
        self.data, self.pos = b"", 0

    def reset(self, seed: int) -> None:
        self.data, self.pos = random.Random(seed).randbytes(20_000), 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        assert len(out) == n, "the test's random stream ran out"
        return out


class _Side:
    """One engine and what it handed out."""

    def __init__(self, batch: bool, store: Any, clock: _Clock):
        self.events: list = []
        self.published: list = []
        self.store = store
        self.engine = BunqueueEngine(PROFILE, now_ms=clock, notify=self.events.append,
                                     store=store,
                                     config=EngineConfig(allow_private_webhooks=True,
                                                         stall_interval_ms=5_000))
        self.engine.publish = lambda conns, frame: self.published.append((conns, frame))
        if not batch:  # the general paths: _create per job, _take's loop, _complete per job
            self.engine._batch_paths = False


_job_fields = operator.attrgetter(*(f.name for f in fields(Job)))  # every field, in order


def _fields(job: Job) -> tuple:
    """Every field of ``job``; a sequence as a list (the batch path's jobs share one tuple for
    their first timeline entry, and one empty tuple for no dependencies or tags)."""
    return tuple(list(v) if type(v) is tuple else v for v in _job_fields(job))


def _state(side: _Side) -> dict:
    e = side.engine
    jobs = {jid: _fields(job) for jid, job in e._jobs.items()}
    queues = {name: (
        {s: list(m) for s, m in q.members.items()}, list(q.all), list(q.waiting),
        dict(q.priorities), dict(q.unique), q.paused, q.rate_limit, q.concurrency,
        list(q.pulls)) for name, q in e._queues.items()}
    for q in e._queues.values():
        q.waiting._check()
    return {
        "jobs": jobs, "order": list(e._jobs), "queues": queues,
        "timers": list(e._timers), "delayed": list(e._delayed), "ttls": list(e._ttls),
        "conn_jobs": {c: sorted(s) for c, s in e._conn_jobs.items()},
        "owner_active": dict(e._owner_active),
        "totals": (e.total_pushed, e.total_pulled, e.total_completed, e.total_failed,
                   e._latency_sum, e._processing_sum),
        "meters": (list(e._push_meter.buckets), list(e._pull_meter.buckets)),
        "finished": list(e._finished.items()),
        "dependents": {k: sorted(v) for k, v in e._dependents.items()},
        "workers": {w: (x.processed, x.failed) for w, x in e._workers.items()},
        "deliveries": [(d.webhook_id, d.event, d.payload) for d in e.webhook_deliveries()],
        "events": list(side.events), "published": list(side.published),
        "store": dict(side.store.jobs) if isinstance(side.store, MemoryStore) else None,
    }


# -- the command sequences --------------------------------------------------------------------
_options = st.fixed_dictionaries({}, optional={
    "priority": st.sampled_from([0, 1, 5]),
    "ttl": st.sampled_from([50, 400, 100_000]),
    "timeout": st.sampled_from([100, 3_000]),
    "lifo": st.booleans(),
    "uniqueKey": st.sampled_from(["u1", "u2"]),
    "removeOnComplete": st.booleans(),
    "delay": st.sampled_from([0, 150]),
    "maxAttempts": st.sampled_from([1, 3]),
    "repeat": st.just({"every": 200, "limit": 2}),
    "dependsOn": st.integers(0, 50),  # the k-th id seen so far, if any
    "custom": st.sampled_from(["k1", "k2", ""]),  # jobId in a PUSH, customId in a PUSHB
    "backoff": st.sampled_from([0, 1_000]),
    "removeOnFail": st.booleans(),
    "durable": st.booleans(),
    "tags": st.just(["t"]),
    "groupId": st.just("g"),
    "stallTimeout": st.just(5_000),  # an option the engine does not read
})
# (shape, options): "bare" sends name and data only, "named" adds the options, "legacy" the
# options with the name inside data (the PyPI client's envelope, BQ-NAME-102)
_entry = st.tuples(st.sampled_from(["bare", "named", "legacy"]), _options)

_op = st.one_of(
    st.tuples(st.just("push"), st.sampled_from(QUEUES), _entry),
    st.tuples(st.just("pushb"), st.sampled_from(QUEUES), st.lists(_entry, max_size=12)),
    st.tuples(st.just("pull"), st.sampled_from(QUEUES), st.integers(0, 15),
              st.sampled_from([None, "w-a", "w-b", "registered"]), st.sampled_from(CONNS),
              st.booleans()),
    st.tuples(st.just("ackb"), st.integers(0, 12),
              st.sampled_from(["tokens", "tokens", "tokens", "none", "wrong", "dup"]),
              st.booleans()),
    st.tuples(st.just("pull"), st.sampled_from(QUEUES), st.integers(1, 15),
              st.sampled_from(["w-a", "registered"]), st.sampled_from(CONNS), st.just(False)),
    st.tuples(st.just("pushb"), st.sampled_from(QUEUES), st.lists(_entry, max_size=12)),
    st.tuples(st.just("ack"), st.integers(0, 200)),
    st.tuples(st.just("fail"), st.integers(0, 200)),
    st.tuples(st.just("time"), st.sampled_from([1, 60, 300, 6_000, 40_000])),
    st.tuples(st.just("close"), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("control"), st.sampled_from(QUEUES),
              st.sampled_from(["Pause", "Resume", "RateLimit", "RateLimitClear",
                               "SetConcurrency", "ClearConcurrency", "SubscribeEvents",
                               "AddWebhook", "RegisterWorker"])),
)


class _Run:
    """Turns the generated steps into requests, from what the replies told so far."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.pulled: list[tuple[str, str | None]] = []  # (id, token) in pull order
        self.worker: str | None = None

    def job_opts(self, shape: str, opts: dict, custom_key: str) -> dict:
        out: dict = {"name": "email", "data": {"n": len(self.ids)}}
        if shape == "bare":
            return out
        if shape == "legacy":
            out = {"data": {"name": "email", "n": len(self.ids)}}
        opts = dict(opts)
        dep = opts.pop("dependsOn", None)
        if dep is not None and self.ids:
            opts["dependsOn"] = [self.ids[dep % len(self.ids)]]
        if "custom" in opts:
            opts[custom_key] = opts.pop("custom")
        return out | opts

    def request(self, op: tuple) -> tuple[str | None, dict] | None:
        kind = op[0]
        if kind == "push":
            return "c1", {"cmd": "PUSH", "queue": op[1], **self.job_opts(*op[2], "jobId")}
        if kind == "pushb":
            return "c2", {"cmd": "PUSHB", "queue": op[1],
                          "jobs": [self.job_opts(*e, "customId") for e in op[2]]}
        if kind == "pull":
            _, queue, count, owner, conn, single = op
            if owner == "registered":
                owner = self.worker
            req: dict = {"cmd": "PULL" if single else "PULLB", "queue": queue, "timeout": 0}
            if not single:
                req["count"] = count
            if owner is not None:
                req |= {"owner": owner, "lockTtl": 2_000 + count * 1_000}
            return conn, req
        if kind == "ackb":
            _, k, tokens, results = op
            if not self.pulled:
                return None
            chosen = self.pulled[:k]  # the oldest pulled: some may have left active since
            if tokens == "dup" and chosen:
                chosen.append(chosen[0])
            req = {"cmd": "ACKB", "ids": [i for i, _ in chosen]}
            if tokens in ("tokens", "dup"):
                req["tokens"] = [t for _, t in chosen]
            elif tokens == "wrong" and chosen:
                req["tokens"] = [t for _, t in chosen[:-1]] + ["0" * 36]
            if results:
                req["results"] = [{"r": k} for k in range(len(chosen))]
            return "c1", req
        if kind in ("ack", "fail"):
            if not self.pulled:
                return None
            job_id, token = self.pulled[op[1] % len(self.pulled)]
            req = {"cmd": "ACK" if kind == "ack" else "FAIL", "id": job_id}
            if token is not None:
                req["token"] = token
            return "c1", req
        if kind == "control":
            _, queue, cmd = op
            req = {"cmd": cmd, "queue": queue}
            if cmd == "RateLimit":
                req["limit"] = 4
            elif cmd == "SetConcurrency":
                req["limit"] = 3
            elif cmd == "AddWebhook":
                req = {"cmd": cmd, "url": "http://10.0.0.1/hook", "queue": queue,
                       "events": ["job.started", "job.completed"]}
            elif cmd == "RegisterWorker":
                req = {"cmd": cmd, "name": "w", "queues": [queue]}
            return "c1", req
        return None

    def learn(self, req: dict, reply: Any) -> None:
        if not isinstance(reply, dict) or not reply.get("ok"):
            return
        if "id" in reply and req["cmd"] == "PUSH":
            self.ids.append(reply["id"])
        self.ids.extend(reply.get("ids") or ())
        if req["cmd"] == "PULLB":
            tokens = reply.get("tokens") or [None] * len(reply["jobs"])
            self.pulled += [(j["id"], t) for j, t in zip(reply["jobs"], tokens)]
        elif req["cmd"] == "PULL" and reply.get("job"):
            self.pulled.append((reply["job"]["id"], reply.get("token")))
        if req["cmd"] in ("ACKB", "ACK", "FAIL"):
            done = set(req["ids"]) if "ids" in req else {req["id"]}
            self.pulled = [p for p in self.pulled if p[0] not in done]
        if req["cmd"] == "RegisterWorker":
            self.worker = (reply.get("worker") or {}).get("id") or reply.get("workerId")
        del self.pulled[:-60]


def _replay(ops: list, seed: int, keep_records: bool) -> None:
    pool = _StreamPool()
    saved = jobs_module._random
    jobs_module._random = pool
    try:
        clock = _Clock()
        stores = (MemoryStore(), MemoryStore()) if keep_records else (NullStore(), NullStore())
        pool.reset(seed)
        fast = _Side(True, stores[0], clock)
        pool.reset(seed)
        general = _Side(False, stores[1], clock)
        encoder = FrameEncoder(PROFILE, wide_integers=True)
        run = _Run()
        for step, op in enumerate(ops):
            if op[0] == "time":
                clock.t += op[1]
                for side in (fast, general):
                    pool.reset(seed + step)
                    side.engine.tick()
            elif op[0] == "close":
                released = []
                for side in (fast, general):
                    pool.reset(seed + step)
                    released.append(side.engine.connection_closed(op[1]))
                assert released[0] == released[1]
            else:
                made = run.request(op)
                if made is None:
                    continue
                conn, req = made
                replies = []
                for side in (fast, general):
                    pool.reset(seed + step)
                    replies.append(side.engine.handle(conn, dict(req)))
                a, b = replies
                assert a == b, (step, op, req)
                assert encoder.encode(a) == encoder.encode(b)
                run.learn(req, a)
            assert _state(fast) == _state(general), (step, op)
            clock.t += 1
    finally:
        jobs_module._random = saved


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=10, max_size=80), seed=st.integers(0, 2**32),
       keep_records=st.booleans())
def test_batch_paths_match_the_general_path(ops: list, seed: int, keep_records: bool) -> None:
    _replay(ops, seed, keep_records)


def _random_ops(rng: random.Random, n: int) -> list:
    """A long sequence weighted towards the worker cycle (hypothesis keeps its examples
    short): pushes with any options, pulls with and without owners, ACKBs of what is active."""
    def options() -> dict:
        out: dict = {}
        for key, values in (("priority", [0, 1, 5]), ("ttl", [50, 400, 100_000]),
                            ("timeout", [100, 3_000]), ("lifo", [True, False]),
                            ("uniqueKey", ["u1", "u2", "u3"]),
                            ("removeOnComplete", [True, False]), ("delay", [0, 150]),
                            ("maxAttempts", [1, 3]), ("repeat", [{"every": 200, "limit": 2}]),
                            ("dependsOn", list(range(50))), ("custom", ["k1", "k2", ""]),
                            ("backoff", [0, 1_000]), ("removeOnFail", [True, False]),
                            ("durable", [True, False]), ("tags", [["t"]])):
            if rng.random() < 0.15:
                out[key] = rng.choice(values)
        return out

    ops: list = []
    for _ in range(n):
        roll = rng.random()
        queue = rng.choice(QUEUES)
        if roll < 0.2:
            ops.append(("pushb", queue, [(rng.choice(["bare", "named", "legacy"]), options())
                                         for _ in range(rng.randint(0, 25))]))
        elif roll < 0.3:
            ops.append(("push", queue, (rng.choice(["bare", "named", "legacy"]), options())))
        elif roll < 0.55:
            ops.append(("pull", queue, rng.randint(0, 15),
                        rng.choice([None, "w-a", "w-b", "registered", "registered"]),
                        rng.choice(CONNS), rng.random() < 0.1))
        elif roll < 0.8:
            ops.append(("ackb", rng.randint(0, 12),
                        rng.choice(["tokens"] * 6 + ["none", "wrong", "dup"]),
                        rng.random() < 0.5))
        elif roll < 0.84:
            ops.append((rng.choice(["ack", "fail"]), rng.randint(0, 5)))
        elif roll < 0.92:
            ops.append(("time", rng.choice([1, 60, 160, 300, 2_500, 6_000])))
        elif roll < 0.94:
            ops.append(("close", rng.choice(["c1", "c2"])))
        else:
            ops.append(("control", queue, rng.choice(
                ["Pause", "Resume", "Resume", "RateLimit", "RateLimitClear", "SetConcurrency",
                 "ClearConcurrency", "ClearConcurrency", "SubscribeEvents", "AddWebhook",
                 "RegisterWorker"])))
    return ops


@pytest.mark.parametrize("seed", range(12))
def test_long_random_sequences_match_the_general_path(seed: int) -> None:
    _replay(_random_ops(random.Random(seed), 400), seed, keep_records=seed % 2 == 0)


def test_worker_cycle_matches_the_general_path() -> None:
    """The benchmark's worker cycle (PULLB of 10 with owner and lockTtl, ACKB with the
    tokens), on a queue of mixed priorities, through lock expiry and stalls."""
    rng = random.Random(7)
    ops: list = []
    for _ in range(10):
        entries = [(rng.random() < 0.7, {"priority": rng.choice([0, 1])}) for _ in range(30)]
        ops.append(("pushb", "q1", entries))
        for _ in range(3):
            ops.append(("pull", "q1", 10, "w-a", "c1", False))
            ops.append(("ackb", 10, "tokens", rng.random() < 0.5))
        ops.append(("pull", "q1", 10, None, "c2", False))
        ops.append(("time", 6_000))
    _replay(ops, 11, keep_records=True)


@pytest.mark.parametrize("load", [4, 10, 1000])
def test_waiting_head_and_drop_head_agree_with_pop(load: int) -> None:
    rng = random.Random(load)
    waiting, expected = _Waiting(), _Waiting()
    waiting._reset(load)
    expected._reset(load)
    for _ in range(300):
        values = rng.sample(range(10_000), rng.randint(0, 30))
        waiting.update(values)
        expected.update(values)
        k = rng.randint(0, 40)
        assert waiting.head(k) == list(expected)[:k]
        waiting.drop_head(k)
        for _ in range(min(k, len(expected))):
            expected.pop(0)
        assert list(waiting) == list(expected)
        waiting._check()
        if expected:
            i = rng.randrange(len(expected))
            assert waiting[i] == expected[i]


# -- issue 31: what both paths share, against values derived by hand from the spec -----------
@pytest.mark.parametrize("batch_paths", [True, False], ids=["batch-paths", "general-path"])
def test_a_pullb_and_ackb_cycle_against_hand_derived_expectations(batch_paths: bool) -> None:
    """The equivalence tests above hold the batch paths to the general one, so a bug in code
    both rely on is invisible to them: the waiting order (``_wkey``, ``_Waiting``), the
    budget (``_budget``: the concurrency limit), the PULLB reply (``_pull_reply``,
    ``job_to_wire``), the lock fields and tokens, ``_check_lock`` and the ACKB handler's
    all-or-nothing checks, and the counts and results read back. Here one PULLB / ACKB cycle
    is checked against what the spec says, on either path."""
    model = load_profile(PROFILE).model
    validator = BunqueueValidator(PROFILE)
    clock = _Clock()
    engine = BunqueueEngine(PROFILE, now_ms=clock, config=EngineConfig(stall_interval_ms=5_000))
    engine._batch_paths = batch_paths

    def call(cmd: str, **fields: Any) -> dict:
        request = {"cmd": cmd, **fields}
        assert validator.request_violations(request) == (), request
        reply = engine.handle("c1", request)
        assert validator.reply_violations(cmd, reply) == (), reply
        return reply

    # j0 .. j5, one ms apart: priorities 0, 5, 1, 5, 0 and a lifo job at 0
    pushed = [(0, False), (5, False), (1, False), (5, False), (0, False), (0, True)]
    ids = []
    for n, (priority, lifo) in enumerate(pushed):
        opts = {"priority": priority} | ({"lifo": True} if lifo else {})
        ids.append(call("PUSH", queue="q", name="email", data={"n": n}, **opts)["id"])
        clock.t += 1
    j0, j1, j2, j3, j4, j5 = ids
    assert call("SetConcurrency", queue="q", limit=4) == {"ok": True}

    now = clock.t
    reply = call("PULLB", queue="q", count=10, owner="w", lockTtl=2_000)
    # BQ-PUSH-1: priority 5 first (FIFO among equals), then 1; BQ-PUSH-2: the lifo job
    # before the earlier jobs of its priority; BQ-CONC-1: 4 at most while 4 may be active
    assert [j["id"] for j in reply["jobs"]] == [j1, j3, j2, j5]
    assert [j["data"] for j in reply["jobs"]] == [{"n": 1}, {"n": 3}, {"n": 2}, {"n": 5}]
    assert [j["priority"] for j in reply["jobs"]] == [5, 5, 1, 0]
    for job in reply["jobs"]:
        assert (job["queue"], job["name"], job["attempts"]) == ("q", "email", 0)
        assert job["startedAt"] == job["lastHeartbeat"] == now
        assert job["timeline"][-1] == {"state": "active", "timestamp": now, "worker": "w"}
    tokens = reply["tokens"]  # BQ-LOCK-1, BQ-LOCK-4: one per job, in the order of jobs
    assert len(tokens) == 4 and len(set(tokens)) == 4
    assert all(uuid.UUID(t).version == 7 for t in tokens)
    counts = call("GetJobCounts", queue="q")["counts"]
    assert (counts["waiting"], counts["active"]) == (2, 4)
    assert call("PULLB", queue="q", count=10, owner="w")["jobs"] == []  # BQ-CONC-1

    # BQ-LOCK-2 / BQ-JOB-12: tokens out of order, or a job not active, refuse the whole ACKB
    assert call("ACKB", ids=[j1, j3], tokens=[tokens[1], tokens[0]]) == {
        "ok": False, "error": model.errors["lock_token_invalid"].message.format(id=j1)}
    assert call("ACKB", ids=[j1, j0], tokens=[tokens[0], tokens[0]]) == {
        "ok": False, "error": model.errors["job_not_processing"].message.format(id=j0)}
    assert [call("GetState", id=i)["state"] for i in ids] == [
        "waiting", "active", "active", "active", "waiting", "active"]

    clock.t += 10
    assert call("ACKB", ids=[j1, j3], tokens=tokens[:2], results=[{"r": 1}, {"r": 3}]) == {
        "ok": True}
    assert [call("GetState", id=i)["state"] for i in ids] == [
        "waiting", "completed", "active", "completed", "waiting", "active"]
    assert call("GetResult", id=j3)["result"] == {"r": 3}  # BQ-JOB-10
    assert call("GetJob", id=j1)["job"]["completedAt"] == now + 10
    counts = call("GetJobCounts", queue="q")["counts"]
    assert (counts["waiting"], counts["active"], counts["completed"]) == (2, 2, 2)
    # two may be active now: the two waiting jobs, FIFO
    assert [j["id"] for j in call("PULLB", queue="q", count=10)["jobs"]] == [j0, j4]
