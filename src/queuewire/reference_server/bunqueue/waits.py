"""Parking long polls on a bunqueue engine: one implementation for the TCP, HTTP and WebSocket
shells.

The engine answers a PULL or PULLB with a timeout, or a WaitJob, with a ``Wait`` instead of a
reply. A shell's :class:`WaitRoom` parks it (``await room.park(conn_id, wait)``) until an
engine event wakes it, then asks ``engine.retry`` (which answers, or gives the same wait
back), and at its deadline asks ``engine.expire`` (the "no job" answer). The engine keeps no
record of parked waits, so a room can be dropped at any time; ``cancel_all`` answers every
poll of a room at once, as if its deadline had passed (a shell stopping).

Every room of one engine (the TCP server's, the HTTP frontend's) parks into the engine's one
:class:`ParkingLot` (``ParkingLot.for_engine``), which holds the bounds and the order that
must hold over all shells together (issue 22: one WebSocket parked 100,000 polls, and every
PUSH then woke all of them):

* **A global cap.** At most ``limit`` polls are parked (BQ-SAFE-1, the profile's
  ``safeguards.max_parked_polls``); a poll beyond it is answered at once as if its timeout
  had elapsed (``engine.expire``), never refused, never queued. A shell may check ``full``
  first and answer inline, as the TCP shell does.
* **FIFO, and as many as an event may serve.** The polls on one key (``(wait.kind,
  wait.key)``) wait in one line, oldest first. An event that brings one job (it names a job:
  a job became waiting, or left the active state and may free a concurrency slot) is one
  *credit* on its queue's line: it wakes the oldest parked poll, or goes to the poll woken
  last if that one may still take more (a PULLB counts as many as its ``count``), so a PUSHB
  of n wakes up to n PULLs and a single PULLB of n just once (a PULLB that takes some jobs
  but fewer than it was credited hands the rest on). An event that names no job (a
  queue resumed, a rate window opened, a limit changed) may bring any number: it wakes the
  oldest poll with the *baton*; a poll holding it that gets a job wakes the next one with it,
  and the chain stops at the first that finds nothing. A job event (WaitJob's key) wakes
  every poll on that job: each gets the same answer.
* **No wake-up lost, no place lost.** A woken poll that finds nothing (another took the job
  first) parks again at its old place in the line, with its old deadline (places are a
  sequence number taken once). A poll woken and then cancelled before it could run (its
  connection closed) hands its credits or its baton to the next in line. An event that finds
  nobody parked while a poll of that line is inside ``retry`` makes that poll retry again
  rather than park, so an event raised by a retry itself is not missed.

Both shells chain the engine's ``notify`` hook and each calls its room's ``wake`` with every
event, so the lot acts on an event once: it ignores the event it has just acted on (the same
object handed on along the chain). Polls are timed with the event loop's ``call_later`` on a
deadline computed from the engine's clock (ms since the epoch).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedKeyList

from .model import Event, Wait

if TYPE_CHECKING:
    from .engine import BunqueueEngine

__all__ = ["ParkingLot", "WaitRoom"]

#: Extra retries a poll makes, instead of parking, after events that found nobody else parked
#: came while it was retrying; a bound, so a poll can never spin on events it causes itself.
MISSED_RETRIES = 2


class _Waiter:
    """One parked poll: its place (``seq``), what it may take (``want``), its future, and what
    its last wake-up gave it (``given`` credits, ``spare`` more it may take, ``baton``)."""

    __slots__ = ("seq", "want", "future", "timer", "given", "spare", "baton")

    def __init__(self, seq: int, want: int):
        self.seq, self.want = seq, want
        self.future: asyncio.Future[bool] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.given = self.spare = 0
        self.baton = False


def _place(waiter: _Waiter) -> int:
    return waiter.seq


class _Line:
    """The polls waiting on one key: ``idle`` (parked, not woken) oldest first."""

    __slots__ = ("idle", "filling", "members", "retrying", "missed")

    def __init__(self) -> None:
        self.idle: SortedKeyList = SortedKeyList(key=_place)
        self.filling: _Waiter | None = None  # woken last, and may still take more credits
        self.members = 0     # polls on this line, whatever their state
        self.retrying = 0    # of them, inside engine.retry now
        self.missed = False  # an event found nobody idle while one was retrying


_LOTS: weakref.WeakKeyDictionary[Any, ParkingLot] = weakref.WeakKeyDictionary()


class ParkingLot:
    """The long polls parked on one engine, over all its shells (see the module doc).

    ``limit`` is the cap (a public attribute; a test may lower it), ``parked`` how many polls
    are parked now."""

    def __init__(self, limit: int):
        self.limit = limit
        self.parked = 0
        self._lines: dict[tuple[str, str], _Line] = {}
        self._seq = itertools.count()
        self._last: Event | None = None

    @classmethod
    def for_engine(cls, engine: BunqueueEngine) -> ParkingLot:
        """The one lot of ``engine`` (made on first use, with the profile's
        ``safeguards.max_parked_polls``)."""
        lot = _LOTS.get(engine)
        if lot is None:
            lot = _LOTS[engine] = cls(int(engine.profile.model.safeguards["max_parked_polls"]))
        return lot

    @property
    def full(self) -> bool:
        return self.parked >= self.limit

    def __bool__(self) -> bool:
        """Whether any poll is parked (cheap: the notify hot path asks it per event)."""
        return bool(self._lines)

    # -- waking
    def wake(self, event: Event) -> None:
        """Wake the polls this engine event may serve (once per event, however many rooms
        hand it on)."""
        if event is self._last:
            return
        self._last = event
        lines = self._lines
        if event.queue is not None:
            line = lines.get(("queue", event.queue))
            if line is not None:
                if event.job_id is None:
                    self._pass_baton(line)
                else:
                    self._credit(line, 1)
        if event.job_id is not None:
            line = lines.get(("job", event.job_id))
            if line is not None:
                for waiter in self._take_idle(line):
                    waiter.given = 1
                    waiter.future.set_result(True)  # type: ignore[union-attr]

    def _take_idle(self, line: _Line) -> Iterator[_Waiter]:
        """Take the idle polls of ``line`` oldest first, skipping any whose future is already
        done (its deadline or a cancellation came first: it leaves the line itself)."""
        idle = line.idle
        while idle:
            waiter = idle.pop(0)
            if not waiter.future.done():  # type: ignore[union-attr]
                yield waiter

    def _credit(self, line: _Line, n: int) -> None:
        """``n`` jobs may be there: to the poll woken last while it may take more, then to
        the oldest idle polls, each taking up to what it wants."""
        filling = line.filling
        if filling is not None:
            take = min(n, filling.spare)
            filling.spare -= take
            filling.given += take
            n -= take
            if not filling.spare:
                line.filling = None
        if n:
            for waiter in self._take_idle(line):
                waiter.given = min(n, waiter.want)
                waiter.spare = waiter.want - waiter.given
                n -= waiter.given
                waiter.future.set_result(True)  # type: ignore[union-attr]
                if waiter.spare:
                    line.filling = waiter
                if not n:
                    break
        if n and line.retrying:
            line.missed = True

    def _pass_baton(self, line: _Line) -> None:
        """Any number of jobs may be there: wake the oldest idle poll with the baton."""
        for waiter in self._take_idle(line):
            waiter.baton = True
            waiter.given = waiter.want
            waiter.future.set_result(True)  # type: ignore[union-attr]
            return
        if line.retrying:
            line.missed = True

    def _hand_on(self, line: _Line, waiter: _Waiter) -> None:
        """``waiter`` was woken but will not run: its credits or baton go to the next."""
        if line.filling is waiter:
            line.filling = None
        if waiter.baton:
            self._pass_baton(line)
        elif waiter.given:
            self._credit(line, waiter.given)

    # -- parking
    def _join(self, key: tuple[str, str], want: int) -> tuple[_Line, _Waiter]:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line()
        line.members += 1
        self.parked += 1
        return line, _Waiter(next(self._seq), want)

    def _leave(self, key: tuple[str, str], line: _Line, waiter: _Waiter) -> None:
        line.idle.discard(waiter)
        if line.filling is waiter:
            line.filling = None
        self.parked -= 1
        line.members -= 1
        if not line.members and self._lines.get(key) is line:
            del self._lines[key]

    @staticmethod
    def _elapse(line: _Line, waiter: _Waiter) -> None:
        """The poll's deadline: it leaves the line, unwoken (unless a wake came first)."""
        future = waiter.future
        if future is not None and not future.done():
            line.idle.discard(waiter)
            future.set_result(False)

    async def park(self, engine: BunqueueEngine, conn_id: str | None, wait: Wait,
                   waiters: set[_Waiter]) -> dict[str, Any]:
        """Hold ``wait`` until an event wakes it (then ``retry``) or its deadline passes (then
        ``expire``), or answer at once when the lot is full; answers the reply. ``waiters``
        is the calling room's record of its polls."""
        if self.parked >= self.limit:  # BQ-SAFE-1 max_parked_polls
            return engine.expire(wait)
        loop = asyncio.get_running_loop()
        key = (wait.kind, wait.key)
        want = 1
        if wait.kind == "queue" and wait.request.get("cmd") == "PULLB":
            count = wait.request.get("count", 1)
            want = count if type(count) is int and count > 1 else 1
        line, waiter = self._join(key, want)
        waiters.add(waiter)
        try:
            while True:
                future = waiter.future = loop.create_future()
                waiter.given = waiter.spare = 0
                waiter.baton = False
                line.idle.add(waiter)
                delay = max(0.0, (wait.deadline_ms - time.time() * 1000.0) / 1000.0)
                waiter.timer = loop.call_later(delay, self._elapse, line, waiter)
                try:
                    woken = await future
                except asyncio.CancelledError:
                    if future.done() and not future.cancelled() and future.result():
                        self._hand_on(line, waiter)  # woken, but it will never retry
                    raise
                finally:
                    waiter.timer.cancel()
                    line.idle.discard(waiter)
                if not woken:
                    return engine.expire(wait)
                if line.filling is waiter:
                    line.filling = None
                baton, given = waiter.baton, waiter.given
                reply = self._retry(engine, line, conn_id, wait)
                if not isinstance(reply, Wait):
                    if baton:
                        self._pass_baton(line)  # it got something: there may be more
                    elif given > 1 and wait.kind == "queue":
                        taken = len(reply.get("jobs") or ())
                        if 0 < taken < given:  # credited more than it could take
                            self._credit(line, given - taken)
                    return reply
                wait = reply  # found nothing: park again, same place, same deadline
        finally:
            waiters.discard(waiter)
            self._leave(key, line, waiter)

    @staticmethod
    def _retry(engine: BunqueueEngine, line: _Line, conn_id: str | None,
               wait: Wait) -> dict[str, Any] | Wait:
        for _ in range(1 + MISSED_RETRIES):
            line.missed = False
            line.retrying += 1
            try:
                reply = engine.retry(conn_id, wait)
            finally:
                line.retrying -= 1
            if not isinstance(reply, Wait) or not line.missed:
                return reply
        return reply


class WaitRoom:
    """A shell's view of its engine's :class:`ParkingLot`: it parks there and answers for its
    own polls (``parked``, ``cancel_all``). ``lot``: the lot to park in (by default the
    engine's own, shared with every other room of the engine)."""

    def __init__(self, engine: BunqueueEngine, lot: ParkingLot | None = None):
        self.engine = engine
        self.lot = lot if lot is not None else ParkingLot.for_engine(engine)
        self._waiters: set[_Waiter] = set()

    async def park(self, conn_id: str | None, wait: Wait) -> dict[str, Any]:
        """Hold a long poll until an event wakes it (then ``retry``) or its deadline passes
        (then ``expire``); answers the reply. Beyond the lot's cap, answers at once as if
        the deadline had passed (BQ-SAFE-1 max_parked_polls)."""
        return await self.lot.park(self.engine, conn_id, wait, self._waiters)

    @property
    def full(self) -> bool:
        """The lot's cap is reached: a poll would be answered at once."""
        return self.lot.full

    def __bool__(self) -> bool:
        """Whether any poll is parked on this engine, in any room (cheap: the notify hot
        path asks it per event)."""
        return bool(self.lot)

    @property
    def parked(self) -> int:
        """How many of this room's long polls are parked now."""
        return len(self._waiters)

    def wake(self, event: Event) -> None:
        """Wake the parked polls this engine event may serve (see :class:`ParkingLot`)."""
        self.lot.wake(event)

    def cancel_all(self) -> None:
        """Answer every poll of this room now, as if its deadline had passed (at shutdown)."""
        for waiter in list(self._waiters):
            future = waiter.future
            if future is not None and not future.done():
                future.set_result(False)
