"""How the SDK reaches a server: over TCP through the shared pool, or embedded in process.

Both transports offer one coroutine, ``call(payload, timeout)``, that returns the reply map
of an ``ok`` answer and raises a typed :class:`~.bunqueue_session.BunqueueClientError`
otherwise, plus ``subscribe`` / ``unsubscribe`` for frames the server pushes (job events),
and ``connect()``, which a Queue or Worker awaits on entering: over TCP it returns once a
link of the pool is connected and raises why none could be (a closed port:
:class:`~.bunqueue_session.BunqueueConnectError`, "connection refused").
The SDK classes (:mod:`.queue`, :mod:`.worker`, :mod:`.flow`) are written against that and
cannot tell the two apart. :class:`TcpTransport` holds a reference on a shared
:class:`~.bunqueue_pool.Pool`. :class:`EmbeddedTransport` talks to the reference server's
:class:`~queuewire.reference_server.bunqueue.embedded.EmbeddedServer` (document 002's embedded
mode): every request and reply goes through the same MessagePack encoder and decoder as on a
socket, so an embedded call and a TCP call give the same answer, and the caller's objects
are never shared with the engine. Embedded servers are shared like pools: one per event loop,
profile and data path, reference-counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..codecs.errors import EncodeError, ProtocolError
from ..reference_server.bunqueue.embedded import EmbeddedServer
from ..spec import Profile, load_profile
from .bunqueue_pool import Pool, acquire_pool, release_pool
from .bunqueue_session import (
    BunqueueEncodeError,
    BunqueueRefused,
    BunqueueSessionStopped,
    BunqueueTimeout,
    ErrorMatcher,
    too_deep_message,
)
from .options import ConnectionOptions

__all__ = ["EmbeddedTransport", "TcpTransport", "Transport"]

log = logging.getLogger("queuewire.client.bunqueue")

Subscriber = Callable[[dict[str, Any]], Any]


class Transport:
    """What the SDK needs of a way to the server."""

    profile: Profile
    embedded = False

    async def call(self, payload: Mapping[str, Any], timeout: float | None = None) -> dict:
        raise NotImplementedError

    async def connect(self) -> None:
        """Return once the server can be reached; raise why it cannot (here: nothing to wait for)."""

    def subscribe(self, subscriber: Subscriber) -> None:
        raise NotImplementedError

    def unsubscribe(self, subscriber: Subscriber) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class TcpTransport(Transport):
    """Commands over a shared pool of TCP links (document 000)."""

    def __init__(self, profile: Profile, options: ConnectionOptions, *, shared: bool = True):
        self.profile = profile
        self.options = options
        self.pool: Pool = acquire_pool(profile, options, shared=shared)
        self._closed = False

    async def call(self, payload: Mapping[str, Any], timeout: float | None = None) -> dict:
        return await self.pool.pick().call(payload, timeout)

    async def connect(self) -> None:
        """Return once a link of the pool is connected (:meth:`~.bunqueue_pool.Pool.connect`)."""
        await self.pool.connect()

    def subscribe(self, subscriber: Subscriber) -> None:
        self.pool.subscribe(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.pool.unsubscribe(subscriber)

    async def wait_ready(self, timeout: float | None = None) -> bool:
        return await self.pool.wait_ready(timeout)

    async def close(self, grace: float = 5.0) -> None:
        if not self._closed:
            self._closed = True
            await release_pool(self.pool, grace)


#: the embedded servers of each running loop, by (profile, data path), with their user count
_SERVERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                    dict[tuple, tuple[EmbeddedServer, list[int]]]] = (
    weakref.WeakKeyDictionary())


class EmbeddedTransport(Transport):
    """The reference engine in process (document 002's embedded mode), no socket."""

    embedded = True

    def __init__(self, profile: Profile, *, data_path: str | os.PathLike[str] | None = None,
                 command_timeout: float | None = None):
        self.profile = profile
        self._key = (profile.name, None if data_path is None else os.fspath(data_path))
        self._servers = servers = _SERVERS.setdefault(asyncio.get_running_loop(), {})
        entry = servers.get(self._key)
        if entry is None:
            entry = servers[self._key] = (EmbeddedServer(profile, data_path=data_path), [0])
        self.server, refs = entry
        refs[0] += 1
        self._conn: str | None = None
        self._encode = FrameEncoder(profile).encode
        self._requests = FrameDecoder(profile)  # what a TCP server's decoder would refuse
        self._max_depth = profile.model.max_nesting_depth
        self._decoder = FrameDecoder(profile, check_depth=False)  # replies
        self._errors = ErrorMatcher(profile)
        self._timeout = command_timeout / 1000.0 if command_timeout else None
        self._subscribers: list[Subscriber] = []
        self._closed = False

    async def _connection(self) -> str:
        if self._conn is None:
            await self.server.start()
            self._conn = self.server.open()
            self.server.listen(self._conn, self._pushed)
        return self._conn

    def _pushed(self, data: bytes) -> None:
        # one whole frame, as every feed of the reply decoder is: it holds nothing between feeds
        for frame in self._decoder.feed(data):
            for subscriber in list(self._subscribers):
                try:
                    subscriber(frame)
                except Exception:  # noqa: BLE001 - a callback's error is not the transport's
                    log.exception("embedded transport: a pushed-frame subscriber failed")

    async def call(self, payload: Mapping[str, Any], timeout: float | None = None) -> dict:
        if self._closed:
            raise BunqueueSessionStopped("Session stopped: the embedded transport is closed")
        conn_id = self._conn if self._conn is not None else await self._connection()
        try:
            request = self._requests.feed(self._encode(payload))[0]
        except EncodeError as exc:
            raise BunqueueEncodeError(str(exc)) from None
        except ProtocolError as exc:  # too deep, as the TCP session refuses it (BQ-MSGPACK-3)
            raise BunqueueEncodeError(too_deep_message(self._max_depth)) from exc
        limit = self._timeout if timeout is None else timeout
        if limit is None:
            reply = await self.server.request(conn_id, request)
        else:
            try:
                async with asyncio.timeout(limit):
                    reply = await self.server.request(conn_id, request)
            except TimeoutError:
                raise BunqueueTimeout(f"Command timeout: {payload.get('cmd')} got no answer "
                                      f"within {limit:g} s") from None
        reply = self._decoder.feed(self.server.encode(reply))[0]
        ok = reply.get("ok")
        if ok is False or (ok is not True and "error" in reply):
            message = str(reply.get("error", "refused"))
            name, requirement = self._errors.match(message)
            raise BunqueueRefused(str(payload.get("cmd")), message, name, requirement, reply)
        return reply

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._conn is not None:
            self.server.close(self._conn)
        entry = self._servers.get(self._key)
        if entry is not None and entry[0] is self.server:
            entry[1][0] -= 1
            if entry[1][0] <= 0:
                del self._servers[self._key]
                await self.server.stop()


def transport_for(profile: Profile | str, connection: Any = None, *, embedded: bool = False,
                  data_path: str | os.PathLike[str] | None = None) -> Transport:
    """The transport a Queue or Worker built with these arguments uses."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    if embedded:
        options = ConnectionOptions.coerce(prof, connection)
        return EmbeddedTransport(prof, data_path=data_path,
                                 command_timeout=options.command_timeout)
    return TcpTransport(prof, ConnectionOptions.coerce(prof, connection))
