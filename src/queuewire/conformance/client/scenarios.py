"""Client scenarios as data: ``cases/client/<protocol>.yaml`` read into :class:`Scenario`.

A scenario is what the conformance server does (``server``: the adversarial behaviour, see
:mod:`.server`), what the testee is asked to do (``options`` and ``actions``, sent as they
are after ``${queue}`` / ``${token}`` substitution), and what is judged: ``expect`` (an
action's result) and ``judge`` (what the server saw, :mod:`.judges`). Every expectation and
judgement names the requirement it rests on; its level is that requirement's level in the
profile, or a lower ``level`` the file gives (never a higher one: a FAIL rests on a MUST of
the documents). The loader refuses unknown keys, actions, behaviours and judgements, and ids
the profile does not define, naming the file and the scenario.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from ...spec import LEVELS, Profile, requirement_ids

__all__ = ["ACTIONS", "BEHAVIOURS", "ERROR_TYPES", "Expectation", "Judgement", "Scenario",
           "ScenarioError", "load_scenarios", "select_scenarios"]

#: the testee contract's action vocabulary per protocol (docs/conformance/client-testee.md)
ACTIONS = {
    "bunqueue": {"add": {"queue", "name", "data"}, "add_many": {"queue", "name", "items"},
                 "count": {"queue"}, "get_job": {"queue", "id"},
                 "process": {"queue", "count", "work_ms", "timeout_ms"},
                 "sleep": {"ms"}},
    "quicx": {"submit": {"type", "payload", "wait_result", "timeout_ms"},
              "work": {"types", "count", "work_ms", "timeout_ms"}, "sleep": {"ms"}},
}
#: the testee contract's error types
ERROR_TYPES = ("timeout", "connection_lost", "refused", "unsupported", "other")
#: the conformance servers' behaviours (client/server.py, client/quicx_server.py)
BEHAVIOURS = {"bunqueue": {"auth_token", "reorder", "coalesce", "split", "delay", "drop", "dead",
                           "refuse", "lock_ttl", "restart"},
              "quicx": {"wait_storm", "drop_after_task", "late_pong", "heartbeat"}}
SCENARIO_KEYS = {"id", "title", "requirements", "server", "options", "actions", "expect",
                 "judge", "profiles"}
EXPECT_KEYS = {"action", "ok", "error_type", "error_contains", "value", "requirement", "level"}


class ScenarioError(ValueError):
    """A scenario file that does not follow the scenario language."""


@dataclass(frozen=True)
class Expectation:
    action: int
    requirement: str
    level: str
    ok: bool | None = None
    error_type: str | None = None
    error_contains: str | None = None
    value: Any = None
    has_value: bool = False


@dataclass(frozen=True)
class Judgement:
    check: str
    requirement: str
    level: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    protocol: str
    requirements: tuple[str, ...]
    server: dict[str, Any]
    options: dict[str, Any]
    actions: tuple[dict[str, Any], ...]
    expect: tuple[Expectation, ...]
    judge: tuple[Judgement, ...]
    profiles: tuple[str, ...] = ()
    source: str = ""
    missing: tuple[str, ...] = ()   # requirements it cites that the loading profile lacks

    def applies_to(self, profile: str) -> bool:
        """Run under ``profile`` (by name: the profile it was loaded for): it has every
        requirement the scenario cites, and is one of ``profiles`` when those are listed
        (the rule of server cases, conformance/cases/README.md)."""
        return not self.missing and (not self.profiles or profile in self.profiles)

    def bind(self, queue: str, token: str) -> tuple[dict[str, Any], dict[str, Any],
                                                  list[dict[str, Any]]]:
        """``server``, ``options`` and ``actions`` with ``${queue}`` and ``${token}`` set."""
        def sub(value: Any) -> Any:
            if isinstance(value, str):
                return value.replace("${queue}", queue).replace("${token}", token)
            if isinstance(value, list):
                return [sub(v) for v in value]
            if isinstance(value, dict):
                return {k: sub(v) for k, v in value.items()}
            return value
        return (sub(copy.deepcopy(self.server)), sub(copy.deepcopy(self.options)),
                sub(copy.deepcopy(list(self.actions))))


def _level(profile: Profile, where: str, rid: Any, given: Any) -> str:
    req = profile.requirements.get(rid) if isinstance(rid, str) else None
    if req is None:
        raise ScenarioError(f"{where}: requirement {rid!r} is not defined in {profile.name}")
    if given is None:
        return req.level
    # LEVELS runs from the strongest (MUST) down: a scenario may lower a level, never raise it
    if given not in LEVELS or LEVELS.index(given) < LEVELS.index(req.level):
        raise ScenarioError(f"{where}: level {given!r} is not at most {rid}'s {req.level}")
    return str(given)


def _requirement(profile: Profile, where: str, rid: Any, given: Any) -> tuple[str, str]:
    """(requirement id, level) of an expect or judge entry (:func:`_level` checks both)."""
    level = _level(profile, where, rid, given)
    return str(rid), level  # _level raised unless rid is a str the profile defines


def _scenario(profile: Profile, protocol: str, raw: Any, where: str) -> Scenario:
    from .judges import JUDGES
    from .quicx_judges import QUICX_JUDGES

    known_checks = {**JUDGES, **QUICX_JUDGES}

    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: a scenario is a map")
    unknown = set(raw) - SCENARIO_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}")
    for key in ("id", "title", "requirements", "actions"):
        if key not in raw:
            raise ScenarioError(f"{where}: missing {key!r}")
    sid = str(raw["id"])
    where = f"{where} ({sid})"
    profiles = tuple(raw.get("profiles") or ())
    if profiles and profile.name not in profiles:  # judged against the profiles it names only
        return Scenario(sid, str(raw["title"]), protocol, (), {}, {}, (), (), (), profiles, where)
    missing = tuple(rid for rid in raw["requirements"] if rid not in profile.requirements)
    if missing and not profiles:
        # cites a requirement only other profiles define (bunqueue/v3's int64 rule): judged
        # against those; a requirement no profile of the protocol defines is an error
        for rid in missing:
            if rid not in requirement_ids(protocol):
                raise ScenarioError(f"{where}: requirement {rid!r} is in no {protocol} profile")
        return Scenario(sid, str(raw["title"]), protocol, (), {}, {}, (), (), (), profiles, where,
                        missing)
    for rid in raw["requirements"]:
        _level(profile, where, rid, None)
    server = dict(raw.get("server") or {})
    behaviours = BEHAVIOURS.get(protocol, set())
    if set(server) - behaviours:
        raise ScenarioError(f"{where}: unknown server behaviour(s) {sorted(set(server) - behaviours)}")
    vocabulary = ACTIONS.get(protocol, {})
    actions = tuple(raw["actions"])
    for i, action in enumerate(actions):
        op = action.get("op") if isinstance(action, dict) else None
        if op not in vocabulary:
            raise ScenarioError(f"{where}: action {i}: unknown op {op!r} (known: {sorted(vocabulary)})")
        extra = set(action) - vocabulary[op] - {"op"}
        if extra:
            raise ScenarioError(f"{where}: action {i} ({op}): unknown key(s) {sorted(extra)}")
    expects = []
    for i, e in enumerate(raw.get("expect") or ()):
        if not isinstance(e, dict) or set(e) - EXPECT_KEYS or "action" not in e:
            raise ScenarioError(f"{where}: expect {i}: a map of {sorted(EXPECT_KEYS)} with 'action'")
        if not 0 <= int(e["action"]) < len(actions):
            raise ScenarioError(f"{where}: expect {i}: no action {e['action']}")
        if e.get("error_type") not in (None, *ERROR_TYPES):
            raise ScenarioError(f"{where}: expect {i}: unknown error_type {e['error_type']!r}")
        rid, level = _requirement(profile, f"{where}: expect {i}", e.get("requirement"),
                                  e.get("level"))
        expects.append(Expectation(int(e["action"]), rid, level,
                                   e.get("ok"), e.get("error_type"), e.get("error_contains"),
                                   e.get("value"), "value" in e))
    judges = []
    for i, j in enumerate(raw.get("judge") or ()):
        if not isinstance(j, dict) or j.get("check") not in known_checks:
            raise ScenarioError(f"{where}: judge {i}: check must be one of {sorted(known_checks)}")
        params = {k: v for k, v in j.items() if k not in ("check", "requirement", "level")}
        rid, level = _requirement(profile, f"{where}: judge {i}", j.get("requirement"),
                                  j.get("level"))
        judges.append(Judgement(j["check"], rid, level, params))
    if not expects and not judges:
        raise ScenarioError(f"{where}: judges nothing (no expect, no judge)")
    return Scenario(sid, str(raw["title"]), protocol, tuple(raw["requirements"]), server,
                    dict(raw.get("options") or {}), actions, tuple(expects), tuple(judges),
                    tuple(raw.get("profiles") or ()), where)


def load_scenarios(protocol: str, profile: Profile, text: str | None = None) -> list[Scenario]:
    """The packaged scenarios of ``protocol`` that apply to ``profile`` (or those of ``text``)."""
    name = f"cases/client/{protocol}.yaml"
    if text is None:
        path = resources.files("queuewire.conformance").joinpath("cases", "client",
                                                                f"{protocol}.yaml")
        if not path.is_file():
            return []
        text = path.read_text(encoding="utf-8")
    doc = yaml.safe_load(text) or {}
    out: list[Scenario] = []
    seen: set[str] = set()
    for i, raw in enumerate(doc.get("scenarios") or ()):
        sc = _scenario(profile, protocol, raw, f"{name}[{i}]")
        if sc.id in seen:
            raise ScenarioError(f"{name}: duplicate scenario id {sc.id}")
        seen.add(sc.id)
        if sc.applies_to(profile.name):
            out.append(sc)
    return out


def select_scenarios(scenarios: Iterable[Scenario], globs: Sequence[str] = ()) -> list[Scenario]:
    return [s for s in scenarios if not globs or any(fnmatch.fnmatchcase(s.id, g) for g in globs)]
