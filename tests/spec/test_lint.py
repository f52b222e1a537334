"""``spec lint`` catches each class of defect it promises to catch.

Each test copies spec/ to a temporary directory, breaks one thing, points the loader at the
copy and checks that lint names the defect (and that the pristine copy is clean).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from queuewire.spec import clear_cache
from queuewire.spec.lint import lint

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def messages(profile: str | None = None) -> list[str]:
    return [str(i) for i in lint([profile] if profile else None)]


def test_pristine_copy_is_clean(spec_copy):
    assert messages() == []


def test_field_without_description(spec_copy):
    edit(spec_copy / "bunqueue/commands/core.yaml", "description: Job payload",
         "title: Job payload")
    assert any("field without description" in m and "PUSH" in m for m in messages("bunqueue/v2"))


def test_definition_without_doc(spec_copy):
    edit(spec_copy / "bunqueue/protocol.yaml",
         "    description: Processing timeout in ms.\n", "")
    assert any("definitions.Timeout: no doc line" in m for m in messages("bunqueue/v2"))


def test_layout_field_without_doc(spec_copy):
    path = spec_copy / "quicx/protocol.yaml"
    text = path.read_text()
    new = re.sub(r"(- id: task_id\n(\s+)type: u4be\n)\s+doc: [^\n]*\n", r"\1", text, count=1)
    assert new != text
    path.write_text(new)
    assert any("field without doc" in m for m in messages("quicx/v1"))


def test_undefined_requirement(spec_copy):
    edit(spec_copy / "bunqueue/protocol.yaml", "x-requirement: BQ-LIMIT-6",
         "x-requirement: BQ-LIMIT-999")
    assert any("cites undefined requirement BQ-LIMIT-999" in m for m in messages("bunqueue/v2"))


def test_requirement_without_quote_is_uncited(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "    quote: Token comparison uses constant-time algorithm to prevent timing attacks.\n",
         "")
    assert any("BQ-AUTH-4" in m and "uncited" in m for m in messages("bunqueue/v2"))


def test_requirement_with_unknown_section(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "source: {doc: \"000\", section: Authentication}",
         "source: {doc: \"000\", section: Nowhere}")
    assert any("BQ-AUTH-4" in m and "section 'Nowhere'" in m for m in messages("bunqueue/v2"))


@pytest.mark.skipif(not SHARED.is_dir(), reason="the source documents (../shared) are absent")
def test_quote_not_in_source(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "quote: Token comparison uses constant-time algorithm to prevent timing attacks.",
         "quote: Tokens are compared however the server likes.")
    assert any("BQ-AUTH-4" in m and "quote not found" in m for m in messages("bunqueue/v2"))


def test_bad_level(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml", "  BQ-AUTH-4:\n    level: MUST",
         "  BQ-AUTH-4:\n    level: OUGHT")
    assert any("BQ-AUTH-4" in m and "level 'OUGHT'" in m for m in messages("bunqueue/v2"))


def test_invalid_schema(spec_copy):
    edit(spec_copy / "bunqueue/protocol.yaml", "  Timestamp:\n    type: number",
         "  Timestamp:\n    type: numeral")
    found = messages("bunqueue/v2")
    assert any("invalid JSON Schema" in m for m in found), found


def test_unknown_limit(spec_copy):
    edit(spec_copy / "bunqueue/protocol.yaml", "{$limit: priority.max}", "{$limit: priority.top}")
    assert any("unknown $limit 'priority.top'" in m for m in messages("bunqueue/v2"))


def test_opcode_collision_in_overlay(spec_copy):
    edit(spec_copy / "overlays/quicx-1.0.3.yaml", "code: 0x07", "code: 0x01")
    found = messages("quicx/1.0.3")
    assert any("MSG_SUBMIT" in m and "MSG_TASK" in m and ("0x01" in m or "collides" in m)
               for m in found), found
    assert messages("quicx/v1") == []  # the base profile is untouched


def test_non_json_value(spec_copy):
    edit(spec_copy / "bunqueue/protocol.yaml", "default_port: 6789", "default_port: 2026-11-21")
    assert any("is not JSON data" in m for m in messages("bunqueue/v2"))


def test_duplicate_command_across_files(spec_copy):
    core = (spec_copy / "bunqueue/commands/core.yaml").read_text()
    start = core.index("  PUSH:")
    (spec_copy / "bunqueue/commands/extra.yaml").write_text("commands:\n" + core[start:])
    assert any("defined twice" in m for m in messages("bunqueue/v2"))


# -- the levels policy (spec/README.md, "Levels and basis") ----------------------------------
def test_every_requirement_records_its_basis(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "  BQ-FRAME-1:\n    level: MUST\n    basis: stated\n", "  BQ-FRAME-1:\n    level: MUST\n")
    assert any("BQ-FRAME-1: basis None" in m for m in messages("bunqueue/v2"))


def test_a_must_needs_the_documents_words(spec_copy):
    # BQ-LOCK-5 is a reading of "Lock TTL in ms": as a MUST it breaks the policy
    edit(spec_copy / "bunqueue/requirements/behaviour.yaml",
         "  BQ-LOCK-5:\n    level: SHOULD\n", "  BQ-LOCK-5:\n    level: MUST\n")
    assert any("BQ-LOCK-5: a MUST must be stated by the documents, not implied" in m
               for m in messages("bunqueue/v2"))


def test_a_decision_is_at_most_a_should(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "  BQ-MSGPACK-3:\n    level: MAY\n", "  BQ-MSGPACK-3:\n    level: MUST\n")
    assert any("BQ-MSGPACK-3: a MUST must be stated by the documents, not decision" in m
               for m in messages("bunqueue/v2"))


def test_stated_needs_a_quote_and_implied_a_rationale(spec_copy):
    path = spec_copy / "bunqueue/requirements/behaviour.yaml"
    text = path.read_text()
    block = text[text.index("  BQ-LOCK-5:"):text.index("  BQ-ACKB-1:")]
    path.write_text(text.replace(block, "\n".join(
        line for line in block.split("\n") if not line.startswith("    rationale:"))))
    assert any("BQ-LOCK-5: an implied requirement needs a rationale" in m
               for m in messages("bunqueue/v2"))
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "  BQ-FLOW-1:\n    level: SHOULD\n    basis: decision\n",
         "  BQ-FLOW-1:\n    level: SHOULD\n    basis: stated\n")
    clear_cache()  # the loaded profiles are cached: read the second edit
    found = messages("bunqueue/v2")
    assert any("BQ-FLOW-1: basis stated needs a quote from a document" in m for m in found)
    assert any("BQ-FLOW-1: source doc QW is a decision: basis decision" in m for m in found)


def test_a_disagreeing_quote_is_checked_against_its_document(spec_copy):
    if not SHARED.is_dir():
        pytest.skip("the seed documents (../shared) are not beside the checkout")
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         'quote: "Hello(protocol negotiation) - Send Auth(if token configured)"',
         'quote: "Auth, then Hello"')
    assert any("BQ-AUTH-2.disagrees.0" in m and "quote not found in source 000" in m
               for m in messages("bunqueue/v2"))


def test_trace_format_defects(spec_copy):
    """trace.yaml, the recording format: a code collision, an undocumented gap reason, code 0
    for a gap reason (0 is the detail of every non-gap record), a field the layout language
    cannot read."""
    edit(spec_copy / "trace.yaml", '    code: 3\n    doc: "Bytes that could not be framed',
         '    code: 2\n    doc: "Bytes that could not be framed')
    edit(spec_copy / "trace.yaml", "    code: 1\n    doc: After a framing error",
         "    code: 0\n    doc: After a framing error")
    edit(spec_copy / "trace.yaml", "{id: detail, type: u2be, doc:", "{id: detail, type: u7be, doc:")
    found = messages()
    assert any("trace.yaml" in m and "record_types.gap" in m and "collides" in m for m in found)
    assert any("gap_reasons.framing_lost" in m and "code 0" in m for m in found)
    assert any("record_header.fields[2]" in m and "not a layout field" in m for m in found)


def test_a_release_is_named_by_one_profile_and_evidence_is_about_its_releases(spec_copy):
    assert lint() == []
    edit(spec_copy / "profiles.yaml", "releases: [2.8.59,", "releases: [2.8.39, 2.8.59,")
    edit(spec_copy / "profiles.yaml", "- {release: 2.8.59, probe: \"SubscribeEvents {queue}\"",
         "- {release: 2.7.1, probe: \"SubscribeEvents {queue}\"")
    clear_cache()
    found = [str(i) for i in lint()]
    assert any("release 2.8.39 is also named by bunqueue/v2" in m for m in found), found
    assert any("evidence[1]: release 2.7.1 is not one of the profile's releases" in m
               for m in found), found
    edit(spec_copy / "bunqueue/commands/query.yaml", "not_found: {error: job_not_found, "
         "requirement: BQ-QUERY-1}", "not_found: {error: job_missing, requirement: BQ-QUERY-1}")
    clear_cache()
    assert any("commands.GetJob.not_found.error: 'job_missing' is not an error" in m
               for m in map(str, lint())), found


def test_learn_sections_drive_rows_the_table_has(spec_copy):
    path = spec_copy / "quicx/protocol.yaml"
    edit(path, "conn: worker, send: {type: MSG_READY}, event: ready,",
         "conn: worker, send: {type: MSG_READY}, event: redy,")
    edit(path, "conn: worker, send: {type: MSG_HEARTBEAT}", "conn: monitor, send: {type: MSG_HEARTBEAT}")
    edit(path, "{from: held, event: done, to: finished, replies: {}, requirement: QX-DONE-2}",
         "{from: held, event: done, to: finished, replies: {monitor: [MSG_OK]}, requirement: QX-DONE-2}")
    found = messages("quicx/v1")
    assert any("task_dialogue.learn.inputs.ready: event 'redy' is no row's event" in m for m in found)
    assert any("inputs.heartbeat: conn 'monitor' is not one of the connections" in m for m in found)
    assert any("task_dialogue.transitions.4" in m and "not connections: monitor" in m for m in found)
    edit(path, "{from: queued, event: ready, to: held, replies: {worker: [MSG_TASK]}, "
               "requirement: QX-READY-3}", "{from: queued, event: ready, to: held, "
               "requirement: QX-READY-3}")
    edit(path, "refusal: QX-PONG-1", "refusal: QX-PONG-999")
    clear_cache()
    found = messages("quicx/v1")
    assert any("task_dialogue.transitions.2: a dialogue row says" in m for m in found)
    assert any("cites undefined requirement QX-PONG-999" in m for m in found)
