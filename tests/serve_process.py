"""Run ``queuewire serve …`` as a real process for tests, and learn its ephemeral port.

``start_serve("bunqueue", "--data-path", f)`` starts the daemon on 127.0.0.1 with
``--port 0``, reads the bound port from its "listening on" line, and keeps draining its
output in a thread so a chatty daemon never blocks on a full pipe. ``stop_serve`` ends it
with SIGTERM (SIGKILL if it does not stop). Shared by the durability and interop tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


def start_serve(protocol: str, *args: str, timeout: float = 20.0) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuewire.cli", "serve", protocol, "--host", "127.0.0.1",
         "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        match = LISTENING.search(line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, int(match.group(1))
    proc.kill()
    proc.wait(timeout=5)
    pytest.fail(f"`queuewire serve {protocol}` did not start: {''.join(seen)!r}")


def stop_serve(proc: subprocess.Popen) -> int:
    """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return proc.returncode
