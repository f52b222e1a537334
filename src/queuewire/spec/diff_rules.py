"""The classification rules of ``queuewire spec diff`` (:mod:`queuewire.spec.diff`): one table,
in one place, that says whom each kind of change breaks.

Parties and sides
-----------------
Every change has two parties, ``a`` and ``b``, each a set of sides (client, server). What
they are depends on what changed, and the comment above each group of rules says it: the
sender and the receiver of a field, message, bounded value or error; the side a requirement
or a state table binds and its counterpart; the side that uses a command or capability and the
side that provides it. The walk of :mod:`~queuewire.spec.diff` assigns them, with the
functions at the end of this module. The role words of the spec language map to sides:
``server`` and ``daemon`` name the server side, ``peer`` and ``any`` both sides, and every
other role (client, producer, worker, monitor) the client side.

What breaking means
-------------------
"Breaking for clients": a client written against the old profile fails against a server of the
new one (a refusal, a frame it cannot read, a value or behaviour it relied on that is gone).
"Breaking for servers": a server written against the old profile fails the new profile's
clients or its requirements (a command it does not implement, a MUST it does not follow).
A side is broken by a change when the change's rule breaks a party the side belongs to.

The table
---------
:data:`RULES` is keyed by ``(what, kind, trend)``: ``kind`` is added, removed or changed (``*``
when the rule does not depend on it) and ``trend`` refines it (a limit or type ``widened`` or
``narrowed``, a field ``required`` or ``optional``, a requirement ``binding`` or ``advisory``,
a level ``raised`` or ``lowered``). Each :class:`Rule` gives the impact on party ``a`` and on
party ``b`` and the sentence why, ``{a}`` and ``{b}`` standing for the sides ("client",
"server", or "peer" for both); "old" and "new" name the profile a side was written for. The
spec leaves JSON Schema ``additionalProperties`` open (spec/README.md: fields beyond the
documents are reported as *extra*, not refused), and the field rules say so; a schema that
closes it gets the stricter rule (the trend ends in ``closed``). :func:`rule_for` falls back
to ``other``, breaking for both, so a part of a tree no rule names cannot slip through.

Parties from a tree
-------------------
The functions at the end find a change's parties in a tree, from the spec language alone:
:func:`definition_directions` (which definitions requests and replies use, transitively),
:func:`limit_sides` (who sends the values a limit bounds, from its ``$limit`` and ``max-size``
uses), :func:`message_pairs` and :func:`message_sides` (a quicx message's ``from`` and ``to``,
``any`` standing for every role of ``roles``), :func:`subject_sides` (a requirement's subject).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

Impact = Literal["breaking", "compatible"]
BREAKING: Impact = "breaking"
COMPATIBLE: Impact = "compatible"
CLIENT, SERVER = "client", "server"
Sides = frozenset[str]
BOTH: Sides = frozenset({CLIENT, SERVER})
CLIENTS: Sides = frozenset({CLIENT})
SERVERS: Sides = frozenset({SERVER})
#: Role words of the spec language: the server side, and the words for either side.
SERVER_ROLES = frozenset({"server", "daemon"})
EITHER_ROLES = frozenset({"peer", "any"})


@dataclass(frozen=True)
class Rule:
    """How one kind of change affects party ``a`` and party ``b``, and why."""

    a: Impact
    b: Impact
    why: str


def _r(a: str, b: str, why: str) -> Rule:
    return Rule(BREAKING if a == "B" else COMPATIBLE, BREAKING if b == "B" else COMPATIBLE, why)


#: (what, kind, trend) -> Rule(party a, party b, why): "B" breaking, "C" compatible.
RULES: Mapping[tuple[str, str, str], Rule] = MappingProxyType({
    # command (bunqueue): a = the client that sends it, b = the server that implements it
    ("command", "added", ""): _r("C", "B",
        "Old {a}s never send it; a {b} that claims the new profile must implement it."),
    ("command", "removed", ""): _r("B", "C",
        "An old {a} that sends it gets an unknown-command error from a new {b}; a {b} may keep "
        "implementing it."),
    ("command", "changed", ""): _r("B", "B",
        "An attribute of the command outside its schemas changed; both ends read it."),
    # request field: a = client (sender), b = server (receiver). The spec leaves
    # additionalProperties open unless a schema closes it ("closed").
    ("request field", "added", "optional"): _r("C", "C",
        "Optional: an old {a} leaves it out and a new {b} handles its absence; an old {b} takes it as an "
        "extra field, reported but not refused, since the schema leaves additionalProperties open."),
    ("request field", "added", "optional closed"): _r("C", "B",
        "Optional, but the old schema closes additionalProperties: an old {b} refuses it when a new {a} "
        "sends it."),
    ("request field", "added", "required"): _r("B", "C",
        "A new {b} requires it and an old {a} does not send it; an old {b} takes it as an extra field "
        "(additionalProperties is open)."),
    ("request field", "added", "required closed"): _r("B", "B",
        "A new {b} requires it and an old {a} does not send it; an old {b} refuses it (the old schema "
        "closes additionalProperties)."),
    ("request field", "removed", "optional"): _r("B", "C",
        "A new {b} takes it as an extra field (additionalProperties is open) but gives it no meaning, so "
        "what an old {a} asks with it no longer happens; a {b} may keep honouring it."),
    ("request field", "removed", "optional closed"): _r("B", "C",
        "A new {b} refuses it as unknown (the new schema closes additionalProperties); a {b} that keeps "
        "it serves new {a}s."),
    ("request field", "removed", "required"): _r("B", "B",
        "What an old {a} asks with it no longer happens, and an old {b} still requires it of new {a}s "
        "that leave it out."),
    ("request field", "removed", "required closed"): _r("B", "B",
        "A new {b} refuses it as unknown, and an old {b} still requires it of new {a}s."),
    # reply field: a = server (sender), b = client (receiver)
    ("reply field", "added", "optional"): _r("C", "C",
        "Optional: an old {a} leaves it out and new {b}s do without it; an old {b} takes it as an extra "
        "field, reported but not refused, since the schema leaves additionalProperties open."),
    ("reply field", "added", "optional closed"): _r("C", "B",
        "Optional, but the old schema closes additionalProperties: an old {b} refuses a reply that "
        "carries it."),
    ("reply field", "added", "required"): _r("B", "C",
        "A new {b} relies on it and an old {a} does not send it; an old {b} takes it as an extra field "
        "(additionalProperties is open)."),
    ("reply field", "added", "required closed"): _r("B", "B",
        "A new {b} relies on it and an old {a} does not send it; an old {b} refuses it (the old schema "
        "closes additionalProperties)."),
    ("reply field", "removed", "optional"): _r("C", "B",
        "An old {b} that reads it no longer gets it from a new {a}; an {a} may keep sending it, a new {b} "
        "takes it as an extra field."),
    ("reply field", "removed", "optional closed"): _r("B", "B",
        "An old {b} that reads it no longer gets it, and a new {b} refuses it from an old {a} (the new "
        "schema closes additionalProperties)."),
    ("reply field", "removed", "required"): _r("C", "B",
        "An old {b} relies on it and a new {a} need not send it."),
    ("reply field", "removed", "required closed"): _r("B", "B",
        "An old {b} relies on it, and a new {b} refuses it from an old {a}."),
    # schema rules of a field that stays: a = its sender, b = its receiver
    ("required", "added", ""): _r("B", "C",
        "Now required: an old {a} may leave it out and a new {b} refuses that; an old {b} gets it anyway."),
    ("required", "removed", ""): _r("C", "B",
        "Now optional: a new {a} may leave it out and an old {b} requires it."),
    ("type", "changed", "widened"): _r("C", "B",
        "More values are valid: a new {a} may send one an old {b} refuses; an old {a}'s values stay "
        "valid."),
    ("type", "changed", "narrowed"): _r("B", "C",
        "Fewer values are valid: an old {a} may send one a new {b} refuses; an old {b} accepts all a new "
        "{a} sends."),
    ("type", "changed", ""): _r("B", "B",
        "The values valid before and after are not one within the other: each side may send what the "
        "other refuses."),
    ("constraint", "changed", "widened"): _r("C", "B",
        "A looser bound: a new {a} may send a value an old {b} refuses."),
    ("constraint", "changed", "narrowed"): _r("B", "C",
        "A stricter bound: an old {a} may send a value a new {b} refuses."),
    ("constraint", "changed", ""): _r("B", "B",
        "A bound or pattern changed so that neither holds the other: each side may send what the other "
        "refuses."),
    ("field default", "*", ""): _r("B", "B",
        "What a {b} does when the field is absent changed: an old {a} that leaves it out gets other "
        "behaviour, and an old {b} applies the old default."),
    # limit: a = the side that sends the values it bounds, b = the side that receives them
    ("limit", "added", "used"): _r("C", "C",
        "A limit the schemas or layouts use: where it starts or stops bounding a field, the change is "
        "reported at that field."),
    ("limit", "removed", "used"): _r("C", "C",
        "A limit the schemas or layouts used: where it stops bounding a field, the change is reported at "
        "that field."),
    ("limit", "added", ""): _r("B", "C",
        "A new bound: an old {a} may send values beyond it, which a new {b} refuses."),
    ("limit", "removed", ""): _r("C", "B",
        "The bound is gone: a new {a} may send values an old {b} refuses."),
    ("limit", "changed", "widened"): _r("C", "B",
        "Widened: an old {a} stays within it; a new {a} may send values an old {b} refuses."),
    ("limit", "changed", "narrowed"): _r("B", "C",
        "Narrowed: an old {a} may send values a new {b} refuses; an old {b} accepts all a new {a} sends "
        "(the new profile's limit cases still probe the new bound)."),
    ("limit", "changed", ""): _r("B", "B",
        "A fixed value, pattern or unit changed, so neither range holds the other: both sides must follow "
        "it."),
    # error string (bunqueue) and error code (quicx): a = the server that sends it, b = the client
    ("error string", "added", ""): _r("B", "C",
        "A new {a} answers that case with this string and an old one does not; an old {b} still reads an "
        "error reply (ok false) with words it does not know."),
    ("error string", "removed", ""): _r("C", "B",
        "An old {b} that matches on it no longer gets it from a new {a}; an {a} may keep sending it."),
    ("error string", "changed", ""): _r("B", "B",
        "An old {b} that matches on the old words misses the new ones, and an old {a} sends words a new "
        "{b} does not expect."),
    ("error code", "added", ""): _r("B", "C",
        "A new {a} answers with this code and an old one does not; an old {b} passes a code it does not "
        "know through as a number."),
    ("error code", "removed", ""): _r("C", "B",
        "An old {b} that acts on the code no longer gets it from a new {a}."),
    ("error code", "changed", ""): _r("B", "B",
        "Renumbered: each side reads the other's code as another error."),
    # opcode, message, direction, layout (quicx): a = senders, b = receivers
    ("opcode", "changed", ""): _r("B", "B",
        "Renumbered: a frame written with the old code is another message, or none, to a new peer, and "
        "back."),
    ("message", "added", ""): _r("C", "B",
        "An old {b} gets an opcode it does not know and refuses it; old {a}s never send it."),
    ("message", "removed", ""): _r("B", "C",
        "An old {a} that sends it is refused by a new {b}; a {b} may keep handling it."),
    ("message", "changed", ""): _r("B", "B",
        "Its payload rule, size, transport, reserved flag or error mapping changed, and both ends act on "
        "it."),
    ("direction", "added", ""): _r("C", "B",
        "A new {a} may send it this way, and an old {b} refuses it as off-direction."),
    ("direction", "removed", ""): _r("B", "C",
        "An old {a} still sends it this way, and a new {b} refuses it as off-direction."),
    ("layout field", "*", ""): _r("B", "B",
        "Binary layouts are positional: a field added, removed, moved or retyped changes the bytes both "
        "ends read."),
    # requirement: a = the side it binds (its subject), b = the counterpart
    ("requirement", "added", "binding"): _r("B", "C",
        "A new MUST binds the {a}: an old {a} was not held to it and now fails conformance; the {b} only "
        "gains."),
    ("requirement", "added", "advisory"): _r("C", "C",
        "A new SHOULD or MAY: not following it is NON-STRICT or INFO, never a FAIL, and the {b} cannot "
        "rely on it."),
    ("requirement", "removed", "binding"): _r("C", "B",
        "A MUST is retired: the {a} is no longer held to it, and an old {b} that relied on it cannot."),
    ("requirement", "removed", "advisory"): _r("C", "C",
        "A SHOULD or MAY is retired: the {b} could not rely on it."),
    ("requirement", "changed", "raised"): _r("B", "C",
        "Raised to MUST: an old {a} that did not follow it now fails conformance."),
    ("requirement", "changed", "lowered"): _r("C", "B",
        "Lowered from MUST: the {a} is held to less, and an old {b} that relied on it cannot."),
    ("requirement", "changed", "advisory"): _r("C", "C",
        "Between SHOULD and MAY (or the subject of a recommendation): neither is a FAIL."),
    ("requirement", "changed", "rebound"): _r("B", "C",
        "The MUST binds another side now (its subject changed): a side it did not bind before is held to "
        "it."),
    ("requirement", "changed", "basis"): _r("C", "C",
        "What the level rests on changed (stated, implied, decision); the level did not."),
    # state tables: a = the side whose moves the table describes (its rows' subjects), b = the other
    ("transition", "added", ""): _r("B", "C",
        "A new move: an old {a} does not make it; the {b} sees states it already knows."),
    ("transition", "removed", ""): _r("B", "B",
        "The move is gone: an old {a} still makes it, and an old {b} that relied on it (the event it "
        "sends, the state it waits for) no longer gets it."),
    ("transition", "changed", ""): _r("B", "B",
        "The same event from the same state now leads to another state."),
    ("replies", "changed", ""): _r("B", "B",
        "The same event from the same state now makes a connection receive other messages (a dialogue "
        "table): an old {a} sends what it did, and an old {b} waits for what no longer comes."),
    ("initial state", "*", ""): _r("B", "B", "The states the machine starts in changed."),
    ("state", "*", ""): _r("B", "B",
        "A state was added or removed: a side that does not know it cannot handle what is in it, and an "
        "old side still uses one that is gone."),
    # behaviour flags: both sides read them (an absent flag means the documents' rule)
    ("semantics", "*", ""): _r("B", "B",
        "A behaviour flag both sides act on changed (an absent flag means the documents' rule)."),
    # capability, webhook event: a = the client that asks for it, b = the server that provides it
    ("capability", "added", ""): _r("C", "B",
        "A new {b} must support and announce it; old {a}s never ask for it."),
    ("capability", "removed", ""): _r("B", "C",
        "An old {a} that relies on it no longer finds it; a {b} may keep it."),
    ("webhook event", "added", ""): _r("C", "B",
        "A new {b} must deliver it; old {a}s never subscribe to it."),
    ("webhook event", "removed", ""): _r("B", "C",
        "An old {a} that subscribes to it is refused or never called; a {b} may keep it."),
    # pushed event frames and their types: a = the server that pushes them, b = the client
    ("event frames", "added", ""): _r("C", "B", "A new {a} may push frames an old {b} does not know."),
    ("event frames", "removed", ""): _r("B", "C", "An old {a} still pushes frames a new {b} does not know."),
    ("event type", "added", ""): _r("C", "B", "An old {b} may get an event type it does not know."),
    ("event type", "removed", ""): _r("B", "C",
        "An old {a} still pushes an event type a new {b} does not know."),
    ("event type", "changed", ""): _r("B", "B", "The fields an event type carries changed."),
    # documented default: a = the side that applies it (its requirement's subject), b = the other
    ("documented default", "added", ""): _r("B", "C",
        "A new default the {a} applies when nothing says otherwise; an old {a} does not know it."),
    ("documented default", "removed", ""): _r("C", "B",
        "No default any more: an old {b} that relied on the value cannot."),
    ("documented default", "changed", ""): _r("B", "C",
        "An old {a} applies the old value; the {b} sees only its effect."),
    # decoder reactions: a = the side that detects and reacts, b = the peer that sent the frame
    ("protocol error", "added", ""): _r("B", "B",
        "A new refusal: an old {a} does not make it, and a frame an old {b} may write is now refused."),
    ("protocol error", "removed", ""): _r("B", "C",
        "The refusal is gone: an old {a} still refuses what a new {b} may write."),
    ("protocol error", "changed", ""): _r("B", "B",
        "The reaction (close, reply) or the error code answered changed: both ends see it."),
    ("wire format", "*", ""): _r("B", "B", "Framing, header or encoding rules are read by both ends."),
    ("version", "*", ""): _r("B", "B",
        "The protocol version written or accepted changed: each end may refuse the other's."),
    ("endpoint", "*", ""): _r("B", "B",
        "A default port or transport changed: a side that relies on the default does not find the other."),
    # spec bookkeeping that does not reach the wire
    ("definition", "*", ""): _r("C", "C",
        "A named schema: where a field starts or stops using it, the change is reported at the field."),
    ("citation", "*", ""): _r("C", "C",
        "Which requirement a rule cites: findings name another id; the wire is unchanged."),
    ("safeguard", "*", ""): _r("C", "C",
        "A bound the reference server keeps for itself (safeguards), never judged against another server."),
    ("tool data", "*", ""): _r("C", "C",
        "Data for queuewire's tools (inventory, recordings), not a protocol fact."),
    ("spec metadata", "*", ""): _r("C", "C",
        "How the spec classifies its own requirements; not a protocol fact."),
    ("role", "*", ""): _r("C", "C", "A role is a name; what it may send is reported as message directions."),
    ("other", "*", ""): _r("B", "B",
        "No rule classifies this part of the tree, so it is reported as breaking for both until one does."),
})


def rule_for(what: str, kind: str, trend: str) -> Rule:
    """The rule of a change: the exact key, else any trend, else any kind, else ``other``."""
    for key in ((what, kind, trend), (what, kind, ""), (what, "*", "")):
        if key in RULES:
            return RULES[key]
    return RULES[("other", "*", "")]


def sides_of(role: Any) -> Sides:
    """The sides a role word names (SERVER_ROLES, EITHER_ROLES, anything else a client)."""
    if role in SERVER_ROLES:
        return SERVERS
    if role in EITHER_ROLES or role is None:
        return BOTH
    return CLIENTS


def counterpart(sides: Sides) -> Sides:
    """The other side (both, for a party that is both)."""
    return (BOTH - sides) or BOTH


def noun(sides: Sides) -> str:
    """The word a rule's sentence uses for a party."""
    return "peer" if sides == BOTH else next(iter(sides))


def union(sides: Iterable[Sides]) -> Sides:
    out: Sides = frozenset()
    for s in sides:
        out |= s
    return out


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def subject_sides(tree: Mapping[str, Any], rid: Any) -> Sides:
    """The sides requirement ``rid`` of ``tree`` binds (both when it is not there)."""
    req = as_map(as_map(tree.get("requirements")).get(rid)) if isinstance(rid, str) else {}
    return sides_of(req.get("subject")) if req else BOTH


# -- parties derived from a tree -------------------------------------------------------------
def roles_of(value: Any, tree: Mapping[str, Any]) -> list[str]:
    names = value if isinstance(value, list) else [value]
    known = list(as_map(tree.get("roles"))) or ["server", "client"]
    out: list[str] = []
    for n in names:
        out += known if n in EITHER_ROLES else [str(n)]
    return out


def message_pairs(msg: Mapping[str, Any], tree: Mapping[str, Any]) -> set[tuple[str, str]]:
    """A message's (sender role, receiver role) pairs, one end on each side."""
    return {(s, r) for s in roles_of(msg.get("from"), tree) for r in roles_of(msg.get("to"), tree)
            if sides_of(s) != sides_of(r)}


def message_sides(msg: Mapping[str, Any], tree: Mapping[str, Any]) -> tuple[Sides, Sides]:
    pairs = message_pairs(msg, tree)
    if not pairs:
        return BOTH, BOTH
    return (union(sides_of(s) for s, _ in pairs),
            union(sides_of(r) for _, r in pairs))


def schema_refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            yield ref[len("#/$defs/"):]
        for v in node.values():
            yield from schema_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from schema_refs(v)


def definition_directions(tree: Mapping[str, Any]) -> dict[str, set[str]]:
    """For each definition, the directions (request, reply) of the schemas that use it."""
    roots: list[tuple[str, Any]] = []
    for cmd in as_map(tree.get("commands")).values():
        roots += [("request", as_map(cmd).get("request")), ("reply", as_map(cmd).get("response"))]
    roots += [("reply", as_map(tree.get("envelope")).get("error_reply")),
              ("reply", as_map(tree.get("job_events")).get("frame"))]
    defs = as_map(tree.get("definitions"))
    out: dict[str, set[str]] = {}
    for direction, root in roots:
        todo = list(schema_refs(root))
        while todo:
            name = todo.pop()
            if direction not in out.setdefault(name, set()):
                out[name].add(direction)
                todo += schema_refs(defs.get(name))
    return out


def limit_sides(tree: Mapping[str, Any]) -> dict[str, Sides]:
    """For each limit, the sides that send the values it bounds, from where it is used."""
    dirs = definition_directions(tree)
    side_of_dir = {"request": CLIENTS, "reply": SERVERS}
    out: dict[str, Sides] = {}

    def sides_at(path: tuple[str, ...]) -> Sides:
        head = path[0] if path else ""
        if head == "commands" and len(path) > 2:
            return side_of_dir["request" if path[2] == "request" else "reply"]
        if head == "definitions" and len(path) > 1:
            return union(side_of_dir[d] for d in dirs.get(path[1], ())) or BOTH
        if head == "envelope" and len(path) > 1:
            return CLIENTS if path[1] == "request" else SERVERS
        if head == "job_events":
            return SERVERS
        if head == "messages" and len(path) > 1:
            return message_sides(as_map(as_map(tree.get("messages")).get(path[1])), tree)[0]
        return BOTH

    def visit(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, Mapping):
            if set(node) == {"$limit"}:
                name = str(node["$limit"]).partition(".")[0]
                out[name] = out.get(name, frozenset()) | sides_at(path)
                return
            for k, v in node.items():
                if k == "max-size" and isinstance(v, str):
                    out[v] = out.get(v, frozenset()) | sides_at(path)
                else:
                    visit(v, path + (str(k),))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                visit(v, path + (str(i),))

    visit({k: v for k, v in tree.items() if k != "limits"}, ())
    return out
