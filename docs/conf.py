"""Sphinx configuration (``make docs`` builds with ``-W``: a warning fails the build).

The protocol reference (``protocols/``) and the conformance case catalogue
(``conformance/cases/``) are generated from ``spec/``, the test vectors and the packaged
cases at build time by :mod:`queuewire.docs`; the CLI reference comes from the click
commands (sphinx-click).

Mermaid diagrams (state machines, packet diagrams): sphinxcontrib-mermaid turns each
```` ```mermaid ```` fence into a ``<pre class="mermaid">``, and the browser draws it with
mermaid's *classic* build (``dist/mermaid.min.js`` of the npm tarball, one file that
defines the global ``mermaid``; ``make docs`` unpacks it into ``_vendor/mermaid``, else it
comes from the CDN) started by ``_static/mermaid-init.js``, a classic script too. The
extension's own loader is disconnected: it is an ES module that imports mermaid's ES module
build, and Chromium loads no ES module from ``file://``, so a site opened from disk showed
every diagram as its source. Why not render the SVG at build time instead: that needs a
headless browser in every docs build (mermaid lays text out by measuring it in a DOM;
mermaid-cli drives Chromium through puppeteer), and the static SVG would be drawn once, in
one theme. The classic build keeps the build pure Python, draws each diagram in the reader's
theme (furo's light or dark) and works from disk and over HTTP alike; the price is that the
diagrams need JavaScript. ``tests/docs/test_docs_browser.py`` opens pages from ``file://``
and holds every block to having become an ``<svg>``."""

import re
from pathlib import Path

from sphinxcontrib import mermaid as sphinx_mermaid

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

# mermaid's classic build: vendored when `make docs` could unpack it, else from the CDN at the
# version sphinxcontrib-mermaid pins (its `mermaid_version`, the Makefile's MERMAID_VERSION)
MERMAID = HERE / "_vendor" / "mermaid" / "mermaid.min.js"
if MERMAID.is_file():
    html_static_path.append(str(MERMAID.relative_to(HERE)))  # copied to _static/mermaid.min.js

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


def _mermaid_url(app) -> str:
    if MERMAID.is_file():
        return "mermaid.min.js"
    return f"https://cdn.jsdelivr.net/npm/mermaid@{app.config.mermaid_version}/dist/mermaid.min.js"


def _classic_mermaid(app, pagename, templatename, context, doctree):
    """A page with a diagram gets mermaid's classic build and ``mermaid-init.js`` (plain
    scripts, in this order: they load from ``file://``)."""
    if doctree is None or doctree.next_node(sphinx_mermaid.mermaid) is None:
        return
    app.add_js_file(_mermaid_url(app), priority=500)
    app.add_js_file("mermaid-init.js", priority=501)


def setup(app):
    # the extension's loader is an ES module (see the module docstring): replaced, not added to
    for listener in list(app.events.listeners.get("html-page-context", ())):
        if listener.handler is sphinx_mermaid.install_js:
            app.disconnect(listener.id)
    app.connect("html-page-context", _classic_mermaid)
    for event in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{event}", _plain_text)
