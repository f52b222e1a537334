"""The I/O shell of the fuzzer: plays cases over TCP with blocking sockets, judges them with
:mod:`.oracles`, shrinks failures, writes and replays transcripts.

A :class:`Runner` is synchronous and owns one connection at a time: a worker process (see
:mod:`.campaign`) is a tight loop of draw, send, read, judge on plain blocking sockets, with
no event loop between the bytes. Writes are a loop of ``sendall`` over the case's chunks with
TCP_NODELAY and, while the stream fits the socket's send buffer, the socket blocking, so a
one-byte split is a one-byte segment at the cost of one system call (no ``poll`` before it);
reads are ``recv`` with the socket's timeout set to what is left of the case's bound. In-process
servers (``--target embedded``, the tests' small broken servers) keep running on the asyncio
loop while a runner works in another thread or process: the async helpers below
(:func:`replay`, :func:`run_fresh`, :func:`shrink_and_save`) run it with ``asyncio.to_thread``.

A bunqueue case runs on the reused connection when there is one (reuse mode): the runner
writes the case's chunks, then, unless the case half-closes, a Ping with a reqId of its own
(the sentinel), and reads until every expected reply and the sentinel's are in, or until the
bound. A case that half-closes (its own choice, or its stream ends inside a frame) runs on
the reused connection too, half-closes it and reads to EOF or the bound; the connection is
then dropped. After a case whose connection the server closed or that timed out, a fresh
connection's Ping or HEARTBEAT checks the server is alive (the liveness oracle), and in
reuse mode that proven connection carries the next case, so such a case costs one connect,
not two. ``reuse=False`` (``--connect-per-case``) gives every case a fresh connection. quicx
cases always run connect-per-case (the daemon may fix a connection's role from its first
message, so nothing carries over safely). :attr:`Runner.connects` counts the connections
opened, for the connect-per-case rate reported beside the case rate.

Shrinking is delta debugging on the case, re-run on fresh connections: drop frames (halves,
then one at a time), then one write instead of the split, then no half-close; a candidate is
kept while it still fails on one of the original failing requirement ids. A server that no
longer answers a fresh connection (it crashed) cannot judge smaller cases, so such a failure
is saved whole, with a note; replay it against a restarted server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxEncoder
from ..spec import Profile, load_profile
from .case import Case, write_transcript
from .oracles import (
    BunqueueJudge,
    Finding,
    QuicxJudge,
    canon,
    expect_bunqueue,
    expect_quicx,
)
from .strategies import SENTINEL_PREFIX, WAITS

DEFAULT_BOUND = 2.0    # seconds a reply may take before it counts as lost (hang oracle)
READ_SIZE = 64 * 1024


@dataclass
class Result:
    case: Case
    findings: list[Finding] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    closed: bool = False
    timed_out: bool = False
    covered: set[str] = field(default_factory=set)

    @property
    def failed(self) -> bool:
        return any(f.fails for f in self.findings)

    def kinds(self) -> list[tuple]:
        """What the replies were, in kind (for --diff): sorted (reqId, ok, has error)."""
        out = []
        for r in self.replies:
            if isinstance(r, dict):
                out.append((repr(canon(r.get("reqId"))), r.get("ok"), "error" in r))
            else:
                out.append((getattr(r, "name", type(r).__name__),
                            getattr(r, "fields", {}).get("error_code")))
        return sorted(out, key=repr)


@contextlib.asynccontextmanager
async def target(spec: str, protocol: str, profile: str) -> AsyncIterator[tuple[str, int]]:
    """``HOST:PORT``, or ``embedded``: a reference server in process on an ephemeral port."""
    if spec != "embedded":
        host, _, port = spec.rpartition(":")
        yield host or "127.0.0.1", int(port)
        return
    if protocol == "bunqueue":
        from ..reference_server.bunqueue import BunqueueServer
        server: Any = BunqueueServer(profile, port=0)
    else:
        from ..reference_server.quicx import QuicxServer
        server = QuicxServer(profile, port=0)
    async with server:
        yield "127.0.0.1", server.port


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _close(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()


BLOCKING_SEND_MAX = 16 * 1024   # a stream this small fits the socket's send buffer


def _send(sock: socket.socket, case: Case, bound: float) -> None:
    """The case's writes (:meth:`Case.chunks`, without building the list), one ``sendall``
    each: the tight loop a one-byte split runs through, one system call per segment. A
    stream that fits the kernel's send buffer is written with the socket blocking: with a
    timeout set, each ``sendall`` would ``poll`` before its ``send``, doubling the calls."""
    data, splits = case.stream, case.splits
    sock.settimeout(None if len(data) <= BLOCKING_SEND_MAX else bound)
    send = sock.sendall
    if not splits:
        send(data)
        return
    view, pos, end = memoryview(data), 0, len(data)
    for size in splits:
        if pos >= end:
            return
        send(view[pos:pos + size])
        pos += size
    if pos < end:
        send(view[pos:])


def _recv(sock: socket.socket, deadline: float, res: Any) -> tuple[bytes, bool]:
    """The next bytes before ``deadline`` and whether the connection was reset; b"" when
    there are none, with ``res.timed_out`` or ``res.closed`` set to say why."""
    left = deadline - time.monotonic()
    if left <= 0:
        res.timed_out = True
        return b"", False
    try:
        sock.settimeout(left)
        data = sock.recv(READ_SIZE)
    except TimeoutError:
        res.timed_out = True
        return b"", False
    except OSError:
        res.closed = True
        return b"", True
    if not data:
        res.closed = True
    return data, False


class Runner:
    """Runs cases of one protocol and profile against one server (blocking I/O)."""

    def __init__(self, protocol: str, profile: str, host: str, port: int, *,
                 bound: float = DEFAULT_BOUND, reuse: bool = True):
        self.protocol, self.profile_name = protocol, profile
        self.profile: Profile = load_profile(profile)
        self.host, self.port, self.bound, self.reuse = host, port, bound, reuse
        self.judge: Any = BunqueueJudge(self.profile, WAITS) if protocol == "bunqueue" \
            else QuicxJudge(self.profile)
        if protocol == "bunqueue":
            self.encoder = FrameEncoder(self.profile)
        else:
            self.qencoder = QuicxEncoder(self.profile)
        self._conn: tuple[socket.socket, FrameDecoder] | None = None
        self._sentinels = itertools.count()
        self.connects = 0   # connections opened, liveness probes included

    def _open(self) -> socket.socket:
        self.connects += 1
        return _connect(self.host, self.port, self.bound)

    def close(self) -> None:
        if self._conn is not None:
            _close(self._conn[0])
            self._conn = None

    def run(self, case: Case) -> Result:
        if self.protocol == "bunqueue":
            return self._run_bunqueue(case)
        return self._run_quicx(case)

    # -- bunqueue
    def _covered(self, exp: Any) -> set[str]:
        out = {"BQ-PIPE-1"}
        commands = self.profile.model.commands
        for item in exp.items:
            if item.error is not None:
                out.add(item.error.requirement)
            elif type(item.request) is dict and isinstance(item.request.get("cmd"), str) \
                    and item.request["cmd"] in commands:
                out.add(commands[item.request["cmd"]].requirement)
        if exp.close_error is not None:
            out.add(exp.close_error.requirement)
        return out

    def _run_bunqueue(self, case: Case) -> Result:
        exp = expect_bunqueue(case, self.profile)
        res = Result(case, covered=self._covered(exp))
        half_close = case.close or exp.must_close_write
        if not self.reuse or self._conn is None:
            self.close()
            try:
                sock = self._open()
            except OSError as exc:   # TimeoutError included
                res.findings += self.judge.judge_alive(f"connect failed: {exc}")
                return res
            dec = FrameDecoder(self.profile, check_depth=False)
        else:
            sock, dec = self._conn
        self._conn = None
        sentinel = None
        extra = sum(max(0.0, min(float(i.request.get("timeout") or 0), 60_000.0)) / 1000.0
                    for i in exp.items if type(i.request) is dict
                    and isinstance(i.request.get("cmd"), str) and i.request["cmd"] in WAITS
                    and isinstance(i.request.get("timeout"), (int, float))
                    and i.request.get("timeout") == i.request.get("timeout"))
        deadline = time.monotonic() + self.bound + extra
        reply_errors: list[ProtocolError] = []
        replies: list[Any] = []
        reset = False
        try:
            _send(sock, case, self.bound)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            else:
                sentinel = f"{SENTINEL_PREFIX}{next(self._sentinels)}"
                sock.sendall(self.encoder.encode({"cmd": "Ping", "reqId": sentinel}))
        except OSError:
            reset = True  # the server closed while we wrote: read what it sent before
        want = len(exp.items)
        got_sentinel = sentinel is None
        while True:
            if not half_close and got_sentinel and len(replies) >= want:
                break
            data, lost = _recv(sock, deadline, res)
            reset = reset or lost
            if not data:
                break
            try:
                frames = dec.feed(data)
            except ProtocolError as err:
                frames = err.frames
                reply_errors.append(err)
                res.closed = True  # nothing after it can be trusted: drop the connection
            for f in frames:
                if type(f) is dict and isinstance(f.get("reqId"), str) \
                        and f["reqId"] == sentinel:
                    got_sentinel = True
                else:
                    replies.append(f)
            if reply_errors:
                break
        res.replies = replies
        res.findings = self.judge.judge(exp, replies, res.closed, res.timed_out, reply_errors,
                                        half_closed=half_close, reset=reset)
        if sentinel is not None and not got_sentinel and not res.findings:
            res.findings.append(self.judge._finding("BQ-PIPE-1", "lost_reply",
                                                    "the runner's Ping not answered"))
        if half_close or res.closed or res.timed_out or reply_errors:
            _close(sock)
        else:
            self._conn = (sock, dec)
        if (res.closed and not half_close) or res.timed_out:
            res.findings += self.alive(keep=self.reuse)
        return res

    def alive(self, keep: bool = False) -> list[Finding]:
        """Liveness: a fresh connection's Ping (HEARTBEAT for quicx) is answered. With
        ``keep`` (bunqueue), the answered connection becomes the one the next case reuses."""
        bunqueue = self.protocol == "bunqueue"
        try:
            sock = self._open()
        except OSError as exc:
            return self.judge.judge_alive(f"connect failed: {exc}") if bunqueue \
                else self.judge.judge_alive([])
        kept = False
        try:
            end = time.monotonic() + self.bound
            if bunqueue:
                sock.sendall(self.encoder.encode({"cmd": "Ping", "reqId": "alive"}))
                dec = FrameDecoder(self.profile, check_depth=False)
                got: Any = None
                while got is None and (left := end - time.monotonic()) > 0:
                    sock.settimeout(left)
                    data = sock.recv(READ_SIZE)
                    if not data:
                        break
                    msgs = dec.feed(data)
                    got = msgs[0] if msgs else None
                found = self.judge.judge_alive(got)
                if keep and not found and not dec.buffered:
                    self.close()
                    self._conn, kept = (sock, dec), True
                return found
            sock.sendall(self.qencoder.heartbeat())
            qdec = self.judge.client_decoder()
            msgs2: list[Any] = []
            while not msgs2 and (left := end - time.monotonic()) > 0:
                sock.settimeout(left)
                data = sock.recv(READ_SIZE)
                if not data:
                    break
                msgs2 += qdec.feed(data)
            return self.judge.judge_alive(msgs2)
        except (OSError, ProtocolError):
            return self.judge.judge_alive(None) if bunqueue else self.judge.judge_alive([])
        finally:
            if not kept:
                _close(sock)

    # -- quicx
    def _run_quicx(self, case: Case) -> Result:
        exp = expect_quicx(case, self.profile)
        res = Result(case, covered={e.requirement for e in exp.errors})
        if exp.close_error is not None:
            res.covered.add(exp.close_error.requirement)
        try:
            sock = self._open()
        except OSError:
            res.findings += self.judge.judge_alive([])
            return res
        dec = self.judge.client_decoder()
        reply_errors: list[ProtocolError] = []
        try:
            _send(sock, case, self.bound)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + self.bound
        while True:
            data, _ = _recv(sock, deadline, res)
            if not data:
                break
            try:
                res.replies += dec.feed(data)
            except ProtocolError as err:
                res.replies += err.frames
                reply_errors.append(err)
                break
        _close(sock)
        res.findings = self.judge.judge(exp, res.replies, res.closed, res.timed_out,
                                        reply_errors)
        if res.timed_out:
            res.findings += self.alive()
        return res


# -- shrinking, transcripts, replay -------------------------------------------------------------
def shrink(case: Case, run: Callable[[Case], Result], rids: set[str],
           budget: int = 200) -> Case:
    """Delta debugging: the smallest variant of ``case`` that still fails on one of ``rids``."""
    tries = 0

    def fails(c: Case) -> bool:
        nonlocal tries
        tries += 1
        res = run(c)
        return any(f.fails and f.requirement in rids for f in res.findings)

    def variant(frames: list[bytes], **kw: Any) -> Case:
        return Case(case.protocol, case.profile, frames, kw.get("splits", case.splits),
                    kw.get("close", case.close), case.labels, case.seed, case.index)

    best = case
    n = 2
    while len(best.frames) >= 2 and tries < budget:
        size = max(1, len(best.frames) // n)
        reduced = False
        for start in range(0, len(best.frames), size):
            cand = variant(best.frames[:start] + best.frames[start + size:],
                           splits=best.splits, close=best.close)
            if cand.frames and fails(cand):
                best, n, reduced = cand, max(2, n - 1), True
                break
            if tries >= budget:
                break
        if not reduced:
            if size == 1:
                break
            n = min(len(best.frames), n * 2)
    for kw in ({"splits": []}, {"close": False}):
        if tries >= budget:
            break
        cand = variant(best.frames, splits=kw.get("splits", best.splits),
                       close=kw.get("close", best.close))
        if (cand.splits, cand.close) != (best.splits, best.close) and fails(cand):
            best = cand
    return best


def run_fresh_sync(protocol: str, profile: str, host: str, port: int, case: Case,
                   bound: float = DEFAULT_BOUND) -> Result:
    runner = Runner(protocol, profile, host, port, bound=bound, reuse=False)
    try:
        return runner.run(case)
    finally:
        runner.close()


def shrink_and_save_sync(res: Result, host: str, port: int, artifacts: str | None,
                         bound: float = DEFAULT_BOUND) -> tuple[Case, str | None]:
    case = res.case
    rids = {f.requirement for f in res.findings if f.fails}

    def run(c: Case) -> Result:
        return run_fresh_sync(case.protocol, case.profile, host, port, c, bound)

    # a server that no longer answers cannot judge smaller cases: every one would "fail";
    # the case is kept whole and the transcript says why
    probe = Runner(case.protocol, case.profile, host, port, bound=bound, reuse=False)
    dead = bool(probe.alive())
    small = case if dead else shrink(case, run, rids)
    path = None
    if artifacts:
        os.makedirs(artifacts, exist_ok=True)
        final = res if dead else run(small)
        findings = final.findings if final.failed else res.findings
        path = os.path.join(artifacts, f"{case.protocol}-{case.seed}-{case.index}.json")
        write_transcript(path, small, [f.as_dict() for f in findings],
                         [_jsonable(r) for r in final.replies], original=case,
                         note="not shrunk: the server stopped answering" if dead else None)
    return small, path


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bytes, bytearray)):
        return {"bin": bytes(obj).hex()}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


# the async faces, for callers on an event loop (an in-process server keeps serving)
async def run_fresh(protocol: str, profile: str, host: str, port: int, case: Case,
                    bound: float = DEFAULT_BOUND) -> Result:
    return await asyncio.to_thread(run_fresh_sync, protocol, profile, host, port, case, bound)


async def shrink_and_save(res: Result, host: str, port: int, artifacts: str | None,
                          bound: float = DEFAULT_BOUND) -> tuple[Case, str | None]:
    return await asyncio.to_thread(shrink_and_save_sync, res, host, port, artifacts, bound)


async def replay(case: Case, host: str, port: int, bound: float = DEFAULT_BOUND) -> Result:
    """Run a transcript's case again on a fresh connection: FIXED when nothing fails."""
    return await run_fresh(case.protocol, case.profile, host, port, case, bound)
