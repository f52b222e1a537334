"""The I/O shell of the fuzzer: plays cases over TCP with blocking sockets, judges them with
:mod:`.oracles`, shrinks failures, writes and replays transcripts.

A :class:`Runner` is synchronous and owns one connection at a time: a worker process (see
:mod:`.campaign`) is a tight loop of draw, send, read, judge on plain blocking sockets, with
no event loop between the bytes. Writes are a loop of ``sendall`` over the case's chunks with
TCP_NODELAY and, while the stream fits the socket's send buffer, the socket blocking, so a
one-byte split is a one-byte segment at the cost of one system call (no ``poll`` before it);
reads are ``recv`` with the socket's timeout set to what is left of the case's bound. In-process
servers (``--target embedded``, the tests' small broken servers) keep running on the asyncio
loop while a runner works in another thread or process: the async helpers of :mod:`.shrink`
(:func:`~.shrink.replay`, :func:`~.shrink.run_fresh`, :func:`~.shrink.shrink_and_save`) run
it with ``asyncio.to_thread``.

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

A slow trickle (``Case.pauses``) sleeps after its writes; its pauses are added to the case's
deadline, so they never eat the bound. An interleaved bunqueue case (``Case.conns``) runs on
connection 0 (the reused one where there is one) and 1-2 fresh ones, written in the case's
order, each connection closed with its own sentinel Ping (or half-closed), read together
(``select``) and judged apart, connection by connection, by the same oracles: reqIds are
per connection, so a reply that comes back on another connection than its request's is a
reply lost on one and a stray one on the other. :meth:`Runner.cleanup` (see
:mod:`.campaign`) obliterates the queues the cases named, between cases.

Authentication. With a token (``auth_token``, bunqueue), every connection the runner opens
(the reused one, a case's fresh ones, the liveness probe's, the cleanup's) sends Auth first and
reads its reply before anything else; that reply is never judged. A refusal raises
:class:`~queuewire.judge.opening.AuthProblem`, so a tool stops with one clear error instead
of judging a server's ``Not authenticated`` replies (before a run, the CLI checks a fresh
connection's opening with :func:`queuewire.conformance.preflight.check_auth`).

Shrinking, confirming and saving a failure are in :mod:`.shrink`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import select
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxEncoder
from ..judge import reqid_key
from ..judge.opening import AuthCheck
from ..spec import Profile, load_profile
from .case import Case
from .oracles import (
    BunqueueJudge,
    Finding,
    QuicxJudge,
    expect_bunqueue,
    expect_quicx,
)
from .strategies import SENTINEL_PREFIX, WAITS

DEFAULT_BOUND = 2.0    # seconds a reply may take before it counts as lost (hang oracle)
CLEANUP_PREFIX = "qw-clean-"   # reqIds of the cleanup's commands
EXCHANGE_PREFIX = "qw-house-"  # reqIds of other requests that are no case (Runner.exchange)
READ_SIZE = 64 * 1024


class Exchanged(NamedTuple):
    """What :meth:`Runner.exchange` got: one reply per request (None: none), whether the
    server closed the connection before answering them all, and how many were sent."""

    replies: list[Any]
    closed: bool
    sent: int


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
        """What the replies were, in kind (for --diff): sorted (reqId, ok, has error); on
        several connections (where ``replies`` holds one list per connection), each with
        its connection's number first."""
        if self.case.conns:
            return sorted(((n, *k) for n, rs in enumerate(self.replies)
                           for k in _kinds(rs)), key=repr)
        return sorted(_kinds(self.replies), key=repr)


def _kinds(replies: list[Any]) -> list[tuple]:
    out: list[tuple] = []
    for r in replies:
        if isinstance(r, dict):
            out.append((reqid_label(r), r.get("ok", ABSENT) if "ok" in r else ABSENT,
                        "error" in r))
        else:
            out.append((getattr(r, "name", type(r).__name__),
                        getattr(r, "fields", {}).get("error_code")))
    return out


ABSENT = "absent"


def reqid_label(reply: dict) -> str:
    """A reply's reqId as --diff shows it: ``absent``, ``null``, ``undefined`` (msgpack ext 0)
    or the value's repr; two replies' reqIds differ in kind exactly when their labels differ."""
    if "reqId" not in reply:
        return ABSENT
    value = reply["reqId"]
    if value is None:
        return "null"
    if value is UNDEFINED:
        return "undefined"
    return repr(value) if type(value) is str else repr(reqid_key(value))


@contextlib.asynccontextmanager
async def target(spec: str, protocol: str, profile: str, *,
                 auth_token: str | None = None) -> AsyncIterator[tuple[str, int]]:
    """``HOST:PORT``, or ``embedded``: a reference server in process on an ephemeral port
    (requiring ``auth_token`` when one is given, as a deployed server with a token does)."""
    if spec != "embedded":
        host, _, port = spec.rpartition(":")
        yield host or "127.0.0.1", int(port)
        return
    if protocol == "bunqueue":
        from ..reference_server.bunqueue import BunqueueServer
        server: Any = BunqueueServer(profile, port=0,
                                     auth_tokens=(auth_token,) if auth_token else ())
    else:
        from ..reference_server.quicx import QuicxServer
        server = QuicxServer(profile, port=0)
    async with server:
        yield "127.0.0.1", server.port


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _authenticate(sock: socket.socket, check: AuthCheck, bound: float) -> None:
    """Write the opening ``check`` holds (Auth, and a probe unless ``auth_only``) and read its
    replies; raise :class:`~queuewire.judge.opening.AuthProblem` when the server wants a token
    or refused it, OSError when it does not answer within ``bound``. Nothing else is in flight
    on the connection, so the server sends nothing past those replies."""
    sock.settimeout(bound)
    sock.sendall(check.data)
    deadline = time.monotonic() + bound
    while not check.done:
        if check.flooded:
            raise ConnectionError(f"the server sent {check.received} bytes without answering "
                                  "Auth")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer to Auth within {bound:g} s")
        sock.settimeout(left)
        data = sock.recv(READ_SIZE)
        if not data:
            raise ConnectionResetError("the server closed the connection during Auth")
        check.feed(data)
    problem = check.problem()
    if problem is not None:
        raise problem


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
    if case.pauses:   # a slow trickle: the rare case, through the general plan
        for _conn, chunk, pause in case.writes():
            send(chunk)
            if pause:
                time.sleep(pause)
        return
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


def _parked(exp: Any) -> float:
    """Seconds the case's valid long polls may park (their ``timeout``, at most 60 s)."""
    return sum(max(0.0, min(float(i.request.get("timeout") or 0), 60_000.0)) / 1000.0
               for i in exp.items if type(i.request) is dict
               and isinstance(i.request.get("cmd"), str) and i.request["cmd"] in WAITS
               and isinstance(i.request.get("timeout"), (int, float))
               and i.request.get("timeout") == i.request.get("timeout"))


@dataclass
class _Peer:
    """One connection of an interleaved case: what it must get and what it got."""

    n: int
    exp: Any
    sock: Any = None
    dec: Any = None
    half_close: bool = False
    sentinel: str | None = None
    got_sentinel: bool = False
    replies: list[Any] = field(default_factory=list)
    reply_errors: list[ProtocolError] = field(default_factory=list)
    closed: bool = False
    timed_out: bool = False
    reset: bool = False


def _take(p: _Peer, data: bytes) -> bool:
    """Feed a peer's bytes: its replies, its sentinel; True when a reply did not decode
    (nothing after it can be trusted: the connection is dropped)."""
    try:
        frames = p.dec.feed(data)
    except ProtocolError as err:
        frames = err.frames
        p.reply_errors.append(err)
    for f in frames:
        if p.sentinel is not None and type(f) is dict and f.get("reqId") == p.sentinel:
            p.got_sentinel = True
        else:
            p.replies.append(f)
    return bool(p.reply_errors)


class Runner:
    """Runs cases of one protocol and profile against one server (blocking I/O)."""

    def __init__(self, protocol: str, profile: str, host: str, port: int, *,
                 bound: float = DEFAULT_BOUND, reuse: bool = True,
                 auth_token: str | None = None):
        self.protocol, self.profile_name = protocol, profile
        #: every connection this runner opens authenticates with it first (bunqueue), so a
        #: case's bytes, the sentinel and the cleanup reach a server that wants a token; the
        #: Auth's reply is read before the case and never judged
        self.auth_token = auth_token if protocol == "bunqueue" and auth_token else None
        self.profile: Profile = load_profile(profile)
        self.host, self.port, self.bound, self.reuse = host, port, bound, reuse
        self.judge: Any = BunqueueJudge(self.profile, WAITS) if protocol == "bunqueue" \
            else QuicxJudge(self.profile)
        if protocol == "bunqueue":
            self.encoder = FrameEncoder(self.profile)
            self.wide_encoder = FrameEncoder(self.profile, wide_integers=True)
        else:
            self.qencoder = QuicxEncoder(self.profile)
        self._conn: tuple[socket.socket, FrameDecoder] | None = None
        self._sentinels = itertools.count()
        self.connects = 0   # connections opened, liveness probes included
        self.queues: set[str] = set()   # queues the cases named since the last cleanup

    def cleanup(self) -> int:
        """Setup between cases, not a case: ``Obliterate`` every queue the cases named since
        the last cleanup (bunqueue), pipelined on a connection of its own, replies read but
        not judged (a server that no longer answers is the next case's finding). A server's
        state grows with the cases played (jobs pile up in the few queues the boundary and
        corpus requests name), and with it the replies to listing commands (GetJobs, Dlq,
        ListQueues, Prometheus) and the fuzzer's cost of decoding and judging them; a
        worker that cleans up every :data:`~.campaign.CLEANUP_EVERY` cases keeps the
        server near the state of a fresh one. Returns the commands sent."""
        names, self.queues = self.queues, set()
        if self.protocol != "bunqueue" or not names:
            return 0
        return self.exchange([{"cmd": "Obliterate", "queue": name} for name in sorted(names)],
                             prefix=CLEANUP_PREFIX).sent

    def exchange(self, requests: list[dict[str, Any]], *, prefix: str = EXCHANGE_PREFIX,
                 within: float | None = None, wide: bool = False) -> Exchanged:
        """Requests that are no case (cleanups, inventories, probes), pipelined on a fresh
        connection of their own (authenticated first), each with a reqId ``prefix<n>``;
        the replies are read by reqId until all are in, the connection ends or ``within``
        seconds (default: the bound) passed, and never judged. A request the encoder refuses
        is not sent (its reply is None); ``wide`` encodes integers beyond int64 as they came
        (a queue named 2**64-1 is addressed by that same name)."""
        encoder = self.wide_encoder if wide else self.encoder
        ids = [f"{prefix}{i}" for i in range(len(requests))]
        frames = []
        for request, req_id in zip(requests, ids):
            with contextlib.suppress(ProtocolError, ValueError, TypeError):   # a key it refuses
                frames.append(encoder.encode({**request, "reqId": req_id}))
        got: dict[str, Any] = {}
        closed = False
        try:
            sock = self.connect()
        except OSError:
            return Exchanged([None] * len(requests), False, 0)
        try:
            sock.sendall(b"".join(frames))
            dec = FrameDecoder(self.profile, check_depth=False)
            deadline = time.monotonic() + (self.bound if within is None else within)
            while len(got) < len(frames) and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                data = sock.recv(READ_SIZE)
                if not data:
                    closed = True
                    break
                for frame in dec.feed(data):
                    if type(frame) is dict and frame.get("reqId") in ids:
                        got[frame["reqId"]] = frame
        except TimeoutError:
            pass
        except (OSError, ProtocolError):
            closed = True
        finally:
            _close(sock)
        return Exchanged([got.get(i) for i in ids], closed, len(frames))

    def _open(self) -> socket.socket:
        self.connects += 1
        return self.connect()

    def connect(self) -> socket.socket:
        """A connection to the target, authenticated when the runner has a token (an
        :class:`~queuewire.judge.opening.AuthProblem` when the server refuses it)."""
        sock = _connect(self.host, self.port, self.bound)
        if self.auth_token is not None:
            try:
                _authenticate(sock, AuthCheck(self.profile, self.auth_token, auth_only=True,
                                              target=f"{self.host}:{self.port}"), self.bound)
            except BaseException:
                _close(sock)
                raise
        return sock

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
        """The requirement ids a case exercises; on the way, the queues its requests name
        are noted for the next :meth:`cleanup`."""
        out = {"BQ-PIPE-1"}
        commands = self.profile.model.commands
        queues = self.queues
        for item in exp.items:
            req = item.request
            if item.error is not None:
                out.add(item.error.requirement)
            elif type(req) is dict:
                if type(req.get("queue")) is str:
                    queues.add(req["queue"])
                if isinstance(req.get("cmd"), str) and req["cmd"] in commands:
                    out.add(commands[req["cmd"]].requirement)
        if exp.close_error is not None:
            out.add(exp.close_error.requirement)
        return out

    def _run_bunqueue(self, case: Case) -> Result:
        if case.conns:
            return self._run_interleaved(case)
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
        deadline = time.monotonic() + self.bound + _parked(exp) + case.pause_seconds
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

    def _run_interleaved(self, case: Case) -> Result:
        """A case on several connections (:attr:`Case.conns`): connection 0 is the reused
        one where there is one, the others fresh; the writes go out in the case's order, each
        connection not half-closing ends with its own sentinel Ping, and every connection
        is read (``select``) and judged on its own, each finding saying which connection."""
        peers = [_Peer(n, expect_bunqueue(case.sub_case(n), self.profile))
                 for n in range(case.connections)]
        res = Result(case, covered=set().union(*(self._covered(p.exp) for p in peers)))
        try:
            for p in peers:
                if p.n == 0 and self.reuse and self._conn is not None:
                    p.sock, p.dec = self._conn
                    self._conn = None
                else:
                    p.sock = self._open()
                    p.dec = FrameDecoder(self.profile, check_depth=False)
        except OSError as exc:
            for p in peers:
                _close(p.sock)
            res.findings += self.judge.judge_alive(f"connect failed: {exc}")
            return res
        deadline = time.monotonic() + self.bound + case.pause_seconds \
            + sum(_parked(p.exp) for p in peers)
        for p in peers:
            p.half_close = case.close or p.exp.must_close_write
            p.sock.settimeout(self.bound)
        for n, chunk, pause in case.writes():
            p = peers[n]
            if not p.reset:
                try:
                    p.sock.sendall(chunk)
                except OSError:
                    p.reset = True   # the server closed it: read what it sent before
            if pause:
                time.sleep(pause)
        for p in peers:
            try:
                if p.half_close:
                    p.sock.shutdown(socket.SHUT_WR)
                elif not p.reset:
                    p.sentinel = f"{SENTINEL_PREFIX}{next(self._sentinels)}"
                    p.sock.sendall(self.encoder.encode({"cmd": "Ping", "reqId": p.sentinel}))
            except OSError:
                p.reset = True
            p.got_sentinel = p.sentinel is None
        waiting = {p.sock: p for p in peers}
        while waiting:
            left = deadline - time.monotonic()
            ready = select.select(list(waiting), [], [], left)[0] if left > 0 else []
            if not ready:
                for p in waiting.values():
                    p.timed_out = True
                break
            for sock in ready:
                p = waiting[sock]
                try:
                    data = sock.recv(READ_SIZE)
                except OSError:
                    p.reset = True
                    data = b""
                if not data:
                    p.closed = True
                elif _take(p, data):
                    p.closed = True
                if p.closed or (not p.half_close and p.got_sentinel
                                and len(p.replies) >= len(p.exp.items)):
                    del waiting[sock]
        for p in peers:
            found = self.judge.judge(p.exp, p.replies, p.closed, p.timed_out, p.reply_errors,
                                     half_closed=p.half_close, reset=p.reset)
            if p.sentinel is not None and not p.got_sentinel and not found:
                found.append(self.judge._finding("BQ-PIPE-1", "lost_reply",
                                                 "the runner's Ping not answered"))
            res.findings += [dataclasses.replace(f, message=f"connection {p.n}: {f.message}")
                             for f in found]
            res.replies.append(p.replies)
            res.closed = res.closed or (p.closed and not p.half_close)
            res.timed_out = res.timed_out or p.timed_out
        first = peers[0]
        if self.reuse and not (first.half_close or first.closed or first.timed_out
                               or first.reset or first.reply_errors):
            self._conn = (first.sock, first.dec)
            peers = peers[1:]
        for p in peers:
            _close(p.sock)
        if res.closed or res.timed_out:
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
