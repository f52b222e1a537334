"""Writes the codecs' generated modules: ``python -m queuewire.codecs.codegen`` (``make
generate``) re-emits them, ``--check`` only says which differ from what their generator writes
now (tests/test_generated_code.py does the same check).

The convention, for every generated module of queuewire: ``<module>_generated.py`` sits beside the
hand-written ``<module>.py`` whose function writes it; it is checked in, readable, and starts
with a docstring naming its command, its source and its generator, and saying not to edit it.
It imports nothing from its generator's module (which imports it): what it needs from there is
an argument of the factory it defines.

* ``quicx_plans_generated.py``: the decoding plans of the quicx layouts
  (:func:`~.quicx_plans.plans_module`, from spec/quicx);
* ``quicx_scan_generated.py``: the decoder's frame loops, per quicx profile and receiver
  (:func:`~.quicx_scan.scans_module`, from spec/quicx).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .quicx_plans import plans_module
from .quicx_scan import scans_module

__all__ = ["GENERATED", "main"]

HERE = Path(__file__).resolve().parent
#: each generated file and the function that writes its text
GENERATED: dict[Path, Callable[[], str]] = {
    HERE / "quicx_plans_generated.py": plans_module,
    HERE / "quicx_scan_generated.py": scans_module,
}


def main(argv: Sequence[str] | None = None, generated: dict[Path, Callable[[], str]] | None = None) -> int:
    """Write every generated file (or, with ``--check``, list the stale ones and return 1)."""
    args = sys.argv[1:] if argv is None else list(argv)
    check = "--check" in args
    stale = []
    for path, write in (GENERATED if generated is None else generated).items():
        text = write()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if check and stale:
        print("stale (run make generate): " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
