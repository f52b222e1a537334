"""``queuewire vectors``: generate and check the language-neutral test vectors."""

from __future__ import annotations

import sys

import click
from rich.text import Text

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
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Directory of the vector files (default: vectors/ beside spec/, or the "
                   "copy an installed wheel ships).")
def vectors_check(directory: str | None) -> None:
    """Run every vector through the codecs; exit 1 on any mismatch, missing or stale file."""
    from ..vectors import VectorsError, check_all

    try:
        result = check_all(directory)
    except VectorsError as exc:
        raise click.ClickException(str(exc)) from None
    for failure in result.failures:
        # a failure quotes decoded values ("[...]"): plain text, not rich markup
        err_console.print(Text.assemble(("✗ ", "red"), failure), highlight=False, soft_wrap=True)
    if not result.ok:
        err_console.print(result.verdict(), highlight=False, soft_wrap=True)
        sys.exit(1)
    console.print(result.verdict(), highlight=False)
