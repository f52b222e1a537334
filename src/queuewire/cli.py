"""The ``queuewire`` command line: a thin click shell over the spec, codecs and vectors.

Every command takes ``--profile`` where a profile matters. Output meant for people is drawn
with rich; output meant for programs (``decode``, ``spec export``) is JSON on stdout. Errors
in the user's input (an unknown profile, unreadable file, malformed hex) end with a one-line
message and exit status 2, never a traceback; protocol errors in decoded bytes are reported
as data, with their requirement ids, and a framing error makes ``decode`` exit 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .conformance.known_failing import KNOWN_FAILING_HELP, read_known_failing
from .spec import SpecError, default_profile, load_profile, profile_names

# Tables are for reading; when stdout is not a terminal, do not squeeze them into 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)
PROTOCOLS = ("bunqueue", "quicx")


def _load(name: str) -> Any:
    try:
        return load_profile(name)
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None


def _profile_option(**kw: Any) -> Any:
    return click.option("--profile", "-p", metavar="PROFILE", help=(
        "Spec profile: " + ", ".join(profile_names()) + "."), **kw)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="queuewire")
def main() -> None:
    """queuewire: spec, codecs and conformance tools for the bunqueue and quicx protocols.

    The spec in spec/ is the single source of truth; every command here reads it.
    """


# -- spec -------------------------------------------------------------------------------------
@main.group()
def spec() -> None:
    """Inspect, check and export the protocol spec."""


@spec.command("list")
@_profile_option()
def spec_list(profile: str | None) -> None:
    """List the commands (bunqueue) or message types (quicx) of a profile.

    Without --profile, lists the default profile of each protocol.
    """
    names = [profile] if profile else [default_profile(p) for p in PROTOCOLS]
    for name in names:
        prof = _load(name)
        if prof.protocol == "bunqueue":
            _list_bunqueue(prof)
        else:
            _list_quicx(prof)


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    """A table whose last column (the doc line) is cut with an ellipsis; the others keep
    their natural width, so codes and names stay readable in any terminal."""
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns[:-1]):
        width = max([len(col)] + [len(r[i]) for r in rows])
        table.add_column(col, no_wrap=True, min_width=width)
    table.add_column(columns[-1], overflow="ellipsis", no_wrap=True, max_width=72)
    for row in rows:
        table.add_row(*row)
    return table


def _list_bunqueue(prof: Any) -> None:
    commands = prof.model.commands
    rows = [(c.name, c.category, ", ".join(f for f in c.required_fields if f != "cmd"),
             c.requirement, c.doc) for c in commands.values()]
    console.print(_table(f"{prof.name}: {len(commands)} commands",
                         ("command", "category", "required fields", "requirement", "doc"), rows))


def _list_quicx(prof: Any) -> None:
    messages = prof.tree.get("messages") or {}
    rows = []
    for name, msg in sorted(messages.items(), key=lambda kv: kv[1].get("code", 0)):
        code = msg.get("code")
        note = " (reserved)" if msg.get("reserved") else ""
        rows.append((f"0x{code:02X}" if isinstance(code, int) else str(code), name + note,
                     _roles(msg.get("from")), _roles(msg.get("to")), str(msg.get("payload", "")),
                     str(msg.get("doc", ""))))
    console.print(_table(f"{prof.name}: {len(messages)} message types",
                         ("code", "message", "from", "to", "payload", "doc"), rows))


def _roles(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value or "")


@spec.command("show")
@click.argument("name")
@_profile_option()
def spec_show(name: str, profile: str | None) -> None:
    """Show one element: a command, message, requirement id, limit or definition.

    NAME is looked up in the given profile, or in each protocol's default profile.
    """
    names = [profile] if profile else [default_profile(p) for p in PROTOCOLS]
    for pname in names:
        prof = _load(pname)
        found = _find(prof, name)
        if found is not None:
            kind, value = found
            console.print(f"[bold]{name}[/bold] ({kind} in {prof.name})")
            console.print_json(json.dumps(value, default=str))
            return
    raise click.UsageError(f"{name!r} is not a command, message, requirement, limit or "
                           f"definition of {', '.join(names)}")


def _find(prof: Any, name: str) -> tuple[str, Any] | None:
    tree = prof.tree
    if name in prof.requirements:
        return "requirement", tree["requirements"][name]
    if prof.protocol == "bunqueue" and name in prof.model.commands:
        cmd = prof.model.commands[name]
        return "command", {"category": cmd.category, "doc": cmd.doc, "doc-ref": cmd.doc_ref,
                           "requirement": cmd.requirement, "request": dict(cmd.request),
                           "response": dict(cmd.response)}
    for section in ("messages", "limits", "definitions", "errors", "protocol_errors",
                    "error_codes", "semantics"):
        if name in (tree.get(section) or {}):
            return section.rstrip("s"), tree[section][name]
    return None


@spec.command("lint")
@_profile_option()
def spec_lint(profile: str | None) -> None:
    """Check the spec: docs on every element, requirements cited and quoted, schemas valid,
    no opcode collisions. Exits 1 when anything is wrong."""
    from .spec.lint import lint, sources_dir

    names = [profile] if profile else profile_names()
    issues = lint(names)
    for issue in issues:
        err_console.print(f"[red]✗[/red] {issue}")
    counts = []
    for name in names:
        try:
            prof = load_profile(name)
        except SpecError:
            continue
        counts.append(f"{name}: {len(prof.requirements)} requirements")
    src = sources_dir()
    note = "quotes checked against " + str(src) if src else "source documents not found: quotes not checked"
    if issues:
        err_console.print(f"spec lint: {len(issues)} issue(s)")
        sys.exit(1)
    console.print(f"spec lint: clean ({'; '.join(counts)}; {note})")


@spec.command("export")
@click.option("--format", "fmt", type=click.Choice(["json"]), default="json", show_default=True)
@_profile_option()
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default="-",
              help="Write here instead of stdout.")
def spec_export(fmt: str, profile: str | None, output: str) -> None:
    """Export resolved profiles ($limit substituted, overlays applied) as JSON."""
    names = [profile] if profile else profile_names()
    doc = {"profiles": {}}
    for name in names:
        prof = _load(name)
        doc["profiles"][name] = {"protocol": prof.protocol, "doc": prof.doc,
                                 "overlays": list(prof.overlays), "spec": _plain(prof.tree)}
        if prof.protocol == "bunqueue":
            doc["profiles"][name]["schemas"] = {
                c.name: {"request": _plain(c.request), "response": _plain(c.response)}
                for c in prof.model.commands.values()}
    text = json.dumps(doc, indent=2, sort_keys=False)
    with click.open_file(output, "w") as fh:
        fh.write(text + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# -- decode -----------------------------------------------------------------------------------
def _display(value: Any) -> Any:
    """A decoded value as JSON for display: undefined, binary and timestamps made explicit."""
    from .codecs.validation import jsonable

    return jsonable(value)


def _read_input(path: str, hex_input: bool) -> bytes:
    try:
        with click.open_file(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise click.UsageError(f"cannot read {path}: {exc.strerror}") from None
    if hex_input:
        text = data.decode("ascii", "replace")
        cleaned = "".join(text.split())
        try:
            return bytes.fromhex(cleaned)
        except ValueError as exc:
            raise click.UsageError(f"--hex input is not hexadecimal: {exc}") from None
    return data


@main.command()
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True)
@_profile_option()
@click.option("--hex", "hex_input", is_flag=True, help="Input is hex text (whitespace ignored).")
@click.option("--chunk", type=int, default=65536, show_default=True,
              help="Feed the decoder this many bytes at a time.")
@click.option("--command", "reply_to", metavar="CMD",
              help="bunqueue: validate replies as replies to CMD.")
@click.option("--role", type=click.Choice(["daemon", "producer", "worker", "monitor"]),
              default="daemon", show_default=True,
              help="quicx: the side receiving the bytes (daemon for client-to-daemon traffic, "
                   "a client role for daemon-to-client traffic).")
@click.argument("file", default="-")
def decode(protocol: str, profile: str | None, hex_input: bool, chunk: int, reply_to: str | None,
           role: str, file: str) -> None:
    """Decode one direction of a connection from FILE (or - for stdin).

    Prints one JSON line per frame: offset, length, the decoded message and the verdicts
    (each a requirement id, level, JSON path and message). A framing error (the stream cannot
    be trusted past it) prints an error line and exits 1; a bad payload inside an intact
    frame is reported and decoding goes on.
    """
    prof = _load(profile or default_profile(protocol))
    if prof.protocol != protocol:
        raise click.UsageError(f"profile {prof.name} is a {prof.protocol} profile, not {protocol}")
    data = _read_input(file, hex_input)
    if chunk < 1:
        raise click.UsageError("--chunk must be at least 1")
    if protocol == "bunqueue":
        code = _decode_bunqueue(prof, data, chunk, reply_to)
    else:
        code = _decode_quicx(prof, data, chunk, role)
    sys.exit(code)


def _emit(record: dict) -> None:
    click.echo(json.dumps(record, ensure_ascii=False))


def _drive(feed: Any, eof: Any, describe: Any, data: bytes, chunk: int) -> int:
    """Feed ``data`` to a sans-IO decoder ``chunk`` bytes at a time and print one JSON line
    per frame (``describe(frame)``) or error. A ``reply`` error consumed only its frame, so
    decoding goes on; a ``close`` error, or a stream ending inside a frame, ends with 1."""
    from .codecs.errors import ProtocolError

    index = 0

    def frames(items: list) -> None:
        nonlocal index
        for item in items:
            _emit({"frame": index, **describe(item)})
            index += 1

    def error(exc: ProtocolError) -> None:
        nonlocal index
        _emit({"frame": index, "offset": exc.offset, "error": exc.as_dict()})
        index += 1

    pos, pending = 0, data[:chunk]
    while True:
        try:
            frames(feed(pending))
        except ProtocolError as exc:
            frames(exc.frames)
            error(exc)
            if exc.reaction == "close":
                return 1
            pending = b""
            continue
        pos += chunk
        if pos >= len(data):
            break
        pending = data[pos:pos + chunk]
    try:
        eof()
    except ProtocolError as exc:
        error(exc)
        return 1
    return 0


def _decode_bunqueue(prof: Any, data: bytes, chunk: int, reply_to: str | None) -> int:
    from .codecs.bunqueue import FrameDecoder
    from .codecs.validation import BunqueueValidator

    decoder = FrameDecoder(prof)
    validator = BunqueueValidator(prof)

    def describe(frame: Any) -> dict:
        msg = frame.value
        if "cmd" in msg or (reply_to is None and "ok" not in msg):
            kind, violations = "request", validator.request_violations(msg)
            extra = validator.extra_fields(str(msg.get("cmd")), msg)
        elif reply_to:
            kind, violations = "reply", validator.reply_violations(reply_to, msg)
            extra = validator.extra_fields(reply_to, msg, reply=True)
        else:  # a reply of unknown command: only the shared error-reply shape can be checked
            kind, extra = "reply", []
            violations = () if msg.get("ok") is True else validator.reply_violations("", msg)
        return {"offset": frame.offset, "length": frame.length, "kind": kind,
                "message": _display(msg), "verdicts": [v.as_dict() for v in violations],
                "extra_fields": extra}

    return _drive(decoder.feed_frames, decoder.eof, describe, data, chunk)


def _decode_quicx(prof: Any, data: bytes, chunk: int, role: str) -> int:
    from .codecs.quicx import QuicxDecoder

    decoder = QuicxDecoder(prof, role)

    def describe(message: Any) -> dict:
        return {"offset": message.offset, "length": len(message.raw), **message.as_dict()}

    return _drive(decoder.feed, decoder.eof, describe, data, chunk)


# -- serve ------------------------------------------------------------------------------------
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


@main.group()
def serve() -> None:
    """Run a reference daemon in the foreground (Ctrl-C or SIGTERM stops it)."""


def _serve_defaults() -> tuple[str, int, int, str, str]:
    """Defaults and help details of ``serve quicx``, read from the spec and the engine."""
    from .reference_server.quicx_engine import DEFAULT_POOL_BYTES, default_largest_class

    name = default_profile("quicx")
    profiles = {p: load_profile(p) for p in profile_names("quicx")}
    docs = "; ".join(f"{p}: {prof.doc.rstrip('.')}" for p, prof in profiles.items())
    classes = ", ".join(f"{default_largest_class(prof.model)} bytes in {p}"
                        for p, prof in profiles.items())
    return name, profiles[name].model.default_port, DEFAULT_POOL_BYTES, docs, classes


_QX_PROFILE, _QX_PORT, _QX_POOL, _QX_DOCS, _QX_CLASSES = _serve_defaults()


@serve.command("quicx")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (an IP address or host name; 0.0.0.0 for every "
                   "interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=_QX_PORT, show_default=True,
              help="TCP port to listen on (the spec's default_port); 0 picks a free port, "
                   "which is printed.")
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
def serve_quicx(host: str, port: int, profile: str, pool_bytes: int, task_types: str | None,
                log_level: str) -> None:
    """Run the quicx reference daemon: producers SUBMIT tasks, workers READY / DONE /
    FAILED, monitors STATS, all on one TCP port, with the behaviour of --profile.

    Prints the bound address, then serves until Ctrl-C or SIGTERM.
    """
    import logging

    from .reference_server.quicx import QuicxServer

    prof = _load(profile)
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
        server = QuicxServer(prof, host, port, pool_bytes=pool_bytes, task_types=types)
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
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (an IP address or host name; 0.0.0.0 for every "
                   "interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=_BQ_PORT, show_default=True,
              help="TCP port to listen on (the spec's default_port); 0 picks a free port, "
                   "which is printed.")
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
@click.option("--stall-interval", type=click.IntRange(1, None), default=None, metavar="MS",
              help="Milliseconds without a heartbeat before an active job is stalled "
                   "(default: the profile's worker_defaults stallInterval).")
@click.option("--max-stalls", type=click.IntRange(1, None), default=None,
              help="Stalls after which a job goes to the dead-letter queue (default: the "
                   "profile's worker_defaults maxStalls).")
def serve_bunqueue(host: str, port: int, profile: str, auth_tokens: str | None,
                   data_path: str | None, log_level: str, http_port: int | None,
                   stall_interval: int | None, max_stalls: int | None) -> None:
    """Run the bunqueue reference server: all commands of --profile over TCP, pipelined,
    with long polls and the authentication gate; in memory, or in a SQLite file with
    --data-path (durable pushes are on disk before they are answered).

    Prints the bound address, then serves until Ctrl-C or SIGTERM.
    """
    import logging

    from .reference_server.bunqueue import BunqueueServer, tune_gc
    from .reference_server.bunqueue_engine import EngineConfig

    prof = _load(profile)
    config = EngineConfig(stall_interval_ms=stall_interval, max_stalls=max_stalls)
    tokens = [t.strip() for t in auth_tokens.split(",") if t.strip()] if auth_tokens else []
    if auth_tokens is not None and not tokens:
        raise click.BadParameter("no token given", param_hint="--auth-tokens")
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = BunqueueServer(prof, host, port, auth_tokens=tokens, data_path=data_path,
                                http_port=http_port, config=config)
    except Exception as exc:  # noqa: BLE001 - an unusable data file is the user's to fix
        raise click.ClickException(f"cannot open --data-path {data_path}: {exc}") from None

    tune_gc()

    def started(bound: str) -> None:
        click.echo(f"bunqueue server ({prof.name}) listening on {bound}; "
                   f"storage: {f'sqlite {data_path}' if data_path else 'memory'}; "
                   f"auth: {f'{len(tokens)} token(s)' if tokens else 'off'}")
        if server.http is not None:
            click.echo(f"bunqueue HTTP API listening on {server.http.url}")

    _run_until_signal(server, host, port, started, lambda: click.echo("bunqueue server stopped"))


# -- conform ----------------------------------------------------------------------------------
def _conform_profiles(protocol: str, profiles: tuple[str, ...]) -> list[str]:
    names = list(profiles) or [default_profile(protocol)]
    for name in names:
        prof = _load(name)
        if prof.protocol != protocol:
            raise click.UsageError(f"profile {name} is a {prof.protocol} profile, not {protocol}")
    return list(dict.fromkeys(names))


@main.group()
def conform() -> None:
    """Black-box conformance of a server over TCP, requirement by requirement.

    `conform server` runs the suite against a server (or the embedded reference server) and
    reports every case with its verdict (PASS, NON-STRICT, FAIL, UNIMPLEMENTED, INFO, ERROR);
    `conform replay` sends a saved case's bytes to any server again.
    """


@conform.command("server", short_help="Run the conformance suite against servers and report.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True, help="Protocol to test.")
@click.option("--target", "targets", metavar="HOST:PORT|embedded", multiple=True, required=True,
              help="Server to test; 'embedded' starts the reference server in this process on "
                   "an ephemeral port. Repeat to test several servers: the report shows them "
                   "side by side.")
@click.option("--profile", "-p", "profiles", metavar="PROFILE", multiple=True,
              help="Spec profile (default: the protocol's default: "
                   + ", ".join(f"{p} {default_profile(p)}" for p in PROTOCOLS) + "; all: "
                   + ", ".join(profile_names()) + "). Repeat to run every target under several "
                   "profiles (one column per target and profile).")
@click.option("--http-target", "http_targets", metavar="HOST:PORT", multiple=True,
              help="The server's HTTP API (bunqueue), for the HTTP cases; without it they are "
                   "INFO. Repeat for several --target: the n-th goes with the n-th --target "
                   "that is not 'embedded' (the embedded server sets its own).")
@click.option("--auth-token", metavar="TOKEN", default=None,
              help="Token for cases that authenticate (bunqueue Auth); with 'embedded', the "
                   "reference server is started requiring it.")
@click.option("--strict", is_flag=True,
              help="Also fail the run on NON-STRICT (a SHOULD not followed) and UNIMPLEMENTED.")
@click.option("--select", "select", metavar="GLOB", multiple=True,
              help="Run only cases whose id matches (fnmatch glob, e.g. 'bunqueue.frame.*'); "
                   "repeatable.")
@click.option("--skip", "skip", metavar="GLOB", multiple=True,
              help="Leave out cases whose id matches; repeatable.")
@click.option("--known-failing", "known_failing", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False), default=None, help=KNOWN_FAILING_HELP)
@click.option("--timeout", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              metavar="S", help="Seconds to wait for each expected reply or close.")
@click.option("--report-dir", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Write report.html, report.json, junit.xml and cases/<case-id>.json (the "
                   "replay file) for every case that did not pass.")
@click.option("--junit", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write a JUnit XML report (a testsuite per target).")
@click.option("--json", "json_out", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON report (every case, transcripts as hex, coverage).")
@click.option("--html", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write the self-contained HTML report.")
def conform_server(protocol: str, targets: tuple[str, ...], profiles: tuple[str, ...],
                   auth_token: str | None, strict: bool, select: tuple[str, ...],
                   skip: tuple[str, ...], known_failing: str | None, timeout: float,
                   report_dir: str | None, junit: str | None, json_out: str | None,
                   html: str | None, http_targets: tuple[str, ...] = ()) -> None:
    """Run the conformance suite against each --target and report.

    Prints a live progress bar, then per target the count of each verdict, the requirement
    coverage and every case that did not pass with its requirement, reason and a one-line
    reproduction.

    Exit status: 0 when no case fails the run (a FAIL, i.e. a MUST violated, or an ERROR;
    with --strict also NON-STRICT and UNIMPLEMENTED; a known-failing case that passes also
    fails it), 1 otherwise, 2 for a usage error.

    \b
    Examples:
      queuewire conform server --protocol bunqueue --target 127.0.0.1:6789 --html r.html
      queuewire conform server --protocol quicx --target embedded --target 10.0.0.5:16381
      queuewire conform server --protocol bunqueue --target embedded --select 'bunqueue.frame.*'

    \b
    A --known-failing file:
      # deviations of our server, fixed one by one
      bunqueue.push.priority-order     # issue 12: ignores priority
      bunqueue.frame.too-large-close
    """
    from .conformance.report import exit_status, write_reports
    from .conformance.report.console import LiveProgress, print_summary
    from .conformance.runner import run_target_sync
    from .conformance.targets import parse_target

    names = _conform_profiles(protocol, profiles)
    for t in targets:
        try:
            parse_target(t)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--target") from None
    http_of = _conform_http_targets(targets, http_targets)
    known: dict[str, str] = {}
    if known_failing:
        try:
            known = read_known_failing(known_failing)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    runs = []
    with LiveProgress(err_console) as progress:
        for target in targets:
            for name in names:
                progress.new(f"{protocol} {target} ({name})")
                try:
                    run = run_target_sync(protocol, target, profile=name, auth_token=auth_token,
                                          strict=strict, select=select, skip=skip,
                                          known_failing=tuple(known), timeout=timeout,
                                          progress=progress, http_target=http_of.get(target))
                except ValueError as exc:  # a case file or option the runner refused
                    raise click.ClickException(str(exc)) from None
                runs.append(run)
    ran = {r.case.id for run in runs for r in run.results}
    for case_id in known:
        if case_id not in ran:
            err_console.print(f"[yellow]![/yellow] --known-failing {known_failing}: {case_id} "
                              "did not run (no such case, or not selected)", highlight=False)
    if not any(run.results for run in runs):
        raise click.UsageError("no case ran: check --select / --skip "
                               f"(select {list(select)}, skip {list(skip)})")
    print_summary(console, runs)
    written = write_reports(runs, report_dir=report_dir, junit=junit, json_path=json_out, html=html)
    cases_dir = Path(report_dir, "cases") if report_dir else None
    case_files = [p for p in written if cases_dir is not None and cases_dir in p.parents]
    for path in written:
        if path not in case_files:
            console.print(f"wrote {path}", highlight=False)
    if case_files:
        console.print(f"wrote {len(case_files)} case file(s) for `queuewire conform replay` "
                      f"under {cases_dir}", highlight=False)
    sys.exit(exit_status(runs))


def _conform_http_targets(targets: tuple[str, ...], http_targets: tuple[str, ...]
                          ) -> dict[str, str]:
    """--target -> its --http-target: the n-th HTTP target goes with the n-th external target."""
    from .conformance.httpapi import parse_http_target
    from .conformance.targets import EMBEDDED

    for h in http_targets:
        try:
            parse_http_target(h)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--http-target") from None
    external = [t for t in targets if t.strip() != EMBEDDED]
    if len(http_targets) > len(external):
        raise click.BadParameter(f"{len(http_targets)} --http-target for {len(external)} --target "
                                 "other than 'embedded'", param_hint="--http-target")
    return dict(zip(external, http_targets))


@conform.command("replay", short_help="Replay a saved case against a server; compare replies.")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--target", metavar="HOST:PORT", required=True,
              help="Server to send the recorded bytes to ('embedded' starts the reference "
                   "server of the file's protocol and profile).")
@click.option("--protocol", type=click.Choice(PROTOCOLS), default=None,
              help="Check that FILE is a case of this protocol (default: the file says).")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              metavar="S", help="Seconds to wait for each recorded reply.")
def conform_replay(file: str, target: str, protocol: str | None, timeout: float) -> None:
    """Replay a saved case (FILE: a cases/<case-id>.json written by --report-dir) against
    --target: the tester's recorded bytes, one TCP connection per recorded connection, in the
    recorded order and pace. Prints what the server answered then and now, side by side.

    Exit status: 0 when the replies match the recorded ones in kind (ok / error / push /
    message type / close), 1 when they differ, 2 for a bad file or option.
    """
    import asyncio

    from .conformance.replay import ReplayError, load_case_file, replay, short
    from .conformance.targets import embedded, parse_target
    from .conformance.wire import ConnectError

    try:
        case = load_case_file(file)
    except ReplayError as exc:
        raise click.UsageError(str(exc)) from None
    if protocol and case.protocol != protocol:
        raise click.UsageError(f"{file} is a {case.protocol} case, not {protocol}")
    try:
        where = parse_target(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None

    async def go() -> Any:
        if where == "embedded":
            async with embedded(case.protocol, case.profile) as (host, port):
                return await replay(case, host, port, timeout=timeout)
        host, port = where
        return await replay(case, host, port, timeout=timeout)

    try:
        result = asyncio.run(go())
    except ConnectError as exc:
        raise click.ClickException(str(exc)) from None
    table = Table(title=f"replay of {case.id} ({case.protocol}, {case.profile}; recorded "
                        f"against {case.target or '?'}, verdict {case.verdict or '?'})",
                  title_justify="left")
    table.add_column("conn", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column("recorded", overflow="fold")
    table.add_column(f"now ({target})", overflow="fold")
    for conn, old, new, ok in result.rows:
        table.add_row(str(conn), "[green]=[/green]" if ok else "[red]≠[/red]", Text(short(old)),
                      Text(short(new)))
    console.print(table)
    for w in result.warnings:
        err_console.print(f"[yellow]![/yellow] {w}", highlight=False)
    differ = sum(1 for *_, ok in result.rows if not ok)
    if differ:
        console.print(f"[red]replay: {differ} of {len(result.rows)} received item(s) differ in kind[/red]")
        sys.exit(1)
    console.print(f"[green]replay: all {len(result.rows)} received item(s) match in kind[/green]")


# -- vectors ----------------------------------------------------------------------------------
@main.group()
def vectors() -> None:
    """Generate and check the language-neutral test vectors in vectors/."""


@vectors.command("generate")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Output directory (default: vectors/ beside spec/).")
def vectors_generate(directory: str | None) -> None:
    """Regenerate every vector file from the spec (deterministic)."""
    from .vectors import generate_all

    for path, count in generate_all(directory):
        console.print(f"wrote {count:5d} vectors to {path}")


@vectors.command("check")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None)
def vectors_check(directory: str | None) -> None:
    """Run every vector through the codecs; exit 1 on any mismatch or stale file."""
    from .vectors import check_all

    failures, total = check_all(directory)
    for failure in failures:
        err_console.print(f"[red]✗[/red] {failure}")
    if failures:
        err_console.print(f"vectors: {len(failures)} of {total} failed")
        sys.exit(1)
    console.print(f"vectors: {total} checked, all pass")


if __name__ == "__main__":  # pragma: no cover
    main()
