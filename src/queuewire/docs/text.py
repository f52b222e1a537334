"""Markdown building blocks shared by every generated page: escaping, tables, page stems,
labels and links to requirement entries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

#: Directory (under the docs source directory) the protocol reference is generated into.
PROTOCOLS = "protocols"


def esc(text: Any) -> str:
    """A value as one Markdown table cell (pipes escaped, newlines folded)."""
    return str(text).replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def code(text: Any) -> str:
    """Inline code in a table cell (backticks inside are avoided by a double fence)."""
    text = esc(text)
    if not text:
        return ""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def stem(profile_name: str) -> str:
    """``quicx/1.0.3`` -> ``quicx_1_0_3``: a profile's directory and label prefix."""
    return profile_name.replace("/", "_").replace(".", "_")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def label(profile_name: str, kind: str, name: str) -> str:
    """The Sphinx label of an entry (lower case, unique across the site)."""
    return f"{stem(profile_name)}-{kind}-{slug(name)}"


def target(profile_name: str, kind: str, name: str) -> str:
    """A MyST target line placed before a heading."""
    return f"({label(profile_name, kind, name)})="


def ref(profile_name: str, kind: str, name: str, text: str | None = None) -> str:
    return f"{{ref}}`{text or name} <{label(profile_name, kind, name)}>`"


def req_ref(profile: Any, rid: str | None) -> str:
    """A link to a requirement's entry on the profile's requirements page ("" for none)."""
    if not rid:
        return ""
    if rid not in profile.requirements:
        return code(rid)
    return ref(profile.name, "req", rid)


def req_rows(profile: Any, ids: Iterable[str]) -> list[list[str]]:
    """Rows (id, level, basis, text, quote) for the requirements an entry carries."""
    rows = []
    for rid in ids:
        req = profile.requirements.get(rid)
        if req is None:
            continue
        quote = f"“{esc(req.quote)}” ({req.source} § {esc(req.section)})" if req.quote else \
            f"({req.source} § {esc(req.section)})"
        rows.append([req_ref(profile, rid), req.level, req.basis or "", esc(req.text), quote])
    return rows


def requirement_table(profile: Any, ids: Iterable[str]) -> list[str]:
    rows = req_rows(profile, dict.fromkeys(i for i in ids if i))
    if not rows:
        return []
    return table(["requirement", "level", "basis", "text", "quote"], rows)


def fence(lang: str, body: str) -> list[str]:
    ticks = "````" if "```" in body else "```"
    return [f"{ticks}{lang}", body.rstrip("\n"), ticks, ""]


def json_block(value: Any) -> list[str]:
    return fence("json", json.dumps(value, indent=2, ensure_ascii=False))


def write(path: Path, lines: Sequence[str], written: list[Path]) -> Path:
    """Write a page, leaving an unchanged file alone (its mtime too, so an incremental Sphinx
    build re-reads only the pages whose spec changed)."""
    write_text(path, "\n".join(lines).rstrip("\n") + "\n")
    written.append(path)
    return path


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def toctree(entries: Iterable[str], caption: str | None = None, maxdepth: int = 1,
            hidden: bool = False) -> list[str]:
    lines = ["```{toctree}", f":maxdepth: {maxdepth}"]
    if caption:
        lines.append(f":caption: {caption}")
    if hidden:
        lines.append(":hidden:")
    return lines + [""] + list(entries) + ["```", ""]


def bound(lim: Any) -> str:
    """A limit's bound in one cell: ``1 to 256``, ``at most 64``, ``= 6``, a pattern."""
    if lim.value is not None:
        return f"= {code(lim.value)}"
    if lim.pattern:
        return f"matches {code(lim.pattern)}"
    if lim.min is not None and lim.max is not None:
        return f"{lim.min} to {lim.max}"
    if lim.max is not None:
        return f"at most {lim.max}"
    if lim.min is not None:
        return f"at least {lim.min}"
    return "unbounded"


def limits_table(profile: Any) -> list[str]:
    rows = [[code(lim.name), bound(lim), lim.unit, req_ref(profile, lim.requirement), esc(lim.doc)]
            for lim in profile.limits.values()]
    return [target(profile.name, "section", "limits"), "## Limits", ""] + table(
        ["limit", "bound", "unit", "requirement", "about"], rows)
