"""The wheel is whole (issue 24 item 8): built from this checkout with the project's own build
backend, installed into a bare directory and imported from there (not from ``src/``), it finds
its spec and its test vectors, and ``queuewire vectors check`` passes; with the vectors taken
out, the check says so in one clear line (no traceback) and exits 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from queuewire.spec import profile_names

ROOT = Path(__file__).resolve().parents[1]

#: run in the installed copy: where it was imported from, where it found its data, then the
#: ``queuewire`` command itself
PROBE = """
import sys
import queuewire
from queuewire.spec import spec_dir
from queuewire.vectors import vectors_dir
print("file", queuewire.__file__)
print("spec", spec_dir())
print("vectors", vectors_dir())
sys.stdout.flush()
from queuewire.cli import main
main(args=["vectors", "check"], prog_name="queuewire")
"""


def _run(args: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=120, **kw)


def _pip(*args: str, cwd: Path) -> None:
    done = _run([sys.executable, "-m", "pip", *args, "--no-deps", "--no-index", "-q"], cwd=cwd)
    assert done.returncode == 0, f"pip {args[0]} failed:\n{done.stdout}\n{done.stderr}"


def _probe(site: Path, cwd: Path) -> tuple[dict[str, Path], subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("QUEUEWIRE_SPEC_DIR", "PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=str(site), PYTHONNOUSERSITE="1", NO_COLOR="1")
    done = _run([sys.executable, "-c", PROBE], cwd=cwd, env=env)
    where = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("file", "spec", "vectors"):
            where[key] = Path(value).resolve()
    return where, done


def test_installed_wheel_checks_its_own_vectors(tmp_path):
    dist, site, work = tmp_path / "dist", tmp_path / "site", tmp_path / "work"
    work.mkdir()
    _pip("wheel", "--no-build-isolation", "-w", str(dist), str(ROOT), cwd=work)
    wheels = list(dist.glob("queuewire-*.whl"))
    assert len(wheels) == 1, wheels
    _pip("install", "--target", str(site), str(wheels[0]), cwd=work)

    where, done = _probe(site, work)
    # the installed copy was imported, and it found the spec and vectors it ships
    assert where.get("file") == (site / "queuewire" / "__init__.py").resolve(), done.stdout
    assert where["spec"] == (site / "queuewire" / "_spec").resolve()
    assert where["vectors"] == (site / "queuewire" / "_vectors").resolve()
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    # one vector file per profile
    assert "all pass" in done.stdout and f"{len(profile_names())} files" in done.stdout, done.stdout
    assert not (site / "queuewire" / "vectors" / "bunqueue").exists()  # the package, untouched

    # without its vectors: one clear error naming the directory and the way out, rc 1
    shutil.rmtree(site / "queuewire" / "_vectors")
    _, done = _probe(site, work)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    assert f"no test vectors in {(site / 'queuewire' / '_vectors').resolve()}" in done.stderr, done.stderr
    assert "queuewire vectors generate" in done.stderr
