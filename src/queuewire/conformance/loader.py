"""Reads conformance cases (YAML under ``cases/<protocol>/``) into :class:`~.model.Case` values.

The case language is ``cases/README.md``. Loading is strict so that a typo never turns into a
silently skipped expectation: every key of a case, a step and an outcome is checked against
the language, every requirement id against the profile, every error name against the spec,
every ``${variable}`` against the built-ins and the case's ``save`` names, and every id is
unique. A problem is a :class:`CaseError` whose one-line message names the file, the case (and
step) and the key. ``generate: module:function`` entries call ``function(profile)`` (the loaded
:class:`~queuewire.spec.Profile`), which returns cases; ``logic: module:function`` must name an
``async def``. The YAML files are package data read through ``importlib.resources``, so an
installed wheel finds them as a checkout does. Cases that do not apply to the profile are
dropped after they are checked.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..spec import LEVELS, Profile, load_profile, profile_names, requirement_ids
from . import httpapi
from .model import Case

CASE_KEYS = {"id", "title", "requirements", "command", "profiles", "info", "tags", "steps",
             "logic", "params", "cleanup", "exclusive"}
BUILTIN_VARS = {"queue", "queue2", "queue3", "token", "now", "uuid", "profile"}
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# step language per protocol: action keys (exactly one per step) and modifier keys
ACTIONS = {
    "bunqueue": {"send", "send_raw", "send_frames", "pipeline", "recv", "sleep", "close", "http"},
    "quicx": {"send", "send_raw", "recv", "sleep", "close"},
}
MODIFIERS = {
    "bunqueue": {"conn", "expect", "save", "timeout", "reqid", "split", "wait", "auth", "doc"},
    "quicx": {"conn", "role", "expect", "save", "timeout", "doc", "probe"},
}
OUTCOMES = {
    "bunqueue": {"ok", "error", "close", "none", "frame", "http"},
    "quicx": {"message", "error", "close", "none"},
}
OUTCOME_MODIFIERS = {"level", "requirement", "degraded"}
HTTP_STEP_KEYS = {"http", "expect", "save", "timeout", "auth", "doc"}
SEND_RAW_KEYS = {"hex", "repeat", "frame", "declared_length", "truncate", "length_prefix",
                 "body_bytes", "header", "payload"}


class CaseError(ValueError):
    """A case file breaks the case language (the message names file, case and key)."""


def package_dir(protocol: str) -> Any:
    """The packaged ``cases/<protocol>`` directory (a Traversable)."""
    return resources.files("queuewire.conformance").joinpath("cases", protocol)


def load_cases(protocol: str, profile: str | Profile | None = None) -> list[Case]:
    """Every packaged case of ``protocol`` that applies to ``profile``, checked."""
    return load_dir(package_dir(protocol), protocol, profile)


def load_dir(directory: Any, protocol: str, profile: str | Profile | None = None) -> list[Case]:
    """Load every ``*.yaml`` of ``directory`` (a path or Traversable), sorted by file name."""
    if protocol not in ACTIONS:
        raise CaseError(f"unknown protocol {protocol!r} (bunqueue or quicx)")
    prof = _profile(protocol, profile)
    d = Path(directory) if isinstance(directory, str) else directory
    files = sorted((f for f in d.iterdir() if f.name.endswith((".yaml", ".yml"))),
                   key=lambda f: f.name) if d.is_dir() else []
    cases: list[Case] = []
    for f in files:
        cases.extend(load_text(f.read_text(encoding="utf-8"), f"cases/{protocol}/{f.name}",
                               protocol, prof, check_unique=False))
    chosen = [c for c in cases if c.applies_to(prof)]
    _unique(chosen)
    return chosen


def load_text(text: str, source: str, protocol: str, profile: str | Profile | None = None,
              *, check_unique: bool = True) -> list[Case]:
    """Cases of one YAML document (``source`` names it in errors); not filtered by profile."""
    prof = _profile(protocol, profile)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise CaseError(f"{source}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if doc is None:
        return []
    if not isinstance(doc, dict) or set(doc) - {"cases"}:
        keys = sorted(set(doc) - {"cases"}) if isinstance(doc, dict) else type(doc).__name__
        raise CaseError(f"{source}: a case file is a map with one key, cases: (found {keys})")
    entries = doc.get("cases") or []
    if not isinstance(entries, list):
        raise CaseError(f"{source}: cases: must be a list")
    out: list[Case] = []
    for i, entry in enumerate(entries):
        where = f"{source} #{i}"
        if isinstance(entry, dict) and "generate" in entry:
            out.extend(_generate(entry, where, protocol, prof))
            continue
        out.append(parse_case(entry, where, protocol, prof))
    if check_unique:
        _unique(c for c in out if c.applies_to(prof))
    return out


def parse_case(entry: Any, where: str, protocol: str, profile: Profile) -> Case:
    if not isinstance(entry, dict):
        raise CaseError(f"{where}: a case is a map, not {type(entry).__name__}")
    cid = entry.get("id")
    if not isinstance(cid, str) or not cid:
        raise CaseError(f"{where}: case has no string id")
    ctx = f"{where} case {cid}"
    unknown = sorted(set(entry) - CASE_KEYS)
    if unknown:
        raise CaseError(f"{ctx}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(CASE_KEYS))})")
    title = entry.get("title")
    if not isinstance(title, str) or not title:
        raise CaseError(f"{ctx}: title is required (a string)")
    reqs = _str_list(entry.get("requirements"), ctx, "requirements")
    if not reqs:
        raise CaseError(f"{ctx}: requirements must list at least one requirement id")
    profiles = _str_list(entry.get("profiles"), ctx, "profiles")
    known_profiles = set(profile_names(protocol))
    for p in profiles:
        if p not in known_profiles:
            raise CaseError(f"{ctx}: profiles: unknown profile {p!r} of {protocol}")
    case = Case(
        id=cid, title=title, protocol=protocol, requirements=tuple(reqs),
        steps=tuple(entry.get("steps") or ()), logic=entry.get("logic"),
        profiles=tuple(profiles), command=entry.get("command"), info=bool(entry.get("info", False)),
        tags=tuple(_str_list(entry.get("tags"), ctx, "tags")), params=entry.get("params"),
        source=where, cleanup=_step_list(entry.get("cleanup"), ctx, "cleanup"),
        exclusive=_flag(entry.get("exclusive", False), ctx, "exclusive"))
    check_case(case, profile)
    return case


def check_case(case: Case, profile: Profile) -> None:
    """Check a case (from YAML or a generator) against the language and ``profile``."""
    ctx = f"{case.source or '<generated>'} case {case.id}"
    if case.protocol not in ACTIONS:
        raise CaseError(f"{ctx}: unknown protocol {case.protocol!r}")
    if case.profiles and profile.name not in case.profiles:
        return  # checked against the profiles it is for, when those are loaded
    for rid in case.requirements:
        if rid in profile.requirements:
            continue
        if case.profiles:
            raise CaseError(f"{ctx}: requirement {rid!r} is not in profile {profile.name}, "
                            f"which the case lists")
        if rid not in requirement_ids(case.protocol):
            raise CaseError(f"{ctx}: requirement {rid!r} is in no {case.protocol} profile")
        return  # not run under this profile: checked against the profiles that have it
    if case.command is not None and not isinstance(case.command, str):
        raise CaseError(f"{ctx}: command must be a string")
    if bool(case.steps) == bool(case.logic):
        raise CaseError(f"{ctx}: a case has either steps: or logic:, exactly one")
    saved: set[str] = set()
    if case.logic:
        resolve_function(case.logic, ctx, "logic", want_async=True)
    for n, step in enumerate(case.steps, 1):
        _check_step(step, f"{ctx} step {n}", case.protocol, profile, saved)
    for n, step in enumerate(case.cleanup, 1):
        _check_step(step, f"{ctx} cleanup step {n}", case.protocol, profile, saved)
    if case.logic:
        return  # its cleanup may use variables the logic sets with ctx.set_var
    used: set[str] = set()
    _collect_vars(case.steps, used)
    _collect_vars(case.cleanup, used)
    unknown = sorted(used - BUILTIN_VARS - saved - {"i"})
    if unknown:
        raise CaseError(f"{ctx}: unknown variable ${{{unknown[0]}}} (built in: "
                        f"{', '.join(sorted(BUILTIN_VARS))}, or a save: name)")


def _check_step(step: Any, ctx: str, protocol: str, profile: Profile, saved: set[str]) -> None:
    if not isinstance(step, dict):
        raise CaseError(f"{ctx}: a step is a map, not {type(step).__name__}")
    actions = [k for k in step if k in ACTIONS[protocol]]
    unknown = [k for k in step if k not in ACTIONS[protocol] and k not in MODIFIERS[protocol]]
    if unknown:
        allowed = sorted(ACTIONS[protocol] | MODIFIERS[protocol])
        raise CaseError(f"{ctx}: unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})")
    if len(actions) != 1:
        raise CaseError(f"{ctx}: a step has exactly one action of "
                        f"{', '.join(sorted(ACTIONS[protocol]))} (found {actions or 'none'})")
    action = actions[0]
    body = step[action]
    if action == "http":
        bad = sorted(set(step) - HTTP_STEP_KEYS)
        if bad:
            raise CaseError(f"{ctx}: {bad[0]}: does not apply to an http: step (allowed: "
                            f"{', '.join(sorted(HTTP_STEP_KEYS - {'http'}))})")
        why = httpapi.check_request(body, ctx)
        if why:
            raise CaseError(f"{ctx}: {why}")
    if action == "send":
        if not isinstance(body, dict):
            raise CaseError(f"{ctx}: send: takes a map")
        if protocol == "quicx":
            _check_quicx_send(body, ctx, profile)
    elif action == "send_raw":
        if isinstance(body, dict):
            bad = sorted(set(body) - SEND_RAW_KEYS)
            if bad:
                raise CaseError(f"{ctx}: send_raw: unknown key {bad[0]!r}")
            if "hex" in body and not isinstance(body["hex"], str):
                raise CaseError(f"{ctx}: send_raw: hex: takes a string")
        elif isinstance(body, str):
            _hex(body, ctx)
        else:
            raise CaseError(f"{ctx}: send_raw: takes a hex string or a map")
    elif action == "send_frames":
        if not isinstance(body, list) or not all(isinstance(m, dict) for m in body) or not body:
            raise CaseError(f"{ctx}: send_frames: takes a non-empty list of maps")
    elif action == "pipeline":
        if not isinstance(body, dict) or set(body) - {"count", "send"} or \
                not isinstance(body.get("count"), int) or not isinstance(body.get("send"), dict):
            raise CaseError(f"{ctx}: pipeline: takes {{count: N, send: {{map}}}}")
    elif action == "sleep":
        if isinstance(body, bool) or not isinstance(body, (int, float)) or body < 0:
            raise CaseError(f"{ctx}: sleep: takes milliseconds (a number >= 0)")
    elif action == "close":
        if body is not True:
            raise CaseError(f"{ctx}: close: takes true")
    if "conn" in step and (not isinstance(step["conn"], int) or step["conn"] < 1):
        raise CaseError(f"{ctx}: conn: takes a connection number from 1")
    if "timeout" in step and (isinstance(step["timeout"], bool)
                              or not isinstance(step["timeout"], (int, float))):
        raise CaseError(f"{ctx}: timeout: takes seconds")
    if "role" in step and step["role"] not in profile.model.peer_roles:
        raise CaseError(f"{ctx}: role: {step['role']!r} is not one of "
                        f"{', '.join(profile.model.peer_roles)}")
    if "save" in step:
        save = step["save"]
        if not isinstance(save, dict) or not all(isinstance(v, str) for v in save.values()):
            raise CaseError(f"{ctx}: save: takes {{variable: dotted.path}}")
        saved.update(save)
    if "expect" in step:
        if action in ("sleep", "close"):
            raise CaseError(f"{ctx}: expect: does not apply to {action}:")
        _check_expect(step["expect"], ctx, protocol, profile)
        outcomes = step["expect"].get("any_of") or [step["expect"]]
        if any(("http" in o) != (action == "http") for o in outcomes):
            raise CaseError(f"{ctx}: an http: step takes http: outcomes only, and http: "
                            f"outcomes belong to http: steps")
    elif action == "recv":
        raise CaseError(f"{ctx}: recv: needs an expect:")


def _check_expect(expect: Any, ctx: str, protocol: str, profile: Profile) -> None:
    if not isinstance(expect, dict):
        raise CaseError(f"{ctx}: expect: takes an outcome map or {{any_of: [outcomes]}}")
    if "any_of" in expect:
        if set(expect) != {"any_of"} or not isinstance(expect["any_of"], list) or not expect["any_of"]:
            raise CaseError(f"{ctx}: expect: any_of: takes a non-empty list of outcomes, alone")
        for i, o in enumerate(expect["any_of"]):
            _check_outcome(o, f"{ctx} any_of #{i}", protocol, profile)
    else:
        _check_outcome(expect, ctx, protocol, profile)


def _check_outcome(o: Any, ctx: str, protocol: str, profile: Profile) -> None:
    if not isinstance(o, dict):
        raise CaseError(f"{ctx}: an outcome is a map")
    kinds = [k for k in o if k in OUTCOMES[protocol]]
    bad = [k for k in o if k not in OUTCOMES[protocol] and k not in OUTCOME_MODIFIERS]
    if bad:
        allowed = sorted(OUTCOMES[protocol] | OUTCOME_MODIFIERS)
        raise CaseError(f"{ctx}: unknown outcome key {bad[0]!r} (allowed: {', '.join(allowed)})")
    if len(kinds) != 1:
        raise CaseError(f"{ctx}: an outcome has exactly one of "
                        f"{', '.join(sorted(OUTCOMES[protocol]))} (found {kinds or 'none'})")
    if "level" in o and o["level"] not in LEVELS:
        raise CaseError(f"{ctx}: level: must be one of {', '.join(LEVELS)}")
    if "requirement" in o and o["requirement"] not in profile.requirements:
        raise CaseError(f"{ctx}: requirement {o['requirement']!r} is not in profile {profile.name}")
    kind = kinds[0]
    val = o[kind]
    spec = profile.model
    if kind == "error":
        if protocol == "bunqueue":
            if isinstance(val, str):
                if val not in spec.errors:
                    raise CaseError(f"{ctx}: error: {val!r} is not an error of "
                                    f"spec/bunqueue/protocol.yaml errors:")
            elif isinstance(val, dict):
                if set(val) != {"matches"} or not isinstance(val["matches"], str):
                    raise CaseError(f"{ctx}: error: takes NAME, true or {{matches: REGEX}}")
                try:
                    re.compile(val["matches"])
                except re.error as exc:
                    raise CaseError(f"{ctx}: error: matches: bad regex: {exc}") from None
            elif val is not True:
                raise CaseError(f"{ctx}: error: takes NAME, true or {{matches: REGEX}}")
        elif val is not True and (not isinstance(val, str) or val not in spec.error_codes):
            raise CaseError(f"{ctx}: error: {val!r} is not an error code of {profile.name} "
                            f"({', '.join(spec.error_codes)}) or true")
    elif kind == "close":
        if isinstance(val, dict):
            if set(val) != {"after_error"} or (protocol == "bunqueue" and val["after_error"]
                                               not in spec.errors and val["after_error"] is not True):
                raise CaseError(f"{ctx}: close: takes true or {{after_error: NAME}}")
        elif val is not True:
            raise CaseError(f"{ctx}: close: takes true or {{after_error: NAME}}")
    elif kind == "none":
        if isinstance(val, bool) or not isinstance(val, (int, float)) or val <= 0:
            raise CaseError(f"{ctx}: none: takes milliseconds (a number > 0)")
    elif kind == "http":
        why = httpapi.check_outcome(val)
        if why:
            raise CaseError(f"{ctx}: {why}")
    elif kind in ("ok", "frame"):
        if val is not None and not isinstance(val, dict):
            raise CaseError(f"{ctx}: {kind}: takes a subset map")
    elif kind == "message":
        if not isinstance(val, dict) or "type" not in val or set(val) - {"type", "fields"}:
            raise CaseError(f"{ctx}: message: takes {{type: NAME, fields: {{subset}}}}")
        if val["type"] not in spec.messages:
            raise CaseError(f"{ctx}: message: type {val['type']!r} is not a message of {profile.name}")


def _check_quicx_send(body: Mapping, ctx: str, profile: Profile) -> None:
    if set(body) - {"type", "fields"} or "type" not in body:
        raise CaseError(f"{ctx}: send: takes {{type: NAME, fields: {{...}}}}")
    if body["type"] not in profile.model.messages:
        raise CaseError(f"{ctx}: send: type {body['type']!r} is not a message of {profile.name}")


def _hex(text: str, ctx: str) -> bytes:
    try:
        return bytes.fromhex(re.sub(r"\s+", "", text))
    except ValueError:
        raise CaseError(f"{ctx}: send_raw: {text[:40]!r} is not hex") from None


def _collect_vars(node: Any, out: set[str]) -> None:
    if isinstance(node, str):
        out.update(VAR.findall(node))
    elif isinstance(node, dict):
        for k, v in node.items():
            _collect_vars(k, out)
            _collect_vars(v, out)
    elif isinstance(node, (list, tuple)):
        for v in node:
            _collect_vars(v, out)


def _step_list(value: Any, ctx: str, key: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CaseError(f"{ctx}: {key}: takes a list of steps")
    return tuple(value)


def _flag(value: Any, ctx: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise CaseError(f"{ctx}: {key}: takes true or false")
    return value


def _str_list(value: Any, ctx: str, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CaseError(f"{ctx}: {key}: takes a list of strings")
    return list(value)


def resolve_function(ref: Any, ctx: str, key: str, *, want_async: bool = False) -> Callable:
    """``"module:function"`` -> the function (a CaseError names ``ctx`` and ``key``)."""
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise CaseError(f"{ctx}: {key}: takes 'module:function'")
    mod_name, fn_name = ref.split(":")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the case file's problem
        raise CaseError(f"{ctx}: {key}: cannot import {mod_name}: {exc.__class__.__name__}: {exc}") \
            from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise CaseError(f"{ctx}: {key}: {mod_name} has no function {fn_name}")
    if want_async and not inspect.iscoroutinefunction(fn):
        raise CaseError(f"{ctx}: {key}: {ref} must be an async def taking ctx")
    return fn


def _generate(entry: Mapping, where: str, protocol: str, profile: Profile) -> list[Case]:
    if set(entry) != {"generate"}:
        extra = sorted(set(entry) - {"generate"})
        raise CaseError(f"{where}: a generate: entry has no other key (found {extra[0]!r})")
    fn = resolve_function(entry["generate"], where, "generate")
    ctx = f"{where} generate {entry['generate']}"
    try:
        made = list(fn(profile))
    except CaseError:
        raise
    except Exception as exc:  # noqa: BLE001 - a generator bug is reported as the entry's error
        raise CaseError(f"{ctx}: raised {exc.__class__.__name__}: {exc}") from None
    out = []
    for made_case in made:
        c = made_case
        if not isinstance(c, Case):
            raise CaseError(f"{ctx}: yielded {type(c).__name__}, not a Case")
        if c.protocol != protocol:
            raise CaseError(f"{ctx}: case {c.id} is for {c.protocol}, not {protocol}")
        if not c.source:
            c = dataclasses.replace(c, source=f"{where} ({entry['generate']})")
        check_case(c, profile)
        out.append(c)
    return out


def _unique(cases: Iterable[Case]) -> None:
    seen: dict[str, str] = {}
    for c in cases:
        if c.id in seen:
            raise CaseError(f"{c.source}: case id {c.id} is already used by {seen[c.id]}")
        seen[c.id] = c.source


def _profile(protocol: str, profile: str | Profile | None) -> Profile:
    if isinstance(profile, Profile):
        prof = profile
    else:
        from ..spec import default_profile
        prof = load_profile(profile or default_profile(protocol))
    if prof.protocol != protocol:
        raise CaseError(f"profile {prof.name} is for {prof.protocol}, not {protocol}")
    return prof
