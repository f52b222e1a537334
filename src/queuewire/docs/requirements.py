"""A profile's requirements page: every requirement, grouped by area (``BQ-FRAME-*``,
``QX-HDR-*``, ...), with its level, basis, subject, text, source and section, the exact quote
it rests on, the rationale of a reading or decision, and the words of any document that
disagrees. Each entry has a label other pages link to (:func:`.text.req_ref`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .text import esc, ref, target


def area(rid: str) -> str:
    parts = rid.split("-")
    return parts[1] if len(parts) > 2 else rid


def _quote(text: str) -> list[str]:
    return ["> " + esc(text), ""]


def carriers(profile: Any) -> dict[str, list[str]]:
    """Requirement id -> links to the commands or messages whose entry lists it."""
    from .schema import all_requirements

    out: dict[str, list[str]] = {}
    model = profile.model
    if profile.protocol == "bunqueue":
        for cmd in model.commands.values():
            ids = [cmd.requirement] + all_requirements(dict(cmd.request)) + \
                all_requirements(dict(cmd.response))
            for rid in dict.fromkeys(ids):
                out.setdefault(rid, []).append(ref(profile.name, "cmd", cmd.name))
    else:
        for msg in model.messages.values():
            ids = [msg.requirement] + [f.requirement for f in msg.layout]
            for rid in dict.fromkeys(i for i in ids if i):
                out.setdefault(rid, []).append(ref(profile.name, "msg", msg.name))
    return out


def entry(profile: Any, req: Any, carried: Sequence[str] = ()) -> list[str]:
    lines = [target(profile.name, "req", req.id), f"### {req.id}", "",
             f"**{req.level}** · basis *{req.basis or '?'}* · binds the *{req.subject}* · "
             f"source {req.source} § {esc(req.section)}", "", esc(req.text), ""]
    if carried:
        shown = carried[:12]
        more = f" and {len(carried) - len(shown)} more" if len(carried) > len(shown) else ""
        lines = lines[:-1] + ["", f"Carried by: {', '.join(shown)}{more}.", ""]
    if req.quote:
        lines += _quote(req.quote)
    if req.rationale:
        lines += [f"*Rationale:* {esc(req.rationale)}", ""]
    for other in req.disagrees:
        lines += [f"*{other.get('doc', '?')} § {esc(other.get('section', ''))} says "
                  "otherwise:*", ""] + _quote(other.get("quote", ""))
    return lines


def requirements_page(profile: Any) -> list[str]:
    reqs = list(profile.requirements.values())
    groups: dict[str, list] = {}
    for req in reqs:
        groups.setdefault(area(req.id), []).append(req)
    counts = {lvl: sum(r.level == lvl for r in reqs) for lvl in ("MUST", "SHOULD", "MAY")}
    lines = [f"# {profile.name}: requirements", "",
             f"{len(reqs)} requirements ({counts['MUST']} MUST, {counts['SHOULD']} SHOULD, "
             f"{counts['MAY']} MAY), generated from `spec/`. A requirement's *basis* says what "
             "its level rests on: `stated` (the documents say it, quoted), `implied` (a "
             "reading, at most SHOULD) or `decision` (queuewire's choice where the documents "
             "are silent, at most SHOULD). The {doc}`requirements index <../requirements-index>` "
             "lists the conformance cases, fuzz oracles and tests that exercise each one.", ""]
    carried = carriers(profile)
    for name, group in groups.items():
        lines += [f"## {name}", ""]
        for req in group:
            lines += entry(profile, req, carried.get(req.id, []))
    return lines
