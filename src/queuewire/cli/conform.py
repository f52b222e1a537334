"""``queuewire conform``: run the conformance suite against servers (``server``) and replay a
saved case (``replay``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..conformance.known_failing import KNOWN_FAILING_HELP, read_known_failing
from ..spec import default_profile, profile_names
from ._common import PROTOCOLS, console, err_console, load


def _conform_profiles(protocol: str, profiles: tuple[str, ...]) -> list[str]:
    names = list(profiles) or [default_profile(protocol)]
    for name in names:
        prof = load(name)
        if prof.protocol != protocol:
            raise click.UsageError(f"profile {name} is a {prof.protocol} profile, not {protocol}")
    return list(dict.fromkeys(names))


@click.group()
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
    from ..conformance.report import exit_status, write_reports
    from ..conformance.report.console import LiveProgress, print_summary
    from ..conformance.runner import run_target_sync
    from ..conformance.targets import parse_target

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
    from ..conformance.httpapi import parse_http_target
    from ..conformance.targets import EMBEDDED

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

    from ..conformance.replay import ReplayError, load_case_file, replay, short
    from ..conformance.targets import embedded, parse_target
    from ..conformance.wire import ConnectError

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
