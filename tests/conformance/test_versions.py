"""The version matrix (:mod:`queuewire.conformance.versions`) from reports made up here: the
grids, each case's history, and which changes between adjacent releases the difference of
their profiles explains. The real releases are in tests/interop/test_versions_real_bunqueue.py
and `make version-matrix`."""

from __future__ import annotations

from queuewire.conformance.versions import (
    Release,
    build_matrix,
    render_html,
    render_markdown,
    touched_requirements,
)
from queuewire.spec import load_profile
from queuewire.spec.diff import diff_profiles


def run(**verdicts: tuple[str, list[str]]) -> dict:
    cases = [{"id": cid.replace("_", "."), "verdict": v, "requirements": reqs}
             for cid, (v, reqs) in verdicts.items()]
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    return {"cases": cases, "counts": counts}


def test_changes_are_explained_by_the_profiles_diff_or_listed_as_not():
    old = Release("1.0", "bunqueue/v2", {"best": "bunqueue/v2"}, {
        "bunqueue/v2": run(hello_version=("PASS", ["BQ-HELLO-2"]), lock_ack=("FAIL", ["BQ-LOCK-2"]),
                           same=("PASS", ["BQ-ENV-1"]), gone=("PASS", ["BQ-PUSH-12"]))})
    mid = Release("1.1", "bunqueue/v2", {"best": "bunqueue/v2"}, {
        "bunqueue/v2": run(hello_version=("PASS", ["BQ-HELLO-2"]), lock_ack=("PASS", ["BQ-LOCK-2"]),
                           same=("PASS", ["BQ-ENV-1"]), gone=("PASS", ["BQ-PUSH-12"]))})
    new = Release("2.0", "bunqueue/2.9.5", {"best": "bunqueue/v2"}, {
        "bunqueue/2.9.5": run(hello_version=("FAIL", ["BQ-HELLO-101"]), lock_ack=("PASS", ["BQ-LOCK-2"]),
                              same=("PASS", ["BQ-ENV-1"]), events=("PASS", ["BQ-EVENT-102"])),
        "bunqueue/v2": run(hello_version=("FAIL", ["BQ-HELLO-2"]), lock_ack=("PASS", ["BQ-LOCK-2"]),
                           same=("PASS", ["BQ-ENV-1"]), gone=("NON-STRICT", ["BQ-PUSH-12"]))})
    m = build_matrix([old, mid, new], "bunqueue/v2")
    (a, b, first), (c, d, second) = m.changes
    assert (a, b, [(x.case, x.old, x.new, x.explained) for x in first]) == (
        "1.0", "1.1", [("lock.ack", "FAIL", "PASS", False)])
    assert (c, d) == ("1.1", "2.0")
    by_case = {x.case: x for x in second}
    assert set(by_case) == {"hello.version", "events", "gone"}
    assert "requirement BQ-HELLO-101" in by_case["hello.version"].explained_by
    assert by_case["events"].old is None and by_case["events"].explained
    assert by_case["gone"].new is None and by_case["gone"].explained
    assert m.unexplained == 1
    assert m.history["lock.ack"] == [("1.1", "FAIL", "PASS")]
    assert m.grids["bunqueue/v2"]["gone"] == {"1.0": "PASS", "1.1": "PASS", "2.0": "NON-STRICT"}
    page = render_markdown(m)
    assert "| 2.0 | bunqueue/2.9.5 | bunqueue/v2 | **no** |" in page
    assert "`lock.ack`: FAIL → PASS; **not explained by a profile difference**" in page
    assert "<td style=\"background:#f4c7c3\">FAIL</td>" in render_html(m)


def test_touched_requirements_follow_requirements_citations_and_commands():
    touched = touched_requirements(diff_profiles(load_profile("bunqueue/v2"),
                                                 load_profile("bunqueue/2.9.5")))
    assert "BQ-HELLO-2" in touched and "BQ-HELLO-101" in touched       # retired, added
    assert "BQ-CMD-SubscribeEvents" in touched                         # a command added
    assert "BQ-LOCK-2" not in touched                                  # untouched
    assert touched_requirements([]) == {}
