"""Client options: document 000's connection options and 002's worker options, in snake_case.

The names and defaults are not written here: they are the spec's ``client_defaults`` and
``worker_defaults`` (spec/bunqueue/protocol.yaml), whose camelCase keys become snake_case
fields (``commandTimeout`` -> ``command_timeout``). Times are in milliseconds, as in the
documents. A connection is given as a mapping (``{"host": ..., "port": ..., "token": ...,
"command_timeout": 5000}``, camelCase keys accepted too) or a :class:`ConnectionOptions`; an
unknown key or a value of the wrong kind is a :class:`ClientConfigError` that names the key
and the spec's options, never a late surprise on the wire.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..spec import Profile, load_profile
from .session import ClientError

__all__ = ["ClientConfigError", "ConnectionOptions", "WorkerOptions", "camel", "snake"]


class ClientConfigError(ClientError, ValueError):
    """An option the client does not know, or a value it cannot use."""


def snake(name: str) -> str:
    """``commandTimeout`` -> ``command_timeout``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def camel(name: str) -> str:
    """``command_timeout`` -> ``commandTimeout`` (the wire's spelling of an option)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _spec_defaults(profile: Profile, group: str) -> dict[str, Any]:
    out = {}
    for key, item in (profile.tree.get(group) or {}).items():
        if isinstance(item, Mapping) and "value" in item:
            out[snake(key)] = item["value"]
    return out


def _build(cls: type, profile: Profile, group: str, given: Mapping[str, Any] | None,
           extra: Mapping[str, Any]) -> Any:
    values = {**_spec_defaults(profile, group), **extra}
    known = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    if required - values.keys():
        raise ClientConfigError(f"profile {profile.name}: the spec's {group} lacks "
                                f"{sorted(required - values.keys())}")
    for key, value in (given or {}).items():
        name = snake(key)
        if name not in known:
            raise ClientConfigError(
                f"unknown option {key!r}; the options are: {', '.join(sorted(known))} "
                f"(spec: {group}, document 000/002 names in snake_case)")
        values[name] = value
    values = {k: v for k, v in values.items() if k in known}
    options = cls(**values)
    options.check()
    return options


@dataclass(frozen=True)
class ConnectionOptions:
    """A connection's options (document 000, Configuration; spec ``client_defaults``)."""

    # from the spec's client_defaults (no default here: the spec is the one place)
    pipelining: bool
    max_in_flight: int
    pool_size: int
    command_timeout: float
    ping_interval: float
    max_ping_failures: int
    max_command_timeouts: int
    reconnect_base_delay: float
    reconnect_max_delay: float
    reconnect_factor: float
    reconnect_jitter: float
    # the address
    host: str = "127.0.0.1"
    port: int | None = None
    token: str | None = None
    #: reconnect after a lost link (False: the session stops instead)
    reconnect: bool = True
    #: milliseconds a TCP connect may take before it counts as failed (default: command_timeout)
    connect_timeout: float | None = None
    #: False (the default): until a link has been READY once, a failed connect fails the
    #: commands waiting for it at once with a ClientConnectError (a command sent later tries
    #: to connect again), and entering a Queue or Worker raises it. True: the first connect
    #: is retried with the reconnect backoff like a later one, commands wait for the server
    #: until their own timeout, and entering returns at once
    retry_first_connect: bool = False
    #: SO_KEEPALIVE on the socket (BQ-CLIENT-7)
    keepalive: bool = True

    @classmethod
    def from_profile(cls, profile: Profile | str, given: Mapping[str, Any] | None = None,
                     ) -> ConnectionOptions:
        """The spec's defaults for ``profile``, overridden by ``given``; the port defaults to
        the profile's ``default_port``."""
        prof = load_profile(profile) if isinstance(profile, str) else profile
        return _build(cls, prof, "client_defaults", given, {"port": prof.model.default_port})

    @classmethod
    def coerce(cls, profile: Profile | str, connection: Any) -> ConnectionOptions:
        if isinstance(connection, ConnectionOptions):
            return connection
        if connection is not None and not isinstance(connection, Mapping):
            raise ClientConfigError(f"connection must be a mapping or ConnectionOptions, got "
                                    f"{type(connection).__name__}")
        return cls.from_profile(profile, connection)

    def check(self) -> None:
        _positive(self, "max_in_flight", "pool_size", "command_timeout", "reconnect_factor")
        _not_negative(self, "ping_interval", "max_ping_failures", "max_command_timeouts",
                      "reconnect_base_delay", "reconnect_max_delay")
        if not 0 <= self.reconnect_jitter < 1:
            raise ClientConfigError(f"reconnect_jitter must be in [0, 1), got "
                                    f"{self.reconnect_jitter!r}")
        if not isinstance(self.host, str) or not self.host:
            raise ClientConfigError(f"host must be a non-empty string, got {self.host!r}")
        if type(self.port) is not int or not 0 < self.port < 65536:
            raise ClientConfigError(f"port must be an integer in 1..65535, got {self.port!r}")
        if self.token is not None and not isinstance(self.token, str):
            raise ClientConfigError("token must be a string or None")
        if not isinstance(self.retry_first_connect, bool):
            raise ClientConfigError(f"retry_first_connect must be True or False, got "
                                    f"{self.retry_first_connect!r}")

    @property
    def address(self) -> tuple[str, int]:
        return self.host, int(self.port or 0)

    @property
    def connect_seconds(self) -> float:
        """Seconds a TCP connect may take (``connect_timeout``, else ``command_timeout``)."""
        return (self.connect_timeout or self.command_timeout) / 1000.0

    def replace(self, **changes: Any) -> ConnectionOptions:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class WorkerOptions:
    """A worker's options (document 002; spec ``worker_defaults``)."""

    # from the spec's worker_defaults
    heartbeat_interval: float
    ack_batch_size: int
    ack_batch_delay: float
    lock_ttl: float
    stall_interval: float
    max_stalls: int
    wait_job_timeout: float
    worker_timeout: float
    # the worker's own
    concurrency: int = 1
    #: the PULLB long-poll: milliseconds the server may hold an empty pull
    poll_timeout: float = 1000
    #: at most this many jobs per PULLB (default: the free concurrency slots)
    batch_size: int | None = None
    #: the lock owner sent with PULLB (default: a fresh id per worker)
    owner: str | None = None

    @classmethod
    def from_profile(cls, profile: Profile | str, given: Mapping[str, Any] | None = None,
                     ) -> WorkerOptions:
        prof = load_profile(profile) if isinstance(profile, str) else profile
        return _build(cls, prof, "worker_defaults", given, {})

    def check(self) -> None:
        _positive(self, "concurrency", "heartbeat_interval", "ack_batch_size", "lock_ttl")
        _not_negative(self, "ack_batch_delay", "poll_timeout")
        if self.batch_size is not None and self.batch_size < 1:
            raise ClientConfigError(f"batch_size must be at least 1, got {self.batch_size!r}")


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ClientConfigError(f"{name} must be a positive number, got {value!r}")


def _not_negative(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ClientConfigError(f"{name} must be a number >= 0, got {value!r}")
