"""The reference server in process, without a socket: the client's embedded mode.

Document 002's embedded mode calls the queue manager directly. Here the caller gets the TCP
shell's own request path minus the bytes of a socket: :class:`EmbeddedServer` wraps a
:class:`~.tcp.BunqueueServer` that never listens, runs its timer (delays, locks, stalls, cron)
and its store's flush loop, and answers :meth:`EmbeddedServer.request` exactly as a TCP
connection would be answered (the rate and auth gates, schema refusals, long polls parked in
the same :class:`~.waits.WaitRoom`), so an embedded client and a TCP client see the same
replies: each caller's connection is the TCP server's own sans-IO
:class:`~.connection.BunqueueConnection`, without frames. Each caller opens its own
connection, which the engine treats as a TCP connection (its active jobs go back to waiting
when it is closed, BQ-CONN-1).
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Callable
from typing import Any

from ...spec import Profile
from .connection import BunqueueConnection
from .model import EngineConfig, Wait
from .tcp import GC_YOUNG_THRESHOLD, BunqueueServer

__all__ = ["EmbeddedServer"]


class EmbeddedServer:
    """A bunqueue reference server answering in-process requests."""

    def __init__(self, profile: Profile | str = "bunqueue/v2", *,
                 data_path: str | os.PathLike[str] | None = None,
                 config: EngineConfig | None = None, tune_gc: bool = True):
        self._tune_gc = tune_gc
        self.server = BunqueueServer(profile, port=0, data_path=data_path, config=config)
        self.engine = self.server.engine
        self.profile = self.server.profile
        self._ids = itertools.count(1)
        self._connections: dict[str, BunqueueConnection] = {}
        self._running = False
        #: where a connection's pushed frames (job events, BQ-EVENT-102) go
        self._listeners: dict[str, Callable[[bytes], Any]] = {}

        def publish(conn_ids: tuple[str, ...], frame: dict) -> None:
            """The pushed frames for this process's connections (the TCP server's own hook
            writes those for its sockets)."""
            local = [c for c in conn_ids if c in self._listeners]
            if local:
                data = self.encode(frame)
                for conn_id in local:
                    self._listeners[conn_id](data)

        self.engine.listen(publish=publish)

    def listen(self, conn_id: str, listener: Callable[[bytes], Any] | None) -> None:
        """Hand ``conn_id``'s pushed frames, encoded, to ``listener`` (None: stop)."""
        if listener is None:
            self._listeners.pop(conn_id, None)
        else:
            self._listeners[conn_id] = listener

    async def start(self) -> EmbeddedServer:
        """Start the timers. ``tune_gc`` (the default) also raises the collector's
        young-generation threshold to the server process's (``GC_YOUNG_THRESHOLD``): the
        engine's jobs now live in the caller's heap, and with the default threshold a
        process holding 100k jobs spends a third of an add_bulk collecting them
        (benchmarks/README.md, "Client benchmark"). It only raises it, never lowers it."""
        if not self._running:
            self._running = True
            if self._tune_gc:
                young, older, oldest = gc.get_threshold()
                if young < GC_YOUNG_THRESHOLD:
                    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
            self.server.start_timers()
        return self

    def open(self) -> str:
        """A new in-process connection; its id is what :meth:`request` takes."""
        # no frames, and authenticated: in process there is no token to present
        server = self.server
        conn = BunqueueConnection(f"e{next(self._ids)}", server.gate, server.encoder,
                                  server.room, framed=False, authenticated=True)
        self._connections[conn.id] = conn
        self.engine.connection_opened(conn.id)
        return conn.id

    def close(self, conn_id: str) -> None:
        """The connection ends: its active jobs return to waiting (BQ-CONN-1)."""
        self._listeners.pop(conn_id, None)
        if self._connections.pop(conn_id, None) is not None:
            self.engine.connection_closed(conn_id)
            self.server.poke_timer()

    async def request(self, conn_id: str, request: Any) -> dict[str, Any]:
        """The reply (without reqId) a TCP connection would get for ``request``."""
        server = self.server
        conn = self._connections[conn_id]
        answer = conn.request(request)  # the TCP server's path
        reply = await server.park(conn_id, answer) if isinstance(answer, Wait) else answer
        server.poke_timer()
        return reply

    def encode(self, reply: dict[str, Any]) -> bytes:
        """The frame a TCP connection would carry for ``reply`` (its encoder's exact rules)."""
        return self.server.encoder.encode(reply)

    async def stop(self) -> None:
        for conn_id in list(self._connections):
            self.close(conn_id)
        if self._running:
            self._running = False
            await self.server.stop_timers()
