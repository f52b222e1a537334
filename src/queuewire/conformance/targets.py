"""Where a conformance run connects: ``HOST:PORT`` or an embedded reference server.

:func:`parse_target` turns the ``--target`` string into ``(host, port)`` or the word
``"embedded"``, refusing anything else with a one-line ``ValueError``. :func:`embedded` is an
async context manager that starts the protocol's reference server in this process on
127.0.0.1 and an ephemeral port, yields its address and stops it afterwards;
:func:`embedded_target` does the same and yields an :class:`EmbeddedTarget`, which also carries
the address of the embedded bunqueue server's HTTP API (started on an ephemeral port too, so
the ``http:`` cases run against it). The embedded bunqueue server runs its timer often (a
short ``tick_interval``) so delay, retry backoff and lease cases finish as soon as their
deadlines pass instead of waiting for the default tick.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..spec import Profile, load_profile

EMBEDDED = "embedded"
EMBEDDED_HOST = "127.0.0.1"
EMBEDDED_TICK = 0.05  # seconds: the embedded bunqueue server's longest timer sleep
# The embedded quicx daemon's task pool: small enough that the pool-exhaustion case reaches
# QUEUE_FULL within a few hundred frames (the daemon's default, 64 MiB, takes 65,536 tasks).
EMBEDDED_POOL_BYTES = 1 << 20


def parse_target(s: str) -> tuple[str, int] | str:
    """``"HOST:PORT"`` -> (host, port); ``"embedded"`` -> ``"embedded"``."""
    text = (s or "").strip()
    if text == EMBEDDED:
        return EMBEDDED
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"target {s!r} is not HOST:PORT (port 1-65535) or 'embedded'")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


@dataclass(frozen=True)
class EmbeddedTarget:
    host: str
    port: int
    http: tuple[str, int] | None = None  # the HTTP API, when the server has one


@contextlib.asynccontextmanager
async def embedded(protocol: str, profile: str | Profile | None = None,
                   auth_tokens: tuple[str, ...] = ()) -> AsyncIterator[tuple[str, int]]:
    """Run the reference server of ``protocol`` in process; yield its (host, port)."""
    async with embedded_target(protocol, profile, auth_tokens, http=False) as t:
        yield t.host, t.port


@contextlib.asynccontextmanager
async def embedded_target(protocol: str, profile: str | Profile | None = None,
                          auth_tokens: tuple[str, ...] = (), *,
                          http: bool = True) -> AsyncIterator[EmbeddedTarget]:
    """Run the reference server of ``protocol`` in process (bunqueue: with its HTTP API
    unless ``http`` is false); yield its :class:`EmbeddedTarget`."""
    server: BunqueueServer | QuicxServer
    if protocol == "bunqueue":
        from ..reference_server.bunqueue import BunqueueServer

        prof = _profile(profile, "bunqueue/v2")
        server = BunqueueServer(prof, EMBEDDED_HOST, 0, auth_tokens=auth_tokens,
                                tick_interval=EMBEDDED_TICK, http_port=0 if http else None)
    elif protocol == "quicx":
        from ..reference_server.quicx import QuicxServer

        prof = _profile(profile, "quicx/v1")
        server = QuicxServer(prof, EMBEDDED_HOST, 0, pool_bytes=EMBEDDED_POOL_BYTES)
    else:
        raise ValueError(f"unknown protocol {protocol!r} (bunqueue or quicx)")
    async with server:
        front = getattr(server, "http", None)
        http_addr = (EMBEDDED_HOST, front.port) if front is not None else None
        yield EmbeddedTarget(EMBEDDED_HOST, server.port, http_addr)


def _profile(profile: str | Profile | None, default: str) -> Profile:
    if isinstance(profile, Profile):
        return profile
    return load_profile(profile or default)
