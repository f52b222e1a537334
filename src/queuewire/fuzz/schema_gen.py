"""Valid instances of the spec's request schemas: a small generator of the fuzzer's own.

The command schemas use a small subset of JSON Schema (2020-12): ``type`` (``object``,
``array``, ``string``, ``integer``, ``number``, ``boolean``, ``null``, or a list of them),
``properties``, ``required``, ``additionalProperties: false``, ``items``, ``minItems`` /
``maxItems``, ``minLength`` / ``maxLength``, ``pattern`` (one character class repeated,
``^[...]+$``), ``minimum`` / ``maximum``, ``const``, ``enum`` and local ``$ref`` into
``$defs``; the rest are annotations (``title``, ``description``, ``examples``, ``default``,
``$schema``, ``x-...``). An untyped node (``JobData``) takes any JSON value, never null at the
top (a null field is a violation of its own). :func:`from_schema` compiles a schema into a
:class:`~.gen.Gen` once; a keyword outside the subset raises :class:`UnsupportedSchema` at
compile time, so a spec that grows one fails loudly (the tests compile every command of every
profile and validate what comes out with the spec's own validator) rather than yielding
invalid "valid" requests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..spec.instances import resolve
from .gen import BOOL, NONE, Gen, fixed_dicts, floats, json_values, just, lists, one_of, pick
from .gen import text as text_gen
from .gen import values as int_gen

CONSTRAINTS = frozenset({"type", "properties", "required", "additionalProperties", "items",
                         "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum",
                         "maximum", "const", "enum", "$ref", "$defs"})
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
ANNOTATIONS = frozenset({"$schema", "title", "description", "examples", "default"})
FREE_TEXT_MAX = 16     # the longest generated string where the schema sets no maxLength
ITEMS_MAX = 4          # the most items where the schema sets no maxItems
LENGTH_CAP = 1024      # generated strings stay this short even where maxLength allows more


class UnsupportedSchema(ValueError):
    """A schema keyword or form outside the subset this generator knows."""


def from_schema(schema: Mapping[str, Any], safe: int) -> Gen:
    """A Gen of instances valid for ``schema``; integers and numbers within ``+-safe``."""
    return _Compiler(schema, safe).gen(schema)


@lru_cache(maxsize=64)
def pattern_alphabet(pattern: str) -> tuple[str, int]:
    """The characters of a ``^[...]+$`` / ``^[...]*$`` pattern (BMP, no surrogates) and the
    fewest it allows (1 for ``+``, 0 for ``*``)."""
    m = re.fullmatch(r"\^(\[(?:\\.|[^\]\\])+\])([+*])\$", pattern)
    if not m:
        raise UnsupportedSchema(f"pattern {pattern!r} is not one repeated character class")
    cls = re.compile(m.group(1))
    chars = "".join(chr(c) for c in range(0x10000)
                    if not 0xD800 <= c <= 0xDFFF and cls.fullmatch(chr(c)))
    if not chars:
        raise UnsupportedSchema(f"pattern {pattern!r} matches no character")
    return chars, 1 if m.group(2) == "+" else 0


class _Compiler:
    def __init__(self, root: Mapping[str, Any], safe: int):
        self.root = root
        self.safe = safe

    def gen(self, node: Any, top_null: bool = False) -> Gen:
        node = resolve(self.root, node)
        if not isinstance(node, Mapping):
            raise UnsupportedSchema(f"schema node {node!r} is not an object")
        unknown = sorted(k for k in node if k not in CONSTRAINTS and k not in ANNOTATIONS
                         and not k.startswith("x-"))
        if unknown:
            raise UnsupportedSchema(f"keywords {unknown} are not supported")
        if "const" in node:
            return just(node["const"])
        if "enum" in node:
            return pick(tuple(node["enum"]))
        kind = node.get("type")
        if isinstance(kind, list):
            return one_of(*(self.gen({**node, "type": k}) for k in kind))
        if kind is None:
            kind = "object" if "properties" in node else None
        if kind is None:
            return json_values(self.safe, top_null=top_null)
        if kind not in TYPES:
            raise UnsupportedSchema(f"type {kind!r} is not supported")
        return getattr(self, f"_{kind}")(node)

    def _object(self, node: Mapping[str, Any]) -> Gen:
        props = node.get("properties")
        extra = node.get("additionalProperties", True)
        if extra not in (True, False):
            raise UnsupportedSchema("additionalProperties other than true/false")
        props = props if props is not None else {}   # no properties named: none generated
        required = list(node.get("required", ()))
        req = {k: self.gen(props[k]) if k in props else json_values(self.safe, top_null=False)
               for k in required}
        opt = {k: self.gen(v) for k, v in props.items() if k not in req}
        return fixed_dicts(req, opt)

    def _array(self, node: Mapping[str, Any]) -> Gen:
        lo = int(node.get("minItems", 0))
        hi = int(node.get("maxItems", max(lo, ITEMS_MAX)))
        items = node.get("items", {})
        return lists(self.gen(items, top_null=True), lo, max(lo, hi))

    def _string(self, node: Mapping[str, Any]) -> Gen:
        lo = int(node.get("minLength", 0))
        alphabet = None
        if "pattern" in node:
            alphabet, least = pattern_alphabet(node["pattern"])
            lo = max(lo, least)
        hi = node.get("maxLength")
        hi = min(int(hi), LENGTH_CAP) if hi is not None else lo + FREE_TEXT_MAX
        if hi < lo:
            raise UnsupportedSchema(f"no string of {lo} to {hi} characters")
        return text_gen(hi, lo, alphabet)

    def _bounds(self, node: Mapping[str, Any]) -> tuple[int, int]:
        lo = max(node.get("minimum", -self.safe), -self.safe)
        hi = min(node.get("maximum", self.safe), self.safe)
        if lo > hi:
            raise UnsupportedSchema(f"no number in [{lo}, {hi}]")
        return lo, hi

    def _integer(self, node: Mapping[str, Any]) -> Gen:
        lo, hi = self._bounds(node)
        return int_gen(math.ceil(lo), math.floor(hi))

    def _number(self, node: Mapping[str, Any]) -> Gen:
        lo, hi = self._bounds(node)
        return one_of(int_gen(math.ceil(lo), math.floor(hi)), floats(float(lo), float(hi)))

    def _boolean(self, node: Mapping[str, Any]) -> Gen:
        return BOOL

    def _null(self, node: Mapping[str, Any]) -> Gen:
        return NONE
