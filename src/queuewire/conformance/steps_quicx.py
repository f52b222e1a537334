"""The quicx step interpreter: runs a YAML case's ``steps`` on a :class:`~.context.CaseContext`.

quicx has no request ids: frames are taken in arrival order, the next unclaimed frame on the
step's connection being the one an outcome judges. A connection's role (``role:`` on its first
step, default producer) picks how its frames are decoded, so a message the daemon must not send
to that role shows up as a decoding error. ``send`` builds a message with ``QuicxEncoder``
(bytes fields as ``hex:...`` or text); ``send_raw`` writes hex or a hand-made header. A step
without ``expect`` does not wait (many quicx messages have no answer). Outcomes are
``message: {type, fields}``, ``error: CODE_NAME``, ``close``, ``none: ms``; the judgement
(one check, matched outcome's requirement and level, strongest level on a miss, ``degraded``,
MUST failures stop the case) is the bunqueue interpreter's, except that a ``degraded`` match
also stops the case (the steps after it were written for the outcome asked first), and that
a miss is judged by the rule it shows broken where that is not the step's (:func:`judge`:
a connection the daemon closed after its MSG_ERROR, a frame of the daemon's that breaks a
rule, a failed ``probe``; each such defect is reported once per run:
:func:`_stop_at_defect`). A MSG_ERROR carrying
the code the profile answers an unknown message type with, sent in reply to the case's
``command``, makes the case UNIMPLEMENTED when no other refusal shares that code. A
MSG_HEARTBEAT the daemon sends is answered MSG_PONG by the connection and is not a step's
reply. The runner drives :func:`run_step` for ``cleanup`` steps too, with the context in
cleanup mode (nothing judged), and :func:`drain_daemon` after every case that touched the
daemon's one task queue.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any, NoReturn

from ..codecs.quicx import QuicxEncoder, frame_spans, from_text, swap_bytes
from ..spec.quicx import struct_format
from .context import (
    ERROR_FIELD,
    CaseAbort,
    CaseContext,
    Conn,
    StepError,
    error_messages,
    sleep_ms,
    strongest,
)
from .matching import subset_mismatch
from .steps_bunqueue import (
    Observation,
    expected_outcomes,
    fill_observation,
    hex_bytes,
    match_transport,
    save_vars,
)


async def run_step(ctx: CaseContext, step: dict) -> None:
    timeout = float(step.get("timeout", ctx.timeout))
    conn = await ctx.conn(int(step.get("conn", 1)), role=step.get("role"))
    if "sleep" in step:
        await sleep_ms(float(step["sleep"]))
        return
    if "close" in step:
        await conn.close()
        return
    expect = step.get("expect")
    outcomes: list[dict] = []
    if expect is not None:
        expect = ctx.subst(expect)
        outcomes = list(expect["any_of"]) if "any_of" in expect else [expect]
    mark = conn.seq
    sent: str | None = None
    asked: tuple[str, ...] = ()  # the messages the step sends (raw bytes: their frames')
    gone = conn.gone if ("send" in step or "send_raw" in step) else None
    if gone is not None:  # the daemon closed it: what the step sends cannot reach it
        ctx.note(f"step {ctx.step}: nothing sent, the daemon had closed connection "
                 f"{conn.num} ({gone})", conn.num)
    elif "send" in step:
        body = ctx.subst(step["send"])
        sent = body["type"]
        asked = (sent,)
        await conn.send_quicx(sent, fields_of(ctx, sent, body.get("fields") or {}))
    elif "send_raw" in step:
        data, note = raw_bytes(ctx, step["send_raw"])
        asked = _frames_of(ctx.profile.model, data)
        await conn.send_raw(data, note)
    if not outcomes:
        return
    silent = _known_silent(ctx, asked)
    if silent:  # the daemon is known not to answer it: no need to wait the whole timeout
        timeout = min(timeout, KNOWN_SILENCE_S)
    if gone is not None:
        obs = Observation(closed=gone)
    else:
        conn.expect_heartbeat = any(o.get("message", {}).get("type") == "MSG_HEARTBEAT"
                                    for o in outcomes)
        try:
            obs = await observe(conn, outcomes, mark, timeout)
        finally:
            conn.expect_heartbeat = False
    # a probe that got nothing: is its request answered alone (known: it is not)?
    alone: bool | None = False if silent else None
    probe = step.get("probe")
    if probe and not silent and obs.reply is None and obs.closed is None and not obs.garbled \
            and not any(_match_one(ctx.profile.model, o, obs) for o in outcomes):
        alone = await _answered_alone(ctx, conn.role, asked, outcomes, timeout)
    judge(ctx, outcomes, obs, sent, conn=conn, probe=probe, asked=asked, alone=alone)
    save_vars(ctx, step, obs)
    if obs.reply is not None:  # where each saved value came from (swapped_defect)
        for var, path in (step.get("save") or {}).items():
            ctx.origins[var] = (getattr(obs.reply.value, "name", None), str(path).rstrip("?"))


KNOWN_SILENCE_S = 0.5  # seconds waited for the answer to a request the daemon is known to ignore
UNANSWERED = "unanswered"  # the signature of a request the daemon never answers


def _frames_of(spec, data: bytes) -> tuple[str, ...]:
    """The names of the frames laid end to end in ``data``, when every one is whole, of an
    accepted version and a known message (else none)."""
    spans = frame_spans(spec, data)
    msgs = [spec.opcode(f.code) for f in spans]
    if not spans or spans[-1].end != len(data) or None in msgs \
            or any(f.version not in spec.accepted_versions for f in spans):
        return ()
    return tuple(m.name for m in msgs)


def _request(spec, asked: tuple[str, ...]) -> str | None:
    """The one request ``asked`` repeats, when it carries no payload: every such frame is
    the same bytes, so a daemon that leaves it unanswered once leaves it unanswered in every
    case (an unanswered MSG_HEARTBEAT is one defect, not one per case)."""
    names = set(asked)
    if len(names) != 1:
        return None
    (name,) = names
    msg = spec.messages.get(name)
    return name if msg is not None and msg.payload == "empty" else None


def _known_silent(ctx: CaseContext, asked: tuple[str, ...]) -> bool:
    name = _request(ctx.profile.model, asked)
    return name is not None and (UNANSWERED, name) in ctx.defects


def unanswered(ctx: CaseContext, name: str, answers: Any, requirement: str | None,
               what: str) -> NoReturn:
    """The daemon does not answer the empty request ``name`` (its answer would be one of
    ``answers``): one defect of the run (:meth:`~.context.CaseContext.defect`); later steps
    that wait for such an answer, in any frame mix, end at it too."""
    for answer in answers:
        ctx.defects.setdefault((UNANSWERED, "answer", answer), ctx.defects.get(
            (UNANSWERED, name), ctx.case.id))
    ctx.defect((UNANSWERED, name), requirement, what)


async def _answered_alone(ctx: CaseContext, role: str | None, asked: tuple[str, ...],
                          outcomes: list[dict], timeout: float) -> bool | None:
    """For a probe that got nothing: whether the daemon answers its request on a fresh
    connection (then the probe's connection lost its sync, the probe's own finding), or not
    at all (then the request is never answered: a defect of its own). None when the probe
    sends no single empty request."""
    name = _request(ctx.profile.model, asked)
    if name is None:
        return None
    fresh = await ctx.connect(role)
    try:
        mark = fresh.seq
        await fresh.send_quicx(name, {})
        obs = await observe(fresh, outcomes, mark, timeout)
        return any(_match_one(ctx.profile.model, o, obs) for o in outcomes)
    finally:
        await fresh.close()


def fields_of(ctx: CaseContext, name: str, fields: dict) -> dict[str, Any]:
    """Case values to encoder values: bytes fields from ``hex:...`` or text
    (:func:`~queuewire.codecs.quicx.from_text`)."""
    try:
        return from_text(ctx.profile.model, name, fields)
    except ValueError as exc:
        raise StepError(str(exc)) from None


def raw_bytes(ctx: CaseContext, body: Any) -> tuple[bytes, str]:
    body = ctx.subst(body)
    if isinstance(body, str):
        return hex_bytes(body), "raw bytes"
    if "hex" in body:
        n = int(body.get("repeat", 1))
        return hex_bytes(body["hex"]) * n, "raw bytes" + (f" x{n}" if n != 1 else "")
    if "header" in body or "payload" in body:
        spec = ctx.profile.model
        head = body.get("header") or {}
        payload = body.get("payload", "")
        payload = hex_bytes(payload.removeprefix("hex:")) if isinstance(payload, str) \
            else bytes(payload)
        t = head.get("type")
        if isinstance(t, str):
            if t not in spec.messages:
                raise StepError(f"send_raw: header type {t!r} is not a message of {ctx.profile.name}")
            t = spec.messages[t].code
        if t is None:
            raise StepError("send_raw: header: needs a type (a message name or a number)")
        data = QuicxEncoder(ctx.profile).frame(int(t), payload, version=head.get("version"),
                                               length=head.get("length"))
        return data, f"hand-made header {head}"
    raise StepError(f"send_raw: nothing to send in {sorted(body)}")


async def observe(conn: Conn, outcomes: list[dict], mark: int, timeout: float) -> Observation:
    start = time.monotonic()
    deadline = start + timeout
    kinds = {k for o in outcomes for k in o if k in ("message", "error", "close", "none")}
    obs = Observation()
    if "none" in kinds:
        window = max(float(o["none"]) for o in outcomes if "none" in o) / 1000.0
        if not conn.inbox and not await conn.wait_anything(min(deadline, start + window)):
            obs.nothing = True
            obs.waited = time.monotonic() - start
            return obs
        if kinds == {"none"}:
            obs.reply = conn._take(lambda s, f: True)
            return fill_observation(conn, obs, mark, start)
    if kinds & {"message", "error"}:
        obs.reply = await conn.wait_next(deadline, since=None)
    if "close" in kinds:
        spec = conn.ctx.profile.model
        if obs.reply is None or not any(_match_one(spec, o, obs) for o in outcomes
                                        if "message" in o or "error" in o):
            await conn.wait_close(deadline)
    return fill_observation(conn, obs, mark, start)


def _is_error(spec, value: Any, want: Any) -> bool:
    if getattr(value, "name", None) not in error_messages(spec):
        return False
    if want is True:
        return True
    return value.fields.get(ERROR_FIELD) == spec.error_code(want)


def _match_one(spec, o: dict, obs: Observation) -> bool:
    value = obs.reply.value if obs.reply is not None else None
    if "message" in o:
        want = o["message"]
        return value is not None and value.name == want["type"] and \
            subset_mismatch(want.get("fields") or {}, value.fields) is None
    if "error" in o:
        return value is not None and _is_error(spec, value, o["error"])
    return match_transport(o, obs, lambda want, frame_value: _is_error(spec, frame_value, want))


def describe(o: dict) -> str:
    if "message" in o:
        f = o["message"].get("fields")
        return f"{o['message']['type']}" + (f" with {f}" if f else "")
    if "error" in o:
        return "an error message" if o["error"] is True else f"an error message {o['error']}"
    if "close" in o:
        if isinstance(o["close"], dict):
            return f"an error message {o['close']['after_error']} and then a close"
        return "the daemon closing the connection"
    if "none" in o:
        return f"nothing within {o['none']} ms"
    return str(o)


def why_not(spec, o: dict, obs: Observation) -> str:
    value = obs.reply.value if obs.reply is not None else None
    if "none" in o:
        got = [str(f.view)[:120] for f in obs.frames[:3]] + ([f"close ({obs.closed})"] if obs.closed else [])
        return "something arrived: " + ("; ".join(got) or "undecodable bytes")
    if "close" in o:
        return "the connection stayed open" if obs.closed is None else \
            "the connection closed without that error message first"
    if value is None:
        if obs.garbled:
            return f"the daemon sent bytes that do not decode: {obs.garbled[0].error.get('message', '')}"
        if obs.closed is not None:
            return f"the connection closed ({obs.closed}) before a message"
        return f"no message within {obs.waited:.3g} s"
    if "message" in o:
        if value.name != o["message"]["type"]:
            assert obs.reply is not None  # value is its message
            return f"got {value.name} {obs.reply.view.get('fields')}"
        return subset_mismatch(o["message"].get("fields") or {}, value.fields, "fields") or "no match"
    if "error" in o:
        if value.name in error_messages(spec):
            code = value.fields.get(ERROR_FIELD)
            return f"got error code {code} ({spec.error_names.get(code, '?')})"
        return f"got {value.name}"
    return "no match"


def tested(spec, o: dict) -> list[str]:
    """The requirements the spec ties to what outcome ``o`` looks at: an expected message's
    own requirement and those of the fields it names. Not an error code's: its requirement
    says what the code means, while whether the frame deserves it is the case's rule."""
    if "message" in o:
        want = o["message"]
        msg = spec.messages.get(want.get("type"))
        if msg is None:
            return []
        fields = want.get("fields") or {}
        return [r for r in (msg.requirement, *(f.requirement for f in msg.layout
                                               if f.id in fields)) if r]
    return []


def _requirement(ctx: CaseContext, o: dict) -> str | None:
    """An outcome's requirement: its own, else the first of the case's the spec ties to the
    fields it expects (a message's opcode rule, QX-MSG-n, is no better a default than the
    case's first), else the case's first."""
    if o.get("requirement"):
        return o["requirement"]
    msg = ctx.profile.model.messages.get((o.get("message") or {}).get("type"))
    by_fields = [r for r in tested(ctx.profile.model, o) if msg is None or r != msg.requirement]
    return ctx.default_requirement(by_fields)


def unimplemented_code(spec) -> int | None:
    """The error code that says "the daemon does not handle this message type", when it says
    only that: in quicx/v1 an unknown type shares INVALID_MESSAGE with every invalid frame, so
    that code cannot tell an unhandled type from a refusal and nothing is UNIMPLEMENTED."""
    unknown = spec.protocol_errors.get("unknown_type")
    if unknown is None or not unknown.error_code:
        return None
    code = spec.error_code(unknown.error_code)
    type_kinds = {"unknown_type", "reserved_type", "not_on_tcp"}
    shared = any(spec.error_replies.get(k) == code for k in spec.protocol_errors
                 if k not in type_kinds)
    return None if shared else code


def _stop_at_defect(ctx: CaseContext, conn: Conn | None, obs: Observation, probe: Any,
                    outcomes: list[dict], expected: str, asked: tuple[str, ...] = (),
                    alone: bool | None = None) -> None:
    """Where a missed expectation shows a defect every later case would meet again, report
    it once per run and stop the case (:meth:`~.context.CaseContext.defect`, which raises):
    a connection the daemon closed right after its MSG_ERROR (judged by the
    ``open_after_error`` requirement, not the step's); a frame from the daemon that breaks a
    rule of its own (judged by that rule); a message that alters what was submitted or holds
    an id in the wrong byte order (:func:`altered_defect`); an empty request (MSG_HEARTBEAT,
    MSG_READY, MSG_STATS) that got nothing at all; a probe that failed (by the probe's
    requirement; when its request goes unanswered on a fresh connection too, by the
    requirement the step's ``probe:`` names). ``expected`` leads the message. Returns for a
    miss that is this case's own."""
    spec = ctx.profile.model
    if obs.closed is not None and obs.reply is None and conn is not None \
            and conn.closed_after_error():
        ctx.report_closed_after_error(conn, expected)
    if obs.garbled and obs.reply is None:
        err = obs.garbled[0].error
        wanted = strongest([o.get("level") or ctx.level_of(_requirement(ctx, o))
                            for o in outcomes])
        broken = ctx.level_of(err.get("requirement"))
        if strongest([broken, wanted]) == broken:  # else the missing answer weighs more
            ctx.daemon_frame(err, expected)
    want = outcomes[0].get("message")
    if obs.reply is not None and want is not None:
        altered = altered_defect(ctx, want.get("type"), want.get("fields") or {},
                                 obs.reply.value)
        if altered is not None:
            ctx.defect(altered[0], altered[1], f"{expected}{altered[2]}")
    nothing = obs.reply is None and obs.closed is None and not obs.garbled
    name = _request(spec, asked)
    if nothing and name is not None and (not probe or alone is False):
        rid = probe if probe and isinstance(probe, str) else _requirement(ctx, outcomes[0])
        answers = [o["message"]["type"] for o in outcomes if "message" in o]
        unanswered(ctx, name, answers, rid, f"the daemon does not answer {name} "
                   f"({why_not(spec, outcomes[0], obs)}"
                   f"{'; not on a fresh connection either' if probe else ''})")
    known = [o["message"]["type"] for o in outcomes if "message" in o
             and (UNANSWERED, "answer", o["message"]["type"]) in ctx.defects]
    if known and obs.closed is None and not obs.garbled:
        first = ctx.defects[(UNANSWERED, "answer", known[0])]
        if first != ctx.case.id:  # a mix of frames whose answer the daemon never sends
            ctx.blocked(first, f"expected {describe(outcomes[0])}, which the daemon never "
                        f"sends ({why_not(spec, outcomes[0], obs)})", None)
    if probe:
        rid = _requirement(ctx, outcomes[0])
        ctx.defect(("probe", rid, describe(outcomes[0])), rid,
                   f"{expected}{why_not(spec, outcomes[0], obs)}")


def _differing(spec, name: str | None, want: dict, value: Any
               ) -> tuple[dict[str, Any], dict[str, str]] | None:
    """For a message ``name`` that came (``value``) but not as ``want`` says: its layout by
    field id, and why each field of ``want`` that differs does (None: another message came,
    or nothing differs)."""
    msg = spec.messages.get(name) if name else None
    if msg is None or getattr(value, "name", None) != name:
        return None
    why = {k: subset_mismatch({k: v}, value.fields, "fields") for k, v in want.items()}
    wrong = {k: w for k, w in why.items() if w is not None}
    return ({f.id: f for f in msg.layout}, wrong) if wrong else None


def altered_defect(ctx: CaseContext, name: str | None, want: dict, value: Any
                   ) -> tuple[Any, str | None, str] | None:
    """A message ``name`` that came but not as ``want`` says, because the daemon alters what
    it passes on (:func:`mirror_defect`) or writes an id in the wrong byte order
    (:func:`swapped_defect`): a defect every later case meets again. (signature,
    requirement, what) or None."""
    return mirror_defect(ctx.profile.model, name, want, value) or \
        swapped_defect(ctx, name, want, value)


def mirror_defect(spec, name: str | None, want: dict, value: Any
                  ) -> tuple[Any, str | None, str] | None:
    """A message ``name`` that came, whose only fields that differ from ``want`` are fields
    the spec says mirror another message's (``mirrors``: MSG_TASK's type and payload are the
    submitted ones): the daemon alters what it passes on, a defect every case that hands a
    task out meets again. (signature, requirement, what) or None."""
    differing = _differing(spec, name, want, value)
    if differing is None:
        return None
    layout, wrong = differing
    if not all(k in layout and layout[k].mirrors for k in wrong):
        return None
    rid = layout[next(iter(wrong))].mirror_requirement
    return ("mirror", name, rid), rid, \
        f"{name} does not carry what was submitted: {'; '.join(wrong.values())}"


def swapped_defect(ctx: CaseContext, name: str | None, want: dict, value: Any
                   ) -> tuple[Any, str | None, str] | None:
    """A message ``name`` that came, whose only fields that differ from ``want`` are
    integers holding the wanted value with its bytes reversed: one of the two messages the
    value passed through (the one it was saved from, the one that came) writes it in the wrong
    byte order. Ids count up from small numbers, so the smaller reading is taken for the right
    one and the other message is blamed, by its field's requirement. (signature, requirement,
    what) or None."""
    spec = ctx.profile.model
    differing = _differing(spec, name, want, value)
    if differing is None:
        return None
    layout, wrong = differing
    for k in wrong:
        f, v, got = layout.get(k), want[k], value.fields.get(k)
        if f is None or not f.is_int or not isinstance(v, int) or not isinstance(got, int) \
                or f.width is None or not 0 <= v <= (f.max_value or 0) \
                or swap_bytes(v, f.width) != got or v == got:
            return None
    k = next(iter(wrong))
    v, got = want[k], value.fields[k]
    rid = layout[k].requirement
    blamed = f"{name}.{k}"
    if got < v:  # the saved value is the swapped one: blame where it came from
        origin = next((ctx.origins[var] for var in ctx.origins
                       if ctx.vars.get(var) == v and ctx.origins[var][0]), None)
        if origin is not None and origin[0] in spec.messages:
            src = {f.id: f for f in spec.messages[origin[0]].layout}.get(origin[1])
            if src is not None:
                rid, blamed = src.requirement, f"{origin[0]}.{origin[1]}"
    return ("byte order", k), rid, \
        f"{name}.{k} is {got} where {v} ({v:#x}) was expected: the same bytes reversed; " \
        f"{blamed} is written in the wrong byte order (integers are big-endian)"


def judge(ctx: CaseContext, outcomes: list[dict], obs: Observation, sent: str | None, *,
          conn: Conn | None = None, probe: Any = False, asked: tuple[str, ...] = (),
          alone: bool | None = None) -> None:
    spec = ctx.profile.model
    where = f"step {ctx.step}"
    matched = next((o for o in outcomes if _match_one(spec, o, obs)), None)
    if matched is not None and matched.get("degraded"):
        # an outcome asked first missed only because the daemon alters what it passes on:
        # that defect, not the weaker outcome the altered message happens to match
        for o in outcomes:
            if o is matched or o.get("degraded") or "message" not in o:
                continue
            altered = altered_defect(ctx, o["message"].get("type"),
                                     o["message"].get("fields") or {},
                                     obs.reply.value if obs.reply is not None else None)
            if altered is not None:
                ctx.defect(altered[0], altered[1], f"expected {describe(o)}; {altered[2]}")
    if matched is not None:
        rid = _requirement(ctx, matched)
        level = matched.get("level") or ctx.level_of(rid)
        degraded = bool(matched.get("degraded"))
        msg = f"{where}: got {describe(matched)}"
        if degraded:
            msg += " (accepted, but not what the requirement asks first)"
        ctx.check(not degraded, msg, requirement=rid, level=level, kind="reply",
                  expected=expected_outcomes(outcomes), actual=obs.actual())
        if degraded:  # the steps that follow were written for the outcome asked first
            raise CaseAbort()
        return
    value = obs.reply.value if obs.reply is not None else None
    unhandled = unimplemented_code(spec)
    if (sent is not None and sent == ctx.case.command and unhandled is not None
            and value is not None and _is_error(spec, value, spec.error_names[unhandled])):
        ctx.unimplemented = True
        ctx.check(False, f"{where}: the target does not handle {sent} "
                  f"(error {spec.error_names[unhandled]})", kind="unimplemented",
                  expected=expected_outcomes(outcomes), actual=obs.actual())
        raise CaseAbort()
    expected = " or ".join(describe(o) for o in outcomes)
    _stop_at_defect(ctx, conn, obs, probe, outcomes, f"expected {expected}; ", asked, alone)
    rids = [_requirement(ctx, o) for o in outcomes]
    level = strongest([o.get("level") or ctx.level_of(r) for o, r in zip(outcomes, rids)])
    ctx.check(False, f"{where}: expected {expected}; {why_not(spec, outcomes[0], obs)}",
              requirement=rids[0], level=level, kind="reply", expected=expected_outcomes(outcomes),
              actual=obs.actual())
    if level == "MUST":
        raise CaseAbort()


# ------------------------------------------------------------------------------ draining
DRAIN_TASKS_MAX = 256     # tasks one drain takes at most (a case queues a few dozen at most)
DRAIN_SECONDS = 3.0       # wall-clock bound of one drain
DRAIN_QUIET_S = 0.15      # how long a held MSG_READY may stay unanswered before the queue counts as empty
DRAIN_FRAME_MAX = 1 << 20  # a frame longer than this ends the drain (the daemon's framing is off)


async def drain_daemon(ctx: CaseContext) -> None:
    """Take every task left in the daemon's one queue after a case, however the case ended,
    so that no later case (or the run's figures) meets its leftovers. Run after the case's
    connections are closed (a worker's task in flight is then requeued, QX-WORKER-1): a fresh
    worker asks with MSG_READY and answers every MSG_TASK with MSG_DONE, asking again where
    the profile wants a MSG_READY after a result, until MSG_WAIT comes twice (once more after
    a short pause, for a task requeued meanwhile) or nothing comes for a moment (a daemon that
    holds READY). Frames are read by their header alone, so a daemon whose MSG_TASK is
    malformed is drained too. Nothing is judged; a transcript note says what was drained."""
    spec = ctx.profile.model
    try:
        taken = await asyncio.wait_for(_drain(ctx, spec), DRAIN_SECONDS)
    except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
        ctx.note(f"after the case: draining the daemon's queue stopped "
                 f"({type(exc).__name__})")
        return
    if taken:
        ctx.note(f"after the case: took {len(taken)} task(s) left in the daemon's queue "
                 f"(ids {', '.join(map(str, taken[:16]))}) so that no later case gets them")


async def _drain(ctx: CaseContext, spec) -> list[int]:
    enc = QuicxEncoder(ctx.profile)
    head = struct.Struct(struct_format(spec.header))
    order = [f.id for f in spec.header]
    at_type, at_len = order.index("msg_type"), order.index("len_payload")
    task, wait, hb = (spec.messages.get(n) for n in ("MSG_TASK", "MSG_WAIT", "MSG_HEARTBEAT"))
    assert task is not None  # every quicx profile hands tasks out
    tid = struct.Struct(struct_format(task.layout[:1]))  # task_id leads MSG_TASK
    again = bool(spec.flag("ready_required_after_result"))
    reader, writer = await asyncio.open_connection(ctx.host, ctx.port)
    taken: list[int] = []
    waits = 0
    try:
        writer.write(enc.encode("MSG_READY"))
        while len(taken) < DRAIN_TASKS_MAX:
            try:
                raw = await asyncio.wait_for(reader.readexactly(head.size), DRAIN_QUIET_S)
            except TimeoutError:
                break  # nothing more comes: the queue is empty (or the daemon holds READY)
            fields = head.unpack(raw)
            code, length = fields[at_type], fields[at_len]
            if length > DRAIN_FRAME_MAX:
                break
            payload = await asyncio.wait_for(reader.readexactly(length), DRAIN_QUIET_S * 4)
            if code == task.code and len(payload) >= tid.size:
                (task_id,) = tid.unpack_from(payload)
                taken.append(task_id)
                writer.write(enc.encode("MSG_DONE", task_id=task_id))
                if again:
                    writer.write(enc.encode("MSG_READY"))
            elif wait is not None and code == wait.code:
                waits += 1
                if waits > 1:
                    break
                await asyncio.sleep(0.05)  # a task requeued by a close just now
                writer.write(enc.encode("MSG_READY"))
            elif hb is not None and code == hb.code and "MSG_PONG" in spec.messages:
                writer.write(enc.encode("MSG_PONG"))
            await writer.drain()
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 1.0)
        except (TimeoutError, OSError):
            pass
    return taken
