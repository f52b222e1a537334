"""Dialogue tables: state tables whose rows say what each connection receives.

What it is
----------
A dialogue table (``task_dialogue`` of quicx, ``auth_session`` of bunqueue) is a state table
whose rows carry ``replies``: per connection of the query, the messages (quicx) or reply
classes (bunqueue: ``ok`` or the ``errors`` entry a refusal matches) that connection receives
after the row's input. Its ``learn`` section names the query's ``connections`` (name -> role),
the ``sync`` a learner sends on every connection to know it has received everything an input
caused, and the inputs (``conn``, ``send``, ``saves``, ``once``, ``event``, ``otherwise``,
``refusal``; ``reconnect: true`` closes the connection and opens another instead of sending).

:func:`dialogue_machine` builds the Mealy machine such a table implies, in the output alphabet
a learner observes (:func:`output`): ``producer:MSG_OK worker:MSG_TASK``, ``quiet`` when no
connection received anything, ``-`` when the input was not sent (a variable it needs is not
saved, or a ``once`` input's variable already is). A spec state is the table's state plus the
variables saved so far, as for the job lifecycle (:mod:`.machine`).

Design
------
Pure data and functions: the wire side is :mod:`.wire`; a difference becomes a case in
:mod:`.dialogue_cases`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .machine import NOT_SENT, Mealy, closure, needs, refusal

__all__ = ["QUIET", "Dialogue", "dialogue_machine", "dialogue_section", "is_dialogue", "output",
           "row_rule", "sendable"]

QUIET = "quiet"


@dataclass(frozen=True)
class Dialogue:
    """A dialogue table's ``learn`` section and rows ``(state, event) -> (to, replies,
    requirement)``."""

    machine: str
    connections: Mapping[str, str]
    inputs: Mapping[str, Mapping[str, Any]]
    rows: Mapping[tuple[str, str], tuple[str, Mapping[str, Sequence[str]], str]]
    initial: str
    sync: Mapping[str, Any] = field(default_factory=dict)
    # the inputs a cleanup worker asks and completes a query's unfinished task with
    cleanup: Mapping[str, str] = field(default_factory=dict)
    # rows that are readings of the documents: (state, event) -> the level they cap a
    # difference at that passes through them
    caps: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def output(self, replies: Mapping[str, Sequence[str]]) -> str:
        return output(replies, list(self.connections))

    @functools.cached_property
    def implied(self) -> Mealy:
        """The machine the table implies (:func:`dialogue_machine`), built once."""
        return dialogue_machine(self)

    @property
    def saved_vars(self) -> set[str]:
        """The variables some input saves (the others are the tool's to give)."""
        return set(self.carried)

    @property
    def carried(self) -> dict[str, str]:
        """Each saved variable and the message field it is saved from."""
        return {v: f for entry in self.inputs.values() for v, f in (entry.get("saves") or {}).items()}


def is_dialogue(tree: Mapping[str, Any], machine: str) -> bool:
    """Whether the state table ``machine`` is a dialogue (its learn section names connections)."""
    section = (tree.get(machine) or {}).get("learn") or {}
    return "connections" in section


def output(replies: Mapping[str, Sequence[str]], connections: Sequence[str]) -> str:
    """The output symbol of what each connection received, in the section's connection order."""
    parts = [f"{conn}:{item}" for conn in connections for item in replies.get(conn) or ()]
    return " ".join(parts) or QUIET


def dialogue_section(tree: Mapping[str, Any], machine: str) -> Dialogue:
    """The dialogue table ``machine`` of a profile's tree with its ``learn`` section."""
    table = tree[machine]
    section = table.get("learn")
    if not section or "connections" not in section:
        raise ValueError(f"{machine} has no learn section with connections: nothing says how "
                         f"to drive it")
    rows = {(r["from"], r["event"]): (r["to"], dict(r.get("replies") or {}),
                                      r.get("requirement", ""))
            for r in table["transitions"]}
    caps = {(r["from"], r["event"]): r["level"] for r in table["transitions"] if r.get("level")}
    if not table.get("initial"):
        raise ValueError(f"{machine} names no initial state")
    return Dialogue(machine, dict(section["connections"]), dict(section["inputs"]), rows,
                    table["initial"][0], dict(section.get("sync") or {}),
                    dict(section.get("cleanup") or {}), caps)


def _saves(entry: Mapping[str, Any]) -> set[str]:
    return set(entry.get("saves") or {})


def sendable(d: Dialogue, entry: Mapping[str, Any], saved: set[str] | frozenset[str]) -> bool:
    """An input is sent when every variable it needs that an input saves is saved (the
    others, such as ``${token}``, the tool gives) and, for a ``once`` input, its own are not
    yet."""
    if not needs(entry) & d.saved_vars <= saved:
        return False
    return not (entry.get("once") and _saves(entry) and _saves(entry) <= saved)


def dialogue_machine(d: Dialogue) -> Mealy:
    """The machine the table implies: from (initial state, nothing saved), each input is not
    sent (``-``), or does what its row says (its replies, the row's state, its ``saves``
    kept), or where no row applies gets its ``otherwise`` replies and leaves the state."""
    def step(state: tuple[str, frozenset[str]], name: str) -> tuple[str, Any]:
        table_state, saved = state
        entry = d.inputs[name]
        if not sendable(d, entry, saved):
            return NOT_SENT, state
        if (table_state, entry.get("event")) in d.rows:
            to, replies, _ = d.rows[(table_state, entry["event"])]
            # a variable is saved from what the input's connection received
            got = saved | _saves(entry) if replies.get(entry["conn"]) else saved
            return d.output(replies), (to, frozenset(got))
        return d.output(entry.get("otherwise") or {}), state

    return closure((d.initial, frozenset()), sorted(d.inputs), step)


def row_rule(d: Dialogue, state: str, name: str) -> tuple[str, str | None]:
    """The requirement the input ``name`` from the table's ``state`` is judged by, and the
    level it is capped at (None: its own): the row's, else the input's ``refusal``, else the
    event's first row requirement at most SHOULD (that the event does nothing there is a
    reading of the table)."""
    entry = d.inputs[name]
    row = d.rows.get((state, entry.get("event", "")))
    if row is not None:
        return row[2], None
    if refusal(entry, state):
        return str(refusal(entry, state)), None
    return next((r for (_, ev), (_, _, r) in d.rows.items() if ev == entry.get("event")),
                ""), "SHOULD"
