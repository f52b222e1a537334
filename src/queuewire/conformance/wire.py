"""A recorded asyncio TCP connection: every byte the tester sends or receives goes in the case
transcript, decoded.

:class:`Connection` owns one socket and one background reader task. The reader feeds what
arrives to the protocol's sans-IO decoder (bunqueue ``FrameDecoder``, or ``QuicxDecoder`` for
the connection's client role), records each complete frame as a ``recv`` event holding the
frame's exact bytes and a JSON-able view of it, and queues it for the step interpreters; a
decoding error becomes a ``note`` (and, when the decoder cannot go on, the remaining bytes are
recorded raw); end of stream or a reset becomes a ``close`` event and a :class:`Closed` item.
Interpreters take items with :meth:`Connection.next_item` (a timeout gives ``None``), so no
step ever sleeps longer than it must. Sends are recorded before they are written. The bytes of
a send are kept whole up to :data:`RECORD_LIMIT` (16 MiB: every job-data limit probe, so its
replay file replays exactly); a bigger send (the 64 MiB framing probes) is kept by its first
:data:`RECORD_LIMIT` bytes and a note giving its size and whether the rest was all zero bytes
(then a replay can still send it exactly); a received frame is kept by its first
:data:`RECORD_LIMIT` bytes the same way. The *decoded views* are for people, not for replay:
:func:`cap_view` shortens strings over :data:`VIEW_TEXT_MAX` characters and lists over
:data:`VIEW_ITEMS_MAX` items (and cuts nesting deeper than :data:`VIEW_DEPTH_MAX`) with a
visible marker, so a 10 MiB job-data probe does not make
tens of MB of JSON per case.

The server under test may be hostile, so what a connection reads is bounded. A frame over
the protocol's limit (bunqueue ``max_frame_bytes``; quicx ``max_payload_bytes``, lowered to
:data:`QUICX_PAYLOAD_MAX` where the profile bounds it only by the u32 field) is a decoding
finding, never a buffer. After the decoder stops, only the first :data:`RAW_RECORD_MAX`
undecodable bytes are recorded (the rest is counted in a note). And one connection reads at
most :data:`RECV_BYTES_MAX` bytes and :data:`RECV_FRAMES_MAX` frames in a case: past either
(a frame already under way is read to its end, within the frame limit) the reader notes that
it *stopped reading* and stops; the socket stays open and unread until the case ends, so the
server meets TCP backpressure and the case's waits time out. The transcript itself keeps its
head and tail (:class:`~.model.CaseTranscript`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import FrameDecoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import REPLY_PAYLOAD_MAX, QuicxDecoder
from ..codecs.validation import jsonable
from ..spec import Profile
from .model import Transcript, WireEvent

RECORD_LIMIT = 16 << 20  # bytes of one send kept in the transcript; the rest is noted
VIEW_TEXT_MAX = 1024     # characters of one string kept in a decoded view
VIEW_ITEMS_MAX = 1000    # items of one list kept in a decoded view
VIEW_DEPTH_MAX = 64      # levels of nesting kept in a decoded view
CHUNK = 1 << 16
# Receive budget of one connection in one case. Against the reference servers the suite's
# busiest connection reads 502 frames and 174 KB (every big frame of the suite is one the
# tester sends), so these bounds are far above any conforming answer, and keep what a flooding
# server makes the runner hold (frames, their decoded values, the reports' hex) to tens of MB.
RECV_BYTES_MAX = 8 << 20
RECV_FRAMES_MAX = 10_000
RAW_RECORD_MAX = 64 << 10  # undecodable bytes recorded after the decoder stopped
# quicx/v1 bounds a payload only by its u32 length field (4 GiB): the runner decodes a reply
# of at most bunqueue's own frame limit and reports a longer one as too large.
QUICX_PAYLOAD_MAX = REPLY_PAYLOAD_MAX
STOPPED_NOTE = ("the tester stopped reading connection {num}: the server sent {nbytes} bytes "
                "in {frames} frames in this case, over the runner's receive budget "
                "({max_bytes} bytes / {max_frames} frames per connection); what it sends next "
                "is not read")
# a string shortened to its first 32 characters and its length (bunqueue_logic._shorten); its
# length is that of the view it shortened, so the size may not be the value's (event_view)
LOSSY_TEXT = re.compile(r"(?s).{32}\.\.\. \(\d+ characters\)")
# the note of a send kept in part; replay.py reads it (keep the two in step)
TRUNCATED_NOTE = "{size} bytes sent; the transcript keeps the first {kept}"
ZERO_TAIL_NOTE = "; the other {rest} are zero bytes"


def cap_view(value: Any, depth: int = 0) -> Any:
    """A decoded view with long strings and lists shortened (a marker says by how much), and
    nesting deeper than :data:`VIEW_DEPTH_MAX` levels (the nesting-limit probes) cut.

    A shortened string keeps its first :data:`VIEW_TEXT_MAX` characters and ends in
    ``…[N characters, shortened]``, N its true length; a string that is not all ASCII says its
    UTF-8 size too (``…[N characters, B bytes, shortened]``), so a report can always give the
    true size (:func:`~.matching.text_size` reads both)."""
    if isinstance(value, str):
        if len(value) > VIEW_TEXT_MAX:
            size = "" if value.isascii() else \
                f", {len(value.encode('utf-8', 'surrogatepass'))} bytes"
            return f"{value[:VIEW_TEXT_MAX]}…[{len(value)} characters{size}, shortened]"
        return value
    if isinstance(value, (dict, list)) and depth >= VIEW_DEPTH_MAX:
        return f"…[nested deeper than {VIEW_DEPTH_MAX} levels, shortened]"
    if isinstance(value, dict):
        return {k: cap_view(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        items = [cap_view(v, depth + 1) for v in value[:VIEW_ITEMS_MAX]]
        if len(value) > VIEW_ITEMS_MAX:
            items.append(f"…[{len(value)} items, shortened]")
        return items
    return value


def event_view(ev: WireEvent, protocol: str) -> Any:
    """What reports show as an event's decoded view: ``ev.decoded``, except where a later
    shortening lost the true size of a string (``bunqueue_logic`` shortens the views of its
    megabyte probes to ``"aaaa... (1057 characters)"``, the length of the view it was given, not
    of the value sent): then the view is decoded again from the recorded bytes and capped with
    :func:`cap_view`, whose markers carry the true sizes. When the bytes are not a whole frame
    (a send kept in part) the view is returned as it is."""
    view = ev.decoded
    if (protocol != "bunqueue" or ev.direction not in ("send", "recv") or len(ev.data) < 4
            or not _lossy(view)):
        return view
    try:
        (value,) = FrameDecoder(None, max_frame_bytes=len(ev.data),
                                check_depth=False).feed(ev.data)
    except Exception:  # noqa: BLE001 - not one whole frame: the recorded view is all there is
        return view
    return cap_view(jsonable(value))


def _lossy(view: Any, depth: int = 0) -> bool:
    if isinstance(view, str):
        return LOSSY_TEXT.fullmatch(view) is not None
    if depth > VIEW_DEPTH_MAX:
        return False
    if isinstance(view, dict):
        return any(_lossy(v, depth + 1) for v in view.values())
    if isinstance(view, list):
        return any(_lossy(v, depth + 1) for v in view)
    return False


def record_send(transcript: Transcript, conn: int, data: bytes, decoded: Any, note: str) -> None:
    """Record one send: its bytes (capped, see the module docstring) and its capped view."""
    if len(data) > RECORD_LIMIT:
        rest = len(data) - RECORD_LIMIT
        extra = TRUNCATED_NOTE.format(size=len(data), kept=RECORD_LIMIT)
        if data.count(0, RECORD_LIMIT) == rest:
            extra += ZERO_TAIL_NOTE.format(rest=rest)
        note = f"{note}; {extra}" if note else extra
        data = data[:RECORD_LIMIT]
    transcript.add(conn, "send", data, cap_view(decoded), note)


def record_recv(transcript: Transcript, conn: int, data: bytes, decoded: Any,
                note: str = "") -> None:
    """Record one received frame: its first :data:`RECORD_LIMIT` bytes (a note gives the
    size of a longer one) and its view."""
    if len(data) > RECORD_LIMIT:
        extra = f"{len(data)} bytes received; the transcript keeps the first {RECORD_LIMIT}"
        note = f"{note}; {extra}" if note else extra
        data = data[:RECORD_LIMIT]
    transcript.add(conn, "recv", data, decoded, note)


@dataclass
class Frame:
    """A decoded frame as the interpreters see it."""

    value: Any            # bunqueue: the decoded map; quicx: a codecs.quicx.Message
    view: Any             # JSON-able view (what the transcript holds)
    raw: bytes
    t: float = field(default_factory=time.monotonic)


@dataclass
class Closed:
    """The peer closed the connection (EOF) or reset it."""

    reason: str


@dataclass
class Garbled:
    """Bytes that could not be decoded (the decoder's error, as a dict)."""

    error: dict[str, Any]


class ConnectError(Exception):
    """The target could not be reached."""


class Connection:
    """One tester connection of a case (``num`` counts from 1 within the case)."""

    def __init__(self, transcript: Transcript, num: int, host: str, port: int, protocol: str,
                 profile: Profile, role: str | None = None):
        self.transcript = transcript
        self.num = num
        self.host, self.port = host, port
        self.protocol = protocol
        self.profile = profile
        self.role = role
        self.items: deque[Frame | Closed | Garbled] = deque()
        self._wake = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self.closed_by_peer: str | None = None
        self.closed_by_us = False
        if protocol == "bunqueue":
            self._decoder: Any = FrameDecoder(profile)  # a reply beyond the limit is noted
        else:
            self._decoder = QuicxDecoder(profile, role or "producer",
                                         max_payload=QUICX_PAYLOAD_MAX)
        self._dead = False  # the decoder stopped: record raw bytes from now on
        self.received_bytes = 0
        self.received_frames = 0
        self._raw_unrecorded = 0  # undecodable bytes over RAW_RECORD_MAX, counted
        self._raw_recorded = 0
        self.stopped_reading: str | None = None  # why the reader stopped (receive budget)
        self._frames_at_budget: int | None = None  # frames read when the budget ran out

    # -- lifecycle ------------------------------------------------------------------------------
    async def open(self, timeout: float) -> Connection:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), timeout)
        except (TimeoutError, OSError) as exc:
            what = "timed out" if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {what}") from None
        note = f"connected to {self.host}:{self.port}"
        if self.role:
            note += f" as {self.role}"
        self.transcript.add(self.num, "open", note=note)
        self._task = asyncio.get_running_loop().create_task(self._read_loop())
        return self

    @property
    def decoder_stopped(self) -> bool:
        """The decoder stopped at bytes it could not trust (a ``close`` error): no frame can
        arrive on this connection any more, so nobody waits for one."""
        return self._dead

    @property
    def is_open(self) -> bool:
        return self._writer is not None and not self.closed_by_us and self.closed_by_peer is None

    async def close(self) -> None:
        """Close our side (idempotent); recorded once."""
        if self._writer is None or self.closed_by_us:
            return
        self.closed_by_us = True
        self._note_unrecorded()
        if self.closed_by_peer is None:
            self.transcript.add(self.num, "close", note="closed by the tester")
        try:
            self._writer.close()
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)
        except (TimeoutError, OSError):
            pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the reader is gone either way
                pass

    # -- sending --------------------------------------------------------------------------------
    async def send(self, data: bytes, decoded: Any = None, note: str = "", split: int = 0) -> None:
        """Write ``data`` (in ``split``-byte pieces when given), recording it first."""
        if self._writer is None:
            raise RuntimeError(f"connection {self.num} is not open")
        if self.closed_by_us:
            raise RuntimeError(f"connection {self.num} was closed by the tester")
        record_send(self.transcript, self.num, data, decoded, note)
        await self.write(data, split)

    async def write(self, data: bytes, split: int = 0) -> None:
        """Write without recording (the caller recorded it). A reset is recorded as a close."""
        assert self._writer is not None
        try:
            if split and split > 0:
                for i in range(0, len(data), split):
                    self._writer.write(data[i:i + split])
                    await self._writer.drain()
            else:
                view = memoryview(data)
                for i in range(0, len(data), CHUNK * 16):
                    self._writer.write(view[i:i + CHUNK * 16])
                    await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._peer_closed(f"write failed: {exc.__class__.__name__}: {exc}")

    # -- receiving ------------------------------------------------------------------------------
    async def next_item(self, timeout: float) -> Frame | Closed | Garbled | None:
        """The next received item, waiting at most ``timeout`` seconds (None: nothing came)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while not self.items:
            if self.closed_by_peer is not None and self._task is not None and self._task.done():
                return None  # the close item was already taken
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return None
        return self.items.popleft()

    def push_back(self, item: Frame | Closed | Garbled) -> None:
        """Return an item an interpreter took but did not use (it stays first in line)."""
        self.items.appendleft(item)
        self._wake.set()

    def _put(self, item: Frame | Closed | Garbled) -> None:
        self.items.append(item)
        self._wake.set()

    def _peer_closed(self, reason: str) -> None:
        if self.closed_by_peer is not None or self.closed_by_us:
            return
        self.closed_by_peer = reason
        self._note_unrecorded()
        self.transcript.add(self.num, "close", note=reason)
        self._put(Closed(reason))

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                try:
                    data = await self._reader.read(CHUNK)
                except (ConnectionError, OSError) as exc:
                    self._peer_closed(f"connection reset by the peer ({exc.__class__.__name__})")
                    return
                if not data:
                    self._eof()
                    self._peer_closed("closed by the peer (EOF)")
                    return
                self.received_bytes += len(data)
                self._feed(data)
                if self._over_budget():
                    self.stopped_reading = STOPPED_NOTE.format(
                        num=self.num, nbytes=self.received_bytes, frames=self.received_frames,
                        max_bytes=RECV_BYTES_MAX, max_frames=RECV_FRAMES_MAX)
                    self.transcript.add(self.num, "note", note=self.stopped_reading)
                    mark = getattr(self.transcript, "mark_unread", None)  # a CaseTranscript
                    if mark is not None:
                        mark(self.num)
                    return
        except asyncio.CancelledError:
            raise

    def _over_budget(self) -> bool:
        """Past the receive budget, and not inside a frame: the frame under way when the budget
        ran out is read to its end (the decoder bounds it by the frame limit), then no more."""
        if self.received_bytes <= RECV_BYTES_MAX and self.received_frames <= RECV_FRAMES_MAX:
            return False
        if self._dead:
            return True
        if self._frames_at_budget is None:
            self._frames_at_budget = self.received_frames
        mid = self._decoder.buffered if self.protocol == "bunqueue" else self._decoder.in_frame
        return not mid or self.received_frames > self._frames_at_budget

    def _note_unrecorded(self) -> None:
        if self._raw_unrecorded:
            self.transcript.add(self.num, "note", note=(
                f"{self._raw_unrecorded} more undecodable bytes were received and not recorded "
                f"(the transcript keeps the first {RAW_RECORD_MAX} after the decoder stopped)"))
            self._raw_unrecorded = 0

    def _feed(self, data: bytes) -> None:
        if self._dead:
            room = RAW_RECORD_MAX - self._raw_recorded
            if room > 0:
                self._raw_recorded += min(room, len(data))
                self.transcript.add(self.num, "recv", data[:room], None,
                                    "undecoded (the decoder stopped)")
            self._raw_unrecorded += max(0, len(data) - max(room, 0))
            return
        while True:
            try:
                frames = self._decode(data)
            except ProtocolError as exc:
                for f in getattr(exc, "frames", None) or []:
                    self._record_frame(f)
                err = exc.as_dict()
                self.transcript.add(self.num, "note", decoded=err, note=f"decode error: {exc}")
                self._put(Garbled(err))
                if exc.reaction == "reply":
                    data = b""  # the decoder consumed the bad frame; go on with what it holds
                    continue
                self._dead = True
                return
            for f in frames:
                self._record_frame(f)
            return

    def _decode(self, data: bytes) -> list[Any]:
        if self.protocol == "bunqueue":
            return self._decoder.feed_frames(data)
        return self._decoder.feed(data)

    def _record_frame(self, f: Any) -> None:
        if self.protocol == "bunqueue":
            raw = self._decoder._prefix.pack(f.length) + f.payload
            view = cap_view(jsonable(f.value))
            value = f.value
        else:
            raw, view, value = f.raw, cap_view(f.as_dict()), f
        self.received_frames += 1
        record_recv(self.transcript, self.num, raw, view)
        self._put(Frame(value, view, raw))

    def _eof(self) -> None:
        if self._dead:
            return
        try:
            self._decoder.eof()
        except ProtocolError as exc:
            self.transcript.add(self.num, "note", decoded=exc.as_dict(), note=f"decode error: {exc}")
            self._put(Garbled(exc.as_dict()))
