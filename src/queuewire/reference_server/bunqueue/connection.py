"""One peer of the bunqueue reference server, sans-IO: :class:`BunqueueConnection`.

Design
------
As h11's ``Connection`` and the quicx daemon's :class:`~..quicx.connection.QuicxConnection`:
the object holds everything the protocol says about one peer and nothing about sockets or
time. A byte-stream shell (:mod:`.tcp`) hands it what it reads
(:meth:`~BunqueueConnection.receive_data`, :meth:`~BunqueueConnection.receive_eof`) and asks
for what follows (:meth:`~BunqueueConnection.next_actions`); a shell without bytes
(:mod:`.embedded`, the WebSocket of :mod:`.http`) hands it decoded requests
(:meth:`~BunqueueConnection.request`). Every request of every shell passes the one
:class:`~.gate.RequestGate` through this object, which is the gate's connection (its ``id``,
``authenticated``, ``rate`` and ``decoder``).

An action is one of:

* ``bytes``: a reply frame (or several), to be written in order;
* :class:`Park`: a long poll the engine parked (:class:`~.model.Wait`); the shell parks it in
  its wait room (holding one of the connection's ``max_in_flight`` slots, BQ-PIPE-2), then
  writes :meth:`~BunqueueConnection.answer` of the reply and calls :meth:`~BunqueueConnection.unpark`;
* :class:`Close`: the connection must be closed after the bytes before it are written (and
  its parked polls cancelled, then the farewell frame it carries written).

Rules
-----
1. Requests are answered in the order they arrive; a reply echoes its request's ``reqId``
   verbatim (BQ-ENV-2), and a reply the wire cannot carry is answered ``internal_error``
   (with the reqId, or without when even that cannot be written: BQ-MSGPACK-8).
2. A frame the decoder refuses with reaction ``reply`` is answered with the transport error
   bunqueue gives (``invalid_command`` for a payload that is no map, else
   ``invalid_command_format``; ``rate_limit_exceeded`` when the rate window is spent) and
   decoding goes on after it.
3. A frame refused with reaction ``close`` (a length over ``max_frame_bytes``, or over
   ``pre_auth_frame_bytes`` before Auth: BQ-FRAME-2, BQ-SAFE-1): the requests before it are
   answered, then :class:`Close` with ``frame_too_large`` (no reqId) as its farewell. Except when an
   Auth pipelined before it in the same stream authenticated the connection and the frame
   fits ``max_frame_bytes``: then the stream is read on from that frame, by a decoder
   without the pre-auth bound.
4. While every slot is held by a parked poll, no further request is answered
   (:attr:`blocked`); the shell waits for :meth:`~BunqueueConnection.unpark`. A connection
   has ``slots_before_hello`` slots (the profile's ``max_in_flight_without_hello``: 1, so a
   client that sends no Hello is served sequentially, as protocol v1, BQ-HELLO-3) until a
   Hello is answered ok, then ``max_in_flight`` (BQ-PIPE-2). When the rest of a frame never
   comes, the stream ends inside it (:meth:`~BunqueueConnection.receive_eof`) and it is not answered.
5. An exception out of the gate or the engine is a bug, not the peer's doing: it is logged
   and this connection alone is closed.

Seams
-----
The gate (and through it the engine) answers; the shell owns the socket, the clock, the
wait room's tasks and the frame intake (:mod:`.intake`: the partial-frame deadline and the
frame budget read :attr:`progress`). The encoder is the server's, so every shell writes the
same bytes.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from ...codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from ...codecs.errors import EncodeError, ProtocolError
from .gate import RequestGate
from .intake import stream_from
from .model import Wait

__all__ = ["BunqueueConnection", "Close", "Park", "RateWindow"]

log = logging.getLogger("queuewire.reference_server.bunqueue")

#: The command that negotiates protocol v2 (pipelining); before it, a connection is v1.
HELLO = "Hello"
#: Bytes of earlier reads kept to read back the length prefix of a refused frame (the prefix
#: is four bytes: at most three of them came before the chunk in which it was refused).
PREFIX_TAIL = 3


@dataclass(frozen=True, slots=True)
class Park:
    """A long poll to park: ``request`` (its reqId is echoed) waits on ``wait``."""

    request: Any
    wait: Wait


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection: once the bytes before this action are written, its parked polls
    are cancelled (unanswered), ``farewell`` is written, and the connection is closed."""

    reason: str
    farewell: bytes = b""
    #: reset the connection instead (a bug answering a request: nothing more is written)
    abort: bool = False


class WaitRoomView(Protocol):
    """What the connection asks of the shell's wait room: whether it holds as many parked
    polls as it may (BQ-SAFE-1 ``max_parked_polls``; then a poll is answered at once, as if it
    had timed out)."""

    @property
    def full(self) -> bool: ...


class RateWindow:
    """A sliding window of the last ``limit`` request times of one connection (BQ-RATE-1);
    ``clock`` gives seconds."""

    __slots__ = ("clock", "limit", "times", "window")

    def __init__(self, limit: int, window: float, clock: Any):
        self.limit = limit
        self.window = window
        self.clock = clock
        self.times: deque[float] = deque()

    def allow(self) -> bool:
        now = self.clock()
        times = self.times
        while times and now - times[0] >= self.window:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True


class _Refused:
    """A frame the decoder refused with reaction ``close``, in the inbox where it came."""

    __slots__ = ("error", "length", "rest")

    def __init__(self, error: ProtocolError, rest: bytes, prefix_size: int):
        self.error = error
        self.rest = rest      # the stream from the refused frame's prefix on (as far as read)
        head = rest[:prefix_size]
        self.length: int | str = int.from_bytes(head, "big") if len(head) == prefix_size \
            else "?"


class BunqueueConnection:
    """One peer of the server: bytes (or decoded requests) in, actions out."""

    __slots__ = ("_encoder", "_gate", "_held", "_inbox", "_max_frame", "_prefix_size",
                 "_refusal", "_room", "_shift", "_tail", "authenticated", "close_reason", "closed",
                 "decoder", "handled", "id", "last_chunk", "max_in_flight", "parked", "rate",
                 "slots")

    def __init__(self, conn_id: str, gate: RequestGate, encoder: FrameEncoder | None,
                 room: WaitRoomView,
                 *, framed: bool = True, max_in_flight: int = 1,
                 slots_before_hello: int | None = None,
                 pre_auth_frame_bytes: int | None = None, rate: RateWindow | None = None,
                 authenticated: bool = False):
        self.id = conn_id
        self._gate = gate
        self._encoder = encoder
        self._room = room
        profile = gate.engine.profile
        self._max_frame = profile.model.max_frame_bytes
        self._prefix_size = len(encoder.prefix(0)) if encoder is not None else 0
        #: the gate's view: whether Auth succeeded (a shell with no token to present starts
        #: authenticated), the rate window, the decoder whose pre-auth bound Auth lifts
        self.authenticated = authenticated or not gate.tokens
        self.rate = rate
        self.decoder: FrameDecoder | None = FrameDecoder(
            profile, max_frame_bytes=pre_auth_frame_bytes if gate.tokens else None) \
            if framed else None
        self.max_in_flight = max_in_flight
        #: the slots the connection has now: ``slots_before_hello`` (protocol v1, BQ-HELLO-3)
        #: until a Hello is answered ok, then ``max_in_flight`` (BQ-PIPE-2)
        self.slots = max_in_flight if slots_before_hello is None else slots_before_hello
        self.parked = 0            # long polls parked now, each holding a slot
        self.handled = 0           # frames handled by the last next_actions
        self.closed = False
        self.close_reason: str | None = None
        #: the last chunk fed to the decoder and where it began in the decoder's stream
        self.last_chunk: tuple[bytes, int] = (b"", 0)
        self._inbox: deque[Any] = deque()   # requests, ProtocolErrors, _Refused; in order
        self._tail = b""           # the last PREFIX_TAIL bytes fed before the last chunk
        self._refusal = False      # a _Refused waits in the inbox: bytes after it are held
        self._held: list[bytes] = []
        self._shift = 0            # where the decoder's stream starts in the connection's

    # -- state
    @property
    def pending(self) -> bool:
        """Received requests wait to be handled: call :meth:`next_actions`."""
        return not self.closed and bool(self._inbox)

    @property
    def blocked(self) -> bool:
        """A request waits while every slot is held by a parked poll (BQ-PIPE-2)."""
        return self.pending and self.parked >= self.slots

    @property
    def progress(self) -> tuple[int, int, bytes, int]:
        """Where the frame in progress stands, for the shell's frame intake: the decoder's
        ``offset`` and ``buffered``, and the last chunk with its stream offset (offsets in the
        connection's stream, which goes on across the decoder an Auth swaps in: the intake
        tells a new frame by a new offset)."""
        dec = self.decoder
        assert dec is not None
        data, pos = self.last_chunk
        shift = self._shift
        return dec.offset + shift, dec.buffered, data, pos + shift

    # -- input
    def receive_data(self, data: bytes) -> None:
        """Decode bytes from the peer; :meth:`next_actions` answers what they hold."""
        if self.closed or not data:
            return
        if self._refusal:          # decided when the refused frame before them is handled
            self._held.append(data)
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        dec = self.decoder
        assert dec is not None, "a connection without frames takes requests, not bytes"
        pos = dec.offset + dec.buffered   # where `data` starts in the decoder's stream
        self.last_chunk = (data, pos)
        inbox = self._inbox
        fresh = data
        while True:
            try:
                frames = dec.feed(fresh)
            except ProtocolError as err:
                # the decoder keeps a closing error; its traceback would hold this frame (the
                # connection, its buffers) in a cycle until the collector's next full pass
                err.__traceback__ = None
                inbox.extend(err.frames)
                if err.reaction == "close":
                    inbox.append(_Refused(err, stream_from(self._tail, data, pos, err.offset),
                                          self._prefix_size))
                    self._refusal = True
                    break
                inbox.append(err)
                fresh = b""       # the decoder goes on after the bad frame
                continue
            inbox.extend(frames)
            break
        self._tail = (self._tail + data)[-PREFIX_TAIL:]

    def receive_eof(self) -> None:
        """The peer closed its side: a stream that ends inside a frame is closed unanswered,
        as bunqueue does (the requests before it are still answered)."""
        if self.decoder is None or self.closed:
            return
        try:
            self.decoder.eof()
        except ProtocolError as err:
            err.__traceback__ = None  # kept by the decoder: no cycle through this frame
            log.debug("connection %s: %s", self.id, err)

    def request(self, request: Any) -> dict | Wait:
        """The reply (without reqId) to one decoded request, or the engine's Wait of a long
        poll: for a shell without frames (the embedded server, a WebSocket)."""
        return self._gate.answer(self, request)

    # -- output
    def next_actions(self, max_frames: int | None = None,
                     max_bytes: int | None = None) -> list[Any]:
        """Handle received frames in order, up to ``max_frames`` (None: all) or until the
        reply bytes reach ``max_bytes``, or until :attr:`blocked`; the actions that follow.
        :attr:`handled` says how many frames were handled."""
        out: list[Any] = []
        self.handled = 0
        if self.closed:
            return out
        inbox = self._inbox
        answer, frame, room = self._gate.answer, self.frame, self._room
        left = -1 if max_frames is None else max(max_frames, 0)
        size = 0
        while left and inbox:
            item = inbox[0]
            kind = type(item)
            if kind is _Refused:
                inbox.popleft()
                left -= 1
                self.handled += 1
                out += self._refused(item)
                if self.closed:
                    return out
                continue
            error = isinstance(item, ProtocolError)
            if not error and self.parked >= self.slots:
                break             # every slot is held by a parked poll (BQ-PIPE-2)
            inbox.popleft()
            left -= 1
            self.handled += 1
            if error:
                data = frame(self._transport_error(item))
            else:
                try:
                    reply = answer(self, item)
                except Exception:  # a bug: close this connection only
                    log.exception("connection %s: error answering a request, closing it",
                                  self.id)
                    out.append(self._close("internal error", abort=True))
                    return out
                if self.slots != self.max_in_flight and type(item) is dict and \
                        item.get("cmd") == HELLO and type(reply) is dict and reply.get("ok") is True:
                    self.slots = self.max_in_flight   # protocol v2 negotiated: pipelining
                if isinstance(reply, Wait):
                    if not room.full:
                        self.parked += 1
                        out.append(Park(item, reply))
                        continue
                    reply = self._gate.engine.expire(reply)   # BQ-SAFE-1 max_parked_polls
                data = frame(self.with_req_id(item, reply))
            out.append(data)
            size += len(data)
            if max_bytes is not None and size >= max_bytes:
                break
        return out

    def answer(self, request: Any, reply: dict) -> bytes:
        """The frame of a parked poll's reply (or of any reply to ``request``)."""
        return self.frame(self.with_req_id(request, reply))

    def unpark(self) -> None:
        """A parked poll was answered (or cancelled): its slot is free."""
        if self.parked:
            self.parked -= 1

    def close(self, reason: str) -> None:
        """The shell closes the connection (its end, a read error, the server stopping)."""
        if not self.closed:
            self.closed = True
            self.close_reason = reason
            self._inbox.clear()
            self._held.clear()

    # -- replies
    @staticmethod
    def with_req_id(request: Any, reply: dict) -> dict:
        """``reply`` with ``request``'s reqId, echoed verbatim (BQ-ENV-2)."""
        if type(request) is dict:
            req_id = request.get("reqId", UNDEFINED)
            if req_id is not UNDEFINED:
                reply["reqId"] = req_id
        return reply

    def frame(self, reply: dict) -> bytes:
        """The frame of a reply; one the wire cannot carry (over max_frame_bytes, say) is
        answered ``internal_error`` with its reqId, or without it if even that fails: a
        decoded request is always answered (BQ-MSGPACK-8)."""
        encoder = self._encoder
        assert encoder is not None, "a connection without frames writes no frames"
        try:
            return encoder.encode(reply)
        except EncodeError as exc:
            log.warning("connection %s: cannot encode a reply: %s", self.id, exc)
        error = self._gate.error("internal_error")
        if "reqId" in reply:
            try:
                return encoder.encode({**error, "reqId": reply["reqId"]})
            except EncodeError:
                pass
        return encoder.encode(error)

    def _transport_error(self, err: ProtocolError) -> dict:
        """Rule 2: the reply to a frame refused with reaction ``reply`` (never a reqId)."""
        if self.rate is not None and not self.rate.allow():
            return self._gate.error("rate_limit_exceeded")
        return self._gate.error("invalid_command" if err.kind == "not_a_map"
                                else "invalid_command_format")

    def _refused(self, refused: _Refused) -> list[Any]:
        """Rule 3, once the requests before the refused frame are answered."""
        held, self._held, self._refusal = self._held, [], False
        length = refused.length
        if refused.error.kind == "frame_too_large" and self.authenticated and \
                isinstance(length, int) and length <= self._max_frame:
            # an Auth before it lifted the bound: read on from that frame, with a decoder
            # whose stream starts there
            self.decoder = FrameDecoder(self._gate.engine.profile)
            self._shift += refused.error.offset or 0   # (it follows the Auth: never 0)
            self._tail = b""
            self._feed(refused.rest + b"".join(held))
            return []
        dec = self.decoder
        assert dec is not None
        farewell = self.frame(self._gate.error("frame_too_large", length=length,
                                               max=dec.max_frame_bytes))
        return [self._close("frame too large", farewell)]

    def _close(self, reason: str, farewell: bytes = b"", *, abort: bool = False) -> Close:
        self.close(reason)
        return Close(reason, farewell, abort)
