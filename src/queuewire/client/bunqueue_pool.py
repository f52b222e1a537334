"""The asyncio shell of the bunqueue client: links (one session each) and the pool.

Design. A :class:`Link` runs one :class:`~.bunqueue_session.BunqueueSession` over a TCP socket
(an :class:`asyncio.Protocol`, so bytes reach the session in the turn they arrive) and does
nothing the session does not tell it to: it connects when the session starts or
says :class:`~.bunqueue_session.ConnectNow`, writes what the session queued, feeds it what it
reads, closes the socket on :class:`~.bunqueue_session.LinkDown`, and calls ``tick()`` from a
loop timer armed for ``next_tick()`` (the session's clock is the loop's). The first command of a
loop turn is written at once (a caller awaiting one command at a time loses no turn); the
others sent in the same turn go out together at its end (pipelining without a system call per
command). Each command is an
asyncio future hung on its :class:`~.bunqueue_session.Command`; a settled command resolves it
with the reply or the typed error, so callers only ever see ``BunqueueClientError``
subclasses. Pushed frames go to the link's subscribers; a subscriber's exception is logged,
never raised into the reader (document 003: errors are channelled, not thrown).

A :class:`Pool` holds ``pool_size`` links to one address and picks one per command
round-robin, preferring READY links (BQ-CLIENT-5). :meth:`Pool.connect` is what entering a
Queue or Worker awaits: it returns once a link is connected (TCP is up; negotiation goes on
and commands wait for it) and raises when every link failed its first connect (the session's
fail-fast rule: a closed port raises :class:`~.bunqueue_session.BunqueueConnectError`
"connection refused" within the connect timeout, not a command timeout later); with
``retry_first_connect`` it returns at once.
Pools are shared: :func:`acquire_pool` returns the running pool for the same event loop,
profile and connection options, counting references, and :func:`release_pool` stops it when
the last user lets go, so every Queue and Worker of a process on one address shares
``pool_size`` sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..spec import Profile, load_profile
from .bunqueue_session import (
    BunqueueClientError,
    BunqueueConnectionLost,
    BunqueueSession,
    BunqueueSessionStopped,
    Command,
    ConnectNow,
    LinkDown,
    PushedFrame,
    Ready,
    SessionState,
)
from .options import ConnectionOptions
from .session import Closed, Event, Settled

__all__ = ["Link", "Pool", "acquire_pool", "release_pool"]

log = logging.getLogger("queuewire.client.bunqueue")

#: pause a caller while this many bytes wait in the socket's buffer (backpressure)
WRITE_HIGH_WATER = 4 * 1024 * 1024

Subscriber = Callable[[dict[str, Any]], Any]


class Link:
    """One session over one (re)connecting TCP socket."""

    def __init__(self, profile: Profile, options: ConnectionOptions, name: str = "link"):
        self.profile = profile
        self.options = options
        self.name = name
        self._loop = asyncio.get_running_loop()
        self.session = BunqueueSession(profile, options, clock=self._loop.time)
        self._protocol: _LinkProtocol | None = None
        self._connect_task: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = float("inf")
        self._flush_soon = False  # a flush at the end of this turn is scheduled
        self._sent_alone = False  # a command went out at once since the last dispatch
        self._ready = asyncio.Event()
        self._stopped = asyncio.Event()
        self._waiters: list[asyncio.Future] = []  # connect(): woken by TCP up, LinkDown, Closed
        self.subscribers: list[Subscriber] = []
        self.on_ready: list[Callable[[], Any]] = []

    # -- lifecycle
    def start(self) -> None:
        self.session.start()
        self._connect_task = self._loop.create_task(self._connect(), name=f"{self.name}-connect")

    @property
    def ready(self) -> bool:
        return self.session.state is SessionState.READY

    @property
    def stopped(self) -> bool:
        return self.session.stopped

    @property
    def connected(self) -> bool:
        """TCP is up (negotiating, READY or draining)."""
        return self.session.state in (SessionState.NEGOTIATING, SessionState.READY,
                                      SessionState.STOPPING)

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Whether the link became READY within ``timeout`` s; False at once once stopped."""
        ready = asyncio.ensure_future(self._ready.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait((ready, stopped), timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            stopped.cancel()
        return self.ready

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def connect(self) -> None:
        """Return once TCP is up. While the first connect fails fast (``session.fails_fast``),
        a backoff in progress is cut short and a failed attempt raises its
        :class:`~.bunqueue_session.BunqueueConnectError`; a stopped link raises why. A link
        that does not fail fast (it was up once, or ``retry_first_connect``) returns at once:
        its commands wait for the reconnect."""
        if self.connected or not (self.stopped or self.session.fails_fast):
            return
        if self.stopped:
            raise self._stop_error()
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        self.session.connect_soon()
        self._arm()
        try:
            await waiter
        finally:
            self._waiters.remove(waiter)

    def _stop_error(self) -> BunqueueClientError:
        error = self.session.error
        return error if isinstance(error, BunqueueClientError) else BunqueueSessionStopped(
            "Session stopped")

    def _wake(self, error: BaseException | None) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    async def stop(self, grace: float = 5.0) -> None:
        """Graceful stop: pending commands drain (for at most ``grace`` s), then close."""
        self._dispatch(self.session.stop())
        if not self.session.stopped:
            try:
                async with asyncio.timeout(grace):
                    await self._stopped.wait()
            except TimeoutError:
                self._dispatch(self.session.abort(BunqueueSessionStopped(
                    f"Session stopped: still pending after the {grace:g} s grace")))
        await self._teardown()

    async def abort(self) -> None:
        self._dispatch(self.session.abort())
        await self._teardown()

    async def _teardown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._close_socket()
        tasks = [t for t in (self._connect_task,)
                 if t is not None and t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- commands
    async def call(self, payload: Mapping[str, Any], timeout: float | None = None) -> dict:
        """Send one command and return its reply; typed errors otherwise."""
        command = self.session.send(payload, timeout)
        future = self._loop.create_future()
        command.waiter = future
        # A command goes out at once when none went since the server last spoke (a caller
        # awaiting each reply, as add() in a loop does, costs no extra turn of the loop);
        # the next ones wait for the end of the turn and go out in one write (a gather).
        if not self._sent_alone:
            self._sent_alone = True
            self._flush()
            self._arm()
        elif not self._flush_soon:
            self._flush_soon = True
            self._loop.call_soon(self._flush_turn)
        protocol = self._protocol
        if protocol is not None and protocol.paused:  # the socket's buffer is over its mark
            await protocol.writable()
        return await future

    def send_nowait(self, payload: Mapping[str, Any], timeout: float | None = None,
                    ) -> asyncio.Future:
        """Like :meth:`call` but returns the future at once (for pipelined bursts)."""
        command = self.session.send(payload, timeout)
        future = self._loop.create_future()
        command.waiter = future
        return future

    def _flush_turn(self) -> None:
        self._flush_soon = self._sent_alone = False
        self._flush()
        self._arm()

    def flush(self) -> None:
        """Write what :meth:`send_nowait` queued."""
        self._flush()
        self._arm()

    # -- the socket
    async def _connect(self) -> None:
        options = self.options
        host, port = options.address
        try:
            async with asyncio.timeout(options.connect_seconds):
                transport, protocol = await self._loop.create_connection(
                    lambda: _LinkProtocol(self), host, port)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - OSError, a timeout, a bad host name, ...
            self._dispatch(self.session.connect_failed(exc))  # the error's __cause__
            return
        if self.session.state is not SessionState.CONNECTING:  # stopped meanwhile
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if options.keepalive:  # BQ-CLIENT-7
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._protocol = protocol
        self._dispatch(self.session.connected())
        self._wake(None)

    # what the protocol reports (only while it is the link's current one)
    def _received(self, protocol: _LinkProtocol, data: bytes) -> None:
        if protocol is self._protocol:
            self._dispatch(self.session.receive_data(data))

    def _eof(self, protocol: _LinkProtocol) -> None:
        if protocol is self._protocol:
            self._dispatch(self.session.receive_eof())

    def _lost(self, protocol: _LinkProtocol, exc: Exception | None) -> None:
        if protocol is self._protocol:
            self._dispatch(self.session.connection_lost(BunqueueConnectionLost(
                f"Connection lost: {exc}" if exc else "Connection lost")))

    def _close_socket(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.close()

    # -- the session's output
    def _flush(self) -> None:
        data = self.session.data_to_send()
        if data:
            protocol = self._protocol
            if protocol is not None:
                protocol.write(data)

    def _dispatch(self, events: list[Event]) -> None:
        self._sent_alone = False
        self._flush()
        for event in events:
            if type(event) is Settled:
                command: Command = event.request  # type: ignore[assignment]
                future = command.waiter
                if future is not None and not future.done():
                    if command.error is None:
                        future.set_result(command.result)
                    else:
                        future.set_exception(command.error)
            elif type(event) is PushedFrame:
                for subscriber in list(self.subscribers):
                    try:
                        subscriber(event.frame)
                    except Exception:  # noqa: BLE001 - a callback's error is not the link's
                        log.exception("%s: a pushed-frame subscriber failed", self.name)
            elif type(event) is Ready:
                self._ready.set()
                for callback in list(self.on_ready):
                    try:
                        callback()
                    except Exception:  # noqa: BLE001
                        log.exception("%s: an on-ready callback failed", self.name)
            elif type(event) is LinkDown:
                self._ready.clear()
                if self.session.fails_fast:  # the first connect failed: connect() raises
                    self._wake(event.error or BunqueueConnectionLost("Connection lost"))
                log.info("%s: link down (%s)%s", self.name, event.reason,
                         "" if event.retry_at is None else
                         f"; reconnecting in {max(0.0, event.retry_at - self._loop.time()):.2f} s")
                self._close_socket()
            elif type(event) is ConnectNow:
                self._connect_task = self._loop.create_task(self._connect(),
                                                            name=f"{self.name}-connect")
            elif type(event) is Closed:
                self._ready.clear()
                self._close_socket()
                self._stopped.set()
                self._wake(self._stop_error())
        self._flush()
        self._arm()

    def _arm(self) -> None:
        """Arm the loop timer for the session's next tick (sooner only; it re-arms itself)."""
        due = self.session.next_tick()
        if due is None or due >= self._timer_due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = self._loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_due = float("inf")
        try:
            self._dispatch(self.session.tick())
        except Exception:  # noqa: BLE001 - the timer must outlive a bug, without spinning
            log.exception("%s: session tick failed", self.name)
            self._timer_due = self._loop.time() + 1.0
            self._timer = self._loop.call_at(self._timer_due, self._on_timer)


class _LinkProtocol(asyncio.Protocol):
    """The socket of one connection of a link: hands what arrives straight to the session
    (no reader task, so an answer settles its caller's future in the turn it arrives)."""

    def __init__(self, link: Link):
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self._writable: asyncio.Future | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.link._received(self, data)
        except Exception:  # noqa: BLE001 - a bug must not kill the event loop's callback
            log.exception("%s: error handling received bytes", self.link.name)
            self.close()

    def eof_received(self) -> bool:
        self.link._eof(self)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._resume()
        self.link._lost(self, exc)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self._resume()

    def _resume(self) -> None:
        self.paused = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    async def writable(self) -> None:
        if self.paused:
            if self._writable is None:
                self._writable = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._writable)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._resume()


class Pool:
    """``pool_size`` links to one address, picked round-robin preferring READY ones."""

    def __init__(self, profile: Profile | str, options: ConnectionOptions):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self.options = options
        self.links: list[Link] = []
        self._turn = itertools.count()
        self._started = False
        self.refs = 0

    def start(self) -> Pool:
        if not self._started:
            self._started = True
            for i in range(self.options.pool_size):
                link = Link(self.profile, self.options, name=f"bunqueue-{i}")
                link.start()
                self.links.append(link)
        return self

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Whether at least one link became READY within ``timeout`` seconds."""
        waits = [asyncio.ensure_future(link.wait_ready()) for link in self.links]
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            return any(w.result() for w in done)
        finally:
            for w in waits:
                w.cancel()

    async def connect(self) -> None:
        """Return once a link is connected, or at once when one does not fail fast (the pool
        was up before, or ``retry_first_connect``: commands wait for the server); raise the
        first error when every link failed its first connect."""
        if any(link.connected or not (link.stopped or link.session.fails_fast)
               for link in self.links):
            return
        waits = [asyncio.ensure_future(link.connect()) for link in self.links]
        errors: list[BaseException] = []
        try:
            for attempt in asyncio.as_completed(waits):
                try:
                    await attempt
                    return
                except BunqueueClientError as exc:
                    errors.append(exc)
        finally:
            for wait in waits:
                if wait.done() and not wait.cancelled():
                    wait.exception()  # retrieved: the first error is the one raised
                wait.cancel()
        raise errors[0]

    def pick(self) -> Link:
        """The next link round-robin, preferring READY ones (BQ-CLIENT-5)."""
        links = self.links
        n = len(links)
        start = next(self._turn)
        for i in range(n):
            link = links[(start + i) % n]
            if link.ready:
                return link
        for i in range(n):  # none READY: one that will be (its commands wait in its backlog)
            link = links[(start + i) % n]
            if not link.stopped:
                return link
        for link in links:  # the reason they stopped (a refused token, say), when there is one
            if isinstance(link.session.error, BunqueueClientError):
                raise link.session.error
        raise BunqueueSessionStopped("Session stopped: every link of the pool is stopped")

    async def call(self, payload: Mapping[str, Any], timeout: float | None = None) -> dict:
        return await self.pick().call(payload, timeout)

    def subscribe(self, subscriber: Subscriber) -> None:
        for link in self.links:
            link.subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        for link in self.links:
            with contextlib.suppress(ValueError):
                link.subscribers.remove(subscriber)

    async def stop(self, grace: float = 5.0) -> None:
        await asyncio.gather(*(link.stop(grace) for link in self.links))


#: the shared pools of each running loop (a loop that is gone takes its entries with it)
_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Pool]] = (
    weakref.WeakKeyDictionary())


def _pools() -> dict[tuple, Pool]:
    return _POOLS.setdefault(asyncio.get_running_loop(), {})


def _key(profile: Profile, options: ConnectionOptions) -> tuple:
    return (profile.name, options)


def acquire_pool(profile: Profile | str, options: ConnectionOptions, *,
                 shared: bool = True) -> Pool:
    """A started pool for this loop, profile and options: the shared one when there is one."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    if not shared:
        own = Pool(prof, options).start()
        own.refs = 1
        return own
    key = _key(prof, options)
    pools = _pools()
    pool = pools.get(key)
    if pool is None or all(link.stopped for link in pool.links):
        pool = pools[key] = Pool(prof, options).start()
    pool.refs += 1
    return pool


async def release_pool(pool: Pool, grace: float = 5.0) -> None:
    """Drop one reference; the last one stops the pool."""
    pool.refs -= 1
    if pool.refs > 0:
        return
    pools = _pools()
    for key, value in list(pools.items()):
        if value is pool:
            del pools[key]
    await pool.stop(grace)
