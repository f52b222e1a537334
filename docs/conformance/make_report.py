"""Write the conformance report of the real bunqueue 2.9.5 server and its known-failing list.

The input is two `queuewire conform server --report-dir` directories of runs against the real
server (npm ``bunqueue`` 2.9.5, see the page's *How it was produced*): ``--v2`` under the
default profile ``bunqueue/v2`` (documents 000-002) and ``--p295`` under the extension profile
``bunqueue/2.9.5``, each against a freshly started server. The output is the page
``bunqueue-2.9.5.md`` (``--out``) and ``bunqueue-2.9.5-known-failing.txt``
(``--known-failing``), which ``tests/interop/test_conformance_real_bunqueue.py`` gates on.

The per-deviation explanations below (``SECTIONS``: the documents' words, what the server did,
the notes; ``FINDINGS``: why a NON-STRICT case is not a deviation; the lenient-server list)
were written by hand after reading each case's wire transcript and, where cited, bunqueue's
source; the script only lays them out with the run's numbers, the requirement texts loaded
from the spec and wire evidence decoded from the run's case files (each frame's hex with its
MessagePack decoding). Because those explanations are only true of the run they were written
for, the script refuses to write anything when the run does not match them: a FAIL case no
section explains (a new deviation, or a suite change, must be read and explained first), an
explained case that did not FAIL, a failing MUST check citing a requirement its section does
not name, an ERROR case, a NON-STRICT case no finding explains, a finding whose requirement
the spec no longer rates SHOULD, or a ``bunqueue/2.9.5`` FAIL set other than the ``bunqueue/v2``
one minus the deviations that profile documents. Each refusal is a one-line message and exit
status 2.

Usage (from the repository root)::

    .venv/bin/python docs/conformance/make_report.py --v2 DIR --p295 DIR \\
        --out docs/conformance/bunqueue-2.9.5.md \\
        --known-failing docs/conformance/bunqueue-2.9.5-known-failing.txt
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from queuewire.spec import load_profile

PROFILE = "bunqueue/v2"
JOB_KEYS = ("id", "queue", "data", "attempts", "stallCount")


class ReportError(Exception):
    """The run does not match the hand-written explanations (or an input is unreadable)."""


# --- wire evidence from a report directory's case files -------------------------------------


class Long(str):
    """A string too long to show: its start and length."""


def _frame_bytes(event: dict) -> bytes:
    if event.get("hex") is not None and "zlib_base64" not in event:
        return bytes.fromhex(event["hex"])
    return zlib.decompress(base64.b64decode(event["zlib_base64"]))


def _decode(data: bytes, fallback: object) -> object:
    def ext_hook(code: int, _payload: bytes) -> object:
        return {"$undefined": True} if code == 0 else f"ext{code}"

    try:
        return msgpack.unpackb(data[4:], raw=False, strict_map_key=False, ext_hook=ext_hook)
    except Exception:  # noqa: BLE001 - a frame that is not MessagePack shows as the run decoded it
        return fallback


def _view(v: object) -> object:
    if isinstance(v, dict):
        if v == {"$undefined": True}:
            return "undefined"
        if "createdAt" in v and "attempts" in v:  # a job record: the keys that matter
            out: dict = {k: _view(v[k]) for k in JOB_KEYS if k in v}
            out["…"] = f"{len(v) - len(out)} more keys"
            return out
        return {k: _view(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_view(x) for x in v]
    if isinstance(v, str) and len(v) > 60:
        return Long(v)
    return v


def _render(v: object) -> str:
    if isinstance(v, Long):
        return f'"{v[:16]}…" ({len(v)} characters)'
    if v == "undefined":
        return "undefined"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_render(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_render(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _hex(data: bytes, limit: int = 96) -> str:
    h = data.hex()
    if len(data) <= limit:
        return " ".join(h[i:i + 2] for i in range(0, len(h), 2))
    head = " ".join(h[i:i + 2] for i in range(0, 2 * 48, 2))
    return f"{head} … ({len(data)} bytes in all)"


@dataclass(frozen=True)
class Evidence:
    """Which frames of a case's transcript to show: by reqId, by command, by connection."""

    case: str
    cmds: tuple[str, ...] | None = None
    conns: tuple[int, ...] | None = None
    closes: bool = False

    def render(self, cases_dir: Path) -> str:
        path = cases_dir / f"{self.case}.json"
        try:
            transcript = json.loads(path.read_text())["transcript"]
        except (OSError, ValueError, KeyError) as exc:
            raise ReportError(f"cannot read the transcript of {self.case} ({path}): {exc}") from exc
        reqids: set | None = None
        if self.cmds is not None:
            reqids = set()
            for e in transcript:
                if e["direction"] == "send":
                    dec = _decode(_frame_bytes(e), e.get("decoded"))
                    if isinstance(dec, dict) and dec.get("cmd") in self.cmds:
                        reqids.add(dec.get("reqId"))
        lines = []
        for e in transcript:
            kind = e["direction"]
            if kind == "open":
                continue
            if kind == "close":
                if self.closes:
                    lines.append(f"c{e['conn']} --  {e['note']}")
                continue
            data = _frame_bytes(e)
            dec = _decode(data, e.get("decoded"))
            rid = dec.get("reqId") if isinstance(dec, dict) else None
            if reqids is not None and rid not in reqids:
                continue
            if self.conns is not None and int(e["conn"]) not in self.conns:
                continue
            arrow = "->" if kind == "send" else "<-"
            lines.append(f"c{e['conn']} {arrow} {_render(_view(dec))}")
            lines.append(f"      {_hex(data)}")
        if not lines:
            raise ReportError(f"no frames of {self.case} match the evidence selection {self}")
        return "```text\n" + "\n".join(lines) + "\n```\n"


# --- the hand-written explanations ---------------------------------------------------------


@dataclass
class Section:
    """One deviation: the cases it explains and why, in the documents' words and the server's."""

    title: str
    reqs: list[str]
    docs: str
    did: str
    evidence: list[Evidence]
    cases: list[str]
    reason: str | Callable[[str], str]  # the known-failing comment, ending in its requirements
    note: str | None = None
    also: dict[str, list[str]] = field(default_factory=dict)  # case -> other requirements it fails
    documented_by_295: bool = False  # profile bunqueue/2.9.5 documents this behaviour

    def reason_for(self, case_id: str) -> str:
        return self.reason(case_id) if callable(self.reason) else self.reason


CRON_NULLS = ("Cron/CronGet/CronList answer timezone: null (and maxLimit: null) where 001 says "
              "string | undefined (BQ-CMD-Cron, BQ-CMD-CronGet, BQ-CMD-CronList)")
CRON_ALSO = "; its Cron replies also carry timezone: null (BQ-CMD-Cron)"


def _limit_cmd(case_id: str) -> str:
    return case_id.split(".")[3]


def _queue_name_reason(case_id: str) -> str:
    cmd = _limit_cmd(case_id)
    if ".queue_name_length." in case_id:
        text = (f"a queue name that is empty or longer than 256 chars is accepted by {cmd} "
                "(only PUSH/PUSHB/PULL/PULLB validate) (BQ-LIMIT-1)")
    else:
        text = (f"a queue name with characters outside [a-zA-Z0-9_\\-.:] is accepted by {cmd} "
                "(BQ-LIMIT-2)")
    return text + (CRON_ALSO if cmd == "Cron" else "")


def _cron_limit_reason(text: str) -> Callable[[str], str]:
    return lambda case_id: text.format(cmd=_limit_cmd(case_id)) + (
        CRON_ALSO if _limit_cmd(case_id) == "Cron" else "")


def sections(fails: list[str]) -> list[Section]:
    """The deviations, in page order. `fails` (the run's FAIL ids) only sizes the limit lists."""
    limit_q = sorted(i for i in fails if i.startswith("bunqueue.limit.queue_name_length."))
    limit_p = sorted(i for i in fails if i.startswith("bunqueue.limit.queue_name_pattern."))
    queue_name_cmds = ", ".join(_limit_cmd(i) for i in limit_q)
    cron_shape = ["BQ-CMD-Cron"]
    return [
        Section(
            "Hello announces protocol version 3 and a second capability", ["BQ-HELLO-2"],
            '001, Protocol Negotiation (Hello): "The current protocol version is 2. The only '
            'supported capability is pipelining."',
            'Answers `protocolVersion: 3` and `capabilities: ["pipelining", "separate-job-name"]` '
            "to a `Hello` with version 2.",
            [Evidence("bunqueue.hello.version")],
            ["bunqueue.hello.version", "bunqueue.shape.Hello"],
            "Hello answers protocolVersion 3 and capabilities [pipelining, separate-job-name]; "
            "001 says 2 and pipelining only (BQ-HELLO-2)",
            note="Not a deviation under profile `bunqueue/2.9.5`, which documents exactly this.",
            documented_by_295=True),
        Section(
            "Stats names its counters waiting/active, not queued/processing", ["BQ-CMD-Stats"],
            '001, Stats: "stats: { queued: number, // Waiting jobs  processing: number, // Active '
            'jobs  delayed: number, dlq: number, completed: number, uptime: number, pushPerSec: '
            'number, pullPerSec: number }"',
            "`stats` has `waiting` and `active` (and an extra `failed`) instead of the required "
            "`queued` and `processing`.",
            [Evidence("bunqueue.shape.Stats", cmds=("Stats",))],
            ["bunqueue.shape.Stats", "bunqueue.monitor.stats-counts"],
            "Stats answers waiting/active instead of the documented queued/processing "
            "(BQ-CMD-Stats)"),
        Section(
            "ListQueues answers bare names", ["BQ-CMD-ListQueues"],
            '001, ListQueues: "queues: Array<{ name: string, waiting: number, delayed: number, '
            'active: number, paused: boolean }>"',
            "`queues` is a list of queue-name strings.",
            [Evidence("bunqueue.shape.ListQueues", cmds=("ListQueues",))],
            ["bunqueue.shape.ListQueues", "bunqueue.query.list-queues"],
            "ListQueues answers bare queue-name strings, not {name, waiting, delayed, active, "
            "paused} (BQ-CMD-ListQueues)"),
        Section(
            "Cron, CronGet and CronList answer null for an unset timezone and maxLimit",
            ["BQ-CMD-Cron", "BQ-CMD-CronGet", "BQ-CMD-CronList"],
            '001, Cron: "cron: { name: string, queue: string, schedule: string | null, '
            'repeatEvery: number | null, nextRun: number, timezone: string | undefined }"; '
            'CronGet and CronList: "maxLimit: number | undefined, timezone: string | undefined"',
            "Sends `timezone: null` and `maxLimit: null` (MessagePack nil, `c0`) when they are "
            "unset. The documents allow `null` for `schedule` and `repeatEvery` and, by contrast, "
            "`undefined` (absent) for these two. Every case that creates a schedule fails on the "
            "Cron reply.",
            [Evidence("bunqueue.cron.add-get-list-delete", cmds=("Cron", "CronGet", "CronList"))],
            ["bunqueue.cron.add-get-list-delete", "bunqueue.cron.delete-stops",
             "bunqueue.cron.max-limit", "bunqueue.cron.priority", "bunqueue.cron.repeat-fires",
             "bunqueue.cron.schedule-wins", "bunqueue.cron.six-fields", "bunqueue.cron.timezone",
             "bunqueue.cron.update-same-name", "bunqueue.shape.Cron", "bunqueue.shape.CronDelete",
             "bunqueue.shape.CronGet", "bunqueue.shape.CronList"],
            CRON_NULLS,
            note="`bunqueue.limit.queue_name_pattern.Cron.queue` and "
                 "`bunqueue.limit.job_data_bytes.Cron.data` show the same Cron reply too; they "
                 "are listed under their limits."),
        Section(
            "AddWebhook and ListWebhooks answer queue: null",
            ["BQ-CMD-AddWebhook", "BQ-CMD-ListWebhooks"],
            '001, AddWebhook: "data: { webhookId: string, url: string, events: string[], queue: '
            'string | undefined, createdAt: number }"; ListWebhooks: "queue: string | undefined"',
            "A webhook registered without a queue filter is answered and listed with "
            "`queue: null`.",
            [Evidence("bunqueue.shape.ListWebhooks", cmds=("AddWebhook", "ListWebhooks"))],
            ["bunqueue.shape.AddWebhook", "bunqueue.shape.ListWebhooks",
             "bunqueue.shape.RemoveWebhook", "bunqueue.webhook.secret"],
            "AddWebhook/ListWebhooks answer queue: null where 001 says string | undefined "
            "(BQ-CMD-AddWebhook, BQ-CMD-ListWebhooks)"),
        Section(
            "GetState answers states outside the documented five", ["BQ-JOB-1", "BQ-JOB-13"],
            "001, GetState: \"{ ok: true, id: string, state: 'waiting' | 'delayed' | 'active' | "
            "'completed' | 'failed' }\"; Response Format: \"On failure ok is false with an error "
            'string."',
            "A job held by its `dependsOn` is reported `waiting-children`; an id no job has is "
            'answered `ok: true` with `state: "unknown"` instead of an error. Both values are '
            "outside the documented type. (BQ-JOB-13, the error for an unknown id, is a queuewire "
            "reading of the documents; the reply breaks the documented `state` type either way.)",
            [Evidence("bunqueue.deps.waiting-state", cmds=("PUSH", "GetState")),
             Evidence("bunqueue.query.get-state-unknown")],
            ["bunqueue.deps.waiting-state", "bunqueue.query.get-state-unknown"],
            lambda case_id: {
                "bunqueue.deps.waiting-state":
                    "GetState answers 'waiting-children', outside the five documented states "
                    "(BQ-JOB-1)",
                "bunqueue.query.get-state-unknown":
                    "GetState of an unknown id answers ok with state 'unknown' (not a documented "
                    "state) instead of an error (BQ-JOB-13, BQ-JOB-1)",
            }[case_id],
            note="`bunqueue.deps.waiting-state` also records, at SHOULD, that the held job is not "
                 "counted as `waiting` (BQ-DEPS-5, a queuewire decision)."),
        Section(
            "Drain also removes delayed jobs", ["BQ-QUEUE-2"],
            '001, Drain: "Remove all waiting jobs from a queue." Response '
            "`{ ok: true, count: number }`.",
            "With 3 jobs pushed (one then pulled, so 2 waiting) and 1 delayed job, Drain answers "
            "`count: 3`: the delayed job is removed too (bunqueue keeps waiting and delayed jobs "
            "in one priority queue and Drain clears it, `dist/domain/queue/shard/lifecycle.js`).",
            [Evidence("bunqueue.queue.drain", cmds=("PUSHB", "PUSH", "Drain"))],
            ["bunqueue.queue.drain"],
            "Drain also removes delayed jobs (count 3 for 2 waiting + 1 delayed) (BQ-QUEUE-2)"),
        Section(
            "Clean with a state removes jobs in other states", ["BQ-QUEUE-4"],
            '001, Clean: "Remove jobs older than a grace period, optionally filtered by state." '
            "`state?: string, // Filter by state (optional)`",
            '`Clean {state: "delayed"}` removes both the delayed job and the waiting job '
            "(`count: 2`, both ids): the server treats waiting, delayed, prioritized and paused as "
            "one class (`cleanQueue` in `dist/application/operations/queueControl.js`).",
            [Evidence("bunqueue.queue.clean-state-filter", cmds=("PUSH", "Clean"))],
            ["bunqueue.queue.clean-state-filter"],
            "Clean with state delayed also removes the waiting job (BQ-QUEUE-4)"),
        Section(
            "Count counts only waiting and delayed jobs", ["BQ-CMD-Count"],
            '001, Count: "Get the total number of jobs in a queue (all states)."',
            "After 3 + 1 delayed pushes, one job completed and one active, Count answers 2 (the "
            "waiting and the delayed job); the completed and the active job are not counted "
            "(`getQueueCount` returns the size of the waiting/delayed queue).",
            [Evidence("bunqueue.queue.count-all-states", cmds=("PUSHB", "PUSH", "Count"))],
            ["bunqueue.queue.count-all-states"],
            "Count counts only waiting + delayed jobs, not all states (BQ-CMD-Count)"),
        Section(
            "A closed connection's heartbeated job is not released", ["BQ-CONN-1"],
            '001, Connection Lifecycle: "When a TCP connection closes, the server automatically '
            'releases all jobs that were being processed by that client back to their queues." '
            '002, Client Disconnect Handling: "Releases job locks (returns to queue)".',
            "A job pulled with an owner and renewed once with JobHeartbeat stays active after its "
            "connection closes; a PULL on another connection waiting 2 s gets `job: null` (its "
            "30 s lock would expire much later). bunqueue requeues on close only jobs whose lock "
            "was never renewed (`dist/application/clientTracking.js`); the sibling case without "
            "the heartbeat, `bunqueue.conn.close-releases-locked-job`, passes.",
            [Evidence("bunqueue.conn.close-releases-heartbeated-job", closes=True,
                      cmds=("PUSH", "PULL", "JobHeartbeat"))],
            ["bunqueue.conn.close-releases-heartbeated-job"],
            "a closed connection's job whose lock was renewed by JobHeartbeat is not released "
            "(BQ-CONN-1)"),
        Section(
            "An expired lock's token still acknowledges the job", ["BQ-LOCK-5", "BQ-LOCK-2"],
            '001, PULL: "lockTtl?: number // Lock TTL in ms (default: 30000)" and "The token must '
            'be passed to ACK or FAIL to verify ownership."',
            "A job pulled with `lockTtl: 200` and not renewed is acknowledged 600 ms later with "
            "the old token: `ok: true`, and the job is `completed`. BQ-LOCK-5 (an expired lock's "
            "token is refused) is a queuewire reading: the documents give the lock a time-to-live "
            "but do not spell out the effect of its expiry. It is kept as a MUST because a token "
            "whose lock has lived out its TTL no longer verifies ownership of anything. The "
            "outcome does not depend on bunqueue's 5 s expiry sweep: before the sweep the lock is "
            "still in place; after it, the research probes saw the old token complete the "
            "requeued job as well.",
            [Evidence("bunqueue.lock.expired-token-refused", cmds=("PULL", "ACK", "GetState"))],
            ["bunqueue.lock.expired-token-refused"],
            "ACK with the token of an expired lock is accepted and completes the job "
            "(BQ-LOCK-5, BQ-LOCK-2)"),
        Section(
            "A PUSH without its required data is accepted", ["BQ-ENV-6"],
            '001, PUSH: "data: any, // Job payload (required, max 10 MB)"; Response Format: "On '
            'failure ok is false with an error string."',
            "`PUSH` without `data` is answered `ok: true` with a job id (and the job and its "
            "queue are created).",
            [Evidence("bunqueue.env.missing-required-field", cmds=("PUSH",))],
            ["bunqueue.env.missing-required-field"],
            "PUSH without the required data is accepted (BQ-ENV-6)",
            note="This and the limit sections below are the server being lenient: it executes "
                 "requests that break a documented constraint instead of answering the error "
                 "reply a failed command gets. The documents state the constraints; they do not "
                 "say in so many words that the server refuses, so a reader who takes the "
                 "constraints as binding the client only would call these client errors the "
                 "server tolerates."),
        Section(
            "Queue names are validated only by PUSH, PUSHB, PULL and PULLB",
            ["BQ-LIMIT-1", "BQ-LIMIT-2"],
            '001, Queue Name Validation: "Queue names must satisfy the following constraints: Not '
            "empty and at most 256 characters; Only alphanumeric characters, underscores, dashes, "
            'dots, and colons: [a-zA-Z0-9_\\-.:]+". 000, Validation Limits: "Queue name | Max 256 '
            'chars, alphanumeric + _-.:"',
            "An empty name, a 257-character name and a name with a space or `!` are accepted "
            f"(and, for Pause and the like, the queue is created) by: {queue_name_cmds}. PUSH, "
            "PUSHB, PULL and PULLB refuse the same names, so their limit cases pass.",
            [Evidence("bunqueue.limit.queue_name_length.Pause.queue", cmds=("Pause",)),
             Evidence("bunqueue.limit.queue_name_pattern.Pause.queue", cmds=("Pause",))],
            limit_q + limit_p, _queue_name_reason,
            also={i: cron_shape for i in limit_q + limit_p if _limit_cmd(i) == "Cron"}),
        Section(
            "Job data over 10 MB is accepted by Update and Cron", ["BQ-LIMIT-3"],
            '001, Job Data Limits: "Job data payloads are limited to 10 MB when serialized." 000: '
            '"Job data | Max 10 MB JSON"',
            "Update and Cron accept data whose JSON is 10 MiB + 1 byte (PUSH refuses it). The "
            "10 MB frame is shown by its first bytes.",
            [Evidence("bunqueue.limit.job_data_bytes.Update.data", cmds=("Update",))],
            ["bunqueue.limit.job_data_bytes.Update.data", "bunqueue.limit.job_data_bytes.Cron.data"],
            _cron_limit_reason("{cmd} data over 10 MB is accepted (BQ-LIMIT-3)"),
            also={"bunqueue.limit.job_data_bytes.Cron.data": cron_shape}),
        Section(
            "Priority outside ±1,000,000 is accepted by ChangePriority and Cron", ["BQ-LIMIT-4"],
            '000, Validation Limits: "Priority | -1,000,000 to +1,000,000"; 001, PUSH: '
            '"priority?: number, // ... range: -1000000 to 1000000"',
            "`ChangePriority {priority: -1000001}` and a Cron with `priority: -1000001` are "
            "answered ok.",
            [Evidence("bunqueue.limit.priority.ChangePriority.priority", cmds=("ChangePriority",))],
            ["bunqueue.limit.priority.ChangePriority.priority",
             "bunqueue.limit.priority.Cron.priority"],
            _cron_limit_reason("{cmd} priority outside +-1,000,000 is accepted (BQ-LIMIT-4)"),
            also={"bunqueue.limit.priority.Cron.priority": cron_shape}),
        Section(
            "MoveToDelayed accepts a negative delay", ["BQ-LIMIT-5"],
            '000, Validation Limits: "Delay | 0 to 365 days"',
            "`MoveToDelayed {delay: -1}` on an active job is answered ok.",
            [Evidence("bunqueue.limit.delay.MoveToDelayed.delay", cmds=("MoveToDelayed",))],
            ["bunqueue.limit.delay.MoveToDelayed.delay"],
            "MoveToDelayed delay -1 is accepted (BQ-LIMIT-5)"),
        Section(
            "Progress outside 0-100 is accepted", ["BQ-LIMIT-12"],
            '001, Progress: "progress: number, // 0-100"',
            "`Progress {progress: -1}` on an active job is answered ok (the server does not check "
            "the value).",
            [Evidence("bunqueue.limit.progress.Progress.progress", cmds=("Progress",))],
            ["bunqueue.limit.progress.Progress.progress"],
            "Progress outside 0-100 is accepted (BQ-LIMIT-12)"),
    ]


@dataclass(frozen=True)
class Finding:
    """A NON-STRICT case: a SHOULD the server does not follow, and why it is not a deviation."""

    case: str
    requirement: str  # the SHOULD its failing checks cite
    why: str
    may_pass: bool = False  # the server passes it by chance now and then


FINDINGS = [
    Finding(
        "bunqueue.job.ackb-unknown-applies-none", "BQ-JOB-15",
        "BQ-JOB-15 asks that an ACKB naming an unknown id applies none of its entries. The "
        "server answers the ACKB with an error (`Job not found or not in processing state: "
        "<id>`), as BQ-JOB-12 requires, but has already completed the entries before it. "
        'Document 001 says only "Batch acknowledge multiple jobs"; nothing makes ACKB '
        "all-or-nothing, which is why the spec itself rates BQ-JOB-15 a SHOULD."),
    Finding(
        "bunqueue.job.move-to-delayed-waiting", "BQ-JOB-16",
        "MoveToDelayed of a waiting job is accepted and the job becomes delayed. 001 describes "
        'the command for an active job ("Move an active job back to the delayed state") but '
        "does not say a waiting job is refused, and 000's summary says only \"Move job to "
        'delayed state"; the spec itself rates this rule, BQ-JOB-16, a SHOULD.'),
    Finding(
        "bunqueue.deps.children-values", "BQ-DEPS-3",
        "GetChildrenValues of a job pushed with `dependsOn: [a, b]` answers `{}` after a and b "
        "completed. BQ-DEPS-3 reads a job's dependencies as its children; the documents name no "
        "wire field that makes one job another's child (bunqueue links children by a "
        '`parentId` they never mention) and say GetChildrenValues "Returns an empty values '
        'object if the job has no children". The spec itself rates BQ-DEPS-3 a SHOULD because '
        "it is a reading of the documents, not their words."),
    Finding(
        "bunqueue.job.backoff-exponential", "BQ-JOB-14",
        "BQ-JOB-14 (a queuewire decision: no jitter) expects retry delays of 150, 300 and "
        "600 ms for backoff 150. bunqueue multiplies `backoff * 2^attempts` by a random factor "
        "between 0.5 and 1.5 (`calculateBackoff`, `dist/domain/job/state.js`); 001 says only "
        '"exponential backoff".',
        may_pass=True),
]

CHANGED_CASES = """\
Cases changed in the review that first wrote this page:

- `bunqueue.job.ackb-unknown-applies-none`, `bunqueue.job.move-to-delayed-waiting`
  (`cases/bunqueue/lifecycle.yaml`) and `bunqueue.deps.children-values`
  (`bunqueue_logic.children_values`): their checks were MUST (so these cases were FAIL).
  The spec now rates the rules they check SHOULD, for the reasons given above: the
  all-or-nothing ACKB is BQ-JOB-15 and MoveToDelayed's state rule BQ-JOB-16 (both SHOULD),
  and BQ-DEPS-3 is a SHOULD.
- `bunqueue.lock.expired-requeued` and `bunqueue.stall.max-stalls-dlq` waited 2 s for an
  expired lock's job to come back; bunqueue finds expired locks with a sweep every 5 s
  (`stallCheckMs`), so the verdict depended on where the sweep fell. They now wait up to 6 s
  and pass every time (the job comes back with attempts and stallCount incremented, and goes
  to the dead-letter queue after maxStalls).
- `bunqueue.shape.ListQueues`, `.CronList`, `.ListWebhooks`, `.ListWorkers` validated
  whatever other cases had left on the server; they now create one queue, schedule, webhook
  or worker first, so they judge the same reply on a clean server.
- `bunqueue.job.backoff-exponential` times three retries instead of two so that bunqueue's
  jitter rarely lands in all windows by chance.
"""

LENIENT = """
## Where the server is lenient or extends the documents without failing a case

From this run's transcripts and the research probes of the same server
(not every item is exercised by a case):

- Every `{ok: true}` reply carries `id: undefined` (ext 0); a decoder must read ext 0 as
  absent.
- Hello ignores the request's fields (a Hello without `protocolVersion` succeeds).
- The server accepts request fields the documents do not name (PUSH `name`, `parentId`,
  `dedup`...; PULL `group`, `detach`; FAIL `stack`; RetryDlq `count`, `filter`...) and has
  commands document 001 does not list (PUSHF, ExtendLock, ChangeDelay, MoveToWait,
  PromoteJobs, SubscribeEvents, group and dashboard commands...).
- Replies carry extra fields: GetJobCounts adds `prioritized`, `waiting-children`, `paused`;
  Clean adds `ids`; Dlq adds `entries`; Cron entries add `jobName`, `priority`,
  `executions`; RegisterWorker and ListWorkers add worker details; Stats adds `failed`.
- PUSH `backoff` also takes `{type: 'fixed'|'exponential', delay}`; GetJobs `state` also
  takes a list; cron expressions may have 6 fields (leading seconds).
- Lenient request checks beyond the FAILs above: PULLB without `count` answers `jobs: []`;
  Clean without `grace`, RegisterWorker without `queues` succeed; RateLimit and
  SetConcurrency coerce `limit` with `Number()` (`"7"` is accepted); PULL `lockTtl` is not
  type-checked; PUSH and PULL accept the integer `5` as a queue name.
- Stricter than the documents: Cron with neither `schedule` nor `repeatEvery` is refused;
  WaitJob `timeout` is bounded at 600000 ms.
- Found by the research probes, not reached by the suite: Prometheus fails
  (`value.replaceAll is not a function`) once a queue with a non-string name exists, and
  ListWorkers fails (`Invalid mix of BigInt and other type`) once a worker registered with an
  int64 `startedAt`.
"""

KNOWN_FAILING_HEADER = """\
# Known-failing cases of the real bunqueue 2.9.5 server (npm bunqueue@2.9.5) under profile
# bunqueue/v2 (documents 000-002): exactly the FAIL cases of
#   queuewire conform server --protocol bunqueue --target HOST:PORT --http-target HOST:HTTP
# each a deviation from the documents checked by hand; evidence in bunqueue-2.9.5.md.
# Format: the --known-failing file (one case id per line, '# reason (requirement)').
# Written with the page by docs/conformance/make_report.py.
# tests/interop/test_conformance_real_bunqueue.py fails when this list is stale.

"""


# --- checking the run against the explanations ---------------------------------------------


def _load_run(report_dir: Path, profile: str) -> dict:
    path = report_dir / "report.json"
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError) as exc:
        raise ReportError(f"cannot read a conformance report at {path}: {exc}") from exc
    if len(runs) != 1:
        raise ReportError(f"{path} holds {len(runs)} runs; one run per report directory expected")
    run = runs[0]
    if run.get("protocol") != "bunqueue" or run.get("profile") != profile:
        raise ReportError(f"{path} is a {run.get('protocol')} run under profile "
                          f"{run.get('profile')}; expected bunqueue under {profile}")
    return run


def _ids(run: dict, verdict: str) -> list[str]:
    return sorted(c["id"] for c in run["cases"] if c["verdict"] == verdict)


def check_run(run: dict, run295: dict, secs: list[Section], profile) -> None:
    """Raise ReportError unless the runs are exactly what the explanations describe."""
    cases = {c["id"]: c for c in run["cases"]}
    fails = set(_ids(run, "FAIL"))
    for verdict in ("ERROR", "UNIMPLEMENTED"):
        if run["counts"].get(verdict):
            raise ReportError(f"the bunqueue/v2 run has {verdict} cases: {_ids(run, verdict)}")
    explained: dict[str, Section] = {}
    for sec in secs:
        for rid in sec.reqs:
            if rid not in profile.requirements:
                raise ReportError(f"section {sec.title!r} cites {rid}, which {PROFILE} lacks")
        for cid in sec.cases:
            if cid in explained:
                raise ReportError(f"{cid} is explained twice: {explained[cid].title!r} and "
                                  f"{sec.title!r}")
            explained[cid] = sec
    unexplained = sorted(fails - set(explained))
    if unexplained:
        raise ReportError(f"FAIL case(s) no section explains (read the transcripts and write a "
                          f"section first): {', '.join(unexplained)}")
    not_failing = sorted(f"{c} ({cases[c]['verdict'] if c in cases else 'not in the run'})"
                         for c in explained if c not in fails)
    if not_failing:
        raise ReportError(f"explained case(s) that did not FAIL: {', '.join(not_failing)}")
    for cid, sec in explained.items():
        cited = {ch.get("requirement") for ch in cases[cid]["checks"]
                 if not ch["ok"] and ch.get("level") == "MUST"}
        stray = sorted(str(r) for r in cited - set(sec.reqs) - set(sec.also.get(cid, ())))
        if stray:
            raise ReportError(f"{cid} fails MUST checks of {', '.join(stray)}, which its section "
                              f"{sec.title!r} does not name")
    found = {f.case: f for f in FINDINGS}
    nonstrict = set(_ids(run, "NON-STRICT"))
    if nonstrict - set(found):
        raise ReportError(f"NON-STRICT case(s) no finding explains: "
                          f"{', '.join(sorted(nonstrict - set(found)))}")
    for f in FINDINGS:
        verdict = cases[f.case]["verdict"] if f.case in cases else "not in the run"
        if verdict != "NON-STRICT" and not (f.may_pass and verdict == "PASS"):
            raise ReportError(f"finding {f.case} is {verdict}, not NON-STRICT")
        level = profile.requirements[f.requirement].level
        if level != "SHOULD":
            raise ReportError(f"finding {f.case} rests on {f.requirement}, which the spec now "
                              f"rates {level}, not SHOULD")
        cited = {ch.get("requirement") for ch in cases[f.case]["checks"] if not ch["ok"]}
        if verdict == "NON-STRICT" and cited != {f.requirement}:
            raise ReportError(f"finding {f.case} expects failing checks of {f.requirement} only; "
                              f"they cite {', '.join(sorted(map(str, cited)))}")
    want295 = fails - {c for sec in secs if sec.documented_by_295 for c in sec.cases}
    got295 = set(_ids(run295, "FAIL"))
    if got295 != want295:
        raise ReportError(
            f"the bunqueue/2.9.5 FAIL set differs from the bunqueue/v2 one minus the deviations "
            f"that profile documents: extra {sorted(got295 - want295)}, "
            f"missing {sorted(want295 - got295)}")
    if run295["counts"].get("ERROR"):
        raise ReportError(f"the bunqueue/2.9.5 run has ERROR cases: {_ids(run295, 'ERROR')}")


# --- writing --------------------------------------------------------------------------------


def _head_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ReportError(f"cannot read the commit with git rev-parse (give --commit): {exc}") \
            from exc


def render_page(run: dict, run295: dict, secs: list[Section], profile, cases_dir: Path,
                commit: str) -> str:
    cases = {c["id"]: c for c in run["cases"]}
    fails = _ids(run, "FAIL")
    c, cov = run["counts"], run["coverage"]
    n_limit = sum(1 for i in fails if i.startswith("bunqueue.limit."))
    n_queue = sum(1 for i in fails if i.startswith("bunqueue.limit.queue_name_"))
    row = " | ".join(str(c[v]) for v in ("FAIL", "ERROR", "UNIMPLEMENTED", "NON-STRICT", "INFO", "PASS"))
    row = f"| {row} | {run['total']} |"
    documented = [f"`{i}`" for sec in secs if sec.documented_by_295 for i in sec.cases]
    out: list[str] = []
    w = out.append
    w(f"""# bunqueue 2.9.5 against the documents

This page is the conformance report of the **real bunqueue server, npm `bunqueue` 2.9.5**,
against the bunqueue documents 000-002 (profile `bunqueue/v2`). Every FAIL below was checked
by hand against the documents and the wire transcript; the evidence is the bytes the suite
sent and received (each frame as its `u32` big-endian length prefix plus MessagePack payload,
shown as hex with its decoding above it). Requirements that are queuewire readings the
documents do not make binding are rated SHOULD by the spec, so a server that does not follow
them is NON-STRICT, not FAIL (see *Findings that are not deviations* below).

The page and the known-failing list are written by
[`make_report.py`](make_report.py) from the report directories of the two runs below; the
explanations in it were written by hand after reading each transcript, and it refuses to
write anything when the run has a FAIL no explanation covers or an explained case that did
not FAIL.

## How it was produced

- Server: `bunqueue` 2.9.5 from npm (Hello answers `server: "bunqueue", version: "2.9.5"`),
  run by `bun` 1.4.4 from `tests/interop/node_modules` (`make setup`), in-memory storage, no
  auth tokens, the per-connection rate limit lifted so the suite is not throttled:

  ```sh
  cd tests/interop
  RATE_LIMIT_MAX_REQUESTS=1000000000 RATE_LIMIT_WINDOW_MS=60000 LOG_LEVEL=error \\
  PATH="$PWD/node_modules/.bin:$PATH" \\
  node_modules/.bin/bun node_modules/bunqueue/dist/cli/index.js start \\
      --host 127.0.0.1 --tcp-port 17791 --http-port 17792
  ```

- Suite: queuewire at commit `{commit}`; run on {run['started_at'][:10]} with

  ```sh
  queuewire conform server --protocol bunqueue --target 127.0.0.1:17791 \\
      --http-target 127.0.0.1:17792 --report-dir report-v2/
  ```

  and, against a freshly started server, the same with `--profile bunqueue/2.9.5
  --report-dir report-2.9.5/`; then

  ```sh
  .venv/bin/python docs/conformance/make_report.py --v2 report-v2 --p295 report-2.9.5 \\
      --out docs/conformance/bunqueue-2.9.5.md \\
      --known-failing docs/conformance/bunqueue-2.9.5-known-failing.txt
  ```

- Stability: the same FAIL set (the {len(fails)} cases of
  [`bunqueue-2.9.5-known-failing.txt`](bunqueue-2.9.5-known-failing.txt)) came out of four
  full runs during the review that first wrote this page and again at `{commit}`, each
  against a freshly started server; with that file as `--known-failing` the first
  `queuewire conform` command above exits 0.
  `tests/interop/test_conformance_real_bunqueue.py` repeats the run with that file as
  `--known-failing` and fails on any new FAIL, any ERROR, or a listed case that passes.

## Summary

| FAIL | ERROR | UNIMPLEMENTED | NON-STRICT | INFO | PASS | total |
|---:|---:|---:|---:|---:|---:|---:|
{row}

Requirement coverage: {cov['exercised']} of the {cov['applicable']} requirements of
`bunqueue/v2` that bind a server were exercised by a judged check; the other
{len(cov['not_exercised_ids'])} ({', '.join(cov['not_exercised_ids'])}) can only be observed
(INFO cases, see below). {len(cov['out_of_scope_ids'])} requirements bind clients or workers
only and are out of scope for a server run.

The {c['FAIL']} FAIL cases come from {len(secs)} deviations. Most cases fail for one of two
wide ones: the server checks queue names and numeric limits only on PUSH/PUSHB/PULL/PULLB
({n_limit} generated limit cases, {n_queue} of them queue names), and it answers `null` for the
optional `timezone`/`maxLimit`/`queue` fields the documents type `string | undefined` (every
cron and webhook case). The NON-STRICT count can drop by one in a run:
`bunqueue.job.backoff-exponential` passes by chance when the server's random jitter happens
to land in all expected windows (about one run in a hundred).

Under the documented extension profile `bunqueue/2.9.5` (`--profile bunqueue/2.9.5`, which
retires BQ-HELLO-2 for protocol version 3 and the `separate-job-name` capability) the same
run gives {run295['counts']['FAIL']} FAIL ({run295['total']} cases): every case below except
{' and '.join(documented)}.

Replies in the transcripts below carry `id: undefined` (MessagePack ext type 0, bytes
`d4 00 00`) in every plain `{{ok: true}}` reply; that is how msgpackr encodes JavaScript's
`undefined`. queuewire treats it as an absent field, so it is not a deviation.

## Deviations

""")
    for sec in secs:
        w(f"### {' / '.join(sec.reqs)}: {sec.title}\n")
        for rid in sec.reqs:
            r = profile.requirements[rid]
            w(f"- **{rid}** ({r.level}): {r.text}\n")
        w(f"\n**The documents:** {sec.docs}\n\n**The server:** {sec.did}\n\n")
        if sec.note:
            w(f"{sec.note}\n\n")
        w("Wire evidence (`->` sent by the suite, `<-` received; `cN` the connection):\n\n")
        for ev in sec.evidence:
            w(ev.render(cases_dir) + "\n")
        w("Cases: " + ", ".join(f"`{i}`" for i in sec.cases) + ".\n\n")
    w("""## Findings that are not deviations

These cases are NON-STRICT (a SHOULD not followed). Each rests on a queuewire reading that the
documents do not make binding, and the spec rates the requirement its checks cite a SHOULD;
they do not fail the run.

""")
    for f in FINDINGS:
        case = cases[f.case]
        msgs = [ch["message"] for ch in case["checks"] if not ch["ok"]]
        w(f"- `{f.case}` ({case['verdict']} in the run above; {f.requirement}, "
          f"{profile.requirements[f.requirement].level}): {f.why}\n")
        for m in msgs[:2]:
            w(f"  - check: {m}\n")
    w("\n" + CHANGED_CASES + "\n## Observations (INFO)\n\n")
    for cid in _ids(run, "INFO"):
        m = "; ".join(ch["message"] for ch in cases[cid]["checks"])
        w(f"- `{cid}`: {m}\n")
    w(LENIENT)
    return "".join(out)


def render_known_failing(run: dict, secs: list[Section]) -> str:
    reasons = {cid: sec.reason_for(cid) for sec in secs for cid in sec.cases}
    lines = [f"{cid:<62}# {reasons[cid]}" for cid in _ids(run, "FAIL")]
    return KNOWN_FAILING_HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--v2", type=Path, required=True,
                        help="report directory of the run under profile bunqueue/v2")
    parser.add_argument("--p295", type=Path, required=True,
                        help="report directory of the run under profile bunqueue/2.9.5")
    parser.add_argument("--out", type=Path, required=True, help="the page to write")
    parser.add_argument("--known-failing", type=Path, required=True,
                        help="the known-failing list to write")
    parser.add_argument("--commit", help="the suite's commit the page names "
                                         "(default: git rev-parse --short HEAD)")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(PROFILE)
        run = _load_run(args.v2, PROFILE)
        run295 = _load_run(args.p295, "bunqueue/2.9.5")
        secs = sections(_ids(run, "FAIL"))
        check_run(run, run295, secs, profile)
        page = render_page(run, run295, secs, profile, args.v2 / "cases",
                           args.commit or _head_commit())
        known = render_known_failing(run, secs)
    except ReportError as exc:
        print(f"make_report: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(page)
    args.known_failing.write_text(known)
    print(f"wrote {args.out} ({run['counts']['FAIL']} FAIL cases in {len(secs)} deviations) "
          f"and {args.known_failing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
