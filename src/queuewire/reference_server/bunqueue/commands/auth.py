"""Commands: Auth (auth.yaml); the token check the shells share."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..model import Refused
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("Auth")
def auth(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    # The engine holds no tokens. A shell with tokens configured answers Auth itself; one
    # without forwards it here and gets bunqueue's answer for that case (BQ-AUTH-3).
    raise Refused("invalid_token")



def check_token(tokens: Iterable[str], token: Any) -> bool:
    """Whether ``token`` is one of ``tokens``, compared in constant time (BQ-AUTH-4): every
    configured token is compared, and a match does not end the loop early."""
    if not isinstance(token, str):
        return False
    given = token.encode("utf-8", "surrogatepass")
    found = False
    for t in tokens:
        found |= hmac.compare_digest(t.encode("utf-8", "surrogatepass"), given)
    return found
