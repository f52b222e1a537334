"""The generated reference has an entry for everything the spec defines: a fails-if-missing
check of every command, message type, field, requirement, limit and error, and of the
conformance case catalogue."""

from __future__ import annotations

import re

import pytest

from queuewire.conformance.runner import load_cases
from queuewire.docs.text import label, stem
from queuewire.spec import load_profile, profile_names

BUNQUEUE = profile_names("bunqueue")
QUICX = profile_names("quicx")
REF = "#/$defs/"


def _sections(text: str, prefix: str) -> dict[str, str]:
    """Each labelled entry's text (from its label line to the next label of the same kind)."""
    parts = re.split(rf"^\(({re.escape(prefix)}[^)]*)\)=$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _paths(schema, defs, prefix=""):
    """Field paths of a JSON Schema, written independently of queuewire.docs.schema."""
    for name, prop in (schema.get("properties") or {}).items():
        if isinstance(prop.get("$ref"), str):
            prop = {**defs.get(prop["$ref"][len(REF):], {}), **prop}
        yield prefix + name
        if prop.get("properties"):
            yield from _paths(prop, defs, prefix + name + ".")
        items = prop.get("items")
        if isinstance(items, dict):
            if isinstance(items.get("$ref"), str):
                items = {**defs.get(items["$ref"][len(REF):], {}), **items}
            if items.get("properties"):
                yield from _paths(items, defs, prefix + name + "[].")


def _page(generated, name, page):
    return generated[f"protocols/{stem(name)}/{page}.md"]


@pytest.mark.parametrize("name", BUNQUEUE)
def test_every_bunqueue_command_and_field_has_its_entry(generated, name):
    profile = load_profile(name)
    pages = "".join(v for k, v in generated.items()
                    if k.startswith(f"protocols/{stem(name)}/commands-"))
    sections = _sections(pages, f"{stem(name)}-cmd-")
    missing = []
    for cmd in profile.model.commands.values():
        section = sections.get(label(name, "cmd", cmd.name))
        if section is None:
            missing.append(f"command {cmd.name}")
            continue
        request, reply = section.split("**Reply fields**", 1)
        for where, schema, text in (("request", cmd.request, request), ("reply", cmd.response, reply)):
            defs = schema.get("$defs") or {}
            for path in _paths(schema, defs):
                if f"| `{path}` |" not in text:
                    missing.append(f"{cmd.name} {where} field {path}")
        for rid in [cmd.requirement]:
            if rid and f"<{label(name, 'req', rid)}>" not in section:
                missing.append(f"{cmd.name} requirement {rid}")
        for direction in ("request", "reply"):
            if f"vector `bq.cmd.{cmd.name}.{direction}`" not in section:
                missing.append(f"{cmd.name} {direction} example")
    assert not missing, f"{name}: no generated entry for:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("name", QUICX)
def test_every_quicx_message_and_field_has_its_entry(generated, name):
    profile = load_profile(name)
    spec = profile.model
    sections = _sections(_page(generated, name, "messages"), f"{stem(name)}-msg-")
    missing = []
    for msg in spec.messages.values():
        section = sections.get(label(name, "msg", msg.name))
        if section is None:
            missing.append(f"message {msg.name}")
            continue
        if f"0x{msg.code:02X} {msg.name}" not in section:
            missing.append(f"{msg.name} opcode")
        for f in msg.layout:
            if f"| `{f.id}` | {f.type} |" not in section:
                missing.append(f"{msg.name} field {f.id}")
        if msg.requirement and f"<{label(name, 'req', msg.requirement)}>" not in section:
            missing.append(f"{msg.name} requirement {msg.requirement}")
        if msg.layout and "packet-beta" not in section:
            missing.append(f"{msg.name} packet diagram")
        on_wire = not msg.reserved and msg.transport == spec.transport
        if on_wire and 'class="qw-hexdump"' not in section:
            missing.append(f"{msg.name} example")
    index = _page(generated, name, "index")
    for f in spec.header:
        if f"| `{f.id}` | {f.type} |" not in index:
            missing.append(f"header field {f.id}")
    if "title quicx frame header" not in index:
        missing.append("header packet diagram")
    for err in spec.error_codes.values():
        if f"| `0x{err.code:02X}` | `{err.name}` |" not in index:
            missing.append(f"error code {err.name}")
    for kind in spec.protocol_errors:
        if f"| `{kind}` |" not in index:
            missing.append(f"decoder error {kind}")
    for flag in spec.semantics:
        if f"| `{flag}` |" not in index:
            missing.append(f"semantics flag {flag}")
    for state in ("WORKER_TRANSITIONS", "CLIENT_TRANSITIONS", "REQUEST_TRANSITIONS"):
        if state not in index:
            missing.append(f"state machine {state}")
    assert not missing, f"{name}: no generated entry for:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("name", BUNQUEUE)
def test_bunqueue_overview_has_framing_limits_errors_and_machines(generated, name):
    profile = load_profile(name)
    index = _page(generated, name, "index")
    missing = [f"limit {n}" for n in profile.limits if f"| `{n}` |" not in index]
    missing += [f"error {e.name}" for e in profile.model.errors.values()
                if f"| `{e.name}` | `{e.message}` |" not in index]
    missing += [f"decoder error {k}" for k in profile.model.protocol_errors
                if f"| `{k}` |" not in index]
    missing += [f"transition {t.source} -> {t.target}"
                for m in (profile.model.job_lifecycle, profile.model.connection_lifecycle)
                for t in m.transitions if f"{t.source} --> {t.target}" not in index]
    missing += [f"framing field {f['id']}" for f in profile.tree["framing"]["fields"]
                if f"| `{f['id']}` |" not in index]
    if "SESSION_TRANSITIONS" not in index:
        missing.append("client session machine")
    assert not missing, f"{name}: no generated entry for:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("name", profile_names())
def test_every_requirement_has_its_entry(generated, name):
    profile = load_profile(name)
    sections = _sections(_page(generated, name, "requirements"), f"{stem(name)}-req-")
    missing = []
    for req in profile.requirements.values():
        section = sections.get(label(name, "req", req.id))
        if section is None:
            missing.append(req.id)
            continue
        for part in (req.level, req.text.split("\n")[0][:40], req.source):
            if part and str(part).replace("|", "\\|") not in section:
                missing.append(f"{req.id}: {part!r}")
        if req.quote and req.quote.split()[0] not in section:
            missing.append(f"{req.id}: quote")
        if req.basis and f"basis *{req.basis}*" not in section:
            missing.append(f"{req.id}: basis")
    index = generated["protocols/requirements-index.md"]
    missing += [f"{rid} (index)" for rid in profile.requirements
                if f"<{label(name, 'req', rid)}>" not in index]
    assert not missing, f"{name}: requirements without their entry:\n  " + "\n  ".join(missing)


def test_comparison_page_covers_every_overlay(generated):
    text = generated["protocols/compare.md"]
    for name in profile_names():
        profile = load_profile(name)
        if profile.overlays:
            assert f"vs {name}" in text
            base = next(n for n in profile_names(profile.protocol) if not load_profile(n).overlays)
            for rid in set(profile.requirements) - set(load_profile(base).requirements):
                assert f"<{label(name, 'req', rid)}>" in text, (name, rid)
            for rid in set(load_profile(base).requirements) - set(profile.requirements):
                assert f"`{rid}` | retired" in text, (name, rid)


def test_case_catalogue_lists_every_case_and_the_uncited_ids(generated):
    for name in profile_names():
        profile = load_profile(name)
        cases = load_cases(profile.protocol, name)
        text = generated[f"conformance/cases/{stem(name)}.md"]
        assert f"{len(cases)} cases" in text
        assert all(f"| `{c.id}` |" in text for c in cases), name
        cited = {r for c in cases for r in c.requirements}
        uncited_part = text.split("## Requirement ids no case cites", 1)[1]
        for rid in profile.requirements:
            assert (f"- {rid} (" in uncited_part) == (rid not in cited), (name, rid)


def test_requirements_index_lists_what_exercises_each_id(generated):
    """Every id has an entry, and its server cases are the packaged cases that cite it."""
    from queuewire.docs.reqindex import index_page

    text = generated["protocols/requirements-index.md"]
    _, found = index_page()
    cited: dict[str, set[str]] = {}
    for name in profile_names():
        profile = load_profile(name)
        for case in load_cases(profile.protocol, name):
            for rid in case.requirements:
                cited.setdefault(rid, set()).add(case.id)
        for rid in profile.requirements:
            assert f"({label('index', 'req', rid)})=" in text, rid
    for rid, what in found.items():
        assert set(what["server cases"]) == cited.get(rid, set()), rid
    # this module names BQ-FRAME-1 nowhere else: the index finds it among the tests
    assert "tests/docs/test_docs_pages.py" in found["BQ-FRAME-1"]["tests"]
