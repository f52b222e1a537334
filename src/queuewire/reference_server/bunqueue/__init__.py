"""The bunqueue reference server: a sans-IO engine and its asyncio shells, in rooms that
mirror the spec.

The core is :class:`~.engine.BunqueueEngine` (``engine``: state, dispatch and the seams
``handle``, ``retry``/``expire``, ``notify``, ``tick``, ``connection_opened``/``_closed``).
Its job table is three documented bases: :mod:`.lifecycle` is the only code that changes a
job's state (along the rows of the spec's ``job_lifecycle`` table), :mod:`.batch` the same
moves a batch at a time, :mod:`.timers` the time-driven work ``tick`` runs. The commands are
plain functions registered by name (:mod:`.commands`, one module per command file of
``spec/bunqueue/commands/``), bound to the engine when it is built. Its
vocabulary (states, events, :class:`~.model.Event`, :class:`~.model.Wait`,
:class:`~.model.EngineConfig`) is in :mod:`.model`, jobs and per-queue containers in
:mod:`.jobs`, webhook target rules in :mod:`.webhook_urls`. State is written through a
:class:`~.store.Store` (:mod:`.store`: memory and null stores; :mod:`.sqlite`: SQLite WAL). The
shells move bytes and never hold queue semantics: :mod:`.tcp` (:class:`BunqueueServer`, the
framed MessagePack protocol, with flow control from :mod:`.._flow`), :mod:`.http` (the HTTP
API, Server-Sent Events and WebSocket of document 000, with its cross-site rules in
:mod:`.cross_site` and its webhook delivery in :mod:`.webhook_delivery`) and :mod:`.embedded`
(the TCP shell's request path without a socket, for the client's embedded mode). Dependencies
point one way: shells -> engine -> commands -> lifecycle/timers -> model/jobs -> store; nothing in
the engine imports a shell, and the HTTP shell does not import the TCP one.
"""

from .commands.auth import check_token
from .embedded import EmbeddedServer
from .engine import BunqueueEngine, request_refusal
from .http import HttpFrontend
from .jobs import Job, job_to_wire, uuid7, uuid7_batch
from .model import LIFECYCLE_EVENTS, EngineConfig, Event, Wait
from .sqlite import FLUSH_INTERVAL_MS, SqliteStore
from .store import MemoryStore, NullStore, StorageStatus, Store
from .tcp import BunqueueServer, tune_gc
from .webhook_urls import WebhookDelivery, webhook_host_error, webhook_url_error

__all__ = [
    "FLUSH_INTERVAL_MS", "LIFECYCLE_EVENTS", "BunqueueEngine", "BunqueueServer", "EmbeddedServer",
    "EngineConfig",
    "Event", "HttpFrontend", "Job", "MemoryStore", "NullStore", "SqliteStore", "StorageStatus",
    "Store", "Wait", "WebhookDelivery", "check_token", "job_to_wire", "request_refusal",
    "tune_gc", "uuid7", "uuid7_batch", "webhook_host_error", "webhook_url_error",
]
