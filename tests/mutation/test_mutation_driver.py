"""The `make mutation` driver's own logic (tests/mutation/run.py), without running mutmut: a
mutant's file line and changed lines from mutmut's function-relative diff, equivalent/
parsed and matched by diff text (not by mutant number), stale entries reported, and the score."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("qw_mutation_run", HERE / "run.py")
run = sys.modules.setdefault("qw_mutation_run", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(run)

SOURCE = textwrap.dedent('''\
    """doc"""


    def _short(text):
        return text if len(text) <= 10 else text[:7] + "..."


    class Validator:
        # a comment above the method
        @staticmethod
        def check(value):
            if value is None:
                return False
            return value > 0
''')

# mutmut's diff of one function, numbered from the function's first line (decorator included)
DIFF_CHECK = textwrap.dedent('''\
    --- src/m.py
    +++ src/m.py
    @@ -2,5 +2,5 @@
     @staticmethod
     def check(value):
         if value is None:
             return False
    -    return value > 0
    +    return value >= 0''')
ORIG_CHECK = "# a comment above the method\n@staticmethod\ndef check(value):\n    if value is None:\n" \
             "        return False\n    return value > 0"


def test_a_mutants_line_is_its_line_in_the_file():
    defs = run.def_lines(SOURCE)
    assert defs == {"_short": 4, "Validator.check": 11}
    line, removed, added = run.parse_diff(DIFF_CHECK, ORIG_CHECK, defs["Validator.check"])
    assert SOURCE.splitlines()[line - 1].strip() == "return value > 0"
    assert (removed, added) == (["return value > 0"], ["return value >= 0"])


def test_a_removed_argument_is_a_one_sided_diff():
    diff = "--- a\n+++ a\n@@ -1,2 +1,2 @@\n def _short(text):\n" \
           "-    return text if len(text) <= 10 else text[:7] + \"...\"\n" \
           "+    return text if len(text) <= 10 else text[:7] + \"XX...XX\""
    line, removed, added = run.parse_diff(diff, "def _short(text):\n    return ...", 4)
    assert line == 5
    assert removed == ['return text if len(text) <= 10 else text[:7] + "..."']
    assert added == ['return text if len(text) <= 10 else text[:7] + "XX...XX"']


# the shape of mutmut's mutants/ copy of SOURCE: the original and each mutant beside it, renamed
MUTATED = textwrap.dedent('''\
    """doc"""


    def x__short__mutmut_orig(text):
        return text if len(text) <= 10 else text[:7] + "..."


    def x__short__mutmut_1(text):
        return text if len(text) < 10 else text[:7] + "..."


    class Validator:
        # a comment above the method
        @staticmethod
        def xǁValidatorǁcheck__mutmut_orig(value):
            if value is None:
                return False
            return value > 0

        # a comment above the method
        @staticmethod
        def xǁValidatorǁcheck__mutmut_1(value):
            if value is None:
                return False
            return value >= 0
''')


def test_mutants_are_read_from_mutmuts_copy_of_the_module():
    """The driver reads mutmut's mutants/ copy (not its internals): each mutant's text beside the
    original, renamed back, gives the diff, the file line and the changed lines."""
    functions = run.mutant_functions(MUTATED)
    assert set(functions) == {("_short", "orig"), ("_short", "1"), ("Validator.check", "orig"),
                              ("Validator.check", "1")}
    assert functions["Validator.check", "orig"].splitlines()[:2] == ["@staticmethod", "def check(value):"]
    defs = run.def_lines(SOURCE)
    for function, old, new in [("_short", "<= 10", "< 10"), ("Validator.check", "> 0", ">= 0")]:
        orig = functions[function, "orig"]
        diff = run.mutant_diff("src/m.py", orig, functions[function, "1"])
        line, removed, added = run.parse_diff(diff, orig, defs[function])
        assert old in SOURCE.splitlines()[line - 1]
        assert len(removed) == len(added) == 1
        assert removed[0].replace(old, new) == added[0]
    assert run.MUTANT_DEF.match("xǁValidatorǁcheck__mutmut_12").group("cls", "meth", "n") == \
        ("Validator", "check", "12")
    assert run.MUTANT_DEF.match("x__short__mutmut_3").group("func", "n") == ("_short", "3")


def _mutant(name, status, removed, added, function="Validator.check"):
    return run.Mutant(name=f"queuewire.m.xǁValidatorǁcheck__mutmut_{name}", function=function,
                      status=status, line=15, diff="", removed=removed, added=added)


def test_equivalent_entries_match_by_text_not_by_number(tmp_path):
    path = tmp_path / "equivalent.txt"
    path.write_text(textwrap.dedent("""\
        # a comment
        m.py :: Validator.check
        -     return value > 0
        +     return value >= 0
        why: value is never 0 here

        m.py :: Validator.check
        - return value > 0
        + return value < 0
        why: a stale entry
        """))
    exclusions = run.load_exclusions(path)
    assert [(e.function, e.removed, e.added) for e in exclusions] == [
        ("Validator.check", ["return value > 0"], ["return value >= 0"]),
        ("Validator.check", ["return value > 0"], ["return value < 0"])]
    # numbered 7 now; an edit renumbers mutants, the entry still finds this one and no other
    mutants = [_mutant(7, "survived", ["return value > 0"], ["return value >= 0"]),
               _mutant(3, "survived", ["return value > 0"], ["return value > 1"]),
               _mutant(4, "killed", ["return value > 0"], ["return value < 0"])]
    run.apply_exclusions("m.py", mutants, exclusions)
    assert [m.status for m in mutants] == ["equivalent", "survived", "killed"]
    assert mutants[0].reason == "value is never 0 here"
    summary = run.summarize({"path": "src/queuewire/m.py", "tests": [], "budget": 60}, mutants, 1.0,
                            False, "test", exclusions)
    assert (summary["killed"], summary["survived"], summary["equivalent"]) == (1, 1, 1)
    assert summary["score"] == 50.0
    assert summary["stale_exclusions"] == [f"{path.name}:7: Validator.check"]
    assert "STALE" in run.render(summary)


@pytest.mark.parametrize("text", ["m.py :: f\n- a\nwhy:\n", "m.py :: f\nwhy: no lines\n",
                                  "m.py f\n- a\nwhy: x\n", "m.py :: f\n- a\nbecause: x\n"])
def test_a_malformed_entry_is_refused(tmp_path, text):
    path = tmp_path / "equivalent.txt"
    path.write_text(text)
    with pytest.raises(SystemExit):
        run.load_exclusions(path)


def test_the_score_leaves_out_no_tests_and_not_run():
    mutants = [_mutant(1, "killed", [], ["x"]), _mutant(2, "timeout", [], ["x"]),
               _mutant(3, "survived", [], ["x"]), _mutant(4, "no tests", [], ["x"]),
               _mutant(5, "not checked", [], ["x"])]
    s = run.summarize({"path": "src/queuewire/m.py", "tests": [], "budget": 60}, mutants, 1.0, True,
                      "test", [])
    assert (s["killed"], s["timeouts"], s["survived"], s["no_tests"], s["not_run"]) == (1, 1, 1, 1, 1)
    assert s["score"] == pytest.approx(66.7)
    assert "THE BUDGET ENDED THE RUN" in run.render(s)


def test_the_checked_in_lists_parse():
    modules = run.load_modules()
    assert modules, "modules.toml lists no module"
    for module in modules:
        assert (run.ROOT / module["path"]).is_file(), module["path"]
        for test in module["tests"]:
            assert (run.ROOT / test).is_file(), test
    names = {run.short_name(m["path"]) for m in modules}
    for entry in run.load_exclusions():
        assert entry.module in names, f"{entry.where}: {entry.module} is not in modules.toml"


def test_open_reruns_only_what_the_last_report_left_open(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "REPORTS", tmp_path)
    monkeypatch.setattr(run, "ROOT", tmp_path.parent)
    source = "def f(x):\n    return x + 1\n\n\nclass C:\n    def g(self):\n        return 2\n"
    rows = [("a", "killed", "f"), ("b", "survived", "f"), ("c", "not checked", "f"),
            ("d", "no tests", "f"), ("e", "equivalent", "f"), ("g1", "survived", "C.g"),
            ("g2", "killed", "C.g")]
    old = {"module": "src/queuewire/m.py", "source": "commit abc", "module_source": source,
           "mutant_list": [{"name": n, "status": s, "function": f} for n, s, f in rows]}
    (tmp_path / "m.json").write_text(json.dumps(old))
    report, names, changed = run.open_names("m", source)
    assert (names, changed) == (["b", "c", "d", "e", "g1"], set())
    # the rerun's statuses for b, c, e, g1; the others keep the last report's (mutmut says
    # "not checked" for every mutant it was not asked to run)
    fresh = []
    for (name, _, function), status in zip(rows, ["not checked", "killed", "survived", "not checked",
                                                  "survived", "killed", "not checked"]):
        m = _mutant(0, status, [], ["x"], function=function)
        m.name = name
        fresh.append(m)
    merged = run.merge_open(report, names, changed, fresh)
    assert [m.status for m in merged] == ["killed", "killed", "survived", "not checked", "survived",
                                          "killed", "killed"]
    # C.g edited since: every mutant of it is rerun (a pattern), f's open ones as before
    report, names, changed = run.open_names("m", source.replace("return 2", "return 3"))
    assert changed == {"C.g"}
    assert names == ["b", "c", "d", "e", "queuewire.m.xǁCǁg__mutmut_*"]
    fresh[-1].status = "survived"  # g2, rerun because C.g changed
    assert run.merge_open(report, names, changed, fresh)[-1].status == "survived"
    with pytest.raises(SystemExit, match="no report"):
        run.open_names("other", source)


def test_function_texts_and_mutant_patterns():
    texts = run.function_texts("def f():\n    pass\n\nclass K:\n    async def h(self):\n        pass\n")
    assert set(texts) == {"f", "K.h"}
    assert run.mutant_pattern("src/queuewire/codecs/quicx.py", "f") == "queuewire.codecs.quicx.x_f__mutmut_*"
