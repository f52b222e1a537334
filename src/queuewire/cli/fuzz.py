"""``queuewire fuzz``: spec-driven fuzzing of a server over TCP, and ``fuzz replay``
(queuewire.fuzz). Needs hypothesis and hypothesis-jsonschema: ``pip install 'queuewire[fuzz]'``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click

from ..spec import default_profile
from ._common import PROTOCOLS, console, err_console, load, profile_option

MISSING = ("queuewire fuzz needs hypothesis and hypothesis-jsonschema: "
           "pip install 'queuewire[fuzz]'")


def _fuzz_modules() -> Any:
    try:
        from ..fuzz import case, runner
    except ImportError as exc:
        if getattr(exc, "name", "") and exc.name.split(".")[0] in ("hypothesis",
                                                                     "hypothesis_jsonschema"):
            raise click.ClickException(MISSING) from None
        raise
    return case, runner


def _address(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter(f"{value!r} is not HOST:PORT or embedded", param_hint=option)
    return host or "127.0.0.1", int(port)


def _progress_table(stats: Any, protocol: str) -> Any:
    from rich.table import Table
    table = Table.grid(padding=(0, 2))
    table.add_row("cases", f"{stats.cases}", "cases/s", f"{stats.rate:,.0f}")
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
              help="Connections fuzzed at once (asyncio tasks in this process).")
@click.option("--connect-per-case", is_flag=True,
              help="A fresh connection for every case (default: reuse where the case allows).")
@click.option("--bound", type=click.FloatRange(min=0.01), default=2.0, show_default=True,
              metavar="S", help="Seconds a reply may take before it counts as lost.")
@click.option("--diff", "diff_spec", metavar="HOST:PORT",
              help="Run the same cases against a second server; report replies that differ "
                   "in kind.")
@click.option("--quiet", is_flag=True, help="No live progress.")
@click.pass_context
def fuzz(ctx: click.Context, protocol: str | None, target_spec: str | None,
         profile: str | None, duration: float | None, max_examples: int | None,
         seed: int | None, start: int, artifacts: str | None, workers: int,
         connect_per_case: bool, bound: float, diff_spec: str | None, quiet: bool) -> None:
    """Fuzz a server: spec-driven cases over TCP, judged by oracles citing requirement ids.

    Exit status 1 when a failure (a MUST not followed) was found, or a case could not be
    generated; 0 otherwise.
    """
    if ctx.invoked_subcommand is not None:
        return
    if protocol is None or target_spec is None:
        raise click.UsageError("fuzz needs --protocol and --target (or a subcommand: replay)")
    _case_mod, runner = _fuzz_modules()
    profile = profile or default_profile(protocol)
    load(profile)
    if seed is None:
        seed = int(time.time_ns() % 2**31)
    if max_examples is None and duration is None:
        max_examples = 1000
    if target_spec != "embedded":
        _address(target_spec, "--target")
    diff = _address(diff_spec, "--diff") if diff_spec else None
    err_console.print(f"fuzz {protocol} ({profile}) against {target_spec}, seed {seed}")

    async def main() -> Any:
        async with runner.target(target_spec, protocol, profile) as (host, port):
            if quiet:
                return await runner.campaign(
                    protocol, profile, host, port, seed=seed, max_examples=max_examples,
                    duration=duration, workers=workers, artifacts=artifacts,
                    reuse=not connect_per_case, bound=bound, diff=diff, start=start)
            from rich.live import Live
            last = [0.0]
            with Live(console=err_console, refresh_per_second=4, transient=False) as live:
                def progress(stats: Any) -> None:
                    now = time.monotonic()
                    if now - last[0] >= 0.25:
                        last[0] = now
                        live.update(_progress_table(stats, protocol))
                stats = await runner.campaign(
                    protocol, profile, host, port, seed=seed, max_examples=max_examples,
                    duration=duration, workers=workers, artifacts=artifacts,
                    reuse=not connect_per_case, bound=bound, diff=diff, start=start,
                    on_progress=progress)
                live.update(_progress_table(stats, protocol))
                return stats

    stats = asyncio.run(main())
    console.print(f"{stats.cases} cases in {time.monotonic() - stats.started:.1f} s "
                  f"({stats.rate:,.0f}/s), {stats.failures} failing, {stats.nonstrict} "
                  f"non-strict findings; {len(stats.commands)} commands, "
                  f"{len(stats.requirements)} requirement ids covered")
    for case, small, path, findings in stats.failed:
        console.print(f"[red]FAIL[/] case {case.index} (seed {seed}): "
                      f"{len(case.frames)} frames, shrunk to {len(small.frames)}")
        for f in findings:
            if f.fails:
                console.print(f"  {f}", markup=False)
        if path:
            console.print(f"  replay: queuewire fuzz replay {path} --target {target_spec}",
                          markup=False)
    for index, mine, theirs in stats.diffs[:20]:
        console.print(f"[yellow]DIFF[/] case {index}: {mine} vs {theirs}", markup=False)
    if stats.diffs:
        console.print(f"{len(stats.diffs)} cases whose replies differ in kind")
    for index, error in stats.errors[:10]:
        console.print(f"[red]GENERATOR ERROR[/] case {index}: {error}", markup=False)
    ctx.exit(1 if stats.failures or stats.errors else 0)


@fuzz.command()
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False))
@click.option("--target", "target_spec", required=True, metavar="HOST:PORT|embedded")
@click.option("--bound", type=click.FloatRange(min=0.01), default=2.0, show_default=True,
              metavar="S")
def replay(transcript: str, target_spec: str, bound: float) -> None:
    """Run a saved failure again: FIXED (exit 0) or STILL FAILING (exit 1)."""
    case_mod, runner = _fuzz_modules()
    case, _doc = case_mod.read_transcript(transcript)
    if target_spec != "embedded":
        _address(target_spec, "--target")

    async def main() -> Any:
        async with runner.target(target_spec, case.protocol, case.profile) as (host, port):
            return await runner.replay(case, host, port, bound)

    res = asyncio.run(main())
    failing = [f for f in res.findings if f.fails]
    if failing:
        console.print("[red]STILL FAILING[/]")
        for f in failing:
            console.print(f"  {f}", markup=False)
        raise SystemExit(1)
    console.print("[green]FIXED[/]")
