"""The fuzzer's own generators (queuewire.fuzz.gen, .schema_gen): valid requests from every
command schema of every profile, seeded or under hypothesis; a keyword outside the subset is
refused when the schema is compiled; a case depends on ``(seed, index)`` only (the same bytes
with any hypothesis version); and the package uses hypothesis through its public API only."""

from __future__ import annotations

import hashlib
import pathlib
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuewire.codecs.validation import BunqueueValidator
from queuewire.fuzz import gen
from queuewire.fuzz.schema_gen import UnsupportedSchema, from_schema, pattern_alphabet
from queuewire.fuzz.strategies import bunqueue_strategies, case_strategy, make_case
from queuewire.spec import load_profile, profile_names

PROFILES = profile_names("bunqueue")
SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "queuewire"


def _violations(profile: str, msg: dict) -> list:
    return list(_validator(profile).request_violations({**msg, "reqId": "r"}))


_VALIDATORS: dict[str, BunqueueValidator] = {}


def _validator(profile: str) -> BunqueueValidator:
    if profile not in _VALIDATORS:
        _VALIDATORS[profile] = BunqueueValidator(load_profile(profile))
    return _VALIDATORS[profile]


@pytest.mark.parametrize("profile", PROFILES)
def test_seeded_requests_are_valid_for_every_command(profile):
    bq = bunqueue_strategies(profile)
    for cmd in bq.commands:
        request = bq.request(cmd)
        for i in range(150):
            msg = gen.SeededDraw(f"valid:{cmd}", i)(request)
            assert msg["cmd"] == cmd
            assert _violations(profile, msg) == [], (cmd, msg)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_hypothesis_twins_are_valid_too(profile):
    bq = bunqueue_strategies(profile)

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(bq.commands).flatmap(lambda c: bq.request(c).strategy))
    def check(msg):
        assert _violations(profile, msg) == [], msg
    check()


def test_the_corpus_reaches_every_command_bound_and_optional_field():
    bq = bunqueue_strategies("bunqueue/v2")
    msgs = [bq.corpus_message("reach", j) for j in range(bq.corpus_size)]
    assert {m["cmd"] for m in msgs} == set(bq.commands)
    names = [m["queue"] for m in msgs if isinstance(m.get("queue"), str)]
    assert max(map(len, names)) == 256 and min(map(len, names)) == 1
    pushes = [gen.SeededDraw("push", i)(bq.request("PUSH")) for i in range(600)]
    assert any("lifo" in m for m in pushes) and any("lifo" not in m for m in pushes)
    prios = {m.get("priority") for m in pushes}
    assert {-1000000, 1000000} <= prios      # integers reach their bounds
    data = [m["data"] for m in pushes]
    assert {type(d) for d in data} >= {dict, list, str, int, bool}
    assert None not in data                  # a null field is a violation of its own


def test_the_spec_pattern_becomes_its_alphabet():
    chars, least = pattern_alphabet(r"^[a-zA-Z0-9_\-.:]+$")
    assert least == 1
    assert set(chars) == set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")
    assert pattern_alphabet("^[ab]*$") == ("ab", 0)


@pytest.mark.parametrize("schema", [
    {"type": "string", "format": "email"},
    {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": "string", "pattern": "^a(b|c)$"},
    {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}},
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}}},
    {"type": "object", "propertyNames": {"type": "integer"}, "additionalProperties": True},
    {"type": "string", "anyOf": [{"minLength": 1}, {"maxLength": 0}]},
    {"anyOf": []},
    {"type": "string", "pattern": "^a+b$", "maxLength": 4},
    {"type": "string", "pattern": "a+"},
    {"type": "object", "required": ["a"], "propertyNames": {"pattern": "^b"}},
    {"type": "tuple"},
])
def test_a_keyword_outside_the_subset_is_refused_at_compile_time(schema):
    with pytest.raises(UnsupportedSchema):
        from_schema(schema, 2**53 - 1, extra={})


def _replies(profile: str) -> list[tuple[str, str, dict]]:
    model = load_profile(profile).model
    return [(name, side, getattr(command, side)) for name, command in sorted(model.commands.items())
            for side in ("response", "request")]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_reply_and_request_schema_yields_valid_values_seeded(profile):
    """Reply schemas too (anyOf, additionalProperties as a schema, propertyNames, a pattern of
    several pieces, type lists with null): what comes out validates with the jsonschema
    library, with and without undocumented keys in the open objects."""
    for name, side, schema in _replies(profile):
        validator = jsonschema.Draft202012Validator(schema)
        for extra in (None, {"anyOf": [{}, {"type": "null"}]}):
            generator = from_schema(schema, 2**53 - 1, extra=extra)
            draw = gen.SeededDraw(f"{name}:{side}", extra is None)
            for _ in range(40):
                value = draw(generator)
                assert list(validator.iter_errors(value)) == [], (name, side, value)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_reply_and_request_schema_yields_valid_values_under_given(profile):
    schemas = _replies(profile)

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        name, side, schema = data.draw(st.sampled_from(schemas))
        value = data.draw(from_schema(schema, 2**53 - 1, extra={}).strategy)
        assert list(jsonschema.Draft202012Validator(schema).iter_errors(value)) == [], value
    check()


SCHEMAS = {
    "additionalProperties as a schema, named by propertyNames": {
        "type": "object", "required": ["7"], "propertyNames": {"pattern": "^-?[0-9]+$"},
        "properties": {"7": {"type": "integer"}, "total": {"type": "integer"}},
        "additionalProperties": {"type": "integer", "minimum": 0}},
    "anyOf of a $ref and null": {
        "$defs": {"J": {"type": "object", "properties": {"id": {"type": "string"}},
                        "required": ["id"], "additionalProperties": False}},
        "type": "object", "properties": {"job": {"anyOf": [{"$ref": "#/$defs/J"},
                                                           {"type": "null"}]}},
        "required": ["job"]},
    "type lists with null": {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": ["number", "null"]}, "b": {"type": ["array", "null"], "items": {}}}},
    "a pattern of several pieces": {"type": "string", "pattern": r"^v-?[0-9]{1,3}\.[a-c]*x?$"},
    "an untyped additionalProperties": {"type": "object", "additionalProperties": {}},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_supported_keyword_yields_valid_values_both_ways(name):
    schema = SCHEMAS[name]
    validator = jsonschema.Draft202012Validator(schema)
    generator = from_schema(schema, 2**53 - 1)
    draw = gen.SeededDraw(name, 0)
    seeded = [draw(generator) for _ in range(300)]
    for value in seeded:
        assert list(validator.iter_errors(value)) == [], value
    seen = []

    @settings(max_examples=100, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(generator.strategy)
    def check(value):
        seen.append(value)
        assert list(validator.iter_errors(value)) == [], value
    check()
    if "propertyNames" in schema:   # the undocumented keys come, and only valid names
        assert any(len(v) > 1 for v in seeded) and any(len(v) > 1 for v in seen)
        assert not any("total" in v for v in seeded + seen)  # a name it refuses never comes
    if "anyOf" in name:             # both branches come
        assert {v["job"] is None for v in seeded} == {True, False}
    if "several" in name:
        assert any("-" in v for v in seeded) and any(v.endswith("x") for v in seeded)


def test_open_objects_get_undocumented_keys_only_when_asked():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    draw = gen.SeededDraw("open", 0)
    closed = [draw(from_schema(schema, 100)) for _ in range(100)]
    assert all(set(v) == {"a"} for v in closed)
    opened = [draw(from_schema(schema, 100, extra={"type": "boolean"})) for _ in range(100)]
    assert any(len(v) > 1 for v in opened)
    assert all(isinstance(x, bool) for v in opened for k, x in v.items() if k != "a")
    shut = {**schema, "additionalProperties": False}
    assert all(set(draw(from_schema(shut, 100, extra={})) ) == {"a"} for _ in range(50))


def test_values_lean_to_the_bounds():
    draw = gen.SeededDraw("bounds", 0)
    seen = {draw(gen.values(-5, 10**12)) for _ in range(400)}
    assert {-5, -4, 0, 1, 10**12 - 1, 10**12} <= seen
    assert any(v > 10**6 for v in seen)


def test_free_text_is_valid_unicode_with_controls_and_astral_code_points():
    draw = gen.SeededDraw("text", 0)
    texts = [draw(gen.text(12)) for _ in range(2000)]
    joined = "".join(texts)
    joined.encode("utf-8")                      # no surrogates
    assert "\x00" in joined or any(ord(c) < 0x20 for c in joined)
    assert any(ord(c) > 0xFFFF for c in joined) and any(len(t) == 12 for t in texts)


# sha256 of the streams of cases 0..39 of seed 1: the campaigns' generator depends on
# (seed, index) and queuewire's code only, not on hypothesis' version (run these tests with
# another hypothesis: the digests hold). A deliberate change to the case mix updates them.
GOLDEN = {
    "bunqueue": "f0621f202f47a4b9f25b0aff2637ebadf949141de3f79c0d2548409fb68a7c17",
    "quicx": "5aa5cb9db09ce5f79f04d8cb55de66856a4af41564d2a50484af4e3b2c0d8975",  # + MSG_STATS
}


@pytest.mark.parametrize("protocol, profile", [("bunqueue", "bunqueue/v2"), ("quicx", "quicx/v1")])
def test_cases_are_the_same_bytes_whatever_hypothesis_is_installed(protocol, profile):
    digest = hashlib.sha256()
    for i in range(40):
        case = make_case(protocol, profile, 1, i)
        digest.update(case.stream + repr((case.splits, case.pauses, case.conns)).encode())
    assert digest.hexdigest() == GOLDEN[protocol]


def test_case_strategies_run_under_given():
    seen = []

    @settings(max_examples=20, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case_strategy("bunqueue", "bunqueue/v2", 0), case_strategy("quicx", "quicx/v1", 0))
    def check(bq_case, qx_case):
        seen.append((bq_case.protocol, qx_case.protocol))
        assert bq_case.frames and qx_case.frames
    check()
    assert seen and set(seen) == {("bunqueue", "quicx")}


def test_no_hypothesis_internals_and_no_hypothesis_jsonschema_in_the_package():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if re.search(r"^\s*(from|import)\s+(hypothesis\.internal|hypothesis_jsonschema)\b", text,
                     re.M):
            offenders.append(str(path.relative_to(SRC)))
        for m in re.finditer(r"^\s*from\s+hypothesis(\.\w+)*\s+import\s+\(?([^)\n]+)", text, re.M):
            if re.search(r"\b(ConjectureData|BuildContext|StopTest)\b", m.group(2)):
                offenders.append(str(path.relative_to(SRC)))
    assert offenders == []
