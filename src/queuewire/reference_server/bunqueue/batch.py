"""The lifecycle engine's batch paths, as a base of the engine: creating the jobs of a PUSH or
a PUSHB in one pass (``_create_jobs``), taking the head of a queue's waiting list in one pass
(``_take_head``, for PULL and PULLB) and settling the jobs of an ACKB in one pass
(``_complete_run``).

They do what the general path does (``Lifecycle._create`` per job, ``Lifecycle._take``'s loop
of ``_move(job, EV_PULL)`` and ``Lifecycle._complete``), job by job in the same order, with
the same effects: the same ids (drawn from the same random stream in the same order), the same
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

Job creation costs the same whatever options a job carries at their defaults: a job is
built by the generated constructor with the defaults (:mod:`.jobs_generated`), then each
option the request carries is applied by its row of ``_OPTIONS`` (one function per option,
as ``_create`` reads it), whatever other keys the client adds. A job that only waits (no
delay, uniqueKey, dependencies, time-to-live or durability) is placed inline: the waiting keys
of a batch are added to the sorted list as one run, the priority counts and push meter
updated once; any other job is placed by the general path's ``Lifecycle._add``. The checks
that can answer or refuse without creating (a custom id, a uniqueKey, dependencies, a legacy
name: ``_check_push``, ``_check_name``) run, for the whole batch before any job is created, only
when an entry carries one of those options.

They handle the common job only and leave the rest to the general path, which the caller
then runs: ``_take_head`` stops at the first job with a time-to-live (it may have expired,
and the general loop removes it); ``_complete_run`` hands a job with dependents, a repeat or
removeOnComplete to ``_complete``. Neither is used when the profile's lifecycle table does
not move waiting -> active on PULL and active -> completed on ACK (``_batch_paths`` off).
``tests/reference_server/test_bunqueue_batch.py`` holds them to the general path: the same
reply bytes and the same engine state over randomized command sequences (hypothesis), with
``_batch_paths`` switched off on the reference engine, and pushes in every entry shape real
clients send (tests/reference_server/test_bunqueue_shapes.py holds their cost per job within
1.3x of the cheapest).
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .jobs import NO_ITEMS, Job, QueueState, plain_job, uuid7, uuid7_batch
from .model import (
    ACTIVE,
    COMPLETED,
    DELAYED,
    EV_ACK,
    EV_PULL,
    TIMELINE_MAX,
    WAITING,
    Event,
    int_option,
    repeat_option,
)


# -- job options: one row per option, as Lifecycle._create reads it ---------------------------
# Each sets its field on a job built with the defaults and answers whether the job now needs
# the general path's placement (Lifecycle._add) rather than only a place in the waiting list.
def _priority(job: Job, value: Any) -> bool:
    job.priority = int_option(value, job.priority)
    return False


def _delay(job: Job, value: Any) -> bool:
    delay = max(0, int_option(value, 0))  # (the batch path runs only where the default is 0)
    if delay > 0:  # (a delayed job is placed by the batch path too)
        job.state, job.run_at = DELAYED, job.created_at + delay
    return False


def _max_attempts(job: Job, value: Any) -> bool:
    job.max_attempts = max(1, int_option(value, job.max_attempts))
    return False


def _backoff(job: Job, value: Any) -> bool:
    job.backoff = int_option(value, job.backoff)
    return False


def _custom_id(job: Job, value: Any) -> bool:
    job.custom_id = value if isinstance(value, str) and value else None
    return False


def _lifo(job: Job, value: Any) -> bool:
    job.lifo = bool(value)
    return False


def _ttl(job: Job, value: Any) -> bool:
    job.ttl = int_option(value) if value is not None else None
    return job.ttl is not None


def _timeout(job: Job, value: Any) -> bool:
    job.timeout = int_option(value) if value is not None else None
    return False


def _unique_key(job: Job, value: Any) -> bool:
    job.unique_key = value if isinstance(value, str) else None
    return job.unique_key is not None


def _depends_on(job: Job, value: Any) -> bool:
    job.depends_on = [x for x in value or () if isinstance(x, str)]
    return bool(job.depends_on)


def _tags(job: Job, value: Any) -> bool:
    job.tags = [t for t in value or () if isinstance(t, str)]
    return False


def _group_id(job: Job, value: Any) -> bool:
    job.group_id = value if isinstance(value, str) else None
    return False


def _remove_on_complete(job: Job, value: Any) -> bool:
    job.remove_on_complete = bool(value)
    return False


def _remove_on_fail(job: Job, value: Any) -> bool:
    job.remove_on_fail = bool(value)
    return False


def _durable(job: Job, value: Any) -> bool:
    job.durable = bool(value)
    return job.durable


def _repeat(job: Job, value: Any) -> bool:
    job.repeat = repeat_option(value) if isinstance(value, dict) else None
    return False


_OPTIONS: dict[str, Callable[[Job, Any], bool]] = {
    "priority": _priority, "delay": _delay, "maxAttempts": _max_attempts, "backoff": _backoff,
    "lifo": _lifo, "ttl": _ttl, "timeout": _timeout, "uniqueKey": _unique_key,
    "dependsOn": _depends_on, "tags": _tags, "groupId": _group_id,
    "removeOnComplete": _remove_on_complete, "removeOnFail": _remove_on_fail,
    "durable": _durable, "repeat": _repeat,
}
_NAME = itertools.repeat("name")
#: per custom-id key (PUSH's jobId, a PUSHB entry's customId): the keys of a request that are
#: not options, the options, and those that can answer or refuse without creating a job
_WAYS: dict[str, tuple[frozenset[str], dict[str, Callable[[Job, Any], bool]], frozenset[str]]] = {
    key: (frame, {**_OPTIONS, key: _custom_id}, frozenset({key, "uniqueKey", "dependsOn"}))
    for key, frame in (("jobId", frozenset({"cmd", "reqId", "queue", "name", "data"})),
                       ("customId", frozenset({"name", "data"})))
}



def _apply(job: Job, entry: Mapping[str, Any], frame: frozenset[str],
           options: dict[str, Callable[[Job, Any], bool]], unchanged: Callable) -> bool:
    """Apply each option ``entry`` carries (its keys outside ``frame``) to ``job``, but those
    sent at the value the job already has (``unchanged(key, entry)`` is it); answers whether
    the job needs the general path's placement."""
    general = False
    for key in entry.keys() - frame:
        value = entry[key]
        if value is unchanged(key, entry):  # (the entry: never an option's value)
            continue
        option = options.get(key)
        if option is not None and option(job, value):
            general = True
    return general


def _at_defaults(entries: Sequence[Mapping[str, Any]], keys: Iterable[str],
                 at_default: Mapping[str, Any]) -> bool:
    """Whether every entry holds each of ``keys`` at the value ``at_default`` gives it, or
    not at all (one column at a time, in C: ``dict.get`` and ``is`` mapped over the entries)."""
    for key in keys:
        if key not in at_default:
            return False
        value = at_default[key]
        column = map(dict.get, entries, itertools.repeat(key), itertools.repeat(value))
        if not all(map(operator.is_, column, itertools.repeat(value))):
            return False
    return True


class BatchPaths:
    """``_create_jobs``, ``_take_head`` and ``_complete_run`` (mixed into the engine; see the
    module doc)."""

    _batch_paths = True  # set from the lifecycle table in _init_batch_paths; tests turn it off

    def _init_batch_paths(self) -> None:
        self._batch_paths = (self._lifecycle.get((WAITING, EV_PULL)) == ACTIVE
                             and self._lifecycle.get((ACTIVE, EV_ACK)) == COMPLETED)

    def _job_defaults_of(self, d: Mapping[str, Any]) -> tuple | None:
        """The fields the defaults ``d`` give a job that sets no option: (priority,
        maxAttempts, backoff, lifo, removeOnComplete, removeOnFail, the options whose value
        leaves a job as those make it); None where such a job
        is not a waiting one (a default delay or durability, or waiting not an initial
        state), so that ``_create_jobs`` is not used."""
        if d.get("delay", 0) > 0 or bool(d.get("durable", False)) or WAITING not in self._initial:
            return None
        fields = (d.get("priority", 0), max(1, d.get("maxAttempts")), d.get("backoff"),
                  bool(d.get("lifo", False)), bool(d.get("removeOnComplete", False)),
                  bool(d.get("removeOnFail", False)))
        # an option sent with the very value a job already has from them is not applied:
        # only values compared by identity (False, True, None, small integers) are listed
        at_default = {key: value for key, value in zip(
            ("priority", "lifo", "removeOnComplete", "removeOnFail"), fields[:1] + fields[3:])
            if value is None or type(value) is bool or type(value) is int and -5 <= value <= 256}
        at_default |= {"delay": 0, "durable": False}
        return (*fields, at_default)

    def _create_job(self, queue: str, request: Mapping[str, Any], now: float,
                    defaults: tuple) -> str:
        """``_create_jobs(queue, (request,), now, defaults, "jobId")[0]`` for a PUSH, without
        a batch's lists and iterators (test_bunqueue_batch holds both to the general path)."""
        frame, options, checked_keys = _WAYS["jobId"]
        present = request.keys()
        bare = present <= frame
        checked = not bare and not checked_keys.isdisjoint(present)
        if checked or self._legacy_data_name and "name" not in present:
            self._check_name(request)
            existing = self._check_push(queue, request, "jobId")
            if existing is not None:
                return existing
        priority, max_attempts, backoff, lifo, roc, rof, at_default = defaults
        name = request.get("name")
        if type(name) is str and name:
            data = request.get("data")
        else:
            name, data = self._name_and_data(request)
        q = self._queues.get(queue) or self._queue(queue)
        s = next(self._seq)
        job = plain_job(None if checked else uuid7(now), queue, name, data, s, now, priority,
                        max_attempts, backoff, lifo, roc, rof,
                        ({"state": WAITING, "timestamp": now},), NO_ITEMS)
        general = not bare and _apply(job, request, frame, options, at_default.get)
        if checked:
            job.id = job.custom_id if job.custom_id is not None else uuid7(now)
        jid = job.id
        if general:
            job.timeline = []
            self._add(job, now)
            return jid
        self._jobs[jid] = job  # Lifecycle._add for a job that only waits, or is only delayed
        q.all[jid] = None
        p = job.priority
        q.priorities[p] += 1
        if job.state is DELAYED:
            job.timeline = ({"state": DELAYED, "timestamp": now},)
            q.members[DELAYED][jid] = None
            heapq.heappush(self._delayed, (job.run_at, s, jid))
        else:
            q.members[WAITING][jid] = None
            q.waiting.add(self._wkey(job))
            self._events.append(tuple.__new__(Event, (queue, jid, "waiting")))
        self.total_pushed += 1
        self._push_meter.add(now)
        if self._keeps_jobs:
            self.store.put_job(job.to_record(), durable=False)
        if self._webhooks or self._subscribers.get(queue):
            self._webhook("job.pushed", job, now)
            self._job_event("pushed", job, now)
        return jid

    def _create_jobs(self, queue: str, entries: Sequence[Mapping[str, Any]], now: float,
                     defaults: tuple, custom_key: str) -> list[str]:
        """``_create`` (after ``_check_name`` and ``_check_push``) for each entry of a PUSHB
        (``custom_key`` "customId") or for a PUSH (one entry, the request; "jobId"), under
        the ``defaults`` of ``_job_defaults_of``: the answer's ids, in order (see the module
        doc)."""
        if not entries:
            return []
        frame, options, checked_keys = _WAYS[custom_key]
        n = len(entries)
        present = entries[0].keys() if n == 1 else set().union(*entries)  # every entry's keys
        checked = not checked_keys.isdisjoint(present)
        at_default = defaults[-1]
        # no entry carries an option, or every one it carries is at the defaults' value
        bare = present <= frame or not checked and _at_defaults(entries, present - frame,
                                                                at_default)
        answers: list[str | None] = []
        if checked:  # as the general path: the whole batch before any job is created
            seen: set[str] = set()
            for e in entries:
                self._check_name(e)
                answers.append(self._check_push(queue, e, custom_key, seen))
                if isinstance(e.get(custom_key), str):
                    seen.add(e[custom_key])
        elif self._legacy_data_name and not all(map(operator.contains, entries, _NAME)):
            for e in entries:  # BQ-NAME-102: a name in data obeys job_name_length
                self._check_name(e)
        priority, max_attempts, backoff, lifo, roc, rof, _ = defaults
        unchanged = at_default.get
        # ids drawn a batch at a time, unless a custom id or a check may leave some undrawn
        fresh = None if checked else iter(uuid7_batch(now, n) if n > 1 else [uuid7(now)])
        q: QueueState | None = None
        jobs_, seq = self._jobs, self._seq
        add_event, new_event = self._events.append, tuple.__new__
        keeps, put_job = self._keeps_jobs, self.store.put_job
        hooks = bool(self._webhooks) or bool(self._subscribers.get(queue))
        waits = ({"state": WAITING, "timestamp": now},)  # one timeline for the batch's jobs
        delays = None
        keys: list[tuple] = []
        wkey = self._wkey  # the one key of the waiting list (a test's broken engine may change it)
        ids: list[str] = []
        placed = 0
        for e in entries:
            if checked:  # earlier entries of the batch may now hold the custom id or uniqueKey
                answer = answers[len(ids)]
                if answer is None and ids:
                    answer = self._check_push(queue, e, custom_key)
                if answer is not None:
                    ids.append(answer)
                    continue
            name = e.get("name")
            if type(name) is str and name:
                data = e.get("data")
            else:
                name, data = self._name_and_data(e)
            if q is None:
                q = self._queue(queue)
                all_, members, priorities = q.all, q.members, q.priorities
                waiting = members[WAITING]
            s = next(seq)
            job = plain_job(None if fresh is None else fresh.__next__(), queue, name, data, s,
                            now, priority, max_attempts, backoff, lifo, roc, rof, waits, NO_ITEMS)
            general = False if bare else _apply(job, e, frame, options, unchanged)
            if fresh is None:
                job.id = job.custom_id if job.custom_id is not None else uuid7(now)
            jid = job.id
            ids.append(jid)
            if general:
                job.timeline = []
                self._add(job, now)
                continue
            jobs_[jid] = job  # Lifecycle._add for a job that only waits, or is only delayed
            all_[jid] = None
            p = job.priority
            priorities[p] += 1
            if job.state is DELAYED:
                if delays is None:
                    delays = ({"state": DELAYED, "timestamp": now},)
                job.timeline = delays
                members[DELAYED][jid] = None
                heapq.heappush(self._delayed, (job.run_at, s, jid))
            else:
                waiting[jid] = None
                keys.append(wkey(job))
                add_event(new_event(Event, (queue, jid, "waiting")))
            placed += 1
            if keeps:
                put_job(job.to_record(), durable=False)
            if hooks:
                self._webhook("job.pushed", job, now)
                self._job_event("pushed", job, now)
        if placed:
            assert q is not None
            if len(keys) == 1:
                q.waiting.add(keys[0])
            elif keys:
                q.waiting.add_run(keys)
            self.total_pushed += placed
            self._push_meter.add(now, placed)
        return ids

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
