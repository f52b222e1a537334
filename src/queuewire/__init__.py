"""queuewire: specification, conformance suite and reference codecs for job-queue wire formats.

Design: a package per part, in layers that import only downward: :mod:`.spec` (the spec in
``spec/`` as a typed model) < :mod:`.codecs` (sans-IO codecs) < :mod:`.vectors`,
:mod:`.reference_server` and :mod:`.client` (independent of each other) <
:mod:`.conformance` < :mod:`.cli` and :mod:`.docs` (the applications). There are no import
cycles between sibling modules, and a module does one job (under 800 lines). The
import-linter contracts in ``pyproject.toml`` and ``tests/test_house.py`` enforce all of this.
"""

__version__ = "0.1.0"
