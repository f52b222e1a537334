#!/usr/bin/env python3
"""Run queuewire against every audit daemon and client (variants and mutants) and print a
table: how each was judged, how long it took, what the fuzzers found.

    python tests/quicx_audit/survey.py > tests/quicx_audit/SURVEY.txt
    python tests/quicx_audit/survey.py --only correct --only no-pong --jobs 2
    python tests/quicx_audit/survey.py --queuewire-src /tmp/qw_head/src   # another queuewire

Per daemon, each run on a fresh daemon process (the task queue is the daemon's, so one run's
leftovers would change the next one's verdicts): ``queuewire conform server --profile
quicx/v1`` (its JSON report read back), ``queuewire fuzz --duration 10`` and ``queuewire fuzz
--stateful --max-examples 100``. Per client: ``queuewire conform client --protocol quicx`` and
``queuewire fuzz --client --max-examples 40``. Every run is killed after --per-run seconds
(150); a conform run killed so is run again with ``--timeout 1`` (each expected reply waited
for 1 s, not 5) and its counts are marked ``t1``. Seeds are fixed (1) so two surveys compare.

This script only reads queuewire's command line and reports; it imports nothing of queuewire.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from audit_support import load  # noqa: E402 - the folder is no package

audit_daemon = load("daemon")
audit_client = load("client")

QW = [sys.executable, "-c", "import sys; from queuewire.cli import main; sys.exit(main())"]
VERDICTS = ["PASS", "FAIL", "NON-STRICT", "ERROR", "UNIMPLEMENTED", "INFO"]
# the suite case that leaves a task with a non-UTF-8 type queued on a daemon that accepts it
POISON = "quicx.vector.invalid-text-msg-submit-task-type"
SHORT = {"PASS": "PASS", "FAIL": "FAIL", "NON-STRICT": "N-S", "ERROR": "ERR",
         "UNIMPLEMENTED": "UNIM", "INFO": "INFO"}


@dataclass
class Run:
    rc: int | None = None          # None: killed at the per-run limit
    seconds: float = 0.0
    output: str = ""


@dataclass
class Row:
    name: str
    role: str                       # daemon / client
    kind: str                       # variant / mutant
    conform: Run = field(default_factory=Run)
    conform_retry: Run | None = None
    report: dict | None = None
    isolated: Run | None = None     # conform without the case that poisons the queue
    isolated_report: dict | None = None
    fuzz: Run | None = None
    stateful: Run | None = None
    daemon_log: list[str] = field(default_factory=list)


def run(cmd: list[str], limit: float, env: dict[str, str], cwd: Path) -> Run:
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)         # the run and whatever it started
        out, _ = proc.communicate()
        rc = None
    return Run(rc, time.monotonic() - start, out)


class Daemon:
    """One audit daemon in its own process, on a free port."""

    def __init__(self, variant: str, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "daemon.py"), "--variant", variant, "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        match = re.match(r"listening on (\S+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"daemon {variant} did not start: {line!r}")
        self.target = match.group(1)

    def stop(self) -> list[str]:
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return [ln for ln in err.splitlines() if "Traceback" in ln or " ERROR " in ln]


def survey_daemon(name: str, kind: str, args: argparse.Namespace, env: dict[str, str],
                  tmp: Path) -> Row:
    row = Row(name, "daemon", kind)
    cwd = HERE.parents[1]

    def conform(tag: str, extra: list[str]) -> tuple[Run, dict | None]:
        out = tmp / f"daemon-{name}-{tag}.json"
        d = Daemon(name, env)
        try:
            r = run(QW + ["conform", "server", "--protocol", "quicx", "--target", d.target,
                          "--profile", "quicx/v1", "--json", str(out)] + extra,
                    args.per_run, env, cwd)
        finally:
            row.daemon_log += d.stop()
        return r, (json.loads(out.read_text()) if out.is_file() else None)

    row.conform, row.report = conform("suite", [])
    if row.conform.rc is None:
        row.conform_retry, row.report = conform("suite-t1", ["--timeout", "1"])
    row.isolated, row.isolated_report = conform("skip-poison", ["--skip", POISON])
    for attr, cmd in (("fuzz", ["fuzz", "--protocol", "quicx", "--duration",
                                str(args.fuzz_duration), "--seed", "1", "--quiet"]),
                      ("stateful", ["fuzz", "--stateful", "--protocol", "quicx",
                                    "--max-examples", str(args.stateful_examples),
                                    "--seed", "1"])):
        d = Daemon(name, env)
        try:
            setattr(row, attr, run(QW + cmd + ["--target", d.target], args.per_run, env, cwd))
        finally:
            row.daemon_log += d.stop()
    return row


def survey_client(name: str, kind: str, args: argparse.Namespace, env: dict[str, str],
                  tmp: Path) -> Row:
    row = Row(name, "client", kind)
    testee = f"{sys.executable} {HERE / 'client.py'} --variant {name}"
    out = tmp / f"client-{name}.json"
    cwd = HERE.parents[1]
    row.conform = run(QW + ["conform", "client", "--protocol", "quicx", "--testee", testee,
                            "--json", str(out)], args.per_run, env, cwd)
    row.report = json.loads(out.read_text()) if out.is_file() else None
    row.fuzz = run(QW + ["fuzz", "--client", "--protocol", "quicx", "--max-examples",
                         str(args.client_fuzz_examples), "--seed", "1", "--quiet",
                         "--testee", testee], args.per_run, env, cwd)
    return row


# --- reading the results ------------------------------------------------------------------
def cases(report: dict | None) -> list[dict]:
    if not report or not report.get("runs"):
        return []
    return report["runs"][0]["cases"]


def decided(case: dict) -> tuple[str, str]:
    """The requirement and message that decided a case's verdict."""
    checks = case.get("checks") or []
    i = case.get("decided_by")
    if i is not None and 0 <= i < len(checks):
        return checks[i]["requirement"], checks[i].get("message") or ""
    bad = [c for c in checks if not c.get("ok")]
    if bad:
        return bad[0]["requirement"], bad[0].get("message") or ""
    return (case.get("requirements") or ["?"])[0], case.get("error") or ""


def counts(report: dict | None) -> str:
    if report is None:
        return f"{'no report':>29}"
    c = collections.Counter(case["verdict"] for case in cases(report))
    return " ".join(f"{c.get(v, 0):>4}" for v in VERDICTS)


def non_passing(report: dict | None) -> str:
    reqs: collections.Counter[str] = collections.Counter()
    for case in cases(report):
        if case["verdict"] != "PASS":
            reqs[f"{SHORT[case['verdict']]} {decided(case)[0]}"] += 1
    return ", ".join(f"{k}" + (f" x{n}" if n > 1 else "") for k, n in sorted(reqs.items())) or "-"


def fuzz_summary(r: Run | None) -> str:
    if r is None:
        return ""
    status = "killed" if r.rc is None else f"rc={r.rc}"
    out = re.sub(r"\s+", " ", r.output)
    first = "-"
    m = re.search(r"│ FAIL\s+│ (\S+)\s+│ (\S+)\s+│\s+\d+\s+│ ([^│]*)│", r.output)
    if m:
        first = f"{m.group(1)} {m.group(2)}: {m.group(3).strip()}"
    elif (m := re.search(r"^FAIL stateful .*? against \S+?: (.*)$", r.output, re.M)):
        first = m.group(1).strip()
    elif (m := re.search(r"(\d+) failing", out)) and m.group(1) != "0":
        first = f"{m.group(1)} failing case(s)"
    elif r.rc not in (0, None):
        first = out.strip()[-160:]
    ns = re.search(r"(\d+) non-strict", out)
    extra = f" (+{ns.group(1)} non-strict)" if ns and ns.group(1) != "0" else ""
    return f"{status} {first}{extra}"


def seconds(r: Run | None) -> str:
    if r is None:
        return "-"
    return f"{r.seconds:.0f}s" + ("!" if r.rc is None else "")


def rc(r: Run | None) -> str:
    return "-" if r is None else ("kill" if r.rc is None else str(r.rc))


def table(rows: list[Row]) -> list[str]:
    cols = " ".join(f"{SHORT[v]:>4}" for v in VERDICTS)
    head = f"{'name':<25} {'kind':<7} {'wall':>5}  {cols}  fuzz stfl"
    lines = [head, "-" * len(head)]
    for row in rows:
        runs = [r for r in (row.conform, row.conform_retry, row.isolated, row.fuzz,
                            row.stateful) if r is not None]
        wall = sum(r.seconds for r in runs)
        lines.append(f"{row.name:<25} {row.kind:<7} {wall:>4.0f}s  {counts(row.report)}  "
                     f"{rc(row.fuzz):>4} {rc(row.stateful):>4}")
        full = "conform" if row.role == "client" else "conform (whole suite)"
        timing = seconds(row.conform)
        if row.conform_retry is not None:
            timing += f", rerun --timeout 1: {seconds(row.conform_retry)}, counts above"
        lines.append(f"    {full} [{timing}]: {non_passing(row.report)}")
        if row.role == "daemon":
            lines.append(f"    conform --skip {POISON} [{seconds(row.isolated)}]: "
                         f"{counts(row.isolated_report).strip()} -> "
                         f"{non_passing(row.isolated_report)}")
        lines.append(f"    fuzz [{seconds(row.fuzz)}]: {fuzz_summary(row.fuzz)}")
        if row.stateful is not None:
            lines.append(f"    stateful [{seconds(row.stateful)}]: {fuzz_summary(row.stateful)}")
        if row.daemon_log:
            lines.append(f"    daemon stderr: {len(row.daemon_log)} error line(s): "
                         f"{row.daemon_log[0][:100]}")
    return lines


def details(rows: list[Row]) -> list[str]:
    lines = []
    for row in rows:
        for label, run_, report in (("", row.conform, row.report),
                                    (f" --skip {POISON}", row.isolated, row.isolated_report)):
            if run_ is None:
                continue
            bad = [c for c in cases(report) if c["verdict"] != "PASS"]
            if not bad and report is not None:
                continue
            lines.append(f"{row.role} {row.name} ({row.kind}){label}:")
            if report is None:
                lines.append(f"    no JSON report; last output: {run_.output.strip()[-300:]}")
            for c in bad:
                req, msg = decided(c)
                msg = re.sub(r"\s+", " ", msg)
                lines.append(f"    {c['verdict']:<10} {c['id']:<46} {req:<12} "
                             f"{c['duration']:5.1f}s {msg[:110]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="runs at once (default 4)")
    parser.add_argument("--only", action="append", default=[], help="a daemon/client name")
    parser.add_argument("--daemons-only", action="store_true")
    parser.add_argument("--clients-only", action="store_true")
    parser.add_argument("--per-run", type=float, default=150.0)
    parser.add_argument("--fuzz-duration", type=float, default=10.0)
    parser.add_argument("--stateful-examples", type=int, default=100)
    parser.add_argument("--client-fuzz-examples", type=int, default=40)
    parser.add_argument("--queuewire-src", help="put this queuewire source tree first on "
                        "PYTHONPATH (e.g. a `git archive HEAD` copy)")
    parser.add_argument("--queuewire-label", default="", help="how the header names it")
    parser.add_argument("--keep", help="keep the JSON reports in this directory")
    args = parser.parse_args()

    env = dict(os.environ, COLUMNS="400", NO_COLOR="1")
    if args.queuewire_src:
        env["PYTHONPATH"] = os.pathsep.join(
            [args.queuewire_src] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    where = subprocess.run([sys.executable, "-c", "import queuewire; print(queuewire.__file__)"],
                           env=env, capture_output=True, text=True, check=False).stdout.strip()
    plan = []
    if not args.clients_only:
        plan += [("daemon", n, "variant") for n in audit_daemon.VARIANTS]
        plan += [("daemon", n, "mutant") for n in audit_daemon.MUTANTS]
    if not args.daemons_only:
        plan += [("client", n, "variant") for n in audit_client.VARIANTS]
        plan += [("client", n, "mutant") for n in audit_client.MUTANTS]
    if args.only:
        plan = [p for p in plan if p[1] in args.only]

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="quicx-survey-"))
    tmp.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(survey_daemon if role == "daemon" else survey_client,
                               name, kind, args, env, tmp) for role, name, kind in plan]
        rows = []
        for (role, name, _), fut in zip(plan, futures):
            rows.append(fut.result())
            print(f"done: {role} {name} ({time.monotonic() - start:.0f}s)", file=sys.stderr,
                  flush=True)
    total = time.monotonic() - start

    print("quicx audit survey (tests/quicx_audit/survey.py)")
    print(f"date: {datetime.datetime.now().isoformat(timespec='seconds')}; python "
          f"{platform.python_version()}; queuewire: {where} {args.queuewire_label}".rstrip())
    print(f"runs: conform (limit {args.per_run:.0f}s; killed -> rerun --timeout 1, marked t1), "
          f"fuzz --duration {args.fuzz_duration:g} --seed 1, fuzz --stateful --max-examples "
          f"{args.stateful_examples} --seed 1; clients: conform client, fuzz --client "
          f"--max-examples {args.client_fuzz_examples} --seed 1; {args.jobs} at once")
    print(f"whole survey: {total:.0f} s wall time")
    print("wall: the row's runs added up; counts: the whole suite's verdicts (PASS FAIL "
          "NON-STRICT ERROR UNIMPLEMENTED INFO); fuzz / stfl: exit status of fuzz and "
          "fuzz --stateful ('kill': killed at the limit; '!' after a time: likewise)")
    for role in ("daemon", "client"):
        picked = [r for r in rows if r.role == role]
        if picked:
            print()
            print(f"== {role}s ==")
            print("\n".join(table(picked)))
    print()
    print("== non-passing cases (verdict, case, deciding requirement, case time, message) ==")
    print("\n".join(details(rows)))


if __name__ == "__main__":
    main()
