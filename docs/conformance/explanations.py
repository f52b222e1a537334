"""The hand-written explanations of the report of the real bunqueue 2.9.5 server, in the words
of the documents and of the wire transcripts they were written from (see make_report.py).

:func:`deviations` are the FAIL cases: each rests on a requirement the documents state (basis
``stated``, a MUST with its quote). :func:`readings` are NON-STRICT cases grouped the same way:
each rests on a requirement that is a reading of the documents (basis ``implied``, a SHOULD),
so the server's behaviour is reported with its evidence but does not fail the run.
:data:`FINDINGS` are single NON-STRICT cases with a short note."""

from __future__ import annotations

from report_parts import Evidence, Finding, Section


def _limit_cmd(case_id: str) -> str:
    return case_id.split(".")[3]


def _queue_name_reason(case_id: str) -> str:
    cmd = _limit_cmd(case_id)
    if ".queue_name_length." in case_id:
        return f"{cmd} accepts a queue name that is empty or longer than 256 chars (BQ-LIMIT-1)"
    return f"{cmd} accepts a queue name with characters outside [a-zA-Z0-9_\\-.:] (BQ-LIMIT-2)"


def deviations(fails: list[str]) -> list[Section]:
    """The FAIL cases' deviations, in page order; each names stated requirements (MUST).
    ``fails`` (the run's FAIL ids) only sizes the limit lists."""
    limit_q = sorted(i for i in fails if i.startswith("bunqueue.limit.queue_name_length."))
    limit_p = sorted(i for i in fails if i.startswith("bunqueue.limit.queue_name_pattern."))
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
            "GetState answers states outside the documented five", ["BQ-JOB-1"],
            "001, GetState: \"{ ok: true, id: string, state: 'waiting' | 'delayed' | 'active' | "
            "'completed' | 'failed' }\"; Response Format: \"On failure ok is false with an error "
            'string."',
            "A waiting job pushed with a priority above 0 is reported `prioritized`; a job held "
            "by its `dependsOn` is reported `waiting-children`; an id no job has is answered "
            '`ok: true` with `state: "unknown"` instead of an error. All three values are '
            "outside the documented type. (BQ-JOB-13, the error for an unknown id, is a queuewire "
            "reading of the documents, rated SHOULD; the FAIL rests on the documented `state` "
            "type, which the reply breaks either way.)",
            [Evidence("bunqueue.job.state-waiting-priority", cmds=("PUSH", "GetState")),
             Evidence("bunqueue.deps.waiting-state", cmds=("PUSH", "GetState")),
             Evidence("bunqueue.query.get-state-unknown")],
            ["bunqueue.job.state-waiting-priority", "bunqueue.deps.waiting-state",
             "bunqueue.query.get-state-unknown"],
            lambda case_id: {
                "bunqueue.job.state-waiting-priority":
                    "GetState of a waiting job with priority > 0 answers 'prioritized', outside "
                    "the five documented states (BQ-JOB-1)",
                "bunqueue.deps.waiting-state":
                    "GetState answers 'waiting-children', outside the five documented states "
                    "(BQ-JOB-1)",
                "bunqueue.query.get-state-unknown":
                    "GetState of an unknown id answers ok with state 'unknown', not a documented "
                    "state (BQ-JOB-1)",
            }[case_id],
            note="`bunqueue.deps.waiting-state` also records, at SHOULD, that the held job is not "
                 "counted as `waiting` (BQ-DEPS-5, a queuewire decision)."),
        Section(
            "GetJobCounts and GetJobs do not count or list prioritized or paused jobs as waiting",
            ["BQ-CMD-GetJobCounts", "BQ-CMD-GetJobs"],
            '001, GetJobCounts: "Get job counts grouped by state." Response "counts: { waiting: '
            'number, delayed: number, active: number, completed: number, failed: number }"; '
            'GetJobs: "List jobs with filtering and pagination." `state?: string`',
            "With two waiting jobs, one of them pushed with priority 5, `counts.waiting` is 1 and "
            "an extra `prioritized: 1` holds the other; with the queue paused, a waiting job "
            "(GetState answers `waiting` for it) is counted under an extra `paused` and "
            "`waiting` is 0. GetJobs with `state: waiting` answers `jobs: []` for the same two "
            "jobs. The documents group jobs by the five states, and both jobs are in the state "
            "`waiting`. One behaviour of the server, seen through two commands: it keeps waiting "
            "jobs with a priority, and those of a paused queue, in states of their own "
            "(`prioritized`, `paused`) that the documents do not have.",
            [Evidence("bunqueue.queue.job-counts-priority", cmds=("GetJobCounts",)),
             Evidence("bunqueue.queue.job-counts-paused", cmds=("GetState", "GetJobCounts")),
             Evidence("bunqueue.queue.get-jobs-paused-waiting", cmds=("GetState", "GetJobs"))],
            ["bunqueue.queue.job-counts-priority", "bunqueue.queue.job-counts-paused",
             "bunqueue.queue.get-jobs-priority-waiting", "bunqueue.queue.get-jobs-paused-waiting"],
            lambda case_id: {
                "bunqueue.queue.get-jobs-priority-waiting":
                    "GetJobs state waiting leaves out a waiting job with priority > 0 "
                    "(BQ-CMD-GetJobs)",
                "bunqueue.queue.get-jobs-paused-waiting":
                    "GetJobs state waiting leaves out the waiting jobs of a paused queue "
                    "(BQ-CMD-GetJobs)",
                "bunqueue.queue.job-counts-priority":
                    "GetJobCounts counts a waiting job with priority > 0 as 'prioritized', not "
                    "waiting (BQ-CMD-GetJobCounts)",
                "bunqueue.queue.job-counts-paused":
                    "GetJobCounts counts the waiting jobs of a paused queue as 'paused', not "
                    "waiting (BQ-CMD-GetJobCounts)",
            }[case_id]),
        Section(
            "GetJobByCustomId does not find a completed or failed job", ["BQ-CUSTOMID-2"],
            '001, GetJobByCustomId: "Returns an error if no job with that custom ID exists."',
            "After a job pushed with a custom id is pulled and acknowledged, GetJobByCustomId "
            "answers `Job not found`, while GetState answers `completed` and GetJob finds the "
            "job; the same for a job failed with `maxAttempts: 1` (GetState answers `failed`). "
            "The job exists, so the documented error does not apply.",
            [Evidence("bunqueue.customid.lookup-completed"),
             Evidence("bunqueue.customid.lookup-failed", cmds=("GetState", "GetJob",
                                                                "GetJobByCustomId"))],
            ["bunqueue.customid.lookup-completed", "bunqueue.customid.lookup-failed"],
            lambda case_id: {
                "bunqueue.customid.lookup-completed":
                    "GetJobByCustomId of a completed job answers Job not found although the job "
                    "exists (BQ-CUSTOMID-2)",
                "bunqueue.customid.lookup-failed":
                    "GetJobByCustomId of a failed job answers Job not found although the job "
                    "exists (BQ-CUSTOMID-2)",
            }[case_id]),
        Section(
            "Discard refuses an active job pulled with an owner", ["BQ-JOB-7"],
            '001, Discard: "Discard a job by moving it to the dead-letter queue." Its request is '
            "`{ cmd: 'Discard', id: string }`: no lock token.",
            "A job pulled with `owner` (so it holds a lock) is refused by Discard with `Lock token "
            "required for job ...`; the request has no field that could carry a token, so a "
            "client following 001 cannot discard such a job at all. Without an owner the same "
            "Discard succeeds (`bunqueue.job.discard-active` passes).",
            [Evidence("bunqueue.job.discard-locked-active", cmds=("PULL", "Discard"))],
            ["bunqueue.job.discard-locked-active"],
            "Discard of an active job pulled with an owner answers Lock token required; 001 "
            "gives Discard no token (BQ-JOB-7)"),
        Section(
            "Update refuses a completed job", ["BQ-CMD-Update"],
            '001, Update: "Update the data payload of an existing job."',
            "After the job is pulled and acknowledged (GetState: `completed`), Update answers "
            "`Job not found or cannot be updated`. The job exists, and 001 puts no state "
            "condition on Update.",
            [Evidence("bunqueue.job.update-completed", cmds=("GetState", "Update"))],
            ["bunqueue.job.update-completed"],
            "Update of a completed job answers Job not found or cannot be updated (BQ-CMD-Update)"),
        Section(
            "AddWebhook accepts localhost and a metadata host spelled with a trailing dot",
            ["BQ-WEBHOOK-1"],
            '001, AddWebhook: "URLs are validated to prevent SSRF (localhost, private IPs, and '
            'cloud metadata endpoints are blocked)."',
            "`http://localhost./hook` and `http://metadata.google.internal./computeMetadata/v1/` "
            "are registered (`ok`, a webhookId); without the final dot both are refused. A "
            "trailing dot is the fully-qualified spelling of the same name, which every resolver "
            "maps to the same address, so the block is bypassed. (Other names a resolver maps "
            "to a blocked address, such as `localhost.localdomain` or `100.100.100.200`, are "
            "readings, under *Readings* below.) The case removes the webhooks it made.",
            [Evidence("bunqueue.webhook.ssrf-trailing-dot", cmds=("AddWebhook",))],
            ["bunqueue.webhook.ssrf-trailing-dot"],
            "AddWebhook registers http://localhost./ and http://metadata.google.internal./ "
            "(BQ-WEBHOOK-1)"),
        Section(
            "Clean with a state removes jobs in other states", ["BQ-QUEUE-8"],
            '001, Clean: "Remove jobs older than a grace period, optionally filtered by state." '
            "`state?: string, // Filter by state (optional)`",
            '`Clean {state: "delayed"}` removes both the delayed job and the waiting job '
            "(`count: 2`, both ids): the server treats waiting, delayed, prioritized and paused as "
            "one class (`cleanQueue` in `dist/application/operations/queueControl.js`).",
            [Evidence("bunqueue.queue.clean-state-filter", cmds=("PUSH", "Clean"))],
            ["bunqueue.queue.clean-state-filter"],
            "Clean with state delayed also removes the waiting job (BQ-QUEUE-8)"),
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
            "(BQ-CONN-1)",
            note="**The server's reason**, in its own source (`dist/application/clientTracking.js`, "
            "`releaseClientJobs`): \"A job whose lock has been renewed since pull (renewalCount > "
            "0) is being actively heartbeated by a live worker. With a pooled client, heartbeats "
            "travel on a DIFFERENT connection than the one that pulled, so THIS socket closing "
            "does not mean the worker died\"; lock expiry or stall detection reclaims the job "
            "instead. 000 describes pooled clients (a pool of connections behind one client), so "
            "the reason is a real one; the FAIL stands because 001 and 002 state the release on "
            "close without an exception, and a maintainer who keeps the behaviour would document "
            "it as one."),
        Section(
            "Cron does not validate its queue name", ["BQ-LIMIT-1", "BQ-LIMIT-2"],
            '001, Queue Name Validation: "Queue names must satisfy the following constraints: Not '
            "empty and at most 256 characters; Only alphanumeric characters, underscores, dashes, "
            'dots, and colons: [a-zA-Z0-9_\\-.:]+". 000, Validation Limits: "Queue name | Max 256 '
            'chars, alphanumeric + _-.:"',
            "A Cron whose `queue` is empty, 257 characters long or holds a space or `!` is "
            "accepted, and the jobs it creates go to that queue. PUSH, PUSHB, PULL and PULLB "
            "refuse the same names, so their limit cases pass. (The commands that only look a "
            "queue up accept them too; that is a reading, BQ-LIMIT-13/14, under *Readings* "
            "below.)",
            [Evidence(limit_p[0], cmds=("Cron",))] if limit_p else [],
            limit_q + limit_p, _queue_name_reason),
        Section(
            "Job data over 10 MB is accepted by Update and Cron", ["BQ-LIMIT-3"],
            '001, Job Data Limits: "Job data payloads are limited to 10 MB when serialized." 000: '
            '"Job data | Max 10 MB JSON"',
            "Update and Cron accept data whose JSON is 10 MiB + 1 byte (PUSH refuses it). The "
            "10 MB frame is shown by its first bytes.",
            [Evidence("bunqueue.limit.job_data_bytes.Update.data", cmds=("Update",))],
            ["bunqueue.limit.job_data_bytes.Update.data", "bunqueue.limit.job_data_bytes.Cron.data"],
            lambda case_id: f"{_limit_cmd(case_id)} data over 10 MB is accepted (BQ-LIMIT-3)"),
        Section(
            "Priority outside ±1,000,000 is accepted by ChangePriority and Cron", ["BQ-LIMIT-4"],
            '000, Validation Limits: "Priority | -1,000,000 to +1,000,000"; 001, PUSH: '
            '"priority?: number, // ... range: -1000000 to 1000000"',
            "`ChangePriority {priority: -1000001}` and a Cron with `priority: -1000001` are "
            "answered ok.",
            [Evidence("bunqueue.limit.priority.ChangePriority.priority", cmds=("ChangePriority",))],
            ["bunqueue.limit.priority.ChangePriority.priority",
             "bunqueue.limit.priority.Cron.priority"],
            lambda case_id: f"{_limit_cmd(case_id)} priority outside +-1,000,000 is accepted "
                            "(BQ-LIMIT-4)"),
        Section(
            "MoveToDelayed accepts a negative delay", ["BQ-LIMIT-5"],
            '000, Validation Limits: "Delay | 0 to 365 days"',
            "`MoveToDelayed {delay: -1}` on an active job is answered ok.",
            [Evidence("bunqueue.limit.delay.MoveToDelayed.delay", cmds=("MoveToDelayed",))],
            ["bunqueue.limit.delay.MoveToDelayed.delay"],
            "MoveToDelayed delay -1 is accepted (BQ-LIMIT-5)"),
    ]




FINDINGS = [
    Finding(
        "bunqueue.hello.absent", "BQ-HELLO-3",
        "A long poll and a Ping pipelined on a connection that sent no Hello come back Ping "
        "first: the server serves the connection concurrently, as protocol v2. 000 says "
        '"Older clients without Hello default to v1 (sequential)"; 001 describes parallel '
        "processing without making it depend on Hello, so the spec rates BQ-HELLO-3 a SHOULD "
        "and lists 001's sentence as the one that disagrees."),
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
]

CHANGED_CASES = """\
Changed by the levels review (issue 10), which re-rated the spec so that a FAIL always rests
on a sentence of the documents:

- Every requirement records its basis (`stated`, `implied`, `decision`); `spec lint` refuses
  a MUST that is not stated. 33 requirements that were readings or decisions became SHOULD,
  among them BQ-LOCK-5 (an expired lock's token), BQ-JOB-13 (an error for an unknown id),
  BQ-ENV-6 (a request missing a required field), BQ-LIMIT-12 (Progress 0-100, a code comment).
- New requirements split a stated rule from its reading: BQ-QUEUE-7 (Drain removes *only*
  the waiting jobs) beside BQ-QUEUE-2; BQ-LIMIT-13/14 (queue names in commands that only look
  a queue up) beside BQ-LIMIT-1/2 (commands that add or take jobs); BQ-ENV-7 (`null` where an
  optional field is typed `T | undefined`) apart from each command's shape.
- A reply's shape is judged only by the cases that cite that command (the `shape` cases and
  cases about a reply), so the nine cron cases that failed only on Cron's `timezone: null`
  now judge their own behaviour. `bunqueue.lock.expired-token-refused` no longer cites
  BQ-LOCK-2 (the right token was sent: a false alarm), and
  `bunqueue.query.get-state-unknown` cites BQ-JOB-1, the stated type its reply breaks.
- New cases for deviations the suite missed: `bunqueue.job.state-waiting-priority`,
  `bunqueue.queue.job-counts-priority`, `bunqueue.queue.job-counts-paused`,
  `bunqueue.customid.lookup-completed` (stated, FAIL here); `bunqueue.queue.name-not-string`,
  the `bunqueue.msgpack.*-priority` integer formats (BQ-MSGPACK-9),
  `bunqueue.job.data-name-key-unchanged` (BQ-PUSH-12), `bunqueue.lock.stall-requeued-ack`
  (readings, NON-STRICT here); `bunqueue.auth.failed-reauth` (the documents are silent: INFO).
- Without `--auth-token`, `bunqueue.auth.required` and `bunqueue.auth.invalid-token` only
  observe (INFO): the suite cannot tell a server with tokens from one without, so BQ-AUTH-2
  and BQ-AUTH-3 are not counted as covered by this run.
- Before the review: 79 FAIL cases in 17 deviations; after it: the FAIL and NON-STRICT
  counts of the summary above.

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


def readings(nonstrict: list[str]) -> list[Section]:
    """The NON-STRICT cases whose requirement is a reading of the documents (basis implied, a
    SHOULD), with their evidence, in page order. ``nonstrict`` sizes the lookup lists."""
    lookup = sorted(i for i in nonstrict if i.startswith(("bunqueue.limit.queue_name_length.",
                                                          "bunqueue.limit.queue_name_pattern.")))
    lookup_cmds = ", ".join(sorted({_limit_cmd(i) for i in lookup}))
    return [
        Section(
            "null for optional fields the documents type T | undefined", ["BQ-ENV-7"],
            '001, Cron: "cron: { name: string, queue: string, schedule: string | null, '
            'repeatEvery: number | null, nextRun: number, timezone: string | undefined }"; '
            'CronGet and CronList: "maxLimit: number | undefined, timezone: string | undefined"; '
            'AddWebhook and ListWebhooks: "queue: string | undefined"',
            "Sends `timezone: null` and `maxLimit: null` for a schedule without them, and "
            "`queue: null` for a webhook without a queue filter (MessagePack nil, `c0`). The "
            "document tells `null` (schedule, repeatEvery) from `undefined` (these fields) in "
            "the same object, so this departs from the stated types; but a client reading either "
            "as unset is the common case, so that a null breaks a client is a reading (BQ-ENV-7, "
            "SHOULD). Each command's shape is judged by the cases citing it (the `shape` cases "
            "and `cron.add-get-list-delete`, `cron.priority`); the other cron and webhook "
            "cases use the replies as steps and no longer fail on them.",
            [Evidence("bunqueue.cron.add-get-list-delete", cmds=("Cron", "CronGet", "CronList")),
             Evidence("bunqueue.shape.ListWebhooks", cmds=("AddWebhook", "ListWebhooks"))],
            ["bunqueue.cron.add-get-list-delete", "bunqueue.cron.priority",
             "bunqueue.shape.Cron", "bunqueue.shape.CronGet", "bunqueue.shape.CronList",
             "bunqueue.shape.AddWebhook", "bunqueue.shape.ListWebhooks"], ""),
        Section(
            "Commands that look a queue up accept any queue name",
            ["BQ-LIMIT-13", "BQ-LIMIT-14"],
            '001, Queue Name Validation: "Queue names must satisfy the following constraints: Not '
            "empty and at most 256 characters; Only alphanumeric characters, underscores, dashes, "
            'dots, and colons: [a-zA-Z0-9_\\-.:]+"',
            "An empty name, a 257-character name and a name with a space or `!` are accepted "
            f"(and, for Pause and the like, the queue is created) by: {lookup_cmds}. The "
            "document states what a queue name is; that a command which only looks a queue up "
            "must refuse an invalid one, rather than find nothing, is a reading.",
            [Evidence("bunqueue.limit.queue_name_length.Pause.queue", cmds=("Pause",)),
             Evidence("bunqueue.limit.queue_name_pattern.Pause.queue", cmds=("Pause",))],
            lookup, ""),
        Section(
            "Drain also removes delayed jobs", ["BQ-QUEUE-7"],
            '001, Drain: "Remove all waiting jobs from a queue." Response '
            "`{ ok: true, count: number }`.",
            "With 3 jobs pushed (one then pulled, so 2 waiting) and 1 delayed job, Drain answers "
            "`count: 3`: the delayed job is removed too (bunqueue keeps waiting and delayed jobs "
            "in one priority queue and Drain clears it, `dist/domain/queue/shard/lifecycle.js`). "
            "The waiting jobs are removed, as stated (BQ-QUEUE-2 passes); that Drain removes "
            "*only* those is a reading of the sentence.",
            [Evidence("bunqueue.queue.drain", cmds=("PUSHB", "PUSH", "Drain"))],
            ["bunqueue.queue.drain"], ""),
        Section(
            "An expired lock's token still acknowledges the job", ["BQ-LOCK-5"],
            '001, PULL: "lockTtl?: number // Lock TTL in ms (default: 30000)"',
            "A job pulled with `lockTtl: 200` and not renewed is acknowledged 600 ms later with "
            "the old token: `ok: true`, and the job is `completed`. The documents give the lock a "
            "time-to-live but not the effect of its expiry, so refusing the old token is a "
            "reading (BQ-LOCK-5). The case used to cite BQ-LOCK-2 (ACK needs the token) as well, "
            "which was a false alarm: the right token was sent.",
            [Evidence("bunqueue.lock.expired-token-refused", cmds=("PULL", "ACK", "GetState"))],
            ["bunqueue.lock.expired-token-refused"], ""),
        Section(
            "Requests that break their documented shape are accepted", ["BQ-ENV-6"],
            '001, PUSH: "{ cmd: \'PUSH\', queue: string, data: any, // Job payload (required, '
            'max 10 MB)"',
            "`PUSH` without `data` is answered `ok: true` with a job id; a PUSH with the number "
            "`5` as its queue is accepted too, and the job is kept under the number (`Count "
            "{queue: 5}` finds it, `Count {queue: '5'}` does not). The document gives the "
            "types; that the server refuses a request that breaks them (rather than the client "
            "being at fault) is a reading, and BQ-ENV-6's own quote is about reqId.",
            [Evidence("bunqueue.env.missing-required-field", cmds=("PUSH",)),
             Evidence("bunqueue.queue.name-not-string", cmds=("PUSH", "Count"))],
            ["bunqueue.env.missing-required-field", "bunqueue.queue.name-not-string"], ""),
        Section(
            "AddWebhook accepts other names of localhost and of metadata endpoints",
            ["BQ-WEBHOOK-6"],
            '001, AddWebhook: "URLs are validated to prevent SSRF (localhost, private IPs, and '
            'cloud metadata endpoints are blocked)."',
            "`localhost.localdomain` (the loopback alias of the usual hosts file), `metadata` "
            "(the short name GCP instances resolve to 169.254.169.254), `100.100.100.200` "
            "(Alibaba Cloud's metadata address) and `[64:ff9b::a9fe:a9fe]` (169.254.169.254 "
            "behind NAT64's well-known prefix) are all registered. The sentence names what is "
            "blocked, not its spellings, so that these are blocked too is a reading; the "
            "trailing-dot spellings, the same names, are the deviation above.",
            [Evidence("bunqueue.webhook.ssrf-resolver-aliases", cmds=("AddWebhook",))],
            ["bunqueue.webhook.ssrf-resolver-aliases"], ""),
        Section(
            "AddLog accepts levels outside info, warn and error", ["BQ-ENV-6"],
            "001, AddLog: `level?: 'info' | 'warn' | 'error'`",
            "AddLog with `level: \"debug\"` and with `level: 5` is answered `{added: true}`, "
            "and GetLogs then lists three entries, one with `level: 5` (a number where 001 types "
            "a string). That the server refuses a request outside its documented type is "
            "BQ-ENV-6's reading.",
            [Evidence("bunqueue.log.level-undocumented", cmds=("AddLog", "GetLogs"))],
            ["bunqueue.log.level-undocumented"], ""),
        Section(
            "Metrics reports no active connection", ["BQ-QUERY-4"],
            '001, Metrics: "Get detailed server metrics." `activeConnections: number`',
            "With the case's two connections open, Metrics answers `activeConnections: 0`; it "
            "is a constant 0 in 2.9.5 (`handlers/management.js`). 001 says nothing more of the "
            "field than its name, so that it counts connections is a reading.",
            [Evidence("bunqueue.monitor.metrics-active-connections", cmds=("Metrics",))],
            ["bunqueue.monitor.metrics-active-connections"], ""),
        Section(
            "A priority sent as a 64-bit integer is refused", ["BQ-MSGPACK-9"],
            '001, Wire Format: "The next N bytes are the MessagePack-encoded command or response '
            'object."',
            "`priority: 5` written as int 64 (`d3`) or uint 64 (`cf`) is refused with `priority "
            "must be a number` (msgpackr reads 64-bit integers as BigInt); the 8-, 16- and 32-bit "
            "formats and float64 are accepted. MessagePack asks senders to use the smallest "
            "format but gives every integer format the same meaning, so reading them alike is a "
            "reading of the wire format, not a statement of the documents.",
            [Evidence("bunqueue.msgpack.int64-priority")],
            ["bunqueue.msgpack.int64-priority", "bunqueue.msgpack.uint64-priority"], ""),
        Section(
            "A job's data loses its name key", ["BQ-PUSH-12"],
            '001, PUSH: "data: any, // Job payload (required, max 10 MB)"',
            "A PUSH whose data is `{name: 'legacy', x: 1}` is delivered with data `{x: 1}` and "
            "job name `legacy`: the server moves `data.name` into the job's name (its 2.9.5 "
            "behaviour, which profile `bunqueue/2.9.5` documents as BQ-NAME-102). Under the "
            "documents, which have no job name, the payload is the client's; that it comes "
            "back unchanged is a reading of 'payload'.",
            [Evidence("bunqueue.job.data-name-key-unchanged")],
            ["bunqueue.job.data-name-key-unchanged"], ""),
        Section(
            "ACK without a token completes a job stall detection requeued", ["BQ-JOB-12"],
            '001, ACK: "Acknowledge a job as completed."',
            "A job pulled with a 150 ms lock and not renewed is requeued (waiting) by stall "
            "detection; an ACK without a token then answers `ok: true` and the job is "
            "`completed` although no worker holds it. That ACK applies to active jobs only is "
            "the lifecycle's reading (BQ-JOB-12).",
            [Evidence("bunqueue.lock.stall-requeued-ack")],
            ["bunqueue.lock.stall-requeued-ack"], ""),
        Section(
            "Progress outside 0-100 is accepted", ["BQ-LIMIT-12"],
            '001, Progress: "progress: number, // 0-100"',
            "`Progress {progress: -1}` on an active job is answered ok (the server does not check "
            "the value). The range is a code comment on the request, not a rule of the document.",
            [Evidence("bunqueue.limit.progress.Progress.progress", cmds=("Progress",))],
            ["bunqueue.limit.progress.Progress.progress"], ""),
    ]
