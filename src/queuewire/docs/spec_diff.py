"""The profile changes page: for each protocol, the changes between each pair of adjacent
profiles (in ``spec/profiles.yaml`` order), as ``queuewire spec diff A B`` lists them
(:mod:`queuewire.spec.diff`), breaking ones first, each classified for clients and for
servers with its reason; then the classification rules themselves
(:data:`queuewire.spec.diff_rules.RULES`), so the page and the command cannot disagree."""

from __future__ import annotations

from ..spec import load_profile, profile_names
from ..spec.diff import Change, brief, diff_profiles, summary
from ..spec.diff_rules import RULES
from .text import code, esc, table

SHORT = 70
IMPACT = {"breaking": "**breaking**", "compatible": "compatible"}


def _rows(changes: list[Change]) -> list[list[str]]:
    return [[f"{c.what} {c.kind}" + (f" ({c.trend})" if c.trend else ""), code(c.subject),
             code(brief(c.old, SHORT)), code(brief(c.new, SHORT)), IMPACT[c.clients],
             IMPACT[c.servers], esc(c.why)]
            for c in changes]


def adjacent_pairs() -> list[tuple[str, str]]:
    """Each protocol's profiles, two by two in file order."""
    protocols = list(dict.fromkeys(load_profile(n).protocol for n in profile_names()))
    pairs = []
    for protocol in protocols:
        names = profile_names(protocol)
        pairs += list(zip(names, names[1:]))
    return pairs


def diff_page() -> list[str]:
    header = ["change", "where", "old", "new", "clients", "servers", "why"]
    lines = ["# Profile changes", "",
             "What changes from each profile to the next one of its protocol (in the order of "
             "`spec/profiles.yaml`), generated from the merged spec trees by the code behind "
             "`queuewire spec diff A B`. Each change is classified for clients and for servers "
             "separately: *breaking for clients* means a client written against the first "
             "profile fails against a server of the second (a refusal, a frame it cannot read, "
             "a value or behaviour it relied on that is gone); *breaking for servers* means a "
             "server written against the first fails the second's clients or requirements. "
             "Prose (doc lines, descriptions, requirement texts) is not compared. In CI, "
             "`queuewire spec diff A B` exits 1 when a change is breaking (`--side clients` "
             "or `servers` for one side), 0 otherwise.", ""]
    for old, new in adjacent_pairs():
        changes = diff_profiles(load_profile(old), load_profile(new))
        counts = summary(changes)
        lines += [f"## {old} → {new}", "",
                  f"`queuewire spec diff {old} {new}`: {counts['changes']} changes, "
                  f"{counts['breaking']} breaking ({counts['breaking_for_clients']} for clients, "
                  f"{counts['breaking_for_servers']} for servers).", ""]
        for title, part in (("Breaking", [c for c in changes if c.breaking]),
                            ("Compatible", [c for c in changes if not c.breaking])):
            lines += [f"### {title} ({len(part)})", ""]
            lines += table(header, _rows(part)) if part else ["None.", ""]
    lines += ["## The rules", "",
              "Every change has two parties, *a* and *b* (the sender and the receiver of a "
              "field, message, bounded value or error; the side a requirement or state table "
              "binds and its counterpart; the side that uses a command or capability and the "
              "side that provides it); a side is broken when the rule breaks a party it "
              "belongs to. A kind `*` matches any kind; a part of the tree no rule names is "
              "`other`.", ""]
    lines += table(["what", "kind", "trend", "a", "b", "why"],
                   [[esc(what), code(kind), code(trend), rule.a, rule.b, esc(rule.why)]
                    for (what, kind, trend), rule in RULES.items()])
    return lines
