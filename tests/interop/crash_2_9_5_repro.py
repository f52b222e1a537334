"""Crash the real bunqueue 2.9.5 server with one PULL whose queue name is a number.

Usage: python tests/interop/crash_2_9_5_repro.py HOST PORT [--control]

Sends one request on one TCP connection to a freshly started bunqueue 2.9.5:

    {"cmd": "PULL", "queue": 5, "timeout": 1000, "reqId": "1"}

``validateQueueName`` lets the integer 5 through (``(5).length`` is undefined and
``/^[a-zA-Z0-9_\\-.:]+$/.test(5)`` tests the string "5"), so ``pullJob`` finds the queue empty
and calls ``shard.waitForJob(5, <ms left>, signal)``. Because its first argument is a number,
``Shard.waitForJob`` takes its (timeout, signal) overload: ``WaiterManager.waitForJob`` uses 5
as the timeout and the remaining milliseconds (about 1000, a number) as the abort signal. The
5 ms timer's ``settle`` then calls ``waiter.signal.removeEventListener(...)`` on that number,
a TypeError thrown from a timer callback: the server process shuts down
("waiter.signal.removeEventListener is not a function", dist/domain/queue/waiterManager.js:53).

``--control`` sends the same request with the queue name as the string "5" instead; the
server answers (no job, after the 1 s timeout) and stays up.

Only socket, struct and msgpack are used. Keep HOST on 127.0.0.1.
"""
from __future__ import annotations

import socket
import struct
import sys
import time

import msgpack


def frame(obj: dict) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def read_replies(sock: socket.socket, wait: float) -> tuple[list, bool]:
    """Replies that arrive within ``wait`` seconds, and whether the peer closed/reset."""
    buf = b""
    replies: list = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:
            return replies, True
        if not chunk:
            return replies, True
        buf += chunk
        while len(buf) >= 4:
            (n,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + n:
                break
            replies.append(msgpack.unpackb(buf[4:4 + n], raw=False, strict_map_key=False))
            buf = buf[4 + n:]
    return replies, False


def alive(host: str, port: int) -> bool:
    """Does a fresh connection get an answer to Ping?"""
    try:
        with socket.create_connection((host, port), timeout=2.0) as s:
            s.sendall(frame({"cmd": "Ping", "reqId": "ping"}))
            replies, _ = read_replies(s, 2.0)
            return any(isinstance(r, dict) and r.get("reqId") == "ping" for r in replies)
    except OSError:
        return False


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    control = "--control" in sys.argv[1:]
    if len(args) != 2:
        print(__doc__)
        return 2
    host, port = args[0], int(args[1])
    print(f"server alive before: {alive(host, port)}")
    request = {"cmd": "PULL", "queue": "5" if control else 5, "timeout": 1000, "reqId": "1"}
    with socket.create_connection((host, port), timeout=5.0) as sock:
        print(f"sent: {request!r}")
        sock.sendall(frame(request))
        replies, closed = read_replies(sock, 3.0)
    for reply in replies:
        print(f"reply: {reply!r}")
    print(f"connection died: {closed}")
    time.sleep(0.5)
    up = alive(host, port)
    print(f"server alive after: {up}")
    if control:
        return 0 if up else 1
    print("CRASH REPRODUCED" if not up else "no crash")
    return 0 if not up else 1


if __name__ == "__main__":
    sys.exit(main())
