"""``queuewire tap``: a transparent TCP proxy that validates live traffic (queuewire.tap)."""

from __future__ import annotations

import socket
from typing import Any

import click

from ..spec import default_profile
from ._common import PROTOCOLS, console, err_console, load, profile_option


def _address(value: str, option: str, *, resolve: bool) -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text:
        raise click.BadParameter(f"{value!r} is not HOST:PORT", param_hint=option)
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise click.BadParameter(f"port {port_text!r} is not a number", param_hint=option) from None
    if not 0 <= port <= 65535 or (option == "--upstream" and port == 0):
        raise click.BadParameter(f"port {port} is out of range", param_hint=option)
    if resolve:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise click.BadParameter(f"cannot resolve host {host!r}: {exc.strerror or exc}",
                                     param_hint=option) from None
    return host, port


def proxy_setup(protocol: str, listen: str, upstream: str, profile: str | None) -> tuple:
    """What a proxy command (`tap`, `trace record`) checks first: the profile given for
    ``protocol`` (None: found from the traffic) and the two addresses; (profile, listen
    host, port, upstream host, port)."""
    listen_host, listen_port = _address(listen, "--listen", resolve=False)
    up_host, up_port = _address(upstream, "--upstream", resolve=True)
    prof = load(profile) if profile else None
    if prof is not None and prof.protocol != protocol:
        raise click.UsageError(f"profile {prof.name} is not a {protocol} profile")
    return prof, listen_host, listen_port, up_host, up_port


# The options of a proxy (`tap`, `trace record`), shared.
protocol_opt = click.option("--protocol", type=click.Choice(PROTOCOLS), required=True)
listen_opt = click.option("--listen", default="127.0.0.1:0", show_default=True,
                          metavar="HOST:PORT",
                          help="Where clients connect (port 0 picks a free port, which is "
                               "printed).")
upstream_opt = click.option("--upstream", required=True, metavar="HOST:PORT",
                            help="The server every connection is passed on to.")
rotate_opt = click.option("--rotate-bytes", type=click.IntRange(min=1024), metavar="N",
                          help="Start a connection's next trace file before one passes N "
                               "bytes (default: spec/trace.yaml defaults.rotate_bytes, 64 MiB).")
duration_opt = click.option("--duration", type=click.FloatRange(min=0), metavar="SECONDS",
                            help="Stop after SECONDS (default: run until Ctrl-C or SIGTERM).")


@click.command()
@protocol_opt
@listen_opt
@upstream_opt
@profile_option()
@click.option("--record", "record_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Record the traffic into DIR in the trace format of spec/trace.yaml. "
                   "Credentials (request fields the spec marks x-secret) are recorded as "
                   "stars of their length.")
@rotate_opt
@click.option("--json", "json_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the summary as JSON when the tap stops.")
@click.option("--html", "html_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write a self-contained HTML report when the tap stops.")
@click.option("--max-frame-bytes", type=click.IntRange(min=64), metavar="N",
              help="Buffer at most N bytes of one frame for analysis; longer frames are "
                   "passed on and recorded raw (default: 64 MiB, bunqueue's max_frame_bytes).")
@click.option("--analysis-lag", type=click.IntRange(min=0), metavar="BYTES",
              default=4 * 1024 * 1024, show_default=True,
              help="While traffic flows, let up to BYTES (and at most 1 s) wait for "
                   "analysis so that it runs in the quiet moments and never delays "
                   "forwarding; 0 analyses at once (still in slices between reads). Past "
                   "32 MiB behind, reading pauses.")
@click.option("--forwarder", type=click.Choice(["threads", "epoll", "loop"]), default="threads",
              show_default=True,
              help="Where the bytes are forwarded: a process of its own, so the analysis "
                   "never delays them, with two threads per connection (threads: the least "
                   "latency) or one epoll thread for all (epoll: for many connections); or the "
                   "analyzer's own event loop (loop).")
@click.option("--analysis-nice", type=click.IntRange(0, 19), default=10, show_default=True,
              help="With a forwarding process (threads, epoll): once it runs, this process, "
                   "which only analyses, lowers its CPU priority by this much (nice), so on a "
                   "busy machine the forwarding, the server and its clients come first and the "
                   "verdicts wait; 0 keeps the priority.")
@duration_opt
def tap(protocol: str, listen: str, upstream: str, profile: str | None, record_dir: str | None,
        rotate_bytes: int | None, json_path: str | None, html_path: str | None,
        max_frame_bytes: int | None, analysis_lag: int, forwarder: str, analysis_nice: int,
        duration: float | None) -> None:
    """Proxy --listen to --upstream, passing every byte on unchanged, and judge the traffic.

    Both directions are decoded with the codecs of --protocol; requests are paired with
    their replies (bunqueue: reqId; quicx: order and task id) and every finding cites a
    requirement id: FAIL for a MUST the documents state, NON-STRICT for a SHOULD, INFO for what
    they leave open. A frame that cannot be decoded is reported and still passed on. The
    summary is printed when the tap stops (Ctrl-C, SIGTERM or --duration); the exit status
    is 1 if any finding is a FAIL, else 0.

    Without --profile the profile is found from the traffic: the analysis holds the first
    connections back (verdicts wait, the bytes are forwarded at once) until the server's
    frames tell the profiles apart (the Hello reply, pushed events, commands and opcodes
    only one profile defines), or 8 MiB were held, or the tap stops; then it judges them,
    and everything after, under the profile found, or the protocol's default when nothing
    told them apart. The summary says which, how and why.
    """
    prof, listen_host, listen_port, up_host, up_port = proxy_setup(protocol, listen, upstream,
                                                                   profile)
    summary = run_tap(protocol, prof, listen_host, listen_port, up_host, up_port, record_dir,
                      rotate_bytes, max_frame_bytes, analysis_lag, duration, forwarder,
                      analysis_nice)
    from ..tap.report import print_console, write_html, write_json

    print_console(summary, console)
    console.print(f"profile: {summary['profile_choice']['line']}", highlight=False, markup=False,
                  soft_wrap=True)
    if json_path:
        write_json(summary, json_path)
        console.print(f"JSON summary: {json_path}")
    if html_path:
        write_html(summary, html_path)
        console.print(f"HTML report: {html_path}")
    if summary["verdict"] == "FAIL":
        raise SystemExit(1)


def run_tap(protocol: str, prof: Any, listen_host: str, listen_port: int, up_host: str,
            up_port: int, record_dir: str | None, rotate_bytes: int | None,
            max_frame_bytes: int | None, analysis_lag: int, duration: float | None,
            forwarder: str = "threads", analysis_nice: int = 0) -> dict:
    """Run the tap (proxy, optional recorder, analyzer) until stopped; the analyzer's summary.

    ``queuewire tap`` and ``queuewire trace record`` both run it."""
    import asyncio
    import signal

    from ..tap.proxy import tap_server
    from ..traffic.analyzer import DEFAULT_MAX_FRAME, Analyzer
    from ..traffic.record import Recorder

    recorder = None
    if record_dir:
        try:
            recorder = Recorder(record_dir, protocol=protocol,
                                profile=prof.name if prof else default_profile(protocol),
                                rotate_bytes=rotate_bytes)
        except OSError as exc:
            raise click.UsageError(f"cannot record into {record_dir}: {exc.strerror}") from None

    def chosen(choice: Any) -> None:   # before the first record: the files' meta names it
        if recorder is not None:
            recorder.profile = choice.profile
    analyzer = Analyzer(protocol, prof, sink=recorder.write if recorder else None,
                        max_frame=max_frame_bytes or DEFAULT_MAX_FRAME, keep_events=False,
                        detect=prof is None, on_profile=chosen)
    shown = prof.name if prof else f"profile from the traffic, {default_profile(protocol)} " \
        "unless it tells"

    async def run() -> None:
        server = tap_server(analyzer, up_host, up_port, host=listen_host, port=listen_port,
                            lag_bytes=analysis_lag, forwarder=forwarder)
        try:
            await server.start()
        except OSError as exc:
            raise click.UsageError(f"cannot listen on {listen_host}:{listen_port}: "
                                   f"{exc.strerror or exc}") from None
        if analysis_nice and forwarder != "loop":
            import os
            os.nice(analysis_nice)  # the forwarder, started above, keeps its priority
        click.echo(f"queuewire tap ({shown}) listening on {server.listen}, upstream "
                   f"{up_host}:{up_port}" + (f", recording into {record_dir}" if record_dir else ""))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if duration is not None:
                try:
                    await asyncio.wait_for(stop.wait(), duration)
                except TimeoutError:
                    pass
            else:
                await stop.wait()
        finally:
            await server.stop()
            if server.analysis_errors:
                err_console.print(f"[yellow]{server.analysis_errors} analysis error(s) "
                                  "(traffic was still passed on; see the log)[/]")

    try:
        asyncio.run(run())
    finally:
        analyzer.settle()   # (the tap's stop settled it; a failed start did not)
        if recorder is not None:
            recorder.close()
    return analyzer.summary()
