"""``make learned``: the state machines servers implement, learned from outside with ``queuewire
learn``, into docs/conformance/learned/.

For each table with a learn section, this runs ``queuewire learn`` with ``--markdown`` and
``--json`` (the differences run as conformance cases, their verdicts in the page):

* the real bunqueue 2.9.5 (from the release cache, :mod:`releases`; started in memory with a
  fresh auth token, so the auth session can be learned; the token is made here, given through
  ``$QUEUEWIRE_AUTH_TOKEN`` and never written): ``job_lifecycle`` and ``auth_session``;
* the reference servers, embedded: quicx's ``task_dialogue`` under each quicx profile (the
  learned machine equals the table's).

    .venv/bin/python tests/interop/learned_pages.py [--out DIR]

Exit status 2 when a release cannot be started or a learning run fails (not 0 or 1).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))          # serve_process (free ports)
sys.path.insert(0, str(HERE))                 # releases

import releases  # noqa: E402

from queuewire.spec import profile_names  # noqa: E402
from serve_process import free_tcp_ports  # noqa: E402

ROOT = HERE.parent.parent
QUEUEWIRE = Path(sys.executable).parent / "queuewire"
RELEASE = "2.9.5"


def learn(out: Path, name: str, *args: str, env: dict[str, str] | None = None) -> None:
    cmd = [str(QUEUEWIRE), "learn", *args, "--seed", "1", "--markdown", str(out / f"{name}.md"),
           "--json", str(out / f"{name}.json")]
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, check=False, env={**os.environ, **(env or {})})
    if done.returncode not in (0, 1):
        raise SystemExit(f"{name}: queuewire learn exited {done.returncode}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "conformance" / "learned")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not releases.is_installed(RELEASE):
        print(f"bunqueue {RELEASE} is not in the release cache: run `make setup`", file=sys.stderr)
        return 2
    token = secrets.token_hex(16)
    port, http_port = free_tcp_ports(2)
    with tempfile.TemporaryDirectory() as work:
        proc = releases.start(RELEASE, Path(work) / "server.log", port, http_port,
                              env={"AUTH_TOKENS": token})
        try:
            for machine, name in (("job_lifecycle", f"bunqueue-{RELEASE}"),
                                  ("auth_session", f"bunqueue-{RELEASE}-auth_session")):
                learn(args.out, name, "--target", f"127.0.0.1:{port}", "--profile",
                      f"bunqueue/{RELEASE}", "--machine", machine,
                      env={"QUEUEWIRE_AUTH_TOKEN": token})
        finally:
            releases.stop(proc)
    for profile in profile_names("quicx"):
        learn(args.out, f"{profile.replace('/', '-')}-task_dialogue", "--protocol", "quicx",
              "--target", "embedded", "--profile", profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
