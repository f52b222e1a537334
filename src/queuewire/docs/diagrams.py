"""Packet diagrams: a header or payload layout of the spec as a Mermaid ``packet-beta``
diagram, drawn so that it can be read.

Design: 32 bits a row, as RFCs draw their headers, ``BIT_WIDTH`` CSS pixels a bit. Mermaid
gives the SVG ``bitsPerRow × bitWidth`` pixels (plus 2) and lets the page shrink it to the
article's width: the 48-bit quicx header drawn as one row of mermaid's default 32 pixels a
bit was a 1538-pixel strip that furo's column (about 46em) scaled to under half, its 12 px
labels to 5. At 32 bits of 20 pixels the diagram is 642 pixels wide, inside the column at
desktop widths, so it is drawn at its own size: rows 32 pixels tall and labels of 12 px,
each within its field (a byte is 160 pixels). ``tests/docs/test_docs_browser.py`` measures
that in Chromium. A field whose size depends on the data (a length-prefixed string, the rest
of the frame), or a byte string longer than a row, is drawn to the end of its row (a whole
row when it starts one), its label saying how long it really is: it is never cut into a
sliver that repeats its label.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from .text import fence

BITS_PER_ROW = 32
BIT_WIDTH = 20     # CSS pixels a bit: 32 bits are 642 pixels, inside furo's article column


def packet(title: str, fields: Iterable[tuple[str, int | None]]) -> list[str]:
    """A Mermaid packet diagram of ``fields`` (label, width in bits or None for a field whose
    size depends on the data), in order from bit 0. The layout is set by an init directive,
    not a YAML front matter: MyST would read front matter as the directive's options."""
    config = {"packet": {"bitsPerRow": BITS_PER_ROW, "bitWidth": BIT_WIDTH}}
    lines = [f"%%{{init: {json.dumps(config)}}}%%", "packet-beta", f"title {title}"]
    bit = 0
    for label, width in fields:
        bits = width if width is not None else BITS_PER_ROW - bit % BITS_PER_ROW
        lines.append(f'{bit}-{bit + bits - 1}: "{label}"')
        bit += bits
    return fence("mermaid", "\n".join(lines))
