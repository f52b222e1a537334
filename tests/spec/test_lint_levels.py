"""``spec lint`` refuses a basis or a level its words do not support (spec/README.md, "Lint").

* a ``stated`` requirement whose rationale says the documents are silent on it;
* a requirement whose level is not its ``kind``'s without a ``level-reason``;
* a ``reading-band`` that names no limit or lies outside it.

Each rule is fed a small bad tree (the kinds rule directly, as the tree ``lint`` reads) and a
copy of spec/ with one requirement broken, and the message must name the requirement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from queuewire.spec import clear_cache
from queuewire.spec.lint import SILENCE, check_kinds, lint


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {path}"
    path.write_text(text.replace(old, new))


def messages(profile: str = "bunqueue/v2") -> list[str]:
    return [str(i) for i in lint([profile])]


def test_the_spec_as_shipped_is_clean(spec_copy):
    assert messages() == [] and messages("bunqueue/2.9.5") == []


# -- silence under stated ---------------------------------------------------------------------
@pytest.mark.parametrize("words", [
    "The documents are silent on it.", "The document does not say what happens.",
    "The documents do not say whether a refused ACKB applied some entries.",
    "This is not stated anywhere.", "It names the option without saying what it does.",
    "The documents  do\n not   STATE it.", "001 says nothing of it.",
])
def test_the_words_that_say_the_documents_are_silent(words):
    assert SILENCE.search(" ".join(words.split()))


@pytest.mark.parametrize("words", [
    "The document states only the option's name.",
    "Internal robustness of the server, not observable on the wire; SHOULD.",
    "The document names the purpose of the secret but not the signature scheme.",
    "bunqueue 2.9.5 silently drops it.",
])
def test_words_about_what_the_documents_do_say_pass(words):
    assert not SILENCE.search(words)


def test_a_stated_requirement_whose_rationale_says_the_documents_are_silent(spec_copy):
    # BQ-JOB-15 was stated with "the documents are silent" in its rationale (issue 25)
    edit(spec_copy / "bunqueue/requirements/behaviour.yaml",
         "  BQ-JOB-15:\n    level: SHOULD\n    basis: implied\n",
         "  BQ-JOB-15:\n    level: SHOULD\n    basis: stated\n")
    found = [m for m in messages() if "BQ-JOB-15" in m]
    assert len(found) == 1 and "basis stated, but its rationale says the documents do not " \
        "state it ('do not say')" in found[0], found


def test_the_same_rationale_under_implied_passes(spec_copy):
    edit(spec_copy / "bunqueue/requirements/behaviour.yaml",
         "  BQ-PUSH-4:\n    level: SHOULD\n    basis: implied\n",
         "  BQ-PUSH-4:\n    level: SHOULD\n    basis: stated\n")
    assert any("BQ-PUSH-4: basis stated, but its rationale" in m and "'without saying'" in m
               for m in messages())
    clear_cache()
    edit(spec_copy / "bunqueue/requirements/behaviour.yaml",
         "  BQ-PUSH-4:\n    level: SHOULD\n    basis: stated\n",
         "  BQ-PUSH-4:\n    level: SHOULD\n    basis: implied\n")
    assert messages() == []


# -- a level apart from its kind --------------------------------------------------------------
KINDS = {"range-comment": {"doc": "A range given as a comment.", "level": "SHOULD"}}


def _req(level: str, **extra: str) -> dict:
    return {"level": level, "basis": "stated", "subject": "server", "text": "t",
            "source": {"doc": "001", "section": "Core Commands"}, "quote": "q", **extra}


def _kinds(requirements: dict, kinds: dict | None = None) -> list[str]:
    tree = {"requirement_kinds": KINDS if kinds is None else kinds, "requirements": requirements}
    return [str(i) for i in check_kinds("tiny", tree)]


def test_a_small_tree_whose_kind_holds_one_level_is_clean():
    assert _kinds({"BQ-A-1": _req("SHOULD", kind="range-comment"),
                   "BQ-A-2": _req("SHOULD", kind="range-comment"),
                   "BQ-A-3": _req("MUST")}) == []


def test_a_level_apart_from_its_kind_needs_a_reason():
    # BQ-LIMIT-10/11 were MUSTs beside BQ-LIMIT-12's SHOULD, the same kind of comment
    found = _kinds({"BQ-LIMIT-10": _req("MUST", kind="range-comment"),
                    "BQ-LIMIT-12": _req("SHOULD", kind="range-comment")})
    assert found == ["tiny: requirements.BQ-LIMIT-10: level MUST differs from its kind "
                     "range-comment's SHOULD (as BQ-LIMIT-12) without a level-reason"]


def test_a_written_reason_lets_a_level_differ():
    assert _kinds({"BQ-LIMIT-10": _req("MUST", kind="range-comment",
                                       **{"level-reason": "The section says must."}),
                   "BQ-LIMIT-12": _req("SHOULD", kind="range-comment")}) == []


def test_a_reason_where_nothing_differs_is_refused():
    found = _kinds({"BQ-A-1": _req("SHOULD", kind="range-comment",
                                   **{"level-reason": "Why not."}),
                    "BQ-A-2": _req("MUST", **{"level-reason": "No kind."})})
    assert any("BQ-A-1: a level-reason, but its level is its kind range-comment's" in m
               for m in found), found
    assert any("BQ-A-2: a level-reason without a kind" in m for m in found), found


def test_a_kind_must_be_declared_with_a_doc_and_a_level():
    found = _kinds({"BQ-A-1": _req("SHOULD", kind="range-coment")},
                   {"range-comment": {"level": "OUGHT"}})
    assert any("requirement_kinds.range-comment: no doc line" in m for m in found), found
    assert any("requirement_kinds.range-comment: level 'OUGHT'" in m for m in found), found
    assert any("BQ-A-1: kind 'range-coment' is not one of requirement_kinds" in m
               for m in found), found


def test_lint_names_a_client_sdk_statement_made_a_must_again(spec_copy):
    edit(spec_copy / "bunqueue/requirements/behaviour.yaml",
         "  BQ-CLIENT-6:\n    level: SHOULD\n", "  BQ-CLIENT-6:\n    level: MUST\n")
    found = [m for m in messages() if "BQ-CLIENT-6" in m]
    assert found == ["bunqueue/v2: requirements.BQ-CLIENT-6: level MUST differs from its kind "
                     "client-sdk's SHOULD (as BQ-WORKER-1, BQ-WORKER-2, BQ-WORKER-3) without a "
                     "level-reason"], found


def test_lint_names_a_range_comment_made_a_must_again(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "  BQ-LIMIT-11:\n    level: SHOULD\n    basis: implied\n",
         "  BQ-LIMIT-11:\n    level: SHOULD\n    basis: stated\n")
    clear_cache()
    assert messages() == []  # a stated SHOULD is allowed by the basis rule...
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "  BQ-LIMIT-11:\n    level: SHOULD\n    basis: stated\n",
         "  BQ-LIMIT-11:\n    level: MUST\n    basis: stated\n")
    clear_cache()
    found = messages()
    assert any("requirements.BQ-LIMIT-11: level MUST differs from its kind range-comment's "
               "SHOULD (as BQ-LIMIT-10, BQ-LIMIT-12)" in m for m in found), found


# -- reading bands ----------------------------------------------------------------------------
def test_a_reading_band_names_a_limit_and_lies_below_it(spec_copy):
    path = spec_copy / "bunqueue/requirements/core.yaml"
    edit(path, "reading-band: {limit: job_data_bytes, above: 10000000}",
         "reading-band: {limit: job_data_byte, above: 10000000}")
    edit(path, "reading-band: {limit: max_frame_bytes, above: 64000000}",
         "reading-band: {limit: max_frame_bytes, above: 68000000}")
    found = messages()
    assert any("requirements.BQ-LIMIT-15.reading-band: names no limit of the profile: "
               "'job_data_byte'" in m for m in found), found
    assert any("requirements.BQ-FRAME-4.reading-band: above 68000000 is not a number below the "
               "bound of limit max_frame_bytes (67108864)" in m for m in found), found


def test_a_reading_band_is_a_reading(spec_copy):
    edit(spec_copy / "bunqueue/requirements/core.yaml",
         "  BQ-FRAME-4:\n    level: SHOULD\n    basis: implied\n",
         "  BQ-FRAME-4:\n    level: SHOULD\n    basis: stated\n")
    assert any("requirements.BQ-FRAME-4: a reading-band is a reading: basis implied" in m
               for m in messages())
