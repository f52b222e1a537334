"""The request gate: what every request of a bunqueue connection passes before the engine.

Sans-IO: :meth:`RequestGate.answer` takes a connection's state and one decoded request and
gives the reply (a map without reqId) or the engine's :class:`~.model.Wait` of a long poll;
no socket, no clock of its own. The TCP server and the embedded server both answer through
it, so a request gets the same reply whichever way it came.

Rules, in order (the first that applies answers):

1. the connection's rate window is spent: ``rate_limit_exceeded`` (BQ-RATE-1);
2. the request is no map: ``invalid_command``;
3. a token is configured, the connection has not authenticated and the command is not Auth:
   ``not_authenticated`` (BQ-AUTH-2);
4. the request breaks the command's schema: the refusal the engine gives for it
   (:func:`~.engine.request_refusal`; only a request the compiled check refuses is looked at);
5. Auth with tokens configured: ``{ok: true}`` and the connection authenticated (its pre-auth
   frame bound lifted to ``max_frame_bytes``) for a token that matches in constant time
   (BQ-AUTH-4), else ``invalid_token`` (BQ-AUTH-3);
6. the engine's answer.

The error strings come from the profile (``spec.errors``); none is written here.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...codecs.validation import BunqueueValidator
from .commands.auth import check_token
from .engine import BunqueueEngine, request_refusal
from .model import Wait


class GateConnection(Protocol):
    """What the gate reads and writes of a connection."""

    id: str
    authenticated: bool
    rate: Any        # an object with ``allow() -> bool``, or None: no rate limit
    decoder: Any     # the connection's FrameDecoder (its max_frame_bytes), or None


class RequestGate:
    """The request path of one server (see the module docstring)."""

    def __init__(self, engine: BunqueueEngine, tokens: tuple[str, ...] = (), *,
                 validator: BunqueueValidator | None = None):
        self.engine = engine
        spec = engine.profile.model
        #: the accepted auth tokens (none: no Auth needed)
        self.tokens = tokens
        self._messages = {name: e.message for name, e in spec.errors.items()}
        self._max_frame = spec.max_frame_bytes
        self._validator = validator or BunqueueValidator(engine.profile)
        self._request_is_valid = self._validator.request_is_valid

    def error(self, name: str, **fields: Any) -> dict:
        """The profile's error reply ``name`` (its message formatted with ``fields``)."""
        return {"ok": False, "error": self._messages[name].format(**fields)}

    def answer(self, conn: GateConnection, request: Any) -> dict | Wait:
        """The reply to one decoded request (without reqId), or a Wait to park."""
        if conn.rate is not None and not conn.rate.allow():
            return self.error("rate_limit_exceeded")                 # BQ-RATE-1
        if type(request) is not dict:
            return self.error("invalid_command")
        cmd = request.get("cmd")
        if self.tokens and not conn.authenticated and cmd != "Auth":
            return self.error("not_authenticated")                   # BQ-AUTH-2
        if not self._request_is_valid(request):  # the hot path asks only this
            refusal = request_refusal(self.engine, self._validator, request)
            if refusal is not None:
                return refusal
        if cmd == "Auth" and self.tokens:
            if check_token(self.tokens, request.get("token")):      # BQ-AUTH-4
                conn.authenticated = True
                if conn.decoder is not None:  # the pre-auth frame bound is lifted
                    conn.decoder.max_frame_bytes = self._max_frame
                return {"ok": True}
            return self.error("invalid_token")                       # BQ-AUTH-3
        return self.engine.handle(conn.id, request)
