"""Run servers as real processes for tests: ``queuewire serve …``, and the real bunqueue.

``start_serve("bunqueue", "--data-path", f)`` starts the daemon on 127.0.0.1 with
``--port 0``, reads the bound port from its "listening on" line, and keeps draining its
output in a thread so a chatty daemon never blocks on a full pipe. ``start_real_bunqueue``
starts npm ``bunqueue`` 2.9.5 under the ``bun`` binary ``make setup`` installs into
tests/interop/node_modules, on free TCP and HTTP ports, in memory, with its per-connection rate
limit lifted. ``stop_serve`` ends either with SIGTERM (SIGKILL if it does not stop). Shared by
the durability and interop tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "interop"))
import releases  # noqa: E402  (tests/interop: the one bunqueue launcher)

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


INTEROP = Path(__file__).resolve().parent / "interop"
BUN = INTEROP / "node_modules" / ".bin" / "bun"
BUNQUEUE_CLI = INTEROP / "node_modules" / "bunqueue" / "dist" / "cli" / "index.js"
REAL_BUNQUEUE_MISSING = (
    None if BUN.exists() and BUNQUEUE_CLI.exists() else
    "bun/bunqueue in tests/interop/node_modules (`make setup`) is missing: the real bunqueue "
    "server cannot be started")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_real_bunqueue(log: Path, timeout: float = 30.0) -> tuple[subprocess.Popen, int, int]:
    """The real bunqueue server, in memory, on free ports; returns (process, TCP port, HTTP
    port). Output goes to ``log``."""
    port, http_port = free_tcp_ports(2)
    if log.exists():
        log.unlink()
    return start_real_bunqueue_at(log, port, http_port, timeout=timeout), port, http_port


def free_tcp_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (for a server restarted on the same ones)."""
    ports: list[int] = []
    while len(ports) < count:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


def start_real_bunqueue_at(log: Path, port: int, http_port: int, *,
                           env: dict[str, str] | None = None,
                           timeout: float = 30.0) -> subprocess.Popen:
    """The real bunqueue server on the given TCP and HTTP ports, in its own process group
    (so :func:`kill_process_group` takes down whatever it spawned), with ``env`` added to the
    environment ``start_real_bunqueue`` gives it (e.g. ``BUNQUEUE_DATA_PATH`` for SQLite
    storage, ``AUTH_TOKENS``). Output is appended to ``log``, so a restart keeps the first
    run's output. Returns once the TCP port accepts connections."""
    try:
        return releases.launch(BUNQUEUE_CLI, INTEROP, log, port, http_port, env=env,
                               timeout=timeout)
    except releases.ReleaseError as exc:
        pytest.fail(str(exc))


def kill_process_group(proc: subprocess.Popen) -> int:
    """SIGKILL the process group of a server started by :func:`start_real_bunqueue_at` (no
    shutdown of any kind: a crash) and reap it; returns the exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    return proc.returncode


def ping_exchange(port: int, count: int, profile: str = "bunqueue/v2") -> tuple[bytes, bytes]:
    """Send ``count`` pipelined bunqueue Pings to 127.0.0.1:``port`` in one write and read
    until every reply is in; returns (the bytes sent, the bytes received)."""
    from queuewire.codecs.bunqueue import FrameDecoder, encode_frame

    frames = b"".join(encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(count))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frames)
        got = b""
        decoder = FrameDecoder(profile, check_depth=False)
        replies: list = []
        while len(replies) < count:
            chunk = sock.recv(65536)
            assert chunk, "the connection closed before every reply"
            got += chunk
            replies += decoder.feed(chunk)
    return frames, got


def proxy_pings(args: list[str], count: int) -> tuple[bytes, bytes, str]:
    """Run ``queuewire ARGS`` (a proxy: tap or trace record, in front of a fresh reference
    bunqueue server whose port replaces ``{port}`` in ARGS), send ``count`` pipelined Pings
    through it, stop it with SIGINT (it must exit 0); returns (sent, received, its output)."""
    server, port = start_serve("bunqueue")
    proc = subprocess.Popen([sys.executable, "-m", "queuewire.cli",
                             *(a.replace("{port}", str(port)) for a in args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.append(proc.stdout.read()), daemon=True)
        reader.start()
        sent, got = ping_exchange(int(match.group(1)), count)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_serve(server)
    return sent, got, line + "".join(rest)


def proc_status_bytes(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for process {pid}")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from a blocking socket; EOFError if the server closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the server closed the connection")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> Any:
    """One bunqueue frame (u32 big-endian length, MessagePack) from a blocking socket."""
    import msgpack

    head = recv_exactly(sock, 4)
    return msgpack.unpackb(recv_exactly(sock, struct.unpack(">I", head)[0]))
