"""The one verdict vocabulary (issue 23): the mapping from a requirement's level and basis to
a verdict, written once in queuewire.judge, and no tool keeping a copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from queuewire.judge import FINDING_VERDICTS, Verdict, reading, requirement_verdict, verdict_for
from queuewire.spec import BASES, load_profile

SRC = Path(__file__).resolve().parents[2] / "src" / "queuewire"


@pytest.mark.parametrize("level, basis, verdict", [
    ("MUST", "stated", Verdict.FAIL),
    ("MUST", None, Verdict.FAIL),             # a requirement without basis counts as stated
    ("MUST", "implied", Verdict.NON_STRICT),  # a reading never FAILs a peer (lint refuses it too)
    ("MUST", "decision", Verdict.NON_STRICT),
    ("SHOULD", "stated", Verdict.NON_STRICT),
    ("SHOULD", "decision", Verdict.NON_STRICT),
    ("MAY", "stated", Verdict.INFO),
    (None, None, Verdict.INFO),               # silence
    ("OPTIONAL", "stated", Verdict.INFO),     # not a level of ours: never more than INFO
])
def test_the_level_and_basis_give_the_verdict(level, basis, verdict):
    assert verdict_for(level, basis) is verdict


def test_a_finding_takes_the_verdict_of_the_requirement_it_cites():
    profile = load_profile("bunqueue/v2")
    by_kind = {}
    for rid, req in profile.requirements.items():
        by_kind.setdefault((req.level, req.basis), rid)
    assert ("MUST", "stated") in by_kind and any(lvl == "SHOULD" for lvl, _ in by_kind)
    for (level, basis), rid in by_kind.items():
        assert requirement_verdict(profile, rid) is verdict_for(level, basis), rid
    assert requirement_verdict(profile, "BQ-NO-SUCH-1") is Verdict.INFO
    assert requirement_verdict(profile, None) is Verdict.INFO
    assert set(BASES) >= {basis for _, basis in by_kind}


def test_the_vocabulary_is_the_one_the_reports_print():
    assert [str(v) for v in FINDING_VERDICTS] == ["FAIL", "NON-STRICT", "INFO"]
    assert {v.value for v in Verdict} == {"PASS", "FAIL", "NON-STRICT", "UNIMPLEMENTED", "INFO", "ERROR"}


VERDICT_WORDS = {"FAIL", "WARN", "NON-STRICT", "INFO", "PASS"}
LEVEL_WORDS = {"MUST", "SHOULD", "MAY"}


def _literal_tuples(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List | ast.Set):
            words = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            if len(words) == len(node.value.elts) and len(words) >= 2:
                yield node.lineno, set(words)


def test_no_module_keeps_its_own_list_of_verdicts_or_levels():
    """Verdicts are listed in queuewire.judge, requirement levels in queuewire.spec; a module
    that spells either list out again is the drift this guards against (six copies once, one
    in reverse order)."""
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("judge/", "spec/")):
            continue
        for line, words in _literal_tuples(ast.parse(path.read_text(encoding="utf-8"))):
            if words <= VERDICT_WORDS | {"ERROR", "UNIMPLEMENTED"} and len(words & VERDICT_WORDS) >= 2 \
                    or words == LEVEL_WORDS:
                copies.append(f"{rel}:{line}: {sorted(words)}")
    assert not copies, "use queuewire.judge.FINDING_VERDICTS / queuewire.spec.LEVELS:\n" + "\n".join(copies)


def test_a_reading_of_a_rule_is_never_more_than_non_strict():
    assert [reading(v) for v in FINDING_VERDICTS] == [Verdict.NON_STRICT, Verdict.NON_STRICT, Verdict.INFO]


def test_a_requirement_is_stated_unless_it_says_otherwise():
    assert verdict_for("MUST") is Verdict.FAIL   # the default basis is "stated"
    assert verdict_for("SHOULD") is Verdict.NON_STRICT


def test_a_requirement_that_is_a_reading_never_fails_a_peer_even_at_must():
    """The cap holds whatever the spec says: a profile whose MUST rests on a reading (spec
    lint refuses one, but an edit could make one) gives NON-STRICT."""
    import copy
    import dataclasses

    profile = load_profile("bunqueue/v2")
    reading_must = dataclasses.replace(profile.requirements["BQ-PIPE-4"], basis="implied")
    edited = copy.copy(profile)
    object.__setattr__(edited, "requirements", {**profile.requirements, "BQ-PIPE-4": reading_must})
    assert requirement_verdict(profile, "BQ-PIPE-4") is Verdict.FAIL
    assert requirement_verdict(edited, "BQ-PIPE-4") is Verdict.NON_STRICT
