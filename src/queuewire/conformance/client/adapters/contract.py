"""The adapter side of the testee contract: JSON lines in, results out.

:func:`serve` reads requests (one JSON object per line) from stdin until it closes, calls
``play(request)`` for each (a coroutine returning one result per action, in a fresh event
loop) and writes ``{"scenario": id, "results": [...]}`` as one line on stdout. A result is
``{"ok": true, "value": ...}`` or ``{"ok": false, "error": "...", "error_type": ...}`` with
``error_type`` one of timeout, connection_lost, refused, unsupported, other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Unsupported", "error_type", "fail", "ok", "serve"]

ErrorTypes = type | tuple[type, ...]

# an async function: serve() runs each scenario in its own asyncio.run
Play = Callable[[dict[str, Any]], Coroutine[Any, Any, list[dict[str, Any]]]]


class Unsupported(Exception):
    """An action or option the adapter's client has no equivalent for."""


def error_type(exc: BaseException, *, timeout: ErrorTypes = TimeoutError,
               connection_lost: ErrorTypes = ConnectionError, refused: ErrorTypes = ()) -> str:
    """The contract's ``error_type`` of an exception, given the client's own error classes
    (checked in this order: timeout, connection_lost, refused, then unsupported, other)."""
    if isinstance(exc, timeout):
        return "timeout"
    if isinstance(exc, connection_lost):
        return "connection_lost"
    if isinstance(exc, refused):
        return "refused"
    if isinstance(exc, Unsupported):
        return "unsupported"
    return "other"


def ok(value: Any = None) -> dict[str, Any]:
    return {"ok": True, "value": value}


def fail(error: Any, error_type: str) -> dict[str, Any]:
    return {"ok": False, "error": str(error) or type(error).__name__, "error_type": error_type}


def serve(play: Play) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    out = sys.stdout
    for raw in sys.stdin:
        text = raw.strip()
        if not text:
            continue
        try:
            request = json.loads(text)
        except ValueError as exc:
            print(f"not JSON: {exc}", file=sys.stderr, flush=True)
            continue
        try:
            results = asyncio.run(play(request))
        except Exception as exc:  # noqa: BLE001 - the adapter broke: every action fails
            results = [fail(f"adapter error: {exc!r}", "other")
                       for _ in request.get("actions") or ()]
        out.write(json.dumps({"scenario": request.get("scenario"), "results": results},
                             default=str) + "\n")
        out.flush()
