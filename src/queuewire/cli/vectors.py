"""``queuewire vectors``: generate and check the language-neutral test vectors."""

from __future__ import annotations

import sys

import click

from ._common import console, err_console


@click.group()
def vectors() -> None:
    """Generate and check the language-neutral test vectors in vectors/."""


@vectors.command("generate")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Output directory (default: vectors/ beside spec/).")
def vectors_generate(directory: str | None) -> None:
    """Regenerate every vector file from the spec (deterministic)."""
    from ..vectors import generate_all

    for path, count in generate_all(directory):
        console.print(f"wrote {count:5d} vectors to {path}")


@vectors.command("check")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None)
def vectors_check(directory: str | None) -> None:
    """Run every vector through the codecs; exit 1 on any mismatch or stale file."""
    from ..vectors import check_all

    failures, total = check_all(directory)
    for failure in failures:
        err_console.print(f"[red]✗[/red] {failure}")
    if failures:
        err_console.print(f"vectors: {len(failures)} of {total} failed")
        sys.exit(1)
    console.print(f"vectors: {total} checked, all pass")
