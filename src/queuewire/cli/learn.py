"""``queuewire learn``: learn a server's state machine from outside and compare it with the spec."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from ..spec import default_profile
from ._common import console, err_console, load, profile_option


@click.command()
@click.option("--protocol", type=click.Choice(["bunqueue"]), default="bunqueue", show_default=True,
              help="Protocol (bunqueue's job lifecycle for now; quicx's dialogues are to come).")
@click.option("--target", required=True, metavar="HOST:PORT|embedded",
              help="The server to learn; 'embedded' starts the reference server of the profile.")
@profile_option()
@click.option("--machine", default="job_lifecycle", show_default=True,
              help="The spec's state table to learn (one with a learn section).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the equivalence oracle's random walks: the run is reproducible.")
@click.option("--walks", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Random walks per state of the hypothesis (the equivalence oracle's budget).")
@click.option("--walk-len", type=click.IntRange(1, 100), default=8, show_default=True,
              help="Length of each random walk.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the learned machine, the spec's and the difference as JSON.")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run each difference as a conformance case and write the report here, with "
                   "cases/<id>.json for `queuewire conform replay`.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a page: the differences with their cases' verdicts, and both "
                   "machines as Mermaid diagrams (runs the cases, as --report-dir does).")
def learn(protocol: str, target: str, profile: str | None, machine: str, seed: int, walks: int,
          walk_len: int, json_out: Path | None, report_dir: Path | None,
          markdown: Path | None) -> None:
    """Learn the Mealy machine a server implements for one of the spec's state tables (L*,
    AALpy) and compare it with the machine the table implies.

    Each query runs on a fresh queue, so the server is never restarted; the queue is
    obliterated after the query (nothing is left on the target). The inputs and the
    observation are the table's learn section in spec/ (bunqueue: PUSH, PULL, ACK, FAIL,
    MoveToDelayed, Promote, Discard, RetryDlq, RetryCompleted; the job's state by GetState);
    timed events (delay elapsed, stalls) are not inputs. A difference is the shortest input
    sequence after which the server answers otherwise than the table, with the requirement
    of the row it concerns.

    Exit status: 0 when the machines are equivalent, 1 when they differ, 2 for a usage error.

    \b
    Examples:
      queuewire learn --target embedded
      queuewire learn --target 127.0.0.1:6789 --profile bunqueue/2.9.5 --report-dir out/
    """
    from ..learn import differences, learn_machine, learn_section, spec_machine
    from ..learn.cases import deciding_rule, difference_case

    prof = load(profile or default_profile(protocol))
    try:
        section = learn_section(prof.tree, machine)
    except (KeyError, ValueError) as exc:
        raise click.UsageError(f"{prof.name}: {exc}") from None
    table = spec_machine(section)

    async def run() -> Any:
        if target == "embedded":
            from ..reference_server.bunqueue import BunqueueServer

            server = await BunqueueServer(prof, port=0).start()
            try:
                return await asyncio.to_thread(learn_machine, prof, "127.0.0.1", server.port,
                                               section, seed=seed, walks_per_state=walks,
                                               walk_len=walk_len)
            finally:
                await server.stop()
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise click.UsageError(f"--target {target!r} is not HOST:PORT or embedded")
        return await asyncio.to_thread(learn_machine, prof, host, int(port), section, seed=seed,
                                       walks_per_state=walks, walk_len=walk_len)

    try:
        learned = asyncio.run(run())
    except OSError as exc:
        raise click.ClickException(f"cannot reach {target}: {exc}") from None
    diffs = differences(table, learned.machine)
    console.print(f"{prof.name} {machine}: learned {len(learned.machine.states)} states "
                  f"(the table implies {len(table.states)}) in {learned.seconds:.1f} s, "
                  f"{learned.queries} queries, {learned.requests} requests (seed {seed})")
    cases: list[dict[str, Any]] = []
    rules: list[str] = []
    if not diffs:
        console.print("equivalent: the server implements the table over these inputs")
    for word, spec_out, server_out in diffs:
        case = difference_case(section, word, spec_out, server_out)
        cases.append(case)
        rid, cap = deciding_rule(section, word, spec_out, server_out)
        level = cap or (prof.requirements[rid].level if rid in prof.requirements else "-")
        rules.append(f"{rid} ({level})")
        console.print(f"differs after {' '.join(word)}: the table says {spec_out[-1]}, the "
                      f"server answered {server_out[-1]} ({rid}, {level})", highlight=False)
    if json_out is not None:
        json_out.write_text(json.dumps({
            "profile": prof.name, "machine": machine, "target": target, "seed": seed,
            "queries": learned.queries, "requests": learned.requests,
            "seconds": round(learned.seconds, 3),
            "learned": _rows(learned.machine), "spec": _rows(table),
            "differences": [{"inputs": w, "spec": a, "server": b, "case": c}
                            for (w, a, b), c in zip(diffs, cases)],
        }, indent=1) + "\n")
    verdicts: list[tuple[str, str, str]] = []
    if cases and (report_dir is not None or markdown is not None):
        verdicts = [(case_id, rule, verdict) for (case_id, _, verdict), rule
                    in zip(_run_cases(cases, prof, target, report_dir), rules)]
    if markdown is not None:
        from ..learn.render import markdown as page

        intro = (f"`queuewire learn --target {target} --profile {prof.name} --machine {machine} "
                 f"--seed {seed}`: {learned.queries} queries, {learned.requests} requests, "
                 f"{learned.seconds:.1f} s. Inputs: {', '.join(section.inputs)}.")
        markdown.write_text(page(f"{prof.name}: the {machine}, learned", intro, table,
                                 learned.machine, diffs, verdicts), encoding="utf-8")
    raise SystemExit(0 if not diffs else 1)


def _rows(machine: Any) -> list[dict[str, Any]]:
    names = {s: f"q{i}" for i, s in enumerate(machine.states)}
    return [{"from": names[s], "input": letter, "output": machine.table[(s, letter)][0],
             "to": names[machine.table[(s, letter)][1]]}
            for s in machine.states for letter in machine.inputs]


def _run_cases(cases: list[dict[str, Any]], prof: Any, target: str,
               report_dir: Path | None) -> list[tuple[str, str, str]]:
    """Run each difference as a conformance case against the target; the report directory
    gets cases/<id>.json, which ``queuewire conform replay`` runs again."""
    from ..conformance.loader import parse_case
    from ..conformance.report import write_reports
    from ..conformance.runner import run_target_sync

    parsed = [parse_case(c, "queuewire learn", "bunqueue", prof) for c in cases]
    run = run_target_sync("bunqueue", target, profile=prof, cases=parsed)
    out = []
    for case, r in zip(cases, run.results):
        last = case["steps"][-1]["expect"] if case["steps"] else {}
        rid = last.get("requirement", "")
        level = last.get("level") or (prof.requirements[rid].level if rid in prof.requirements else "")
        out.append((r.case.id, f"{rid} ({level})", r.verdict.value))
        err_console.print(f"{r.case.id}: {r.verdict.value}", highlight=False)
    if report_dir is not None:
        write_reports([run], report_dir=report_dir)
        err_console.print(f"wrote {report_dir}; replay a difference with `queuewire conform "
                          f"replay {report_dir}/cases/<id>.json --target {target}`", highlight=False)
    return out
