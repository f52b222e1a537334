"""The asyncio shell: a bunqueue conformance server that clients under test connect to.

:class:`ConformanceServer` listens on one ``127.0.0.1`` port for a whole run and answers
like the reference server: every request goes through the in-process reference engine
(:class:`~queuewire.reference_server.bunqueue.embedded.EmbeddedServer`, one connection id per
TCP connection, so a closed connection's jobs return to waiting), its reply gets the
request's ``reqId`` and is encoded by the reference encoder. A scenario opens a
:class:`Session` (:meth:`ConformanceServer.begin`); every connection accepted meanwhile
belongs to it: its bytes go to the scenario's :class:`~.checker.ClientChecker` and transcript
(``recv``: what the client sent, ``send``: what the server wrote), and the scenario's
``server`` behaviours shape the answers:

``auth_token``  a token is required: Auth is checked, anything but Auth and Hello before it is
                answered Not authenticated (the server's side of BQ-AUTH-2);
``reorder`` / ``coalesce``  ``{window_ms}``: replies are held for the window after the first
                one and written in one write, in reverse order or in order;
``split``       every reply is written one byte per TCP segment (TCP_NODELAY, a pause each);
``delay``       ``{cmds, nth, ms}``: the nth reply to one of ``cmds`` waits ``ms`` first;
``drop``        ``{cmds, nth}``: the nth reply to one of ``cmds`` is cut after half its bytes and
                the connection closed (the request was executed);
``dead``        the first connection gets no answer at all (a half-open link), nor do those
                the client opens after closing it until one is opened while it is still
                open or the client has closed one: from then on connections are served;
``refuse``      ``{cmds, first, count, error}``: replies number ``first`` .. ``first+count-1`` to
                ``cmds`` are the spec error ``error`` (e.g. rate_limit_exceeded);
``lock_ttl``    PULL and PULLB with an owner lock their jobs for this many ms, whatever asked;
``restart``     ``{cmds, nth, down_ms}``: after the nth reply to one of ``cmds`` every
                connection is closed and the port refuses connections for ``down_ms``;
``mangle``      (fuzz mode, set in code, not in scenario files) a callable
                ``(cmd, n, request, reply)`` called with every reply computed, n counting
                the requests of that cmd from 1; it returns None (serve the reply) or a plan
                ``{"writes": [bytes, ...], "close": bool, "note": str}`` written instead
                (each write drained on its own, TCP_NODELAY), then the connection closed if
                ``close``. The real replies are kept in ``Session.computed[(cmd, n)]``.

Counting (``nth``) is over the scenario's requests, 1-based. Nothing here judges: the checker
and :mod:`.judges` read what the session recorded (``events``: opens and closes with who
closed).

A hostile client costs bounded work and memory, as on the reference server (BQ-PIPE-2): each
request is answered by a task that holds one of its connection's ``max_in_flight`` slots (the
spec's limit), and while every slot is taken the connection is not read, so the rest of a
pipelined flood waits in the client's socket (TCP backpressure), never as tasks; a reply is
written and drained under the connection's lock, so a client that does not read holds its own
slots and stops its own reads. Every frame is still checked. What a connection's reads add to
the transcript is bounded by :mod:`.records` (the frames decoded from one read, head and tail;
the runner's transcript keeps a scenario's first and last events).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...codecs.validation import jsonable
from ...reference_server.bunqueue.embedded import EmbeddedServer
from ...spec import Profile
from ..model import Transcript
from .checker import ClientChecker
from .listener import ScenarioListener
from .records import FRAMES_HEAD, FRAMES_TAIL, head_tail

__all__ = ["ConformanceServer", "Session"]

READ_SIZE = 64 * 1024
SPLIT_PAUSE = 0.0005  # seconds between the 1-byte segments of a split reply


@dataclass
class _Live:
    conn: int
    writer: asyncio.StreamWriter
    eid: str
    dead: bool
    authenticated: bool = False
    pending: list[tuple[bytes, Any, dict]] = field(default_factory=list)
    flush: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed_by: str | None = None
    tasks: set[asyncio.Task] = field(default_factory=set)
    slots: asyncio.Semaphore | None = None   # max_in_flight answers at once (BQ-PIPE-2)

    def answered(self, task: asyncio.Task) -> None:
        """An answer task ended (or was cancelled): its slot is free."""
        self.tasks.discard(task)
        if self.slots is not None:
            self.slots.release()


class Session:
    """One scenario's connections, behaviours and records."""

    def __init__(self, owner: ConformanceServer, behaviour: dict[str, Any],
                 checker: ClientChecker, transcript: Transcript):
        self.owner = owner
        self.behaviour = behaviour
        self.checker = checker
        self.transcript = transcript
        self.token: str | None = behaviour.get("auth_token")
        self.dead_phase = bool(behaviour.get("dead"))
        self.counts: Counter[str] = Counter()
        self.live: dict[int, _Live] = {}
        self.events: list[dict[str, Any]] = []
        self._ids = 0
        self.ended = False
        self.computed: dict[tuple[str, int], dict] = {}   # fuzz mode: the real replies
        messages = {name: e.message for name, e in owner.profile.model.errors.items()}
        self.messages = messages
        self.max_in_flight = int(owner.profile.limit("max_in_flight").value)

    def now(self) -> float:
        return time.monotonic() - self.transcript.started

    def _event(self, what: str, conn: int, **extra: Any) -> None:
        self.events.append({"t": self.now(), "what": what, "conn": conn, **extra})

    def _nth(self, key: str, cmd: str) -> int | None:
        """The request's number among the scenario's requests to the behaviour's cmds."""
        spec = self.behaviour.get(key)
        if not isinstance(spec, dict) or cmd not in (spec.get("cmds") or ()):
            return None
        self.counts[key] += 1
        return self.counts[key]

    # -- a connection
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._ids += 1
        conn = self._ids
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        dead = self.dead_phase and not any(lv.dead and lv.closed_by is None
                                           for lv in self.live.values())
        if self.dead_phase and not dead:
            self.dead_phase = False  # a new connection beside the dead one: a reconnect
        live = _Live(conn, writer, self.owner.embedded.open(), dead=dead,
                     slots=asyncio.Semaphore(self.max_in_flight))
        self.live[conn] = live
        self.checker.opened(conn)
        peer = writer.get_extra_info("peername")
        note = f"client connected from {peer[0]}:{peer[1]}" if peer else "client connected"
        self.transcript.add(conn, "open", note=note + (" (dead link: never answered)"
                                                          if live.dead else ""))
        self._event("open", conn, dead=live.dead)
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    if live.closed_by is None:
                        live.closed_by = "client"
                        self.transcript.add(conn, "close", note="the client closed the connection")
                        self._event("close", conn, by="client", dead=live.dead)
                        if live.dead:
                            self.dead_phase = False
                    break
                frames, error = self.checker.feed(conn, data, self.now())
                shown = head_tail(frames, FRAMES_HEAD, FRAMES_TAIL, "frames of this read")
                self.transcript.add(conn, "recv", data, decoded=[jsonable(f) for f in shown]
                                    + ([{"error": str(error)}] if error else []))
                for request in frames:
                    if not await self._dispatch(live, request):
                        break
                if error is not None and error.reaction == "close":
                    self._close(live, "server", f"framing error: {error}")
                    break
        except (ConnectionError, OSError) as exc:
            if live.closed_by is None:
                live.closed_by = "client"
                self.transcript.add(conn, "close", note=f"connection lost: {exc}")
                self._event("close", conn, by="client", dead=live.dead)
                if live.dead:
                    self.dead_phase = False
        finally:
            self.owner.embedded.close(live.eid)
            self.checker.closed(conn)

    async def _dispatch(self, live: _Live, request: Any) -> bool:
        """Answer ``request`` in a task once one of the connection's slots is free (until
        then nothing more is read from it); False when the connection is over meanwhile."""
        assert live.slots is not None
        await live.slots.acquire()
        if live.closed_by is not None or self.ended:
            live.slots.release()
            return False
        task = asyncio.get_running_loop().create_task(self._answer(live, request))
        live.tasks.add(task)
        task.add_done_callback(live.answered)
        return True

    def _close(self, live: _Live, by: str, why: str) -> None:
        if live.closed_by is not None:
            return
        live.closed_by = by
        self.transcript.add(live.conn, "close", note=f"the server closed the connection: {why}")
        self._event("close", live.conn, by=by, dead=live.dead)
        with contextlib.suppress(Exception):
            live.writer.close()

    def end(self) -> None:
        """The scenario is over: close what is left, stop its pending answers."""
        self.ended = True
        for live in self.live.values():
            if live.flush is not None:
                live.flush.cancel()
            for task in list(live.tasks):
                task.cancel()
            if live.closed_by is None:
                live.closed_by = "end"
                with contextlib.suppress(Exception):
                    live.writer.transport.abort()

    # -- answering
    def _error(self, name: str, **fmt: Any) -> dict[str, Any]:
        text = self.messages[name]
        with contextlib.suppress(KeyError, IndexError):
            text = text.format(**fmt)
        return {"ok": False, "error": text}

    async def _answer(self, live: _Live, request: Any) -> None:
        if live.dead or live.closed_by is not None:
            return
        b: Any = self.behaviour  # the scenario's data: _nth holds each entry it counts a dict
        arrival = None
        if b.get("mangle") is not None and type(request) is dict:
            self.counts["mangle:" + str(request.get("cmd"))] += 1
            arrival = self.counts["mangle:" + str(request.get("cmd"))]
        reply: dict[str, Any] | None
        if type(request) is not dict:
            reply = self._error("invalid_command")
            cmd = ""
        else:
            cmd = str(request.get("cmd"))
            reply = None
            if self.token is not None:
                if cmd == "Auth":
                    ok = request.get("token") == self.token
                    live.authenticated = live.authenticated or ok
                    reply = {"ok": True} if ok else self._error("invalid_token")
                elif not live.authenticated and cmd != "Hello":
                    reply = self._error("not_authenticated")
            refuse = b.get("refuse")
            if reply is None and (n := self._nth("refuse", cmd)) is not None:
                first = int(refuse.get("first", 1))
                if first <= n < first + int(refuse.get("count", 1)):
                    reply = self._error(str(refuse.get("error", "rate_limit_exceeded")))
            if reply is None:
                forwarded = request
                if cmd in ("PULL", "PULLB") and b.get("lock_ttl") and request.get("owner"):
                    forwarded = {**request, "lockTtl": int(b["lock_ttl"])}
                reply = await self.owner.embedded.request(live.eid, forwarded)
            if "reqId" in request:
                reply = {**reply, "reqId": request["reqId"]}
        delay = b.get("delay")
        if (n := self._nth("delay", cmd)) is not None and n == int(delay.get("nth", 1)):
            self.transcript.add(live.conn, "note", note=f"holding the reply to {cmd} for "
                                f"{delay.get('ms')} ms")
            await asyncio.sleep(float(delay.get("ms", 1000)) / 1000.0)
        if arrival is not None:
            self.computed[(cmd, arrival)] = reply
            plan = b["mangle"](cmd, arrival, request, reply)
            if plan is not None:
                await self._send_plan(live, plan, request, reply)
                return
        data = self.owner.embedded.encode(reply)
        drop = b.get("drop")
        if (n := self._nth("drop", cmd)) is not None and n == int(drop.get("nth", 1)):
            async with live.lock:
                half = data[:max(1, len(data) // 2)]
                with contextlib.suppress(Exception):
                    live.writer.write(half)
                    await live.writer.drain()
                self.transcript.add(live.conn, "send", half, decoded={"partial_of": jsonable(reply)},
                                    note=f"{len(half)} of {len(data)} bytes, then close")
                self._close(live, "server", f"dropped halfway through the reply to {cmd}")
            return
        await self._send(live, data, request, reply)
        restart = b.get("restart")
        if (n := self._nth("restart", cmd)) is not None and n == int(restart.get("nth", 1)):
            await self.owner.restart(self, float(restart.get("down_ms", 300)) / 1000.0)

    async def _send(self, live: _Live, data: bytes, request: Any, reply: dict) -> None:
        b = self.behaviour
        window = (b.get("reorder") or b.get("coalesce") or {}).get("window_ms")
        if window:
            live.pending.append((data, request, reply))
            if live.flush is None:
                loop = asyncio.get_running_loop()
                live.flush = loop.call_later(float(window) / 1000.0, self._flush_pending, live)
            return
        async with live.lock:
            if live.closed_by is not None:
                return
            try:
                if b.get("split"):
                    for i in range(len(data)):
                        live.writer.write(data[i:i + 1])
                        await live.writer.drain()
                        await asyncio.sleep(SPLIT_PAUSE)
                else:
                    live.writer.write(data)
                    await live.writer.drain()
            except (ConnectionError, OSError):
                return
            self.checker.replied(live.conn, request, reply, self.now())
            self.transcript.add(live.conn, "send", data, decoded=jsonable(reply),
                                note="one byte per segment" if b.get("split") else "")

    async def _send_plan(self, live: _Live, plan: dict[str, Any], request: Any,
                         reply: dict) -> None:
        """Fuzz mode: the writes that replace ``reply``, then a close when the plan says."""
        async with live.lock:
            if live.closed_by is not None:
                return
            for data in plan["writes"]:
                try:
                    live.writer.write(data)
                    await live.writer.drain()
                except (ConnectionError, OSError):
                    return
                self.transcript.add(live.conn, "send", data, note=f"fuzz: {plan['note']}")
            if plan.get("close"):
                self._close(live, "server", f"fuzz: {plan['note']}")

    def _flush_pending(self, live: _Live) -> None:
        live.flush = None
        items, live.pending = live.pending, []
        if not items or live.closed_by is not None:
            return
        if self.behaviour.get("reorder"):
            items.reverse()
        data = b"".join(d for d, _, _ in items)
        with contextlib.suppress(Exception):
            live.writer.write(data)
        for _, request, reply in items:
            self.checker.replied(live.conn, request, reply, self.now())
        order = "in reverse order" if self.behaviour.get("reorder") else "in order"
        shown = head_tail([r for _, _, r in items], FRAMES_HEAD, FRAMES_TAIL, "replies")
        self.transcript.add(live.conn, "send", data, decoded=[jsonable(r) for r in shown],
                            note=f"{len(items)} replies in one write, {order}")


class ConformanceServer(ScenarioListener):
    """Listens on ``host:port`` (0: a free port) for a whole run; see the module docstring."""

    def __init__(self, profile: Profile, host: str = "127.0.0.1", port: int = 0):
        super().__init__(profile, host, port)
        self.embedded = EmbeddedServer(profile, tune_gc=False)
        self._stopped = False

    async def start(self) -> ConformanceServer:
        await self.embedded.start()
        await self._listen()
        return self

    async def stop(self) -> None:
        self._stopped = True
        await self._stop_listening()
        await self.embedded.stop()

    def new_checker(self, behaviour: dict[str, Any], options: dict[str, Any]) -> ClientChecker:
        """The scenario's checker: Auth first is the client's duty only when it was given the
        token the server requires (BQ-AUTH-1)."""
        token = options.get("token") if behaviour.get("auth_token") else None
        return ClientChecker(self.profile, token=token)

    def _new_session(self, behaviour: dict[str, Any], checker: ClientChecker,
                     transcript: Transcript) -> Session:
        return Session(self, behaviour, checker, transcript)

    async def restart(self, session: Session, down: float) -> None:
        """Close every connection and refuse new ones for ``down`` seconds (the engine and
        its jobs stay, as a server restarted on its data would have them)."""
        session.transcript.add(0, "note", note=f"server restart: every connection closed, the "
                               f"port refused for {down * 1000:.0f} ms")
        session._event("restart", 0)
        if self._server is not None:
            self._server.close()
            self._server = None
        for live in list(session.live.values()):
            session._close(live, "server", "server restart")
        await asyncio.sleep(down)
        if not self._stopped:
            await self._listen()
        session._event("listening", 0)
