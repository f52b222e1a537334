"""No private name imported across modules (issue 23): a name with a leading underscore is its
module's own business, so no module of ``src/queuewire`` does ``from <queuewire module> import
_name`` (absolute or relative). A helper two modules need is made public where it lives, or moved
where it belongs. Dunder names, ``from __future__`` and third-party modules are not concerned; an
alias is fine when the imported name is public (``from . import queue as _queue``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "queuewire"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of a source file under SRC, and whether it is a package's ``__init__``."""
    parts = path.relative_to(SRC).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imported_module(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of the module ``node`` imports from, inside ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, "from <module> import <name>")`` for every private name ``source`` imports from
    a queuewire module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = imported_module(node, module, is_package)
        if target != PACKAGE and not target.startswith(PACKAGE + "."):
            continue
        found += [(node.lineno, f"from {target} import {alias.name}")
                  for alias in node.names if _is_private(alias.name)]
    return found


def test_the_check_sees_relative_absolute_and_multiline_imports():
    source = (
        "from __future__ import annotations\n"
        "from .steps import _fill, hex_bytes\n"
        "from queuewire.conformance.runner import (\n    preflight,\n    _hidden,\n)\n"
        "from .. import _load\n"
        "from . import queue as _queue\n"
        "from .model import __all__\n"
        "from os import _exit\n"
    )
    assert private_imports(source, "queuewire.conformance.steps_quicx") == [
        (2, "from queuewire.conformance.steps import _fill"),
        (3, "from queuewire.conformance.runner import _hidden"),
        (7, "from queuewire import _load"),
    ]
    assert private_imports("from ._load import read_yaml\nfrom . import _load\n", "queuewire.spec",
                           is_package=True) == [(2, "from queuewire.spec import _load")]


def test_no_private_name_is_imported_from_another_module():
    sources = sorted(p for p in (SRC / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)
    assert sources, f"no Python modules found under {SRC / PACKAGE}"
    found = []
    for path in sources:
        module, is_package = module_name(path)
        found += [f"{path.relative_to(ROOT)}:{line}: {what}"
                  for line, what in private_imports(path.read_text(encoding="utf-8"), module,
                                                    is_package)]
    assert not found, ("private names imported from another module (make the name public where it "
                       "lives, or move it where it belongs):\n  " + "\n  ".join(found))
