"""The command table: every bunqueue command's handler, by its spec name.

A handler is a plain function ``fn(engine, conn_id, request, now) -> reply | Wait`` (a long
poll's handlers also take ``deadline=``), registered with :func:`command` under the name the
spec gives the command. The engine binds each command of its profile to its handler when it is
built (:class:`~..engine.BunqueueEngine`), and refuses to build when the profile names a
command no handler is registered for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: command name -> handler; filled by the modules of this package as they are imported
COMMANDS: dict[str, Callable[..., Any]] = {}


def command(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the handler of command ``name``."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in COMMANDS:
            raise ValueError(f"command {name} has two handlers: {COMMANDS[name].__qualname__} "
                             f"and {fn.__qualname__}")
        COMMANDS[name] = fn
        return fn
    return register
