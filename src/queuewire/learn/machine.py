"""Mealy machines: the one the spec's table implies, and the comparison of two machines.

What it is
----------
A :class:`Mealy` machine is a transition table ``(state, input) -> (output, next state)``
from one initial state, over a fixed input alphabet. :func:`spec_machine` builds the one a
state table of the spec implies under its ``learn`` section (``job_lifecycle.learn``): the
inputs, what each drives (a row's ``event``, or ``creates``), the variables it saves and
needs, and the reply class where no row applies (``otherwise``). An output is ``<reply
class>/<observed state>``: ``ok``, ``error`` or ``-`` (not sent: a variable it needs was never
saved), then the job's state (``none`` before it exists).

:func:`difference` compares two machines as machines: a breadth-first walk of their product
from the initial pair finds the shortest input sequence after which their outputs differ
(None: they are equivalent), so every difference comes with the shortest way to see it.

Design
------
Pure data and functions, no I/O: the learner (:mod:`.sul`, AALpy) fills a :class:`Mealy` from
a target's answers; the spec's comes from the profile. A spec state is the job's state plus
the variables saved so far (a token is only known once a PULL handed the job out), so the
machine the spec implies is exactly the one a learner can observe.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Learn", "Mealy", "closure", "difference", "differences", "learn_section", "needs",
           "refusal", "spec_machine"]

_VAR = re.compile(r"\$\{(\w+)\}")
NONE = "none"
NOT_SENT = "-"


@dataclass
class Mealy:
    """A Mealy machine: ``table[(state, input)] = (output, next state)``."""

    initial: Any
    inputs: tuple[str, ...]
    table: dict[tuple[Any, str], tuple[str, Any]] = field(default_factory=dict)

    def run(self, word: Sequence[str]) -> list[str]:
        """The outputs of ``word`` from the initial state."""
        state, out = self.initial, []
        for letter in word:
            output, state = self.table[(state, letter)]
            out.append(output)
        return out

    @property
    def states(self) -> list[Any]:
        seen, todo = [self.initial], deque([self.initial])
        while todo:
            s = todo.popleft()
            for letter in self.inputs:
                nxt = self.table[(s, letter)][1]
                if nxt not in seen:
                    seen.append(nxt)
                    todo.append(nxt)
        return seen


@dataclass(frozen=True)
class Learn:
    """A state table's ``learn`` section: its inputs (name -> entry), how the state is
    observed, the lookups read after it, and the table's rows (state, event) -> (next
    state, requirement)."""

    machine: str
    inputs: Mapping[str, Mapping[str, Any]]
    observe: Mapping[str, Any]
    rows: Mapping[tuple[str, str], tuple[str, str]]
    lookups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def output(self, reply_class: str, state: str, found: Sequence[str] | None = None) -> str:
        """An output symbol: the reply class, the job's state, then each lookup's answer
        (``found`` / ``not found``; ``-`` before the job exists)."""
        names = sorted(self.lookups)
        if found is None:
            answer = "-" if state == NONE else "not found" if state == self.gone else "found"
            found = [answer] * len(names)
        return "/".join([reply_class, state, *found])

    @property
    def gone(self) -> str | None:
        """The state ``observe`` reports for a job that no longer exists (its request is
        refused), as an input that ``removes`` the job leaves it."""
        gone = self.observe.get("gone")
        return None if gone is None else str(gone["state"])

    @property
    def gone_requirement(self) -> str:
        """The requirement that a job that no longer exists is reported so rests on."""
        return str((self.observe.get("gone") or {}).get("requirement", ""))


def learn_section(tree: Mapping[str, Any], machine: str) -> Learn:
    """The ``learn`` section of the state table ``machine`` of a profile's tree."""
    table = tree[machine]
    section = table.get("learn")
    if not section:
        raise ValueError(f"{machine} has no learn section: nothing says how to drive it")
    rows = {(r["from"], r["event"]): (r["to"], r.get("requirement", ""))
            for r in table["transitions"]}
    return Learn(machine, dict(section["inputs"]), dict(section["observe"]), rows,
                 dict(section.get("lookups") or {}))


def refusal(entry: Mapping[str, Any], state: str) -> str | None:
    """The requirement an input's refusal from ``state`` rests on: its ``refusal``, or, when
    that maps states to requirements, the state's entry (else its ``other`` entry)."""
    found = entry.get("refusal")
    if isinstance(found, Mapping):
        found = found.get(state, found.get("other"))
    return found or None


def needs(entry: Mapping[str, Any]) -> set[str]:
    """The variables an input's request uses (``${job}``, ``${token}``; ``${queue}`` is
    every query's own)."""
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, str):
            found.update(_VAR.findall(v))
        elif isinstance(v, Mapping):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(entry.get("send"))
    return found - {"queue"}


def closure(initial: Any, inputs: Sequence[str],
            step: Callable[[Any, str], tuple[str, Any]]) -> Mealy:
    """The machine ``step(state, input) -> (output, next state)`` gives, over the states it
    reaches from ``initial`` (breadth first)."""
    m = Mealy(initial, tuple(inputs))
    todo, seen = deque([initial]), {initial}
    while todo:
        state = todo.popleft()
        for name in m.inputs:
            result = m.table[(state, name)] = step(state, name)
            if result[1] not in seen:
                seen.add(result[1])
                todo.append(result[1])
    return m


def spec_machine(learn: Learn) -> Mealy:
    """The machine the table implies: from (no job, nothing saved), each input either does
    what its row says (``ok``, the row's state, its ``saves`` kept), or removes the job from
    a state its ``removes`` lists (``ok``, the observation's ``gone`` state), or is not sent
    (a variable it needs is not saved: ``-``), or is refused or finds nothing (``otherwise``)
    and leaves the job where it is."""
    out = learn.output

    def step(state: tuple[str, frozenset[str]], name: str) -> tuple[str, Any]:
        job, saved = state
        entry = learn.inputs[name]
        creates = entry.get("creates")
        kept = saved | set(entry.get("saves") or {})
        if not needs(entry) <= saved:
            return out(NOT_SENT, job), state
        if creates is not None:
            if job == NONE:
                return out("ok", creates), (creates, kept)
            return out(NOT_SENT, job), state      # one job per query: no second one
        if job in (entry.get("removes") or ()) and learn.gone:
            return out("ok", learn.gone), (learn.gone, kept)
        if (job, entry.get("event")) in learn.rows:
            to = learn.rows[(job, entry["event"])][0]
            return out("ok", to), (to, kept)
        return out(entry.get("otherwise", "error"), job), state

    return closure((NONE, frozenset()), sorted(learn.inputs), step)


def difference(a: Mealy, b: Mealy, inputs: Sequence[str] | None = None
               ) -> tuple[list[str], list[str], list[str]] | None:
    """The shortest input word after which ``a`` and ``b`` answer differently, with both
    machines' outputs for it, or None when they are equivalent (over ``inputs``, default
    ``a``'s)."""
    letters = list(inputs or a.inputs)
    start = (a.initial, b.initial)
    parent: dict[Any, tuple[Any, str] | None] = {start: None}
    todo = deque([start])
    while todo:
        pair = todo.popleft()
        sa, sb = pair
        for letter in letters:
            (oa, na), (ob, nb) = a.table[(sa, letter)], b.table[(sb, letter)]
            word = _word(parent, pair) + [letter]
            if oa != ob:
                return word, a.run(word), b.run(word)
            nxt = (na, nb)
            if nxt not in parent:
                parent[nxt] = (pair, letter)
                todo.append(nxt)
    return None


def _word(parent: Mapping[Any, tuple[Any, str] | None], node: Any) -> list[str]:
    out: list[str] = []
    while parent[node] is not None:
        node, letter = parent[node]  # type: ignore[misc]
        out.append(letter)
    return out[::-1]


def differences(a: Mealy, b: Mealy, inputs: Sequence[str] | None = None
                ) -> list[tuple[list[str], list[str], list[str]]]:
    """Every place where the machines first part, once per transition of ``a`` (the spec's):
    for each (state of ``a``, input) whose output ``b`` does not give after a word on which
    the two agreed so far, the shortest such word, with both machines' outputs; shortest
    first. What follows a parting is not walked (it would repeat the same cause). Empty:
    equivalent."""
    letters = list(inputs or a.inputs)
    start = (a.initial, b.initial)
    parent: dict[Any, tuple[Any, str] | None] = {start: None}
    todo = deque([start])
    found: dict[tuple[Any, str], list[str]] = {}
    while todo:
        pair = todo.popleft()
        sa, sb = pair
        for letter in letters:
            (oa, na), (ob, nb) = a.table[(sa, letter)], b.table[(sb, letter)]
            if oa != ob:
                if (sa, letter) not in found:
                    found[(sa, letter)] = _word(parent, pair) + [letter]
                continue
            nxt = (na, nb)
            if nxt not in parent:
                parent[nxt] = (pair, letter)
                todo.append(nxt)
    words = sorted(found.values(), key=lambda w: (len(w), w))
    return [(w, a.run(w), b.run(w)) for w in words]
