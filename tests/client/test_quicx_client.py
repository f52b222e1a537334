"""The quicx reference clients: the sans-IO session tables on their own (with a fake clock),
then the asyncio producer, worker and monitor over real TCP on 127.0.0.1, against the
reference daemon and against a scripted daemon for what a correct daemon never does (late
answers, silence, a heartbeat to a producer, a dropped connection). Ends with the cross-profile
runs and a load test in which every task is done exactly once although a worker is killed
mid-task. Expected bytes, codes and behaviours come from the spec; every scenario runs under a
30 s guard."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from queuewire.client.quicx import (
    QuicxMonitor,
    QuicxProducer,
    QuicxWorker,
    SubmitResult,
)
from queuewire.client.quicx_session import (
    CLIENT_TRANSITIONS,
    REQUEST_TRANSITIONS,
    WORKER_TRANSITIONS,
    Accepted,
    ClientState,
    Closed,
    HeartbeatSent,
    ProducerSession,
    QuicxConnectionLost,
    QuicxProtocolViolation,
    QuicxRefused,
    QuicxStateError,
    QuicxTimeout,
    RequestState,
    Settled,
    TaskAssigned,
    WaitAdvised,
    WorkerSession,
    WorkerState,
)
from queuewire.codecs.quicx import Message, QuicxDecoder, QuicxEncodeError, QuicxEncoder
from queuewire.reference_server.quicx import QuicxServer
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import DAEMON, QuicxSpec

PROFILES = profile_names("quicx")
GUARD = 30.0


async def run(coro):
    """Run a scenario under the module's timeout guard."""
    async with asyncio.timeout(GUARD):
        return await coro


def spec_of(profile: str) -> QuicxSpec:
    return load_profile(profile).model


def final_status(spec: QuicxSpec, outcome: str) -> str:
    return outcome if spec.flag("forward_results_to_producer") else "accepted"


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


# ------------------------------------------------------------------ a scripted daemon

class Conn:
    """One connection to the scripted daemon: decodes what the client sends."""

    def __init__(self, profile: str, reader, writer):
        self.enc = QuicxEncoder(profile)
        self.decoder = QuicxDecoder(profile, DAEMON)
        self.reader, self.writer = reader, writer
        self.inbox: list[Message] = []
        self.arrivals: list[float] = []

    async def one(self, name: str | None = None, timeout: float = 5.0) -> Message:
        while not self.inbox:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            assert data, "the client closed the connection"
            frames = self.decoder.feed(data)
            self.arrivals += [time.monotonic()] * len(frames)
            self.inbox += frames
        msg = self.inbox.pop(0)
        if name is not None:
            assert msg.name == name, (msg.name, msg.fields)
        return msg

    async def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))
        await self.writer.drain()

    async def eof(self, timeout: float = 5.0) -> bool:
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                return True
            self.inbox += self.decoder.feed(data)


class ScriptedDaemon:
    """A TCP listener whose connections the test drives frame by frame."""

    def __init__(self, profile: str):
        self.profile = profile
        self.enc = QuicxEncoder(profile)
        self._conns: asyncio.Queue[Conn] = asyncio.Queue()

    async def __aenter__(self) -> ScriptedDaemon:
        async def accept(reader, writer):
            await self._conns.put(Conn(self.profile, reader, writer))
        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def accept(self) -> Conn:
        return await asyncio.wait_for(self._conns.get(), 5)


# ------------------------------------------------------------------ sans-IO: the tables

class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_tables_reach_every_state_and_close_from_every_live_state():
    for table, states in ((CLIENT_TRANSITIONS, ClientState), (WORKER_TRANSITIONS, WorkerState)):
        targets = {t for t in table.values()}
        assert targets == set(states) - {states.CREATED}
        for state in states:
            if state not in (states.CREATED, states.CLOSED):
                assert any(s is state and t is states.CLOSED for (s, _), t in table.items())
        assert not any(s is states.CLOSED for s, _ in table)  # CLOSED is final
    # every state but the two a request starts in (SENT; QUEUED where a session holds
    # requests back) is reached, and SENT is reached from QUEUED
    assert {t for t in REQUEST_TRANSITIONS.values()} == set(RequestState) - {RequestState.QUEUED}


@pytest.mark.parametrize("profile", PROFILES)
def test_worker_session_lifecycle(profile):
    spec = spec_of(profile)
    enc = QuicxEncoder(profile, DAEMON)
    s = WorkerSession(profile, heartbeat_interval=None)
    with pytest.raises(QuicxStateError):
        s.finish(1)
    s.start()
    s.connected()
    assert s.state is WorkerState.WAITING and s.data_to_send() == QuicxEncoder(profile).ready()
    (event,) = s.receive_data(enc.task(7, "t", b"p"))
    assert isinstance(event, TaskAssigned) and event.task.payload == b"p"
    assert s.state is WorkerState.BUSY
    events = s.receive_data(enc.task(8, "t", b"p"))  # a second task to a busy worker
    assert s.closed and isinstance(events[-1], Closed)
    assert isinstance(events[-1].error, QuicxProtocolViolation)

    s = WorkerSession(profile, heartbeat_interval=None)
    s.start()
    s.connected()
    s.data_to_send()
    s.receive_data(enc.task(7, "t", b"p"))
    s.finish(7, "é" * 100)
    out = s.data_to_send()
    (failed, *rest) = QuicxDecoder(profile, DAEMON).feed(out)
    cap = spec.message("MSG_FAILED").layout[-1].max_bytes
    assert failed.fields["reason"] == ("é" * 100 if cap is None else "é" * (cap // 2))
    if spec.flag("ready_required_after_result"):
        assert [m.name for m in rest] == ["MSG_READY"]
    else:
        assert rest == [] and s.state is WorkerState.WAITING
    assert s.stop()[-1] == Closed("stopped", None) and s.closed


def test_worker_backoff_doubles_and_resets():
    profile = next(p for p in PROFILES if spec_of(p).allowed("MSG_WAIT", DAEMON, "worker"))
    enc = QuicxEncoder(profile)
    s = WorkerSession(profile, backoff_min=0.1, backoff_max=0.35, heartbeat_interval=None)
    s.start()
    s.connected()
    delays = []
    for _ in range(4):
        (event,) = s.receive_data(enc.wait())
        assert isinstance(event, WaitAdvised) and s.state is WorkerState.BACKOFF
        delays.append(event.delay)
        s.backoff_elapsed()
        assert s.state is WorkerState.WAITING
    assert delays == [0.1, 0.2, 0.35, 0.35]
    s.receive_data(enc.task(1, "t", b""))
    s.finish(1)
    (event,) = s.receive_data(enc.wait())
    assert event.delay == 0.1


@pytest.mark.parametrize("profile", PROFILES)
def test_heartbeat_on_an_idle_socket_and_missed_pong(profile):
    clock = FakeClock()
    s = WorkerSession(profile, heartbeat_interval=5.0, pong_timeout=2.0, clock=clock)
    assert s.can_heartbeat  # workers may heartbeat in both profiles
    s.start()
    s.connected()
    s.data_to_send()
    clock.now += 4.9
    assert s.tick() == [] and s.next_tick() == pytest.approx(105.0)
    clock.now += 0.2
    assert s.tick() == [HeartbeatSent()]
    assert s.data_to_send() == QuicxEncoder(profile).heartbeat()
    s.receive_data(QuicxEncoder(profile).pong())
    clock.now += 5.0
    assert s.tick() == [HeartbeatSent()]
    clock.now += 2.0
    events = s.tick()
    assert s.closed and isinstance(events[-1].error, QuicxConnectionLost)


@pytest.mark.parametrize("profile", PROFILES)
def test_producer_session_correlates_answers_in_order(profile):
    spec = spec_of(profile)
    enc = QuicxEncoder(profile, DAEMON)
    s = ProducerSession(profile)
    with pytest.raises(QuicxStateError):
        s.submit("t")
    s.start()
    s.connected()
    a, b, c = s.submit("t", b"1"), s.submit("t", b"2"), s.submit("t", b"3")
    assert s.data_to_send() == b"".join(QuicxEncoder(profile).submit("t", p) for p in (b"1", b"2", b"3"))
    assert s.abandon(a) == [] and a.state is RequestState.TIMED_OUT
    assert s.receive_data(enc.ok(41)) == []  # the late OK goes to the tombstone
    events = s.receive_data(enc.ok(42) + enc.error("QUEUE_FULL", "full"))
    assert b.task_id == 42 and c.state is RequestState.REFUSED
    assert isinstance(c.error, QuicxRefused) and c.error.error_code == spec.error_code("QUEUE_FULL")
    assert isinstance(events[0], Accepted) and Settled(c) in events
    if spec.flag("forward_results_to_producer"):
        assert b.state is RequestState.ACCEPTED and s.pending == 1
        assert s.receive_data(enc.failed(41, "late")) == []  # not awaited any more
        s.receive_data(enc.failed(42, "boom"))
        assert (b.state, b.reason) == (RequestState.FAILED, "boom")
    else:
        assert b.state is RequestState.ACCEPTED and Settled(b) in events
    assert s.pending == 0
    d = s.submit("t")
    events = s.stop()
    assert s.state is ClientState.STOPPING and events == []
    with pytest.raises(QuicxStateError):
        s.submit("t")
    events = s.receive_eof()
    assert d.state is RequestState.LOST and isinstance(d.error, QuicxConnectionLost)
    assert s.closed and isinstance(events[-1], Closed)


def test_encoder_limits_are_enforced_before_sending():
    profile = next(p for p in PROFILES if spec_of(p).max_payload_bytes is not None
                   and spec_of(p).max_payload_bytes < 1 << 20)
    s = ProducerSession(profile)
    s.start()
    s.connected()
    with pytest.raises(QuicxEncodeError):
        s.submit("t", b"x" * spec_of(profile).max_payload_bytes)
    assert s.pending == 0 and s.data_to_send() == b""


# ------------------------------------------------------------ against the reference daemon

@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_submit_results_and_handlers_by_type(profile):
    spec = spec_of(profile)
    cap = spec.message("MSG_FAILED").layout[-1].max_bytes

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            seen = []

            async def send_email(task):
                seen.append(("send_email", task.task_id, task.payload))

            def explode(task):
                raise ValueError("ü" * 80)

            async with QuicxWorker(port=server.port, profile=profile,
                                   handlers={"send_email": send_email, "explode": explode}) as worker:
                async with QuicxProducer(port=server.port, profile=profile) as producer:
                    ok = await producer.submit("send_email", b'{"to":"a@b.c"}')
                    bad = await producer.submit("explode", b"")
                    orphan = await producer.submit("no_such_handler", b"")
                await until(lambda: server.stats().done + server.stats().failed == 3)
            assert ok == SubmitResult(1, final_status(spec, "done"))
            reason = "ü" * 80 if cap is None else ("ü" * 80).encode()[:cap].decode("utf-8", "ignore")
            if spec.flag("forward_results_to_producer"):
                assert bad == SubmitResult(2, "failed", reason) and not bad.ok
                assert orphan.status == "failed" and "no_such_handler" in orphan.reason
            else:
                assert bad == SubmitResult(2, "accepted") and orphan.task_id == 3
            assert seen == [("send_email", 1, b'{"to":"a@b.c"}')]
            assert (worker.done, worker.failed) == (1, 2)
            stats = server.stats()
            assert (stats.done, stats.failed, stats.pool_bytes_used, stats.workers_total) == (1, 2, 0, 0)
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_refusal_raises_with_the_daemons_code(profile):
    spec = spec_of(profile)

    async def scenario():
        async with (QuicxServer(profile, port=0, task_types=["a"]) as server,
                    QuicxWorker(port=server.port, profile=profile, handlers={"a": lambda t: None}),
                    QuicxProducer(port=server.port, profile=profile) as producer):
            with pytest.raises(QuicxRefused) as info:
                await producer.submit("b", b"")
            assert info.value.error_code == spec.error_replies["unknown_task_type"]
            assert info.value.error_name == "UNKNOWN_TASK_TYPE"
            results = await asyncio.gather(producer.submit("a", b"1"), producer.submit("b"),
                                           producer.submit("a", b"2"), return_exceptions=True)
            assert [getattr(r, "task_id", None) for r in results] == [1, None, 2]
            assert isinstance(results[1], QuicxRefused)
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_monitor(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            async with QuicxProducer(port=server.port, profile=profile, result_timeout=0.2) as producer:
                await asyncio.gather(*(producer.submit("t", b"x" * 50) for _ in range(3)),
                                     return_exceptions=True)
            async with QuicxMonitor(port=server.port, profile=profile) as monitor:
                if spec.flag("stats_on_tcp"):
                    figures = await monitor.stats()
                    stats = server.stats()
                    assert figures == {"queue_depth": 3, "workers_total": 0, "workers_idle": 0,
                                       "pmad_bytes_used": stats.pool_bytes_used,
                                       "pmad_bytes_total": stats.pool_bytes_total}
                    assert stats.pool_bytes_used == 3 * 64
                else:
                    with pytest.raises(QuicxStateError):
                        await monitor.stats()
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_graceful_stop_finishes_the_running_task(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            started, release = asyncio.Event(), asyncio.Event()

            async def slow(task):
                started.set()
                await release.wait()

            worker = await QuicxWorker(port=server.port, profile=profile, handlers={"slow": slow},
                                       concurrency=2).start()
            async with QuicxProducer(port=server.port, profile=profile) as producer:
                pending = asyncio.create_task(producer.submit("slow", b""))
                await started.wait()
                stopping = asyncio.create_task(worker.stop())
                await asyncio.sleep(0.1)
                assert not stopping.done()  # waits for the running task
                assert server.stats().workers_total == 1  # the idle connection is gone already
                release.set()
                await stopping
                result = await pending
            assert result.status == final_status(spec, "done")
            stats = server.stats()
            assert (stats.done, stats.requeued, stats.workers_total, stats.in_flight) == (1, 0, 0, 0)
    await run(scenario())


# ------------------------------------------------------------ against a scripted daemon

@pytest.mark.asyncio
async def test_worker_backs_off_on_wait_and_readies_again():
    profile = next(p for p in PROFILES if spec_of(p).allowed("MSG_WAIT", DAEMON, "worker"))
    spec = spec_of(profile)

    async def scenario():
        async with ScriptedDaemon(profile) as daemon:
            done = asyncio.Event()
            worker = await QuicxWorker(port=daemon.port, profile=profile, backoff_min=0.05,
                                       backoff_max=1.0, handlers={"t": lambda t: done.set()}).start()
            conn = await daemon.accept()
            for _ in range(3):
                await conn.one("MSG_READY")
                await conn.send(daemon.enc.wait())
            await conn.one("MSG_READY")
            gaps = [b - a for a, b in itertools.pairwise(conn.arrivals)]
            assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2
            await conn.send(daemon.enc.task(9, "t", b""))
            assert (await conn.one("MSG_DONE")).fields == {"task_id": 9}
            if spec.flag("ready_required_after_result"):
                await conn.one("MSG_READY")
            await worker.stop()
            assert await conn.eof()
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_worker_heartbeats_when_idle_and_drops_a_silent_daemon(profile):
    async def scenario():
        async with ScriptedDaemon(profile) as daemon:
            worker = await QuicxWorker(port=daemon.port, profile=profile, heartbeat_interval=0.1,
                                       pong_timeout=0.2, reconnect=False).start()
            conn = await daemon.accept()
            await conn.one("MSG_READY")
            t0 = time.monotonic()
            hb = await conn.one("MSG_HEARTBEAT")
            assert hb.raw == QuicxEncoder(profile).heartbeat() and time.monotonic() - t0 >= 0.08
            await conn.send(daemon.enc.pong())
            await conn.one("MSG_HEARTBEAT")  # idle again: another probe
            assert await conn.eof()  # no PONG this time: the worker gives up on the connection
            await worker.run()
            assert any(isinstance(e, QuicxConnectionLost) for e in worker.errors)
    await run(scenario())


@pytest.mark.asyncio
async def test_clients_answer_a_daemon_heartbeat():
    profile = next(p for p in PROFILES if spec_of(p).allowed("MSG_HEARTBEAT", DAEMON, "producer"))

    async def scenario():
        async with ScriptedDaemon(profile) as daemon:
            async with QuicxProducer(port=daemon.port, profile=profile):
                conn = await daemon.accept()
                await conn.send(daemon.enc.heartbeat())
                assert (await conn.one("MSG_PONG")).raw == QuicxEncoder(profile).pong()
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_submit_timeout_keeps_the_correlation(profile):
    async def scenario():
        async with ScriptedDaemon(profile) as daemon:
            async with QuicxProducer(port=daemon.port, profile=profile, timeout=0.2,
                                     result_timeout=0.2) as producer:
                conn = await daemon.accept()
                with pytest.raises(QuicxTimeout):
                    await producer.submit("t", b"first")
                second = asyncio.create_task(producer.submit("t", b"second"))
                await conn.one("MSG_SUBMIT")
                await conn.one("MSG_SUBMIT")
                await conn.send(daemon.enc.ok(1), daemon.enc.ok(2))  # the first OK is late
                if spec_of(profile).flag("forward_results_to_producer"):
                    await conn.send(daemon.enc.done(2))
                result = await second
                assert result.task_id == 2
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_lost_connection_fails_pending_submissions(profile):
    async def scenario():
        async with ScriptedDaemon(profile) as daemon:
            producer = await QuicxProducer(port=daemon.port, profile=profile).connect()
            conn = await daemon.accept()
            pending = asyncio.create_task(producer.submit("t", b""))
            await conn.one("MSG_SUBMIT")
            conn.writer.close()
            with pytest.raises(QuicxConnectionLost):
                await pending
            with pytest.raises(QuicxConnectionLost):
                await producer.submit("t", b"")
            await producer.close()
    await run(scenario())


@pytest.mark.asyncio
async def test_connect_errors_are_raised():
    async def scenario():
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        with pytest.raises(QuicxConnectionLost):
            await QuicxProducer(port=port).connect()
        with pytest.raises(QuicxConnectionLost):
            await QuicxWorker(port=port).start()
    await run(scenario())


# ------------------------------------------------------------------ the other profile

def other(profile: str) -> str:
    return next(p for p in PROFILES if p != profile)


@pytest.mark.asyncio
@pytest.mark.parametrize("server_profile", PROFILES)
async def test_a_worker_of_the_other_profile_is_cut_off_and_its_task_requeued(server_profile):
    client_profile = other(server_profile)
    spec = spec_of(server_profile)

    async def scenario():
        async with QuicxServer(server_profile, port=0) as server:
            ran = []
            worker = await QuicxWorker(port=server.port, profile=client_profile,
                                       handlers={"t": ran.append}).start()
            async with QuicxProducer(port=server.port, profile=server_profile, timeout=5,
                                     result_timeout=0.3) as producer:
                try:
                    await producer.submit("t", b"x")
                except QuicxTimeout:
                    pass
            # the daemon's MSG_TASK opcode is another message in the worker's profile: each
            # time the task reaches the worker, the worker is cut off and the task requeued; a
            # MSG_WAIT (wait_when_empty, the queue still empty) cuts it off without a task
            task_as_read = spec_of(client_profile).opcode(spec.message("MSG_TASK").code).name
            assert task_as_read != "MSG_TASK"

            def cuts() -> list[str]:
                return [str(e) for e in worker.errors if isinstance(e, QuicxProtocolViolation)]

            def task_cuts() -> list[str]:
                return [c for c in cuts() if f" {task_as_read} " in c]

            # the worker comes back after a violation (its backoff growing: 0.1, 0.2 s ...),
            # so the same daemon breaks a second connection too ...
            await until(lambda: len(cuts()) >= 2 and task_cuts())
            await worker.abort()
            assert ran == []
            await until(lambda: server.stats().workers_total == 0)
            stats = server.stats()
            assert stats.done == 0 and stats.queue_depth == 1  # ... and the task is never lost
            # ... but requeued once per connection it was handed to, no more, no less: each
            # connection the task cut off, and the one the abort closed if the daemon had handed
            # it the task before the worker read it
            assert len(task_cuts()) <= stats.requeued <= len(task_cuts()) + 1
            assert task_cuts()
            if not spec.flag("wait_when_empty"):  # held READY: only the task cuts it off
                assert task_cuts() == cuts()
    await run(scenario())


@pytest.mark.asyncio
@pytest.mark.parametrize("server_profile", PROFILES)
async def test_a_producer_of_the_other_profile(server_profile):
    client_profile = other(server_profile)
    server_spec, client_spec = spec_of(server_profile), spec_of(client_profile)

    async def scenario():
        async with QuicxServer(server_profile, port=0) as server:
            async with QuicxWorker(port=server.port, profile=server_profile,
                                   handlers={"t": lambda task: None}):
                producer = await QuicxProducer(port=server.port, profile=client_profile,
                                               result_timeout=0.5).connect()
                # SUBMIT and OK keep their opcodes: the task is accepted either way
                if client_spec.flag("forward_results_to_producer"):
                    with pytest.raises(QuicxTimeout):  # this daemon forwards no result
                        await producer.submit("t", b"x")
                else:
                    assert (await producer.submit("t", b"x")).status == "accepted"
                await until(lambda: server.stats().done == 1)
                if server_spec.flag("forward_results_to_producer"):
                    # the forwarded DONE is another message in the producer's profile
                    await until(lambda: producer.closed)
                    assert isinstance(producer.session.error, QuicxProtocolViolation)
                await producer.close()
    await run(scenario())


# ------------------------------------------------------------------------------- load

@pytest.mark.asyncio
@pytest.mark.parametrize("profile", PROFILES)
async def test_load_every_task_done_exactly_once(profile):
    spec = spec_of(profile)
    producers, per_producer, workers = 4, 150, 3

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            completed: dict[bytes, int] = {}
            doomed_started = asyncio.Event()

            async def handle(task):
                await asyncio.sleep(0)
                completed[task.payload] = completed.get(task.payload, 0) + 1

            async def hang(task):  # the doomed worker never finishes its task
                doomed_started.set()
                await asyncio.Event().wait()
                completed[task.payload] = completed.get(task.payload, 0) + 1

            doomed = await QuicxWorker(port=server.port, profile=profile, handlers={"job": hang},
                                       heartbeat_interval=None).start()

            async def produce(p):
                async with QuicxProducer(port=server.port, profile=profile) as producer:
                    return await asyncio.gather(*(
                        producer.submit("job", f"{p}-{i}".encode()) for i in range(per_producer)))

            produced = asyncio.gather(*(produce(p) for p in range(producers)))
            await doomed_started.wait()  # the only worker yet: it surely gets a task
            pool = [await QuicxWorker(port=server.port, profile=profile, handlers={"job": handle},
                                      concurrency=2, backoff_min=0.01, backoff_max=0.05,
                                      heartbeat_interval=None).start()
                    for _ in range(workers)]
            await doomed.abort()  # dies mid-task: the daemon must requeue, not lose, that task
            results = [r for batch in await produced for r in batch]
            total = producers * per_producer
            await until(lambda: server.stats().done == total, timeout=20)
            for w in pool:
                await w.stop()
            assert len({r.task_id for r in results}) == total
            assert {r.status for r in results} == {final_status(spec, "done")}
            assert sorted(completed) == sorted(f"{p}-{i}".encode() for p in range(producers)
                                               for i in range(per_producer))
            assert set(completed.values()) == {1}  # exactly once, the killed run included
            stats = server.stats()
            assert stats.requeued >= 1 and stats.failed == 0
            assert (stats.queue_depth, stats.in_flight, stats.pool_bytes_used) == (0, 0, 0)
            assert sum(w.done for w in pool) == total
    await run(scenario())
