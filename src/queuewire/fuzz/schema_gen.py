"""Valid instances of the spec's request and reply schemas: a generator of the fuzzer's own.

The command schemas use a small subset of JSON Schema (2020-12): ``type`` (``object``,
``array``, ``string``, ``integer``, ``number``, ``boolean``, ``null``, or a list of them),
``properties``, ``required``, ``additionalProperties`` (``true``, ``false`` or a schema: 0 to
4 more keys, named by ``propertyNames`` if given), ``propertyNames`` (a string schema),
``items``, ``minItems`` / ``maxItems``, ``minLength`` / ``maxLength``, ``pattern`` (anchored
``^...$``: literal characters and character classes, each with an optional ``?``, ``*``,
``+``, ``{n}`` or ``{n,m}``; with ``minLength`` / ``maxLength`` only one repeated class),
``minimum`` / ``maximum``, ``const``, ``enum``, ``anyOf`` (alone, beside annotations) and
local ``$ref`` into ``$defs``; the rest are annotations (``title``, ``description``,
``examples``, ``default``, ``$schema``, ``x-...``). An untyped node (``JobData``) takes any
JSON value, never null at the top (a null field is a violation of its own).
:func:`from_schema` compiles a schema into a :class:`~.gen.Gen` once; a keyword outside the
subset raises :class:`UnsupportedSchema` at compile time, so a spec that grows one fails
loudly (the tests compile every request and reply schema of every profile and validate what
comes out with the spec's own validator and the jsonschema library) rather than yielding
invalid "valid" messages. An open object (no ``additionalProperties``, or ``true``) gets no
undocumented keys unless the caller passes ``extra``, the schema of their values.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

from ..spec.instances import resolve
from .gen import BOOL, NONE, Gen, fixed_dicts, floats, json_values, just, lists, one_of, pick
from .gen import text as text_gen
from .gen import values as int_gen

CONSTRAINTS = frozenset({"type", "properties", "required", "additionalProperties",
                         "propertyNames", "items", "minItems", "maxItems", "minLength",
                         "maxLength", "pattern", "minimum", "maximum", "const", "enum", "anyOf",
                         "$ref", "$defs"})
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
ANNOTATIONS = frozenset({"$schema", "title", "description", "examples", "default"})
FREE_TEXT_MAX = 16     # the longest generated string where the schema sets no maxLength
ITEMS_MAX = 4          # the most items where the schema sets no maxItems
LENGTH_CAP = 1024      # generated strings stay this short even where maxLength allows more


class UnsupportedSchema(ValueError):
    """A schema keyword or form outside the subset this generator knows."""


def from_schema(schema: Mapping[str, Any], safe: int,
                extra: Mapping[str, Any] | None = None) -> Gen:
    """A Gen of instances valid for ``schema``; integers and numbers within ``+-safe``. With
    ``extra`` (a schema), open objects also get 0 to 4 undocumented keys of such values."""
    return _Compiler(schema, safe, extra).gen(schema)


_ATOM = re.compile(r"(\[(?:\\.|[^\]\\])+\]|\\[^A-Za-z0-9]|[^.^$*+?()\[\]{}|\\])"
                   r"(\?|\*|\+|\{\d+\}|\{\d+,\d+\})?")


@lru_cache(maxsize=64)
def pattern_parts(pattern: str) -> tuple[tuple[str, int, int | None], ...]:
    """The pieces of an anchored ``^...$`` pattern: per atom its characters (BMP, no
    surrogates), the fewest and the most repetitions (None: unbounded)."""
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")):
        raise UnsupportedSchema(f"pattern {pattern!r} is not anchored ^...$")
    body, pos, parts = pattern[1:-1], 0, []
    while pos < len(body):
        m = _ATOM.match(body, pos)
        if not m:
            raise UnsupportedSchema(f"pattern {pattern!r}: {body[pos:]!r} is not supported")
        atom, quant = m.group(1), m.group(2) or "{1}"
        lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(quant, (None, None))
        if lo is None:
            bounds = [int(x) for x in quant[1:-1].split(",")]
            lo, hi = bounds[0], bounds[-1]
        parts.append((_chars(atom, pattern), lo, hi))
        pos = m.end()
    return tuple(parts)


@lru_cache(maxsize=64)
def _chars(atom: str, pattern: str) -> str:
    cls = re.compile(atom)
    chars = "".join(chr(c) for c in range(0x10000)
                    if not 0xD800 <= c <= 0xDFFF and cls.fullmatch(chr(c)))
    if not chars:
        raise UnsupportedSchema(f"pattern {pattern!r} matches no character")
    return chars


@lru_cache(maxsize=64)
def pattern_alphabet(pattern: str) -> tuple[str, int]:
    """The characters of a ``^[...]+$`` / ``^[...]*$`` pattern (BMP, no surrogates) and the
    fewest it allows (1 for ``+``, 0 for ``*``)."""
    m = re.fullmatch(r"\^(\[(?:\\.|[^\]\\])+\])([+*])\$", pattern)
    if not m:
        raise UnsupportedSchema(f"pattern {pattern!r} is not one repeated character class")
    return _chars(m.group(1), pattern), 1 if m.group(2) == "+" else 0


def concat(parts: tuple[Gen, ...]) -> Gen:
    """Strings: one drawn from each of ``parts``, joined."""
    samplers = tuple(g.sample for g in parts)
    return Gen(lambda r: "".join(s(r) for s in samplers),
               lambda: st.tuples(*(g.strategy for g in parts)).map("".join))


def with_extra_keys(named: Gen, keys: Gen, values: Gen, taken: frozenset[str]) -> Gen:
    """The maps of ``named`` with 0 to ``ITEMS_MAX`` more keys of ``keys`` (none of ``taken``),
    each with a value of ``values``."""
    key, value, base = keys.sample, values.sample, named.sample

    def sample(r: random.Random) -> dict:
        out = base(r)
        for _ in range(r.randint(0, ITEMS_MAX)):
            k = key(r)
            if k not in taken and k not in out:
                out[k] = value(r)
        return out

    def build() -> st.SearchStrategy:
        more = st.dictionaries(keys.strategy.filter(lambda k: k not in taken), values.strategy,
                               max_size=ITEMS_MAX)
        return st.tuples(more, named.strategy).map(lambda pair: {**pair[0], **pair[1]})
    return Gen(sample, build)


def _name_ok(names: Mapping[str, Any], key: str) -> bool:
    """Whether property name ``key`` meets the string schema ``names`` (its length and
    pattern; other string keywords are refused when the schema is compiled)."""
    return (int(names.get("minLength", 0)) <= len(key) <= int(names.get("maxLength", len(key)))
            and ("pattern" not in names or re.search(names["pattern"], key) is not None)
            and ("const" not in names or names["const"] == key)
            and ("enum" not in names or key in names["enum"]))


class _Compiler:
    def __init__(self, root: Mapping[str, Any], safe: int, extra: Mapping[str, Any] | None):
        self.root = root
        self.safe = safe
        self.extra = extra
        self._extra: Gen | None = None

    def gen(self, node: Any, top_null: bool = False) -> Gen:
        node = resolve(self.root, node)
        if not isinstance(node, Mapping):
            raise UnsupportedSchema(f"schema node {node!r} is not an object")
        unknown = sorted(k for k in node if k not in CONSTRAINTS and k not in ANNOTATIONS
                         and not k.startswith("x-"))
        if unknown:
            raise UnsupportedSchema(f"keywords {unknown} are not supported")
        if "anyOf" in node:
            beside = sorted(k for k in node if k in CONSTRAINTS and k not in ("anyOf", "$defs"))
            if beside or not node["anyOf"]:
                raise UnsupportedSchema(f"anyOf beside {beside} (or empty)")
            return one_of(*(self.gen(branch, top_null) for branch in node["anyOf"]))
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
        props = dict(props) if props is not None else {}   # none named: none generated
        required = list(node.get("required", ()))
        names = resolve(self.root, node.get("propertyNames", {}))
        if not isinstance(names, Mapping) or names.get("type", "string") != "string":
            raise UnsupportedSchema("propertyNames other than a string schema")
        for key in [*props, *required]:   # a name propertyNames refuses cannot appear
            if not _name_ok(names, key):
                if key in required:
                    raise UnsupportedSchema(f"required {key!r} is refused by propertyNames")
                props.pop(key, None)
        short = {} if "pattern" in names else {"maxLength": 8}
        keys = self.gen({**short, **names, "type": "string"})   # refuses what it cannot check
        req = {k: self.gen(props[k]) if k in props else json_values(self.safe, top_null=False)
               for k in required}
        opt = {k: self.gen(v) for k, v in props.items() if k not in req}
        named = fixed_dicts(req, opt)
        extra = node.get("additionalProperties", True)
        if extra is False or extra is True and self.extra is None:
            return named
        if extra is True:   # the caller's undocumented keys: their values have none of their own
            if self._extra is None:
                assert self.extra is not None  # returned above when None
                self._extra = _Compiler(self.extra, self.safe, None).gen(self.extra)
            values = self._extra
        else:
            values = self.gen(extra)
        return with_extra_keys(named, keys, values, frozenset(props))

    def _array(self, node: Mapping[str, Any]) -> Gen:
        lo = int(node.get("minItems", 0))
        hi = int(node.get("maxItems", max(lo, ITEMS_MAX)))
        items = node.get("items", {})
        return lists(self.gen(items, top_null=True), lo, max(lo, hi))

    def _string(self, node: Mapping[str, Any]) -> Gen:
        lo = int(node.get("minLength", 0))
        alphabet = None
        if "pattern" in node:
            parts = pattern_parts(node["pattern"])
            if not ("minLength" in node or "maxLength" in node
                    or len(parts) == 1 and parts[0][2] is None):
                return concat(tuple(text_gen(hi if hi is not None else least + FREE_TEXT_MAX,
                                             least, chars) for chars, least, hi in parts))
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
