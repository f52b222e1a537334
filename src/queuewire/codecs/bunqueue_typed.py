"""Decode and validate bunqueue requests in one pass: ``RequestDecoder.feed_checked``.

``FrameDecoder.feed`` followed by ``BunqueueValidator.request_is_valid`` on every message is
the general path, and it stays the reference. ``RequestDecoder.feed_checked`` returns the
same messages (equal values, same keys in the same order, same errors at the same offsets),
each paired with the verdict ``request_is_valid`` gives it, and settles the common valid
frame without the general path:

* **Dispatch on the wire bytes.** A request whose map is a fixmap and whose first key is
  ``cmd`` with a fixstr value (what clients write) names its command in its first bytes;
  those bytes select the command's typed check with one dict lookup. Any other frame takes
  the general path.
* **Typed decoding.** For every command whose request schema uses only keywords with an
  exact msgspec equivalent, a ``TypedDict`` is generated at load time from the spec's JSON
  Schema (``_typed_dict``): ``type`` string / integer / number / boolean / array / free-form
  object, ``const`` and string ``enum`` as ``Literal``, ``minimum`` / ``maximum`` and
  ``minLength`` / ``maxLength`` as ``msgspec.Meta``, ``items``, ``required``. msgspec decodes
  the payload with it, so parsing and the schema's checks run in C, and the result is the
  same plain dict the plain decoder builds (same keys in the same order, same types).
* **Nested objects** (PUSHB ``jobs``): a TypedDict would drop the unknown keys of a nested
  map unseen, so such a command is checked by a second decode into generated Structs that
  refuse unknown fields (``_struct``: ``gc=False``, untyped values skipped as
  ``msgspec.Raw``), and the message itself comes from the plain decoder.
* A command whose schema uses anything else (a pattern below the top level, two patterned
  fields, a keyword not listed, a ``$ref`` beside other keywords) has no typed check
  (``TypedRequests.skipped`` says why): all its frames take the general path. The schemas
  are read from the spec at load time; nothing here names a field or a limit.
* **What the typed decode cannot see**, and how each is settled (``feed_checked``):

  - *Extra fields* (the schemas allow them; a TypedDict drops them): the decoded dict must
    hold as many keys as the fixmap header declares, else the general path. This also
    sends maps with duplicate keys there.
  - *Patterns*: only ``^[class]+$`` / ``^[class]*$`` over ASCII characters is translated,
    as ``str.strip(class)`` leaving nothing (Python's ``re`` would let ``$`` match before a
    final newline, which the schema's ECMA-262 regex does not).
  - *Optional nested objects* (PUSH ``repeat``): left out of the TypedDict, so when
    present the key count sends the frame to the general path.
  - *Extensions* (``undefined``, unknown types): the typed decoder refuses every extension,
    so a frame holding one takes the general path (``undefined`` reads as absent there);
    the Struct check, which skips untyped values, looks for the ``undefined`` bytes.
  - *Depth*: the same check as ``FrameDecoder`` (``nests_too_deep``); a frame too deep is left
    to the general path, which raises the same error.
  - *x-maxJsonBytes*: a MessagePack payload of ``n`` bytes decodes to values whose JSON
    text, as ``json_size`` measures it, is at most ``JSON_BYTES_PER_BYTE * n`` bytes (see
    that constant), so a payload short enough cannot exceed the smallest limit of its
    command and the measure is skipped; a longer one takes the general path.
  - *Map keys that are not strings*, *integers written as floats*, ``null``: refused by
    the typed decode, so the general path judges them.

  The fast path only ever answers "valid": every frame it does not accept is decoded by
  the plain decoder (whose errors are the reference) and judged by ``request_is_valid``.
  tests/codecs/test_bunqueue_typed.py checks that both paths agree (messages, verdicts,
  errors, offsets, decoder state) on the vectors, on every bound, on hand-written edge
  frames and on random valid, mutated and broken streams cut at random places.

Cost (issue 15, benchmarks/codec_bench.py, same run): the general path adds ~0.65x of the
framing time for validation; ``feed_checked`` adds ~0.45x: a dict lookup on a byte slice,
the typed decode (about the plain decode's cost), the key count, the pattern check and a
pair per message. The reference server still calls ``FrameDecoder.feed`` and
``request_is_valid``; ``feed_checked`` is for a reader that wants both at once.
"""

from __future__ import annotations

import keyword
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict, Union

import msgspec

from ..spec import Profile
from .bunqueue import FrameDecoder, nests_too_deep
from .errors import FramingError, PayloadError
from .validation import BunqueueValidator

# JSON bytes per MessagePack byte, at most, for any value the decoder can produce, as
# json_size measures it (directly, or through its size model when the value is not plain
# JSON). Per object, counting its separator (',' or ':') and, for a map key, the quotes
# the size model puts around a key that is not a string: 1-byte objects at most 8 (false
# as a key: '"false":'); a str of n content bytes at most 6n + 3 ("\\u0001" per control
# byte); numbers, timestamps, binary and keys built from them (JavaScript's String(key))
# stay below 6 per byte. Twice that, for margin: only frames of more than limit / 16 bytes
# (655,360 bytes for job data's 10 MB) are measured.
JSON_BYTES_PER_BYTE = 16

_CMD_KEY = b"\xa3cmd"  # fixstr "cmd"
_FIXSTR = 0xA0
_FLOAT_MAX = 1.7976931348623157e308  # bounds a float keep NaN and the infinities out

# keywords that only annotate; every other one must be understood here, or no typed check
_ANNOTATIONS = frozenset({"description", "title", "examples", "default", "$comment",
                          "deprecated", "readOnly", "writeOnly"})
_BY_TYPE = {
    "string": {"type", "minLength", "maxLength", "pattern"},
    "integer": {"type", "minimum", "maximum"},
    "number": {"type", "minimum", "maximum"},
    "boolean": {"type"},
    "array": {"type", "items"},
    "object": {"type", "properties", "required"},
}
_NESTED = object()  # an object schema with properties: decoded as Any, present -> general


class _Unsupported(Exception):
    """The schema uses something the typed check cannot express exactly."""


def _keywords(node: Mapping[str, Any]) -> set[str]:
    """The validation keywords of ``node`` (annotations and ``x-`` extensions left out:
    the general path acts only on x-maxJsonBytes, which the size bound covers)."""
    return {k for k in node if k not in _ANNOTATIONS and not k.startswith("x-")}


def _deref(root: Mapping[str, Any], node: Any) -> Mapping[str, Any]:
    """``node`` with local ``$ref``s followed; a ``$ref`` beside validation keywords is
    refused (they would apply together, not override)."""
    for _ in range(16):
        if not isinstance(node, Mapping):
            raise _Unsupported("schema is not a map")
        ref = node.get("$ref")
        if ref is None:
            return node
        if not isinstance(ref, str) or not ref.startswith("#/$defs/") or \
                _keywords(node) != {"$ref"}:
            raise _Unsupported(f"$ref {ref!r}")
        node = (root.get("$defs") or {}).get(ref[len("#/$defs/"):])
    raise _Unsupported("$ref chain too long")


def char_class(pattern: str) -> tuple[str, bool] | None:
    """``(characters, non_empty)`` when ``pattern`` is ``^[class]+$`` or ``^[class]*$``
    over ASCII literals, ranges of letters or digits and escaped punctuation; else None.

    A string matches the pattern exactly when ``s.strip(characters)`` is empty (and, for
    ``+``, ``s`` is not)."""
    tails = [t for t in ("]+$", "]*$") if pattern.startswith("^[") and pattern.endswith(t)
             and len(pattern) > 2 + len(t)]
    if not tails:
        return None
    body, non_empty = pattern[2:-3], tails[0] == "]+$"
    if body[0] == "^":
        return None
    chars: set[str] = set()
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if i + 1 >= len(body) or body[i + 1].isalnum() or not body[i + 1].isascii():
                return None  # \d, \w, \u...: classes whose meaning differs between dialects
            c, i = body[i + 1], i + 2
        elif c in "[]" or not c.isascii():
            return None
        else:
            i += 1
        if i + 1 < len(body) and body[i] == "-" and body[i + 1] not in "\\[]":
            hi = body[i + 1]
            if not (c.isalnum() and hi.isalnum() and hi.isascii() and c <= hi
                    and (c.isdigit() == hi.isdigit()) and (c.isupper() == hi.isupper())):
                return None
            chars.update(chr(x) for x in range(ord(c), ord(hi) + 1))
            i += 2
        else:
            chars.add(c)
    return "".join(sorted(chars)), non_empty


def _bounds(node: Mapping[str, Any]) -> tuple[Any, Any]:
    lo, hi = node.get("minimum"), node.get("maximum")
    for b in (lo, hi):
        if b is not None and type(b) is not int:
            raise _Unsupported(f"bound {b!r}")
    return lo, hi


def _meta(**kw: Any) -> msgspec.Meta | None:
    kw = {k: v for k, v in kw.items() if v is not None}
    return msgspec.Meta(**kw) if kw else None


def _annotated(tp: Any, meta: msgspec.Meta | None) -> Any:
    return tp if meta is None else Annotated[tp, meta]


def _field_type(root: Mapping[str, Any], raw: Any, top: bool, structs: bool = False
                ) -> tuple[Any, tuple[str, bool] | None]:
    """The msgspec type of one property schema, and its pattern's character class (only a
    top-level property may have one). An object with properties is ``_NESTED`` or, with
    ``structs``, a Struct refusing unknown fields; with ``structs`` an untyped value is
    ``msgspec.Raw`` (skipped, not built). Raises ``_Unsupported``."""
    node = _deref(root, raw)
    keys = _keywords(node)
    if "const" in keys or "enum" in keys:
        values = [node["const"]] if "const" in keys else list(node["enum"])
        if not values or not all(type(v) is str for v in values) or \
                keys - {"const", "enum"} - ({"type"} if node.get("type") == "string" else set()):
            raise _Unsupported("const/enum other than strings alone")
        if "const" in keys and "enum" in keys and node["const"] not in node["enum"]:
            raise _Unsupported("const outside enum")
        return Literal[tuple(values) if len(values) > 1 else values[0]], None
    kind = node.get("type")
    if kind is None:
        if keys:
            raise _Unsupported(f"untyped schema with {sorted(keys)}")
        return (msgspec.Raw if structs else Any), None
    if not isinstance(kind, str) or kind not in _BY_TYPE or keys - _BY_TYPE[kind]:
        raise _Unsupported(f"type {kind!r} with {sorted(keys)}")
    if kind == "string":
        lo, hi = node.get("minLength"), node.get("maxLength")
        for b in (lo, hi):
            if b is not None and type(b) is not int:
                raise _Unsupported(f"length {b!r}")
        pattern = None
        if "pattern" in node:
            pattern = char_class(node["pattern"]) if top else None
            if pattern is None:
                raise _Unsupported(f"pattern {node['pattern']!r}")
        return _annotated(str, _meta(min_length=lo, max_length=hi)), pattern
    if kind == "integer":
        lo, hi = _bounds(node)
        return _annotated(int, _meta(ge=lo, le=hi)), None
    if kind == "number":
        lo, hi = _bounds(node)
        as_float = msgspec.Meta(ge=-_FLOAT_MAX if lo is None else lo,
                                le=_FLOAT_MAX if hi is None else hi)
        return Union[_annotated(int, _meta(ge=lo, le=hi)),  # noqa: UP007 - a runtime type
                     Annotated[float, as_float]], None
    if kind == "boolean":
        return bool, None
    if kind == "array":
        if "items" not in node:
            return list, None
        item, _ = _field_type(root, node["items"], False, structs)
        if item is _NESTED:
            raise _Unsupported("array of objects")
        return list[item], None  # type: ignore[valid-type]
    if "properties" in node or "required" in node:  # an object with a shape
        if structs:
            return _struct("Item", root, node), None
        if not top:
            raise _Unsupported("nested object")
        return _NESTED, None
    return dict, None  # a free-form object (job data as an object, a result)


def _typed_dict(name: str, schema: Mapping[str, Any]
                ) -> tuple[Any, dict[str, tuple[str, bool]]]:
    """The TypedDict of a request schema and the character classes of its patterned fields.
    Optional nested objects are left out of it. Raises ``_Unsupported``."""
    if schema.get("type") != "object" or _keywords(schema) - {"type", "properties", "required",
                                                              "$defs", "$schema"}:
        raise _Unsupported("request schema is not a plain object schema")
    props = schema.get("properties") or {}
    required = list(schema.get("required") or ())
    if len(props) + len(set(required) - set(props)) >= 0x5E:  # see _source: len vs header
        raise _Unsupported("too many properties")
    fields: dict[str, Any] = {}
    patterns: dict[str, tuple[str, bool]] = {}
    for key, raw in props.items():
        tp, pattern = _field_type(schema, raw, True)
        if tp is _NESTED:
            if key in required:
                raise _Unsupported(f"required nested object {key}")
            continue  # left out: the decode drops it, the key count then sees it
        if pattern is not None:
            patterns[key] = pattern
        fields[key] = Required[tp] if key in required else NotRequired[tp]
    for key in required:
        fields.setdefault(key, Required[Any])
    return TypedDict(f"{name}Request", fields, total=False), patterns  # type: ignore[operator]


def _struct(name: str, root: Mapping[str, Any], node: Mapping[str, Any],
            patterns: dict[str, tuple[str, bool]] | None = None) -> type[msgspec.Struct]:
    """A Struct checking an object schema, nested ones included, refusing unknown fields
    (the schemas allow them; a frame holding one takes the general path). Only decoded to
    check a frame: the message itself comes from the plain decoder. No pattern below the
    top level, whose character classes go to ``patterns`` (checked after the decode).
    Raises ``_Unsupported``."""
    props = node.get("properties") or {}
    required = list(node.get("required") or ())
    fields: list[Any] = []
    for key in [*props, *(k for k in required if k not in props)]:
        if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
            raise _Unsupported(f"field name {key!r}")
        tp, pattern = _field_type(root, props.get(key, {}), patterns is not None, True)
        if pattern is not None and patterns is not None:
            patterns[key] = pattern
        # optional fields default to None; null itself never passes a typed field
        fields.append((key, tp) if key in required else (key, tp, None))
    # gc=False: these hold no cycles and only live until the check returns
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True, gc=False)


SEEN_MAX = 4096  # strings remembered per patterned field


def _matcher(chars: str, non_empty: bool) -> tuple[set[str], Any]:
    """A set of strings known to match, and the exact test that fills it (up to
    ``SEEN_MAX`` strings, so a client sending ever new names cannot grow it)."""
    seen: set[str] = set()
    add = seen.add

    def matches(v: str) -> bool:
        if (non_empty and not v) or v.strip(chars):
            return False
        if len(seen) < SEEN_MAX:
            add(v)
        return True

    return seen, matches


def _refuse_ext(code: int, data: memoryview) -> Any:
    raise ValueError("extension: take the general path")


class TypedRequests:
    """The typed checks of one validator's request schemas, built once (``for_validator``):
    ``checks`` maps the first bytes of a payload (after the fixmap header: the ``cmd`` key
    and its fixstr value) to the command's entry ``(decode, max_payload, field, seen,
    matches)``: the typed decode (raises on what it refuses), the longest payload whose
    sizes need no measuring, and the patterned field with its known-good strings and its
    exact test (None when the command has none). ``skipped`` says why a command has none."""

    def __init__(self, validator: BunqueueValidator):
        self.checks: dict[bytes, Any] = {}
        self._plain = FrameDecoder(validator.profile)._decode
        self._undefined = msgspec.msgpack.encode(
            msgspec.msgpack.Ext(*validator.spec.undefined_ext))
        self.skipped: dict[str, str] = {}
        for name, command in validator.spec.commands.items():
            try:
                self._add(name, command.request, validator)
            except _Unsupported as exc:
                self.skipped[name] = str(exc)

    def _add(self, name: str, schema: Mapping[str, Any], validator: BunqueueValidator) -> None:
        cmd = (schema.get("properties") or {}).get("cmd") or {}
        encoded = name.encode()
        if cmd.get("const") != name or len(encoded) >= 32 or "cmd" not in (
                schema.get("required") or ()):
            raise _Unsupported("cmd is not a required const naming the command")
        try:
            td, patterns = _typed_dict(name, schema)
            decode = msgspec.msgpack.Decoder(td, ext_hook=_refuse_ext).decode
        except _Unsupported:  # nested objects: check with Structs, decode plainly
            patterns = {}
            decode = self._checked_plain(name, schema, patterns)
        if len(patterns) > 1:
            raise _Unsupported("more than one patterned field")
        limits = [limit for _, limit, _ in validator.request_size_checks(name)]
        max_payload = min(limits) // JSON_BYTES_PER_BYTE if limits else sys.maxsize
        field = seen = matches = None
        if patterns:
            ((field, (chars, non_empty)),) = patterns.items()
            seen, matches = _matcher(chars, non_empty)
        self.checks[_CMD_KEY + bytes([_FIXSTR | len(encoded)]) + encoded] = (
            decode, max_payload, field, seen, matches)

    def _checked_plain(self, name: str, schema: Mapping[str, Any],
                       patterns: dict[str, tuple[str, bool]]) -> Any:
        """For a schema with nested objects: a Struct decode checks the frame (its top-level
        patterns aside, put in ``patterns``), then the plain decoder builds the message."""
        if schema.get("type") != "object" or _keywords(schema) - {
                "type", "properties", "required", "$defs", "$schema"}:
            raise _Unsupported("request schema is not a plain object schema")
        check = msgspec.msgpack.Decoder(_struct(f"{name}Check", schema, schema, patterns),
                                        ext_hook=_refuse_ext).decode
        # the plain decoder returns Any; a payload it accepts here is a map (the check passed)
        plain: Callable[[memoryview], dict[str, Any]] = self._plain
        undefined = self._undefined

        def decode(payload: memoryview) -> dict[str, Any]:
            check(payload)  # raises on anything it refuses: the general path decides
            # an untyped value is skipped as Raw, unread: one that is undefined (absent,
            # for a required field) sends the frame to the general path, as does any
            # run of the same bytes
            if undefined in payload.tobytes():
                raise ValueError("undefined: take the general path")
            return plain(payload)

        return decode


_BUILT: weakref.WeakKeyDictionary[BunqueueValidator, TypedRequests] = \
    weakref.WeakKeyDictionary()


def for_validator(validator: BunqueueValidator) -> TypedRequests:
    """The typed checks of ``validator``'s profile, built on first use and kept with it."""
    built = _BUILT.get(validator)
    if built is None:
        built = _BUILT[validator] = TypedRequests(validator)
    return built


class RequestDecoder(FrameDecoder):
    """A ``FrameDecoder`` for the requests a server reads, with ``feed_checked``.

    ``feed``, ``feed_frames``, ``feed_whole`` and ``eof`` are the ``FrameDecoder``'s own,
    unchanged. ``feed_checked`` runs the same framing loop as ``FrameDecoder._run`` (same
    checks in the same order, same errors, same state after each call: the equivalence
    tests hold them side by side) with the typed check tried before the plain decode."""

    def __init__(self, profile: Profile | str | None = None, *,
                 validator: BunqueueValidator | None = None,
                 max_frame_bytes: int | None = None):
        super().__init__(profile, max_frame_bytes=max_frame_bytes)
        self.validator = validator if validator is not None else BunqueueValidator(self.profile)
        self._checks = for_validator(self.validator).checks

    def feed_checked(self, data: bytes | bytearray | memoryview = b"") -> list[tuple[Any, bool]]:
        """``feed``, with each message paired with ``request_is_valid(message)``.

        On a ``ProtocolError``, ``error.frames`` holds the pairs of the messages before it."""
        if self._dead is not None:
            raise self._dead
        if data:
            if type(data) is not bytes:  # the caller may reuse its buffer: keep a copy
                data = bytes(data)
            self._chunks.append(data)
            self._have += len(data)
        if self._have < self._need and not (
                self._need - self._prefix.size > self.max_frame_bytes
                and self._have >= self._prefix.size):
            return []
        chunks = self._chunks
        buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        n = len(buf)
        out: list[tuple[Any, bool]] = []
        append = out.append
        unpack_from = self._prefix.unpack_from
        prefix_size = self._prefix.size
        decode = self._decode
        is_valid = self.validator.request_is_valid
        check_for = self._checks.get
        max_len = self.max_frame_bytes
        max_depth = self.max_depth
        pos = 0
        view = memoryview(buf)
        try:
            while n - pos >= prefix_size:
                (length,) = unpack_from(buf, pos)
                if length > max_len:
                    self._fail(FramingError, "frame_too_large",
                               f"frame declares {length} bytes, more than max_frame_bytes "
                               f"{max_len}", self._base + pos, out)
                start = pos + prefix_size
                end = start + length
                if end > n:
                    break
                payload = view[start:end]
                if length > 5:  # the key is only a hint: the typed decode checks cmd
                    entry = check_for(buf[start + 1:start + 6 + (buf[start + 5] & 0x1F)])
                    if entry is not None:
                        typed, max_payload, field, seen, matches = entry
                        if length <= max_payload:
                            try:
                                value = typed(payload)
                            except Exception:  # noqa: BLE001 - the general path decides
                                value = None
                            else:
                                # as many keys as the fixmap declares: no extra or
                                # duplicate key, no optional nested object (left out)
                                if len(value) + 0x80 != buf[start]:
                                    value = None
                                elif field is not None:  # its pattern (names repeat)
                                    v = value.get(field)
                                    if v is not None and v not in seen and not matches(v):
                                        value = None
                            if value is not None and (length <= max_depth or not
                                                      nests_too_deep(payload, value, max_depth)):
                                append((value, True))
                                pos = end
                                continue
                            # refused, or too deep (the general path raises that): below
                try:
                    value = decode(payload)
                except Exception as exc:  # noqa: BLE001 - classified as FrameDecoder does
                    at = self._base + start
                    pos = end
                    self._payload_error(exc, payload, at, out, buf, pos)
                if type(value) is not dict:
                    at = self._base + start
                    pos = end
                    self._keep(buf, pos)
                    self._fail(PayloadError, "not_a_map",
                               f"payload is a {type(value).__name__}, not a map", at, out)
                if length > max_depth and nests_too_deep(payload, value, max_depth):
                    at = self._base + start
                    pos = end
                    self._keep(buf, pos)
                    self._fail(PayloadError, "too_deep",
                               f"containers nest deeper than max_nesting_depth {max_depth}",
                               at, out)
                append((value, is_valid(value)))
                pos = end
        finally:
            view.release()
        self._keep(buf, pos)
        return out
