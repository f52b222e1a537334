"""The quicx daemon's task pool: a bounded slab allocator with power-of-two size classes.

Every accepted task holds one slot from acceptance to its MSG_DONE or MSG_FAILED (freed before
any producer hears of the result where the profile says so, QX-DONE-2), so "queue full"
(QX-ERR-2) and "payload too large" are real outcomes of a bounded pool rather than arbitrary
counters. Classes are powers of two from :data:`SMALLEST_CLASS` up to the largest class,
which is always the top class even when it is not a power of two; the pool is a number of
pages of the largest class's size, a class takes a free page when it has no free slot and
carves it into slots of its size, and a page whose slots are all free goes back to the pool.
No document gives PMAD's classes or size (004 names only "the largest size class"), so
everything here is server configuration, not protocol: the profile contributes only its
``max_payload_bytes`` (1024 in quicx/1.0.3), which bounds the largest class
(:func:`default_largest_class`). The pool knows nothing of tasks, sockets or clocks; the
engine sizes a task as the payload of the MSG_TASK frame it will be sent as.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ...spec.quicx import QuicxSpec

__all__ = [
    "DEFAULT_LARGEST_CLASS",
    "DEFAULT_POOL_BYTES",
    "SMALLEST_CLASS",
    "ClassUsage",
    "SizeClassPool",
    "Slot",
    "default_largest_class",
]

# Server configuration, not protocol: no document gives PMAD's classes or size.
#: Smallest slot. A task is at least 5 bytes (task id and type length); 64 bytes holds a short
#: type and a small payload, and keeps the number of classes (and of partial pages) small.
SMALLEST_CLASS = 64
#: Largest class when the profile sets no payload bound of its own (quicx/v1: 004 says only
#: "the largest size class", so the u32 length is the only limit). 64 KiB keeps one task far
#: below what a socket buffer holds and bounds what a peer can make the daemon buffer per frame.
DEFAULT_LARGEST_CLASS = 64 * 1024
#: Default pool: 64 MiB, a million queued tasks of the smallest class or a thousand of the
#: largest, a modest footprint for a reference daemon.
DEFAULT_POOL_BYTES = 64 * 1024 * 1024


def default_largest_class(spec: QuicxSpec) -> int:
    """The profile's ``max_payload_bytes`` when it is a real bound (quicx/1.0.3: 1024), else
    :data:`DEFAULT_LARGEST_CLASS`."""
    cap = spec.max_payload_bytes
    return cap if cap is not None and cap <= DEFAULT_LARGEST_CLASS else DEFAULT_LARGEST_CLASS


# ------------------------------------------------------------------------------------- pool

@dataclass(slots=True, eq=False)
class Slot:
    """One allocated slot: its class size, page and index in the page."""

    size: int
    page: int
    index: int
    live: bool = True


@dataclass(frozen=True, slots=True)
class ClassUsage:
    """One size class in a pool snapshot."""

    size: int
    slots_used: int
    slots_free: int       # free slots in the pages this class holds
    pages: int


class SizeClassPool:
    """A bounded slab allocator with power-of-two size classes.

    Classes run from ``smallest_class`` (a power of two) doubling up to ``largest_class``,
    which is always the top class even when it is not a power of two. The pool is
    ``total_bytes // largest_class`` pages of ``largest_class`` bytes; a class takes a free
    page when it has no free slot and carves it into ``page // class`` slots; a page whose
    slots are all free goes back to the pool. ``allocate`` returns None when no slot can be
    had (the pool is exhausted for that class); a size above the largest class has no class.
    ``bytes_used`` counts the class sizes of the live slots, ``bytes_total`` the pages.
    """

    def __init__(self, total_bytes: int, largest_class: int = DEFAULT_LARGEST_CLASS,
                 smallest_class: int = SMALLEST_CLASS):
        if smallest_class < 1 or smallest_class & (smallest_class - 1):
            raise ValueError(f"the smallest class must be a power of two, not {smallest_class}")
        if largest_class < smallest_class:
            raise ValueError(f"the largest class ({largest_class}) is below the smallest "
                             f"({smallest_class})")
        if total_bytes < largest_class:
            raise ValueError(f"a pool of {total_bytes} bytes cannot hold one page of the largest "
                             f"class ({largest_class} bytes)")
        classes, size = [], smallest_class
        while size < largest_class:
            classes.append(size)
            size *= 2
        classes.append(largest_class)
        self.classes: tuple[int, ...] = tuple(classes)
        self.page_size = largest_class
        self.pages_total = total_bytes // largest_class
        self.bytes_total = self.pages_total * self.page_size
        self.bytes_used = 0
        self._free_pages = list(range(self.pages_total - 1, -1, -1))
        self._partial: list[dict[int, None]] = [{} for _ in classes]  # pages with a free slot
        self._page_free: dict[int, list[int]] = {}
        self._page_used: dict[int, int] = {}
        self._page_class: dict[int, int] = {}
        self._slots_used = [0] * len(classes)

    @property
    def largest_class(self) -> int:
        return self.classes[-1]

    def class_for(self, size: int) -> int | None:
        """The class a ``size``-byte object goes in, or None when it exceeds the largest."""
        i = bisect.bisect_left(self.classes, size)
        return self.classes[i] if i < len(self.classes) else None

    def allocate(self, size: int) -> Slot | None:
        """A slot of the smallest class that holds ``size`` bytes, or None if there is none
        (the size exceeds the largest class, or the pool has no free slot of that class)."""
        ci = bisect.bisect_left(self.classes, size)
        if ci == len(self.classes):
            return None
        partial = self._partial[ci]
        if partial:
            page = next(iter(partial))
        elif self._free_pages:
            page = self._free_pages.pop()
            n = self.page_size // self.classes[ci]
            self._page_free[page] = list(range(n - 1, -1, -1))
            self._page_used[page] = 0
            self._page_class[page] = ci
            partial[page] = None
        else:
            return None
        free = self._page_free[page]
        index = free.pop()
        self._page_used[page] += 1
        if not free:
            del partial[page]
        self._slots_used[ci] += 1
        self.bytes_used += self.classes[ci]
        return Slot(self.classes[ci], page, index)

    def free(self, slot: Slot) -> None:
        """Return ``slot``; its page goes back to the pool when it has no live slot left."""
        if not slot.live:
            raise ValueError(f"slot {slot} is freed twice")
        slot.live = False
        page, ci = slot.page, self._page_class[slot.page]
        self._page_free[page].append(slot.index)
        self._page_used[page] -= 1
        self._slots_used[ci] -= 1
        self.bytes_used -= self.classes[ci]
        partial = self._partial[ci]
        if self._page_used[page] == 0:
            partial.pop(page, None)
            del self._page_free[page], self._page_used[page], self._page_class[page]
            self._free_pages.append(page)
        else:
            partial[page] = None

    def snapshot(self) -> tuple[ClassUsage, ...]:
        pages = [0] * len(self.classes)
        for ci in self._page_class.values():
            pages[ci] += 1
        return tuple(
            ClassUsage(size, self._slots_used[ci],
                       pages[ci] * (self.page_size // size) - self._slots_used[ci], pages[ci])
            for ci, size in enumerate(self.classes))
