"""Validation of decoded bunqueue messages against the spec's schemas, with cited verdicts.

Each command's request and reply schema is compiled once by jsonschema-rs (a compiled
validator; the interpreted ``jsonschema`` package is only used by ``spec lint``). The per-
message path is one dict lookup and one ``is_valid`` call. Only a message that fails it, or
that holds values JSON Schema cannot see (JavaScript ``undefined``, timestamps, binary, non-
string map keys), takes the slow path: the message is mapped to its JSON model the way the
reference implementation would read it (``undefined`` members dropped, keys as their
JavaScript strings) and every error is turned into a ``Violation`` that names the nearest
``x-requirement`` on its schema path, or the command's own requirement. ``x-maxJsonBytes``
(job data size) is checked here too, since JSON Schema cannot express it.
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, cast

import jsonschema_rs
import msgspec

from ..spec import Profile
from ..spec._load import walk
from .bunqueue import UNDEFINED, bunqueue_profile
from .errors import MessageError, Violation


def _refuse(obj: Any) -> Any:
    raise TypeError(f"not JSON: {type(obj).__name__}")


_json_encode = msgspec.json.Encoder(enc_hook=_refuse).encode
MESSAGE_CHARS = 240  # violation messages quote the offending value; keep them readable


def _short(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 3] + "..."


def js_number(x: float) -> str:
    """ECMA-262 Number::toString(x): what ``String(x)`` gives in JavaScript."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_number(-x)
    sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()  # shortest round-trip digits
    s = "".join(map(str, digits))
    k = len(s)
    n = cast(int, exp) + k  # x = 0.s * 10^n (an int exponent: x is finite)
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    mantissa = s[0] + ("." + s[1:] if k > 1 else "")
    return f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def js_key(key: Any) -> str:
    """A map key as JavaScript's ``String(key)`` gives it (msgpackr's mapsAsObjects)."""
    if type(key) is str:
        return key
    if key is None:
        return "null"
    if key is True or key is False:
        return "true" if key else "false"
    if isinstance(key, float):
        return js_number(key)
    if isinstance(key, tuple):
        return ",".join("" if k is None or k is UNDEFINED else js_key(k) for k in key)
    if isinstance(key, bytes):
        return ",".join(str(b) for b in key)
    return str(key)


def _js_walk(obj: Any, scalar: Callable[[Any], Any], drop_undefined: bool) -> Any:
    """Rebuild a decoded value as a JavaScript peer would see its containers: keys as their
    ``String(key)``, members that are ``undefined`` dropped when ``drop_undefined`` (as
    JSON.stringify does), every other leaf passed through ``scalar``.

    One Python frame per nesting level (no comprehensions), so any value the decoder accepts
    (at most ``max_nesting_depth`` levels) converts without reaching the recursion limit.
    """
    kind = type(obj)
    if kind is dict:
        out = {}
        for k, v in obj.items():
            if not (drop_undefined and v is UNDEFINED):
                out[js_key(k)] = _js_walk(v, scalar, drop_undefined)
        return out
    if kind is list or kind is tuple:
        items = []
        for v in obj:
            items.append(_js_walk(v, scalar, drop_undefined))
        return items
    return scalar(obj)


def _tagged(obj: Any) -> Any:
    """Binary and timestamps as tagged maps (JSON has neither)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"$binary": bytes(obj).hex()}
    if isinstance(obj, _dt.datetime):
        return {"$timestamp": obj.isoformat()}
    return obj


def _model_scalar(obj: Any) -> Any:
    if obj is UNDEFINED or (type(obj) is float and not math.isfinite(obj)):
        return None  # JSON.stringify writes both as null
    return _tagged(obj)


def _size_scalar(obj: Any) -> Any:
    if obj is UNDEFINED or (type(obj) is float and not math.isfinite(obj)):
        return None
    return obj  # binary and timestamps are measured as the JSON encoder writes them


def _display_scalar(obj: Any) -> Any:
    return {"$undefined": True} if obj is UNDEFINED else _tagged(obj)


def to_json_model(obj: Any) -> Any:
    """The JSON value a JavaScript peer would see, for schema validation: ``undefined``
    members dropped (``null`` in arrays), keys as strings, binary and timestamps tagged."""
    return _js_walk(obj, _model_scalar, True)


def _size_model(obj: Any) -> Any:
    """What JSON.stringify would serialize, for measuring x-maxJsonBytes."""
    return _js_walk(obj, _size_scalar, True)


def json_size(value: Any) -> int:
    """Bytes of ``value`` as UTF-8 JSON (x-maxJsonBytes). The same answer whichever path asks:
    the raw value is encoded directly when it is plain JSON, else its size model is."""
    try:
        return len(_json_encode(value))
    except (TypeError, ValueError, OverflowError):
        return len(_json_encode(_size_model(value)))


def jsonable(obj: Any) -> Any:
    """A decoded value for display and vectors: ``undefined`` kept visible as
    ``{"$undefined": true}``, binary and timestamps tagged, keys as strings."""
    return _js_walk(obj, _display_scalar, False)


def _pointer(parts: Iterable[Any]) -> str:
    return "/" + "/".join(str(p) for p in parts) if parts else ""


_MISSING = object()
#: Where an x-maxJsonBytes rule applies: property names from the message's root, '*' for each
#: item of an array; and a rule: (that path, max bytes, requirement id or "").
SizePath = tuple[str, ...]
SizeCheck = tuple[SizePath, int, str]

# A JSON number is at most 24 characters ("-1.7976931348623157e+308"); a string of n
# UTF-16 units is at most 6n + 2 bytes of JSON ("\u001f" per unit, two quotes).
_NUMBER_JSON_MAX = 24


def _leaf_size_check(limit: int) -> Callable[[Any], bool | None]:
    """True when a value fits ``limit`` bytes of JSON, False when not, None when the value
    is not plain JSON (the caller then takes the full check). Cheap bounds first."""
    encode = _json_encode
    numbers_fit = limit >= _NUMBER_JSON_MAX

    def check(value: Any) -> bool | None:
        kind = type(value)
        if kind is str:
            if 6 * len(value) + 2 <= limit:
                return True
        elif kind is int or kind is float or kind is bool or value is None:
            if numbers_fit:
                return True
        elif value is UNDEFINED:
            return None
        try:
            return len(encode(value)) <= limit
        except (TypeError, ValueError, OverflowError):
            return None

    return check


def _path_check(path: SizePath, leaf: Callable[[Any], bool | None]) -> Callable[[Any], bool | None]:
    """Apply ``leaf`` to every value at ``path`` ('*' = each array item); the schema check
    has already run, so a wrong type here only means there is nothing to measure."""
    if not path:
        return leaf
    head, inner = path[0], _path_check(path[1:], leaf)
    if head == "*":
        def each(value: Any) -> bool | None:
            if type(value) is list:
                for item in value:
                    verdict = inner(item)
                    if verdict is not True:
                        return verdict
            return True
        return each

    def field(value: Any) -> bool | None:
        if type(value) is dict:
            item = value.get(head, _MISSING)
            if item is not _MISSING:
                return inner(item)
        return True
    return field


def _untyped(node: Any, defs: Mapping[str, Any]) -> bool:
    """Whether a schema accepts a value without looking at it (so ``undefined`` passes)."""
    seen = 0
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and seen < 16:
        node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        seen += 1
    if not isinstance(node, Mapping):
        return True
    return not any(k in node for k in ("type", "const", "enum", "anyOf", "oneOf", "allOf"))


def _post_check(schema: Mapping[str, Any], size_checks: tuple[SizeCheck, ...]
                ) -> Callable[[Any], bool | None] | None:
    """What the compiled schema cannot check, as one function run after it: JSON sizes, and
    required fields whose schema accepts anything (where ``undefined`` must count as absent).
    None when there is nothing to check."""
    # (...: a required field's check takes its key as a default argument)
    checks: list[Callable[..., bool | None]] = [
        _path_check(path, _leaf_size_check(limit)) for path, limit, _ in size_checks]
    measured = {path[0] for path, _, _ in size_checks if path}
    props = schema.get("properties") or {}
    defs = schema.get("$defs") or {}
    for key in schema.get("required") or ():
        if key not in measured and _untyped(props.get(key), defs):
            checks.append(lambda msg, key=key: msg.get(key) is not UNDEFINED)
    if not checks:
        return None
    if len(checks) == 1:
        return checks[0]

    def run_all(msg: Any) -> bool | None:
        for check in checks:
            verdict = check(msg)
            if verdict is not True:
                return verdict
        return True
    return run_all


def _resolve(root: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` with a local ``$ref`` (``#/$defs/Name``) followed (a compiled schema's
    ``$ref`` is a string: jsonschema-rs checks schemas against the metaschema)."""
    seen = 0
    while isinstance(schema, Mapping) and "$ref" in schema and seen < 16:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            break
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            break
        schema, seen = node, seen + 1
    return schema


def _branches(root: Mapping[str, Any], schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The schema and the alternatives it allows (anyOf / oneOf / allOf), resolved; none for
    a boolean schema (``true`` documents nothing)."""
    schema = _resolve(root, schema)
    if not isinstance(schema, Mapping):
        return []
    out = [schema]
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or ():
            if isinstance(sub, Mapping):
                out.extend(_branches(root, sub))
    return out


def _optional_type(root: Mapping[str, Any], schema_path: list[str | int]) -> bool:
    """Whether a schema error is the ``type`` of a property its object does not require.

    ``schema_path`` is jsonschema-rs's: the location of the failing keyword in ``root``, a
    ``$ref``'s target named where it stands (``$defs/Job/properties/...``), so the walk follows
    no ``$ref``. The object is the schema that holds ``properties`` (a ``$ref`` beside its own
    ``properties`` and ``required`` is judged by its own ``required``, not its target's)."""
    if len(schema_path) < 3 or schema_path[-1] != "type" or schema_path[-3] != "properties":
        return False
    node: Any = root
    for part in schema_path[:-3]:
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return False
    return isinstance(node, Mapping) and schema_path[-2] not in (node.get("required") or ())


def _undocumented(root: Mapping[str, Any], schema: Mapping[str, Any], value: Any, path: str,
                  out: dict[str, bool], also_known: frozenset[str] = frozenset()) -> None:
    branches = _branches(root, schema)
    if isinstance(value, Mapping):
        props: dict[str, Mapping[str, Any]] = {}
        for b in branches:
            props.update(b.get("properties") or {})
        if not props:
            return  # a free-form object (job data, a result): its keys are the client's
        for key, item in value.items():   # an undocumented key is one whatever its value
            name = js_key(key)
            where = f"{path}.{name}" if path else name
            if name in props:
                _undocumented(root, props[name], item, where, out)
            elif name not in also_known:
                out[where] = item is None
    elif isinstance(value, (list, tuple)):
        items = [b["items"] for b in branches if isinstance(b.get("items"), Mapping)]
        if items:
            for item in value:
                _undocumented(root, items[0], item, f"{path}[]", out)


class _Compiled:
    """One schema compiled, with the paths where ``x-maxJsonBytes`` applies."""

    __slots__ = (
        "default_requirement",
        "fields",
        "is_valid",
        "post_check",
        "schema",
        "size_checks",
        "validator",
    )

    def __init__(self, schema: Mapping[str, Any], default_requirement: str):
        self.schema = schema
        self.validator = jsonschema_rs.validator_for(dict(schema))
        self.is_valid = self.validator.is_valid
        self.default_requirement = default_requirement
        self.fields = frozenset((schema.get("properties") or {}).keys())
        self.size_checks = tuple(self._size_paths(schema))
        self.post_check = _post_check(schema, self.size_checks)

    @staticmethod
    def _size_paths(schema: Mapping[str, Any]) -> Iterable[SizeCheck]:
        """(instance path with '*' for array items, max bytes, requirement) per x-maxJsonBytes."""
        defs = schema.get("$defs") or {}

        def visit(node: Any, path: SizePath, depth: int) -> Iterable[SizeCheck]:
            if not isinstance(node, Mapping) or depth > 8:
                return
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                yield from visit(defs.get(ref[8:]), path, depth + 1)
            if "x-maxJsonBytes" in node:
                yield path, int(node["x-maxJsonBytes"]), node.get("x-requirement", "")
            for name, sub in (node.get("properties") or {}).items():
                yield from visit(sub, path + (name,), depth + 1)
            if isinstance(node.get("items"), Mapping):
                yield from visit(node["items"], path + ("*",), depth + 1)

        yield from visit(schema, (), 0)


def _values_at(obj: Any, path: SizePath, where: tuple[str | int, ...] = ()
               ) -> Iterable[tuple[tuple[str | int, ...], Any]]:
    if not path:
        yield where, obj
        return
    head, rest = path[0], path[1:]
    if head == "*":
        if type(obj) is list:
            for i, item in enumerate(obj):
                yield from _values_at(item, rest, where + (i,))
    elif type(obj) is dict and head in obj:
        yield from _values_at(obj[head], rest, where + (head,))


class BunqueueValidator:
    """Validates requests and replies of one profile; compiled once, reused per message."""

    def __init__(self, profile: Profile | str | None = None):
        self.profile = bunqueue_profile(profile)
        spec = self.profile.model
        self.spec = spec
        self._errors = spec.protocol_errors
        self._requests = {n: _Compiled(c.request, c.requirement) for n, c in spec.commands.items()}
        self._replies = {n: _Compiled(c.response, c.requirement) for n, c in spec.commands.items()}
        env_req = spec.error_reply.get("x-requirement", "")
        self._error_reply = _Compiled(spec.error_reply, env_req)
        # the frames the server pushes (job_events, in profiles with SubscribeEvents)
        events = self.profile.tree.get("job_events") or {}
        self._event: _Compiled | None = None
        if isinstance(events.get("frame"), Mapping):
            from ..spec.bunqueue import DIALECT, used_defs
            frame = dict(copy.deepcopy(events["frame"]), **{"$schema": DIALECT})
            defs = used_defs(frame, spec.definitions)
            if defs:
                frame["$defs"] = copy.deepcopy(defs)
            self._event = _Compiled(frame, events.get("requirement") or "")

    # -- fast path ----------------------------------------------------------------------------
    def request_is_valid(self, msg: Any) -> bool:
        """True when ``msg`` is a valid request: the hot path, one compiled check.

        It agrees with ``request_violations`` on every input: what the compiled schema
        cannot see (job data size, ``undefined`` in a field that accepts anything) runs in a
        per-command post-check built once, and a message holding values JSON Schema cannot
        represent (``undefined``, binary, timestamps, non-string keys) takes the full check.
        """
        try:
            compiled = self._requests[msg["cmd"]]
        except (KeyError, TypeError, IndexError):  # no map, no cmd, unknown or unhashable
            return False
        return self._passes(compiled, msg)

    def _passes(self, compiled: _Compiled, msg: Any) -> bool:
        """The compiled check, its post-check, and the full check where they cannot settle."""
        try:
            if not compiled.is_valid(msg):
                return False
        except ValueError:  # a value jsonschema-rs cannot represent: take the full check
            return not self._violations(compiled, msg)
        post = compiled.post_check
        if post is None:
            return True
        verdict = post(msg)
        if verdict is None:
            return not self._violations(compiled, msg)
        return verdict

    def reply_is_valid(self, cmd: str, msg: Any, *, ok: bool = True) -> bool:
        """True when ``msg`` is a valid reply to ``cmd`` (``ok=False``: a valid error reply):
        the hot path for a peer that judges replies, agreeing with ``reply_violations``."""
        compiled = self._replies.get(cmd) if ok else self._error_reply
        return compiled is not None and self._passes(compiled, msg)

    def event_is_valid(self, msg: Any) -> bool:
        """True when ``msg`` is a valid pushed job event frame (always False in a profile
        without job_events)."""
        return self._event is not None and self._passes(self._event, msg)

    # -- verdicts -----------------------------------------------------------------------------
    def event_violations(self, msg: Any) -> tuple[Violation, ...]:
        """Every rule a pushed job event frame breaks, citing the job_events requirement."""
        if self._event is None:
            return (self._kind_violation("unknown_command", "", "this profile pushes no "
                                         "job events"),)
        if type(msg) is not dict:
            return (self._kind_violation("not_a_map", "", "event frame is not a map"),)
        return self._violations(self._event, msg)

    def request_violations(self, msg: Any) -> tuple[Violation, ...]:
        """Every rule the request breaks (empty when valid), each citing a requirement."""
        if type(msg) is not dict:
            return (self._kind_violation("not_a_map", "", "request is not a map"),)
        cmd = msg.get("cmd")
        if type(cmd) is not str:
            return (self._kind_violation("missing_cmd", "/cmd", "request has no string cmd"),)
        compiled = self._requests.get(cmd)
        if compiled is None:
            return (self._kind_violation("unknown_command", "/cmd",
                                         f"unknown command {cmd!r}"),)
        return self._violations(compiled, msg)

    def reply_violations(self, cmd: str, msg: Any) -> tuple[Violation, ...]:
        """Every rule a reply to ``cmd`` breaks: the success schema when ok is true, the
        shared error-reply schema otherwise."""
        if type(msg) is not dict:
            return (self._kind_violation("not_a_map", "", "reply is not a map"),)
        if msg.get("ok") is True:
            compiled = self._replies.get(cmd)
            if compiled is None:
                return (self._kind_violation("unknown_command", "", f"unknown command {cmd!r}"),)
        else:
            compiled = self._error_reply
        return self._violations(compiled, msg)

    def validate_request(self, msg: Any) -> None:
        """Raise ``MessageError`` citing the first broken rule, if any.

        The error's kind says what went wrong (``not_a_map``, ``missing_cmd``,
        ``unknown_command`` or ``schema_violation``); its requirement is the first
        violation's, e.g. BQ-LIMIT-4 for a priority out of range.
        """
        violations = self.request_violations(msg)
        if not violations:
            return
        if type(msg) is not dict:
            kind = "not_a_map"
        elif type(msg.get("cmd")) is not str:
            kind = "missing_cmd"
        elif msg["cmd"] not in self._requests:
            kind = "unknown_command"
        else:
            kind = "schema_violation"
        first = violations[0]
        raise MessageError(self._errors[kind], first.message, path=first.path,
                           violations=violations, requirement=first.requirement)

    def request_size_checks(self, cmd: str) -> tuple[SizeCheck, ...]:
        """The x-maxJsonBytes rules of ``cmd``'s request: (instance path with '*' for array
        items, max bytes, requirement) each; empty for an unknown command."""
        compiled = self._requests.get(cmd)
        return compiled.size_checks if compiled is not None else ()

    def extra_fields(self, cmd: str, msg: Mapping[Any, Any], *, reply: bool = False) -> list[str]:
        """Top-level fields the documents do not define for this message (reported, not errors)."""
        table = self._replies if reply else self._requests
        compiled = table.get(cmd)
        if compiled is None:
            return []
        known = compiled.fields | (self._error_reply.fields if reply else frozenset())
        return [k for k, v in msg.items() if js_key(k) not in known]

    def undocumented_fields(self, cmd: str, msg: Mapping[Any, Any], *,
                            reply: bool = False) -> dict[str, bool]:
        """Every field, at any depth, that the message's schema does not define where it
        stands, as a path (``crons[].executions``; ``[]`` for any element of a list) mapped to
        whether its value was ``null`` (so a reader can tell an undocumented ``null`` from an
        undocumented value). Objects whose schema lists no properties (job data, results) are
        free-form and not looked into. Reported, never errors."""
        table = self._replies if reply else self._requests
        compiled = table.get(cmd)
        if compiled is None or not isinstance(msg, Mapping):
            return {}
        out: dict[str, bool] = {}
        root = compiled.schema
        extra = self._error_reply.fields if reply else frozenset()
        _undocumented(root, root, msg, "", out, extra)
        return out

    def missing_fields(self, cmd: str, msg: Mapping[Any, Any], *, reply: bool = False) -> list[str]:
        """Required fields absent from ``msg`` (undefined counts as absent)."""
        table = self._replies if reply else self._requests
        compiled = table.get(cmd)
        if compiled is None:
            return []
        required = compiled.schema.get("required") or ()
        return [k for k in required if msg.get(k, UNDEFINED) is UNDEFINED]

    # -- internals ----------------------------------------------------------------------------
    def _kind_violation(self, kind: str, path: str, message: str) -> Violation:
        k = self._errors[kind]
        return Violation(k.requirement, self._level(k.requirement), path, message)

    def _level(self, rid: str) -> str:
        req = self.profile.requirements.get(rid)
        return req.level if req is not None else "MUST"

    def _violations(self, compiled: _Compiled, msg: Any) -> tuple[Violation, ...]:
        model = to_json_model(msg)
        out: list[Violation] = []
        try:
            for err in compiled.validator.iter_errors(model):
                path = list(err.schema_path)
                if err.instance is None and _optional_type(compiled.schema, path):
                    # null where the documents type an optional field T | undefined: a
                    # rule of its own (BQ-ENV-7), not the command's shape
                    out.append(self._kind_violation(
                        "null_optional", _pointer(err.instance_path), _short(err.message)))
                    continue
                rid = self._requirement_for(compiled, path, list(err.instance_path))
                out.append(Violation(rid, self._level(rid), _pointer(err.instance_path),
                                     _short(err.message)))
        except ValueError as exc:  # jsonschema-rs: "Recursion limit reached"
            # a profile whose max_nesting_depth exceeds what jsonschema-rs walks: still a
            # violation citing the depth rule, never an exception out of the validator
            return (self._kind_violation("too_deep", "", f"the request nests deeper than the "
                                         f"validator walks ({exc})"),)
        out.extend(self._size_violations(compiled, msg))
        return tuple(out)

    def _size_violations(self, compiled: _Compiled, msg: Any) -> list[Violation]:
        out: list[Violation] = []
        for path, limit, rid in compiled.size_checks:
            for where, value in _values_at(msg, path):
                if value is UNDEFINED:  # absent; a required one is reported by the schema
                    continue
                size = json_size(value)
                if size > limit:
                    cited = rid or compiled.default_requirement
                    out.append(Violation(cited, self._level(cited), _pointer(where),
                                         f"value is {size} bytes as JSON, more than {limit}"))
        return out

    def _requirement_for(self, compiled: _Compiled, schema_path: list[str | int],
                         instance_path: list[str | int]) -> str:
        """The nearest x-requirement along the error's schema path, else along the instance
        path's properties, else the command's own requirement."""
        found: str | None  # x-requirement values are strings (spec lint)
        found = None
        node: Any = compiled.schema
        for part in schema_path:
            if isinstance(node, Mapping):
                by_keyword = node.get("x-keywordRequirements")
                if isinstance(by_keyword, Mapping) and part in by_keyword:
                    rid: str = by_keyword[part]
                    return rid
                node = node.get(part)
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                break
            if isinstance(node, Mapping) and node.get("x-requirement"):
                found = node["x-requirement"]
        if found:
            return found
        node = compiled.schema
        for part in instance_path:
            props = node.get("properties") if isinstance(node, Mapping) else None
            if not props or part not in props:
                break
            node = props[part]
            if isinstance(node, Mapping) and node.get("x-requirement"):
                found = node["x-requirement"]
        return found or compiled.default_requirement


def iter_x_requirements(tree: Any) -> Iterable[str]:
    """Every requirement id a spec subtree cites (used by lint)."""
    for _, node in walk(tree):
        if isinstance(node, dict):
            for key in ("x-requirement", "requirement"):
                value = node.get(key)
                if isinstance(value, str):
                    yield value
