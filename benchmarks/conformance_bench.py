#!/usr/bin/env python
"""How long a full conformance run against the embedded reference servers takes.

Runs every packaged case of each profile (default: the profiles ``make run`` checks, i.e.
bunqueue/v2, quicx/v1 and quicx/1.0.3; ``--profile`` repeats) against the in-process
reference server, exactly as ``queuewire conform server --target embedded`` does, ``--runs``
times (``--jobs N``: N cases at once, exclusive cases alone), and keeps the best wall time
per profile. Prints, per profile, the cases, the verdict
counts, the wall time, the time spent inside cases and the slowest cases (where a faster
suite would come from), then the total against the issue's budget of 60 s as a ratio
(budget / measured; above 1.00x is inside the budget). Every run must end with no FAIL or
ERROR, or the script stops: a fast run that fails measures nothing. ``--json FILE`` writes
the figures. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

from queuewire.conformance.model import Verdict
from queuewire.conformance.runner import run_target_sync
from queuewire.spec import load_profile

DEFAULT_PROFILES = ("bunqueue/v2", "quicx/v1", "quicx/1.0.3")
BUDGET_S = 60.0  # issue 5: a full run against the embedded reference servers under 60 s


def measure(profile: str, runs: int, jobs: int = 1) -> dict:
    protocol = load_profile(profile).protocol
    best = None
    for _ in range(runs):
        t0 = time.perf_counter()
        run = run_target_sync(protocol, "embedded", profile=profile, jobs=jobs)
        wall = time.perf_counter() - t0
        counts = run.counts()
        if counts["FAIL"] or counts["ERROR"]:
            bad = [r.case.id for r in run.results if r.verdict in (Verdict.FAIL, Verdict.ERROR)]
            sys.exit(f"{profile}: the run failed ({bad[:5]}...); fix it before timing it")
        if best is None or wall < best["wall_s"]:
            slow = sorted(run.results, key=lambda r: r.duration, reverse=True)[:5]
            best = {"profile": profile, "jobs": jobs, "cases": len(run.results), "counts": counts,
                    "exclusive": sum(r.case.exclusive for r in run.results),
                    "wall_s": round(wall, 3),
                    "in_cases_s": round(sum(r.duration for r in run.results), 3),
                    "coverage": f"{len(run.coverage.exercised)}/{len(run.coverage.applicable)}",
                    "slowest": [(r.case.id, round(r.duration, 3)) for r in slow]}
        print(f"  {profile}: {wall:.2f} s", file=sys.stderr)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action="append", help="profile to run (repeatable); "
                    f"default: {', '.join(DEFAULT_PROFILES)}")
    ap.add_argument("--runs", type=int, default=3, help="runs per profile; best kept")
    ap.add_argument("--jobs", type=int, default=1, help="cases at once (as `queuewire "
                    "conform server --jobs`; exclusive cases alone); default 1, serial")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    rows = [measure(p, args.runs, args.jobs) for p in (args.profile or DEFAULT_PROFILES)]
    total = sum(r["wall_s"] for r in rows)
    print(f"{'profile':<14} {'cases':>5} {'PASS':>5} {'INFO':>5} {'wall s':>7} {'in cases s':>10}"
          f"  coverage")
    for r in rows:
        print(f"{r['profile']:<14} {r['cases']:>5} {r['counts']['PASS']:>5} "
              f"{r['counts']['INFO']:>5} {r['wall_s']:>7.2f} {r['in_cases_s']:>10.2f}  "
              f"{r['coverage']}")
        print("    slowest: " + ", ".join(f"{cid} {d:.2f} s" for cid, d in r["slowest"]))
    print(f"--jobs {args.jobs}: total {total:.2f} s for {sum(r['cases'] for r in rows)} cases; budget "
          f"{BUDGET_S:.0f} s -> {BUDGET_S / total:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "total_s": total, "budget_s": BUDGET_S,
                       "python": platform.python_version()}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
