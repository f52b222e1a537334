"""Stateful fuzzing of the bunqueue job lifecycle: a hypothesis ``RuleBasedStateMachine``
that drives a server over real TCP and checks it against a model built from the spec.

Design
------
* **The model is the spec's table.** :class:`SpecLifecycle` wraps the profile's
  ``job_lifecycle`` state machine (rows ``(source, event, target, requirement)``) and answers
  one question: "where does event E take a job in state S, and which requirement says so?".
  No state or event name is written in this module. The states the rules need are found by
  the commands whose rows name them: the state PULL takes a job from is the pullable one,
  Promote's source is the delayed one and its target the waiting one, RetryDlq's source is the
  dead-letter queue; a command's events are the rows whose event is the command's name or
  starts with it (FAIL has two, told apart by their targets: the one that lands in the DLQ is
  "no attempts left"); an event that is not a command (a closed connection) is found by the
  requirement id of its row. A command on a job whose state has no row for its event is
  predicted to be refused and to leave the job where it was.
* **What else is modelled**: per job its priority, push order, maxAttempts, the failed
  attempts so far, its current lock token and the tokens it held before (stale); per queue
  its paused flag. A pull must answer the highest-priority waiting job, the earliest pushed
  among equals (BQ-PUSH-1, BQ-PUSH-2), nothing while paused (BQ-QUEUE-1), and a token when
  it was asked for with an owner (BQ-LOCK-1). ACK and FAIL of a locked job succeed only
  with the current token (BQ-LOCK-2: a missing, wrong or stale token is refused).
* **maxAttempts** follows job.yaml and BQ-JOB-5: ``attempts`` counts failed attempts and is
  incremented by the FAIL itself; the FAIL has "attempts left" when the count after it is
  below maxAttempts (so maxAttempts 1 sends the first FAIL to the DLQ). Where the documents
  are silent the model keeps every reading they allow and lets the server pick one: whether
  RetryDlq resets a job's attempts is unsaid, so a retried job's attempts are a set of
  candidates ({kept, 0}), narrowed by what the next FAIL does.
* **No wall clock.** Delays and backoffs are either 0 (the job is waiting at once) or the
  spec's largest delay or backoff, which never elapses during a run; delayed jobs come back
  by Promote. Locks are taken with a lock TTL of the largest delay, and the embedded server
  runs with stall detection pushed out of reach, so no timer fires inside a run.
* **Invariants** after every step: GetState of every job (the requirement of the row that
  last moved it is cited), GetJobCounts of the queue (per state, from the table's states)
  and IsPaused. A violation raises :class:`LifecycleViolation` carrying the requirement id
  and its level; hypothesis then shrinks the sequence of commands.
* **I/O** is a blocking socket per run with the codecs' :class:`FrameEncoder` and
  :class:`FrameDecoder`, pipelining the invariant queries by ``reqId``. Each run (one
  hypothesis example) uses a fresh queue on a fresh connection and obliterates the queue at
  teardown, so examples share one server. The default target is an in-process reference
  server (:class:`EmbeddedTarget`) on an event loop thread; any ``HOST:PORT`` works too.

Entry points: :func:`lifecycle_machine` (a machine class for a target, used by the tests)
and :func:`run_stateful` (a whole campaign, for ``queuewire fuzz --stateful``).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NoReturn

from hypothesis import HealthCheck, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    get_state_machine_test,
    invariant,
    precondition,
    rule,
)

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..judge import Verdict, verdict_for
from ..judge.opening import AUTH, refused
from ..spec import Profile, load_profile
from ..spec.model import StateMachine, Transition

DEFAULT_PROFILE = "bunqueue/v2"
OWNER = "qw-stateful"            # the lock owner every owned pull names
CONNECT_TIMEOUT_S = 5.0          # connect and per-reply bound: nothing may hang past it
REQUEUE_WAIT_S = 2.0             # how long a closed connection's jobs may take to come back
PIPELINE = 50                    # invariant queries sent at once (below max_in_flight)
MAX_JOBS = 5                     # jobs per run: few jobs, long histories (DLQ, retry, DLQ)
# requirement ids cited for refusals and for rows looked up by requirement
REQ_ACK_FAIL_ACTIVE_ONLY = "BQ-JOB-12"   # ACK/FAIL on a job that is not active
REQ_BY_ID_STATE = "BQ-JOB-13"            # a job command whose event has no row
REQ_MOVE_TO_DELAYED_STATE = "BQ-JOB-16"  # MoveToDelayed on a waiting job
REQ_CONN_CLOSED = "BQ-CONN-1"            # the row a closed connection moves active jobs by
REQ_PUSH_INITIAL = "BQ-PUSH-3"           # a push starts delayed (delay > 0) or waiting
REQ_PRIORITY, REQ_FIFO = "BQ-PUSH-1", "BQ-PUSH-2"
REQ_PAUSED, REQ_LOCK, REQ_TOKEN = "BQ-QUEUE-1", "BQ-LOCK-1", "BQ-LOCK-2"
REQ_DLQ_ONE = "BQ-DLQ-1"
REQ_STATES = "BQ-JOB-1"

# request fields this module writes, per command: checked against the profile's schemas
_FIELDS = {
    "PUSH": ("queue", "data", "priority", "delay", "maxAttempts", "backoff"),
    "PULL": ("queue", "owner", "lockTtl"), "ACK": ("id", "token"),
    "FAIL": ("id", "token", "error"), "RetryDlq": ("queue", "jobId"),
    "Pause": ("queue",), "Resume": ("queue",), "IsPaused": ("queue",), "Promote": ("id",),
    "MoveToDelayed": ("id", "delay"), "Discard": ("id",), "GetState": ("id",),
    "GetJobCounts": ("queue",), "Obliterate": ("queue",),
}


# =============================================================================================
# The model: the spec's job_lifecycle table
# =============================================================================================
class LifecycleViolation(AssertionError):
    """The server disagreed with the model; ``requirement`` is the id the model rests on."""

    def __init__(self, requirement: str | None, level: str, message: str):
        super().__init__(f"{requirement} ({level}): {message}")
        self.requirement, self.level, self.detail = requirement, level, message


class SpecLifecycle:
    """The ``job_lifecycle`` table of a profile, looked up by (state, event), with the roles
    of its states derived from the rows of the commands that name them."""

    def __init__(self, profile: Profile):
        self.profile = profile
        machine: StateMachine = profile.model.job_lifecycle
        self.machine = machine
        self.states: tuple[str, ...] = machine.states
        self.initial: tuple[str, ...] = machine.initial
        self._rows: dict[tuple[str, str], Transition] = {
            (t.source, t.event): t for t in machine.transitions}
        commands = profile.model.commands
        for cmd, fields in _FIELDS.items():
            props = commands[cmd].request.get("properties") or {}
            missing = [f for f in fields if f not in props]
            if missing:
                raise ValueError(f"{profile.name}: {cmd} has no request field {missing}")
        self._commands = set(commands)
        (pull,) = self.rows_of("PULL")
        self.pullable, self.active = pull.source, pull.target
        (promote,) = self.rows_of("Promote")
        self.delayed, self.waiting = promote.source, promote.target
        self.dlq = self.rows_of("RetryDlq")[0].source
        fails = [t for t in self.rows_of("FAIL") if t.source == self.active]
        self.fail_final = next(t for t in fails if t.target == self.dlq)
        self.fail_retry = next(t for t in fails if t.target != self.dlq)
        # the delay of a retry that is already due elapses at once: the delayed -> waiting
        # row whose event is not a command
        self.delay_elapsed = next(t for t in machine.transitions
                                  if t.source == self.delayed and t.target == self.waiting
                                  and self._command_of(t.event) is None)
        self.conn_closed = next(t for t in machine.transitions
                                if t.requirement == REQ_CONN_CLOSED and t.source == self.active)
        for state in (self.waiting, self.delayed):
            if state not in self.initial:
                raise ValueError(f"{profile.name}: a push cannot start {state!r}")

    def _command_of(self, event: str) -> str | None:
        head = event.split(" ", 1)[0]
        return head if head in self._commands else None

    def rows_of(self, command: str) -> list[Transition]:
        """The rows whose event is ``command`` or starts with it (FAIL's two rows)."""
        return [t for t in self.machine.transitions if self._command_of(t.event) == command]

    def row(self, state: str, command: str) -> Transition | None:
        """The single row ``command`` takes from ``state`` (None: the command is refused);
        for commands with several rows from one state use :attr:`fail_retry` and co."""
        rows = [t for t in self.rows_of(command) if t.source == state]
        return rows[0] if len(rows) == 1 else None

    def level(self, requirement: str | None) -> str:
        if requirement is None:  # a row that cites no requirement
            return "?"
        try:
            return self.profile.requirement(requirement).level
        except (KeyError, LookupError):
            return "?"

    def violation(self, requirement: str | None, message: str) -> LifecycleViolation:
        return LifecycleViolation(requirement, self.level(requirement), message)


@dataclass
class ModelJob:
    """What the model knows of one job."""

    id: str
    seq: int                          # push order (FIFO within a priority)
    priority: int
    max_attempts: int
    backoff: int
    state: str
    because: str | None               # requirement of the row (or push rule) that put it there
    attempts: frozenset[int] = frozenset({0})  # candidates where the documents are silent
    token: str | None = None          # current lock token while active and locked
    locked: bool = False
    stale: list[str] = field(default_factory=list)


# =============================================================================================
# A blocking link and the targets
# =============================================================================================
class Link:
    """A blocking bunqueue connection: framed MessagePack requests, replies matched by reqId."""

    def __init__(self, host: str, port: int, profile: Profile,
                 timeout: float = CONNECT_TIMEOUT_S, token: str | None = None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._enc = FrameEncoder(profile)
        self._dec = FrameDecoder(profile, check_depth=False)
        self._ids = itertools.count(1)
        if token:   # authenticated first; the reply is not part of the run
            problem = refused(profile, AUTH, self.call(AUTH, token=token), f"{host}:{port}")
            if problem is not None:
                self.close()
                raise problem

    def call_many(self, requests: Iterable[Mapping[str, Any]]) -> list[dict]:
        out: list[dict] = []
        reqs = list(requests)
        for i in range(0, len(reqs), PIPELINE):
            out += self._round(reqs[i:i + PIPELINE])
        return out

    def _round(self, requests: list[Mapping[str, Any]]) -> list[dict]:
        ids = [f"st-{next(self._ids)}" for _ in requests]
        self.sock.sendall(b"".join(self._enc.encode({**r, "reqId": i})
                                   for r, i in zip(requests, ids)))
        wanted = set(ids)
        got: dict[str, dict] = {}
        while len(got) < len(ids):
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the server closed the connection")
            for msg in self._dec.feed(data):
                if isinstance(msg, dict) and msg.get("reqId") in wanted:
                    got[msg["reqId"]] = msg
        return [got[i] for i in ids]

    def call(self, cmd: str, **fields: Any) -> dict:
        return self.call_many([{"cmd": cmd, **fields}])[0]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def quiet_config(profile: Profile) -> Any:
    """An :class:`~queuewire.reference_server.bunqueue.EngineConfig` whose stall interval and
    lock TTL are the spec's largest delay: no stall or lock expiry fires during a run (time is
    kept out of the model)."""
    from ..reference_server.bunqueue import EngineConfig
    far = float(limit_max(profile, "delay"))
    return EngineConfig(stall_interval_ms=far, lock_ttl_ms=far)


def limit_max(profile: Profile, name: str) -> int | float:
    """The largest value of limit ``name``, which the model needs to exist."""
    value = profile.limit(name).max
    if value is None:
        raise ValueError(f"{profile.name}: limit {name} has no max")
    return value


class ThreadedServer:
    """A server started on 127.0.0.1 (an ephemeral port) on an event loop thread of its own,
    so that the synchronous state machines can talk to it over TCP; a context manager."""

    def _serve(self, server: Any, thread_name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=thread_name)
        self._thread.start()
        self.server = asyncio.run_coroutine_threadsafe(server.start(), self._loop).result(10)
        self.host, self.port = "127.0.0.1", self.server.port

    def close(self) -> None:
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __str__(self) -> str:
        return f"embedded ({self.host}:{self.port})"


class EmbeddedTarget(ThreadedServer):
    """A reference :class:`~queuewire.reference_server.bunqueue.BunqueueServer` on 127.0.0.1 (an
    ephemeral port), on an event loop thread of its own. ``engine``: a ready engine (a
    deliberately broken one, in tests; build it with :func:`quiet_config`); otherwise one with
    :func:`quiet_config`."""

    def __init__(self, profile: Profile | str = DEFAULT_PROFILE, *, engine: Any = None):
        from ..reference_server.bunqueue import BunqueueServer
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        config = None if engine is not None else quiet_config(self.profile)
        self._serve(BunqueueServer(self.profile, "127.0.0.1", 0, engine=engine, config=config),
                    "qw-stateful-server")


def parse_target(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a target is HOST:PORT or 'embedded', got {target!r}")
    return host.strip("[]"), int(port)


# =============================================================================================
# The state machine
# =============================================================================================
TOKEN_KINDS = ("current", "missing", "wrong", "stale")
# a job to push: (priority, delayed, maxAttempts, backoff_far); see LifecycleMachine.push
# (a third of the jobs start delayed: a delayed job needs a Promote before it is of use)
JOB_SPECS = st.tuples(st.sampled_from((0, 1, -1, 2, "max", "min")),
                      st.sampled_from((False, False, True)), st.integers(1, 3), st.booleans())


class LifecycleMachine(RuleBasedStateMachine):
    """Rules push_one, pull (then ACK or FAIL), finish (ACK or FAIL), job_command (Promote,
    MoveToDelayed, Discard), retry_dlq and control (Pause, Resume, reconnect); invariants
    GetState, GetJobCounts and IsPaused. Few rules, each with a choice of command inside,
    because hypothesis' swarm testing switches whole rules off per run. Bound to a target
    by :func:`lifecycle_machine` (class attributes ``host``, ``port``, ``spec``)."""

    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None   # connections authenticate with it first
    spec: SpecLifecycle
    steps_log: list[str] = []    # the steps of the latest run (after shrinking: the minimal one)
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"qw-stateful-{secrets.token_hex(6)}"
        self.link = Link(self.host, self.port, self.spec.profile, token=self.token)
        self.model: dict[str, ModelJob] = {}
        self.paused = False
        self._seq = itertools.count()
        self.log: list[str] = []
        type(self).steps_log = self.log
        profile = self.spec.profile
        self.far_delay = int(limit_max(profile, "delay"))
        self.far_backoff = int(limit_max(profile, "backoff"))

    # -- helpers ------------------------------------------------------------------------------
    def _fail(self, requirement: str | None, message: str) -> NoReturn:
        raise self.spec.violation(requirement, f"{message} (queue {self.queue})")

    def _step(self, text: str) -> None:
        self.log.append(text)

    def _move(self, job: ModelJob, row: Transition) -> None:
        if row.source != job.state:
            raise AssertionError(f"model bug: row {row} from {job.state}")
        if job.state == self.spec.active and job.token is not None:
            job.stale.append(job.token)
        if job.state == self.spec.active:
            job.token, job.locked = None, False
        job.state, job.because = row.target, row.requirement

    def _expect_refused(self, reply: dict, requirement: str | None, what: str) -> None:
        if reply.get("ok") is not False:
            self._fail(requirement, f"{what} was answered {reply!r}; expected an error reply")

    def _expect_ok(self, reply: dict, requirement: str | None, what: str) -> None:
        if reply.get("ok") is not True:
            self._fail(requirement, f"{what} was refused: {reply!r}")

    def _token_for(self, job: ModelJob, kind: str) -> str | None:
        if kind == "current":
            return job.token
        if kind == "stale" and job.stale:
            return job.stale[-1]
        if kind in ("wrong", "stale"):
            return f"qw-wrong-{secrets.token_hex(8)}"
        return None

    def _waiting_order(self) -> list[ModelJob]:
        """The pullable jobs, next first: highest priority, then push order."""
        return sorted((j for j in self.model.values() if j.state == self.spec.pullable),
                      key=lambda j: (-j.priority, j.seq))

    # -- rules --------------------------------------------------------------------------------
    @precondition(lambda self: len(self.model) < MAX_JOBS)
    @rule(target=jobs, spec=JOB_SPECS)
    def push_one(self, spec: tuple) -> str:
        return self.push(*spec)

    def push(self, priority: Any, delayed: bool, max_attempts: int, backoff_far: bool) -> str:
        """PUSH a job (priority, or "min"/"max" of the priority limit; delayed: the largest
        delay; backoff_far: the largest backoff, else 0) and add it to the model."""
        if isinstance(priority, str):
            priority = int(getattr(self.spec.profile.limit("priority"), priority))
        delay = self.far_delay if delayed else 0
        backoff = self.far_backoff if backoff_far else 0
        self._step(f"PUSH priority={priority} delay={delay} maxAttempts={max_attempts} "
                   f"backoff={backoff}")
        reply = self.link.call("PUSH", queue=self.queue, data={"n": len(self.model)},
                               priority=priority, delay=delay, maxAttempts=max_attempts,
                               backoff=backoff)
        self._expect_ok(reply, REQ_PUSH_INITIAL, "PUSH")
        job_id = reply.get("id")
        if not isinstance(job_id, str) or job_id in self.model:
            self._fail(REQ_PUSH_INITIAL, f"PUSH answered id {job_id!r}")
        state = self.spec.delayed if delay > 0 else self.spec.waiting
        self.model[job_id] = ModelJob(job_id, next(self._seq), priority, max_attempts, backoff,
                                      state, REQ_PUSH_INITIAL)
        return job_id

    @rule(owned=st.booleans(), then=st.sampled_from(("FAIL", "ACK", None)),
          kind=st.sampled_from(TOKEN_KINDS))
    def pull(self, owned: bool, then: str | None, kind: str) -> None:
        """PULL, and (``then``) ACK or FAIL the job at once with a token of ``kind``, so that
        runs reach the dead-letter queue and completion, and meet refused tokens, often."""
        self._step(f"PULL owner={OWNER if owned else None}")
        fields: dict[str, Any] = {"queue": self.queue}
        if owned:
            fields.update(owner=OWNER, lockTtl=self.far_delay)
        reply = self.link.call("PULL", **fields)
        self._expect_ok(reply, REQ_PAUSED, "PULL")
        got = reply.get("job")
        order = [] if self.paused else self._waiting_order()
        if not order:
            if got is not None:
                req = REQ_PAUSED if self.paused else self.spec.rows_of("PULL")[0].requirement
                why = "the queue is paused" if self.paused else "no job is pullable"
                self._fail(req, f"PULL answered job {_id(got)!r} although {why}")
            return
        if not isinstance(got, dict):
            self._fail(self.spec.rows_of("PULL")[0].requirement,
                       f"PULL answered {got!r}; job {order[0].id} is pullable")
        job = self.model.get(_id(got))
        if job is None or job.state != self.spec.pullable:
            self._fail(self.spec.rows_of("PULL")[0].requirement,
                       f"PULL answered job {_id(got)!r}, which is not pullable; "
                       f"expected {order[0].id}")
        if job is not order[0]:
            req = REQ_PRIORITY if job.priority != order[0].priority else REQ_FIFO
            self._fail(req, f"PULL answered job {job.id} (priority {job.priority}, push "
                            f"#{job.seq}); expected {order[0].id} (priority "
                            f"{order[0].priority}, push #{order[0].seq})")
        token = reply.get("token")
        if owned and not isinstance(token, str):
            self._fail(REQ_LOCK, f"PULL with an owner answered token {token!r}")
        self._move(job, self.spec.rows_of("PULL")[0])
        job.locked, job.token = owned, token if owned else None
        if then is not None:
            self._finish(then, job.id, kind, {"error": "qw-stateful"} if then == "FAIL"
                         else {})

    def _finish(self, cmd: str, job_id: str, kind: str, extra: Mapping[str, Any]) -> None:
        """ACK or FAIL ``job_id`` with a token of ``kind``; the outcome predicted."""
        job = self.model[job_id]
        active = job.state == self.spec.active
        fields: dict[str, Any] = {"id": job_id, **extra}
        token = self._token_for(job, kind) if (job.locked or not active) else None
        if token is not None:
            fields["token"] = token
        self._step(f"{cmd} job #{job.seq} ({job.state}) token={kind if 'token' in fields else '-'}")
        reply = self.link.call(cmd, **fields)
        if not active:
            self._expect_refused(reply, REQ_ACK_FAIL_ACTIVE_ONLY, f"{cmd} of a {job.state} job")
            return
        if job.locked and token != job.token:
            self._expect_refused(reply, REQ_TOKEN, f"{cmd} of a locked job with a {kind} token")
            return
        if cmd == "ACK":
            row = self.spec.row(job.state, cmd)
            assert row is not None, f"model bug: no {cmd} row from {job.state}"
            self._expect_ok(reply, row.requirement, cmd)
            self._move(job, row)
        else:
            self._expect_ok(reply, self.spec.fail_retry.requirement, cmd)
            self._failed(job)

    def _failed(self, job: ModelJob) -> None:
        """A FAIL was accepted: predict the row from the attempts after it; where the
        candidates disagree, the server's answer picks (GetState)."""
        after = frozenset(a + 1 for a in job.attempts)
        final: AbstractSet[int] = {a for a in after if a >= job.max_attempts}
        retry: AbstractSet[int] = after - final
        if final and retry:
            state = self.link.call("GetState", id=job.id).get("state")
            ok_states = {self.spec.fail_final.target, self.spec.fail_retry.target,
                         self.spec.delay_elapsed.target if job.backoff == 0 else None}
            if state not in ok_states:
                self._fail(self.spec.fail_retry.requirement,
                           f"job {job.id} is {state!r} after FAIL")
            final, retry = (final, set()) if state == self.spec.fail_final.target \
                else (set(), retry)
        if final:
            job.attempts = frozenset(final)
            self._move(job, self.spec.fail_final)
            return
        job.attempts = frozenset(retry)
        self._move(job, self.spec.fail_retry)
        if job.backoff == 0:  # a retry due at once is waiting at once (delay 0, BQ-PUSH-3)
            self._move(job, self.spec.delay_elapsed)

    @rule(job_id=jobs, cmd=st.sampled_from(("FAIL", "ACK")), kind=st.sampled_from(TOKEN_KINDS))
    def finish(self, job_id: str, cmd: str, kind: str) -> None:
        """ACK or FAIL any job (in any state) with a token of ``kind``."""
        self._finish(cmd, job_id, kind, {"error": "qw-stateful"} if cmd == "FAIL" else {})

    @rule(job_id=st.one_of(st.none(), jobs))
    def retry_dlq(self, job_id: str | None) -> None:
        fields: dict[str, Any] = {"queue": self.queue}
        if job_id is not None:
            fields["jobId"] = job_id
        name = "all" if job_id is None else f"job #{self.model[job_id].seq}"
        self._step(f"RetryDlq {name}")
        reply = self.link.call("RetryDlq", **fields)
        (row,) = self.spec.rows_of("RetryDlq")
        self._expect_ok(reply, row.requirement, "RetryDlq")
        chosen = [self.model[job_id]] if job_id is not None else list(self.model.values())
        moved = [j for j in chosen if j.state == row.source]
        if reply.get("count") != len(moved):
            req = REQ_DLQ_ONE if job_id is not None else row.requirement
            self._fail(req, f"RetryDlq {name} answered count {reply.get('count')!r}; "
                            f"{len(moved)} job(s) were in the dead-letter queue")
        for job in moved:
            self._move(job, row)
            job.attempts = job.attempts | {0}  # unsaid whether RetryDlq resets attempts

    @rule(action=st.sampled_from(("Resume", "Pause", "reconnect")))
    def control(self, action: str) -> None:
        """Pause or Resume the queue, or reconnect (one rule, so that these queue-wide steps
        do not crowd out the job steps)."""
        if action == "reconnect":
            self._reconnect()
            return
        self._step(action)
        self._expect_ok(self.link.call(action, queue=self.queue), REQ_PAUSED, action)
        self.paused = action == "Pause"

    def _by_id(self, cmd: str, job_id: str, refused_req: str, **extra: Any) -> bool:
        """Send ``cmd`` for the job; True when the table has a row for it (and it moved)."""
        job = self.model[job_id]
        self._step(f"{cmd} job #{job.seq} ({job.state})"
                   + "".join(f" {k}={v}" for k, v in extra.items()))
        reply = self.link.call(cmd, id=job_id, **extra)
        row = self.spec.row(job.state, cmd)
        if row is None:
            self._expect_refused(reply, refused_req, f"{cmd} of a {job.state} job")
            return False
        self._expect_ok(reply, row.requirement, f"{cmd} of a {job.state} job")
        self._move(job, row)
        return True

    @rule(job_id=jobs, cmd=st.sampled_from(("Promote", "MoveToDelayed", "Discard")),
          far=st.booleans())
    def job_command(self, job_id: str, cmd: str, far: bool) -> None:
        """Promote, MoveToDelayed (by the largest delay when ``far``, else 0) or Discard any
        job (one rule, so that hypothesis' swarm testing rarely switches them all off)."""
        if cmd == "Promote":
            self.promote(job_id)
        elif cmd == "Discard":
            self.discard(job_id)
        else:
            self.move_to_delayed(job_id, far)

    def promote(self, job_id: str) -> None:
        self._by_id("Promote", job_id, REQ_BY_ID_STATE)

    def move_to_delayed(self, job_id: str, far: bool) -> None:
        job = self.model[job_id]
        req = REQ_MOVE_TO_DELAYED_STATE if job.state == self.spec.pullable else REQ_BY_ID_STATE
        moved = self._by_id("MoveToDelayed", job_id, req, delay=self.far_delay if far else 0)
        if moved and not far:  # due at once: the delay elapses now (BQ-JOB-6)
            self._move(job, self.spec.delay_elapsed)

    def discard(self, job_id: str) -> None:
        self._by_id("Discard", job_id, REQ_BY_ID_STATE)

    def _reconnect(self) -> None:
        """Close the connection: its active jobs go back along the "connection closed" row,
        which the server applies when it sees the close (waited for, within a bound)."""
        self._step("reconnect")
        self.link.close()
        row = self.spec.conn_closed
        for job in self.model.values():
            if job.state == row.source:
                self._move(job, row)
        self.link = Link(self.host, self.port, self.spec.profile, token=self.token)
        deadline = time.monotonic() + REQUEUE_WAIT_S
        while True:
            counts = self.link.call("GetJobCounts", queue=self.queue).get("counts") or {}
            if counts.get(row.source, 0) == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def server_agrees(self) -> None:
        jobs = list(self.model.values())
        replies = self.link.call_many(
            [{"cmd": "GetState", "id": j.id} for j in jobs]
            + [{"cmd": "GetJobCounts", "queue": self.queue},
               {"cmd": "IsPaused", "queue": self.queue}])
        for job, reply in zip(jobs, replies):
            if reply.get("ok") is not True or reply.get("state") != job.state:
                self._fail(job.because, f"job #{job.seq} {job.id} is "
                                        f"{reply.get('state', reply)!r}; the model says "
                                        f"{job.state!r} (after {self.log[-1]!r})")
        counts = replies[-2].get("counts")
        expected = {s: sum(1 for j in jobs if j.state == s) for s in self.spec.states}
        if not isinstance(counts, dict) \
                or any(counts.get(s) != n for s, n in expected.items()):
            self._fail(REQ_STATES, f"GetJobCounts answered {counts!r}; the model says "
                                   f"{expected!r}")
        paused = replies[-1].get("paused")
        if paused is not self.paused:
            self._fail(REQ_PAUSED, f"IsPaused answered {paused!r}; the model says "
                                   f"{self.paused!r}")

    def teardown(self) -> None:
        try:
            self.link.call("Obliterate", queue=self.queue)
        except OSError:
            pass
        self.link.close()


def _id(job: Any) -> Any:
    return job.get("id") if isinstance(job, dict) else job


def _first(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def lifecycle_machine(host: str, port: int,
                      profile: Profile | str = DEFAULT_PROFILE,
                      token: str | None = None) -> type[LifecycleMachine]:
    """A :class:`LifecycleMachine` subclass bound to the server at ``host:port`` (its
    connections authenticate with ``token`` first when one is given); run it with
    ``run_state_machine_as_test`` or as ``cls.TestCase`` under pytest."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    return type("BoundLifecycleMachine", (LifecycleMachine,),
                {"host": host, "port": port, "spec": SpecLifecycle(prof), "steps_log": [],
                 "token": token})


# =============================================================================================
# A campaign, for `queuewire fuzz --stateful`
# =============================================================================================
@dataclass
class StatefulReport:
    """The outcome of :func:`run_stateful`. ``passed`` is False when a run found a
    violation; then ``requirement``/``level``/``message`` say which, and ``steps`` is the
    shrunk sequence of commands that shows it (the last run hypothesis replayed)."""

    target: str
    profile: str
    max_examples: int
    seed: int | None
    passed: bool
    elapsed_s: float
    requirement: str | None = None
    level: str | None = None
    message: str | None = None
    steps: list[str] = field(default_factory=list)
    # the violation's verdict in the one vocabulary (judge.verdict_for of its level and the
    # requirement's basis): FAIL only for a stated MUST, as conform judges the same behaviour
    verdict: str | None = None

    @property
    def fails(self) -> bool:
        """Whether the violation found is a FAIL (a stated MUST not followed)."""
        return self.verdict == Verdict.FAIL

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self) -> str:
        head = f"stateful {self.profile} against {self.target}: "
        if self.passed:
            return head + f"{self.max_examples} examples, no violation ({self.elapsed_s:.1f} s)"
        steps = "\n".join(f"  {i + 1}. {s}" for i, s in enumerate(self.steps))
        return head + f"{self.verdict} {self.requirement} ({self.level}): {self.message}\n{steps}"


def play_machine(machine: Any, name: str, profile_name: str, *, max_examples: int,
                 step_count: int, seed: int | None,
                 extra_settings: Mapping[str, Any] | None = None,
                 classify: Callable[[Exception], tuple[str, str, str] | None] | None = None,
                 ) -> StatefulReport:
    """Run a bound state machine under hypothesis (no example database, no deadline, shrunk)
    and report its first :class:`LifecycleViolation`, or an error ``classify`` turns into
    (requirement, level, message); any other error propagates."""
    opts: dict[str, Any] = dict(
        max_examples=max_examples, stateful_step_count=step_count, deadline=None,
        database=None, suppress_health_check=list(HealthCheck), print_blob=False,
        report_multiple_bugs=False)
    opts.update(extra_settings or {})
    test = get_state_machine_test(machine, settings=settings(**opts))
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    started = time.monotonic()
    report = StatefulReport(name, profile_name, max_examples, seed, True, 0.0)
    verdict: tuple[str | None, str, str] | None = None
    try:
        try:
            test()
        except BaseExceptionGroup as group:  # several distinct failures: the first
            first = group.subgroup(LifecycleViolation)
            if first is None:
                raise
            raise _first(first) from None
    except LifecycleViolation as exc:
        verdict = (exc.requirement, exc.level, exc.detail)
    except Exception as exc:
        verdict = classify(exc) if classify is not None else None
        if verdict is None:
            raise
    if verdict is not None:
        report.passed = False
        report.requirement, report.level, report.message = verdict
        req = load_profile(profile_name).requirements.get(report.requirement or "")
        report.verdict = str(verdict_for(report.level, req.basis if req else "stated"))
        report.steps = list(machine.steps_log)
    report.elapsed_s = time.monotonic() - started
    return report


def run_stateful(target: str | EmbeddedTarget = "embedded",
                 profile: Profile | str = DEFAULT_PROFILE, max_examples: int = 100,
                 seed: int | None = None, *, step_count: int = 25,
                 extra_settings: Mapping[str, Any] | None = None,
                 on_machine: Callable[[type[LifecycleMachine]], None] | None = None,
                 auth_token: str | None = None) -> StatefulReport:
    """Fuzz the job lifecycle of ``target`` and report the first violation, shrunk.

    ``target`` is ``"embedded"`` (an in-process reference server, started and stopped here),
    ``"HOST:PORT"`` or a running :class:`EmbeddedTarget`. ``max_examples`` hypothesis runs of
    up to ``step_count`` steps each; ``seed`` makes the campaign reproducible (None: random).
    No example database is written. ``extra_settings`` overrides hypothesis settings;
    ``on_machine`` sees the bound machine class before the run (tests). Returns a
    :class:`StatefulReport`; an error that is not a :class:`LifecycleViolation` (the target
    refused the connection, a reply timed out) propagates."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    owned = isinstance(target, str) and target == "embedded"
    server = EmbeddedTarget(prof) if owned else target
    try:
        if isinstance(server, EmbeddedTarget):
            host, port, name = server.host, server.port, str(server)
        else:
            (host, port), name = parse_target(server), server
        machine = lifecycle_machine(host, port, prof, auth_token)
        if on_machine is not None:
            on_machine(machine)
        return play_machine(machine, name, prof.name, max_examples=max_examples,
                            step_count=step_count, seed=seed, extra_settings=extra_settings)
    finally:
        if owned and isinstance(server, EmbeddedTarget):
            server.close()
