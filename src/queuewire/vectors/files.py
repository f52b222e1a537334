"""The vector files of every profile: ``generate_all`` writes them, ``check_all`` regenerates
them in memory to detect a stale file, then runs every vector through the codecs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ..spec import load_profile, profile_names
from . import bunqueue, quicx
from ._common import FORMAT, dump, file_path, vectors_dir


def _documents() -> Iterable[tuple[str, str, dict]]:
    for name in profile_names("bunqueue"):
        yield "bunqueue", name, bunqueue.bunqueue_vectors(name)
    for name in profile_names("quicx"):
        yield "quicx", name, {"format": FORMAT, "protocol": "quicx", "profile": name,
                              "vectors": quicx.generate(name)}


def generate_all(directory: str | Path | None = None) -> list[tuple[Path, int]]:
    root = vectors_dir(directory)
    written = []
    for protocol, name, doc in _documents():
        path = file_path(root, protocol, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(doc), encoding="utf-8")
        written.append((path, len(doc["vectors"])))
    return written


def check_all(directory: str | Path | None = None) -> tuple[list[str], int]:
    root = vectors_dir(directory)
    failures: list[str] = []
    total = 0
    for protocol, name, doc in _documents():
        path = file_path(root, protocol, name)
        if not path.is_file():
            failures.append(f"{path}: missing (run `make vectors`)")
            continue
        on_disk = json.loads(path.read_text(encoding="utf-8"))
        if on_disk != json.loads(dump(doc)):
            failures.append(f"{path}: stale, differs from what the spec generates "
                            f"(run `make vectors`)")
        profile = load_profile(name)
        check = bunqueue.check_bunqueue_vector if protocol == "bunqueue" else quicx.check_vector
        for vec in on_disk["vectors"]:
            total += 1
            problem = check(profile, vec)
            if problem:
                failures.append(f"{path.name} {vec['id']}: {problem}")
    return failures, total
