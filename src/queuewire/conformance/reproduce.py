"""The one builder of reproduction lines: the shell command that reruns one case of a run.

Every report format, the console and the pytest plugin print the line the runner stored on
each result; the runner builds it here, from the same argv it records on the run
(:attr:`~queuewire.conformance.model.TargetRun.rerun`), so a line can be rebuilt for any
result of the run and never drops an option. A secret is never written out: the auth token
becomes ``"$QUEUEWIRE_AUTH_TOKEN"``, which the shell fills in.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

#: the runner's default per-step timeout (seconds); a line says --timeout only for another
DEFAULT_TIMEOUT = 5.0
#: what a reproduction line says instead of the auth token
TOKEN_PLACEHOLDER = '"$QUEUEWIRE_AUTH_TOKEN"'


def server_argv(protocol: str, target: str, profile: str, *, auth: bool = False,
                strict: bool = False, timeout: float = DEFAULT_TIMEOUT,
                http_target: str | None = None, embedded: bool = False) -> tuple[str, ...]:
    """``queuewire conform server`` with the options of a run (no case selected)."""
    parts = ["queuewire", "conform", "server", "--protocol", protocol, "--target", target,
             "--profile", profile]
    if http_target and not embedded:
        parts += ["--http-target", http_target]
    if auth:
        parts += ["--auth-token", TOKEN_PLACEHOLDER]
    if strict:
        parts.append("--strict")
    if timeout != DEFAULT_TIMEOUT:
        parts += ["--timeout", f"{timeout:g}"]
    return tuple(parts)


def client_argv(protocol: str, profile: str, testee: str, testee_cwd: str | None = None
                ) -> tuple[str, ...]:
    """``queuewire conform client`` against the same testee command (no scenario selected)."""
    parts = ["queuewire", "conform", "client", "--protocol", protocol, "--listen", "127.0.0.1:0",
             "--profile", profile, "--testee", testee]
    if testee_cwd:
        parts += ["--testee-cwd", testee_cwd]
    return tuple(parts)


#: selectors that take a glob pattern: their case id is always quoted, so a shell never expands it
GLOB_SELECTORS = frozenset({"--select"})


def line(argv: Sequence[str], select_flag: str, case_id: str) -> str:
    """The shell line: ``argv`` quoted (the token placeholder left for the shell to expand),
    then ``select_flag`` and the case id (always single-quoted after a glob selector)."""
    words = " ".join(p if p == TOKEN_PLACEHOLDER else shlex.quote(p) for p in argv)
    if select_flag in GLOB_SELECTORS and "'" not in case_id:
        sel = f"'{case_id}'"
    else:
        sel = shlex.quote(case_id)
    return f"{words} {select_flag} {sel}"
