"""Hostile case files given to ``queuewire conform replay`` (issue 22, items 2 and 3).

A case file is DATA users share: replaying one must never import or execute anything it
names (item 2), and must never allocate or sleep without bound (item 3). Each hostile file
goes through the real replay entry point (``python -m queuewire.cli conform replay``) in a
subprocess with an address-space limit and a wall-clock guard, so a regression fails here
instead of taking the machine; the only server is a byte sink on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import resource
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

MEMORY_LIMIT = 1 << 30   # address space of the replay subprocess: a bomb fails, not the box
GUARD = 20.0             # seconds a replay subprocess may take before the test fails
PING = "0000001282a3636d64a450696e67a57265714964a131"  # a bunqueue frame: {cmd: Ping, reqId: "1"}


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.fixture()
def sink() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts and discards everything; yields its port."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def drain(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.2)
            while not stop.is_set():
                try:
                    if not conn.recv(1 << 16):
                        return
                except TimeoutError:
                    continue
                except OSError:
                    return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        srv.close()


def replay(path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``conform replay`` in a subprocess (memory-limited, time-guarded)."""
    return subprocess.run([sys.executable, "-m", "queuewire.cli", "conform", "replay",
                           str(path), *args], capture_output=True, text=True, timeout=GUARD, check=False,
                          preexec_fn=_limit_memory, cwd=cwd)


def case_file(path: Path, transcript: list[dict], **extra: object) -> Path:
    doc = {"id": "bunqueue.hostile", "protocol": "bunqueue", "profile": "bunqueue/v2",
           "verdict": "FAIL", "transcript": transcript, **extra}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def send(t: float = 0.0, **kw: object) -> dict:
    return {"t": t, "conn": 1, "direction": "send", "hex": PING, "note": "", **kw}


def assert_clear_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}: {text[-2000:]}"
    assert "Traceback" not in text, text[-2000:]
    for w in words:
        assert w in text, f"{w!r} not in the error: {text[-2000:]}"


# -- item 2: a case file names code ------------------------------------------------------------
def _logic_case(path: Path, logic: str) -> Path:
    definition = {"id": "bunqueue.frame.over-limit-close", "title": "x", "protocol": "bunqueue",
                  "requirements": ["BQ-FRAME-2"], "logic": logic}
    return case_file(path, [send()], id=definition["id"], case=definition, checks=[])


def test_logic_of_a_case_file_is_never_imported(tmp_path):
    """Item 2: 'logic': 'this:x' and a module file placed beside the case are refused with a
    message naming the rule; the module never runs (no marker) and sys.modules gains nothing."""
    marker = tmp_path / "marker"
    (tmp_path / "evilcase.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nasync def run(ctx):\n    pass\n")
    for logic in ("this:x", "evilcase:run"):
        path = _logic_case(tmp_path / "case.json", logic)
        # the working directory (the case's) is on sys.path with `python -m`
        proc = replay(path, "--target", "127.0.0.1:9", cwd=tmp_path)
        assert_clear_error(proc, "logic", "installed suite")
        assert not marker.exists(), f"{logic}: the module beside the case was imported"
        assert "Zen of Python" not in proc.stdout, f"{logic}: 'this' was imported"

    from queuewire.conformance.loader import load_cases
    from queuewire.conformance.rejudge import load_saved
    from queuewire.conformance.replay import ReplayError

    load_cases("bunqueue", "bunqueue/v2")  # the installed suite's own modules, imported first
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    try:
        for logic in ("this:x", "evilcase:run", "queuewire.conformance.bunqueue_logic:auth_timing"):
            with pytest.raises(ReplayError, match="installed suite"):
                load_saved(_logic_case(tmp_path / "case.json", logic))
    finally:
        sys.path.remove(str(tmp_path))
    assert set(sys.modules) - before == set()
    assert not marker.exists()


# -- item 3: a case file allocates or sleeps without bound -------------------------------------
def test_zlib_bomb_is_refused_without_inflating_it(tmp_path, sink):
    """Item 3: events whose zlib_base64 inflates to 256 MiB each (1.25 GiB in all, from a
    1.3 MB file) are refused with a clear error, within 1 GiB of address space."""
    z = zlib.compressobj(9)
    block = bytes(1 << 20)
    bomb = b"".join([z.compress(block) for _ in range(256)] + [z.flush()])
    b64 = base64.b64encode(bomb).decode()
    events = [send(zlib_base64=b64, bytes=100) for _ in range(5)]
    for ev in events:
        del ev["hex"]
    proc = replay(case_file(tmp_path / "bomb.json", events), "--target", f"127.0.0.1:{sink}",
                  "--raw", "--timeout", "0.5")
    assert_clear_error(proc, "zlib_base64", "bytes")


def test_fill_note_claiming_3_gb_is_refused(tmp_path, sink):
    """Item 3: a 1.6 KB case whose note claims "3000000000 bytes sent ... zero bytes" is
    refused (the fill is bounded by the protocol's max frame size), not allocated."""
    note = ("3000000000 bytes sent; the transcript keeps the first 22; the other 2999999978 "
            "are zero bytes")
    path = case_file(tmp_path / "fill.json", [send(note=note)])
    assert path.stat().st_size < 2000
    proc = replay(path, "--target", f"127.0.0.1:{sink}", "--raw", "--timeout", "0.5")
    assert_clear_error(proc, "3000000000", "max_frame_bytes")


def test_huge_recorded_time_does_not_sleep_for_ever(tmp_path, sink):
    """Item 3: a send recorded at t = 1e12 s (and one at Infinity) waits at most --timeout."""
    path = case_file(tmp_path / "slow.json", [send(), send(t=1e12)])
    proc = replay(path, "--target", f"127.0.0.1:{sink}", "--raw", "--timeout", "0.5")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "shortened" in proc.stderr, proc.stderr
    inf = tmp_path / "inf.json"
    inf.write_text(path.read_text().replace("1000000000000.0", "Infinity"))
    proc = replay(inf, "--target", f"127.0.0.1:{sink}", "--raw", "--timeout", "0.5")
    assert_clear_error(proc, "t must be")


def test_file_over_the_size_bound_is_refused_before_parsing(tmp_path):
    """Item 3: a case file over the size bound is refused from its size alone (a sparse
    file of 1 GiB: reading it would take the memory limit)."""
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    for extra in ((), ("--raw",)):
        proc = replay(big, "--target", "127.0.0.1:9", *extra)
        assert_clear_error(proc, "bytes", "--max-file-bytes")
    small = case_file(tmp_path / "small.json", [send()])
    proc = replay(small, "--target", "127.0.0.1:9", "--raw", "--max-file-bytes", "100")
    assert_clear_error(proc, "--max-file-bytes")


def test_steps_of_a_case_file_cannot_ask_for_gigabytes(tmp_path):
    """Item 3: a re-judged case whose send_raw step repeats a byte 3e9 times is refused."""
    definition = {"id": "bunqueue.hostile", "title": "x", "protocol": "bunqueue",
                  "requirements": ["BQ-FRAME-2"],
                  "steps": [{"send_raw": {"hex": "00", "repeat": 3000000000},
                             "expect": {"close": True}}]}
    path = case_file(tmp_path / "steps.json", [send()], case=definition, checks=[])
    proc = replay(path, "--target", "127.0.0.1:9")
    assert_clear_error(proc, "repeat", "max_frame_bytes")


def test_deeply_nested_json_is_refused(tmp_path):
    """Item 3: a case file nesting its JSON 100000 levels deep (or a decoded view 500 deep)
    gets a clear error, not a RecursionError traceback."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    nested: object = 1
    for _ in range(500):
        nested = [nested]
    view = case_file(tmp_path / "view.json", [send(decoded=nested)])
    for path in (deep, view):
        for extra in ((), ("--raw",)):
            proc = replay(path, "--target", "127.0.0.1:9", *extra)
            assert_clear_error(proc, "nested deeper")
