"""The bunqueue reference server's sans-IO core: every command of the profile, with real
queue semantics, and no sockets, no asyncio and no clock of its own.

A :class:`BunqueueEngine` holds the jobs, queues, schedules, workers and webhooks of one
server. The shell (:mod:`.tcp`, :mod:`.http`) decodes a frame, validates
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
when popped. Time enters only through the injected clock ``now_ms`` and through
:meth:`BunqueueEngine.tick`, which the shell calls on a timer
(:meth:`BunqueueEngine.next_deadline` says when) and tests call with a fake clock. Defaults,
limits, error strings, state names and the protocol version are read from the
profile, never restated. PUSH and PUSHB create their jobs in one pass (``_create_jobs``),
whatever options the entries carry; PULL and PULLB take the head of the waiting list, and ACKB
settles its jobs, in one pass each (:mod:`.batch`), doing what ``_create``, ``_take``'s loop
and ``_complete`` do job by job, which they fall back to for the rare job (a delay, uniqueKey,
dependencies, a time-to-live or durability on creation; dependents, a repeat or
removeOnComplete on completion).

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
* All state is written through a :class:`~.store.Store` (``MemoryStore`` by
  default) and read back when an engine is constructed on it; see that module. A store whose
  ``keeps_jobs`` is False (``NullStore``, the shell's in-memory default) gets no job records.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from types import MethodType
from typing import Any

from ...spec import Profile, load_profile
from .batch import BatchPaths
from .commands import COMMANDS
from .commands.cron import load_crons
from .jobs import CronSchedule, Job, QueueState, RateMeter, RegisteredWorker
from .lifecycle import Lifecycle
from .model import (
    ACTIVE,
    COMPLETED,
    DEFAULT_PROFILE,
    DELAYED,
    EV_CONN_CLOSED,
    FAILED,
    LIFECYCLE_EVENTS,
    RECORD_REPLIES,
    THROUGHPUT_WINDOW_S,
    WAITING,
    WEBHOOK_BACKLOG_MAX,
    EngineConfig,
    Event,
    Refused,
    Wait,
    reply_properties,
    request_defaults,
    strip_undefined,
)
from .store import MemoryStore, Record, Store
from .timers import Timers
from .webhook_urls import WebhookDelivery, webhook_host_error

log = logging.getLogger("queuewire.reference_server.bunqueue.engine")

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




# =============================================================================================
# The engine
# =============================================================================================
class BunqueueEngine(Lifecycle, BatchPaths, Timers):
    """One bunqueue server's state and every command of its profile (see the module doc).

    Its three bases are the parts of the job table, each a file of its own: :class:`Lifecycle`
    (creating, taking, moving, finishing and removing jobs: the only writer of job state),
    :class:`BatchPaths` (the same moves a batch at a time) and :class:`Timers` (the
    time-driven moves of :meth:`tick`). The commands are not bases: they are plain functions
    in the :data:`~.commands.COMMANDS` table, bound to this engine by name in ``__init__``."""

    def __init__(self, profile: Profile | str = DEFAULT_PROFILE, *,
                 now_ms: Callable[[], float] | None = None,
                 notify: Callable[[Event], None] | None = None,
                 config: EngineConfig | None = None,
                 store: Store | None = None):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        spec = self.spec = self.profile.model
        self.config = cfg = config or EngineConfig()
        self._clock = now_ms or (lambda: time.time() * 1000.0)
        #: the owner's hooks (a test harness, the engine's own caller): ``notify(event)`` for
        #: job events and ``publish(conn_ids, frame)`` for pushed event frames; the shells
        #: (TCP, HTTP/WebSocket, embedded) register theirs with :meth:`listen` beside them
        self.notify = notify
        self.publish: Callable[[tuple[str, ...], dict], None] | None = None
        self._notify_listeners: list[Callable[[Event], None]] = []
        self._publish_listeners: list[Callable[[tuple[str, ...], dict], None]] = []
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
        self._init_batch_paths()
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
        self._defaults = {name: request_defaults(c.request) for name, c in spec.commands.items()}
        self._job_defaults = dict(self._defaults["PUSH"])
        self._pushb_defaults = request_defaults(
            spec.commands["PUSHB"].request["properties"]["jobs"]["items"])
        self._push_plain = self._job_defaults_of(self._job_defaults)
        self._pushb_plain = self._job_defaults_of(self._pushb_defaults)
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

        # The reply properties the profile's response schemas define where a reply carries a
        # record the engine builds (a cron schedule, a worker, a job's log, Clean's removals):
        # a builder adds a field beyond the documents' only if it is in its set, so bunqueue/v2
        # answers the documented shapes and bunqueue/2.9.5 what its overlay documents. Read
        # once here; PUSH, PULL and ACK build no such records and never consult it.
        self._reply_fields = {
            (cmd, path): reply_properties(self.profile, cmd, path)
            for cmd, path in RECORD_REPLIES if cmd in spec.commands}

        self._handlers: dict[str, Callable[..., dict | Wait]] = {}
        for name in spec.commands:
            handler = COMMANDS.get(name)
            if handler is None:
                raise ValueError(f"{self.profile.name}: no handler for command {name}")
            self._handlers[name] = MethodType(handler, self)   # called as a bound method is

        # state
        self._jobs: dict[str, Job] = {}
        self._queues: dict[str, QueueState] = {}
        self._seq = itertools.count(1)
        self._tie = itertools.count()            # heap tie-breaker
        self._delayed: list[tuple[float, int, str]] = []          # (runAt, seq, id)
        self._timers: list[tuple[float, int, str, str, int]] = []  # (when, tie, kind, id, act)
        self._ttls: list[tuple[float, int, str]] = []             # (expiry, seq, id)
        self._cron_heap: list[tuple[float, int, str]] = []        # (nextRun, generation, name)
        self._crons: dict[str, CronSchedule] = {}
        self._cron_gen = itertools.count(1)
        self._dependents: dict[str, set[str]] = {}
        self._finished: OrderedDict[str, Any] = OrderedDict()     # removed completed: result
        self._logs: dict[str, list[Record]] = {}
        self._conn_jobs: dict[str, set[str]] = {}
        self._connections: set[str] = set()
        self._workers: dict[str, RegisteredWorker] = {}
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
        self._push_meter = RateMeter(THROUGHPUT_WINDOW_S)
        self._pull_meter = RateMeter(THROUGHPUT_WINDOW_S)

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
            return self._run(handler, conn_id, strip_undefined(dict(request)))
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
        collected: list[Event] = []
        self._collected = collected
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

    def _run(self, handler: Callable[..., dict | Wait], conn_id: str | None, req: Mapping[str, Any],
             deadline: float | None = None) -> dict | Wait:
        try:
            now = float(self._clock())  # _now()
            delayed = self._delayed
            if delayed and delayed[0][0] <= now:
                self._promote_due(now)
            if deadline is None:
                return handler(conn_id, req, now)
            return handler(conn_id, req, now, deadline=deadline)
        except Refused as refused:
            return self._error(refused.name, **refused.fields)
        except Exception:  # noqa: BLE001 - a bug or a store failure is an error reply, not a crash
            log.exception("bunqueue engine: %s failed", req.get("cmd"))
            return self._error("internal_error")

    def _error(self, name: str, **fields: Any) -> dict:
        return {"ok": False, "error": self._messages[name].format(**fields)}

    def listen(self, *, notify: Callable[[Event], None] | None = None,
               publish: Callable[[tuple[str, ...], dict], None] | None = None
               ) -> Callable[[], None]:
        """Register a shell's hooks; returns the function that unregisters them.

        ``notify(event)`` gets every job event (after the command or tick that caused it);
        ``publish(conn_ids, frame)`` every pushed event frame (a map without reqId,
        BQ-EVENT-102) with the connections it is for: each shell writes it to the connections
        it owns and ignores the others (TCP, HTTP/WebSocket and embedded each own theirs)."""
        if notify is not None:
            self._notify_listeners.append(notify)
        if publish is not None:
            self._publish_listeners.append(publish)

        def unlisten() -> None:
            if notify is not None and notify in self._notify_listeners:
                self._notify_listeners.remove(notify)
            if publish is not None and publish in self._publish_listeners:
                self._publish_listeners.remove(publish)
        return unlisten

    def _emit(self, queue: str | None, job_id: str | None, reason: str) -> None:
        self._events.append(Event(queue, job_id, reason))

    def _flush(self) -> None:
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._outbox:
                conn_ids, frame = self._outbox.popleft()
                publishers = ((self.publish,) if self.publish is not None else ()) \
                    + tuple(self._publish_listeners)
                for publish in publishers:
                    try:
                        publish(conn_ids, frame)
                    except Exception:  # noqa: BLE001 - the shell's callback must not break us
                        log.exception("bunqueue engine: publish failed")
            events = self._events
            while events:  # taken a batch at a time; notify may add more (through retry)
                batch = list(events)
                events.clear()
                if self._collected is not None:
                    self._collected.extend(batch)
                notifiers = ((self.notify,) if self.notify is not None else ()) \
                    + tuple(self._notify_listeners)
                for notify in notifiers:
                    for event in batch:
                        try:
                            notify(event)
                        except Exception:  # noqa: BLE001 - the shell's callback must not break us
                            log.exception("bunqueue engine: notify failed")
        finally:
            self._flushing = False


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
            job.pending_deps = len({dep for dep in job.depends_on if not self._is_completed(dep)})
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
        load_crons(self, self.store.iter_crons())  # bounded as a Cron is (BQ-SAFE-1)
        for record in self.store.iter_webhooks():
            self._webhooks[record["id"]] = dict(record)
        for job_id, entries in self.store.iter_logs():
            if job_id in self._jobs:
                self._logs[job_id] = list(entries)
        self._events.clear()



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
