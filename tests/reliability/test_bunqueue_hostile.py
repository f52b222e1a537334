"""The bunqueue reference server against hostile and heavy peers, over real loopback sockets.

Each test is one finding of the hardening issue and names the rule it enforces: a request the
decoder accepted is always answered (BQ-MSGPACK-8), nesting the decoder accepts is nesting the
validator walks (BQ-MSGPACK-3), what is accepted can be delivered (BQ-MSGPACK-8), unread
replies cost bounded memory (BQ-FLOW-1), one connection's flood does not starve another
(BQ-FLOW-2), a half-received frame is not held for ever (BQ-FLOW-3), and a burst of connects
fits the listen queue. The memory and fairness tests run the server as a process
(``queuewire serve bunqueue``) so that its RSS is its own and the flooding client does not
share its event loop; the others run it in process.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from typing import Any

import aiohttp
import msgpack
import pytest
import pytest_asyncio

from latency import assert_prompt
from queuewire.codecs.bunqueue import FrameDecoder
from queuewire.reference_server.bunqueue import BunqueueServer
from queuewire.spec import load_profile
from serve_process import proc_status_bytes, recv_frame, start_serve, stop_serve

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
MAX_DEPTH = MODEL.max_nesting_depth
GUARD = 30.0          # seconds: a hang fails the test instead of stalling the run
LATENCY_BOUND = 0.1   # seconds: the bound for another connection's answer in a flood
RSS_BOUND = 100 * 1024 * 1024  # bytes: the bound for a 3,000 x GetJob(512 KB) pipeline

pytestmark = pytest.mark.asyncio


def frame(obj: Any) -> bytes:
    """A frame as a Python msgpack client writes it: 64-bit integers stay 64-bit integers."""
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


def message(name: str, **fields: Any) -> str:
    return MODEL.errors[name].message.format(**fields)


class Peer:
    """A raw asyncio client: frames out, frames in (decoded with the profile's decoder)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(PROFILE)
        self.inbox: list[Any] = []

    @classmethod
    async def open(cls, port: int) -> Peer:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, obj: Any, timeout: float = 5.0) -> Any:
        self.writer.write(frame(obj))
        return await self.recv(timeout)

    async def recv(self, timeout: float = 5.0) -> Any:
        async with asyncio.timeout(timeout):
            while not self.inbox:
                data = await self.reader.read(1 << 16)
                if not data:
                    raise EOFError("the server closed the connection")
                self.inbox.extend(self.decoder.feed(data))
        return self.inbox.pop(0)

    async def closed_by_server(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                return await self.reader.read(1 << 16) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        self.writer.close()


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest_asyncio.fixture
async def server():
    async with BunqueueServer(PROFILE, port=0, http_port=0) as srv:
        yield srv


# -- 1. a request the decoder accepted is always answered (BQ-MSGPACK-8, BQ-ENV-2) -----------
@pytest.mark.parametrize("req_id", [2 ** 53, 2 ** 64 - 1, -(2 ** 63)])
async def test_a_req_id_beyond_float64_is_echoed_and_the_connection_goes_on(server, req_id):
    peer = await Peer.open(server.port)
    reply = await peer.request({"cmd": "Ping", "reqId": req_id})
    # the envelope types reqId as a string, so this is refused, but answered, reqId unchanged
    assert reply["ok"] is False and reply["reqId"] == req_id
    assert type(reply["reqId"]) is int  # not rounded through a float64
    again = await peer.request({"cmd": "Ping", "reqId": "next"})
    assert again["ok"] is True and again["reqId"] == "next"
    peer.close()


# -- 2. the decoder's depth limit is what the validator walks (BQ-MSGPACK-3) ------------------
async def test_a_validated_field_nested_to_the_decoders_limit_gets_the_documented_error(server):
    peer = await Peer.open(server.port)
    # the top map is one level, tags MAX_DEPTH - 1 lists: exactly the decoder's limit
    reply = await peer.request({"cmd": "PUSH", "queue": "q", "data": 1,
                                "tags": nested(MAX_DEPTH - 1)})
    assert reply["ok"] is False
    assert reply["error"].startswith(message("invalid_request", detail="")), reply
    # one level more is refused by the decoder, and the connection goes on
    reply = await peer.request({"cmd": "PUSH", "queue": "q", "data": 1,
                                "tags": nested(MAX_DEPTH)})
    assert reply == {"ok": False, "error": message("invalid_command_format")}
    assert (await peer.request({"cmd": "Ping"}))["ok"] is True
    peer.close()


async def test_job_data_nested_to_the_limit_is_stored_and_delivered(server):
    peer = await Peer.open(server.port)
    data = {"x": nested(MAX_DEPTH - 2)}  # top map, data map, then the lists: MAX_DEPTH
    pushed = await peer.request({"cmd": "PUSH", "queue": "deep", "data": data})
    assert pushed["ok"] is True, pushed
    # the reply wraps data one level deeper than the request did, past what queuewire's own
    # decoder reads (BQ-MSGPACK-3 is a MAY for receivers); msgpackr, like this reader, has no
    # depth limit
    peer.writer.write(frame({"cmd": "PULL", "queue": "deep"}))
    head = await peer.reader.readexactly(4)
    pulled = msgpack.unpackb(await peer.reader.readexactly(struct.unpack(">I", head)[0]))
    assert pulled["ok"] is True and pulled["job"]["data"] == data
    peer.close()


# -- 3. what is accepted can be delivered (BQ-MSGPACK-8) --------------------------------------
async def test_job_data_with_a_64_bit_integer_is_delivered_unchanged(server):
    peer = await Peer.open(server.port)
    data = {"n": 2 ** 60, "m": -(2 ** 62) - 1}
    assert (await peer.request({"cmd": "PUSH", "queue": "big", "data": data}))["ok"] is True
    pulled = await peer.request({"cmd": "PULL", "queue": "big", "reqId": "p"})
    assert pulled["ok"] is True, pulled
    assert pulled["job"]["data"] == data
    ack = await peer.request({"cmd": "ACK", "id": pulled["job"]["id"]})
    assert ack["ok"] is True  # the job was really handed out, not stuck in active
    counts = await peer.request({"cmd": "GetJobCounts", "queue": "big"})
    assert counts["counts"]["active"] == 0 and counts["counts"]["completed"] == 1
    peer.close()


@pytest.mark.parametrize("body, rule", [
    (b'{"data": {"n": 1000000000000000000000000}}', "BQ-MSGPACK-8"),
    (b'{"data": {"s": "\\ud800"}}', "BQ-MSGPACK-8"),
    (b'{"data": ' + b"[" * 300 + b"]" * 300 + b"}", "BQ-MSGPACK-3"),
])
async def test_http_refuses_json_the_tcp_side_could_not_carry(server, body, rule):
    url = f"{server.http.url}/queues/http-big/jobs"
    json_body = {"Content-Type": "application/json"}  # else 415 (BQ-SAFE-2)
    async with aiohttp.ClientSession() as http, http.post(url, data=body,
                                                          headers=json_body) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error.startswith(message("invalid_request", detail="")) and f"[{rule}]" in error
    peer = await Peer.open(server.port)
    counts = await peer.request({"cmd": "GetJobCounts", "queue": "http-big"})
    assert counts["counts"]["waiting"] == 0  # nothing undeliverable was stored
    peer.close()


# -- 4. unread replies cost bounded memory (BQ-FLOW-1) ----------------------------------------


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _ping_latency(port: int) -> float:
    with _connect(port) as sock:
        start = time.perf_counter()
        sock.sendall(frame({"cmd": "Ping", "reqId": "probe"}))
        reply = recv_frame(sock)
        elapsed = time.perf_counter() - start
    assert reply.get("ok") is True and reply.get("reqId") == "probe", reply
    return elapsed


@pytest.fixture
def served():
    proc, port = start_serve("bunqueue")
    yield proc, port
    stop_serve(proc)


def _push_big_job(port: int, size: int) -> str:
    with _connect(port) as sock:
        sock.sendall(frame({"cmd": "PUSH", "queue": "big", "data": {"blob": "x" * size}}))
        reply = recv_frame(sock)
    assert reply["ok"] is True, reply
    return reply["id"]


def _get_jobs(job_id: str, n: int) -> bytes:
    return b"".join(frame({"cmd": "GetJob", "id": job_id, "reqId": str(i)}) for i in range(n))


async def test_a_3000_getjob_pipeline_of_a_512kb_job_grows_the_server_by_under_100mb(served):
    proc, port = served
    job_id = _push_big_job(port, 512 * 1024)
    before = proc_status_bytes(proc.pid, "VmHWM")  # peak RSS so far
    requests = _get_jobs(job_id, 3000)
    with _connect(port) as sock:
        sender = threading.Thread(target=sock.sendall, args=(requests,), daemon=True)
        sender.start()
        for i in range(3000):  # a client that reads every reply
            reply = recv_frame(sock)
            assert reply.get("ok") is True and reply.get("reqId") == str(i), str(reply)[:200]
        sender.join(GUARD)
    grown = proc_status_bytes(proc.pid, "VmHWM") - before
    assert grown < RSS_BOUND, f"peak RSS grew by {grown / 2 ** 20:.0f} MiB"


async def test_a_peer_that_never_reads_costs_bounded_memory_and_slows_only_itself(served):
    proc, port = served
    job_id = _push_big_job(port, 512 * 1024)
    before = proc_status_bytes(proc.pid, "VmRSS")
    greedy = _connect(port)
    greedy.setblocking(False)
    requests = memoryview(_get_jobs(job_id, 3000))
    sent = 0
    deadline = time.monotonic() + 3.0
    while sent < len(requests) and time.monotonic() < deadline:  # as much as the server reads
        try:
            sent += greedy.send(requests[sent:])
        except BlockingIOError:
            await asyncio.sleep(0.01)
    latencies = [_ping_latency(port) for _ in range(10)]  # another connection is served
    grown = proc_status_bytes(proc.pid, "VmRSS") - before
    greedy.close()
    assert grown < RSS_BOUND, f"RSS grew by {grown / 2 ** 20:.0f} MiB"
    latencies.append(_ping_latency(port))  # and it is still serving after the close
    assert_prompt(latencies, LATENCY_BOUND, "Ping")


# -- 5. one connection's flood does not starve another (BQ-FLOW-2) ----------------------------
async def test_another_connection_is_answered_within_100ms_during_a_stats_flood(served):
    """Two peers pipeline Stats (a small request with a costly reply) as fast as they can
    and read every reply; a third connection's Ping is still answered within 100 ms."""
    proc, port = served
    stop = threading.Event()
    flood = frame({"cmd": "Stats"}) * 3000  # 30 KB of pipelined requests per write

    def flooder() -> None:
        with _connect(port) as sock:
            sock.settimeout(0.05)
            while not stop.is_set():
                try:
                    sock.sendall(flood)
                except TimeoutError:
                    pass
                try:
                    while sock.recv(1 << 20):  # read replies as they come, and discard them
                        pass
                except (TimeoutError, BlockingIOError):
                    pass

    threads = [threading.Thread(target=flooder, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)  # the flood is under way
        latencies = []
        for _ in range(20):
            latencies.append(_ping_latency(port))
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert_prompt(latencies, LATENCY_BOUND, "Ping during the flood")


# -- 6. a half-received frame is not held for ever (BQ-FLOW-3); the listen queue --------------
async def test_a_partial_frame_idle_past_the_timeout_closes_the_connection():
    async with BunqueueServer(PROFILE, port=0, partial_frame_timeout=0.3) as srv:
        idle = await Peer.open(srv.port)        # silent between frames: kept open
        stalled = await Peer.open(srv.port)
        stalled.writer.write(frame({"cmd": "Ping"})[:7])  # a prefix and 3 payload bytes
        started = time.monotonic()
        assert await stalled.closed_by_server(timeout=5.0)
        assert time.monotonic() - started >= 0.25
        assert (await idle.request({"cmd": "Ping"}))["ok"] is True
        assert srv.connection_count == 1
        idle.close()


async def test_a_frame_arriving_slowly_within_its_deadline_is_served():
    """BQ-FLOW-3 is a deadline per frame (issue 22 item 8): a frame sent in pieces, the last
    well before the timeout counted from its first byte, is served; a trickle past it is
    closed (tests/security/test_pre_auth_memory.py)."""
    async with BunqueueServer(PROFILE, port=0, partial_frame_timeout=2.0) as srv:
        peer = await Peer.open(srv.port)
        data = frame({"cmd": "Ping", "reqId": "slow"})
        step = -(-len(data) // 5)
        for i in range(0, len(data), step):  # five pieces over about 0.25 s
            peer.writer.write(data[i:i + step])
            await asyncio.sleep(0.05)
        assert (await peer.recv())["reqId"] == "slow"
        peer.close()


def _burst_of_connects(port: int, n: int, window: float) -> int:
    """Connect ``n`` sockets at once; answer how many completed within ``window`` seconds."""
    socks, done = [], 0
    try:
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        deadline = time.monotonic() + window
        pending = list(socks)
        while pending and time.monotonic() < deadline:
            still = []
            for s in pending:
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 and _connected(s):
                    done += 1
                else:
                    still.append(s)
            pending = still
            time.sleep(0.01)
    finally:
        for s in socks:
            s.close()
    return done


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("backlog, expect_all", [(None, True), (50, False)])
async def test_a_burst_of_200_connects_fits_the_listen_queue(backlog, expect_all):
    """While the server's loop is busy, the kernel completes connects into the listen queue
    only up to its length; the rest wait for a SYN retry (a second or more). The default
    queue takes a burst of 200; a queue of 50, as a control, does not."""
    kwargs = {} if backlog is None else {"backlog": backlog}
    async with BunqueueServer(PROFILE, port=0, **kwargs) as srv:
        # the loop is blocked in this call: nothing is accepted while the burst arrives
        done = _burst_of_connects(srv.port, 200, window=0.5)
    if expect_all:
        assert done == 200
    else:
        assert done < 200


async def test_a_subscriber_that_never_reads_is_closed_when_its_events_pass_the_bound():
    """BQ-EVENT-103 (bunqueue/2.9.5): completed events carry the job's result; a subscriber
    that never reads is closed once its unsent output is over the bound, instead of
    buffering every event, and the worker producing the events goes on undisturbed."""
    profile = load_profile("bunqueue/2.9.5")
    async with BunqueueServer(profile, port=0) as srv:
        listener = await Peer.open(srv.port)
        listener.writer.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        assert (await listener.request({"cmd": "SubscribeEvents", "queue": "ev"}))["ok"]
        worker = await Peer.open(srv.port)
        result = {"blob": "r" * (1024 * 1024)}
        for i in range(40):  # 40 MiB of completed events for the listener, which never reads
            assert (await worker.request({"cmd": "PUSH", "queue": "ev", "data": i}))["ok"]
            job = (await worker.request({"cmd": "PULL", "queue": "ev"}))["job"]
            assert (await worker.request({"cmd": "ACK", "id": job["id"], "result": result}))["ok"]
            await asyncio.sleep(0)
        assert srv.connection_count == 1  # the listener was closed, the worker kept
        assert (await worker.request({"cmd": "Ping"}))["ok"] is True
        worker.close()
        listener.close()
