"""Write the conformance report of the real bunqueue 2.9.5 server and its known-failing list.

The input is two `queuewire conform server --report-dir` directories of runs against the real
server (npm ``bunqueue`` 2.9.5, see the page's *How it was produced*): ``--v2`` under the
default profile ``bunqueue/v2`` (documents 000-002) and ``--p295`` under the extension profile
``bunqueue/2.9.5``, each against a freshly started server. The output is the page
``bunqueue-2.9.5.md`` (``--out``) and ``bunqueue-2.9.5-known-failing.txt``
(``--known-failing``), which ``tests/interop/test_conformance_real_bunqueue.py`` gates on.

The per-deviation explanations below (``SECTIONS``: the documents' words, what the server did,
the notes; ``FINDINGS``: why a NON-STRICT case is not a deviation; the lenient-server list)
were written by hand after reading each case's wire transcript and, where cited, bunqueue's
source; the script only lays them out with the run's numbers, the requirement texts loaded
from the spec and wire evidence decoded from the run's case files (each frame's hex with its
MessagePack decoding). Because those explanations are only true of the run they were written
for, the script refuses to write anything when the run does not match them: a FAIL case no
section explains (a new deviation, or a suite change, must be read and explained first), an
explained case that did not FAIL, a failing MUST check citing a requirement its section does
not name, an ERROR case, a NON-STRICT case no finding explains, a finding whose requirement
the spec no longer rates SHOULD, or a ``bunqueue/2.9.5`` FAIL set other than the ``bunqueue/v2``
one minus the deviations that profile documents. Each refusal is a one-line message and exit
status 2.

Usage (from the repository root)::

    .venv/bin/python docs/conformance/make_report.py --v2 DIR --p295 DIR \\
        --out docs/conformance/bunqueue-2.9.5.md \\
        --known-failing docs/conformance/bunqueue-2.9.5-known-failing.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from explanations import CHANGED_CASES, FINDINGS, LENIENT, deviations, readings
from report_parts import PROFILE, ReportError, Section

from queuewire.spec import load_profile

KNOWN_FAILING_HEADER = """\
# Known-failing cases of the real bunqueue 2.9.5 server (npm bunqueue@2.9.5) under profile
# bunqueue/v2 (documents 000-002): exactly the FAIL cases of
#   queuewire conform server --protocol bunqueue --target HOST:PORT --http-target HOST:HTTP
# each a deviation from the documents checked by hand; evidence in bunqueue-2.9.5.md.
# Format: the --known-failing file (one case id per line, '# reason (requirement)').
# Written with the page by docs/conformance/make_report.py.
# tests/interop/test_conformance_real_bunqueue.py fails when this list is stale.

"""


# --- checking the run against the explanations ---------------------------------------------


def _load_run(report_dir: Path, profile: str) -> dict:
    path = report_dir / "report.json"
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError) as exc:
        raise ReportError(f"cannot read a conformance report at {path}: {exc}") from exc
    if len(runs) != 1:
        raise ReportError(f"{path} holds {len(runs)} runs; one run per report directory expected")
    run = runs[0]
    if run.get("protocol") != "bunqueue" or run.get("profile") != profile:
        raise ReportError(f"{path} is a {run.get('protocol')} run under profile "
                          f"{run.get('profile')}; expected bunqueue under {profile}")
    return run


def _ids(run: dict, verdict: str) -> list[str]:
    return sorted(c["id"] for c in run["cases"] if c["verdict"] == verdict)


def check_run(run: dict, run295: dict, secs: list[Section], reads: list[Section],
              profile) -> None:
    """Raise ReportError unless the runs are exactly what the explanations describe."""
    cases = {c["id"]: c for c in run["cases"]}
    fails = set(_ids(run, "FAIL"))
    for verdict in ("ERROR", "UNIMPLEMENTED"):
        if run["counts"].get(verdict):
            raise ReportError(f"the bunqueue/v2 run has {verdict} cases: {_ids(run, verdict)}")
    explained: dict[str, Section] = {}
    for sec in secs:
        for rid in sec.reqs:
            if rid not in profile.requirements:
                raise ReportError(f"section {sec.title!r} cites {rid}, which {PROFILE} lacks")
            req = profile.requirements[rid]
            if req.level != "MUST" or req.basis != "stated":
                raise ReportError(f"deviation {sec.title!r} cites {rid}, a {req.level} "
                                  f"({req.basis}): a FAIL rests on a stated MUST")
        for cid in sec.cases:
            if cid in explained:
                raise ReportError(f"{cid} is explained twice: {explained[cid].title!r} and "
                                  f"{sec.title!r}")
            explained[cid] = sec
    unexplained = sorted(fails - set(explained))
    if unexplained:
        raise ReportError(f"FAIL case(s) no section explains (read the transcripts and write a "
                          f"section first): {', '.join(unexplained)}")
    not_failing = sorted(f"{c} ({cases[c]['verdict'] if c in cases else 'not in the run'})"
                         for c in explained if c not in fails)
    if not_failing:
        raise ReportError(f"explained case(s) that did not FAIL: {', '.join(not_failing)}")
    for cid, sec in explained.items():
        cited = {ch.get("requirement") for ch in cases[cid]["checks"]
                 if not ch["ok"] and ch.get("level") == "MUST"}
        stray = sorted(str(r) for r in cited - set(sec.reqs) - set(sec.also.get(cid, ())))
        if stray:
            raise ReportError(f"{cid} fails MUST checks of {', '.join(stray)}, which its section "
                              f"{sec.title!r} does not name")
    found = {f.case: f for f in FINDINGS}
    nonstrict = set(_ids(run, "NON-STRICT"))
    read: dict[str, Section] = {}
    for sec in reads:
        for rid in sec.reqs:
            req = profile.requirements.get(rid)
            if req is None or req.level == "MUST" or req.basis == "stated":
                raise ReportError(f"reading {sec.title!r} cites {rid}, which is "
                                  f"{'missing' if req is None else req.level + ' ' + str(req.basis)}"
                                  f": a reading rests on a SHOULD that is not stated")
        for cid in sec.cases:
            if cid in read or cid in found or cid in explained:
                raise ReportError(f"{cid} is explained twice (reading {sec.title!r})")
            read[cid] = sec
            verdict = cases[cid]["verdict"] if cid in cases else "not in the run"
            if verdict != "NON-STRICT":
                raise ReportError(f"reading {sec.title!r}: {cid} is {verdict}, not NON-STRICT")
            cited = {ch.get("requirement") for ch in cases[cid]["checks"] if not ch["ok"]}
            if not cited <= set(sec.reqs):
                raise ReportError(f"{cid} fails checks of {', '.join(sorted(map(str, cited)))}; "
                                  f"its reading {sec.title!r} names {', '.join(sec.reqs)}")
    if nonstrict - set(found) - set(read):
        raise ReportError(f"NON-STRICT case(s) no finding or reading explains: "
                          f"{', '.join(sorted(nonstrict - set(found) - set(read)))}")
    for f in FINDINGS:
        verdict = cases[f.case]["verdict"] if f.case in cases else "not in the run"
        if verdict != "NON-STRICT" and not (f.may_pass and verdict == "PASS"):
            raise ReportError(f"finding {f.case} is {verdict}, not NON-STRICT")
        level = profile.requirements[f.requirement].level
        if level != "SHOULD":
            raise ReportError(f"finding {f.case} rests on {f.requirement}, which the spec now "
                              f"rates {level}, not SHOULD")
        cited = {ch.get("requirement") for ch in cases[f.case]["checks"] if not ch["ok"]}
        if verdict == "NON-STRICT" and cited != {f.requirement}:
            raise ReportError(f"finding {f.case} expects failing checks of {f.requirement} only; "
                              f"they cite {', '.join(sorted(map(str, cited)))}")
    want295 = fails - {c for sec in secs if sec.documented_by_295 for c in sec.cases}
    got295 = set(_ids(run295, "FAIL"))
    if got295 != want295:
        raise ReportError(
            f"the bunqueue/2.9.5 FAIL set differs from the bunqueue/v2 one minus the deviations "
            f"that profile documents: extra {sorted(got295 - want295)}, "
            f"missing {sorted(want295 - got295)}")
    if run295["counts"].get("ERROR"):
        raise ReportError(f"the bunqueue/2.9.5 run has ERROR cases: {_ids(run295, 'ERROR')}")


# --- writing --------------------------------------------------------------------------------


def _head_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ReportError(f"cannot read the commit with git rev-parse (give --commit): {exc}") \
            from exc


def render_page(run: dict, run295: dict, secs: list[Section], reads: list[Section], profile,
                cases_dir: Path, commit: str) -> str:
    cases = {c["id"]: c for c in run["cases"]}
    fails = _ids(run, "FAIL")
    c, cov = run["counts"], run["coverage"]
    n_limit = sum(1 for i in fails if i.startswith("bunqueue.limit."))
    n_queue = sum(1 for i in fails if i.startswith("bunqueue.limit.queue_name_"))
    row = " | ".join(str(c[v]) for v in ("FAIL", "ERROR", "UNIMPLEMENTED", "NON-STRICT", "INFO", "PASS"))
    row = f"| {len(secs)} | {row} | {run['total']} |"
    watched = {ch.get("requirement") for case in run["cases"] if case["verdict"] == "INFO"
               for ch in case["checks"]}
    observed = [r for r in cov["not_exercised_ids"] if r in watched
                and profile.requirements[r].basis == "decision"]
    unjudged = [r for r in cov["not_exercised_ids"] if r not in observed]
    documented = [f"`{i}`" for sec in secs if sec.documented_by_295 for i in sec.cases]
    out: list[str] = []
    w = out.append
    w(f"""# bunqueue 2.9.5 against the documents

This page is the conformance report of the **real bunqueue server, npm `bunqueue` 2.9.5**,
against the bunqueue documents 000-002 (profile `bunqueue/v2`). Every FAIL below was checked
by hand against the documents and the wire transcript; the evidence is the bytes the suite
sent and received (each frame as its `u32` big-endian length prefix plus MessagePack payload,
shown as hex with its decoding above it).

The verdicts follow the spec's levels policy (`spec/README.md`, "Levels and basis"): every
requirement records its basis. A FAIL rests on a MUST whose basis is `stated`: the documents
say it, and the requirement quotes the sentence. A reading of the documents (`implied`) or a
queuewire decision where they are silent (`decision`) is at most a SHOULD, so a server that
does otherwise is NON-STRICT (*Readings* and *Findings* below); where the documents are silent
a case only observes (INFO). Where two documents disagree, the requirement shows both quotes.

The page and the known-failing list are written by
[`make_report.py`](make_report.py) from the report directories of the two runs below; the
explanations in it were written by hand after reading each transcript, and it refuses to
write anything when the run has a FAIL no explanation covers or an explained case that did
not FAIL.

## How it was produced

- Server: `bunqueue` 2.9.5 from npm (Hello answers `server: "bunqueue", version: "2.9.5"`),
  run by `bun` 1.4.4 from `tests/interop/node_modules` (`make setup`), in-memory storage, no
  auth tokens, the per-connection rate limit lifted so the suite is not throttled:

  ```sh
  cd tests/interop
  RATE_LIMIT_MAX_REQUESTS=1000000000 RATE_LIMIT_WINDOW_MS=60000 LOG_LEVEL=error \\
  PATH="$PWD/node_modules/.bin:$PATH" \\
  node_modules/.bin/bun node_modules/bunqueue/dist/cli/index.js start \\
      --host 127.0.0.1 --tcp-port 17791 --http-port 17792
  ```

- Suite: queuewire at commit `{commit}`; run on {run['started_at'][:10]} with

  ```sh
  queuewire conform server --protocol bunqueue --target 127.0.0.1:17791 \\
      --http-target 127.0.0.1:17792 --report-dir report-v2/
  ```

  and, against a freshly started server, the same with `--profile bunqueue/2.9.5
  --report-dir report-2.9.5/`; then

  ```sh
  .venv/bin/python docs/conformance/make_report.py --v2 report-v2 --p295 report-2.9.5 \\
      --out docs/conformance/bunqueue-2.9.5.md \\
      --known-failing docs/conformance/bunqueue-2.9.5-known-failing.txt
  ```

- Stability: the same FAIL set (the {len(fails)} cases of
  [`bunqueue-2.9.5-known-failing.txt`](bunqueue-2.9.5-known-failing.txt)) came out of four
  full runs during the review that first wrote this page and again at `{commit}`, each
  against a freshly started server; with that file as `--known-failing` the first
  `queuewire conform` command above exits 0.
  `tests/interop/test_conformance_real_bunqueue.py` repeats the run with that file as
  `--known-failing` and fails on any new FAIL, any ERROR, or a listed case that passes.

## Summary

| deviations | FAIL cases | ERROR | UNIMPLEMENTED | NON-STRICT | INFO | PASS | total cases |
|---:|---:|---:|---:|---:|---:|---:|---:|
{row}

A deviation is one behaviour of the server that breaks a stated MUST, counted once however many
cases show it (Hello's version is seen by `hello.version` and `shape.Hello`; the `prioritized`
and `paused` states by GetJobCounts and GetJobs); each section below lists its cases.

Requirement coverage: {cov['exercised']} of the {cov['applicable']} requirements of
`bunqueue/v2` that bind a server were exercised by a judged check; of the other
{len(cov['not_exercised_ids'])}, {len(observed)} are queuewire decisions the INFO cases only
observe ({', '.join(observed) or 'none'}), and {len(unjudged)}
({', '.join(unjudged)}) are not judged over the wire: a server setting or a receiver the suite
does not control is needed (the INFO cases below observe some of them; the flow-control rules
BQ-FLOW-* are tested on queuewire's own servers by `tests/reliability`). {len(cov['out_of_scope_ids'])} requirements bind clients or workers
only and are out of scope for a server run.

The {c['FAIL']} FAIL cases come from {len(secs)} deviations, each resting on a stated MUST
({n_limit} of them generated limit cases, {n_queue} of those queue names). The
{c['NON-STRICT']} NON-STRICT cases come from {len(reads)} readings and {len(FINDINGS)} findings.
A behaviour case judges its behaviour: the shape of a reply it only uses as a step is judged by
the cases that cite that command's shape, so one odd field no longer fails every case that
touches the command. Two cases only observe (INFO), because what they check is a queuewire
decision the documents do not make: `bunqueue.job.backoff-exponential` (retry delays without
jitter; 001 says only "exponential backoff", which bunqueue's jittered backoff satisfies) and
`bunqueue.deps.children-values` (that a job's `dependsOn` parents make it their child; no
document links the two).

Under the documented extension profile `bunqueue/2.9.5` (`--profile bunqueue/2.9.5`, which
retires BQ-HELLO-2 for protocol version 3 and the `separate-job-name` capability) the same
run gives {run295['counts']['FAIL']} FAIL ({run295['total']} cases): every case below except
{' and '.join(documented)}.

Replies in the transcripts below carry `id: undefined` (MessagePack ext type 0, bytes
`d4 00 00`) in every plain `{{ok: true}}` reply (ACK, FAIL, Cancel, Pause, Obliterate, ...);
that is how msgpackr encodes JavaScript's `undefined`. A documented field set to undefined
counts as absent (BQ-ENV-7), but `id` is not documented for these replies, so every report
lists it among the fields the documents do not define (an observation, not a deviation).

## Deviations

""")
    for sec in secs:
        _render_section(w, sec, profile, cases_dir)
    w(f"""## Readings the documents do not make binding (NON-STRICT)

Each of these cases checks a requirement that is a *reading* of the documents (basis
`implied`): the documents' words are quoted, but they do not say in so many words what the
case checks, so the spec rates it SHOULD and a server that does otherwise is NON-STRICT
({sum(len(r.cases) for r in reads)} cases in {len(reads)} readings). They are reported with
the same evidence as the deviations, and do not fail the run.

""")
    for sec in reads:
        _render_section(w, sec, profile, cases_dir)
    w("""## Findings that are not deviations

These cases are NON-STRICT (a SHOULD not followed). Each rests on a queuewire reading that the
documents do not make binding, and the spec rates the requirement its checks cite a SHOULD;
they do not fail the run.

""")
    for f in FINDINGS:
        case = cases[f.case]
        msgs = [ch["message"] for ch in case["checks"] if not ch["ok"]]
        w(f"- `{f.case}` ({case['verdict']} in the run above; {f.requirement}, "
          f"{profile.requirements[f.requirement].level}): {f.why}\n")
        for m in msgs[:2]:
            w(f"  - check: {m}\n")
    w("\n" + CHANGED_CASES + "\n## Observations (INFO)\n\n")
    for cid in _ids(run, "INFO"):
        m = "; ".join(ch["message"] for ch in cases[cid]["checks"])
        w(f"- `{cid}`: {m}\n")
    w(LENIENT)
    return "".join(out)


def _render_section(w: Any, sec: Section, profile: Any, cases_dir: Path) -> None:
    """One deviation or reading: its requirements (level, basis, text, and where another
    document says otherwise), the documents' words, the server's behaviour, the evidence."""
    w(f"### {' / '.join(sec.reqs)}: {sec.title}\n")
    for rid in sec.reqs:
        r = profile.requirements[rid]
        w(f"- **{rid}** ({r.level}, {r.basis}): {r.text}\n")
        for other in r.disagrees:
            w(f"  - but {other['doc']}, {other['section']}: \"{other['quote']}\"\n")
    w(f"\n**The documents:** {sec.docs}\n\n**The server:** {sec.did}\n\n")
    if sec.note:
        w(f"{sec.note}\n\n")
    w("Wire evidence (`->` sent by the suite, `<-` received; `cN` the connection):\n\n")
    for ev in sec.evidence:
        w(ev.render(cases_dir) + "\n")
    w("Cases: " + ", ".join(f"`{i}`" for i in sec.cases) + ".\n\n")


def render_known_failing(run: dict, secs: list[Section]) -> str:
    reasons = {cid: sec.reason_for(cid) for sec in secs for cid in sec.cases}
    lines = [f"{cid:<62}# {reasons[cid]}" for cid in _ids(run, "FAIL")]
    return KNOWN_FAILING_HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--v2", type=Path, required=True,
                        help="report directory of the run under profile bunqueue/v2")
    parser.add_argument("--p295", type=Path, required=True,
                        help="report directory of the run under profile bunqueue/2.9.5")
    parser.add_argument("--out", type=Path, required=True, help="the page to write")
    parser.add_argument("--known-failing", type=Path, required=True,
                        help="the known-failing list to write")
    parser.add_argument("--commit", help="the suite's commit the page names "
                                         "(default: git rev-parse --short HEAD)")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(PROFILE)
        run = _load_run(args.v2, PROFILE)
        run295 = _load_run(args.p295, "bunqueue/2.9.5")
        secs = deviations(_ids(run, "FAIL"))
        reads = readings(_ids(run, "NON-STRICT"))
        check_run(run, run295, secs, reads, profile)
        page = render_page(run, run295, secs, reads, profile, args.v2 / "cases",
                           args.commit or _head_commit())
        known = render_known_failing(run, secs)
    except ReportError as exc:
        print(f"make_report: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(page)
    args.known_failing.write_text(known)
    print(f"wrote {args.out} ({run['counts']['FAIL']} FAIL cases in {len(secs)} deviations) "
          f"and {args.known_failing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
