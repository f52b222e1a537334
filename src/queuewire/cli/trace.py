"""``queuewire trace``: record traffic, import pcap captures, analyse recordings (queuewire.trace)."""

from __future__ import annotations

import click

from ._common import PROTOCOLS, console, err_console, load, profile_option
from .tap import (
    duration_opt,
    listen_opt,
    protocol_opt,
    proxy_setup,
    rotate_opt,
    run_tap,
    upstream_opt,
)


@click.group()
def trace() -> None:
    """Recorded traffic: record it, import it from pcap, validate it at any scale.

    Recordings are directories of trace files in the format of spec/trace.yaml (what
    `queuewire tap --record` writes): one connection's frames per file, both directions, with
    nanosecond timestamps; credentials (request fields the spec marks x-secret) are
    recorded as stars of their length. `trace analyze` validates them with the tap's own decoder, on
    Spark (local mode by default, any cluster with --master) or in this process.
    """


@trace.command()
@protocol_opt
@listen_opt
@upstream_opt
@click.option("--out", "out_dir", required=True, metavar="DIR",
              type=click.Path(file_okay=False), help="The directory the trace files go into.")
@profile_option()
@rotate_opt
@duration_opt
def record(protocol: str, listen: str, upstream: str, out_dir: str, profile: str | None,
           rotate_bytes: int | None, duration: float | None) -> None:
    """Record the traffic between clients and a server, as the tap does, without verdicts.

    A transparent proxy from --listen to --upstream that passes every byte on unchanged and
    writes it, framed, into --out (sharded by connection, rotated by size). Analyse the
    recording later with `queuewire trace analyze`. Stops on Ctrl-C, SIGTERM or --duration,
    then prints what it recorded.
    """
    prof, listen_host, listen_port, up_host, up_port = proxy_setup(protocol, listen, upstream,
                                                                   profile)
    summary = run_tap(protocol, prof, listen_host, listen_port, up_host, up_port, out_dir,
                      rotate_bytes, None, 4 * 1024 * 1024, duration)
    t = summary["totals"]
    console.print(f"recorded {t['connections']} connection(s), "
                  f"{t['frames']['c2s']} + {t['frames']['s2c']} frames (client to server + "
                  f"server to client), {t['bytes']['c2s'] + t['bytes']['s2c']} bytes, "
                  f"{t['gaps']} gap(s) into {out_dir}")
    console.print(f"profile: {summary['profile_choice']['line']}", highlight=False, markup=False,
                  soft_wrap=True)


@trace.command("import-pcap")
@click.argument("capture", type=click.Path(exists=True, dir_okay=False))
@click.option("--port", type=click.IntRange(1, 65535), required=True,
              help="The server's TCP port: traffic to it is client to server.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True)
@click.option("--out", "out_dir", required=True, metavar="DIR",
              type=click.Path(file_okay=False), help="The directory the trace files go into.")
@click.option("--host", metavar="ADDRESS",
              help="Only the server at this address (default: any address with --port).")
@profile_option()
@click.option("--rotate-bytes", type=click.IntRange(min=1024), metavar="N",
              help="Rotate each connection's trace file before it passes N bytes.")
def import_pcap(capture: str, port: int, protocol: str, out_dir: str, host: str | None,
                profile: str | None, rotate_bytes: int | None) -> None:
    """Convert a pcap or pcapng CAPTURE (tcpdump, Wireshark) into trace files.

    Each TCP connection to --port becomes a recorded connection: segments are reassembled by
    sequence number (out of order, retransmitted and overlapping ones included), cut into
    frames as the tap cuts them, and timestamped with the capture's times. Bytes the capture
    lost are recorded as `missing` gaps (after one, that direction's framing is lost).

    Without --profile the profile is found from the traffic (the Hello reply, pushed events,
    commands and opcodes only one profile defines) and printed with its evidence; with
    nothing to tell the profiles apart, the protocol's default is kept.
    """
    from ..trace.pcap import PcapError
    from ..trace.pcap import import_pcap as run_import

    if profile is not None:
        prof = load(profile)
        if prof.protocol != protocol:
            raise click.UsageError(f"profile {prof.name} is not a {protocol} profile")
    try:
        stats = run_import(capture, port=port, out_dir=out_dir, protocol=protocol,
                           profile=profile, host=host, rotate_bytes=rotate_bytes)
    except PcapError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.UsageError(f"{capture}: {exc.strerror or exc}") from None
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(stats.skipped.items())) or "none"
    console.print(
        f"{stats.format} ({', '.join(stats.link_types)}): {stats.packets} packets, "
        f"{stats.tcp_packets} TCP segments on port {port}, {stats.connections} connection(s); "
        f"{stats.frames['c2s']} + {stats.frames['s2c']} frames (client to server + server to "
        f"client), {stats.gaps} gap(s), {sum(stats.missing_bytes.values())} byte(s) missing "
        f"from the capture, {stats.duplicate_bytes} retransmitted byte(s) dropped; packets "
        f"skipped: {skipped}" + ("; the file ends inside a packet" if stats.truncated else ""))
    console.print(f"profile: {stats.profile_choice['line']}", highlight=False, markup=False,
                  soft_wrap=True)
    console.print(f"trace files in {out_dir}; analyse with: queuewire trace analyze {out_dir} "
                  f"--out DIR")


@trace.command()
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...")
@click.option("--out", "out_dir", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Where the Parquet tables (frames, pairs, violations, conns), summary.json "
                   "and summary.html go; must be empty or absent.")
@click.option("--engine", type=click.Choice(("spark", "local")), default="spark",
              show_default=True,
              help="spark: PySpark (local mode unless --master); local: this process, for a "
                   "quick look at a capture that fits in memory.")
@click.option("--master", metavar="URL",
              help="The Spark master: local[*] (default), local[N], spark://HOST:PORT, yarn...")
@click.option("--protocol", type=click.Choice(PROTOCOLS),
              help="Refuse recordings of another protocol (default: what the files say).")
@profile_option()
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE",
              help="A Spark configuration setting (repeatable), e.g. spark.driver.memory=4g.")
@click.option("--no-html", is_flag=True, help="Do not write summary.html.")
def analyze(captures: tuple[str, ...], out_dir: str, engine: str, master: str | None,
            protocol: str | None, profile: str | None, confs: tuple[str, ...],
            no_html: bool) -> None:
    """Validate recorded traffic: every frame decoded, judged and paired.

    CAPTURE is a trace directory (searched for *.qwtrace) or a trace file; give several to
    analyse them together (pcap captures: convert them first with `trace import-pcap`).
    Frames are judged under --profile, else the profile their traffic shows (the Hello
    reply, pushed events, commands and opcodes only one profile defines; printed with its
    evidence), else the one they were recorded under, by the tap's own decoder, with the
    conformance runner's requirement ids: FAIL for a MUST the documents state, NON-STRICT
    for a SHOULD, INFO for what they leave open. Prints the summary; the exit status is 1
    when a FAIL was found, else 0.
    """
    from ..traffic.trace_format import TraceError

    if master and engine != "spark":
        raise click.UsageError("--master needs --engine spark")
    conf: dict[str, str] = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--conf")
        conf[key] = value
    if profile:
        load(profile)
    from rich.markup import escape

    from ..trace.analyze import analyze as run_analyze

    def progress(msg: str) -> None:
        err_console.print(f"[dim]{escape(msg)}[/]")
    try:
        summary = run_analyze(list(captures), out_dir, engine=engine, master=master,
                              protocol=protocol, profile=profile, html=not no_html,
                              progress=progress, spark_conf=conf)
    except TraceError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.UsageError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
    except RuntimeError as exc:   # SparkUnavailable: what to install
        if type(exc).__name__ != "SparkUnavailable":
            raise
        raise click.UsageError(str(exc)) from None
    _print(summary, out_dir, html=not no_html)
    if summary["verdict"] == "FAIL":
        raise SystemExit(1)


def _print(summary: dict, out_dir: str, *, html: bool) -> None:
    from rich.table import Table

    t = summary["totals"]
    v = t["violations"]
    colour = "red" if summary["verdict"] == "FAIL" else "green"
    choice = summary.get("profile_choice")
    if choice:
        console.print(f"profile: {choice['line']}", highlight=False, markup=False,
                  soft_wrap=True)
    console.print(f"[bold {colour}]{summary['verdict']}[/] {summary['protocol']} "
                  f"({summary['profile']}): {t['connections']} connection(s), "
                  f"{t['frames']['c2s'] + t['frames']['s2c']} frames, {t['requests']} requests, "
                  f"{t['pairs']} paired ({t['split_pairs']} across files), {t['errors']} error "
                  f"replies, {t['unanswered']} unanswered, {t['gaps']} gap(s); violations "
                  f"FAIL {v['FAIL']}, NON-STRICT {v['NON-STRICT']}, INFO {v['INFO']} "
                  f"[dim]({summary['engine']}, {summary['elapsed_s']} s)[/]")
    if summary["commands"]:
        table = Table("command", "requests", "pairs", "errors", "p50 µs", "p95 µs", "p99 µs",
                      title="per command")
        for name, c in sorted(summary["commands"].items(), key=lambda kv: -kv[1]["requests"]):
            lat = c["latency_us"]
            table.add_row(name, str(c["requests"]), str(c["pairs"]), str(c["errors"]),
                          *(str(lat[p]) if lat[p] is not None else "-"
                            for p in ("p50", "p95", "p99")))
        console.print(table)
    if summary["requirements"]:
        table = Table("level", "requirement", "kind", "count", title="violations by requirement")
        for r in summary["requirements"]:
            table.add_row(r["level"], r["requirement"] or "-", r["kind"] or "-", str(r["count"]))
        console.print(table)
    console.print(f"tables and summary.json in {out_dir}"
                  + (f"; open {out_dir}/summary.html" if html else ""))
