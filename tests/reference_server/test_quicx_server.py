"""The quicx reference daemon over real TCP on 127.0.0.1, in both profiles: every message
type, every error code, the pool (queue full, payload too large, the slot coming back), FIFO
dispatch, the requeue of a task whose worker disconnects (QX-WORKER-1), frames of the other
profile refused with the documented error, hostile bytes, and ``queuewire serve quicx`` as a
process. Expected bytes and codes are computed from the spec (flags, limits, error tables)
and the codec's encoder, never restated; every scenario runs under a 30 s guard."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import signal
import sys

import pytest

from queuewire.codecs.quicx import Message, QuicxDecoder, QuicxEncoder
from queuewire.reference_server.quicx import (
    SMALLEST_CLASS,
    QuicxConnection,
    QuicxEngine,
    QuicxServer,
    Send,
    SizeClassPool,
    default_largest_class,
)
from queuewire.spec import load_profile, profile_names
from queuewire.spec.quicx import DAEMON, QuicxSpec

PROFILES = profile_names("quicx")
GUARD = 30.0           # seconds: a hang fails the test instead of stalling the run
QUIET = 0.25           # seconds of silence that count as "no answer"


async def run(coro):
    """Run a scenario under the module's timeout guard."""
    return await asyncio.wait_for(coro, GUARD)


def spec_of(profile: str) -> QuicxSpec:
    return load_profile(profile).model


def size_class(size: int) -> int:
    """The power-of-two class a task of ``size`` bytes should occupy (independent of the pool)."""
    return max(SMALLEST_CLASS, 1 << max(size - 1, 0).bit_length())


class Peer:
    """A raw TCP client: writes frames as given, decodes what the daemon sends."""

    def __init__(self, profile: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.profile = profile
        self.enc = QuicxEncoder(profile)
        self.reader, self.writer = reader, writer
        self.decoder = QuicxDecoder(profile, None)
        self.inbox: list[Message] = []
        self.raw = bytearray()

    @classmethod
    async def open(cls, server: QuicxServer, profile: str | None = None) -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        return cls(profile or server.profile.name, reader, writer)

    async def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))
        await self.writer.drain()

    async def recv(self, n: int = 1, timeout: float = 5.0) -> list[Message]:
        while len(self.inbox) < n:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            assert data, f"connection closed after {len(self.inbox)} of {n} frames"
            self.raw += data
            self.inbox += self.decoder.feed(data)
        out, self.inbox = self.inbox[:n], self.inbox[n:]
        return out

    async def one(self, name: str | None = None) -> Message:
        (msg,) = await self.recv(1)
        if name is not None:
            assert msg.name == name, (msg.name, msg.fields)
        return msg

    async def silent(self, delay: float = QUIET) -> None:
        """Nothing arrives within ``delay``."""
        assert not self.inbox
        try:
            data = await asyncio.wait_for(self.reader.read(65536), delay)
        except TimeoutError:
            return
        raise AssertionError(f"expected silence, got {data!r}")

    async def eof(self, timeout: float = 5.0) -> bool:
        """Read until the daemon closes; True if it did."""
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
            except (TimeoutError, ConnectionError):
                return False
            if not data:
                return True
            self.inbox += self.decoder.feed(data)

    async def roundtrip(self) -> list[Message]:
        """HEARTBEAT -> PONG: everything sent before has been processed. Returns what
        arrived before the PONG."""
        await self.send(self.enc.heartbeat())
        before = []
        while (msg := await self.one()).name != "MSG_PONG":
            before.append(msg)
        return before

    def close(self) -> None:
        self.writer.close()


async def error_code(peer: Peer) -> int:
    msg = await peer.one("MSG_ERROR")
    return msg.fields["error_code"]


# ----------------------------------------------------------------------------------- the pool

def test_pool_classes_pages_and_slots():
    pool = SizeClassPool(4 * 1024, largest_class=1024, smallest_class=64)
    assert pool.classes == (64, 128, 256, 512, 1024)
    assert (pool.pages_total, pool.bytes_total) == (4, 4096)
    assert [pool.class_for(n) for n in (0, 1, 64, 65, 1000, 1024, 1025)] == [64, 64, 64, 128, 1024,
                                                                            1024, None]
    slots = [pool.allocate(64) for _ in range(16)]  # one page of 64-byte slots
    assert all(slots) and len({(s.page, s.index) for s in slots}) == 16
    assert pool.bytes_used == 16 * 64
    assert pool.snapshot()[0].pages == 1 and pool.snapshot()[0].slots_free == 0
    big = [pool.allocate(1024) for _ in range(3)]  # the three other pages
    assert all(big) and pool.allocate(1024) is None and pool.allocate(1) is None
    pool.free(big[0])
    assert pool.allocate(200) is not None  # a freed page serves any class
    for s in slots:
        pool.free(s)
    assert pool.snapshot()[0].pages == 0  # an empty page goes back to the pool
    assert pool.allocate(2000) is None
    with pytest.raises(ValueError):
        pool.free(slots[0])
    with pytest.raises(ValueError):
        SizeClassPool(100, largest_class=1024)
    with pytest.raises(ValueError):
        SizeClassPool(4096, largest_class=1024, smallest_class=48)
    odd = SizeClassPool(3000, largest_class=1000)
    assert odd.classes[-1] == 1000 and odd.classes[:-1] == (64, 128, 256, 512)


@pytest.mark.parametrize("profile", PROFILES)
def test_largest_class_follows_the_spec_limit(profile):
    spec = spec_of(profile)
    engine = QuicxEngine(profile, pool_bytes=1 << 20)
    assert engine.pool.largest_class == default_largest_class(spec)
    if spec.max_payload_bytes is not None and spec.max_payload_bytes <= 1 << 20:
        assert engine.pool.largest_class == spec.max_payload_bytes
        with pytest.raises(ValueError):
            QuicxEngine(profile, largest_class=spec.max_payload_bytes * 2)


# ------------------------------------------------------------ the sans-IO core, no socket

def test_a_connection_hands_out_at_most_max_frames_per_call_in_stream_order():
    profile = "quicx/v1"
    spec, enc = spec_of(profile), QuicxEncoder(profile)
    engine = QuicxEngine(profile, pool_bytes=1 << 20)
    conn = QuicxConnection(engine)
    unknown = next(c for c in range(0xFF, 0, -1) if spec.opcode(c) is None)
    stream = enc.heartbeat() * 500 + enc.frame(unknown) + enc.heartbeat() * 500 + enc.submit("t")
    conn.receive_data(stream[:-3])
    assert conn.pending and not conn.in_frame
    batches = []
    while conn.pending:
        batches.append(conn.next_actions(64))
    assert [len(b) for b in batches] == [64] * 15 + [41]  # 1001 frames, the refused one too
    sent = [a.message for b in batches for a in b]
    assert sent == ["MSG_PONG"] * 500 + ["MSG_ERROR"] + ["MSG_PONG"] * 500
    assert conn.in_frame  # the SUBMIT lacks its last 3 bytes
    conn.receive_data(stream[-3:])
    assert [a.message for a in conn.next_actions(64)] == ["MSG_OK"] and not conn.in_frame


@pytest.mark.parametrize("profile", [p for p in PROFILES if not spec_of(p).flag("wait_when_empty")])
def test_a_held_worker_is_pushed_no_task_until_released(profile):
    enc = QuicxEncoder(profile)
    decode = QuicxDecoder(profile, DAEMON).feed
    engine = QuicxEngine(profile, pool_bytes=1 << 20)
    held, other, producer = engine.open(), engine.open(), engine.open()
    for conn in (held, held, other):  # three credits, the held worker's first
        assert engine.handle(conn, decode(enc.ready())[0]) == []
    engine.hold(held)
    pushed = [engine.handle(producer, decode(enc.submit("t", bytes([i])))[0]) for i in range(3)]
    assert [[(a.conn, a.message) for a in out] for out in pushed] == [
        [(producer, "MSG_OK"), (other, "MSG_TASK")], [(producer, "MSG_OK")], [(producer, "MSG_OK")]]
    assert engine.stats().queue_depth == 2
    out = engine.release(held)  # both credits come back: the queued tasks, in order
    assert [(a.conn, a.message) for a in out] == [(held, "MSG_TASK")] * 2
    assert all(isinstance(a, Send) for a in out) and engine.stats().queue_depth == 0
    assert engine.release(held) == []


# ---------------------------------------------------------------------- every message type

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_submit_is_answered_ok_with_a_task_id(profile):
    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            producer = await Peer.open(server)
            enc = producer.enc
            await producer.send(enc.submit("send_email", b'{"to":"user@gmail.com"}'),
                                enc.submit("resize", b""), enc.submit("é", b"\x00" * 100))
            await producer.recv(3)
            assert bytes(producer.raw) == enc.ok(1) + enc.ok(2) + enc.ok(3)
            stats = server.stats()
            assert stats.queue_depth == 3 and stats.accepted == 3
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_ready_on_an_empty_queue_and_task_dispatch(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            worker, producer = await Peer.open(server), await Peer.open(server)
            enc = worker.enc
            await worker.send(enc.ready())
            if spec.flag("wait_when_empty"):
                msg = await worker.one("MSG_WAIT")
                assert msg.raw == enc.wait()
            else:
                await worker.silent()  # held until a task exists
            await producer.send(enc.submit("send_email", b"payload"))
            assert (await producer.one("MSG_OK")).raw == enc.ok(1)
            if spec.flag("wait_when_empty"):
                await worker.silent()  # WAIT answered the READY: nothing is pushed
                await worker.send(enc.ready())
            task = await worker.one("MSG_TASK")
            assert task.raw == enc.task(1, "send_email", b"payload")
            assert task.code == spec.message("MSG_TASK").code
            stats = server.stats()
            assert (stats.workers_total, stats.workers_idle, stats.in_flight) == (1, 0, 1)
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_fifo_dispatch_to_idle_workers(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            producer = await Peer.open(server)
            enc = producer.enc
            workers = [await Peer.open(server) for _ in range(3)]
            if not spec.flag("wait_when_empty"):  # idle workers are held, oldest first
                for w in workers:
                    await w.send(enc.ready())
                    assert await w.roundtrip() == []
                await producer.send(*(enc.submit("t", bytes([i])) for i in range(3)))
                got = [(await w.one("MSG_TASK")).fields for w in workers]
            else:  # tasks wait in the queue; each READY takes the oldest
                await producer.send(*(enc.submit("t", bytes([i])) for i in range(3)))
                await producer.recv(3)
                got = []
                for w in workers:
                    await w.send(enc.ready())
                    got.append((await w.one("MSG_TASK")).fields)
            assert [(f["task_id"], f["payload"]) for f in got] == [(1, b"\x00"), (2, b"\x01"),
                                                                  (3, b"\x02")]
    await run(scenario())


@pytest.mark.parametrize("outcome", ["MSG_DONE", "MSG_FAILED"])
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_results_free_the_slot_and_reach_the_producer_where_forwarded(profile, outcome):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            producer, worker = await Peer.open(server), await Peer.open(server)
            enc = producer.enc
            await producer.send(enc.submit("job", b"a" * 40), enc.submit("job", b"b" * 300))
            await producer.recv(2)
            body = len(enc.task(1, "job", b"a" * 40)) - spec.header_size
            body2 = len(enc.task(2, "job", b"b" * 300)) - spec.header_size
            assert server.stats().pool_bytes_used == size_class(body) + size_class(body2)
            await worker.send(enc.ready())
            task = await worker.one("MSG_TASK")
            result = enc.done(1) if outcome == "MSG_DONE" else enc.failed(1, "smtp timeout")
            await worker.send(result)
            if spec.flag("ready_required_after_result"):
                await worker.silent()  # the next task waits for a new READY
                await worker.send(enc.ready())
            nxt = await worker.one("MSG_TASK")  # else handed over unasked
            assert (task.fields["task_id"], nxt.fields["task_id"]) == (1, 2)
            if spec.flag("forward_results_to_producer"):
                forwarded = await producer.one(outcome)
                assert forwarded.raw == QuicxEncoder(profile, DAEMON).encode(
                    outcome, **QuicxDecoder(profile, DAEMON).feed(result)[0].fields)
            else:
                await producer.silent()
            stats = server.stats()
            assert stats.pool_bytes_used == size_class(body2)  # task 1's slot is back
            assert (stats.done, stats.failed) == ((1, 0) if outcome == "MSG_DONE" else (0, 1))
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_heartbeat_is_answered_pong(profile):
    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            peer = await Peer.open(server)
            await peer.send(peer.enc.heartbeat(), peer.enc.heartbeat())
            await peer.recv(2)
            assert bytes(peer.raw) == 2 * peer.enc.pong()
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_inbound_pong(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            peer = await Peer.open(server)
            await peer.send(peer.enc.frame(spec.message("MSG_PONG").code))
            if spec.flag("accepts_inbound_pong"):
                await peer.roundtrip()  # accepted silently: the next answer is the PONG
            else:
                assert await error_code(peer) == spec.error_replies["wrong_direction"]
    await run(scenario())


def snapshot(server: QuicxServer) -> dict[str, int]:
    """The engine's figures under the names of 004's MSG_STATS_RESPONSE fields."""
    s = server.stats()
    return {"queue_depth": s.queue_depth, "workers_total": s.workers_total,
            "workers_idle": s.workers_idle, "pmad_bytes_used": s.pool_bytes_used,
            "pmad_bytes_total": s.pool_bytes_total}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_stats_report_real_figures(profile):
    spec = spec_of(profile)
    pages = 8
    total = pages * default_largest_class(spec)

    async def scenario():
        async with QuicxServer(profile, port=0, pool_bytes=total) as server:
            producer, worker, monitor = [await Peer.open(server) for _ in range(3)]
            enc = producer.enc
            payloads = [b"x" * 10, b"y" * 100, b"z" * 500]
            sizes = [size_class(len(enc.task(i + 1, "t", p)) - spec.header_size)
                     for i, p in enumerate(payloads)]
            await producer.send(*(enc.submit("t", p) for p in payloads))
            await producer.recv(3)
            await worker.send(enc.ready())
            await worker.one("MSG_TASK")          # task 1 in flight
            figures = [{"queue_depth": 2, "workers_total": 1, "workers_idle": 0,
                        "pmad_bytes_used": sum(sizes), "pmad_bytes_total": total}]
            assert snapshot(server) == figures[0]
            await worker.send(enc.done(1))
            rearmed = not spec.flag("ready_required_after_result")
            if rearmed:
                await worker.one("MSG_TASK")      # task 2 handed over unasked
            await worker.roundtrip()
            figures.append({"queue_depth": 1 if rearmed else 2, "workers_total": 1,
                            "workers_idle": 0 if rearmed else 1,
                            "pmad_bytes_used": sizes[1] + sizes[2], "pmad_bytes_total": total})
            assert snapshot(server) == figures[1]
            await monitor.send(enc.frame(spec.message("MSG_STATS").code))
            if spec.flag("stats_on_tcp"):
                reply = await monitor.one("MSG_STATS_RESPONSE")
                assert reply.fields == figures[1]
                assert reply.raw == QuicxEncoder(profile).stats_response(**figures[1])
                assert len(reply.raw) - spec.header_size == spec.message("MSG_STATS_RESPONSE").fixed_size
            else:  # stats travel on another transport: answered as a type not handled here
                assert await error_code(monitor) == spec.error_replies["not_on_tcp"]
            await worker.send(enc.ready() if not rearmed else enc.done(2))
            await worker.roundtrip()
            assert server.stats().pool_bytes_used == sizes[2] + (0 if rearmed else sizes[1])
    await run(scenario())


# ----------------------------------------------------------------------------- error codes

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_queue_full_and_the_slot_coming_back(profile):
    spec = spec_of(profile)
    page = default_largest_class(spec)

    async def scenario():
        async with QuicxServer(profile, port=0, pool_bytes=page) as server:  # one page
            producer, worker = await Peer.open(server), await Peer.open(server)
            enc = producer.enc
            slots = page // SMALLEST_CLASS
            await producer.send(*(enc.submit("t", b"") for _ in range(slots)))
            oks = await producer.recv(slots)
            assert [m.fields["task_id"] for m in oks] == list(range(1, slots + 1))
            await producer.send(enc.submit("t", b""))
            assert await error_code(producer) == spec.error_codes["QUEUE_FULL"].code
            assert spec.error_replies["queue_full"] == spec.error_codes["QUEUE_FULL"].code
            assert server.stats().pool_bytes_used == server.stats().pool_bytes_total == page
            await worker.send(enc.ready())
            task = await worker.one("MSG_TASK")
            await worker.send(enc.failed(task.fields["task_id"], "no"))
            await worker.roundtrip()
            if spec.flag("forward_results_to_producer"):
                await producer.one("MSG_FAILED")
            await producer.send(enc.submit("t", b""))  # the freed slot is taken again
            assert (await producer.one("MSG_OK")).fields["task_id"] == slots + 1
            # the only page is carved into the smallest class: a bigger task finds no slot
            await producer.send(enc.submit("t", b"x" * SMALLEST_CLASS))
            assert await error_code(producer) == spec.error_replies["queue_full"]
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_payload_too_large(profile):
    spec = spec_of(profile)
    largest = default_largest_class(spec)
    submit = spec.message("MSG_SUBMIT").code

    def body(total: int) -> bytes:  # a SUBMIT payload of ``total`` bytes, type "t"
        return b"\x01t" + b"p" * (total - 2)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            peer = await Peer.open(server)
            enc = peer.enc
            task_extra = len(enc.task(1, "t", b"")) - len(enc.submit("t", b""))  # the task id
            # a frame longer than the largest class: refused from its header
            await peer.send(enc.frame(submit, body(largest + 1)))
            assert await error_code(peer) == spec.error_replies["payload_too_large"]
            # a SUBMIT that fits a frame but whose MSG_TASK exceeds the largest class
            await peer.send(enc.frame(submit, body(largest - task_extra + 1)))
            assert await error_code(peer) == spec.error_replies["task_too_large"]
            for kind in ("payload_too_large", "task_too_large"):
                assert spec.error_replies[kind] == spec.error_codes["PAYLOAD_TOO_LARGE"].code
            # the largest task that fits
            await peer.send(enc.frame(submit, body(largest - task_extra)))
            assert (await peer.one("MSG_OK")).fields["task_id"] == 1
            await peer.roundtrip()  # the connection went on after each refusal
            assert server.stats().classes[-1].slots_used == 1
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_unknown_task_type(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0, task_types=["send_email", "resize"]) as server:
            peer = await Peer.open(server)
            await peer.send(peer.enc.submit("mine_bitcoin", b"x"), peer.enc.submit("resize", b"x"))
            assert await error_code(peer) == spec.error_replies["unknown_task_type"]
            assert spec.error_replies["unknown_task_type"] == spec.error_codes["UNKNOWN_TASK_TYPE"].code
            assert (await peer.one("MSG_OK")).raw == peer.enc.ok(1)  # no id spent on the refusal
            assert server.stats().queue_depth == 1
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_invalid_frames_are_answered_and_the_connection_goes_on(profile):
    spec = spec_of(profile)
    enc = QuicxEncoder(profile)
    m = spec.message
    unknown = next(c for c in range(0xFF, 0, -1) if spec.opcode(c) is None)
    cases = [  # (frame, the protocol_errors kind the spec assigns to it)
        (enc.frame(m("MSG_READY").code, version=spec.version + 1), "bad_version"),
        (enc.frame(unknown), "unknown_type"),
        (enc.frame(m("MSG_OK").code, b"\x00\x00\x00\x01"),
         m("MSG_OK").errors.get("direction", "wrong_direction")),
        (enc.frame(m("MSG_READY").code, b"\x00"), "payload_forbidden"),
        (enc.frame(m("MSG_SUBMIT").code), "payload_required"),
        (enc.frame(m("MSG_DONE").code, b"\x00\x00\x00\x01\x00"),
         m("MSG_DONE").errors.get("size", "payload_size")),
        (enc.frame(m("MSG_SUBMIT").code, b"\x09abc"), "submit_type_len"),
        (enc.frame(m("MSG_SUBMIT").code, b"\x02\xff\xfe"), "invalid_text"),
    ]

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            peer = await Peer.open(server)
            await peer.send(*(frame for frame, _ in cases))  # one write: the daemon resyncs
            replies = await peer.recv(len(cases))
            assert [r.name for r in replies] == ["MSG_ERROR"] * len(cases)
            assert [r.fields["error_code"] for r in replies] == [spec.error_replies[k] for _, k in cases]
            assert all(spec.error(k).reaction == "reply" for _, k in cases)
            await peer.roundtrip()
            assert server.stats().refused == {k: 1 for _, k in cases}
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_inbound_error_frame(profile):
    spec = spec_of(profile)
    kind = spec.message("MSG_ERROR").errors.get("direction", "wrong_direction")

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            peer = await Peer.open(server)
            await peer.send(peer.enc.frame(spec.message("MSG_ERROR").code, b"\x02oops"))
            if spec.error(kind).reaction == "close":
                assert await peer.eof()
                assert not peer.inbox
            else:
                assert await error_code(peer) == spec.error_replies[kind]
                await peer.roundtrip()
            other = await Peer.open(server)
            await other.roundtrip()
    await run(scenario())


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_result_for_a_task_not_in_flight_here(profile):
    spec = spec_of(profile)

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            producer, worker, intruder = [await Peer.open(server) for _ in range(3)]
            enc = producer.enc
            await producer.send(enc.submit("t", b"x"))
            await producer.one("MSG_OK")
            await worker.send(enc.ready())
            await worker.one("MSG_TASK")
            await intruder.send(enc.done(1), enc.failed(77, "?"))
            codes = [m.fields["error_code"] for m in await intruder.recv(2)]
            assert codes == [spec.error_replies["unknown_task_id"]] * 2
            stats = server.stats()
            assert (stats.in_flight, stats.done, stats.failed) == (1, 0, 0)
            assert stats.pool_bytes_used > 0
            await worker.send(enc.done(1))
            await worker.roundtrip()
            assert server.stats().done == 1
    await run(scenario())


# --------------------------------------------------------- worker disconnect (QX-WORKER-1)

@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_task_of_a_disconnected_worker_is_requeued_and_done_once(profile):
    spec = spec_of(profile)
    assert spec.flag("requeue_on_worker_disconnect") is True
    assert spec.semantics["requeue_on_worker_disconnect"].requirement == "QX-WORKER-1"
    assert load_profile(profile).requirements["QX-WORKER-1"].level == "SHOULD"

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            producer, crashing = await Peer.open(server), await Peer.open(server)
            enc = producer.enc
            await producer.send(enc.submit("t", b"first"), enc.submit("t", b"second"))
            await producer.recv(2)
            await crashing.send(enc.ready())
            first = await crashing.one("MSG_TASK")
            assert first.fields["payload"] == b"first"
            crashing.writer.transport.abort()  # gone mid-task, no result
            for _ in range(100):
                if server.stats().requeued:
                    break
                await asyncio.sleep(0.01)
            stats = server.stats()
            assert (stats.requeued, stats.queue_depth, stats.in_flight) == (1, 2, 0)
            assert stats.pool_bytes_used > 0  # the requeued task keeps its slot
            healthy = await Peer.open(server)
            await healthy.send(enc.ready())
            again = await healthy.one("MSG_TASK")
            assert again.raw == first.raw  # the same task, first in line again (QX-QUEUE-1)
            await healthy.send(enc.done(1))
            if spec.flag("ready_required_after_result"):
                await healthy.send(enc.ready())
            second = await healthy.one("MSG_TASK")
            assert second.fields["payload"] == b"second"
            await healthy.send(enc.done(2))
            await healthy.roundtrip()
            if spec.flag("forward_results_to_producer"):
                results = await producer.recv(2)
                assert [(r.name, r.fields["task_id"]) for r in results] == [("MSG_DONE", 1),
                                                                             ("MSG_DONE", 2)]
            await producer.silent()  # exactly one result per task
            stats = server.stats()
            assert (stats.done, stats.queue_depth, stats.in_flight, stats.pool_bytes_used) == (2, 0, 0, 0)
    await run(scenario())


# -------------------------------------------------------------------- the other profile

def expected_refusal(spec: QuicxSpec, frame: bytes) -> str | None:
    """The protocol_errors kind the spec assigns to ``frame`` sent to the daemon, following
    the header rules in their documented order; None if the frame is acceptable."""
    code, length = frame[1], int.from_bytes(frame[2:6], "big")
    msg = spec.opcode(code)
    if msg is None:
        return "unknown_type"
    if msg.reserved:
        return "reserved_type"
    if msg.transport != spec.transport:
        return "not_on_tcp"
    if not msg.allows(receiver=DAEMON):
        return msg.errors.get("direction", "wrong_direction")
    if spec.max_payload_bytes is not None and length > spec.max_payload_bytes:
        return "payload_too_large"
    if msg.payload == "empty" and length or msg.payload == "required" and not length:
        return "payload_forbidden" if length else "payload_required"
    if (msg.fixed_size is not None and length != msg.fixed_size) or length < msg.min_size:
        return msg.errors.get("size", "payload_size")
    return None


def client_frames(profile: str) -> list[tuple[str, bytes]]:
    """One frame of every message a producer, worker or monitor sends in ``profile``."""
    spec, out = spec_of(profile), []
    samples = {"MSG_SUBMIT": {"task_type": "t", "payload": b"p"}, "MSG_DONE": {"task_id": 1},
               "MSG_FAILED": {"task_id": 1, "reason": "boom"}}
    for name in spec.messages:
        if any(spec.allowed(name, role, DAEMON) for role in spec.peer_roles):
            out.append((name, QuicxEncoder(profile).encode(name, **samples.get(name, {}))))
    return out


@pytest.mark.parametrize("server_profile,client_profile",
                         [(a, b) for a in PROFILES for b in PROFILES if a != b])
@pytest.mark.asyncio
async def test_the_other_profiles_opcodes_are_refused_with_the_documented_error(server_profile,
                                                                                client_profile):
    spec, theirs = spec_of(server_profile), spec_of(client_profile)
    moved = [(name, frame) for name, frame in client_frames(client_profile)
             if (spec.opcode(frame[1]) is None or spec.opcode(frame[1]).name != name
                 or not spec.allowed(name, receiver=DAEMON))]
    cases = [(name, frame, expected_refusal(spec, frame)) for name, frame in moved]
    assert any(kind is not None for _, _, kind in cases), "the profiles differ for clients"

    async def scenario():
        async with QuicxServer(server_profile, port=0) as server:
            for name, frame, kind in cases:
                peer = await Peer.open(server)
                await peer.send(frame)
                if kind is None:  # the same bytes mean another message here
                    target = spec.opcode(frame[1])
                    assert target is not None and target.name != name
                    before = await peer.roundtrip()  # e.g. a DONE read as FAILED: no such task
                    assert all(m.fields["error_code"] == spec.error_replies["unknown_task_id"]
                               for m in before)
                elif spec.error(kind).reaction == "reply":
                    assert await error_code(peer) == spec.error_replies[kind], (name, kind)
                    await peer.roundtrip()
                else:
                    assert await peer.eof(), (name, kind)
                peer.close()
            refused = server.stats().refused
            for kind in {k for _, _, k in cases if k is not None}:
                assert refused[kind] == sum(k == kind for _, _, k in cases)

    await run(scenario())
    for name in ("MSG_DONE", "MSG_FAILED", "MSG_TASK"):  # the renumbered opcodes
        assert theirs.message(name).code != spec.message(name).code


def test_cross_profile_cases_named_in_the_notes():
    v1, v103 = spec_of("quicx/v1"), spec_of("quicx/1.0.3")
    # a v1 worker's MSG_FAILED opcode is quicx/1.0.3's MSG_TASK (daemon to worker): 0x04 there
    failed_v1 = QuicxEncoder("quicx/v1").failed(1, "x")
    assert v103.opcode(failed_v1[1]).name == "MSG_TASK"
    assert expected_refusal(v103, failed_v1) == "wrong_direction"
    assert v103.error_replies["wrong_direction"] == v103.error_codes["UNKNOWN_TASK_TYPE"].code
    # a 1.0.3 worker's MSG_DONE opcode is v1's MSG_TASK: 0x02 (invalid type) there
    done_103 = QuicxEncoder("quicx/1.0.3").done(1)
    assert v1.opcode(done_103[1]).name == "MSG_TASK"
    assert expected_refusal(v1, done_103) == "wrong_direction"
    assert v1.error_replies["wrong_direction"] == v1.error_codes["INVALID_MESSAGE"].code
    # a v1 monitor's MSG_STATS reaches a 1.0.3 daemon on the wrong transport
    assert expected_refusal(v103, QuicxEncoder("quicx/v1").stats()) == "not_on_tcp"


# ------------------------------------------------------------------------ hostile bytes

@pytest.mark.asyncio
async def test_truncated_stream_and_garbage_never_take_the_daemon_down(caplog):
    profile = "quicx/v1"
    rng = random.Random(20261121)
    enc = QuicxEncoder(profile)
    streams = [enc.submit("t", b"x")[:-3], enc.frame(1, b"", length=1 << 31)[:6]]
    streams += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(25)]
    streams += [bytes([1, rng.randrange(1, 13)]) + rng.randbytes(rng.randrange(0, 40))
                for _ in range(25)]  # plausible headers, random rest

    async def scenario():
        async with QuicxServer(profile, port=0) as server:
            for data in streams:
                peer = await Peer.open(server)
                peer.writer.write(data)
                peer.writer.write_eof()
                assert await peer.eof()  # answered what it could, then closed
                assert all(m.name in ("MSG_ERROR", "MSG_OK", "MSG_WAIT", "MSG_PONG",
                                      "MSG_STATS_RESPONSE", "MSG_TASK") for m in peer.inbox)
                peer.close()
            peer = await Peer.open(server)
            await peer.send(enc.submit("t", b"ok"))
            assert (await peer.one("MSG_OK")).fields["task_id"] >= 1
            assert server.stats().connections == 1

    with caplog.at_level(logging.WARNING, logger="queuewire.reference_server.quicx"):
        await run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.asyncio
async def test_an_unexpected_exception_closes_only_its_connection(caplog):
    class Exploding(QuicxEngine):
        def handle(self, conn, message):
            if message.name == "MSG_SUBMIT" and message.fields["task_type"] == "explode":
                raise RuntimeError("engine bug")
            return super().handle(conn, message)

    async def scenario():
        async with QuicxServer(engine=Exploding("quicx/v1", pool_bytes=1 << 20), port=0) as server:
            victim, bystander = await Peer.open(server), await Peer.open(server)
            await victim.send(victim.enc.submit("explode", b""))
            assert await victim.eof()
            await bystander.send(bystander.enc.submit("fine", b""))
            assert (await bystander.one("MSG_OK")).fields["task_id"] == 1
            assert server.serving and server.stats().connections == 1

    with caplog.at_level(logging.ERROR, logger="queuewire.reference_server.quicx"):
        await run(scenario())
    assert any("unexpected error" in r.getMessage() and r.exc_info for r in caplog.records)


@pytest.mark.asyncio
async def test_stop_closes_every_connection():
    async def scenario():
        server = await QuicxServer("quicx/1.0.3", port=0).start()
        peers = [await Peer.open(server) for _ in range(3)]
        await peers[0].send(peers[0].enc.ready())
        await peers[0].roundtrip()
        await server.stop()
        assert all([await p.eof() for p in peers])
        assert not server.serving
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", server.port)
    await run(scenario())


# ------------------------------------------------------------- queuewire serve quicx (CLI)

async def start_cli(*args: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queuewire.cli", "serve", "quicx", "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    assert match, line + (await proc.stderr.read()).decode()
    return proc, int(match.group(1))


@pytest.mark.parametrize("profile,sig", [("quicx/v1", signal.SIGTERM),
                                         ("quicx/1.0.3", signal.SIGINT)])
@pytest.mark.asyncio
async def test_cli_serves_the_matching_client_and_refuses_the_other_profile(profile, sig):
    from queuewire.client.quicx import QuicxProducer, QuicxWorker

    spec = spec_of(profile)
    other = next(p for p in PROFILES if p != profile)

    async def scenario():
        proc, port = await start_cli("--profile", profile, "--task-types", "echo")
        try:
            ran = asyncio.Event()

            async def echo(task):
                assert task.payload == b"hi"
                ran.set()
            async with QuicxWorker(port=port, profile=profile, handlers={"echo": echo}):
                async with QuicxProducer(port=port, profile=profile) as producer:
                    result = await producer.submit("echo", b"hi")
                await ran.wait()
            assert result.task_id == 1
            assert result.status == ("done" if spec.flag("forward_results_to_producer") else "accepted")
            # the other profile's renumbered MSG_FAILED, as its worker would send it
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            frame = QuicxEncoder(other).failed(1, "x")
            kind = expected_refusal(spec, frame)
            writer.write(frame)
            (reply,) = QuicxDecoder(profile, "worker").feed(await reader.read(1024))
            assert reply.name == "MSG_ERROR" and reply.fields["error_code"] == spec.error_replies[kind]
            writer.close()
        finally:
            proc.send_signal(sig)
            out, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, err.decode()
        assert b"quicx daemon stopped (1 accepted, 1 done" in out
        assert b"Traceback" not in err

    await run(scenario())


@pytest.mark.asyncio
async def test_cli_bad_options_are_clear_errors():
    async def cli(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "queuewire.cli", "serve", "quicx", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        return proc.returncode, (out + err).decode()

    async def scenario():
        code, text = await cli("--profile", "quicx/9")
        assert code == 2 and "quicx/9" in text and "Traceback" not in text
        code, text = await cli("--pool-bytes", "100", "--port", "0")
        assert code == 2 and "--pool-bytes" in text and "Traceback" not in text
        code, text = await cli("--task-types", "a,,b", "--port", "0")
        assert code == 2 and "--task-types" in text
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = taken.sockets[0].getsockname()[1]
        try:
            code, text = await cli("--port", str(port))
        finally:
            taken.close()
        assert code == 1 and f"cannot listen on 127.0.0.1:{port}" in text
        assert "Traceback" not in text
        code, text = await cli("--help")
        for option in ("--host", "--port", "--profile", "--pool-bytes", "--task-types",
                       "--partial-frame-timeout", "--backlog"):
            assert option in text
    await run(scenario())
