"""Bounded records: what a scenario keeps of what a client under test sent, and of its testee.

A client under test is a hostile peer as much as a buggy one: it may pipeline hundreds of
thousands of frames, write megabytes to stderr, answer with a line of megabytes. The
conformance server still checks every frame (the checker counts them all), but what a scenario
*records* for the judgements and the reports is bounded, so a flood costs bounded memory and
gives reports of bounded size. The rule is the same everywhere: keep the head and the tail,
and say explicitly, where the middle was, how much was left out.

* :class:`BoundedTranscript` is the model's :class:`~..model.Transcript` keeping the first
  ``RECORD_HEAD_EVENTS`` and the last ``RECORD_TAIL_EVENTS`` events of a scenario, with one
  note event between them that counts the events (and bytes) omitted; an event's bytes are cut
  at ``RECORD_EVENT_BYTES`` (its note says so).
* :func:`head_tail` bounds one list (the frames decoded from one read, the replies of one
  write) with a marker item in the middle; :class:`HeadTail` is the same rule as a container
  that is appended to (the checkers' request and reply records, which the judgements iterate).
* :func:`clip` bounds one string (a testee's log line, its answer, an error message).

Normal scenarios stay far below every bound (the shipped clients' largest transcript has 41
events of at most 8 frames and 1 KiB each), so the bounds change nothing but a flood.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..model import Direction, Transcript, WireEvent

__all__ = ["BoundedTranscript", "HeadTail", "RECORD_EVENT_BYTES", "RECORD_HEAD_EVENTS",
           "RECORD_TAIL_EVENTS", "RECORD_HEAD", "RECORD_TAIL", "FRAMES_HEAD", "FRAMES_TAIL",
           "clip", "head_tail"]

#: transcript events a scenario keeps from its start and from its end (a report shows a flood's
#: beginning and how it ended; every frame in between was still checked)
RECORD_HEAD_EVENTS = 200
RECORD_TAIL_EVENTS = 100
#: bytes of one transcript event kept (a read is at most 64 KiB; the frames that matter to a
#: reader are small, and 300 events of 16 KiB keep a flood's transcript under 5 MB)
RECORD_EVENT_BYTES = 16 * 1024
#: decoded frames kept per event (one read of a pipelining client may carry thousands)
FRAMES_HEAD = 8
FRAMES_TAIL = 4
#: requests and replies the checkers keep for the judgements, from the start and the end of a
#: scenario (the judgements look at the first commands of each connection and at what came
#: after a loss; a scenario of the suite sends a few dozen)
RECORD_HEAD = 2000
RECORD_TAIL = 1000

T = TypeVar("T")


def clip(text: str, limit: int) -> str:
    """``text`` itself when at most ``limit`` characters, else its head and tail around an
    explicit marker naming how many characters were omitted."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 40)
    head, tail = keep * 2 // 3, keep // 3
    return (f"{text[:head]} [... {len(text) - head - tail} characters omitted ...] "
            f"{text[len(text) - tail:] if tail else ''}")


def head_tail(items: Sequence[T], head: int, tail: int, what: str = "items") -> list[Any]:
    """``items`` as a list, or its first ``head`` and last ``tail`` with a marker
    ``{"omitted": n, "what": what}`` between them."""
    if len(items) <= head + tail + 1:
        return list(items)
    omitted = len(items) - head - tail
    return [*items[:head], {"omitted": omitted, "what": what},
            *(items[len(items) - tail:] if tail else [])]


class HeadTail(Generic[T]):
    """An append-only record keeping its first ``head`` and last ``tail`` items; iterating
    gives them in order, ``omitted`` counts what fell out between them."""

    def __init__(self, head: int = RECORD_HEAD, tail: int = RECORD_TAIL):
        self.head_limit = head
        self._head: list[T] = []
        self._tail: deque[T] = deque(maxlen=tail)
        self.omitted = 0

    def append(self, item: T) -> None:
        if len(self._head) < self.head_limit:
            self._head.append(item)
            return
        if len(self._tail) == self._tail.maxlen:   # the oldest of the tail falls out
            self.omitted += 1
        self._tail.append(item)

    def __iter__(self) -> Iterator[T]:
        yield from self._head
        yield from self._tail

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._head)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (HeadTail, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"HeadTail({len(self)} kept, {self.omitted} omitted)"


@dataclass
class BoundedTranscript(Transcript):
    """A scenario's transcript with its head and tail kept and the middle counted (see the
    module docstring). ``omitted`` and ``omitted_bytes`` say how much fell out."""

    head: int = RECORD_HEAD_EVENTS
    tail: int = RECORD_TAIL_EVENTS
    omitted: int = 0
    omitted_bytes: int = 0

    def add(self, conn: int, direction: Direction, data: bytes = b"", decoded: Any = None,
            note: str = "") -> WireEvent:
        if len(data) > RECORD_EVENT_BYTES:
            kept = f"the first {RECORD_EVENT_BYTES} of {len(data)} bytes recorded"
            note = f"{note} ({kept})" if note else kept
            data = data[:RECORD_EVENT_BYTES]
        ev = super().add(conn, direction, data, decoded, note)
        marker = 1 if self.omitted else 0
        if len(self.events) <= self.head + self.tail + marker:
            return ev
        if not marker:   # the first event to fall out: the marker takes its place
            first = self.events[self.head]
            self.events.insert(self.head, WireEvent(first.t, 0, "note"))
        gone = self.events.pop(self.head + 1)
        self.omitted += 1
        self.omitted_bytes += len(gone.data)
        self.events[self.head].note = (
            f"[... {self.omitted} events ({self.omitted_bytes} bytes) omitted: a scenario "
            f"records its first {self.head} and last {self.tail} events; every frame was "
            "still checked ...]")
        return ev
