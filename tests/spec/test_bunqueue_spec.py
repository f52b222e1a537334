"""The bunqueue/v2 profile as data: commands against document 001's Command Summary, schemas
under the draft 2020-12 meta-schema, descriptions, requirement citations and quotes, limits
against the documents, and the state machines.

The seed documents live outside the repository (``../shared/seeds``); tests that read them
skip, saying so, when that directory is absent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from queuewire.spec import LEVELS, load_profile
from queuewire.spec._load import walk

PROFILE = load_profile("bunqueue/v2")
MODEL = PROFILE.model
TREE = PROFILE.tree
SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
SHARED = SEEDS.parent


def plain(node: Any) -> Any:
    """Read-only mappings of the model as plain dicts and lists."""
    if isinstance(node, Mapping):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    return node


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def need_seeds() -> None:
    if not SEEDS.is_dir():
        reason = f"seed documents not present at {SEEDS}"
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def source_text(doc: str) -> str:
    need_seeds()
    src = PROFILE.sources[doc]
    assert src.file, f"source {doc} has no file"
    path = SHARED / src.file
    assert path.is_file(), path
    return path.read_text(encoding="utf-8")


# =============================================================================================
# Commands
# =============================================================================================
def command_summary() -> list[tuple[str, str]]:
    """(category, command) rows of document 001's Command Summary table.

    The table is flattened in the seed: a category's first row is ``| Cat | CMD | desc |``,
    the following rows are ``CMD | desc | |``.
    """
    lines = source_text("001").splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("Section titled") and "Command Summary" in line)
    rows = []
    category = None
    for line in lines[start:]:
        if line.startswith("Section titled"):
            line = line[line.index("|"):]
            assert "Command" in line  # the header row
            continue
        if "|" not in line:
            break
        if line.startswith("|---"):
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            category, name = cells[0], cells[1]
        else:
            name = line.split("|")[0].strip()
        assert category is not None
        rows.append((category, name))
    return rows


def test_profile_has_62_commands():
    assert len(MODEL.commands) == 62
    assert len(set(MODEL.commands)) == 62


def test_commands_match_the_command_summary():
    rows = command_summary()
    names = [name for _, name in rows]
    assert len(names) == 62, names
    assert len(set(names)) == len(names)
    assert set(names) == set(MODEL.commands), (
        f"in the document only: {sorted(set(names) - set(MODEL.commands))}; "
        f"in the spec only: {sorted(set(MODEL.commands) - set(names))}")


def test_command_categories_match_the_command_summary():
    for category, name in command_summary():
        assert MODEL.commands[name].category == category.lower(), name


@pytest.mark.parametrize("cmd", sorted(MODEL.commands))
def test_command_is_documented(cmd):
    command = MODEL.commands[cmd]
    assert command.doc.strip()
    assert command.requirement in PROFILE.requirements
    assert command.doc_ref, cmd
    doc, _, section = command.doc_ref.partition("#")
    assert section in PROFILE.sources[doc].sections, command.doc_ref
    # the envelope is merged in: cmd is the command's const, ok is true in replies
    assert command.request["properties"]["cmd"]["const"] == cmd
    assert "cmd" in command.required_fields
    assert command.response["properties"]["ok"]["const"] is True
    assert set(TREE["envelope"]["request"]) <= set(command.request_fields)
    assert set(TREE["envelope"]["reply"]) <= set(command.response_fields)


# =============================================================================================
# Schemas
# =============================================================================================
SCHEMAS = [(f"{cmd}.{which}", plain(getattr(MODEL.commands[cmd], which)))
           for cmd in sorted(MODEL.commands) for which in ("request", "response")]
SCHEMAS.append(("error_reply", plain(MODEL.error_reply)))


@pytest.mark.parametrize("name, schema", SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_schema_is_valid_draft_2020_12(name, schema):
    assert schema["$schema"] == Draft202012Validator.META_SCHEMA["$id"]
    Draft202012Validator.check_schema(schema)
    # every local reference resolves inside the schema itself
    for _, node in walk(schema):
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            assert ref.startswith("#/$defs/"), ref
            assert ref.removeprefix("#/$defs/") in schema.get("$defs", {}), (name, ref)


@pytest.mark.parametrize("name", sorted(TREE["definitions"]))
def test_definition_is_valid_and_described(name):
    schema = plain(TREE["definitions"][name])
    Draft202012Validator.check_schema({**schema, "$defs": plain(TREE["definitions"])})
    assert isinstance(schema.get("description"), str) and schema["description"].strip()


def _undescribed(tree: Any, where: str) -> list[str]:
    """Every property, item and additionalProperties schema without a description."""
    missing = []
    for path, node in walk(tree):
        if not isinstance(node, dict):
            continue
        props = node.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                if not (isinstance(sub, dict) and isinstance(sub.get("description"), str)
                        and sub["description"].strip()):
                    missing.append(f"{where}/{'/'.join(map(str, path))}/properties/{name}")
        for key in ("items", "additionalProperties", "propertyNames"):
            sub = node.get(key)
            if isinstance(sub, dict) and not str(sub.get("description", "")).strip():
                missing.append(f"{where}/{'/'.join(map(str, path))}/{key}")
    return missing


def test_every_property_at_every_depth_has_a_description():
    missing = []
    for cmd, command in TREE["commands"].items():
        for which in ("request", "response"):
            missing += _undescribed(command.get(which) or {}, f"commands/{cmd}/{which}")
    missing += _undescribed(TREE["definitions"], "definitions")
    missing += _undescribed({"properties": TREE["envelope"]["request"]}, "envelope/request")
    missing += _undescribed({"properties": TREE["envelope"]["reply"]}, "envelope/reply")
    missing += _undescribed(TREE["envelope"]["error_reply"], "envelope/error_reply")
    assert missing == []


def test_the_description_check_can_fail():
    bad = {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string"}}, "description": "x"}}}
    assert _undescribed(bad, "t") == ["t/properties/a/properties/b"]


def test_every_limit_error_and_state_has_a_doc():
    for section in ("limits", "errors", "protocol_errors", "job_states"):
        for name, item in TREE[section].items():
            assert isinstance(item.get("doc"), str) and item["doc"].strip(), (section, name)
    for kind in MODEL.protocol_errors.values():
        assert kind.reaction in ("close", "reply", "raise"), kind


def test_job_state_definition_matches_job_states():
    assert list(MODEL.definitions["JobState"]["enum"]) == list(MODEL.job_states)


# =============================================================================================
# Requirements
# =============================================================================================
def cited_requirements(tree: Any) -> list[tuple[str, str]]:
    """(where, id) for every requirement id the tree cites."""
    out = []
    for path, node in walk(tree):
        if not isinstance(node, dict):
            continue
        where = "/".join(map(str, path))
        for key in ("requirement", "x-requirement"):
            if isinstance(node.get(key), str):
                out.append((where, node[key]))
        by_keyword = node.get("x-keywordRequirements")
        if isinstance(by_keyword, dict):
            out += [(f"{where}/x-keywordRequirements", rid) for rid in by_keyword.values()]
    return out


def test_every_cited_requirement_exists():
    cited = cited_requirements(TREE)
    assert len(cited) > 150
    unknown = [(where, rid) for where, rid in cited if rid not in PROFILE.requirements]
    assert unknown == []
    # the model's own citations too
    for kind in MODEL.protocol_errors.values():
        assert kind.requirement in PROFILE.requirements, kind
    for lim in PROFILE.limits.values():
        assert lim.requirement in PROFILE.requirements, lim.name
    for machine in (MODEL.job_lifecycle, MODEL.connection_lifecycle):
        for t in machine.transitions:
            assert t.requirement in PROFILE.requirements, t
    for err in MODEL.errors.values():
        assert err.requirement in PROFILE.requirements, err


def test_the_citation_walk_can_fail():
    tree = {"a": {"x-requirement": "BQ-NOPE-1", "x-keywordRequirements": {"pattern": "BQ-X"}},
            "b": [{"requirement": "BQ-Y"}]}
    assert sorted(rid for _, rid in cited_requirements(tree)) == ["BQ-NOPE-1", "BQ-X", "BQ-Y"]


@pytest.mark.parametrize("rid", sorted(PROFILE.requirements))
def test_requirement_is_well_formed(rid):
    req = PROFILE.requirements[rid]
    assert req.level in LEVELS
    assert req.subject in ("server", "client", "peer")
    assert req.text.strip()
    assert req.source in PROFILE.sources, req.source
    assert req.section in PROFILE.sources[req.source].sections, (req.source, req.section)
    # a requirement is cited: an exact quote of its document, or a rationale where the
    # source has no text to quote (the MessagePack spec, a queuewire decision)
    assert req.quote or req.rationale
    if req.source == "QW":
        assert req.rationale and req.rationale.strip()


QUOTED = sorted(rid for rid, r in PROFILE.requirements.items()
                if r.quote and PROFILE.sources[r.source].file)


def test_most_requirements_are_quoted():
    assert len(QUOTED) > 100


@pytest.mark.parametrize("rid", QUOTED)
def test_quote_appears_in_its_source(rid):
    req = PROFILE.requirements[rid]
    text = source_text(req.source)
    assert squash(req.quote) in squash(text), f"{rid}: {req.quote!r} not in {req.source}"


def test_quote_check_can_fail():
    need_seeds()
    text = source_text("001")
    assert squash("Maximum frame size is 64 MB.") in squash(text)
    assert squash("Maximum frame size is 65 MB.") not in squash(text)


# =============================================================================================
# Limits against the documents
# =============================================================================================
LIMITS = PROFILE.limits
_NUM = r"[+-]?\d[\d,]*"
_RANGE = re.compile(rf"({_NUM})\s*(?:to|-)\s*({_NUM})\s*(days?|hours?)?")
_MS = {"day": 24 * 60 * 60 * 1000, "days": 24 * 60 * 60 * 1000,
       "hour": 60 * 60 * 1000, "hours": 60 * 60 * 1000}
_MB = re.compile(r"(\d+)\s*MB\b")


def _int(text: str) -> int:
    return int(text.replace(",", "").rstrip(","))


def quoted_range(name: str) -> tuple[int, int]:
    """(min, max) written in the quote of ``name``'s requirement, in the limit's unit."""
    lim = LIMITS[name]
    quote = PROFILE.requirements[lim.requirement].quote
    m = _RANGE.search(quote)
    assert m, (name, quote)
    scale = _MS[m.group(3)] if m.group(3) else 1
    if m.group(3):
        assert lim.unit == "ms", (name, lim.unit)
    return _int(m.group(1)) * scale, _int(m.group(2)) * scale


def quoted_megabytes(name: str) -> int:
    lim = LIMITS[name]
    quote = PROFILE.requirements[lim.requirement].quote
    m = _MB.search(quote)
    assert m, (name, quote)
    assert lim.unit == "bytes"
    return int(m.group(1)) * 1024 * 1024  # "MB" read as MiB, as the server's constants are


RANGE_LIMITS = ["priority", "delay", "timeout", "max_attempts", "backoff", "ttl",
                "pull_timeout", "pullb_count", "progress"]


@pytest.mark.parametrize("name", RANGE_LIMITS)
def test_range_limit_matches_its_quote(name):
    lim = LIMITS[name]
    assert quoted_range(name) == (lim.min, lim.max)


def test_range_parser_reads_units():
    assert _RANGE.search("| Delay | 0 to 365 days |").group(3) == "days"
    assert _int("-1,000,000") == -1_000_000


def test_frame_and_job_data_sizes_match_their_quotes():
    assert quoted_megabytes("max_frame_bytes") == LIMITS["max_frame_bytes"].value
    assert quoted_megabytes("job_data_bytes") == LIMITS["job_data_bytes"].max
    assert MODEL.max_frame_bytes == LIMITS["max_frame_bytes"].value


def test_sizes_match_the_documents_text():
    doc000, doc001 = source_text("000"), source_text("001")
    frame = re.search(r"Maximum frame size(?: is|:)\s*(\d+)\s*MB", doc000)
    assert frame and int(frame.group(1)) * 1024 * 1024 == LIMITS["max_frame_bytes"].value
    frame = re.search(r"Maximum frame size(?: is|:)\s*(\d+)\s*MB", doc001)
    assert frame and int(frame.group(1)) * 1024 * 1024 == LIMITS["max_frame_bytes"].value
    data = re.search(r"\| Job data \| Max (\d+) MB JSON \|", doc000)
    assert data and int(data.group(1)) * 1024 * 1024 == LIMITS["job_data_bytes"].max
    queue = re.search(r"\| Queue name \| Max (\d+) chars", doc000)
    assert queue and int(queue.group(1)) == LIMITS["queue_name_length"].max


def test_validation_limits_table_of_document_000():
    """Every row of 000's Validation Limits table is quoted by the limit's requirement."""
    text = source_text("000")
    start = text.index("Section titled “Validation Limits”")
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \|$", text[start:start + 2000], re.MULTILINE)
    rows = [(p.strip(), v.strip()) for p, v in rows if p.strip() not in ("Parameter", "---")]
    quotes = {PROFILE.requirements[lim.requirement].quote for lim in LIMITS.values()}
    covered = [p for p, v in rows if f"| {p} | {v} |" in quotes]
    # every range row is a limit's quote; the queue name and job data rows are checked above
    assert {p for p, _ in rows} - set(covered) <= {"Queue name", "Job data"}
    assert len(covered) >= 6


def test_queue_name_length_matches_its_quote():
    lim = LIMITS["queue_name_length"]
    quote = PROFILE.requirements[lim.requirement].quote
    assert "Not empty" in quote and lim.min == 1
    m = re.search(r"at most (\d+) characters", quote)
    assert m and int(m.group(1)) == lim.max


def test_queue_name_pattern_matches_its_quote():
    lim = LIMITS["queue_name_pattern"]
    quote = PROFILE.requirements[lim.requirement].quote.lower()
    for word in ("alphanumeric", "underscores", "dashes", "dots", "colons"):
        assert word in quote
    pattern = re.compile(lim.pattern)
    assert pattern.fullmatch("AZaz09_-.:")
    for bad in (" ", "/", "\u00e9", "*", "@", ""):
        assert not pattern.fullmatch(f"a{bad}b" if bad else bad), bad


def test_value_limits_match_their_quotes():
    inflight = LIMITS["max_in_flight"]
    quote = PROFILE.requirements[inflight.requirement].quote
    assert re.search(rf"\b{inflight.value} commands\b", quote)
    version = LIMITS["protocol_version"]
    quote = PROFILE.requirements[version.requirement].quote
    assert re.search(rf"protocol version is {version.value}\b", quote)
    assert MODEL.protocol_version == version.value


def test_nesting_depth_is_a_queuewire_decision():
    lim = LIMITS["max_nesting_depth"]
    req = PROFILE.requirements[lim.requirement]
    assert req.source == "QW" and req.rationale
    assert str(lim.value) in req.rationale
    assert MODEL.max_nesting_depth == lim.value


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_limit_is_substituted_where_it_is_used(name):
    lim = LIMITS[name]
    for key, path in lim.uses:
        node: Any = TREE
        for part in path:
            node = node[part]
        assert node == getattr(lim, key), (name, key, path)


def test_every_limit_is_well_formed():
    for name, lim in LIMITS.items():
        assert lim.doc.strip(), name
        assert any(v is not None for v in (lim.min, lim.max, lim.value, lim.pattern)), name
        if lim.min is not None and lim.max is not None:
            assert lim.min <= lim.max, name


# =============================================================================================
# State machines
# =============================================================================================
def test_job_lifecycle_uses_declared_job_states():
    machine = MODEL.job_lifecycle
    declared = set(MODEL.job_states)
    assert machine.initial and set(machine.initial) <= declared
    for t in machine.transitions:
        assert t.source in declared, t
        assert t.target in declared, t
        assert t.event.strip()
    assert set(machine.states) == declared  # every state takes part


def _reachable(machine) -> set[str]:
    seen, todo = set(machine.initial), list(machine.initial)
    while todo:
        for target in machine.next_states(todo.pop()).values():
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_every_state_is_reachable():
    assert _reachable(MODEL.job_lifecycle) == set(MODEL.job_lifecycle.states)
    assert _reachable(MODEL.connection_lifecycle) == set(MODEL.connection_lifecycle.states)


def document_connection_states() -> tuple[list[str], list[str]]:
    """(states, initial) listed under document 000's Connection Lifecycle."""
    text = source_text("000")
    start = text.index("Section titled “Connection Lifecycle”")
    block = text[start:text.index("Connect sequence:", start)]
    rows = re.findall(r"^-? ?([A-Z_]+) → (.+)$", block, re.MULTILINE)
    states = [name for name, _ in rows]
    initial = [name for name, what in rows if "initial" in what.lower()]
    return states, initial


def test_connection_lifecycle_uses_the_documented_states():
    machine = MODEL.connection_lifecycle
    states, initial = document_connection_states()
    assert len(states) == 4, states
    assert set(machine.states) == set(states)
    assert list(machine.initial) == initial
    for t in machine.transitions:
        assert t.source in states and t.target in states, t


@pytest.mark.parametrize("which", ["job_lifecycle", "connection_lifecycle"])
def test_mermaid_renders(which):
    machine = getattr(MODEL, which)
    text = machine.mermaid()
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert len(lines) == 1 + len(machine.initial) + len(machine.transitions)
    for state in machine.initial:
        assert f"    [*] --> {state}" in lines
    for t in machine.transitions:
        assert f"    {t.source} --> {t.target}: {t.event}" in lines
    for state in machine.states:
        assert re.fullmatch(r"\w+", state), state  # a valid Mermaid state id
    for line in lines[1:]:
        assert re.fullmatch(r"    (\[\*\]|\w+) --> \w+(: [^\n:]+)?", line), line


def test_next_states():
    machine = MODEL.job_lifecycle
    for state in machine.states:
        expected = {t.event: t.target for t in machine.transitions if t.source == state}
        assert machine.next_states(state) == expected
    assert machine.next_states("no such state") == {}
