"""asyncio shells over the quicx client sessions: :class:`QuicxProducer`,
:class:`QuicxWorker` and :class:`QuicxMonitor`.

The protocol logic is in :mod:`.quicx_session`; a shell only moves bytes and time. A
:class:`_Link` runs one session over one TCP connection: a reader task feeds
``receive_data``/``receive_eof`` and writes whatever the session queued, a heartbeat task
sleeps until the session's ``next_tick()`` and calls ``tick()``, and the session's events are
handed to the owner. Futures stand in for 003's pending-request promises: the producer keeps
one pair (accepted, final) per :class:`~.quicx_session.Submission` and resolves them from
``Accepted`` and ``Settled`` events; a timeout abandons the submission in the session (which
keeps a tombstone for the late answer) and raises :class:`~.quicx_session.QuicxTimeout`.
Errors are never thrown out of the reader: they close the session, which settles every
pending request with the error (connection lost, protocol violation, "Session stopped").

Graceful stops follow 003's order: stop taking new work, let what is pending finish (a
producer's answers, a worker's running task and its result), stop the heartbeats, close the
socket, then fail whatever is still pending with "Session stopped". A worker runs one task
at a time per connection and opens ``concurrency`` connections; its handlers are looked up by
task type and may be plain or ``async`` callables taking the
:class:`~.quicx_session.Assignment`; an exception (or a type without a handler) becomes
MSG_FAILED with the exception text as the reason. If a worker's connection drops while a
handler runs, the handler is cancelled: the daemon requeues that task (QX-WORKER-1), so
letting it finish would run it twice; a handler's exception is logged (ERROR, with the task
id and type and the traceback). A connect that fails (refused, or no connection within
``connect_timeout`` s) raises :class:`~.quicx_session.QuicxConnectError`, which says why
("connection refused") and has the OSError as its cause: ``connect()`` and ``start()`` raise
it at once (a worker's first connection must succeed). Lost connections are re-established
with an exponential backoff when ``reconnect`` is true, also after a protocol violation (the
daemon's broken frame closes that connection, QX-DIR-2; the next one starts clean), whose
backoff keeps growing until a connection ends without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..spec import Profile, load_profile
from .quicx_session import (
    Accepted,
    Assignment,
    Closed,
    ErrorReceived,
    Event,
    MonitorSession,
    ProducerSession,
    QuicxConnectError,
    QuicxConnectionLost,
    QuicxProtocolViolation,
    QuicxRefused,
    QuicxSessionStopped,
    QuicxStateError,
    QuicxTimeout,
    RequestState,
    Settled,
    StatsRequest,
    Submission,
    TaskAssigned,
    WaitAdvised,
    WorkerSession,
)

__all__ = [
    "Assignment",
    "Handler",
    "QuicxConnectError",
    "QuicxConnectionLost",
    "QuicxMonitor",
    "QuicxProducer",
    "QuicxProtocolViolation",
    "QuicxRefused",
    "QuicxSessionStopped",
    "QuicxStateError",
    "QuicxTimeout",
    "QuicxWorker",
    "SubmitResult",
]

log = logging.getLogger("queuewire.client.quicx")
READ_SIZE = 64 * 1024

#: A task handler: takes the assignment, returns anything (ignored) or an awaitable.
Handler = Callable[[Assignment], Any]


def _default_port(profile: Profile | str, port: int | None) -> tuple[Profile, int]:
    prof = load_profile(profile) if isinstance(profile, str) else profile
    return prof, prof.model.default_port if port is None else port


class _Link:
    """One session over one TCP connection."""

    def __init__(self, session: Any, host: str, port: int, on_events: Callable[[list[Event]], None],
                 connect_timeout: float | None = None):
        self.session = session
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self.on_events = on_events
        self.writer: asyncio.StreamWriter | None = None
        self.closed = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def open(self) -> None:
        self.session.start()
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as exc:  # refused, unreachable, a bad host name, the connect timeout
            error = QuicxConnectError(self.host, self.port, exc, self.connect_timeout)
            self.session.connection_lost(error)
            self.closed.set()
            raise error from exc
        self.writer = writer
        self.dispatch(self.session.connected())
        self._tasks = [asyncio.create_task(self._read(reader)),
                       asyncio.create_task(self._heartbeat())]

    def dispatch(self, events: list[Event]) -> None:
        """Write what the session queued, hand its events over, close when it closed."""
        writer = self.writer
        data = self.session.data_to_send()
        if data and writer is not None and not writer.is_closing():
            writer.write(data)
        if events:
            self.on_events(events)
        if self.session.closed:
            self._shut()

    def _shut(self) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.close()  # after what was written (a final result) is flushed
        self.closed.set()

    async def drain(self) -> None:
        if self.writer is not None and not self.writer.is_closing():
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        session = self.session
        try:
            while not session.closed:
                data = await reader.read(READ_SIZE)
                self.dispatch(session.receive_data(data) if data else session.receive_eof())
        except OSError as exc:
            self.dispatch(session.connection_lost(QuicxConnectionLost(f"connection lost: {exc}")))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - a bug must not leave futures hanging
            log.exception("%s: unexpected error in the reader", session.role)
            self.dispatch(session.connection_lost(QuicxConnectionLost(f"internal error: {exc!r}")))
        finally:
            self._shut()

    async def _heartbeat(self) -> None:
        session = self.session
        if not (session.can_heartbeat and session.heartbeat_interval):
            return  # nothing will ever be due
        with contextlib.suppress(asyncio.CancelledError):
            while not session.closed:
                due = session.next_tick()
                await asyncio.sleep(1.0 if due is None else max(due - session.now(), 0.0) + 0.001)
                self.dispatch(session.tick())

    def abort(self, error: Exception | None = None) -> None:
        """Close now: pending requests are settled with ``error``."""
        self.dispatch(self.session.connection_lost(error))
        if self.writer is not None:
            self.writer.transport.abort()
        self.closed.set()

    async def wait_closed(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def finish(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# --------------------------------------------------------------------------------- producer

@dataclass(frozen=True)
class SubmitResult:
    """The outcome of a submission: ``accepted`` where the profile forwards no result,
    else ``done`` or ``failed`` (with the worker's ``reason``)."""

    task_id: int
    status: str
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"


class _Waiter:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.accepted: asyncio.Future = loop.create_future()
        self.final: asyncio.Future = loop.create_future()

    def fail(self, error: BaseException) -> None:
        for fut in (self.accepted, self.final):
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # retrieved: only the awaited one is reported


class QuicxProducer:
    """Submits tasks: ``await producer.submit("send_email", b"...")`` -> :class:`SubmitResult`.

    ``timeout`` bounds the wait for MSG_OK / MSG_ERROR; ``result_timeout`` the wait for the
    forwarded DONE / FAILED (None: no bound). Submissions may run concurrently on one
    connection; the daemon answers them in order. A refusal raises
    :class:`~.quicx_session.QuicxRefused` with the daemon's error code.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, *,
                 profile: Profile | str = "quicx/v1", timeout: float | None = 10.0,
                 result_timeout: float | None = None, heartbeat_interval: float | None = None,
                 pong_timeout: float = 10.0, connect_timeout: float | None = 10.0):
        self.profile, self.port = _default_port(profile, port)
        self.host = host
        self.timeout, self.result_timeout = timeout, result_timeout
        self.session = ProducerSession(self.profile, heartbeat_interval=heartbeat_interval,
                                       pong_timeout=pong_timeout)
        self._link = _Link(self.session, host, self.port, self._on_events, connect_timeout)
        self._waiters: dict[Submission, _Waiter] = {}
        self.errors: list[Exception] = []

    async def connect(self) -> QuicxProducer:
        await self._link.open()
        return self

    async def __aenter__(self) -> QuicxProducer:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self.session.closed

    async def submit(self, task_type: str, payload: bytes = b"", *,
                     timeout: float | None | Any = ..., result_timeout: float | None | Any = ...
                     ) -> SubmitResult:
        ok_timeout = self.timeout if timeout is ... else timeout
        res_timeout = self.result_timeout if result_timeout is ... else result_timeout
        session = self.session
        if session.closed:
            raise QuicxConnectionLost(f"the producer session is closed ({session.close_reason})")
        sub = session.submit(task_type, payload)
        waiter = self._waiters[sub] = _Waiter(asyncio.get_running_loop())
        self._link.dispatch([])
        try:
            await self._link.drain()
            try:
                await asyncio.wait_for(asyncio.shield(waiter.accepted), ok_timeout)
            except TimeoutError:
                self._link.dispatch(session.abandon(sub))
                raise QuicxTimeout(f"no answer to MSG_SUBMIT within {ok_timeout} s") from None
            try:
                return await asyncio.wait_for(asyncio.shield(waiter.final), res_timeout)
            except TimeoutError:
                self._link.dispatch(session.abandon(sub))
                raise QuicxTimeout(f"no result for task {sub.task_id} within {res_timeout} s") from None
        finally:
            self._waiters.pop(sub, None)

    def _on_events(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Accepted):
                waiter = self._waiters.get(event.submission)
                if waiter is not None and not waiter.accepted.done():
                    waiter.accepted.set_result(event.submission.task_id)
            elif isinstance(event, Settled):
                sub = event.request
                waiter = self._waiters.get(sub) if isinstance(sub, Submission) else None
                if waiter is None:
                    continue
                if sub.state in (RequestState.ACCEPTED, RequestState.DONE, RequestState.FAILED):
                    assert isinstance(sub, Submission) and sub.task_id is not None
                    if not waiter.accepted.done():
                        waiter.accepted.set_result(sub.task_id)
                    if not waiter.final.done():
                        waiter.final.set_result(SubmitResult(sub.task_id, sub.state.value, sub.reason))
                else:
                    waiter.fail(sub.error or QuicxConnectionLost("connection lost"))
            elif isinstance(event, ErrorReceived):
                self.errors.append(event.error)
            elif isinstance(event, Closed) and event.error is not None:
                self.errors.append(event.error)

    async def close(self, grace: float = 5.0) -> None:
        """Graceful: no new submissions, wait up to ``grace`` s for the pending ones, close."""
        self._link.dispatch(self.session.stop())
        if not await self._link.wait_closed(grace):
            self._link.abort(QuicxSessionStopped("Session stopped"))
        await self._link.finish()


# ---------------------------------------------------------------------------------- monitor

class QuicxMonitor:
    """Asks for MSG_STATS snapshots: ``await monitor.stats()`` -> the response's fields.

    Raises :class:`~.quicx_session.QuicxStateError` in a profile that carries no stats on
    TCP (quicx/1.0.3 serves them on a Unix socket, which this client does not speak).
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, *,
                 profile: Profile | str = "quicx/v1", timeout: float | None = 10.0,
                 connect_timeout: float | None = 10.0):
        self.profile, self.port = _default_port(profile, port)
        self.host, self.timeout = host, timeout
        self.session = MonitorSession(self.profile)
        self._link = _Link(self.session, host, self.port, self._on_events, connect_timeout)
        self._futures: dict[StatsRequest, asyncio.Future] = {}

    async def connect(self) -> QuicxMonitor:
        await self._link.open()
        return self

    async def __aenter__(self) -> QuicxMonitor:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def stats(self, timeout: float | None | Any = ...) -> dict[str, Any]:
        req = self.session.request_stats()
        fut = self._futures[req] = asyncio.get_running_loop().create_future()
        self._link.dispatch([])
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.timeout if timeout is ... else timeout)
        except TimeoutError:
            self._link.dispatch(self.session.abandon(req))
            raise QuicxTimeout("no answer to MSG_STATS") from None
        finally:
            self._futures.pop(req, None)

    def _on_events(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Settled) and isinstance(event.request, StatsRequest):
                fut = self._futures.get(event.request)
                if fut is None or fut.done():
                    continue
                if event.request.fields is not None:
                    fut.set_result(event.request.fields)
                else:
                    fut.set_exception(event.request.error or QuicxConnectionLost("connection lost"))

    async def close(self, grace: float = 5.0) -> None:
        self._link.dispatch(self.session.stop())
        if not await self._link.wait_closed(grace):
            self._link.abort(QuicxSessionStopped("Session stopped"))
        await self._link.finish()


# ----------------------------------------------------------------------------------- worker

class QuicxWorker:
    """Runs tasks from a daemon: handlers by task type, ``concurrency`` connections.

    ``async with QuicxWorker(port=..., handlers={"send_email": send}) as worker: ...``, or
    ``await worker.start()`` ... ``await worker.stop()``. ``stop()`` is graceful (running
    tasks finish and their results are sent); ``abort()`` drops the connections at once (the
    daemon requeues their tasks). Counters: ``done``, ``failed``; ``errors`` collects what
    closed a connection or what the daemon refused.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, *,
                 profile: Profile | str = "quicx/v1", handlers: Mapping[str, Handler] | None = None,
                 concurrency: int = 1, backoff_min: float = 0.05, backoff_max: float = 1.0,
                 heartbeat_interval: float | None = 15.0, pong_timeout: float = 10.0,
                 reconnect: bool = True, reconnect_min: float = 0.1, reconnect_max: float = 2.0,
                 connect_timeout: float | None = 10.0):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.profile, self.port = _default_port(profile, port)
        self.host = host
        self.handlers: dict[str, Handler] = dict(handlers or {})
        self.concurrency = concurrency
        self._session_args: dict[str, Any] = {
            "backoff_min": backoff_min, "backoff_max": backoff_max,
            "heartbeat_interval": heartbeat_interval, "pong_timeout": pong_timeout}
        self.reconnect = reconnect
        self.reconnect_min, self.reconnect_max = reconnect_min, reconnect_max
        self.connect_timeout = connect_timeout
        self.done = 0
        self.failed = 0
        self.errors: list[Exception] = []
        self._links: set[_Link] = set()
        self._running: dict[_Link, asyncio.Task] = {}
        self._slots: list[asyncio.Task] = []
        self._stopping = False
        self._connected: asyncio.Event | None = None

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """Decorator: register ``fn`` for ``task_type``."""
        def register(fn: Handler) -> Handler:
            self.handlers[task_type] = fn
            return fn
        return register

    async def start(self) -> QuicxWorker:
        """Open the connections; returns once each has connected, or raises the first
        connection's error (a :class:`~.quicx_session.QuicxConnectError`: the first
        connection must succeed; ``reconnect`` applies to the ones after it)."""
        if self._slots:
            raise QuicxStateError("the worker is already started")
        self._stopping = False
        ready = [asyncio.get_running_loop().create_future() for _ in range(self.concurrency)]
        self._slots = [asyncio.create_task(self._slot(fut)) for fut in ready]
        try:
            await asyncio.gather(*ready)
        except BaseException:
            await self.abort()  # no half-started worker
            for fut in ready:
                if fut.done() and not fut.cancelled():
                    fut.exception()
            raise
        return self

    async def __aenter__(self) -> QuicxWorker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(self) -> None:
        """Start (if needed) and serve until stopped."""
        if not self._slots:
            await self.start()
        await asyncio.gather(*self._slots, return_exceptions=True)

    async def stop(self, timeout: float = 30.0) -> None:
        """Graceful: idle connections close now, busy ones after their task's result."""
        self._stopping = True
        for link in list(self._links):
            link.dispatch(link.session.stop())
        done, pending = await asyncio.wait(self._slots, timeout=timeout) if self._slots else ((), ())
        if pending:
            await self.abort()
        self._slots = []

    async def abort(self) -> None:
        """Close every connection now, without results; running handlers are cancelled."""
        self._stopping = True
        for link in list(self._links):
            link.abort(QuicxSessionStopped("worker aborted"))
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._slots, return_exceptions=True)
        self._slots = []

    @property
    def connections(self) -> int:
        return sum(1 for link in self._links if not link.session.closed)

    async def _slot(self, ready: asyncio.Future) -> None:
        """One connection, reconnected after a loss while the worker runs."""
        delay = self.reconnect_min
        while not self._stopping:
            session = WorkerSession(self.profile, **self._session_args)
            link = _Link(session, self.host, self.port, lambda events: None, self.connect_timeout)
            link.on_events = functools.partial(self._on_events, link)
            self._links.add(link)
            try:
                await link.open()
            except QuicxConnectionLost as exc:
                self._links.discard(link)
                if not ready.done():  # the first connection must succeed
                    ready.set_exception(exc)
                    return
                if not self.reconnect:
                    self.errors.append(exc)
                    return
                log.info("worker: %s; retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.reconnect_max)
                continue
            if not ready.done():
                ready.set_result(None)
            try:
                await link.closed.wait()
                running = self._running.get(link)
                if running is not None:
                    await asyncio.gather(running, return_exceptions=True)
            finally:
                await link.finish()
                self._links.discard(link)
            if not self.reconnect:
                break
            if isinstance(session.error, QuicxProtocolViolation):
                # the daemon broke a frame: come back, but with the backoff growing, so a
                # daemon that breaks every connection is not hammered (the error is in
                # ``errors`` already, from the session's Closed event)
                log.warning("worker: %s; reconnecting in %.2f s", session.error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.reconnect_max)
            else:
                delay = self.reconnect_min
        if not ready.done():
            ready.set_result(None)

    def _on_events(self, link: _Link, events: list[Event]) -> None:
        loop = asyncio.get_running_loop()
        for event in events:
            if isinstance(event, TaskAssigned):
                self._running[link] = loop.create_task(self._execute(link, event.task))
            elif isinstance(event, WaitAdvised):
                loop.call_later(event.delay, self._backoff_over, link)
            elif isinstance(event, ErrorReceived):
                self.errors.append(event.error)
            elif isinstance(event, Closed):
                if event.error is not None:
                    if not isinstance(event.error, QuicxSessionStopped):
                        self.errors.append(event.error)
                    running = self._running.get(link)
                    if running is not None and not running.done():
                        running.cancel()  # the daemon requeues it; finishing would run it twice

    def _backoff_over(self, link: _Link) -> None:
        if not link.session.closed:
            link.session.backoff_elapsed()
            link.dispatch([])

    async def _execute(self, link: _Link, task: Assignment) -> None:
        session = link.session
        error: str | None = None
        try:
            handler = self.handlers.get(task.task_type)
            if handler is None:
                raise LookupError(f"no handler for task type {task.task_type!r}")
            result = handler(task)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            return
        except Exception as exc:  # noqa: BLE001 - a handler's failure is the task's result
            log.error("worker: the handler of task %s (%s) raised; failing the task",
                      task.task_id, task.task_type, exc_info=exc)
            error = str(exc) or type(exc).__name__
        finally:
            if self._running.get(link) is asyncio.current_task():
                del self._running[link]
        if session.closed:  # the connection went away meanwhile: the daemon requeues the task
            return
        if error is None:
            self.done += 1
        else:
            self.failed += 1
        link.dispatch(session.finish(task.task_id, error))
        await link.drain()


