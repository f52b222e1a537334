"""One direction of a tapped connection: exact framing of the byte stream, then decoding.

A :class:`Stream` cuts the bytes it is fed into whole frames by the protocol's length field
(bunqueue's u4be prefix, quicx's 6-byte header; both read from the spec through the
protocol adapter) and hands each whole frame to the codec's decoder, so every byte belongs to
exactly one item: a frame (decoded, or with the decoder's :class:`ProtocolError`) or a gap
(bytes that cannot be framed). That is the recorder's guarantee: the items of a direction,
concatenated, are the bytes that crossed the tap. The header of a frame whose payload has not
all arrived is fed to the decoder at once, so a header the codec refuses with ``close`` (a
bunqueue frame over max_frame_bytes) stops the buffering: from there on the direction is
``framing_lost`` and every chunk is a gap. A frame longer than ``max_frame`` (the tap's own
buffering bound) is passed through as ``oversized`` gaps and framing resumes after it with
a fresh decoder. Memory per direction is at most one frame of ``max_frame`` bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..codecs.errors import ProtocolError


@dataclass(slots=True)
class Item:
    """A frame (``gap`` None) or a gap (``gap`` names its gap_reasons entry); ``error`` is
    the decoder's verdict on a frame, or the error that ended framing on a gap."""

    raw: bytes
    message: Any = None
    error: ProtocolError | None = None
    gap: str | None = None


def _bare(exc: BaseException) -> None:
    """Drop the tracebacks of an error an Item keeps (its own, and those of the exception it
    was raised from): their frames would keep the bytes they held alive, by a reference cycle
    only the garbage collector breaks (a decoder reading a memory-mapped trace file could
    not unmap it)."""
    exc.__traceback__ = None
    for inner in (exc.__cause__, exc.__context__):
        if inner is not None:
            inner.__traceback__ = None


class Stream:
    """Frames and decodes one direction; see the module docstring."""

    __slots__ = ("_buf", "_feed", "_header_error", "_header_fed", "_at", "_hs", "_intact",
                 "_make", "_skip", "_unpack", "decoder", "lost", "max_frame")

    def __init__(self, make_decoder: Callable[[], Any], header: struct.Struct, length_at: int,
                 max_frame: int,
                 feed: Callable[[Any, bytes], list],
                 intact: Callable[[ProtocolError], bool]):
        self._make = make_decoder
        self.decoder = make_decoder()
        self._hs = header.size
        self._unpack = header.unpack_from  # the header's fields; [length_at] is the length
        self._at = length_at
        self._feed = feed                  # (decoder, bytes) -> messages
        self._intact = intact              # an error after which the frame boundary holds
        self.max_frame = max_frame
        self._buf = b""
        self._header_fed = False           # the pending frame's header went to the decoder
        self._header_error: ProtocolError | None = None  # a reply error its header got
        self._skip = 0                     # bytes of an oversized frame still to pass
        self.lost = False

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Item]:
        out: list[Item] = []
        if self.lost:
            if data:
                out.append(Item(bytes(data), gap="framing_lost"))
            return out
        if self._skip:
            take = min(self._skip, len(data))
            out.append(Item(bytes(data[:take]), gap="oversized"))
            self._skip -= take
            data = data[take:]
            if self._skip:
                return out
            self.decoder = self._make()
        buf = self._buf + data if self._buf else bytes(data)
        n, pos, hs = len(buf), 0, self._hs
        unpack, at, feed, dec = self._unpack, self._at, self._feed, self.decoder
        while n - pos >= hs:
            total = hs + unpack(buf, pos)[at]
            if n - pos >= total:
                raw = buf[pos:pos + total] if (pos or total != n) else buf
                item = Item(raw)
                if not self._header_fed:  # the common case: a whole frame, decoded at once
                    try:
                        msgs = feed(dec, raw)
                        if msgs:
                            item.message = msgs[0]
                    except ProtocolError as exc:
                        _bare(exc)
                        self._refused(exc, item)
                        dec = self.decoder
                else:
                    self._header_fed = False
                    if self._header_error is not None:  # refused from its header: not fed
                        item.error, self._header_error = self._header_error, None
                        dec = self.decoder = self._make()
                    else:
                        self._decode(dec, raw[hs:], item)
                        dec = self.decoder
                out.append(item)
                pos += total
                if self.lost:
                    break
                continue
            # an incomplete frame: judge its header now, then wait for the rest
            if not self._header_fed:
                self._header_fed = True
                try:
                    feed(dec, buf[pos:pos + hs])
                except ProtocolError as exc:
                    _bare(exc)
                    if self._intact(exc):
                        self._header_error = exc
                    else:  # the rest of the direction cannot be framed: report it once
                        self.lost = True
                        out.append(Item(buf[pos:], error=exc, gap="framing_lost"))
                        pos = n
            if not self.lost and total > self.max_frame:
                out.append(Item(buf[pos:], gap="oversized"))
                self._skip = total - (n - pos)
                self._header_fed, self._header_error = False, None
                pos = n
            break
        if self.lost and pos < n:
            out.append(Item(buf[pos:], gap="framing_lost"))
            pos = n
        self._buf = buf[pos:] if pos < n else b""
        return out

    def _decode(self, dec: Any, data: bytes, item: Item) -> None:
        try:
            msgs = self._feed(dec, data)
            item.message = msgs[0] if msgs else None
        except ProtocolError as exc:
            _bare(exc)
            self._refused(exc, item)

    def _refused(self, exc: ProtocolError, item: Item) -> None:
        item.error = exc
        if self._intact(exc):  # the boundary holds: a fresh decoder at the next frame
            self.decoder = self._make()
        else:
            self.lost = True

    def eof(self) -> tuple[list[Item], ProtocolError | None]:
        """The direction ended: a partial frame becomes a ``truncated`` gap, with the error
        the decoder names for it."""
        out: list[Item] = []
        error = None
        if self._buf and not self.lost:
            out.append(Item(self._buf, gap="truncated"))
            try:
                self.decoder.eof()
            except ProtocolError as exc:
                _bare(exc)
                error = exc
        self._buf = b""
        return out, error
