"""The typed model of the spec shared by both protocols: sources, requirements, limits, state
machines and profiles.

Everything is a frozen dataclass and every mapping a read-only ``MappingProxyType``: a loaded
profile is a value, safe to share between connections, threads and Spark executors. Values come
only from ``spec/``; the classes here name the shape, never a field, limit or opcode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

# Kaitai Struct integer type names, as the spec's layouts use them, to struct formats. This
# maps a notation to Python; the spec says which type each field has.
STRUCT_FORMATS = {"u1": "B", "u2be": ">H", "u4be": ">I", "u8be": ">Q",
                  "s1": "b", "s2be": ">h", "s4be": ">i", "s8be": ">q"}

Level = Literal["MUST", "SHOULD", "MAY"]
LEVELS: tuple[Level, ...] = ("MUST", "SHOULD", "MAY")
#: What a requirement rests on (spec/README.md, "Levels and basis"): ``stated`` the documents
#: say it (a verbatim quote), ``implied`` a reading of them (at most SHOULD, with the reading
#: as rationale), ``decision`` queuewire's own where they are silent (at most SHOULD).
Basis = Literal["stated", "implied", "decision"]
BASES: tuple[Basis, ...] = ("stated", "implied", "decision")


K = TypeVar("K")
V = TypeVar("V")


def frozen_map(items: Mapping[K, V] | None = None) -> Mapping[K, V]:
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class Source:
    """A document requirements cite: a seed ``file`` under ../shared, or (upstream's own
    specification) a ``url`` and the ``commit`` whose text the quotes are taken from."""

    id: str
    title: str
    file: str | None
    sections: tuple[str, ...]
    url: str | None = None
    commit: str | None = None


@dataclass(frozen=True)
class Requirement:
    """One normative statement: ``id`` is stable, ``level`` is an RFC 2119 keyword, ``basis``
    what the level rests on. ``disagrees`` holds the words of another document that says
    otherwise (each a mapping of doc, section, quote), which reports show beside ``quote``."""

    id: str
    level: Level
    subject: str
    text: str
    source: str
    section: str
    quote: str | None = None
    rationale: str | None = None
    basis: Basis | None = None
    disagrees: tuple[Mapping[str, Any], ...] = ()

    @property
    def cite(self) -> str:
        return f"{self.source}#{self.section}"


@dataclass(frozen=True)
class Limit:
    """A named bound. ``uses`` are the spec paths that substituted it (how vectors probe it)."""

    name: str
    doc: str
    requirement: str | None
    unit: str = ""
    min: int | float | None = None
    max: int | float | None = None
    value: Any = None
    pattern: str | None = None
    uses: tuple[tuple[str, tuple[Any, ...]], ...] = ()


@dataclass(frozen=True)
class Transition:
    source: str
    event: str
    target: str
    requirement: str | None
    # a dialogue table's row: what each connection receives after the event (connection ->
    # messages or reply classes); None in tables that do not say
    replies: Mapping[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class StateMachine:
    """A state machine as a table, like h11's ``_state.py``: rows of (from, event, to)."""

    name: str
    doc: str
    initial: tuple[str, ...]
    transitions: tuple[Transition, ...]

    @property
    def states(self) -> tuple[str, ...]:
        seen: dict[str, None] = dict.fromkeys(self.initial)
        for t in self.transitions:
            seen.setdefault(t.source)
            seen.setdefault(t.target)
        return tuple(seen)

    def next_states(self, state: str) -> dict[str, str]:
        return {t.event: t.target for t in self.transitions if t.source == state}

    def mermaid(self) -> str:
        """The table as a Mermaid state diagram, for the docs."""
        lines = ["stateDiagram-v2"]
        lines += [f"    [*] --> {s}" for s in self.initial]
        lines += [f"    {t.source} --> {t.target}: {t.event}" for t in self.transitions]
        return "\n".join(lines)


@dataclass(frozen=True)
class ProtocolErrorKind:
    """A class of protocol error a decoder reports and the reaction the protocol demands."""

    name: str
    doc: str
    requirement: str
    reaction: str  # close | reply | raise
    error_code: str | None = None  # quicx: the error_codes entry a `reply` answers with
    # the requirement a daemon's answer is judged by, where it is not ``requirement`` (the rule
    # broken binds the peer and the documents leave the daemon's reaction open)
    answer_requirement: str | None = None

    @property
    def answered_by(self) -> str:
        """The requirement a receiver's reaction to this kind is judged by."""
        return self.answer_requirement or self.requirement


def state_machine(name: str, raw: Mapping[str, Any]) -> StateMachine:
    """A state machine from its spec entry (``initial``, ``transitions``)."""
    return StateMachine(
        name=name, doc=raw.get("doc", ""), initial=tuple(raw.get("initial", ())),
        transitions=tuple(
            Transition(source=t["from"], event=str(t["event"]), target=t["to"],
                       requirement=t.get("requirement"),
                       replies=None if "replies" not in t else frozen_map(
                           {k: tuple(v) for k, v in (t["replies"] or {}).items()}))
            for t in raw.get("transitions", ())
        ),
    )


def error_kinds(raw: Mapping[str, Any] | None) -> Mapping[str, ProtocolErrorKind]:
    """The protocol error kinds of a ``protocol_errors`` section."""
    return frozen_map({
        k: ProtocolErrorKind(name=k, doc=v.get("doc", ""), requirement=v.get("requirement", ""),
                             reaction=v.get("reaction", "close"), error_code=v.get("error_code"),
                             answer_requirement=v.get("answer-requirement"))
        for k, v in (raw or {}).items()
    })


@dataclass(frozen=True)
class Profile:
    name: str
    protocol: str
    doc: str
    overlays: tuple[str, ...]
    tree: Mapping[str, Any] = field(repr=False)
    requirements: Mapping[str, Requirement] = field(repr=False)
    limits: Mapping[str, Limit] = field(repr=False)
    sources: Mapping[str, Source] = field(repr=False)
    model: Any = field(repr=False, default=None)  # BunqueueSpec or QuicxSpec
    # the published server releases the profile describes (profiles.yaml ``releases``)
    releases: tuple[str, ...] = ()
    # what tells those releases from the others: {release, probe, observed} (``evidence``)
    evidence: tuple[Mapping[str, Any], ...] = ()

    def requirement(self, rid: str) -> Requirement:
        try:
            return self.requirements[rid]
        except KeyError:
            raise KeyError(f"{self.name}: no requirement {rid!r}") from None

    def limit(self, name: str) -> Limit:
        try:
            return self.limits[name]
        except KeyError:
            raise KeyError(f"{self.name}: no limit {name!r}") from None
