"""Commands: PUSH, PUSHB, PULL, PULLB, ACK, ACKB, FAIL (spec/bunqueue/commands/core.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import Refused, Wait, int_option
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("PUSH")
def push(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    if engine._batch_paths and engine._push_plain is not None:  # .batch: the same, faster
        return {"ok": True, "id": engine._create_job(req["queue"], req, now, engine._push_plain)}
    engine._check_name(req)
    existing = engine._check_push(req["queue"], req, "jobId")
    if existing is not None:
        return {"ok": True, "id": existing}
    return {"ok": True, "id": engine._create(req["queue"], req, now).id}


@command("PUSHB")
def pushb(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    queue, entries = req["queue"], req["jobs"]
    if engine._batch_paths and engine._pushb_plain is not None:  # .batch: the same, faster
        return {"ok": True,
                "ids": engine._create_jobs(queue, entries, now, engine._pushb_plain, "customId")}
    defaults = engine._pushb_defaults
    seen: set[str] = set()
    answers: list[str | None] = []
    for entry in entries:  # validate the whole batch before adding any of it
        engine._check_name(entry)
        answers.append(engine._check_push(queue, entry, "customId", seen))
        if isinstance(entry.get("customId"), str):
            seen.add(entry["customId"])
    ids = []
    for entry, first in zip(entries, answers):
        # earlier entries of the batch may now hold the custom id or the uniqueKey
        answer = first if first is not None else engine._check_push(queue, entry, "customId")
        ids.append(answer if answer is not None
                   else engine._create(queue, entry, now, custom_key="customId",
                                     defaults=defaults).id)
    return {"ok": True, "ids": ids}


@command("PULL")
def pull(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float,
              deadline: float | None = None) -> dict | Wait:
    return engine._pull(conn_id, req, now, 1, False, deadline)


@command("PULLB")
def pullb(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float,
               deadline: float | None = None) -> dict | Wait:
    return engine._pull(conn_id, req, now, max(0, int_option(req.get("count"), 1)), True, deadline)


@command("ACK")
def ack(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = engine._active(req["id"])
    engine._check_lock(job, req.get("token"), now)
    engine._complete(job, req.get("result"), now)
    return {"ok": True}


@command("ACKB")
def ackb(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    ids, results, tokens = req["ids"], req.get("results"), req.get("tokens")
    if results is not None and len(results) != len(ids):  # BQ-ACKB-1
        raise Refused("ackb_results_length")
    if tokens is not None and len(tokens) != len(ids):
        raise Refused("ackb_tokens_length")
    seen: set[str] = set()
    jobs = []
    for i, job_id in enumerate(ids):  # all or nothing (BQ-JOB-12)
        if job_id in seen:
            raise Refused("job_not_processing", id=job_id)
        seen.add(job_id)
        job = engine._active(job_id)
        engine._check_lock(job, tokens[i] if tokens is not None else None, now)
        jobs.append(job)
    if engine._batch_paths:  # .batch: the same, in one pass
        engine._complete_run(jobs, results, now)
    else:
        for i, job in enumerate(jobs):
            engine._complete(job, results[i] if results is not None else None, now)
    return {"ok": True}


@command("FAIL")
def fail(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    job = engine._active(req["id"])
    engine._check_lock(job, req.get("token"), now)
    if req.get("removeOnFail") is True:
        job.remove_on_fail = True
    engine._fail(job, req.get("error"), now, final=req.get("unrecoverable") is True,
               stack=req.get("stack"))
    return {"ok": True}
