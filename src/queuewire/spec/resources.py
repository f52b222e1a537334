"""The ``resources`` section of a protocol tree: what a server keeps, how to list and remove it.

A tool that must leave a server as it found it (``conform server``, ``fuzz``) reads here which
command lists each kind of thing a client's commands create (queues, webhooks, schedules,
workers, and per queue its dead-letter entries and job counts), where the list is in the reply,
which field of an item is its key, and which command removes one item with the key in which
request field; and which cheap commands probe that the server still answers. The shapes are
frozen dataclasses built from the tree (spec/README.md, "resources"); nothing here names a
command or a field. :func:`problems` lists what makes a section unusable for a profile (a
command it does not have, a path its reply schema does not hold), for ``spec lint``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._load import SpecError
from .model import frozen_map


@dataclass(frozen=True)
class ResourceKind:
    """One kind of thing a server keeps (``queues``, ``webhooks``, ...).

    ``list_cmd`` lists them; its reply holds them at the dotted path ``items`` (a list whose
    map items are named by their ``key`` field, and any other item is its own key) or, for a
    kind that is counted rather than listed, ``counts`` (a map from a name, such as a job
    state, to a number). ``within`` names the kind whose items each hold a list of these: the
    list command is sent once per such item, with that item's key in the request field
    ``parent``. ``remove_cmd`` removes one item, its key sent as the request field
    ``remove_key`` (None: no command removes one). ``show`` are item fields a report shows
    beside the key."""

    name: str
    doc: str
    list_cmd: str
    items: str | None = None
    key: str | None = None
    counts: str | None = None
    within: str | None = None
    parent: str | None = None
    show: tuple[str, ...] = ()
    remove_cmd: str | None = None
    remove_key: str | None = None

    @property
    def counted(self) -> bool:
        return self.counts is not None


@dataclass(frozen=True)
class Resources:
    """The section: ``kinds`` in removal order, ``probes`` (command name -> doc line)."""

    doc: str
    kinds: Mapping[str, ResourceKind]
    probes: Mapping[str, str]

    def top(self) -> tuple[ResourceKind, ...]:
        """The kinds listed once per server (not within another kind's items)."""
        return tuple(k for k in self.kinds.values() if k.within is None)

    def inside(self, parent: str) -> tuple[ResourceKind, ...]:
        """The kinds listed once per item of ``parent``."""
        return tuple(k for k in self.kinds.values() if k.within == parent)


def build(raw: Mapping[str, Any] | None) -> Resources | None:
    """The typed section, or None when the tree has none; a malformed one is a SpecError."""
    if not raw:
        return None
    kinds: dict[str, ResourceKind] = {}
    for name, entry in (raw.get("lists") or {}).items():
        where = f"resources.lists.{name}"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("list"), Mapping):
            raise SpecError("needs list: {cmd, items, key} or {cmd, counts}", path=where)
        lst, rem = entry["list"], entry.get("remove") or {}
        if not isinstance(rem, Mapping):
            raise SpecError("remove: takes {cmd, key}", path=where)
        if not lst.get("cmd") or (lst.get("items") is None) == (lst.get("counts") is None):
            raise SpecError("list: needs cmd and exactly one of items (with key) or counts",
                            path=where)
        if lst.get("items") is not None and not lst.get("key"):
            raise SpecError("list: items needs the key field of an item", path=where)
        if bool(entry.get("within")) != bool(lst.get("parent")):
            raise SpecError("within: and list.parent go together", path=where)
        if entry.get("within") and rem:
            raise SpecError("a kind within another goes with its parent item: no remove:",
                            path=where)
        if bool(rem.get("cmd")) != bool(rem.get("key")):
            raise SpecError("remove: needs both cmd and key", path=where)
        kinds[name] = ResourceKind(
            name=name, doc=str(entry.get("doc", "")), list_cmd=str(lst["cmd"]),
            items=lst.get("items"), key=lst.get("key"), counts=lst.get("counts"),
            within=entry.get("within"), parent=lst.get("parent"),
            show=tuple(entry.get("show") or ()), remove_cmd=rem.get("cmd"),
            remove_key=rem.get("key"))
    for kind in kinds.values():
        if kind.within is not None:
            outer = kinds.get(kind.within)
            if outer is None or outer.within is not None or outer.counted:
                raise SpecError(f"within: {kind.within!r} is not a listed kind of its own",
                                path=f"resources.lists.{kind.name}")
    probes = {str(k): str((v or {}).get("doc", "")) for k, v in (raw.get("probes") or {}).items()}
    return Resources(doc=str(raw.get("doc", "")), kinds=frozen_map(kinds),
                     probes=frozen_map(probes))


def _deref(schema: Mapping[str, Any], node: Any) -> Any:
    """``node`` with a local ``$ref`` (``#/$defs/Name``) followed, as the loader attaches them."""
    ref = node.get("$ref") if isinstance(node, Mapping) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return (schema.get("$defs") or {}).get(ref[len("#/$defs/"):])
    return node


def _schema_at(schema: Mapping[str, Any], path: str) -> Any:
    """The JSON Schema node of dotted ``path`` under an object schema, or None."""
    node: Any = schema
    for part in path.split("."):
        node = _deref(schema, node)
        props = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(props, Mapping) or part not in props:
            return None
        node = props[part]
    return _deref(schema, node)


def problems(resources: Resources, commands: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(path, message) for each reference of the section the profile cannot honour: a command
    it lacks, a request field the command does not document, a reply path its response schema
    does not hold, a probe that needs request fields."""
    for kind in resources.kinds.values():
        where = f"resources.lists.{kind.name}"
        cmd = commands.get(kind.list_cmd)
        if cmd is None:
            yield where, f"list command {kind.list_cmd} is not a command of the profile"
        else:
            if kind.parent is not None and kind.parent not in cmd.request_fields:
                yield where, f"{kind.list_cmd} has no request field {kind.parent}"
            missing = [f for f in cmd.required_fields if f not in ("cmd", kind.parent)]
            if missing:
                yield where, f"{kind.list_cmd} needs fields the inventory does not send: {missing}"
            path = kind.items if kind.items is not None else kind.counts
            node = _schema_at(cmd.response, str(path))
            if node is None:
                yield where, f"the {kind.list_cmd} reply schema has no {path}"
            elif kind.items is not None:
                item = _deref(cmd.response, node.get("items"))
                if node.get("type") != "array" or not isinstance(item, Mapping):
                    yield where, f"{kind.list_cmd} {path} is not a list in the reply schema"
                elif kind.key not in (item.get("properties") or {}):
                    yield where, f"{kind.list_cmd} {path} items have no field {kind.key}"
                else:
                    for f in kind.show:
                        if f not in (item.get("properties") or {}):
                            yield where, f"show: {kind.list_cmd} {path} items have no field {f}"
        if kind.remove_cmd is not None:
            rem = commands.get(kind.remove_cmd)
            if rem is None:
                yield where, f"remove command {kind.remove_cmd} is not a command of the profile"
            elif kind.remove_key not in rem.request_fields:
                yield where, f"{kind.remove_cmd} has no request field {kind.remove_key}"
    for name in resources.probes:
        cmd = commands.get(name)
        if cmd is None:
            yield f"resources.probes.{name}", f"probe {name} is not a command of the profile"
        elif [f for f in cmd.required_fields if f != "cmd"]:
            yield f"resources.probes.{name}", f"probe {name} needs request fields"
