"""The only code that changes a job's state, as a base of the engine: moving a job along a
row of the spec's ``job_lifecycle`` table (``_move``, ``_leave``, ``_enter``), creating jobs
(PUSH, PUSHB, cron, repeat: ``_create``, whose batch path is in :mod:`.batch`), pulling
(rate and concurrency budgets, lock tokens) and finishing them (ACK, FAIL with backoff,
stall, timeout). Commands call these; none of them talks to a socket or reads a clock."""

from __future__ import annotations

import heapq
import hmac
import math
from collections.abc import Mapping
from typing import Any

# The module-private names below are aliases of the public ones of jobs and model: they keep
# this module's text, which tests/mutation/equivalent/ quotes, as it was before the renames.
from .jobs import Job, job_to_wire, uuid7
from .jobs import QueueState as _Queue
from .model import (
    ACTIVE,
    COMPLETED,
    DEFAULT_JOB_NAME,
    DELAYED,
    EV_ACK,
    EV_DELAY_ELAPSED,
    EV_FAIL_FINAL,
    EV_FAIL_RETRY,
    EV_PULL,
    EV_STALLED,
    EV_STALLED_FINAL,
    FAILED,
    RATE_WINDOW_MS,
    STACKTRACE_LINES,
    STALLED_ERROR,
    TIMELINE_MAX,
    UNLIMITED,
    WAITING,
    Wait,
)
from .model import Refused as _Refused
from .model import int_option as _int
from .model import repeat_option as _repeat


class Lifecycle:
    """Job state changes, creation, pulling and finishing (mixed into the engine)."""

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
        self._leave(job)
        job.state = target
        self._enter(job, now, **timeline)
        if save:
            self._save(job)

    def _leave(self, job: Job) -> None:
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
        if type(timeline) is not list:  # the tuple a batch's jobs share (_create_jobs)
            timeline = job.timeline = list(timeline)
        timeline.append(entry)
        if len(timeline) > TIMELINE_MAX:
            del timeline[0]

    def _save(self, job: Job) -> None:
        if self._keeps_jobs and job.id in self._jobs:
            self.store.put_job(job.to_record())

    def _remove(self, job: Job, now: float, *, remember: bool = True) -> None:
        """Delete a job in any state, with everything that refers to it. A completed job's
        result is remembered (GetResult, WaitJob, dependencies) unless ``remember`` is off."""
        q = self._queues[job.queue]
        if remember and job.state == COMPLETED:
            self._remember_result(job)
        self._leave(job)
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
        """The general path: one job from the options of a PUSH (a PUSHB entry with
        ``custom_key`` "customId" and the entries' ``defaults``; a cron firing; a repetition),
        every option read as the spec defines it. The reference the batch path
        (``BatchPaths._create_jobs``) is held to."""
        d = defaults or self._job_defaults
        get = opts.get
        # an absent or ill-typed option is the profile's default (_int); a negative delay none
        delay = max(0, _int(get("delay"), d.get("delay", 0)))
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
            priority=_int(priority, d.get("priority", 0)),
            max_attempts=max(1, _int(max_attempts, d.get("maxAttempts"))),
            backoff=_int(backoff, d.get("backoff")),
            custom_id=custom,
            last_heartbeat=now,
        )
        repeat = get("repeat")
        job.lifo = bool(get("lifo", d.get("lifo", False)))
        job.ttl = _int(opts["ttl"]) if get("ttl") is not None else None
        job.timeout = _int(opts["timeout"]) if get("timeout") is not None else None
        job.unique_key = get("uniqueKey") if isinstance(get("uniqueKey"), str) else None
        job.depends_on = [x for x in get("dependsOn") or () if isinstance(x, str)]
        job.tags = [t for t in get("tags") or () if isinstance(t, str)]
        job.group_id = get("groupId") if isinstance(get("groupId"), str) else None
        job.remove_on_complete = bool(get("removeOnComplete", d.get("removeOnComplete", False)))
        job.remove_on_fail = bool(get("removeOnFail", d.get("removeOnFail", False)))
        job.durable = bool(get("durable", d.get("durable", False)))
        job.repeat = _repeat(repeat) if isinstance(repeat, dict) else None
        return self._add(job, now)

    def _add(self, job: Job, now: float) -> Job:
        """Add a job just built (by ``_create``, or by the batch path for a job whose options
        need more than a place in the waiting list): its dependencies, durable record, queue
        membership, state entry, record, time-to-live, counters, webhook and job event."""
        assert job.state in self._initial
        if job.depends_on:
            job.pending_deps = len({dep for dep in job.depends_on if not self._is_completed(dep)})
        if job.durable and self._keeps_jobs:  # BQ-PUSH-8: on disk before anything changes
            self.store.put_job(job.to_record(), durable=True)
        q = self._queue(job.queue)
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
        # the batch path (.batch) takes the head up to the first job with a time-to-live
        taken = self._take_head(q, budget, now, conn_id, owner, lock_ttl) \
            if self._batch_paths and budget > 0 else []
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
        if wait.kind == "job":  # final: a reply whether or not the job completed, never None
            return self._wait_job_now(req["id"], now, final=True)  # type: ignore[return-value]
        batch = req["cmd"] == "PULLB"
        count = _int(req.get("count"), 1) if batch else 1
        # deadline=now: the last attempt answers what it takes, it never parks (a Wait) again
        return self._pull(wait.conn_id, req, now, count, batch,  # type: ignore[return-value]
                          deadline=now)

    def _wait_job_now(self, job_id: Any, now: float, final: bool) -> dict | None:
        """WaitJob's reply now: the job's result once it completed (or was removed after
        completing), ``completed: false`` once it can never complete or ``final``, else None."""
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is not None and job.state == COMPLETED:
            return {"ok": True, "completed": True, "result": job.returnvalue}
        if job is None and job_id in self._finished:
            return {"ok": True, "completed": True, "result": self._finished[job_id]}
        if job is None or final:  # removed while waited for: it can never complete
            return {"ok": True, "completed": False}
        return None

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
