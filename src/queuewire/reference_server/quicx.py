"""The quicx reference daemon's asyncio shell: :class:`QuicxServer`.

All protocol logic lives in :mod:`.quicx_engine`; this module only moves bytes. The server
listens with ``asyncio.start_server``; each connection gets a
:class:`~.quicx_engine.QuicxConnection` (its own decoder) on the one shared
:class:`~.quicx_engine.QuicxEngine`. The connection handler reads, hands the bytes to the
connection and performs the actions it returns: a :class:`~.quicx_engine.Send` is written to
the writer of whichever connection it names (a TASK goes to a worker's socket, a forwarded
DONE to a producer's), a :class:`~.quicx_engine.Close` closes that connection. After each read
the handler waits for its own socket to drain, so a peer that does not read slows only its
own connection. A peer's bytes cannot crash or hang the daemon: every protocol error is
answered by its reaction inside the connection object, a stream that ends inside a frame is
closed, and any other exception in a handler is logged and closes that connection only (its
tasks in flight are requeued, QX-WORKER-1). ``stop()`` closes the listener and every
connection. Use it as ``async with QuicxServer(profile, port=0) as server:``; ``server.port``
is the bound port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from ..spec import Profile
from ._service import TcpService
from .quicx_engine import (
    DEFAULT_POOL_BYTES,
    Close,
    EngineStats,
    QuicxConnection,
    QuicxEngine,
    Send,
)

__all__ = ["QuicxServer"]

log = logging.getLogger("queuewire.reference_server.quicx")
READ_SIZE = 64 * 1024  # bytes per read: one socket buffer's worth


class QuicxServer(TcpService):
    """A quicx daemon on a TCP port, speaking one profile.

    ``port=None`` is the profile's ``default_port``; ``port=0`` picks a free port. The other
    arguments configure the engine (see :class:`~.quicx_engine.QuicxEngine`), or pass a
    ready ``engine``.
    """

    def __init__(self, profile: Profile | str = "quicx/v1", host: str = "127.0.0.1",
                 port: int | None = None, *, pool_bytes: int = DEFAULT_POOL_BYTES,
                 task_types: Iterable[str] | None = None, largest_class: int | None = None,
                 engine: QuicxEngine | None = None):
        self.engine = engine if engine is not None else QuicxEngine(
            profile, pool_bytes=pool_bytes, task_types=task_types, largest_class=largest_class)
        self.profile = self.engine.profile
        self.host = host
        self._port = self.profile.model.default_port if port is None else port
        self._server: asyncio.AbstractServer | None = None
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._handlers: set[asyncio.Task] = set()

    # -- lifecycle
    async def start(self) -> QuicxServer:
        if self._server is not None:
            raise RuntimeError("the server is already started")
        self._server = await asyncio.start_server(self._serve, self.host, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("%s daemon listening on %s:%d", self.profile.name, self.host, self._port)
        return self

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._writers.values()):
            writer.transport.abort()  # unblocks a handler waiting to drain to a peer that never reads
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stats(self) -> EngineStats:
        return self.engine.stats()

    # -- connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        conn = QuicxConnection(self.engine)
        self._writers[conn.id] = writer
        reason = "connection closed"
        try:
            while not conn.closed:
                data = await reader.read(READ_SIZE)
                self._perform(conn.receive_data(data) if data else conn.receive_eof())
                if conn.closed:
                    break
                await writer.drain()
        except asyncio.CancelledError:  # stop(): this task is ours, nobody awaits it
            reason = "daemon stopping"
        except OSError as exc:  # reset, broken pipe: the peer is gone
            reason = f"connection lost: {exc}"
            log.debug("connection %d: %s", conn.id, reason)
        except Exception:  # a bug, not the peer's bytes: this connection only
            reason = "internal error"
            log.exception("connection %d: unexpected error, closing it", conn.id)
        finally:
            try:
                self._perform(conn.connection_lost(reason))
            except Exception:  # noqa: BLE001 - never let one connection's cleanup stop the daemon
                log.exception("connection %d: error while closing it", conn.id)
            self._writers.pop(conn.id, None)
            writer.close()
            self._handlers.discard(task)

    def _perform(self, actions: list[Send | Close]) -> None:
        writers = self._writers
        for action in actions:
            writer = writers.get(action.conn)
            if writer is None or writer.is_closing():
                continue
            if type(action) is Send:
                writer.write(action.frame)
            else:
                writer.close()
