"""The vector files of every profile: ``generate_all`` writes them, ``check_all`` regenerates
them in memory to detect a stale file, then runs every vector through the codecs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..spec import load_profile, profile_names
from . import bunqueue, quicx
from ._common import FORMAT, dump, file_path, vectors_dir

#: What to do when a vector file is missing or stale (in a checkout, ``make vectors`` does it).
REGENERATE = "run `queuewire vectors generate`, or `make vectors` in a checkout"


class VectorsError(Exception):
    """The vectors cannot be checked at all: their directory holds none of the files."""


@dataclass
class CheckResult:
    """What :func:`check_all` found: files counted apart from the vectors they hold."""

    root: Path
    files: int = 0                                        # vector files expected, one a profile
    vectors: int = 0                                      # vectors run through the codecs
    missing: list[Path] = field(default_factory=list)
    stale: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)       # "<file> <vector id>: <mismatch>"

    @property
    def failures(self) -> list[str]:
        """Every problem, one line each: missing and stale files first, then failed vectors."""
        return ([f"{p}: missing ({REGENERATE})" for p in self.missing]
                + [f"{p}: stale, differs from what the spec generates ({REGENERATE})"
                   for p in self.stale] + self.failed)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stale or self.failed)

    def verdict(self) -> str:
        """One line: the counts of what passed or failed, files and vectors apart."""
        if self.ok:
            return f"vectors: {self.vectors:,} checked in {self.files} files, all pass"
        parts = [f"{len(self.failed):,} of {self.vectors:,} vectors failed"]
        if self.missing:
            parts.append(f"{len(self.missing)} of {self.files} files missing")
        if self.stale:
            parts.append(f"{len(self.stale)} of {self.files} files stale")
        return "vectors: " + "; ".join(parts)


def _documents() -> Iterable[tuple[str, str, dict]]:
    for name in profile_names("bunqueue"):
        yield "bunqueue", name, bunqueue.bunqueue_vectors(name)
    for name in profile_names("quicx"):
        yield "quicx", name, {"format": FORMAT, "protocol": "quicx", "profile": name,
                              "vectors": quicx.generate(name)}


def _expected() -> list[tuple[str, str]]:
    return [(p, name) for p in ("bunqueue", "quicx") for name in profile_names(p)]


def generate_all(directory: str | Path | None = None) -> list[tuple[Path, int]]:
    root = vectors_dir(directory)
    written = []
    for protocol, name, doc in _documents():
        path = file_path(root, protocol, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(doc), encoding="utf-8")
        written.append((path, len(doc["vectors"])))
    return written


def check_all(directory: str | Path | None = None) -> CheckResult:
    """Check every profile's vector file in ``directory`` (default :func:`vectors_dir`).

    Raises :class:`VectorsError` when the directory holds none of the files (a checkout that
    never generated them, a wrong ``--dir``); a file missing among others is a failure."""
    root = vectors_dir(directory)
    expected = _expected()
    if not any(file_path(root, protocol, name).is_file() for protocol, name in expected):
        names = ", ".join(str(file_path(Path(), p, n)) for p, n in expected)
        where = "no such directory" if not root.is_dir() else "none of the vector files"
        raise VectorsError(f"no test vectors in {root} ({where}; expected {names}): {REGENERATE}, "
                           "or name the directory with --dir")
    result = CheckResult(root)
    for protocol, name, doc in _documents():
        result.files += 1
        path = file_path(root, protocol, name)
        if not path.is_file():
            result.missing.append(path)
            continue
        try:
            on_disk = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            result.failed.append(f"{path}: unreadable, not a JSON vector file ({exc}; {REGENERATE})")
            continue
        if on_disk != json.loads(dump(doc)):
            result.stale.append(path)
        vectors = on_disk.get("vectors") if isinstance(on_disk, dict) else None
        if not isinstance(vectors, list) or not all(isinstance(v, dict) for v in vectors):
            result.failed.append(f"{path}: not a vector file (no list of vectors under 'vectors')")
            continue
        profile = load_profile(name)
        check = bunqueue.check_bunqueue_vector if protocol == "bunqueue" else quicx.check_vector
        for vec in vectors:
            result.vectors += 1
            try:
                problem = check(profile, vec)
            except (KeyError, TypeError, ValueError) as exc:  # a hand-edited vector
                problem = f"malformed vector ({type(exc).__name__}: {exc})"
            if problem:
                result.failed.append(f"{path.name} {vec.get('id', '?')}: {problem}")
    return result
