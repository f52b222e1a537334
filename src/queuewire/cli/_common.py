"""What every ``queuewire`` command shares: the consoles, the protocol names, loading a
profile as a usage error, the ``--profile`` option, and the ``--auth-token`` option of every
command that talks to a server (also read from ``QUEUEWIRE_AUTH_TOKEN``, since ``ps`` shows a
command line to every user of the machine)."""

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


AUTH_TOKEN_ENV = "QUEUEWIRE_AUTH_TOKEN"


def auth_token_option(help: str, **kw: Any) -> Any:
    """``--auth-token TOKEN``, taken from ``$QUEUEWIRE_AUTH_TOKEN`` when not given (preferred:
    the environment is not on the command line). Reports and case files never hold it."""
    return click.option("--auth-token", metavar="TOKEN", default=None, envvar=AUTH_TOKEN_ENV,
                        show_envvar=True,
                        help=f"{help} Default: ${AUTH_TOKEN_ENV}, which is safer than the "
                             "option (`ps` shows command lines). Reports and case files never "
                             "hold it.", **kw)


def auth_hint(exc: Exception, auth_token: str | None) -> str:
    """An :class:`~queuewire.judge.opening.AuthProblem`'s message and what to do about it."""
    if auth_token:
        return f"{exc}; check the token given with --auth-token or ${AUTH_TOKEN_ENV}"
    return f"{exc}; give a token with --auth-token TOKEN or set ${AUTH_TOKEN_ENV}"


def check_server_auth(profile: Any, host: str, port: int, auth_token: str | None,
                      timeout: float, target: str) -> None:
    """Stop (one clear error) before judging a bunqueue server that wants a token this run
    does not have, or refuses the one it has
    (:func:`~queuewire.conformance.preflight.check_auth`); a server that cannot be reached is
    left to the command's own error."""
    import asyncio

    from ..conformance.preflight import check_auth
    from ..judge.opening import AuthProblem
    try:
        asyncio.run(check_auth(profile, host, port, auth_token, timeout=timeout, target=target))
    except AuthProblem as exc:
        raise click.ClickException(auth_hint(exc, auth_token)) from None
    except (OSError, TimeoutError):
        return
