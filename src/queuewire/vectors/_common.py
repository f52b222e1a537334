"""What the bunqueue and quicx vector generators share: the file format version and how a
vector file is named, placed and written (``vectors/<protocol>/<profile>.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..spec import spec_dir

FORMAT = 1


def vectors_dir(directory: str | Path | None = None) -> Path:
    """``directory``, or the vectors beside the spec in use: ``vectors/`` beside a checkout's
    ``spec/``, ``queuewire/_vectors`` beside an installed wheel's ``queuewire/_spec`` (the
    wheel's force-include in ``pyproject.toml``; ``queuewire/vectors`` is this package)."""
    if directory:
        return Path(directory)
    spec = spec_dir().resolve()
    return spec.parent / ("_vectors" if spec.name == "_spec" else "vectors")


def file_name(profile_name: str) -> str:
    """``quicx/1.0.3`` -> ``quicx_1.0.3.json``."""
    return profile_name.replace("/", "_") + ".json"


def file_path(root: Path, protocol: str, profile_name: str) -> Path:
    return root / protocol / file_name(profile_name)


def dump(doc: dict[str, Any]) -> str:
    """A vector file's text: one-space indent, UTF-8 kept, a final newline (byte-stable)."""
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
