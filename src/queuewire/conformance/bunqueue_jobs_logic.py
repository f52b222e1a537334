"""bunqueue conformance cases that need logic, on jobs: ids, backoff timing, dependencies,
long polls woken from another connection, lock expiry and stalls, webhook delivery over
HTTP, and how a server writes numbers in its replies. The rules of :mod:`.bunqueue_logic`
hold here too (limits from the profile, bounded waits, MUST on *what* happens and a SHOULD of
its own for *how soon*); its helpers are shared."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..codecs.bunqueue import FrameEncoder
from .bunqueue_logic import (
    LOCK_POLL_MS,
    POLL_MS,
    UUID7,
    is_error,
    is_ok,
    obliterate,
    push_job,
    setup_request,
    to_ms,
)
from .context import CaseAbort, CaseContext, Conn


# -- jobs ---------------------------------------------------------------------------------------
async def push_uuidv7(ctx: CaseContext) -> None:
    """A PUSH without jobId answers a UUIDv7 id; PUSHB ids too."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    try:
        ids = [await push_job(ctx, conn, queue) for _ in range(3)]
        reply = await setup_request(ctx, conn, {"cmd": "PUSHB", "queue": queue,
                                                "jobs": [{"data": {"n": 1}}, {"data": {"n": 2}}]}, "PUSHB")
        ids += list(reply.get("ids") or [])
        bad = [i for i in ids if not (isinstance(i, str) and UUID7.match(i))]
        ctx.check(not bad, f"{len(ids)} generated ids are UUIDv7" if not bad else
                  f"generated ids that are not UUIDv7: {bad[:3]}", requirement="BQ-PUSH-10",
                  kind="behaviour", expected="UUIDv7 (version nibble 7, variant 10)",
                  actual=ids)
        ctx.check(len(set(ids)) == len(ids), "the generated ids are distinct",
                  requirement="BQ-PUSH-10", kind="behaviour", actual=ids)
    finally:
        await obliterate(conn, queue)


async def backoff_exponential(ctx: CaseContext) -> None:
    """The retry delay after FAIL number n is backoff * 2^(n-1), measured by long polls.

    Three retries are timed: a server with random jitter (bunqueue 2.9.5 multiplies by 0.5 to
    1.5) then lands inside all three windows by chance about once in a hundred runs rather
    than once in fifteen, so the verdict does not flap between runs."""
    queue = ctx.var("queue")
    backoff = 150
    conn = await ctx.connect()
    try:
        job = await push_job(ctx, conn, queue, maxAttempts=5, backoff=backoff)
        got = await setup_request(ctx, conn, {"cmd": "PULL", "queue": queue}, "PULL")
        if (got.get("job") or {}).get("id") != job:
            raise CaseAbort()
        waits = []
        for attempt in (1, 2, 3):
            t0 = time.monotonic()
            await setup_request(ctx, conn, {"cmd": "FAIL", "id": job, "error": "qw"}, "FAIL")
            reply = await conn.request({"cmd": "PULL", "queue": queue, "timeout": POLL_MS},
                                       timeout=POLL_MS / 1000 + ctx.timeout)
            waited = time.monotonic() - t0
            if not (is_ok(reply) and (reply.get("job") or {}).get("id") == job):
                ctx.check(False, f"after FAIL number {attempt} (backoff {backoff} ms) the job "
                          f"was not handed out again within {POLL_MS} ms: {reply!r}"[:300],
                          requirement="BQ-JOB-5", level="SHOULD", kind="timing",
                          actual=reply)
                return
            waits.append(waited)
        expected = [backoff, backoff * 2, backoff * 4]
        ctx.check(True, f"the job was handed out again after each FAIL (after "
                  f"{[to_ms(w) for w in waits]} ms)", requirement="BQ-JOB-5", kind="behaviour",
                  actual=[to_ms(w) for w in waits])
        close = all(e * 0.85 <= w * 1000 <= e * 1.25 + 60 for e, w in zip(expected, waits))
        ctx.check(close, f"retry delays {[to_ms(w) for w in waits]} ms for backoff {backoff}: "
                  f"expected about {expected} (backoff * 2^(attempts-1), no jitter)",
                  requirement="BQ-JOB-14", kind="timing", expected=expected,
                  actual=[to_ms(w) for w in waits])
    finally:
        await obliterate(conn, queue)


async def children_values(ctx: CaseContext) -> None:
    """GetChildrenValues of a job answers the results of the completed jobs it depends on.

    That the jobs a job depends on are its *children* is queuewire's decision (BQ-DEPS-3): the
    documents name no wire field that makes a job another's child, and bunqueue 2.9.5 links
    children by a parentId they never mention. The case observes (``info``): a server that
    answers {} for a dependsOn parent shows as INFO, never NON-STRICT or FAIL."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    try:
        a = await push_job(ctx, conn, queue, priority=2)
        b = await push_job(ctx, conn, queue, priority=1)
        parent = await push_job(ctx, conn, queue, dependsOn=[a, b])
        pulled = await setup_request(ctx, conn, {"cmd": "PULL", "queue": queue}, "PULL")
        first = (pulled.get("job") or {}).get("id")
        await setup_request(ctx, conn, {"cmd": "ACK", "id": first, "result": {"r": "first"}}, "ACK")
        reply = await conn.request({"cmd": "GetChildrenValues", "id": parent})
        values = ((reply or {}).get("data") or {}).get("values") if is_ok(reply) else None
        ctx.check(values == {first: {"r": "first"}}, f"with one of two children completed, "
                  f"GetChildrenValues answered {values!r}", requirement="BQ-DEPS-3",
                  kind="behaviour", expected={first: {"r": "first"}},
                  actual=reply)
        pulled = await setup_request(ctx, conn, {"cmd": "PULL", "queue": queue}, "PULL")
        second = (pulled.get("job") or {}).get("id")
        await setup_request(ctx, conn, {"cmd": "ACK", "id": second, "result": [2]}, "ACK")
        reply = await conn.request({"cmd": "GetChildrenValues", "id": parent})
        values = ((reply or {}).get("data") or {}).get("values") if is_ok(reply) else None
        want = {first: {"r": "first"}, second: [2]}
        ctx.check(values == want, f"with both children completed, GetChildrenValues answered "
                  f"{values!r}", requirement="BQ-DEPS-3", kind="behaviour",
                  expected=want, actual=reply)
        ctx.check({first, second} == {a, b}, "the children are the jobs the parent depends on",
                  requirement="BQ-DEPS-3", kind="behaviour", actual=[first, second])
        for target, what in ((a, "a job without children"), (ctx.var("uuid"), "an unknown id")):
            reply = await conn.request({"cmd": "GetChildrenValues", "id": target})
            values = ((reply or {}).get("data") or {}).get("values") if is_ok(reply) else None
            ctx.check(values == {}, f"GetChildrenValues of {what} answered {reply!r}"[:300],
                      requirement="BQ-DEPS-2", kind="behaviour", expected={"values": {}},
                      actual=reply)
    finally:
        await obliterate(conn, queue)


async def long_poll_wakes(ctx: CaseContext) -> None:
    """A PULL long-polling an empty queue is answered as soon as another connection pushes."""
    queue = ctx.var("queue")
    poller = await ctx.connect()
    pusher = await ctx.connect()
    try:
        t0 = time.monotonic()
        rid = await poller.send({"cmd": "PULL", "queue": queue, "timeout": POLL_MS})
        await asyncio.sleep(0.15)
        job = await push_job(ctx, pusher, queue)
        frame = await poller.wait_reply(rid, ctx.deadline(POLL_MS / 1000 + ctx.timeout))
        waited = time.monotonic() - t0
        reply = None if frame is None else frame.value
        got = is_ok(reply) and (reply.get("job") or {}).get("id") == job
        ctx.check(got, f"the long poll was answered with the pushed job after {to_ms(waited)} ms"
                  if got else f"the long poll got {reply!r}", requirement="BQ-PULL-1",
                  kind="behaviour", actual=reply)
        if got:
            ctx.check(waited * 1000 < POLL_MS * 0.75, f"it was answered {to_ms(waited)} ms after "
                      f"it was sent, well before its {POLL_MS} ms timeout",
                      requirement="BQ-PULL-1", kind="timing", actual=to_ms(waited))
    finally:
        await obliterate(pusher, queue)


async def waitjob_event(ctx: CaseContext) -> None:
    """WaitJob is answered as soon as the job completes, with its result."""
    queue = ctx.var("queue")
    worker = await ctx.connect()
    waiter = await ctx.connect()
    try:
        job = await push_job(ctx, worker, queue)
        await setup_request(ctx, worker, {"cmd": "PULL", "queue": queue}, "PULL")
        t0 = time.monotonic()
        rid = await waiter.send({"cmd": "WaitJob", "id": job, "timeout": POLL_MS})
        await asyncio.sleep(0.15)
        await setup_request(ctx, worker, {"cmd": "ACK", "id": job, "result": {"done": True}}, "ACK")
        frame = await waiter.wait_reply(rid, ctx.deadline(POLL_MS / 1000 + ctx.timeout))
        waited = time.monotonic() - t0
        reply: Any = None if frame is None else frame.value  # a decoded reply
        ok = is_ok(reply) and reply.get("completed") is True
        ctx.check(ok, f"WaitJob answered {reply!r} after {to_ms(waited)} ms"[:300],
                  requirement="BQ-WAITJOB-1", kind="behaviour",
                  expected={"completed": True}, actual=reply)
        if ok:
            ctx.check(reply.get("result") == {"done": True}, f"WaitJob carried the result "
                      f"{reply.get('result')!r}", requirement="BQ-JOB-10", kind="behaviour",
                      actual=reply.get("result"))
            ctx.check(waited * 1000 < POLL_MS * 0.75, f"WaitJob was answered {to_ms(waited)} ms "
                      f"after it was sent (the ACK came at about 150 ms), not at its timeout",
                      requirement="BQ-WAITJOB-1", kind="timing", actual=to_ms(waited))
    finally:
        await obliterate(worker, queue)


# -- locks and stalls ---------------------------------------------------------------------------
async def _pull_locked(ctx: CaseContext, conn: Conn, queue: str, ttl: int,
                       timeout: int = 0) -> tuple[str | None, str | None]:
    reply = await conn.request({"cmd": "PULL", "queue": queue, "owner": "qw-owner",
                                "lockTtl": ttl, "timeout": timeout},
                               timeout=timeout / 1000 + ctx.timeout)
    if not is_ok(reply) or not reply.get("job"):
        return None, None
    return reply["job"].get("id"), reply.get("token")


async def lock_expiry_token(ctx: CaseContext) -> None:
    """After lockTtl without renewal the token is no longer accepted (and nothing completes)."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    try:
        job = await push_job(ctx, conn, queue)
        got, token = await _pull_locked(ctx, conn, queue, 200)
        if got != job or not token:
            ctx.check(False, "setup: PULL with an owner did not hand out the job and a token",
                      kind="setup")
            return
        await asyncio.sleep(0.6)
        reply = await conn.request({"cmd": "ACK", "id": job, "token": token})
        ctx.check(is_error(reply), f"ACK with the token of a lock that expired 400 ms ago was "
                  f"answered {reply!r}"[:300], requirement="BQ-LOCK-5", kind="reply",
                  expected="an error reply", actual=reply)
        state = await conn.request({"cmd": "GetState", "id": job})
        ctx.check(is_ok(state) and state.get("state") != "completed",
                  f"the job is {state.get('state') if is_ok(state) else state!r} after that "
                  f"ACK", requirement="BQ-LOCK-5", kind="behaviour", actual=state)
    finally:
        await obliterate(conn, queue)


async def lock_expiry_requeue(ctx: CaseContext) -> None:
    """A job whose lock expired is handled as stalled: requeued with attempts incremented."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    other = await ctx.connect()
    try:
        job = await push_job(ctx, conn, queue, maxAttempts=5)
        got, token = await _pull_locked(ctx, conn, queue, 150)
        if got != job:
            ctx.check(False, "setup: PULL with an owner did not hand out the job", kind="setup")
            return
        t0 = time.monotonic()
        again, _ = await _pull_locked(ctx, other, queue, 30000, LOCK_POLL_MS)
        waited = time.monotonic() - t0
        if again != job:
            ctx.check(False, f"the job was not handed out again within {LOCK_POLL_MS} ms of "
                      f"its 150 ms lock (the documents give no deadline; this suite waits "
                      f"{LOCK_POLL_MS} ms)", requirement="BQ-LOCK-5", level="SHOULD",
                      kind="timing", actual=again)
            return
        ctx.check(True, f"the job was handed out again {to_ms(waited)} ms after its lock was "
                  f"taken", requirement="BQ-LOCK-5", kind="behaviour", actual=to_ms(waited))
        info = await other.request({"cmd": "GetJob", "id": job})
        record = (info or {}).get("job") or {}
        ctx.check(record.get("attempts") == 1 and record.get("stallCount") == 1,
                  f"the requeued job has attempts {record.get('attempts')!r} and stallCount "
                  f"{record.get('stallCount')!r}", requirement="BQ-STALL-4", kind="behaviour",
                  expected={"attempts": 1, "stallCount": 1}, actual=record)
    finally:
        await obliterate(other, queue)


async def stall_requeued_ack(ctx: CaseContext) -> None:
    """ACK without a token of a job whose lock expired and which stall detection requeued.

    The job is waiting again (BQ-LOCK-5, BQ-STALL-4), so an ACK is one of a waiting job
    (BQ-JOB-12): refused, the job left waiting. Polls GetState, hence Python."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    try:
        job = await push_job(ctx, conn, queue, maxAttempts=5)
        got, token = await _pull_locked(ctx, conn, queue, 150)
        if got != job or not token:
            ctx.check(False, "setup: PULL with an owner did not hand out the job and a token",
                      kind="setup")
            return
        state = await _state_after_active(conn, job)
        if state != "waiting":
            ctx.check(False, f"{LOCK_POLL_MS} ms after its 150 ms lock was taken the job is "
                      f"{state!r}, not waiting again (the case needs a requeued job)",
                      requirement="BQ-LOCK-5", level="SHOULD", kind="timing",
                      expected="waiting", actual=state)
            return
        ctx.check(True, "the job whose lock expired is waiting again", requirement="BQ-LOCK-5",
                  kind="behaviour", actual=state)
        reply = await conn.request({"cmd": "ACK", "id": job})
        ctx.check(is_error(reply), f"ACK without a token of the requeued (waiting) job was "
                  f"answered {reply!r}"[:300], requirement="BQ-JOB-12", kind="reply",
                  expected="an error reply", actual=reply)
        after = await conn.request({"cmd": "GetState", "id": job})
        now = after.get("state") if is_ok(after) else after
        ctx.check(now == "waiting", f"after that ACK the job is {now!r}",
                  requirement="BQ-JOB-12", kind="behaviour", expected="waiting", actual=after)
    finally:
        await obliterate(conn, queue)


async def _state_after_active(conn: Conn, job: str) -> object:
    """The job's state once it leaves active (or "active" after LOCK_POLL_MS); an error reply
    to GetState is answered as it came."""
    deadline = time.monotonic() + LOCK_POLL_MS / 1000
    state: object = "active"
    while time.monotonic() < deadline:
        reply = await conn.request({"cmd": "GetState", "id": job})
        state = reply.get("state") if is_ok(reply) else reply
        if state != "active":
            break
        await asyncio.sleep(0.05)
    return state


async def stall_to_dlq(ctx: CaseContext) -> None:
    """A job whose lock expires maxStalls times goes to the dead-letter queue."""
    queue = ctx.var("queue")
    max_stalls = int(ctx.profile.model.defaults["maxStalls"])
    conn = await ctx.connect()
    try:
        job = await push_job(ctx, conn, queue, maxAttempts=max_stalls + 5)
        got, _ = await _pull_locked(ctx, conn, queue, 100)
        if got != job:
            ctx.check(False, "setup: PULL with an owner did not hand out the job", kind="setup")
            return
        for stall in range(1, max_stalls):
            again, _ = await _pull_locked(ctx, conn, queue, 100, LOCK_POLL_MS)
            if again != job:
                ctx.check(False, f"after expired lock number {stall} the job was not handed "
                          f"out again within {LOCK_POLL_MS} ms", requirement="BQ-STALL-4",
                          level="SHOULD", kind="timing", actual=again)
                return
        state = await _state_after_active(conn, job)
        if state == "active":
            ctx.check(False, f"after lock number {max_stalls} expired the job was still active "
                      f"{LOCK_POLL_MS} ms later", requirement="BQ-STALL-2", level="SHOULD",
                      kind="timing", actual=state)
            return
        ctx.check(state == "failed", f"after {max_stalls} expired locks (maxStalls) the job is "
                  f"{state!r}", requirement="BQ-STALL-2", kind="behaviour",
                  expected="failed", actual=state)
        dlq = await conn.request({"cmd": "Dlq", "queue": queue})
        ids = [j.get("id") for j in (dlq or {}).get("jobs") or [] if isinstance(j, dict)]
        ctx.check(job in ids, f"the dead-letter queue holds {ids}", requirement="BQ-STALL-2",
                  kind="behaviour", actual=ids)
    finally:
        await obliterate(conn, queue)


async def stall_interval(ctx: CaseContext) -> None:
    """Observation: stallInterval is server configuration (default from the spec)."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    interval = ctx.profile.model.defaults["stallInterval"]
    try:
        job = await push_job(ctx, conn, queue)
        await setup_request(ctx, conn, {"cmd": "PULL", "queue": queue}, "PULL")
        beat = await conn.request({"cmd": "JobHeartbeat", "id": job})
        info = await conn.request({"cmd": "GetJob", "id": job})
        record = (info or {}).get("job") or {}
        ctx.check(is_ok(beat), f"an active job's JobHeartbeat was answered {beat!r}; its "
                  f"stallCount is {record.get('stallCount')!r}. Stall detection after "
                  f"stallInterval ({interval} ms by default) is server configuration and "
                  "longer than a case may wait, so it is not observed here",
                  requirement="BQ-STALL-1", kind="observation", actual=record)
    finally:
        await obliterate(conn, queue)


async def release_timing(ctx: CaseContext) -> None:
    """Observation: how soon a closed connection's job is back (retry logic is internal)."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    other = await ctx.connect()
    try:
        job = await push_job(ctx, conn, queue)
        await setup_request(ctx, conn, {"cmd": "PULL", "queue": queue}, "PULL")
        t0 = time.monotonic()
        await conn.close()
        reply = await other.request({"cmd": "PULL", "queue": queue, "timeout": POLL_MS},
                                    timeout=POLL_MS / 1000 + ctx.timeout)
        waited = to_ms(time.monotonic() - t0)
        back = is_ok(reply) and (reply.get("job") or {}).get("id") == job
        ctx.check(back, f"the job was back {waited} ms after its connection closed (how the "
                  "server retries the release is not observable)" if back else
                  f"the job was not back within {POLL_MS} ms: {reply!r}"[:300],
                  requirement="BQ-CONN-3", kind="observation", actual=waited)
    finally:
        await obliterate(other, queue)


# -- webhooks -----------------------------------------------------------------------------------
async def webhook_http(ctx: CaseContext) -> None:
    """Observation: is a plain http URL to a public host accepted? (https is for production)"""
    conn = await ctx.connect()
    reply = await conn.request({"cmd": "AddWebhook", "url": f"http://example.com/{ctx.var('queue')}",
                                "events": ["job.completed"]})
    hook = ((reply or {}).get("data") or {}).get("webhookId") if is_ok(reply) else None
    if hook:
        await conn.request({"cmd": "RemoveWebhook", "webhookId": hook})
    ctx.check(is_ok(reply) or is_error(reply), "a plain http webhook URL was "
              f"{'accepted' if is_ok(reply) else 'refused: ' + repr((reply or {}).get('error'))}",
              requirement="BQ-WEBHOOK-2", kind="observation", actual=reply)


# -- MessagePack numbers in replies -------------------------------------------------------------
def _wide_ints(raw: bytes) -> list[int]:
    """Offsets of 64-bit integer formats (uint64 cf, int64 d3) in one MessagePack object."""
    out: list[int] = []
    pos = 0

    def skip(n: int = 1) -> None:
        nonlocal pos
        for _ in range(n):
            one()

    def one() -> None:
        nonlocal pos
        b = raw[pos]
        pos += 1
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):
            return
        if 0x80 <= b <= 0x8F:
            skip(2 * (b & 0x0F))
        elif 0x90 <= b <= 0x9F:
            skip(b & 0x0F)
        elif 0xA0 <= b <= 0xBF:
            pos += b & 0x1F
        elif b in (0xCF, 0xD3):
            out.append(pos - 1)
            pos += 8
        else:
            sizes = {0xCC: 1, 0xD0: 1, 0xCD: 2, 0xD1: 2, 0xCE: 4, 0xD2: 4, 0xCA: 4, 0xCB: 8,
                     0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
            if b in sizes:
                pos += sizes[b]
            elif b in (0xC4, 0xD9):
                pos += 1 + raw[pos]
            elif b in (0xC5, 0xDA):
                pos += 2 + int.from_bytes(raw[pos:pos + 2], "big")
            elif b in (0xC6, 0xDB):
                pos += 4 + int.from_bytes(raw[pos:pos + 4], "big")
            elif b in (0xC7, 0xC8, 0xC9):
                n = {0xC7: 1, 0xC8: 2, 0xC9: 4}[b]
                pos += n + 1 + int.from_bytes(raw[pos:pos + n], "big")
            elif b == 0xDC:
                n = int.from_bytes(raw[pos:pos + 2], "big")
                pos += 2
                skip(n)
            elif b == 0xDD:
                n = int.from_bytes(raw[pos:pos + 4], "big")
                pos += 4
                skip(n)
            elif b == 0xDE:
                n = int.from_bytes(raw[pos:pos + 2], "big")
                pos += 2
                skip(2 * n)
            elif b == 0xDF:
                n = int.from_bytes(raw[pos:pos + 4], "big")
                pos += 4
                skip(2 * n)

    one()
    return out


async def reply_numbers(ctx: CaseContext) -> None:
    """Replies write numbers beyond 32 bits (timestamps) as float64, as msgpackr does."""
    queue = ctx.var("queue")
    conn = await ctx.connect()
    prefix = len(FrameEncoder(ctx.profile).prefix(0))
    try:
        job = await push_job(ctx, conn, queue)
        seen = {}
        for msg in ({"cmd": "Ping"}, {"cmd": "GetJob", "id": job}):
            rid = await conn.send(dict(msg))
            frame = await conn.wait_reply(rid, ctx.deadline())
            if frame is None:
                ctx.check(False, f"{msg['cmd']} was not answered", requirement="BQ-MSGPACK-7",
                          kind="reply")
                return
            seen[msg["cmd"]] = _wide_ints(frame.raw[prefix:])
        bad = {k: v for k, v in seen.items() if v}
        ctx.check(not bad, "no reply used a 64-bit integer format" if not bad else
                  f"replies used 64-bit integer formats (uint64/int64) at payload offsets "
                  f"{bad}; a JavaScript peer decodes those as BigInt", requirement="BQ-MSGPACK-7",
                  kind="behaviour", actual=bad)
    finally:
        await obliterate(conn, queue)
