"""The house rules of the source tree: a module per job (no module over MAX_LINES lines), a
design paragraph in every package's ``__init__``, and the import contracts of pyproject.toml
(layers, no vectors in the peers, no cycles between sibling modules), run by import-linter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MAX_LINES = 800


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_over_the_size_limit():
    # a generated module (*_generated.py, written by `make generate`) is as long as what it
    # unrolls; its generator is the module held to the limit
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()
             if not p.name.endswith("_generated.py")}
    assert sizes, f"no Python modules found under {SRC}"
    over = [f"{p.relative_to(ROOT)}: {n} lines" for p, n in sorted(sizes.items()) if n > MAX_LINES]
    assert not over, (f"modules over {MAX_LINES} lines (split each along a real seam, a module "
                      "per job):\n  " + "\n  ".join(over))


def test_every_package_says_its_design():
    missing = []
    for init in (p for p in _modules() if p.name == "__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        if not doc or not doc.strip():
            missing.append(str(init.relative_to(ROOT)))
    assert not missing, ("packages whose __init__ has no docstring saying their design:\n  "
                         + "\n  ".join(missing))


def test_import_contracts_are_kept():
    """``lint-imports`` with pyproject.toml's [tool.importlinter] contracts; its report is the
    failure message (which contract broke, and the import chain or cycle that breaks it)."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys; from importlinter.cli import lint_imports_command; "
         "sys.exit(lint_imports_command())",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = done.stdout[done.stdout.find("Contracts"):] if "Contracts" in done.stdout else done.stdout
    assert done.returncode == 0, (f"import contracts broken (lint-imports exit "
                                  f"{done.returncode}):\n{report}\n{done.stderr}")
