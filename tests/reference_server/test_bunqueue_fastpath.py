"""The bunqueue engine's batch path for pushes (benchmarks/README.md, issues 3 and 26).

PUSH and PUSHB take ``_create_jobs``: jobs built by a generated constructor with the defaults,
each option applied by its row, ids made a batch at a time, the waiting keys appended as a
run. These tests hold it to what the general path (``_create``) does: the same job (by its
wire form, id and clock aside), the same events, the same pull order, and well-formed UUIDv7
ids; and the two helpers it rests on against their plain equivalents (``Job(...)`` and
``SortedList``). test_bunqueue_batch.py compares the two paths' whole state.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from sortedcontainers import SortedList

from queuewire.reference_server.bunqueue import BunqueueEngine, Event, Job, MemoryStore, uuid7_batch
from queuewire.reference_server.bunqueue.jobs import _Waiting, plain_job
from queuewire.reference_server.bunqueue.model import WAITING
from queuewire.spec import load_profile


class _Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000.0

    def __call__(self) -> float:
        return self.t


def _engine(store: Any = None) -> tuple[BunqueueEngine, list[Event]]:
    events: list[Event] = []
    engine = BunqueueEngine(now_ms=_Clock(), notify=events.append, store=store)
    return engine, events


def _wire(engine: BunqueueEngine, job_id: str) -> dict:
    job = engine.handle("c1", {"cmd": "GetJob", "id": job_id})["job"]
    return {k: v for k, v in job.items() if k != "id"}


def test_bare_push_matches_the_general_path() -> None:
    engine, events = _engine()
    fast = engine.handle("c1", {"cmd": "PUSH", "queue": "q", "name": "email",
                                "data": {"n": 1}})["id"]
    engine._batch_paths = False  # the general path, _create, with an option at its default
    slow = engine.handle("c1", {"cmd": "PUSH", "queue": "q", "name": "email",
                                "data": {"n": 1}, "priority": 0})["id"]
    engine._batch_paths = True
    assert _wire(engine, fast) | {"createdAt": 0} == _wire(engine, slow) | {"createdAt": 0}
    assert events == [Event("q", fast, "waiting"), Event("q", slow, "waiting")]


def test_bare_pushb_matches_the_general_path_and_keeps_order() -> None:
    engine, events = _engine()
    bare = [{"name": "email", "data": {"n": i}} for i in range(250)]
    fast = engine.handle("c1", {"cmd": "PUSHB", "queue": "q", "jobs": bare})["ids"]
    general = [dict(e, priority=0) for e in bare[:3]]
    engine._batch_paths = False  # the general path, _create per entry
    slow = engine.handle("c1", {"cmd": "PUSHB", "queue": "q", "jobs": general})["ids"]
    engine._batch_paths = True
    assert len(set(fast)) == 250
    for a, b in zip(fast[:3], slow):
        assert _wire(engine, a) | {"data": None} == _wire(engine, b) | {"data": None}
    assert events == [Event("q", i, "waiting") for i in fast + slow]
    pulled = engine.handle("c1", {"cmd": "PULLB", "queue": "q", "count": 253})["jobs"]
    assert [j["id"] for j in pulled] == fast + slow  # FIFO across both paths
    counts = engine.handle("c1", {"cmd": "GetJobCounts", "queue": "q"})["counts"]
    assert counts["active"] == 253 and counts["waiting"] == 0


def test_bare_pushb_writes_a_record_per_job() -> None:
    store = MemoryStore()
    engine, _ = _engine(store)
    ids = engine.handle("c1", {"cmd": "PUSHB", "queue": "q",
                               "jobs": [{"name": "a", "data": i} for i in range(5)]})["ids"]
    records = {r["id"]: r for r in store.iter_jobs()}
    assert sorted(records) == sorted(ids)
    assert all(r["state"] == WAITING and r["tags"] == [] and r["depends_on"] == []
               for r in records.values())
    again = BunqueueEngine(now_ms=_Clock(), store=store)  # recovered from the records
    pulled = again.handle("c1", {"cmd": "PULLB", "queue": "q", "count": 5})["jobs"]
    assert [j["id"] for j in pulled] == ids


def test_uuid7_batch_ids_are_version_7_and_distinct() -> None:
    now = 1_700_000_000_123.0
    ids = uuid7_batch(now, 500)
    assert len(set(ids)) == 500
    for text in ids:
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 7 and u.variant == uuid.RFC_4122
        assert u.int >> 80 == int(now)


def test_plain_job_equals_the_dataclass_constructor() -> None:
    timeline = [{"state": WAITING, "timestamp": 5.0}]
    fast = plain_job("j", "q", "n", {"x": 1}, 7, 5.0, 2, 3, 1000, True, True, False,
                      timeline, ())
    slow = Job("j", "q", "n", {"x": 1}, 7, WAITING, 5.0, 5.0, 2, 3, 1000, lifo=True,
               depends_on=(), tags=(), remove_on_complete=True, remove_on_fail=False,
               last_heartbeat=5.0, timeline=timeline)
    assert repr(fast) == repr(slow)


def test_waiting_add_run_agrees_with_sorted_list() -> None:
    rng = random.Random(3)
    for _ in range(200):
        waiting, expected = _Waiting(), SortedList()
        waiting._reset(rng.choice([4, 10, 1000]))
        top = 0
        for _ in range(40):
            roll = rng.random()
            if roll < 0.5:
                n = rng.randint(0, 40)
                if rng.random() < 0.8:  # a run past the end, the PUSHB case
                    values = list(range(top, top + n))
                    top += n
                else:  # anything else takes the general path
                    values = sorted(rng.sample(range(top + 50), min(n, top + 50)))
                waiting.add_run(values)
                expected.update(values)
            elif roll < 0.7 and expected:
                value = expected[rng.randrange(len(expected))]
                waiting.discard(value)
                expected.discard(value)
            elif roll < 0.85 and expected:
                assert waiting.pop(0) == expected.pop(0)
            else:
                waiting.add(top)
                expected.add(top)
                top += 1
            assert list(waiting) == list(expected)
            if expected:
                i = rng.randrange(len(expected))
                assert waiting[i] == expected[i]
            waiting._check()


def test_bare_and_general_pushes_give_the_jobs_the_spec_defaults() -> None:
    """The tests above hold the fast path to the general one, so a default both read wrong
    (the engine's reading of the schema's defaults, ``job_to_wire``, the first timeline
    entry, the waiting state) is invisible to them. Here the jobs of a bare PUSH, a bare
    PUSHB and a general PUSH are checked against the defaults the spec's PUSH and PUSHB
    schemas state, read straight from the schemas."""
    model = load_profile("bunqueue/v2").model
    engine, _ = _engine()
    now = _Clock().t
    bare = engine.handle("c1", {"cmd": "PUSH", "queue": "q", "name": "email", "data": 0})["id"]
    batch = engine.handle("c1", {"cmd": "PUSHB", "queue": "q", "jobs": [
        {"name": "email", "data": 1}, {"name": "email", "data": 2}]})["ids"]
    general = engine.handle("c1", {"cmd": "PUSH", "queue": "q", "name": "email", "data": 3,
                                   "tags": []})["id"]
    push_props = model.commands["PUSH"].request["properties"]
    entry_props = model.commands["PUSHB"].request["properties"]["jobs"]["items"]["properties"]
    for n, (job_id, props) in enumerate([(bare, push_props), (batch[0], entry_props),
                                         (batch[1], entry_props), (general, push_props)]):
        default = {k: v["default"] for k, v in props.items() if "default" in v}
        job = engine.handle("c1", {"cmd": "GetJob", "id": job_id})["job"]
        expected = {
            "id": job_id, "queue": "q", "name": "email", "data": n,
            "createdAt": now, "runAt": now + default["delay"], "startedAt": None,
            "completedAt": None, "attempts": 0, "stallCount": 0,
            "priority": default["priority"], "maxAttempts": default["maxAttempts"],
            "backoff": default["backoff"], "lifo": default["lifo"],
            "removeOnComplete": default["removeOnComplete"],
            "removeOnFail": default["removeOnFail"], "durable": default["durable"],
            "tags": [], "dependsOn": [], "customId": None, "ttl": None, "timeout": None,
            "uniqueKey": None, "repeat": None, "lastHeartbeat": now,
            "timeline": [{"state": WAITING, "timestamp": now}]}
        assert {k: job[k] for k in expected} == expected, n
        assert engine.handle("c1", {"cmd": "GetState", "id": job_id})["state"] == WAITING
    pulled = engine.handle("c1", {"cmd": "PULLB", "queue": "q", "count": 10})["jobs"]
    assert [j["id"] for j in pulled] == [bare, *batch, general]  # BQ-PUSH-11, FIFO
