"""The generated docs pages say what spec/ and the packaged cases say, and nothing goes missing."""

from __future__ import annotations

from queuewire.conformance.runner import load_cases
from queuewire.docs import render, render_cases
from queuewire.spec import load_profile, profile_names


def _page(paths, name):
    stem = name.replace("/", "_").replace(".", "_") + ".md"
    (path,) = [p for p in paths if p.name == stem]
    return path.read_text(encoding="utf-8")


def test_protocol_pages_list_every_requirement_and_command(tmp_path):
    paths = render(tmp_path)
    assert len(paths) == len(profile_names())
    for name in profile_names():
        profile = load_profile(name)
        text = _page(paths, name)
        assert all(f"| {rid} |" in text for rid in profile.requirements), name
        if profile.protocol == "bunqueue":
            assert all(cmd in text for cmd in profile.model.commands), name


def test_case_catalogue_lists_every_case_and_the_uncited_ids(tmp_path):
    paths = render_cases(tmp_path)
    for name in profile_names():
        profile = load_profile(name)
        cases = load_cases(profile.protocol, name)
        text = _page(paths, name)
        assert f"{len(cases)} cases" in text
        assert all(f"| `{c.id}` |" in text for c in cases), name
        cited = {r for c in cases for r in c.requirements}
        uncited_part = text.split("## Requirement ids no case cites", 1)[1]
        for rid in profile.requirements:
            assert (f"- {rid} (" in uncited_part) == (rid not in cited), (name, rid)
