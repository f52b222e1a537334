"""A bounded fuzz run against the real bunqueue 2.9.5 (npm, under bun): every failing finding
(a MUST not followed) cites a requirement that some known-failing case of
docs/conformance/bunqueue-2.9.5-known-failing.txt cites, or one listed, still untriaged, in
docs/conformance/bunqueue-2.9.5-fuzz-untriaged.txt; the run plays every case."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from queuewire.conformance.known_failing import parse_known_failing
from serve_process import REAL_BUNQUEUE_MISSING, start_real_bunqueue, stop_serve

ROOT = Path(__file__).resolve().parents[2]
KNOWN_FAILING = ROOT / "docs" / "conformance" / "bunqueue-2.9.5-known-failing.txt"
UNTRIAGED = ROOT / "docs" / "conformance" / "bunqueue-2.9.5-fuzz-untriaged.txt"
PROFILE = "bunqueue/v2"   # the documents, as the published report judges the real server
CASES = 400

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or REAL_BUNQUEUE_MISSING is not None,
    reason=REAL_BUNQUEUE_MISSING or "node is missing: the real bunqueue server cannot be started")


def _known_requirements() -> set[str]:
    text = KNOWN_FAILING.read_text()
    parse_known_failing(text, str(KNOWN_FAILING))       # the file is well formed
    return set(re.findall(r"\((BQ-[A-Za-z0-9-]+)\)\s*$", text, flags=re.M))


def _untriaged() -> set[str]:
    return {line.split("#", 1)[0].strip() for line in UNTRIAGED.read_text().splitlines()
            if line.split("#", 1)[0].strip()}


def test_bounded_fuzz_finds_only_documented_deviations(tmp_path):
    known = _known_requirements()
    assert known, "no requirement ids in the known-failing file"
    untriaged = _untriaged()
    assert not untriaged & known, f"listed in both files: {sorted(untriaged & known)}"
    proc, port, _http = start_real_bunqueue(tmp_path / "server.log")
    try:
        run = subprocess.run(
            [sys.executable, "-m", "queuewire.cli", "fuzz", "--protocol", "bunqueue",
             "--profile", PROFILE, "--target", f"127.0.0.1:{port}", "--max-examples",
             str(CASES), "--seed", "20261124", "--artifacts", str(tmp_path / "out"), "--quiet",
             "--max-failures", str(CASES),
             "--bound", "5"],
            capture_output=True, text=True, timeout=600, check=False)
    finally:
        stop_serve(proc)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert f"{CASES} cases" in run.stdout, run.stdout
    found: dict[str, list[str]] = {}
    for path in sorted((tmp_path / "out").glob("*.json")) if (tmp_path / "out").exists() else []:
        doc = json.loads(path.read_text())
        for f in doc.get("findings") or []:
            if f.get("level") == "FAIL":     # a stated MUST not followed: what fails a run
                found.setdefault(str(f.get("requirement")), []).append(path.name)
    undocumented = {rid: files for rid, files in found.items()
                    if rid not in known and rid not in untriaged}
    assert not undocumented, (
        "the fuzzer found deviations of the real bunqueue that neither the conformance report "
        f"nor {UNTRIAGED.name} lists: {undocumented}")
    if run.returncode == 1:
        assert found, "exit status 1 without a FAIL transcript"
