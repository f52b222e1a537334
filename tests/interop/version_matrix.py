"""``make version-matrix``: every published bunqueue release, probed and judged, into
docs/conformance/versions/.

For each release the spec's profiles name (``spec/profiles.yaml`` ``releases:``, oldest
first), installed into the release cache (:mod:`releases`, outside the repository), this
starts the release on 127.0.0.1 (in memory, a fresh server per run), runs ``queuewire conform
detect`` and ``queuewire conform server`` under the profile that describes the release and
under bunqueue/v2 (the documents), and keeps each JSON report in ``--work``. It then builds the
matrix (:mod:`queuewire.conformance.versions`: the grids, each release's detected profile,
where each deviation appeared or was fixed, every change between adjacent releases explained
by ``spec diff`` of their profiles or listed as not explained) and writes ``index.md``,
``index.html`` and ``matrix.json`` (verdicts only) into ``--out``.

    .venv/bin/python tests/interop/version_matrix.py                 # all releases, ~15 min
    .venv/bin/python tests/interop/version_matrix.py --release 2.8.39 --release 2.9.5 \\
        --out /tmp/vm --select 'bunqueue.hello.*'                    # a subset

A release whose detected profile is not the one the spec names for it is reported in the
page and makes the exit status 1; a release that cannot be installed or started is an error
(exit 2), never a silent gap in the grid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))          # serve_process (free ports)
sys.path.insert(0, str(HERE))                 # releases

import releases  # noqa: E402

from queuewire.conformance.versions import (  # noqa: E402
    Release,
    build_matrix,
    render_html,
    render_markdown,
)
from serve_process import free_tcp_ports  # noqa: E402

ROOT = HERE.parents[1]
BASE = "bunqueue/v2"
QUEUEWIRE = [sys.executable, "-m", "queuewire.cli"]


def _queuewire(args: list[str], log: Path) -> int:
    with log.open("ab") as out:
        return subprocess.run([*QUEUEWIRE, *args], stdout=out, stderr=subprocess.STDOUT,
                              cwd=ROOT, check=False).returncode


def probe(version: str, profile: str, work: Path, select: list[str]) -> Release:
    """Detect, then one conformance run per profile, each against a freshly started server."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"{version}.log"
    detect_json = work / f"{version}-detect.json"
    runs: dict[str, dict] = {}
    started = time.monotonic()
    for step, prof in [("detect", None), *(("server", p) for p in dict.fromkeys((profile, BASE)))]:
        port, http_port = free_tcp_ports(2)
        proc = releases.start(version, work / f"{version}-server.log", port, http_port)
        try:
            target = ["--protocol", "bunqueue", "--target", f"127.0.0.1:{port}"]
            if step == "detect":
                with detect_json.open("wb") as out:
                    subprocess.run([*QUEUEWIRE, "conform", "detect", *target, "--json"],
                                   stdout=out, cwd=ROOT, check=False)
            else:
                assert prof is not None
                report = work / f"{version}-{prof.replace('/', '_')}.json"
                extra = [a for s in select for a in ("--select", s)]
                _queuewire(["conform", "server", *target, "--http-target",
                            f"127.0.0.1:{http_port}", "--profile", prof, "--jobs", "8",
                            "--json", str(report), *extra], log)
                if not report.is_file():
                    raise SystemExit(f"{version}: conform server --profile {prof} wrote no "
                                     f"report (see {log})")
                runs[prof] = json.loads(report.read_text())["runs"][0]
        finally:
            releases.stop(proc)
    try:
        detected = json.loads(detect_json.read_text())
    except (OSError, ValueError):
        raise SystemExit(f"{version}: conform detect gave no JSON (see {log})") from None
    return Release(version, profile, detected, runs, round(time.monotonic() - started, 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", action="append", default=[],
                        help="only this release (repeatable; default: every one the profiles name)")
    parser.add_argument("--select", action="append", default=[],
                        help="only the cases whose id matches (fnmatch glob; repeatable)")
    parser.add_argument("--work", type=Path, default=None,
                        help="where the JSON reports and logs go (default: a temporary directory)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "conformance" / "versions",
                        help="where the page goes (default: docs/conformance/versions)")
    args = parser.parse_args(argv)
    table = releases.described()
    chosen = args.release or list(table)
    unknown = [v for v in chosen if v not in table]
    if unknown:
        parser.error(f"no profile names release(s) {unknown}; known: {list(table)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="queuewire-version-matrix-"))
    t0 = time.monotonic()
    for version in chosen:
        print(f"installing bunqueue {version} (cached in {releases.cache_root()})", flush=True)
        releases.install(version)
    done: list[Release] = []
    for i, version in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] bunqueue {version} ({table[version]})", flush=True)
        rel = probe(version, table[version], work, args.select)
        print(f"    detected {rel.detect.get('best')}, {rel.seconds} s", flush=True)
        done.append(rel)
    matrix = build_matrix(done, BASE)
    minutes = (time.monotonic() - t0) / 60
    produced = ("Produced by `make version-matrix` (`tests/interop/version_matrix.py`): each "
                "release from npm, under bun from tests/interop, started in memory on 127.0.0.1 "
                "for each of `queuewire conform detect` and `queuewire conform server` (its own "
                "profile, then bunqueue/v2)" + (f", cases {args.select}" if args.select else "")
                + ".")
    timing = (f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {minutes:.1f} min for "
              f"{len(done)} releases (" + ", ".join(f"{r.version} {r.seconds} s" for r in done)
              + ").")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "index.md").write_text(render_markdown(matrix, produced_by=produced,
                                                       run_time=timing), encoding="utf-8")
    (args.out / "index.html").write_text(render_html(matrix, produced_by=produced),
                                         encoding="utf-8")
    (args.out / "matrix.json").write_text(json.dumps({
        "releases": [{"version": r.version, "profile": r.profile,
                      "detected": r.detect.get("best"), "seconds": r.seconds} for r in done],
        "grids": matrix.grids,
        "changes": [{"from": a, "to": b, "cases": [
            {"case": c.case, "old": c.old, "new": c.new, "explained_by": list(c.explained_by)}
            for c in cs]} for a, b, cs in matrix.changes],
    }, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    disagree = [r.version for r in done if r.detect.get("best") != r.profile]
    print(f"wrote {args.out}/index.md, index.html, matrix.json in {minutes:.1f} min; "
          f"{matrix.unexplained} change(s) not explained by a profile difference; "
          f"detect disagrees on {disagree or 'no release'}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
