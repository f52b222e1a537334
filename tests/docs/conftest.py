"""Fixtures of the docs tests: the generated Markdown (rendered once per session into a
temporary directory, fast) and the built site (Sphinx with -W, once per session)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BUILD = DOCS / "_build"


@pytest.fixture(scope="session")
def generated(tmp_path_factory) -> dict[str, str]:
    """The protocol reference and case catalogue as queuewire.docs writes them:
    relative path -> text."""
    from queuewire.docs import render, render_cases

    out = tmp_path_factory.mktemp("generated")
    paths = render(out / "protocols") + render_cases(out / "conformance" / "cases")
    return {p.relative_to(out).as_posix(): p.read_text(encoding="utf-8") for p in paths}


@pytest.fixture(scope="session")
def site() -> Path:
    """The site, built as `make docs` builds it (sphinx -W: a warning fails), into
    docs/_build/html, from a fresh environment (-E: every page is read again, so a warning
    an earlier incremental build let pass is seen). Fails, never skips, when Sphinx or the
    docs extra is missing."""
    try:
        import furo  # noqa: F401
        import myst_parser  # noqa: F401
        import sphinx_click  # noqa: F401
        import sphinxcontrib.mermaid  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the docs extra is not installed ({exc}): run `make docs-deps` "
                    "(or pip install -e '.[docs]')")
    out = BUILD / "html"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(out)], check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, ("sphinx -W failed (a warning is an error):\n"
                                  + done.stdout[-5000:] + done.stderr[-5000:])
    print(f"docs built in {time.monotonic() - started:.1f} s")
    return out
