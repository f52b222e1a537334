"""Repository Markdown included in the site as it is, except for its heading levels:
``benchmarks/README.md`` has several top-level sections and skips levels (``#`` then
``###``), which MyST flags and ``-W`` turns into a failed build. :func:`include_page` writes
a copy whose headings sit under one page title and never skip a level; code fences are left
alone (a ``#`` comment in a shell block is no heading)."""

from __future__ import annotations

import re
from pathlib import Path

from .text import write_text

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE = re.compile(r"^\s*(```+|~~~+)")


def normalise_headings(text: str, top: int = 2) -> str:
    """Headings shifted so the shallowest is level ``top`` and each is at most one level
    deeper than the heading before it."""
    lines = text.splitlines()
    fence = None
    levels = []
    for line in lines:
        m = FENCE.match(line)
        if m:
            fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
            continue
        if fence is None and (h := HEADING.match(line)):
            levels.append(len(h.group(1)))
    shift = top - min(levels) if levels else 0
    out, fence, prev = [], None, top - 1
    for line in lines:
        m = FENCE.match(line)
        if m:
            fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
            out.append(line)
            continue
        h = HEADING.match(line) if fence is None else None
        if h:
            level = min(len(h.group(1)) + shift, prev + 1, 6)
            prev = level
            out.append("#" * level + " " + h.group(2))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def include_page(source: Path, dest: Path, title: str, intro: str) -> Path:
    """Write ``dest``: ``title``, ``intro``, then ``source`` with normalised headings."""
    body = normalise_headings(source.read_text(encoding="utf-8"), top=2)
    return write_text(dest, f"# {title}\n\n{intro}\n\n{body}")
