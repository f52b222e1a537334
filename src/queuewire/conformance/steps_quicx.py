"""The quicx step interpreter: runs a YAML case's ``steps`` on a :class:`~.context.CaseContext`.

quicx has no request ids: frames are taken in arrival order, the next unclaimed frame on the
step's connection being the one an outcome judges. A connection's role (``role:`` on its first
step, default producer) picks how its frames are decoded, so a message the daemon must not send
to that role shows up as a decoding error. ``send`` builds a message with ``QuicxEncoder``
(bytes fields as ``hex:...`` or text); ``send_raw`` writes hex or a hand-made header. A step
without ``expect`` does not wait (many quicx messages have no answer). Outcomes are
``message: {type, fields}``, ``error: CODE_NAME``, ``close``, ``none: ms``; the judgement
(one check, matched outcome's requirement and level, strongest level on a miss, ``degraded``,
MUST failures stop the case) is the bunqueue interpreter's. A MSG_ERROR carrying the code the
profile answers an unknown message type with, sent in reply to the case's ``command``, makes
the case UNIMPLEMENTED. The runner drives :func:`run_step` for ``cleanup`` steps too, with
the context in cleanup mode (nothing judged).
"""

from __future__ import annotations

import re
import time
from typing import Any

from ..codecs.quicx import QuicxEncoder
from .context import CaseAbort, CaseContext, Conn, StepError, sleep_ms, strongest
from .matching import subset_mismatch
from .steps_bunqueue import (
    Observation,
    expected_outcomes,
    fill_observation,
    hex_bytes,
    match_transport,
    save_vars,
)

ERROR_FIELD = "error_code"  # the MSG_ERROR layout field the codecs name the error code


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
    if "send" in step:
        body = ctx.subst(step["send"])
        sent = body["type"]
        await conn.send_quicx(sent, fields_of(ctx, sent, body.get("fields") or {}))
    elif "send_raw" in step:
        data, note = raw_bytes(ctx, step["send_raw"])
        await conn.send_raw(data, note)
    if not outcomes:
        return
    obs = await observe(conn, outcomes, mark, timeout)
    judge(ctx, outcomes, obs, sent)
    save_vars(ctx, step, obs)


def fields_of(ctx: CaseContext, name: str, fields: dict) -> dict[str, Any]:
    """Case values to encoder values: bytes fields from ``hex:...`` or text."""
    msg = ctx.profile.model.messages[name]
    out = dict(fields)
    for f in msg.layout:
        v = out.get(f.id)
        if f.type == "bytes" and isinstance(v, str):
            out[f.id] = _bytes(v)
    return out


def _bytes(v: str) -> bytes:
    if v.startswith("hex:"):
        try:
            return bytes.fromhex(re.sub(r"\s+", "", v[4:]))
        except ValueError:
            raise StepError(f"{v[:40]!r} is not hex") from None
    return v.encode("utf-8")


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
        payload = _bytes(payload) if isinstance(payload, str) and payload.startswith("hex:") \
            else hex_bytes(payload) if isinstance(payload, str) else bytes(payload)
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


def _error_message(spec) -> set[str]:
    return {m.name for m in spec.messages.values() if any(f.id == ERROR_FIELD for f in m.layout)}


def _is_error(spec, value: Any, want: Any) -> bool:
    if getattr(value, "name", None) not in _error_message(spec):
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
        if value.name in _error_message(spec):
            code = value.fields.get(ERROR_FIELD)
            return f"got error code {code} ({spec.error_names.get(code, '?')})"
        return f"got {value.name}"
    return "no match"


def judge(ctx: CaseContext, outcomes: list[dict], obs: Observation, sent: str | None) -> None:
    spec = ctx.profile.model
    where = f"step {ctx.step}"
    matched = next((o for o in outcomes if _match_one(spec, o, obs)), None)
    if matched is not None:
        rid = matched.get("requirement") or ctx.default_requirement()
        level = matched.get("level") or ctx.level_of(rid)
        degraded = bool(matched.get("degraded"))
        msg = f"{where}: got {describe(matched)}"
        if degraded:
            msg += " (accepted, but not what the requirement asks first)"
        ctx.check(not degraded, msg, requirement=rid, level=level, kind="reply",
                  expected=expected_outcomes(outcomes), actual=obs.actual())
        if degraded and level == "MUST":
            raise CaseAbort()
        return
    value = obs.reply.value if obs.reply is not None else None
    unknown = spec.protocol_errors.get("unknown_type")
    if (sent is not None and sent == ctx.case.command and unknown is not None
            and unknown.error_code and value is not None
            and _is_error(spec, value, unknown.error_code)):
        ctx.unimplemented = True
        ctx.check(False, f"{where}: the target does not handle {sent} "
                  f"(error {unknown.error_code})", kind="unimplemented",
                  expected=expected_outcomes(outcomes), actual=obs.actual())
        raise CaseAbort()
    rids = [o.get("requirement") or ctx.default_requirement() for o in outcomes]
    level = strongest([o.get("level") or ctx.level_of(r) for o, r in zip(outcomes, rids)])
    expected = " or ".join(describe(o) for o in outcomes)
    ctx.check(False, f"{where}: expected {expected}; {why_not(spec, outcomes[0], obs)}",
              requirement=rids[0], level=level, kind="reply", expected=expected_outcomes(outcomes),
              actual=obs.actual())
    if level == "MUST":
        raise CaseAbort()
