"""Fixtures shared by the conformance tests."""

from __future__ import annotations

import socket
import threading

import pytest
from click.testing import CliRunner

from queuewire.cli import main


class _ClosingServer:
    """Accepts connections and closes each as soon as anything arrives: breaks every rule
    that needs a reply."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2.0)
                try:
                    conn.recv(65536)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def closing_server():
    server = _ClosingServer()
    yield server
    server.close()


@pytest.fixture
def cli():
    """``cli(*args)``: the ``queuewire`` command run in process (click's CliRunner)."""
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    return invoke
