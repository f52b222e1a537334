"""Commands: PUSH, PUSHB, PULL, PULLB, ACK, ACKB, FAIL (spec/bunqueue/commands/core.yaml)."""

from __future__ import annotations

from ..jobs import BARE_ENTRY_KEYS, BARE_PUSH_KEYS
from ..model import Refused, Wait, int_option


class CoreCommands:
    """The handlers of these commands (mixed into the engine)."""

    # =========================================================================================
    # Commands: core
    # =========================================================================================
    def _cmd_PUSH(self, conn_id: str | None, req: dict, now: float) -> dict:
        plain = self._push_plain
        if plain is not None and req.keys() <= BARE_PUSH_KEYS:
            name = req.get("name")
            if type(name) is str and name:
                return {"ok": True, "id": self._create_one(req["queue"], req, now, plain)}
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
                if type(e) is not dict or not e.keys() <= BARE_ENTRY_KEYS:
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
        return self._pull(conn_id, req, now, max(0, int_option(req.get("count"), 1)), True, deadline)

    def _cmd_ACK(self, conn_id: str | None, req: dict, now: float) -> dict:
        job = self._active(req["id"])
        self._check_lock(job, req.get("token"), now)
        self._complete(job, req.get("result"), now)
        return {"ok": True}

    def _cmd_ACKB(self, conn_id: str | None, req: dict, now: float) -> dict:
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
            job = self._active(job_id)
            self._check_lock(job, tokens[i] if tokens is not None else None, now)
            jobs.append(job)
        if self._batch_paths:  # .batch: the same, in one pass
            self._complete_run(jobs, results, now)
        else:
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
