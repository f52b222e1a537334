"""``queuewire learn``: learn a server's state machine from outside and compare it with the spec."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any, NoReturn

import click

from ..spec import default_profile
from ._common import auth_token_option, console, err_console, load, profile_option


def _stop(message: str) -> NoReturn:
    """An error that ends the run without a result: exit 2, never 1 (1 says the machines
    differ)."""
    err_console.print(f"[red]error:[/] {message}", highlight=False)
    raise SystemExit(2)


def _tables(tree: Any) -> list[str]:
    """The profile's state tables that have a learn section, in spec order."""
    return [k for k, v in tree.items() if isinstance(v, dict) and isinstance(v.get("learn"), dict)]


@click.command()
@click.option("--protocol", type=click.Choice(["bunqueue", "quicx"]),
              help="Protocol of the target. Default: the --profile's, else bunqueue.")
@click.option("--target", required=True, metavar="HOST:PORT|embedded",
              help="The server to learn; 'embedded' starts the reference server of the profile.")
@profile_option()
@click.option("--machine", metavar="TABLE",
              help="The spec's state table to learn (one with a learn section). Default: the "
                   "profile's first (bunqueue: job_lifecycle, also auth_session; quicx: "
                   "task_dialogue).")
@auth_token_option("Token of a server with auth tokens: job_lifecycle's connection and the "
                   "difference cases authenticate with it, and auth_session uses it as the good "
                   "token (its connections start unauthenticated). With 'embedded', only "
                   "auth_session's server has a token: a fresh one when none is given.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the equivalence oracle's random walks: the run is reproducible.")
@click.option("--walks", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Random walks per state of the hypothesis (the equivalence oracle's budget).")
@click.option("--walk-len", type=click.IntRange(1, 100), default=8, show_default=True,
              help="Length of each random walk.")
@click.option("--max-queries", type=click.IntRange(1), default=50000, show_default=True,
              help="Query budget: stop with an error (exit 2) when it is spent.")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=600, show_default=True,
              help="Time budget in seconds: stop with an error (exit 2) when it is spent.")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              help="Seconds to wait for an answer, while learning and in the difference cases.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the learned machine, the spec's and the differences as JSON.")
@click.option("--dot", "dot_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write both machines as one Graphviz file (two clusters).")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run each difference as a conformance case and write the report here (the "
                   "HTML report opens with both machines and the differences), with "
                   "cases/<id>.json for `queuewire conform replay`.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a page: the differences with their cases' verdicts, and both "
                   "machines as Mermaid diagrams (runs the cases, as --report-dir does).")
def learn(protocol: str | None, target: str, profile: str | None, machine: str | None,
          auth_token: str | None, seed: int, walks: int, walk_len: int, max_queries: int,
          max_seconds: float, timeout: float, json_out: Path | None, dot_out: Path | None,
          report_dir: Path | None, markdown: Path | None) -> None:
    """Learn the Mealy machine a server implements for one of the spec's state tables (L*,
    AALpy) and compare it with the machine the table implies.

    Each query starts afresh, so the server is never restarted: a fresh queue (job_lifecycle,
    obliterated after the query), fresh connections (auth_session, quicx's task_dialogue,
    whose task is completed before the query ends), so nothing is left on the target. The
    inputs, what each sends and how its answer is read are the table's learn section in
    spec/; timed events (a delay elapsing, stalls) are not inputs. A difference is the
    shortest input sequence after which the server answers otherwise than the table, with
    the requirement of the row it concerns, written as a conformance case.

    Exit status: 0 when the machines are equivalent, 1 when they differ, 2 for a usage error,
    a spent budget or a target that cannot be reached, refuses the token or stops answering.

    \b
    Examples:
      queuewire learn --target embedded
      queuewire learn --protocol quicx --target embedded --profile quicx/1.0.3
      queuewire learn --target 127.0.0.1:6789 --machine auth_session --auth-token "$T"
      queuewire learn --target 127.0.0.1:6789 --profile bunqueue/2.9.5 --report-dir out/
    """
    from ..learn import Learnable, learn_machine
    from ..learn.sul import BudgetExhausted
    from ..learn.wire import Unanswered
    from .learn_output import write_outputs

    prof = load(profile or default_profile(protocol or "bunqueue"))
    protocol = protocol or prof.protocol
    if prof.protocol != protocol:
        raise click.UsageError(f"profile {prof.name} is a {prof.protocol} profile, not {protocol}")
    tables = _tables(prof.tree)
    machine = machine or (tables[0] if tables else "")
    if machine not in tables:
        raise click.UsageError(f"{prof.name} has no state table {machine!r} with a learn "
                               f"section; it has: {', '.join(tables) or 'none'}")
    subject = Learnable.of(prof, machine)
    if subject.needs_token and auth_token is None:
        if target != "embedded":
            raise click.UsageError(f"{machine} needs the server's token: give --auth-token "
                                   f"TOKEN or set $QUEUEWIRE_AUTH_TOKEN")
        auth_token = secrets.token_hex(16)
    # an embedded server gets the token only where the machine is about it (auth_session);
    # the job lifecycle and the quicx dialogue learn an open server
    embedded_token = auth_token if subject.needs_token else None
    token = auth_token if target != "embedded" else embedded_token
    budget: dict[str, Any] = {
        "timeout": timeout, "seed": seed, "walks_per_state": walks, "walk_len": walk_len,
        "max_queries": max_queries, "max_seconds": max_seconds,
        "progress": lambda q, r, s: err_console.print(f"  {q} queries, {r} requests, {s:.0f} s",
                                                      highlight=False)}

    async def run() -> Any:
        if target == "embedded":
            from ..reference_server.bunqueue import BunqueueServer
            from ..reference_server.quicx.tcp import QuicxServer

            server = await (QuicxServer(prof, port=0) if protocol == "quicx" else BunqueueServer(
                prof, port=0, auth_tokens=(embedded_token,) if embedded_token else ())).start()
            try:
                return await asyncio.to_thread(learn_machine, prof, "127.0.0.1", server.port,
                                               subject.section, token=token, **budget)
            finally:
                await server.stop()
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise click.UsageError(f"--target {target!r} is not HOST:PORT or embedded")
        return await asyncio.to_thread(learn_machine, prof, host, int(port), subject.section,
                                       token=token, **budget)

    try:
        learned = asyncio.run(run())
    except BudgetExhausted as exc:
        _stop(f"{exc}; raise --max-queries / --max-seconds or lower --walks")
    except PermissionError as exc:
        _stop(f"{exc}; check --auth-token")
    except Unanswered as exc:
        _stop(f"{target} did not answer: {exc}; raise --timeout if it is slow")
    except OSError as exc:
        _stop(f"{target}: {exc}")
    diffs = subject.differences(learned.machine)
    console.print(f"{prof.name} {machine}: learned {len(learned.machine.states)} states "
                  f"(the table implies {len(subject.table.states)}) in {learned.seconds:.1f} s, "
                  f"{learned.queries} queries, {learned.requests} requests (seed {seed})")
    if not diffs:
        console.print("equivalent: the server implements the table over these inputs")
    for d in diffs:
        console.print(f"differs after {' '.join(d.word)}: the table says {d.spec[-1]}, the "
                      f"server answered {d.server[-1]} ({d.rule})", highlight=False)
    command = (f"queuewire learn --protocol {protocol} --target {target} --profile {prof.name} "
               f"--machine {machine} --seed {seed}")
    write_outputs(subject, learned, diffs, command=command, target=target, seed=seed,
                  auth_token=token, timeout=timeout, json_out=json_out, dot_out=dot_out,
                  report_dir=report_dir, markdown=markdown)
    raise SystemExit(0 if not diffs else 1)
