"""A difference on a dialogue table, as a conformance case (``conformance/cases/README.md``).

:func:`dialogue_case` writes the shortest input word that tells the table's machine and the
server's apart as a case: each input becomes a step on its connection (numbered in the order
of the section's ``connections``; a ``reconnect`` closes it and later steps use a new one),
expecting what the table says that connection receives, and every other connection gets a
step expecting what it receives (``recv``) or nothing (``none``). Each expectation cites the
requirement of the row the input drives from the table's state (:func:`.dialogue.row_rule`).
Data only; the command line runs it and writes it for ``queuewire conform replay``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dialogue import QUIET, Dialogue, row_rule
from .machine import NOT_SENT

__all__ = ["QUIET_MS", "dialogue_case", "dialogue_rule"]

#: How long a replayed case watches a connection the table says receives nothing.
QUIET_MS = 200
WRONG_TOKEN = "qw-learn-not-${uuid}"   # a case's ${uuid}: a token no server holds


def _items(output: str, conn: str) -> list[str]:
    """What ``conn`` receives in an output symbol (``producer:MSG_OK worker:MSG_TASK``)."""
    if output in (QUIET, NOT_SENT):
        return []
    pairs = [part.partition(":") for part in output.split(" ")]
    return [item for who, _, item in pairs if who == conn]


def _outcome(protocol: str, item: str) -> dict[str, Any]:
    if protocol == "quicx":
        if item.startswith("MSG_ERROR"):   # MSG_ERROR(CODE_NAME)
            code = item.partition("(")[2].rstrip(")")
            return {"error": code or True}
        return {"message": {"type": item}}
    return {"ok": {}} if item == "ok" else {"error": True if item == "error" else item}


def _states(d: Dialogue, word: Sequence[str]) -> list[str]:
    """The table's state before each input of ``word``."""
    m = d.implied
    state, out = m.initial, []
    for letter in word:
        out.append(state[0])
        state = m.table[(state, letter)][1]
    return out


def _rules(d: Dialogue, word: Sequence[str]) -> list[tuple[str, str | None]]:
    """The requirement and level cap of each input of ``word``: its row's (:func:`row_rule`),
    capped after the first row that is a reading (``level`` on the row): what follows a
    reading of the documents is judged no harder than the reading (the row's own reply is
    judged by its requirement)."""
    out, carried = [], None
    for state, letter in zip(_states(d, word), word):
        rid, cap = row_rule(d, state, letter)
        out.append((rid, cap or carried))
        carried = carried or d.caps.get((state, str(d.inputs[letter].get("event", ""))))
    return out


def dialogue_rule(d: Dialogue, word: Sequence[str]) -> tuple[str, str | None]:
    """The requirement (and level cap) the last input of ``word`` is judged by."""
    return _rules(d, word)[-1]


def dialogue_case(d: Dialogue, protocol: str, word: Sequence[str], spec_outputs: Sequence[str],
                  server_outputs: Sequence[str]) -> dict[str, Any]:
    """A case entry (a map of the case language) that replays ``word``."""
    names = list(d.connections)
    number = {name: i + 1 for i, name in enumerate(names)}
    opened: set[int] = set()
    next_number = len(names) + 1
    steps: list[dict[str, Any]] = []
    requirements: list[str] = []

    def step(conn: str, body: dict[str, Any]) -> dict[str, Any]:
        n = number[conn]
        out: dict[str, Any] = {"conn": n}
        if n not in opened:
            opened.add(n)
            out["role" if protocol == "quicx" else "auth"] = (
                d.connections[conn] if protocol == "quicx" else False)
        out.update(body)
        steps.append(out)
        return out

    for letter, expected, (rid, cap) in zip(word, spec_outputs, _rules(d, word)):
        entry = d.inputs[letter]
        if expected == NOT_SENT:
            continue
        if rid and rid not in requirements:
            requirements.append(rid)
        judged = {"requirement": rid, **({"level": cap} if cap else {})}
        conn = entry["conn"]
        if entry.get("reconnect"):
            step(conn, {"close": True, "doc": f"input {letter}"})
            number[conn] = next_number
            next_number += 1
            continue
        send = dict(entry["send"])
        if protocol == "bunqueue" and "${wrong_token}" in str(send.values()):
            send = {k: (WRONG_TOKEN if v == "${wrong_token}" else v) for k, v in send.items()}
        for other in [conn] + [n for n in names if n != conn]:
            items = _items(expected, other)
            for i, item in enumerate(items or [None]):
                outcome = {"none": QUIET_MS} if item is None else _outcome(protocol, item)
                body: dict[str, Any] = {"expect": {**outcome, **judged}}
                if other == conn and i == 0:
                    body = {"send": send, "doc": f"input {letter}", **body}
                else:
                    body = {"recv": True, "doc": f"what {other} receives after {letter}", **body}
                saves = entry.get("saves") if other == conn and item is not None else None
                if saves:
                    body["save"] = dict(saves)
                step(other, body)
    name = "-".join(word)
    case: dict[str, Any] = {
        "id": f"learn.{d.machine}.{name}",
        "title": (f"The shortest sequence where the server leaves the {d.machine} table: "
                  f"{', '.join(word)} (the table says {spec_outputs[-1]}, the server answered "
                  f"{server_outputs[-1]})"),
        "requirements": requirements,
        "steps": steps,
    }
    if protocol == "quicx":
        case["exclusive"] = True   # it touches the daemon's one task queue
    return case
