"""The bunqueue reference server's sans-IO core: every command of the profile, with real
queue semantics, and no sockets, no asyncio and no clock of its own.

A :class:`BunqueueEngine` holds the jobs, queues, schedules, workers and webhooks of one
server. The shell (an asyncio TCP/HTTP server, written separately) decodes a frame, validates
it with :class:`~queuewire.codecs.validation.BunqueueValidator` and answers schema errors
itself; every request that passes goes to :meth:`BunqueueEngine.handle`, which answers the
reply's own fields and ``ok`` (the shell adds ``reqId``). Jobs move between the states of the
spec's ``job_states`` only along the rows of its ``job_lifecycle`` table, looked up by event
name (``_move``), in the style of h11's ``_state.py``: a command whose event has no row for
the job's current state is refused with that command's error, never forced (removing a job, by
Cancel, Drain, Clean, Obliterate, PurgeDlq, time-to-live or removeOnComplete, is not a state
change and needs no row). Each queue keeps its pullable waiting jobs in a sorted list keyed
(-priority, order, id), where order is the job's creation sequence (FIFO) or its negation
(LIFO), so PUSH, PULL and ACK are O(log n); delays, locks, stall and processing timeouts,
time-to-live and cron schedules are min-heaps of deadlines whose stale entries are skipped
when popped. Time enters only through the injected clock ``now_ms`` and through :meth:`tick`,
which the shell calls on a timer (:meth:`next_deadline` says when) and tests call with a fake
clock. Defaults, limits, error strings, state names and the protocol version are read from the
profile, never restated. A bare push (a PUSH, or every entry of a PUSHB, setting only name and
data) takes ``_create_plain``, which builds the same jobs, events and records as ``_create``
would, a batch at a time (benchmarks/README.md, "Server benchmark").

Seams for the shell:

* ``handle(conn_id, request) -> dict | Wait``. A :class:`Wait` is a long poll (PULL or PULLB
  with ``timeout`` > 0 and nothing to hand out; WaitJob on an unfinished job): the shell
  parks it and calls ``retry(conn_id, wait)`` when an :class:`Event` it ``wakes_on`` arrives,
  which answers a reply or the same wait again, or ``expire(wait)`` at ``wait.deadline_ms``,
  which always answers a reply. The engine keeps no record of parked waits: dropping one
  (its connection closed) needs no call.
* ``notify(event)``: called whenever a queue may have gained a job to hand out (a job became
  waiting, a queue was resumed, capacity or rate budget came back) and whenever a job left
  the active state (it finished, failed or was requeued). It is called after the operation
  that caused it has completed, never in the middle of one, so it may call ``retry``.
* ``tick() -> list[Event]``: time-driven work at ``now_ms()``: delays elapsed, locks expired,
  stalls, processing timeouts, time-to-live, cron schedules and rate windows. Its events go
  to ``notify`` too; the list is for callers without one.
* ``connection_opened(conn_id)`` / ``connection_closed(conn_id)``: the latter returns every
  job that connection was processing to waiting (BQ-CONN-1) and unregisters the workers it
  registered. ``conn_id=None`` (an HTTP request) pulls jobs that no connection owns.
* Webhooks are stored and validated here (BQ-WEBHOOK-1, with :func:`webhook_host_error`
  for the shell to re-check an address after DNS resolution); delivery is the shell's:
  ``webhook_deliveries()`` drains what should be POSTed (:class:`WebhookDelivery`, with its
  HMAC signature) and ``webhook_result(webhook_id, ok)`` records the outcome.
* ``publish(conn_ids, frame)``: where the profile defines ``job_events`` (bunqueue/2.9.5),
  SubscribeEvents / UnsubscribeEvents record which connection hears which queue (one each,
  BQ-EVENT-101), and every job event of a subscribed queue is handed to this hook, with the
  connections to write it to, when the operation that caused it ends (BQ-EVENT-102).
* The job name: a top-level ``name`` (BQ-NAME-101), else, where the profile's
  ``semantics.legacy_data_name`` says so, ``data.name`` split from the rest (BQ-NAME-102).
* Auth and the authentication gate are the shell's; :func:`check_token` compares a token
  in constant time (BQ-AUTH-4).
* All state is written through a :class:`~.bunqueue_store.Store` (``MemoryStore`` by
  default) and read back when an engine is constructed on it; see that module. A store whose
  ``keeps_jobs`` is False (``NullStore``, the shell's in-memory default) gets no job records.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import ipaddress
import itertools
import logging
import math
import operator
import os
import time
import urllib.parse
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from croniter import croniter
from sortedcontainers import SortedList

from .. import __version__
from ..codecs.bunqueue import UNDEFINED
from ..spec import Profile, load_profile
from .bunqueue_store import MemoryStore, Record, StorageStatus, Store

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class WebhookDelivery:
    """One POST the shell should make: ``payload`` as JSON to ``url``; with a ``secret``, the
    hex HMAC-SHA256 of the exact body goes in an ``X-Webhook-Signature`` header (BQ-WEBHOOK-3,
    bunqueue's scheme)."""

    webhook_id: str
    url: str
    event: str
    payload: Mapping[str, Any]
    secret: str | None = field(default=None, repr=False)

    def signature(self, body: bytes) -> str | None:
        if not self.secret:
            return None
        return hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()


# =============================================================================================
# Helpers the shell uses too
# =============================================================================================
def request_refusal(engine: BunqueueEngine, validator: Any, request: dict) -> dict | None:
    """The spec's error reply for a request ``validator`` (a BunqueueValidator) refuses, else
    None: no command name, an unknown one, or a schema violation cited by requirement. The
    one gate every shell (TCP, HTTP, WebSocket) puts before :meth:`BunqueueEngine.handle`."""
    if validator.request_is_valid(request):
        return None
    violations = validator.request_violations(request)
    if not violations:
        return None
    cmd = request.get("cmd")
    if type(cmd) is not str or not cmd:
        name, fields = "invalid_command", {}
    elif cmd not in engine.profile.model.commands:
        name, fields = "unknown_command", {"cmd": cmd}
    else:
        name, fields = "invalid_request", {"detail": str(violations[0])}
    return {"ok": False, "error": engine.error_message(name, **fields)}


def check_token(tokens: Iterable[str], token: Any) -> bool:
    """Whether ``token`` is one of ``tokens``, compared in constant time (BQ-AUTH-4): every
    configured token is compared, and a match does not end the loop early."""
    if not isinstance(token, str):
        return False
    given = token.encode("utf-8", "surrogatepass")
    found = False
    for t in tokens:
        found |= hmac.compare_digest(t.encode("utf-8", "surrogatepass"), given)
    return found


class _RandomPool:
    """Random bytes from ``os.urandom``, read a block at a time: ids and lock tokens need 10
    unpredictable bytes each, and one system call per id was most of what an id cost."""

    __slots__ = ("block", "pos")
    SIZE = 10 * 512

    def __init__(self) -> None:
        self.block, self.pos = b"", 0

    def take(self, n: int) -> bytes:
        pos = self.pos
        if pos + n > len(self.block):
            self.block, pos = os.urandom(max(self.SIZE, n)), 0
        self.pos = pos + n
        return self.block[pos:pos + n]


_random = _RandomPool()


def uuid7(now_ms: float) -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, version 7, 74 random bits (12 of
    rand_a, 62 of rand_b), formatted as str(uuid.UUID) formats it."""
    b = bytearray((int(max(now_ms, 0)) & 0xFFFFFFFFFFFF).to_bytes(6, "big"))
    b += _random.take(10)
    b[6] = 0x70 | (b[6] & 0x0F)  # version 7
    b[8] = 0x80 | (b[8] & 0x3F)  # variant 10
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_VERSION_7 = bytes(0x70 | (b & 0x0F) for b in range(256))  # byte 6: version 7
_VARIANT_10 = bytes(0x80 | (b & 0x3F) for b in range(256))  # byte 8: variant 10


def uuid7_batch(now_ms: float, n: int) -> list[str]:
    """``n`` UUIDv7s of the same millisecond, as :func:`uuid7` makes them one at a time: the
    time prefix is formatted once, and the random bytes of all of them are read, given their
    version and variant bits (by a translation of every 10th byte) and hexed at once."""
    t = (int(max(now_ms, 0)) & 0xFFFFFFFFFFFF).to_bytes(6, "big").hex()
    prefix = f"{t[:8]}-{t[8:12]}-"
    b = bytearray(_random.take(10 * n))
    b[0::10] = b[0::10].translate(_VERSION_7)
    b[2::10] = b[2::10].translate(_VARIANT_10)
    r = b.hex()
    return [f"{prefix}{r[i:i + 4]}-{r[i + 4:i + 8]}-{r[i + 8:i + 20]}"
            for i in range(0, 20 * n, 20)]


def webhook_url_error(url: Any, *, allow_private: bool = False) -> str | None:
    """The ``errors`` name of the first rule ``url`` breaks (BQ-WEBHOOK-1), or None.

    Parsing follows what a WHATWG URL parser (bunqueue's) makes of the host, so the usual SSRF
    disguises are seen through: percent-encoding, Unicode look-alikes (IDNA mapping), IPv4 in
    decimal, octal or hex (``http://2130706433/``), IPv4 inside IPv6 (mapped, compatible,
    6to4, Teredo). Nothing is resolved: a name that resolves to a private address is the
    shell's to refuse at delivery time, with :func:`webhook_host_error` on the address."""
    if not isinstance(url, str) or not url.strip():
        return "webhook_url_required"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme and scheme not in ("http", "https"):
            return "webhook_url_protocol"
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return "webhook_url_invalid"
    if not scheme or not host:
        return "webhook_url_invalid"
    host = _normalise_host(host)
    if host is None:
        return "webhook_url_invalid"
    return None if allow_private else webhook_host_error(host)


def webhook_host_error(host: str) -> str | None:
    """The ``errors`` name for a webhook host (a name or an address) that must not be called:
    localhost, loopback, private, link-local (cloud metadata lives there), unspecified or
    otherwise non-public addresses and metadata host names; None for a public host."""
    h = host.strip().strip("[]").rstrip(".").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return "webhook_url_localhost"
    ip = _host_ip(h)
    if ip == "invalid":
        return "webhook_url_invalid"
    if ip is None:
        if h in METADATA_HOSTS or h.endswith(".internal"):
            return "webhook_url_metadata"
        return None
    return _ip_error(ip)


def _normalise_host(host: str) -> str | None:
    host = urllib.parse.unquote(host)
    if host.isascii():
        return host.lower()
    try:  # IDNA mapping (NFKC, case folding), as a browser's URL parser does
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return None


def _ipv4_number(part: str) -> int | None:
    """One part of a WHATWG IPv4 host: decimal, 0x-hex or 0-octal; None if not a number."""
    try:
        if part[:2].lower() == "0x":
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def _host_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | str | None:
    """The address a URL host denotes, "invalid" for a malformed numeric host, else None."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return "invalid"
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    last = parts[-1]
    if not (last.isdigit() or (last[:2].lower() == "0x"
                               and all(c in "0123456789abcdefABCDEF" for c in last[2:]))):
        return None  # a domain name (WHATWG: the host does not end in a number)
    numbers = [_ipv4_number(p) for p in parts]
    if len(parts) > 4 or any(n is None for n in numbers):
        return "invalid"
    *head, tail = numbers
    if any(n > 255 for n in head) or tail >= 256 ** (5 - len(parts)):
        return "invalid"
    value = tail
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


_ULA = ipaddress.IPv6Network("fc00::/7")


def _ip_error(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if ip.version == 6:
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip.packed[:12] == bytes(12) and int(ip) > 1:
            embedded = ipaddress.IPv4Address(ip.packed[12:])  # IPv4-compatible ::a.b.c.d
        if embedded is not None:
            return _ip_error(embedded)
    if ip.is_unspecified:
        return "webhook_url_unspecified"
    if ip.is_loopback:
        return "webhook_url_loopback"
    if ip.is_link_local:
        return "webhook_url_link_local"
    if ip.version == 6 and (ip in _ULA or not ip.is_global or ip.is_site_local
                            or ip.is_multicast or ip.is_reserved):
        return "webhook_url_private_ula" if ip in _ULA else "webhook_url_private"
    if not ip.is_global or ip.is_multicast or ip.is_reserved:
        return "webhook_url_private"
    return None


def _process_memory_mb() -> float:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError, IndexError, AttributeError):
        try:
            import resource
        except ImportError:
            return 0.0
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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


def _strip_undefined(value: Any) -> Any:
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


def _int(value: Any, default: int = 0) -> int:
    """An integer option: msgpackr sends integers beyond 32 bits as (integral) float64."""
    if value is None or isinstance(value, bool):
        return default
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else default
    return value if isinstance(value, int) else default


def _clamp_count(value: Any, default: int | None, ceiling: int) -> int:
    """A count-like option (limit, offset, count) bounded to what can exist."""
    n = _int(value, default if default is not None else ceiling)
    return max(0, min(n, ceiling))


# =============================================================================================
# Jobs
# =============================================================================================
@dataclass(slots=True, eq=False)
class Job:
    """A job as the engine holds it. Persisted fields go to the store as a record (see
    ``to_record``); the fields after ``_volatile`` describe the running process only."""

    id: str
    queue: str
    name: str
    data: Any
    seq: int                 # creation order: FIFO key among equal priorities
    state: str
    created_at: float
    run_at: float
    priority: int
    max_attempts: int
    backoff: float
    lifo: bool = False
    attempts: int = 0
    started_at: float | None = None
    completed_at: float | None = None
    finished_at: float | None = None     # when it entered completed or failed (Clean's age)
    ttl: int | None = None
    timeout: int | None = None
    unique_key: str | None = None
    custom_id: str | None = None
    depends_on: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    group_id: str | None = None
    progress: float = 0
    progress_message: str | None = None
    stacktrace: list | None = None
    remove_on_complete: bool = False
    remove_on_fail: bool = False
    durable: bool = False
    repeat: dict | None = None
    last_heartbeat: float = 0.0
    stall_count: int = 0
    has_result: bool = False
    returnvalue: Any = None
    failed_reason: str | None = None
    timeline: list = field(default_factory=list)  # a shared tuple until the first change
    # -- volatile: never persisted ------------------------------------------------------------
    pending_deps: int = 0            # dependencies not yet completed (recomputed on load)
    lock_token: str | None = None
    lock_owner: str | None = None
    lock_expires: float | None = None
    lock_ttl: float | None = None
    conn_id: str | None = None       # connection it was pulled on (BQ-CONN-1)
    activation: int = 0              # bumped on each entry to active; stale timers compare it

    def to_record(self) -> Record:
        """A record the engine never touches again: its lists are copies (the timeline is
        appended to in place); data and results are shared, as they are only replaced."""
        record = dict(zip(_PERSISTED, _persisted_values(self)))
        for name in _LISTS:
            value = record[name]
            if value is not None:
                record[name] = list(value)
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Job:
        return cls(**{k: v for k, v in record.items() if k in _PERSISTED_SET})


_VOLATILE = ("pending_deps", "lock_token", "lock_owner", "lock_expires", "lock_ttl", "conn_id",
             "activation")
_PERSISTED = tuple(f.name for f in fields(Job) if f.name not in _VOLATILE)
_PERSISTED_SET = frozenset(_PERSISTED)
# request keys that leave every other job option at its default (_create's fast path)
_PLAIN_PUSH_KEYS = frozenset({"cmd", "reqId", "queue", "name", "data", "priority", "delay",
                              "maxAttempts", "backoff", "jobId", "customId"})
# a PUSH / a PUSHB entry with only these keys (and a non-empty name) takes _create_plain: no
# custom id, uniqueKey or dependency to check, every other option at its default
_BARE_PUSH_KEYS = frozenset({"cmd", "reqId", "queue", "name", "data"})
_BARE_ENTRY_KEYS = frozenset({"name", "data"})
_NONE: Any = ()  # the depends_on and tags of a job created without any (see _create_plain)
_persisted_values = operator.attrgetter(*_PERSISTED)


def _plain_job_factory() -> Callable[..., Job]:
    """A constructor for the jobs of ``_create_plain``, generated from ``fields(Job)`` (so it
    follows the class): the given fields from its arguments, every other one its default.
    Binding the dataclass ``__init__``'s 43 parameters cost about twice what the stores do;
    this takes 12 arguments and stores the rest as constants (~0.4 us a job instead of ~1.2)."""
    given = {"id": "id", "queue": "queue", "name": "name", "data": "data", "seq": "seq",
             "created_at": "now", "run_at": "now", "last_heartbeat": "now",
             "priority": "priority", "max_attempts": "max_attempts", "backoff": "backoff",
             "lifo": "lifo", "remove_on_complete": "roc", "remove_on_fail": "rof",
             "timeline": "timeline", "depends_on": "none", "tags": "none"}
    env: dict[str, Any] = {"new": object.__new__, "Job": Job, "WAITING": WAITING}
    lines = ["def plain_job(id, queue, name, data, seq, now, priority, max_attempts, backoff,",
             "              lifo, roc, rof, timeline, none):",
             "    job = new(Job)"]
    for f in fields(Job):
        if f.name in given:
            value = given[f.name]
        elif f.name == "state":
            value = "WAITING"
        elif f.default_factory is not MISSING:
            env[f"factory_{f.name}"] = f.default_factory
            value = f"factory_{f.name}()"
        else:
            env[f"default_{f.name}"] = f.default
            value = f"default_{f.name}"
        lines.append(f"    job.{f.name} = {value}")
    lines.append("    return job")
    exec("\n".join(lines), env)  # noqa: S102 - our own source, built from fields(Job)
    return env["plain_job"]


_plain_job = _plain_job_factory()
_LISTS = ("depends_on", "tags", "stacktrace", "timeline")


def job_to_wire(job: Job) -> dict[str, Any]:
    """The Job object of spec/bunqueue/job.yaml, in the key order bunqueue sends it. Fields
    the engine does not model (flows, debounce, deduplication TTLs) have their neutral value."""
    return {
        "id": job.id, "queue": job.queue, "name": job.name, "data": job.data,
        "createdAt": job.created_at, "runAt": job.run_at, "startedAt": job.started_at,
        "completedAt": job.completed_at, "attempts": job.attempts, "backoff": job.backoff,
        "backoffConfig": None, "dependsOn": list(job.depends_on),
        "childrenIds": list(job.depends_on),
        "childrenCompleted": len(job.depends_on) - job.pending_deps, "tags": list(job.tags),
        "progress": job.progress, "progressMessage": job.progress_message,
        "stacktrace": list(job.stacktrace) if job.stacktrace is not None else None,
        "repeat": dict(job.repeat) if job.repeat is not None else None,
        "durable": job.durable, "lastHeartbeat": job.last_heartbeat,
        "stallCount": job.stall_count, "priority": job.priority, "lifo": job.lifo,
        "maxAttempts": job.max_attempts, "removeOnComplete": job.remove_on_complete,
        "removeOnFail": job.remove_on_fail, "ttl": job.ttl, "timeout": job.timeout,
        "uniqueKey": job.unique_key, "customId": job.custom_id, "parentId": None,
        "groupId": job.group_id, "stallTimeout": None, "stackTraceLimit": STACKTRACE_LINES,
        "keepLogs": None, "sizeLimit": None, "failParentOnFailure": False,
        "removeDependencyOnFailure": False, "continueParentOnFailure": False,
        "ignoreDependencyOnFailure": False, "deduplicationTtl": None,
        "deduplicationExtend": False, "deduplicationReplace": False, "debounceId": None,
        "debounceTtl": None, "timeline": list(job.timeline),
    }


# =============================================================================================
# Queues, schedules, workers
# =============================================================================================
class _Waiting(SortedList):
    """A queue's pullable jobs in pull order: a SortedList that can also take a run of keys
    that all sort after its last one (a FIFO batch of one priority, the common PUSHB) in
    sublist-sized slices instead of one bisection and insertion each."""

    def add_run(self, values: list) -> None:
        """Add ``values`` (sorted); a run past the current last key is appended."""
        lists, maxes = self._lists, self._maxes
        if not values or (maxes and not values[0] > maxes[-1]) \
                or any(not a < b for a, b in zip(values, values[1:])):
            self.update(values)  # not a run past the end: the general path
            return
        load = self._load
        start = 0
        if lists and len(lists[-1]) < load:  # top up the last sublist first
            start = load - len(lists[-1])
            lists[-1].extend(values[:start])
            maxes[-1] = lists[-1][-1]
        for i in range(start, len(values), load):
            chunk = values[i:i + load]
            lists.append(chunk)
            maxes.append(chunk[-1])
        self._len += len(values)
        del self._index[:]  # positions changed: rebuilt when next needed, as _expand does


class _Queue:
    __slots__ = ("name", "members", "all", "waiting", "priorities", "unique", "paused",
                 "rate_limit", "concurrency", "pulls")

    def __init__(self, name: str, states: Iterable[str]):
        self.name = name
        self.members: dict[str, dict[str, None]] = {s: {} for s in states}  # by entry order
        self.all: dict[str, None] = {}           # every job of the queue, by creation
        self.waiting = _Waiting()                # (-priority, order, id) of pullable jobs
        self.priorities: Counter = Counter()     # priority -> waiting + delayed jobs
        self.unique: dict[str, str] = {}         # uniqueKey -> id of its unfinished job
        self.paused = False
        self.rate_limit: float | None = None
        self.concurrency: int | None = None
        self.pulls: deque[float] = deque()       # pull times inside the rate window

    def config(self) -> Record:
        return {"paused": self.paused, "rateLimit": self.rate_limit,
                "concurrency": self.concurrency}

    def has_config(self) -> bool:
        return self.paused or self.rate_limit is not None or self.concurrency is not None


@dataclass(slots=True)
class _Cron:
    name: str
    queue: str
    data: Any
    schedule: str | None
    repeat_every: int | None
    priority: int
    max_limit: int | None
    timezone: str | None
    job_name: str
    next_run: float
    executions: int = 0
    generation: int = 0  # volatile: stale heap entries compare it

    def to_record(self) -> Record:
        return {"name": self.name, "queue": self.queue, "data": self.data,
                "schedule": self.schedule, "repeatEvery": self.repeat_every,
                "priority": self.priority, "maxLimit": self.max_limit,
                "timezone": self.timezone, "jobName": self.job_name,
                "nextRun": self.next_run, "executions": self.executions}

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> _Cron:
        return cls(name=r["name"], queue=r["queue"], data=r.get("data"),
                   schedule=r.get("schedule"), repeat_every=r.get("repeatEvery"),
                   priority=r.get("priority", 0), max_limit=r.get("maxLimit"),
                   timezone=r.get("timezone"), job_name=r.get("jobName", DEFAULT_JOB_NAME),
                   next_run=r["nextRun"], executions=r.get("executions", 0))

    def at_limit(self) -> bool:
        return self.max_limit is not None and self.executions >= self.max_limit

    def wire(self) -> dict[str, Any]:
        out = {"name": self.name, "queue": self.queue, "schedule": self.schedule,
               "repeatEvery": self.repeat_every, "nextRun": self.next_run,
               "executions": self.executions, "priority": self.priority,
               "jobName": self.job_name}
        if self.max_limit is not None:
            out["maxLimit"] = self.max_limit
        if self.timezone is not None:
            out["timezone"] = self.timezone
        return out


@dataclass(slots=True)
class _Worker:
    id: str
    name: str
    queues: list
    registered_at: float
    last_seen: float
    concurrency: int = 1
    hostname: str = "unknown"
    pid: int = 0
    processed: int = 0
    failed: int = 0
    conn_id: str | None = None


class _Meter:
    """Events per second over the last ``window`` whole seconds, in per-second buckets."""

    __slots__ = ("window", "buckets")

    def __init__(self, window: int):
        self.window = window
        self.buckets: deque[list] = deque()

    def add(self, now_ms: float, n: int = 1) -> None:
        sec = int(now_ms // 1000)
        if self.buckets and self.buckets[-1][0] == sec:
            self.buckets[-1][1] += n
        else:
            self.buckets.append([sec, n])
        self._trim(sec)

    def rate(self, now_ms: float) -> float:
        sec = int(now_ms // 1000)
        self._trim(sec)
        return sum(n for s, n in self.buckets if s < sec) / self.window

    def _trim(self, sec: int) -> None:
        while self.buckets and self.buckets[0][0] < sec - self.window:
            self.buckets.popleft()


class _Refused(Exception):
    """A command refused with one of the spec's errors (raised inside handlers only)."""

    def __init__(self, name: str, **fields: Any):
        super().__init__(name)
        self.name, self.fields = name, fields


# =============================================================================================
# The engine
# =============================================================================================
class BunqueueEngine:
    """One bunqueue server's state and every command of its profile (see the module doc)."""

    def __init__(self, profile: Profile | str = DEFAULT_PROFILE, *,
                 now_ms: Callable[[], float] | None = None,
                 notify: Callable[[Event], None] | None = None,
                 config: EngineConfig | None = None,
                 store: Store | None = None):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        spec = self.spec = self.profile.model
        self.config = cfg = config or EngineConfig()
        self._clock = now_ms or (lambda: time.time() * 1000.0)
        self.notify = notify  # the shell may also set it after construction
        self.store: Store = store if store is not None else MemoryStore()
        # a store may declare it keeps no job records (NullStore): then none are built
        self._keeps_jobs = bool(getattr(self.store, "keeps_jobs", True))

        # everything read from the spec
        self.states = tuple(spec.job_states)
        missing = {WAITING, DELAYED, ACTIVE, COMPLETED, FAILED} - set(self.states)
        if missing:
            raise ValueError(f"{self.profile.name}: job_states lacks {sorted(missing)}")
        self._lifecycle = {(t.source, t.event): t.target for t in spec.job_lifecycle.transitions}
        events = {t.event for t in spec.job_lifecycle.transitions}
        unknown = [e for e in LIFECYCLE_EVENTS if e not in events]
        if unknown:
            raise ValueError(f"{self.profile.name}: job_lifecycle has no row for {unknown}")
        self._initial = frozenset(spec.job_lifecycle.initial)
        self._messages = {name: e.message for name, e in spec.errors.items()}
        self._webhook_events = self.profile.model.webhook_events
        d = spec.defaults
        self.stall_interval = cfg.stall_interval_ms if cfg.stall_interval_ms is not None \
            else d["stallInterval"]
        self.max_stalls = cfg.max_stalls if cfg.max_stalls is not None else d["maxStalls"]
        self.lock_ttl = cfg.lock_ttl_ms if cfg.lock_ttl_ms is not None else d["lockTtl"]
        self.wait_job_timeout = cfg.wait_job_timeout_ms \
            if cfg.wait_job_timeout_ms is not None else d["waitJobTimeout"]
        self.worker_timeout = cfg.worker_timeout_ms if cfg.worker_timeout_ms is not None \
            else d["workerTimeout"]
        self._defaults = {name: _request_defaults(c.request) for name, c in spec.commands.items()}
        self._job_defaults = dict(self._defaults["PUSH"])
        self._pushb_defaults = _request_defaults(
            spec.commands["PUSHB"].request["properties"]["jobs"]["items"])
        self._push_plain = self._plain_defaults(self._job_defaults)
        self._pushb_plain = self._plain_defaults(self._pushb_defaults)
        self._delay_max = self.profile.limit("delay").max
        self._hello_server = spec.commands["Hello"].response["properties"]["server"]["const"]
        semantics = self.profile.tree.get("semantics") or {}
        # BQ-NAME-102 (bunqueue/2.9.5): a name inside data is split out; absent, no such rule
        self._legacy_data_name = bool((semantics.get("legacy_data_name") or {}).get("value"))
        name_limit = self.profile.limits.get("job_name_length")
        self._job_name_max = name_limit.max if name_limit is not None else None
        self._job_name_min = name_limit.min if name_limit is not None else None
        # BQ-EVENT-102 (bunqueue/2.9.5): the pushed event frame and the fields of each type
        job_events = self.profile.tree.get("job_events") or {}
        self._event_frame_type = ((job_events.get("frame") or {}).get("properties") or {}) \
            .get("type", {}).get("const")
        self._event_fields = {name: tuple(t.get("fields") or ())
                              for name, t in (job_events.get("types") or {}).items()}
        # publish(conn_ids, frame): the shell's hook that writes a pushed event frame (a map
        # without reqId) to those connections; set by the shell, may be None
        self.publish: Callable[[tuple[str, ...], dict], None] | None = None

        self._handlers: dict[str, Callable[[str | None, dict, float], dict | Wait]] = {}
        for name in spec.commands:
            handler = getattr(self, f"_cmd_{name}", None)
            if handler is None:
                raise ValueError(f"{self.profile.name}: no handler for command {name}")
            self._handlers[name] = handler

        # state
        self._jobs: dict[str, Job] = {}
        self._queues: dict[str, _Queue] = {}
        self._seq = itertools.count(1)
        self._tie = itertools.count()            # heap tie-breaker
        self._delayed: list[tuple[float, int, str]] = []          # (runAt, seq, id)
        self._timers: list[tuple[float, int, str, str, int]] = []  # (when, tie, kind, id, act)
        self._ttls: list[tuple[float, int, str]] = []             # (expiry, seq, id)
        self._cron_heap: list[tuple[float, int, str]] = []        # (nextRun, generation, name)
        self._crons: dict[str, _Cron] = {}
        self._cron_gen = itertools.count(1)
        self._dependents: dict[str, set[str]] = {}
        self._finished: OrderedDict[str, Any] = OrderedDict()     # removed completed: result
        self._logs: dict[str, list[Record]] = {}
        self._conn_jobs: dict[str, set[str]] = {}
        self._connections: set[str] = set()
        self._workers: dict[str, _Worker] = {}
        self._owner_active: Counter = Counter()
        self._webhooks: dict[str, Record] = {}
        self._deliveries: deque[WebhookDelivery] = deque(maxlen=WEBHOOK_BACKLOG_MAX)
        self._rate_blocked: set[str] = set()
        self._events: deque[Event] = deque()
        self._outbox: deque[tuple[tuple[str, ...], dict]] = deque()  # event frames to publish
        self._subscribers: dict[str, set[str]] = {}   # queue -> connections subscribed to it
        self._subscription: dict[str, str] = {}       # connection -> the queue it subscribed to
        self._collected: list[Event] | None = None
        self._depth = 0
        self._flushing = False

        # counters (since start)
        self.started_at = float(self._clock())
        self.total_pushed = self.total_pulled = self.total_completed = self.total_failed = 0
        self._latency_sum = self._processing_sum = 0.0
        self._push_meter = _Meter(THROUGHPUT_WINDOW_S)
        self._pull_meter = _Meter(THROUGHPUT_WINDOW_S)

        self._recover()

    # =========================================================================================
    # Shell interface
    # =========================================================================================
    def handle(self, conn_id: str | None, request: Mapping[str, Any]) -> dict | Wait:
        """Execute one validated request; answer its reply fields and ``ok``, or a Wait."""
        self._depth += 1  # what _operation() does, without building one per request
        try:
            cmd = request.get("cmd")
            handler = self._handlers.get(cmd) if type(cmd) is str else None
            if handler is None:
                return self._error("unknown_command", cmd=cmd)
            if conn_id is not None:
                self._connections.add(conn_id)
            return self._run(handler, conn_id, _strip_undefined(dict(request)))
        finally:
            self._depth -= 1
            if self._depth == 0 and (self._events or self._outbox):
                self._flush()

    def retry(self, conn_id: str | None, wait: Wait) -> dict | Wait:
        """Try a parked long poll again (after an event it ``wakes_on``)."""
        with self._operation():
            now = self._now()
            if now >= wait.deadline_ms:
                return self._expire(wait, now)
            reply = self._run(self._handlers[wait.request["cmd"]], conn_id, wait.request,
                              deadline=wait.deadline_ms)
            return wait if isinstance(reply, Wait) else reply

    def expire(self, wait: Wait) -> dict:
        """The reply to a long poll whose deadline has passed (a last attempt included)."""
        with self._operation():
            return self._expire(wait, self._now())

    def tick(self) -> list[Event]:
        """Do the time-driven work due at ``now_ms()``; answer the events it caused."""
        self._collected = collected = []
        try:
            with self._operation():
                try:
                    self._tick(self._now())
                except Exception:  # noqa: BLE001 - never let the shell's timer die
                    log.exception("bunqueue engine: tick failed")
        finally:
            self._collected = None
        return collected

    def next_deadline(self) -> float | None:
        """When ``tick`` next has work (ms since epoch), or None; may be early, never late."""
        tops = [h[0][0] for h in (self._delayed, self._timers, self._ttls, self._cron_heap) if h]
        for name in self._rate_blocked:
            q = self._queues.get(name)
            if q is not None and q.pulls:
                tops.append(q.pulls[0] + self._rate_shape(q.rate_limit)[1])
        return min(tops) if tops else None

    def connection_opened(self, conn_id: str) -> None:
        self._connections.add(conn_id)

    def connection_closed(self, conn_id: str) -> list[str]:
        """Return the connection's active jobs to waiting (BQ-CONN-1, BQ-CONN-2) and drop the
        workers it registered; answers the ids of the jobs released."""
        with self._operation():
            self._connections.discard(conn_id)
            self._unsubscribe(conn_id)
            released = []
            for job_id in sorted(self._conn_jobs.pop(conn_id, ()),
                                 key=lambda j: self._jobs[j].seq if j in self._jobs else 0):
                job = self._jobs.get(job_id)
                if job is not None and job.state == ACTIVE and job.conn_id == conn_id:
                    self._move(job, EV_CONN_CLOSED, self._now())
                    released.append(job_id)
            for wid in [w.id for w in self._workers.values() if w.conn_id == conn_id]:
                del self._workers[wid]
            return released

    def webhook_deliveries(self) -> list[WebhookDelivery]:
        """Drain the POSTs the shell should make, oldest first."""
        out = list(self._deliveries)
        self._deliveries.clear()
        return out

    def webhook_result(self, webhook_id: str, ok: bool) -> None:
        """Record a delivery's outcome (ListWebhooks successCount, failureCount, lastTriggered)."""
        hook = self._webhooks.get(webhook_id)
        if hook is None:
            return
        hook["lastTriggered"] = self._now()
        hook["successCount" if ok else "failureCount"] += 1
        self.store.put_webhook(dict(hook))

    def webhook_address_error(self, address: str) -> str | None:
        """The error message for a resolved webhook address the shell must not call, or
        None (BQ-WEBHOOK-1 at delivery time, against DNS rebinding)."""
        if self.config.allow_private_webhooks:
            return None
        name = webhook_host_error(address)
        return self._messages[name] if name else None

    def error_message(self, name: str, **fields: Any) -> str:
        """An ``errors`` message of the profile with its placeholders filled."""
        return self._messages[name].format(**fields)

    # -- plumbing ---------------------------------------------------------------------------
    def _now(self) -> float:
        return float(self._clock())

    def _operation(self) -> _Operation:
        return _Operation(self)

    def _run(self, handler: Callable, conn_id: str | None, req: dict,
             deadline: float | None = None) -> dict | Wait:
        try:
            now = float(self._clock())  # _now()
            delayed = self._delayed
            if delayed and delayed[0][0] <= now:
                self._promote_due(now)
            if deadline is None:
                return handler(conn_id, req, now)
            return handler(conn_id, req, now, deadline=deadline)
        except _Refused as refused:
            return self._error(refused.name, **refused.fields)
        except Exception:  # noqa: BLE001 - a bug or a store failure is an error reply, not a crash
            log.exception("bunqueue engine: %s failed", req.get("cmd"))
            return self._error("internal_error")

    def _error(self, name: str, **fields: Any) -> dict:
        return {"ok": False, "error": self._messages[name].format(**fields)}

    def _emit(self, queue: str | None, job_id: str | None, reason: str) -> None:
        self._events.append(Event(queue, job_id, reason))

    def _flush(self) -> None:
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._outbox:
                conn_ids, frame = self._outbox.popleft()
                if self.publish is not None:
                    try:
                        self.publish(conn_ids, frame)
                    except Exception:  # noqa: BLE001 - the shell's callback must not break us
                        log.exception("bunqueue engine: publish failed")
            events = self._events
            while events:  # taken a batch at a time; notify may add more (through retry)
                batch = list(events)
                events.clear()
                if self._collected is not None:
                    self._collected.extend(batch)
                notify = self.notify
                if notify is not None:
                    for event in batch:
                        try:
                            notify(event)
                        except Exception:  # noqa: BLE001 - the shell's callback must not break us
                            log.exception("bunqueue engine: notify failed")
        finally:
            self._flushing = False

    # =========================================================================================
    # State changes (the only code that changes a job's state)
    # =========================================================================================
    def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = _Queue(name, self.states)
        return q

    @staticmethod
    def _wkey(job: Job) -> tuple:
        return (-job.priority, -job.seq if job.lifo else job.seq, job.id)

    def _allows(self, job: Job, event: str) -> bool:
        return (job.state, event) in self._lifecycle

    def _move(self, job: Job, event: str, now: float, *, save: bool = True,
              **timeline: Any) -> None:
        """Move ``job`` along the job_lifecycle row (its state, ``event``)."""
        target = self._lifecycle[(job.state, event)]
        self._leave(job, now)
        job.state = target
        self._enter(job, now, **timeline)
        if save:
            self._save(job)

    def _leave(self, job: Job, now: float) -> None:
        q = self._queues[job.queue]
        state = job.state
        q.members[state].pop(job.id, None)
        if state == WAITING and job.pending_deps == 0:
            q.waiting.discard(self._wkey(job))
        if state in (WAITING, DELAYED):
            self._count_priority(q, job.priority, -1)
        elif state == ACTIVE:
            self._release_active(job)

    def _enter(self, job: Job, now: float, **timeline: Any) -> None:
        q = self._queues[job.queue]
        state = job.state
        q.members[state][job.id] = None
        self._timeline(job, state, now, **timeline)
        if state in (WAITING, DELAYED):
            self._count_priority(q, job.priority, +1)
            if job.unique_key is not None:
                q.unique.setdefault(job.unique_key, job.id)
        if state == WAITING:
            job.started_at = None
            if job.pending_deps == 0:
                q.waiting.add(self._wkey(job))
                self._emit(job.queue, job.id, "waiting")
        elif state == DELAYED:
            job.started_at = None
            heapq.heappush(self._delayed, (job.run_at, job.seq, job.id))
        elif state in (COMPLETED, FAILED):
            job.finished_at = now
            if job.unique_key is not None and q.unique.get(job.unique_key) == job.id:
                del q.unique[job.unique_key]

    def _release_active(self, job: Job) -> None:
        if job.lock_owner is not None:
            self._owner_active[job.lock_owner] -= 1
            if self._owner_active[job.lock_owner] <= 0:
                del self._owner_active[job.lock_owner]
        job.lock_token = job.lock_owner = job.lock_expires = job.lock_ttl = None
        if job.conn_id is not None:
            jobs = self._conn_jobs.get(job.conn_id)
            if jobs is not None:
                jobs.discard(job.id)
            job.conn_id = None
        job.activation += 1  # its lock, stall and timeout timers are now stale
        self._emit(job.queue, job.id, "left active")

    @staticmethod
    def _count_priority(q: _Queue, priority: int, delta: int) -> None:
        n = q.priorities[priority] + delta
        if n > 0:
            q.priorities[priority] = n
        else:
            del q.priorities[priority]

    def _timeline(self, job: Job, state: str, now: float, **extra: Any) -> None:
        entry = {"state": state, "timestamp": now}
        if extra:
            entry.update({k: v for k, v in extra.items() if v is not None})
        timeline = job.timeline
        if type(timeline) is not list:  # the tuple a batch's jobs share (_create_plain)
            timeline = job.timeline = list(timeline)
        timeline.append(entry)
        if len(timeline) > TIMELINE_MAX:
            del timeline[0]

    def _save(self, job: Job, durable: bool = False) -> None:
        if self._keeps_jobs and job.id in self._jobs:
            self.store.put_job(job.to_record(), durable=durable)

    def _remove(self, job: Job, now: float, *, remember: bool = True) -> None:
        """Delete a job in any state, with everything that refers to it. A completed job's
        result is remembered (GetResult, WaitJob, dependencies) unless ``remember`` is off."""
        q = self._queues[job.queue]
        if remember and job.state == COMPLETED:
            self._remember_result(job)
        self._leave(job, now)
        q.all.pop(job.id, None)
        if job.unique_key is not None and q.unique.get(job.unique_key) == job.id:
            del q.unique[job.unique_key]
        for dep in job.depends_on:
            waiters = self._dependents.get(dep)
            if waiters is not None:
                waiters.discard(job.id)
                if not waiters:
                    del self._dependents[dep]
        del self._jobs[job.id]
        self.store.delete_job(job.id)
        if self._logs.pop(job.id, None) is not None:
            self.store.delete_logs(job.id)

    def _remember_result(self, job: Job) -> None:
        self._finished[job.id] = job.returnvalue
        self._finished.move_to_end(job.id)
        while len(self._finished) > self.config.result_cache_size:
            self._finished.popitem(last=False)

    # =========================================================================================
    # Job creation (PUSH, PUSHB, cron, repeat)
    # =========================================================================================
    def _check_push(self, queue: str, opts: Mapping[str, Any], custom_key: str,
                    batch: set[str] | None = None) -> str | None:
        """The id a push would answer without adding a job (idempotent custom id or a held
        uniqueKey), or None; raises _Refused for an unknown dependency."""
        custom = opts.get(custom_key)
        if isinstance(custom, str) and custom \
                and (custom in self._jobs or (batch and custom in batch)):
            return custom  # BQ-CUSTOMID-1: the job's id is its custom id
        q = self._queues.get(queue)
        key = opts.get("uniqueKey")
        if q is not None and isinstance(key, str) and key in q.unique:
            return q.unique[key]  # BQ-DEDUP-1, BQ-DEDUP-2
        for dep in opts.get("dependsOn") or ():
            if dep not in self._jobs and dep not in self._finished \
                    and not (batch and dep in batch):
                raise _Refused("dependency_not_found", id=dep)  # BQ-DEPS-4
        return None

    def _create(self, queue: str, opts: Mapping[str, Any], now: float, *,
                custom_key: str = "jobId", defaults: Mapping[str, Any] | None = None) -> Job:
        d = defaults or self._job_defaults
        get = opts.get
        delay = get("delay")
        delay = max(0, _int(delay, d.get("delay", 0))) if delay is not None \
            else d.get("delay", 0)
        custom = get(custom_key)
        custom = custom if isinstance(custom, str) and custom else None
        name, data = self._name_and_data(opts)
        priority = get("priority")
        max_attempts, backoff = get("maxAttempts"), get("backoff")
        job = Job(
            id=custom if custom is not None else uuid7(now),
            queue=queue,
            name=name,
            data=data,
            seq=next(self._seq),
            state=DELAYED if delay > 0 else WAITING,
            created_at=now,
            run_at=now + delay,
            priority=_int(priority, d.get("priority", 0)) if priority is not None
            else d.get("priority", 0),
            max_attempts=max(1, _int(max_attempts, d.get("maxAttempts")))
            if max_attempts is not None else max(1, d.get("maxAttempts")),
            backoff=_int(backoff, d.get("backoff")) if backoff is not None
            else d.get("backoff"),
            custom_id=custom,
            last_heartbeat=now,
        )
        if not opts.keys() <= _PLAIN_PUSH_KEYS:  # the options most pushes do not carry
            repeat = get("repeat")
            job.lifo = bool(get("lifo", d.get("lifo", False)))
            job.ttl = _int(opts["ttl"]) if get("ttl") is not None else None
            job.timeout = _int(opts["timeout"]) if get("timeout") is not None else None
            job.unique_key = get("uniqueKey") if isinstance(get("uniqueKey"), str) else None
            job.depends_on = [x for x in get("dependsOn") or () if isinstance(x, str)]
            job.tags = [t for t in get("tags") or () if isinstance(t, str)]
            job.group_id = get("groupId") if isinstance(get("groupId"), str) else None
            job.remove_on_complete = bool(get("removeOnComplete",
                                              d.get("removeOnComplete", False)))
            job.remove_on_fail = bool(get("removeOnFail", d.get("removeOnFail", False)))
            job.durable = bool(get("durable", d.get("durable", False)))
            job.repeat = _repeat(repeat) if isinstance(repeat, dict) else None
        else:
            job.lifo = bool(d.get("lifo", False))
            job.remove_on_complete = bool(d.get("removeOnComplete", False))
            job.remove_on_fail = bool(d.get("removeOnFail", False))
            job.durable = bool(d.get("durable", False))
        assert job.state in self._initial
        if job.depends_on:
            job.pending_deps = sum(1 for dep in job.depends_on if not self._is_completed(dep))
        if job.durable and self._keeps_jobs:  # BQ-PUSH-8: on disk before anything changes
            self.store.put_job(job.to_record(), durable=True)
        q = self._queue(queue)
        self._jobs[job.id] = job
        q.all[job.id] = None
        if job.pending_deps:
            for dep in job.depends_on:
                if not self._is_completed(dep):
                    self._dependents.setdefault(dep, set()).add(job.id)
        self._enter(job, now)
        self._save(job)  # (after a durable write too: it adds the timeline's first entry)
        if job.ttl is not None:
            heapq.heappush(self._ttls, (job.created_at + job.ttl, job.seq, job.id))
        self.total_pushed += 1
        self._push_meter.add(now)
        self._webhook("job.pushed", job, now)
        self._job_event("pushed", job, now)
        return job

    def _plain_defaults(self, d: Mapping[str, Any]) -> tuple | None:
        """What ``_create`` gives a push that sets nothing but name and data, under the
        defaults ``d``: (priority, maxAttempts, backoff, lifo, removeOnComplete,
        removeOnFail); None where such a push is not a plain waiting job (a default delay or
        durability, or waiting not an initial state), so that ``_create_plain`` is not used."""
        if d.get("delay", 0) > 0 or bool(d.get("durable", False)) or WAITING not in self._initial:
            return None
        return (d.get("priority", 0), max(1, d.get("maxAttempts")), d.get("backoff"),
                bool(d.get("lifo", False)), bool(d.get("removeOnComplete", False)),
                bool(d.get("removeOnFail", False)))

    def _create_plain(self, queue: str, entries: Sequence[Mapping[str, Any]], now: float,
                      plain: tuple) -> list[str]:
        """``_create`` for pushes that set only a non-empty name and data (a bare PUSH, or
        each entry of a bare PUSHB), all at once: the same jobs, ids, events, webhooks, job
        events and records as one ``_create`` per entry, built in one loop, with the queue's
        sorted waiting list, priority count and push meter updated once for the batch."""
        priority, max_attempts, backoff, lifo, roc, rof = plain
        n = len(entries)
        ids = uuid7_batch(now, n) if n > 1 else [uuid7(now)]
        q = self._queue(queue)
        jobs_, all_, members = self._jobs, q.all, q.members[WAITING]
        seq = self._seq
        add_event = self._events.append
        keys = []
        add_key = keys.append
        new_event = tuple.__new__
        order = -1 if lifo else 1
        rank = -priority
        # Fewer objects for the collector to track (it walked every live job's): the jobs of
        # one batch share one timeline, a tuple of its first entry, until _timeline gives a
        # job its own list at its next state change (entries are never changed once
        # appended); depends_on and tags are replaced, never appended to, so jobs without
        # any share one empty tuple
        first = ({"state": WAITING, "timestamp": now},)
        created = []
        plain_job = _plain_job
        for entry, job_id in zip(entries, ids):
            s = next(seq)
            job = plain_job(job_id, queue, entry["name"], entry.get("data"), s, now, priority,
                            max_attempts, backoff, lifo, roc, rof, first, _NONE)
            jobs_[job_id] = job
            all_[job_id] = None
            members[job_id] = None
            add_key((rank, order * s, job_id))  # _wkey(job)
            add_event(new_event(Event, (queue, job_id, "waiting")))
            created.append(job)
        if n == 1:
            q.waiting.add(keys[0])
        else:
            q.waiting.add_run(keys)
        q.priorities[priority] += n
        self.total_pushed += n
        self._push_meter.add(now, n)
        if self._keeps_jobs:
            for job in created:
                self.store.put_job(job.to_record(), durable=False)
        if self._webhooks or self._subscribers.get(queue):
            for job in created:
                self._webhook("job.pushed", job, now)
                self._job_event("pushed", job, now)
        return ids

    def _name_and_data(self, opts: Mapping[str, Any]) -> tuple[str, Any]:
        """The job's name and data: a top-level name (BQ-NAME-101), else, where the profile
        says so, the legacy envelope's data.name split from the rest (BQ-NAME-102), else
        the default name."""
        name, data = opts.get("name"), opts.get("data")
        if isinstance(name, str) and name:
            return name, data
        if self._legacy_data_name and "name" not in opts and type(data) is dict \
                and isinstance(data.get("name"), str):
            data = dict(data)
            return data.pop("name"), data
        return DEFAULT_JOB_NAME, data

    def _check_name(self, opts: Mapping[str, Any]) -> None:
        """BQ-NAME-102: a legacy envelope's name obeys job_name_length, as a top-level one
        does by the schema; raises _Refused otherwise."""
        if not self._legacy_data_name or "name" in opts:
            return
        data = opts.get("data")
        if type(data) is dict and isinstance(data.get("name"), str):
            n = len(data["name"])
            if (self._job_name_min is not None and n < self._job_name_min) \
                    or (self._job_name_max is not None and n > self._job_name_max):
                raise _Refused("job_name_invalid")

    def _is_completed(self, job_id: str) -> bool:
        job = self._jobs.get(job_id)
        return job.state == COMPLETED if job is not None else job_id in self._finished

    # =========================================================================================
    # Pulling
    # =========================================================================================
    @staticmethod
    def _rate_shape(limit: float | None) -> tuple[int, float]:
        """(jobs, window ms) a RateLimit of ``limit`` jobs per second allows: floor(limit) per
        second, or one per 1/limit seconds below 1 (BQ-RATE-2 never exceeded); 0 for <= 0."""
        if limit is None:
            return (UNLIMITED, RATE_WINDOW_MS)
        if limit <= 0:
            return (0, RATE_WINDOW_MS)
        if limit >= 1:
            return (int(limit), RATE_WINDOW_MS)
        return (1, RATE_WINDOW_MS / limit)

    def _budget(self, q: _Queue, now: float) -> int:
        """How many jobs ``q`` may hand out now (pause, concurrency, rate limit)."""
        if q.paused:  # BQ-QUEUE-1
            return 0
        budget = UNLIMITED
        if q.concurrency is not None:  # BQ-CONC-1
            budget = max(0, q.concurrency - len(q.members[ACTIVE]))
        if q.rate_limit is not None:  # BQ-RATE-2
            cap, window = self._rate_shape(q.rate_limit)
            while q.pulls and q.pulls[0] <= now - window:
                q.pulls.popleft()
            room = max(0, cap - len(q.pulls))
            if room == 0 and q.waiting:  # tick() announces when the window reopens
                self._rate_blocked.add(q.name)
            budget = min(budget, room)
        return budget

    def _take(self, queue: str, count: int, now: float, conn_id: str | None,
              owner: str | None, lock_ttl: float) -> list[Job]:
        q = self._queues.get(queue)
        if q is None or not q.waiting:
            return []
        budget = min(count, self._budget(q, now))
        taken: list[Job] = []
        while len(taken) < budget and q.waiting:
            job = self._jobs[q.waiting[0][2]]
            if job.ttl is not None and now >= job.created_at + job.ttl:  # BQ-PUSH-4
                self._remove(job, now)
                continue
            self._move(job, EV_PULL, now, save=False, worker=owner)
            job.started_at = job.last_heartbeat = now
            job.activation += 1
            if owner:  # BQ-LOCK-1
                job.lock_owner, job.lock_ttl = owner, lock_ttl
                job.lock_token = uuid7(now)
                job.lock_expires = now + lock_ttl
                self._owner_active[owner] += 1
                self._timer(job.lock_expires, "lock", job)
            self._timer(now + self.stall_interval, "stall", job)  # BQ-STALL-1
            if job.timeout is not None:  # BQ-PUSH-5
                self._timer(now + job.timeout, "timeout", job)
            if conn_id is not None:
                job.conn_id = conn_id
                self._conn_jobs.setdefault(conn_id, set()).add(job.id)
            if q.rate_limit is not None:
                q.pulls.append(now)
            self._save(job)
            self.total_pulled += 1
            self._latency_sum += max(0.0, now - job.run_at)
            self._pull_meter.add(now)
            self._webhook("job.started", job, now)
            self._job_event("pulled", job, now)
            taken.append(job)
        return taken

    def _timer(self, when: float, kind: str, job: Job) -> None:
        heapq.heappush(self._timers, (when, next(self._tie), kind, job.id, job.activation))

    def _pull(self, conn_id: str | None, req: Mapping[str, Any], now: float, count: int,
              batch: bool, deadline: float | None) -> dict | Wait:
        defaults = self._defaults[req["cmd"]]
        owner = req.get("owner") if isinstance(req.get("owner"), str) else None
        lock_ttl = float(_int(req.get("lockTtl"), self.lock_ttl))
        jobs = self._take(req["queue"], count, now, conn_id, owner or None, lock_ttl)
        if not jobs:
            timeout = _int(req.get("timeout"), defaults.get("timeout", 0))
            if deadline is None and timeout > 0:
                deadline = now + timeout
            if deadline is not None and now < deadline:  # BQ-PULL-1: long poll
                return Wait("queue", req["queue"], deadline, req, conn_id)
        return self._pull_reply(jobs, bool(owner), batch)

    @staticmethod
    def _pull_reply(jobs: list[Job], with_tokens: bool, batch: bool) -> dict:
        if batch:
            out = {"ok": True, "jobs": [job_to_wire(j) for j in jobs]}
            if with_tokens:
                out["tokens"] = [j.lock_token for j in jobs]  # BQ-LOCK-4
            return out
        job = jobs[0] if jobs else None
        out = {"ok": True, "job": job_to_wire(job) if job else None}
        if with_tokens:
            out["token"] = job.lock_token if job else None
        return out

    def _expire(self, wait: Wait, now: float) -> dict:
        req = wait.request
        if wait.kind == "job":
            reply = self._wait_job_now(req["id"], now, final=True)
            return reply if isinstance(reply, dict) else {"ok": True, "completed": False}
        batch = req["cmd"] == "PULLB"
        count = _int(req.get("count"), 1) if batch else 1
        reply = self._pull(wait.conn_id, req, now, count, batch, deadline=now)
        return reply if isinstance(reply, dict) else self._pull_reply([], bool(req.get("owner")),
                                                                      batch)

    # =========================================================================================
    # Finishing a job: ACK, FAIL, stall, timeout
    # =========================================================================================
    def _active(self, job_id: Any) -> Job:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None or job.state != ACTIVE:
            raise _Refused("job_not_processing", id=job_id)  # BQ-JOB-12
        return job

    def _check_lock(self, job: Job, token: Any, now: float) -> None:
        """BQ-LOCK-2: a locked job is finished only with its current, unexpired token."""
        if job.lock_token is None:
            return
        if not isinstance(token, str):
            raise _Refused("lock_token_required", id=job.id)
        if not hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                   job.lock_token.encode()) \
                or (job.lock_expires is not None and now >= job.lock_expires):
            raise _Refused("lock_token_invalid", id=job.id)

    def _complete(self, job: Job, result: Any, now: float) -> None:
        owner = job.lock_owner
        job.has_result, job.returnvalue = True, result  # BQ-JOB-10
        job.completed_at = now
        self._move(job, EV_ACK, now)
        self.total_completed += 1
        if job.started_at is not None:
            self._processing_sum += now - job.started_at
        worker = self._workers.get(owner) if owner else None
        if worker is not None:
            worker.processed += 1
        self._emit(job.queue, job.id, "completed")
        self._webhook("job.completed", job, now, data=result)
        self._job_event("completed", job, now, data=result)
        for dependent_id in sorted(self._dependents.pop(job.id, ()),
                                   key=lambda j: self._jobs[j].seq if j in self._jobs else 0):
            self._dependency_done(dependent_id)
        if job.repeat is not None:
            self._repeat(job, now)
        if job.remove_on_complete:  # BQ-PUSH-6
            self._remove(job, now)

    def _dependency_done(self, job_id: str) -> None:
        job = self._jobs.get(job_id)
        if job is None or job.pending_deps == 0:
            return
        job.pending_deps -= 1
        if job.pending_deps == 0 and job.state == WAITING:  # BQ-DEPS-1: now pullable
            self._queues[job.queue].waiting.add(self._wkey(job))
            self._emit(job.queue, job.id, "waiting")

    def _repeat(self, job: Job, now: float) -> None:
        """BQ-PUSH-9: the next repetition, every ``every`` ms from the previous, while count
        is below limit (bunqueue's rule: a job with count c repeats if c < limit)."""
        rep = job.repeat or {}
        every = rep.get("every")
        if not isinstance(every, (int, float)) or every <= 0:
            return
        count = _int(rep.get("count"), 0)
        limit = rep.get("limit")
        if limit is not None and count >= limit:
            return
        nxt = rep.get("prevMillis", job.run_at) + every
        if nxt <= now:
            nxt += math.ceil((now + 1 - nxt) / every) * every
        successor = dict(rep, count=count + 1, prevMillis=nxt)
        opts = {"data": job.data, "name": job.name, "priority": job.priority,
                "delay": max(0, int(math.ceil(nxt - now))), "maxAttempts": job.max_attempts,
                "backoff": job.backoff, "ttl": job.ttl, "timeout": job.timeout,
                "uniqueKey": job.unique_key, "tags": list(job.tags), "groupId": job.group_id,
                "lifo": job.lifo, "removeOnComplete": job.remove_on_complete,
                "removeOnFail": job.remove_on_fail, "durable": job.durable,
                "repeat": successor}
        self._create(job.queue, opts, now)

    def _fail(self, job: Job, error: str | None, now: float, *, final: bool = False,
              stack: Any = None) -> None:
        """FAIL semantics (BQ-JOB-5): retry after backoff while attempts remain, else DLQ."""
        owner = job.lock_owner
        job.attempts += 1
        job.failed_reason = error if error is not None else job.failed_reason
        if isinstance(stack, list):
            job.stacktrace = [s for s in stack if isinstance(s, str)][:STACKTRACE_LINES] or None
        worker = self._workers.get(owner) if owner else None
        if worker is not None:
            worker.failed += 1
        self._webhook("job.failed", job, now, error=error)
        retry = not final and job.attempts < job.max_attempts
        self._job_event("failed", job, now, error=error, data=job.data, terminal=not retry)
        if retry:
            job.run_at = now + self._backoff(job)
            self._move(job, EV_FAIL_RETRY, now, error=error, attempt=job.attempts)
            self._job_event("retried", job, now, prev=FAILED)
            self._settle_delayed(job, now)
            return
        self._move(job, EV_FAIL_FINAL, now, error=error, attempt=job.attempts)
        self.total_failed += 1  # Metrics totalFailed counts jobs that failed for good
        if job.remove_on_fail:  # BQ-PUSH-7
            self._remove(job, now)

    def _backoff(self, job: Job) -> float:
        """BQ-JOB-14: backoff * 2^(attempts - 1), capped at the delay limit."""
        if job.backoff <= 0:
            return 0.0
        return float(min(job.backoff * 2 ** max(0, job.attempts - 1), self._delay_max))

    def _settle_delayed(self, job: Job, now: float) -> None:
        """A delayed job whose time has already come is waiting at once (delay 0)."""
        if job.state == DELAYED and job.run_at <= now:
            self._move(job, EV_DELAY_ELAPSED, now)

    def _stall(self, job: Job, now: float, lock_expired: bool) -> None:
        """BQ-STALL-1/2/4, BQ-LOCK-5: count the stall (and the attempt), requeue or DLQ."""
        job.stall_count += 1
        job.attempts += 1
        reason = f"Job stalled {job.stall_count} times" if not lock_expired \
            else f"Lock expired; job stalled {job.stall_count} times"
        self._webhook("job.failed", job, now, error=STALLED_ERROR)
        self._job_event("stalled", job, now)
        if job.stall_count >= self.max_stalls or job.attempts >= job.max_attempts:
            job.failed_reason = reason
            self.total_failed += 1
            self._move(job, EV_STALLED_FINAL, now, error=STALLED_ERROR, attempt=job.attempts)
            if job.remove_on_fail:
                self._remove(job, now)
        else:
            self._move(job, EV_STALLED, now, error=STALLED_ERROR, attempt=job.attempts)

    # =========================================================================================
    # Time
    # =========================================================================================
    def _promote_due(self, now: float) -> None:
        """Every delay that has elapsed (BQ-JOB-3, BQ-PUSH-3): delayed -> waiting."""
        heap = self._delayed
        while heap and heap[0][0] <= now:
            run_at, _, job_id = heapq.heappop(heap)
            job = self._jobs.get(job_id)
            if job is not None and job.state == DELAYED and job.run_at == run_at:
                self._move(job, EV_DELAY_ELAPSED, now)

    def _tick(self, now: float) -> None:
        self._fire_crons(now)
        self._promote_due(now)
        timers = self._timers
        while timers and timers[0][0] <= now:
            when, _, kind, job_id, activation = heapq.heappop(timers)
            job = self._jobs.get(job_id)
            if job is None or job.state != ACTIVE or job.activation != activation:
                continue
            if kind == "lock" and job.lock_expires == when:
                self._stall(job, now, lock_expired=True)
            elif kind == "stall" and job.last_heartbeat + self.stall_interval == when:
                self._stall(job, now, lock_expired=False)
            elif kind == "timeout" and job.timeout is not None \
                    and job.started_at is not None and job.started_at + job.timeout == when:
                self._fail(job, TIMEOUT_ERROR, now)
        while self._ttls and self._ttls[0][0] <= now:  # BQ-PUSH-4: expired, never delivered
            _, _, job_id = heapq.heappop(self._ttls)
            job = self._jobs.get(job_id)
            if job is not None and job.state in (WAITING, DELAYED) and job.ttl is not None \
                    and now >= job.created_at + job.ttl:
                self._remove(job, now)
        for name in list(self._rate_blocked):
            q = self._queues.get(name)
            if q is None or q.rate_limit is None:
                self._rate_blocked.discard(name)
                continue
            cap, window = self._rate_shape(q.rate_limit)
            while q.pulls and q.pulls[0] <= now - window:
                q.pulls.popleft()
            if len(q.pulls) < cap:
                self._rate_blocked.discard(name)
                if q.waiting:
                    self._emit(name, None, "rate window")

    def _fire_crons(self, now: float) -> None:
        """BQ-CRON-1/3/6: push a job for every schedule due; runs missed while the server
        was not ticking collapse into one, and the schedule continues from now."""
        heap = self._cron_heap
        while heap and heap[0][0] <= now:
            next_run, generation, name = heapq.heappop(heap)
            cron = self._crons.get(name)
            if cron is None or cron.generation != generation or cron.next_run != next_run:
                continue  # deleted, replaced, or at its limit (never pushed back)
            cron.executions += 1
            self._create(cron.queue, {"data": cron.data, "priority": cron.priority,
                                      "name": cron.job_name}, now)
            cron.next_run = self._cron_next_run(cron, now, previous=next_run)
            self.store.put_cron(cron.to_record())
            if not cron.at_limit():
                heapq.heappush(heap, (cron.next_run, cron.generation, cron.name))

    def _cron_next_run(self, cron: _Cron, now: float, previous: float | None = None) -> float:
        if cron.schedule is not None:
            return _cron_next(cron.schedule, cron.timezone, now)
        every = cron.repeat_every or 1
        if previous is None:
            return now + every
        nxt = previous + every
        if nxt <= now:
            nxt += math.ceil((now - nxt + 1) / every) * every
        return nxt

    # =========================================================================================
    # Webhooks
    # =========================================================================================
    def _webhook(self, event: str, job: Job, now: float, **extra: Any) -> None:
        if not self._webhooks:
            return
        payload = None
        for hook in self._webhooks.values():
            if not hook["enabled"] or event not in hook["events"]:
                continue
            if hook.get("queue") is not None and hook["queue"] != job.queue:
                continue
            if payload is None:
                payload = {"event": event, "timestamp": now, "jobId": job.id,
                           "queue": job.queue, **extra}
            self._deliveries.append(WebhookDelivery(hook["id"], hook["url"], event, payload,
                                                    hook.get("secret")))

    # =========================================================================================
    # Pushed job events (SubscribeEvents, where the profile defines job_events)
    # =========================================================================================
    def _job_event(self, event_type: str, job: Job, now: float, **extra: Any) -> None:
        """BQ-EVENT-102: queue one event frame for the connections subscribed to the job's
        queue, with the extra fields job_events gives this type; published when the operation
        ends."""
        subscribers = self._subscribers.get(job.queue)
        if not subscribers:
            return
        fields_ = self._event_fields.get(event_type)
        if fields_ is None:
            return
        event = {"eventType": event_type, "queue": job.queue, "jobId": job.id,
                 "timestamp": now}
        for name in fields_:
            if name in extra:
                event[name] = extra[name]
        self._outbox.append((tuple(subscribers), {"type": self._event_frame_type,
                                                  "event": event}))

    def _unsubscribe(self, conn_id: str | None) -> None:
        queue = self._subscription.pop(conn_id, None) if conn_id is not None else None
        if queue is not None:
            subscribers = self._subscribers.get(queue)
            if subscribers is not None:
                subscribers.discard(conn_id)
                if not subscribers:
                    del self._subscribers[queue]

    # =========================================================================================
    # Recovery
    # =========================================================================================
    def _recover(self) -> None:
        now = self._now()
        jobs = sorted((Job.from_record(r) for r in self.store.iter_jobs()), key=lambda j: j.seq)
        self._seq = itertools.count(max((j.seq for j in jobs), default=0) + 1)
        for job in jobs:
            self._jobs[job.id] = job
        for job in jobs:
            q = self._queue(job.queue)
            q.all[job.id] = None
            job.pending_deps = sum(1 for dep in job.depends_on if not self._is_completed(dep))
            for dep in job.depends_on:
                if not self._is_completed(dep):
                    self._dependents.setdefault(dep, set()).add(job.id)
            state = job.state
            if state == ACTIVE:  # its connection is gone (BQ-CONN-1)
                state = job.state = WAITING
                job.started_at = None
                self._timeline(job, WAITING, now)
                self.store.put_job(job.to_record())
            job.state = state
            q.members[state][job.id] = None
            if state in (WAITING, DELAYED):
                self._count_priority(q, job.priority, +1)
                if job.unique_key is not None:
                    q.unique.setdefault(job.unique_key, job.id)
            if state == WAITING and job.pending_deps == 0:
                q.waiting.add(self._wkey(job))
            elif state == DELAYED:
                heapq.heappush(self._delayed, (job.run_at, job.seq, job.id))
            if job.ttl is not None and state in (WAITING, DELAYED):
                heapq.heappush(self._ttls, (job.created_at + job.ttl, job.seq, job.id))
        for name, record in self.store.iter_queues():
            q = self._queue(name)
            q.paused = bool(record.get("paused"))
            q.rate_limit = record.get("rateLimit")
            q.concurrency = record.get("concurrency")
        for record in self.store.iter_crons():
            cron = _Cron.from_record(record)
            cron.generation = next(self._cron_gen)
            self._crons[cron.name] = cron
            if not cron.at_limit():
                heapq.heappush(self._cron_heap, (cron.next_run, cron.generation, cron.name))
        for record in self.store.iter_webhooks():
            self._webhooks[record["id"]] = dict(record)
        for job_id, entries in self.store.iter_logs():
            if job_id in self._jobs:
                self._logs[job_id] = list(entries)
        self._events.clear()

    # =========================================================================================
    # Commands: core
    # =========================================================================================
    def _cmd_PUSH(self, conn_id: str | None, req: dict, now: float) -> dict:
        plain = self._push_plain
        if plain is not None and req.keys() <= _BARE_PUSH_KEYS:
            name = req.get("name")
            if type(name) is str and name:
                return {"ok": True, "id": self._create_plain(req["queue"], (req,), now,
                                                             plain)[0]}
        self._check_name(req)
        existing = self._check_push(req["queue"], req, "jobId")
        if existing is not None:
            return {"ok": True, "id": existing}
        return {"ok": True, "id": self._create(req["queue"], req, now).id}

    def _cmd_PUSHB(self, conn_id: str | None, req: dict, now: float) -> dict:
        queue, entries = req["queue"], req["jobs"]
        plain = self._pushb_plain
        if plain is not None and entries:
            for e in entries:  # a loop, not all(): no generator to resume per entry
                if type(e) is not dict or not e.keys() <= _BARE_ENTRY_KEYS:
                    break
                name = e.get("name")
                if type(name) is not str or not name:
                    break
            else:
                return {"ok": True, "ids": self._create_plain(queue, entries, now, plain)}
        defaults = self._pushb_defaults
        seen: set[str] = set()
        answers: list[str | None] = []
        for entry in entries:  # validate the whole batch before adding any of it
            self._check_name(entry)
            answers.append(self._check_push(queue, entry, "customId", seen))
            if isinstance(entry.get("customId"), str):
                seen.add(entry["customId"])
        ids = []
        for entry, first in zip(entries, answers):
            # earlier entries of the batch may now hold the custom id or the uniqueKey
            answer = first if first is not None else self._check_push(queue, entry, "customId")
            ids.append(answer if answer is not None
                       else self._create(queue, entry, now, custom_key="customId",
                                         defaults=defaults).id)
        return {"ok": True, "ids": ids}

    def _cmd_PULL(self, conn_id: str | None, req: dict, now: float,
                  deadline: float | None = None) -> dict | Wait:
        return self._pull(conn_id, req, now, 1, False, deadline)

    def _cmd_PULLB(self, conn_id: str | None, req: dict, now: float,
                   deadline: float | None = None) -> dict | Wait:
        return self._pull(conn_id, req, now, max(0, _int(req.get("count"), 1)), True, deadline)

    def _cmd_ACK(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._active(req["id"])
        self._check_lock(job, req.get("token"), now)
        self._complete(job, req.get("result"), now)
        return {"ok": True}

    def _cmd_ACKB(self, conn_id: str | None, req: dict, now: float) -> dict:
        ids, results, tokens = req["ids"], req.get("results"), req.get("tokens")
        if results is not None and len(results) != len(ids):  # BQ-ACKB-1
            raise _Refused("ackb_results_length")
        if tokens is not None and len(tokens) != len(ids):
            raise _Refused("ackb_tokens_length")
        seen: set[str] = set()
        jobs = []
        for i, job_id in enumerate(ids):  # all or nothing (BQ-JOB-12)
            if job_id in seen:
                raise _Refused("job_not_processing", id=job_id)
            seen.add(job_id)
            job = self._active(job_id)
            self._check_lock(job, tokens[i] if tokens is not None else None, now)
            jobs.append(job)
        for i, job in enumerate(jobs):
            self._complete(job, results[i] if results is not None else None, now)
        return {"ok": True}

    def _cmd_FAIL(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._active(req["id"])
        self._check_lock(job, req.get("token"), now)
        if req.get("removeOnFail") is True:
            job.remove_on_fail = True
        self._fail(job, req.get("error"), now, final=req.get("unrecoverable") is True,
                   stack=req.get("stack"))
        return {"ok": True}

    # =========================================================================================
    # Commands: query
    # =========================================================================================
    def _job(self, job_id: Any, error: str = "job_not_found") -> Job:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise _Refused(error, id=job_id)
        return job

    def _full_wire(self, job: Job, state: bool = True) -> dict:
        out = job_to_wire(job)
        if state:
            out["state"] = job.state
        if job.has_result:
            out["returnvalue"] = job.returnvalue
        if job.failed_reason is not None:
            out["failedReason"] = job.failed_reason
        return out

    def _cmd_GetJob(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "job": self._full_wire(self._job(req["id"]))}  # BQ-QUERY-1

    def _cmd_GetState(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        return {"ok": True, "id": job.id, "state": job.state}

    def _cmd_GetResult(self, conn_id: str | None, req: dict, now: float) -> dict:
        job_id = req["id"]
        job = self._jobs.get(job_id)
        if job is not None:
            result = job.returnvalue if job.has_result else None
        else:  # BQ-QUERY-3: a removed job's result while the cache holds it, else null
            result = self._finished.get(job_id)
        return {"ok": True, "id": job_id, "result": result}

    def _iter_state(self, q: _Queue, state: str | None) -> Iterator[str]:
        if state is None:
            return iter(q.all)
        if state == WAITING:  # pull order first, then the jobs held by dependencies
            return itertools.chain((k[2] for k in q.waiting),
                                   (j for j in q.members[WAITING]
                                    if self._jobs[j].pending_deps))
        if state == DELAYED:
            return iter(sorted(q.members[DELAYED],
                               key=lambda j: (self._jobs[j].run_at, self._jobs[j].seq)))
        return iter(q.members.get(state, ()))

    def _cmd_GetJobs(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is None:
            return {"ok": True, "jobs": []}
        d = self._defaults["GetJobs"]
        offset = _clamp_count(req.get("offset"), d.get("offset", 0), len(q.all))
        limit = _clamp_count(req.get("limit"), d.get("limit"), len(q.all))
        ids = itertools.islice(self._iter_state(q, req.get("state")), offset, offset + limit)
        return {"ok": True, "jobs": [self._full_wire(self._jobs[j]) for j in ids]}

    def _cmd_GetJobCounts(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        return {"ok": True, "counts": {s: len(q.members[s]) if q else 0 for s in self.states}}

    def _cmd_GetCountsPerPriority(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        counts = {str(p): n for p, n in sorted(q.priorities.items())} if q else {}
        return {"ok": True, "queue": req["queue"], "counts": counts}

    def _cmd_GetJobByCustomId(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._jobs.get(req["customId"])
        if job is None or job.custom_id != req["customId"]:  # BQ-QUERY-2
            raise _Refused("job_not_found")
        return {"ok": True, "job": self._full_wire(job, state=False)}

    def _cmd_Count(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        return {"ok": True, "count": len(q.all) if q else 0}

    def _cmd_GetProgress(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if job.state != ACTIVE:
            raise _Refused("job_not_active", state=job.state)
        return {"ok": True, "progress": job.progress, "message": job.progress_message}

    def _cmd_GetChildrenValues(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._jobs.get(req["id"])
        values: dict[str, Any] = {}
        for child in job.depends_on if job is not None else ():  # BQ-DEPS-3
            dep = self._jobs.get(child)
            if dep is not None and dep.state == COMPLETED:
                values[child] = dep.returnvalue
            elif dep is None and child in self._finished:
                values[child] = self._finished[child]
        return {"ok": True, "data": {"values": values}}  # BQ-DEPS-2: empty, never an error

    # =========================================================================================
    # Commands: control
    # =========================================================================================
    def _cmd_Cancel(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_cancellable")
        if job.state not in (WAITING, DELAYED):  # BQ-JOB-9
            raise _Refused("job_not_cancellable")
        self._remove(job, now)
        return {"ok": True}

    def _cmd_Progress(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if job.state != ACTIVE:  # BQ-JOB-11
            raise _Refused("job_not_active", state=job.state)
        job.progress = req["progress"]
        job.progress_message = req.get("message") if isinstance(req.get("message"), str) \
            else None
        self._save(job)
        self._webhook("job.progress", job, now, progress=job.progress,
                      message=job.progress_message)
        self._job_event("progress", job, now, progress=job.progress)
        return {"ok": True}

    def _cmd_Update(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_updatable")
        job.data = req.get("data")
        self._save(job)
        return {"ok": True}

    def _cmd_ChangePriority(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_queued")
        if job.state not in (WAITING, DELAYED):
            raise _Refused("job_not_queued")
        q = self._queues[job.queue]
        pullable = job.state == WAITING and job.pending_deps == 0
        if pullable:
            q.waiting.discard(self._wkey(job))
        self._count_priority(q, job.priority, -1)
        job.priority = _int(req["priority"])
        self._count_priority(q, job.priority, +1)
        if pullable:
            q.waiting.add(self._wkey(job))
        self._save(job)
        return {"ok": True}

    def _cmd_Promote(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"], "job_not_delayed")
        if not self._allows(job, EV_PROMOTE):  # BQ-JOB-3
            raise _Refused("job_not_delayed")
        job.run_at = now
        self._move(job, EV_PROMOTE, now)
        return {"ok": True}

    def _cmd_MoveToDelayed(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if not self._allows(job, EV_MOVE_TO_DELAYED):  # BQ-JOB-6: active jobs only
            raise _Refused("job_not_active", state=job.state)
        job.run_at = now + max(0, _int(req["delay"]))
        self._move(job, EV_MOVE_TO_DELAYED, now)
        self._settle_delayed(job, now)
        return {"ok": True}

    def _cmd_Discard(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        if not self._allows(job, EV_DISCARD):  # BQ-JOB-7 (bunqueue: Job not found)
            raise _Refused("job_not_found")
        job.failed_reason = DISCARDED_ERROR
        self._move(job, EV_DISCARD, now, error=DISCARDED_ERROR)
        self.total_failed += 1
        return {"ok": True}

    def _wait_job_now(self, job_id: Any, now: float, final: bool) -> dict | None:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is not None and job.state == COMPLETED:
            return {"ok": True, "completed": True, "result": job.returnvalue}
        if job is None and job_id in self._finished:
            return {"ok": True, "completed": True, "result": self._finished[job_id]}
        if job is None or final:  # removed while waited for: it can never complete
            return {"ok": True, "completed": False}
        return None

    def _cmd_WaitJob(self, conn_id: str | None, req: dict, now: float,
                     deadline: float | None = None) -> dict | Wait:
        job_id = req["id"]
        if deadline is None and job_id not in self._jobs and job_id not in self._finished:
            raise _Refused("job_not_found")
        reply = self._wait_job_now(job_id, now, final=False)
        if reply is not None:
            return reply  # BQ-WAITJOB-1: at once when already completed
        if deadline is None:
            timeout = _int(req.get("timeout"), self.wait_job_timeout)
            deadline = now + max(0, timeout)
        if now >= deadline:
            return {"ok": True, "completed": False}  # BQ-WAITJOB-2
        return Wait("job", job_id, deadline, req, conn_id)

    def _set_queue(self, name: str, **changes: Any) -> _Queue:
        q = self._queue(name)
        for key, value in changes.items():
            setattr(q, key, value)
        if q.has_config():
            self.store.put_queue(name, q.config())
        else:
            self.store.delete_queue(name)
        return q

    def _cmd_Pause(self, conn_id: str | None, req: dict, now: float) -> dict:
        self._set_queue(req["queue"], paused=True)  # BQ-QUEUE-1
        return {"ok": True}

    def _cmd_Resume(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None and q.paused:
            self._set_queue(req["queue"], paused=False)
            if q.waiting:
                self._emit(q.name, None, "resumed")
        return {"ok": True}

    def _cmd_IsPaused(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        return {"ok": True, "paused": bool(q and q.paused)}

    def _cmd_Drain(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        ids = list(q.members[WAITING]) if q else []
        for job_id in ids:  # BQ-QUEUE-2: waiting jobs only
            self._remove(self._jobs[job_id], now)
        return {"ok": True, "count": len(ids)}

    def _cmd_Obliterate(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None:  # BQ-QUEUE-3: every job in every state, and the queue's settings
            for job_id in list(q.all):
                self._remove(self._jobs[job_id], now, remember=False)
            del self._queues[q.name]
            self._rate_blocked.discard(q.name)
            self.store.delete_queue(q.name)
        return {"ok": True}

    def _cmd_Clean(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is None:
            return {"ok": True, "count": 0, "ids": []}
        state = req.get("state")
        states = (WAITING, DELAYED, COMPLETED, FAILED) if state is None else \
            ((state,) if state in (WAITING, DELAYED, COMPLETED, FAILED) else ())  # BQ-QUEUE-5
        limit = _clamp_count(req.get("limit"), None, len(q.all))
        cutoff = now - req["grace"]
        removed: list[str] = []
        for s in states:
            for job_id in list(q.members[s]):
                if len(removed) >= limit:
                    break
                job = self._jobs[job_id]
                age_from = job.finished_at if s in (COMPLETED, FAILED) else job.created_at
                if age_from is not None and age_from <= cutoff:  # BQ-QUEUE-4
                    self._remove(job, now)
                    removed.append(job_id)
        return {"ok": True, "count": len(removed), "ids": removed}

    def _cmd_ListQueues(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "queues": [
            {"name": q.name, "waiting": len(q.members[WAITING]),
             "delayed": len(q.members[DELAYED]), "active": len(q.members[ACTIVE]),
             "paused": q.paused} for q in self._queues.values()]}

    # =========================================================================================
    # Commands: DLQ
    # =========================================================================================
    def _cmd_Dlq(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        ids = list(q.members[FAILED]) if q else []
        if req.get("count") is not None:
            ids = ids[:_clamp_count(req["count"], None, len(ids))]
        return {"ok": True, "jobs": [job_to_wire(self._jobs[j]) for j in ids]}

    def _requeue(self, job: Job, event: str, now: float) -> None:
        q = self._queues[job.queue]
        if job.unique_key is not None and q.unique.get(job.unique_key) not in (None, job.id):
            job.unique_key = None  # another job holds the key now; this one gives it up
        job.run_at = now
        self._move(job, event, now)

    def _retry_from(self, queue: str, wanted: str | None, state: str, event: str,
                    now: float, reset: Callable[[Any], None]) -> dict:
        """Move one job (``wanted``) or every job of ``state`` in ``queue`` back to waiting
        along ``event``'s row, after ``reset`` clears what the old run left; jobs of another
        queue or state are skipped. Answers the count moved."""
        q = self._queues.get(queue)
        if q is None:
            return {"ok": True, "count": 0}
        ids = [wanted] if wanted is not None else list(q.members[state])
        count = 0
        for job_id in ids:
            job = self._jobs.get(job_id)
            if job is None or job.queue != q.name or not self._allows(job, event):
                continue
            reset(job)
            self._requeue(job, event, now)
            count += 1
        return {"ok": True, "count": count}

    def _cmd_RetryDlq(self, conn_id: str | None, req: dict, now: float) -> dict:
        def reset(job: Any) -> None:
            job.attempts = job.stall_count = 0

        # BQ-JOB-8, BQ-DLQ-1
        return self._retry_from(req["queue"], req.get("jobId"), FAILED, EV_RETRY_DLQ, now, reset)

    def _cmd_PurgeDlq(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        ids = list(q.members[FAILED]) if q else []
        for job_id in ids:
            self._remove(self._jobs[job_id], now)
        return {"ok": True, "count": len(ids)}

    def _cmd_RetryCompleted(self, conn_id: str | None, req: dict, now: float) -> dict:
        def reset(job: Any) -> None:
            job.has_result, job.returnvalue, job.completed_at = False, None, None
            job.progress, job.progress_message = 0, None

        # BQ-JOB-8, BQ-DLQ-2
        return self._retry_from(req["queue"], req.get("id"), COMPLETED, EV_RETRY_COMPLETED,
                                now, reset)

    # =========================================================================================
    # Commands: cron
    # =========================================================================================
    def _cmd_Cron(self, conn_id: str | None, req: dict, now: float) -> dict:
        schedule = req.get("schedule")
        repeat_every = req.get("repeatEvery")
        tz = req.get("timezone")
        if schedule is None and repeat_every is None:
            raise _Refused("cron_no_schedule")  # BQ-CRON-7
        if tz is not None:
            _zone(tz)
        if schedule is not None:
            repeat_every = None  # schedule wins when both are given
            fields_ = schedule.split()
            if not schedule.startswith("@") and len(fields_) not in CRON_FIELDS:
                raise _Refused("cron_invalid_expression", detail="Cron expression must have "
                               "5 fields, or 6 fields with leading seconds")
        elif _int(repeat_every) <= 0:
            raise _Refused("cron_invalid_repeat")
        existing = self._crons.get(req["name"])
        cron = _Cron(name=req["name"], queue=req["queue"], data=req.get("data"),
                     schedule=schedule, repeat_every=_int(repeat_every) if repeat_every else None,
                     priority=_int(req.get("priority"), 0),
                     max_limit=_int(req["maxLimit"]) if req.get("maxLimit") is not None else None,
                     timezone=tz, job_name=req["jobName"] if isinstance(req.get("jobName"), str)
                     else DEFAULT_JOB_NAME, next_run=0.0,
                     executions=existing.executions if existing else 0,  # BQ-CRON-4: upsert
                     generation=next(self._cron_gen))
        cron.next_run = self._cron_next_run(cron, now)
        self._crons[cron.name] = cron
        self.store.put_cron(cron.to_record())
        if not cron.at_limit():
            heapq.heappush(self._cron_heap, (cron.next_run, cron.generation, cron.name))
        return {"ok": True, "cron": cron.wire()}

    def _cron(self, name: Any) -> _Cron:
        cron = self._crons.get(name) if isinstance(name, str) else None
        if cron is None:
            raise _Refused("cron_not_found")  # BQ-CRON-5
        return cron

    def _cmd_CronDelete(self, conn_id: str | None, req: dict, now: float) -> dict:
        cron = self._cron(req["name"])
        del self._crons[cron.name]
        self.store.delete_cron(cron.name)
        return {"ok": True}

    def _cmd_CronList(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "crons": [c.wire() for c in self._crons.values()]}

    def _cmd_CronGet(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "cron": self._cron(req["name"]).wire()}

    # =========================================================================================
    # Commands: logs
    # =========================================================================================
    def _cmd_AddLog(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._job(req["id"])
        entries = self._logs.setdefault(job.id, [])
        entries.append({"message": req["message"], "timestamp": now,
                        "level": req.get("level", self._defaults["AddLog"].get("level"))})
        if len(entries) > LOGS_PER_JOB_MAX:
            del entries[:len(entries) - LOGS_PER_JOB_MAX]
        self.store.put_logs(job.id, list(entries))
        return {"ok": True, "data": {"added": True}}

    def _cmd_GetLogs(self, conn_id: str | None, req: dict, now: float) -> dict:
        entries = self._logs.get(req["id"], []) if isinstance(req["id"], str) else []
        return {"ok": True, "data": {"logs": [dict(e) for e in entries], "count": len(entries)}}

    # =========================================================================================
    # Commands: monitoring
    # =========================================================================================
    def _cmd_Ping(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "data": {"pong": True, "time": now}}

    def _cmd_Hello(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "protocolVersion": self.spec.protocol_version,  # BQ-HELLO-2
                "capabilities": list(self.spec.capabilities), "server": self._hello_server,
                "version": self.config.server_version}

    def _totals(self) -> dict[str, int]:
        totals = dict.fromkeys(self.states, 0)
        for q in self._queues.values():
            for state, members in q.members.items():
                totals[state] += len(members)
        return totals

    def _cmd_Stats(self, conn_id: str | None, req: dict, now: float) -> dict:
        t = self._totals()
        return {"ok": True, "stats": {
            "queued": t[WAITING], "processing": t[ACTIVE], "delayed": t[DELAYED],
            "dlq": t[FAILED], "completed": t[COMPLETED], "uptime": now - self.started_at,
            "pushPerSec": self._push_meter.rate(now), "pullPerSec": self._pull_meter.rate(now)}}

    def _cmd_Metrics(self, conn_id: str | None, req: dict, now: float) -> dict:
        memory = self.config.memory_usage_mb or _process_memory_mb
        return {"ok": True, "metrics": {
            "totalPushed": self.total_pushed, "totalPulled": self.total_pulled,
            "totalCompleted": self.total_completed, "totalFailed": self.total_failed,
            # queue latency: from runnable (runAt) to pulled, over every pull
            "avgLatencyMs": self._latency_sum / self.total_pulled if self.total_pulled else 0.0,
            # processing time: from pulled to acknowledged, over every completion
            "avgProcessingMs": self._processing_sum / self.total_completed
            if self.total_completed else 0.0,
            "memoryUsageMb": float(memory()),
            "sqliteSizeMb": self.store.size_bytes() / MB,
            "activeConnections": len(self._connections)}}

    def _cmd_Prometheus(self, conn_id: str | None, req: dict, now: float) -> dict:
        return {"ok": True, "data": {"metrics": self.prometheus_text(now)}}

    def prometheus_text(self, now: float | None = None) -> str:
        """Metrics in the Prometheus text exposition format (version 0.0.4), with bunqueue's
        metric names so that existing dashboards read them."""
        now = self._now() if now is None else now
        t = self._totals()
        lines: list[str] = []

        def metric(name: str, kind: str, doc: str, samples: Iterable[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{labels} {_prom_number(v)}" for labels, v in samples)

        for state, name, doc in ((WAITING, "waiting", "Number of jobs waiting in queue"),
                                 (DELAYED, "delayed", "Number of delayed jobs"),
                                 (ACTIVE, "active", "Number of jobs being processed"),
                                 (FAILED, "dlq", "Number of jobs in dead letter queue"),
                                 (COMPLETED, "completed", "Number of completed jobs")):
            metric(f"bunqueue_jobs_{name}", "gauge", doc, [("", t[state])])
        for name, value, doc in (("pushed", self.total_pushed, "Total jobs pushed"),
                                 ("pulled", self.total_pulled, "Total jobs pulled"),
                                 ("completed", self.total_completed, "Total jobs completed"),
                                 ("failed", self.total_failed, "Total jobs failed")):
            metric(f"bunqueue_jobs_{name}_total", "counter", doc, [("", value)])
        metric("bunqueue_uptime_seconds", "gauge", "Server uptime in seconds",
               [("", (now - self.started_at) // 1000)])
        metric("bunqueue_cron_jobs_registered", "gauge", "Number of registered cron jobs",
               [("", len(self._crons))])
        metric("bunqueue_workers_registered", "gauge", "Number of registered workers",
               [("", len(self._workers))])
        metric("bunqueue_webhooks_registered", "gauge", "Number of registered webhooks",
               [("", len(self._webhooks))])
        for state, name in ((WAITING, "waiting"), (DELAYED, "delayed"), (ACTIVE, "active"),
                            (COMPLETED, "completed"), (FAILED, "dlq")):
            metric(f"bunqueue_queue_jobs_{name}", "gauge", f"Number of {name} jobs per queue",
                   [(f'{{queue="{_prom_label(q.name)}"}}', len(q.members[state]))
                    for q in self._queues.values()])
        return "\n".join(lines) + "\n"

    def _cmd_StorageStatus(self, conn_id: str | None, req: dict, now: float) -> dict:
        status: StorageStatus = self.store.status()
        return {"ok": True, "data": {"diskFull": status.disk_full, "error": status.error,
                                     "since": status.since}}

    def _cmd_Heartbeat(self, conn_id: str | None, req: dict, now: float) -> dict:
        worker = self._workers.get(req["id"]) if isinstance(req["id"], str) else None
        if worker is None:
            raise _Refused("worker_not_found")  # BQ-REG-2
        worker.last_seen = now  # BQ-REG-1
        return {"ok": True, "data": {"ok": True}}

    def _heartbeat_job(self, job_id: Any, token: Any, now: float) -> bool:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None or job.state != ACTIVE:
            return False
        if isinstance(token, str) and job.lock_token is not None:
            if not hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                       job.lock_token.encode()) \
                    or (job.lock_expires is not None and now >= job.lock_expires):
                return False
            job.lock_expires = now + (job.lock_ttl or self.lock_ttl)  # BQ-LOCK-3
            self._timer(job.lock_expires, "lock", job)
        elif isinstance(token, str):
            return False  # a token for a job that holds no lock
        job.last_heartbeat = now  # BQ-STALL-3
        self._timer(now + self.stall_interval, "stall", job)
        return True

    def _cmd_JobHeartbeat(self, conn_id: str | None, req: dict, now: float) -> dict:
        if not self._heartbeat_job(req["id"], req.get("token"), now):
            raise _Refused("job_heartbeat_refused")
        return {"ok": True, "data": {"ok": True}}

    def _cmd_JobHeartbeatB(self, conn_id: str | None, req: dict, now: float) -> dict:
        tokens = req.get("tokens") or []
        count = sum(self._heartbeat_job(job_id, tokens[i] if i < len(tokens) else None, now)
                    for i, job_id in enumerate(req["ids"]))
        return {"ok": True, "data": {"ok": True, "count": count}}

    # =========================================================================================
    # Commands: workers
    # =========================================================================================
    def _worker_wire(self, w: _Worker, now: float) -> dict:
        return {"id": w.id, "name": w.name, "queues": list(w.queues),
                "registeredAt": w.registered_at, "lastSeen": w.last_seen,
                "activeJobs": self._owner_active.get(w.id, 0), "processedJobs": w.processed,
                "failedJobs": w.failed, "concurrency": w.concurrency, "hostname": w.hostname,
                "pid": w.pid,
                "status": "active" if now - w.last_seen < self.worker_timeout else "stale"}

    def _cmd_RegisterWorker(self, conn_id: str | None, req: dict, now: float) -> dict:
        wid = req.get("workerId") if isinstance(req.get("workerId"), str) and req["workerId"] \
            else uuid7(now)
        started = req.get("startedAt")
        worker = _Worker(id=wid, name=req["name"], queues=list(req.get("queues") or []),
                         registered_at=float(started) if isinstance(started, (int, float))
                         and not isinstance(started, bool) else now,
                         last_seen=now, concurrency=max(1, _int(req.get("concurrency"), 1)),
                         hostname=req["hostname"] if isinstance(req.get("hostname"), str)
                         else "unknown", pid=_int(req.get("pid"), 0), conn_id=conn_id)
        previous = self._workers.get(wid)
        if previous is not None:  # re-registration keeps the counters
            worker.processed, worker.failed = previous.processed, previous.failed
        self._workers[wid] = worker
        wire = self._worker_wire(worker, now)
        data = {"workerId": wid, **{k: v for k, v in wire.items() if k != "id"}}
        return {"ok": True, "data": data}

    def _cmd_UnregisterWorker(self, conn_id: str | None, req: dict, now: float) -> dict:
        if self._workers.pop(req["workerId"], None) is None:
            raise _Refused("worker_not_found")
        return {"ok": True, "data": {"removed": True}}

    def _cmd_ListWorkers(self, conn_id: str | None, req: dict, now: float) -> dict:
        workers = [self._worker_wire(w, now) for w in self._workers.values()]
        stats = {"total": len(workers),
                 "active": sum(w["status"] == "active" for w in workers),
                 "totalProcessed": sum(w["processedJobs"] for w in workers),
                 "totalFailed": sum(w["failedJobs"] for w in workers),
                 "activeJobs": sum(w["activeJobs"] for w in workers),
                 "concurrencySlots": sum(w["concurrency"] for w in workers)}
        return {"ok": True, "data": {"workers": workers, "stats": stats}}

    # =========================================================================================
    # Commands: webhooks
    # =========================================================================================
    def _cmd_AddWebhook(self, conn_id: str | None, req: dict, now: float) -> dict:
        url, events = req["url"], list(req["events"])
        invalid = [e for e in events if e not in self._webhook_events]
        if invalid:  # BQ-WEBHOOK-5
            raise _Refused("webhook_invalid_events", events=", ".join(map(str, invalid)),
                           valid=", ".join(self._webhook_events))
        problem = webhook_url_error(url, allow_private=self.config.allow_private_webhooks)
        if problem is not None:  # BQ-WEBHOOK-1
            raise _Refused(problem)
        hook = {"id": uuid7(now), "url": url, "events": events, "queue": req.get("queue"),
                "secret": req.get("secret"), "createdAt": now, "lastTriggered": None,
                "successCount": 0, "failureCount": 0, "enabled": True}
        self._webhooks[hook["id"]] = hook
        self.store.put_webhook(dict(hook))
        data = {"webhookId": hook["id"], "url": url, "events": list(events), "createdAt": now}
        if hook["queue"] is not None:
            data["queue"] = hook["queue"]
        return {"ok": True, "data": data}

    def _cmd_RemoveWebhook(self, conn_id: str | None, req: dict, now: float) -> dict:
        if self._webhooks.pop(req["webhookId"], None) is None:
            raise _Refused("webhook_not_found")  # BQ-WEBHOOK-4
        self.store.delete_webhook(req["webhookId"])
        return {"ok": True, "data": {"removed": True}}

    def _cmd_ListWebhooks(self, conn_id: str | None, req: dict, now: float) -> dict:
        hooks = []
        for h in self._webhooks.values():  # never the secret
            item = {k: h[k] for k in ("id", "url", "createdAt", "lastTriggered",
                                      "successCount", "failureCount", "enabled")}
            item["events"] = list(h["events"])
            if h.get("queue") is not None:
                item["queue"] = h["queue"]
            hooks.append(item)
        return {"ok": True, "data": {"webhooks": hooks, "stats": {
            "total": len(hooks), "enabled": sum(h["enabled"] for h in hooks)}}}

    # =========================================================================================
    # Commands: rate limiting
    # =========================================================================================
    def _cmd_RateLimit(self, conn_id: str | None, req: dict, now: float) -> dict:
        limit = req["limit"]
        if not isinstance(limit, (int, float)) or not math.isfinite(limit):
            raise _Refused("limit_not_finite")
        q = self._set_queue(req["queue"], rate_limit=limit)  # BQ-RATE-2
        q.pulls.clear()
        if q.waiting:
            self._emit(q.name, None, "rate limit changed")
        return {"ok": True}

    def _cmd_RateLimitClear(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None and q.rate_limit is not None:  # BQ-RATE-3
            self._set_queue(q.name, rate_limit=None)
            q.pulls.clear()
            self._rate_blocked.discard(q.name)
            if q.waiting:
                self._emit(q.name, None, "rate limit cleared")
        return {"ok": True}

    def _cmd_SetConcurrency(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._set_queue(req["queue"], concurrency=_int(req["limit"]))  # BQ-CONC-1
        if q.waiting:
            self._emit(q.name, None, "concurrency changed")
        return {"ok": True}

    def _cmd_ClearConcurrency(self, conn_id: str | None, req: dict, now: float) -> dict:
        q = self._queues.get(req["queue"])
        if q is not None and q.concurrency is not None:  # BQ-CONC-2
            self._set_queue(q.name, concurrency=None)
            if q.waiting:
                self._emit(q.name, None, "concurrency cleared")
        return {"ok": True}

    # =========================================================================================
    # Commands: job events (profiles with job_events, such as bunqueue/2.9.5)
    # =========================================================================================
    def _cmd_SubscribeEvents(self, conn_id: str | None, req: dict, now: float) -> dict:
        if conn_id is not None:  # BQ-EVENT-101: one queue per connection, the latest wins
            self._unsubscribe(conn_id)
            self._subscription[conn_id] = req["queue"]
            self._subscribers.setdefault(req["queue"], set()).add(conn_id)
        return {"ok": True}

    def _cmd_UnsubscribeEvents(self, conn_id: str | None, req: dict, now: float) -> dict:
        self._unsubscribe(conn_id)
        return {"ok": True}

    # =========================================================================================
    # Commands: auth (the shell's; see check_token)
    # =========================================================================================
    def _cmd_Auth(self, conn_id: str | None, req: dict, now: float) -> dict:
        # The engine holds no tokens. A shell with tokens configured answers Auth itself; one
        # without forwards it here and gets bunqueue's answer for that case (BQ-AUTH-3).
        raise _Refused("invalid_token")


class _Operation:
    """Marks one engine operation; events are flushed to notify when the outermost ends."""

    __slots__ = ("engine",)

    def __init__(self, engine: BunqueueEngine):
        self.engine = engine

    def __enter__(self) -> None:
        self.engine._depth += 1

    def __exit__(self, *exc: Any) -> None:
        self.engine._depth -= 1
        if self.engine._depth == 0:
            self.engine._flush()


# =============================================================================================
# Small pure helpers
# =============================================================================================
def _request_defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``default`` of each top-level property of a request schema (the spec's defaults)."""
    return {name: prop["default"] for name, prop in (schema.get("properties") or {}).items()
            if isinstance(prop, Mapping) and "default" in prop}


def _repeat(repeat: Mapping[str, Any]) -> dict[str, Any] | None:
    out = {k: repeat[k] for k in ("every", "limit", "count", "prevMillis")
           if isinstance(repeat.get(k), (int, float)) and not isinstance(repeat.get(k), bool)}
    out.setdefault("count", 0)
    return out


def _zone(name: Any) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError, TypeError):
        raise _Refused("cron_invalid_timezone", timezone=name) from None


def _cron_next(schedule: str, tz: str | None, after_ms: float) -> float:
    """The first time after ``after_ms`` a cron expression fires, in ``tz`` (BQ-CRON-1/2)."""
    try:
        zone = ZoneInfo(tz) if tz else UTC
        start = datetime.fromtimestamp(after_ms / 1000, zone)
        six = len(schedule.split()) == SIX_FIELD_SECONDS_FIRST
        return croniter(schedule, start, second_at_beginning=six).get_next(float) * 1000
    except _Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - croniter raises many kinds for bad input
        raise _Refused("cron_invalid_expression", detail=str(exc) or type(exc).__name__) \
            from None


def _prom_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prom_number(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)
