"""The quicx daemon's fast paths against the general ones, and its scheduling rule under a
backlog. The engine builds MSG_OK, MSG_TASK and MSG_STATS_RESPONSE without the encoder's
checked path: every frame it sends must be the checked encoder's bytes (hypothesis). A
connection that is no worker gets a short turn while the queue is backlogged
(``QuicxEngine.throttled``, ``tcp.BACKLOG_FRAMES_PER_TURN``): the rule itself is checked
sans-IO, and over TCP a worker keeps completing tasks while a producer floods the daemon
(an order of events, not a timing)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
from queuewire.reference_server.quicx import QuicxEngine, QuicxServer, Send
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import DAEMON

PROFILES = profile_names("quicx")
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def message(profile: str, frame: bytes):
    (msg,) = QuicxDecoder(profile, DAEMON).feed(frame)
    return msg


@pytest.mark.parametrize("profile", PROFILES)
@SETTINGS
@given(task_type=st.text(max_size=60), payload=st.binary(max_size=300),
       first_id=st.integers(0, (1 << 32) - 1))
def test_engine_frames_are_the_checked_encoders_bytes(profile, task_type, payload, first_id):
    enc = QuicxEncoder(profile)
    if len(task_type.encode()) > 255:
        return
    engine = QuicxEngine(profile, pool_bytes=1 << 20)
    engine._last_id = first_id  # ids near the top of the u32 range, and their wrap
    producer, worker = engine.open(), engine.open()
    ok, *rest = engine.handle(producer, message(profile, enc.submit(task_type, payload)))
    (got,) = QuicxDecoder(profile, "producer").feed(ok.frame)
    task_id = got.fields["task_id"]
    assert isinstance(ok, Send) and rest == []
    assert ok.frame == enc.encode_checked("MSG_OK", task_id=task_id)
    (task,) = engine.handle(worker, message(profile, enc.ready()))
    assert task.message == "MSG_TASK"
    assert task.frame == enc.encode_checked("MSG_TASK", task_id=task_id, task_type=task_type,
                                            payload=payload)


@pytest.mark.parametrize("profile", PROFILES)
def test_tasks_built_from_submits_match_the_encoder_up_to_the_cap(profile):
    """A TASK is the SUBMIT's payload behind a packed header and id (the layouts allow it in
    every profile); around the payload cap the engine answers as with the encoder alone:
    the same OK and TASK bytes, or the same task_too_large refusal."""
    spec, enc = load_profile(profile).model, QuicxEncoder(profile)
    fast = QuicxEngine(profile, pool_bytes=1 << 20)
    assert fast._task_head is not None
    cap = min(spec.max_payload_bytes or 4096, fast.pool.largest_class)
    top = cap - 1 - len("type")  # the largest SUBMIT payload: its TASK is 4 bytes over
    for size in (0, 1, *range(top - 6, top + 1)):
        general = QuicxEngine(profile, pool_bytes=1 << 20)
        general._task_head = None
        engine = QuicxEngine(profile, pool_bytes=1 << 20)
        frame = enc.submit("type", bytes(range(256)) * (size // 256) + bytes(size % 256))
        outcomes = []
        for e in (engine, general):
            producer, worker = e.open(), e.open()
            try:
                msg = message(profile, frame)
            except Exception as exc:  # noqa: BLE001 - over the decoder's cap: both refuse alike
                outcomes.append(("decoder", type(exc), str(exc)))
                continue
            outcomes.append((e.handle(producer, msg), e.handle(worker, message(profile, enc.ready())),
                             e.stats().refused))
        assert outcomes[0] == outcomes[1], size


FORWARDING = [p for p in PROFILES if load_profile(p).model.flag("forward_results_to_producer")]


@pytest.mark.parametrize("profile", FORWARDING)
@SETTINGS
@given(reason=st.text(max_size=80), failed=st.booleans(), current=st.booleans(),
       other=st.integers(0, 255))
def test_forwarded_results_are_the_checked_encoders_bytes(profile, reason, failed, current, other):
    """A result is forwarded as the worker's own frame when it carries the current version,
    else re-encoded: either way the checked encoder's bytes for the decoded fields."""
    spec, enc = load_profile(profile).model, QuicxEncoder(profile)
    engine = QuicxEngine(profile, pool_bytes=1 << 20)
    producer, worker = engine.open(), engine.open()
    engine.handle(producer, message(profile, enc.submit("t", b"p")))
    (task,) = engine.handle(worker, message(profile, enc.ready()))
    (sent,) = QuicxDecoder(profile, "worker").feed(task.frame)
    task_id = sent.fields["task_id"]
    frame = enc.failed(task_id, reason) if failed and len(reason.encode()) <= 64 else enc.done(task_id)
    at, version = spec.header_offsets["version"], spec.version if current else other
    frame = frame[:at] + bytes([version]) + frame[at + 1:]
    dec = QuicxDecoder(profile, DAEMON)
    dec._versions = frozenset(range(256))  # a lax daemon: any version byte
    (result,) = dec.feed(frame)
    forwarded = [a for a in engine.handle(worker, result) if a.conn == producer]
    assert [a.frame for a in forwarded] == [enc.encode_checked(result.name, **result.fields)]


def test_stats_response_is_the_checked_encoders_bytes():
    for profile in PROFILES:
        spec = load_profile(profile).model
        if not spec.allowed("MSG_STATS_RESPONSE", sender=DAEMON):
            continue
        engine = QuicxEngine(profile, pool_bytes=1 << 20)
        figures = {f.id: f.max_value for f in spec.message("MSG_STATS_RESPONSE").layout}
        assert engine._pack("MSG_STATS_RESPONSE", **figures) == \
            QuicxEncoder(profile).encode_checked("MSG_STATS_RESPONSE", **figures)


@pytest.mark.parametrize("profile", PROFILES)
def test_only_non_workers_are_throttled_and_only_under_a_backlog(profile):
    enc = QuicxEncoder(profile)
    engine = QuicxEngine(profile, pool_bytes=1 << 20)
    producer, w1, w2 = engine.open(), engine.open(), engine.open()
    for _ in range(5):  # no worker yet: nothing would drain the queue, nobody is throttled
        engine.handle(producer, message(profile, enc.submit("t")))
    assert not engine.backlogged and not engine.throttled(producer)
    for w in (w1, w2):  # each takes a task: 3 queued for 2 workers
        engine.handle(w, message(profile, enc.ready()))
    assert engine.backlogged and engine.throttled(producer)
    assert not engine.throttled(w1) and not engine.throttled(w2)
    done = [a for a in engine.handle(w1, message(profile, enc.done(1))) if a.message == "MSG_TASK"]
    if not done:  # the profile wants READY after a result
        engine.handle(w1, message(profile, enc.ready()))
    assert engine.stats().queue_depth == 2 and not engine.throttled(producer)  # 2 for 2 workers


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_a_worker_is_not_starved_by_a_flooding_producer(profile):
    """One write of 3000 SUBMITs, then a worker that completes tasks one at a time: with
    the producer's turns short under the backlog, the worker's cycles interleave with the
    flood instead of waiting for it to be accepted."""
    spec, enc = load_profile(profile).model, QuicxEncoder(profile)
    ready_after = bool(spec.flag("ready_required_after_result"))
    flood = 3000

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            w_reader, w_writer = await asyncio.open_connection("127.0.0.1", server.port)
            w_writer.write(enc.ready())
            p_reader, p_writer = await asyncio.open_connection("127.0.0.1", server.port)
            p_writer.write(enc.submit("t") * 2)
            await asyncio.sleep(0.05)  # the worker holds a task, one is queued: backlogged
            completed, oks = 0, 0
            at_last_ok: list[int] = []

            async def worker():
                nonlocal completed
                dec = QuicxDecoder(profile, "worker")
                while True:
                    for m in dec.feed(await w_reader.read(65536)):
                        if m.name == "MSG_TASK":
                            completed += 1
                            w_writer.write(enc.done(m.fields["task_id"])
                                           + (enc.ready() if ready_after else b""))
                        elif m.name == "MSG_WAIT":
                            w_writer.write(enc.ready())

            async def producer():
                nonlocal oks
                dec = QuicxDecoder(profile, "producer")
                p_writer.write(enc.submit("t") * flood)
                while oks < flood + 2:
                    data = await p_reader.read(65536)
                    assert data
                    oks += sum(m.name == "MSG_OK" for m in dec.feed(data))
                at_last_ok.append(completed)

            w = asyncio.create_task(worker())
            await asyncio.wait_for(producer(), 60)
            w.cancel()
            for writer in (w_writer, p_writer):
                writer.close()
            return at_last_ok[0]

    completed = await asyncio.wait_for(scenario(), 90)
    assert completed >= flood // 10, completed


@pytest.mark.parametrize("profile", FORWARDING)
@pytest.mark.asyncio
async def test_a_throttled_producer_gets_each_ok_before_its_forwarded_result(profile):
    """A throttled producer's MSG_OKs are written together after its turns; a result
    forwarded to it from a worker's turn must still come after the OK of its task (four
    workers complete a task within a few turns of its acceptance, long before the producer's
    flood is handled)."""
    enc = QuicxEncoder(profile)
    flood = 1000

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            workers = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
            for _, w_writer in workers:
                w_writer.write(enc.ready())
            p_reader, p_writer = await asyncio.open_connection("127.0.0.1", server.port)
            p_writer.write(enc.submit("t") * 5)
            await asyncio.sleep(0.05)  # four tasks in flight, one queued: backlogged

            async def worker(w_reader, w_writer):
                dec = QuicxDecoder(profile, "worker")
                while True:
                    for m in dec.feed(await w_reader.read(65536)):
                        if m.name == "MSG_TASK":
                            w_writer.write(enc.done(m.fields["task_id"]))

            ws = [asyncio.create_task(worker(r, w)) for r, w in workers]
            p_writer.write(enc.submit("t") * flood)
            dec, oks, done = QuicxDecoder(profile, "producer"), [], 0
            while done < flood + 5:
                data = await p_reader.read(65536)
                assert data
                for m in dec.feed(data):
                    if m.name == "MSG_OK":
                        oks.append(m.fields["task_id"])
                    elif m.name == "MSG_DONE":
                        assert m.fields["task_id"] in oks, "a result came before its OK"
                        done += 1
            for w in ws:
                w.cancel()
            for writer in (p_writer, *(w for _, w in workers)):
                writer.close()
            assert oks == sorted(oks) and len(oks) == flood + 5

    await asyncio.wait_for(scenario(), 90)
