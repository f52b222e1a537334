"""``conform replay`` that re-judges a saved case (FIXED / STILL FAILING / REGRESSED), and
``conform detect`` naming the profile a server speaks; real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuewire.conformance.detect import Detection, Probe, detect
from queuewire.conformance.model import Check
from queuewire.conformance.rejudge import compare_checks
from queuewire.conformance.report import case_filename
from queuewire.conformance.targets import embedded_target
from queuewire.spec import plainest, refines

CASE = "bunqueue.queue.drain"  # passes against the reference server, needs replies




@contextmanager
def serving(protocol: str, profile: str) -> Iterator[tuple[str, int]]:
    """The embedded reference server of ``profile`` in a thread of its own (so the CLI under
    test can run its own event loop); yields its address."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()
    addr: list[tuple[str, int]] = []

    async def body() -> None:
        async with embedded_target(protocol, profile) as emb:
            addr.append((emb.host, emb.port))
            started.set()
            await stop.wait()

    thread = threading.Thread(target=lambda: loop.run_until_complete(body()), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield addr[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


# -- replay re-judges ---------------------------------------------------------------------------
def _saved_failure(cli, tmp_path, port: int):
    out = tmp_path / "out"
    result = cli("conform", "server", "--protocol", "bunqueue", "--target", f"127.0.0.1:{port}",
                 "--select", CASE, "--timeout", "0.5", "--report-dir", out)
    assert result.exit_code == 1, result.output
    path = out / "cases" / case_filename(CASE)
    doc = json.loads(path.read_text())
    assert doc["case"]["id"] == CASE and doc["case"]["steps"]  # the definition is embedded
    return path


def test_replay_still_failing_on_the_broken_server_fixed_on_the_reference(cli, tmp_path,
                                                                          closing_server):
    path = _saved_failure(cli, tmp_path, closing_server.port)
    again = cli("conform", "replay", path, "--target", f"127.0.0.1:{closing_server.port}",
                "--timeout", "0.5")
    assert again.exit_code == 1, again.output
    assert "STILL FAILING" in again.output and "replay: STILL FAILING" in again.output
    assert "FIXED" not in again.output
    fixed = cli("conform", "replay", path, "--target", "embedded")
    assert fixed.exit_code == 0, fixed.output
    assert "replay: FIXED (1 fixed" in fixed.output and "now: PASS" in fixed.output


def test_replay_of_an_older_file_takes_the_suite_case(cli, tmp_path, closing_server):
    path = _saved_failure(cli, tmp_path, closing_server.port)
    doc = json.loads(path.read_text())
    del doc["case"]
    doc["format"] = "queuewire-conformance-case/1"
    path.write_text(json.dumps(doc))
    result = cli("conform", "replay", path, "--target", "embedded")
    assert result.exit_code == 0, result.output
    assert "from the suite" in result.output and "replay: FIXED" in result.output
    doc["id"] = "bunqueue.no.such.case"
    path.write_text(json.dumps(doc))
    result = cli("conform", "replay", path, "--target", "embedded")
    assert result.exit_code == 2
    assert "not in this suite" in result.output and "--raw" in result.output
    assert "Traceback" not in result.output


def _c(ok: bool, step: int | None = 1, req: str = "R-1", kind: str = "reply") -> Check:
    return Check(req, "MUST", ok, kind, "m", step=step)


def test_compare_checks_statuses():
    old = [_c(True, 1), _c(False, 2), _c(False, 3), _c(True, 4), _c(False, 5, req="R-A")]
    new = [_c(True, 1), _c(True, 2), _c(False, 3), _c(False, 4), _c(True, 5, req="R-B"),
           _c(False, 6)]
    statuses = [r.status for r in compare_checks(old, new)]
    # step 5: a fixed any_of step cites another requirement; paired by step and kind
    assert statuses == ["PASS", "FIXED", "STILL FAILING", "REGRESSED", "FIXED", "NEW FAILURE"]
    assert [r.status for r in compare_checks([_c(False, 2)], [_c(True, 1)])] == [
        "NOT CHECKED", "NEW"]


# -- detect -------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol, profile", [
    ("bunqueue", "bunqueue/v2"), ("bunqueue", "bunqueue/2.9.5"),
    ("quicx", "quicx/v1"), ("quicx", "quicx/1.0.3")])
@pytest.mark.asyncio
async def test_detect_names_the_profile_of_the_reference_server(protocol, profile):
    async with embedded_target(protocol, profile) as emb:
        found = await detect(protocol, emb.host, emb.port, timeout=1.0)
    assert found.best == profile and found.clear, found.as_json()
    hit, of = found.score(profile)
    assert hit == of and of >= 3
    for other in found.profiles:
        if other == profile:
            continue
        if refines(other, profile) and found.ratio(other) == 1.0:
            # a profile built on this one that no probe tells apart (bunqueue/v3 adds client
            # rules and a WaitJob bound): it fits too, is listed, and is not named
            assert other in found.as_json()["also_fit"]
        else:
            assert found.ratio(other) < 0.5, (other, found.as_json())


def test_detect_names_the_plainest_of_profiles_that_fit_alike():
    """Profiles the probes cannot tell apart: the one the others refine is named, the match
    is clear, and the others are listed; unrelated profiles that tie are not a clear match."""
    det = Detection("bunqueue", "t", ["bunqueue/v2", "bunqueue/2.9.5", "bunqueue/v3"])
    det.probes = [Probe("p", "x", {"bunqueue/v2": "a", "bunqueue/2.9.5": "b", "bunqueue/v3": "b"},
                        observed="b")]
    assert (det.best, det.clear, det.tied) == ("bunqueue/2.9.5", True, ["bunqueue/v3"])
    det = Detection("quicx", "t", ["quicx/v1", "quicx/1.0.3"])
    det.probes = [Probe("p", "x", {"quicx/v1": "a", "quicx/1.0.3": "a"}, observed="a")]
    assert (det.best, det.clear) == ("quicx/v1", True)
    assert not refines("quicx/v1", "quicx/1.0.3") and refines("quicx/1.0.3", "quicx/v1")
    assert plainest(["bunqueue/2.9.5", "quicx/v1"]) is None


def test_detect_cli_text_and_json(cli):
    with serving("quicx", "quicx/1.0.3") as (host, port):
        text = cli("conform", "detect", "--protocol", "quicx", "--target", f"{host}:{port}",
                   "--timeout", "1")
        js = cli("conform", "detect", "--protocol", "quicx", "--target", f"{host}:{port}",
                 "--timeout", "1", "--json")
    assert text.exit_code == 0, text.output
    assert "MSG_TASK opcode" in text.output and "detect: quicx/1.0.3" in text.output
    doc = json.loads(js.output)
    assert js.exit_code == 0 and doc["best"] == "quicx/1.0.3" and doc["clear"] is True
    task = next(p for p in doc["probes"] if p["name"] == "MSG_TASK opcode")
    assert task["expected"] == {"quicx/v1": "task frame 0x05", "quicx/1.0.3": "task frame 0x07"}
    assert task["observed"] == "task frame 0x07"


def test_detect_broken_server_is_not_clear_and_usage_errors(cli, closing_server):
    result = cli("conform", "detect", "--protocol", "quicx", "--target",
                 f"127.0.0.1:{closing_server.port}", "--timeout", "0.3")
    assert result.exit_code == 1, result.output
    assert "ambiguous" in result.output or "no profile" in result.output
    assert cli("conform", "detect", "--protocol", "quicx", "--target", "nohost").exit_code == 2
    assert cli("conform", "detect", "--target", "127.0.0.1:1").exit_code == 2
