"""What one TCP connection of the bunqueue server may hold of a frame it has not completed.

The shell (:mod:`.tcp`) feeds each chunk it reads to the connection's
:class:`~queuewire.codecs.bunqueue.FrameDecoder`, which keeps the bytes of a frame that is not
complete yet. Three bounds keep those bytes from pinning the server's memory (issue 22: 16
unauthenticated connections each holding a 63 MiB partial frame grew the server by 1 GB), and
:class:`FrameIntake` follows the frame in progress for the two that need it:

* **A deadline per frame** (BQ-FLOW-3, :data:`~.._flow.DEFAULT_PARTIAL_FRAME_TIMEOUT`): the
  frame must be complete ``timeout`` seconds after the read that brought its first byte was
  handled (the requests before it in that read answered: time the server spends waiting for
  a slot or for the peer to read its replies is not the peer's to pay). ``deadline`` is that
  moment on the event loop's clock (None between frames), which the shell hands to
  :func:`~.._flow.read_chunk`; a byte now and then does not move it.
* **A budget over all connections** (BQ-SAFE-1 ``max_buffered_bytes``, a
  :class:`~.._flow.FrameBudget` shared by the connections of one server): once the length
  prefix of a frame larger than ``small`` is in, the connection takes the whole frame's size
  from the budget; when it does not fit, ``owed`` is set and the shell awaits
  :meth:`FrameIntake.admit` (bounded by the same deadline) before it reads on, so the
  connection is not read until others have completed their frames. The size is given back
  when the frame is complete or the connection closes (:meth:`FrameIntake.release`). A frame
  of at most ``small`` bytes (the shell passes one read's size) takes nothing: every
  connection holds up to a read's worth anyway, so a budget filled by large frames never
  stalls the ordinary small requests of other clients, and unauthenticated connections
  (held to ``pre_auth_frame_bytes``) cannot fill it at all.
* **A small frame before Auth** (BQ-SAFE-1 ``pre_auth_frame_bytes``) needs no tracking here:
  the shell lowers the decoder's ``max_frame_bytes`` until the connection has authenticated,
  so a larger length prefix is refused as ``frame_too_large`` (BQ-FRAME-2) before any of its
  payload is kept.

The frame in progress is recognised by the decoder's ``offset`` (where the buffered partial
frame starts in the stream): a new offset is a new frame. Its length prefix is read from the
chunks as they come (it may be split across reads), big-endian as the profile's ``len_format``
says (BQ-FRAME-1).
"""

from __future__ import annotations

import asyncio
import contextlib

from .._flow import FrameBudget, PartialFrameTimeout

__all__ = ["FrameIntake", "stream_from"]


def stream_from(tail: bytes, data: bytes, data_pos: int, offset: int | None) -> bytes:
    """The stream from offset ``offset`` on, as far as ``tail`` (the last bytes read before
    ``data``) and ``data`` (which began at stream offset ``data_pos``) hold it: the shell reads
    a refused frame's length prefix back with it (the decoder keeps no refused bytes), or
    feeds a new decoder from there. b"" when they do not reach back to ``offset``."""
    at = (offset if offset is not None else -1) - (data_pos - len(tail))
    return (tail + data)[at:] if at >= 0 else b""


class FrameIntake:
    """One connection's frame in progress: its start, its declared size, its deadline and its
    share of the server's :class:`~.._flow.FrameBudget`."""

    __slots__ = ("budget", "timeout", "prefix_size", "small", "start", "head", "deadline",
                 "held", "owed")

    def __init__(self, budget: FrameBudget, timeout: float | None, prefix_size: int,
                 small: int):
        self.budget = budget
        self.timeout = timeout          # seconds from a frame's first byte; None: no deadline
        self.prefix_size = prefix_size
        self.small = small              # frames up to this size take nothing from the budget
        self.start = -1                 # stream offset of the frame in progress (-1: none)
        self.head: bytes | None = b""   # its first bytes, up to the prefix (None: unknown)
        self.deadline: float | None = None  # loop time by which it must be complete
        self.held = 0                   # bytes taken from the budget for it
        self.owed = 0                   # bytes it must take before the connection reads on

    def note(self, offset: int, buffered: int, data: bytes, data_pos: int) -> None:
        """After ``data`` (which began at stream offset ``data_pos``) was fed and its
        requests handled: the decoder holds ``buffered`` bytes of a frame starting at
        ``offset``. Start following a new frame (its deadline counts from now), or go on with
        the same one; take its size from the budget once its prefix is in (or owe it when it
        does not fit)."""
        if not buffered:
            if self.start >= 0:  # (the common case, between frames, costs one comparison)
                self.release()
            return
        size = self.prefix_size
        if offset != self.start:
            self.release()
            self.start = offset
            self.deadline = asyncio.get_running_loop().time() + self.timeout \
                if self.timeout else None
            at = offset - data_pos
            self.head = bytes(data[at:at + size]) if at >= 0 else None
        elif self.head is not None and len(self.head) < size:
            self.head += data[:size - len(self.head)]
        head = self.head
        if head is not None and len(head) == size and not self.held and not self.owed:
            need = size + int.from_bytes(head, "big")
            if need <= self.small:
                pass
            elif self.budget.try_take(need):
                self.held = need
            else:
                self.owed = need

    async def admit(self) -> None:
        """Wait until the budget holds the frame this connection owes; raises
        :class:`~.._flow.PartialFrameTimeout` if the frame's deadline passes first."""
        need = self.owed
        if not need:
            return
        timer = asyncio.timeout_at(self.deadline) if self.deadline is not None \
            else contextlib.nullcontext()
        try:
            async with timer:
                await self.budget.take(need)
        except TimeoutError:
            raise PartialFrameTimeout("no room in the frame budget before the deadline") \
                from None
        self.owed, self.held = 0, need

    def release(self) -> None:
        """The frame is complete or the connection is closing: give its bytes back."""
        if self.held:
            self.budget.give(self.held)
        self.start, self.head, self.deadline, self.held, self.owed = -1, b"", None, 0, 0
