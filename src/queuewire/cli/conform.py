"""``queuewire conform``: run the conformance suite against servers (``server``), re-run and
re-judge a saved case (``replay``), name the profile a server speaks (``detect``) and judge a
client under test against a conformance server (``client``)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..conformance.known_failing import KNOWN_FAILING_HELP, read_known_failing
from ..spec import default_profile, profile_names
from ._common import (
    PROTOCOLS,
    auth_token_option,
    check_server_auth,
    console,
    err_console,
    load,
)


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
    `conform replay` re-runs a saved case against any server and says what is fixed;
    `conform detect` names the profile a server speaks; `conform client` judges a client
    under test (a testee) against a conformance server with adversarial scenarios.
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
@auth_token_option("Token for cases that authenticate (bunqueue Auth); with 'embedded', the "
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
@click.option("--keep-residue", is_flag=True,
              help="Do not remove what the cases left on the server (queues, webhooks, crons, "
                   "workers): only list and report it. By default the run lists what the "
                   "server keeps before the first case and after the last, removes what "
                   "appeared and lists again.")
@click.option("--no-health-probes", "no_health_probes", is_flag=True,
              help="Do not probe the server's health (Ping, Stats, Prometheus, the lists) "
                   "after each case; a case that breaks the server is then not named.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              metavar="N",
              help="Run up to N cases at once against each target (each case keeps its own "
                   "connections and queues). A case marked exclusive in the suite (it reads or "
                   "changes server-wide state: statistics, workers, webhooks, the queue list, "
                   "quicx's one task queue) always runs alone, so verdicts equal a serial "
                   "run's; transcript timings then include other cases' load.")
@click.option("--report-dir", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Write report.html, report.json, junit.xml and cases/<case-id>.json (the "
                   "replay file) for every case that did not pass.")
@click.option("--junit", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write a JUnit XML report (a testsuite per target).")
@click.option("--json", "json_out", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON report (every case, transcripts as hex, coverage).")
@click.option("--html", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write the self-contained HTML report.")
@click.option("--html-transcripts", "html_transcripts", type=click.Choice(["all", "failing"]),
              default="failing", show_default=True,
              help="Which cases' wire transcripts the HTML reports (--html, --report-dir) hold: "
                   "'failing' every case but those that passed, 'all' every case (pages of "
                   "several MB). The JSON report has every transcript either way.")
@click.option("--stateful", "stateful_examples", type=click.IntRange(min=0), default=50,
              show_default=True, metavar="N",
              help="quicx: after the cases, a bounded stateful pass (quicx.stateful.dispatch): "
                   "N random sequences of producers, workers and a monitor checked against a "
                   "model of the profile (the pass 'queuewire fuzz --stateful' runs, with a "
                   "fixed seed), reported as one more case under the requirement it finds "
                   "broken. 0 leaves it out.")
def conform_server(protocol: str, targets: tuple[str, ...], profiles: tuple[str, ...],
                   auth_token: str | None, strict: bool, select: tuple[str, ...],
                   skip: tuple[str, ...], known_failing: str | None, timeout: float,
                   report_dir: str | None, junit: str | None, json_out: str | None,
                   html: str | None, http_targets: tuple[str, ...] = (),
                   jobs: int = 1, keep_residue: bool = False,
                   no_health_probes: bool = False, html_transcripts: str = "failing",
                   stateful_examples: int = 50) -> None:
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
    for target in targets:
        where = parse_target(target)
        if not isinstance(where, str):   # a deployed server: does it want a token we lack?
            for name in names:
                check_server_auth(load(name), where[0], where[1], auth_token, timeout, target)
    runs = []
    with LiveProgress(err_console) as progress:
        for target in targets:
            for name in names:
                progress.new(f"{protocol} {target} ({name})")
                try:
                    run = run_target_sync(protocol, target, profile=name, auth_token=auth_token,
                                          strict=strict, select=select, skip=skip,
                                          known_failing=tuple(known), timeout=timeout,
                                          progress=progress, http_target=http_of.get(target),
                                          jobs=jobs, remove_residue=not keep_residue,
                                          probe_health=not no_health_probes,
                                          passes=stateful_passes(protocol, stateful_examples, name))
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
    written = write_reports(runs, report_dir=report_dir, junit=junit, json_path=json_out, html=html,
                            html_transcripts=html_transcripts)
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


@conform.command("replay", short_help="Re-run a saved case against a server; say what is fixed.")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--target", metavar="HOST:PORT", required=True,
              help="Server to run the case against ('embedded' starts the reference server of "
                   "the file's protocol and profile).")
@click.option("--http-target", metavar="HOST:PORT", default=None,
              help="The server's HTTP API (bunqueue), for a case with HTTP steps.")
@auth_token_option("Token for a case that authenticates (as given to `conform server`); "
                   "with --raw it goes back where the case file masks the recorded one.")
@click.option("--max-file-bytes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Refuse a case file larger than N bytes before reading it (default: "
                   "64 MiB, conformance.replay.CASE_FILE_MAX; the runner writes a few MB).")
@click.option("--protocol", type=click.Choice(PROTOCOLS), default=None,
              help="Check that FILE is a case of this protocol (default: the file says).")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              metavar="S", help="Seconds to wait for each expected (or recorded) reply.")
@click.option("--raw", is_flag=True,
              help="Do not re-judge: resend the recorded bytes exactly, in the recorded order "
                   "and pace, and compare the replies in kind (ok / error / push / message type "
                   "/ close) side by side.")
def conform_replay(file: str, target: str, protocol: str | None, timeout: float,
                   raw: bool = False, http_target: str | None = None,
                   auth_token: str | None = None, max_file_bytes: int | None = None) -> None:
    """Re-run a saved case (FILE: a cases/<case-id>.json written by --report-dir) against
    --target and judge it again: every check of the saved run is shown with PASS, FIXED,
    STILL FAILING or REGRESSED (NEW / NEW FAILURE: checked only now; NOT CHECKED: only then),
    then an overall verdict. The case runs as the file embeds it (older files: the suite's case
    of the same id).

    Exit status: 0 when every check that failed is FIXED and nothing regressed (the case now
    passes), 1 otherwise (with --raw: when the replies differ in kind), 2 for a bad file or
    option. A case file is data: a Python (logic) case runs only as the installed suite
    defines it, and sizes, fills and pauses are bounded (a file that asks for more is refused).

    \b
    Examples:
      queuewire conform replay out/cases/bunqueue.queue.list.json --target 127.0.0.1:6789
      queuewire conform replay out/cases/bunqueue.queue.list.json --target embedded --raw
    """
    from ..conformance.targets import parse_target

    try:
        where = parse_target(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    from ..conformance.replay import CASE_FILE_MAX

    max_bytes = max_file_bytes or CASE_FILE_MAX
    if raw:
        _replay_raw(file, where, target, protocol, timeout, auth_token, max_bytes)
    else:
        _replay_judged(file, where, target, protocol, timeout, http_target, auth_token,
                       max_bytes)


def _replay_judged(file: str, where: Any, target: str, protocol: str | None, timeout: float,
                   http_target: str | None, auth_token: str | None, max_bytes: int) -> None:
    import asyncio

    from ..conformance.httpapi import parse_http_target
    from ..conformance.rejudge import describe, load_saved, rejudge
    from ..conformance.replay import ReplayError
    from ..conformance.runner import preflight
    from ..conformance.targets import embedded_target

    try:
        saved = load_saved(file, max_bytes=max_bytes)
    except ReplayError as exc:
        raise click.UsageError(str(exc)) from None
    if protocol and saved.case.protocol != protocol:
        raise click.UsageError(f"{file} is a {saved.case.protocol} case, not {protocol}")
    try:
        http = parse_http_target(http_target) if http_target else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--http-target") from None

    async def go() -> Any:
        if where == "embedded":
            tokens = (auth_token,) if auth_token else ()
            async with embedded_target(saved.case.protocol, saved.profile,
                                       auth_tokens=tokens) as emb:
                return await rejudge(saved, emb.host, emb.port, timeout=timeout,
                                     auth_token=auth_token, http_target=http or emb.http)
        host, port = where
        problem = await preflight(host, port, timeout)
        if problem:
            raise click.ClickException(problem)
        return await rejudge(saved, host, port, timeout=timeout, auth_token=auth_token,
                             http_target=http)

    if not isinstance(where, str):
        check_server_auth(saved.profile, where[0], where[1], auth_token, timeout, target)
    res = asyncio.run(go())
    console.print(f"replay of {saved.case.id} ({saved.profile.name}; the case "
                  f"{saved.definition}) against {target}", highlight=False)
    console.print(f"  recorded against {saved.target or '?'}: {saved.verdict or '?'}"
                  f"{' (' + saved.error + ')' if saved.error else ''}; now: "
                  f"{res.result.verdict.value}"
                  f"{' (' + res.result.error + ')' if res.result.error else ''}", highlight=False)
    colour = {"PASS": "green", "FIXED": "green", "NEW": "green", "STILL FAILING": "red",
              "REGRESSED": "red", "NEW FAILURE": "red", "NOT CHECKED": "yellow"}
    table = Table(title_justify="left")
    for col in ("", "requirement", "step", "check", "then", "now"):
        table.add_column(col, overflow="fold", no_wrap=col == "")
    for row in res.rows:
        c = row.check
        then = describe(row.old) if row.old is None or not row.old.ok else "held"
        now = describe(row.new) if row.new is None or not row.new.ok else "holds"
        table.add_row(Text(row.status, style=colour[row.status]),
                      f"{c.requirement or '-'} {c.level}", "-" if c.step is None else str(c.step),
                      c.kind, Text(then), Text(now))
    if res.rows:
        console.print(table)
    counts = ", ".join(f"{res.count(s)} {s.lower()}" for s in
                       ("FIXED", "STILL FAILING", "REGRESSED", "NEW FAILURE", "PASS")
                       if res.count(s))
    style = "green" if res.ok else "red"
    console.print(f"[{style}]replay: {res.verdict}[/{style}]" + (f" ({counts})" if counts else ""),
                  highlight=False)
    sys.exit(0 if res.ok else 1)


def _replay_raw(file: str, where: Any, target: str, protocol: str | None,
                timeout: float, auth_token: str | None, max_bytes: int) -> None:
    import asyncio

    from ..conformance.replay import ReplayError, load_case_file, replay, short
    from ..conformance.targets import embedded
    from ..conformance.wire import ConnectError

    try:
        case = load_case_file(file, max_bytes=max_bytes)
    except ReplayError as exc:
        raise click.UsageError(str(exc)) from None
    if protocol and case.protocol != protocol:
        raise click.UsageError(f"{file} is a {case.protocol} case, not {protocol}")

    async def go() -> Any:
        if where == "embedded":  # started requiring the token given, as `conform server` does
            tokens = (auth_token,) if auth_token else ()
            async with embedded(case.protocol, case.profile, tokens) as (host, port):
                return await replay(case, host, port, timeout=timeout, auth_token=auth_token)
        host, port = where
        return await replay(case, host, port, timeout=timeout, auth_token=auth_token)

    if not isinstance(where, str):
        check_server_auth(load(case.profile), where[0], where[1], auth_token, timeout, target)
    try:
        result = asyncio.run(go())
    except ConnectError as exc:
        raise click.ClickException(str(exc)) from None
    except ReplayError as exc:
        raise click.UsageError(f"{file}: {exc}") from None
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


@conform.command("detect", short_help="Probe a server and name the profile it speaks.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True, help="Protocol to probe.")
@click.option("--target", metavar="HOST:PORT", required=True, help="Server to probe.")
@auth_token_option("Token to authenticate with first (bunqueue Auth).")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=2.0, show_default=True,
              metavar="S", help="Seconds to wait for each probe's answer.")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence as JSON.")
def conform_detect(protocol: str, target: str, auth_token: str | None, timeout: float,
                   as_json: bool) -> None:
    """Probe --target with the messages the protocol's profiles disagree on (bunqueue: Hello,
    commands only some profiles have, job-name handling; quicx: opcodes and the error codes
    answered to them, the MSG_TASK opcode) and name the profile it matches best. Prints each
    probe, what each profile expects and what came back, and every profile's score.

    Exit status: 0 when one profile matches clearly (strictly the best share of probes, at
    least half), 1 when it is ambiguous or nothing matches, 2 for a usage error.

    \b
    Example:
      queuewire conform detect --protocol quicx --target 127.0.0.1:16381
    """
    import asyncio
    import json

    from ..conformance.detect import detect
    from ..conformance.targets import parse_target

    try:
        where = parse_target(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None
    if isinstance(where, str):  # "embedded"
        raise click.BadParameter("detect needs a HOST:PORT", param_hint="--target")
    host, port = where
    if protocol == "bunqueue":   # the probes of a server that wants a token say nothing
        from ..spec import default_profile
        check_server_auth(load(default_profile(protocol)), host, port, auth_token, timeout,
                          target)
    try:
        found = asyncio.run(detect(protocol, host, port, timeout=timeout,
                                   auth_token=auth_token, target=target))
    except (OSError, TimeoutError) as exc:
        raise click.ClickException(f"cannot probe {target}: {exc or type(exc).__name__}") from None
    except Exception as exc:  # noqa: BLE001 - e.g. a refused Auth: one line, not a traceback
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise click.ClickException(f"probing {target} failed: {text}") from None
    best, clear = found.best, found.clear
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
        sys.exit(0 if clear else 1)
    table = Table(title=f"detect {protocol} at {target}", title_justify="left")
    table.add_column("probe", no_wrap=True)
    table.add_column("sent", overflow="fold")
    for name in found.profiles:
        table.add_column(f"{name} expects", overflow="fold")
    table.add_column("observed", overflow="fold")
    for probe in found.probes:
        cells = []
        for name in found.profiles:
            exp, ok = probe.expected.get(name), probe.verdict(name)
            cells.append(Text("-" if exp is None else exp,
                              style="" if ok is None else "green" if ok else "red"))
        table.add_row(probe.name, Text(probe.sent), *cells, Text(probe.observed))
    console.print(table)
    scores = ", ".join(f"{n} {found.score(n)[0]}/{found.score(n)[1]}"
                       for n in sorted(found.profiles, key=found.ratio, reverse=True))
    console.print(f"scores: {scores}", highlight=False)
    if best is None:
        console.print(f"[red]detect: no profile of {protocol} matches[/red]")
    elif clear:
        hit, of = found.score(best)
        console.print(f"[green]detect: {best} ({hit}/{of} probes, score "
                      f"{found.ratio(best):.2f})[/green]", highlight=False)
    else:
        console.print(f"[red]detect: ambiguous (best {best}, score {found.ratio(best):.2f})[/red]",
                      highlight=False)
    sys.exit(0 if clear else 1)


# -- conform client ---------------------------------------------------------------------------
def _testee_name(command: str) -> str:
    """A short column name for a testee command (its adapter module or script)."""
    import os
    import re
    import shlex

    words = shlex.split(command) if command else []
    module = next((w for i, w in enumerate(words) if i and words[i - 1] == "-m"), None)
    if module:
        return module.rsplit(".", 1)[-1].replace("_", "-")
    scripts = [w for w in words[1:] if re.search(r"\.(m?js|py|ts|rb|go)$", w)]
    return os.path.basename(scripts[0] if scripts else words[0] if words else "testee")


@conform.command("client", short_help="Judge a client: serve it, with adversarial scenarios.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True, help="Protocol to test.")
@click.option("--listen", metavar="HOST:PORT", default="127.0.0.1:0", show_default=True,
              help="Where the conformance server listens (port 0: a free port; the testee is "
                   "told the address in each request).")
@click.option("--profile", "-p", "profile_name", metavar="PROFILE", default=None,
              help="Spec profile (default: the protocol's default).")
@click.option("--scenario", "scenarios", metavar="GLOB", multiple=True,
              help="Run only scenarios whose id matches (fnmatch glob); repeatable.")
@click.option("--testee", "testees", metavar="CMD", multiple=True, required=True,
              help="The client under test: a command speaking the testee contract (JSON lines "
                   "on stdin/stdout, docs/conformance/client-testee.md), started once for all "
                   "scenarios. Repeat to judge several clients: the report shows them side by "
                   "side.")
@click.option("--testee-name", "testee_names", metavar="NAME", multiple=True,
              help="A column name for the n-th --testee (default: its adapter or script name).")
@click.option("--testee-cwd", metavar="DIR", type=click.Path(file_okay=False, exists=True),
              default=None, help="Working directory of the testee commands.")
@click.option("--testee-per-scenario", is_flag=True,
              help="Start each testee afresh for every scenario (and stop it after its answer) "
                   "instead of once for all: slower, but no state survives between scenarios.")
@click.option("--report-dir", metavar="DIR", type=click.Path(file_okay=False), default=None,
              help="Write report.html, report.json, junit.xml and cases/<scenario>.json for "
                   "every scenario that did not pass.")
@click.option("--junit", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write a JUnit XML report (a testsuite per testee).")
@click.option("--json", "json_out", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON report (every scenario, transcripts as hex).")
@click.option("--html", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write the self-contained HTML report.")
@click.option("--markdown", metavar="FILE", type=click.Path(dir_okay=False), default=None,
              help="Write a Markdown page: the scenario x client matrix and every scenario "
                   "that did not pass, with its checks and wire evidence.")
def conform_client(protocol: str, listen: str, profile_name: str | None,
                   scenarios: tuple[str, ...], testees: tuple[str, ...],
                   testee_names: tuple[str, ...], testee_cwd: str | None,
                   report_dir: str | None, junit: str | None, json_out: str | None,
                   html: str | None, markdown: str | None = None,
                   testee_per_scenario: bool = False) -> None:
    """Listen as a conformance server, have each --testee (a client under test behind the
    testee contract) play every scenario against it, and judge every frame the client sends
    (framing, command schemas and batching limits, reqId unique in flight, Auth first, lock
    tokens on ACK) and how it survives the server's misbehaviour (replies reordered, split into
    1-byte segments, coalesced, late, cut halfway, never sent; Rate limit exceeded; Not
    authenticated; an expiring lock; a restart). Every verdict cites requirement ids: FAIL
    only on a MUST of the documents, NON-STRICT on a SHOULD, INFO where nothing could be
    judged.

    Exit status: 0 when no scenario fails (FAIL or ERROR), 1 otherwise, 2 for a usage error.

    \b
    Examples:
      queuewire conform client --protocol bunqueue --testee \\
          'python -m queuewire.conformance.client.adapters.queuewire_client' --html r.html
      queuewire conform client --protocol bunqueue --profile bunqueue/2.9.5 \\
          --testee-cwd tests/interop --testee 'node_modules/.bin/bun bunqueue_js_testee.mjs'
    """
    import asyncio

    from ..conformance.client.runner import run_client
    from ..conformance.client.scenarios import ScenarioError, load_scenarios, select_scenarios
    from ..conformance.client.testee import Testee
    from ..conformance.report import exit_status, write_reports
    from ..conformance.report.console import LiveProgress, print_summary

    name = profile_name or default_profile(protocol)
    prof = load(name)
    if prof.protocol != protocol:
        raise click.UsageError(f"profile {name} is a {prof.protocol} profile, not {protocol}")
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise click.BadParameter(f"{listen!r} is not HOST:PORT", param_hint="--listen")
    if len(testee_names) > len(testees):
        raise click.BadParameter(f"{len(testee_names)} names for {len(testees)} --testee",
                                 param_hint="--testee-name")
    try:
        chosen = select_scenarios(load_scenarios(protocol, prof), scenarios)
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    if not chosen:
        raise click.UsageError(f"no {protocol} client scenario to run under {name}"
                               + (f" matching {list(scenarios)}" if scenarios else
                                  " (none are defined yet for this protocol)"))
    runs = []
    with LiveProgress(err_console) as progress:
        for i, command in enumerate(testees):
            label = testee_names[i] if i < len(testee_names) else _testee_name(command)
            progress.new(f"{protocol} client {label} ({name})")
            testee = Testee(command, cwd=testee_cwd, label=label,
                            per_scenario=testee_per_scenario)
            try:
                runs.append(asyncio.run(run_client(testee, chosen, prof, host=host,
                                                   port=int(port_text), progress=progress)))
            except OSError as exc:
                raise click.ClickException(f"cannot listen on {listen}: {exc}") from None
    print_summary(console, runs)
    written = write_reports(runs, report_dir=report_dir, junit=junit, json_path=json_out,
                            html=html)
    if markdown:
        from ..conformance.client.markdown import render as render_markdown

        page = Path(markdown)
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(render_markdown(runs), encoding="utf-8")
        written.append(page)
    for path in written:
        console.print(f"wrote {path}", highlight=False)
    sys.exit(exit_status(runs))


# -- the stateful pass of conform server ------------------------------------------------------
STATEFUL_SEED = 30     # the pass is reproducible: the same sequences on every run
STATEFUL_STEPS = 15    # steps per sequence
_STATEFUL_LOCK = threading.Lock()  # targets judged at once take turns at their stateful pass


def stateful_passes(protocol: str, examples: int, profile_name: str) -> list[Any]:
    """The bounded stateful pass ``conform server`` adds after the quicx cases: the dispatch
    machine of :mod:`queuewire.fuzz.stateful_quicx` against the target, its violation (shrunk)
    reported as the failed check of one more case, ``quicx.stateful.dispatch``, at the level
    of the requirement it cites (issue 30: the semantic bugs only a model sees, a task lost
    with its worker or stats figures that move wrongly, reach the conformance report)."""
    if protocol != "quicx" or examples <= 0:
        return []
    import asyncio

    from hypothesis import Phase

    from ..conformance.model import Case, Check
    from ..conformance.runner import ExtraPass
    from ..fuzz.stateful_quicx import REQUIREMENTS, run_stateful_quicx

    unshrunk = (Phase.explicit, Phase.reuse, Phase.generate)

    def play(target: str, profile: Any) -> Any:
        with _STATEFUL_LOCK:  # hypothesis runs one test per process at a time
            # not shrunk: a daemon that leaves a request unanswered costs a timeout per
            # replay (fuzz --stateful, the rerun line, shrinks)
            return run_stateful_quicx(target, profile, max_examples=examples,
                                      seed=STATEFUL_SEED, step_count=STATEFUL_STEPS,
                                      extra_settings={"phases": unshrunk})

    async def run(host: str, port: int, profile: Any) -> tuple[list[Check], list[str]]:
        report = await asyncio.to_thread(play, f"{host}:{port}", profile)
        head = (f"{examples} random sequences of up to {STATEFUL_STEPS} steps (seed "
                f"{STATEFUL_SEED}), {report.elapsed_s:.1f} s; rerun alone: queuewire fuzz "
                f"--stateful --protocol quicx --profile {profile.name} --target {host}:{port} "
                f"--max-examples {examples} --steps {STATEFUL_STEPS} --seed {STATEFUL_SEED}")
        if report.passed:
            return [Check(None, "MUST", True, "behaviour", "every sequence agreed with the "
                          "model of the profile", None, None, None)], [head]
        level: Any = report.level or "MUST"  # a LifecycleViolation's level is the requirement's
        return [Check(report.requirement, level, False, "behaviour",
                      f"{report.message} (after {len(report.steps)} steps; rerun it alone to "
                      f"shrink them)",
                      "what the model of the profile says",
                      {"steps": report.steps}, None)], [head, *report.steps]

    case = Case(id="quicx.stateful.dispatch",
                title="Random sequences of submits, READYs, results, disconnects, heartbeats "
                      "and stats agree with a model of the profile's dispatch",
                protocol="quicx", exclusive=True,
                requirements=tuple(r for r in REQUIREMENTS if r in load(profile_name).requirements),
                tags=("stateful",), source="conform server --stateful")
    return [ExtraPass(case, run)]
