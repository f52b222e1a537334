"""Generated quicx conformance cases: every malformed frame the test vectors describe, sent to
the daemon, plus split, coalesced and limit probes built from the profile.

Nothing here writes down an opcode, a limit or an error code: frames come from
:class:`~queuewire.codecs.quicx.QuicxEncoder` (``frame`` for hostile headers) and from
:func:`queuewire.vectors.quicx.generate`, whose negative vectors received by the ``daemon``
role already say which error kind the spec assigns to each malformed stream, its reaction
(``reply``: the daemon answers MSG_ERROR with the kind's code and goes on; ``close``) and the
requirement it enforces. Each vector becomes a case that sends its bytes and expects that
reaction; a ``reply`` case then sends a MSG_HEARTBEAT on the same connection and expects
MSG_PONG, which shows the daemon skipped exactly the refused frame and kept the stream in
sync. Vectors whose kind is ``truncated`` cannot be judged by a daemon until the stream ends,
so they become *split* cases instead: a partial frame must not be answered, and completing it
gets the normal answer. Error-code names in the expectations are looked up from the numbers
the vectors carry (``QuicxSpec.error_names``), message names are the spec's keys, and the
roles a tester connection decodes replies as are chosen from the profile's direction table
(quicx/1.0.3 sends MSG_PONG only to workers). Every case that gets a task accepted drains it
(a worker takes it and answers MSG_DONE), so cases can share one daemon: the quicx queue has
no names to isolate cases by.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

from ..codecs.quicx import QuicxEncoder, frame_spans
from ..spec import Profile, load_profile
from ..spec.quicx import DAEMON, QuicxSpec
from ..vectors.quicx import SAMPLE_REST_BYTES, SAMPLE_SIZED_TEXT, generate
from .model import Case

PROTOCOL = "quicx"
SUBMIT, OK, ERROR, READY, TASK, DONE = ("MSG_SUBMIT", "MSG_OK", "MSG_ERROR", "MSG_READY",
                                        "MSG_TASK", "MSG_DONE")
HEARTBEAT, PONG, FAILED = "MSG_HEARTBEAT", "MSG_PONG", "MSG_FAILED"
#: How long a daemon is given to (wrongly) answer a partial frame, in ms. Not a timing
#: assertion on the daemon: the correct behaviour is silence, so waiting longer cannot pass a
#: daemon that answers, only catch a slower one.
SILENCE_MS = 100
GEN = "generate_quicx"


def _profile(profile: Profile | str) -> Profile:
    return load_profile(profile) if isinstance(profile, str) else profile


def _hex(data: bytes) -> str:
    return data.hex()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _roles_receiving(spec: QuicxSpec, *names: str) -> list[str]:
    """Client roles the daemon may send every one of ``names`` to, in spec order."""
    return [r for r in spec.peer_roles if all(spec.allowed(n, DAEMON, r) for n in names)]


def probe_role(spec: QuicxSpec, preferred: str | None = None) -> str:
    """A role that may receive both MSG_ERROR and MSG_PONG (the probe's answers)."""
    roles = _roles_receiving(spec, ERROR, PONG)
    if not roles:
        raise ValueError("no client role receives both MSG_ERROR and MSG_PONG in this profile")
    return preferred if preferred in roles else roles[0]


def probe(spec: QuicxSpec, conn: int = 1) -> list[dict]:
    """MSG_HEARTBEAT answered by MSG_PONG: after a refusal the daemon kept the connection and
    the stream in sync. Judged by the requirement of the profile's ``open_after_error`` flag
    (not by the rule the refused frame broke), and marked ``probe``: a daemon that fails it
    fails it in every such case, so the run reports it once (``CaseContext.known_defect``)."""
    expect: dict[str, Any] = {"message": {"type": PONG},
                              "requirement": spec.semantics["open_after_error"].requirement}
    # probe: the rule a daemon breaks that answers no MSG_HEARTBEAT at all
    return [{"conn": conn, "send": {"type": HEARTBEAT}, "expect": expect, "probe": "QX-HB-2"}]


def drain(*names: str, spec: QuicxSpec | None = None, conn: int = 9) -> list[dict]:
    """A fresh worker takes the tasks saved in ``${name}`` (in order of acceptance) and
    completes each. After a result it asks again with MSG_READY where the profile requires it
    (``ready_required_after_result``), else it waits for the task the daemon pushes."""
    names = names or ("tid",)
    again = True if spec is None else bool(spec.flag("ready_required_after_result"))
    steps: list[dict] = []
    for i, var in enumerate(names):
        want = {"message": {"type": TASK, "fields": {"task_id": "${" + var + "}"}}}
        if i == 0:
            steps.append({"conn": conn, "role": "worker", "send": {"type": READY}, "expect": want})
        elif again:
            steps.append({"conn": conn, "send": {"type": READY}, "expect": want})
        else:
            steps.append({"conn": conn, "recv": True, "expect": want})
        steps.append({"conn": conn, "send": {"type": DONE, "fields": {"task_id": "${" + var + "}"}}})
    return steps


def _no_task(spec: QuicxSpec) -> int:
    """A task id no connection of a case holds: the largest the field can carry."""
    largest = next(f for f in spec.message(DONE).layout if f.id == "task_id").max_value
    assert largest is not None  # task_id is an integer field
    return largest


def _sample_submit(spec: QuicxSpec) -> dict[str, Any]:
    return {"task_type": SAMPLE_SIZED_TEXT, "payload": SAMPLE_REST_BYTES}


def _case(profile: Profile, cid: str, title: str, requirements: Iterable[str | None],
          steps: list[dict], *, tags: tuple[str, ...] = (), command: str | None = None,
          info: bool = False) -> Case:
    probes = [r for s in steps if s.get("probe")
              for r in (s["expect"].get("requirement"), s["probe"]) if isinstance(r, str)]
    reqs = tuple(dict.fromkeys(r for r in (*requirements, *probes)
                               if r and r in profile.requirements))
    return Case(id=cid, title=title, protocol=PROTOCOL, requirements=reqs, steps=tuple(steps),
                profiles=(profile.name,), command=command, info=info,
                tags=tuple(dict.fromkeys((*tags, "generated"))), source=f"{GEN}:{cid}",
                exclusive=uses_task_queue(steps, profile.model))


def uses_task_queue(steps: Iterable[dict], spec: QuicxSpec) -> bool:
    """Whether steps touch the daemon's one task queue (a worker asks for a task, a producer
    submits one, a monitor reads the counts): such a case is exclusive (runs alone under
    --jobs), since another case's tasks would reach its worker or its figures, and the runner
    drains the queue after it. Raw bytes count too when a frame in them is one of those
    messages: a daemon may accept a MSG_SUBMIT the spec refuses (an invalid task type, a
    lenient reading), and its task must not reach a later case."""
    names = (SUBMIT, READY, "MSG_STATS")
    codes = {spec.messages[n].code for n in names if n in spec.messages}
    for s in steps:
        if isinstance(s.get("send"), dict) and s["send"].get("type") in names:
            return True
        raw = s.get("send_raw")
        if isinstance(raw, str) and any(
                f.code in codes and f.version in spec.accepted_versions  # else it is refused
                for f in frame_spans(spec, bytes.fromhex(re.sub(r"\s+", "", raw)))):
            return True
    return False




def _code_requirement(spec: QuicxSpec, code: int) -> str | None:
    name = spec.error_names.get(code)
    return spec.error_codes[name].requirement if name else None


# ------------------------------------------------------------------------------- vectors
def vector_cases(profile: Profile | str) -> list[Case]:
    """One case per negative test vector the daemon receives (reaction reply or close)."""
    profile = _profile(profile)
    spec: QuicxSpec = profile.model
    out = []
    for vec in generate(profile.name):
        err = vec.get("error")
        if vec["role"] != DAEMON or err is None or err["kind"] == "truncated":
            continue
        suffix = vec["id"][len(profile.name) + 1:]
        sender = (vec.get("direction") or "").split("->")[0] or None
        kind = err["kind"]
        req = spec.error(kind).answered_by  # what the daemon's answer is judged by
        reqs: list[str | None] = [req, err["requirement"], "QX-HDR-1"]
        # where the documents leave the daemon's answer to a peer's broken rule open, the
        # answer rests on queuewire's decision and is only observed (spec/README.md, levels)
        info = req != err["requirement"] and \
            getattr(profile.requirements.get(req), "basis", None) == "decision"
        if err["reaction"] == "reply":
            code = err["error_code"]
            name = spec.error_names[code]
            reqs += [_code_requirement(spec, code), "QX-ERR-1", spec.message(ERROR).requirement]
            role = probe_role(spec, sender)
            if role != "producer":
                reqs.append("QX-DIR-3")  # MSG_ERROR to a worker or monitor
            data = bytes.fromhex(vec["hex"])
            steps = [{"role": role, "send_raw": vec["hex"],
                      "expect": {"error": name, "requirement": req}}]
            if _complete(spec, data):  # else the daemon skips bytes that never come
                steps += probe(spec)
            title = (f"{suffix}: the daemon answers MSG_ERROR {name} ({kind}) and reads the "
                     f"next frame")
        else:  # close
            role = sender if sender in spec.peer_roles else spec.peer_roles[0]
            steps = [{"role": role, "send_raw": vec["hex"], "expect": {"close": True}}]
            title = f"{suffix}: the daemon closes the connection ({kind})"
        reqs += _extra_requirements(spec, kind, vec)
        out.append(_case(profile, f"quicx.vector.{_slug(suffix)}", title, reqs, steps,
                         tags=("vector", kind), info=info))
    return out


def _complete(spec: QuicxSpec, data: bytes) -> bool:
    """Whether ``data`` holds every byte its header declares (frames back to back)."""
    spans = frame_spans(spec, data)
    return (spans[-1].end if spans else 0) == len(data)


def _vector_ids(profile: Profile) -> set[str]:
    return {v["id"][len(profile.name) + 1:] for v in generate(profile.name)}


def _extra_requirements(spec: QuicxSpec, kind: str, vec: dict) -> list[str]:
    """Requirements a vector exercises beyond the one its kind cites."""
    extra: list[str] = []
    if kind == "bad_version":
        extra += ["QX-HDR-2", "QX-HDR-101"]
    if kind in ("unknown_type", "wrong_direction", "reserved_type", "not_on_tcp"):
        extra += ["QX-HDR-4", "QX-MSG-13"]
        m = spec.opcode(bytes.fromhex(vec["hex"])[spec.header_offsets["msg_type"]])
        if m is not None and m.requirement and m.transport == spec.transport:
            extra.append(m.requirement)  # (a refusal on TCP says nothing of the other transport)
    if kind in ("payload_forbidden", "payload_required", "payload_size", "done_body_size"):
        extra += ["QX-HDR-5", "QX-HDR-6", "QX-HDR-7"]
    if kind in ("submit_type_len", "invalid_text", "invalid_reason", "reason_too_long"):
        extra.append("QX-HDR-7")
    if kind == "payload_too_large":
        extra += ["QX-ERR-4", "QX-HDR-5"]
    return extra


# ---------------------------------------------------------------------------- split frames
def _split_points(spec: QuicxSpec, frame: bytes) -> dict[str, list[int]]:
    """Named ways of cutting ``frame`` into pieces (cut offsets)."""
    hs = spec.header_size
    len_at = spec.header_offsets["len_payload"]
    return {
        "inside-header": [1],
        "inside-length-field": [len_at + 1],
        "after-header": [hs],
        "inside-payload": [hs + (len(frame) - hs) // 2],
        "three-pieces": [len_at, hs + 1],
        "byte-by-byte": list(range(1, len(frame))),
    }


def split_cases(profile: Profile | str) -> list[Case]:
    """The sample MSG_SUBMIT cut in pieces: no answer before its last byte, then MSG_OK."""
    profile = _profile(profile)
    spec: QuicxSpec = profile.model
    frame = QuicxEncoder(profile).encode(SUBMIT, **_sample_submit(spec))
    out = []
    for name, cuts in _split_points(spec, frame).items():
        pieces = [frame[a:b] for a, b in itertools.pairwise([0, *cuts, len(frame)])]
        steps: list[dict] = []
        for i, piece in enumerate(pieces[:-1]):
            step: dict[str, Any] = {"send_raw": _hex(piece)}
            if i == 0:
                step["role"] = "producer"
            if name != "byte-by-byte" or i == len(pieces) - 2:
                step["expect"] = {"none": SILENCE_MS}
            steps.append(step)
        steps.append({"send_raw": _hex(pieces[-1]),
                      "expect": {"message": {"type": OK, "fields": {"task_id": {"$type": "int"}}}},
                      "save": {"tid": "task_id"}})
        steps += drain(spec=spec)
        out.append(_case(profile, f"quicx.split.submit-{name}",
                         f"A MSG_SUBMIT written in {len(pieces)} pieces ({name}) is answered once, "
                         f"after its last byte", ["QX-HDR-7", "QX-HDR-1", "QX-HDR-5", "QX-OK-1"],
                         steps, tags=("framing", "split")))
    return out


def truncated_cases(profile: Profile | str) -> list[Case]:
    """The ``truncated`` vectors: a stream stopped inside a frame is not answered, and the
    frame's missing bytes complete it."""
    profile = _profile(profile)
    spec: QuicxSpec = profile.model
    good = QuicxEncoder(profile).encode(SUBMIT, **_sample_submit(spec))
    out = []
    for vec in generate(profile.name):
        err = vec.get("error")
        if vec["role"] != DAEMON or not err or err["kind"] != "truncated":
            continue
        data = bytes.fromhex(vec["hex"])
        suffix = vec["id"][len(profile.name) + 1:]
        if not good.startswith(data[:len(good)]) or len(data) > 2 * len(good):
            continue  # a header claiming more than can be sent: see limit_cases
        whole, rest = divmod(len(data), len(good))
        if rest == 0:
            continue
        first: dict[str, Any] = {"role": "producer", "send_raw": _hex(data)}
        steps: list[dict] = [first]
        if whole:  # the complete frame before the partial one is answered at once
            first.update(expect={"message": {"type": OK}}, save={"tid0": "task_id"})
            steps.append({"recv": True, "expect": {"none": SILENCE_MS}})
        else:
            first["expect"] = {"none": SILENCE_MS}
        steps.append({"send_raw": _hex(good[rest:]), "expect": {"message": {"type": OK}},
                      "save": {"tid": "task_id"}})
        steps += drain(*(("tid0",) if whole else ()), "tid", spec=spec)
        out.append(_case(profile, f"quicx.truncated.{_slug(suffix)}",
                         f"{suffix}: a frame cut short is not answered until its last byte "
                         f"arrives", [err["requirement"], "QX-HDR-1", "QX-HDR-5"], steps,
                         tags=("framing", "truncated")))
    return out


# ------------------------------------------------------------------------------- coalesced
def coalesced_cases(profile: Profile | str) -> list[Case]:
    """Several frames in one write are answered one by one, in order."""
    profile = _profile(profile)
    spec: QuicxSpec = profile.model
    enc = QuicxEncoder(profile)
    role = probe_role(spec)
    hb = enc.encode(HEARTBEAT)
    submit = enc.encode(SUBMIT, **_sample_submit(spec))
    out = []
    # frames of one kind in one write, answered one by one, in order
    hb_role = _roles_receiving(spec, PONG)[0]
    out.append(_case(profile, "quicx.coalesced.heartbeats",
                     "Three MSG_HEARTBEATs in one write are answered by three MSG_PONGs",
                     ["QX-HDR-1", "QX-HB-2", "QX-PONG-1"],
                     [{"role": hb_role, "send_raw": _hex(hb * 3), "expect": {"message": {"type": PONG}}},
                      {"recv": True, "expect": {"message": {"type": PONG}}},
                      {"recv": True, "expect": {"message": {"type": PONG}}},
                      {"recv": True, "expect": {"none": SILENCE_MS}}],
                     tags=("framing", "coalesced")))
    names = ("t1", "t2", "t3")
    steps: list[dict[str, Any]] = [{"role": "producer", "send_raw": _hex(submit * len(names)),
              "expect": {"message": {"type": OK}}, "save": {names[0]: "task_id"}}]
    steps += [{"recv": True, "expect": {"message": {"type": OK}}, "save": {n: "task_id"}}
              for n in names[1:]]
    out.append(_case(profile, "quicx.coalesced.submits",
                     "Three MSG_SUBMITs in one write are answered by three MSG_OKs, and the tasks "
                     "reach a worker in that order",
                     ["QX-HDR-1", "QX-OK-1", "QX-QUEUE-1"], steps + drain(*names, spec=spec),
                     tags=("framing", "coalesced")))
    # heartbeat, submit, heartbeat -> pong, ok, pong, where one role receives both
    both = _roles_receiving(spec, OK, PONG)
    if both:
        out.append(_case(profile, "quicx.coalesced.heartbeat-submit-heartbeat",
                         "MSG_HEARTBEAT, MSG_SUBMIT and MSG_HEARTBEAT in one write are answered "
                         "MSG_PONG, MSG_OK, MSG_PONG in that order",
                         ["QX-HDR-1", "QX-HB-2", "QX-OK-1", "QX-PONG-1"],
                         [{"role": both[0], "send_raw": _hex(hb + submit + hb),
                           "expect": {"message": {"type": PONG}}},
                          {"recv": True, "expect": {"message": {"type": OK}},
                           "save": {"tid": "task_id"}},
                          {"recv": True, "expect": {"message": {"type": PONG}}},
                          *drain(spec=spec)],
                         tags=("framing", "coalesced")))
    # a refused frame with a payload between two good frames: skipped by its length
    bad = next((v for v in generate(profile.name)
                if v["role"] == DAEMON and v.get("error") and v["error"]["kind"] == "bad_version"),
               None)
    if bad is not None:
        done = enc.encode(DONE, task_id=_no_task(spec))
        bad_done = enc.frame(spec.message(DONE).code, done[spec.header_size:],
                             version=bytes.fromhex(bad["hex"])[0])
        code_name = spec.error_names[bad["error"]["error_code"]]
        out.append(_case(profile, "quicx.coalesced.refused-frame-skipped",
                         "A MSG_DONE with a bad version between two heartbeats in one write: "
                         "MSG_PONG, MSG_ERROR, MSG_PONG (its payload is skipped by its length)",
                         ["QX-HDR-3", "QX-HDR-7", "QX-HDR-1", "QX-ERR-3"],
                         [{"role": role, "send_raw": _hex(hb + bad_done + hb),
                           "expect": {"message": {"type": PONG}}},
                          {"recv": True, "expect": {"error": code_name}},
                          {"recv": True, "expect": {"message": {"type": PONG}}},
                          {"recv": True, "expect": {"none": SILENCE_MS}}],
                         tags=("framing", "coalesced")))
    # every opcode the profile does not define, one empty frame each, in one write
    unknown = [c for c in range(256) if spec.opcode(c) is None]
    kind = spec.error("unknown_type")
    name = spec.error_names[spec.reply_code("unknown_type")]
    steps = [{"role": role, "send_raw": _hex(b"".join(enc.frame(c) for c in unknown)),
                          "expect": {"error": name}}]
    steps += [{"recv": True, "expect": {"error": name}} for _ in unknown[1:]]
    steps += probe(spec)
    out.append(_case(profile, "quicx.coalesced.every-unknown-opcode",
                     f"All {len(unknown)} opcodes the profile does not define, in one write: one "
                     f"MSG_ERROR {name} each, then the connection still works",
                     [kind.requirement, "QX-HDR-4", "QX-MSG-13",
                      _code_requirement(spec, spec.reply_code("unknown_type"))], steps,
                     tags=("framing", "coalesced", "header")))
    return out


# -------------------------------------------------------------------- zero-length rules
def payload_rule_cases(profile: Profile | str) -> list[Case]:
    """Every empty-payload message the daemon accepts, sent with one byte of payload, and
    every message it accepts with a required payload, sent with none."""
    profile = _profile(profile)
    spec: QuicxSpec = profile.model
    enc = QuicxEncoder(profile)
    have = _vector_ids(profile)
    out = []
    for m in spec.messages.values():
        senders = [s for s in spec.peer_roles if spec.allowed(m.name, s, DAEMON)]
        if not senders:
            continue
        if m.payload == "empty":
            kind, data, what = "payload_forbidden", enc.frame(m.code, b"\x00"), "one byte of payload"
        elif m.payload == "required":
            kind, data, what = "payload_required", enc.frame(m.code), "length 0"
        else:
            continue
        if f"{kind}/{m.name}" in have:
            continue  # a vector case sends it already
        code = spec.reply_code(kind)
        name = spec.error_names[code]
        role = probe_role(spec, senders[0])
        out.append(_case(profile, f"quicx.length.{_slug(m.name)}-{_slug(kind)}",
                         f"{m.name} with {what} is refused with MSG_ERROR {name}",
                         [spec.error(kind).requirement, "QX-HDR-5", "QX-HDR-7",
                          _code_requirement(spec, code), m.requirement],
                         [{"role": role, "send_raw": _hex(data),
                           "expect": {"error": name}}, *probe(spec)],
                         tags=("header", "length"), command=m.name))
    return out


# ---------------------------------------------------------------------------------- limits
def limit_cases(profile: Profile | str) -> list[Case]:
    """The payload cap at its edges (when the profile gives one small enough to send), a
    header that claims the largest length the field can hold, and the longest task type."""
    profile = _profile(profile)
    spec: QuicxSpec = profile.model
    enc = QuicxEncoder(profile)
    sub, task = spec.message(SUBMIT), spec.message(TASK)
    ok_any = {"message": {"type": OK, "fields": {"task_id": {"$type": "int"}}}}
    too_large = spec.error_names[spec.reply_code("payload_too_large")]
    task_too_large = spec.error_names[spec.reply_code("task_too_large")]
    out = []
    fixed = len(enc.encode(SUBMIT, task_type=SAMPLE_SIZED_TEXT, payload=b"")) - spec.header_size
    cap = spec.max_payload_bytes
    huge = {f.id: f for f in spec.header}["len_payload"].max_value
    assert huge is not None  # len_payload is an integer field
    if cap is not None and cap < huge:
        header_only = enc.frame(sub.code, length=cap + 1)
        out.append(_case(profile, "quicx.limit.header-over-max-payload",
                         f"A header claiming {cap + 1} bytes is refused from the header alone, "
                         f"before any payload arrives",
                         [spec.error("payload_too_large").requirement, "QX-ERR-4"],
                         [{"role": "producer", "send_raw": _hex(header_only),
                           "expect": {"error": too_large}}],
                         tags=("limit",), command=SUBMIT))
        # a whole MSG_SUBMIT one byte over the cap: refused, its payload skipped, the stream
        # in sync (a daemon that reads whole frames first meets it only this way)
        empty = enc.encode(SUBMIT, task_type=SAMPLE_SIZED_TEXT, payload=b"")[spec.header_size:]
        over = enc.frame(sub.code, empty + bytes(cap + 1 - fixed))  # the payload is the rest
        out.append(_case(profile, "quicx.limit.submit-just-over-max-payload",
                         f"A whole MSG_SUBMIT of {cap + 1} bytes, one over max_payload_bytes, is "
                         f"refused {too_large} and the next frame is read",
                         [spec.error("payload_too_large").requirement, "QX-ERR-4", "QX-HDR-7"],
                         [{"role": probe_role(spec, "producer"), "send_raw": _hex(over),
                           "expect": {"error": too_large}}, *probe(spec)],
                         tags=("limit",), command=SUBMIT))
        # the largest MSG_SUBMIT whose MSG_TASK (task id prepended) still fits the cap
        grow = task.min_size - sub.min_size
        fit = cap - grow
        data = enc.encode(SUBMIT, task_type=SAMPLE_SIZED_TEXT, payload=bytes(fit - fixed))
        out.append(_case(profile, "quicx.limit.submit-largest-task",
                         f"A MSG_SUBMIT of {fit} bytes, whose MSG_TASK is exactly max_payload_bytes "
                         f"({cap}), is accepted and handed out whole",
                         ["QX-LIMIT-101", "QX-ERR-4", "QX-TASK-2", "QX-OK-1"],
                         [{"role": "producer", "send_raw": _hex(data), "expect": ok_any,
                           "save": {"tid": "task_id"}},
                          {"conn": 2, "role": "worker", "send": {"type": READY},
                           "expect": {"message": {"type": TASK, "fields": {
                               "task_id": "${tid}", "task_type": SAMPLE_SIZED_TEXT,
                               "payload": "hex:" + bytes(fit - fixed).hex()}}}},
                          {"conn": 2, "send": {"type": DONE, "fields": {"task_id": "${tid}"}}}],
                         tags=("limit",), command=SUBMIT))
        for total in (cap - 1, cap):
            if total <= fit:
                continue
            out.append(Case(
                id=f"quicx.limit.submit-{total}-bytes",
                title=f"A MSG_SUBMIT of {total} bytes (within max_payload_bytes) is not an invalid "
                      f"frame: accepted, or refused {task_too_large} because its MSG_TASK would "
                      f"exceed the cap",
                protocol=PROTOCOL, requirements=("QX-LIMIT-101", "QX-ERR-4"),
                logic="queuewire.conformance.quicx_logic:submit_of_size",
                params={"size": total, "task_type": SAMPLE_SIZED_TEXT},
                profiles=(profile.name,), command=SUBMIT, tags=("limit", "generated"),
                source=f"{GEN}:limit_cases", exclusive=True))
    # a header claiming 4 GiB where the profile sets no cap (a capped profile has its vector)
    if cap is None or huge <= cap:
        claim = enc.frame(sub.code, length=huge)
        out.append(_case(profile, "quicx.limit.header-claims-max-length",
                         f"A MSG_SUBMIT header claiming {huge} bytes is refused {too_large} from "
                         f"its header or waited for; never answered otherwise",
                         ["QX-ERR-4", "QX-HDR-5"],
                         [{"role": "producer", "send_raw": _hex(claim),
                           "expect": {"any_of": [{"error": too_large},
                                                 {"none": SILENCE_MS * 3}]}}],
                         tags=("limit",), command=SUBMIT))
    # the longest MSG_FAILED reason, where the profile bounds it, reaches the producer whole
    rmax = next(f for f in spec.message(FAILED).layout if f.id == "reason").max_bytes
    if rmax is not None and spec.flag("forward_results_to_producer"):
        reason = ("0123456789abcdef" * (rmax // 16 + 1))[:rmax]
        out.append(_case(profile, "quicx.limit.failed-reason-at-max",
                         f"A MSG_FAILED reason of exactly max_reason_bytes ({rmax}) is accepted "
                         f"and forwarded to the producer whole",
                         ["QX-FAILED-102", "QX-FAILED-3", "QX-PROD-101"],
                         [{"role": "producer", "send": {"type": SUBMIT, "fields": {
                             "task_type": SAMPLE_SIZED_TEXT, "payload": "r"}},
                           "expect": {**ok_any, "requirement": "QX-OK-1"},
                           "save": {"tid": "task_id"}},
                          {"conn": 2, "role": "worker", "send": {"type": READY},
                           "expect": {"message": {"type": TASK, "fields": {"task_id": "${tid}"}},
                                      "requirement": "QX-TASK-2"}},
                          {"conn": 2, "send": {"type": FAILED, "fields": {
                              "task_id": "${tid}", "reason": reason}}},
                          {"conn": 1, "recv": True, "expect": {"message": {"type": FAILED, "fields": {
                              "task_id": "${tid}", "reason": reason}}, "requirement": "QX-FAILED-3"}}],
                         tags=("limit",)))
    # the longest task type (len_type is one byte) round-trips
    tmax = next(f for f in sub.layout if f.id == "task_type").max_bytes
    if tmax is not None:
        ttype = "t" * tmax
        out.append(_case(profile, "quicx.limit.task-type-max",
                         f"A task type of {tmax} bytes (task_type_bytes max) is accepted and "
                         f"handed to the worker unchanged",
                         ["QX-TASK-2", "QX-TASK-4", "QX-SUBMIT-2", "QX-TASK-1"],
                         [{"role": "producer", "send": {"type": SUBMIT, "fields": {
                             "task_type": ttype, "payload": "hex:00"}},
                           "expect": ok_any, "save": {"tid": "task_id"}},
                          {"conn": 2, "role": "worker", "send": {"type": READY},
                           "expect": {"message": {"type": TASK, "fields": {
                               "task_id": "${tid}", "task_type": ttype, "payload": "hex:00"}}}},
                          {"conn": 2, "send": {"type": DONE, "fields": {"task_id": "${tid}"}}}],
                         tags=("limit",)))
    return out


def all_cases(profile: Profile | str) -> list[Case]:
    return list(itertools.chain(vector_cases(profile), split_cases(profile),
                                truncated_cases(profile), coalesced_cases(profile),
                                payload_rule_cases(profile), limit_cases(profile)))
