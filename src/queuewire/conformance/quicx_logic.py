"""quicx conformance cases that need logic: outcomes that branch (a task accepted must be
drained, one refused must not be), figures compared across replies, pools filled to the brim,
and connections that act in several roles.

Each function is an ``async def f(ctx)`` named by a case's ``logic:`` (see
``cases/README.md``, "Python cases"); it talks to the daemon through ``ctx.conn`` (recorded
connections) and judges with ``ctx.check``. Every message name, field name, error code,
limit and behaviour flag comes from ``ctx.profile`` (error codes by name through
``QuicxSpec.error_code``; flags such as ``ready_required_after_result`` or
``forward_results_to_producer`` through ``QuicxSpec.flag``), so one function serves both
profiles. Like the YAML cases, each function leaves the daemon's queue as it found it: every
task it gets accepted is taken by a worker and answered MSG_DONE. The pool case moves tens of
mebibytes; it does that bulk traffic on side connections that are not recorded frame by frame
(the transcript gets a note with the counts) and keeps the frames that decide the verdict on
recorded connections, so the report shows the evidence without holding the whole pool.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, cast

from ..codecs.errors import ProtocolError
from ..codecs.quicx import Message, QuicxDecoder, QuicxEncoder, swap_bytes
from ..spec.quicx import DAEMON, QuicxSpec
from .steps_quicx import (
    KNOWN_SILENCE_S,
    UNANSWERED,
    altered_defect,
    mirror_defect,
    unanswered,
)

SUBMIT, OK, ERROR, READY, TASK = "MSG_SUBMIT", "MSG_OK", "MSG_ERROR", "MSG_READY", "MSG_TASK"
DONE, FAILED, HEARTBEAT, PONG = "MSG_DONE", "MSG_FAILED", "MSG_HEARTBEAT", "MSG_PONG"
STATS, STATS_RESPONSE, WAIT = "MSG_STATS", "MSG_STATS_RESPONSE", "MSG_WAIT"
#: A daemon that answers nothing within this many seconds is taken to stay silent.
QUIET = 0.1
#: Bounds of the pool case: it stops submitting after this many frames or bytes, whichever
#: comes first, and then records that the bound was not reached (the case is INFO).
POOL_MAX_FRAMES = 4096
POOL_MAX_BYTES = 72 << 20
#: Bytes of one write of the bulk connections.
BULK_WRITE = 4 << 20
#: Tasks the pipelining case submits in one write.
PIPELINED = 64


def _spec(ctx: Any) -> QuicxSpec:
    return ctx.profile.model


def _describe(msg: Message | None, spec: QuicxSpec) -> Any:
    if msg is None:
        return "nothing"
    d = msg.as_dict()
    if msg.name == ERROR:
        code: Any = msg.fields.get("error_code")  # a number, or missing from a broken message
        d["error"] = spec.error_names.get(code, code)
    return d


def _is_error(msg: Message | None, spec: QuicxSpec, name: str) -> bool:
    return (msg is not None and msg.name == ERROR
            and msg.fields.get("error_code") == spec.error_code(name))


async def _expect(ctx: Any, msg: Message | None, name: str, what: str, *, requirement: str | None = None,
                  level: str | None = None, **fields: Any) -> bool:
    """Check ``msg`` is message ``name`` with ``fields``."""
    spec = _spec(ctx)
    ok = msg is not None and msg.name == name and all(msg.fields.get(k) == v for k, v in fields.items())
    if not ok and msg is not None and msg.name == name:
        _as_said(ctx, msg, name, fields)
    ctx.check(ok, what, requirement=requirement, level=level, kind="reply",
              expected={"type": name, "fields": fields}, actual=_describe(msg, spec))
    return ok


def _as_said(ctx: Any, msg: Message, name: str, fields: dict[str, Any]) -> None:
    """``msg`` is the message ``name`` but its ``fields`` differ: a defect every case would
    meet (the task type and payload altered, an id in the wrong byte order) is reported once
    per run and stops the case."""
    altered = altered_defect(ctx, name, fields, msg)
    if altered is not None:
        ctx.defect(*altered)


def _as_submitted(ctx: Any, msg: Message, **submitted: Any) -> None:
    """A MSG_TASK must carry the type and payload as submitted (the fields the spec marks
    ``mirrors``): where it does not, that defect is reported once per run and the case stops
    (:meth:`~.context.CaseContext.defect`), rather than a failure of the rule the case tests
    (order, requeue) that the altered bytes would make it look like."""
    mirror = mirror_defect(_spec(ctx), msg.name, submitted, msg)
    if mirror is not None:
        ctx.defect(*mirror)


async def _pong(ctx: Any, conn: Any, requirement: str = "QX-HB-2") -> bool:
    """MSG_HEARTBEAT -> MSG_PONG: the daemon has read everything sent on ``conn`` before."""
    return await _expect(ctx, await _ask(ctx, conn, HEARTBEAT, requirement), PONG,
                         "MSG_HEARTBEAT is answered MSG_PONG", requirement=requirement)


async def _ask(ctx: Any, conn: Any, name: str, requirement: str) -> Message | None:
    """Send the empty request ``name`` and return its answer. One that gets nothing at all
    is a defect every case meets (the request is the same bytes each time): reported once
    per run under ``requirement``, and the case stops (the steps' rule, :mod:`.steps_quicx`)."""
    known = (UNANSWERED, name) in ctx.defects
    msg = await conn.request(name, timeout=KNOWN_SILENCE_S if known else None)
    if msg is None and conn.gone is None and not conn.garbled:
        answer = {HEARTBEAT: PONG, STATS: STATS_RESPONSE}.get(name)
        unanswered(ctx, name, [answer] if answer else [], requirement,
                   f"the daemon does not answer {name} (nothing within "
                   f"{KNOWN_SILENCE_S if known else ctx.timeout:g} s)")
    return msg


async def _take_and_finish(ctx: Any, worker: Any, tid: int, *, requirement: str | None = None) -> None:
    """Have ``worker`` (a fresh worker connection) take task ``tid`` and complete it."""
    msg = await worker.request(READY)
    await _expect(ctx, msg, TASK, f"the waiting worker gets task {tid}",
                  requirement=requirement or "QX-TASK-1", task_id=tid)
    if msg is not None and msg.name == TASK:
        await worker.send(DONE, task_id=msg.fields["task_id"])


def _roles(spec: QuicxSpec, *names: str) -> tuple[str, ...]:
    """Client roles that receive every one of ``names`` (their union when none does)."""
    both = tuple(r for r in spec.peer_roles if all(spec.allowed(n, DAEMON, r) for n in names))
    if both:
        return both[:1]
    return tuple(r for r in spec.peer_roles if any(spec.allowed(n, DAEMON, r) for n in names))


# ----------------------------------------------------------------------------------- sizes
async def submit_of_size(ctx: Any) -> None:
    """A MSG_SUBMIT of ``params.size`` bytes: either accepted (then the task is handed out
    whole) or refused PAYLOAD_TOO_LARGE because its MSG_TASK would not fit; any other answer
    (an invalid-message error, a close, silence) breaks the case's requirement."""
    spec = _spec(ctx)
    size, task_type = ctx.case.params["size"], ctx.case.params["task_type"]
    enc = QuicxEncoder(ctx.profile)
    head = enc.encode(SUBMIT, task_type=task_type, payload=b"")[spec.header_size:]
    payload = (bytes(range(256)) * (size // 256 + 1))[:size - len(head)]
    prod = await ctx.conn(1, role="producer")
    body = head + payload
    await prod.send_raw(enc.frame(spec.message(SUBMIT).code, body),
                        f"MSG_SUBMIT of {len(body)} bytes")
    await _accepted_whole_or_too_large(ctx, spec, await prod.recv(),
                                       f"a {len(body)}-byte MSG_SUBMIT", "the accepted task",
                                       task_type=task_type, payload=payload)


async def _accepted_whole_or_too_large(ctx: Any, spec: Any, msg: Message | None, what: str,
                                       task: str, **fields: Any) -> None:
    """``msg`` answers a MSG_SUBMIT: MSG_OK (then a worker must get the task whole with
    ``fields``, and completes it) or the task-too-large error; anything else fails."""
    too_large = spec.error_names[spec.reply_code("task_too_large")]
    ok = msg is not None and (msg.name == OK or _is_error(msg, spec, too_large))
    ctx.check(ok, f"{what} is accepted or refused {too_large}",
              kind="reply", expected=[OK, f"{ERROR} {too_large}"], actual=_describe(msg, spec))
    if msg is not None and msg.name == OK:
        worker = await ctx.conn(2, role="worker")
        assigned = await worker.request(READY)
        await _expect(ctx, assigned, TASK, f"{task} is handed out whole",
                      requirement="QX-TASK-2", task_id=msg.fields["task_id"], **fields)
        if assigned is not None and assigned.name == TASK:
            await worker.send(DONE, task_id=assigned.fields["task_id"])


async def large_payload(ctx: Any) -> None:
    """quicx/v1 bounds a task only by "the largest size class", whose size 004 does not give:
    a 1 MiB task is accepted (and handed out whole) or refused PAYLOAD_TOO_LARGE; either way
    the connection goes on."""
    spec = _spec(ctx)
    size = ctx.case.params["bytes"]
    payload = bytes(i % 251 for i in range(size))
    prod = await ctx.conn(1, role=_roles(spec, ERROR, PONG)[0])
    await prod.send(SUBMIT, task_type="big", payload=payload)
    await _accepted_whole_or_too_large(ctx, spec, await prod.recv(),
                                       f"a MSG_SUBMIT with a {size}-byte payload",
                                       "the large task", payload=payload)
    await _pong(ctx, prod, "QX-HDR-7")


# ------------------------------------------------------------------------------ pipelining
async def pipelined_submits(ctx: Any) -> None:
    """Many MSG_SUBMITs in one write: one MSG_OK each, in order, with distinct task ids; a
    worker then gets the tasks in the order they were accepted."""
    spec = _spec(ctx)
    enc = QuicxEncoder(ctx.profile)
    n = ctx.case.params.get("count", PIPELINED)
    prod = await ctx.conn(1, role="producer")
    await prod.send_raw(b"".join(enc.encode(SUBMIT, task_type="pipe", payload=str(i).encode())
                                 for i in range(n)), f"{n} MSG_SUBMIT frames in one write")
    ids: list[int] = []
    for _ in range(n):
        msg = await prod.recv()
        if msg is None or msg.name != OK:
            await _expect(ctx, msg, OK, "every pipelined MSG_SUBMIT is answered MSG_OK")
            break
        ids.append(msg.fields["task_id"])
    ctx.check(len(ids) == n, f"{n} pipelined MSG_SUBMITs get {n} MSG_OKs", expected=n,
              actual=len(ids))
    ctx.check(len(set(ids)) == len(ids), "the accepted tasks have distinct ids",
              expected="distinct", actual=ids)
    worker = await ctx.conn(2, role="worker")
    again = bool(spec.flag("ready_required_after_result"))
    await worker.send(READY)
    got: list[tuple[int, bytes]] = []
    for _ in ids:
        msg = await worker.recv()
        if msg is None or msg.name != TASK:
            await _expect(ctx, msg, TASK, "the worker gets the next task")
            break
        if msg.fields["task_id"] in ids:
            _as_submitted(ctx, msg, payload=str(ids.index(msg.fields["task_id"])).encode())
        got.append((msg.fields["task_id"], msg.fields["payload"]))
        await worker.send(DONE, task_id=msg.fields["task_id"])
        if again:
            await worker.send(READY)
    want = [(tid, str(i).encode()) for i, tid in enumerate(ids)]
    ctx.check(got == want, "the worker gets the tasks in the order they were accepted",
              requirement="QX-QUEUE-1", expected=[t for t, _ in want], actual=[t for t, _ in got])


# ---------------------------------------------------------------------------------- roles
async def same_connection_roles(ctx: Any) -> None:
    """One connection submits a task, then registers as a worker and gets that same task; a
    profile that forwards results also tells it (the producer) the task is done."""
    spec = _spec(ctx)
    conn = await ctx.conn(1, role=_roles(spec, OK, TASK, ERROR))
    msg = await conn.request(SUBMIT, task_type="self", payload=b"me")
    if not await _expect(ctx, msg, OK, "MSG_SUBMIT is answered MSG_OK"):
        return
    tid = msg.fields["task_id"]
    task = await conn.request(READY)
    if not await _expect(ctx, task, TASK, "the same connection, now a worker, gets its own task",
                         task_id=tid, task_type="self", payload=b"me"):
        return
    await conn.send(DONE, task_id=tid)
    nxt = await conn.recv(timeout=QUIET)
    if spec.flag("forward_results_to_producer"):
        await _expect(ctx, nxt, DONE, "the connection, as the task's producer, gets its MSG_DONE",
                      requirement="QX-PROD-101", task_id=tid)
    else:
        ctx.check(nxt is None or nxt.name != ERROR, "MSG_DONE from the connection is accepted",
                  expected="no MSG_ERROR", actual=_describe(nxt, spec))


# ---------------------------------------------------------------------------- task types
async def unknown_task_type(ctx: Any) -> None:
    """A task type no daemon is likely configured for: accepted (and handed out) or refused
    UNKNOWN_TASK_TYPE, in which case it is neither queued nor given an id."""
    spec = _spec(ctx)
    name = spec.error_names[spec.reply_code("unknown_task_type")]
    ttype = f"qw-undeclared-{uuid.uuid4().hex[:12]}"
    prod = await ctx.conn(1, role="producer")
    msg = await prod.request(SUBMIT, task_type=ttype, payload=b"?")
    ok = msg is not None and (msg.name == OK or _is_error(msg, spec, name))
    ctx.check(ok, f"a MSG_SUBMIT of an undeclared task type is accepted or refused {name}",
              kind="reply", expected=[OK, f"{ERROR} {name}"], actual=_describe(msg, spec))
    worker = await ctx.conn(2, role="worker")
    if msg is not None and msg.name == OK:
        await _take_and_finish(ctx, worker, msg.fields["task_id"], requirement="QX-TASK-2")
        return
    reply = await worker.request(READY, timeout=QUIET)
    ctx.check(reply is None or reply.name != TASK or reply.fields.get("task_type") != ttype,
              "the refused task is not queued", expected="no MSG_TASK of that type",
              actual=_describe(reply, spec))
    if reply is not None and reply.name == TASK:
        await worker.send(DONE, task_id=reply.fields["task_id"])


# ------------------------------------------------------------------------------- failures
async def failed_reason_over_max(ctx: Any) -> None:
    """A MSG_FAILED whose reason is one byte over max_reason_bytes, for the task the worker
    holds, is refused INVALID_MESSAGE and changes nothing: the worker still holds the task."""
    spec = _spec(ctx)
    limit = ctx.profile.limits["max_reason_bytes"].max
    prod = await ctx.conn(1, role="producer")
    msg = await prod.request(SUBMIT, task_type="t", payload=b"reason")
    if not await _expect(ctx, msg, OK, "MSG_SUBMIT is answered MSG_OK"):
        return
    tid = msg.fields["task_id"]
    worker = await ctx.conn(2, role="worker")
    if not await _expect(ctx, await worker.request(READY), TASK, "the worker gets the task",
                         task_id=tid):
        return
    failed = spec.message(FAILED)
    width = failed.offsets.get("reason", failed.min_size)
    body = tid.to_bytes(width, "big") + b"r" * (limit + 1)
    enc = QuicxEncoder(ctx.profile)
    await worker.send_raw(enc.frame(failed.code, body), f"{FAILED}, reason of {limit + 1} bytes")
    reply = await worker.recv()
    code = spec.reply_code(spec.message(FAILED).layout[-1].errors.get("max-size", "reason_too_long"))
    await _expect(ctx, reply, ERROR, f"a reason of {limit + 1} bytes is refused "
                  f"{spec.error_names[code]}", error_code=code)
    await worker.send(DONE, task_id=tid)
    res = await prod.recv()
    if spec.flag("forward_results_to_producer"):
        await _expect(ctx, res, DONE, "the task was still the worker's: its MSG_DONE reaches the "
                      "producer", requirement="QX-PROD-101", task_id=tid)


# ------------------------------------------------------------------------------ heartbeat
DAEMON_HEARTBEAT_WATCH_S = 1.0  # how long an idle worker connection is watched


async def daemon_heartbeat(ctx: Any) -> None:
    """Observe whether the daemon sends MSG_HEARTBEAT to an idle worker (QX-HB-1: either
    side may; QX-HB-3: meant for long-idle worker sockets), and answer it MSG_PONG. The case
    only observes: a MAY is never a failure, and 004 gives the daemon no interval."""
    ctx.info = True
    worker = await ctx.conn(1, role="worker")
    started = time.monotonic()
    if not await _expect(ctx, await _ask(ctx, worker, READY, "QX-READY-3"), WAIT,
                         "MSG_READY on an empty queue is answered MSG_WAIT",
                         requirement="QX-READY-3"):
        return
    worker.expect_heartbeat = True
    try:
        msg = await worker.recv(timeout=DAEMON_HEARTBEAT_WATCH_S)
    finally:
        worker.expect_heartbeat = False
    if msg is None:
        ctx.check(True, f"the daemon sent no MSG_HEARTBEAT to the idle worker within "
                  f"{DAEMON_HEARTBEAT_WATCH_S:g} s (it may; 004 sets no interval)",
                  requirement="QX-HB-1", level="MAY")
        return
    after = round((time.monotonic() - started) * 1000)
    ctx.check(msg.name == HEARTBEAT, f"the daemon sent the idle worker {msg.name} after "
              f"{after} ms", requirement="QX-HB-1", level="MAY", actual=_describe(msg, _spec(ctx)))
    if msg.name == HEARTBEAT:
        await worker.send(PONG)  # QX-HB-2 binds the worker too


# ---------------------------------------------------------------------------------- stats
async def _stats(ctx: Any, mon: Any) -> dict[str, int] | None:
    msg = await _ask(ctx, mon, STATS, "QX-STATS-2")
    if msg is None or msg.name != STATS_RESPONSE:
        await _expect(ctx, msg, STATS_RESPONSE, "MSG_STATS is answered MSG_STATS_RESPONSE",
                      requirement="QX-STATS-2")
        return None
    return dict(msg.fields)


async def stats_figures(ctx: Any) -> None:
    """The MSG_STATS_RESPONSE figures follow the daemon's state: a submitted task raises
    queue_depth and pmad_bytes_used, handing it out lowers queue_depth and adds a busy (not
    idle) worker, MSG_DONE returns the pool bytes, and pmad_bytes_used never exceeds
    pmad_bytes_total. The snapshots are taken first and judged after: figures that do not
    follow the state read big-endian but all do read little-endian break the byte-order rule
    (QX-STATS-4, one MUST finding), not their meaning (QX-STATS-5)."""
    await asyncio.sleep(QUIET)  # let the previous case's connections finish closing
    mon = await ctx.conn(1, role="monitor")
    prod = await ctx.conn(2, role="producer")
    snaps: list[dict[str, int]] = []

    async def snap() -> bool:
        got = await _stats(ctx, mon)
        if got is not None:
            snaps.append(got)
        return got is not None

    if not await snap():
        return
    msg = await prod.request(SUBMIT, task_type="stats", payload=b"s" * 100)
    if not await _expect(ctx, msg, OK, "MSG_SUBMIT is answered MSG_OK", requirement="QX-OK-1"):
        return
    tid = msg.fields["task_id"]
    worker = await ctx.conn(3, role="worker")
    if not await snap() or not await _expect(ctx, await worker.request(READY), TASK,
                                             "the worker gets the task",
                                             requirement="QX-READY-3", task_id=tid):
        return
    if not await snap():
        return
    await worker.send(DONE, task_id=tid)
    await _pong(ctx, worker)  # the daemon has handled the MSG_DONE
    if not await snap():
        return
    rules = _figure_rules()
    broken = [r for r in rules if not r[1](*snaps)]
    layout = ctx.profile.model.message(STATS_RESPONSE).layout
    swapped = [{f.id: swap_bytes(v[f.id], cast(int, f.width)) for f in layout} for v in snaps]
    if broken and all(r[1](*swapped) for r in rules):
        ctx.check(False, "the figures do not follow the daemon's state read big-endian, and "
                  "all do read little-endian: they are sent in the wrong byte order",
                  requirement="QX-STATS-4", expected="big-endian figures",
                  actual={"as sent (big-endian)": snaps, "read little-endian": swapped})
        return
    for message, ok, requirement, expected, actual in rules:
        ctx.check(ok(*snaps), message, requirement=requirement, expected=expected(*snaps),
                  actual=actual(*snaps))


def _figure_rules() -> list[tuple[str, Any, str | None, Any, Any]]:
    """(message, holds(s0, s1, s2, s3), requirement, expected, actual) for the four snapshots
    of :func:`stats_figures`: before the submit, after it, with the task handed out, after
    MSG_DONE. A requirement of None is the case's first (QX-STATS-5, the figures' meaning)."""
    return [
        ("pmad_bytes_used <= pmad_bytes_total",
         lambda a, b, c, d: a["pmad_bytes_used"] <= a["pmad_bytes_total"], None,
         lambda a, b, c, d: "used <= total", lambda a, b, c, d: a),
        ("an accepted task adds 1 to queue_depth",
         lambda a, b, c, d: b["queue_depth"] == a["queue_depth"] + 1, None,
         lambda a, b, c, d: a["queue_depth"] + 1, lambda a, b, c, d: b["queue_depth"]),
        ("an accepted task uses pool bytes",
         lambda a, b, c, d: b["pmad_bytes_used"] > a["pmad_bytes_used"], None,
         lambda a, b, c, d: f"> {a['pmad_bytes_used']}", lambda a, b, c, d: b["pmad_bytes_used"]),
        ("pmad_bytes_total does not change",
         lambda a, b, c, d: b["pmad_bytes_total"] == a["pmad_bytes_total"], None,
         lambda a, b, c, d: a["pmad_bytes_total"], lambda a, b, c, d: b["pmad_bytes_total"]),
        ("a task handed out leaves queue_depth",
         lambda a, b, c, d: c["queue_depth"] == a["queue_depth"], None,
         lambda a, b, c, d: a["queue_depth"], lambda a, b, c, d: c["queue_depth"]),
        ("a worker that sent MSG_READY counts in workers_total",
         lambda a, b, c, d: c["workers_total"] == b["workers_total"] + 1, None,
         lambda a, b, c, d: b["workers_total"] + 1, lambda a, b, c, d: c["workers_total"]),
        ("a worker holding a task is not idle",
         lambda a, b, c, d: c["workers_idle"] == b["workers_idle"], None,
         lambda a, b, c, d: b["workers_idle"], lambda a, b, c, d: c["workers_idle"]),
        ("MSG_DONE returns the task's slot to the pool",
         lambda a, b, c, d: d["pmad_bytes_used"] == a["pmad_bytes_used"], "QX-DONE-2",
         lambda a, b, c, d: a["pmad_bytes_used"], lambda a, b, c, d: d["pmad_bytes_used"]),
    ]


# ----------------------------------------------------------------------------------- pool
class _Bulk:
    """An unrecorded side connection for bulk traffic (its totals go in a transcript note)."""

    def __init__(self, ctx: Any, role: str):
        self.ctx, self.role = ctx, role
        self.dec = QuicxDecoder(ctx.profile, role)
        self.frames: list[Message] = []
        self.sent = 0
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> _Bulk:
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(self.ctx.host, self.ctx.port), self.ctx.timeout)
        return self

    async def write(self, data: bytes) -> None:
        assert self.writer is not None
        self.sent += len(data)
        self.writer.write(data)
        await self.writer.drain()

    async def read_until(self, n: int, timeout: float) -> bool:
        """Read until ``n`` frames are held (False on timeout or EOF)."""
        assert self.reader is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while len(self.frames) < n:
            left = end - loop.time()
            if left <= 0:
                return False
            try:
                data = await asyncio.wait_for(self.reader.read(1 << 16), left)
            except TimeoutError:
                return False
            if not data:
                return False
            try:
                self.frames.extend(self.dec.feed(data))
            except ProtocolError as exc:
                self.frames.extend(exc.frames)
                return False
        return True

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await asyncio.wait_for(self.writer.wait_closed(), 1.0)
            except (TimeoutError, OSError):
                pass


async def _largest_task(ctx: Any, prod: Any, enc: QuicxEncoder) -> int | None:
    """The payload size of the largest task the daemon accepts, found by halving from the
    profile's cap (or 64 KiB when it has none); the probe tasks are drained."""
    spec = _spec(ctx)
    sub, task = spec.message(SUBMIT), spec.message(TASK)
    cap = spec.max_payload_bytes
    fixed = len(enc.encode(SUBMIT, task_type="pool", payload=b"")) - spec.header_size
    grow = task.min_size - sub.min_size
    start = (cap if cap is not None and cap < (1 << 16) else 1 << 16)
    size = start - fixed - grow
    while size > 0:
        msg = await prod.request(SUBMIT, task_type="pool", payload=bytes(size))
        if msg is not None and msg.name == OK:
            worker = await ctx.connect("worker")  # closed after: no credit left behind
            await _take_and_finish(ctx, worker, msg.fields["task_id"])
            await _pong(ctx, worker)
            await worker.close()
            if spec.flag("forward_results_to_producer"):
                await _expect(ctx, await prod.recv(), DONE, "the producer gets the MSG_DONE",
                              requirement="QX-PROD-101", task_id=msg.fields["task_id"])
            return size
        if msg is None or msg.name != ERROR:
            return None
        size //= 2
    return None


async def pool_exhaustion(ctx: Any) -> None:
    """Fill the task pool with the largest tasks the daemon takes until it answers QUEUE_FULL
    (within POOL_MAX_FRAMES / POOL_MAX_BYTES; otherwise the case only records that the bound
    was not reached). Then: another such task is refused QUEUE_FULL too, a worker completes
    one task, and a task of the same size is accepted again: MSG_DONE freed its slot before the
    daemon told anyone (QX-DONE-2). Everything accepted is drained."""
    spec = _spec(ctx)
    enc = QuicxEncoder(ctx.profile)
    full = spec.error_names[spec.reply_code("queue_full")]
    prod = await ctx.conn(1, role="producer")
    size = await _largest_task(ctx, prod, enc)
    if size is None:
        ctx.check(False, "the daemon accepts some task of the pool probe", requirement="QX-OK-1",
                  expected=OK, actual="no task size accepted")
        return
    frame = enc.encode(SUBMIT, task_type="pool", payload=bytes(size))
    bulk = await _Bulk(ctx, "producer").open()
    accepted: list[int] = []
    refused: Message | None = None
    other: Message | None = None
    per_write = max(1, BULK_WRITE // len(frame))
    try:
        while refused is None and other is None and len(bulk.frames) < POOL_MAX_FRAMES \
                and bulk.sent < POOL_MAX_BYTES:
            k = min(per_write, POOL_MAX_FRAMES - len(bulk.frames))
            seen = len(bulk.frames)
            await bulk.write(frame * k)
            complete = await bulk.read_until(seen + k, ctx.timeout * 4)
            for m in bulk.frames[seen:]:  # what did come is counted (and drained) either way
                if m.name == OK:
                    accepted.append(m.fields["task_id"])
                elif _is_error(m, spec, full):
                    refused = refused or m
                else:
                    other = other or m
            if not complete:  # the daemon stopped answering (or closed): no more to send
                break
        ctx.transcript.add(1, "note", note=f"side connection: {len(bulk.frames)} MSG_SUBMIT of "
                           f"{len(frame)} bytes ({bulk.sent} bytes), {len(accepted)} accepted, "
                           f"first refusal: {_describe(refused or other, spec)}")
        if other is not None:
            ctx.check(False, f"filling the pool, every MSG_SUBMIT is accepted or refused {full}",
                      expected=[OK, full], actual=_describe(other, spec))
        elif refused is None:
            ctx.info = True  # nothing to judge: the bound was not reached
            ctx.check(True, f"the pool did not fill within {len(bulk.frames)} tasks of {size} "
                      f"bytes ({bulk.sent} bytes): {full} not reached", level="MAY")
        else:
            again = await prod.request(SUBMIT, task_type="pool", payload=bytes(size))
            await _expect(ctx, again, ERROR, f"with the pool full, MSG_SUBMIT is refused {full}",
                          error_code=spec.error_code(full))
            if again is not None and again.name == OK:
                accepted.append(again.fields["task_id"])
            await _slot_freed(ctx, prod, bulk, size, accepted)
    finally:
        await bulk.close()
        await _drain(ctx, accepted)


async def _slot_freed(ctx: Any, prod: Any, bulk: _Bulk, size: int, accepted: list[int]) -> None:
    """A worker completes one task of the full pool; then a task of the same size fits."""
    spec = _spec(ctx)
    worker = await ctx.connect("worker")
    task = await worker.request(READY)
    if not await _expect(ctx, task, TASK, "a worker gets a task of the full pool",
                         requirement="QX-READY-3" if "QX-READY-3" in ctx.profile.requirements
                         else "QX-MSG-103"):
        return
    tid = task.fields["task_id"]
    if tid in accepted:
        accepted.remove(tid)
    await worker.send(DONE, task_id=tid)
    if spec.flag("forward_results_to_producer"):  # wait until the producer is told
        seen = len(bulk.frames)
        await bulk.read_until(seen + 1, ctx.timeout)
        res = bulk.frames[seen] if len(bulk.frames) > seen else None
        await _expect(ctx, res, DONE, "the task's producer (the side connection) gets its MSG_DONE",
                      requirement="QX-PROD-101", task_id=tid)
    else:
        await _pong(ctx, worker)
    # a task pushed to the worker unasked (quicx/1.0.3) goes back to the queue (QX-WORKER-1)
    await worker.close()
    again = await prod.request(SUBMIT, task_type="pool", payload=bytes(size))
    await _expect(ctx, again, OK, "after MSG_DONE the freed slot takes a new task",
                  requirement="QX-DONE-2")
    if again is not None and again.name == OK:
        accepted.append(again.fields["task_id"])


async def _drain(ctx: Any, ids: list[int]) -> None:
    """Take and complete ``ids`` on an unrecorded worker connection."""
    if not ids:
        return
    want = set(ids)
    bulk = await _Bulk(ctx, "worker").open()
    try:
        await bulk.write(QuicxEncoder(ctx.profile).encode(READY) * len(want))
        done = 0
        while want:
            if not await bulk.read_until(done + 1, ctx.timeout):
                break
            m = bulk.frames[done]
            done += 1
            if m.name != TASK:
                continue
            want.discard(m.fields["task_id"])
            await bulk.write(QuicxEncoder(ctx.profile).encode(DONE, task_id=m.fields["task_id"]))
        ctx.transcript.add(1, "note", note=f"side worker drained {len(ids) - len(want)} of "
                           f"{len(ids)} tasks")
    finally:
        await bulk.close()


# --------------------------------------------------------------------------------- requeue
async def _ready_until_task(ctx: Any, worker: Any) -> Message | None:
    """MSG_READY until a task comes (a daemon that answers MSG_WAIT before it has seen the
    other worker's disconnect is asked again), within the case timeout."""
    loop = asyncio.get_running_loop()
    end = loop.time() + ctx.timeout
    msg = await worker.request(READY)
    while msg is not None and msg.name == WAIT and loop.time() < end:
        await asyncio.sleep(QUIET / 2)
        msg = await worker.request(READY)
    return msg


async def disconnect_requeue(ctx: Any) -> None:
    """A worker takes the first of ``params.tasks`` tasks and disconnects without a result:
    the task goes back to the queue, ahead of the tasks accepted after it, and another worker
    gets it whole; then the rest, in order. Everything is completed."""
    spec = _spec(ctx)
    n = ctx.case.params.get("tasks", 1)
    prod = await ctx.conn(1, role="producer")
    ids = []
    for i in range(n):
        msg = await prod.request(SUBMIT, task_type="requeue_me", payload=str(i).encode())
        if not await _expect(ctx, msg, OK, "MSG_SUBMIT is answered MSG_OK", requirement="QX-OK-1"):
            return
        ids.append(msg.fields["task_id"])
    first = await ctx.conn(2, role="worker")
    if not await _expect(ctx, await first.request(READY), TASK, "the first worker gets the task",
                         requirement="QX-TASK-1", task_id=ids[0]):
        return
    await first.close()
    second = await ctx.conn(3, role="worker")
    again = bool(spec.flag("ready_required_after_result"))
    msg = await _ready_until_task(ctx, second)
    got = []
    while msg is not None and msg.name == TASK:
        if msg.fields["task_id"] in ids:
            _as_submitted(ctx, msg, task_type="requeue_me",
                          payload=str(ids.index(msg.fields["task_id"])).encode())
        got.append((msg.fields["task_id"], msg.fields["task_type"], msg.fields["payload"]))
        await second.send(DONE, task_id=msg.fields["task_id"])
        if len(got) == n:
            break
        msg = await (second.request(READY) if again else second.recv())
    want = [(tid, "requeue_me", str(i).encode()) for i, tid in enumerate(ids)]
    ctx.check(bool(got) and got[0] == want[0],
              "the disconnected worker's task is requeued and handed whole to another worker",
              requirement="QX-WORKER-1", expected=want[:1], actual=got[:1])
    if n > 1:
        ctx.check(got == want, "the requeued task goes before the tasks accepted after it",
                  requirement="QX-QUEUE-1", expected=[w[0] for w in want], actual=[g[0] for g in got])
    missing = [tid for tid, *_ in want if tid not in {g[0] for g in got}]
    await _drain(ctx, missing)
