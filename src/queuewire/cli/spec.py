"""``queuewire spec``: list, show, lint, export and diff the protocol spec (``diff`` lives in
``spec_diff``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich.table import Table

from ..spec import SpecError, default_profile, load_profile, profile_names
from ._common import PROTOCOLS, console, err_console, load, profile_option
from .spec_diff import spec_diff


@click.group()
def spec() -> None:
    """Inspect, check, export and compare the protocol spec."""


spec.add_command(spec_diff)


@spec.command("list")
@profile_option()
def spec_list(profile: str | None) -> None:
    """List the commands (bunqueue) or message types (quicx) of a profile.

    Without --profile, lists the default profile of each protocol.
    """
    names = [profile] if profile else [default_profile(p) for p in PROTOCOLS]
    for name in names:
        prof = load(name)
        if prof.protocol == "bunqueue":
            _list_bunqueue(prof)
        else:
            _list_quicx(prof)


def _table(title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> Table:
    """A table whose last column (the doc line) is cut with an ellipsis; the others keep
    their natural width, so codes and names stay readable in any terminal."""
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns[:-1]):
        width = max([len(col)] + [len(r[i]) for r in rows])
        table.add_column(col, no_wrap=True, min_width=width)
    table.add_column(columns[-1], overflow="ellipsis", no_wrap=True, max_width=72)
    for row in rows:
        table.add_row(*row)
    return table


def _list_bunqueue(prof: Any) -> None:
    commands = prof.model.commands
    rows = [(c.name, c.category, ", ".join(f for f in c.required_fields if f != "cmd"),
             c.requirement, c.doc) for c in commands.values()]
    console.print(_table(f"{prof.name}: {len(commands)} commands",
                         ("command", "category", "required fields", "requirement", "doc"), rows))


def _list_quicx(prof: Any) -> None:
    messages = prof.tree.get("messages") or {}
    rows = []
    for name, msg in sorted(messages.items(), key=lambda kv: kv[1].get("code", 0)):
        code = msg.get("code")
        note = " (reserved)" if msg.get("reserved") else ""
        rows.append((f"0x{code:02X}" if isinstance(code, int) else str(code), name + note,
                     _roles(msg.get("from")), _roles(msg.get("to")), str(msg.get("payload", "")),
                     str(msg.get("doc", ""))))
    console.print(_table(f"{prof.name}: {len(messages)} message types",
                         ("code", "message", "from", "to", "payload", "doc"), rows))


def _roles(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value or "")


@spec.command("show")
@click.argument("name")
@profile_option()
def spec_show(name: str, profile: str | None) -> None:
    """Show one element: a command, message, requirement id, limit or definition.

    NAME is looked up in the given profile, or in each protocol's default profile.
    """
    names = [profile] if profile else [default_profile(p) for p in PROTOCOLS]
    for pname in names:
        prof = load(pname)
        found = _find(prof, name)
        if found is not None:
            kind, value = found
            console.print(f"[bold]{name}[/bold] ({kind} in {prof.name})")
            console.print_json(json.dumps(value, default=str))
            return
    raise click.UsageError(f"{name!r} is not a command, message, requirement, limit or "
                           f"definition of {', '.join(names)}")


def _find(prof: Any, name: str) -> tuple[str, Any] | None:
    tree = prof.tree
    if name in prof.requirements:
        return "requirement", tree["requirements"][name]
    if prof.protocol == "bunqueue" and name in prof.model.commands:
        cmd = prof.model.commands[name]
        return "command", {"category": cmd.category, "doc": cmd.doc, "doc-ref": cmd.doc_ref,
                           "requirement": cmd.requirement, "request": dict(cmd.request),
                           "response": dict(cmd.response)}
    for section in ("messages", "limits", "definitions", "errors", "protocol_errors",
                    "error_codes", "semantics"):
        if name in (tree.get(section) or {}):
            return section.rstrip("s"), tree[section][name]
    return None


@spec.command("lint")
@profile_option()
def spec_lint(profile: str | None) -> None:
    """Check the spec: docs on every element, requirements cited and quoted, schemas valid,
    no opcode collisions; and the conformance cases against it (a check whose level would
    come from a requirement it does not test). Exits 1 when anything is wrong."""
    from ..conformance.case_lint import lint_cases
    from ..spec.lint import lint, sources_dir

    names = [profile] if profile else profile_names()
    issues = lint(names)
    for name in names:
        if not any(i.profile == name and i.path == "<load>" for i in issues):
            issues.extend(lint_cases(name))
    for issue in issues:
        err_console.print(f"[red]✗[/red] {issue}")
    counts = []
    for name in names:
        try:
            prof = load_profile(name)
        except SpecError:
            continue
        counts.append(f"{name}: {len(prof.requirements)} requirements")
    src = sources_dir()
    note = "quotes checked against " + str(src) if src else "source documents not found: quotes not checked"
    if issues:
        err_console.print(f"spec lint: {len(issues)} issue(s)")
        sys.exit(1)
    console.print(f"spec lint: clean ({'; '.join(counts)}; {note})")


@spec.command("export")
@click.option("--format", "fmt", type=click.Choice(["json"]), default="json", show_default=True)
@profile_option()
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default="-",
              help="Write here instead of stdout.")
def spec_export(fmt: str, profile: str | None, output: str) -> None:
    """Export resolved profiles ($limit substituted, overlays applied) as JSON."""
    names = [profile] if profile else profile_names()
    doc: dict[str, Any] = {"profiles": {}}
    for name in names:
        prof = load(name)
        doc["profiles"][name] = {"protocol": prof.protocol, "doc": prof.doc,
                                 "overlays": list(prof.overlays), "spec": _plain(prof.tree)}
        if prof.protocol == "bunqueue":
            doc["profiles"][name]["schemas"] = {
                c.name: {"request": _plain(c.request), "response": _plain(c.response)}
                for c in prof.model.commands.values()}
    text = json.dumps(doc, indent=2, sort_keys=False)
    with click.open_file(output, "w") as fh:
        fh.write(text + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
