"""The asyncio shell of the fuzzer: plays cases over TCP, judges them with :mod:`.oracles`,
shrinks failures, writes and replays transcripts.

A bunqueue case runs on a reused connection when it can (its stream ends on a frame boundary
and it does not half-close): the runner writes the case's chunks (TCP_NODELAY, one write and
drain per chunk, so a 1-byte split is a 1-byte segment), then a Ping with a reqId of its own
(the sentinel), and reads until every expected reply and the sentinel's are in, or until the
bound. Any other case gets a fresh connection, half-closes after its bytes and reads to EOF
or the bound. quicx cases always run connect-per-case (the daemon may fix a connection's role
from its first message, so nothing carries over safely). After a case whose connection closed
or timed out, a fresh connection's Ping or HEARTBEAT checks the server is alive.

Shrinking is delta debugging on the case, re-run on fresh connections: drop frames (halves,
then one at a time), then one write instead of the split, then no half-close; a candidate is
kept while it still fails on one of the original failing requirement ids. A server that no
longer answers a fresh connection (it crashed) cannot judge smaller cases, so such a failure
is saved whole, with a note; replay it against a restarted server.

``--workers N`` runs N asyncio tasks in this process, each on its own connection, drawing case
indices from one counter (so a run's set of cases does not depend on N, their order does).
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
from .strategies import SENTINEL_PREFIX, WAITS, make_case

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


async def _connect(host: str, port: int, timeout: float) -> tuple[Any, Any]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


def _close(writer: Any) -> None:
    with contextlib.suppress(Exception):
        writer.transport.abort()


class Runner:
    """Runs cases of one protocol and profile against one server."""

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
        self._conn: tuple[Any, Any, FrameDecoder] | None = None
        self._sentinels = itertools.count()

    async def close(self) -> None:
        if self._conn is not None:
            _close(self._conn[1])
            self._conn = None

    async def run(self, case: Case) -> Result:
        if self.protocol == "bunqueue":
            return await self._run_bunqueue(case)
        return await self._run_quicx(case)

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

    async def _run_bunqueue(self, case: Case) -> Result:
        exp = expect_bunqueue(case, self.profile)
        res = Result(case, covered=self._covered(exp))
        half_close = case.close or exp.must_close_write
        fresh = half_close or not self.reuse or self._conn is None
        if fresh:
            await self.close()
            try:
                reader, writer = await _connect(self.host, self.port, self.bound)
            except (TimeoutError, OSError) as exc:
                res.findings += self.judge.judge_alive(f"connect failed: {exc}")
                return res
            dec = FrameDecoder(self.profile, check_depth=False)
        else:
            reader, writer, dec = self._conn  # type: ignore[misc]
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
            chunks = case.chunks()
            for chunk in chunks:
                writer.write(chunk)
                if len(chunks) > 1:
                    await writer.drain()
            if half_close:
                writer.write_eof()
            else:
                sentinel = f"{SENTINEL_PREFIX}{next(self._sentinels)}"
                writer.write(self.encoder.encode({"cmd": "Ping", "reqId": sentinel}))
            await writer.drain()
        except (OSError, RuntimeError):
            reset = True  # the server closed while we wrote: read what it sent before
        want = len(exp.items)
        got_sentinel = sentinel is None
        while True:
            if not half_close and got_sentinel and len(replies) >= want:
                break
            data, lost = await _next_chunk(reader, deadline, res)
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
            _close(writer)
            self._conn = None
        else:
            self._conn = (reader, writer, dec)
        if (res.closed and not half_close) or res.timed_out:
            res.findings += await self.alive()
        return res

    async def alive(self) -> list[Finding]:
        """Liveness: a fresh connection's Ping (HEARTBEAT for quicx) is answered."""
        try:
            reader, writer = await _connect(self.host, self.port, self.bound)
        except (TimeoutError, OSError) as exc:
            return self.judge.judge_alive(f"connect failed: {exc}") if \
                self.protocol == "bunqueue" else self.judge.judge_alive([])
        try:
            if self.protocol == "bunqueue":
                writer.write(self.encoder.encode({"cmd": "Ping", "reqId": "alive"}))
                dec = FrameDecoder(self.profile, check_depth=False)
                got: Any = None
                end = time.monotonic() + self.bound
                while got is None and time.monotonic() < end:
                    data = await asyncio.wait_for(reader.read(READ_SIZE), end - time.monotonic())
                    if not data:
                        break
                    msgs = dec.feed(data)
                    got = msgs[0] if msgs else None
                return self.judge.judge_alive(got)
            writer.write(self.qencoder.heartbeat())
            dec = self.judge.client_decoder()
            msgs: list[Any] = []
            end = time.monotonic() + self.bound
            while not msgs and time.monotonic() < end:
                data = await asyncio.wait_for(reader.read(READ_SIZE), end - time.monotonic())
                if not data:
                    break
                msgs += dec.feed(data)
            return self.judge.judge_alive(msgs)
        except (TimeoutError, OSError, ProtocolError):
            return self.judge.judge_alive(None) if self.protocol == "bunqueue" \
                else self.judge.judge_alive([])
        finally:
            _close(writer)

    # -- quicx
    async def _run_quicx(self, case: Case) -> Result:
        exp = expect_quicx(case, self.profile)
        res = Result(case, covered={e.requirement for e in exp.errors})
        if exp.close_error is not None:
            res.covered.add(exp.close_error.requirement)
        try:
            reader, writer = await _connect(self.host, self.port, self.bound)
        except (TimeoutError, OSError):
            res.findings += self.judge.judge_alive([])
            return res
        dec = self.judge.client_decoder()
        reply_errors: list[ProtocolError] = []
        try:
            chunks = case.chunks()
            for chunk in chunks:
                writer.write(chunk)
                if len(chunks) > 1:
                    await writer.drain()
            writer.write_eof()
            await writer.drain()
        except (OSError, RuntimeError):
            pass
        deadline = time.monotonic() + self.bound
        while True:
            data, _ = await _next_chunk(reader, deadline, res)
            if not data:
                break
            try:
                res.replies += dec.feed(data)
            except ProtocolError as err:
                res.replies += err.frames
                reply_errors.append(err)
                break
        _close(writer)
        res.findings = self.judge.judge(exp, res.replies, res.closed, res.timed_out,
                                        reply_errors)
        if res.timed_out:
            res.findings += await self.alive()
        return res


async def _next_chunk(reader: asyncio.StreamReader, deadline: float,
                      res: Any) -> tuple[bytes, bool]:
    """The next bytes before ``deadline`` and whether the connection was reset; b"" when
    there are none, with ``res.timed_out`` or ``res.closed`` set to say why."""
    left = deadline - time.monotonic()
    if left <= 0:
        res.timed_out = True
        return b"", False
    reset = False
    try:
        data = await asyncio.wait_for(reader.read(READ_SIZE), left)
    except TimeoutError:
        res.timed_out = True
        return b"", False
    except OSError:
        reset, data = True, b""
    if not data:
        res.closed = True
    return data, reset


# -- shrinking, transcripts, replay -------------------------------------------------------------
async def shrink(case: Case, run: Callable[[Case], Any], rids: set[str],
                 budget: int = 200) -> Case:
    """Delta debugging: the smallest variant of ``case`` that still fails on one of ``rids``."""
    tries = 0

    async def fails(c: Case) -> bool:
        nonlocal tries
        tries += 1
        res = await run(c)
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
            if cand.frames and await fails(cand):
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
        if (cand.splits, cand.close) != (best.splits, best.close) and await fails(cand):
            best = cand
    return best


async def run_fresh(protocol: str, profile: str, host: str, port: int, case: Case,
                    bound: float = DEFAULT_BOUND) -> Result:
    runner = Runner(protocol, profile, host, port, bound=bound, reuse=False)
    try:
        return await runner.run(case)
    finally:
        await runner.close()


async def shrink_and_save(res: Result, host: str, port: int, artifacts: str | None,
                          bound: float = DEFAULT_BOUND) -> tuple[Case, str | None]:
    case = res.case
    rids = {f.requirement for f in res.findings if f.fails}

    async def run(c: Case) -> Result:
        return await run_fresh(case.protocol, case.profile, host, port, c, bound)

    # a server that no longer answers cannot judge smaller cases: every one would "fail";
    # the case is kept whole and the transcript says why
    probe = Runner(case.protocol, case.profile, host, port, bound=bound, reuse=False)
    dead = bool(await probe.alive())
    small = case if dead else await shrink(case, run, rids)
    path = None
    if artifacts:
        os.makedirs(artifacts, exist_ok=True)
        final = res if dead else await run(small)
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


async def replay(case: Case, host: str, port: int, bound: float = DEFAULT_BOUND) -> Result:
    """Run a transcript's case again on a fresh connection: FIXED when nothing fails."""
    return await run_fresh(case.protocol, case.profile, host, port, case, bound)


# -- the campaign ---------------------------------------------------------------------------
@dataclass
class Stats:
    cases: int = 0
    failures: int = 0
    nonstrict: int = 0
    started: float = field(default_factory=time.monotonic)
    commands: set[str] = field(default_factory=set)
    requirements: set[str] = field(default_factory=set)
    failed: list[tuple[Case, Case, str | None, list[Finding]]] = field(default_factory=list)
    diffs: list[tuple[int, list, list]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)  # cases the generator broke on

    @property
    def rate(self) -> float:
        return self.cases / max(1e-9, time.monotonic() - self.started)


async def campaign(protocol: str, profile: str, host: str, port: int, *, seed: int,
                   max_examples: int | None = None, duration: float | None = None,
                   workers: int = 1, artifacts: str | None = None, reuse: bool = True,
                   bound: float = DEFAULT_BOUND, diff: tuple[str, int] | None = None,
                   start: int = 0, on_progress: Callable[[Stats], None] | None = None,
                   max_failures: int = 5) -> Stats:
    """Cases ``start, start+1, ...`` of ``seed`` until ``max_examples`` or ``duration``."""
    stats = Stats()
    counter = itertools.count(start)
    stop_at = time.monotonic() + duration if duration else None
    limit = start + max_examples if max_examples is not None else None
    lock = asyncio.Lock()

    def more(i: int) -> bool:
        if limit is not None and i >= limit:
            return False
        if stop_at is not None and time.monotonic() >= stop_at:
            return False
        return len(stats.failed) < max_failures

    async def worker() -> None:
        runner = Runner(protocol, profile, host, port, bound=bound, reuse=reuse)
        other = Runner(protocol, profile, *diff, bound=bound, reuse=reuse) if diff else None
        try:
            while True:
                i = next(counter)
                if not more(i):
                    return
                try:
                    case = make_case(protocol, profile, seed, i)
                except Exception as exc:  # noqa: BLE001 - a generator bug: record, go on
                    stats.errors.append((i, f"{type(exc).__name__}: {exc}"))
                    continue
                res = await runner.run(case)
                stats.cases += 1
                stats.commands.update(lab[4:] for lab in case.labels if lab.startswith("cmd:"))
                stats.commands.update(lab[4:] for lab in case.labels if lab.startswith("msg:"))
                stats.requirements |= res.covered
                stats.nonstrict += sum(1 for f in res.findings
                                       if not f.fails and f.level != "INFO")
                if other is not None:
                    res2 = await other.run(case)
                    if res.kinds() != res2.kinds():
                        stats.diffs.append((i, res.kinds(), res2.kinds()))
                if res.failed:
                    stats.failures += 1
                    async with lock:
                        small, path = await shrink_and_save(res, host, port, artifacts, bound)
                    stats.failed.append((case, small, path, res.findings))
                if on_progress is not None:
                    on_progress(stats)
        finally:
            await runner.close()
            if other is not None:
                await other.close()

    await asyncio.gather(*(worker() for _ in range(max(1, workers))))
    return stats
