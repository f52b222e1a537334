"""Sphinx configuration (``make docs`` builds with ``-W``: a warning fails the build).

The protocol reference (``protocols/``) and the conformance case catalogue
(``conformance/cases/``) are generated from ``spec/``, the test vectors and the packaged
cases at build time by :mod:`queuewire.docs`; the CLI reference comes from the click
commands (sphinx-click). Mermaid diagrams (state machines, packet diagrams) render in the
browser: from ``_vendor/mermaid`` (mermaid's ES module build, which ``make docs`` unpacks
from the npm tarball) when it is there, so the site needs no CDN, else from the CDN."""

import re
from pathlib import Path

from queuewire.docs import render, render_cases

HERE = Path(__file__).parent

project = "queuewire"
extensions = ["myst_parser", "sphinxcontrib.mermaid", "sphinx_click"]
myst_fence_as_directive = ["mermaid"]  # ```mermaid fences are sphinxcontrib-mermaid directives
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_vendor", "**/node_modules"]
html_theme = "furo"
default_role = "literal"  # `conform server` in click help (reStructuredText) reads as code
smartquotes = False  # `--target` stays two hyphens, quotes stay straight (CLI help, code names)
html_title = "queuewire"
html_static_path = ["_static"]
html_css_files = ["queuewire.css"]
mermaid_height = "auto"  # the diagram's own aspect ratio (queuewire.css caps the height)

MERMAID = HERE / "_vendor" / "mermaid" / "mermaid.esm.min.mjs"
if MERMAID.is_file():
    html_static_path.append("_vendor")
    mermaid_use_local = "mermaid/mermaid.esm.min.mjs"

render(HERE / "protocols")
render_cases(HERE / "conformance" / "cases")

# benchmarks/README.md, included with its heading levels made consecutive (includes.py)
BENCHMARKS = HERE.parent / "benchmarks" / "README.md"
if BENCHMARKS.is_file():
    from queuewire.docs.includes import include_page

    include_page(BENCHMARKS, HERE / "benchmarks.md", "Benchmarks",
                 "The benchmark figures of `benchmarks/README.md`, as the repository has them "
                 "(each section names the script that measures it and how to run it).")


def _plain_text(app, ctx, lines):
    """Click help is plain text, not reStructuredText: a glob such as ``'bunqueue.frame.*'``
    must not open an emphasis. Escape a lone ``*`` outside directive lines (sphinx-click's
    own ``**Required**`` stays bold)."""
    for i, line in enumerate(lines):
        if not line.lstrip().startswith(".."):
            lines[i] = re.sub(r"(?<!\*)\*(?!\*)", r"\\*", line)


def setup(app):
    for event in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{event}", _plain_text)
