"""``queuewire.spec.diff``: what changes between two profiles, and whom each change breaks.

What it does
------------
:func:`diff_trees` compares two merged spec trees of one protocol (a profile's base with its
overlays applied, as ``raw_tree`` returns it) and returns a list of :class:`Change` records:
where (``path``, ``subject``), what changed (``what``: a command, a request or reply field, a
required set, a type or constraint, a limit, an error string or code, an opcode, a message
direction, a layout field, a state table transition, a requirement's level, a behaviour
flag, ...), how (``kind``: added, removed or changed, and ``trend``: widened, narrowed,
raised, ...), the old and new values, and a classification for clients and for servers
separately: ``breaking`` or ``compatible``, with the sentence that says why.
:func:`diff_profiles` does the same for two loaded :class:`~queuewire.spec.model.Profile`.

Design
------
Sans-IO: the module reads no file and imports nothing of queuewire outside ``queuewire.spec``
(the model, and the rules of ``diff_rules``); the command line (``queuewire spec diff``)
finds the trees (a profile name, a spec directory, a git revision) and prints the list. A
profile's tree has its ``$limit`` references substituted; :func:`raw_form` puts them back (each
limit records where it was used), so that a limit that changes is one change, at
``limits.<name>``, and not one more at every schema that uses it.

The walk knows the spec *language* (spec/README.md: commands with request and response JSON
Schemas, definitions, limits, errors, messages with Kaitai layouts, requirements, state
tables as ``transitions`` rows, ...), never a protocol fact: every name, field, opcode and
string compared comes from the two trees. Prose (``doc``, ``description``, ``examples``,
``doc-ref``, a requirement's ``text`` and ``quote``) is not compared.

Who is affected
---------------
Each change has two parties, derived from the trees: a request is sent by the client and a
reply by the server; a definition's parties are those of the schemas that use it; a limit's
sender is whoever sends the values it bounds (its ``$limit`` and ``max-size`` uses); a quicx
message's are its ``from`` and ``to`` roles; a requirement's and a state table row's, the
``subject`` of the requirement. The rules that turn parties into an impact on clients and on
servers are one table, :data:`~queuewire.spec.diff_rules.RULES`, whose module says what
breaking means. A part of a tree no rule names is breaking for both (``other``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .diff_rules import (
    BOTH,
    BREAKING,
    CLIENT,
    CLIENTS,
    COMPATIBLE,
    SERVER,
    SERVERS,
    Impact,
    Sides,
    counterpart,
    definition_directions,
    limit_sides,
    message_pairs,
    message_sides,
    noun,
    rule_for,
    sides_of,
    subject_sides,
    union,
)
from .model import LEVELS, Profile

#: Keys whose values are prose or presentation: not compared.
PROSE = frozenset({"doc", "doc-ref", "description", "title", "examples", "$comment", "category"})
#: Keys that cite a requirement: a change only renames what a finding cites.
CITATIONS = frozenset({"requirement", "x-requirement", "x-keywordRequirements",
                       "answer-requirement"})
#: JSON Schema keywords that say which values are valid (compared as types) and bounds.
TYPE_WORDS = frozenset({"type", "enum", "const", "$ref", "format", "anyOf", "oneOf", "allOf",
                        "not", "x-undefinedAsAbsent", "additionalProperties"})
MIN_WORDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
MAX_WORDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties",
                       "x-maxJsonBytes"})
SUBSCHEMAS = {"items": "[]", "additionalProperties": ".*", "propertyNames": ".<key>",
              "contains": "[]", "not": ""}
BOUND_KEYS = ("min", "max", "value", "pattern", "unit")
#: The order sections are reported in (a loaded profile's tree keeps ``limits`` last, the
#: files do not); sections not named here follow in tree order.
SECTION_ORDER = ("protocol_version", "versions", "capabilities", "transport", "default_port",
                 "default_http_port", "framing", "header", "msgpack", "envelope", "commands",
                 "messages", "definitions", "job_events", "limits", "errors", "error_codes",
                 "protocol_errors", "semantics", "job_states")
MISSING: Any = object()


@dataclass(frozen=True)
class Change:
    """One difference: ``path`` in the tree, ``subject`` (a short name for people), ``what``
    changed and how (``kind``, ``trend``), the values, and the impact on each side."""

    path: str
    subject: str
    what: str
    kind: str                 # added | removed | changed
    trend: str
    old: Any
    new: Any
    clients: Impact
    servers: Impact
    why: str

    @property
    def breaking(self) -> bool:
        return BREAKING in (self.clients, self.servers)

    def breaking_for(self, side: str) -> bool:
        """``side``: ``clients``, ``servers`` or ``both`` (either side)."""
        if side == "clients":
            return self.clients == BREAKING
        if side == "servers":
            return self.servers == BREAKING
        return self.breaking

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProtocolMismatch(ValueError):
    """The two trees are of different protocols: there is nothing to compare."""


def brief(value: Any, limit: int = 70) -> str:
    """A changed value as one short line for a table cell (the command's text, the docs
    page): an element by its message, text or doc line, else its JSON; cut at ``limit``."""
    if value is None:
        return ""
    if isinstance(value, Mapping):
        for key in ("message", "text", "doc", "description"):
            if isinstance(value.get(key), str):
                value = value[key]
                break
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def summary(changes: list[Change]) -> dict[str, int]:
    return {"changes": len(changes), "breaking": sum(c.breaking for c in changes),
            "breaking_for_clients": sum(c.clients == BREAKING for c in changes),
            "breaking_for_servers": sum(c.servers == BREAKING for c in changes)}


def raw_form(profile: Profile) -> dict[str, Any]:
    """A profile's tree with its ``$limit`` references put back where the loader
    substituted them (each limit's ``uses``), as the spec files write it."""
    tree: dict[str, Any] = _plain(profile.tree)  # a copy: the profile stays as it is
    for name, limit in profile.limits.items():
        for key, where in limit.uses:
            node: Any = tree
            for step in where[:-1]:
                node = node[step]
            node[where[-1]] = {"$limit": f"{name}.{key}"}
    return tree


def diff_profiles(old: Profile, new: Profile) -> list[Change]:
    """The changes from profile ``old`` to profile ``new``."""
    if old.protocol != new.protocol:
        raise ProtocolMismatch(f"{old.name} is a {old.protocol} profile and {new.name} a "
                               f"{new.protocol} one: only profiles of one protocol compare")
    return diff_trees(raw_form(old), raw_form(new))


def diff_trees(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """The changes from merged spec tree ``old`` to ``new`` (see the module's docstring)."""
    if old.get("protocol") != new.get("protocol"):
        raise ProtocolMismatch(f"the trees are of protocols {old.get('protocol')!r} and "
                               f"{new.get('protocol')!r}: only one protocol's trees compare")
    walk = _Walk(old, new)
    walk.run()
    return walk.changes


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _keys(old: Any, new: Any) -> list[Any]:
    old = old if isinstance(old, Mapping) else {}
    new = new if isinstance(new, Mapping) else {}
    return list(old) + [k for k in new if k not in old]


def _leaves(old: Any, new: Any, path: tuple[str, ...]
            ) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """``(path, old, new)`` of every differing leaf below two values (MISSING when absent),
    prose keys skipped; a list is a leaf."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in _keys(old, new):
            if key not in PROSE:
                yield from _leaves(old.get(key, MISSING), new.get(key, MISSING), path + (str(key),))
    elif old != new:
        yield path, old, new


def render_path(path: tuple[str, ...]) -> str:
    out = ""
    for part in path:
        if part.startswith("["):
            out += part
        elif re.fullmatch(r"[A-Za-z0-9_$-]+", part):
            out += ("." if out else "") + part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def _is_layout(old: Any, new: Any) -> bool:
    """Two Kaitai field lists (maps with an ``id``; one of them may be empty)."""
    return isinstance(old, list) and isinstance(new, list) and bool(old or new) and all(
        isinstance(f, Mapping) and "id" in f for f in old + new)


def _value(v: Any) -> Any:
    return None if v is MISSING else v


class _Walk:
    """One comparison: the two trees, what is derived from them, and the changes found."""

    def __init__(self, old: Mapping[str, Any], new: Mapping[str, Any]):
        self.old, self.new = old, new
        self.changes: list[Change] = []
        self.def_dirs = _merge(definition_directions(old), definition_directions(new))
        self.limit_sides = _merge(limit_sides(old), limit_sides(new))

    # -- emitting ----------------------------------------------------------------------------
    def emit(self, path: tuple[str, ...], kind: str, what: str, old: Any, new: Any,
             parties: list[tuple[str, Sides, Sides]], trend: str = "", subject: str = "") -> None:
        """One change; ``parties`` is ``[(what, a, b)]``, several when a definition is used
        both ways (each side's impact is the worst of them)."""
        impact = {CLIENT: COMPATIBLE, SERVER: COMPATIBLE}
        whys: list[str] = []
        for part_what, a, b in parties:
            rule = rule_for(part_what, kind, trend)
            for side in (CLIENT, SERVER):
                if (side in a and rule.a == BREAKING) or (side in b and rule.b == BREAKING):
                    impact[side] = BREAKING
            why = rule.why.format(a=noun(a), b=noun(b))
            if why not in whys:
                whys.append(why)
        shown = parties[0][0] if len(parties) == 1 else what
        self.changes.append(Change(
            path=render_path(path), subject=subject or render_path(path), what=shown, kind=kind,
            trend=trend, old=_value(old), new=_value(new), clients=impact[CLIENT],
            servers=impact[SERVER], why=" / ".join(whys)))

    def one(self, path: tuple[str, ...], kind: str, what: str, old: Any, new: Any, a: Sides,
            b: Sides, trend: str = "", subject: str = "") -> None:
        self.emit(path, kind, what, old, new, [(what, a, b)], trend, subject)

    def element_leaves(self, path: tuple[str, ...], old: Any, new: Any, what: str, a: Sides,
                       b: Sides, subject: str) -> None:
        """Differences inside an element both trees have: citations, layouts, the rest a
        ``changed`` of the element's ``what``."""
        for where, o, n in _leaves(old, new, path):
            inner = f"{subject} {render_path(where[len(path):])}".strip()
            if where[-1] in CITATIONS:
                self.one(where, "changed", "citation", o, n, BOTH, BOTH, subject=inner)
            elif _is_layout(o, n):
                self.layout(where, o, n, a, b, inner)
            else:
                self.one(where, "changed", what, o, n, a, b, subject=inner)

    def element_map(self, path: tuple[str, ...], old: Any, new: Any, what: str,
                    parties: Any = None) -> None:
        """A map of named elements: each added, removed or changed. ``parties(name, value,
        tree)`` gives ``(a, b)`` (both sides by default)."""
        old = old if isinstance(old, Mapping) else {}
        new = new if isinstance(new, Mapping) else {}
        for name in _keys(old, new):
            p = path + (str(name),)
            if name in PROSE:
                continue
            if name in CITATIONS:
                if old.get(name) != new.get(name):
                    self.one(p, "changed", "citation", old.get(name), new.get(name), BOTH, BOTH)
                continue
            o, n = old.get(name, MISSING), new.get(name, MISSING)
            tree = self.new if o is MISSING else self.old
            a, b = parties(name, n if o is MISSING else o, tree) if parties else (BOTH, BOTH)
            subject = f"{what} {name}"
            if o is MISSING:
                self.one(p, "added", what, o, n, a, b, subject=subject)
            elif n is MISSING:
                self.one(p, "removed", what, o, n, a, b, subject=subject)
            elif o != n:
                self.element_leaves(p, o, n, what, a, b, subject)

    # -- the walk ----------------------------------------------------------------------------
    def run(self) -> None:
        sections = {
            "commands": self.commands, "definitions": self.definitions,
            "envelope": self.envelope, "job_events": self.job_events, "limits": self.limits,
            "messages": self.messages, "requirements": self.requirements,
            "capabilities": self.capabilities,
        }
        generic = {
            "errors": ("error string", self.error_parties), "error_codes": ("error code", self.code_parties),
            "protocol_errors": ("protocol error", None), "semantics": ("semantics", None),
            "job_states": ("state", None), "safeguards": ("safeguard", None),
            "client_defaults": ("documented default", self.subject_parties),
            "worker_defaults": ("documented default", self.subject_parties),
            "requirement_kinds": ("spec metadata", None), "roles": ("role", None),
        }
        whole = {"framing": "wire format", "header": "wire format", "msgpack": "wire format",
                 "versions": "version", "protocol_version": "version", "transport": "endpoint",
                 "default_port": "endpoint", "default_http_port": "endpoint",
                 "resources": "tool data"}
        found = _keys(self.old, self.new)
        rank = {k: (SECTION_ORDER.index(k) if k in SECTION_ORDER else len(SECTION_ORDER), i)
                for i, k in enumerate(found)}
        for key in sorted(found, key=rank.__getitem__):
            o, n = self.old.get(key, MISSING), self.new.get(key, MISSING)
            if key in PROSE or key == "protocol" or o == n:
                continue
            p = (str(key),)
            if key in sections:
                sections[key](p, o, n)
            elif key == "webhook_events":
                self.element_leaves(p, {k: v for k, v in _map(o).items() if k != "events"},
                                    {k: v for k, v in _map(n).items() if k != "events"},
                                    "webhook event", CLIENTS, SERVERS, "webhook events")
                self.element_map(p + ("events",), _map(o).get("events"), _map(n).get("events"),
                                 "webhook event", lambda *_: (CLIENTS, SERVERS))
            elif key in generic:
                what, parties = generic[key]
                self.element_map(p, o, n, what, parties)
            elif any(isinstance(v, Mapping) and "transitions" in v for v in (o, n)):
                self.machine(p, _map(o), _map(n))
            elif o is MISSING or n is MISSING:
                self.one(p, "removed" if n is MISSING else "added", whole.get(key, "other"), o, n,
                         BOTH, BOTH)
            else:
                self.element_leaves(p, o, n, whole.get(key, "other"), BOTH, BOTH, str(key))

    # -- bunqueue ----------------------------------------------------------------------------
    def commands(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        old, new = _map(old), _map(new)
        for name in _keys(old, new):
            p = path + (name,)
            o, n = old.get(name, MISSING), new.get(name, MISSING)
            if o is MISSING or n is MISSING:
                self.one(p, "added" if o is MISSING else "removed", "command", o, n, CLIENTS,
                         SERVERS, subject=name)
                continue
            self.schema(p + ("request",), _map(o.get("request")), _map(n.get("request")),
                        {"request"}, f"{name} request", "")
            self.schema(p + ("response",), _map(o.get("response")), _map(n.get("response")),
                        {"reply"}, f"{name} reply", "")
            rest = [{k: v for k, v in x.items() if k not in ("request", "response")} for x in (o, n)]
            self.element_leaves(p, rest[0], rest[1], "command", CLIENTS, SERVERS, name)

    def definitions(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        old, new = _map(old), _map(new)
        for name in _keys(old, new):
            o, n = old.get(name, MISSING), new.get(name, MISSING)
            if o is MISSING or n is MISSING:
                self.one(path + (name,), "added" if o is MISSING else "removed", "definition",
                         o, n, BOTH, BOTH, subject=f"definition {name}")
            else:
                dirs = self.def_dirs.get(name) or {"request", "reply"}
                self.schema(path + (name,), _map(o), _map(n), dirs, f"definition {name}", "")

    def envelope(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        old, new = _map(old), _map(new)
        for key in _keys(old, new):
            if key in PROSE:
                continue
            o, n = _map(old.get(key)), _map(new.get(key))
            if key == "error_reply":
                self.schema(path + (key,), o, n, {"reply"}, "error reply", "")
            else:
                direction = "request" if key == "request" else "reply"
                self.properties(path + (key,), {"properties": o}, {"properties": n}, {direction},
                                f"every {direction}", "")

    def job_events(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        if old is MISSING or new is MISSING:
            self.one(path, "added" if old is MISSING else "removed", "event frames", old, new,
                     SERVERS, CLIENTS, subject="job events")
            return
        self.schema(path + ("frame",), _map(old.get("frame")), _map(new.get("frame")), {"reply"},
                    "event frame", "")
        self.element_map(path + ("types",), old.get("types"), new.get("types"), "event type",
                         lambda *_: (SERVERS, CLIENTS))
        rest = [{k: v for k, v in x.items() if k not in ("frame", "types")} for x in (old, new)]
        self.element_leaves(path, rest[0], rest[1], "event frames", SERVERS, CLIENTS, "job events")

    def capabilities(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        before, after = _members(old), _members(new)
        for kind, items in (("removed", [m for m in before if m not in after]),
                            ("added", [m for m in after if m not in before])):
            for m in items:
                self.one(path + (f"[{m}]",), kind, "capability", m if kind == "removed" else None,
                         m if kind == "added" else None, CLIENTS, SERVERS, subject=f"capability {m}")

    # -- JSON Schema -------------------------------------------------------------------------
    def schema_parties(self, dirs: set[str], what: str) -> list[tuple[str, Sides, Sides]]:
        out = []
        for d in sorted(dirs):
            a, b = (CLIENTS, SERVERS) if d == "request" else (SERVERS, CLIENTS)
            out.append((f"{d} {what}" if what == "field" else what, a, b))
        return out

    def schema_emit(self, path: tuple[str, ...], kind: str, what: str, old: Any, new: Any,
                    dirs: set[str], trend: str, subject: str) -> None:
        self.emit(path, kind, what, old, new, self.schema_parties(dirs, what), trend, subject)

    def schema(self, path: tuple[str, ...], old: Mapping[str, Any], new: Mapping[str, Any],
               dirs: set[str], where: str, field: str) -> None:
        subject = f"{where} {field}".strip() if field else where
        for key in _keys(old, new):
            o, n = old.get(key, MISSING), new.get(key, MISSING)
            if o == n or key in PROSE:
                continue
            p = path + (str(key),)
            if key in CITATIONS:
                self.one(p, "changed", "citation", o, n, BOTH, BOTH, subject=subject)
            elif key == "properties":
                self.properties(p, old, new, dirs, where, field)
            elif key == "required":
                self.required(p, old, new, dirs, where, field)
            elif key in SUBSCHEMAS and isinstance(o, Mapping) and isinstance(n, Mapping):
                self.schema(p, o, n, dirs, where, field + SUBSCHEMAS[key])
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(o, list) \
                    and isinstance(n, list) and len(o) == len(n):
                for i, (x, y) in enumerate(zip(o, n)):
                    if x != y:
                        self.schema(p + (f"[{i}]",), _map(x), _map(y), dirs, where, field)
            elif key == "default":
                self.schema_emit(p, "changed", "field default", o, n, dirs, "", subject)
            elif key == "x-secret":
                self.one(p, "changed", "tool data", o, n, BOTH, BOTH, subject=subject)
            elif key in TYPE_WORDS:
                self.schema_emit(p, "changed", "type", o, n, dirs, self.type_trend(key, o, n),
                                 f"{subject} ({key})")
            else:
                self.schema_emit(p, "changed", "constraint", o, n, dirs,
                                 self.bound_trend(key, o, n), f"{subject} ({key})")

    def properties(self, path: tuple[str, ...], old: Mapping[str, Any], new: Mapping[str, Any],
                   dirs: set[str], where: str, field: str) -> None:
        op, np = _map(old.get("properties")), _map(new.get("properties"))
        for name in _keys(op, np):
            p, label = path + (name,), f"{field}.{name}" if field else name
            o, n = op.get(name, MISSING), np.get(name, MISSING)
            if o is MISSING or n is MISSING:
                kind = "added" if o is MISSING else "removed"
                side, other = (new, old) if o is MISSING else (old, new)
                trend = "required" if name in _members(side.get("required")) else "optional"
                if other.get("additionalProperties") is False:
                    trend += " closed"
                self.schema_emit(p, kind, "field", o, n, dirs, trend, f"{where} {label}")
            elif o != n:
                self.schema(p, _map(o), _map(n), dirs, where, label)

    def required(self, path: tuple[str, ...], old: Mapping[str, Any], new: Mapping[str, Any],
                 dirs: set[str], where: str, field: str) -> None:
        before, after = _members(old.get("required")), _members(new.get("required"))
        op, np = _map(old.get("properties")), _map(new.get("properties"))
        for kind, items in (("removed", [m for m in before if m not in after]),
                            ("added", [m for m in after if m not in before])):
            for m in items:
                if (kind == "added" and m in np and m not in op) or \
                        (kind == "removed" and m in op and m not in np):
                    continue  # the field itself came or went: reported as the field
                label = f"{field}.{m}" if field else str(m)
                self.schema_emit(path + (f"[{m}]",), kind, "required", kind == "removed",
                                 kind == "added", dirs, "", f"{where} {label}")

    def resolve(self, value: Any, tree: Mapping[str, Any]) -> Any:
        """A ``{$limit: name.key}`` as its value in ``tree`` (for comparing bounds)."""
        if isinstance(value, Mapping) and set(value) == {"$limit"}:
            name, _, key = str(value["$limit"]).partition(".")
            return _map(_map(tree.get("limits")).get(name)).get(key, value)
        return value

    def type_trend(self, key: str, old: Any, new: Any) -> str:
        if old is MISSING:  # a keyword that was absent allowed anything
            return "widened" if new is True else "narrowed"
        if new is MISSING:
            return "narrowed" if old is True else "widened"
        if key == "additionalProperties" and isinstance(old, bool) and isinstance(new, bool):
            return "widened" if new else "narrowed"
        if key in ("type", "enum"):
            a, b = _value_set(key, old), _value_set(key, new)
            return "widened" if a < b else "narrowed" if b < a else ""
        return ""

    def bound_trend(self, key: str, old: Any, new: Any) -> str:
        if old is MISSING:
            return "narrowed"
        if new is MISSING:
            return "widened"
        o, n = self.resolve(old, self.old), self.resolve(new, self.new)
        if not (isinstance(o, (int, float)) and isinstance(n, (int, float))):
            return ""
        if key in MIN_WORDS:
            return "widened" if n < o else "narrowed"
        if key in MAX_WORDS:
            return "widened" if n > o else "narrowed"
        return ""

    # -- limits, requirements, state tables ----------------------------------------------------
    def limits(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        old, new = _map(old), _map(new)
        for name in _keys(old, new):
            p, o, n = path + (name,), old.get(name, MISSING), new.get(name, MISSING)
            a = self.limit_sides.get(name) or BOTH
            b = counterpart(a)
            subject = f"limit {name}"
            if o is MISSING or n is MISSING:
                tree = self.new if o is MISSING else self.old
                used = "used" if name in limit_sides(tree) else ""
                self.one(p, "added" if o is MISSING else "removed", "limit", o, n, a, b, used,
                         subject)
                continue
            bo = {k: o[k] for k in BOUND_KEYS if k in o}
            bn = {k: n[k] for k in BOUND_KEYS if k in n}
            if bo != bn:
                self.one(p, "changed", "limit", bo, bn, a, b, _limit_trend(o, n), subject)
            rest = [{k: v for k, v in x.items() if k not in BOUND_KEYS} for x in (o, n)]
            self.element_leaves(p, rest[0], rest[1], "limit", a, b, subject)

    def subject_parties(self, name: str, value: Any, tree: Mapping[str, Any]) -> tuple[Sides, Sides]:
        a = subject_sides(tree, _map(value).get("requirement"))
        return a, counterpart(a)

    def error_parties(self, name: str, value: Any, tree: Mapping[str, Any]) -> tuple[Sides, Sides]:
        return SERVERS, CLIENTS  # error strings travel in the error reply, a reply

    def code_parties(self, name: str, value: Any, tree: Mapping[str, Any]) -> tuple[Sides, Sides]:
        """Error codes are sent by the senders of the messages whose layout names them."""
        a: set[str] = set()
        for msg in _map(tree.get("messages")).values():
            if any(_map(f).get("enum") == "error_codes" for f in msg.get("layout") or ()):
                a |= message_sides(msg, tree)[0]
        sides = frozenset(a) or BOTH
        return sides, counterpart(sides)

    def requirements(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        old, new = _map(old), _map(new)
        must = LEVELS[0]
        for rid in _keys(old, new):
            p, o, n = path + (rid,), _map(old.get(rid)), _map(new.get(rid))
            subject = f"requirement {rid}"
            if not o or not n:
                req = n or o
                a = sides_of(req.get("subject"))
                shown = f"{req.get('level')} ({req.get('subject')}): {req.get('text', '')}"
                self.one(p, "added" if not o else "removed", "requirement",
                         None if not o else shown, shown if not o else None, a, counterpart(a),
                         "binding" if req.get("level") == must else "advisory", subject)
                continue
            lo, ln = o.get("level"), n.get("level")
            so, sn = o.get("subject"), n.get("subject")
            if lo != ln:
                trend = "raised" if ln == must else "lowered" if lo == must else "advisory"
                a = sides_of(sn)
                self.one(p + ("level",), "changed", "requirement", lo, ln, a, counterpart(a),
                         trend, subject)
            if so != sn:
                a = sides_of(so) | sides_of(sn)
                self.one(p + ("subject",), "changed", "requirement", so, sn, a, counterpart(a),
                         "rebound" if must in (lo, ln) else "advisory", subject)
            if o.get("basis") != n.get("basis"):
                a = sides_of(sn)
                self.one(p + ("basis",), "changed", "requirement", o.get("basis"),
                         n.get("basis"), a, counterpart(a), "basis", subject)

    def machine(self, path: tuple[str, ...], old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """A state table: rows matched by (from, event); ``initial``; the rest as leaves."""
        def rows(m: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
            return {(str(r.get("from")), str(r.get("event"))): r for r in m.get("transitions") or ()}

        name = path[-1]
        ro, rn = rows(old), rows(new)
        every: set[str] = set()
        for (src, event) in list(ro) + [k for k in rn if k not in ro]:
            o, n = _map(ro.get((src, event))), _map(rn.get((src, event)))
            a = subject_sides(self.old, o.get("requirement")) if o else \
                subject_sides(self.new, n.get("requirement"))
            every |= a
            p = path + ("transitions", f"[{src} --{event}-->]")
            subject = f"{name}: {src} --{event}-->"
            if not o or not n:
                self.one(p, "removed" if o else "added", "transition", o.get("to"), n.get("to"),
                         a, counterpart(a), subject=subject)
            elif o.get("to") != n.get("to"):
                self.one(p, "changed", "transition", o.get("to"), n.get("to"), a, counterpart(a),
                         subject=subject)
            elif (o.get("replies") or {}) != (n.get("replies") or {}):
                self.one(p + ("replies",), "changed", "replies", o.get("replies"),
                         n.get("replies"), a, counterpart(a), subject=subject)
            elif o.get("requirement") != n.get("requirement"):
                self.one(p + ("requirement",), "changed", "citation", o.get("requirement"),
                         n.get("requirement"), BOTH, BOTH, subject=subject)
        if old.get("initial") != new.get("initial"):
            a = frozenset(every) or BOTH
            self.one(path + ("initial",), "changed", "initial state", old.get("initial"),
                     new.get("initial"), a, counterpart(a), subject=str(name))
        rest = [{k: v for k, v in m.items() if k not in ("transitions", "initial")} for m in (old, new)]
        self.element_leaves(path, rest[0], rest[1], "other", BOTH, BOTH, str(name))

    # -- quicx ---------------------------------------------------------------------------------
    def messages(self, path: tuple[str, ...], old: Any, new: Any) -> None:
        old, new = _map(old), _map(new)
        for name in _keys(old, new):
            p, o, n = path + (name,), old.get(name, MISSING), new.get(name, MISSING)
            if o is MISSING or n is MISSING:
                msg, tree = (n, self.new) if o is MISSING else (o, self.old)
                a, b = message_sides(msg, tree)
                self.one(p, "added" if o is MISSING else "removed", "message",
                         _code_of(o), _code_of(n), a, b, subject=name)
                continue
            ao, bo = message_sides(o, self.old)
            an, bn = message_sides(n, self.new)
            if o.get("code") != n.get("code"):
                self.one(p + ("code",), "changed", "opcode", o.get("code"), n.get("code"),
                         ao | an, bo | bn, subject=name)
            po, pn = message_pairs(o, self.old), message_pairs(n, self.new)
            for kind, pairs in (("removed", po - pn), ("added", pn - po)):
                if pairs:
                    shown = sorted(f"{s} -> {r}" for s, r in pairs)
                    self.one(p + ("[directions]",), kind, "direction",
                             shown if kind == "removed" else None, shown if kind == "added" else None,
                             union(sides_of(s) for s, _ in pairs),
                             union(sides_of(r) for _, r in pairs), subject=name)
            rest = [{k: v for k, v in x.items() if k not in ("code", "from", "to")} for x in (o, n)]
            self.element_leaves(p, rest[0], rest[1], "message", ao | an, bo | bn, name)

    def layout(self, path: tuple[str, ...], old: list[Any], new: list[Any], a: Sides, b: Sides,
               subject: str) -> None:
        fo = {str(f["id"]): f for f in old}
        fn = {str(f["id"]): f for f in new}
        for fid in _keys(fo, fn):
            p = path + (f"[{fid}]",)
            o, n = fo.get(fid, MISSING), fn.get(fid, MISSING)
            if o is MISSING or n is MISSING:
                self.one(p, "added" if o is MISSING else "removed", "layout field", o, n, a, b,
                         subject=f"{subject} {fid}")
            else:
                self.element_leaves(p, o, n, "layout field", a, b, f"{subject} {fid}")
        order_o = [f for f in fo if f in fn]
        order_n = [f for f in fn if f in fo]
        if order_o != order_n:
            self.one(path, "changed", "layout field", order_o, order_n, a, b, "moved", subject)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _members(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _merge(*maps: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in maps:
        for k, v in m.items():
            out[k] = out[k] | v if k in out else v
    return out


def _value_set(key: str, value: Any) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    names = {json.dumps(v, sort_keys=True) for v in items}
    if key == "type" and '"number"' in names:
        names.add('"integer"')  # an integer is a number
    return frozenset(names)


def _limit_trend(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    if any(old.get(k) != new.get(k) for k in ("value", "pattern", "unit")):
        return ""
    inf = float("inf")
    lo, ln = old.get("min"), new.get("min")
    ho, hn = old.get("max"), new.get("max")
    lo, ln = (-inf if x is None else x for x in (lo, ln))
    ho, hn = (inf if x is None else x for x in (ho, hn))
    if not all(isinstance(x, (int, float)) for x in (lo, ln, ho, hn)):
        return ""
    if ln <= lo and hn >= ho:
        return "widened"
    if ln >= lo and hn <= ho:
        return "narrowed"
    return ""


def _code_of(msg: Any) -> Any:
    return _map(msg).get("code") if msg is not MISSING else None


