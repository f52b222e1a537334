"""Client fuzzing, sans-IO: mutated and mis-framed *replies* for a client under test, and the
oracle that judges what the client made of them.

A :class:`ClientCase` is a short list of testee-contract actions (``add``, ``count``: one
request each) on a fresh queue, one of which, the *target*, gets its reply broken by a
*recipe* (:data:`MUTATIONS`). The case is a pure function of ``(seed, index)``
(:func:`make_client_case`, the server fuzzer's :class:`~.gen.SeededDraw` and its generators:
wrong-typed values, lying prefixes, segmentations), and the recipe is data, applied to the
reply the server really computed when the target request arrives (:func:`reply_plan`; a job
id differs from run to run), so a transcript replays the same mutation.

The recipes, what the client must make of them, and the requirement each verdict cites:

* ``wrong_type`` / ``missing``: a field of the reply with a wrong-typed value, or left out. The
  client should report an error rather than a value it could not have (BQ-ENV-6 for the
  command's fields, BQ-ENV-3 for ``ok``; both rules bind the reply's sender, so a client that
  accepts such a reply is judged at SHOULD at most: NON-STRICT, never FAIL).
* ``lie``: a length prefix shorter or longer than the payload, or beyond max_frame_bytes
  (BQ-FRAME-1); ``garbage``: a payload that is not one MessagePack map (BQ-FRAME-3, trailing
  bytes BQ-MSGPACK-1); ``cut_close``: part of the frame, then the server closes
  (BQ-CLIENT-6). The action must end in a typed error.
* ``unknown_reqid``: the reply carries a reqId no request had and the real one never comes:
  the client must not take it for the target's (BQ-PIPE-5), so the action ends in a typed
  error (its command timeout).
* ``stray_first``: that stray reply, then the real one, coalesced in one write;
  ``duplicate``: the real reply twice (one write or two); ``split``: one byte per TCP segment;
  ``segments``: case-chosen write sizes. Nothing is broken: the action must succeed with the
  value the server sent (BQ-PIPE-5, BQ-FRAME-1), and so must every later action (a stray or
  duplicated reply must not answer another request, BQ-PIPE-5).

:func:`judge_client` adds the process-level oracles: the testee must answer at all (a client
that crashed did not reject its in-flight command and reconnect: BQ-CLIENT-6) and within the
bound (a client whose command never times out hangs: BQ-CLIENT-4); every result must be a
result of the contract (``ok`` true, or false with an ``error_type``); actions before the
target must succeed with the server's values. Levels come from the profile; only a MUST
fails.

quicx (:func:`make_quicx_client_case`, :func:`quicx_reply_plan`, :func:`judge_quicx_client`):
the actions are ``submit`` (answered MSG_OK) and a ``work`` after them (MSG_TASKs), the target
reply is keyed by ``(message, n)`` (:func:`reply_key`) and mutated from the spec's header and
layouts: ``version``, ``unknown_type`` (no message of the profile, or one no daemon sends
that role), ``lie``, ``cut_close``, ``bad_body`` (an OK body of the wrong size, a TASK type
length past the frame, a type that is not UTF-8, a TASK shorter than its fixed fields) must
end the action in a typed error (the client closes, QX-DIR-2), and a worker must not answer
a broken TASK on its connection (read from the wire transcript); ``split`` and ``segments``
must change nothing; ``duplicate`` and ``late`` (held back past the producer's timeout, with
what follows it) may fail the action but must not give a later one another's id (QX-OK-1,
QX-TASK-3). quicx has no client-lifecycle requirement: a crash or a hang cites the rule the
broken frame breaks.

Playing a case (a conformance server, a testee) is the conformance package's side,
joined to this module by ``queuewire fuzz --client`` in the CLI (the two packages do not
import each other).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..codecs.bunqueue import FrameEncoder
from ..judge import reading, requirement_verdict
from ..spec import Profile
from .case import split_by
from .gen import BOOL, SeededDraw, binary, ints, pick
from .oracles import Finding
from .strategies import bunqueue_strategies

FORMAT = "queuewire-client-fuzz-transcript/1"
# testee-contract ops and the command each sends (checked against the spec on use)
ACTION_COMMANDS = {"add": "PUSH", "count": "Count"}
TYPED = ("timeout", "connection_lost", "refused", "other")   # the contract's error types
ADAPTER_BROKE = "adapter error"   # contract.py's prefix for an exception the client leaked
BREAKING = ("wrong_type", "missing", "lie", "garbage", "cut_close", "unknown_reqid")
BENIGN = ("stray_first", "duplicate", "split", "segments")
MUTATIONS = BREAKING + BENIGN
COMMAND_TIMEOUT_MS = 300   # the client's command timeout in a case (option command_timeout)


@dataclass
class ClientCase:
    protocol: str
    profile: str
    actions: list[dict[str, Any]]     # queue "${queue}": bound to a fresh queue when played
    target: int                       # the action whose reply is broken
    recipe: dict[str, Any]            # {"kind": one of MUTATIONS, ...its parameters}
    options: dict[str, Any] = field(default_factory=dict)
    seed: int | str | None = None
    index: int | None = None

    @property
    def breaking(self) -> bool:
        return self.recipe["kind"] in (QX_BREAKING if self.protocol == "quicx" else BREAKING)

    def as_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "profile": self.profile, "actions": self.actions,
                "target": self.target, "recipe": self.recipe, "options": self.options,
                "seed": self.seed, "index": self.index}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClientCase:
        return cls(d["protocol"], d["profile"], list(d["actions"]), int(d["target"]),
                   dict(d["recipe"]), dict(d.get("options") or {}), d.get("seed"),
                   d.get("index"))

    def bind(self, queue: str) -> list[dict[str, Any]]:
        return [{**a, "queue": queue} if a.get("queue") == "${queue}" else dict(a)
                for a in self.actions]

    def request_of(self, i: int) -> tuple[str, int]:
        """(command, n): action ``i``'s request is the n-th of its command in the case."""
        cmd = ACTION_COMMANDS[self.actions[i]["op"]]
        return cmd, sum(1 for a in self.actions[:i + 1] if ACTION_COMMANDS[a["op"]] == cmd)


def make_client_case(profile: str, seed: int | str, index: int,
                     command_timeout: int = COMMAND_TIMEOUT_MS) -> ClientCase:
    """Client case ``index`` of ``seed``, regenerated alone."""
    bq = bunqueue_strategies(profile)
    for cmd in ACTION_COMMANDS.values():
        if cmd not in bq.spec.commands:
            raise ValueError(f"profile {profile} has no {cmd} command")
    d = SeededDraw(f"client:{seed}", index)
    actions: list[dict[str, Any]] = []
    for k in range(d(ints(1, 4))):
        if d(BOOL):
            actions.append({"op": "add", "queue": "${queue}", "name": f"fz{k}",
                            "data": {"n": d(ints(0, 99))}})
        else:
            actions.append({"op": "count", "queue": "${queue}"})
    target = d(ints(0, len(actions) - 1))
    kind = d(pick(MUTATIONS))
    recipe: dict[str, Any] = {"kind": kind}
    if kind == "wrong_type":
        recipe["value"] = d(bq.wrong)
        recipe["pick"] = d(ints(0, 99))        # which field: pick mod the reply's fields
    elif kind == "missing":
        recipe["pick"] = d(ints(0, 99))
    elif kind == "lie":
        recipe["how"] = d(pick(("short", "long", "huge")))
        recipe["delta"] = d(ints(1, 8)) if recipe["how"] != "huge" else d(ints(1, 2**20))
    elif kind == "garbage":
        recipe["how"] = d(pick(("random", "trailing", "not_a_map", "empty")))
        recipe["bytes"] = d(binary(1, 16)).hex()
    elif kind == "cut_close":
        recipe["fraction"] = d(ints(1, 99))    # percent of the frame written before the close
    elif kind == "unknown_reqid":
        recipe["reqid"] = f"qw-stray-{d(ints(0, 10**6))}"
    elif kind == "stray_first":
        recipe["reqid"] = f"qw-stray-{d(ints(0, 10**6))}"
    elif kind == "duplicate":
        recipe["coalesced"] = d(BOOL)
    elif kind == "segments":
        recipe["splits"] = [d(ints(1, 64)) for _ in range(d(ints(1, 8)))]
    options = {"command_timeout": command_timeout, "max_command_timeouts": 2}
    return ClientCase("bunqueue", profile, actions, target, recipe, options, seed, index)


def _js(obj: Any) -> Any:
    """A pooled wrong-typed value as JSON can hold it (transcripts are JSON)."""
    if isinstance(obj, bytes):
        return {"$bin": obj.hex()}
    return obj


def _unjs(obj: Any) -> Any:
    if isinstance(obj, dict) and set(obj) == {"$bin"}:
        return bytes.fromhex(obj["$bin"])
    return obj


def normalize(case: ClientCase) -> ClientCase:
    """The case as its transcript holds it (bytes values made JSON-safe), so that a fresh
    case and a replayed one play the same recipe."""
    if "value" in case.recipe:
        case.recipe["value"] = _js(case.recipe["value"])
    return case


def reply_plan(case: ClientCase, reply: dict[str, Any], profile: Profile
               ) -> dict[str, Any]:
    """The writes (and whether to close after them) that replace ``reply``, the target
    request's real reply: ``{"writes": [bytes...], "close": bool, "note": str}``."""
    enc = FrameEncoder(profile, wide_integers=True)
    r, kind = case.recipe, case.recipe["kind"]
    frame = enc.encode(reply)
    fields = sorted(k for k in reply if k != "reqId")
    if kind == "wrong_type":
        name = fields[r["pick"] % len(fields)]
        value = _unjs(r["value"])
        if type(value) is type(reply[name]):
            value = [value]
        bad = {**reply, name: value}
        payload = bunqueue_strategies(case.profile).payload(bad)  # raw where it must be
        return _plan([enc.prefix(len(payload)) + payload],
                     f"{name} of the wrong type: {value!r:.40}")
    if kind == "missing":
        name = fields[r["pick"] % len(fields)]
        return _plan([enc.encode({k: v for k, v in reply.items() if k != name})],
                     f"{name} left out")
    if kind == "lie":
        payload = frame[4:]
        n = len(payload)
        length = {"short": max(0, n - r["delta"]), "long": n + r["delta"],
                  "huge": profile.model.max_frame_bytes + r["delta"]}[r["how"]]
        return _plan([enc.prefix(min(length, 2**32 - 1)) + payload],
                     f"length prefix {length} for {n} payload bytes ({r['how']})")
    if kind == "garbage":
        junk = bytes.fromhex(r["bytes"])
        payload = {"random": junk, "trailing": frame[4:] + junk,
                   "not_a_map": enc.payload([reply.get("ok"), 7]), "empty": b""}[r["how"]]
        return _plan([enc.prefix(len(payload)) + payload], f"payload {r['how']}")
    if kind == "cut_close":
        cut = max(1, min(len(frame) - 1, len(frame) * r["fraction"] // 100))
        return _plan([frame[:cut]], f"{cut} of {len(frame)} bytes, then close", close=True)
    if kind in ("unknown_reqid", "stray_first"):
        stray = enc.encode({**reply, "reqId": r["reqid"]})
        if kind == "unknown_reqid":
            return _plan([stray], f"reqId {r['reqid']!r} no request had; the real reply "
                                  f"withheld")
        return _plan([stray + frame], f"a reply with reqId {r['reqid']!r} first, then the "
                                      f"real one, one write")
    if kind == "duplicate":
        writes = [frame + frame] if r["coalesced"] else [frame, frame]
        return _plan(writes, "the reply twice" + (", one write" if r["coalesced"] else ""))
    if kind == "split":
        return _plan([frame[i:i + 1] for i in range(len(frame))], "one byte per segment")
    out = split_by(frame, r["splits"])
    return _plan(out, f"{len(out)} segments")


def _plan(writes: list[bytes], note: str, close: bool = False,
          intact: bool = False) -> dict[str, Any]:
    """``intact``: the writes still carry the real frame (quicx: the task counts as handed
    to the connection)."""
    return {"writes": writes, "close": close, "note": note, "intact": intact}


# -- the oracle -------------------------------------------------------------------------------
RECIPE_RULES = {"wrong_type": "BQ-ENV-6", "missing": "BQ-ENV-6", "lie": "BQ-FRAME-1",
                "garbage": "BQ-FRAME-3", "cut_close": "BQ-CLIENT-6",
                "unknown_reqid": "BQ-PIPE-5", "stray_first": "BQ-PIPE-5",
                "duplicate": "BQ-PIPE-5", "split": "BQ-FRAME-1", "segments": "BQ-FRAME-1"}
LOWERED = ("wrong_type", "missing")   # rules of the reply's sender: SHOULD at most here


def recipe_rule(case: ClientCase, reply: dict[str, Any] | None = None) -> str:
    r = case.recipe
    if r["kind"] in ("wrong_type", "missing") and reply is not None:
        fields = sorted(k for k in reply if k != "reqId")
        if fields[r["pick"] % len(fields)] == "ok":
            return "BQ-ENV-3"
    if r["kind"] == "garbage" and r.get("how") == "trailing":
        return "BQ-MSGPACK-1"
    return RECIPE_RULES[r["kind"]]


#: What a client did as a process rather than as a protocol peer: it died (``crash``) or gave
#: no answer within the bound (``hang``). A client fuzz run counts these as failures of the
#: run (exit status 1, shrunk, saved, replayed) whatever the level of the rule they cite, as
#: the server fuzzer stops on a target that is down: a crash on the server's bytes is a bug
#: to fix whether or not a document's MUST covers it. The finding keeps its own verdict.
PROCESS_KINDS = frozenset({"crash", "hang"})


def counts(finding: Finding) -> bool:
    """Whether a client fuzz run counts ``finding`` as a failure: a FAIL, or a crash or a
    hang (:data:`PROCESS_KINDS`) at any level."""
    return finding.fails or finding.kind in PROCESS_KINDS


def _finding(profile: Profile, rid: str, kind: str, message: str,
             cap: bool = False) -> Finding:
    level = requirement_verdict(profile, rid)
    return Finding(reading(level) if cap else level, rid, kind, message)


def expected_value(op: str, reply: dict[str, Any] | None) -> Any:
    """What the contract reports for ``op`` given the server's real reply (None: unknown)."""
    if not isinstance(reply, dict) or reply.get("ok") is not True:
        return None
    if op == "add":
        return {"id": reply.get("id")}
    if op == "count":
        return reply.get("count")
    return None


def judge_client(case: ClientCase, profile: Profile, *, results: list[Any] | None,
                 failure: str | None, hung: bool, replies: dict[tuple[str, int], dict],
                 wire: list[dict[str, Any]] | None = None) -> list[Finding]:
    """The verdict on one played case. ``results``: the testee's results (None when it gave
    no answer); ``failure``: why there was none; ``hung``: it gave none within the bound;
    ``replies``: the server's real reply per (command, n) (what it computed, before any
    mutation); ``wire``: the transcript (quicx: :func:`judge_quicx_client`)."""
    if case.protocol == "quicx":
        return judge_quicx_client(case, profile, results=results, failure=failure, hung=hung,
                                  replies=replies, wire=wire)
    if results is None:
        if hung:
            return [_finding(profile, "BQ-CLIENT-4", "hang",
                             f"no answer within the bound after {case.recipe['kind']}: "
                             f"{failure}")]
        return [_finding(profile, "BQ-CLIENT-6", "crash",
                         f"the testee died after {case.recipe['kind']}: {failure}")]
    out: list[Finding] = []
    target_reply = replies.get(case.request_of(case.target))
    rule = recipe_rule(case, target_reply)
    capped = case.recipe["kind"] in LOWERED
    leaked = [r for r in results if isinstance(r, dict) and r.get("ok") is False
              and str(r.get("error", "")).startswith(ADAPTER_BROKE)]
    if leaked:
        # the client raised something other than its own errors, and the contract's adapter
        # failed every action of the request with it (those before the target included):
        # one finding, on the target's mutation
        return [_finding(profile, rule, "untyped_error",
                         f"after {case.recipe['kind']} on action {case.target}, the client "
                         f"raised no error of its own: {leaked[0].get('error')!r:.100}",
                         cap=capped)]
    for i, action in enumerate(case.actions):
        res = results[i] if i < len(results) else None
        what = f"action {i} ({action['op']})"
        if not isinstance(res, dict) or not isinstance(res.get("ok"), bool) or (
                res["ok"] is False and res.get("error_type") not in TYPED + ("unsupported",)):
            out.append(_finding(profile, rule, "no_result", f"{what}: no contract result: "
                                f"{res!r:.80}"))
            continue
        real = replies.get(case.request_of(i))
        if i == case.target and case.breaking:
            if res["ok"] is True:
                out.append(_finding(profile, rule, "accepted_broken_reply",
                                    f"{what} succeeded with {res.get('value')!r:.60} on a "
                                    f"reply broken by {case.recipe['kind']}", cap=capped))
            continue
        if i > case.target and case.breaking:
            continue   # the link may be poisoned: any typed outcome will do
        want = expected_value(action["op"], real)
        rid = rule if i == case.target else "BQ-PIPE-5"
        if isinstance(real, dict) and real.get("ok") is False:   # the server refused it
            if res["ok"] is True:
                out.append(_finding(profile, rid, "wrong_value",
                                    f"{what} succeeded; the server's reply refused it: "
                                    f"{real.get('error')!r:.60}"))
            continue
        if res["ok"] is not True:
            out.append(_finding(profile, rid, "failed_action",
                                f"{what} failed: {res.get('error_type')}: "
                                f"{res.get('error')!r:.80}"))
        elif want is not None and res.get("value") != want:
            out.append(_finding(profile, "BQ-PIPE-5", "wrong_value",
                                f"{what} reported {res.get('value')!r:.60}, the server's reply "
                                f"said {want!r:.60}"))
    return out


# -- transcripts ------------------------------------------------------------------------------
def write_client_transcript(path: str, case: ClientCase, findings: list[Finding],
                            answer: Any, wire: list[dict[str, Any]],
                            original: ClientCase | None = None) -> None:
    doc = {"format": FORMAT, "case": case.as_dict(), "findings": [f.as_dict() for f in findings],
           "answer": answer, "wire": wire,
           "original": original.as_dict() if original is not None else None}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=repr)


def is_client_transcript(doc: dict[str, Any]) -> bool:
    return doc.get("format") == FORMAT


def shrink_candidates(case: ClientCase) -> list[ClientCase]:
    """Smaller variants, smallest first: the target action alone, then the actions up to it."""
    if case.protocol == "quicx":
        return quicx_shrink_candidates(case)
    out = []
    for actions in ([case.actions[case.target]], case.actions[:case.target + 1]):
        if len(actions) < len(case.actions):
            out.append(ClientCase(case.protocol, case.profile, list(actions),
                                  len(actions) - 1, dict(case.recipe), dict(case.options),
                                  case.seed, case.index))
    return out


# =============================================================================================
# quicx: mutated MSG_OK and MSG_TASK frames for producers and workers
# =============================================================================================
# A quicx case's actions are ``submit`` (one MSG_SUBMIT, answered MSG_OK) and at most one
# ``work`` after them (a worker that runs every submitted task: MSG_READY, MSG_TASK, MSG_DONE,
# ...). Its target is a submit (the n-th MSG_OK the server sends) or the work (recipe["task"]:
# the n-th MSG_TASK). quicx frames carry no request id, so correlation faults are frames out
# of their place: the reply twice (``duplicate``) or held back past the client's timeout with
# everything after it on that connection (``late``: order is kept, as a daemon keeps it).
QX_BREAKING = ("version", "unknown_type", "lie", "cut_close", "bad_body")
QX_BENIGN = ("split", "segments")
QX_CORRELATION = ("duplicate", "late")
QX_MUTATIONS = QX_BREAKING + QX_BENIGN + QX_CORRELATION
QX_TIMEOUT_MS = 500        # the producer's wait for MSG_OK in a case (option timeout)
QX_WORK_TIMEOUT_MS = 3000  # a work action's timeout_ms
QX_LATE = 1.5              # a late frame is held back this many producer timeouts
QX_REPLY = {"submit": "MSG_OK", "work": "MSG_TASK"}
# the requirement a mutated frame breaks (for a receiver: the frame is invalid); a client
# that takes such a frame for a reply is judged on it, and QX-DIR-2 says what it does instead
# (close the connection: its pending action ends in a typed error)
QX_RULES = {"version": "QX-HDR-2", "unknown": "QX-HDR-4", "wrong_direction": "QX-DIR-2",
            "short": "QX-HDR-7", "long": "QX-HDR-7", "huge": "QX-HDR-5",
            "cut_close": "QX-HDR-7", "ok_size": "QX-OK-1", "type_len": "QX-TASK-4",
            "utf8": "QX-TEXT-1", "task_short": "QX-HDR-7", "split": "QX-HDR-1",
            "segments": "QX-HDR-1", "duplicate": "QX-DIR-2", "late": "QX-OK-1"}
QX_LOWERED = ("ok_size",)         # rules of the frame's sender (the daemon): SHOULD at most
QX_REACTION = "QX-DIR-2"          # a client's reaction to an invalid frame: close


def _qx_spec(profile: str) -> Any:
    from ..spec import load_profile
    spec = load_profile(profile).model
    for name in QX_REPLY.values():
        spec.message(name)   # KeyError for a profile without it
    return spec


def make_quicx_client_case(profile: str, seed: int | str, index: int,
                           timeout: int = QX_TIMEOUT_MS) -> ClientCase:
    """quicx client case ``index`` of ``seed``, regenerated alone."""
    spec = _qx_spec(profile)
    d = SeededDraw(f"client-quicx:{seed}", index)
    types = [f"fz_{c}" for c in "abc"][:d(ints(1, 3))]
    actions: list[dict[str, Any]] = [
        {"op": "submit", "type": types[d(ints(0, len(types) - 1))],
         "payload": f"p{k}-{d(ints(0, 999))}"} for k in range(d(ints(1, 3)))]
    if d(BOOL):
        actions.append({"op": "work", "types": types, "count": len(actions),
                        "timeout_ms": QX_WORK_TIMEOUT_MS})
    target = d(ints(0, len(actions) - 1))
    on_task = actions[target]["op"] == "work"
    kind = d(pick(QX_MUTATIONS))
    if on_task and kind == "late":
        kind = "split"   # a held-back task is only a slow one: the worker waits for it
    recipe: dict[str, Any] = {"kind": kind}
    if on_task:
        recipe["task"] = d(ints(1, actions[target]["count"]))
    if kind == "version":
        v = d(ints(0, 255))
        while v in spec.accepted_versions:
            v = (v + 1) % 256
        recipe["version"] = v
    elif kind == "unknown_type":
        recipe["how"] = d(pick(("unknown", "wrong_direction")))
        recipe["pick"] = d(ints(0, 255))
    elif kind == "lie":
        recipe["how"] = d(pick(("short", "long", "huge")))
        recipe["delta"] = d(ints(1, 8)) if recipe["how"] != "huge" else d(ints(1, 2**20))
    elif kind == "cut_close":
        recipe["fraction"] = d(ints(1, 99))
    elif kind == "bad_body":
        recipe["how"] = d(pick(("type_len", "utf8", "task_short"))) if on_task else "ok_size"
        recipe["delta"] = d(ints(1, 3))
        recipe["bytes"] = d(binary(1, 4)).hex()
    elif kind == "segments":
        recipe["splits"] = [d(ints(1, 8)) for _ in range(d(ints(1, 4)))]
    elif kind == "duplicate":
        recipe["coalesced"] = d(BOOL)
    options = {"timeout": timeout}
    return ClientCase("quicx", profile, actions, target, recipe, options, seed, index)


def reply_key(case: ClientCase, i: int) -> tuple[str, int]:
    """The reply of action ``i`` by (command, n) (bunqueue) or (message, n) (quicx: the n-th
    MSG_OK for a submit, the recipe's task for the target work, the first task otherwise)."""
    if case.protocol != "quicx":
        return case.request_of(i)
    action = case.actions[i]
    if action["op"] == "submit":
        return "MSG_OK", sum(1 for a in case.actions[:i + 1] if a["op"] == "submit")
    return "MSG_TASK", int(case.recipe.get("task", 1)) if i == case.target else 1


def _qx_rule_key(case: ClientCase) -> str:
    r = case.recipe
    return r.get("how", r["kind"]) if r["kind"] in ("unknown_type", "lie", "bad_body") \
        else r["kind"]


def quicx_reply_plan(case: ClientCase, frame: bytes, profile: Profile) -> dict[str, Any]:
    """The writes (and whether to close, hold back) that replace ``frame``, the target's real
    MSG_OK or MSG_TASK: ``{"writes", "close", "note", "intact", "delay"}``."""
    import struct as _struct

    from ..spec.quicx import struct_format
    spec = profile.model
    head = _struct.Struct(struct_format(spec.header))
    hsize = spec.header_size
    version, code, _length = head.unpack_from(frame)
    body = frame[hsize:]
    r, kind = case.recipe, case.recipe["kind"]

    def framed(payload: bytes, length: int | None = None, v: int = version,
               c: int = code) -> bytes:
        return head.pack(v, c, len(payload) if length is None else length) + payload

    if kind == "version":
        return _plan([framed(body, v=r["version"])], f"version byte {r['version']:#04x}")
    if kind == "unknown_type":
        if r["how"] == "unknown":
            free = [c for c in range(256) if spec.opcode(c) is None
                    or spec.opcode(c).reserved] or [0]
            bad, why = free[r["pick"] % len(free)], "no message of the profile"
        else:   # a message the daemon never sends to this role
            role = "producer" if case.actions[case.target]["op"] == "submit" else "worker"
            names = sorted(m.name for m in spec.messages.values()
                           if not m.reserved and not spec.allowed(m.name, None, role))
            name = names[r["pick"] % len(names)]
            bad, why = spec.message(name).code, f"{name}, which no daemon sends a {role}"
        return _plan([framed(body, c=bad)], f"type {bad:#04x} ({why})")
    if kind == "lie":
        n = len(body)
        cap = spec.max_payload_bytes if spec.max_payload_bytes is not None else 2**32 - 1
        length = {"short": max(0, n - r["delta"]), "long": n + r["delta"],
                  "huge": min(cap + r["delta"], 2**32 - 1) if cap < 2**32 - 1
                  else 2**32 - r["delta"]}[r["how"]]
        return _plan([framed(body, length)],
                     f"length {length} for {n} payload bytes ({r['how']})")
    if kind == "cut_close":
        cut = max(1, min(len(frame) - 1, len(frame) * r["fraction"] // 100))
        return _plan([frame[:cut]], f"{cut} of {len(frame)} bytes, then close", close=True)
    if kind == "bad_body":
        how, junk = r["how"], bytes.fromhex(r["bytes"])
        if how == "ok_size":   # a MSG_OK body that is not exactly the task id
            bad = body[:-r["delta"]] if r["delta"] % 2 else body + junk
            return _plan([framed(bad)], f"MSG_OK body of {len(bad)} bytes")
        id_size = next(f.width for f in spec.message("MSG_TASK").layout if f.is_int)
        if how == "task_short":   # shorter than the task id and the type length byte
            bad = body[:max(0, id_size - r["delta"])]
            return _plan([framed(bad)], f"MSG_TASK body of {len(bad)} bytes")
        type_len = body[id_size]
        if how == "type_len":
            bad = body[:id_size] + bytes([min(255, len(body) - id_size + r["delta"])]) \
                + body[id_size + 1:]
            return _plan([framed(bad)], f"type length {bad[id_size]} runs past the frame")
        start = id_size + 1
        bad_type = b"\xff" * max(1, type_len)
        bad = body[:id_size] + bytes([len(bad_type)]) + bad_type + body[start + type_len:]
        return _plan([framed(bad)], "a task type that is not UTF-8")
    if kind == "split":
        return _plan([frame[i:i + 1] for i in range(len(frame))], "one byte per segment",
                     intact=True)
    if kind == "segments":
        out = split_by(frame, r["splits"])
        return _plan(out, f"{len(out)} segments", intact=True)
    if kind == "duplicate":
        writes = [frame + frame] if r["coalesced"] else [frame, frame]
        return _plan(writes, "the frame twice" + (", one write" if r["coalesced"] else ""),
                     intact=True)
    delay = QX_LATE * float(case.options.get("timeout", QX_TIMEOUT_MS)) / 1000.0
    plan = _plan([frame], "held back past the producer's timeout", intact=True)
    plan["delay"] = delay
    return plan


def quicx_rule(case: ClientCase) -> str:
    return QX_RULES[_qx_rule_key(case)]


def _qx_answered_broken(wire: list[dict[str, Any]]) -> list[Any]:
    """Task ids the client answered (MSG_DONE / MSG_FAILED) on the connection a broken frame
    went to, after it: a client that took the frame for a task."""
    start = next((i for i, e in enumerate(wire) if e.get("dir") == "send"
                  and str(e.get("note", "")).startswith("fuzz:")), None)
    if start is None:
        return []
    conn, out = wire[start]["conn"], []
    for e in wire[start + 1:]:
        if e.get("conn") != conn or e.get("dir") != "recv":
            continue
        for m in e.get("decoded") or ():
            if isinstance(m, dict) and m.get("type") in ("MSG_DONE", "MSG_FAILED"):
                out.append((m.get("fields") or {}).get("task_id"))
    return out


def _qx_expected(case: ClientCase, i: int, replies: dict[tuple[str, int], dict]) -> Any:
    """What the contract reports for action ``i`` (submit: the task id; work: the task ids
    of the case's MSG_OKs, as a sorted list) or None when unknown."""
    action = case.actions[i]
    if action["op"] == "submit":
        ok = replies.get(reply_key(case, i))
        return ok.get("task_id") if isinstance(ok, dict) else None
    ids = [replies.get(reply_key(case, k), {}).get("task_id")
           for k, a in enumerate(case.actions) if a["op"] == "submit"]
    return sorted(ids) if all(isinstance(x, int) for x in ids) else None


def judge_quicx_client(case: ClientCase, profile: Profile, *, results: list[Any] | None,
                       failure: str | None, hung: bool,
                       replies: dict[tuple[str, int], dict],
                       wire: list[dict[str, Any]] | None = None) -> list[Finding]:
    """The verdict on one played quicx case (the arguments of :func:`judge_client`, and the
    wire transcript, for what the client sent after a broken frame).

    quicx has no client-lifecycle requirement (no BQ-CLIENT-4/6): a client that dies on a
    frame (crash) or gives no answer in the bound (hang) is judged on the rule the frame
    breaks (QX-HDR-*, QX-TASK-4, ...; for a benign or correlation case, the framing rule
    QX-HDR-1 or the reply's own), since the reaction the documents leave a client, QX-DIR-2,
    is to close the connection and go on."""
    rule = quicx_rule(case)
    kind = case.recipe["kind"]
    if results is None:
        grave = rule if kind in QX_BREAKING else "QX-HDR-1"
        return [_finding(profile, grave, "hang" if hung else "crash",
                         (f"no answer within the bound after {kind}" if hung else
                          f"the testee died after {kind}") + f" (QX-DIR-2: close the "
                         f"connection instead): {failure}")]
    capped = _qx_rule_key(case) in QX_LOWERED
    leaked = [r for r in results if isinstance(r, dict) and r.get("ok") is False
              and str(r.get("error", "")).startswith(ADAPTER_BROKE)]
    if leaked:
        return [_finding(profile, rule, "untyped_error",
                         f"after {kind} on action {case.target}, the client raised no error "
                         f"of its own: {leaked[0].get('error')!r:.100}", cap=capped)]
    out: list[Finding] = []
    on_task = case.actions[case.target]["op"] == "work"
    if kind in QX_BREAKING and on_task:
        answered = _qx_answered_broken(wire or [])
        if answered:
            out.append(_finding(profile, rule, "accepted_broken_reply",
                                f"the worker answered task(s) {answered} on the connection "
                                f"its MSG_TASK broken by {kind} ({_qx_rule_key(case)}) came "
                                f"on; {QX_REACTION}: close it", cap=capped))
    for i, action in enumerate(case.actions):
        res = results[i] if i < len(results) else None
        what = f"action {i} ({action['op']})"
        if not isinstance(res, dict) or not isinstance(res.get("ok"), bool) or (
                res["ok"] is False and res.get("error_type") not in TYPED + ("unsupported",)):
            out.append(_finding(profile, rule, "no_result", f"{what}: no contract result: "
                                f"{res!r:.80}"))
            continue
        if kind in QX_BREAKING and i > case.target:
            continue   # the link may be gone: any typed outcome will do
        value = res.get("value") if res["ok"] else None
        got: Any = (value.get("id") if action["op"] == "submit" else  # as the testee reported
                    sorted(value.get("ids") or [])) if isinstance(value, dict) else value
        want = _qx_expected(case, i, replies)
        if i == case.target and kind in QX_BREAKING:
            if res["ok"] and not on_task:
                out.append(_finding(profile, rule, "accepted_broken_reply",
                                    f"{what} succeeded with {value!r:.60} on a MSG_OK broken "
                                    f"by {kind} ({_qx_rule_key(case)})", cap=capped))
            elif res["ok"] and want is not None and not set(got) <= set(want):
                out.append(_finding(profile, "QX-TASK-3", "wrong_value",
                                    f"{what} ran tasks {got}; the server handed out {want}"))
            continue
        if not res["ok"]:
            if kind in QX_CORRELATION and i >= case.target:
                continue   # an out-of-place frame may close the link: a typed error will do
            out.append(_finding(profile, rule if i == case.target else "QX-HDR-1",
                                "failed_action", f"{what} failed: {res.get('error_type')}: "
                                f"{res.get('error')!r:.80}"))
            continue
        if want is None:
            continue
        if action["op"] == "work" and kind in QX_CORRELATION:
            wrong = not set(got) <= set(want)   # a duplicated task may run twice
        else:
            wrong = got != want
        if wrong:
            rid = "QX-TASK-3" if action["op"] == "work" else "QX-OK-1"
            out.append(_finding(profile, rid, "wrong_value",
                                f"{what} reported {got!r:.60}, the server's frames said "
                                f"{want!r:.60} (after {kind} on action {case.target})",
                                cap=kind == "duplicate"))
    return out


def quicx_shrink_candidates(case: ClientCase) -> list[ClientCase]:
    """Smaller variants, smallest first: a submit target alone; a work target with one
    submit and its first task broken; then the actions up to the target."""
    target = case.actions[case.target]
    first: list[dict[str, Any]]
    recipe = dict(case.recipe)
    if target["op"] == "submit":
        first = [target]
    else:
        first = [next(a for a in case.actions if a["op"] == "submit"),
                 {**target, "count": 1}]
        recipe["task"] = 1
    out = []
    for actions, rec in ((first, recipe), (case.actions[:case.target + 1], case.recipe)):
        if len(actions) < len(case.actions):
            out.append(ClientCase(case.protocol, case.profile, list(actions),
                                  len(actions) - 1, dict(rec), dict(case.options),
                                  case.seed, case.index))
    return out
