"""Issue 22 item 8: unauthenticated peers pin memory (BQ-SAFE-1, BQ-FRAME-2, BQ-FLOW-3).

Before the fix, 16 connections without a token, each holding a 63 MiB partial frame, grew the
server from 61 to 1,070 MB in 2 s, and one byte every 59 s kept it so (the partial-frame
timeout was an idle timeout). Now, with auth tokens configured:

* before Auth a frame may declare at most ``safeguards.pre_auth_frame_bytes``; a larger length
  prefix is answered ``frame_too_large`` (with that bound as its max) and the connection is
  closed before any of the payload is buffered;
* the partial-frame timeout is a total deadline per frame, counted from its first byte;
* the half-received frames of all connections hold at most ``safeguards.max_buffered_bytes``
  (a connection whose frame does not fit is not read until others complete theirs);
* at most ``safeguards.max_connections`` TCP connections are served at once.

The done-when figures run the server as a process (``queuewire serve bunqueue
--auth-tokens``) so that its RSS is its own; the others run it in process, with a bound
lowered on the instance where the spec's value would make the test heavy.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from typing import Any

import msgpack
import pytest

from latency import assert_prompt
from queuewire.codecs.bunqueue import FrameDecoder
from queuewire.reference_server.bunqueue import BunqueueServer
from queuewire.spec import load_profile
from serve_process import proc_status_bytes, recv_frame, start_serve, stop_serve

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
SAFE = MODEL.safeguards
PRE_AUTH = SAFE["pre_auth_frame_bytes"]
TOKEN = "s3cret"
GUARD = 20.0          # seconds: a hang fails the test instead of stalling the run
LATENCY_BOUND = 0.1   # seconds: the bound for another connection's Ping
RSS_BOUND = 150 * 1024 * 1024  # bytes: the bound for the server's growth
HUGE = 63 * 1024 * 1024        # the partial frame

pytestmark = pytest.mark.asyncio


def frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


def padded(obj: dict, size: int) -> bytes:
    """A frame of exactly ``size`` payload bytes: ``obj`` with a ``pad`` string."""
    base = len(msgpack.packb({**obj, "pad": ""}))
    for extra in range(6):  # the string header grows by a few bytes with the length
        payload = msgpack.packb({**obj, "pad": "x" * max(0, size - base - extra)})
        if len(payload) == size:
            return struct.pack(">I", size) + payload
    raise AssertionError(f"cannot pad to {size}")


def message(name: str, **fields: Any) -> str:
    return MODEL.errors[name].message.format(**fields)


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _call(sock: socket.socket, obj: dict) -> tuple[Any, float]:
    start = time.perf_counter()
    sock.sendall(frame(obj))
    reply = recv_frame(sock)
    return reply, time.perf_counter() - start


class Peer:
    """A raw asyncio client: frames out, frames in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder(PROFILE, check_depth=False)
        self.inbox: list[Any] = []
        self.dropped = b""  # what closed_by_server read

    @classmethod
    async def open(cls, port: int) -> Peer:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def recv(self, timeout: float = 5.0) -> Any:
        try:
            async with asyncio.timeout(timeout):
                while not self.inbox:
                    data = await self.reader.read(1 << 16)
                    if not data:
                        raise EOFError("the server closed the connection")
                    self.inbox.extend(self.decoder.feed(data))
        except TimeoutError:
            raise AssertionError(f"no reply within {timeout} s") from None
        return self.inbox.pop(0)

    async def request(self, obj: Any, timeout: float = 5.0) -> Any:
        self.writer.write(frame(obj))
        return await self.recv(timeout)

    async def closed_by_server(self, timeout: float) -> bool:
        """Whether the server ends the connection within ``timeout`` (whatever it sends
        first is read and dropped)."""
        try:
            async with asyncio.timeout(timeout):
                while data := await self.reader.read(1 << 16):
                    self.dropped += data
                return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


# -- 1. the done-when figure: 16 unauthenticated 63 MiB frames -------------------------------
def _send_partial_frame(sock: socket.socket, stop: threading.Event) -> None:
    """Declare a 63 MiB frame and send all of it but its last byte, as fast as the server
    reads, then hold it until ``stop``."""
    chunk = memoryview(b"\x00" * (1 << 20))
    sock.settimeout(0.2)
    sock.sendall(struct.pack(">I", HUGE))
    left = HUGE - 1
    while not stop.is_set():
        if not left:
            stop.wait(0.05)
            continue
        try:
            left -= sock.send(chunk[:min(left, len(chunk))])
        except TimeoutError:
            continue


def _flood_unauthenticated(port: int, stop: threading.Event, refusals: list[Any]) -> None:
    """Send a 63 MiB partial frame without authenticating; when the server closes, connect
    again. Records the first replies the server sends such a connection."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                _send_partial_frame(sock, stop)
        except OSError:
            pass
        try:
            if len(refusals) < 4:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                    sock.sendall(struct.pack(">I", HUGE) + b"\x00" * 1000)
                    refusals.append(recv_frame(sock))
        except (OSError, EOFError):
            pass
        stop.wait(0.02)


async def test_16_unauthenticated_63mib_frames_cost_under_150mb_and_ping_stays_under_100ms():
    """Issue 22 item 8, done-when figure (BQ-SAFE-1 ``pre_auth_frame_bytes``): with auth
    tokens configured, 16 connections that never authenticate each declare a 63 MiB frame and
    send all of it but a byte as fast as they can (connecting again when closed) for 2 s; meanwhile an
    authenticated connection's Ping is answered within 100 ms and the server grows by under
    150 MB. Each of those connections is answered ``frame_too_large`` with the pre-auth bound
    as its max."""
    proc, port = start_serve("bunqueue", "--auth-tokens", TOKEN)
    stop = threading.Event()
    refusals: list[Any] = []
    threads = [threading.Thread(target=_flood_unauthenticated, args=(port, stop, refusals),
                                daemon=True) for _ in range(16)]
    latencies: list[float] = []
    grown = 0
    try:
        before = proc_status_bytes(proc.pid, "VmRSS")
        with _connect(port) as sock:
            assert _call(sock, {"cmd": "Auth", "token": TOKEN, "reqId": "a"})[0]["ok"] is True
            for t in threads:
                t.start()
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                reply, took = _call(sock, {"cmd": "Ping", "reqId": "p"})
                assert reply.get("ok") is True, reply
                latencies.append(took)
                grown = max(grown, proc_status_bytes(proc.pid, "VmRSS") - before)
                if grown >= RSS_BOUND:
                    break  # failed already: do not let the server take all the memory
                time.sleep(0.03)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        stop_serve(proc)
    assert grown < RSS_BOUND, f"the server grew by {grown / 2 ** 20:.0f} MiB"
    assert_prompt(latencies, LATENCY_BOUND, "authenticated Ping")
    assert refusals and all(r == {"ok": False, "error": message(
        "frame_too_large", length=HUGE, max=PRE_AUTH)} for r in refusals), refusals[:2]


# -- 2. the pre-auth bound, exactly -----------------------------------------------------------
async def test_before_auth_only_frames_up_to_the_pre_auth_bound_are_read():
    """BQ-SAFE-1 ``pre_auth_frame_bytes`` with BQ-FRAME-2's reaction: before Auth, a frame of
    exactly the bound is read (and refused ``not_authenticated``: BQ-AUTH-2), one byte more
    is answered ``frame_too_large`` naming the bound and the connection is closed; after Auth
    the profile's max_frame_bytes applies again, also to a large frame pipelined right behind
    the Auth in the same write; without tokens there is no pre-auth bound at all."""
    async with asyncio.timeout(GUARD):
        async with BunqueueServer(PROFILE, port=0, auth_tokens=[TOKEN]) as server:
            peer = await Peer.open(server.port)
            peer.writer.write(padded({"cmd": "Ping", "reqId": "edge"}, PRE_AUTH))
            assert await peer.recv() == {"ok": False, "error": message("not_authenticated"),
                                         "reqId": "edge"}
            peer.writer.write(struct.pack(">I", PRE_AUTH + 1) + b"\x80")
            assert await peer.recv() == {"ok": False, "error": message(
                "frame_too_large", length=PRE_AUTH + 1, max=PRE_AUTH)}
            assert await peer.closed_by_server(5.0)
            peer.close()

            authed = await Peer.open(server.port)
            assert (await authed.request({"cmd": "Auth", "token": TOKEN}))["ok"] is True
            big = {"cmd": "PUSH", "queue": "big", "data": {"blob": "y" * (4 * PRE_AUTH)}}
            assert (await authed.request({**big, "reqId": "b1"}))["ok"] is True
            authed.close()

            eager = await Peer.open(server.port)  # Auth and a large PUSH in one write
            eager.writer.write(frame({"cmd": "Auth", "token": TOKEN, "reqId": "a"})
                               + frame({**big, "reqId": "b2"}) + frame({"cmd": "Ping",
                                                                        "reqId": "p"}))
            replies = [await eager.recv() for _ in range(3)]
            assert [(r["reqId"], r["ok"]) for r in replies] == \
                [("a", True), ("b2", True), ("p", True)], replies
            eager.close()

        async with BunqueueServer(PROFILE, port=0) as open_server:
            anyone = await Peer.open(open_server.port)
            assert (await anyone.request({**big, "reqId": "b3"}))["ok"] is True
            anyone.close()


# -- 3. the partial-frame timeout is a deadline per frame (BQ-FLOW-3) ------------------------
async def test_a_frame_trickled_a_byte_at_a_time_is_closed_at_its_deadline():
    """Issue 22 item 8 (a total deadline per frame): a peer that sends one byte of a frame
    every 0.1 s, well within the 0.5 s partial-frame timeout each time, is still closed once
    the frame is 0.5 s old; a connection idle between frames is kept."""
    async with asyncio.timeout(GUARD), \
            BunqueueServer(PROFILE, port=0, partial_frame_timeout=0.5) as server:
        idle = await Peer.open(server.port)
        trickle = await Peer.open(server.port)
        data = struct.pack(">I", 1000) + b"\xa0" * 1000
        closed = asyncio.create_task(trickle.closed_by_server(5.0))
        for i in range(40):  # 4 s of trickling unless the server closes first
            if closed.done():
                break
            try:
                trickle.writer.write(data[i:i + 1])
            except ConnectionError:
                break
            await asyncio.sleep(0.1)
        assert closed.done() and closed.result(), \
            "a frame trickled a byte every 0.1 s was held for 4 s past a 0.5 s timeout"
        assert (await idle.request({"cmd": "Ping"}))["ok"] is True
        idle.close()
        trickle.close()


async def test_the_frame_deadline_does_not_count_the_servers_own_wait():
    """BQ-FLOW-3 with BQ-PIPE-2: the deadline counts the peer's time, not the server's. A
    peer fills its ``max_in_flight`` slots with long polls (1.2 s) and pipelines a Ping and
    the first bytes of another frame behind them; the server waits for a slot before it
    handles that read, longer than the 0.5 s timeout, and the frame, completed meanwhile,
    is still answered."""
    limit = int(PROFILE.limit("max_in_flight").value)
    async with asyncio.timeout(GUARD), \
            BunqueueServer(PROFILE, port=0, partial_frame_timeout=0.5) as server:
        peer = await Peer.open(server.port)
        spec = PROFILE.model     # pipelining is protocol v2's: Hello first (BQ-HELLO-3)
        peer.writer.write(frame({"cmd": "Hello", "protocolVersion": spec.protocol_version,
                                 "capabilities": list(spec.capabilities), "reqId": "hello"}))
        assert (await peer.recv(5.0))["reqId"] == "hello"
        polls = b"".join(frame({"cmd": "PULL", "queue": "none", "timeout": 1200,
                                "reqId": f"poll{i}"}) for i in range(limit))
        late = frame({"cmd": "Ping", "reqId": "late"})
        peer.writer.write(polls + frame({"cmd": "Ping", "reqId": "first"}) + late[:6])
        await asyncio.sleep(0.3)
        peer.writer.write(late[6:])
        got = [(await peer.recv(5.0))["reqId"] for _ in range(limit + 2)]
        # both Pings answered (none dropped by the deadline); not their order among the polls'
        # answers, which all come due at once and race under load
        assert "late" in got and "first" in got, got[-3:]
        assert sorted(got) == sorted([f"poll{i}" for i in range(limit)] + ["first", "late"])
        peer.close()


# -- 4. a global bound on buffered bytes ------------------------------------------------------
async def test_half_received_frames_over_all_connections_stay_within_the_budget():
    """BQ-SAFE-1 ``max_buffered_bytes`` (lowered on the server's budget to keep the test
    small; its default is the spec's): three connections start 600 KiB frames with a 1 MiB
    budget; the first takes its frame's declared size (read from its prefix, behind a bad
    frame in the same read) and is read on, the others wait (their bytes are not taken), and
    as each frame completes the next is admitted, so all three are answered, in order."""
    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0) as server:
        budget = server.frame_budget
        assert budget.limit == SAFE["max_buffered_bytes"]
        budget.limit = 1 << 20
        frames = [padded({"cmd": "Ping", "reqId": f"f{i}"}, 600 * 1024) for i in range(3)]
        peers = [await Peer.open(server.port) for _ in range(3)]
        bad = struct.pack(">I", 1) + b"\xc1"  # answered invalid_command_format, then read on
        for i, peer in enumerate(peers):  # each starts its frame, in this order
            peer.writer.write((bad if i == 0 else b"") + frames[i][:100 * 1024])
            await asyncio.sleep(0.1)
        assert budget.used == len(frames[0]) and budget.waiting == 2, \
            (budget.used, budget.waiting)
        for i, peer in enumerate(peers):
            peer.writer.write(frames[i][100 * 1024:])
        assert (await peers[0].recv())["ok"] is False
        for i, peer in enumerate(peers):
            reply = await peer.recv()
            assert reply["reqId"] == f"f{i}"  # answered, whatever the schema says of pad
        assert budget.used == 0 and budget.waiting == 0
        for peer in peers:
            peer.close()


async def test_eight_63mib_frames_hold_at_most_the_buffer_budget():
    """Issue 22 item 8 (a global bound on buffered bytes), BQ-SAFE-1 ``max_buffered_bytes``
    at its spec value, the server as a process: eight authenticated connections each declare
    a 63 MiB frame and send all of it but a byte as fast as they can for 1.5 s (504 MiB
    offered); the server holds
    at most the budget (its peak RSS grows by less than the budget and 64 MiB of slack) and
    another connection's Ping is answered within 100 ms."""
    budget = SAFE["max_buffered_bytes"]
    proc, port = start_serve("bunqueue", "--auth-tokens", TOKEN)
    stop = threading.Event()

    def sender() -> None:
        try:
            with _connect(port) as sock:
                _call(sock, {"cmd": "Auth", "token": TOKEN})
                _send_partial_frame(sock, stop)
        except OSError:
            pass

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(8)]
    latencies: list[float] = []
    try:
        before = proc_status_bytes(proc.pid, "VmHWM")
        with _connect(port) as sock:
            _call(sock, {"cmd": "Auth", "token": TOKEN})
            for t in threads:
                t.start()
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                reply, took = _call(sock, {"cmd": "Ping", "reqId": "p"})
                assert reply.get("ok") is True, reply
                latencies.append(took)
                if proc_status_bytes(proc.pid, "VmRSS") - before > budget + (128 << 20):
                    break  # failed already: do not let the server take all the memory
                time.sleep(0.03)
        grown = proc_status_bytes(proc.pid, "VmHWM") - before
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        stop_serve(proc)
    assert grown < budget + (64 << 20), f"peak RSS grew by {grown / 2 ** 20:.0f} MiB"
    assert_prompt(latencies, LATENCY_BOUND, "Ping")


# -- 5. a bound on connections ----------------------------------------------------------------
async def test_a_connection_beyond_max_connections_is_closed_at_accept():
    """BQ-SAFE-1 ``max_connections`` (lowered on the instance to keep the test small; its
    default is the spec's): with three connections open a fourth is closed at once, unserved;
    once one of the three closes, a new connection is served."""
    async with asyncio.timeout(GUARD), BunqueueServer(PROFILE, port=0) as server:
        assert server.max_connections == SAFE["max_connections"]
        server.max_connections = 3
        peers = [await Peer.open(server.port) for _ in range(3)]
        for peer in peers:
            assert (await peer.request({"cmd": "Ping"}))["ok"] is True
        extra = await Peer.open(server.port)
        extra.writer.write(frame({"cmd": "Ping"}))
        assert await extra.closed_by_server(5.0), "a fourth connection was served"
        assert extra.dropped == b"" and server.connection_count == 3
        extra.close()
        peers[0].close()
        deadline = time.monotonic() + 5.0
        while server.connection_count > 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        again = await Peer.open(server.port)
        assert (await again.request({"cmd": "Ping"}))["ok"] is True
        for peer in (*peers[1:], again):
            peer.close()
