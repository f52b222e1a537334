"""The lifecycle engine's batch paths for the worker cycle, as a base of the engine: taking
the head of a queue's waiting list in one pass (``_take_head``, for PULL and PULLB) and
settling the jobs of an ACKB in one pass (``_complete_run``).

They do what the general path does (``Lifecycle._take``'s loop of ``_move(job, EV_PULL)``
and ``Lifecycle._complete``), job by job in the same order, with the same effects: the same
states, queue membership (in the same order), timeline entries, lock tokens (drawn from the
same random stream in the same order, so a seeded stream gives the same tokens), timer heap
entries (pushed in the same order with the same tie-breakers), counters and float sums (added
in the same order), events, webhooks, job events and store records. What they save is the
per-job overhead around that work: the lifecycle table is consulted once per batch rather
than once per job, ``_move``/``_leave``/``_enter``/``_timeline`` are inlined, the waiting
keys are cut from the sorted list's first sublist in one slice instead of a bisection and
deletion each, the lock tokens are made a batch at a time (``uuid7_batch``), the jobs of one
batch share one timeline entry (entries are never changed once appended, as the jobs of one
PUSHB share their first), and the pull meter and owner count are updated once.

They handle the common job only and leave the rest to the general path, which the caller
then runs: ``_take_head`` stops at the first job with a time-to-live (it may have expired,
and the general loop removes it); ``_complete_run`` hands a job with dependents, a repeat or
removeOnComplete to ``_complete``. Neither is used when the profile's lifecycle table does
not move waiting -> active on PULL and active -> completed on ACK (``_batch_paths`` off).
``tests/reference_server/test_bunqueue_batch.py`` holds them to the general path: the same
reply bytes and the same engine state over randomized command sequences (hypothesis), with
``_batch_paths`` switched off on the reference engine.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

from .jobs import Job, QueueState, uuid7_batch
from .model import ACTIVE, COMPLETED, EV_ACK, EV_PULL, TIMELINE_MAX, WAITING, Event


class BatchPaths:
    """``_take_head`` and ``_complete_run`` (mixed into the engine; see the module doc)."""

    _batch_paths = True  # set from the lifecycle table in _init_batch_paths; tests turn it off

    def _init_batch_paths(self) -> None:
        self._batch_paths = (self._lifecycle.get((WAITING, EV_PULL)) == ACTIVE
                             and self._lifecycle.get((ACTIVE, EV_ACK)) == COMPLETED)

    def _take_head(self, q: QueueState, budget: int, now: float, conn_id: str | None,
                   owner: str | None, lock_ttl: float) -> list[Job]:
        """Take up to ``budget`` jobs from the head of ``q.waiting`` as ``_take``'s loop
        would, stopping before the first job with a time-to-live; answers those taken."""
        keys = q.waiting.head(budget)
        jobs_ = self._jobs
        run = []
        for key in keys:
            job = jobs_[key[2]]
            if job.ttl is not None:
                break
            run.append(job)
        n = len(run)
        if not n:
            return run
        q.waiting.drop_head(n)
        waiting_m, active_m = q.members[WAITING], q.members[ACTIVE]
        priorities = q.priorities
        entry: dict[str, Any] = {"state": ACTIVE, "timestamp": now}
        if owner is not None:
            entry["worker"] = owner
            tokens = uuid7_batch(now, n)
            expires = now + lock_ttl
            self._owner_active[owner] += n
        stall_at = now + self.stall_interval
        timers, tie, push = self._timers, self._tie, heapq.heappush
        conn_jobs = self._conn_jobs.setdefault(conn_id, set()) if conn_id is not None else None
        keeps = self._keeps_jobs
        put_job = self.store.put_job
        latency = self._latency_sum
        for i, job in enumerate(run):
            jid = job.id
            # _leave(waiting): membership, priority count (the waiting key is dropped above)
            del waiting_m[jid]
            p = job.priority
            left = priorities[p] - 1
            if left > 0:
                priorities[p] = left
            else:
                del priorities[p]
            # _enter(active)
            job.state = ACTIVE
            active_m[jid] = None
            timeline = job.timeline
            if type(timeline) is not list:
                timeline = job.timeline = list(timeline)
            timeline.append(entry)
            if len(timeline) > TIMELINE_MAX:
                del timeline[0]
            # the rest of _take's loop body
            job.started_at = job.last_heartbeat = now
            activation = job.activation = job.activation + 1
            if owner is not None:  # BQ-LOCK-1
                job.lock_owner, job.lock_ttl = owner, lock_ttl
                job.lock_token = tokens[i]
                job.lock_expires = expires
                push(timers, (expires, next(tie), "lock", jid, activation))
            push(timers, (stall_at, next(tie), "stall", jid, activation))  # BQ-STALL-1
            if job.timeout is not None:  # BQ-PUSH-5
                push(timers, (now + job.timeout, next(tie), "timeout", jid, activation))
            if conn_jobs is not None:
                job.conn_id = conn_id
                conn_jobs.add(jid)
            if keeps and jid in jobs_:
                put_job(job.to_record(), durable=False)
            latency += max(0.0, now - job.run_at)
        self._latency_sum = latency
        if q.rate_limit is not None:
            q.pulls.extend(itertools.repeat(now, n))
        self.total_pulled += n
        self._pull_meter.add(now, n)
        if self._webhooks or self._subscribers.get(q.name):
            for job in run:
                self._webhook("job.started", job, now)
                self._job_event("pulled", job, now)
        return run

    def _complete_run(self, jobs: Sequence[Job], results: Sequence[Any] | None,
                      now: float) -> None:
        """``_complete`` for each of ``jobs`` (active, lock checked), in order."""
        entry = {"state": COMPLETED, "timestamp": now}
        queues, workers, dependents = self._queues, self._workers, self._dependents
        owner_active, conn_jobs = self._owner_active, self._conn_jobs
        jobs_, keeps, put_job = self._jobs, self._keeps_jobs, self.store.put_job
        add_event, new_event = self._events.append, tuple.__new__
        hooks = bool(self._webhooks) or bool(self._subscribers)
        q: QueueState | None = None
        completed = 0
        processing = self._processing_sum
        for i, job in enumerate(jobs):
            result = results[i] if results is not None else None
            jid = job.id
            if job.repeat is not None or job.remove_on_complete \
                    or (dependents and jid in dependents):
                self.total_completed += completed
                self._processing_sum = processing
                completed = 0
                self._complete(job, result, now)
                processing = self._processing_sum
                continue
            name = job.queue
            if q is None or q.name != name:
                q = queues[name]
            owner = job.lock_owner
            job.has_result, job.returnvalue = True, result  # BQ-JOB-10
            job.completed_at = now
            # _leave(active): membership, _release_active
            del q.members[ACTIVE][jid]
            if owner is not None:
                left = owner_active[owner] - 1
                if left > 0:
                    owner_active[owner] = left
                else:
                    owner_active.pop(owner, None)
            job.lock_token = job.lock_owner = job.lock_expires = job.lock_ttl = None
            conn = job.conn_id
            if conn is not None:
                held = conn_jobs.get(conn)
                if held is not None:
                    held.discard(jid)
                job.conn_id = None
            job.activation += 1
            add_event(new_event(Event, (name, jid, "left active")))
            # _enter(completed)
            job.state = COMPLETED
            q.members[COMPLETED][jid] = None
            timeline = job.timeline
            if type(timeline) is not list:
                timeline = job.timeline = list(timeline)
            timeline.append(entry)
            if len(timeline) > TIMELINE_MAX:
                del timeline[0]
            job.finished_at = now
            key = job.unique_key
            if key is not None and q.unique.get(key) == jid:
                del q.unique[key]
            if keeps and jid in jobs_:
                put_job(job.to_record(), durable=False)
            # the rest of _complete
            completed += 1
            if job.started_at is not None:
                processing += now - job.started_at
            if owner:
                worker = workers.get(owner)
                if worker is not None:
                    worker.processed += 1
            add_event(new_event(Event, (name, jid, "completed")))
            if hooks:
                self._webhook("job.completed", job, now, data=result)
                self._job_event("completed", job, now, data=result)
        self.total_completed += completed
        self._processing_sum = processing
