"""Shared fixtures for the bunqueue tests: the loaded profile, a validator and a builder of
minimal valid messages. Everything comes from the spec; nothing here restates a field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from queuewire.codecs.validation import BunqueueValidator
from queuewire.spec import load_profile

BUNQUEUE = "bunqueue/v2"


def _resolve(node: Mapping, defs: Mapping) -> Mapping:
    """Follow local ``$ref``s (``#/$defs/Name``) to the schema they name."""
    seen = 0
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        assert ref.startswith("#/$defs/"), ref
        node = defs[ref[len("#/$defs/"):]]
        seen += 1
        assert seen < 32, "reference cycle"
    return node


def minimal_instance(schema: Mapping, defs: Mapping | None = None) -> Any:
    """The smallest value ``schema`` accepts, built from ``examples``, ``const``, ``enum`` or
    the type's natural minimum; objects carry only their required properties."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "examples" in schema:
        return schema["examples"][0]
    if "const" in schema:
        return schema["const"]
    if "$ref" in schema:
        return minimal_instance(_resolve(schema, defs), defs)
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return minimal_instance(schema[key][0], defs)
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ == "object":
        props = schema.get("properties") or {}
        return {name: minimal_instance(props.get(name, {}), defs)
                for name in schema.get("required") or ()}
    if typ == "array":
        n = schema.get("minItems", 0)
        return [minimal_instance(schema.get("items") or {}, defs) for _ in range(n)]
    if typ == "string":
        return "a" * max(1, schema.get("minLength", 0)) if "pattern" not in schema else "a"
    if typ in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and lo > 0:
            return lo
        if hi is not None and hi < 0:
            return hi
        return 0
    if typ == "boolean":
        return False
    if typ == "null":
        return None
    return {}  # no type: any JSON value (job data, results)


@pytest.fixture(scope="session")
def bq_profile():
    return load_profile(BUNQUEUE)


@pytest.fixture(scope="session")
def bq_validator(bq_profile):
    return BunqueueValidator(bq_profile)


@pytest.fixture(scope="session")
def bq_minimal(bq_profile):
    """``bq_minimal(cmd, reply=False)``: a minimal valid request (or success reply) of ``cmd``."""
    commands = bq_profile.model.commands

    def build(cmd: str, reply: bool = False) -> dict:
        schema = commands[cmd].response if reply else commands[cmd].request
        return minimal_instance(schema)

    return build
