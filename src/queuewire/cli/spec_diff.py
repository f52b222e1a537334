"""``queuewire spec diff A B``: the changes between two profiles, each classified breaking or
compatible for clients and for servers (registered in the ``spec`` group by ``cli/spec.py``).

This module finds the two trees and prints; the comparison is :mod:`queuewire.spec.diff`.
A side is a profile name of the spec in use, ``PATH:PROFILE`` (a directory laid out like
``spec/``, or one that holds ``spec/``) or ``REV:PROFILE`` (``spec/`` as committed at a git
revision of the repository of the current directory, read with ``git archive`` into a
temporary directory as data: no file of it is imported or run, and overlays may not name a
file outside it).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from ..spec import SpecError, raw_tree
from ..spec.diff import Change, ProtocolMismatch, brief, diff_trees, raw_form, summary
from ._common import console, load

GROUPS = (("Breaking for clients and servers", lambda c: c.clients == c.servers == "breaking"),
          ("Breaking for clients", lambda c: c.clients == "breaking" != c.servers),
          ("Breaking for servers", lambda c: c.servers == "breaking" != c.clients),
          ("Compatible", lambda c: not c.breaking))
SHORT = 60


@click.command("diff")
@click.argument("old", metavar="A")
@click.argument("new", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
@click.option("--breaking-only", is_flag=True,
              help="List only the changes that are breaking (for --side).")
@click.option("--side", type=click.Choice(["both", "clients", "servers"]), default="both",
              show_default=True,
              help="Whose breaking changes count, for --breaking-only and the exit status.")
def spec_diff(old: str, new: str, as_json: bool, breaking_only: bool, side: str) -> None:
    """List what changes from profile A to profile B: commands, fields, types, required
    sets, limits, error strings, opcodes, directions, layouts, state table transitions,
    requirement levels and behaviour flags, each classified breaking or compatible for
    clients and for servers separately, with the reason. Prose (doc lines, descriptions,
    examples, requirement texts) is not compared.

    \b
    A and B are each one of:
      PROFILE        a profile of the spec in use (bunqueue/v2)
      PATH:PROFILE   a directory laid out like spec/ (or holding spec/)
      REV:PROFILE    spec/ at a git revision of the current repository
                     (HEAD~1:quicx/v1); read as data, nothing in it is run

    \b
    Exit status: 0 when no change is breaking (for --side; compatible
    changes alone exit 0, as does a profile compared with itself), 1 when
    at least one is, 2 on a usage error (an unknown profile, profiles of two
    protocols, a tree that cannot be read).
    """
    with ExitStack() as stack:
        before, after = tree_of(old, stack), tree_of(new, stack)
    try:
        changes = diff_trees(before, after)
    except ProtocolMismatch as exc:
        raise click.UsageError(f"{old} and {new}: {exc}") from None
    broken = [c for c in changes if c.breaking_for(side)]
    shown = broken if breaking_only else changes
    if as_json:
        doc = {"old": old, "new": new, "protocol": before.get("protocol"), "side": side,
               "summary": summary(changes), "changes": [c.as_dict() for c in shown]}
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        print_changes(old, new, changes, shown)
    sys.exit(1 if broken else 0)


def tree_of(spec: str, stack: ExitStack) -> dict[str, Any]:
    """The merged tree ``spec`` names (see the module's docstring), ``$limit`` unresolved."""
    if ":" not in spec:
        tree: dict[str, Any] = raw_form(load(spec))
        return tree
    where, _, name = spec.rpartition(":")
    path = Path(where).expanduser()
    if path.is_dir():
        return tree_at(spec_root(path), name)
    return tree_at(git_spec(where, stack), name)


def spec_root(path: Path) -> Path:
    for root in (path, path / "spec"):
        if (root / "profiles.yaml").is_file():
            return root
    raise click.UsageError(f"{path}: no profiles.yaml here or in {path / 'spec'}")


def tree_at(root: Path, name: str) -> dict[str, Any]:
    """Profile ``name`` of the spec directory ``root``, as ``queuewire.spec.raw_tree``
    builds it (its checks make a bad directory a usage error)."""
    try:
        return raw_tree(name, root)
    except SpecError as exc:
        raise click.UsageError(f"{root}: {exc}") from None


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise click.UsageError(f"cannot run git: {exc}") from None


def git_spec(rev: str, stack: ExitStack) -> Path:
    """``spec/`` as committed at ``rev``, extracted (regular files only) into a temporary
    directory that lives as long as ``stack``."""
    top = _git(["rev-parse", "--show-toplevel"], Path.cwd())
    if rev.startswith("-") or top.returncode != 0:
        raise click.UsageError(f"{rev!r} is not a directory, nor a git revision of the "
                               "repository of the current directory")
    repo = Path(top.stdout.decode().strip())
    commit = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], repo)
    if commit.returncode != 0:
        raise click.UsageError(f"{rev!r} is neither a directory nor a git revision of {repo}")
    sha = commit.stdout.decode().strip()
    archive = _git(["archive", "--format=tar", sha, "--", "spec"], repo)
    if archive.returncode != 0:
        raise click.UsageError(f"{rev}: no spec/ directory at that revision of {repo}")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="queuewire-spec-"))).resolve()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            target = (tmp / member.name).resolve()
            if not member.isfile() or tmp not in target.parents:
                continue
            data = tar.extractfile(member)
            if data is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data.read())
    return tmp / "spec"


def print_changes(old: str, new: str, changes: list[Change], shown: list[Change]) -> None:
    counts = summary(changes)
    if not changes:
        console.print(f"{old} → {new}: no changes")
        return
    console.print(f"{old} → {new}: {counts['changes']} changes, {counts['breaking']} breaking "
                  f"({counts['breaking_for_clients']} for clients, "
                  f"{counts['breaking_for_servers']} for servers)")
    for title, belongs in GROUPS:
        rows = [c for c in shown if belongs(c)]
        if not rows:
            continue
        table = Table(title=f"{title} ({len(rows)})", title_justify="left")
        for col, width in (("change", 22), ("where", 30), ("old", 24), ("new", 24)):
            table.add_column(col, overflow="fold", max_width=width)
        table.add_column("clients", no_wrap=True)
        table.add_column("servers", no_wrap=True)
        table.add_column("why", overflow="fold", min_width=24)
        for c in rows:
            table.add_row(f"{c.what} {c.kind}" + (f" ({c.trend})" if c.trend else ""),
                          c.subject, brief(c.old, SHORT), brief(c.new, SHORT), _impact(c.clients),
                          _impact(c.servers), c.why)
        console.print(table)


def _impact(value: str) -> str:
    return "[bold red]breaking[/bold red]" if value == "breaking" else "compatible"
