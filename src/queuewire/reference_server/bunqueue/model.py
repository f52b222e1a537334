"""The engine's vocabulary: job states and lifecycle event names as the spec names them,
the named constants the spec is silent on (each says why its value), the values the engine
trades with its shell (:class:`Event`, :class:`Wait`, :class:`EngineConfig`), the refusal a
handler raises (:class:`Refused`) and small pure helpers on request values (JavaScript
``undefined`` stripping, integer options, request defaults)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ... import __version__
from ...codecs.bunqueue import UNDEFINED

DEFAULT_PROFILE = "bunqueue/v2"

# -- job states and lifecycle events, by the names spec/bunqueue/protocol.yaml gives them ------
WAITING, DELAYED, ACTIVE, COMPLETED, FAILED = "waiting", "delayed", "active", "completed", "failed"
EV_PULL = "PULL"
EV_DELAY_ELAPSED = "delay elapsed"
EV_PROMOTE = "Promote"
EV_ACK = "ACK"
EV_FAIL_RETRY = "FAIL with attempts left"
EV_FAIL_FINAL = "FAIL with no attempts left"
EV_MOVE_TO_DELAYED = "MoveToDelayed"
EV_CONN_CLOSED = "connection closed"
EV_STALLED = "stalled with stalls left"
EV_STALLED_FINAL = "stalled maxStalls times"
EV_DISCARD = "Discard"
EV_RETRY_DLQ = "RetryDlq"
EV_RETRY_COMPLETED = "RetryCompleted"
LIFECYCLE_EVENTS = (EV_PULL, EV_DELAY_ELAPSED, EV_PROMOTE, EV_ACK, EV_FAIL_RETRY, EV_FAIL_FINAL,
                    EV_MOVE_TO_DELAYED, EV_CONN_CLOSED, EV_STALLED, EV_STALLED_FINAL,
                    EV_DISCARD, EV_RETRY_DLQ, EV_RETRY_COMPLETED)

# -- named constants (the spec is silent on these; each says why its value) -------------------
TIMELINE_MAX = 20          # bunqueue keeps a job's last 20 state changes (MAX_TIMELINE_ENTRIES)
LOGS_PER_JOB_MAX = 100     # bunqueue's maxLogsPerJob: bounds the memory one client can pin on a job
STACKTRACE_LINES = 10      # bunqueue's default stackTraceLimit: FAIL's extra `stack` lines kept
RESULT_CACHE_MAX = 10_000  # results of jobs removed on completion kept for GetResult/WaitJob
                           # (BQ-QUERY-3 allows eviction from an LRU cache)
RATE_WINDOW_MS = 1000.0    # RateLimit counts "jobs processed per second" (BQ-RATE-2)
THROUGHPUT_WINDOW_S = 10   # Stats pushPerSec/pullPerSec average the last 10 whole seconds
WEBHOOK_BACKLOG_MAX = 10_000  # undrained deliveries kept; the oldest are dropped beyond this
DEFAULT_JOB_NAME = "default"  # job.yaml: name is "default" when the push gave none
STALLED_ERROR = "stalled"             # failure text a stall records (bunqueue's)
TIMEOUT_ERROR = "Job timeout exceeded"  # failure text a processing timeout records (BQ-PUSH-5)
DISCARDED_ERROR = "discarded"           # failure text Discard records
SIX_FIELD_SECONDS_FIRST = 6  # a 6-field cron expression carries leading seconds (bunqueue's)
CRON_FIELDS = (5, SIX_FIELD_SECONDS_FIRST)
# The shortest time between two firings of a cron expression: a minute when its finest field
# is minutes (five fields, and the @hourly-style macros), a second with leading seconds. What
# the cron_rate safeguard counts an expression as (an interval counts its repeatEvery).
CRON_PERIOD_MS = {5: 60_000.0, SIX_FIELD_SECONDS_FIRST: 1000.0}
# cloud metadata services reached by name (by address they are link-local, 169.254.169.254)
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "instance-data"})
MB = 1024 * 1024              # Metrics reports sizes in MB (MiB, as bunqueue computes them)
UNLIMITED = 1 << 62           # a job budget no queue reaches: "no limit" without a None case




# =============================================================================================
# Public types
# =============================================================================================
class Event(NamedTuple):
    """Something a parked :class:`Wait` may be waiting for: ``queue`` may have a job to hand
    out, or ``job_id`` left the active state (``reason`` says which, for logs and tests).
    Immutable and compared by value; a tuple because one is made for every job that becomes
    waiting, and a frozen dataclass costs several times as much to build."""

    queue: str | None = None
    job_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class Wait:
    """A long poll the shell parks until an event wakes it or ``deadline_ms`` passes.

    ``kind`` is ``"queue"`` (PULL, PULLB: ``key`` is the queue) or ``"job"`` (WaitJob:
    ``key`` is the job id). ``request`` is the (normalised) request; ``conn_id`` the
    connection it came on. Waits compare and hash by identity (a shell keeps them in sets);
    ``retry`` answers the very wait it was given while the poll goes on."""

    kind: str
    key: str
    deadline_ms: float
    request: Mapping[str, Any] = field(repr=False)
    conn_id: str | None = None

    def wakes_on(self, event: Event) -> bool:
        return (event.queue if self.kind == "queue" else event.job_id) == self.key


@dataclass(frozen=True)
class EngineConfig:
    """Server settings. ``None`` means the profile's default (``worker_defaults`` in
    spec/bunqueue/protocol.yaml): stallInterval, maxStalls, lockTtl, waitJobTimeout,
    workerTimeout."""

    stall_interval_ms: float | None = None
    max_stalls: int | None = None
    lock_ttl_ms: float | None = None
    wait_job_timeout_ms: float | None = None
    worker_timeout_ms: float | None = None
    allow_private_webhooks: bool = False  # BQ-WEBHOOK-1 checks off (tests, a private network)
    server_version: str = __version__     # what Hello answers as version
    result_cache_size: int = RESULT_CACHE_MAX
    # Metrics memoryUsageMb; injectable because reading process memory is platform-specific
    memory_usage_mb: Callable[[], float] | None = None




_OPAQUE_KEYS = frozenset({"data", "result", "results"})  # client payloads: left as sent


def _has_undefined(value: Any) -> bool:
    """Whether an option map or list holds a JavaScript ``undefined`` outside job data. The
    maps of a list (PUSHB's entries) are scanned here rather than by a call each."""
    if type(value) is dict:
        return _map_has_undefined(value)
    if type(value) is list:
        for v in value:
            if v is UNDEFINED:
                return True
            t = type(v)
            if t is dict:
                for k, w in v.items():
                    if w is UNDEFINED:
                        return True
                    tw = type(w)
                    if (tw is dict or tw is list) and k not in _OPAQUE_KEYS \
                            and _has_undefined(w):
                        return True
            elif t is list and _has_undefined(v):
                return True
    return False


def _map_has_undefined(value: dict) -> bool:
    for k, v in value.items():
        if v is UNDEFINED:
            return True
        t = type(v)
        if (t is dict or t is list) and k not in _OPAQUE_KEYS and _has_undefined(v):
            return True
    return False


def strip_undefined(value: Any) -> Any:
    """Drop JavaScript ``undefined`` members from option maps: msgpackr clients send unset
    options as undefined (BQ-MSGPACK-6), which means absent. Job data is left as sent. A
    value without any is answered as it is (the common case: no copy)."""
    if not _has_undefined(value):
        return value
    return _strip(value)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (v if k in _OPAQUE_KEYS else _strip(v))
                for k, v in value.items() if v is not UNDEFINED}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def int_option(value: Any, default: int = 0) -> int:
    """An integer option: msgpackr sends integers beyond 32 bits as (integral) float64."""
    if value is None or isinstance(value, bool):
        return default
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else default
    return value if isinstance(value, int) else default


def clamp_count(value: Any, default: int | None, ceiling: int) -> int:
    """A count-like option (limit, offset, count) bounded to what can exist."""
    n = int_option(value, default if default is not None else ceiling)
    return max(0, min(n, ceiling))




class Refused(Exception):
    """A command refused with one of the spec's errors (raised inside handlers only)."""

    def __init__(self, name: str, **fields: Any):
        super().__init__(name)
        self.name, self.fields = name, fields




# =============================================================================================
# Small pure helpers
# =============================================================================================
def request_defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``default`` of each top-level property of a request schema (the spec's defaults)."""
    return {name: prop["default"] for name, prop in (schema.get("properties") or {}).items()
            if isinstance(prop, Mapping) and "default" in prop}


def repeat_option(repeat: Mapping[str, Any]) -> dict[str, Any] | None:
    """A push's ``repeat`` option as the job keeps it: its numeric ``every``, ``limit``,
    ``count`` and ``prevMillis`` (``count`` 0 when not given)."""
    out = {k: repeat[k] for k in ("every", "limit", "count", "prevMillis")
           if isinstance(repeat.get(k), (int, float)) and not isinstance(repeat.get(k), bool)}
    out.setdefault("count", 0)
    return out


# (command, path) of every reply record a builder filters by the profile's schema: a path is
# property names, "[]" for a list's items; () is the reply itself
RECORD_REPLIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Cron", ("cron",)), ("CronGet", ("cron",)), ("CronList", ("crons", "[]")),
    ("RegisterWorker", ("data",)), ("ListWorkers", ("data", "workers", "[]")),
    ("GetLogs", ("data",)), ("Clean", ()),
)


def reply_properties(profile: Any, cmd: str, path: tuple[str, ...]) -> frozenset[str]:
    """The property names the profile's response schema of ``cmd`` defines at ``path``
    (``$ref``s to the profile's definitions followed); empty where it defines none."""
    definitions = profile.tree.get("definitions") or {}

    def resolve(schema: Any) -> Mapping:
        seen = 0
        while isinstance(schema, Mapping) and "$ref" in schema and seen < 16:
            schema, seen = definitions.get(str(schema["$ref"]).rsplit("/", 1)[-1]) or {}, seen + 1
        return schema if isinstance(schema, Mapping) else {}

    schema = resolve(profile.model.commands[cmd].response)
    for step in path:
        schema = resolve(schema.get("items") if step == "[]"
                         else (schema.get("properties") or {}).get(step))
    return frozenset(schema.get("properties") or ())


def only_documented(record: dict, fields: frozenset[str]) -> dict:
    """``record`` without the keys ``fields`` (the profile's properties there) lacks."""
    return {k: v for k, v in record.items() if k in fields}
