"""Jobs and the containers that order them: :class:`Job` (persisted fields, then the volatile
ones), the generated constructor of the batch path's jobs, :func:`job_to_wire` (the Job object of
spec/bunqueue/job.yaml), UUIDv7 ids, and per-queue state (:class:`QueueState` with its sorted
waiting list), cron schedules, registered workers and throughput meters."""

from __future__ import annotations

import ast
import operator
import os
import textwrap
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from sortedcontainers import SortedList

from .jobs_generated import plain_job_factory
from .model import DEFAULT_JOB_NAME, STACKTRACE_LINES
from .store import Record


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
NO_ITEMS: Any = ()  # the depends_on and tags of a job the batch path creates without any
_persisted_values = operator.attrgetter(*_PERSISTED)


#: The parameters of the bare-push constructor (``plain_job``, generated into
#: :mod:`.jobs_generated`), and the fields each one sets; every other field takes its default.
PLAIN_JOB_PARAMETERS = ("id", "queue", "name", "data", "seq", "now", "priority", "max_attempts",
                        "backoff", "lifo", "roc", "rof", "timeline", "none")
_PLAIN_JOB_GIVEN = {"id": "id", "queue": "queue", "name": "name", "data": "data", "seq": "seq",
                    "created_at": "now", "run_at": "now", "last_heartbeat": "now",
                    "priority": "priority", "max_attempts": "max_attempts", "backoff": "backoff",
                    "lifo": "lifo", "remove_on_complete": "roc", "remove_on_fail": "rof",
                    "timeline": "timeline", "depends_on": "none", "tags": "none", "state": "WAITING"}
#: The default factories the generator writes as a literal.
_FACTORY_LITERALS: dict[Any, str] = {list: "[]", dict: "{}", set: "set()"}


def plain_job_module() -> str:
    """The text of :mod:`.jobs_generated` (``make generate`` writes it): the factory of the
    constructor of the jobs of the batch path (``_create_jobs``), one assignment per field of :class:`Job` in
    declaration order (so it follows the class: tests/test_generated_code.py fails when a field
    changes and the file was not regenerated). The given fields come from its arguments, every
    other one is its default, written as a literal. Binding the dataclass ``__init__``'s 43
    parameters cost about twice what the stores do; this takes 14 arguments and stores the rest
    as constants (~0.4 us a job instead of ~1.2)."""
    body = []
    for f in fields(Job):
        if f.name in _PLAIN_JOB_GIVEN:
            value = _PLAIN_JOB_GIVEN[f.name]
        elif f.default_factory is not MISSING:
            if f.default_factory not in _FACTORY_LITERALS:
                raise ValueError(f"Job.{f.name}: no literal for its default factory "
                                 f"{f.default_factory!r}")
            value = _FACTORY_LITERALS[f.default_factory]
        else:
            value = repr(f.default)
            if f.default is MISSING or type(ast.literal_eval(value)) is not type(f.default):
                raise ValueError(f"Job.{f.name}: no default, or one without a literal ({value})")
        body.append(f"        job.{f.name} = {value}")
    params = ", ".join(PLAIN_JOB_PARAMETERS)
    signature = textwrap.wrap(f"def plain_job({params}):", 102,
                              initial_indent="    ", subsequent_indent=" " * 18)
    return "\n".join([
        '"""The constructor of the batch path\'s jobs (PUSH, PUSHB): one assignment per field of Job.',
        "",
        *textwrap.wrap(
            "Generated by `make generate` (python -m queuewire.reference_server.bunqueue.codegen) "
            "from the fields of queuewire.reference_server.bunqueue.jobs.Job by "
            "queuewire.reference_server.bunqueue.jobs.plain_job_module(); do not edit: "
            "tests/test_generated_code.py fails until the file is regenerated. The module "
            "queuewire.reference_server.bunqueue.jobs makes its plain_job with the factory below "
            "(the Job class is its argument: this module cannot import it).", 96),
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Callable",
        "from typing import Any",
        "",
        "from .model import WAITING",
        "",
        "",
        "def plain_job_factory(Job: type[Any]) -> Callable[..., Any]:",
        '    """The constructor of ``Job`` s in state waiting: the fields given by its arguments',
        "    (``now``: the creation, run and heartbeat time; ``roc``, ``rof``: remove on complete,",
        "    on fail; ``none``: the shared empty dependencies and tags), every other field its",
        '    default."""',
        "    new = object.__new__",
        "",
        *signature,
        "        job = new(Job)",
        *body,
        "        return job",
        "",
        "    return plain_job",
    ]) + "\n"


plain_job: Callable[..., Job] = plain_job_factory(Job)
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
        "childrenCompleted": len(set(job.depends_on)) - job.pending_deps, "tags": list(job.tags),
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

    def head(self, k: int) -> list:
        """The first ``k`` keys (fewer if there are fewer), without removing them."""
        lists = self._lists
        if not lists:
            return []
        first = lists[0]
        if k <= len(first):
            return first[:k]
        out: list = []
        for sub in lists:
            out.extend(sub[:k - len(out)])
            if len(out) >= k:
                break
        return out

    def drop_head(self, k: int) -> None:
        """Remove the first ``k`` keys (at most all): what ``k`` times ``pop(0)`` does, a
        sublist slice at a time (the batch pull, ``_take_head``)."""
        lists, maxes = self._lists, self._maxes
        k = min(k, self._len)
        self._len -= k
        while k:
            first = lists[0]
            if len(first) <= k:
                k -= len(first)
                del lists[0], maxes[0]
            else:
                del first[:k]
                k = 0
                if len(first) <= self._load >> 1 and len(lists) > 1:
                    # as SortedList._delete does: a short sublist joins the next one
                    first.extend(lists[1])
                    maxes[0] = first[-1]
                    del lists[1], maxes[1]
                    self._expand(0)
        del self._index[:]  # positions changed: rebuilt when next needed


class QueueState:
    """One queue's state: its jobs by state and by creation, the pullable ones in pull order,
    priority counts, unique keys, and its pause, rate limit and concurrency settings."""

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
class CronSchedule:
    """A cron schedule (Cron): what it pushes, when, and how often it has fired."""

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
    # volatile, set when the engine admits the schedule (a Cron, or loading a stored one):
    # the parsed expression (a croniter), built once so a firing never parses again, and
    # the shortest time between two firings, which the cron_rate safeguard counts
    iterator: Any = None
    period_ms: float = 0.0

    def to_record(self) -> Record:
        return {"name": self.name, "queue": self.queue, "data": self.data,
                "schedule": self.schedule, "repeatEvery": self.repeat_every,
                "priority": self.priority, "maxLimit": self.max_limit,
                "timezone": self.timezone, "jobName": self.job_name,
                "nextRun": self.next_run, "executions": self.executions}

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> CronSchedule:
        return cls(name=r["name"], queue=r["queue"], data=r.get("data"),
                   schedule=r.get("schedule"), repeat_every=r.get("repeatEvery"),
                   priority=r.get("priority", 0), max_limit=r.get("maxLimit"),
                   timezone=r.get("timezone"), job_name=r.get("jobName", DEFAULT_JOB_NAME),
                   next_run=r["nextRun"], executions=r.get("executions", 0))

    def at_limit(self) -> bool:
        return self.max_limit is not None and self.executions >= self.max_limit

    def rate(self) -> float:
        """Firings per second at most, 0 once at its limit (it never fires again): this
        schedule's share of the cron_rate safeguard."""
        if self.at_limit() or self.period_ms <= 0:
            return 0.0
        return 1000.0 / self.period_ms

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
class RegisteredWorker:
    """A worker registered with RegisterWorker, with its counters and last sighting."""

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


class RateMeter:
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
