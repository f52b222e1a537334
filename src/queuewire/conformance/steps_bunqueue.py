"""The bunqueue step interpreter: runs a YAML case's ``steps`` on a :class:`~.context.CaseContext`.

Each step is one action (``send``, ``send_raw``, ``send_frames``, ``pipeline``, ``recv``,
``sleep``, ``close``) on one connection, then, for the sending actions, an observation and a
judgement. The observation waits only as long as the outcomes need: a reply (matched by the
``reqId`` the step sent, or the next frame for raw bytes), a close, or, for ``none: ms``, a
quiet window. The judgement tries the outcomes in order (``any_of``) and records one ``reply``
check citing the matched outcome's requirement and level, or, when none matched, a failing
check at the strongest level among them. Every reply to a documented command is also validated
against the spec's schemas (``schema``, ``missing-field`` and ``extra-field`` checks). A reply
that is the spec's ``unknown_command`` error to the case's ``command`` makes the case
UNIMPLEMENTED. A failed MUST check (or a ``save`` that finds no value, unless its path ends
in ``?``: then the variable stays unset) stops the case; a
failed SHOULD lets it go on. ``http:`` steps go to the run's HTTP target through
:mod:`.httpapi` and are judged the same way (an :class:`Observation` holding the HTTP reply).
The runner also drives :func:`run_step` for a case's ``cleanup`` steps, with the context in
cleanup mode (checks become notes). The language is ``cases/README.md``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import FrameEncoder
from ..codecs.validation import BunqueueValidator
from ..spec.bunqueue import error_pattern
from . import httpapi
from .context import CaseAbort, CaseContext, Conn, StepError, get_path, sleep_ms, strongest
from .matching import probed_field, show, subset_mismatch
from .wire import Frame, Garbled

IMPLICIT: dict[str, Any] = {"ok": {}}  # a send without expect: the server must accept it

_validators: dict[str, BunqueueValidator] = {}


def validator(ctx: CaseContext) -> BunqueueValidator:
    v = _validators.get(ctx.profile.name)
    if v is None or v.profile is not ctx.profile:
        v = _validators[ctx.profile.name] = BunqueueValidator(ctx.profile)
    return v


@dataclass
class Observation:
    reply: Frame | None = None
    closed: str | None = None
    frames: list[Frame] = field(default_factory=list)   # every frame since the step began
    garbled: list[Garbled] = field(default_factory=list)
    nothing: bool = False  # a none: window passed quietly
    waited: float = 0.0
    http: httpapi.HttpReply | None = None  # an http: step's reply

    def actual(self) -> Any:
        if self.http is not None:
            return self.http.view()
        if self.nothing:
            return {"nothing": f"no frame within {self.waited * 1000:.0f} ms"}
        out: dict[str, Any] = {}
        if self.reply is not None:
            out["reply"] = self.reply.view
        others = [f.view for f in self.frames if f is not self.reply]
        if others:
            out["other_frames"] = others[:10]
        if self.garbled:
            out["undecodable"] = [g.error for g in self.garbled[:5]]
        if self.closed is not None:
            out["closed"] = self.closed
        if not out:
            out["nothing"] = f"nothing within {self.waited:.3g} s"
        return out


async def run_step(ctx: CaseContext, step: dict) -> None:
    timeout = float(step.get("timeout", ctx.timeout))
    if "http" in step:  # no TCP connection: the HTTP API has its own target
        await run_http(ctx, step, _outcomes(ctx, step), timeout)
        return
    conn = await ctx.conn(int(step.get("conn", 1)), auth=step.get("auth", True) is not False)
    if "sleep" in step:
        await sleep_ms(float(step["sleep"]))
        return
    if "close" in step:
        await conn.close()
        return
    outcomes = _outcomes(ctx, step)
    if "send" in step:
        await _send(ctx, conn, step, outcomes, timeout)
    elif "send_raw" in step:
        mark = conn.seq
        data, note = raw_bytes(ctx, step["send_raw"])
        await conn.send_raw(data, note)
        if outcomes:
            obs = await observe(conn, outcomes, mark, timeout,
                                lambda dl: conn.wait_next(dl, since=mark))
            save_vars(ctx, step, obs, optional=True)
            judge(ctx, outcomes, obs, None)
            save_vars(ctx, step, obs, optional=False)
    elif "send_frames" in step or "pipeline" in step:
        if "pipeline" in step:
            body = step["pipeline"]
            msgs = [ctx.subst(body["send"], {"i": i}) for i in range(int(body["count"]))]
        else:
            msgs = [ctx.subst(m) for m in step["send_frames"]]
        await _send_many(ctx, conn, step, msgs, outcomes, timeout)
    elif "recv" in step:
        mark = conn.seq
        obs = await observe(conn, outcomes, mark, timeout,
                            lambda dl: conn.wait_next(dl, since=None, unsolicited=True))
        save_vars(ctx, step, obs, optional=True)
        judge(ctx, outcomes, obs, None)
        save_vars(ctx, step, obs, optional=False)
    else:  # the loader refuses such steps; a generated case may still carry one
        raise StepError(f"step {ctx.step}: no action")


NO_HTTP_TARGET = "no --http-target"
IMPLICIT_HTTP = {"http": {"status": [200, 201]}}  # an http: step without expect


async def run_http(ctx: CaseContext, step: dict, outcomes: list[dict], timeout: float) -> None:
    """One ``http:`` step: a request to the HTTP target, judged like a reply.

    Without an HTTP target the case cannot be judged: it becomes INFO (the reason is a
    transcript note and a passing ``skipped`` check) and stops."""
    if ctx.http_target is None:
        ctx.info = True
        reason = (f"step {ctx.step}: not run: {NO_HTTP_TARGET} (the address of the server's "
                  f"HTTP API); the case is observation only")
        ctx.note(reason)
        ctx.check(True, reason, kind="skipped")
        raise CaseAbort()
    body = ctx.subst(step["http"])
    reply = await httpapi.request(
        ctx.transcript, ctx.http_target, str(body.get("method", "GET")), body["path"],
        json_body=body.get("json"), body=body.get("body"), headers=body.get("headers"),
        query=body.get("query"), token=ctx.auth_token if step.get("auth", True) is not False
        else None, stream=bool(body.get("stream")), timeout=timeout)
    implicit = not outcomes
    obs = Observation(http=reply)
    save_vars(ctx, step, obs, optional=True)
    judge(ctx, outcomes or [IMPLICIT_HTTP], obs, None, implicit=implicit)
    save_vars(ctx, step, obs, optional=False)


def _outcomes(ctx: CaseContext, step: dict) -> list[dict]:
    expect = step.get("expect")
    if expect is None:
        return []
    expect = ctx.subst(expect)
    return list(expect["any_of"]) if "any_of" in expect else [expect]


async def _send(ctx: CaseContext, conn: Conn, step: dict, outcomes: list[dict],
                timeout: float) -> None:
    msg = ctx.subst(step["send"])
    if step.get("reqid", True) is not False and "reqId" not in msg:
        msg["reqId"] = conn.next_reqid()
    mark = conn.seq
    await conn.send_message(msg)
    implicit = not outcomes
    if implicit:
        if step.get("wait") is False:
            return
        outcomes = [IMPLICIT]
    rid = msg.get("reqId")
    if rid is not None:
        def getter(dl):
            return conn.wait_reply(rid, dl)
    else:
        def getter(dl):
            return conn.wait_next(dl, since=mark)
    obs = await observe(conn, outcomes, mark, timeout, getter)
    cmd = msg.get("cmd") if isinstance(msg.get("cmd"), str) else None
    save_vars(ctx, step, obs, optional=True)
    judge(ctx, outcomes, obs, cmd, implicit=implicit, sent=msg)
    if obs.reply is not None and cmd is not None:
        validate(ctx, cmd, [obs.reply])
    save_vars(ctx, step, obs, optional=False)


async def _send_many(ctx: CaseContext, conn: Conn, step: dict, msgs: list[dict],
                     outcomes: list[dict], timeout: float) -> None:
    for m in msgs:
        if step.get("reqid", True) is not False and "reqId" not in m:
            m["reqId"] = conn.next_reqid()
    await conn.send_messages(msgs, int(step.get("split", 0) or 0))
    if not outcomes and step.get("wait") is False:
        return
    implicit = not outcomes
    outcomes = outcomes or [IMPLICIT]
    deadline = time.monotonic() + timeout
    rids = [m.get("reqId") for m in msgs]
    replies: list[Frame | None] = []
    for rid in rids:
        replies.append(await conn.wait_reply(rid, deadline) if rid is not None else None)
    # reqId echo: each answered exactly once (a duplicate already received stays in the inbox)
    wanted = {r for r in rids if r is not None}
    dupes = sorted({str(f.value.get("reqId")) for _, f in conn.inbox
                    if isinstance(f.value, dict) and f.value.get("reqId") in wanted})
    missing = [str(r) for r, rep in zip(rids, replies) if r is not None and rep is None]
    first = outcomes[0]
    rid_req = first.get("requirement") or ctx.default_requirement()
    ctx.check(not missing and not dupes,
              f"{len(wanted) - len(missing)} of {len(wanted)} requests answered once by reqId"
              + (f"; no reply for {_few(missing)}" if missing else "")
              + (f"; answered twice: {_few(dupes)}" if dupes else ""),
              requirement=rid_req, level=first.get("level") or ctx.level_of(rid_req),
              kind="reqid", expected={"reqIds": len(wanted)},
              actual={"missing": missing[:20], "duplicated": dupes[:20]})
    # the expectation applies to each reply: one check, the first mismatch shown
    bad = None
    for m, rep in zip(msgs, replies):
        obs = Observation(reply=rep, closed=conn.closed, waited=timeout)
        if rep is not None:
            obs.frames = [rep]
        if _match(ctx, outcomes, obs)[0] is None:
            bad = (m, obs)
            break
    if bad is None:
        obs = Observation(reply=next((r for r in replies if r is not None), None), closed=None)
        judge(ctx, outcomes, obs, None, implicit=implicit, count=len(msgs))
    else:
        m, obs = bad
        judge(ctx, outcomes, obs, m.get("cmd") if isinstance(m.get("cmd"), str) else None,
              implicit=implicit, count=len(msgs), which=m.get("reqId"), sent=m)
    by_cmd: dict[str, list[Frame]] = {}
    for m, rep in zip(msgs, replies):
        if rep is not None and isinstance(m.get("cmd"), str):
            by_cmd.setdefault(m["cmd"], []).append(rep)
    for cmd, reps in by_cmd.items():
        validate(ctx, cmd, reps)
    if missing and (first.get("level") or ctx.level_of(rid_req)) == "MUST":
        raise CaseAbort()


def _few(items: list[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


# ------------------------------------------------------------------------------ observing

async def observe(conn: Conn, outcomes: list[dict], mark: int, timeout: float, getter) -> Observation:
    """Wait for what the outcomes need (see the module docstring); never longer."""
    start = time.monotonic()
    deadline = start + timeout
    kinds = {k for o in outcomes for k in o if k in ("ok", "error", "frame", "close", "none")}
    obs = Observation()
    if "none" in kinds:
        window = max(float(o["none"]) for o in outcomes if "none" in o) / 1000.0
        got = await conn.wait_anything(min(deadline, start + window))
        if not got:
            obs.nothing = True
            obs.waited = time.monotonic() - start
            return obs
        if kinds == {"none"}:
            return fill_observation(conn, obs, mark, start)
    if kinds & {"ok", "error", "frame"}:
        obs.reply = await getter(deadline)
    if "close" in kinds:
        errors = conn.ctx.profile.model.errors
        reply_ok = obs.reply is not None and any(
            _match_one(o, obs, errors) for o in outcomes if set(o) & {"ok", "error", "frame"})
        if not reply_ok:
            await conn.wait_close(deadline)
    return fill_observation(conn, obs, mark, start)


def fill_observation(conn: Conn, obs: Observation, mark: int, start: float) -> Observation:
    frames = conn.frames_since(mark)
    if obs.reply is not None:
        frames = [obs.reply] + [f for f in frames if f is not obs.reply]
    obs.frames = frames
    obs.garbled = conn.garbled_since(mark)
    if conn.closed is not None and (conn.close_seq or 0) > mark:
        obs.closed = conn.closed
    obs.waited = time.monotonic() - start
    return obs


# ------------------------------------------------------------------------------ judging

def _error_matches(want: Any, value: Any, spec_errors) -> bool:
    if not isinstance(value, dict) or value.get("ok") is not False:
        return False
    if want is True:
        return True
    text = value.get("error")
    if not isinstance(text, str):
        return False
    if isinstance(want, dict):
        return re.search(want["matches"], text) is not None
    err = spec_errors.get(want)
    return err is not None and error_pattern(err.message).fullmatch(text) is not None


def _match_one(o: dict, obs: Observation, spec_errors) -> bool:
    """Whether outcome ``o`` holds for ``obs``."""
    if "http" in o:
        return httpapi.http_mismatch(o["http"] or {}, obs.http) is None
    rep = obs.reply.value if obs.reply is not None else None
    if "ok" in o:
        return isinstance(rep, dict) and rep.get("ok") is True and \
            subset_mismatch(o["ok"] or {}, rep) is None
    if "frame" in o:
        return obs.reply is not None and subset_mismatch(o["frame"] or {}, rep) is None
    if "error" in o:
        return obs.reply is not None and _error_matches(o["error"], rep, spec_errors)
    return match_transport(o, obs, lambda want, value: _error_matches(want, value, spec_errors))


def match_transport(o: dict, obs: Observation, is_error: Any) -> bool:
    """The outcomes both protocols share: ``close`` (optionally after an error frame, judged by
    ``is_error(want, value)``) and ``none``; False for any other outcome."""
    if "close" in o:
        if obs.closed is None:
            return False
        if isinstance(o["close"], dict):
            want = o["close"]["after_error"]
            return any(is_error(want, f.value) for f in obs.frames)
        return True
    if "none" in o:
        return obs.nothing
    return False


def _match(ctx: CaseContext, outcomes: list[dict], obs: Observation) -> tuple[dict | None, int]:
    errors = ctx.profile.model.errors
    for i, o in enumerate(outcomes):
        if _match_one(o, obs, errors):
            return o, i
    return None, -1


def describe(o: dict) -> str:
    if "http" in o:
        return httpapi.describe_outcome(o["http"] or {})
    if "ok" in o:
        return f"an ok reply containing {o['ok']}" if o["ok"] else "an ok reply"
    if "frame" in o:
        return f"a frame containing {o['frame']}"
    if "error" in o:
        e = o["error"]
        if e is True:
            return "an error reply"
        if isinstance(e, dict):
            return f"an error reply matching /{e['matches']}/"
        return f"the error reply {e}"
    if "close" in o:
        if isinstance(o["close"], dict):
            return f"the error reply {o['close']['after_error']} and then a close"
        return "the server closing the connection"
    if "none" in o:
        return f"nothing within {o['none']} ms"
    return str(o)


def why_not(ctx: CaseContext, o: dict, obs: Observation) -> str:
    if "http" in o:
        return httpapi.http_mismatch(o["http"] or {}, obs.http) or "no match"
    rep = obs.reply.value if obs.reply is not None else None
    if "none" in o:
        return "something arrived: " + _brief(obs)
    if "close" in o:
        if obs.closed is None:
            return "the connection stayed open" + (f" ({_brief(obs)})" if obs.frames else "")
        return "the connection closed without that error reply first"
    if obs.reply is None:
        if obs.closed is not None:
            return f"the connection closed ({obs.closed}) before a reply"
        if obs.garbled:
            return f"the server sent undecodable bytes: {obs.garbled[0].error.get('message', '')}"
        extra = f"; other frames: {_brief(obs)}" if obs.frames else ""
        return f"no reply within {obs.waited:.3g} s{extra}"
    if "ok" in o:
        if not isinstance(rep, dict) or rep.get("ok") is not True:
            return f"the reply is {_reply_text(rep)}"
        return subset_mismatch(o["ok"] or {}, rep) or "no match"
    if "frame" in o:
        return subset_mismatch(o["frame"] or {}, rep) or "no match"
    if "error" in o:
        return f"the reply is {_reply_text(rep)}"
    return "no match"


def _reply_text(rep: Any) -> str:
    if isinstance(rep, dict) and rep.get("ok") is False:
        return f"an error: {rep.get('error')!r}"
    if isinstance(rep, dict) and rep.get("ok") is True:
        return "ok"
    return f"not a reply ({str(rep)[:80]})"


def _brief(obs: Observation) -> str:
    parts = [str(f.view)[:120] for f in obs.frames[:3]]
    if obs.closed:
        parts.append(f"close ({obs.closed})")
    return "; ".join(parts) if parts else "nothing"


def judge(ctx: CaseContext, outcomes: list[dict], obs: Observation, cmd: str | None, *,
          implicit: bool = False, count: int = 0, which: Any = None, sent: Any = None) -> None:
    """Record the step's check; stop the case on a MUST failure or UNIMPLEMENTED. ``sent``:
    the request the reply answers; a limit case's check says the value it probed in it."""
    matched, _ = _match(ctx, outcomes, obs)
    kind = "setup" if implicit else "reply"
    where = f"step {ctx.step}"
    if count:
        where += f" (each of {count} replies" + (f", reqId {which}" if which is not None else "") + ")"
    probe = probed_field(ctx.case, sent)
    probed = "" if probe is None else f"; sent {probe[0]} = {show(probe[1], head=16)}"
    if matched is not None:
        rid = matched.get("requirement") or ctx.default_requirement()
        level = matched.get("level") or ctx.level_of(rid)
        degraded = bool(matched.get("degraded"))
        msg = f"{where}: got {describe(matched)}{probed}"
        if degraded:
            msg += " (accepted, but not what the requirement asks first)"
        ctx.check(not degraded, msg, requirement=rid, level=level, kind=kind,
                  expected=expected_outcomes(outcomes), actual=obs.actual())
        if degraded and level == "MUST":
            raise CaseAbort()
        return
    # unknown command -> UNIMPLEMENTED, when it is the command under test
    rep = obs.reply.value if obs.reply is not None else None
    unknown = ctx.profile.model.errors.get("unknown_command")
    if (cmd is not None and cmd == ctx.case.command and unknown is not None
            and isinstance(rep, dict) and rep.get("ok") is False
            and isinstance(rep.get("error"), str)
            and error_pattern(unknown.message).fullmatch(rep["error"])):
        ctx.unimplemented = True
        ctx.check(False, f"{where}: the target does not know {cmd}: {rep['error']!r}",
                  kind="unimplemented", expected=expected_outcomes(outcomes), actual=obs.actual())
        raise CaseAbort()
    rids = [o.get("requirement") or ctx.default_requirement() for o in outcomes]
    levels = [o.get("level") or ctx.level_of(r) for o, r in zip(outcomes, rids)]
    level = strongest(levels)
    expected = " or ".join(describe(o) for o in outcomes)
    reasons = why_not(ctx, outcomes[0], obs)
    ctx.check(False, f"{where}: expected {expected}; {reasons}{probed}", requirement=rids[0],
              level=level, kind=kind, expected=expected_outcomes(outcomes), actual=obs.actual())
    if level == "MUST":
        raise CaseAbort()


def expected_outcomes(outcomes: list[dict]) -> Any:
    return outcomes[0] if len(outcomes) == 1 else {"any_of": outcomes}


def validate(ctx: CaseContext, cmd: str, replies: list[Frame]) -> None:
    """Schema, missing-field and extra-field checks of replies to a documented command.

    A reply's shape is judged only by the cases that cite the command's requirement
    (``BQ-CMD-<cmd>``: its generated shape case, and hand-written cases about that shape), and
    a schema rule with a requirement of its own (the job states of BQ-JOB-1, say) by the cases
    that cite that one. In any other case the command is a step towards some behaviour, and a
    shape problem of its reply is recorded as an INFO observation that cannot change the
    verdict: a behaviour is judged by its own checks, and a shape where it is the subject."""
    spec = ctx.profile.model
    command = spec.commands.get(cmd)
    if command is None:
        return
    v = validator(ctx)
    rid = command.requirement
    if rid not in ctx.case.requirements:
        _judge_cited(ctx, v, cmd, rid, replies)
        return
    seen: set[tuple] = set()
    clean = True
    extras: dict[str, bool] = {}  # undocumented field path -> its value was null
    for rep in replies:
        value = rep.value
        if not isinstance(value, dict):
            continue
        ok = value.get("ok") is True
        missing = v.missing_fields(cmd, value, reply=True) if ok else []
        for f in missing:
            key: tuple[str | None, ...] = ("missing", f)
            if key not in seen:
                seen.add(key)
                clean = False
                ctx.check(False, f"step {ctx.step}: the {cmd} reply lacks the required field {f}",
                          requirement=rid, level=ctx.level_of(rid), kind="missing-field",
                          expected=f, actual=rep.view)
        for viol in v.reply_violations(cmd, value):
            if viol.path == "" and any(repr(f) in viol.message or f"\"{f}\"" in viol.message
                                       for f in missing):
                continue  # reported as a missing field
            key = ("schema", viol.requirement, viol.path)
            if key in seen:
                continue
            seen.add(key)
            clean = False
            ctx.check(False, f"step {ctx.step}: the {cmd} reply breaks its schema at "
                      f"{viol.path or '/'}: {viol.message}", requirement=viol.requirement,
                      level=ctx.level_of(viol.requirement), kind="schema",
                      expected=f"{cmd} {'response' if ok else 'error reply'} schema",
                      actual=rep.view)
        if ok:
            for path, null in v.undocumented_fields(cmd, value, reply=True).items():
                extras[path] = extras.get(path, True) and null
    if extras:  # reported at any depth, an undocumented null apart from a value (INFO)
        shown = [f"{path} (null)" if null else path for path, null in sorted(extras.items())]
        ctx.check(True, f"step {ctx.step}: the {cmd} reply has fields the documents do not "
                  f"define: {', '.join(shown)}", requirement=rid, level="INFO",
                  kind="extra-field", actual=shown)
    if clean:
        n = f"{len(replies)} replies match" if len(replies) > 1 else "the reply matches"
        ctx.check(True, f"step {ctx.step}: {n} the {cmd} reply schema", requirement=rid,
                  level=ctx.level_of(rid), kind="schema")


def _judge_cited(ctx: CaseContext, v: Any, cmd: str, rid: str, replies: list[Frame]) -> None:
    """The shape findings of a step whose case does not judge ``cmd``'s shape: those citing a
    requirement the case cites are judged, the others recorded as an INFO observation."""
    found: list[str] = []
    errors = ctx.profile.model.protocol_errors
    # rules every shape case cites (BQ-ENV-6, BQ-ENV-7) judge only the command under test
    generic = {errors[k].requirement for k in ("schema_violation", "null_optional")}
    cited = set(ctx.case.requirements) - generic
    for rep in replies:
        value = rep.value
        if not isinstance(value, dict):
            continue
        if value.get("ok") is True:
            found += [f"lacks {f}" for f in v.missing_fields(cmd, value, reply=True)]
        for viol in v.reply_violations(cmd, value):
            if viol.requirement in cited:
                ctx.check(False, f"step {ctx.step}: the {cmd} reply breaks its schema at "
                          f"{viol.path or '/'}: {viol.message}", requirement=viol.requirement,
                          level=ctx.level_of(viol.requirement), kind="schema",
                          expected=f"{cmd} response schema", actual=rep.view)
            else:
                found.append(f"{viol.requirement} at {viol.path or '/'}: {viol.message}")
    if found:
        shown = list(dict.fromkeys(found))
        ctx.check(True, f"step {ctx.step}: the {cmd} reply's shape is judged by the cases citing "
                  f"{rid}, not here; seen: {'; '.join(shown)}", requirement=rid, level="INFO",
                  kind="shape-observed", actual=shown)


def save_vars(ctx: CaseContext, step: dict, obs: Observation, *,
              optional: bool | None = None) -> None:
    """The step's ``save:`` from the reply: all of them, or with ``optional`` True only the
    optional ones (``?``), False only the others. A step saves its optional ones before it
    judges, so that a thing the request made (a webhook a server wrongly accepted under a
    MUST expectation) is still known to the cleanup when a failed check stops the case, and
    the others after."""
    save = step.get("save")
    if not save:
        return
    if obs.http is not None:  # an http: step saves from its JSON body
        value = obs.http.json if obs.http.is_json else None
    else:
        value = obs.reply.value if obs.reply is not None else None
    for name, written in save.items():
        maybe = written.endswith("?")  # a thing the request may have made: kept if there
        if optional is not None and maybe is not optional:
            continue
        path = written[:-1] if maybe else written
        try:
            ctx.set_var(name, get_path(value, path))
        except KeyError:
            if maybe:
                ctx.unsaved[name] = path
                continue
            ctx.check(False, f"step {ctx.step}: the reply has no {path} to save as {name}",
                      kind="save", expected=path, actual=obs.actual())
            raise CaseAbort() from None


# ------------------------------------------------------------------------------ raw bytes

def raw_bytes(ctx: CaseContext, body: Any) -> tuple[bytes, str]:
    """The bytes of a ``send_raw`` step and a note describing them."""
    body = ctx.subst(body)
    if isinstance(body, str):
        return hex_bytes(body), "raw bytes"
    if "hex" in body:
        n = int(body.get("repeat", 1))
        return hex_bytes(body["hex"]) * n, f"raw bytes x{n}" if n != 1 else "raw bytes"
    encoder = FrameEncoder(ctx.profile)
    if "frame" in body:
        payload = encoder.payload(body["frame"])
        if "declared_length" in body:
            n = int(body["declared_length"])
            return encoder.prefix(n) + payload, f"frame declaring {n} bytes, carrying {len(payload)}"
        frame = encoder.prefix(len(payload)) + payload
        if "truncate" in body:
            k = int(body["truncate"])
            return frame[:k], f"the first {k} of {len(frame)} bytes of a frame"
        return frame, "one frame"
    if "length_prefix" in body:
        n, m = int(body["length_prefix"]), int(body.get("body_bytes", 0))
        return encoder.prefix(n) + bytes(m), f"length prefix {n}, then {m} zero bytes"
    raise StepError(f"step {ctx.step}: send_raw: nothing to send in {sorted(body)}")


def hex_bytes(text: str) -> bytes:
    try:
        return bytes.fromhex(re.sub(r"\s+", "", text))
    except ValueError:
        raise StepError(f"send_raw: {text[:40]!r} is not hex") from None
