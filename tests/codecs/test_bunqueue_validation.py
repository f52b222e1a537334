"""BunqueueValidator: every limit at its bounds citing its requirement, envelope errors, reply
checks, extra and missing fields, MessageError, and JavaScript-style map keys.

Limit values, requirement ids and the places each limit is used come from the loaded profile
(``profile.limits[name].uses``); nothing here restates a bound.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder, encode_frame
from queuewire.codecs.errors import MessageError, ProtocolError, Violation
from queuewire.codecs.validation import (
    MESSAGE_CHARS,
    BunqueueValidator,
    iter_x_requirements,
    js_key,
    jsonable,
    to_json_model,
)
from queuewire.spec import load_profile
from queuewire.spec.bunqueue import DIALECT
from queuewire.spec.instances import minimal, resolve

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
ERRORS = MODEL.protocol_errors
LIMITS = PROFILE.limits
VALIDATOR = BunqueueValidator(PROFILE)
COMMANDS = sorted(MODEL.commands)
ENVELOPE = PROFILE.tree["envelope"]


def _resolve(node: Mapping, defs: Mapping) -> Mapping:
    """Follow ``$ref``s to the definition they name (``defs`` is a schema's ``$defs``)."""
    return resolve({"$defs": defs}, node)


def _minimal(schema: Mapping, defs: Mapping) -> Any:
    """A minimal valid value of a (sub-)schema, by the project's own builder."""
    return minimal({"$defs": defs}, schema)


_LEN_FIELD = next(f for f in PROFILE.tree["framing"]["fields"] if f["id"] == "len_payload")
assert _LEN_FIELD["type"] == "u4be", _LEN_FIELD


def frame(payload: bytes) -> bytes:
    """A frame around a hand-written payload (the spec's len_payload is u4be)."""
    return len(payload).to_bytes(4, "big") + payload


def wire(msg: Any) -> Any:
    """``msg`` as a peer receives it: encoded and decoded (large integers become float64)."""
    (out,) = FrameDecoder(PROFILE).feed(encode_frame(msg, PROFILE))
    return out


def pointer(path: tuple) -> str:
    return "/" + "/".join(str(p) for p in path)


# =============================================================================================
# Where each limit is used: (command, instance path) pairs found from limits[...].uses
# =============================================================================================
def _ref_locations(def_name: str) -> list[tuple[str, tuple]]:
    """Every (command, instance path) where a request property references ``def_name``."""
    target = f"#/$defs/{def_name}"
    found: list[tuple[str, tuple]] = []

    def visit(cmd: str, defs: Mapping, node: Mapping, path: tuple, depth: int) -> None:
        if depth > 6 or not isinstance(node, Mapping):
            return
        if node.get("$ref") == target:
            found.append((cmd, path))
            return
        node = _resolve(node, defs)
        for name, sub in (node.get("properties") or {}).items():
            visit(cmd, defs, sub, path + (name,), depth + 1)
        if isinstance(node.get("items"), Mapping):
            visit(cmd, defs, node["items"], path + (0,), depth + 1)

    for cmd in COMMANDS:
        schema = MODEL.commands[cmd].request
        visit(cmd, schema.get("$defs") or {}, schema, (), 0)
    return found


def _command_location(path: tuple) -> tuple[str, tuple]:
    """('commands', CMD, 'request', 'properties', f, ..., keyword) -> (CMD, instance path)."""
    assert path[0] == "commands" and path[2] == "request", path
    inst: list = []
    parts = list(path[3:-1])
    while parts:
        head = parts.pop(0)
        if head == "properties":
            inst.append(parts.pop(0))
        elif head == "items":
            inst.append(0)
        else:
            raise AssertionError(f"unexpected schema path {path}")
    return path[1], tuple(inst)


def limit_locations(name: str, key: str) -> list[tuple[str, tuple]]:
    out = []
    for use_key, path in LIMITS[name].uses:
        if use_key != key:
            continue
        if path[0] == "definitions":
            out += _ref_locations(path[1])
        else:
            out.append(_command_location(path))
    return out


def rule_at(cmd: str, path: tuple, keyword: str) -> str:
    """The requirement the schema at ``path`` of ``cmd``'s request cites for ``keyword``: the
    definition's per-keyword requirement, else its own (QueueName: BQ-LIMIT-1/2; QueueRef, a
    name a command only looks a queue up by: BQ-LIMIT-13/14)."""
    schema = MODEL.commands[cmd].request
    defs = schema.get("$defs") or {}
    sub = schema
    for part in path:
        sub = _resolve(sub, defs)
        sub = sub["items"] if isinstance(part, int) else sub["properties"][part]
    sub = _resolve(sub, defs)
    return (sub.get("x-keywordRequirements") or {}).get(keyword) or sub["x-requirement"]


def with_value(cmd: str, path: tuple, value: Any) -> dict:
    """A minimal valid request of ``cmd`` with ``value`` at ``path`` (containers created)."""
    schema = MODEL.commands[cmd].request
    defs = schema.get("$defs") or {}
    msg = _minimal(schema, defs)
    node: Any = msg
    sub = schema
    for i, part in enumerate(path):
        sub = _resolve(sub, defs)
        sub = sub["items"] if isinstance(part, int) else sub["properties"][part]
        last = i == len(path) - 1
        if last:
            node[part] = value
            break
        if isinstance(part, int):
            while len(node) <= part:
                node.append(_minimal(sub, defs))
        elif part not in node:
            node[part] = _minimal(sub, defs)
        node = node[part]
    return msg


NUMERIC_LIMITS = [
    name for name, lim in LIMITS.items()
    if (lim.min is not None or lim.max is not None)
    and any(k in ("min", "max") for k, p in lim.uses if p[-1] in ("minimum", "maximum"))
]
NUMERIC_CASES = []
for _name in NUMERIC_LIMITS:
    _lim = LIMITS[_name]
    for _key, _bound in (("min", _lim.min), ("max", _lim.max)):
        if _bound is None:
            continue
        step = -1 if _key == "min" else 1
        for _cmd, _path in limit_locations(_name, _key):
            for _value, _ok in ((_bound, True), (_bound + step, False)):
                NUMERIC_CASES.append(pytest.param(
                    _name, _cmd, _path, _value, _ok,
                    id=f"{_name}-{_cmd}{pointer(_path)}={_value}"))


def test_every_bounded_limit_is_probed():
    expected = {"priority", "delay", "timeout", "max_attempts", "backoff", "ttl",
                "pull_timeout", "pullb_count", "progress"}
    assert expected <= set(NUMERIC_LIMITS)
    probed = {case.values[0] for case in NUMERIC_CASES}
    assert probed == set(NUMERIC_LIMITS)
    # each limit is probed at both bounds in at least one command
    for name in NUMERIC_LIMITS:
        values = {case.values[3] for case in NUMERIC_CASES if case.values[0] == name}
        lim = LIMITS[name]
        assert {lim.min - 1, lim.min, lim.max, lim.max + 1} <= values, name


def test_limit_locations_follow_uses():
    # PULLB count is used directly by the command; priority through a definition in PUSH,
    # PUSHB's jobs and more.
    assert ("PULLB", ("count",)) in limit_locations("pullb_count", "max")
    assert ("Progress", ("progress",)) in limit_locations("progress", "min")
    prio = limit_locations("priority", "max")
    assert ("PUSH", ("priority",)) in prio and ("PUSHB", ("jobs", 0, "priority")) in prio
    assert ("PULL", ("timeout",)) in limit_locations("pull_timeout", "max")
    assert ("PUSH", ("timeout",)) in limit_locations("timeout", "max")


@pytest.mark.parametrize("via_wire", [False, True], ids=["python", "wire"])
@pytest.mark.parametrize("name, cmd, path, value, ok", NUMERIC_CASES)
def test_numeric_limit_bounds(name, cmd, path, value, ok, via_wire):
    lim = LIMITS[name]
    msg = with_value(cmd, path, value)
    if via_wire:
        msg = wire(msg)
    violations = VALIDATOR.request_violations(msg)
    if ok:
        assert violations == ()
        assert VALIDATOR.request_is_valid(msg)
    else:
        assert violations, f"{cmd}{pointer(path)}={value} must break {lim.requirement}"
        assert {v.requirement for v in violations} == {lim.requirement}
        assert {v.path for v in violations} == {pointer(path)}
        assert all(v.level == PROFILE.requirements[lim.requirement].level for v in violations)
        assert not VALIDATOR.request_is_valid(msg)


QUEUE_NAME = LIMITS["queue_name_length"]
QUEUE_NAME_LOCATIONS = limit_locations("queue_name_length", "max")


def test_queue_name_is_used_by_many_commands():
    cmds = {cmd for cmd, _ in QUEUE_NAME_LOCATIONS}
    assert {"PUSH", "PUSHB", "PULL", "PULLB", "RegisterWorker"} <= cmds
    assert ("RegisterWorker", ("queues", 0)) in QUEUE_NAME_LOCATIONS
    assert set(QUEUE_NAME_LOCATIONS) == set(limit_locations("queue_name_length", "min"))


@pytest.mark.parametrize("cmd, path", QUEUE_NAME_LOCATIONS,
                         ids=[f"{c}{pointer(p)}" for c, p in QUEUE_NAME_LOCATIONS])
def test_queue_name_length_bounds(cmd, path):
    rid = rule_at(cmd, path, "maxLength")
    assert rid == rule_at(cmd, path, "minLength")
    for length in (QUEUE_NAME.min, QUEUE_NAME.max):
        msg = with_value(cmd, path, "q" * length)
        assert VALIDATOR.request_violations(msg) == (), length
        assert VALIDATOR.request_is_valid(msg)
    too_long = with_value(cmd, path, "q" * (QUEUE_NAME.max + 1))
    violations = VALIDATOR.request_violations(too_long)
    assert [(v.requirement, v.path) for v in violations] == [(rid, pointer(path))]
    assert not VALIDATOR.request_is_valid(too_long)
    empty = with_value(cmd, path, "q" * (QUEUE_NAME.min - 1))
    violations = VALIDATOR.request_violations(empty)
    assert rid in {v.requirement for v in violations}
    assert {v.path for v in violations} == {pointer(path)}
    assert not VALIDATOR.request_is_valid(empty)


QUEUE_PATTERN = LIMITS["queue_name_pattern"]


@pytest.mark.parametrize("name", ["a b", "a/b", "caf\u00e9", "a\n", "\na", "a*", "q\x00", "a\u0661"])
@pytest.mark.parametrize("cmd", ["PUSH", "PULLB", "GetJobCounts"])
def test_queue_name_pattern_is_cited(cmd, name):
    assert cmd in {c for c, _ in limit_locations("queue_name_pattern", "pattern")}
    msg = with_value(cmd, ("queue",), name)
    violations = VALIDATOR.request_violations(msg)
    assert [(v.requirement, v.path) for v in violations] == [
        (rule_at(cmd, ("queue",), "pattern"), "/queue")], violations
    assert not VALIDATOR.request_is_valid(msg)


def test_a_queue_name_rule_is_stated_for_commands_that_add_jobs_and_a_reading_for_lookups():
    """The levels policy: 001's queue-name constraints bind the commands that add or take jobs
    (a stated MUST); that a command which only looks a queue up refuses a bad name is a
    reading (implied, SHOULD)."""
    for cmd in ("PUSH", "PUSHB", "PULL", "PULLB", "Cron"):
        assert rule_at(cmd, ("queue",), "maxLength") == QUEUE_NAME.requirement
        assert rule_at(cmd, ("queue",), "pattern") == QUEUE_PATTERN.requirement
    for cmd in ("GetJobCounts", "Pause", "Drain", "RateLimit"):
        for keyword in ("maxLength", "pattern"):
            req = PROFILE.requirements[rule_at(cmd, ("queue",), keyword)]
            assert (req.level, req.basis) == ("SHOULD", "implied"), (cmd, keyword)
    for rid in (QUEUE_NAME.requirement, QUEUE_PATTERN.requirement):
        req = PROFILE.requirements[rid]
        assert (req.level, req.basis) == ("MUST", "stated")


def test_queue_name_pattern_accepts_every_allowed_character_class():
    msg = with_value("PUSH", ("queue",), "Az09_-.:x")
    assert VALIDATOR.request_violations(msg) == ()


def test_queue_name_of_wrong_type():
    for value in (5, None, ["q"], b"q"):
        msg = with_value("PUSH", ("queue",), value)
        violations = VALIDATOR.request_violations(msg)
        assert violations and {v.path for v in violations} == {"/queue"}
        assert not VALIDATOR.request_is_valid(msg)


JOB_DATA = LIMITS["job_data_bytes"]


def _json_len(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (what JSON.stringify writes)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


JOB_DATA_LOCATIONS = limit_locations("job_data_bytes", "max")


def test_job_data_locations():
    assert {("PUSH", ("data",)), ("PUSHB", ("jobs", 0, "data"))} <= set(JOB_DATA_LOCATIONS)


@pytest.mark.parametrize("cmd, path", JOB_DATA_LOCATIONS,
                         ids=[f"{c}{pointer(p)}" for c, p in JOB_DATA_LOCATIONS])
def test_job_data_size_limit(cmd, path):
    # a JSON string of n ASCII characters is n + 2 bytes
    exact = with_value(cmd, path, "a" * (JOB_DATA.max - 2))
    assert VALIDATOR.request_violations(exact) == ()
    assert VALIDATOR.request_is_valid(exact)
    over = with_value(cmd, path, "a" * (JOB_DATA.max - 1))
    violations = VALIDATOR.request_violations(over)
    assert [(v.requirement, v.path) for v in violations] == [
        (JOB_DATA.requirement, pointer(path))], violations
    assert str(JOB_DATA.max) in violations[0].message
    assert not VALIDATOR.request_is_valid(over)


def test_job_data_size_limit_counts_structured_values_and_utf8_bytes():
    # every byte of a structured value counts: keys, quotes, brackets, commas, numbers, null
    # (a few hundred members beside one long string, so that the test stays fast)
    def data(n: int) -> dict:
        return {"s": "a" * n, "l": [0, 1.5, None, True] * 100, "o": {str(i): i for i in range(100)}}

    n = JOB_DATA.max - _json_len(data(0))
    exact = with_value("PUSH", ("data",), data(n))
    assert VALIDATOR.request_violations(exact) == ()
    assert VALIDATOR.request_is_valid(exact)
    over = with_value("PUSH", ("data",), data(n + 1))
    assert [v.requirement for v in VALIDATOR.request_violations(over)] == [JOB_DATA.requirement]
    assert not VALIDATOR.request_is_valid(over)
    # UTF-8 bytes, not characters: "é" is two bytes
    half = (JOB_DATA.max - 2) // 2
    ok = with_value("PUSH", ("data",), "\u00e9" * half)
    assert VALIDATOR.request_violations(ok) == ()
    bad = with_value("PUSH", ("data",), "\u00e9" * (half + 1))
    assert [v.requirement for v in VALIDATOR.request_violations(bad)] == [JOB_DATA.requirement]
    assert not VALIDATOR.request_is_valid(bad)


def test_job_data_size_limit_after_the_wire():
    over = wire(with_value("PUSH", ("data",), {"k": "a" * JOB_DATA.max}))
    assert [v.requirement for v in VALIDATOR.request_violations(over)] == [JOB_DATA.requirement]
    assert not VALIDATOR.request_is_valid(over)


# =============================================================================================
# Envelope
# =============================================================================================
def test_unknown_command():
    rid = ERRORS["unknown_command"].requirement
    for msg in ({"cmd": "NOPE"}, {"cmd": "push", "queue": "q", "data": 1}, {"cmd": ""}):
        violations = VALIDATOR.request_violations(msg)
        assert [(v.requirement, v.path) for v in violations] == [(rid, "/cmd")]
        assert not VALIDATOR.request_is_valid(msg)
        with pytest.raises(MessageError) as info:
            VALIDATOR.validate_request(msg)
        err = info.value
        assert isinstance(err, ProtocolError)
        assert err.kind == "unknown_command"
        assert err.requirement == rid and rid in str(err)
        assert err.reaction == ERRORS["unknown_command"].reaction
        assert err.violations == violations


@pytest.mark.parametrize("msg", [{}, {"queue": "q"}, {"cmd": 5}, {"cmd": None},
                                 {"cmd": b"PUSH"}, {"cmd": ["PUSH"]}, {"cmd": UNDEFINED}])
def test_missing_or_non_string_cmd(msg):
    rid = ERRORS["missing_cmd"].requirement
    assert rid == ENVELOPE["request"]["cmd"]["x-requirement"]
    violations = VALIDATOR.request_violations(msg)
    assert [(v.requirement, v.path) for v in violations] == [(rid, "/cmd")]
    with pytest.raises(MessageError) as info:
        VALIDATOR.validate_request(msg)
    assert rid in str(info.value)
    assert info.value.violations == violations


@pytest.mark.parametrize("msg", [{}, {"queue": "q"}, {"cmd": 5}, {"cmd": None},
                                 {"cmd": b"PUSH"}, {"cmd": UNDEFINED}])
def test_validate_request_names_the_missing_cmd_kind(msg):
    # a map without a string cmd is "missing_cmd", not "not_a_map" (both cite one requirement)
    with pytest.raises(MessageError) as info:
        VALIDATOR.validate_request(msg)
    assert info.value.kind == "missing_cmd"
    assert info.value.reaction == ERRORS["missing_cmd"].reaction


@pytest.mark.parametrize("payload", [
    b"\x81\xa3cmd\x91\xa4Ping",          # {cmd: ["Ping"]}
    b"\x81\xa3cmd\x81\xa1a\x01",          # {cmd: {a: 1}}
])
def test_request_is_valid_on_unhashable_cmd_from_the_wire(payload):
    (msg,) = FrameDecoder(PROFILE).feed(frame(payload))
    rid = ERRORS["missing_cmd"].requirement
    assert [v.requirement for v in VALIDATOR.request_violations(msg)] == [rid]
    assert VALIDATOR.request_is_valid(msg) is False


@pytest.mark.parametrize("msg", [[1], "PUSH", None, 5, [("cmd", "PUSH")]])
def test_request_that_is_not_a_map(msg):
    rid = ERRORS["not_a_map"].requirement
    violations = VALIDATOR.request_violations(msg)
    assert [v.requirement for v in violations] == [rid]
    assert not VALIDATOR.request_is_valid(msg)
    assert [v.requirement for v in VALIDATOR.reply_violations("Ping", msg)] == [rid]
    with pytest.raises(MessageError) as info:
        VALIDATOR.validate_request(msg)
    assert info.value.kind == "not_a_map"


def test_reqid_must_be_a_string_when_present(bq_minimal):
    rid = ENVELOPE["request"]["reqId"]["x-requirement"]
    msg = {**bq_minimal("Ping"), "reqId": 7}
    assert [(v.requirement, v.path) for v in VALIDATOR.request_violations(msg)] == [
        (rid, "/reqId")]
    assert not VALIDATOR.request_is_valid(msg)
    assert VALIDATOR.request_violations({**msg, "reqId": UNDEFINED}) == ()
    assert VALIDATOR.request_is_valid({**msg, "reqId": UNDEFINED})


def test_missing_required_request_field_cites_the_command(bq_minimal):
    for cmd in COMMANDS:
        command = MODEL.commands[cmd]
        full = bq_minimal(cmd)
        for field in command.required_fields:
            if field == "cmd":
                continue
            msg = {k: v for k, v in full.items() if k != field}
            violations = VALIDATOR.request_violations(msg)
            assert violations, (cmd, field)
            assert any(field in v.message for v in violations)
            assert all(v.requirement in PROFILE.requirements for v in violations)
            assert command.requirement in {v.requirement for v in violations}
            assert VALIDATOR.missing_fields(cmd, msg) == [field]
            assert not VALIDATOR.request_is_valid(msg)
            undefined = {**full, field: UNDEFINED}
            assert VALIDATOR.missing_fields(cmd, undefined) == [field]
            assert VALIDATOR.request_violations(undefined), (cmd, field)


def test_validate_request_accepts_valid_and_raises_message_error(bq_minimal):
    assert VALIDATOR.validate_request(bq_minimal("PUSH")) is None
    prio = LIMITS["priority"]
    msg = {**bq_minimal("PUSH"), "priority": prio.max + 1}
    with pytest.raises(MessageError) as info:
        VALIDATOR.validate_request(msg)
    err = info.value
    assert err.kind == "schema_violation"
    # the error cites the rule actually broken, not the generic schema rule
    assert err.requirement == prio.requirement != ERRORS["schema_violation"].requirement
    assert err.requirement in str(err)
    assert err.path == "/priority"
    assert err.violations == VALIDATOR.request_violations(msg)
    assert err.violations[0].requirement == prio.requirement
    assert err.as_dict()["violations"][0]["requirement"] == prio.requirement


@pytest.mark.parametrize("limit, field", [("priority", "priority"), ("delay", "delay"),
                                          ("max_attempts", "maxAttempts")])
def test_message_error_text_cites_the_broken_requirement(bq_minimal, limit, field):
    """The error's text names the rule actually broken (the limit's requirement), not only
    the generic schema-violation kind."""
    lim = LIMITS[limit]
    msg = {**bq_minimal("PUSH"), field: lim.max + 1}
    with pytest.raises(MessageError) as info:
        VALIDATOR.validate_request(msg)
    assert lim.requirement in str(info.value), str(info.value)


# =============================================================================================
# Replies
# =============================================================================================
def _required_paths(schema: Mapping, defs: Mapping, path: tuple = ()) -> list[tuple]:
    node = _resolve(schema, defs)
    out = []
    props = node.get("properties") or {}
    for name in node.get("required") or ():
        if not path and name == "ok":
            continue
        out.append(path + (name,))
        if name in props:
            out += _required_paths(props[name], defs, path + (name,))
    return out


REPLY_REQUIRED = [
    (cmd, p) for cmd in COMMANDS
    for p in _required_paths(MODEL.commands[cmd].response,
                             MODEL.commands[cmd].response.get("$defs") or {})
]


def test_replies_with_required_fields_exist():
    assert len({c for c, _ in REPLY_REQUIRED}) > 40


@pytest.mark.parametrize("cmd, path", REPLY_REQUIRED,
                         ids=[f"{c}{pointer(p)}" for c, p in REPLY_REQUIRED])
def test_ok_reply_missing_a_required_field_is_a_violation(cmd, path, bq_minimal):
    reply = bq_minimal(cmd, reply=True)
    assert VALIDATOR.reply_violations(cmd, reply) == ()
    parent = reply
    for part in path[:-1]:
        parent = parent[part]
    for replacement in ("delete", UNDEFINED):
        broken = copy.deepcopy(reply)
        target = broken
        for part in path[:-1]:
            target = target[part]
        if replacement == "delete":
            del target[path[-1]]
        else:
            target[path[-1]] = UNDEFINED
        violations = VALIDATOR.reply_violations(cmd, broken)
        assert violations, (cmd, path, replacement)
        assert any(path[-1] in v.message for v in violations)
        assert {v.path for v in violations} == {pointer(path[:-1]) if path[:-1] else ""}
        assert all(v.requirement in PROFILE.requirements for v in violations)
        if len(path) == 1:
            assert VALIDATOR.missing_fields(cmd, broken, reply=True) == [path[0]]


def test_ok_reply_of_unknown_command():
    rid = ERRORS["unknown_command"].requirement
    assert [v.requirement for v in VALIDATOR.reply_violations("NOPE", {"ok": True})] == [rid]


@pytest.mark.parametrize("cmd", COMMANDS + ["NOPE"])
def test_error_reply_is_valid_for_any_command(cmd):
    assert VALIDATOR.reply_violations(cmd, {"ok": False, "error": "x"}) == ()
    assert VALIDATOR.reply_violations(cmd, {"ok": False, "error": "x", "reqId": "1"}) == ()
    assert VALIDATOR.reply_violations(cmd, {"ok": False, "error": "x", "reqId": UNDEFINED}) == ()


@pytest.mark.parametrize("reply", [
    {"ok": False},
    {"ok": False, "error": 5},
    {"ok": False, "error": UNDEFINED},
    {"error": "x"},
    {"ok": "true", "error": "x"},
    {"ok": 1, "error": "x"},
    {"ok": False, "error": "x", "reqId": 7},
])
def test_broken_error_reply(reply):
    rid = MODEL.error_reply["x-requirement"]
    for cmd in ("PUSH", "Ping"):
        violations = VALIDATOR.reply_violations(cmd, reply)
        assert violations, reply
        assert rid in {v.requirement for v in violations} or any(
            v.requirement in PROFILE.requirements for v in violations)
        assert all(v.requirement in PROFILE.requirements for v in violations)


def test_missing_error_cites_the_error_reply_requirement():
    rid = MODEL.error_reply["x-requirement"]
    assert [v.requirement for v in VALIDATOR.reply_violations("PUSH", {"ok": False})] == [rid]


def test_ok_reply_with_wrong_field_type():
    violations = VALIDATOR.reply_violations("PUSH", {"ok": True, "id": 5})
    assert [v.path for v in violations] == ["/id"]
    violations = VALIDATOR.reply_violations("GetState", {"ok": True, "id": "j", "state": "x"})
    assert [v.path for v in violations] == ["/state"]
    state_rid = MODEL.definitions["JobState"]["x-requirement"]
    assert violations[0].requirement == state_rid


# =============================================================================================
# extra_fields / missing_fields
# =============================================================================================
@pytest.mark.parametrize("cmd", COMMANDS)
def test_extra_fields_reports_undocumented_fields_only(cmd, bq_minimal):
    msg = {**bq_minimal(cmd), "reqId": "1"}
    assert set(ENVELOPE["request"]) <= set(msg) | {"reqId"}
    assert VALIDATOR.extra_fields(cmd, msg) == []
    documented = {**msg, **{k: UNDEFINED for k in MODEL.commands[cmd].request_fields
                            if k not in msg}}
    assert VALIDATOR.extra_fields(cmd, documented) == []
    extra = {**msg, "zzNotInSpec": 1, "another": None, "gone": UNDEFINED, 7: "x"}
    assert VALIDATOR.extra_fields(cmd, extra) == ["zzNotInSpec", "another", "gone", 7]
    # extra fields are reported, not violations
    assert VALIDATOR.request_violations(extra) == ()

    reply = {**bq_minimal(cmd, reply=True), "reqId": "1"}
    assert VALIDATOR.extra_fields(cmd, reply, reply=True) == []
    envelope_reply = {**reply, **{k: "e" for k in ENVELOPE["error_reply"]["properties"]
                                  if k not in reply}}
    assert VALIDATOR.extra_fields(cmd, envelope_reply, reply=True) == []
    assert VALIDATOR.extra_fields(cmd, {**reply, "zz": 1}, reply=True) == ["zz"]


def test_extra_fields_of_unknown_command():
    assert VALIDATOR.extra_fields("NOPE", {"cmd": "NOPE", "x": 1}) == []
    assert VALIDATOR.missing_fields("NOPE", {"cmd": "NOPE"}) == []


def test_missing_fields(bq_minimal):
    required = [f for f in MODEL.commands["PUSH"].required_fields]
    assert VALIDATOR.missing_fields("PUSH", {}) == required
    assert VALIDATOR.missing_fields("PUSH", dict.fromkeys(required, UNDEFINED)) == required
    assert VALIDATOR.missing_fields("PUSH", bq_minimal("PUSH")) == []
    # None is a value, not an absence
    assert VALIDATOR.missing_fields("PUSH", dict.fromkeys(required, None)) == []


# =============================================================================================
# Fast path and full verdict agree
# =============================================================================================
AGREEMENT_CASES = {
    "undefined required data": {"cmd": "PUSH", "queue": "q", "data": UNDEFINED},
    "undefined required queue": {"cmd": "PUSH", "queue": UNDEFINED, "data": 1},
    "undefined required in batch": {"cmd": "PUSHB", "queue": "q", "jobs": [{"data": UNDEFINED}]},
    "undefined optional": {"cmd": "PUSH", "queue": "q", "data": 1, "ttl": UNDEFINED},
    "binary data": {"cmd": "PUSH", "queue": "q", "data": b"\x00" * 16},
    "binary data near the limit": {"cmd": "PUSH", "queue": "q",
                                   "data": bytes(int(JOB_DATA.max * 0.6))},
    "timestamp data": {"cmd": "PUSH", "queue": "q",
                       "data": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)},
    "int keys in data": {"cmd": "PUSH", "queue": "q", "data": {1: 2, (1, 2): 3}},
    "int key at top": {"cmd": "PUSH", "queue": "q", "data": 1, 9: 9},
    "float priority": {"cmd": "PUSH", "queue": "q", "data": 1, "priority": 5.0},
    "fractional priority": {"cmd": "PUSH", "queue": "q", "data": 1, "priority": 5.5},
    "nan progress": {"cmd": "Progress", "id": "j", "progress": float("nan")},
}


@pytest.mark.parametrize("name", list(AGREEMENT_CASES))
def test_request_is_valid_agrees_with_request_violations(name):
    msg = AGREEMENT_CASES[name]
    violations = VALIDATOR.request_violations(msg)
    assert VALIDATOR.request_is_valid(msg) == (violations == ()), violations


@pytest.mark.parametrize("data_payload", [
    b"\x81\xc0\x01",            # {nil: 1}
    b"\x81\x92\x01\x02\x03",    # {[1, 2]: 3}
    b"\x81\xc3\x01",            # {true: 1}
])
def test_request_is_valid_on_job_data_with_non_string_keys_from_the_wire(data_payload):
    """MessagePack maps keyed by nil, arrays or booleans decode fine; the validator reads the
    keys JS-style ("null", "1,2", "true") and must answer, not crash."""
    payload = b"\x83\xa3cmd\xa4PUSH\xa5queue\xa1q\xa4data" + data_payload
    (msg,) = FrameDecoder(PROFILE).feed(frame(payload))
    assert VALIDATOR.request_violations(msg) == ()
    assert VALIDATOR.request_is_valid(msg) is True


MUTATION_VALUES = st.one_of(
    st.just(UNDEFINED), st.none(), st.booleans(), st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False), st.text(max_size=5), st.binary(max_size=5),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=3),
                                                             st.integers(), max_size=2),
)


@pytest.mark.parametrize("cmd", COMMANDS)
@settings(max_examples=30, deadline=None, derandomize=True)
@given(data=st.data())
def test_fast_path_agrees_with_verdict_property(cmd, data, bq_minimal):
    msg = bq_minimal(cmd)
    fields = [f for f in MODEL.commands[cmd].request_fields if f != "cmd"] or ["x"]
    changes = data.draw(st.dictionaries(st.sampled_from(fields), MUTATION_VALUES, max_size=3))
    msg.update(changes)
    violations = VALIDATOR.request_violations(msg)
    assert VALIDATOR.request_is_valid(msg) == (violations == ()), (msg, violations)


def test_messages_nested_to_the_decoder_limit_validate_without_recursion_error():
    depth = LIMITS["max_nesting_depth"].value
    inner: Any = []
    for _ in range(depth - 2):  # the request map is level 1, data's outer list level 2
        inner = [inner]
    msg = wire({"cmd": "PUSH", "queue": "q", "data": inner})
    assert VALIDATOR.request_violations(msg) == ()
    assert VALIDATOR.request_is_valid(msg)
    bad = {**msg, "priority": "high"}
    assert [v.path for v in VALIDATOR.request_violations(bad)] == ["/priority"]
    nested: Any = {}
    for _ in range(depth - 3):  # reply map, job map, then maps down to the limit
        nested = {"k": nested}
    reply = wire({"ok": True, "job": {"id": "j", "queue": "q", "data": nested}})
    assert VALIDATOR.reply_violations("GetJob", reply) == ()


# =============================================================================================
# JavaScript-style keys and the JSON model
# =============================================================================================
@pytest.mark.parametrize("key, text", [
    ("k", "k"),
    (1, "1"),
    (-5, "-5"),
    (None, "null"),
    (True, "true"),
    (False, "false"),
    ((1, 2), "1,2"),
    ((1, (2, 3)), "1,2,3"),
    ((None, 1, UNDEFINED), ",1,"),
    (("a", "b"), "a,b"),
    ((), ""),
    (b"\x01\x02", "1,2"),
    (1.0, "1"),
    (-0.0, "0"),
    (1.5, "1.5"),
    (0.1, "0.1"),
    (1e20, "100000000000000000000"),
    (1e21, "1e+21"),
    (float("nan"), "NaN"),
    (float("inf"), "Infinity"),
    (float("-inf"), "-Infinity"),
    (2**53, "9007199254740992"),
    (-1.5, "-1.5"),
    (-1e21, "-1e+21"),
    (-1e-07, "-1e-7"),
])
def test_js_key(key, text):
    assert js_key(key) == text


@pytest.mark.parametrize("key, text", [
    (1e-05, "0.00001"),
    (1.5e-05, "0.000015"),
    (1e-06, "0.000001"),
    (1e-07, "1e-7"),
    (1.5e300, "1.5e+300"),
])
def test_js_key_small_and_large_floats_follow_number_to_string(key, text):
    # ECMAScript Number::toString: fixed notation down to 1e-6, exponent without zero padding
    assert js_key(key) == text


def test_to_json_model():
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    msg = {"a": UNDEFINED, "b": [1, UNDEFINED], 1: b"\x01\xff", (1, 2): when,
           "n": float("nan"), "d": {None: 1}}
    assert to_json_model(msg) == {
        "b": [1, None], "1": {"$binary": "01ff"}, "1,2": {"$timestamp": when.isoformat()},
        "n": None, "d": {"null": 1},
    }


def test_non_string_keys_are_read_as_js_strings_by_the_validator():
    # GetCountsPerPriority: counts keyed by priority (propertyNames is a decimal pattern)
    good = {"ok": True, "queue": "q", "counts": {5: 1, -3: 2, 0: 7, 10.0: 1}}
    assert VALIDATOR.reply_violations("GetCountsPerPriority", good) == ()
    assert VALIDATOR.reply_violations("GetCountsPerPriority", wire(good)) == ()
    bad = {"ok": True, "queue": "q", "counts": {1.5: 1}}
    violations = VALIDATOR.reply_violations("GetCountsPerPriority", bad)
    assert violations and {v.path for v in violations} == {"/counts"}
    # a documented field whose key arrives as a non-string is still that field
    assert VALIDATOR.reply_violations("Count", {"ok": True, "count": 3}) == ()
    assert VALIDATOR.missing_fields("Count", {"ok": True, "count": 3}, reply=True) == []


def test_violation_rendering():
    (v,) = VALIDATOR.request_violations({"cmd": "NOPE"})
    assert isinstance(v, Violation)
    assert v.requirement in str(v) and v.level in str(v) and v.path in str(v)
    assert v.as_dict() == {"requirement": v.requirement, "level": v.level, "path": v.path,
                           "message": v.message}


def test_undocumented_fields_are_found_at_any_depth_with_null_apart(bq_validator):
    reply = {"ok": True, "crons": [
        {"name": "c", "queue": "q", "schedule": "* * * * *", "repeatEvery": None,
         "nextRun": 1.0, "executions": 0, "jobName": "default", "timezone": None},
        {"name": "d", "queue": "q", "schedule": None, "repeatEvery": 5, "nextRun": 2.0,
         "executions": 1, "jobName": "x", "timezone": "UTC"}]}
    found = bq_validator.undocumented_fields("CronList", reply, reply=True)
    documented = bq_validator._replies["CronList"].schema["properties"]["crons"]["items"]
    assert "timezone" in documented["properties"]  # documented: never reported
    # jobName is not in bunqueue/v2's CronList item; null only where every value was null
    assert found == {"crons[].jobName": False}
    assert bq_validator.undocumented_fields(
        "Cron", {"ok": True, "cron": {"name": "c", "extra": None}}, reply=True) == {
        "cron.extra": True}


def test_undocumented_fields_do_not_look_into_job_data(bq_validator):
    job = {"cmd": "PUSH", "queue": "q", "data": {"anything": {"goes": [1, {"here": True}]}}}
    assert bq_validator.undocumented_fields("PUSH", job) == {}
    assert bq_validator.undocumented_fields("PUSH", {**job, "surprise": 1}) == {"surprise": False}


# =============================================================================================
# Issue 31: behaviours a mutation run found unpinned
# =============================================================================================
def _cron_entry(**fields: Any) -> dict:
    """One CronList item with every required field (and no optional one)."""
    return {"name": "nightly", "queue": "q", "schedule": "0 * * * *", "repeatEvery": None,
            "nextRun": 1_767_225_600_000, "executions": 0, **fields}


def test_null_in_a_required_field_is_the_commands_must_and_in_an_optional_one_bq_env_7():
    """A null where the schema types a required field is the command's shape broken (its own
    requirement, MUST); only a null in an optional field (T | undefined) is the rule of its
    own, BQ-ENV-7, a SHOULD. Mixing the two would let a verdict silently drop a level."""
    cmd = "CronList"
    own = MODEL.commands[cmd].requirement
    null_rule = ERRORS["null_optional"].requirement
    assert PROFILE.requirements[own].level == "MUST"
    assert PROFILE.requirements[null_rule].level == "SHOULD"
    items = MODEL.commands[cmd].response["properties"]["crons"]["items"]
    assert "name" in items["required"] and "maxLimit" not in items["required"]
    assert VALIDATOR.reply_violations(cmd, {"ok": True, "crons": [_cron_entry()]}) == ()

    required_null = {"ok": True, "crons": [_cron_entry(name=None)]}
    assert [(v.requirement, v.level, v.path)
            for v in VALIDATOR.reply_violations(cmd, required_null)] == [
        (own, "MUST", "/crons/0/name")]
    assert not VALIDATOR.reply_is_valid(cmd, required_null)

    optional_null = {"ok": True, "crons": [_cron_entry(maxLimit=None)]}
    assert [(v.requirement, v.level, v.path)
            for v in VALIDATOR.reply_violations(cmd, optional_null)] == [
        (null_rule, "SHOULD", "/crons/0/maxLimit")]


def test_an_undefined_member_of_job_data_counts_nothing_toward_its_size_limit():
    """JSON.stringify drops an ``undefined`` member, so job data exactly at x-maxJsonBytes
    plus an undefined member is still at the limit, not ``,"u":null`` (9 bytes) over it."""
    n = JOB_DATA.max - len('{"k":""}')
    at_limit = {"k": "a" * n, "u": UNDEFINED}
    msg = with_value("PUSH", ("data",), at_limit)
    assert VALIDATOR.request_violations(msg) == ()
    assert VALIDATOR.request_is_valid(msg)
    over = with_value("PUSH", ("data",), {"k": "a" * (n + 1), "u": UNDEFINED})
    assert [v.requirement for v in VALIDATOR.request_violations(over)] == [JOB_DATA.requirement]
    assert not VALIDATOR.request_is_valid(over)


# =============================================================================================
# Issue 31: what a violation says and where, the JSON size model, reply and event checks
# =============================================================================================
def _priority_message(value: str) -> str:
    """The message of the one violation a string priority gives (it quotes the value)."""
    (v,) = VALIDATOR.request_violations(with_value("PUSH", ("priority",), value))
    return v.message


def test_a_violation_message_is_cut_to_message_chars_ending_in_an_ellipsis():
    """Messages quote the offending value, so a long value would make a verdict unreadable:
    a message of at most MESSAGE_CHARS characters is kept whole, a longer one is cut to exactly
    MESSAGE_CHARS, its last three characters "..."."""
    template = _priority_message("a")
    assert '"a"' in template and not template.endswith("...")  # a short message is whole

    def full(n: int) -> str:  # the message before any cut, for a value of n characters
        return template.replace('"a"', '"' + "a" * n + '"')

    fits = MESSAGE_CHARS - (len(template) - 1)
    assert len(full(fits)) == MESSAGE_CHARS
    assert _priority_message("a" * fits) == full(fits)
    cut = _priority_message("a" * (fits + 1))
    assert cut == full(fits + 1)[:MESSAGE_CHARS - 3] + "..."
    assert len(cut) == MESSAGE_CHARS
    assert len(_priority_message("a" * 10_000)) == MESSAGE_CHARS


def test_envelope_violations_say_what_is_wrong_and_where():
    """The violations that are not schema errors carry their own path and text: a message
    that is not a map is wrong as a whole (path ""), a missing or unknown cmd at /cmd; an ok
    reply to an unknown command is wrong as a whole. validate_request's error carries the first
    violation's text."""
    def said(violations: tuple[Violation, ...]) -> list[tuple[str, str]]:
        return [(v.path, v.message) for v in violations]

    assert said(VALIDATOR.request_violations([1])) == [("", "request is not a map")]
    assert said(VALIDATOR.reply_violations("Ping", [1])) == [("", "reply is not a map")]
    assert said(VALIDATOR.request_violations({"queue": "q"})) == [
        ("/cmd", "request has no string cmd")]
    assert said(VALIDATOR.request_violations({"cmd": "NOPE"})) == [
        ("/cmd", "unknown command 'NOPE'")]
    assert said(VALIDATOR.reply_violations("NOPE", {"ok": True})) == [
        ("", "unknown command 'NOPE'")]
    for msg in ({"cmd": "NOPE"}, [1], {"cmd": "PUSH", "queue": "q", "data": 1, "priority": "x"}):
        with pytest.raises(MessageError) as info:
            VALIDATOR.validate_request(msg)
        first = VALIDATOR.request_violations(msg)[0]
        assert info.value.detail == first.message
        assert first.message in str(info.value)


def test_null_in_a_top_level_field_is_bq_env_7_only_where_the_field_is_optional():
    """A null in an optional top-level field typed inline (uniqueKey) is BQ-ENV-7, a SHOULD,
    not the field's own rule; a null in a required field (queue, through QueueName) is that
    field's MUST."""
    null_rule = ERRORS["null_optional"].requirement
    props = MODEL.commands["PUSH"].request["properties"]
    assert "uniqueKey" not in MODEL.commands["PUSH"].required_fields
    assert props["uniqueKey"]["x-requirement"] != null_rule
    optional = with_value("PUSH", ("uniqueKey",), None)
    (violation,) = VALIDATOR.request_violations(optional)
    assert (violation.requirement, violation.level, violation.path) == (
        null_rule, PROFILE.requirements[null_rule].level, "/uniqueKey")
    assert violation.message.startswith("null ")  # the schema's own words on the value
    assert not VALIDATOR.request_is_valid(optional)
    required = with_value("PUSH", ("queue",), None)
    rid = rule_at("PUSH", ("queue",), "type")
    assert [(v.requirement, v.level, v.path) for v in VALIDATOR.request_violations(required)] == [
        (rid, PROFILE.requirements[rid].level, "/queue")]
    assert PROFILE.requirements[rid].level == "MUST"


def test_a_violation_under_a_definition_without_a_rule_cites_the_nearest_field_rule():
    """JobId states no requirement of its own; a wrong job id inside GetJob's reply cites the
    rule of the field that holds it (job), not the command's generic one."""
    assert "x-requirement" not in MODEL.definitions["JobId"]
    job_rule = MODEL.commands["GetJob"].response["properties"]["job"]["x-requirement"]
    assert job_rule != MODEL.commands["GetJob"].requirement
    job = minimal(dict(MODEL.commands["GetJob"].response))["job"]
    reply = {"ok": True, "job": {**job, "id": 5}}
    assert [(v.requirement, v.path) for v in VALIDATOR.reply_violations("GetJob", reply)] == [
        (job_rule, "/job/id")]


def test_job_data_holding_undefined_is_measured_as_json_stringify_writes_it():
    """Data holding ``undefined`` cannot be encoded as it is, so its size is measured on what
    JSON.stringify writes: an undefined array item as null, an undefined member not at all,
    NaN and Infinity as null, every other number as its digits. At the limit it is valid, one
    byte over it breaks the job data rule, and the fast path agrees."""
    def data(n: int) -> list:
        return ["a" * n, UNDEFINED, 1234.5, float("nan"), {"u": UNDEFINED, "f": -0.25},
                float("-inf")]

    stringified = ["", None, 1234.5, None, {"f": -0.25}, None]  # data(0) as JSON.stringify
    n = JOB_DATA.max - _json_len(stringified)
    at_limit = with_value("PUSH", ("data",), data(n))
    assert VALIDATOR.request_violations(at_limit) == ()
    assert VALIDATOR.request_is_valid(at_limit)
    over = with_value("PUSH", ("data",), data(n + 1))
    assert [(v.requirement, v.path, v.message) for v in VALIDATOR.request_violations(over)] == [
        (JOB_DATA.requirement, "/data",
         f"value is {JOB_DATA.max + 1} bytes as JSON, more than {JOB_DATA.max}")]
    assert not VALIDATOR.request_is_valid(over)


def test_reply_is_valid_judges_a_success_reply_by_default_and_an_error_reply_with_ok_false(
        bq_minimal):
    error = {"ok": False, "error": "x"}
    for cmd in ("PUSH", "GetJob", "Ping"):
        good = bq_minimal(cmd, reply=True)
        assert VALIDATOR.reply_is_valid(cmd, good) is True
        assert VALIDATOR.reply_is_valid(cmd, good, ok=True) is True
        assert VALIDATOR.reply_is_valid(cmd, good, ok=False) is False
        assert VALIDATOR.reply_is_valid(cmd, error, ok=False) is True
        assert VALIDATOR.reply_is_valid(cmd, error) is False
        assert VALIDATOR.reply_is_valid(cmd, {**good, "ok": "yes"}) is False
    assert VALIDATOR.reply_is_valid("NOPE", {"ok": True}) is False
    assert VALIDATOR.reply_is_valid("NOPE", error, ok=False) is True


def test_error_reply_fields_are_known_in_replies_only(bq_minimal):
    """``error`` is a field of the shared error reply: documented beside any reply's own
    fields, undocumented in a request."""
    request = {**bq_minimal("PUSH"), "error": "x"}
    assert VALIDATOR.extra_fields("PUSH", request) == ["error"]
    assert VALIDATOR.undocumented_fields("PUSH", request) == {"error": False}
    reply = {**bq_minimal("PUSH", reply=True), "error": None}
    assert "error" not in MODEL.commands["PUSH"].response["properties"]
    assert VALIDATOR.extra_fields("PUSH", reply, reply=True) == []
    assert VALIDATOR.undocumented_fields("PUSH", reply, reply=True) == {}


def test_undocumented_fields_are_found_through_refs_any_of_and_list_items(bq_minimal):
    """Objects typed by a definition (GetJob's job), by anyOf [Job, null] (PULL's job) or as
    list items (GetJobs' jobs) are looked into; an undocumented member is one whatever its
    value, undefined included (a documented one set to undefined is absent, BQ-ENV-7); an
    unknown command or a message that is not a map has none."""
    job = bq_minimal("GetJob", reply=True)["job"]
    extra = {**job, "gone": UNDEFINED, "zz": 1}
    assert VALIDATOR.undocumented_fields("GetJob", {"ok": True, "job": extra}, reply=True) == {
        "job.gone": False, "job.zz": False}
    assert VALIDATOR.undocumented_fields(
        "PULL", {"ok": True, "job": {**job, "zz": None}}, reply=True) == {"job.zz": True}
    assert VALIDATOR.undocumented_fields(
        "GetJobs", {"ok": True, "jobs": [job, extra]}, reply=True) == {
        "jobs[].gone": False, "jobs[].zz": False}
    request = {"cmd": "PUSH", "queue": "q", "ttl": UNDEFINED, "zz": 1, "data": {"free": 1}}
    assert VALIDATOR.undocumented_fields("PUSH", request) == {"zz": False}
    assert VALIDATOR.undocumented_fields("NOPE", {"cmd": "NOPE", "zz": 1}) == {}
    assert VALIDATOR.undocumented_fields("PUSH", [("zz", 1)]) == {}


def test_request_size_checks_name_the_job_data_paths():
    assert VALIDATOR.request_size_checks("PUSH") == (
        (("data",), JOB_DATA.max, JOB_DATA.requirement),)
    assert VALIDATOR.request_size_checks("PUSHB") == (
        (("jobs", "*", "data"), JOB_DATA.max, JOB_DATA.requirement),)
    assert VALIDATOR.request_size_checks("Ping") == ()
    assert VALIDATOR.request_size_checks("NOPE") == ()


def test_jsonable_keeps_undefined_visible_and_tags_binary_and_timestamps():
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    value = {"a": UNDEFINED, "l": [1, UNDEFINED], 1: b"\x01\xff", (1, 2): when,
             "n": None, "d": {None: "x"}}
    assert jsonable(value) == {
        "a": {"$undefined": True}, "l": [1, {"$undefined": True}], "1": {"$binary": "01ff"},
        "1,2": {"$timestamp": when.isoformat()}, "n": None, "d": {"null": "x"}}
    assert jsonable(UNDEFINED) == {"$undefined": True}
    assert jsonable(bytearray(b"\x02")) == {"$binary": "02"}


def test_iter_x_requirements_yields_every_cited_id_parents_first():
    tree = {"x-requirement": "R-0", "a": {"requirement": "R-1", "x-requirement": "R-2",
                                          "b": [{"requirement": "R-3"}, {"requirement": 5}]},
            "c": ["R-9", {"x-requirement": None}]}
    assert list(iter_x_requirements(tree)) == ["R-0", "R-2", "R-1", "R-3"]
    cited = set(iter_x_requirements(json.loads(json.dumps(MODEL.commands["PUSH"].request,
                                                          default=dict))))
    assert {JOB_DATA.requirement, LIMITS["priority"].requirement} <= cited


# =============================================================================================
# Pushed job events (bunqueue/2.9.5 has them, bunqueue/v2 not)
# =============================================================================================
EVENTS_PROFILE = load_profile("bunqueue/2.9.5")
EVENTS = EVENTS_PROFILE.tree["job_events"]
EVENT_VALIDATOR = BunqueueValidator(EVENTS_PROFILE)


def _event_frame(**event: Any) -> dict:
    return {"type": "event", "event": {"eventType": next(iter(EVENTS["types"])), "queue": "q",
                                       "jobId": "j", "timestamp": 1.0, **event}}


def test_event_frames_are_judged_by_the_job_events_schema_citing_its_requirement():
    """A pushed frame is checked against job_events.frame with the definitions it uses; each
    broken rule cites job_events' requirement at its level, and event_is_valid agrees."""
    rid = EVENTS["requirement"]
    level = EVENTS_PROFILE.requirements[rid].level
    for kind in EVENTS["types"]:
        good = _event_frame(eventType=kind)
        assert EVENT_VALIDATOR.event_violations(good) == ()
        assert EVENT_VALIDATOR.event_is_valid(good) is True
    for bad, path in ((_event_frame(eventType="nope"), "/event/eventType"),
                      (_event_frame(jobId=5), "/event/jobId"),
                      ({"type": "event"}, "")):
        violations = EVENT_VALIDATOR.event_violations(bad)
        assert [(v.requirement, v.level, v.path) for v in violations] == [(rid, level, path)]
        assert EVENT_VALIDATOR.event_is_valid(bad) is False


def test_an_event_frame_that_is_not_a_map_or_from_a_profile_without_events():
    (v,) = EVENT_VALIDATOR.event_violations([1])
    rid = ERRORS["not_a_map"].requirement
    assert (v.requirement, v.path, v.message) == (rid, "", "event frame is not a map")
    assert EVENT_VALIDATOR.event_is_valid([1]) is False
    assert "job_events" not in PROFILE.tree
    (v,) = VALIDATOR.event_violations(_event_frame())
    rid = ERRORS["unknown_command"].requirement
    assert (v.requirement, v.path, v.message) == (rid, "", "this profile pushes no job events")
    assert VALIDATOR.event_is_valid(_event_frame()) is False


# =============================================================================================
# Schema shapes bunqueue/v2 does not use (oneOf, allOf, chains of $refs, a $ref beside its own
# properties, a rule the profile does not define), each in a profile of its own
# =============================================================================================
RULES = sorted(PROFILE.requirements)  # ids the crafted schemas cite; their levels are the profile's


def crafted(properties: Mapping, *, defs: Mapping | None = None, required: tuple = (),
            requirement: str | None = None, request: bool = False,
            extra: Mapping | None = None) -> BunqueueValidator:
    """A validator of bunqueue/v2 cut down to one command, ``Crafted``: its success reply (its
    request when ``request``, then with its ``cmd``) is an object of ``properties`` (``defs``
    its $defs, ``extra`` more keywords), the other side is Ping's, its own rule
    ``requirement`` (Ping's when None)."""
    ping = MODEL.commands["Ping"]
    if request:
        properties = {"cmd": {"const": "Crafted"}, **properties}
        required = ("cmd", *required)
    schema: dict = {"$schema": DIALECT, "type": "object", "required": list(required),
                    "properties": dict(properties), **(extra or {})}
    if defs:
        schema["$defs"] = dict(defs)
    command = dataclasses.replace(ping, name="Crafted", requirement=requirement or ping.requirement,
                                  **{"request" if request else "response": schema})
    model = dataclasses.replace(MODEL, commands={"Crafted": command})
    return BunqueueValidator(dataclasses.replace(PROFILE, model=model))


def test_undocumented_fields_see_the_properties_of_every_one_of_and_all_of_branch():
    v = crafted({
        "one": {"oneOf": [{"type": "object", "properties": {"a": {}}}, {"type": "null"}]},
        "all": {"allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"c": {}}}]},
    }, defs={"Base": {"type": "object", "properties": {"b": {}}}})
    reply = {"ok": True, "one": {"a": 1, "x": 1}, "all": {"b": 1, "c": 2, "y": None}}
    assert v.undocumented_fields("Crafted", reply, reply=True) == {"one.x": False, "all.y": True}


def _ref_chain(hops: int) -> BunqueueValidator:
    """``obj`` reaches the object schema that documents ``known`` through ``hops`` $refs."""
    defs: dict = {f"R{i}": {"$ref": f"#/$defs/R{i + 1}"} for i in range(1, hops)}
    defs[f"R{hops}"] = {"type": "object", "properties": {"known": {}}}
    return crafted({"obj": {"$ref": "#/$defs/R1"}}, defs=defs)


def test_undocumented_fields_follow_a_chain_of_at_most_16_refs():
    """A $ref is followed to its target, and the target's own $ref on, at most 16 times, so
    that a cycle of $refs ends; an object further away is not looked into."""
    reply = {"ok": True, "obj": {"known": 1, "zz": 1}}
    assert _ref_chain(1).undocumented_fields("Crafted", reply, reply=True) == {"obj.zz": False}
    assert _ref_chain(16).undocumented_fields("Crafted", reply, reply=True) == {"obj.zz": False}
    assert _ref_chain(17).undocumented_fields("Crafted", reply, reply=True) == {}
    cycle = crafted({"obj": {"$ref": "#/$defs/R1"}},
                    defs={"R1": {"$ref": "#/$defs/R2"}, "R2": {"$ref": "#/$defs/R1"}})
    assert cycle.undocumented_fields("Crafted", reply, reply=True) == {}


def test_null_optional_is_read_from_the_object_schema_that_lists_the_property():
    """Whether a null field is optional (BQ-ENV-7) is read from the ``required`` of the schema
    that holds its ``properties``: a $ref beside its own properties and required judges those
    by its own list (not its target's), the target's fields by the target, an allOf branch's
    by that branch. A null in a required field is the command's rule, and so is a null that
    breaks another keyword than ``type`` (an enum), optional or not."""
    null_rule = ERRORS["null_optional"].requirement
    own = RULES[0]
    v = crafted({
        "obj": {"$ref": "#/$defs/Base", "required": ["mine"],
                "properties": {"mine": {"type": "integer"}}},
        "all": {"allOf": [{"type": "object", "required": ["must"],
                           "properties": {"must": {"type": "integer"},
                                          "may": {"type": "integer"}}}]},
        "pick": {"enum": ["a", "b"]},
    }, defs={"Base": {"type": "object", "required": ["base"],
                      "properties": {"base": {"type": "integer"}, "opt": {"type": "integer"}}}},
        requirement=own)
    reply = {"ok": True, "obj": {"mine": None, "base": None, "opt": None},
             "all": {"must": None, "may": None}, "pick": None}
    cited = {x.path: (x.requirement, x.level) for x in v.reply_violations("Crafted", reply)}
    judged = {rid: (rid, PROFILE.requirements[rid].level) for rid in (own, null_rule)}
    assert cited == {"/obj/mine": judged[own], "/obj/base": judged[own],
                     "/obj/opt": judged[null_rule],
                     "/all/must": judged[own], "/all/may": judged[null_rule],
                     "/pick": judged[own]}
    assert v.reply_is_valid("Crafted", reply) is False


def test_a_violation_cites_the_nearest_rule_on_its_schema_path_else_on_its_instance_path():
    """The rule cited is the deepest x-requirement along the failing keyword's schema path
    (into allOf branches too); where that path states none (a definition without a rule), the
    deepest along the instance path's properties (a boolean schema there ends the walk);
    else the command's own rule."""
    outer, inner, branch, own = RULES[1:5]
    v = crafted({
        "outer": {"type": "object", "x-requirement": outer, "properties": {
            "inner": {"$ref": "#/$defs/Plain", "x-requirement": inner},
            "plain": {"$ref": "#/$defs/Plain"},
            "list": {"type": "array", "items": {"$ref": "#/$defs/Plain"}}}},
        "all": {"allOf": [{"type": "object", "properties": {
            "b": {"type": "integer", "x-requirement": branch}, "c": {"type": "integer"}}}]},
        "top": {"$ref": "#/$defs/Plain"},
        "free": True,
    }, defs={"Plain": {"type": "integer"}}, requirement=own, extra={"allOf": [
        {"properties": {"free": {"properties": {"y": {"type": "integer"}}}}}]})
    reply = {"ok": True, "outer": {"inner": "s", "plain": "s", "list": ["s"]},
             "all": {"b": "s", "c": "s"}, "top": "s", "free": {"y": "s"}}
    cited = {x.path: (x.requirement, x.level) for x in v.reply_violations("Crafted", reply)}
    expected = {"/outer/inner": inner, "/outer/plain": outer, "/outer/list/0": outer,
                "/all/b": branch, "/all/c": own, "/top": own, "/free/y": own}
    assert cited == {path: (rid, PROFILE.requirements[rid].level)
                     for path, rid in expected.items()}


def test_a_rule_the_profile_does_not_define_is_judged_at_must():
    rid = "QW-TEST-NOT-A-RULE"
    assert rid not in PROFILE.requirements
    v = crafted({"n": {"type": "integer"}}, required=("n",), requirement=rid)
    assert [(x.requirement, x.level, x.path) for x in v.reply_violations("Crafted", {"ok": True})
            ] == [(rid, "MUST", "")]


def _agree(v: BunqueueValidator, msg: dict) -> tuple[Violation, ...]:
    """The violations of a request, after checking that the fast path agrees with them."""
    violations = v.request_violations(msg)
    assert v.request_is_valid(msg) == (violations == ()), (msg, violations)
    return violations


SIZED = crafted({
    "a": {"x-maxJsonBytes": 30},
    "b": {"type": "array", "items": {"type": "object", "properties": {"d": {"x-maxJsonBytes": 30}}}},
    "n": {"x-maxJsonBytes": 23},
    "tiny": {"x-maxJsonBytes": 3},
    "any": {"description": "a required field whose schema accepts anything"},
    "ref": {"$ref": "#/$defs/Any"},
    "yes": True,
}, defs={"Any": {"description": "anything"}}, required=("a", "any", "ref", "yes"), request=True)


def test_the_fast_path_checks_every_sized_field_and_every_untyped_required_field():
    """Several x-maxJsonBytes fields (one in each item of a list) and required fields whose
    schema accepts anything (where ``undefined`` must count as absent, since the compiled
    schema does not look at the value): request_is_valid agrees with request_violations on
    each, and the verdicts are the documents' (a string of n control characters is 6n + 2
    bytes of JSON; the 24 characters of -2.2250738585072014e-308 do not fit 23 bytes; an
    absent field has no size, even under a limit smaller than null's 4 bytes)."""
    base = {"cmd": "Crafted", "a": "x" * 28, "any": None, "ref": 0, "yes": [],
            "b": [{"d": 1}, {}, {"d": "y" * 28}], "n": 1.5}
    assert _agree(SIZED, base) == ()
    assert _agree(SIZED, {**base, "a": "\x00" * 4}) == ()
    rid = SIZED._requests["Crafted"].default_requirement
    for change, path in (({"a": "x" * 29}, "/a"),
                         ({"a": "\x00" * 5}, "/a"),
                         ({"b": [{"d": 1}, {"d": "y" * 29}]}, "/b/1/d"),
                         ({"n": -2.2250738585072014e-308}, "/n"),
                         ({"tiny": 1234}, "/tiny")):
        violations = _agree(SIZED, {**base, **change})
        assert [(x.requirement, x.path) for x in violations] == [(rid, path)], change
    for name in ("any", "ref", "yes"):
        violations = _agree(SIZED, {**base, name: UNDEFINED})
        assert [(x.requirement, x.path) for x in violations] == [(rid, "")], name
        assert name in violations[0].message


def test_job_data_in_a_reply_is_held_to_the_same_size_limit(bq_minimal):
    """A reply carrying a job (GetJob's job, each of GetJobs' jobs) is held to the job data
    limit too, by the full verdict and the fast path alike."""
    job = bq_minimal("GetJob", reply=True)["job"]
    at_limit = {**job, "data": "a" * (JOB_DATA.max - 2)}
    over = {**job, "data": "a" * (JOB_DATA.max - 1)}
    assert VALIDATOR.reply_violations("GetJob", {"ok": True, "job": at_limit}) == ()
    assert VALIDATOR.reply_is_valid("GetJob", {"ok": True, "job": at_limit}) is True
    for cmd, reply, path in (("GetJob", {"ok": True, "job": over}, "/job/data"),
                             ("GetJobs", {"ok": True, "jobs": [at_limit, over]}, "/jobs/1/data")):
        violations = VALIDATOR.reply_violations(cmd, reply)
        assert [(v.requirement, v.path) for v in violations] == [(JOB_DATA.requirement, path)]
        assert VALIDATOR.reply_is_valid(cmd, reply) is False


def test_to_json_model_reads_tuples_as_arrays_and_non_finite_numbers_as_null():
    """What a JavaScript peer reads: tuples are arrays, binary of any buffer type is tagged,
    NaN and both infinities are null, and undefined members are dropped at every depth."""
    value = {"t": (1, UNDEFINED), "m": memoryview(b"\x01"), "b": bytearray(b"\x02"),
             "i": float("inf"), "j": float("-inf"), "f": 1.5, "s": "x", "z": 0,
             "d": {"u": UNDEFINED, "l": [{"u": UNDEFINED, "k": 1}]}}
    assert to_json_model(value) == {"t": [1, None], "m": {"$binary": "01"}, "b": {"$binary": "02"},
                                     "i": None, "j": None, "f": 1.5, "s": "x", "z": 0,
                                     "d": {"l": [{"k": 1}]}}


def test_a_request_with_two_size_rules_is_held_to_both():
    v = crafted({"a": {"x-maxJsonBytes": 10}, "b": {"x-maxJsonBytes": 10}}, request=True)
    assert _agree(v, {"cmd": "Crafted", "a": 1, "b": 2}) == ()
    assert [x.path for x in _agree(v, {"cmd": "Crafted", "a": 1, "b": "x" * 20})] == ["/b"]
    assert [x.path for x in _agree(v, {"cmd": "Crafted", "a": "x" * 20, "b": 2})] == ["/a"]


def _nest(keyword: str, levels: int, leaf: Mapping) -> Mapping:
    """``leaf`` under ``levels`` schemas nested by ``keyword`` (properties p, or items)."""
    node: Mapping = leaf
    for _ in range(levels):
        node = {"type": "object", "properties": {"p": node}} if keyword == "properties" else {
            "type": "array", "items": node}
    return node


def test_x_max_json_bytes_is_found_up_to_8_levels_deep_through_properties_items_and_refs():
    """The size rules of a request are found by a walk of its schema that counts each property,
    array item and $ref one level and stops below 8 (so that a recursive schema ends): a rule 8
    levels deep is checked, one 9 levels deep is not. A rule without an x-requirement of its
    own cites the command's."""
    rid = next(r for r in RULES if PROFILE.requirements[r].level == "SHOULD")
    limit = {"x-maxJsonBytes": 5}
    v = crafted({
        "p8": _nest("properties", 7, {**limit, "x-requirement": rid}),
        "p9": _nest("properties", 8, limit),
        "a8": _nest("items", 7, limit),
        "a9": _nest("items", 8, limit),
        "r8": {"$ref": "#/$defs/D1"},
        "r9": {"$ref": "#/$defs/E1"},
        "node": {"$ref": "#/$defs/Node"},
    }, defs={**{f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(1, 7)}, "D7": limit,
             **{f"E{i}": {"$ref": f"#/$defs/E{i + 1}"} for i in range(1, 8)}, "E8": limit,
             "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        request=True)
    assert v.request_size_checks("Crafted") == (
        (("p8",) + ("p",) * 7, 5, rid),
        (("a8",) + ("*",) * 7, 5, ""),
        (("r8",), 5, ""))
    own = MODEL.commands["Ping"].requirement
    deep: Any = "abcdef"  # 8 bytes of JSON, 7 levels below p8
    for _ in range(7):
        deep = {"p": deep}
    too_big = {"cmd": "Crafted", "p8": deep}
    assert [(x.requirement, x.level, x.path) for x in _agree(v, too_big)] == [
        (rid, "SHOULD", pointer(("p8",) + ("p",) * 7))]
    assert [(x.requirement, x.level, x.path)
            for x in _agree(v, {"cmd": "Crafted", "r8": "abcdef"})] == [
        (own, PROFILE.requirements[own].level, "/r8")]


def test_a_validator_is_built_for_a_schema_whose_required_field_is_a_cycle_of_refs():
    """The walks over a schema (which required fields accept anything, where the size rules
    are) follow a bounded number of $refs, so a cycle of $refs ends."""
    v = crafted({"loop": {"$ref": "#/$defs/L1"}},
                defs={"L1": {"$ref": "#/$defs/L2"}, "L2": {"$ref": "#/$defs/L1"}},
                required=("loop",), request=True)
    assert v.request_size_checks("Crafted") == ()
    assert v.missing_fields("Crafted", {"cmd": "Crafted", "loop": UNDEFINED}) == ["loop"]


def test_a_request_nested_deeper_than_the_schema_validator_walks_is_a_too_deep_violation():
    """A Python caller can hand the validator a value nested deeper than the decoder lets
    through; where jsonschema-rs gives up, the verdict is one too_deep violation (its rule,
    its level, the whole message), never an exception."""
    inner: Any = []
    for _ in range(LIMITS["max_nesting_depth"].value):  # with the map and tags: 2 levels over
        inner = [inner]
    msg = {"cmd": "PUSH", "queue": "q", "data": 1, "tags": inner}
    rid = ERRORS["too_deep"].requirement
    (v,) = VALIDATOR.request_violations(msg)
    assert (v.requirement, v.level, v.path) == (rid, PROFILE.requirements[rid].level, "")
    assert v.message.startswith("the request nests deeper than the validator walks (")
    assert VALIDATOR.request_is_valid(msg) is False


def test_a_null_optional_violation_does_not_end_the_verdict():
    null_rule = ERRORS["null_optional"].requirement
    prio = LIMITS["priority"]
    msg = {**with_value("PUSH", ("uniqueKey",), None), "priority": prio.max + 1, "jobId": None}
    assert sorted((v.requirement, v.path) for v in VALIDATOR.request_violations(msg)) == sorted([
        (null_rule, "/uniqueKey"), (prio.requirement, "/priority"), (null_rule, "/jobId")])


def test_an_error_reply_or_event_section_without_a_requirement_cites_none_at_must():
    """When the documents give the error reply or job_events no requirement of its own, a
    violation that finds no nearer rule cites none ("") at the default level, MUST."""
    error_reply = {k: v for k, v in MODEL.error_reply.items() if k != "x-requirement"}
    events = {k: v for k, v in EVENTS.items() if k != "requirement"}
    profile = dataclasses.replace(
        EVENTS_PROFILE, tree={**EVENTS_PROFILE.tree, "job_events": events},
        model=dataclasses.replace(EVENTS_PROFILE.model, error_reply=error_reply))
    v = BunqueueValidator(profile)
    assert [(x.requirement, x.level, x.path) for x in v.reply_violations("Ping", {"ok": False})
            ] == [("", "MUST", "")]
    assert [(x.requirement, x.level, x.path) for x in v.event_violations({"type": "event"})
            ] == [("", "MUST", "")]


def test_undocumented_fields_treat_what_no_ref_pointer_reaches_as_free_form():
    """$refs are followed as JSON pointers through member names (``#/$defs/Name``): an object
    typed by an anchor (``#obj``), by a pointer through an array member, by a boolean schema or
    by a $ref to one is free-form (nothing under it reported), and none of them is an error."""
    v = crafted({
        "anchor": {"$ref": "#obj"},
        "through": {"$ref": "#/$defs/Both/anyOf/0"},
        "yes": {"$ref": "#/$defs/Yes"},
        "bare": True,
        "known": {"$ref": "#/$defs/Obj"},
    }, defs={"Obj": {"$anchor": "obj", "type": "object", "properties": {"a": {}}},
             "Both": {"anyOf": [{"type": "object", "properties": {"a": {}}}]},
             "Yes": True})
    names = ("anchor", "through", "yes", "bare", "known")
    reply = {"ok": True, **{name: {"a": 1, "zz": 1} for name in names}}
    assert v.undocumented_fields("Crafted", reply, reply=True) == {"known.zz": False}
    assert v.reply_violations("Crafted", reply) == ()


def test_an_undefined_job_data_does_not_end_the_size_checks_of_the_batch():
    """In PUSHB an undefined data is absent (the schema reports it); the jobs after it are
    still measured."""
    over = "a" * (JOB_DATA.max - 1)
    msg = {"cmd": "PUSHB", "queue": "q", "jobs": [{"data": UNDEFINED}, {"data": over}]}
    violations = VALIDATOR.request_violations(msg)
    sized = [(v.requirement, v.level, v.path) for v in violations if v.path.endswith("/data")]
    assert sized == [(JOB_DATA.requirement, PROFILE.requirements[JOB_DATA.requirement].level,
                      "/jobs/1/data")]
    assert "/jobs/0" in {v.path for v in violations}
    assert VALIDATOR.request_is_valid(msg) is False


def test_a_validator_names_its_profile_and_spec_model():
    """Its users read the spec through it (bunqueue_typed builds its decoders from
    ``validator.spec``)."""
    assert VALIDATOR.profile is PROFILE and VALIDATOR.spec is MODEL
    assert EVENT_VALIDATOR.profile is EVENTS_PROFILE and EVENT_VALIDATOR.spec is EVENTS_PROFILE.model
