"""bunqueue test vectors, generated from the spec and checked against the codecs.

They are: a minimal request and reply of every command; every limit probed at limit-1, limit
and limit+1 on a command that uses it, with the requirement a violation must cite; byte
streams that exercise framing and the MessagePack rules (truncation, lying lengths, nesting,
UTF-8, extensions), with the expected frames and error; and msgpackr's own encodings (map16,
undefined, float64 integers) to decode. Generation is deterministic. ``set_path``,
``def_uses`` and ``probe_values`` are public because the conformance generator
(:mod:`queuewire.conformance.generate_bunqueue`) probes the same limits the same way.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from typing import Any

from ..codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from ..codecs.errors import ProtocolError
from ..codecs.validation import BunqueueValidator
from ..codecs.validation import jsonable as to_json
from ..spec import load_profile
from ..spec.instances import minimal, resolve
from ._common import FORMAT

HEX_LIMIT = 1 << 16  # vectors whose frame is larger carry only the value (with $repeat)


# -- JSON form of decoded values --------------------------------------------------------------
def from_json(value: Any) -> Any:
    """The inverse of ``to_json``, plus ``{"$repeat": [text, n]}`` for large strings."""
    if isinstance(value, dict):
        if set(value) == {"$undefined"}:
            return UNDEFINED
        if set(value) == {"$binary"}:
            return bytes.fromhex(value["$binary"])
        if set(value) == {"$timestamp"}:
            return _dt.datetime.fromisoformat(value["$timestamp"])
        if set(value) == {"$repeat"}:
            text, count = value["$repeat"]
            return text * count
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


_ENCODER: list[FrameEncoder] = []


def _frame(payload: bytes) -> bytes:
    """A frame around ``payload``, with the prefix the profile's framing declares."""
    return _ENCODER[0].prefix(len(payload)) + payload


# -- bunqueue generation ----------------------------------------------------------------------
def set_path(schema: dict, instance: dict, path: tuple, value: Any) -> dict:
    """Set ``value`` at ``path`` ('*' = first array item, created minimal if needed)."""
    node: Any = instance  # a dict or, below a '*', a list
    sub = resolve(schema, schema)
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if part == "*":
            items = resolve(schema, sub.get("items", {}))
            if not node:
                node.append(minimal(schema, items))
            if last:
                node[0] = value
            else:
                node, sub = node[0], items
        else:
            prop = resolve(schema, (sub.get("properties") or {}).get(part, {}))
            if last:
                node[part] = value
            else:
                if part not in node:
                    node[part] = [] if prop.get("type") == "array" else minimal(schema, prop)
                node, sub = node[part], prop
    return instance


def def_uses(schema: dict, definition: str) -> Iterable[tuple]:
    """Instance paths (with '*') of the properties of ``schema`` that $ref ``definition``."""
    target = f"#/$defs/{definition}"

    def visit(node: Any, path: tuple, depth: int) -> Iterable[tuple]:
        if not isinstance(node, dict) or depth > 6:
            return
        for name, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict):
                if sub.get("$ref") == target:
                    yield path + (name,)
                yield from visit(resolve(schema, sub), path + (name,), depth + 1)
        items = node.get("items")
        if isinstance(items, dict):
            if items.get("$ref") == target:
                yield path + ("*",)
            yield from visit(resolve(schema, items), path + ("*",), depth + 1)

    yield from visit(schema, (), 0)


def probe_values(keyword: str, bound: Any) -> list[tuple[str, Any, bool]]:
    """(label, value, valid) at limit-1, limit and limit+1 for one schema keyword."""
    if keyword == "minimum":
        return [("min-1", bound - 1, False), ("min", bound, True), ("min+1", bound + 1, True)]
    if keyword == "maximum":
        return [("max-1", bound - 1, True), ("max", bound, True), ("max+1", bound + 1, False)]
    if keyword == "minLength":
        out = [("min", "a" * bound, True), ("min+1", "a" * (bound + 1), True)]
        return ([("min-1", "a" * (bound - 1), False)] if bound > 0 else []) + out
    if keyword == "maxLength":
        return [("max-1", "a" * (bound - 1), True), ("max", "a" * bound, True),
                ("max+1", "a" * (bound + 1), False)]
    if keyword == "pattern":
        return [("match", "a-b_c.d:e9", True), ("no-match", "a b!", False)]
    if keyword == "x-maxJsonBytes":  # a JSON string of n characters is n + 2 bytes
        return [(label, {"$repeat": ["a", bound - 2 + delta]}, delta <= 0)
                for label, delta in (("max-1", -1), ("max", 0), ("max+1", 1))]
    return []


def _limit_vectors(profile: Any, validator: BunqueueValidator, enc: FrameEncoder) -> list[dict]:
    model = profile.model
    out = []
    for limit in profile.limits.values():
        for _key, path in limit.uses:
            keyword = path[-1]
            if path[0] == "definitions":
                targets = [(c, u) for c in model.commands.values()
                           for u in def_uses(dict(c.request), path[1])]
                bound = profile.tree["definitions"][path[1]][keyword]
                node = profile.tree["definitions"][path[1]]
            elif path[0] == "commands" and path[2] == "request":
                cmd = model.commands[path[1]]
                props = path[3:-1]
                targets = [(cmd, tuple(p for p in props if p not in ("properties", "items")))]
                node = profile.tree
                for part in path[:-1]:
                    node = node[part]
                bound = node[keyword]
            else:
                continue  # framing limits are probed by the stream vectors
            if not targets:
                continue
            cmd, field = targets[0]  # one command per limit keeps the files readable
            by_kw = node.get("x-keywordRequirements") or {}
            rid = by_kw.get(keyword) or limit.requirement
            for label, value, valid in probe_values(keyword, bound):
                request = dict(minimal(dict(cmd.request)))
                set_path(dict(cmd.request), request, field, from_json(value))
                vec = {"id": f"bq.limit.{limit.name}.{keyword}.{label}", "kind": "message",
                       "direction": "request", "command": cmd.name,
                       "field": "/" + "/".join(str(p) for p in field),
                       "value": _repeat_aware(request, field, value), "valid": valid,
                       "violations": [] if valid else [rid]}
                payload = enc.payload(request)
                if len(payload) <= HEX_LIMIT:
                    vec["hex"] = _frame(payload).hex()
                out.append(vec)
    return out


def _repeat_aware(request: dict, field: tuple, value: Any) -> Any:
    """The request in JSON form, keeping a ``$repeat`` value symbolic."""
    j = to_json(request)
    if isinstance(value, dict) and "$repeat" in value:
        node = j
        for part in field[:-1]:
            node = node[0] if part == "*" else node[part]
        last = field[-1]
        if last == "*":
            node[0] = value
        else:
            node[last] = value
    return j


def _command_vectors(profile: Any, enc: FrameEncoder) -> list[dict]:
    out = []
    for cmd in profile.model.commands.values():
        for direction, schema in (("request", cmd.request), ("reply", cmd.response)):
            value = minimal(dict(schema))
            if direction == "request":
                value["reqId"] = "1"
            else:
                value["reqId"] = "1"
            out.append({"id": f"bq.cmd.{cmd.name}.{direction}", "kind": "message",
                        "direction": direction, "command": cmd.name, "value": to_json(value),
                        "hex": enc.encode(value).hex(), "valid": True, "violations": []})
    return out


def _stream(vid: str, doc: str, data: bytes, frames: list, error: tuple | None = None,
            eof: bool = True) -> dict:
    vec = {"id": vid, "kind": "stream", "doc": doc, "hex": data.hex(),
           "frames": [to_json(f) for f in frames], "eof": eof}
    if error is not None:
        kind, requirement, offset = error
        vec["error"] = {"kind": kind, "requirement": requirement, "offset": offset}
    return vec


def _nest(depth: int) -> bytes:
    """A payload whose containers nest ``depth`` levels: {"a": [[...[0]...]]}."""
    return b"\x81\xa1a" + b"\x91" * (depth - 2) + b"\x90"


def _stream_vectors(profile: Any, enc: FrameEncoder) -> list[dict]:
    spec = profile.model
    errs = spec.protocol_errors
    rid = {k: v.requirement for k, v in errs.items()}
    maxf = spec.max_frame_bytes
    depth = spec.max_nesting_depth
    ping = enc.payload({"cmd": "Ping", "reqId": "1"})
    push = enc.payload({"cmd": "PUSH", "queue": "emails", "data": {"to": "a@b.com"}})
    undef_type, undef_data = spec.undefined_ext
    undef = bytes([0xD4, undef_type & 0xFF]) + undef_data
    at = len(enc.prefix(0))  # offset of the first frame's payload
    v = [
        _stream("bq.stream.three-frames", "Three frames back to back.",
                _frame(ping) + _frame(push) + _frame(ping),
                [{"cmd": "Ping", "reqId": "1"},
                 {"cmd": "PUSH", "queue": "emails", "data": {"to": "a@b.com"}},
                 {"cmd": "Ping", "reqId": "1"}]),
        _stream("bq.stream.len-at-max", "A prefix declaring exactly max_frame_bytes is legal; "
                "the frame is incomplete, not an error.", enc.prefix(maxf), [], None,
                eof=False),
        _stream("bq.stream.len-max+1", "A prefix declaring max_frame_bytes + 1 is refused "
                "before any payload.", enc.prefix(maxf + 1), [],
                ("frame_too_large", rid["frame_too_large"], 0)),
        _stream("bq.stream.len-4GiB", "A 4 GiB claim costs nothing.", b"\xff\xff\xff\xff", [],
                ("frame_too_large", rid["frame_too_large"], 0)),
        _stream("bq.stream.truncated-prefix", "The stream ends inside a length prefix.",
                b"\x00\x00", [], ("truncated_frame", rid["truncated_frame"], 0)),
        _stream("bq.stream.truncated-payload", "The stream ends inside a payload, after a "
                "good frame.", _frame(ping) + _frame(push)[:-3], [{"cmd": "Ping", "reqId": "1"}],
                ("truncated_frame", rid["truncated_frame"], len(_frame(ping)))),
        _stream("bq.stream.empty-payload", "A zero-length payload.", _frame(b""), [],
                ("empty_frame", rid["empty_frame"], at)),
        _stream("bq.stream.trailing-bytes", "Bytes after the object inside a frame.",
                _frame(ping + b"\x00"), [], ("trailing_bytes", rid["trailing_bytes"],
                                             len(_frame(ping)))),
        _stream("bq.stream.not-a-map", "The payload is an integer.", _frame(b"\x01"), [],
                ("not_a_map", rid["not_a_map"], at)),
        _stream("bq.stream.array32-claim", "An array32 claiming 2^32-1 items in 5 bytes.",
                _frame(b"\xdd\xff\xff\xff\xff"), [],
                ("container_too_large", rid["container_too_large"], at)),
        _stream("bq.stream.str32-claim", "A str32 claiming 4 GiB as a map value.",
                _frame(b"\x81\xa1a\xdb\xff\xff\xff\xff"), [],
                ("container_too_large", rid["container_too_large"], at)),
        _stream("bq.stream.map32-claim", "A map32 claiming 2^32-1 entries.",
                _frame(b"\xdf\xff\xff\xff\xff"), [],
                ("container_too_large", rid["container_too_large"], at)),
        _stream("bq.stream.invalid-utf8", "A str that is not UTF-8.",
                _frame(b"\x81\xa3cmd\xa2\xff\xfe"), [], ("invalid_utf8", rid["invalid_utf8"], at)),
        _stream("bq.stream.depth-at-max", f"Containers nested exactly {depth} deep.",
                _frame(_nest(depth)), [_nested_value(depth)]),
        _stream("bq.stream.depth-max+1", f"Containers nested {depth + 1} deep.",
                _frame(_nest(depth + 1)), [], ("too_deep", rid["too_deep"], at)),
        _stream("bq.stream.depth-10000", "10,000 nested arrays: refused, no stack overflow.",
                _frame(b"\x91" * 10000 + b"\x00"), [], ("too_deep", rid["too_deep"], at)),
        _stream("bq.stream.unknown-ext", "An extension type that is not documented.",
                _frame(b"\x81\xa1a\xd4\x05\x00"), [],
                ("unknown_extension", rid["unknown_extension"], at)),
        _stream("bq.stream.map-key-map", "A map used as a map key.",
                _frame(b"\x81\x81\xa1a\x01\x02"), [], ("invalid_map_key", rid["invalid_map_key"], at)),
        _stream("bq.stream.reply-error-then-continue", "A bad payload consumes only its frame; "
                "the next frame decodes.", _frame(b"\xc1") + _frame(ping), [],
                ("invalid_msgpack", rid["invalid_msgpack"], at)),
        # msgpackr's own encodings (document 001's reference encoder), decode-only
        _stream("bq.msgpackr.map16", "msgpackr writes every object as map16.",
                _frame(b"\xde\x00\x02\xa3cmd\xa4Ping\xa5reqId\xa11"),
                [{"cmd": "Ping", "reqId": "1"}]),
        _stream("bq.msgpackr.undefined", "msgpackr writes undefined as fixext 1 type 0.",
                _frame(b"\xde\x00\x03\xa3cmd\xa4PUSH\xa5queue\xa1q\xa8priority" + undef),
                [{"cmd": "PUSH", "queue": "q", "priority": UNDEFINED}]),
        _stream("bq.msgpackr.float64-int", "msgpackr writes an integer beyond 32 bits as float64.",
                _frame(b"\xde\x00\x01\xa9createdAt\xcb\x42\x79\xb7\x6d\xaa\x80\x00\x00"),
                [{"createdAt": 1767225600000.0}]),
        _stream("bq.msgpackr.timestamp", "msgpackr writes Date as the timestamp extension.",
                _frame(b"\xde\x00\x01\xa2at\xd6\xff\x69\x55\xb9\x00"),
                [{"at": _dt.datetime.fromtimestamp(0x6955B900, _dt.UTC)}]),
    ]
    return v


def _nested_value(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value}


def bunqueue_vectors(name: str) -> dict:
    profile = load_profile(name)
    enc = FrameEncoder(profile)
    _ENCODER[:] = [enc]
    validator = BunqueueValidator(profile)
    vectors = (_command_vectors(profile, enc) + _limit_vectors(profile, validator, enc)
               + _stream_vectors(profile, enc))
    return {"format": FORMAT, "protocol": "bunqueue", "profile": name, "vectors": vectors}


def check_bunqueue_vector(profile: Any, vec: dict) -> str | None:
    """Run one vector through the codec; a message describing the mismatch, or None."""
    dec = FrameDecoder(profile)
    if vec["kind"] == "message":
        value = from_json(vec["value"])
        if "hex" in vec:
            try:
                frames = dec.feed(bytes.fromhex(vec["hex"]))
            except ProtocolError as exc:
                return f"decoding raised {exc}"
            if len(frames) != 1 or to_json(frames[0]) != to_json(value):
                return f"decoded {to_json(frames)!r}, expected the vector's value"
            if FrameEncoder(profile).encode(value).hex() != vec["hex"]:
                return "encoding the value does not give the vector's bytes"
        validator = BunqueueValidator(profile)
        if vec["direction"] == "request":
            got = validator.request_violations(value)
        else:
            got = validator.reply_violations(vec["command"], value)
        ids = sorted({v.requirement for v in got})
        if bool(vec["valid"]) != (not got) or not set(vec["violations"]) <= set(ids):
            return f"violations {ids} (valid={not got}), expected {vec['violations']}"
        return None
    data = bytes.fromhex(vec["hex"])
    frames = []
    error = None
    try:
        frames += dec.feed(data)
        if vec.get("eof", True):
            dec.eof()
    except ProtocolError as exc:
        frames += exc.frames
        error = exc
    if to_json(frames) != vec["frames"]:
        return f"frames {to_json(frames)!r}, expected {vec['frames']!r}"
    want = vec.get("error")
    if want is None and error is not None:
        return f"unexpected error {error}"
    if want is not None:
        if error is None:
            return f"expected error {want['kind']}, got none"
        found = {"kind": error.kind, "requirement": error.requirement, "offset": error.offset}
        if found != want:
            return f"error {found}, expected {want}"
    return None
