"""``queuewire.docs``: the protocol reference, generated from ``spec/`` for Sphinx.

Design: the docs are generated, like the codecs, so the published pages cannot drift from
the spec; ``docs/conf.py`` calls :func:`render` and :func:`render_cases` at build time and
Sphinx (``make docs``, with ``-W``) renders the Markdown (MyST). This package sits at the top
of the layers beside ``cli``: it reads the spec, the codecs, the test vectors, the client's
transition tables and the conformance cases, runs the reference server's request path (the
typical session), and nothing imports it but ``docs/conf.py`` and the tests. A module per job:

* ``text``: Markdown building blocks (tables, labels, links to requirement entries);
* ``schema``: a bunqueue JSON Schema as field rows (type, limits, default, doc, requirement);
* ``hexdump``: annotated hex dumps in the spirit of Kaitai's hex view, the grouping computed
  from the spec's layouts (quicx) and a MessagePack walker (bunqueue), each dump carrying
  its bytes and decoded value as data attributes so a test decodes and re-encodes every
  example with the codecs;
* ``examples``: which test vector (``vectors/``) illustrates which command or message;
* ``machines``: state machines from the tables the code steps through (spec lifecycles,
  the client sessions), as Mermaid diagrams beside their tables;
* ``diagrams``: packet diagrams of the spec's layouts, sized to be read (32 bits a row);
* ``errors``: the error replies of each command or message, derived from the spec's error
  descriptions (and the conformance cases), never listed by hand;
* ``session``: the typical session page of a bunqueue profile, its replies those of the
  reference server's request path run sans-IO at build time (script: ``session.yaml``);
* ``bunqueue_pages`` and ``quicx_pages``: one directory per profile (overview with framing,
  limits, errors and state machines; commands or messages with fields, requirements, error
  replies, examples and packet diagrams; the typical session of a bunqueue profile; the
  requirements page written by ``requirements``);
* ``compare``: the profile comparison page, computed from the merged spec trees;
* ``spec_diff``: the profile changes page, ``queuewire spec diff`` for each pair of adjacent
  profiles, each change classified breaking or compatible for clients and for servers;
* ``reqindex``: the requirements index (cases, client scenarios, fuzz oracles, tests);
* ``cases``: the conformance case catalogue.

Every page of the protocol reference is written under ``docs/protocols/`` (git-ignored) and
every entry has a Sphinx label (``<profile stem>-<kind>-<name>``, see :func:`.text.label`),
which the tests use to check that no command, message, field or requirement goes missing.
"""

from __future__ import annotations

from pathlib import Path

from ..spec import load_profile, profile_names
from .cases import render_cases
from .text import stem, toctree, write

__all__ = ["render", "render_cases"]


def render(out_dir: str | Path) -> list[Path]:
    """Write the protocol reference into ``out_dir``: ``index.md``, one directory per profile
    (``<stem>/index.md`` and its pages), ``compare.md`` and ``requirements-index.md``.
    Returns every path written."""
    from . import bunqueue_pages, quicx_pages
    from .compare import compare_page
    from .reqindex import index_page
    from .spec_diff import diff_page

    out = Path(out_dir)
    written: list[Path] = []
    entries = []
    for name in profile_names():
        profile = load_profile(name)
        module = bunqueue_pages if profile.protocol == "bunqueue" else quicx_pages
        module.render_profile(profile, out, written)
        entries.append(f"{stem(name)}/index")
    write(out / "compare.md", compare_page(), written)
    write(out / "requirements-index.md", index_page()[0], written)
    write(out / "profile-changes.md", diff_page(), written)
    lines = ["# Protocol reference", "",
             "Generated from `spec/` at build time: a reference per profile (framing, every "
             "command or message with its fields, requirements and examples from the test "
             "vectors as annotated hex dumps, error codes, limits, state machines), the "
             "differences between profiles, and where each requirement is exercised.", ""]
    lines += toctree(entries + ["compare", "profile-changes", "requirements-index"], maxdepth=2)
    write(out / "index.md", lines, written)
    return written
