"""The bunqueue client's errors: what a caller of :class:`~.bunqueue_session.BunqueueSession`
(and the Queue, Worker and pool above it) meets, each a subclass of the protocol-free errors of
:mod:`.session` so that code written for any protocol catches them.

Every error is raised or returned by the session and the pool; none is raised here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..codecs.errors import ProtocolError
from .session import (
    ClientConnectError,
    ClientConnectionLost,
    ClientError,
    ClientSessionStopped,
    ClientStateError,
    ClientTimeout,
)

__all__ = [
    "BunqueueAuthError",
    "BunqueueClientError",
    "BunqueueConnectError",
    "BunqueueConnectionLost",
    "BunqueueEncodeError",
    "BunqueueProtocolViolation",
    "BunqueueRefused",
    "BunqueueReplyInvalid",
    "BunqueueSessionStopped",
    "BunqueueStateError",
    "BunqueueTimeout",
    "too_deep_message",
]


class BunqueueClientError(ClientError):
    """Base of the bunqueue client's errors."""


class BunqueueStateError(BunqueueClientError, ClientStateError):
    """A call the session's state does not allow (e.g. a command after ``stop()``)."""


class BunqueueTimeout(BunqueueClientError, ClientTimeout):
    """No answer within the command's timeout."""


class BunqueueConnectionLost(BunqueueClientError, ClientConnectionLost):
    """The link went down (closed, reset or concluded dead) before the answer came."""


class BunqueueConnectError(BunqueueConnectionLost, ClientConnectError):
    """The TCP connect failed (refused, unreachable, timed out); ``__cause__`` is why."""


class BunqueueSessionStopped(BunqueueClientError, ClientSessionStopped):
    """The session was stopped before the answer came."""


class BunqueueProtocolViolation(BunqueueConnectionLost):
    """The server's bytes broke the framing; the link was torn down."""

    def __init__(self, error: ProtocolError | str):
        self.protocol_error = error if isinstance(error, ProtocolError) else None
        super().__init__(f"the server broke the protocol: {error}")


class BunqueueReplyInvalid(BunqueueClientError):
    """The server answered ``ok`` with a reply the client cannot take: a field of the wrong
    type or range (checked by :mod:`.replies`), or one the SDK needs is missing. The link
    stays up; ``requirement`` is the command's rule and ``reply`` the answer as received."""

    def __init__(self, command: str, problem: str, requirement: str | None = None,
                 reply: Mapping[str, Any] | None = None):
        self.command, self.problem, self.requirement = command, problem, requirement
        self.reply = dict(reply or {})
        rule = f" [{requirement}]" if requirement else ""
        super().__init__(f"{command}: the server's answer breaks the protocol{rule}: {problem}")


class BunqueueEncodeError(BunqueueClientError, ValueError):
    """The command cannot be written (too big, an integer msgpackr cannot read back, ...)."""


def too_deep_message(limit: int) -> str:
    """Why a command nested too deep is not sent (a server could not tell whose it is)."""
    return (f"[BQ-MSGPACK-3] containers nest deeper than max_nesting_depth {limit}: a server "
            f"refuses such a frame without its reqId, so it is not sent")


class BunqueueRefused(BunqueueClientError):
    """The server answered ``ok: false``. ``error`` is its message and ``error_name`` the
    spec's name for it (with ``requirement``) when the message matches one of the profile's
    error strings."""

    def __init__(self, command: str, error: str, error_name: str | None = None,
                 requirement: str | None = None, reply: Mapping[str, Any] | None = None):
        self.command, self.error = command, error
        self.error_name, self.requirement = error_name, requirement
        self.reply = dict(reply or {})
        rule = f" [{requirement}]" if requirement else ""
        super().__init__(f"{command} refused by the server: {error}{rule}")


class BunqueueAuthError(BunqueueRefused):
    """Auth was refused: the token is wrong or missing (BQ-AUTH-3)."""
