"""The bunqueue client (SDK, pool, links) against the reference server over real TCP sockets
on 127.0.0.1, and embedded; plus hostile fake servers for dead-link detection.

The reference server runs in process (``BunqueueServer`` on port 0) except in the SIGKILL
test, where it is a ``queuewire serve bunqueue --data-path`` subprocess that is killed and
restarted on the same port. The same scenarios against the real bunqueue 2.9.5 are in
tests/interop/test_client_real_bunqueue.py.
"""

from __future__ import annotations

import asyncio
import collections
import re
import signal
import time
from typing import Any

import pytest
import pytest_asyncio

from queuewire.client import (
    BunqueueConnectionLost,
    BunqueueEncodeError,
    BunqueueRefused,
    BunqueueTimeout,
    ClientConfigError,
    ClientError,
    FlowProducer,
    Queue,
    QueueEvents,
    QueueGroup,
    Worker,
    sync,
)
from queuewire.client.bunqueue_pool import acquire_pool, release_pool
from queuewire.client.bunqueue_session import SessionState
from queuewire.client.options import ConnectionOptions
from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.reference_server.bunqueue import BunqueueServer, EngineConfig
from serve_process import start_serve, stop_serve

pytestmark = pytest.mark.asyncio

FAST = {"command_timeout": 3000, "reconnect_max_delay": 300, "ping_interval": 1000}


@pytest_asyncio.fixture(params=["bunqueue/v2", "bunqueue/2.9.5"])
async def server(request):
    srv = await BunqueueServer(request.param, port=0).start()
    yield srv
    await srv.stop()


def conn(srv: BunqueueServer, **extra: Any) -> dict[str, Any]:
    return {"port": srv.port, **FAST, **extra}


async def until(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# ---------------------------------------------------------------------- exactly once

async def test_jobs_added_by_many_producers_are_processed_exactly_once(server):
    profile = server.profile.name
    n_per_producer, producers = 120, 3
    seen: collections.Counter = collections.Counter()
    completed: list[str] = []

    async def produce(p: int) -> None:
        async with Queue("once", connection=conn(server), profile=profile) as queue:
            half = n_per_producer // 2
            await asyncio.gather(*(queue.add("job", {"n": p * 1000 + i}) for i in range(half)))
            await queue.add_bulk([{"name": "job", "data": {"n": p * 1000 + i}}
                                  for i in range(half, n_per_producer)])

    async def process(job):
        assert job.name == "job"
        seen[job.data["n"]] += 1
        await asyncio.sleep(0.001)
        return {"n": job.data["n"]}

    workers = [Worker("once", process, connection=conn(server), profile=profile, concurrency=4,
                      on_completed=lambda job, result: completed.append(job.id))
               for _ in range(2)]
    for worker in workers:
        await worker.run()
    await asyncio.gather(*(produce(p) for p in range(producers)))
    total = producers * n_per_producer
    await until(lambda: len(completed) >= total, what="every job completed")
    for worker in workers:
        await worker.close()
    assert len(seen) == total and set(seen.values()) == {1}
    assert len(completed) == len(set(completed)) == total
    async with Queue("once", connection=conn(server), profile=profile) as queue:
        counts = await queue.get_job_counts()
    assert counts["completed"] == total and counts["active"] == 0 and counts["waiting"] == 0


async def test_a_failing_processor_fails_the_job_with_its_message(server):
    profile = server.profile.name
    failed: list[tuple[str, str]] = []

    def process(job):
        raise ValueError(f"cannot send to {job.data['to']}")

    async with Queue("fails", connection=conn(server), profile=profile) as queue:
        job = await queue.add("send", {"to": "x@y"}, attempts=1)
        async with Worker("fails", process, connection=conn(server), profile=profile,
                          on_failed=lambda j, e: failed.append((j.id, str(e)))):
            await until(lambda: failed, what="the failure")
        assert failed == [(job.id, "cannot send to x@y")]
        assert await queue.get_job_state(job.id) == "failed"
        dlq = await queue.get_dlq()
        assert [j.id for j in dlq] == [job.id]
        assert "cannot send to x@y" in str(dlq[0].raw)


async def test_heartbeats_keep_a_long_job_from_stalling():
    srv = await BunqueueServer("bunqueue/v2", port=0,
                               config=EngineConfig(stall_interval_ms=300, max_stalls=1)).start()
    try:
        runs: list[str] = []

        async def process(job):
            runs.append(job.id)
            await asyncio.sleep(1.2)  # four stall intervals
            return "ok"

        async with Queue("long", connection=conn(srv)) as queue:
            job = await queue.add("long", {})
            async with Worker("long", process, connection=conn(srv), heartbeat_interval=100):
                await until(lambda: runs, what="the job to start")
                await asyncio.sleep(1.4)
            assert runs == [job.id]
            assert await queue.get_job_state(job.id) == "completed"
    finally:
        await srv.stop()


# --------------------------------------------------------------------------- kill -9

async def test_sigkill_and_restart_lose_no_acknowledged_job_and_clients_reconnect(tmp_path):
    db = str(tmp_path / "bq.db")
    proc, port = start_serve("bunqueue", "--data-path", db)
    options = {"port": port, "command_timeout": 1500, "reconnect_max_delay": 300,
               "ping_interval": 500, "pool_size": 2}
    acknowledged: set[str] = set()
    processed: collections.Counter = collections.Counter()
    errors: list[BaseException] = []

    async def process(job):
        await asyncio.sleep(0.01)
        processed[job.id] += 1

    queue = Queue("kill", connection=options)
    worker = Worker("kill", process, connection=options, concurrency=2,
                    on_error=errors.append)
    await worker.run()
    try:
        async def produce(count: int) -> None:
            for i in range(count):
                try:
                    job = await queue.add("k", {"i": i}, durable=True)
                    acknowledged.add(job.id)
                except (BunqueueConnectionLost, BunqueueTimeout):
                    await asyncio.sleep(0.05)  # the server is down: not acknowledged
                await asyncio.sleep(0.005)

        await produce(60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        await produce(3)  # into the outage: each waits for a link, then times out
        proc, _ = start_serve("bunqueue", "--data-path", db, "--port", str(port))
        await produce(60)
        await until(lambda: acknowledged <= set(processed), timeout=60,
                    what="every acknowledged job processed")
        links = worker.transport.pool.links + queue.transport.pool.links
        assert any(link.session.reconnects for link in links)
        assert all(isinstance(e, ClientError) for e in errors), errors
        assert len(acknowledged) >= 100
    finally:
        await worker.close()
        await queue.close()
        stop_serve(proc)


# ---------------------------------------------------------------------- hostile servers

class FakeServer:
    """Accepts connections; answers Hello (and Auth) when ``hello`` is set, and nothing else
    unless ``close_after_command``: then it closes the connection when a command arrives."""

    def __init__(self, *, hello: bool, close_after_command: float | None = None):
        self.hello = hello
        self.close_after = close_after_command
        self.connections = 0
        self.first_connect: float | None = None
        self.disconnects: list[float] = []
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> FakeServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer) -> None:
        self.connections += 1
        if self.first_connect is None:
            self.first_connect = time.monotonic()
        decoder, encoder = FrameDecoder("bunqueue/v2"), FrameEncoder("bunqueue/v2")
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    if self.hello and frame.get("cmd") in ("Hello", "Auth"):
                        writer.write(encoder.encode({"ok": True, "protocolVersion": 2,
                                                     "capabilities": ["pipelining"],
                                                     "reqId": frame["reqId"]}))
                    elif self.close_after is not None:
                        await asyncio.sleep(self.close_after)
                        writer.transport.abort()
                        return
        except ConnectionError:
            pass
        finally:
            self.disconnects.append(time.monotonic())

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()


@pytest.mark.parametrize("answers_hello", [False, True])
async def test_a_server_that_never_answers_is_declared_dead_in_time(answers_hello):
    fake = await FakeServer(hello=answers_hello).start()
    timeout_ms, limit = 300, 3
    options = {"port": fake.port, "command_timeout": timeout_ms, "max_command_timeouts": limit,
               "ping_interval": 0, "pool_size": 1, "reconnect_base_delay": 50}
    async with Queue("dead", connection=options) as queue:
        started = time.monotonic()
        results = await asyncio.gather(*(queue.count() for _ in range(limit)),
                                       return_exceptions=True)
        assert all(isinstance(r, (BunqueueTimeout, BunqueueConnectionLost)) for r in results)
        await until(lambda: fake.disconnects, timeout=5, what="the link torn down")
        elapsed = fake.disconnects[0] - started
        assert elapsed <= timeout_ms / 1000 * limit + 0.5, elapsed
        await until(lambda: fake.connections >= 2, timeout=5, what="a reconnect")
        link = queue.transport.pool.links[0]
        assert link.session.dead_links >= 1
    await fake.stop()


async def test_sequential_timeouts_reach_the_limit_within_timeout_times_limit():
    fake = await FakeServer(hello=True).start()
    timeout_ms, limit = 200, 3
    options = {"port": fake.port, "command_timeout": timeout_ms, "max_command_timeouts": limit,
               "ping_interval": 0, "pool_size": 1}
    async with Queue("dead", connection=options) as queue:
        await queue.transport.wait_ready(5)
        started = time.monotonic()
        for _ in range(limit):
            with pytest.raises(BunqueueTimeout, match="Command timeout"):
                await queue.count()
        await until(lambda: fake.disconnects, timeout=5, what="the link torn down")
        assert fake.disconnects[0] - started <= timeout_ms / 1000 * limit + 0.5
    await fake.stop()


async def test_in_flight_commands_fail_fast_with_the_typed_error_on_disconnect():
    fake = await FakeServer(hello=True, close_after_command=0.1).start()
    options = {"port": fake.port, "command_timeout": 30000, "ping_interval": 0, "pool_size": 1}
    async with Queue("drop", connection=options) as queue:
        await queue.transport.wait_ready(5)
        started = time.monotonic()
        results = await asyncio.gather(*(queue.count() for _ in range(5)),
                                       return_exceptions=True)
        elapsed = time.monotonic() - started
        assert all(isinstance(r, BunqueueConnectionLost) for r in results), results
        assert all(str(r).startswith("Connection lost") for r in results)
        assert elapsed < 2.0, elapsed  # not the 30 s command timeout
    await fake.stop()


async def test_a_wrong_token_fails_fast_with_an_auth_error():
    srv = await BunqueueServer("bunqueue/v2", port=0, auth_tokens=["right"]).start()
    try:
        async with Queue("auth", connection=conn(srv, token="right")) as queue:
            assert await queue.count() == 0
        async with Queue("auth", connection=conn(srv, token="wrong")) as queue:
            started = time.monotonic()
            with pytest.raises(BunqueueRefused) as info:
                await queue.count()
            assert type(info.value).__name__ == "BunqueueAuthError"
            assert info.value.error_name == "invalid_token"
            assert time.monotonic() - started < 1.0
            with pytest.raises(BunqueueRefused, match="Invalid token"):  # and keeps its reason
                await queue.count()
    finally:
        await srv.stop()


async def test_lookups_map_only_their_not_found_answer_to_none():
    """GetJob, GetJobByCustomId and CronGet answer a missing entity with the error the spec
    names as the command's not_found: the client gives None for that (BQ-QUERY-202) and
    raises every other refusal (here Not authenticated: a missing token is not a missing
    job, BQ-ENV-8)."""
    srv = await BunqueueServer("bunqueue/v3", port=0, auth_tokens=["right"]).start()
    try:
        async with Queue("look", connection=conn(srv, token="right"), profile="bunqueue/v3") as q:
            assert await q.get_job("no-such-job") is None
            assert await q.get_job_by_custom_id("no-such-custom-id") is None
            assert await q.get_job_scheduler("no-such-schedule") is None
            job = await q.add("x", {"n": 1}, job_id="c-1")
            assert (await q.get_job_by_custom_id("c-1")).id == job.id
        async with Queue("look", connection=conn(srv), profile="bunqueue/v3") as q:
            for lookup in (q.get_job("no-such-job"), q.get_job_by_custom_id("c-1"),
                           q.get_job_scheduler("no-such-schedule")):
                with pytest.raises(BunqueueRefused) as info:
                    await lookup
                assert info.value.error_name == "not_authenticated", info.value
    finally:
        await srv.stop()


# --------------------------------------------------------------------------- the pool

async def test_the_pool_is_shared_round_robin_and_reference_counted(server):
    profile = server.profile.name
    options = ConnectionOptions.from_profile(profile, conn(server, pool_size=3))
    q1 = Queue("pool", connection=options, profile=profile)
    q2 = Queue("pool", connection=options, profile=profile)
    assert q1.transport.pool is q2.transport.pool
    pool = q1.transport.pool
    assert pool.refs == 2
    await pool.wait_ready(5)
    await until(lambda: all(link.ready for link in pool.links), what="three links ready")
    assert server.connection_count == 3
    before = [link.session._next_req for link in pool.links]
    for _ in range(30):
        await q1.count()
    sent = [link.session._next_req - b for link, b in zip(pool.links, before)]
    assert sent == [10, 10, 10]
    await q1.close()
    assert pool.refs == 1 and not any(link.stopped for link in pool.links)
    await q2.close()
    assert all(link.stopped for link in pool.links)
    await until(lambda: server.connection_count == 0, what="the sockets closed")


async def test_a_pool_prefers_connected_links():
    srv = await BunqueueServer("bunqueue/v2", port=0).start()
    try:
        pool = acquire_pool("bunqueue/v2", ConnectionOptions.from_profile(
            "bunqueue/v2", conn(srv, pool_size=2)), shared=False)
        await until(lambda: all(link.ready for link in pool.links), what="links ready")
        await pool.links[0].abort()
        for _ in range(6):
            assert pool.pick() is pool.links[1]
        await release_pool(pool)
    finally:
        await srv.stop()


# ------------------------------------------------------------------ embedded and TCP agree

_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _normal(value: Any, ids: dict[str, str]) -> Any:
    """Ids numbered by first appearance; timestamps dropped."""
    if isinstance(value, str) and _ID.match(value):
        return ids.setdefault(value, f"id{len(ids)}")
    if isinstance(value, dict):
        return {k: _normal(v, ids) for k, v in value.items()
                if not k.endswith("At") and k not in ("timeline", "lastHeartbeat")}
    if isinstance(value, (list, tuple)):
        return [_normal(v, ids) for v in value]
    return value


async def _scenario(queue: Queue, worker_kw: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    a = await queue.add("a", {"x": 1}, priority=5)
    b = await queue.add("b", [1, 2, 3])
    bulk = await queue.add_bulk([{"name": "c", "data": {"i": i}, "opts": {"priority": i}}
                                 for i in range(3)])
    out.append([a.id, b.id, *(j.id for j in bulk)])
    got = await queue.get_job(a.id)
    out.append((got.id, got.name, got.data, got.priority))
    out.append(await queue.get_job_counts())
    out.append(await queue.count())
    out.append([(j.id, j.name, j.data) for j in await queue.get_jobs("waiting")])
    await queue.pause()
    out.append(await queue.is_paused())
    await queue.resume()
    out.append(await queue.get_job_state(b.id))
    with pytest.raises(BunqueueRefused) as refused:  # progress is for active jobs
        await queue.update_job_progress(a.id, 40)
    out.append((refused.value.error_name, refused.value.requirement))
    with pytest.raises(BunqueueRefused) as refused:
        await queue.add("bad", {}, priority=10**9)
    out.append((refused.value.error_name, refused.value.requirement))
    out.append(await queue.get_job("no-such-job"))
    done: list[tuple[str, Any]] = []
    async with Worker(queue.name, lambda job: {"twice": job.data}, concurrency=3,
                      on_completed=lambda job, result: done.append((job.id, result)),
                      **worker_kw):
        await until(lambda: len(done) == 5, what="five jobs done")
    out.append(sorted(done, key=lambda d: repr(d[1])))
    out.append(await queue.get_job_result(a.id))
    out.append(await queue.get_job_counts())
    out.append(await queue.drain())
    await queue.obliterate()
    out.append(await queue.get_job_counts())
    return out


async def test_embedded_and_tcp_modes_give_the_same_results(server):
    profile = server.profile.name
    async with Queue("same", connection=conn(server), profile=profile) as queue:
        tcp = await _scenario(queue, {"connection": conn(server), "profile": profile})
    async with Queue("same", embedded=True, profile=profile) as queue:
        assert queue.embedded
        embedded = await _scenario(queue, {"embedded": True, "profile": profile})
    assert _normal(tcp, {}) == _normal(embedded, {})


# ------------------------------------------------------------- flows, groups, events, sync

async def test_a_chain_runs_in_order(server):
    profile = server.profile.name
    order: list[str] = []
    async with FlowProducer(connection=conn(server), profile=profile) as flow:
        ids = await flow.add_chain([{"queue": "chain", "name": s, "data": {"step": s}}
                                    for s in "ABC"])
    assert len(ids) == 3
    async with Worker("chain", lambda job: order.append(job.data["step"]),
                      connection=conn(server), profile=profile, concurrency=3,
                      ack_batch_delay=1):
        await until(lambda: len(order) == 3, what="the chain done")
    assert order == ["A", "B", "C"]


async def test_a_queue_group_namespaces_its_queues(server):
    profile = server.profile.name
    group = QueueGroup("tenant1", connection=conn(server), profile=profile)
    emails = group.get_queue("emails")
    assert emails.name == "tenant1:emails"
    await emails.add("x", {})
    assert await group.list_queues() == ["emails"]
    assert await group.drain_all() == 1
    await group.close()


@pytest.mark.parametrize("embedded", [False, True])
async def test_queue_events_under_bunqueue_295(embedded):
    srv = await BunqueueServer("bunqueue/2.9.5", port=0).start()
    try:
        kw: dict[str, Any] = {"embedded": True} if embedded else {"connection": conn(srv)}
        events = QueueEvents("evq", profile="bunqueue/2.9.5", **kw)
        completed: list[dict] = []
        events.on("completed", completed.append)
        await events.start()
        async with Queue("evq", profile="bunqueue/2.9.5", **kw) as queue:
            job = await queue.add("named", {"v": 1})
            async with Worker("evq", lambda j: {"got": j.name}, profile="bunqueue/2.9.5",
                              ack_batch_delay=1, **kw):
                await until(lambda: completed, what="a completed event")
        assert completed[0]["jobId"] == job.id
        await events.close()
    finally:
        await srv.stop()


async def test_queue_events_need_a_profile_that_has_them():
    with pytest.raises(ClientConfigError, match="no SubscribeEvents"):
        QueueEvents("q", profile="bunqueue/v2")


async def test_the_295_profile_sends_the_name_at_the_top_level():
    queue = Queue("q", profile="bunqueue/2.9.5")
    push = queue.codec.push("q", "send", {"to": "a"}, {"attempts": 2, "job_id": "c1"})
    assert push == {"cmd": "PUSH", "queue": "q", "name": "send", "data": {"to": "a"},
                    "maxAttempts": 2, "jobId": "c1"}
    entry = queue.codec.bulk_entry("send", {"to": "a"}, {"job_id": "c1"})
    assert entry == {"name": "send", "data": {"to": "a"}, "customId": "c1"}
    v2 = Queue("q", profile="bunqueue/v2").codec.push("q", "send", {"to": "a"}, {})
    assert v2 == {"cmd": "PUSH", "queue": "q", "data": {"name": "send", "to": "a"}}


async def test_unknown_job_options_are_refused_with_the_known_ones():
    queue = Queue("q", embedded=True)
    with pytest.raises(ClientConfigError, match="no option 'priorty'.*priority"):
        queue.codec.push("q", "n", {}, {"priorty": 1})


async def test_the_v2_profile_carries_the_name_in_data_and_gives_the_data_back():
    server = await BunqueueServer("bunqueue/v2", port=0).start()
    try:
        async with Queue("names", connection=conn(server)) as queue:
            job = await queue.add("send", {"to": "a"})
            got = await queue.get_job(job.id)
            assert (got.name, got.data) == ("send", {"to": "a"})
            assert got.raw["data"] == {"name": "send", "to": "a"}  # BQ-NAME-102's envelope
    finally:
        await server.stop()


async def test_the_sync_facade():
    """The facade runs on its own loop in its own thread: it blocks this one, as a script's
    call would, while the server runs on the facade's loop."""
    srv_box: dict[str, Any] = {}

    async def start():
        srv_box["srv"] = await BunqueueServer("bunqueue/v2", port=0).start()

    sync.run(start())
    srv = srv_box["srv"]
    try:
        with sync.Queue("s", connection=conn(srv)) as queue:
            job = queue.add("x", {"a": 1})
            assert queue.count() == 1
            assert queue.get_job(job.id).data == {"a": 1}
    finally:
        sync.run(srv.stop())


async def test_a_session_refuses_commands_after_close(server):
    queue = Queue("closed", connection=conn(server), profile=server.profile.name)
    link_pool = queue.transport.pool
    await queue.close()
    assert all(link.session.state is SessionState.STOPPED for link in link_pool.links)


async def test_auto_batch_gathers_concurrent_adds_into_pushb(server):
    profile = server.profile.name
    async with Queue("ab", connection=conn(server, ping_interval=0), profile=profile,
                     auto_batch={"max_size": 50}) as queue:
        pool = queue.transport.pool
        await until(lambda: all(link.ready for link in pool.links), what="links ready")
        before = sum(link.session._next_req for link in pool.links)
        jobs = await asyncio.gather(*(queue.add("x", {"i": i}) for i in range(200)))
        sent = sum(link.session._next_req for link in pool.links) - before
        assert len({job.id for job in jobs}) == 200
        assert sent <= 200 // 50 + 1  # PUSHBs of up to 50, not 200 PUSHes
        got = await queue.get_job(jobs[123].id)
        assert (got.name, got.data) == ("x", {"i": 123})
        assert await queue.count() == 200
        durable = await queue.add("d", {}, durable=True)  # always alone (a PUSH)
        assert await queue.get_job_state(durable.id) == "waiting"
        with pytest.raises(BunqueueRefused):  # a refused batch fails its adds
            await queue.add("bad", {}, priority=10**9)


@pytest.mark.parametrize("embedded", [False, True])
async def test_data_at_the_nesting_limit_is_stored_and_read_back_and_deeper_is_refused(embedded):
    srv = await BunqueueServer("bunqueue/v2", port=0).start()
    try:
        depth = srv.profile.model.max_nesting_depth
        kw: dict[str, Any] = {"embedded": True} if embedded else {"connection": conn(srv)}
        async with Queue("deep", **kw) as queue:
            deep: Any = 1
            for _ in range(depth - 3):  # the request map, data and its name envelope
                deep = [deep]
            job = await queue.add("d", {"v": deep})
            got = await queue.get_job(job.id)  # the reply nests deeper than the request
            assert got.data == {"v": deep}
            # one level more: not sent (the server would refuse it without its reqId)
            with pytest.raises(BunqueueEncodeError, match="BQ-MSGPACK-3"):
                await queue.add("d", {"v": [[[[deep]]]]})
            assert await queue.count() == 1
    finally:
        await srv.stop()

