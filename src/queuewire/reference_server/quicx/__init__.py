"""The quicx reference daemon (document 004 and the quicx/1.0.3 notes), split like h11: a
sans-IO core that takes bytes and returns the frames to send and the connections to close,
with no sockets and no clock, and a thin asyncio shell that owns the sockets. Read it in this
order. :mod:`.pool` is the size-class slab pool every accepted task holds a slot of (so "queue
full" and "payload too large" are real outcomes of a bounded pool). :mod:`.engine` is the
daemon's state and rules, :class:`QuicxEngine`: the FIFO queue, the credit-based workers, the
requeue of a lost worker's tasks, every behaviour read from the profile's flags and error
tables, never from its name; decoded messages in, :class:`Send` / :class:`Close` actions for
any connection out. :mod:`.connection` is one peer, :class:`QuicxConnection`: it decodes the
bytes a bounded number of frames at a time, answers each protocol error by its spec reaction
and hands the messages to the engine. :mod:`.tcp` is :class:`QuicxServer`, the shell behind
``queuewire serve quicx`` (one ``asyncio.Protocol`` per connection), which reads, performs the
actions and applies the shared flow-control rules of :mod:`queuewire.reference_server._flow`
(frames per turn, output high-water mark, partial-frame timeout, listen backlog) and its own
(short turns for producers while the queue is backlogged). The seams are the action values
(the shell's whole contract with the core), ``QuicxConnection.next_actions(max_frames)`` (how
the shell bounds a turn), ``QuicxEngine.hold`` / ``release`` (how congestion seen by the shell
reaches the dispatcher) and ``QuicxEngine.throttled`` (which connections get short turns); a
test or another shell drives the core through them without a socket.
"""

from .._flow import DEFAULT_LISTEN_BACKLOG, DEFAULT_PARTIAL_FRAME_TIMEOUT
from .connection import FEED_BYTES, QuicxConnection
from .engine import Action, Close, EngineStats, Peer, QuicxEngine, Send, Task
from .pool import (
    DEFAULT_LARGEST_CLASS,
    DEFAULT_POOL_BYTES,
    SMALLEST_CLASS,
    ClassUsage,
    SizeClassPool,
    Slot,
    default_largest_class,
)
from .tcp import BACKLOG_FRAMES_PER_TURN, READ_SIZE, QuicxServer

__all__ = [
    "BACKLOG_FRAMES_PER_TURN",
    "DEFAULT_LARGEST_CLASS",
    "DEFAULT_LISTEN_BACKLOG",
    "DEFAULT_PARTIAL_FRAME_TIMEOUT",
    "DEFAULT_POOL_BYTES",
    "FEED_BYTES",
    "READ_SIZE",
    "SMALLEST_CLASS",
    "Action",
    "ClassUsage",
    "Close",
    "EngineStats",
    "Peer",
    "QuicxConnection",
    "QuicxEngine",
    "QuicxServer",
    "Send",
    "SizeClassPool",
    "Slot",
    "Task",
    "default_largest_class",
]
