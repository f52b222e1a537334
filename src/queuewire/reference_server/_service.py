"""The lifecycle every reference daemon shares, written once.

A daemon subclasses :class:`Service` and implements ``start`` (bind, then record the bound
port in ``_port``) and ``stop``; ``async with`` runs them, and ``port`` / ``address`` report
where it listens (the requested port before start, the bound one after, so ``port=0`` asks for
an ephemeral port). :class:`TcpService` adds what an ``asyncio.start_server`` daemon has:
``serve_forever`` and every bound address.
"""

from __future__ import annotations

import asyncio
from typing import Self


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
    _server: asyncio.AbstractServer | None

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
