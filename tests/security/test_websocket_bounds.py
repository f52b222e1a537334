"""Issue 22 item 4, WebSocket part (BQ-SAFE-1, BQ-PIPE-2): a ``/ws`` connection of the bunqueue
HTTP API has at most the profile's ``max_in_flight`` commands in flight (parked long polls
count), the rest wait unread in arrival order, so one peer flooding long polls neither makes
the server hold a task per message nor slows other connections; and at most
``safeguards.max_connections`` connections are served at once, one beyond refused at the
upgrade. Real sockets on 127.0.0.1 only; the flood comes from a thread with a plain socket, so
the measured latency is the server's, not the flooding client's."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import aiohttp
import pytest

from latency import assert_prompt
from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer, HttpFrontend
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
GUARD = 20.0
FLOOD = 100_000

pytestmark = pytest.mark.asyncio


def ws_frames(messages: list[str]) -> bytes:
    """Client text frames (masked with the all-zero key, so the payload reads as is)."""
    out = bytearray()
    for text in messages:
        data = text.encode()
        n = len(data)
        if n < 126:
            out += bytes((0x81, 0x80 | n))
        else:
            out += bytes((0x81, 0x80 | 126)) + n.to_bytes(2, "big")
        out += b"\0\0\0\0" + data
    return bytes(out)


def open_raw_websocket(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the upgrade"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


async def tcp_ping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   dec: FrameDecoder, enc: FrameEncoder, req_id: str) -> None:
    writer.write(enc.encode({"cmd": "Ping", "reqId": req_id}))
    while True:
        for msg in dec.feed(await reader.read(65536)):
            if msg.get("reqId") == req_id:
                assert msg["ok"] is True
                return


async def test_a_websocket_flooding_long_polls_holds_at_most_max_in_flight():
    """Issue 22 item 4 (WebSocket): one WebSocket sending 100,000 ``PULL timeout:60000``
    never has more than ``max_in_flight`` polls parked nor the server a task per message,
    another WebSocket's and a TCP connection's Ping stay under 100 ms throughout, and closing
    the flooding socket releases its polls."""
    limit = int(PROFILE.limit("max_in_flight").value)
    frames = ws_frames([json.dumps({"cmd": "PULL", "queue": "empty", "timeout": 60000,
                                    "reqId": str(i)}) for i in range(FLOOD)])

    async def go():
        server = BunqueueServer(PROFILE, "127.0.0.1", 0, http_port=0)
        await server.start()
        front = server.http
        sock = await asyncio.to_thread(open_raw_websocket, front.port)
        sock.settimeout(None)
        baseline_tasks = len(asyncio.all_tasks())

        def flood() -> None:
            try:
                sock.sendall(frames)  # blocks once the server stops reading: that is the point
            except OSError:
                pass

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        try:
            async with aiohttp.ClientSession() as http:
                ws = await http.ws_connect(f"{front.url}/ws")
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                dec, enc = FrameDecoder(PROFILE), FrameEncoder(PROFILE)
                peak_parked = peak_tasks = 0
                latencies: list[float] = []
                end = time.monotonic() + 1.5
                n = 0
                while time.monotonic() < end:
                    n += 1
                    peak_parked = max(peak_parked, front._room.parked)
                    peak_tasks = max(peak_tasks, len(asyncio.all_tasks()) - baseline_tasks)
                    t0 = time.perf_counter()
                    await ws.send_json({"cmd": "Ping", "reqId": f"p{n}"})
                    while (await ws.receive_json()).get("reqId") != f"p{n}":
                        pass
                    await tcp_ping(reader, writer, dec, enc, f"t{n}")
                    latencies.append(time.perf_counter() - t0)
                    await asyncio.sleep(0.02)
                peak_parked = max(peak_parked, front._room.parked)
                assert peak_parked <= limit, (
                    f"{peak_parked} polls of one WebSocket parked at once (max_in_flight {limit})")
                assert peak_tasks <= limit + 20, f"{peak_tasks} tasks beyond the baseline"
                assert_prompt(latencies, 0.1, "Ping during the flood")
                await ws.close()
                writer.close()
            sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked sendall; the peer is gone
            sock.close()
            deadline = time.monotonic() + 5.0
            while front._room.parked or front.websockets:
                assert time.monotonic() < deadline, (
                    f"{front._room.parked} polls still parked after the flooding socket closed")
                await asyncio.sleep(0.02)
        finally:
            sock.close()
            await server.stop()
            await asyncio.to_thread(sender.join, 5.0)

    await asyncio.wait_for(go(), GUARD)


async def test_websockets_beyond_max_connections_are_refused_at_the_upgrade():
    """Issue 22 item 4 (WebSocket), BQ-SAFE-1 ``max_connections``: the frontend serves at most
    that many WebSockets at once (the bound is lowered on the instance to keep the test
    small; its default is the spec's), one more is refused with 503 before it is upgraded,
    and a slot freed by a close is usable again."""
    assert HttpFrontend(BunqueueEngine(PROFILE)).max_connections == \
        PROFILE.model.safeguards["max_connections"]

    async def go():
        front = HttpFrontend(BunqueueEngine(PROFILE), "127.0.0.1", 0)
        front.max_connections = 2
        await front.start()
        try:
            async with aiohttp.ClientSession() as http:
                first = await http.ws_connect(f"{front.url}/ws")
                second = await http.ws_connect(f"{front.url}/ws")
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(f"{front.url}/ws")
                assert refused.value.status == 503
                await first.close()
                deadline = time.monotonic() + 5.0
                while front.websockets > 1:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
                third = await http.ws_connect(f"{front.url}/ws")
                await third.send_json({"cmd": "Ping", "reqId": "x"})
                assert (await asyncio.wait_for(third.receive_json(), 5.0))["ok"] is True
                await second.close()
                await third.close()
        finally:
            await front.stop()

    await asyncio.wait_for(go(), GUARD)
