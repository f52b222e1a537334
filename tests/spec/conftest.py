"""What the spec tests share: a copy of spec/ that the loader reads instead of the real one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from queuewire.spec import clear_cache, spec_dir

#: The source documents (``../shared``), for lint's quote checks when they are there.
SHARED = Path(__file__).resolve().parents[2].parent / "shared"


@pytest.fixture
def spec_copy(tmp_path, monkeypatch):
    """spec/ copied into ``tmp_path`` and pointed to by the loader (its caches cleared before
    and after), so a test can break one file of the copy."""
    root = tmp_path / "spec"
    shutil.copytree(spec_dir(), root)
    monkeypatch.setenv("QUEUEWIRE_SPEC_DIR", str(root))
    if SHARED.is_dir():
        monkeypatch.setenv("QUEUEWIRE_SOURCES_DIR", str(SHARED))
    clear_cache()
    yield root
    monkeypatch.undo()
    clear_cache()
