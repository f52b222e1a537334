"""Minimal valid instances of the spec's JSON Schemas, deterministically.

Vectors, conformance cases and examples need "the smallest valid PUSH": the required fields
only, each taken from the schema itself (``examples[0]``, then ``const``, ``default``,
``enum[0]``), or, failing those, the simplest value of its type that meets its bounds. The
result is deterministic, so generated files are stable across runs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def resolve(schema: Mapping[str, Any], node: Any) -> Any:
    """Follow local ``$ref`` chains of ``node`` inside ``schema``'s ``$defs``."""
    seen = 0
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and seen < 32:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = (schema.get("$defs") or {}).get(name, {})
        merged = dict(target)
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        node = merged
        seen += 1
    return node


def minimal(schema: Mapping[str, Any], node: Any = None) -> Any:
    """The smallest valid value for ``node`` (the whole schema by default)."""
    node = resolve(schema, schema if node is None else node)
    if not isinstance(node, Mapping):
        return None
    # copies: a caller may fill in the instance, and must not edit the spec through it
    if node.get("examples"):
        return copy.deepcopy(node["examples"][0])
    if "const" in node:
        return copy.deepcopy(node["const"])
    if "default" in node:
        return copy.deepcopy(node["default"])
    if node.get("enum"):
        return copy.deepcopy(node["enum"][0])
    for combo in ("oneOf", "anyOf", "allOf"):
        if node.get(combo):
            return minimal(schema, node[combo][0])
    types = node.get("type")
    kind = types[0] if isinstance(types, list) else types
    if kind is None and "properties" in node:
        kind = "object"
    if kind == "object":
        props = node.get("properties") or {}
        return {k: minimal(schema, props.get(k, {})) for k in node.get("required", [])}
    if kind == "array":
        count = int(node.get("minItems", 0))
        return [minimal(schema, node.get("items", {})) for _ in range(count)]
    if kind == "string":
        return "a" * max(1, int(node.get("minLength", 1)))
    if kind in ("integer", "number"):
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and low > 0:
            return low
        if high is not None and high < 0:
            return high
        return 0
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "x"  # an untyped ("any") field: a small JSON value
