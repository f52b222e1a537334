"""The profile comparison page: for each protocol, every difference between its base profile
(no overlays: ``bunqueue/v2``, ``quicx/v1``) and each profile built from overlays
(``bunqueue/2.9.5``, ``quicx/1.0.3``), computed from the merged spec trees, so the page says
exactly what the overlay files change: opcodes, fields, limits, flags, error strings and the
requirements an overlay retires and adds (with their texts). The overlay's own header comment
is quoted as its rationale."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ..spec import load_profile, profile_names, raw_tree, spec_dir
from .text import code, esc, ref, table

SHORT = 90


def _show(value: Any) -> str:
    if value is None:
        return ""
    text = json.dumps(value, ensure_ascii=False, sort_keys=False)
    return code(text if len(text) <= SHORT else text[:SHORT - 1] + "…")


def diff(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, str, Any, Any]]:
    """``(path, change, base value, profile value)`` for every leaf that differs; a key added
    or removed as a whole is one row."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in b:
                yield sub, "removed", a[key], None
            elif key not in a:
                yield sub, "added", None, b[key]
            else:
                yield from diff(a[key], b[key], sub)
    elif a != b:
        yield path, "changed", a, b


def overlay_comment(overlay: str) -> list[str]:
    """The leading comment block of an overlay file, as prose."""
    path = spec_dir() / overlay
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        out.append(line.lstrip("#").strip())
    return [" ".join(out)] if out else []


def _requirement_rows(base: Any, prof: Any) -> list[list[str]]:
    rows = []
    for rid in base.requirements:
        if rid not in prof.requirements:
            rows.append([code(rid), "retired", esc(base.requirements[rid].text)])
    for rid, req in prof.requirements.items():
        old = base.requirements.get(rid)
        if old is None:
            rows.append([ref(prof.name, "req", rid), f"added ({req.level})", esc(req.text)])
        elif old != req:
            rows.append([ref(prof.name, "req", rid), "changed", esc(req.text)])
    return rows


def _at_a_glance(base: Any, prof: Any) -> list[str]:
    """quicx: every message's opcode, directions and status side by side; bunqueue: the
    commands, limits and capabilities that differ."""
    lines = ["### At a glance", ""]
    if prof.protocol == "quicx":
        def facts(spec: Any, name: str) -> tuple[str, str]:
            msg = spec.messages.get(name)
            if msg is None:
                return "", "absent"
            status = "reserved" if msg.reserved else (
                f"on {msg.transport}" if msg.transport != spec.transport else "")
            dirs = "; ".join(f"{s} → {r}" for s, r in sorted(msg.directions))
            return f"`0x{msg.code:02X}`", ", ".join(x for x in (status, dirs) if x)
        rows = []
        names = list(base.model.messages) + [n for n in prof.model.messages
                                             if n not in base.model.messages]
        for name in names:
            (bc, bd), (pc, pd) = facts(base.model, name), facts(prof.model, name)
            mark = "" if (bc, bd) == (pc, pd) else " (differs)"
            rows.append([code(name) + mark, bc, pc, esc(bd), esc(pd)])
        return lines + table(["message", f"{base.name} opcode", f"{prof.name} opcode",
                              f"{base.name} directions", f"{prof.name} directions"], rows)
    a, b = base.model, prof.model
    rows = [[code(c), "only in " + base.name] for c in a.commands if c not in b.commands]
    rows += [[ref(prof.name, "cmd", c, c), "only in " + prof.name]
             for c in b.commands if c not in a.commands]
    rows += [[code(n), f"{esc(_lim(base, n))} → {esc(_lim(prof, n))}"]
             for n in dict.fromkeys(list(base.limits) + list(prof.limits))
             if _lim(base, n) != _lim(prof, n)]
    if a.capabilities != b.capabilities:
        rows.append(["capabilities", f"{', '.join(a.capabilities)} → {', '.join(b.capabilities)}"])
    return lines + table(["command, limit or property", "difference"], rows)


def _lim(profile: Any, name: str) -> str:
    lim = profile.limits.get(name)
    if lim is None:
        return "absent"
    parts = [f"{k} {v}" for k, v in (("min", lim.min), ("max", lim.max), ("value", lim.value))
             if v is not None]
    return ", ".join(parts) or "unbounded"


def compare_page() -> list[str]:
    lines = ["# Profile comparison", "",
             "Each protocol has a base profile, the documents as written, and profiles built "
             "from it by overlays (JSON Merge Patch files under `spec/overlays/`). This page "
             "is generated from the merged trees: every row is a difference the overlay makes.",
             ""]
    for protocol in ("quicx", "bunqueue"):
        names = profile_names(protocol)
        base_name = next(n for n in names if not load_profile(n).overlays)
        for name in names:
            prof = load_profile(name)
            if not prof.overlays:
                continue
            base = load_profile(base_name)
            lines += [f"## {base_name} vs {name}", "", esc(prof.doc), ""]
            for overlay in prof.overlays:
                lines += [f"Overlay `spec/{overlay}`:", ""]
                lines += ["> " + esc(t) for t in overlay_comment(overlay)] + [""]
            lines += _at_a_glance(base, prof)
            rows = _requirement_rows(base, prof)
            lines += ["### Requirements", ""]
            lines += table(["requirement", "change", "text"], rows) if rows else ["None.", ""]
            a, b = raw_tree(base_name), raw_tree(name)
            a.pop("requirements", None)
            b.pop("requirements", None)
            sections: dict[str, list] = {}
            for path, change, old, new in diff(a, b):
                sections.setdefault(path.split(".", 1)[0], []).append(
                    [code(path), change, _show(old), _show(new)])
            for section, rows in sections.items():
                lines += [f"### {section}", ""]
                lines += table(["path", "change", base_name, name], rows)
    return lines
