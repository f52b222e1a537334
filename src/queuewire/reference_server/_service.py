"""The lifecycle every reference daemon shares, written once.

A daemon subclasses :class:`Service` and implements ``start`` (bind, then record the bound
port in ``_port``) and ``stop``; ``async with`` runs them, and ``port`` / ``address`` report
where it listens (the requested port before start, the bound one after, so ``port=0`` asks for
an ephemeral port). :class:`TcpService` adds what an ``asyncio.start_server`` daemon has:
``listen`` (bind with the daemon's ``backlog``, by default
:data:`~._flow.DEFAULT_LISTEN_BACKLOG`, and record the port), ``serve_forever`` and every
bound address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Self

from ._flow import DEFAULT_LISTEN_BACKLOG


class Service:
    host: str
    _port: int

    async def start(self) -> Self:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self._port


class TcpService(Service):
    _server: asyncio.Server | None
    #: connections the kernel queues before they are accepted (a daemon's ``backlog`` option)
    backlog: int = DEFAULT_LISTEN_BACKLOG

    async def listen(self, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                             Awaitable[None]]) -> asyncio.AbstractServer:
        """Bind ``host``:``port`` with ``self.backlog``, serve each connection with
        ``handler``, record the server and the bound port; ``start`` calls it."""
        if self._server is not None:
            raise RuntimeError("the server is already started")
        self._server = await asyncio.start_server(handler, self.host, self._port,
                                                  backlog=self.backlog)
        self._port = self._server.sockets[0].getsockname()[1]
        return self._server

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every bound (host, port): a host name may resolve to several addresses."""
        if self._server is None:
            return []
        return [sock.getsockname()[:2] for sock in self._server.sockets]
