"""What the two conformance servers for clients share: one listening port for a whole run,
the scenario session now in force, and the connection handlers.

A subclass (:class:`~.server.ConformanceServer` for bunqueue,
:class:`~.quicx_server.QuicxConformanceServer`) makes its protocol's session in
``_new_session``; every connection that arrives is handed to the session in force, and a
connection that arrives between scenarios (no session, or an ended one) is closed at once, as
is one beyond ``MAX_CONNECTIONS`` open at once (a note in the scenario's transcript says so):
each connection costs a handler, buffers and its answers in flight, so a client that opens
connections without end costs bounded memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ...spec import Profile
from ..model import Transcript

__all__ = ["MAX_CONNECTIONS", "ScenarioListener"]

#: connections served at once: the scenarios need a few (a pool, a worker, reconnects); far
#: more is a flood, and each costs a handler, its buffers and up to max_in_flight answers
MAX_CONNECTIONS = 256


class ScenarioListener:
    def __init__(self, profile: Profile, host: str = "127.0.0.1", port: int = 0):
        self.profile, self.host, self.port = profile, host, port
        self.session: Any = None
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop_listening(self) -> None:
        """End the session, close the port and every connection handler."""
        self.end()
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def _new_session(self, behaviour: dict[str, Any], checker: Any,
                     transcript: Transcript) -> Any:  # pragma: no cover - subclasses
        raise NotImplementedError

    def begin(self, behaviour: dict[str, Any], checker: Any, transcript: Transcript) -> Any:
        """A scenario starts: its session serves every connection from now on."""
        self.end()
        self.session = self._new_session(behaviour, checker, transcript)
        return self.session

    def end(self) -> None:
        if self.session is not None:
            self.session.end()
        self.session = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            session = self.session
            if session is None or session.ended:
                writer.close()
                return
            if len(self._handlers) > MAX_CONNECTIONS:
                session.transcript.add(0, "note", note=f"a connection over {MAX_CONNECTIONS} "
                                       "open at once was closed unserved (MAX_CONNECTIONS)")
                writer.close()
                return
            await session.serve(reader, writer)
        except asyncio.CancelledError:
            pass
        finally:
            if task is not None:
                self._handlers.discard(task)
            with contextlib.suppress(Exception):
                writer.close()
