"""Matching what a server sent against what a case expects: subset matching (``$any``,
``$type``, ``$gte``, ``$lte``, ``$absent``; see ``cases/README.md``) and spec error strings
as patterns. Pure functions on decoded values, shared by the step interpreters of both
protocols, the Python cases and the HTTP checks (:mod:`.httpapi`); nothing here does I/O."""

from __future__ import annotations

import re
from typing import Any

from ..codecs.validation import jsonable


def view(obj: Any) -> Any:
    """A JSON-able view of a value for checks and transcripts."""
    if obj is None:
        return None
    try:
        return jsonable(obj)
    except Exception:  # noqa: BLE001 - a display fallback, never a verdict
        return repr(obj)


TYPES = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, list),
    "map": lambda v: isinstance(v, dict),
    "bool": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "bytes": lambda v: isinstance(v, (bytes, bytearray)),
}
OPERATORS = {"$any", "$type", "$gte", "$lte", "$absent"}


def subset_mismatch(expected: Any, actual: Any, path: str = "") -> str | None:
    """Why ``actual`` does not contain ``expected`` (None: it does). See cases/README.md."""
    here = path or "reply"
    if isinstance(expected, dict) and expected and set(expected) <= OPERATORS:
        if expected.get("$any"):
            return None
        if "$type" in expected:
            types = expected["$type"] if isinstance(expected["$type"], list) else [expected["$type"]]
            if not any(TYPES.get(t, lambda v: False)(actual) for t in types):
                return f"{here} is {short(actual)}, not of type {'|'.join(types)}"
        num = isinstance(actual, (int, float)) and not isinstance(actual, bool)
        if "$gte" in expected and not (num and actual >= expected["$gte"]):
            return f"{here} is {short(actual)}, not >= {expected['$gte']}"
        if "$lte" in expected and not (num and actual <= expected["$lte"]):
            return f"{here} is {short(actual)}, not <= {expected['$lte']}"
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{here} is {short(actual)}, not a map"
        for k, v in expected.items():
            sub = f"{path}.{k}" if path else str(k)
            if isinstance(v, dict) and v.get("$absent"):
                if k in actual:
                    return f"{sub} is present ({short(actual[k])}) but must be absent"
                continue
            if k not in actual:
                return f"{sub} is missing"
            why = subset_mismatch(v, actual[k], sub)
            if why:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"{here} is {short(actual)}, not a list"
        if len(expected) != len(actual):
            return f"{here} has {len(actual)} items, not {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            why = subset_mismatch(e, a, f"{path}.{i}" if path else str(i))
            if why:
                return why
        return None
    if isinstance(expected, bool) or isinstance(actual, bool):
        same = type(expected) is type(actual) and expected == actual
    elif isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        same = expected == actual
    elif isinstance(expected, str) and isinstance(actual, (bytes, bytearray)):
        if expected.startswith("hex:"):
            same = re.sub(r"\s+", "", expected[4:]).lower() == bytes(actual).hex()
        else:
            same = expected.encode() == actual
    else:
        same = type(expected) is type(actual) and expected == actual
    return None if same else f"{here} is {short(actual)}, not {short(expected)}"


def short(v: Any, n: int = 80) -> str:
    text = repr(view(v)) if not isinstance(v, str) else repr(v)
    return text if len(text) <= n else text[:n - 3] + "..."


def error_pattern(message: str) -> re.Pattern[str]:
    """A spec error string as a regex: ``{placeholders}`` match anything, the rest verbatim."""
    parts = re.split(r"\{[A-Za-z_][A-Za-z0-9_]*\}", message)
    return re.compile("(?s)" + ".*".join(re.escape(p) for p in parts))
