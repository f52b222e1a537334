#!/usr/bin/env python3
"""An independent quicx/v1 client testee written from document 004 alone (stdlib only, no
queuewire), speaking the JSON-lines testee contract of docs/conformance/client-testee.md:
one request per stdin line, one ``{"scenario", "results"}`` line per request on stdout.

    queuewire conform client --protocol quicx \\
        --testee "python tests/quicx_audit/client.py --variant correct"

Actions: ``submit`` (a producer connection per request: MSG_SUBMIT, then MSG_OK or
MSG_ERROR), ``work`` (a worker connection: MSG_READY, MSG_TASK -> handler -> MSG_DONE, or
MSG_FAILED for a type it has no handler for, then MSG_READY again; MSG_WAIT -> back off
50 ms and MSG_READY; MSG_HEARTBEAT -> MSG_PONG; a dropped connection -> reconnect and
MSG_READY; stops after ``count`` tasks) and ``sleep``. ``VARIANTS`` are legitimate readings
of 004, ``MUTANTS`` each break one of its rules.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import struct
import sys
import time

VERSION = 0x01
HEADER = struct.Struct(">BBI")
(SUBMIT, OK, ERROR, READY, TASK, DONE, FAILED, WAIT,
 HEARTBEAT, PONG, STATS, STATS_RESPONSE) = range(0x01, 0x0D)
WAIT_BACKOFF_S = 0.05           # 004: "another MSG_READY after a short backoff" (no figure)
RECONNECT_BACKOFF_S = 0.1       # 004 is silent on reconnecting: a short fixed delay
IDLE_HEARTBEAT_S = 0.1          # heartbeat-idle variant

VARIANTS = {
    "correct": "producer waits MSG_OK/MSG_ERROR; worker READY, DONE, READY again; "
               "WAIT -> 50 ms backoff -> READY; answers HEARTBEAT; reconnects on a drop",
    "stop-after-final-ready": "after its last task's DONE still sends one READY, then closes",
    "heartbeat-idle": "sends MSG_HEARTBEAT itself after 100 ms without a frame either way "
                      "and ignores the PONG",
    "no-reconnect": "a worker whose connection the daemon drops stops working and reports "
                    "the loss (004 does not make it reconnect)",
}

MUTANTS = {
    "no-ready": ("never sends MSG_READY first: it waits for a task",
                 "MSG_READY: Sent once per connection, immediately after connect"),
    "done-wrong-id": ("MSG_DONE carries task_id+1",
                      "replies with MSG_DONE or MSG_FAILED carrying the same id"),
    "done-little-endian": ("MSG_DONE's task id is little-endian",
                           "All integers are big-endian (task_id : 4 bytes)"),
    "no-pong": ("ignores the daemon's MSG_HEARTBEAT",
                "the receiver replies with MSG_PONG"),
    "submit-typelen-off-by-one": ("MSG_SUBMIT's type_len is len(type)+1",
                                  "[type_len : 1 byte][type : type_len bytes]"),
    "no-ready-after-wait": ("after MSG_WAIT never sends MSG_READY again",
                            "issues another MSG_READY after a short backoff"),
    "sync-producer": ("(debatable) the producer reads its connection only while it waits "
                      "for MSG_OK / MSG_ERROR: a daemon MSG_HEARTBEAT to an idle producer "
                      "goes unanswered until its next submit",
                      "Either side may send it; the receiver replies with MSG_PONG"),
}

_SWITCHES: dict[str, dict[str, object]] = {
    "correct": {},
    "stop-after-final-ready": {"final_ready": True},
    "heartbeat-idle": {"idle_heartbeat": IDLE_HEARTBEAT_S},
    "sync-producer": {"sync_producer": True},
    "no-reconnect": {"reconnect": False},
    "no-ready": {"ready_first": False},
    "done-wrong-id": {"done_id_delta": 1},
    "done-little-endian": {"done_id_order": "<"},
    "no-pong": {"answer_heartbeat": False},
    "submit-typelen-off-by-one": {"submit_typelen_extra": 1},
    "no-ready-after-wait": {"ready_after_wait": False},
}


class Behaviour:
    final_ready = False
    idle_heartbeat: float | None = None
    ready_first = True
    done_id_delta = 0
    done_id_order = ">"
    answer_heartbeat = True
    submit_typelen_extra = 0
    ready_after_wait = True
    sync_producer = False
    reconnect = True

    def __init__(self, variant: str):
        for name, value in _SWITCHES[variant].items():
            setattr(self, name, value)


class ActionError(Exception):
    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


class Link:
    """One TCP connection: frames out, frames in. A HEARTBEAT is answered as it arrives (by a
    reader task that runs as long as the connection, unless ``pump`` is off: then frames are
    read only while :meth:`recv` waits)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 how: Behaviour, pump: bool):
        self.reader, self.writer, self.how = reader, writer, how
        self.last_io = time.monotonic()
        self.inbox: asyncio.Queue | None = asyncio.Queue() if pump else None
        self.pump = asyncio.ensure_future(self._pump()) if pump else None

    @classmethod
    async def open(cls, host: str, port: int, how: Behaviour, pump: bool = True) -> Link:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            raise ActionError("connection_lost", f"cannot connect: {exc}") from None
        return cls(reader, writer, how, pump)

    def send(self, mtype: int, body: bytes = b"") -> None:
        self.writer.write(HEADER.pack(VERSION, mtype, len(body)) + body)
        self.last_io = time.monotonic()

    async def _read(self) -> tuple[int, bytes]:
        """The next frame other than HEARTBEAT / PONG (a HEARTBEAT is answered here)."""
        while True:
            try:
                version, mtype, length = HEADER.unpack(await self.reader.readexactly(6))
                body = await self.reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                raise ActionError("connection_lost", f"connection lost: {exc!r}") from None
            self.last_io = time.monotonic()
            if version != VERSION:
                # 004 is silent on what a client does with a bad version: skip the frame
                continue
            if mtype == HEARTBEAT:
                if self.how.answer_heartbeat:
                    self.send(PONG)
                    with contextlib.suppress(ConnectionError):
                        await self.writer.drain()
                continue
            if mtype == PONG:
                continue
            return mtype, body

    async def _pump(self) -> None:
        assert self.inbox is not None
        while True:
            try:
                self.inbox.put_nowait(await self._read())
            except ActionError as exc:
                self.inbox.put_nowait(exc)
                return

    def drop_stray(self) -> None:
        """Forget frames that came while no request was outstanding: a MSG_OK carries no
        request id, so a duplicated or unsolicited one would pass for the next reply."""
        while self.inbox is not None and not self.inbox.empty():
            item = self.inbox.get_nowait()
            if isinstance(item, ActionError):
                self.inbox.put_nowait(item)
                return
            print(f"producer: dropped a stray frame 0x{item[0]:02x}", file=sys.stderr, flush=True)

    async def recv(self) -> tuple[int, bytes]:
        if self.inbox is None:
            return await self._read()
        item = await self.inbox.get()
        if isinstance(item, ActionError):
            self.inbox.put_nowait(item)     # every later recv sees the loss too
            raise item
        return item

    async def close(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
        with contextlib.suppress(Exception):
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 1)


class Player:
    def __init__(self, request: dict, how: Behaviour):
        host, _, port = str(request["target"]).rpartition(":")
        self.host, self.port, self.how = host, int(port), how
        options = request.get("options") or {}
        self.timeout = float(options.get("timeout", 10000)) / 1000.0
        ignored = sorted(set(options) - {"timeout"})
        if ignored and how.idle_heartbeat is None:
            print(f"options with no equivalent, ignored: {ignored}", file=sys.stderr, flush=True)
        self.producer: Link | None = None
        self.ids_seen: set[bytes] = set()      # MSG_OK bodies already taken

    async def act(self, action: dict) -> object:
        op = action.get("op")
        if op == "submit":
            return await self.submit(action)
        if op == "work":
            limit = float(action.get("timeout_ms", 10000)) / 1000.0
            ids: list[int] = []
            try:
                await asyncio.wait_for(self.work(action, ids), limit)
            except TimeoutError:
                raise ActionError("timeout", f"ran {len(ids)} task(s) in time") from None
            return {"ids": ids}
        if op == "sleep":
            await asyncio.sleep(float(action.get("ms", 0)) / 1000.0)
            return None
        raise ActionError("unsupported", f"unknown op {op!r}")

    async def submit(self, action: dict) -> object:
        if action.get("wait_result"):
            # 004 has no message that forwards a task's result to its producer
            raise ActionError("unsupported", "004 defines no result message for producers")
        ttype = str(action.get("type", "")).encode()
        payload = str(action.get("payload", "")).encode()
        if self.producer is None:
            self.producer = await Link.open(self.host, self.port, self.how,
                                            pump=not self.how.sync_producer)
        link = self.producer
        link.drop_stray()
        tlen = (len(ttype) + self.how.submit_typelen_extra) & 0xFF
        link.send(SUBMIT, bytes([tlen]) + ttype + payload)
        try:
            await link.writer.drain()
            async with asyncio.timeout(self.timeout):
                while True:
                    mtype, body = await link.recv()
                    # a task id is given once: an OK repeating one is a duplicate, not ours
                    if not (mtype == OK and len(body) == 4 and body in self.ids_seen):
                        break
        except TimeoutError:
            raise ActionError("timeout", f"no MSG_OK within {self.timeout} s") from None
        except (ActionError, ConnectionError) as exc:
            self.producer = None                # the next submit connects again
            await link.close()
            if isinstance(exc, ActionError):
                raise
            raise ActionError("connection_lost", repr(exc)) from None
        if mtype == OK and len(body) == 4:
            self.ids_seen.add(body)
            return {"id": struct.unpack(">I", body)[0], "status": "accepted"}
        if mtype == ERROR and body:
            raise ActionError("refused", f"0x{body[0]:02x} {body[1:].decode('utf-8', 'replace')}")
        raise ActionError("other", f"unexpected reply type 0x{mtype:02x} ({len(body)} bytes)")

    async def work(self, action: dict, ids: list[int]) -> None:
        types = {str(t).encode() for t in action.get("types") or ()}
        want = int(action.get("count", 1))
        work_s = float(action.get("work_ms", 0)) / 1000.0
        while len(ids) < want:
            try:
                link = await Link.open(self.host, self.port, self.how)
            except ActionError:
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            try:
                await self.serve_worker(link, types, want, work_s, ids)
            except (ActionError, ConnectionError) as exc:
                if not self.how.reconnect:   # no-reconnect variant: the loss ends the work
                    raise ActionError("connection_lost", f"the daemon dropped the worker: "
                                                         f"{exc}") from None
                await asyncio.sleep(RECONNECT_BACKOFF_S)   # dropped: reconnect, READY again
            finally:
                await link.close()

    async def serve_worker(self, link: Link, types: set[bytes], want: int, work_s: float,
                           ids: list[int]) -> None:
        how = self.how
        if how.ready_first:
            link.send(READY)
        frame = asyncio.ensure_future(link.recv())
        job: asyncio.Future | None = None
        job_id = 0
        try:
            while True:
                await link.writer.drain()
                waiting = {frame} | ({job} if job else set())
                idle = None
                if how.idle_heartbeat is not None:
                    idle = max(0.0, link.last_io + how.idle_heartbeat - time.monotonic())
                done, _ = await asyncio.wait(waiting, timeout=idle,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:                                # heartbeat-idle variant
                    link.send(HEARTBEAT)
                    continue
                if job is not None and job in done:
                    job = None
                    self.send_result(link, DONE, job_id)
                    ids.append(job_id)
                    if len(ids) >= want:
                        if how.final_ready:
                            link.send(READY)
                        await link.writer.drain()
                        return
                    link.send(READY)
                if frame in done:
                    mtype, body = frame.result()        # ActionError: dropped connection
                    frame = asyncio.ensure_future(link.recv())
                    if mtype == TASK and len(body) >= 5 and len(body) >= 5 + body[4]:
                        task_id = struct.unpack(">I", body[:4])[0]
                        ttype = body[5:5 + body[4]]
                        if ttype in types:
                            job_id = task_id
                            job = asyncio.ensure_future(asyncio.sleep(work_s))
                        else:
                            self.send_result(link, FAILED, task_id,
                                             b"no handler for task type "
                                             + ttype.decode("utf-8", "replace").encode())
                            link.send(READY)
                    elif mtype == WAIT:
                        if how.ready_after_wait:
                            await asyncio.sleep(WAIT_BACKOFF_S)
                            link.send(READY)
                    else:
                        # 004 is silent: an ERROR or a malformed frame is logged and skipped
                        print(f"worker: unexpected frame 0x{mtype:02x} {body[:40]!r}",
                              file=sys.stderr, flush=True)
        finally:
            for fut in (frame, job):
                if fut is not None:
                    fut.cancel()        # a handler cut off by a drop does not count

    def send_result(self, link: Link, mtype: int, task_id: int, reason: bytes = b"") -> None:
        if mtype == DONE:
            task_id = (task_id + self.how.done_id_delta) & 0xFFFFFFFF
            link.send(DONE, struct.pack(self.how.done_id_order + "I", task_id))
        else:
            link.send(FAILED, struct.pack(">I", task_id) + reason)

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.close()


async def play(request: dict, how: Behaviour) -> list[dict]:
    player = Player(request, how)
    results: list[dict] = []
    try:
        for action in request.get("actions") or ():
            try:
                results.append({"ok": True, "value": await player.act(action)})
            except ActionError as exc:
                results.append({"ok": False, "error": str(exc), "error_type": exc.error_type})
            except Exception as exc:    # noqa: BLE001 - report, do not die
                results.append({"ok": False, "error": repr(exc), "error_type": "other"})
    finally:
        await player.close()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="correct", choices=sorted(_SWITCHES))
    how = Behaviour(parser.parse_args(argv).variant)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            print(f"not JSON: {exc}", file=sys.stderr, flush=True)
            continue
        try:
            results = asyncio.run(play(request, how))
        except Exception as exc:        # noqa: BLE001
            results = [{"ok": False, "error": repr(exc), "error_type": "other"}
                       for _ in request.get("actions") or ()]
        print(json.dumps({"scenario": request.get("scenario"), "results": results}), flush=True)


if __name__ == "__main__":
    main()
