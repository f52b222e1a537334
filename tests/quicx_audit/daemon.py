#!/usr/bin/env python3
"""An independent quicx/v1 daemon written from document 004 alone (stdlib only, no queuewire).

It stands for a third-party implementation a C implementer might write, so that the tests can
check queuewire's conformance suite, fuzzer and client checker against a daemon that is not
queuewire's own: the correct one, legitimate design variants (``VARIANTS``: readings of 004
the suite must not fail) and one-bug mutants (``MUTANTS``: each breaks one rule of 004 that
the suite should catch).

    async with AuditDaemon(variant="correct") as d:     # d.port
        ...
    python tests/quicx_audit/daemon.py --variant whole-frame --port 16381

Where 004 is silent, the choice made is said in a comment marked "004 is silent".
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import struct
import sys
import time
from dataclasses import dataclass, field

log = logging.getLogger("quicx_audit.daemon")

VERSION = 0x01
HEADER = struct.Struct(">BBI")          # version u8, type u8, length u32 (big-endian)
HEADER_LE = struct.Struct("<BBI")       # little-endian-lengths mutant only
# 004: 0x03 "payload too large for the largest size class"; 004 gives no figure: we take
# 64 KiB as the largest size class and compare the header's length with it.
MAX_PAYLOAD = 65536
POOL_BYTES = 1 << 20                    # pmad_bytes_total (004 gives no figure)
HEARTBEAT_IDLE_S = 0.2                  # heartbeats variant: idle time before a HEARTBEAT
LINGER_S = 1.0                          # how long a closing connection's input is drained

(SUBMIT, OK, ERROR, READY, TASK, DONE, FAILED, WAIT,
 HEARTBEAT, PONG, STATS, STATS_RESPONSE) = range(0x01, 0x0D)
E_QUEUE_FULL, E_INVALID, E_TOO_LARGE, E_UNKNOWN_TYPE = 0x01, 0x02, 0x03, 0x04

KNOWN = set(range(0x01, 0x0D))
FROM_PEER = {SUBMIT, READY, DONE, FAILED, HEARTBEAT, PONG, STATS}   # 004's direction column
ZERO_ONLY = {READY, HEARTBEAT, PONG, STATS}     # "(no payload - length = 0)"; WAIT is ours only
NOT_EMPTY = {SUBMIT, DONE, FAILED}              # their layouts start with at least one field

VARIANTS = {
    "correct": "reads frames as they arrive, refuses a bad header at once and skips its "
               "payload, keeps the connection after an error",
    "whole-frame": "reads a whole frame (header + payload) before validating anything; an "
                   "oversize length is still refused from the header",
    "close-after-error": "closes the connection right after sending any MSG_ERROR",
    "refuse-pong": "answers an unsolicited MSG_PONG with MSG_ERROR 0x02",
    "check-reason-utf8": "refuses a MSG_FAILED whose reason is not UTF-8 with 0x02 (reason "
                         "checked before the task id)",
    "check-reason-utf8-late": "as check-reason-utf8, but the task id is checked first",
    "heartbeats": "also sends MSG_HEARTBEAT to a worker connection idle for 200 ms",
}

MUTANTS = {
    "task-typelen-off-by-one": ("MSG_TASK's type_len byte is len(type)+1",
                                "MSG_TASK [task_id][type_len][type : type_len bytes]"),
    "little-endian-lengths": ("every frame the daemon sends has a little-endian length",
                              "length: 32-bit big-endian unsigned integer"),
    "oversize-code-0x02": ("a payload over the largest size class gets 0x02, not 0x03",
                           "0x03 payload too large for the largest size class"),
    "lose-task-on-disconnect": ("a task held by a worker that disconnects is dropped",
                                "none verbatim: 004 is silent, but names only DONE / FAILED "
                                "as a task's end (queuewire: QX-WORKER-1, a SHOULD)"),
    "swapped-stats": ("STATS_RESPONSE has queue_depth and workers_total swapped",
                      "[queue_depth : 4][workers_total : 4][workers_idle : 4]..."),
    "ok-id-little-endian": ("MSG_OK's task id is little-endian",
                            "All integers are big-endian"),
    "no-pong": ("MSG_HEARTBEAT is not answered",
                "the receiver replies with MSG_PONG"),
    "accept-bad-version": ("frames of any version are processed as version 1",
                           "The daemon rejects any other version with MSG_ERROR 0x02"),
    "no-wait": ("READY on an empty queue gets no answer; a task is pushed when one arrives",
                "Sent in place of MSG_TASK when the queue is empty"),
    "wait-with-payload": ("MSG_WAIT carries a 1-byte payload",
                          "MSG_WAIT (no payload - length = 0)"),
    "unknown-type-code-0x04": ("an unknown message type gets 0x04 instead of 0x02",
                               "0x02 invalid message (bad version / length / type)"),
    "done-keeps-slot": ("MSG_DONE does not free the task's bytes (pmad_bytes_used only grows)",
                        "The daemon frees the task slot back to PMAD"),
}

# behaviour switches of each variant and mutant (attributes of AuditDaemon, defaults below)
_SWITCHES: dict[str, dict[str, object]] = {
    "correct": {},
    "whole-frame": {"whole_frame": True},
    "close-after-error": {"close_after_error": True},
    "refuse-pong": {"refuse_pong": True},
    "check-reason-utf8": {"reason_utf8": "before-id"},
    "check-reason-utf8-late": {"reason_utf8": "after-id"},
    "heartbeats": {"heartbeat_idle": HEARTBEAT_IDLE_S},
    "task-typelen-off-by-one": {"task_typelen_extra": 1},
    "little-endian-lengths": {"header": HEADER_LE},
    "oversize-code-0x02": {"oversize_code": E_INVALID},
    "lose-task-on-disconnect": {"requeue_on_close": False},
    "swapped-stats": {"swap_stats": True},
    "ok-id-little-endian": {"ok_id_order": "<"},
    "no-pong": {"answer_heartbeat": False},
    "accept-bad-version": {"check_version": False},
    "no-wait": {"send_wait": False},
    "wait-with-payload": {"wait_body": b"\x00"},
    "unknown-type-code-0x04": {"unknown_type_code": E_UNKNOWN_TYPE},
    "done-keeps-slot": {"free_on_done": False},
}


@dataclass
class Task:
    task_id: int
    type: bytes
    payload: bytes
    size: int           # bytes held in the pool: the SUBMIT payload's length


@dataclass(eq=False)
class Conn:
    writer: asyncio.StreamWriter
    worker: bool = False                    # sent MSG_READY at least once
    held: dict[int, Task] = field(default_factory=dict)     # tasks in flight on it
    last_io: float = field(default_factory=time.monotonic)
    closed: bool = False


class _Close(Exception):
    """End this connection (after an oversize frame, or any error with close-after-error)."""


class AuditDaemon:
    # defaults = the correct daemon
    whole_frame = False
    close_after_error = False
    refuse_pong = False
    reason_utf8 = ""                # "", "before-id", "after-id"
    heartbeat_idle: float | None = None
    task_typelen_extra = 0
    header = HEADER
    oversize_code = E_TOO_LARGE
    requeue_on_close = True
    swap_stats = False
    ok_id_order = ">"
    answer_heartbeat = True
    check_version = True
    send_wait = True
    wait_body = b""
    unknown_type_code = E_INVALID
    free_on_done = True

    def __init__(self, variant: str = "correct", *, task_types: set[str] | None = None,
                 pool_bytes: int = POOL_BYTES):
        if variant not in _SWITCHES:
            raise ValueError(f"unknown variant {variant!r}: {sorted(_SWITCHES)}")
        self.variant = variant
        for name, value in _SWITCHES[variant].items():
            setattr(self, name, value)
        self.task_types = {t.encode() for t in task_types} if task_types is not None else None
        self.pool_bytes = pool_bytes
        self.queue: collections.deque[Task] = collections.deque()
        self.used = 0
        self.next_id = 1
        self.conns: set[Conn] = set()
        self.waiters: collections.deque[Conn] = collections.deque()     # no-wait mutant
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> AuditDaemon:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.conns):
            conn.writer.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> AuditDaemon:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- sending ---------------------------------------------------------------------------
    def _send(self, conn: Conn, mtype: int, body: bytes = b"") -> None:
        if conn.closed or conn.writer.is_closing():
            return
        conn.writer.write(self.header.pack(VERSION, mtype, len(body)) + body)
        conn.last_io = time.monotonic()

    def _error(self, conn: Conn, code: int, message: str) -> None:
        log.debug("error 0x%02x to %s: %s", code, conn.writer.get_extra_info("peername"), message)
        self._send(conn, ERROR, bytes([code]) + message.encode())
        if self.close_after_error:
            raise _Close

    def _give(self, conn: Conn, task: Task) -> None:
        conn.held[task.task_id] = task
        tlen = (len(task.type) + self.task_typelen_extra) & 0xFF
        self._send(conn, TASK, struct.pack(">IB", task.task_id, tlen) + task.type + task.payload)

    # --- one connection --------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        conn = Conn(writer)
        self.conns.add(conn)
        beat = (asyncio.create_task(self._heartbeats(conn))
                if self.heartbeat_idle is not None else None)
        try:
            try:
                await self._frames(conn, reader)
            except _Close:
                await self._linger(conn, reader)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass                                    # closed mid-frame, reset, or stop()
        except Exception:                           # never crash the daemon on any input
            log.exception("connection %s", writer.get_extra_info("peername"))
        finally:
            if beat is not None:
                beat.cancel()
            self._closed(conn)
            with contextlib.suppress(Exception):
                writer.close()
            self._handlers.discard(asyncio.current_task())

    async def _linger(self, conn: Conn, reader: asyncio.StreamReader) -> None:
        """Close our side after the error went out, reading what the peer still sends for a
        while: closing a socket with unread input makes the kernel send RST, and the peer
        may then lose the MSG_ERROR it has not read yet."""
        with contextlib.suppress(Exception):
            await conn.writer.drain()
            conn.writer.write_eof()
            async with asyncio.timeout(LINGER_S):
                while await reader.read(65536):
                    pass

    async def _frames(self, conn: Conn, reader: asyncio.StreamReader) -> None:
        while True:
            head = await reader.readexactly(HEADER.size)
            conn.last_io = time.monotonic()
            version, mtype, length = HEADER.unpack(head)
            if self.whole_frame:
                self._oversize(conn, length)
                body = await reader.readexactly(length)
                problem = self._version_problem(version) or self._header_problem(mtype, length)
                if problem:
                    self._error(conn, *problem)
                    continue
            else:
                problem = self._version_problem(version)
                if problem:
                    self._error(conn, *problem)
                    if length > MAX_PAYLOAD:    # cannot be skipped safely: close
                        raise _Close
                    await self._skip(reader, length)
                    continue
                self._oversize(conn, length)
                problem = self._header_problem(mtype, length)
                if problem:
                    self._error(conn, *problem)
                    await self._skip(reader, length)
                    continue
                body = await reader.readexactly(length)
            self._handle(conn, mtype, body)
            await conn.writer.drain()

    def _oversize(self, conn: Conn, length: int) -> None:
        # 004 is silent on what follows: the payload could be up to 4 GiB, so it is not
        # skipped; the error is sent from the header alone and the connection closed.
        if length > MAX_PAYLOAD:
            self._send(conn, ERROR, bytes([self.oversize_code])
                       + f"payload of {length} bytes is over {MAX_PAYLOAD}".encode())
            raise _Close

    @staticmethod
    async def _skip(reader: asyncio.StreamReader, length: int) -> None:
        while length:
            chunk = await reader.read(min(length, 65536))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", length)
            length -= len(chunk)

    def _version_problem(self, version: int) -> tuple[int, str] | None:
        if self.check_version and version != VERSION:
            return E_INVALID, f"bad version 0x{version:02x}"
        return None

    def _header_problem(self, mtype: int, length: int) -> tuple[int, str] | None:
        if mtype not in KNOWN:
            return self.unknown_type_code, f"unknown message type 0x{mtype:02x}"
        if mtype not in FROM_PEER:
            return E_INVALID, f"message type 0x{mtype:02x} is sent by the daemon only"
        if mtype in ZERO_ONLY and length:
            return E_INVALID, f"message type 0x{mtype:02x} takes no payload"
        if mtype in NOT_EMPTY and not length:
            return E_INVALID, f"message type 0x{mtype:02x} needs a payload"
        if mtype == DONE and length != 4:
            return E_INVALID, "MSG_DONE payload must be exactly 4 bytes"
        if mtype == FAILED and length < 4:
            return E_INVALID, "MSG_FAILED payload shorter than its task id"
        return None

    # --- messages --------------------------------------------------------------------------
    def _handle(self, conn: Conn, mtype: int, body: bytes) -> None:
        if mtype == SUBMIT:
            self._submit(conn, body)
        elif mtype == READY:
            self._ready(conn)
        elif mtype in (DONE, FAILED):
            self._result(conn, mtype, body)
        elif mtype == HEARTBEAT:
            if self.answer_heartbeat:
                self._send(conn, PONG)
        elif mtype == PONG:
            # 004 is silent on a PONG nobody asked for: the correct daemon ignores it
            if self.refuse_pong:
                self._error(conn, E_INVALID, "unsolicited MSG_PONG")
        elif mtype == STATS:
            self._stats(conn)

    def _submit(self, conn: Conn, body: bytes) -> None:
        type_len = body[0]
        if type_len > len(body) - 1:
            self._error(conn, E_INVALID, "type_len exceeds the payload")
            return
        # 004 is silent on an empty type (type_len 0) and on non-UTF-8 types: both accepted
        ttype, payload = body[1:1 + type_len], body[1 + type_len:]
        if self.task_types is not None and ttype not in self.task_types:
            self._error(conn, E_UNKNOWN_TYPE, f"unknown task type {ttype!r}")
            return
        size = len(body)
        if self.used + size > self.pool_bytes:
            self._error(conn, E_QUEUE_FULL, "queue full")
            return
        task = Task(self.next_id, ttype, payload, size)
        self.next_id = self.next_id % 0xFFFFFFFF + 1        # 004 is silent on wrap-around
        self.used += size
        self.queue.append(task)
        self._send(conn, OK, struct.pack(self.ok_id_order + "I", task.task_id))
        while self.waiters and self.queue:                  # no-wait mutant: push
            waiter = self.waiters.popleft()
            if not waiter.closed:
                self._give(waiter, self.queue.popleft())

    def _ready(self, conn: Conn) -> None:
        # 004 is silent on a READY from a connection that holds a task: each READY asks for
        # one more task, so a connection may hold several.
        conn.worker = True
        if self.queue:
            self._give(conn, self.queue.popleft())
        elif self.send_wait:
            self._send(conn, WAIT, self.wait_body)
        else:
            self.waiters.append(conn)

    def _result(self, conn: Conn, mtype: int, body: bytes) -> None:
        task_id = struct.unpack(">I", body[:4])[0]
        reason = body[4:]
        if mtype == FAILED and self.reason_utf8 == "before-id" and not _utf8(reason):
            self._error(conn, E_INVALID, "reason is not UTF-8")
            return
        if task_id not in conn.held:
            self._error(conn, E_INVALID, f"task {task_id} is not in flight on this connection")
            return
        if mtype == FAILED and self.reason_utf8 == "after-id" and not _utf8(reason):
            self._error(conn, E_INVALID, "reason is not UTF-8")
            return
        task = conn.held.pop(task_id)
        if mtype == FAILED:
            # 004 is silent on retries and on how a producer observes the result: a failed
            # task is logged and dropped; no message forwards results to producers.
            log.info("task %d failed: %r", task_id, reason.decode("utf-8", "replace"))
        if mtype == FAILED or self.free_on_done:
            self.used -= task.size
        # 004 gives MSG_DONE / MSG_FAILED no reply: the worker sends MSG_READY for more.

    def _stats(self, conn: Conn) -> None:
        # workers_total: open connections that sent MSG_READY; workers_idle: those of them
        # holding no task (004 is silent on both definitions)
        workers = [c for c in self.conns if c.worker and not c.closed]
        total, idle = len(workers), sum(1 for c in workers if not c.held)
        depth = len(self.queue)
        if self.swap_stats:
            depth, total = total, depth
        self._send(conn, STATS_RESPONSE,
                   struct.pack(">IIIQQ", depth, total, idle, self.used, self.pool_bytes))

    def _closed(self, conn: Conn) -> None:
        conn.closed = True
        self.conns.discard(conn)
        with contextlib.suppress(ValueError):
            self.waiters.remove(conn)
        tasks = sorted(conn.held.values(), key=lambda t: t.task_id)
        conn.held.clear()
        if self.requeue_on_close:
            # 004 is silent: the usual choice, a held task goes back to the head of the queue
            self.queue.extendleft(reversed(tasks))
            while self.waiters and self.queue:
                waiter = self.waiters.popleft()
                if not waiter.closed:
                    self._give(waiter, self.queue.popleft())
        else:
            for task in tasks:
                self.used -= task.size

    async def _heartbeats(self, conn: Conn) -> None:
        assert self.heartbeat_idle is not None
        while not conn.closed:
            await asyncio.sleep(self.heartbeat_idle / 4)
            if conn.worker and time.monotonic() - conn.last_io >= self.heartbeat_idle:
                self._send(conn, HEARTBEAT)     # its PONG is ignored like any other


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def _main(args: argparse.Namespace) -> None:
    types = set(args.task_types.split(",")) if args.task_types else None
    daemon = AuditDaemon(args.variant, task_types=types, pool_bytes=args.pool_bytes)
    await daemon.start(args.host, args.port)
    print(f"listening on {args.host}:{daemon.port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await daemon.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="correct", choices=sorted(_SWITCHES))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pool-bytes", type=int, default=POOL_BYTES)
    parser.add_argument("--task-types", default="", help="comma-separated; default: any")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))


if __name__ == "__main__":
    main()
