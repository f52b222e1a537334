"""``queuewire spec lint``: the rules every profile of the spec must satisfy.

Lint loads each profile and reports, as ``LintIssue`` rows, what would make the spec an
unreliable source of truth: a field, message, limit, error or definition without a doc line;
a requirement without level, text or a resolvable source, or citing a seed document without a
verbatim ``quote`` (an uncited requirement); a quote not found in its document (checked when
the documents are reachable); a requirement id cited but not defined; a JSON Schema invalid
under draft 2020-12; a value that is not plain JSON data; two messages sharing an opcode or two
error codes sharing a value; a ``resources`` section naming a command, request field or reply path
the profile does not have; a state table's ``learn`` section whose inputs drive events no row
has or use connections it does not open; and ``trace.yaml``, the recording format (every field and code
documented, codes unique, layouts loadable). The levels policy (spec/README.md, "Levels and
basis"): a level the basis does not allow; a ``stated`` requirement whose rationale says the
documents are silent (:data:`SILENCE`); a requirement whose level is not its ``kind``'s
(``requirement_kinds``) without a ``level-reason``; a ``reading-band`` that names no limit or
lies outside it. The interpreted ``jsonschema`` package is used here, where
thoroughness matters more than speed.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from . import BASES, LEVELS, SpecError, load_profile, profile_names, raw_tree, sources, spec_dir
from ._load import walk

DOC_KEYS = ("doc", "description")
# Maps whose every entry is a named spec element that needs a doc line.
DOCUMENTED_MAPS = {"limits", "errors", "protocol_errors", "definitions", "messages",
                   "error_codes", "semantics", "commands", "job_states", "extensions", "rules",
                   "events", "safeguards", "lists", "probes"}
# Lists whose every item is a field that needs a doc line.
DOCUMENTED_LISTS = {"layout", "fields"}
SEED_SOURCES = {"000", "001", "002", "003", "004", "N1"}
JSON_SCALARS = (str, int, float, bool, type(None))
#: Words by which a rationale says that the documents are silent on what its requirement says
#: ("the documents are silent", "the document does not say", "not stated", "names the option
#: without saying what happens"). A ``stated`` requirement rests on the documents' words, so
#: its rationale may not say so: such a requirement is ``implied`` (a reading) or a
#: ``decision`` (spec/README.md, "Lint"). Matched case-insensitively, whitespace folded.
SILENCE = re.compile(r"\b(?:silent|(?:do|does|did) not (?:say|state|specify)|not (?:stated|said|"
                     r"specified)|without saying|says? nothing)\b", re.IGNORECASE)
KINDS_KEY = "requirement_kinds"


@dataclass(frozen=True)
class LintIssue:
    profile: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.profile}: {self.path}: {self.message}"


def sources_dir() -> Path | None:
    """Where the seed documents are: $QUEUEWIRE_SOURCES_DIR or ../shared beside the repo."""
    env = os.environ.get("QUEUEWIRE_SOURCES_DIR")
    if env:
        return Path(env)
    candidate = spec_dir().resolve().parent.parent / "shared"
    return candidate if (candidate / "seeds").is_dir() else None


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


_SOURCE_TEXT: dict[str, str | None] = {}


def source_text(source_id: str) -> str | None:
    """The whitespace-free text of a source document, or None when it is not reachable."""
    if source_id not in _SOURCE_TEXT:
        src = sources().get(source_id)
        root = sources_dir()
        text = None
        if src is not None and src.file and root is not None and (root / src.file).is_file():
            text = _squash((root / src.file).read_text(encoding="utf-8"))
        _SOURCE_TEXT[source_id] = text
    return _SOURCE_TEXT[source_id]


def _dotted(path: Iterable[Any]) -> str:
    return ".".join(str(p) for p in path) or "<root>"


def _check_plain_json(name: str, tree: Any) -> Iterable[LintIssue]:
    for path, node in walk(tree):
        if isinstance(node, dict):
            for key in node:
                if not isinstance(key, str):
                    yield LintIssue(name, _dotted(path), f"key {key!r} is not a string")
        elif not isinstance(node, (list,) + JSON_SCALARS) or isinstance(node, _dt.date):
            yield LintIssue(name, _dotted(path), f"{type(node).__name__} is not JSON data")


def _check_docs(name: str, tree: Any) -> Iterable[LintIssue]:
    for path, node in walk(tree):
        last = path[-1] if path else None
        if isinstance(node, dict) and last in DOCUMENTED_MAPS:
            for key, item in node.items():
                if isinstance(item, dict) and not any(item.get(k) for k in DOC_KEYS):
                    yield LintIssue(name, _dotted(path + (key,)), "no doc line")
        if isinstance(node, dict) and last == "properties" and isinstance(node, dict):
            for key, item in node.items():
                if isinstance(item, dict) and not item.get("description"):
                    yield LintIssue(name, _dotted(path + (key,)), "field without description")
        if isinstance(node, list) and last in DOCUMENTED_LISTS:
            for i, item in enumerate(node):
                if isinstance(item, dict) and not item.get("doc"):
                    yield LintIssue(name, _dotted(path + (i,)), "field without doc")


def _cited_ids(tree: Any) -> Iterable[tuple[tuple[Any, ...], str]]:
    for path, node in walk(tree):
        if not isinstance(node, dict) or (path and path[0] == "requirements"):
            continue
        for key in ("requirement", "x-requirement", "answer-requirement", "refusal"):
            if isinstance(node.get(key), str):
                yield path + (key,), node[key]
        if isinstance(node.get("refusal"), dict):   # a learn input's refusal per state
            for state, rid in node["refusal"].items():
                yield path + ("refusal", state), rid
        by_kw = node.get("x-keywordRequirements")
        if isinstance(by_kw, dict):
            for kw, rid in by_kw.items():
                yield path + ("x-keywordRequirements", kw), rid


def _check_requirements(profile: Any) -> Iterable[LintIssue]:
    name = profile.name
    srcs = profile.sources
    for rid, req in profile.requirements.items():
        where = f"requirements.{rid}"
        if req.level not in LEVELS:
            yield LintIssue(name, where, f"level {req.level!r} is not one of {LEVELS}")
        if not req.text:
            yield LintIssue(name, where, "no text")
        src = srcs.get(req.source)
        if src is None:
            yield LintIssue(name, where, f"uncited: source {req.source!r} is not in sources.yaml")
            continue
        if req.section not in src.sections:
            yield LintIssue(name, where, f"uncited: section {req.section!r} is not a section of "
                                         f"source {req.source}")
        if req.source in SEED_SOURCES:
            if not req.quote:
                yield LintIssue(name, where, f"uncited: no quote from source {req.source}")
            else:
                text = source_text(req.source)
                if text is not None and _squash(req.quote) not in text:
                    yield LintIssue(name, where, f"quote not found in source {req.source}: "
                                                 f"{req.quote[:60]!r}")
        elif req.source == "QW" and not req.rationale:
            yield LintIssue(name, where, "a queuewire decision needs a rationale")
        yield from _check_basis(name, where, req)
        for i, other in enumerate(req.disagrees):
            doc, quote = str(other.get("doc", "")), other.get("quote")
            text = source_text(doc) if doc in SEED_SOURCES else None
            published = doc in sources() and sources()[doc].commit is not None
            if (doc not in SEED_SOURCES and not published) or not quote:
                yield LintIssue(name, f"{where}.disagrees.{i}",
                                "a disagreement cites a document (a seed, or a published "
                                "specification at a commit) and quotes it")
            elif text is not None and _squash(quote) not in text:
                yield LintIssue(name, f"{where}.disagrees.{i}",
                                f"quote not found in source {doc}: {quote[:60]!r}")
    for path, rid in _cited_ids(profile.tree):
        if rid not in profile.requirements:
            yield LintIssue(name, _dotted(path), f"cites undefined requirement {rid}")


def _check_basis(name: str, where: str, req: Any) -> Iterable[LintIssue]:
    """The levels policy (spec/README.md, "Levels and basis"): a MUST rests on words of the
    documents; a reading or a decision of ours is at most a SHOULD and says why."""
    if req.basis not in BASES:
        yield LintIssue(name, where, f"basis {req.basis!r} is not one of {BASES}")
        return
    if req.basis == "stated":
        if req.source == "QW" or not req.quote:
            yield LintIssue(name, where, "basis stated needs a quote from a document")
        silent = SILENCE.search(" ".join((req.rationale or "").split()))
        if silent:
            yield LintIssue(name, where, f"basis stated, but its rationale says the documents do "
                                         f"not state it ({silent.group(0)!r}): make it implied "
                                         f"(a reading) or a decision")
    elif req.level == "MUST":
        yield LintIssue(name, where, f"a MUST must be stated by the documents, not "
                                     f"{req.basis} (make it SHOULD, or quote the sentence)")
    if req.basis == "implied" and not req.rationale:
        yield LintIssue(name, where, "an implied requirement needs a rationale (the reading)")
    if req.basis == "decision" and req.source != "QW":
        yield LintIssue(name, where, "basis decision goes with source doc QW")
    if req.basis != "decision" and req.source == "QW":
        yield LintIssue(name, where, "source doc QW is a decision: basis decision")


def check_kinds(name: str, tree: Any) -> Iterable[LintIssue]:
    """Requirements of one kind have one level: the kind's (``requirement_kinds``), or another
    with a ``level-reason`` saying why (spec/README.md, "Levels and basis")."""
    kinds = tree.get(KINDS_KEY) or {}
    if not isinstance(kinds, dict):
        yield LintIssue(name, KINDS_KEY, "must be a map of kinds")
        return
    for kname, kind in kinds.items():
        where = f"{KINDS_KEY}.{kname}"
        if not isinstance(kind, dict) or not kind.get("doc"):
            yield LintIssue(name, where, "no doc line")
        if not isinstance(kind, dict) or kind.get("level") not in LEVELS:
            level = kind.get("level") if isinstance(kind, dict) else None
            yield LintIssue(name, where, f"level {level!r} is not one of {LEVELS}")
    raw = tree.get("requirements") or {}
    members: dict[str, list[str]] = {}
    for rid, req in raw.items():
        if not isinstance(req, dict):
            continue
        where, kname, reason = f"requirements.{rid}", req.get("kind"), req.get("level-reason")
        if reason is not None and (not isinstance(reason, str) or not reason.strip()):
            yield LintIssue(name, where, "level-reason must be a sentence")
        if kname is None:
            if reason is not None:
                yield LintIssue(name, where, "a level-reason without a kind (nothing its level "
                                             "differs from)")
        elif kname not in kinds:
            yield LintIssue(name, where, f"kind {kname!r} is not one of {KINDS_KEY}")
        else:
            members.setdefault(kname, []).append(rid)
    for kname, rids in members.items():
        level = kinds[kname].get("level") if isinstance(kinds[kname], dict) else None
        for rid in rids:
            req, where = raw[rid], f"requirements.{rid}"
            if req.get("level") == level:
                if req.get("level-reason") is not None:
                    yield LintIssue(name, where, f"a level-reason, but its level is its kind "
                                                 f"{kname}'s ({level})")
            elif not req.get("level-reason"):
                same = [o for o in rids if raw[o].get("level") == level]
                like = f" (as {', '.join(same[:3])})" if same else ""
                yield LintIssue(name, where, f"level {req.get('level')} differs from its kind "
                                             f"{kname}'s {level}{like} without a level-reason")


def _check_reading_bands(profile: Any) -> Iterable[LintIssue]:
    """A ``reading-band`` ``{limit, above}`` names a limit of the profile and lies below its
    bound: the values over ``above`` up to the limit are between two readings of its unit, so
    the requirement that accepts them is a reading (basis implied)."""
    for rid, req in (profile.tree.get("requirements") or {}).items():
        band = req.get("reading-band") if isinstance(req, dict) else None
        if band is None:
            continue
        where = f"requirements.{rid}.reading-band"
        if not isinstance(band, dict) or set(band) != {"limit", "above"}:
            yield LintIssue(profile.name, where, "a reading-band is {limit, above}")
            continue
        limit = profile.limits.get(band["limit"])
        if limit is None:
            yield LintIssue(profile.name, where, f"names no limit of the profile: "
                                                 f"{band['limit']!r}")
            continue
        bound = limit.max if limit.max is not None else limit.value
        above = band["above"]
        if isinstance(above, bool) or not isinstance(above, (int, float)) or \
                not isinstance(bound, (int, float)) or not 0 <= above < bound:
            yield LintIssue(profile.name, where, f"above {above!r} is not a number below the "
                                                 f"bound of limit {limit.name} ({bound!r})")
        if req.get("basis") != "implied":
            yield LintIssue(profile.name, f"requirements.{rid}", "a reading-band is a reading: "
                                                                 "basis implied")


def _check_schemas(profile: Any) -> Iterable[LintIssue]:
    model = profile.model
    commands = getattr(model, "commands", None) or {}
    validator = jsonschema.Draft202012Validator
    for cname, cmd in commands.items():
        for part in ("request", "response"):
            try:
                validator.check_schema(dict(getattr(cmd, part)))
            except jsonschema.SchemaError as exc:
                yield LintIssue(profile.name, f"commands.{cname}.{part}",
                                f"invalid JSON Schema: {exc.message}")
    error_reply = getattr(model, "error_reply", None)
    if error_reply is not None:
        try:
            validator.check_schema(dict(error_reply))
        except jsonschema.SchemaError as exc:
            yield LintIssue(profile.name, "envelope.error_reply", f"invalid: {exc.message}")


def _check_codes(profile: Any) -> Iterable[LintIssue]:
    tree = profile.tree
    for section, key in (("messages", "code"), ("error_codes", "code")):
        seen: dict[Any, str] = {}
        for item_name, item in (tree.get(section) or {}).items():
            if not isinstance(item, dict) or key not in item:
                continue
            code = item[key]
            if code in seen:
                yield LintIssue(profile.name, f"{section}.{item_name}",
                                f"{key} {code!r} collides with {seen[code]}")
            else:
                seen[code] = item_name


def _check_resources(profile: Any) -> Iterable[LintIssue]:
    """The ``resources`` section names commands, request fields and reply paths the profile
    has (spec/README.md, "resources"), so that an inventory built from it can run."""
    from .resources import problems

    resources = getattr(profile.model, "resources", None)
    if resources is None:
        return
    for path, message in problems(resources, profile.model.commands):
        yield LintIssue(profile.name, path, message)


def _check_not_found(profile: Any) -> Iterable[LintIssue]:
    """A lookup's ``not_found.error`` names one of the profile's ``errors`` (a client maps
    exactly that answer to null)."""
    if profile.protocol != "bunqueue":
        return
    errors = profile.model.errors
    for name, command in profile.model.commands.items():
        if command.not_found is not None and command.not_found not in errors:
            yield LintIssue(profile.name, f"commands.{name}.not_found.error",
                            f"{command.not_found!r} is not an error of the profile")


def _check_releases(names: Iterable[str]) -> Iterable[LintIssue]:
    """A published release is described by one profile at most (``releases``), and each
    ``evidence`` entry is ``{release, probe, observed}`` about one of the profile's releases."""
    owner: dict[tuple[str, str], str] = {}
    for name in names:
        profile = load_profile(name)
        for release in profile.releases:
            key = (profile.protocol, release)
            if key in owner:
                yield LintIssue(name, "releases", f"release {release} is also named by {owner[key]}")
            owner[key] = name
        for i, ev in enumerate(profile.evidence):
            if not isinstance(ev, Mapping) or set(ev) != {"release", "probe", "observed"}:
                yield LintIssue(name, f"evidence[{i}]", "an evidence entry is {release, probe, observed}")
            elif str(ev["release"]) not in profile.releases:
                yield LintIssue(name, f"evidence[{i}]",
                                f"release {ev['release']} is not one of the profile's releases")


TRACE_FILE = "trace.yaml"
#: The code tables of trace.yaml: each entry needs a doc line and a code unique in its table.
TRACE_TABLES = ("record_types", "directions", "gap_reasons")


def _check_trace() -> Iterable[LintIssue]:
    """``spec/trace.yaml`` (the recording format): every layout field, meta key, record type,
    direction and gap reason documented; codes unique per table and within the field's
    width; the layouts loadable by the layout language; a whole-number format_version."""
    from ._load import read_yaml
    from .quicx import layout_field

    where = TRACE_FILE
    try:
        tree = read_yaml(spec_dir() / TRACE_FILE)
    except SpecError as exc:
        yield LintIssue(where, exc.path or "<load>", exc.message)
        return
    if not isinstance(tree.get("format_version"), int):
        yield LintIssue(where, "format_version", "must be a whole number")
    for section in ("file_header", "record_header"):
        fields = (tree.get(section) or {}).get("fields") or []
        if not fields:
            yield LintIssue(where, section, "has no fields")
        for i, f in enumerate(fields):
            path = f"{section}.fields[{i}]"
            if not isinstance(f, dict) or not f.get("doc"):
                yield LintIssue(where, path, "field without a doc line")
                continue
            try:
                layout_field(f, {}, {}, section)
            except (SpecError, KeyError, TypeError, ValueError) as exc:
                yield LintIssue(where, path, f"not a layout field: {exc}")
    for key, entry in (tree.get("meta_keys") or {}).items():
        if not isinstance(entry, dict) or not entry.get("doc"):
            yield LintIssue(where, f"meta_keys.{key}", "meta key without a doc line")
    for table in TRACE_TABLES:
        seen: dict[Any, str] = {}
        entries = tree.get(table) or {}
        if not entries:
            yield LintIssue(where, table, "is empty")
        for name, entry in entries.items():
            path = f"{table}.{name}"
            if not isinstance(entry, dict) or not entry.get("doc"):
                yield LintIssue(where, path, "entry without a doc line")
                continue
            code = entry.get("code")
            if not isinstance(code, int) or code < 0:
                yield LintIssue(where, path, f"code {code!r} is not a whole number >= 0")
            elif code in seen:
                yield LintIssue(where, path, f"code {code} collides with {seen[code]}")
            else:
                seen[code] = name
    for name, entry in (tree.get("gap_reasons") or {}).items():
        if isinstance(entry, dict) and entry.get("code") == 0:
            yield LintIssue(where, f"gap_reasons.{name}", "code 0 is the detail of every "
                            "record that is not a gap")


def _check_learn(profile: Any) -> Iterable[LintIssue]:
    """A state table's ``learn`` section drives rows the table has: each input's ``event`` is
    a row's event, its ``conn`` (a dialogue) one of the section's ``connections``, and a row of
    a dialogue table says what the connections receive (``replies``) about those connections."""
    for table, entry in profile.tree.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("learn"), dict):
            continue
        rows = entry.get("transitions") or []
        events = {str(r.get("event")) for r in rows}
        conns = entry["learn"].get("connections")
        states = {str(r.get(k)) for r in rows for k in ("from", "to")} | set(entry.get("initial") or ())
        inputs = entry["learn"].get("inputs") or {}
        for name, item in inputs.items():
            where = f"{table}.learn.inputs.{name}"
            if "event" in item and str(item["event"]) not in events:
                yield LintIssue(profile.name, where, f"event {item['event']!r} is no row's event")
            if conns is not None and item.get("conn") not in conns:
                yield LintIssue(profile.name, where, f"conn {item.get('conn')!r} is not one of "
                                f"the connections ({', '.join(conns)})")
            named = set(item.get("removes") or ()) | (set(item["refusal"]) - {"other"}
                                                      if isinstance(item.get("refusal"), dict) else set())
            if conns is not None and isinstance(item.get("otherwise"), dict):
                named |= {f"connection {c}" for c in set(item["otherwise"]) - set(conns)}
            for stray in sorted(named - states):
                yield LintIssue(profile.name, where, f"names {stray!r}, which the table does not have")
        for key, name in (entry["learn"].get("cleanup") or {}).items():
            if name not in inputs:
                yield LintIssue(profile.name, f"{table}.learn.cleanup.{key}", f"{name!r} is no input")
        for i, row in enumerate(rows if conns is not None else ()):
            stray = set(row.get("replies") or {}) - set(conns)
            if "replies" not in row or stray:
                yield LintIssue(profile.name, f"{table}.transitions.{i}", "a dialogue row says "
                                "what each of the connections receives (replies)" +
                                (f"; not connections: {', '.join(sorted(stray))}" if stray else ""))


def lint(names: Iterable[str] | None = None) -> list[LintIssue]:
    """Every issue in the named profiles (all profiles by default)."""
    _SOURCE_TEXT.clear()
    issues: list[LintIssue] = []
    loaded: list[str] = []
    for name in names or profile_names():
        try:  # plain JSON first: a YAML date or tag would otherwise fail the build obscurely
            plain = list(_check_plain_json(name, raw_tree(name)))
        except SpecError as exc:
            issues.append(LintIssue(name, exc.path or exc.file or "<load>", exc.message))
            continue
        if plain:
            issues.extend(plain)
            continue
        try:
            profile = load_profile(name)
        except SpecError as exc:
            issues.append(LintIssue(name, exc.path or exc.file or "<load>", exc.message))
            continue
        except (KeyError, TypeError, ValueError) as exc:
            issues.append(LintIssue(name, "<load>", f"spec cannot be built: {exc!r}"))
            continue
        issues.extend(_check_docs(name, profile.tree))
        issues.extend(_check_requirements(profile))
        issues.extend(check_kinds(name, profile.tree))
        issues.extend(_check_reading_bands(profile))
        issues.extend(_check_schemas(profile))
        issues.extend(_check_codes(profile))
        issues.extend(_check_resources(profile))
        issues.extend(_check_not_found(profile))
        issues.extend(_check_learn(profile))
        loaded.append(name)
    issues.extend(_check_releases(loaded))
    if names is None:
        issues.extend(_check_trace())
    return issues
