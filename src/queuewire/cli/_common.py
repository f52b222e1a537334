"""What every ``queuewire`` command shares: the consoles, the protocol names, loading a
profile as a usage error, and the ``--profile`` option."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console

from ..spec import SpecError, load_profile, profile_names

# Tables are for reading; when stdout is not a terminal, do not squeeze them into 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)
PROTOCOLS = ("bunqueue", "quicx")


def load(name: str) -> Any:
    """The profile ``name``; an unknown one is a usage error (exit 2, one line)."""
    try:
        return load_profile(name)
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None


def profile_option(**kw: Any) -> Any:
    return click.option("--profile", "-p", metavar="PROFILE", help=(
        "Spec profile: " + ", ".join(profile_names()) + "."), **kw)
