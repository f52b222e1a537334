"""Commands: Cron, CronDelete, CronList, CronGet (cron.yaml), and the admission of a schedule.

A schedule is admitted, by Cron or when a stored one is loaded at start (:func:`load_crons`),
only within the server's bounds (BQ-SAFE-1, ``safeguards`` of spec/bunqueue/protocol.yaml),
checked cheapest first so that a hostile schedule costs next to nothing:

* its length (``cron_schedule_chars``), before the string is split or parsed: a 1 MB
  schedule took croniter a second to parse, on the event loop, at every firing;
* an expression is then parsed once, and the croniter object is kept on the schedule: a
  firing only asks it for the next run (``timers.cron_next``), it never parses again;
  an interval's ``repeatEvery`` must be at least ``cron_min_interval``;
* the number of schedules (``max_crons``; an update of an existing name keeps its place);
* the firing rate of all schedules together (``cron_rate``): an interval fires
  1000 / repeatEvery times a second, an expression once a second with six fields and once a
  minute with five (``CRON_PERIOD_MS``), a schedule at its maxLimit not at all; an update
  replaces the schedule's own share. The sum is taken over at most ``max_crons`` schedules,
  when a Cron arrives.

A stored schedule outside these bounds (written by an older version, or by hand) is skipped
with a warning naming the rule, and left in the file; one too long is never parsed.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..jobs import CronSchedule
from ..model import CRON_PERIOD_MS, DEFAULT_JOB_NAME, Refused, int_option, only_documented
from ..store import Record
from ..timers import cron_iterator, cron_zone
from .registry import command

log = logging.getLogger(__name__)

# Slack when the firing rates (floats: 1/60 per five-field expression) are added up and
# compared with cron_rate, so that a budget filled exactly is not refused by rounding.
RATE_SLACK = 1e-9

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("Cron")
def cron(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    schedule = req.get("schedule")
    repeat_every = req.get("repeatEvery")
    tz = req.get("timezone")
    if schedule is None and repeat_every is None:
        raise Refused("cron_no_schedule")  # BQ-CRON-7
    if schedule is not None:
        _check_schedule_length(engine, schedule)  # before anything splits or parses it
    if tz is not None:
        cron_zone(tz)
    if schedule is not None:
        repeat_every = None  # schedule wins when both are given
    elif int_option(repeat_every) <= 0:
        raise Refused("cron_invalid_repeat")
    existing = engine._crons.get(req["name"])
    cron = CronSchedule(
        name=req["name"], queue=req["queue"], data=req.get("data"), schedule=schedule,
        repeat_every=int_option(repeat_every) if repeat_every else None,
        priority=int_option(req.get("priority"), 0),
        max_limit=int_option(req["maxLimit"]) if req.get("maxLimit") is not None else None,
        timezone=tz, job_name=req["jobName"] if isinstance(req.get("jobName"), str)
        else DEFAULT_JOB_NAME, next_run=0.0,
        executions=existing.executions if existing else 0,  # BQ-CRON-4: upsert
        generation=next(engine._cron_gen))
    _admit_cron(engine, cron, now)
    cron.next_run = engine._cron_next_run(cron, now)
    engine._crons[cron.name] = cron
    engine.store.put_cron(cron.to_record())
    if not cron.at_limit():
        heapq.heappush(engine._cron_heap, (cron.next_run, cron.generation, cron.name))
    return {"ok": True, "cron": only_documented(cron.wire(), engine._reply_fields["Cron", ("cron",)])}


def _cron(engine: BunqueueEngine, name: Any) -> CronSchedule:
    cron = engine._crons.get(name) if isinstance(name, str) else None
    if cron is None:
        raise Refused("cron_not_found")  # BQ-CRON-5
    return cron


@command("CronDelete")
def cron_delete(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    cron = _cron(engine, req["name"])
    del engine._crons[cron.name]
    engine.store.delete_cron(cron.name)
    return {"ok": True}


@command("CronList")
def cron_list(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    fields = engine._reply_fields["CronList", ("crons", "[]")]
    return {"ok": True, "crons": [only_documented(c.wire(), fields) for c in engine._crons.values()]}


@command("CronGet")
def cron_get(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    return {"ok": True, "cron": only_documented(_cron(engine, req["name"]).wire(),
                                                engine._reply_fields["CronGet", ("cron",)])}


def _check_schedule_length(engine: BunqueueEngine, schedule: Any) -> None:
    if not isinstance(schedule, str):
        raise Refused("cron_invalid_expression", detail="Cron expression must be a string")
    bound = engine.spec.safeguards["cron_schedule_chars"]
    if len(schedule) > bound:
        raise Refused("cron_schedule_too_long", length=len(schedule), max=bound)


def _admit_cron(engine: BunqueueEngine, cron: CronSchedule, now: float) -> None:
    """Check ``cron`` against the bounds (see the module doc), cheapest first, and set its
    parsed expression and period; raises the refusal. Changes no engine state."""
    safe = engine.spec.safeguards
    if cron.schedule is not None:
        _check_schedule_length(engine, cron.schedule)
        cron.iterator = cron_iterator(cron.schedule, cron.timezone, now)
        cron.period_ms = CRON_PERIOD_MS.get(len(cron.iterator.expanded),
                                            min(CRON_PERIOD_MS.values()))
    else:
        every = cron.repeat_every
        if not isinstance(every, (int, float)) or isinstance(every, bool) \
                or not every > 0:  # a stored record is not validated by a schema
            raise Refused("cron_invalid_repeat")
        if every < safe["cron_min_interval"]:
            raise Refused("cron_interval_too_short", min=safe["cron_min_interval"])
        cron.period_ms = float(every)
    if cron.name not in engine._crons and len(engine._crons) >= safe["max_crons"]:
        raise Refused("cron_limit_reached", max=safe["max_crons"])
    others = sum(c.rate() for c in engine._crons.values() if c.name != cron.name)
    if others + cron.rate() > safe["cron_rate"] + RATE_SLACK:
        raise Refused("cron_rate_exceeded", max=safe["cron_rate"])


def load_crons(engine: BunqueueEngine, records: Iterable[Record]) -> None:
    """Recovery: admit each stored schedule as a Cron would be; one outside the bounds
    is skipped with a warning (and stays in the store). Its stored nextRun is kept; one
    long past fires once at the first tick (``_fire_crons``)."""
    now = engine._now()
    for record in records:
        name = record.get("name")
        try:
            cron = CronSchedule.from_record(record)
            _admit_cron(engine, cron, now)
        except Refused as refused:
            log.warning("bunqueue engine: stored cron %.100r skipped: %s", name,
                        engine.error_message(refused.name, **refused.fields))
            continue
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("bunqueue engine: stored cron %.100r skipped: malformed record "
                        "(%s: %.200s)", name, type(exc).__name__, exc)
            continue
        cron.generation = next(engine._cron_gen)
        engine._crons[cron.name] = cron
        if not cron.at_limit():
            heapq.heappush(engine._cron_heap, (cron.next_run, cron.generation, cron.name))
