"""``queuewire serve``: run a reference daemon (quicx, bunqueue) in the foreground until
SIGINT or SIGTERM."""

from __future__ import annotations

from typing import Any

import click

from ..reference_server._flow import DEFAULT_LISTEN_BACKLOG, DEFAULT_PARTIAL_FRAME_TIMEOUT
from ..spec import default_profile, load_profile, profile_names
from ._common import load


def address_options(default_port: int) -> Any:
    """``--host`` and ``--port`` of a daemon whose spec's default port is ``default_port``."""
    def decorate(command: Any) -> Any:
        command = click.option(
            "--port", type=click.IntRange(0, 65535), default=default_port, show_default=True,
            help="TCP port to listen on (the spec's default_port); 0 picks a free port, "
                 "which is printed.")(command)
        return click.option(
            "--host", default="127.0.0.1", show_default=True,
            help="Address to listen on (an IP address or host name; 0.0.0.0 for every "
                 "interface).")(command)
    return decorate


def flow_options(command: Any) -> Any:
    """The flow-control options every daemon takes (reference_server/_flow.py)."""
    command = click.option(
        "--backlog", type=click.IntRange(min=1), metavar="N",
        default=DEFAULT_LISTEN_BACKLOG, show_default=True,
        help="Listen backlog: connections the kernel queues until the daemon accepts "
             "them (capped by net.core.somaxconn). Raise it if a burst of clients "
             "connecting at once sees connections refused or retried.")(command)
    return click.option(
        "--partial-frame-timeout", type=click.FloatRange(min=0), metavar="SECONDS",
        default=DEFAULT_PARTIAL_FRAME_TIMEOUT, show_default=True,
        help="Reset a connection whose frame is not complete this many seconds after its "
             "first byte (quicx: after its last byte). A connection that is silent between "
             "frames (an idle client) is never timed out. 0 disables the timeout.")(command)


def _run_until_signal(server: Any, host: str, port: int, started: Any, stopped: Any) -> None:
    """Start a daemon, report where it listens, serve until SIGINT or SIGTERM, then stop it.
    A port that cannot be bound is a one-line error, not a traceback."""
    import asyncio
    import signal

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: "
                                       f"{exc.strerror or exc}") from None
        started(", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in server.addresses))
        try:
            await stop.wait()
        finally:
            await server.stop()
            stopped()

    asyncio.run(run())


@click.group()
def serve() -> None:
    """Run a reference daemon in the foreground (Ctrl-C or SIGTERM stops it)."""


def _serve_defaults() -> tuple[str, int, int, str, str]:
    """Defaults and help details of ``serve quicx``, read from the spec and the engine."""
    from ..reference_server.quicx import DEFAULT_POOL_BYTES, default_largest_class

    name = default_profile("quicx")
    profiles = {p: load_profile(p) for p in profile_names("quicx")}
    docs = "; ".join(f"{p}: {prof.doc.rstrip('.')}" for p, prof in profiles.items())
    classes = ", ".join(f"{default_largest_class(prof.model)} bytes in {p}"
                        for p, prof in profiles.items())
    return name, profiles[name].model.default_port, DEFAULT_POOL_BYTES, docs, classes


_QX_PROFILE, _QX_PORT, _QX_POOL, _QX_DOCS, _QX_CLASSES = _serve_defaults()


@serve.command("quicx")
@address_options(_QX_PORT)
@click.option("--profile", "-p", type=click.Choice(profile_names("quicx")), default=_QX_PROFILE,
              show_default=True,
              help=f"Protocol profile to speak ({_QX_DOCS}). Frames of another profile are "
                   "refused with the error this profile documents.")
@click.option("--pool-bytes", type=click.IntRange(min=1), default=_QX_POOL, show_default=True,
              metavar="N",
              help="Size of the task pool in bytes. Queued and running tasks hold a slot of a "
                   "power-of-two size class until their DONE or FAILED; a SUBMIT that finds no "
                   "free slot gets MSG_ERROR QUEUE_FULL. Rounded down to whole pages of the "
                   f"largest class ({_QX_CLASSES}; a larger task gets PAYLOAD_TOO_LARGE); at "
                   "least one page.")
@click.option("--task-types", metavar="A,B,...", default=None,
              help="Comma-separated task types to accept; a SUBMIT of any other type gets "
                   "MSG_ERROR UNKNOWN_TASK_TYPE. Default: every type.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True,
              help="Log level of the daemon's messages on stderr (info: requeues and failed "
                   "tasks; debug: every refused frame).")
@flow_options
def serve_quicx(host: str, port: int, profile: str, pool_bytes: int, task_types: str | None,
                log_level: str, partial_frame_timeout: float, backlog: int) -> None:
    """Run the quicx reference daemon: producers SUBMIT tasks, workers READY / DONE /
    FAILED, monitors STATS, all on one TCP port, with the behaviour of --profile.

    Prints the bound address, then serves until Ctrl-C or SIGTERM.
    """
    import logging

    from ..reference_server.quicx import QuicxServer

    prof = load(profile)
    types = None
    if task_types is not None:
        types = [t.strip() for t in task_types.split(",")]
        limit = prof.limits["task_type_bytes"].max
        bad = [t for t in types if not t or len(t.encode("utf-8")) > limit]
        if bad:
            raise click.BadParameter(f"task types must be 1 to {limit} UTF-8 bytes: {bad!r}",
                                     param_hint="--task-types")
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = QuicxServer(prof, host, port, pool_bytes=pool_bytes, task_types=types,
                             partial_frame_timeout=partial_frame_timeout or None, backlog=backlog)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pool-bytes") from None

    def started(bound: str) -> None:
        pool = server.engine.pool
        click.echo(f"quicx daemon ({prof.name}) listening on {bound}; pool "
                   f"{pool.bytes_total} bytes in classes {', '.join(map(str, pool.classes))}; "
                   f"task types: {', '.join(types) if types else 'any'}")

    def stopped() -> None:
        stats = server.stats()
        click.echo(f"quicx daemon stopped ({stats.accepted} accepted, {stats.done} done, "
                   f"{stats.failed} failed, {stats.queue_depth} still queued)")

    _run_until_signal(server, host, port, started, stopped)


_BQ_PROFILE = default_profile("bunqueue")
_BQ_PORT = load_profile(_BQ_PROFILE).model.default_port


@serve.command("bunqueue")
@address_options(_BQ_PORT)
@click.option("--profile", "-p", type=click.Choice(profile_names("bunqueue")),
              default=_BQ_PROFILE, show_default=True, help="Protocol profile to speak.")
@click.option("--data-path", type=click.Path(dir_okay=False), default=None,
              help="Keep jobs in this SQLite file (WAL); without it, jobs live in memory.")
@click.option("--auth-tokens", metavar="T1,T2,...", default=None,
              help="Comma-separated tokens; when given, every connection must send Auth with "
                   "one of them before any other command (empty entries are dropped).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True,
              help="Log level of the server's messages on stderr.")
@click.option("--http-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve the HTTP API (health, metrics, jobs, webhook delivery) on this "
                   "port of --host (bunqueue uses 6790); 0 picks a free port. Off by default.")
@click.option("--http-allowed-origin", "http_allowed_origins", multiple=True,
              metavar="SCHEME://HOST[:PORT]",
              help="An Origin whose POSTs and WebSocket upgrades the HTTP API serves besides "
                   "its own (repeatable; '*' allows any). Requests without Origin are always "
                   "served.")
@click.option("--http-allowed-host", "http_allowed_hosts", multiple=True, metavar="NAME",
              help="A Host name the HTTP API serves besides loopback names and addresses "
                   "(repeatable; '*' allows any), e.g. the name it is reached by.")
@click.option("--stall-interval", type=click.IntRange(1, None), default=None, metavar="MS",
              help="Milliseconds without a heartbeat before an active job is stalled "
                   "(default: the profile's worker_defaults stallInterval).")
@click.option("--max-stalls", type=click.IntRange(1, None), default=None,
              help="Stalls after which a job goes to the dead-letter queue (default: the "
                   "profile's worker_defaults maxStalls).")
@flow_options
def serve_bunqueue(host: str, port: int, profile: str, auth_tokens: str | None,
                   data_path: str | None, log_level: str, http_port: int | None,
                   stall_interval: int | None, max_stalls: int | None,
                   partial_frame_timeout: float, backlog: int,
                   http_allowed_origins: tuple[str, ...] = (),
                   http_allowed_hosts: tuple[str, ...] = ()) -> None:
    """Run the bunqueue reference server: all commands of --profile over TCP, pipelined,
    with long polls and the authentication gate; in memory, or in a SQLite file with
    --data-path (durable pushes are on disk before they are answered).

    Prints the bound address, then serves until Ctrl-C or SIGTERM.
    """
    import logging

    from ..reference_server.bunqueue import BunqueueServer, EngineConfig, tune_gc

    prof = load(profile)
    config = EngineConfig(stall_interval_ms=stall_interval, max_stalls=max_stalls)
    tokens = [t.strip() for t in auth_tokens.split(",") if t.strip()] if auth_tokens else []
    if auth_tokens is not None and not tokens:
        raise click.BadParameter("no token given", param_hint="--auth-tokens")
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = BunqueueServer(prof, host, port, auth_tokens=tokens, data_path=data_path,
                                http_port=http_port, config=config, backlog=backlog,
                                partial_frame_timeout=partial_frame_timeout or None)
    except Exception as exc:  # noqa: BLE001 - an unusable data file is the user's to fix
        raise click.ClickException(f"cannot open --data-path {data_path}: {exc}") from None
    # Read by the HttpFrontend it starts (with getattr: BunqueueServer does not declare them).
    server.http_allowed_origins = http_allowed_origins  # type: ignore[attr-defined]
    server.http_allowed_hosts = http_allowed_hosts  # type: ignore[attr-defined]

    tune_gc()

    def started(bound: str) -> None:
        click.echo(f"bunqueue server ({prof.name}) listening on {bound}; "
                   f"storage: {f'sqlite {data_path}' if data_path else 'memory'}; "
                   f"auth: {f'{len(tokens)} token(s)' if tokens else 'off'}")
        if server.http is not None:
            click.echo(f"bunqueue HTTP API listening on {server.http.url}")

    _run_until_signal(server, host, port, started, lambda: click.echo("bunqueue server stopped"))
