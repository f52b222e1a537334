"""The SIGKILL test of the reference server's durability (issue: no answered durable job lost).

A real ``queuewire serve bunqueue --data-path FILE`` process takes pipelined
``PUSH durable: true`` over TCP; the test records every id the server *answered*, kills the
process with SIGKILL in mid-stream, starts a new server on the same file and asks it for
each recorded job. A durable PUSH is committed to SQLite before its reply is written, so
every answered job must be there.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from serve_process import start_serve, stop_serve

ENC = FrameEncoder("bunqueue/v2")
def start_server(data: Path) -> tuple[subprocess.Popen, int]:
    return start_serve("bunqueue", "--data-path", str(data))


class Client:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.decoder = FrameDecoder("bunqueue/v2")
        self.pending: list[dict] = []

    def send(self, *messages: dict) -> None:
        self.sock.sendall(b"".join(ENC.encode(m) for m in messages))

    def replies(self) -> list[dict]:
        """Whatever replies have arrived (blocks for at least one)."""
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        return self.decoder.feed(data)

    def call(self, message: dict) -> dict:
        self.send(message)
        while True:
            for reply in self.replies():
                if reply.get("reqId") == message.get("reqId"):
                    return reply


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("SIGKILL is POSIX", allow_module_level=True)


@pytest.mark.parametrize("kill_after", [1, 60, 400])
def test_sigkill_loses_no_answered_durable_push(tmp_path, kill_after):
    data = tmp_path / "bunqueue.sqlite"
    proc, port = start_server(data)
    answered: list[str] = []
    try:
        client = Client(port)
        # keep 50 durable pushes in flight until kill_after have been answered
        sent = 0
        while len(answered) < kill_after:
            burst = [{"cmd": "PUSH", "queue": "durable-q", "data": {"n": sent + i},
                      "durable": True, "reqId": str(sent + i)} for i in range(50)]
            client.send(*burst)
            sent += len(burst)
            while len(answered) < min(kill_after, sent - 10):
                for reply in client.replies():
                    assert reply["ok"] is True, reply
                    answered.append(reply["id"])
        os.kill(proc.pid, signal.SIGKILL)  # mid-stream: more pushes are in flight
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(answered) >= kill_after

    proc, port = start_server(data)
    try:
        client = Client(port)
        missing = [job_id for i, job_id in enumerate(answered)
                   if client.call({"cmd": "GetJob", "id": job_id, "reqId": f"g{i}"})["ok"]
                   is not True]
        assert missing == [], f"{len(missing)} answered durable jobs lost: {missing[:5]}"
        counts = client.call({"cmd": "GetJobCounts", "queue": "durable-q", "reqId": "c"})
        assert counts["counts"]["waiting"] >= len(answered)
    finally:
        assert stop_serve(proc) == 0


def test_clean_restart_keeps_buffered_jobs_too(tmp_path):
    """A SIGTERM stop flushes the store: non-durable jobs survive a clean restart."""
    data = tmp_path / "bunqueue.sqlite"
    proc, port = start_server(data)
    client = Client(port)
    ids = [client.call({"cmd": "PUSH", "queue": "q", "data": i, "reqId": str(i)})["id"]
           for i in range(20)]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert proc.returncode == 0
    proc, port = start_server(data)
    try:
        client = Client(port)
        for i, job_id in enumerate(ids):
            assert client.call({"cmd": "GetJob", "id": job_id, "reqId": f"g{i}"})["ok"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
