"""``queuewire fuzz``: spec-driven fuzzing of a server over TCP, ``fuzz --client`` (a bunqueue
or quicx client under test, driven through the testee contract, gets mutated and mis-framed
replies), ``fuzz --stateful`` (step sequences against a model of the spec: the bunqueue job
lifecycle, quicx dispatch) and ``fuzz replay`` (queuewire.fuzz). Needs hypothesis (its public
API, any version from 6.100): ``pip install 'queuewire[fuzz]'``.

Client fuzzing joins two packages that must not import each other (the layers contract):
``queuewire.fuzz.replies`` makes the cases, the reply mutations and the verdicts, and
``queuewire.conformance.client.fuzzing`` plays a case on the client conformance server with
the testee. This module, one layer up, holds the loop that joins them (:func:`_client_run`),
rather than moving the testee contract or the conformance server below both packages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from ..judge import Verdict
from ..spec import default_profile
from ._common import (
    AUTH_TOKEN_ENV,
    PROTOCOLS,
    auth_hint,
    auth_token_option,
    console,
    err_console,
    load,
    profile_option,
)

MISSING = "queuewire fuzz needs hypothesis: pip install 'queuewire[fuzz]'"


def _fuzz_modules() -> Any:
    try:
        from ..fuzz import campaign, case, runner
    except ImportError as exc:
        if (exc.name or "").split(".")[0] == "hypothesis":
            raise click.ClickException(MISSING) from None
        raise
    return case, runner, campaign


def _address(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"{value!r} is not HOST:PORT or embedded", param_hint=option)
    return host or "127.0.0.1", int(port)


def _progress_table(stats: Any, protocol: str) -> Any:
    from rich.table import Table
    table = Table.grid(padding=(0, 2))
    table.add_row("cases", f"{stats.cases}", "cases/s", f"{stats.rate:,.0f}")
    table.add_row("connects", f"{stats.connects}", "per case",
                  f"{stats.connects / max(1, stats.cases):.2f}")
    table.add_row("failures", f"[{'red' if stats.failures else 'green'}]{stats.failures}[/]",
                  "non-strict", f"{stats.nonstrict}")
    label = "commands" if protocol == "bunqueue" else "messages"
    table.add_row(label, f"{len(stats.commands)}", "requirement ids",
                  f"{len(stats.requirements)}")
    return table


@click.group(invoke_without_command=True)
@click.option("--protocol", type=click.Choice(PROTOCOLS))
@click.option("--target", "target_spec", metavar="HOST:PORT|embedded",
              help="The server to fuzz; embedded starts a reference server in process.")
@profile_option()
@click.option("--duration", type=click.FloatRange(min=0), metavar="S",
              help="Stop after S seconds.")
@click.option("--max-examples", type=click.IntRange(min=1), metavar="N",
              help="Stop after N cases (default 1000 when no --duration is given).")
@click.option("--seed", type=int, default=None, help="The run's seed (default: random, printed).")
@click.option("--start", type=click.IntRange(min=0), default=0, show_default=True,
              help="First case index: with --seed and --max-examples 1, regenerates one case.")
@click.option("--artifacts", metavar="DIR", type=click.Path(file_okay=False),
              help="Write each failure, shrunk, as a replayable JSON transcript into DIR.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes, each on its own connection; worker w of N plays cases "
                   "w, w+N, w+2N, ... of the seed (1: a thread of this process, no fork).")
@click.option("--connect-per-case", is_flag=True,
              help="A fresh connection for every case (default: reuse where the case allows).")
@click.option("--bound", type=click.FloatRange(min=0.01), default=None, metavar="S",
              help="Seconds a reply may take before it counts as lost (default 2); with "
                   "--client, seconds the testee may take for a case besides two command "
                   "timeouts per action (default 5).")
@click.option("--diff", "diff_spec", metavar="HOST:PORT",
              help="Run the same cases against a second server; report replies that differ "
                   "in kind.")
@click.option("--quiet", is_flag=True, help="No live progress.")
@click.option("--max-failures", type=click.IntRange(min=1), default=5, show_default=True,
              metavar="N", help="Stop after N distinct failures (a requirement and kind not "
                                "seen before; each shrunk and saved once, its repeats "
                                "counted); a larger N surveys a server that deviates in many "
                                "places.")
@click.option("--known-failing", "known_failing", metavar="FILE", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="The target's known deviations, in the file format of `conform server "
                   "--known-failing`: a line may name a requirement id (BQ-LIMIT-3) or a "
                   "conformance case id or glob (its requirement ids are taken). FAILs on "
                   "those requirements are counted and shown as KNOWN, never shrunk, and do "
                   "not stop the run. May be given more than once.")
@auth_token_option("Token every connection authenticates with first (bunqueue Auth); the "
                   "Auth and its reply are not judged. Without one, a server that answers "
                   "'Not authenticated' stops the run with an error instead of being judged.")
@click.option("--client", "client_mode", is_flag=True,
              help="Fuzz a client instead: serve it mutated and mis-framed replies through "
                   "the client conformance server; needs --testee.")
@click.option("--testee", metavar="CMD",
              help="With --client: the client under test, a command speaking the testee "
                   "contract (docs/conformance/client-testee.md).")
@click.option("--testee-cwd", metavar="DIR", type=click.Path(file_okay=False),
              help="With --client: the testee's working directory.")
@click.option("--stateful", is_flag=True,
              help="Stateful fuzzing instead: random sequences of steps against a model "
                   "built from the spec (bunqueue: the job lifecycle; quicx: dispatch of "
                   "tasks to producers' and workers' connections), the first violation "
                   "shrunk to a minimal sequence (--max-examples runs, default 100).")
@click.option("--steps", type=click.IntRange(min=1), default=25, show_default=True,
              metavar="N", help="With --stateful: steps per run.")
@click.pass_context
def fuzz(ctx: click.Context, protocol: str | None, target_spec: str | None,
         profile: str | None, duration: float | None, max_examples: int | None,
         seed: int | None, start: int, artifacts: str | None, workers: int,
         connect_per_case: bool, bound: float | None, diff_spec: str | None, quiet: bool,
         max_failures: int, known_failing: tuple[str, ...], auth_token: str | None,
         client_mode: bool, testee: str | None, testee_cwd: str | None, stateful: bool,
         steps: int) -> None:
    """Fuzz a server: spec-driven cases over TCP, judged by oracles citing requirement ids.
    With --client, fuzz a client: each case asks the testee for a few actions and breaks
    the reply to one of them (wrong types, missing fields, lying length prefixes, garbage
    payloads, a close mid-frame, unknown or duplicated reqIds, split segments; quicx: a
    MSG_OK or MSG_TASK with a wrong version or type, a lying length, broken fields, split,
    duplicated or late); the client must not crash, must answer within the bound (--bound
    plus its timeouts) and must report a typed error for the broken action (and the right
    value where nothing was broken). With --stateful, run random step sequences against a
    model of the spec (bunqueue job lifecycle, quicx dispatch) at --target (default
    embedded) and shrink the first violation.

    Exit status 1 when a failure (a MUST not followed; with --stateful too: a SHOULD or a
    decision not followed is printed NON-STRICT, as conform judges it, and exits 0) was
    found, or a case could not be generated; 0 otherwise.

    \b
      queuewire fuzz --protocol bunqueue --target 127.0.0.1:6789 --duration 60 --workers 2
      queuewire fuzz --client --protocol bunqueue --max-examples 200 --seed 1 --testee \\
          'python -m queuewire.conformance.client.adapters.queuewire_client'
      queuewire fuzz --client --protocol quicx --max-examples 100 --testee \\
          'python -m queuewire.conformance.client.adapters.queuewire_quicx'
      queuewire fuzz --stateful --protocol quicx --target embedded --max-examples 200
    """
    if ctx.invoked_subcommand is not None:
        return
    if stateful:
        if protocol is None or client_mode or duration is not None:
            raise click.UsageError("fuzz --stateful needs --protocol, and takes no --client "
                                   "or --duration")
        _stateful_command(ctx, protocol, target_spec or "embedded", profile, max_examples,
                          seed, steps, artifacts, auth_token)
        return
    if client_mode:
        _client_command(ctx, protocol or "bunqueue", profile, testee, testee_cwd, duration,
                        max_examples, seed, start, artifacts, bound)
        return
    if protocol is None or target_spec is None:
        raise click.UsageError("fuzz needs --protocol and --target (or a subcommand: replay)")
    bound = bound if bound is not None else 2.0
    _case_mod, runner, campaign = _fuzz_modules()
    profile, seed, max_examples = _run_defaults(protocol, profile, seed, max_examples,
                                                duration, 1000)
    if target_spec != "embedded":
        _address(target_spec, "--target")
    diff = _address(diff_spec, "--diff") if diff_spec else None
    known = set().union(*(_known_requirements(path, protocol, profile)
                          for path in known_failing))
    err_console.print(f"fuzz {protocol} ({profile}) against {target_spec}, seed {seed}"
                      + (f"; {len(known)} known failing requirement ids" if known else ""),
                      markup=False, highlight=False)

    async def main() -> Any:
        async with runner.target(target_spec, protocol, profile,
                                 auth_token=auth_token) as (host, port):
            await _preflight(profile, host, port, auth_token, target_spec, bound)
            if diff is not None:
                await _preflight(profile, *diff, auth_token, diff_spec or "", bound)
            kw = dict(seed=seed, max_examples=max_examples, duration=duration,
                      workers=workers, artifacts=artifacts, reuse=not connect_per_case,
                      bound=bound, diff=diff, start=start, max_failures=max_failures,
                      auth_token=auth_token, known=known)
            if quiet:
                return await campaign.campaign(protocol, profile, host, port, **kw)
            from rich.live import Live
            last = [0.0]
            # no refresh thread: the workers are forked, and a fork copies only this thread
            with Live(console=err_console, auto_refresh=False, transient=False) as live:
                def progress(stats: Any) -> None:
                    now = time.monotonic()
                    if now - last[0] >= 0.25:
                        last[0] = now
                        live.update(_progress_table(stats, protocol), refresh=True)
                stats = await campaign.campaign(protocol, profile, host, port,
                                                on_progress=progress, **kw)
                live.update(_progress_table(stats, protocol), refresh=True)
                return stats

    try:
        stats = asyncio.run(main())
    except RuntimeError as exc:  # a worker process died
        raise click.ClickException(str(exc)) from None
    console.print(f"{stats.cases} cases in {stats.elapsed:.1f} s "
                  f"({stats.rate:,.0f}/s), {stats.failures} distinct failures in "
                  f"{stats.failing_cases} failing cases, {stats.nonstrict} "
                  f"non-strict findings; {len(stats.commands)} commands, "
                  f"{len(stats.requirements)} requirement ids covered")
    console.print(f"fuzzer CPU {stats.cpu:.1f} s ({stats.cores:.2f} cores, {stats.workers} "
                  f"worker{'s' if stats.workers > 1 else ''}"
                  f"{', the embedded server included' if target_spec == 'embedded' else ''}): "
                  f"{stats.per_core:,.0f} cases/s per core; {stats.connects} connects "
                  f"({stats.connects / max(1, stats.cases):.2f} per case)"
                  + (f"; pools warmed in {stats.warmup:.1f} s first" if stats.warmup >= 0.05 else "")
                  + (f"; {stats.setup} cleanup commands between cases (not counted as cases)"
                     if stats.setup else ""))
    _print_groups(stats)
    for case, saved, findings in stats.failed:
        what = (f"case {case.index} (seed {seed}): {len(case.frames)} frames, shrunk to "
                f"{len(saved.case.frames)}")
        _print_failure(what, findings, saved.path, _target_args(target_spec, auth_token),
                       saved.note)
    _print_diffs(stats.diffs)
    for index, error in stats.errors[:10]:
        console.print(Text.assemble(("GENERATOR ERROR", "red"), f" case {index}: {error}"))
    console.print(f"stop: {stats.stop_reason}", markup=False, highlight=False)
    if stats.down is not None:
        first = max(0, stats.down[0] - DOWN_LEAD)
        console.print(Text.assemble(
            ("DOWN", "red"), f" the target stopped answering at case {stats.down[0]}; to play "
            f"the {stats.down[0] - first + 1} cases up to it again, in order, against a fresh "
            f"server: queuewire fuzz --protocol {protocol} --profile {profile} "
            f"{_target_args(target_spec, auth_token)} --seed {seed} --start {first} "
            f"--max-examples {stats.down[0] - first + 1} --workers 1"), soft_wrap=True)
    _print_residue(stats)
    ctx.exit(1 if stats.failures or stats.errors or stats.down is not None else 0)


#: Cases before the one a target died at that the DOWN line's command plays again.
DOWN_LEAD = 1000


def _print_residue(stats: Any) -> None:
    """What the run left on the server, and the probes its cases broke."""
    silent = [brk for brk in stats.breaks if stats.down is not None and brk.error == "no reply"]
    for brk in stats.breaks:
        if brk not in silent:    # a target that is down answers no probe: said once below
            console.print(Text.assemble(("BROKEN", "red"), " ", brk.text("window")),
                          soft_wrap=True)
    if silent:
        console.print(Text.assemble(("BROKEN", "red"), f" no reply to {len(silent)} probes "
                                    f"({', '.join(b.probe for b in silent)}): the target is "
                                    "down"), soft_wrap=True)
    residue = stats.residue
    if residue is None:
        return
    if residue.clean:
        console.print(f"residue: none ({len(residue.appeared)} things the run made were "
                      f"removed; the server's lists are as before the run)", markup=False,
                      highlight=False)
        return
    if residue.left or not residue.unlisted:
        console.print(Text.assemble(("RESIDUE", "yellow"),
                                    f" {len(residue.left)} of {len(residue.appeared)} things "
                                    f"the run made could not be removed:"))
    else:
        console.print(Text.assemble(("RESIDUE", "yellow"), " unknown: the server's lists could "
                                    "not be read after the run:"))
    for left in residue.left[:20]:
        console.print(f"  {left.text()}", markup=False, highlight=False)
    for what, why in residue.unlisted.items():
        console.print(f"  not listed: {what}: {why}", markup=False, highlight=False)


def _target_args(target_spec: str, auth_token: str | None) -> str:
    """The replay line's target options; a token is never printed, only its variable."""
    return f"--target {target_spec}" + (f' --auth-token "${AUTH_TOKEN_ENV}"'
                                        if auth_token else "")


async def _preflight(profile: str, host: str, port: int, auth_token: str | None,
                     where: str, bound: float) -> None:
    """Stop before the first case when the server wants a token (or refuses the one given):
    one clear error, not a run of judged refusals."""
    from ..conformance.preflight import check_auth
    from ..judge.opening import AuthProblem
    try:
        await check_auth(load(profile), host, port, auth_token, timeout=bound, target=where)
    except AuthProblem as exc:
        raise click.ClickException(auth_hint(exc, auth_token)) from None
    except (OSError, TimeoutError) as exc:
        raise click.ClickException(f"cannot reach {where}: {exc or type(exc).__name__}") from None


def _known_requirements(path: str, protocol: str, profile: str) -> set[str]:
    """The requirement ids a known-failing file names: its requirement ids, and the ids the
    conformance cases it names (or matches with a glob) cite."""
    import fnmatch

    from ..conformance.known_failing import read_known_failing
    from ..conformance.runner import load_cases
    try:
        entries = read_known_failing(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--known-failing") from None
    requirements = load(profile).requirements
    cases = load_cases(protocol, profile)
    out: set[str] = set()
    for entry in entries:
        if entry in requirements:
            out.add(entry)
            continue
        matched = [c for c in cases if fnmatch.fnmatchcase(c.id, entry)]
        if not matched:
            raise click.BadParameter(f"{entry!r} in {path} is neither a requirement id of "
                                     f"{profile} nor a conformance case id or glob",
                                     param_hint="--known-failing")
        for c in matched:
            out.update(c.requirements)
    return out


def _print_groups(stats: Any) -> None:
    """Every FAIL, KNOWN and NON-STRICT finding of the run, grouped by requirement, verdict
    and kind: how many, and the first case that showed it."""
    if not stats.groups:
        return
    from rich.table import Table
    order = {"FAIL": 0, "KNOWN": 1, "NON-STRICT": 2}
    table = Table(title="findings by requirement and kind", title_justify="left")
    for col in ("verdict", "requirement", "kind", "count"):
        table.add_column(col, no_wrap=True, justify="right" if col == "count" else "left")
    table.add_column("first seen", overflow="fold")
    style = {"FAIL": "red", "KNOWN": "yellow", "NON-STRICT": "yellow"}
    for (rid, label, kind), g in sorted(stats.groups.items(),
                                       key=lambda kv: (order.get(kv[0][1], 3),
                                                       -kv[1].count, str(kv[0][0]))):
        example = f"case {g.example_case}: {g.example}"
        table.add_row(Text(label, style=style.get(label, "")), str(rid), kind, f"{g.count:,}",
                      Text(example[:200]))
    console.print(table)


def _print_diffs(diffs: list[Any]) -> None:
    """--diff: the cases whose replies differ in kind, classed (a field null on one side and
    absent on the other is its own class), with up to three examples per class."""
    if not diffs:
        return
    from ..fuzz.diffing import classify
    classes: dict[str, list[str]] = {}
    for index, mine, theirs in diffs:
        cls, detail = classify(mine, theirs)
        classes.setdefault(cls, []).append(f"case {index}: {detail}")
    console.print(f"{len(diffs)} cases whose replies differ in kind:")
    for cls, examples in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        console.print(Text.assemble(("DIFF", "yellow"), f" {cls}: {len(examples)}"))
        for example in examples[:3]:
            console.print(Text(f"    {example}"))


@fuzz.command()
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", "target_spec", metavar="HOST:PORT|embedded",
              help="The server to replay a server transcript against.")
@click.option("--testee", metavar="CMD", help="The client to replay a client transcript with.")
@click.option("--testee-cwd", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--bound", type=click.FloatRange(min=0.01), default=None, metavar="S",
              help="Seconds a reply may take (server; default 2) or the testee may take "
                   "besides its command timeouts (client; default 5).")
@auth_token_option("Token the replay's connections authenticate with first (bunqueue Auth), "
                   "as given to the run that saved the transcript.")
def replay(transcript: str, target_spec: str | None, testee: str | None,
           testee_cwd: str | None, bound: float | None, auth_token: str | None) -> None:
    """Run a saved failure again: FIXED (exit 0) or STILL FAILING (exit 1). A server that
    wants a token the replay was not given (or refuses it) is an error (exit 1), not a
    verdict."""
    import json
    case_mod, runner, _campaign = _fuzz_modules()
    try:
        with open(transcript, encoding="utf-8") as fh:
            doc = json.load(fh)
    except ValueError as exc:
        raise click.ClickException(f"{transcript} is not a fuzz transcript: {exc}") from None
    from ..fuzz import replies
    if isinstance(doc, dict) and replies.is_client_transcript(doc):
        if not testee:
            raise click.UsageError("a client transcript replays with --testee CMD")
        ccase = replies.ClientCase.from_dict(doc["case"])
        findings = asyncio.run(_client_replay(ccase, testee, testee_cwd,
                                              bound if bound is not None else CLIENT_BOUND))
        _say_fixed([f for f in findings if replies.counts(f)])
        return
    if not target_spec:
        raise click.UsageError("a server transcript replays with --target HOST:PORT|embedded")
    try:
        case, _doc = case_mod.read_transcript(transcript)
    except (KeyError, TypeError, ValueError) as exc:
        raise click.ClickException(f"{transcript} is not a fuzz transcript: {exc}") from None
    if target_spec != "embedded":
        _address(target_spec, "--target")

    from ..fuzz.shrink import replay as replay_case
    limit = bound if bound is not None else 2.0

    async def main() -> Any:
        async with runner.target(target_spec, case.protocol, case.profile,
                                 auth_token=auth_token) as (host, port):
            await _preflight(case.profile, host, port, auth_token, target_spec, limit)
            return await replay_case(case, host, port, limit, auth_token)

    res = asyncio.run(main())
    _say_fixed([f for f in res.findings if f.fails])


def _say_fixed(failing: list[Any]) -> None:
    if failing:
        console.print("[red]STILL FAILING[/]")
        for f in failing:
            console.print(f"  {f}", markup=False)
        raise SystemExit(1)
    console.print("[green]FIXED[/]")


# -- fuzz --stateful --------------------------------------------------------------------------
def _stateful_command(ctx: click.Context, protocol: str, target: str, profile: str | None,
                      max_examples: int | None, seed: int | None, steps: int,
                      artifacts: str | None, auth_token: str | None = None) -> None:
    """bunqueue: :func:`~queuewire.fuzz.stateful.run_stateful`; quicx:
    :func:`~queuewire.fuzz.stateful_quicx.run_stateful_quicx`. The report (its shrunk steps)
    is printed, and written as JSON into ``artifacts``."""
    _fuzz_modules()
    if target != "embedded":
        _address(target, "--target")
    profile, seed, max_examples = _run_defaults(protocol, profile, seed, max_examples, None,
                                                100)
    if load(profile).protocol != protocol:
        raise click.UsageError(f"profile {profile} is not a {protocol} profile")
    run: Callable[..., Any]  # the two runners differ only in their target's type
    if protocol == "quicx":
        from ..fuzz.stateful_quicx import run_stateful_quicx as run
    else:
        from ..fuzz.stateful import run_stateful as run
    err_console.print(f"fuzz --stateful {protocol} ({profile}) against {target}, seed {seed}")
    from ..judge.opening import AuthProblem
    kw: dict[str, Any] = {"auth_token": auth_token} if protocol == "bunqueue" else {}
    if target != "embedded":
        asyncio.run(_preflight(profile, *_address(target, "--target"), auth_token, target,
                               2.0))
    try:
        report = run(target, profile, max_examples=max_examples or 100, seed=seed,
                     step_count=steps, **kw)
    except AuthProblem as exc:
        raise click.ClickException(auth_hint(exc, auth_token)) from None
    except OSError as exc:   # the target refused the connection, a reply timed out
        raise click.ClickException(f"{target}: {exc}") from None
    console.print(report.summary(), markup=False, highlight=False)
    if artifacts and not report.passed:
        import json
        import os
        os.makedirs(artifacts, exist_ok=True)
        path = os.path.join(artifacts, f"stateful-{protocol}-{seed}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report.to_dict(), fh, indent=1)
        console.print(f"  report: {path}", markup=False)
    ctx.exit(1 if report.fails else 0)


# -- fuzz --client ----------------------------------------------------------------------------
CLIENT_BOUND = 5.0   # seconds a testee may take for a case besides its command timeouts


async def _client_case(server: Any, testee: Any, case: Any, profile: Any,
                       bound: float) -> tuple[Any, list[Any]]:
    """Play one client case; the played record and the verdict's findings."""
    import uuid

    from ..conformance.client.fuzzing import play
    from ..fuzz import replies
    target = replies.reply_key(case, case.target)
    quicx = case.protocol == "quicx"

    def mangle(name: str, n: int, sent: Any, reply: Any) -> Any:
        if (name, n) != target:
            return None
        return replies.quicx_reply_plan(case, sent, profile) if quicx \
            else replies.reply_plan(case, reply, profile)

    nonce = uuid.uuid4().hex[:8]
    request = {"scenario": f"fuzz.client.{case.seed}.{case.index}.{nonce}",
               "protocol": case.protocol, "profile": profile.name, "target": server.target,
               "actions": case.bind(f"cf-{nonce}"), "options": case.options}
    if quicx:   # two producer timeouts per submit, a work's own timeout and its stop
        per = float(case.options.get("timeout", replies.QX_TIMEOUT_MS)) / 1000.0
        limit = bound + sum(2 * per if a["op"] == "submit" else
                            float(a.get("timeout_ms", 0)) / 1000.0 + 3.0 for a in case.actions)
    else:
        per = float(case.options.get("command_timeout", replies.COMMAND_TIMEOUT_MS)) / 1000.0
        limit = bound + 2 * per * len(case.actions)
    played = await play(server, testee, request, mangle, limit)
    findings = replies.judge_client(case, profile, results=played.results,
                                    failure=played.failure, hung=played.hung,
                                    replies=played.computed, wire=played.wire)
    return played, findings


async def _with_client_server(profile_name: str, testee_cmd: str, cwd: str | None,
                              body: Any) -> Any:
    from ..conformance.client.quicx_server import QuicxConformanceServer
    from ..conformance.client.server import ConformanceServer
    from ..conformance.client.testee import Testee
    profile = load(profile_name)
    server_class = QuicxConformanceServer if profile.protocol == "quicx" else ConformanceServer
    server = await server_class(profile).start()
    testee = Testee(testee_cmd, cwd=cwd)
    try:
        return await body(server, testee, profile)
    finally:
        await testee.stop()
        await server.stop()


async def _client_replay(case: Any, testee_cmd: str, cwd: str | None,
                         bound: float) -> list[Any]:
    async def body(server: Any, testee: Any, profile: Any) -> list[Any]:
        return (await _client_case(server, testee, case, profile, bound))[1]
    return await _with_client_server(case.profile, testee_cmd, cwd, body)


async def _client_run(profile_name: str, testee_cmd: str, cwd: str | None, *, seed: int,
                      start: int, max_examples: int | None, duration: float | None,
                      bound: float, artifacts: str | None, max_failures: int = 5,
                      on_case: Any = None) -> dict[str, Any]:
    """Client cases ``start, start+1, ...`` of ``seed``; each failure shrunk (the target
    action alone, then the actions up to it) and saved as a replayable transcript."""
    import os

    from ..fuzz import replies
    stats: dict[str, Any] = {"cases": 0, "failures": [], "nonstrict": 0, "kinds": set(),
                             "started": time.monotonic()}

    async def body(server: Any, testee: Any, profile: Any) -> dict[str, Any]:
        stop_at = time.monotonic() + duration if duration else None
        i = start
        while (max_examples is None or i < start + max_examples) and \
                (stop_at is None or time.monotonic() < stop_at) and \
                len(stats["failures"]) < max_failures:
            make = replies.make_quicx_client_case if profile.protocol == "quicx" \
                else replies.make_client_case
            case = replies.normalize(make(profile.name, seed, i))
            i += 1
            played, findings = await _client_case(server, testee, case, profile, bound)
            stats["cases"] += 1
            stats["kinds"].add(case.recipe["kind"])
            stats["nonstrict"] += sum(1 for f in findings if f.level is Verdict.NON_STRICT)
            if any(replies.counts(f) for f in findings):
                rids = {f.requirement for f in findings if replies.counts(f)}
                small, final = case, (played, findings)
                for cand in replies.shrink_candidates(case):
                    again = await _client_case(server, testee, cand, profile, bound)
                    if any(replies.counts(f) and f.requirement in rids for f in again[1]):
                        small, final = cand, again
                        break
                path = None
                if artifacts:
                    os.makedirs(artifacts, exist_ok=True)
                    path = os.path.join(artifacts, f"client-{seed}-{case.index}.json")
                    replies.write_client_transcript(path, small, final[1], final[0].answer,
                                                    final[0].wire, original=case)
                stats["failures"].append((case, small, path, findings))
            if on_case is not None:
                on_case(stats)
        return stats
    return await _with_client_server(profile_name, testee_cmd, cwd, body)


def _client_command(ctx: click.Context, protocol: str, profile: str | None,
                    testee: str | None, cwd: str | None, duration: float | None,
                    max_examples: int | None, seed: int | None, start: int,
                    artifacts: str | None, bound: float | None) -> None:
    _fuzz_modules()
    if not testee:
        raise click.UsageError("fuzz --client needs --testee CMD")
    profile, seed, max_examples = _run_defaults(protocol, profile, seed, max_examples,
                                                duration, 100)
    limit = bound if bound is not None else CLIENT_BOUND
    if load(profile).protocol != protocol:
        raise click.UsageError(f"profile {profile} is not a {protocol} profile")
    err_console.print(f"fuzz client {testee!r} ({profile}), seed {seed}")
    try:
        stats = asyncio.run(_client_run(profile, testee, cwd, seed=seed, start=start,
                                        max_examples=max_examples, duration=duration,
                                        bound=limit, artifacts=artifacts))
    except Exception as exc:  # noqa: BLE001 - the testee could not even be started
        from ..conformance.client.testee import TesteeError
        if isinstance(exc, TesteeError):
            raise click.ClickException(str(exc)) from None
        raise
    elapsed = time.monotonic() - stats["started"]
    failures = stats["failures"]
    console.print(f"{stats['cases']} client cases in {elapsed:.1f} s "
                  f"({stats['cases'] / max(elapsed, 1e-9):,.1f}/s), {len(failures)} failing, "
                  f"{stats['nonstrict']} non-strict findings; mutations: "
                  f"{', '.join(sorted(stats['kinds']))}")
    for case, small, path, findings in failures:
        _print_failure(f"client case {case.index} (seed {seed}): {case.recipe['kind']} on "
                       f"action {case.target} of {len(case.actions)}, shrunk to "
                       f"{len(small.actions)}", findings, path, f"--testee '{testee}'")
    ctx.exit(1 if failures else 0)


def _print_failure(what: str, findings: list, path: str | None, target: str,
                   note: str | None = None) -> None:
    """One failing case: what it was, its failing findings (a client's crash or hang at
    any level: :func:`~queuewire.fuzz.replies.counts`), and how to replay it."""
    from ..fuzz.replies import counts
    console.print(Text.assemble(("FAIL", "red"), f" {what}"))
    for f in findings:
        if counts(f):
            console.print(f"  {f}", markup=False)
    if note:
        console.print(f"  note: {note}", markup=False)
    if path:
        console.print(f"  replay: queuewire fuzz replay {path} {target}", markup=False,
                      soft_wrap=True)


def _run_defaults(protocol: str, profile: str | None, seed: int | None,
                  max_examples: int | None, duration: float | None,
                  default_examples: int) -> tuple[str, int, int | None]:
    """A campaign's profile (checked), seed (random when not given) and case limit
    (``default_examples`` when neither --max-examples nor --duration is given)."""
    profile = profile or default_profile(protocol)
    load(profile)
    if seed is None:
        seed = int(time.time_ns() % 2**31)
    if max_examples is None and duration is None:
        max_examples = default_examples
    return profile, seed, max_examples
