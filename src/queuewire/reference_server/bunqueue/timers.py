"""Time-driven work as a base of the engine: delays that elapse, lock and stall deadlines,
processing timeouts, time-to-live, cron schedules (croniter, IANA zones; an expression is
parsed once, by :func:`cron_iterator`, and a firing only asks the parsed object for its next
run) and rate windows, all run by ``tick``; plus what an operation queues for the shell when
it ends: webhook deliveries and pushed job events (SubscribeEvents, where the profile defines
job_events)."""

from __future__ import annotations

import heapq
import logging
import math
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from .jobs import CronSchedule, Job
from .model import (
    ACTIVE,
    CRON_FIELDS,
    DELAYED,
    EV_DELAY_ELAPSED,
    SIX_FIELD_SECONDS_FIRST,
    TIMEOUT_ERROR,
    WAITING,
    Refused,
)
from .webhook_urls import WebhookDelivery

log = logging.getLogger(__name__)


class Timers:
    """Deadlines, cron, webhook and job-event queueing (mixed into the engine)."""

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
        was not ticking collapse into one, and the schedule continues from now (its next run
        is always after ``now``, so a schedule fires at most once a tick however long the
        downtime was). A schedule whose next run cannot be computed stops, with a warning."""
        heap = self._cron_heap
        while heap and heap[0][0] <= now:
            next_run, generation, name = heapq.heappop(heap)
            cron = self._crons.get(name)
            if cron is None or cron.generation != generation or cron.next_run != next_run:
                continue  # deleted, replaced, or at its limit (never pushed back)
            cron.executions += 1
            self._create(cron.queue, {"data": cron.data, "priority": cron.priority,
                                      "name": cron.job_name}, now)
            try:
                cron.next_run = self._cron_next_run(cron, now, previous=next_run)
            except Refused as refused:
                log.warning("bunqueue engine: cron %.100r stops: %s", cron.name,
                            self.error_message(refused.name, **refused.fields))
                continue  # never pushed back
            self.store.put_cron(cron.to_record())
            if not cron.at_limit():
                heapq.heappush(heap, (cron.next_run, cron.generation, cron.name))

    def _cron_next_run(self, cron: CronSchedule, now: float, previous: float | None = None) -> float:
        """When ``cron`` next fires after ``now``, from its parsed expression (never parsed
        again here) or its interval."""
        if cron.schedule is not None:
            if cron.iterator is None:  # not admitted: parse it now (a bounded schedule)
                cron.iterator = cron_iterator(cron.schedule, cron.timezone, now)
            return cron_next(cron.iterator, cron.timezone, now)
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



def cron_zone(name: Any) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError, TypeError):
        raise Refused("cron_invalid_timezone", timezone=name) from None


def cron_iterator(schedule: str, tz: str | None, now_ms: float) -> croniter:
    """A cron expression parsed once (BQ-CRON-1): 5 fields, or 6 with leading seconds, or
    one of croniter's @-macros. The caller has bounded its length (cron_schedule_chars):
    parsing a 256-character schedule costs under a millisecond."""
    fields_ = schedule.split()
    if not schedule.startswith("@") and len(fields_) not in CRON_FIELDS:
        raise Refused("cron_invalid_expression", detail="Cron expression must have "
                      "5 fields, or 6 fields with leading seconds")
    try:
        return croniter(schedule, _start(tz, now_ms),
                        second_at_beginning=len(fields_) == SIX_FIELD_SECONDS_FIRST)
    except Exception as exc:  # noqa: BLE001 - croniter raises many kinds for bad input
        raise Refused("cron_invalid_expression", detail=str(exc) or type(exc).__name__) \
            from None


def cron_next(iterator: croniter, tz: str | None, after_ms: float) -> float:
    """The first time after ``after_ms`` a parsed expression fires, in ``tz`` (BQ-CRON-1/2).
    An expression that matches no date in croniter's search window (50 years: ``* * 31 2 *``)
    is refused; that search is the costliest case, a few milliseconds."""
    try:
        return iterator.get_next(float, start_time=_start(tz, after_ms)) * 1000
    except Exception as exc:  # noqa: BLE001 - croniter raises many kinds for bad input
        raise Refused("cron_invalid_expression", detail=str(exc) or type(exc).__name__) \
            from None


def _start(tz: str | None, at_ms: float) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, ZoneInfo(tz) if tz else UTC)
