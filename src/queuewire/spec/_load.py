"""Reading ``spec/`` from disk: YAML files, merge patches and ``$limit`` substitution.

This module knows the *files* of the spec, not their meaning. It finds the spec directory,
loads a protocol's base tree (its ``protocol.yaml`` plus the merged directories beside it),
applies a profile's overlays as JSON Merge Patches (RFC 7396) and replaces every
``{$limit: name.key}`` by the limit's value, recording where each limit was used. The typed
model is built from the resulting plain tree by ``queuewire.spec.bunqueue`` and
``queuewire.spec.quicx``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

try:  # the C loader is ~10x faster; PyYAML falls back to pure Python without libyaml
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader


class SpecError(Exception):
    """The spec files themselves are malformed (a bug in ``spec/``, not in a peer's bytes)."""

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None):
        self.file = file
        self.path = path
        self.message = message
        where = " ".join(x for x in (file, path) if x)
        super().__init__(f"{where}: {message}" if where else message)


def spec_dir() -> Path:
    """The spec directory: $QUEUEWIRE_SPEC_DIR, the copy shipped in the wheel, or the repo's."""
    env = os.environ.get("QUEUEWIRE_SPEC_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    shipped = here.parent.parent / "_spec"
    if (shipped / "profiles.yaml").is_file():
        return shipped
    for parent in here.parents:  # editable install: <repo>/src/queuewire/spec/_load.py
        candidate = parent / "spec"
        if (candidate / "profiles.yaml").is_file():
            return candidate
    raise SpecError("cannot find the spec directory; set QUEUEWIRE_SPEC_DIR")


def read_yaml(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return yaml.load(fh, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}", file=str(path)) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=str(path)) from None


def merge_maps(base: dict[str, Any], extra: dict[str, Any], *, file: str, what: str) -> None:
    """Merge the maps of ``extra`` into ``base`` one level down; a key defined twice is an error."""
    for section, value in extra.items():
        if not isinstance(value, dict) or not isinstance(base.get(section, {}), dict):
            raise SpecError(f"top-level {section!r} must be a map", file=file)
        target = base.setdefault(section, {})
        for key, item in value.items():
            if key in target:
                raise SpecError(f"{what} {section}.{key} is defined twice", file=file)
            target[key] = item


def load_protocol_tree(root: Path, protocol: str) -> dict[str, Any]:
    """The base tree of a protocol: protocol.yaml plus every YAML file in its subdirectories."""
    pdir = root / protocol
    tree = read_yaml(pdir / "protocol.yaml")
    if not isinstance(tree, dict):
        raise SpecError("must be a map", file=str(pdir / "protocol.yaml"))
    for extra in sorted(pdir.rglob("*.yaml")):
        if extra.name == "protocol.yaml" and extra.parent == pdir:
            continue
        data = read_yaml(extra) or {}
        if not isinstance(data, dict):
            raise SpecError("must be a map", file=str(extra))
        merge_maps(tree, data, file=str(extra.relative_to(root)), what=protocol)
    return tree


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch: maps merge key by key, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


LIMIT_KEYS = ("min", "max", "value", "pattern")


def substitute_limits(tree: Any, limits: Mapping[str, Any], uses: list[tuple[str, str, tuple[Any, ...]]],
                      where: tuple[Any, ...] = ()) -> Any:
    """Replace ``{$limit: name.key}`` nodes; append ``(name, key, where)`` to ``uses``."""
    if isinstance(tree, dict):
        if set(tree) == {"$limit"}:
            ref = tree["$limit"]
            name, _, key = str(ref).partition(".")
            limit = limits.get(name)
            if limit is None or key not in LIMIT_KEYS or key not in limit:
                raise SpecError(f"unknown $limit {ref!r}", path="/".join(map(str, where)))
            uses.append((name, key, where))
            return limit[key]
        return {k: substitute_limits(v, limits, uses, where + (k,)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [substitute_limits(v, limits, uses, where + (i,)) for i, v in enumerate(tree)]
    return tree


def walk(tree: Any, where: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every node of a plain tree with its path, parents first."""
    yield where, tree
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from walk(v, where + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from walk(v, where + (i,))
