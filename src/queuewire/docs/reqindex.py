"""The requirements index: every requirement id of every profile with what exercises it, the
server conformance cases and client scenarios that cite it (per profile, read from the
packaged cases), the fuzz oracles that judge it (the ids ``queuewire.fuzz.oracles`` names,
with the finding kind, and the decoder-error kinds whose requirement an oracle cites when a
server mishandles that error) and the test modules that mention it (a search of ``tests/``
for the exact id). An id nothing exercises is visible at a glance."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

from ..spec import load_profile, profile_names, spec_dir
from .text import code, esc, ref, table, target

ID = re.compile(r"\b(?:BQ|QX)-[A-Z0-9]+-[A-Za-z0-9]+\b")
FINDING = re.compile(r'(?:_finding|Finding)\(\s*"((?:BQ|QX)-[^"]+)",\s*(?:"[A-Z]+",\s*)?"([a-z_]+)"')
SHOWN = 12  # cases, scenarios or tests listed per requirement before "and n more"


def _items(items: Iterable[str], limit: int = SHOWN) -> str:
    items = list(dict.fromkeys(items))
    shown = ", ".join(code(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def oracle_citations() -> dict[str, list[str]]:
    """Requirement id -> the fuzz oracles (finding kinds) that cite it by name."""
    spec = importlib.util.find_spec("queuewire.fuzz.oracles")
    if spec is None or not spec.origin:
        return {}
    text = Path(spec.origin).read_text(encoding="utf-8")
    out: dict[str, list[str]] = {}
    for rid, kind in FINDING.findall(text):
        out.setdefault(rid, []).append(kind)
    for rid in ID.findall(text):
        out.setdefault(rid, []).append("oracles.py")
    return out


def test_citations(root: Path | None = None) -> dict[str, list[str]] | None:
    """Requirement id -> test files that mention it (None when there is no tests/)."""
    tests = (root or spec_dir().resolve().parent) / "tests"
    if not tests.is_dir():
        return None
    out: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        for rid in set(ID.findall(path.read_text(encoding="utf-8", errors="replace"))):
            out.setdefault(rid, []).append(str(path.relative_to(tests.parent)))
    return out


def _cases() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    from ..conformance.client.scenarios import load_scenarios
    from ..conformance.runner import load_cases

    server: dict[str, list[str]] = {}
    client: dict[str, list[str]] = {}
    for name in profile_names():
        profile = load_profile(name)
        for case in load_cases(profile.protocol, name):
            for rid in case.requirements:
                server.setdefault(rid, []).append(case.id)
        for sc in load_scenarios(profile.protocol, profile):
            rids = list(sc.requirements) + [e.requirement for e in sc.expect] + \
                [j.requirement for j in sc.judge]
            for rid in dict.fromkeys(rids):
                client.setdefault(rid, []).append(sc.id)
    return server, client


def index_page() -> tuple[list[str], dict[str, dict[str, list[str]]]]:
    """The page, and per id what exercises it (for the tests)."""
    server, client = _cases()
    oracles = oracle_citations()
    tests = test_citations()
    kinds: dict[str, list[str]] = {}
    ids: dict[str, list[str]] = {}
    for name in profile_names():
        profile = load_profile(name)
        for rid in profile.requirements:
            ids.setdefault(rid, []).append(name)
        for kind in profile.model.protocol_errors.values():
            kinds.setdefault(kind.requirement, []).append(f"error kind {kind.name}")
    found: dict[str, dict[str, list[str]]] = {}
    for rid in sorted(ids):
        found[rid] = {
            "server cases": list(dict.fromkeys(server.get(rid, ()))),
            "client scenarios": list(dict.fromkeys(client.get(rid, ()))),
            "fuzz oracles": list(dict.fromkeys(oracles.get(rid, []) + kinds.get(rid, []))),
            "tests": list(dict.fromkeys((tests or {}).get(rid, ()))),
        }
    none = [rid for rid, f in found.items() if not any(f.values())]
    lines = ["# Requirements index", "",
             f"Every requirement id of every profile ({len(ids)} ids) and what exercises it: "
             "the server conformance cases and client scenarios that cite it, the fuzz "
             "oracles that judge it (a finding kind of `queuewire.fuzz.oracles`, or a "
             "decoder-error kind whose requirement an oracle cites when a server mishandles "
             "that error; the reply-schema oracle also cites whatever requirement a reply "
             "breaks, so it can judge any id a reply schema carries, which is not counted "
             "here), and the test modules that name it"
             + (" (no `tests/` directory was found: the test column is empty)" if tests is None
                else "") + f". {len(none)} ids are exercised by nothing listed here"
             + (": " + ", ".join(ref(ids[r][0], "req", r) for r in none) if none else "") + ".",
             "", "## Summary", "",
             "How many of each exercise every id; the id links to its entry below.", ""]
    rows = [[ref("index", "req", rid, rid), load_profile(ids[rid][0]).requirements[rid].level]
            + [str(len(v)) if v else "" for v in f.values()] for rid, f in found.items()]
    lines += table(["requirement", "level", "server cases", "client scenarios", "fuzz oracles",
                    "tests"], rows)
    lines += ["## Entries", ""]
    for rid, f in found.items():
        names = ids[rid]
        req = load_profile(names[0]).requirements[rid]
        lines += [target("index", "req", rid),
                  f"**{rid}** ({req.level}; "
                  + ", ".join(ref(n, "req", rid, n) for n in names) + f"): {esc(req.text)}", ""]
        items = [f"- {what} ({len(v)}): {_items(v)}" for what, v in f.items() if v]
        lines += (items or ["- exercised by nothing listed here"]) + [""]
    return lines, found
