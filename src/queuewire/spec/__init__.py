"""``queuewire.spec``: the spec in ``spec/`` as a typed, immutable model.

Design: the bottom layer of queuewire (it imports no other part of it; everything else reads
the protocols through it). ``load_profile("bunqueue/v2")`` reads the protocol's base tree,
applies the profile's overlays (JSON Merge Patch), substitutes ``$limit`` references and
builds frozen dataclasses: the requirements, limits and sources common to both protocols
(``model.py``) and the protocol-specific model (``bunqueue.py``, ``quicx.py``) in
``Profile.model``. The rooms: ``_load`` knows the files (YAML, merge patches, ``$limit``),
``model`` the shared shapes and how to build them, ``bunqueue`` and ``quicx`` one protocol's
model each (loaded lazily by :func:`load_profile`, and never importing this ``__init__``
back), ``resources`` the inventory section (what a server keeps and how a tool lists and
removes it, built into the bunqueue model), ``instances`` minimal valid instances of a schema,
and ``lint`` the rules every profile must satisfy (a consumer of this package's API).
Profiles are cached; they are values. Nothing in Python restates what ``spec/`` says.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ._load import (
    SpecError,
    load_protocol_tree,
    merge_patch,
    read_yaml,
    spec_dir,
    substitute_limits,
)
from .model import (
    BASES,
    LEVELS,
    Limit,
    Profile,
    ProtocolErrorKind,
    Requirement,
    Source,
    StateMachine,
    Transition,
    frozen_map,
)

__all__ = [
    "BASES", "LEVELS", "Limit", "Profile", "ProtocolErrorKind", "Requirement", "Source", "SpecError",
    "StateMachine", "Transition", "clear_cache", "default_profile", "load_profile", "plainest",
    "profile_names", "raw_tree", "refines", "requirement_ids", "sources", "spec_dir",
]


@functools.cache
def _profiles_file() -> dict[str, Any]:
    data: dict[str, Any] = read_yaml(spec_dir() / "profiles.yaml")
    return data


def profile_names(protocol: str | None = None) -> list[str]:
    """Names of the profiles, optionally of one protocol, in file order."""
    profiles = _profiles_file()["profiles"]
    return [n for n, p in profiles.items() if protocol is None or p["protocol"] == protocol]


def default_profile(protocol: str) -> str:
    try:
        name: str = _profiles_file()["defaults"][protocol]
        return name
    except KeyError:
        raise SpecError(f"unknown protocol {protocol!r}") from None


@functools.cache
def sources() -> Mapping[str, Source]:
    raw = read_yaml(spec_dir() / "sources.yaml")["sources"]
    return frozen_map({
        sid: Source(id=sid, title=s["title"], file=s.get("file"), sections=tuple(s.get("sections", ())),
                    url=s.get("url"), commit=s.get("commit"))
        for sid, s in raw.items()
    })


def _requirements(raw: Mapping[str, Any]) -> Mapping[str, Requirement]:
    out: dict[str, Requirement] = {}
    for rid, r in (raw or {}).items():
        src = r.get("source") or {}
        out[rid] = Requirement(
            id=rid, level=r.get("level"), subject=r.get("subject", "peer"), text=r.get("text", ""),
            source=str(src.get("doc", "")), section=str(src.get("section", "")),
            quote=r.get("quote"), rationale=r.get("rationale"), basis=r.get("basis"),
            disagrees=tuple(r.get("disagrees") or ()),
        )
    return frozen_map(out)


def _limits(raw: Mapping[str, Any], uses: list[tuple[str, str, tuple[Any, ...]]]
            ) -> Mapping[str, Limit]:
    where: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
    for name, key, path in uses:
        where.setdefault(name, []).append((key, path))
    return frozen_map({
        name: Limit(
            name=name, doc=lim.get("doc", ""), requirement=lim.get("requirement"),
            unit=lim.get("unit", ""), min=lim.get("min"), max=lim.get("max"),
            value=lim.get("value"), pattern=lim.get("pattern"), uses=tuple(where.get(name, ())),
        )
        for name, lim in (raw or {}).items()
    })


def raw_tree(name: str, root: Path | None = None) -> dict[str, Any]:
    """A profile's merged tree before ``$limit`` substitution (what ``spec export`` starts
    from). ``root``: another spec directory laid out like ``spec/`` (``queuewire spec diff``
    reads one from a path or a git revision); its files are data, and a protocol name or an
    overlay path that would leave it is refused."""
    if root is None:
        root, profiles = spec_dir(), _profiles_file()["profiles"]
    else:
        profiles = (read_yaml(root / "profiles.yaml") or {}).get("profiles")
    if not isinstance(profiles, Mapping) or not isinstance(profiles.get(name), Mapping):
        known = ", ".join(map(str, profiles)) if isinstance(profiles, Mapping) else ""
        raise SpecError(f"unknown profile {name!r} (known: {known})")
    entry = profiles[name]
    protocol = str(entry.get("protocol"))
    if not re.fullmatch(r"[A-Za-z0-9_-]+", protocol):
        raise SpecError(f"profile {name!r} names protocol {protocol!r}")
    tree = load_protocol_tree(root, protocol)
    for overlay in entry.get("overlays") or ():
        file = (root / str(overlay)).resolve()
        if root.resolve() not in file.parents:
            raise SpecError(f"overlay {overlay!r} is outside the spec directory")
        tree = merge_patch(tree, read_yaml(file) or {})
    return tree


@functools.cache
def load_profile(name: str) -> Profile:
    """Load a profile by name (``bunqueue/v2``, ``quicx/v1``, ``quicx/1.0.3``); cached."""
    entry = _profiles_file()["profiles"].get(name)
    tree = raw_tree(name)  # raises SpecError for an unknown name
    raw_limits = tree.get("limits") or {}
    uses: list[tuple[str, str, tuple[Any, ...]]] = []
    resolved = substitute_limits({k: v for k, v in tree.items() if k != "limits"}, raw_limits, uses)
    resolved["limits"] = raw_limits
    limits = _limits(raw_limits, uses)
    requirements = _requirements(resolved.get("requirements"))
    protocol = entry["protocol"]
    if protocol == "bunqueue":
        from . import bunqueue as builder
    elif protocol == "quicx":
        from . import quicx as builder  # type: ignore[no-redef]
    else:  # pragma: no cover - profiles.yaml is validated by lint
        raise SpecError(f"profile {name}: unknown protocol {protocol!r}")
    profile = Profile(
        name=name, protocol=protocol, doc=entry.get("doc", ""),
        overlays=tuple(entry.get("overlays") or ()), tree=resolved,
        requirements=requirements, limits=limits, sources=sources(),
        releases=tuple(str(r) for r in entry.get("releases") or ()),
        evidence=tuple(frozen_map(e) if isinstance(e, dict) else e
                       for e in entry.get("evidence") or ()),
    )
    object.__setattr__(profile, "model", builder.build(profile))
    return profile


@functools.cache
def requirement_ids(protocol: str) -> frozenset[str]:
    """Every requirement id some profile of ``protocol`` defines: a case or a scenario may
    cite one its profile lacks (it then runs under the profiles that have it), never one no
    profile has."""
    return frozenset(rid for name in profile_names(protocol)
                     for rid in load_profile(name).requirements)


def refines(name: str, base: str) -> bool:
    """True when profile ``name`` is profile ``base`` with more overlays after ``base``'s own
    (bunqueue/v3 refines bunqueue/2.9.5, and both refine bunqueue/v2)."""
    profiles = _profiles_file()["profiles"]
    a, b = profiles[name], profiles[base]
    ours, theirs = tuple(a.get("overlays") or ()), tuple(b.get("overlays") or ())
    return (a["protocol"] == b["protocol"] and len(ours) > len(theirs)
            and ours[:len(theirs)] == theirs)


def plainest(names: Iterable[str]) -> str | None:
    """Of profiles that fit the same evidence equally well, the one every other refines: it
    claims the least the evidence did not show (a detector names it). None when the profiles
    are not one line of refinements."""
    names = list(dict.fromkeys(names))
    for name in names:
        if all(other == name or refines(other, name) for other in names):
            return name
    return None


def clear_cache() -> None:
    """Forget loaded profiles (after pointing $QUEUEWIRE_SPEC_DIR elsewhere, as tests do)."""
    _profiles_file.cache_clear()
    sources.cache_clear()
    requirement_ids.cache_clear()
    load_profile.cache_clear()
