"""Before a tool judges a bunqueue server: is this connection allowed to talk to it?

A server with tokens answers every command but Auth with ``Not authenticated`` (document 001,
BQ-AUTH-2) until a connection authenticates. A tool run without the token (or with a wrong
one) would judge those refusals as the server's behaviour: ``conform detect`` would name a
profile from them, ``conform replay`` would call a case REGRESSED, ``conform server`` would
fail most cases. :func:`check_auth` opens one connection first, sends the opening of
:class:`~queuewire.judge.opening.AuthCheck` (Auth with the token when given, then a Ping) and
raises :class:`~queuewire.judge.opening.AuthProblem` when the answers show the server wants a
token or refused it; the CLI turns that into one clear error. quicx has no Auth: nothing to do.
"""

from __future__ import annotations

import asyncio

from ..judge.opening import AuthCheck
from ..spec import Profile

READ_SIZE = 64 * 1024


async def check_auth(profile: Profile, host: str, port: int, token: str | None, *,
                     timeout: float = 5.0, target: str | None = None) -> None:
    """Raise :class:`~queuewire.judge.opening.AuthProblem` when ``host:port`` refuses this
    tool's connection for authentication; OSError or TimeoutError when it cannot be reached
    or does not answer within ``timeout``. A server that floods instead of answering the
    opening (:attr:`~queuewire.judge.opening.AuthCheck.flooded`) is left to the tool's own
    judgement (nothing is raised)."""
    if profile.protocol != "bunqueue":
        return
    check = AuthCheck(profile, token, target=target or f"{host}:{port}")
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(check.data)
        await writer.drain()

        async def read_all() -> None:
            while not check.done and not check.flooded:
                data = await reader.read(READ_SIZE)
                if not data:
                    raise ConnectionResetError("the server closed the connection before "
                                               "answering Auth and Ping")
                check.feed(data)

        await asyncio.wait_for(read_all(), timeout)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass
    problem = check.problem()
    if problem is not None:
        raise problem
