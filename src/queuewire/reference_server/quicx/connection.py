"""One client connection of the quicx daemon, sans-IO: bytes in, a bounded number of frames'
actions out per call.

:class:`QuicxConnection` works like h11's connection object. ``receive_data`` only stores the
bytes; ``next_actions(max_frames)`` decodes and handles at most ``max_frames`` frames of them
and returns the :class:`~.engine.Send` and :class:`~.engine.Close` actions that follow, for any
connection; ``pending`` says whether received bytes are still to be handled. The shell calls
``next_actions`` until nothing is pending, yielding to its event loop between calls, so a peer
that sends ten thousand frames in one write is answered in bounded slices and every other
connection gets its turn in between (the fairness rule of :mod:`.._flow`). The bytes go to the
decoder in slices of :data:`FEED_BYTES`, so what a connection holds decoded but not yet handled
is bounded too (at most one slice's frames), not a whole read's worth of message objects.
A read is kept as the ``bytes`` asyncio gave (with an offset into it): a short read, the usual
case, goes to the decoder whole, a long one a copied slice at a time.

The connection owns a :class:`~queuewire.codecs.quicx.QuicxDecoder` in the daemon role, whose
``max_payload`` is the pool's largest class (a longer frame can hold no task and is refused from
its header, without buffering its payload). Every ``ProtocolError`` is answered by its spec
reaction, in stream order with the frames around it: ``reply`` becomes a MSG_ERROR carrying the
error's code and decoding goes on after the refused frame; ``close`` closes the connection, as
does a stream that ends inside a frame (QX-HDR-7). ``in_frame`` says the peer has gone quiet in
the middle of a frame, the only state in which the shell's partial-frame timeout applies: an
idle connection between frames is kept open however long it stays silent (QX-HB-3).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import cast

from ...codecs.errors import ProtocolError
from ...codecs.quicx import Message, QuicxDecoder
from ...spec.quicx import DAEMON
from .engine import Action, Close, QuicxEngine

__all__ = ["FEED_BYTES", "QuicxConnection"]

log = logging.getLogger("queuewire.reference_server.quicx")

#: Bytes handed to the decoder at a time. A slice yields at most ``FEED_BYTES / 6`` frames (the
#: header alone is 6 bytes), so the decoded-but-unhandled backlog stays a few hundred small
#: objects, while a 64 KiB task still takes only 16 slices to assemble.
FEED_BYTES = 4096


class QuicxConnection:
    """One client connection of the daemon: bytes in, actions out (for every connection)."""

    def __init__(self, engine: QuicxEngine):
        self.engine = engine
        self.id = engine.open()
        # a frame longer than the largest class can hold no task: refused from its header
        self.decoder = QuicxDecoder(engine.profile, DAEMON, max_payload=engine.pool.largest_class)
        self.closed = False
        self.close_reason: str | None = None
        self._unfed = b""                        # received, not yet given to the decoder...
        self._at = 0                             # ...from this offset on
        self._inbox: deque[Message | ProtocolError] = deque()  # decoded, not yet handled
        self._resume = False                     # a refused frame stopped the decoder mid-buffer

    # -- state
    @property
    def pending(self) -> bool:
        """Received bytes are still to be decoded or handled: call :meth:`next_actions`."""
        return not self.closed and bool(self._unfed or self._inbox or self._resume)

    @property
    def in_frame(self) -> bool:
        """Everything received is handled and the stream stops inside a frame: the peer owes
        the rest of it (the state the partial-frame timeout applies to)."""
        return not self.closed and not self.pending and self.decoder.in_frame

    # -- input
    def receive_data(self, data: bytes) -> None:
        """Store bytes from the peer; :meth:`next_actions` handles them."""
        if self.closed or not data:
            return
        if type(data) is not bytes:
            data = bytes(data)
        self._unfed = self._unfed[self._at:] + data if self._unfed else data
        self._at = 0

    def next_actions(self, max_frames: int | None = None) -> list[Action]:
        """Handle up to ``max_frames`` received frames (None: all of them), in order, and
        return the actions that follow. A refused frame counts as one."""
        out: list[Action] = []
        if self.closed:
            return out
        handle, inbox, conn = self.engine.handle, self._inbox, self.id
        left = -1 if max_frames is None else max(max_frames, 0)
        while left:
            if not inbox and not self._decode():
                break
            item = inbox.popleft()
            left -= 1
            if type(item) is Message:  # the engine never closes the connection it is handling
                actions = handle(conn, item)
                if actions:
                    out += actions
            else:
                error = cast(ProtocolError, item)
                if error.reaction == "reply":
                    out += self.engine.refuse(conn, error)
                    continue
                log.debug("connection %d: %s", conn, error)
                out += self._close(str(error))
                break
        return out

    def receive_eof(self) -> list[Action]:
        """The peer closed its side: handle what it sent before, check the stream did not stop
        inside a frame, then close."""
        if self.closed:
            return []
        out = self.next_actions()
        if self.closed:
            return out
        reason = "peer closed the connection"
        try:
            self.decoder.eof()
        except ProtocolError as exc:
            reason = str(exc)
            log.debug("connection %d: %s", self.id, exc)
        return out + self._close(reason)

    def connection_lost(self, reason: str = "connection lost") -> list[Action]:
        """The socket is gone (reset, timed out, daemon stopping): forget the connection."""
        return self._close(reason)

    # -- internals
    def _decode(self) -> bool:
        """Decode received bytes, a slice at a time, until the inbox holds something; False
        when everything received is decoded and nothing came of it."""
        inbox = self._inbox
        while not inbox:
            if self._resume:  # decode what the decoder buffered after a refused frame
                chunk: bytes | memoryview = b""
                self._resume = False
            elif self._unfed:  # a slice (a copy of at most FEED_BYTES), or all of a short read
                unfed, at = self._unfed, self._at
                if at == 0 and len(unfed) <= FEED_BYTES:
                    chunk, self._unfed = unfed, b""
                else:
                    chunk, at = unfed[at:at + FEED_BYTES], at + FEED_BYTES
                    if at < len(unfed):
                        self._at = at
                    else:
                        self._unfed, self._at = b"", 0
            else:
                return False
            try:
                inbox.extend(self.decoder.feed(chunk))
            except ProtocolError as exc:
                inbox.extend(exc.frames)
                inbox.append(exc)
                if exc.reaction == "reply":
                    self._resume = True
                else:  # the stream cannot be resynchronised: what follows is never read
                    self._unfed, self._at = b"", 0
        return True

    def _close(self, reason: str) -> list[Action]:
        if self.closed:
            return []
        self.closed, self.close_reason = True, reason
        self._unfed, self._at, self._resume = b"", 0, False
        self._inbox.clear()
        return [Close(self.id, reason), *self.engine.disconnect(self.id)]
