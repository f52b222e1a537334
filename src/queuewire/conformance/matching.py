"""Matching what a server sent against what a case expects: subset matching (``$any``,
``$type``, ``$gte``, ``$lte``, ``$absent``; see ``cases/README.md``) and spec error strings
as patterns. Pure functions on decoded values, shared by the step interpreters of both
protocols, the Python cases and the HTTP checks (:mod:`.httpapi`); nothing here does I/O."""

from __future__ import annotations

import json
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
    """``v`` in one line of at most about ``n`` characters (:func:`show`): a long string as its
    start and true size, ``undefined`` as itself."""
    return show(v if isinstance(v, str) else view(v), width=n)


# -- values as people read them -------------------------------------------------------------
# wire.cap_view's marker: the first characters, then the true length (and UTF-8 size when the
# string is not ASCII)
_CAPPED = re.compile(r"(?s)(.*)…\[(\d+) characters(?:, (\d+) bytes)?, shortened\]")
# bunqueue_logic's shortening: 32 characters and the length of what it shortened, which is a
# cap_view marker (not the value) when longer than the wire's VIEW_TEXT_MAX
_LOSSY = re.compile(r"(?s)(.{32})\.\.\. \((\d+) characters\)")
_WIRE_TEXT_MAX = 1024  # wire.VIEW_TEXT_MAX (this module sits below the wire: not imported)


def is_undefined(value: Any) -> bool:
    """Whether ``value`` is how a decoded view writes MessagePack's ``undefined`` (ext type 0,
    JavaScript's ``undefined``): ``{"$undefined": true}``, the tag of
    :func:`~queuewire.codecs.validation.jsonable`. Reports write ``undefined``; the JSON report
    keeps the tag."""
    return isinstance(value, dict) and len(value) == 1 and value.get("$undefined") is True


def text_size(text: str) -> tuple[str, int, int | None, bool]:
    """A string of a decoded view as ``(what is shown of it, its length in characters, its
    UTF-8 size in bytes or None when unknown, whether the length is exact)``: the true size of
    a string a view shortened (``wire.cap_view``'s marker), and a lower bound where a second
    shortening lost it (``exact`` False)."""
    m = _CAPPED.fullmatch(text)
    if m:
        head, n = m.group(1), int(m.group(2))
        nbytes = int(m.group(3)) if m.group(3) else (n if head.isascii() else None)
        return head, n, nbytes, True
    m = _LOSSY.fullmatch(text)
    if m:
        head, n = m.group(1), int(m.group(2))
        if n > _WIRE_TEXT_MAX:  # the length of a capped view: the value was longer still
            return head, _WIRE_TEXT_MAX, None, False
        return head, n, None, True
    return text, len(text), len(text.encode("utf-8", "surrogatepass")), True


def size_text(nbytes: int) -> str:
    """``10 MiB``, ``1.5 KiB``, ``700 B``."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{nbytes} B" if unit == "B" else f"{size:.1f}".removesuffix(".0") + f" {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def sized(text: str, *, head: int = 24, long: int = 64, json_style: bool = False) -> str:
    """A string quoted, or, when longer than ``long`` characters or shortened by a view, its
    first ``head`` characters and its true size: ``'aaaa…' (10,485,760 characters, 10 MiB)``."""
    shown, n, nbytes, exact = text_size(text)
    quote = (lambda t: json.dumps(t, ensure_ascii=False)) if json_style else repr
    if exact and shown == text and n <= long:
        return quote(text)
    q = quote(shown[:head])
    what = f"{n:,} characters" if exact else f"more than {n:,} characters"
    if nbytes is not None and nbytes >= 1024:
        what += f", {size_text(nbytes)}"
    return f"{q[:-1]}…{q[-1]} ({what})"


def show(value: Any, width: int | None = None, *, head: int = 24, long: int = 64,
         json_style: bool = False) -> str:
    """A decoded view on one line, as Python writes it (``json_style``: as JSON does), except
    that ``undefined`` is ``undefined`` and long strings are their start and true size
    (:func:`sized`); cut at ``width`` characters when given."""
    def one(v: Any) -> str:
        if isinstance(v, str):
            return sized(v, head=head, long=long, json_style=json_style)
        if is_undefined(v):
            return "undefined"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{one(k)}: {one(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(one(x) for x in v) + "]"
        return json.dumps(v, default=str) if json_style else repr(v)

    text = one(value)
    if width is not None and len(text) > width:
        return text[:max(width - 3, 1)] + "..."
    return text


def probed_field(case: Any, request: Any) -> tuple[str, Any] | None:
    """The field a generated limit case probes and its value in ``request``: such a case is
    tagged ``limit`` and its id ends in its command and the field's path (``bunqueue.limit.
    job_data_bytes.PUSHB.jobs.item.data``: ``jobs/*/data`` of PUSHB, ``item`` for each list
    item). ``("jobs[0].data", value)``, or None (not a limit case, or the request lacks it)."""
    if "limit" not in (getattr(case, "tags", None) or ()) or not getattr(case, "command", None):
        return None
    parts = str(case.id).split(".")
    if case.command not in parts:
        return None
    path = parts[len(parts) - parts[::-1].index(case.command):]
    node, shown = request, ""
    for part in path:
        if part == "item" and isinstance(node, list) and node:
            node, shown = node[0], f"{shown}[0]"
        elif isinstance(node, dict) and part in node:
            node, shown = node[part], f"{shown}.{part}" if shown else part
        else:
            return None
    return (shown, node) if shown else None


