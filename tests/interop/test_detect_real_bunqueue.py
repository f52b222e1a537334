"""``queuewire conform detect`` against the REAL bunqueue 2.9.5 server names bunqueue/2.9.5.

The server is npm ``bunqueue`` 2.9.5 under the ``bun`` binary ``make setup`` installs into
tests/interop/node_modules (started as tests/serve_process.py does, loopback only). Skipped,
with the reason, where node or the bun/bunqueue install is missing.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from serve_process import REAL_BUNQUEUE_MISSING, start_real_bunqueue, stop_serve

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or REAL_BUNQUEUE_MISSING is not None,
    reason=REAL_BUNQUEUE_MISSING or "node is missing: the real bunqueue server cannot be started")


def test_detect_names_bunqueue_2_9_5(tmp_path: pytest.TempPathFactory) -> None:
    proc, port, _http = start_real_bunqueue(tmp_path / "server.log")
    try:
        result = CliRunner().invoke(main, ["conform", "detect", "--protocol", "bunqueue",
                                           "--target", f"127.0.0.1:{port}", "--json"],
                                    catch_exceptions=False)
    finally:
        stop_serve(proc)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["best"] == "bunqueue/2.9.5" and doc["clear"] is True, doc
    hello = next(p for p in doc["probes"] if p["name"] == "Hello v3")
    assert hello["matches"]["bunqueue/2.9.5"] is True
