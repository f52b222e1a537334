"""Reference clients for the queuewire protocols: a sans-IO core and an asyncio shell.

Design: the client layer sits on the codecs and the spec and beside the reference servers,
which it never imports, with one exception the import contracts in ``pyproject.toml`` name:
the embedded mode (:mod:`.transport`) runs the reference server's request path in process,
as document 002's embedded mode calls the server's queue manager. The core is a set of state
machines written as transition tables, like h11's ``_state.py``: a session takes the bytes
that arrived and the calls its user makes, and returns events and the bytes to send; it owns
no socket and reads time from an injected clock, so every transition (negotiation, request
correlation, timeouts, dead-link detection, reconnect backoff, graceful stop) is testable
without a network. ``session`` is what no protocol owns (the request table, base errors and
events, the state machine driver and outbox); ``bunqueue_session`` is a bunqueue link
(document 000's lifecycle on document 003's model) and ``quicx_session`` the quicx producer,
worker and monitor. The shells only move bytes and time: ``bunqueue_pool`` (links and the
shared pool), ``transport`` (TCP or embedded), and the SDK of document 002 on top,
``queue`` (:class:`Queue`), ``worker`` (:class:`Worker`), ``flow`` (:class:`FlowProducer`,
:class:`QueueGroup`, :class:`QueueEvents`), ``job`` and ``sync`` (a blocking facade);
``quicx`` is the quicx shell. Options and their defaults come from the spec (``options``).
Every error a caller meets is a :class:`ClientError`; a server that cannot be reached is a
:class:`ClientConnectError` that says why ("connection refused") with the OSError as its cause,
raised on entering a Queue or Worker or by the first command, within the connect timeout.
"""

from .bunqueue_errors import (
    BunqueueAuthError,
    BunqueueClientError,
    BunqueueConnectError,
    BunqueueConnectionLost,
    BunqueueEncodeError,
    BunqueueProtocolViolation,
    BunqueueRefused,
    BunqueueReplyInvalid,
    BunqueueSessionStopped,
    BunqueueStateError,
    BunqueueTimeout,
)
from .flow import FlowProducer, QueueEvents, QueueGroup
from .job import Job
from .options import ClientConfigError, ConnectionOptions, WorkerOptions
from .queue import Queue
from .session import (
    ClientConnectError,
    ClientConnectionLost,
    ClientError,
    ClientSessionStopped,
    ClientStateError,
    ClientTimeout,
)
from .worker import Worker

__all__ = [
    "BunqueueAuthError", "BunqueueClientError", "BunqueueConnectError", "BunqueueConnectionLost",
    "BunqueueEncodeError", "BunqueueProtocolViolation", "BunqueueRefused", "BunqueueReplyInvalid",
    "BunqueueSessionStopped", "BunqueueStateError", "BunqueueTimeout", "ClientConfigError",
    "ClientConnectError", "ClientConnectionLost", "ClientError", "ClientSessionStopped",
    "ClientStateError", "ClientTimeout", "ConnectionOptions", "FlowProducer", "Job", "Queue",
    "QueueEvents", "QueueGroup", "Worker", "WorkerOptions",
]
