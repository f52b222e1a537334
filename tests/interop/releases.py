"""A cache of npm ``bunqueue`` releases, one install prefix per version, and a way to run them.

``python tests/interop/releases.py install [VERSIONS...]`` installs each version (default: every
one of :data:`RELEASES`) into its own prefix under the cache root, ``$QUEUEWIRE_RELEASES`` or
``~/.cache/queuewire/bunqueue-releases``, as ``<root>/<version>``; ``list`` prints what is there.
From Python: :func:`install`, :func:`cli_path`, :func:`start` and :func:`stop`.

Design:

* One prefix per version (``npm install --prefix DIR``), not one project with aliases: each
  release gets exactly the dependency tree npm resolves for it, and nothing is shared that a
  later install could change. The cache lives outside the repository, so releases survive a
  fresh work tree and are never committed.
* An install goes into a temporary directory beside the final one and is renamed into place
  only once its CLI entry file exists, so an interrupted install never counts as installed; a
  version whose prefix is complete is skipped.
* ``--ignore-scripts`` is safe: no published bunqueue release has a preinstall, install or
  postinstall script (``npm view bunqueue@V scripts``: only ``prepare``, which npm does not run
  for registry installs), and ``--omit=optional`` drops the only dependency that has one
  (msgpackr's native ``msgpackr-extract``: msgpackr falls back to pure JS). It is even needed:
  2.7.x declares a peer dependency ``bun ^1.3.9``, which npm installs, and whose postinstall
  would download a bun binary. The ``bun`` that runs every release is the one ``make setup``
  puts into tests/interop/node_modules (that install keeps scripts for bun's own postinstall).
* The CLI entry file is read from the installed package.json ``bin`` (``bunqueue`` entry, or
  the string form), not hard-coded, so a release that moves it still starts.
* :func:`start` mirrors ``serve_process.start_real_bunqueue_at``: loopback only, in memory
  (every storage and auth variable removed), the per-connection rate limit lifted, its own
  process group, output appended to the log, returning once the TCP port accepts connections;
  :func:`stop` SIGKILLs the whole group. Failures raise :class:`ReleaseError` naming the
  version and what failed (no pytest here: callers decide whether that skips or fails).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path


def described() -> dict[str, str]:
    """Each release spec/profiles.yaml names (a profile's ``releases``), oldest first, with
    the profile that describes it: every bunqueue release on npm (``npm view bunqueue
    versions --json``) when the spec is up to date, which the version matrix shows."""
    from queuewire.spec import load_profile, profile_names

    out: dict[str, str] = {}
    for name in profile_names("bunqueue"):
        for version in load_profile(name).releases:
            if version in out:
                raise ReleaseError(f"release {version} is named by {out[version]} and {name}")
            out[version] = name
    return dict(sorted(out.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))



INTEROP = Path(__file__).resolve().parent
BUN = INTEROP / "node_modules" / ".bin" / "bun"
NPM_FLAGS = ("--no-save", "--omit=optional", "--no-audit", "--no-fund", "--ignore-scripts",
             "--loglevel=error")
SCRUBBED_ENV = ("BUNQUEUE_DATA_PATH", "BQ_DATA_PATH", "DATA_PATH", "SQLITE_PATH",
                "BUNQUEUE_STORAGE_DRIVER", "BUNQUEUE_POSTGRES_URL", "AUTH_TOKENS")


class ReleaseError(RuntimeError):
    """A release could not be installed, found or started; the message says which and why."""


#: Every bunqueue release the spec's profiles describe, oldest first.
RELEASES: tuple[str, ...] = tuple(described())


def cache_root() -> Path:
    """``$QUEUEWIRE_RELEASES``, else ``~/.cache/queuewire/bunqueue-releases``."""
    env = os.environ.get("QUEUEWIRE_RELEASES")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "queuewire" / "bunqueue-releases"


def prefix(version: str, root: Path | None = None) -> Path:
    """The install prefix of ``version`` (it need not exist)."""
    return (root or cache_root()) / version


def _entry(pkg_dir: Path, version: str) -> Path:
    manifest = pkg_dir / "package.json"
    try:
        meta = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"bunqueue {version}: cannot read {manifest}: {exc}") from exc
    if meta.get("version") != version:
        raise ReleaseError(f"bunqueue {version}: {manifest} says version {meta.get('version')!r}")
    bin_field = meta.get("bin")
    rel = bin_field.get("bunqueue") if isinstance(bin_field, dict) else bin_field
    if not isinstance(rel, str):
        raise ReleaseError(f"bunqueue {version}: {manifest} has no 'bunqueue' bin entry: {bin_field!r}")
    path = (pkg_dir / rel).resolve()
    if not path.is_file():
        raise ReleaseError(f"bunqueue {version}: its bin entry {rel!r} is missing ({path})")
    return path


def cli_path(version: str, root: Path | None = None) -> Path:
    """The bunqueue CLI entry file of an installed ``version`` (from its package.json ``bin``)."""
    pkg_dir = prefix(version, root) / "node_modules" / "bunqueue"
    if not pkg_dir.is_dir():
        raise ReleaseError(f"bunqueue {version} is not installed in {prefix(version, root)} "
                           f"(run: python tests/interop/releases.py install {version})")
    return _entry(pkg_dir, version)


def is_installed(version: str, root: Path | None = None) -> bool:
    try:
        cli_path(version, root)
    except ReleaseError:
        return False
    return True


def install(version: str, root: Path | None = None, *, force: bool = False) -> Path:
    """Install ``bunqueue@version`` into its prefix unless already there; returns the CLI path."""
    final = prefix(version, root)
    if not force and is_installed(version, root):
        return cli_path(version, root)
    npm = shutil.which("npm")
    if npm is None:
        raise ReleaseError(f"bunqueue {version}: npm is not on PATH, so it cannot be installed")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{version}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        done = subprocess.run([npm, "install", "--prefix", str(tmp), *NPM_FLAGS,
                               f"bunqueue@{version}"],
                              check=False, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ReleaseError(f"bunqueue {version}: npm install exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-1500:]}")
        _entry(tmp / "node_modules" / "bunqueue", version)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    except subprocess.TimeoutExpired as exc:
        raise ReleaseError(f"bunqueue {version}: npm install took over {exc.timeout} s") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return cli_path(version, root)


def start(version: str, log: Path, port: int, http_port: int, *,
          env: Mapping[str, str] | None = None, root: Path | None = None,
          timeout: float = 30.0) -> subprocess.Popen:
    """Start bunqueue ``version`` of the release cache (:func:`launch`)."""
    return launch(cli_path(version, root), prefix(version, root), log, port, http_port, env=env,
                  timeout=timeout, name=f"bunqueue {version}")


def launch(cli: Path, cwd: Path, log: Path, port: int, http_port: int, *,
           env: Mapping[str, str] | None = None, timeout: float = 30.0,
           name: str = "bunqueue") -> subprocess.Popen:
    """Start the bunqueue CLI ``cli`` under bun on 127.0.0.1:``port`` (HTTP ``http_port``), in
    memory (the storage and auth variables of the environment are dropped), with its rate limit
    lifted and ``env`` added, in its own process group; output is appended to ``log``. Returns
    once the TCP port accepts connections; :class:`ReleaseError` when it exits first or does not
    listen within ``timeout`` (then it is killed). The one launcher of the tests and scripts."""
    if not BUN.exists():
        raise ReleaseError(f"{name}: no bun at {BUN} (run `make setup`)")
    full_env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    full_env.update(RATE_LIMIT_MAX_REQUESTS="1000000000", RATE_LIMIT_WINDOW_MS="60000",
                    LOG_LEVEL="error", PATH=f"{BUN.parent}{os.pathsep}{full_env.get('PATH', '')}")
    full_env.update(env or {})
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(BUN), str(cli), "start", "--host", "127.0.0.1", "--tcp-port", str(port),
             "--http-port", str(http_port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=full_env,
            start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ReleaseError(f"{name} exited with {proc.returncode} before listening "
                               f"on 127.0.0.1:{port}: {_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return proc
        except OSError:
            time.sleep(0.05)
    stop(proc)
    raise ReleaseError(f"{name} did not listen on 127.0.0.1:{port} within {timeout} s: "
                       f"{_tail(log)}")


def stop(proc: subprocess.Popen) -> int:
    """SIGKILL the process group of a server from :func:`start` and reap it; the exit status."""
    # Always the group: whatever the server spawned dies with it even if the leader has exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    return proc.returncode


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-2000:]
    except OSError:
        return "(no log)"


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="cache root (default: $QUEUEWIRE_RELEASES or "
                        "~/.cache/queuewire/bunqueue-releases)")
    sub = parser.add_subparsers(dest="action", required=True)
    inst = sub.add_parser("install", help="install releases (default: all of RELEASES)")
    inst.add_argument("versions", nargs="*", metavar="VERSION")
    inst.add_argument("--force", action="store_true", help="reinstall even if present")
    sub.add_parser("list", help="show each release and where its CLI is")
    args = parser.parse_args(list(argv) if argv is not None else None)
    root = args.root or cache_root()
    if args.action == "list":
        for version in RELEASES:
            print(version, cli_path(version, root) if is_installed(version, root) else "-")
        return 0
    failed = 0
    for version in args.versions or RELEASES:
        was = is_installed(version, root) and not args.force
        try:
            path = install(version, root, force=args.force)
        except ReleaseError as exc:
            failed += 1
            print(f"FAILED {exc}", file=sys.stderr)
            continue
        print(f"{version}: {'already installed' if was else 'installed'}: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
