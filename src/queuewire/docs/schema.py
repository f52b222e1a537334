"""JSON Schema fields as reference rows: every property of a command's request or reply
(nested objects and array items included, as ``jobs[].name``) with its type, limits,
default, description and requirement, ``$ref`` definitions resolved."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

REF = "#/$defs/"
LIMIT_KEYS = (("minLength", "min length"), ("maxLength", "max length"), ("minimum", "≥"),
              ("maximum", "≤"), ("exclusiveMinimum", ">"), ("exclusiveMaximum", "<"),
              ("minItems", "min items"), ("maxItems", "max items"),
              ("x-maxJsonBytes", "max JSON bytes"), ("pattern", "pattern"),
              ("format", "format"))


@dataclass(frozen=True)
class FieldRow:
    path: str
    type: str
    required: bool
    limits: str
    default: str
    doc: str
    requirements: tuple[str, ...]


def resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[dict, str | None]:
    """The property merged over the definition it references (its own keys win)."""
    ref = prop.get("$ref")
    if not isinstance(ref, str) or not ref.startswith(REF):
        return dict(prop), None
    name = ref[len(REF):]
    base, _ = resolve(defs.get(name, {}), defs)
    base.update({k: v for k, v in prop.items() if k != "$ref"})
    return base, name


def _type(prop: Mapping[str, Any], defname: str | None) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        items = prop.get("items") or {}
        inner = items.get("type") or (items.get("$ref", "").rsplit("/", 1)[-1]) or "any"
        kind = f"array of {inner}"
    if not kind:
        if "const" in prop:
            kind = type(prop["const"]).__name__.replace("str", "string").replace("bool", "boolean")
        elif "anyOf" in prop or "oneOf" in prop:
            alts = prop.get("anyOf") or prop["oneOf"]  # one of the two is there
            kind = " or ".join(str(a.get("type") or a.get("$ref", "?").rsplit("/", 1)[-1])
                               for a in alts)
        else:
            kind = "any"
    return f"{defname} ({kind})" if defname else str(kind)


def _limits(prop: Mapping[str, Any]) -> str:
    parts = []
    if "const" in prop:
        parts.append(f"= {json.dumps(prop['const'])}")
    if "enum" in prop:
        parts.append("one of " + ", ".join(json.dumps(v) for v in prop["enum"]))
    for key, name in LIMIT_KEYS:
        if key in prop and prop[key] is not None:
            parts.append(f"{name} {prop[key]}")
    items = prop.get("items")
    if isinstance(items, dict) and "enum" in items:
        parts.append("items one of " + ", ".join(json.dumps(v) for v in items["enum"]))
    return "; ".join(parts)


def _requirements(prop: Mapping[str, Any]) -> tuple[str, ...]:
    ids = [prop.get("x-requirement")]
    ids += list((prop.get("x-keywordRequirements") or {}).values())
    return tuple(dict.fromkeys(i for i in ids if i))


def fields(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None,
           prefix: str = "", depth: int = 0) -> Iterator[FieldRow]:
    """Every documented property of ``schema``, depth first."""
    defs = defs if defs is not None else (schema.get("$defs") or {})
    required = set(schema.get("required") or ())
    for name, raw in (schema.get("properties") or {}).items():
        prop, defname = resolve(raw, defs)
        path = prefix + name
        default = json.dumps(prop["default"]) if "default" in prop else ""
        yield FieldRow(path, _type(prop, defname), name in required, _limits(prop), default,
                       str(prop.get("description", "")), _requirements(prop))
        if depth >= 4:
            continue
        if prop.get("properties"):
            yield from fields(prop, defs, path + ".", depth + 1)
        items = prop.get("items")
        if isinstance(items, dict):
            item, _ = resolve(items, defs)
            if item.get("properties"):
                yield from fields(item, defs, path + "[].", depth + 1)


def all_requirements(schema: Any) -> list[str]:
    """Every requirement id a schema cites (``x-requirement``, ``x-keywordRequirements``)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            out.extend(_requirements(node))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema)
    return list(dict.fromkeys(out))
