"""How a bunqueue client opens a connection (BQ-HELLO-1): judged once, here, for every tool.

Document 001: "Clients should send a Hello command after connecting to negotiate protocol
version and discover server capabilities." A connection opens well when its first command is
Hello, or Auth then Hello (document 001 refuses every command before Auth when the server has
a token, so Auth may come first). ``conform client`` judges the clients it drives with
:func:`opens_with_hello`; the tap and the trace pipeline judge every tapped connection with it
as its commands arrive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..spec import Profile

HELLO, AUTH = "Hello", "Auth"
#: the requirement the opening is judged on
OPENING_RULE = "BQ-HELLO-1"


def opens_with_hello(commands: Sequence[str]) -> bool | None:
    """Whether a connection whose first commands are ``commands`` opened with Hello (or Auth,
    Hello); None while it cannot be told yet (no command, or only an Auth)."""
    if not commands:
        return None
    if commands[0] == HELLO:
        return True
    if commands[0] != AUTH:
        return False
    if len(commands) < 2:
        return None
    return commands[1] == HELLO


# -- a tool's own connections to a server that may want a token ---------------------------------
#: the command a tool's opening check asks after Auth: refused like any other before Auth
#: (document 001, BQ-AUTH-2), harmless after it
PROBE = "Ping"
#: the profile errors that refuse a connection's authentication, and what each tells the user
AUTH_ERRORS = {
    "not_authenticated": "wants authentication",
    "invalid_token": "refused the token",
}
AUTH_REQ_ID = "qw-auth"
PROBE_REQ_ID = "qw-auth-probe"
#: bytes an opening reads before it gives up on a server that sends without answering it (a
#: flood is for the tool's own judgement, not the opening's to drink)
READ_LIMIT = 1 << 20


class AuthProblem(Exception):
    """A server's answer shows a tool's connection is not authenticated: no token was given and
    the server wants one (``not_authenticated``, BQ-AUTH-2), or the token was refused
    (``invalid_token``, BQ-AUTH-3). The message names the target, the command, the reply and
    the requirement; a shell adds how to give a token."""

    def __init__(self, error: str, command: str, message: str, requirement: str,
                 target: str = "the server"):
        self.error, self.command, self.reply_message = error, command, message
        self.requirement, self.target = requirement, target
        super().__init__(f"{target} {AUTH_ERRORS[error]}: it answered {command} with "
                         f"{message!r} ({requirement})")


def refused(profile: Profile, command: str, reply: Any,
            target: str = "the server") -> AuthProblem | None:
    """The :class:`AuthProblem` ``reply`` (to ``command``) is, or None: a reply that does not
    refuse the connection's authentication."""
    name = auth_refusal(profile, reply)
    if name is None:
        return None
    error = profile.model.errors[name]
    return AuthProblem(name, command, error.message, error.requirement or "", target)


def auth_refusal(profile: Profile, reply: Any) -> str | None:
    """The name of the profile error (``not_authenticated`` or ``invalid_token``) that
    ``reply`` is, or None: a reply that refuses a connection's authentication."""
    if type(reply) is not dict or reply.get("ok") is not False:
        return None
    errors = profile.model.errors
    for name in AUTH_ERRORS:
        if name in errors and reply.get("error") == errors[name].message:
            return name
    return None


class AuthCheck:
    """Sans-IO: the opening every tool's connection to a bunqueue server makes, and what its
    replies say. :attr:`data` is the bytes to write first (Auth with the token, when one is
    given, then a :data:`PROBE`); :meth:`feed` takes what the server sent back and returns
    True once both replies are in; :meth:`problem` is then an :class:`AuthProblem` when the
    server wants a token or refused it, else None. Only these two replies are read, so a
    shell that reads exactly their frames leaves the connection ready for its own traffic.
    :attr:`flooded` says the server sent :data:`READ_LIMIT` bytes without answering: a shell
    stops reading then.

    ``auth_only``: send only the Auth (a connection that must stay untouched by any other
    command, e.g. a fuzz case's); without a token there is then nothing to send."""

    def __init__(self, profile: Profile, token: str | None, *, target: str = "the server",
                 auth_only: bool = False):
        self.profile, self.token, self.target = profile, token, target
        encoder = FrameEncoder(profile)
        requests = []
        if token:
            requests.append({"cmd": AUTH, "token": token, "reqId": AUTH_REQ_ID})
        if not auth_only:
            requests.append({"cmd": PROBE, "reqId": PROBE_REQ_ID})
        self._expected = [r["reqId"] for r in requests]
        self.data = b"".join(encoder.encode(r) for r in requests)
        self._decoder = FrameDecoder(profile, check_depth=False)
        self.replies: dict[str, Any] = {}
        self.received = 0   # bytes fed

    @property
    def done(self) -> bool:
        return all(r in self.replies for r in self._expected)

    def feed(self, data: bytes) -> bool:
        """Take bytes from the server; True once every reply of the opening is in."""
        self.received += len(data)
        for frame in self._decoder.feed(data):
            if type(frame) is dict and frame.get("reqId") in self._expected:
                self.replies[frame["reqId"]] = frame
        return self.done

    @property
    def flooded(self) -> bool:
        """The server sent :data:`READ_LIMIT` bytes and the opening is still unanswered."""
        return not self.done and self.received >= READ_LIMIT

    @property
    def leftover(self) -> int:
        """Bytes fed beyond the last complete frame (a shell that reads whole frames has 0)."""
        return self._decoder.buffered

    def problem(self) -> AuthProblem | None:
        """What the replies fed so far say (see the class docstring)."""
        for req_id, command in ((AUTH_REQ_ID, AUTH), (PROBE_REQ_ID, PROBE)):
            problem = refused(self.profile, command, self.replies.get(req_id), self.target)
            if problem is not None:
                return problem
        return None
