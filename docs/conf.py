"""Sphinx configuration. The protocol pages and the conformance case catalogue are generated
from spec/ and the packaged cases at build time."""

from pathlib import Path

from queuewire.docs import render, render_cases

project = "queuewire"
extensions = ["myst_parser", "sphinxcontrib.mermaid"]
myst_fence_as_directive = ["mermaid"]  # state machines are drawn from the spec's tables
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "alabaster"

render(Path(__file__).parent / "protocols")
render_cases(Path(__file__).parent / "conformance" / "cases")
