"""Spec-driven generators: bunqueue commands, their mutations, framing plans, quicx frames;
and the seeded drawing that makes a case a pure function of ``(seed, index)``.

Everything is derived from the loaded profile: valid requests come from each command's
request schema (:mod:`.schema_gen`), boundary values from the ``minimum``/``maximum``/
``minLength``/``maxLength`` of its properties (the ``$limit`` values the loader substituted),
the nesting limit, the safe-integer bound and the ``undefined`` extension from the
``msgpack`` section, quicx opcodes, versions and sizes from the message table. A
:class:`~.case.Case` is a list of raw frames (a frame may lie about its length, be cut short
or hold bytes that are no MessagePack at all), a segmentation (write sizes, down to one byte)
and whether the stream ends with a half-close. A small share of the cases are *slow
trickles* (a few writes with pauses between them, :func:`_trickle`) and, for bunqueue,
*interleavings* (the frames spread over 2-3 connections whose writes are interleaved,
:func:`_interleave`).

Generation schemas are narrowed, never widened, from the spec's: numbers bounded to what
a JavaScript number holds exactly (as the project's codec tests do), no generated extra
properties (the ``extra`` mutation adds them, far cheaper), and long polls bounded by
:data:`WAIT_CAP_MS` so that a valid PULL or WaitJob cannot park a case for a minute.
AddWebhook is left out of valid generation (its URL would make the server deliver to the
internet), and so is SubscribeEvents (pushed event frames carry no reqId and would read as
replies no request asked for).

Reproducibility without replay. The generator functions (``_frame``, ``_case``, the quicx
methods) take a *draw* and call it with :class:`~.gen.Gen` values (:mod:`.gen`), so the same
function runs two ways:

* campaigns (:func:`make_case`): a :class:`~.gen.SeededDraw` samples every choice from
  ``random.Random(f"{seed}:{index}")``, so case ``i`` is regenerated alone from
  ``(seed, i)``, on any machine and with any hypothesis version (hypothesis is not involved);
* the tests: :func:`case_strategy` wraps the same function in a ``@st.composite`` strategy
  (hypothesis' public API), so ``@given`` explores and shrinks it.

Valid bunqueue requests come from a per-seed corpus: message ``j`` of ``seed`` is sampled
from key ``(seed, "corpus", j)`` on first use and cached (:meth:`BunqueueStrategies.corpus_message`),
so a case picks valid messages by index and costs no schema walk once the corpus is warm;
:func:`warm` fills it (:data:`CORPUS_SIZE` messages, well under a second) before a campaign
forks its workers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from typing import Any

import msgspec

from ..codecs.bunqueue import UNDEFINED, FrameEncoder
from ..codecs.quicx import QuicxEncoder
from ..spec import Profile, load_profile
from ..spec.instances import minimal, resolve
from .case import Case
from .gen import (
    BOOL,
    NONE,
    Gen,
    SeededDraw,
    binary,
    builds,
    composite,
    floats,
    ints,
    just,
    lists,
    one_of,
    pick,
    text,
    values,
)
from .schema_gen import from_schema

WAIT_CAP_MS = 2         # the longest a generated valid long poll may wait (a fuzzer setting)
EXCLUDED = frozenset({"AddWebhook", "SubscribeEvents"})   # see the module docstring
WAITS = ("PULL", "PULLB", "WaitJob")   # commands that may park until their timeout
CORPUS_SIZE = 2048     # valid messages per seed a case picks from (drawn lazily, cached)
SENTINEL_PREFIX = "qw-fuzz-"           # reqIds the runner uses for its own Pings

# Slow trickles and interleavings: small shares of the cases (a trickle's pauses are wall time
# the worker waits, not CPU; an interleaving opens one or two connections more), drawn last
# in a case so that every other case of a seed is what it was before they existed.
TRICKLE_SHARE = 128          # one case in this many is a slow trickle
TRICKLE_WRITES = 6           # at most this many writes, a pause after each but the last
TRICKLE_PAUSES_MS = (1, 2, 5, 10, 20)
# The most a case's pauses add up to: well under the runner's bound (DEFAULT_BOUND, 2 s;
# the runner adds the pauses to a case's deadline, so a smaller --bound is not eaten either)
# and three orders of magnitude under the partial-frame timeouts of BQ-FLOW-3 and QX-FLOW-3
# (60 s: a connection idle inside a frame that long may be closed), so that a trickle is
# never judged by a timer the spec allows.
TRICKLE_TOTAL_MS = 50
INTERLEAVE_SHARE = 32        # one bunqueue case in this many runs on several connections
MAX_CONNECTIONS = 3
INTERLEAVE_BYTEWISE_MAX = 48  # a connection's stream up to this long may go byte by byte
EXT_CODES = tuple(c for c in range(-128, 128) if c != 0)   # extension types but timestamp's


# -- bunqueue ---------------------------------------------------------------------------------
def _narrow(node: Any, safe: int) -> Any:
    """A generation schema: numbers within +-safe, no generated extra properties."""
    if isinstance(node, list):
        return [_narrow(v, safe) for v in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in ("properties", "$defs"):
            out[k] = {name: _narrow(sub, safe) for name, sub in v.items()}
        elif k.startswith("x-") or k in ("examples", "description"):
            continue
        else:
            out[k] = _narrow(v, safe)
    kind = out.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "integer" in kinds or "number" in kinds:
        out["minimum"] = max(out.get("minimum", -safe), -safe)
        out["maximum"] = min(out.get("maximum", safe), safe)
    if "object" in kinds and "properties" in out:
        out["additionalProperties"] = False
    if "array" in kinds:
        out["maxItems"] = min(out.get("maxItems", 4), 4)
    return out


def _cap_waits(schema: dict, cmd: str) -> dict:
    """Long polls: ``timeout`` of PULL/PULLB/WaitJob at most WAIT_CAP_MS, and present."""
    props = schema.get("properties") or {}
    if "timeout" in props and cmd in WAITS:
        node = dict(resolve(schema, props["timeout"]))
        node.pop("$ref", None)
        node["maximum"] = min(node.get("maximum", WAIT_CAP_MS), WAIT_CAP_MS)
        node["minimum"] = max(node.get("minimum", 0), 0)
        props["timeout"] = node
        schema["required"] = sorted(set(schema.get("required", [])) | {"timeout"})
    return schema


class BunqueueStrategies:
    """The strategies of one bunqueue profile."""

    def __init__(self, profile: Profile | str = "bunqueue/v2", corpus_size: int = CORPUS_SIZE):
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        spec = self.profile.model
        self.spec = spec
        self.encoder = FrameEncoder(self.profile, wide_integers=True)
        undefined = msgspec.msgpack.Ext(*spec.undefined_ext)
        self._raw = msgspec.msgpack.Encoder(
            enc_hook=lambda o: undefined if o is UNDEFINED else repr(o)).encode
        self.commands = tuple(sorted(c for c in spec.commands if c not in EXCLUDED))
        self.safe = spec.safe_integer
        self.depth = spec.max_nesting_depth
        self.max_frame = spec.max_frame_bytes
        self._cache: dict[str, Gen] = {}
        self.corpus_size = corpus_size
        self._corpus: dict[tuple, dict] = {}
        self._build()

    # -- messages
    def request(self, cmd: str) -> Gen:
        """Valid requests of ``cmd`` (:func:`~.schema_gen.from_schema` over the narrowed
        schema)."""
        if cmd not in self._cache:
            schema = copy.deepcopy(dict(self.spec.commands[cmd].request))
            schema = _cap_waits(_narrow(schema, self.safe), cmd)
            schema.get("properties", {}).pop("reqId", None)  # the case assigns reqIds
            self._cache[cmd] = from_schema(schema, self.safe)
        return self._cache[cmd]

    def valid(self) -> Gen:
        """Valid requests of any command but :data:`EXCLUDED`, the command picked first."""
        return one_of(*(self.request(c) for c in self.commands))

    def _bounded_fields(self, cmd: str) -> list[tuple[str, str, Any]]:
        """(field, keyword, bound) of the command's top-level bounded properties."""
        schema = self.spec.commands[cmd].request
        out = []
        for name, raw in (schema.get("properties") or {}).items():
            node = resolve(schema, raw)
            for kw in ("minimum", "maximum", "minLength", "maxLength"):
                if isinstance(node.get(kw), int):
                    out.append((name, kw, node[kw]))
        return out

    def boundary_pairs(self) -> list[tuple[str, tuple[str, str, Any]]]:
        return [(c, f) for c in self.commands for f in self._bounded_fields(c)]

    def boundary_value(self, cmd: str, bounded: tuple[str, str, Any], beyond: bool
                       ) -> tuple[dict, str]:
        """A minimal valid request with one bounded field at its bound, or one beyond it."""
        name, kw, bound = bounded
        msg = minimal(self.spec.commands[cmd].request)
        if cmd in WAITS and name == "timeout" and kw == "maximum":
            beyond = True  # at the bound a long poll would park the case for its timeout
        step = 1 if beyond else 0
        value = bound + (step if kw in ("maximum", "maxLength") else -step)
        msg[name] = "a" * max(value, 0) if kw.endswith("Length") else value
        return msg, f"limit:{name}.{kw}{'+1' if beyond else ''}"

    def req_id(self) -> Gen:
        """reqIds of every MessagePack type (a string is the documented one)."""
        return one_of(text(12), values(-2**63, 2**64 - 1), floats(), NONE, BOOL,
                      binary(0, 4), lists(ints(0, 9), 0, 2), just({"k": 1}), just(UNDEFINED),
                      just(self.safe + 1))

    MUTATIONS = ("extra", "depth", "ext", "unknown_cmd", "cmd_type", "no_cmd", "wrong_type",
                 "missing", "wide_int", "undefined", "null")
    BYTE_MUTATIONS = ("invalid_utf8", "cut_container", "absent_len", "trailing", "not_a_map",
                      "empty", "random_bytes")

    def _build(self) -> None:
        """The generators a case is drawn from, built once."""
        self.wrong = one_of(values(-2**63, 2**64 - 1), text(4), NONE, BOOL, floats(),
                            lists(ints(-9, 9), 0, 2), binary(0, 3))
        self.wide = pick((self.safe + 1, 2**63 - 1, -2**63, 2**64 - 1, -self.safe - 2))
        self.ext = builds(msgspec.msgpack.Ext, pick(EXT_CODES), binary(0, 8))
        self.reqid = self.req_id()
        self.valid_gen = self.valid()
        self.pairs = tuple(self.boundary_pairs())

    def case_strategy(self, seed: int | str, max_frames: int = 6) -> Any:
        """The hypothesis strategy of this profile's cases for ``seed`` (the tests' ``@given``;
        the valid messages still come from ``seed``'s corpus)."""
        return composite(lambda draw_: _case(self, draw_, seed, max_frames))

    def mutate(self, draw_: Any, msg: dict) -> tuple[Any, str]:
        """One structural mutation of ``msg`` (wrong type, missing or extra field, a wide
        integer, deep nesting, undefined, an extension, an unknown or absent cmd)."""
        fields = [k for k in msg if k != "cmd"]
        options = self.MUTATIONS if fields else self.MUTATIONS[:6]
        how = draw_(pick(options))
        field_ = draw_(pick(tuple(fields))) if how in self.MUTATIONS[6:] else None
        if how == "extra":
            return {**msg, "x" + draw_(text(8)): draw_(self.wrong)}, how
        if how == "depth":
            n = draw_(pick((self.depth - 2, self.depth - 1, self.depth,
                                       self.depth + 3)))
            v: Any = 1
            for _ in range(n):
                v = [v]
            return {**msg, "data": v}, f"depth:{n}"
        if how == "ext":
            return {**msg, "data": draw_(self.ext)}, how
        if how == "unknown_cmd":
            return {**msg, "cmd": draw_(text(10))}, how
        if how == "cmd_type":
            return {**msg, "cmd": draw_(self.wrong)}, how
        if how == "no_cmd":
            return {k: v for k, v in msg.items() if k != "cmd"}, how
        if how == "missing":
            return {k: v for k, v in msg.items() if k != field_}, how
        if how in ("undefined", "null"):
            return {**msg, field_: UNDEFINED if how == "undefined" else None}, how
        value = {"wrong_type": self.wrong, "wide_int": self.wide}[how]
        return {**msg, field_: draw_(value)}, how

    def break_bytes(self, draw_: Any, payload: bytes) -> tuple[bytes, str]:
        """Payload bytes that break MessagePack: invalid UTF-8 in a str, a container or str
        that declares more than follows, trailing bytes, not a map, empty, random bytes."""
        how = draw_(pick(self.BYTE_MUTATIONS))
        if how == "invalid_utf8":
            bad = self.payload({"cmd": "\x00\x00"})  # the two NULs become invalid bytes
            return bad.replace(b"\x00\x00", b"\xff\xfe"), how
        if how == "cut_container":
            return payload[:draw_(ints(1, max(1, len(payload) - 1)))], how
        if how == "absent_len":  # str32 / array32 / map32 / bin32 headers, no bytes after
            head = draw_(pick((b"\xdb\x7f\xff\xff\xff", b"\xdd\x00\x01\x00\x00",
                                          b"\xdf\xff\xff\xff\xff", b"\xc6\x40\x00\x00\x00")))
            return (b"\x81" + head if draw_(BOOL) else head), how
        if how == "trailing":
            return payload + draw_(binary(1, 3)), how
        if how == "not_a_map":
            return self.payload(draw_(pick(((1, 2), 7, "s", None)))), how
        if how == "empty":
            return b"", how
        return draw_(binary(1, 32)), how

    def payload(self, msg: Any) -> bytes:
        """The project's encoder (wide integers as float64 where exact, as msgpackr does);
        what it refuses or cannot read back (an integer beyond 64 bits, a timestamp
        extension with hostile data beside a wide integer) is written raw, as a hostile
        client would, integers clamped to 64 bits."""
        try:
            return self.encoder.payload(msg)
        except Exception:  # noqa: BLE001 - any refusal: write the bytes raw
            return self._raw(_clamp(msg))

    def corpus_message(self, seed: int | str, j: int) -> dict:
        """Valid message ``j`` of ``seed``'s corpus: sampled from key ``(seed, "corpus", j)``
        on first use and cached, so a case costs no schema walk."""
        key = (seed, j)
        msg = self._corpus.get(key)
        if msg is None:
            msg = self._corpus[key] = SeededDraw(f"{seed}:corpus", j)(self.valid_gen)
        return msg

    def clear_corpus(self) -> None:
        self._corpus.clear()


def _frame(bq: BunqueueStrategies, draw_: Any, seed: Any) -> tuple[bytes, list[str]]:
    prefix = bq.encoder.prefix
    kind = draw_(pick(("valid", "valid", "valid", "boundary", "mutate",
                                  "bytes", "lie")))
    if kind == "boundary":
        cmd, bounded = draw_(pick(bq.pairs))
        msg, label = bq.boundary_value(cmd, bounded, draw_(BOOL))
    else:
        msg = bq.corpus_message(seed, draw_(ints(0, bq.corpus_size - 1)))
        label = "valid"
    labels = [f"cmd:{msg.get('cmd')}"]
    if kind == "mutate":
        msg, label = bq.mutate(draw_, msg)
    if draw_(ints(0, 7)) == 0:
        msg = {**msg, "reqId": draw_(bq.reqid)}
        labels.append("reqid_type")
    elif "reqId" not in msg:
        msg = {**msg, "reqId": str(draw_(ints(0, 3)))}  # small: reuse is likely
    labels.append(label)
    payload = bq.payload(msg)
    if kind == "bytes":
        payload, labels[-1] = bq.break_bytes(draw_, payload)
    if kind == "lie":
        how = draw_(pick(("short", "long", "huge")))
        labels[-1] = f"lie:{how}"
        n = len(payload)
        length = {"short": lambda: max(0, n - draw_(ints(1, 3))),
                  "long": lambda: n + draw_(ints(1, 8)),
                  "huge": lambda: bq.max_frame + draw_(ints(1, 2**20))}[how]()
        return prefix(min(length, 2**32 - 1)) + payload, labels
    return prefix(len(payload)) + payload, labels


def _case(bq: BunqueueStrategies, draw_: Any, seed: Any, max_frames: int) -> Case:
    items = [_frame(bq, draw_, seed) for _ in range(draw_(ints(1, max_frames)))]
    frames = [f for f, _ in items]
    labels = sorted({lab for _, ls in items for lab in ls})
    if draw_(ints(0, 9)) == 0:  # coalesce a duplicate of a frame (same reqId)
        frames.append(frames[draw_(ints(0, len(frames) - 1))])
        labels.append("duplicate")
    close = draw_(ints(0, 4)) == 0
    if close and draw_(BOOL):
        frames[-1] = frames[-1][:draw_(ints(1, max(1, len(frames[-1]) - 1)))]
        labels.append("truncated")
    splits = _segmentation(draw_, sum(map(len, frames)))
    case = Case("bunqueue", bq.profile.name, frames, splits, close, labels)
    # drawn last, so that the draws before it (and so every other case) are unchanged
    mode = draw_(ints(0, 255))
    if mode < 256 // INTERLEAVE_SHARE:
        _interleave(draw_, case)
    elif mode < 256 // INTERLEAVE_SHARE + 256 // TRICKLE_SHARE:
        _trickle(draw_, case)
    return case


def _clamp(obj: Any) -> Any:
    if type(obj) is int:
        return max(-2**63, min(obj, 2**64 - 1))
    if type(obj) is dict:
        return {_clamp(k): _clamp(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return [_clamp(v) for v in obj]
    return obj


@cache
def bunqueue_strategies(profile: str) -> BunqueueStrategies:
    return BunqueueStrategies(profile)


def _segmentation(draw_: Any, total: int) -> list[int]:
    """Write sizes: whole (empty list), one byte at a time, or sizes chosen by the case
    (hiredis' fuzzer style: a byte of the case picks each split)."""
    how = draw_(ints(0, 3))
    if how <= 1:
        return []
    if how == 2:
        return [1] * min(total, 4096)
    return [draw_(ints(1, max(1, total))) for _ in range(draw_(ints(1, 8)))]


def _trickle(draw_: Any, case: Case) -> None:
    """Make ``case`` a slow trickle: its stream in 2-:data:`TRICKLE_WRITES` writes of
    case-chosen sizes (a one-byte write among them cuts a prefix), each but the last
    followed by a pause from :data:`TRICKLE_PAUSES_MS`, at most :data:`TRICKLE_TOTAL_MS` in
    all (see there for the bounds)."""
    total = max(1, len(case.stream))
    n = draw_(ints(2, TRICKLE_WRITES))
    case.splits = [draw_(pick((1, 2, 3, max(1, total // n), max(1, total // 2))))
                   for _ in range(n - 1)]
    case.pauses = _pauses(draw_, n - 1)
    case.labels = sorted({*case.labels, "trickle"})


def _pauses(draw_: Any, n: int, choices: tuple[int, ...] = TRICKLE_PAUSES_MS) -> list[int]:
    out, left = [], TRICKLE_TOTAL_MS
    for _ in range(n):
        pause = min(draw_(pick(choices)), left)
        out.append(pause)
        left -= pause
    return out


def _interleave(draw_: Any, case: Case) -> None:
    """Spread ``case``'s frames over 2-3 connections (bunqueue) and interleave their writes:
    each connection's stream is cut into pieces (whole, a few case-chosen sizes, or one byte
    each when short), and the pieces of all connections are merged in a case-chosen order
    that keeps each connection's own, so one connection's frame is split around another's
    writes. A frame is copied onto a second connection half the time (always when the case
    used one connection only): the same request, the same reqId, on two connections. One
    such case in four waits 1 ms after each write, so that the server reads the pieces
    apart."""
    n = draw_(ints(2, MAX_CONNECTIONS))
    conns = [draw_(ints(0, n - 1)) for _ in case.frames]
    if len(set(conns)) == 1 or draw_(BOOL):
        k = draw_(ints(0, len(case.frames) - 1))
        other = (conns[k] + draw_(ints(1, n - 1))) % n
        case.frames = [*case.frames, case.frames[k]]
        conns.append(other)
        case.labels = sorted({*case.labels, "cross_duplicate"})
    dense = {c: k for k, c in enumerate(sorted(set(conns)))}   # connections 0 .. n-1 in use
    conns, n = [dense[c] for c in conns], len(dense)
    pieces: list[list[int]] = []
    for c in range(n):
        total = sum(len(f) for f, fc in zip(case.frames, conns) if fc == c)
        how = draw_(ints(0, 3)) if total else 0
        if how == 0 or total < 2:
            sizes = [total] if total else []
        elif how == 1 and total <= INTERLEAVE_BYTEWISE_MAX:
            sizes = [1] * total
        else:
            cuts = sorted({draw_(ints(1, total - 1)) for _ in range(draw_(ints(1, 4)))})
            sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
        pieces.append(sizes)
    splits, split_conns = [], []
    left = [list(reversed(p)) for p in pieces]
    while any(left):
        c = draw_(pick(tuple(i for i in range(n) if left[i])))
        splits.append(left[c].pop())
        split_conns.append(c)
    case.conns, case.splits, case.split_conns = conns, splits, split_conns
    case.pauses = _pauses(draw_, len(splits) - 1, (1,)) if draw_(ints(0, 3)) == 0 else []
    case.labels = sorted({*case.labels, f"interleave:{n}",
                          *(("trickle",) if case.pauses else ())})


# -- quicx ------------------------------------------------------------------------------------
class QuicxStrategies:
    """Every opcode (known or not) x every version byte class x every length class."""

    def __init__(self, profile: Profile | str = "quicx/v1"):
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.encoder = QuicxEncoder(self.profile)
        self.spec = self.encoder.spec
        self.grid = tuple(self.combinations())
        self.sendable = self._sendable()

    def combinations(self) -> list[tuple[int, int, str]]:
        """(msg_type, version, length class): the exhaustive grid the issue asks for."""
        versions = sorted(self.spec.accepted_versions | {0, 0xFF, self.spec.version + 1})
        codes = sorted(set(self.spec.by_code) | {0, max(self.spec.by_code) + 1, 0xFF})
        return [(c, v, n) for c in codes for v in versions
                for n in ("zero", "min", "fixed", "short", "long", "huge")]

    def _length(self, code: int, how: str, payload: bytes) -> int:
        msg = self.spec.by_code.get(code)
        if how == "zero":
            return 0
        if how == "min":
            return msg.min_size if msg else 1
        if how == "fixed":
            return (msg.fixed_size if msg and msg.fixed_size is not None else len(payload))
        if how == "short":
            return max(0, len(payload) - 1)
        if how == "long":
            return len(payload) + 1
        cap = self.spec.max_payload_bytes
        return min(2**32 - 1, (cap + 1) if cap is not None and cap < 2**32 - 1 else 2**32 - 1)

    def _sendable(self) -> dict[str, Any]:
        spec, enc = self.spec, self.encoder
        sendable = {"MSG_SUBMIT": lambda d: enc.submit(d(pick(("send_email", "x"))),
                                                       d(binary(0, 16))),
                    "MSG_READY": lambda d: enc.ready(),
                    "MSG_HEARTBEAT": lambda d: enc.heartbeat(),
                    "MSG_DONE": lambda d: enc.done(d(ints(0, 2**32 - 1))),
                    "MSG_FAILED": lambda d: enc.failed(d(ints(0, 2**32 - 1)), d(text(8))),
                    "MSG_STATS": lambda d: enc.stats()}
        return {n: sendable[n] for n in sorted(sendable) if n in spec.messages
                and not spec.messages[n].reserved
                and spec.messages[n].transport == spec.transport}

    def valid_frame(self, draw_: Any) -> tuple[bytes, str]:
        """A well-formed frame of a message a client sends."""
        name = draw_(pick(tuple(self.sendable)))
        return self.sendable[name](draw_), f"msg:{name}"

    def frame(self, draw_: Any) -> tuple[bytes, str]:
        """A valid frame half the time, else a point of the grid with a random payload."""
        if draw_(BOOL):
            return self.valid_frame(draw_)
        code, version, how = draw_(pick(self.grid))
        payload = draw_(binary(0, 12))
        length = self._length(code, how, payload)
        raw = self.encoder.frame(code, payload[:length], version=version, length=length)
        return raw, f"grid:{code:#04x}/v{version}/{how}"

    def case(self, draw_: Any, max_frames: int = 6) -> Case:
        items = [self.frame(draw_) for _ in range(draw_(ints(1, max_frames)))]
        frames = [f for f, _ in items]
        close = True  # quicx cases always half-close (see runner)
        labels = sorted({lab for _, lab in items})
        if close and draw_(BOOL):
            frames[-1] = frames[-1][:draw_(ints(1, max(1, len(frames[-1]) - 1)))]
            labels.append("truncated")
        splits = _segmentation(draw_, sum(map(len, frames)))
        case = Case("quicx", self.profile.name, frames, splits, close, labels)
        if draw_(ints(0, TRICKLE_SHARE - 1)) == 0:   # drawn last (see _case)
            _trickle(draw_, case)
        return case

    def case_strategy(self, max_frames: int = 6) -> Any:
        """The hypothesis strategy of this profile's cases (the tests' ``@given``)."""
        return composite(self.case, max_frames)


@cache
def quicx_strategies(profile: str) -> QuicxStrategies:
    return QuicxStrategies(profile)


def case_strategy(protocol: str, profile: str, seed: int | str) -> Any:
    """The hypothesis strategy of the cases :func:`make_case` draws for ``seed``: the same
    generator functions under ``@st.composite`` (hypothesis' public API)."""
    if protocol == "bunqueue":
        return bunqueue_strategies(profile).case_strategy(seed)
    return quicx_strategies(profile).case_strategy()


def warm(protocol: str, profile: str, seed: int | str) -> None:
    """Fill ``seed``'s valid-message corpus (bunqueue; quicx has none), so that forked
    workers inherit it."""
    if protocol != "bunqueue":
        return
    bq = bunqueue_strategies(profile)
    for j in range(bq.corpus_size):
        bq.corpus_message(seed, j)


def make_case(protocol: str, profile: str, seed: int | str, index: int) -> Case:
    """Case ``index`` of the run seeded ``seed``: regenerated alone, without the others, from
    ``random.Random(f"{seed}:{index}")`` (:class:`~.gen.SeededDraw`)."""
    draw_ = SeededDraw(seed, index)
    if protocol == "bunqueue":
        case = _case(bunqueue_strategies(profile), draw_, seed, 6)
    else:
        case = quicx_strategies(profile).case(draw_)
    case.seed, case.index = seed, index
    return case
