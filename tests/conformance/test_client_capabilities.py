"""The capability table of client conformance (issue 24 item 6): a client run says, per
capability, whether the client used it, had the chance and did not, or was never given the
chance, so that a zero exit is not mistaken for full support.

The sans-IO half (what one scenario's records say) is tested on a checker fed by hand; the
rest over loopback against a deliberately minimal raw-socket testee
(client_testees/minimal_bunqueue.py: no pipelining, heartbeats, reconnect or dead-link
detection). queuewire's own clients are asserted "used" in test_client_runner.py and
test_client_quicx.py, on the runs those tests already make.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_fixtures import run as server_run

from queuewire.cli import main
from queuewire.codecs.bunqueue import encode_frame
from queuewire.conformance.client.capabilities import (
    Observation,
    Sighting,
    observe,
    summary_lines,
    table,
)
from queuewire.conformance.client.checker import ClientChecker
from queuewire.conformance.client.runner import run_client
from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict
from queuewire.conformance.report import html as html_report
from queuewire.spec import load_profile

MINIMAL = Path(__file__).parent / "client_testees" / "minimal_bunqueue.py"
V2 = load_profile("bunqueue/v2")
ADD_MANY = {"op": "add_many", "queue": "q", "name": "n", "items": [{"n": 1}, {"n": 2}]}
OPEN = [{"t": 0.0, "what": "open", "conn": 1, "dead": False}]


def push(n: int) -> dict:
    return {"cmd": "PUSH", "queue": "q", "data": {"n": n}, "reqId": str(n)}


def observation(checker: ClientChecker, *, behaviour: dict | None = None,
                actions: tuple = (ADD_MANY,)) -> Observation:
    return Observation("s.pipe", "bunqueue", V2, behaviour or {}, {}, list(actions), OPEN,
                       checker, now=1.0, answered_at=0.5)


def fed(*writes: tuple[float, list[dict]], replies: dict[int, float]) -> ClientChecker:
    """A checker fed ``writes`` (time, frames) on connection 1; request n is answered at
    ``replies[n]``."""
    checker = ClientChecker(V2)
    checker.opened(1)
    for t, frames in writes:
        got, _ = checker.feed(1, b"".join(encode_frame(f) for f in frames), t)
        for req in got:
            n = int(req["reqId"])
            checker.replied(1, req, {"ok": True, "id": str(n)}, replies[n])
    return checker


def sighting(found: list[Sighting], capability: str) -> Sighting | None:
    return next((s for s in found if s.capability == capability), None)


def test_two_requests_in_flight_on_one_connection_is_pipelining() -> None:
    checker = fed((0.0, [push(1), push(2)]), replies={1: 0.05, 2: 0.06})
    s = sighting(observe(observation(checker)), "pipelining")
    assert s is not None and s.used and "2 requests in flight" in s.evidence


def test_one_request_at_a_time_is_pipelining_not_used_only_where_concurrency_was_asked() -> None:
    checker = fed((0.0, [push(1)]), (0.02, [push(2)]), replies={1: 0.01, 2: 0.03})
    s = sighting(observe(observation(checker)), "pipelining")
    assert s is not None and not s.used and "asked for 2 concurrent adds" in s.evidence
    # no concurrent action asked for: no chance, no word on pipelining
    assert sighting(observe(observation(checker, actions=())), "pipelining") is None


def test_scenarios_whose_reply_times_say_nothing_are_left_out() -> None:
    # split: the server records a reply once its last segment is out, so a request that
    # followed the reply looks as if it overlapped it
    checker = fed((0.0, [push(1)]), (0.02, [push(2)]), replies={1: 0.03, 2: 0.04})
    assert sighting(observe(observation(checker)), "pipelining").used  # type: ignore[union-attr]
    assert sighting(observe(observation(checker, behaviour={"split": True})), "pipelining") is None


def test_the_table_folds_sightings_used_first_then_chances() -> None:
    rows = {r["capability"]: r for r in table([
        Sighting("pipelining", "a", False, "no overlap"),
        Sighting("pipelining", "b", True, "3 in flight"),
        Sighting("heartbeats", "c", False, "held 1 s, none sent")], V2)}
    assert list(rows) == ["pipelining", "heartbeats", "reconnect", "dead-link detection", "auth",
                          "events"]
    assert rows["pipelining"]["state"] == "used" and rows["pipelining"]["scenarios"] == ["b"]
    assert rows["pipelining"]["evidence"] == "b: 3 in flight"
    assert rows["heartbeats"]["state"] == "not used" and rows["heartbeats"]["scenarios"] == ["c"]
    assert rows["reconnect"]["state"] == "not observable"
    assert "no played scenario had a connection dropped" in rows["reconnect"]["evidence"]
    # a profile without the command: not observable, saying why
    assert rows["events"]["state"] == "not observable"
    assert rows["events"]["evidence"] == "bunqueue/v2 has no command of the events category"
    quicx = {r["capability"]: r for r in table([], load_profile("quicx/v1"))}
    assert quicx["auth"]["evidence"] == "quicx/v1 has no command of the auth category"
    assert quicx["pipelining"]["evidence"] == "the quicx testee contract has no concurrent action"


MINIMAL_SCENARIOS = ("bunqueue.client.basic", "bunqueue.client.auth",
                     "bunqueue.client.replies-out-of-order", "bunqueue.client.heartbeat",
                     "bunqueue.client.drop-mid-reply")


def test_a_minimal_client_exits_0_and_the_reports_say_it_is_not_full_support(
        tmp_path: Path) -> None:
    args = ["conform", "client", "--protocol", "bunqueue", "--profile", "bunqueue/2.9.5",
            "--testee", f"{sys.executable} {MINIMAL}", "--testee-name", "minimal",
            "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"),
            "--markdown", str(tmp_path / "r.md")]
    for scenario in MINIMAL_SCENARIOS:
        args += ["--scenario", scenario]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output        # no scenario fails a MUST ...
    out = " ".join(result.output.split())
    assert "conformance: no failing case" in out
    # ... and the summary says that this is not full support, naming what was not used
    assert ("minimal (bunqueue/2.9.5) has no failing case, which is not full support: it did "
            "not use pipelining, heartbeats, reconnect, events") in out
    assert re.search(r"pipelining\s+│\s+not used", result.output)

    doc = json.loads((tmp_path / "r.json").read_text())
    (run,) = doc["runs"]
    cells = {r["capability"]: r["state"] for r in run["capabilities"]}
    assert cells == {"pipelining": "not used", "heartbeats": "not used",
                     "reconnect": "not used", "dead-link detection": "not observable",
                     "auth": "used", "events": "not used"}
    evidence = {r["capability"]: r for r in run["capabilities"]}
    assert evidence["pipelining"]["scenarios"] == ["bunqueue.client.replies-out-of-order"]
    assert evidence["heartbeats"]["scenarios"] == ["bunqueue.client.heartbeat"]
    assert "JobHeartbeatB" in evidence["heartbeats"]["evidence"]   # names from the spec
    assert evidence["reconnect"]["scenarios"] == ["bunqueue.client.drop-mid-reply"]
    assert "SubscribeEvents" in evidence["events"]["evidence"]
    assert "not full support" in run["support_note"]
    assert "capabilities" not in run["server_info"]      # once, at the run's top level

    page = (tmp_path / "r.html").read_text()
    rows = dict(re.findall(r'<tr class="capability" data-capability="([^"]+)"><th>[^<]*</th>'
                           r'<td data-state="([^"]+)"', page))
    assert rows == cells
    assert 'id="support-note"' in page
    for tag in ("table", "tr", "th", "td", "div", "span", "p"):
        assert len(re.findall(rf"<{tag}[\s>]", page)) == page.count(f"</{tag}>"), tag
    # in a client run the ids out of scope are server requirements
    assert "out of scope (server requirements)" in page
    assert "out of scope (client requirements)" not in page
    assert "out of scope (server requirement)</span>" in page

    md = (tmp_path / "r.md").read_text()
    assert ("- minimal (bunqueue/2.9.5): pipelining not used, heartbeats not used, reconnect "
            "not used, dead-link detection not observable, auth used, events not used") in md
    assert "- pipelining: **not used** (bunqueue.client.replies-out-of-order\\: asked for 8" in md
    assert "not full support" in md


def test_a_server_run_still_says_its_out_of_scope_ids_are_client_requirements() -> None:
    page = html_report.render([server_run()])
    assert "out of scope (client requirements)" in page
    assert "out of scope (client requirement)</span>" in page
    assert 'class="capability"' not in page and "Capabilities" not in page


@pytest.mark.asyncio
async def test_a_minimal_client_does_not_detect_a_dead_link() -> None:
    profile = load_profile("bunqueue/2.9.5")
    chosen = select_scenarios(load_scenarios("bunqueue", profile), ["bunqueue.client.dead-link"])
    run = await run_client(Testee(f"{sys.executable} {MINIMAL}", label="minimal"), chosen,
                           profile)
    (result,) = run.results
    assert result.verdict is Verdict.FAIL     # BQ-CLIENT-4: it never went on
    cells = {r["capability"]: r for r in run.server_info["capabilities"]}
    dead = cells["dead-link detection"]
    assert dead["state"] == "not used" and dead["scenarios"] == ["bunqueue.client.dead-link"]
    assert "never answered" in dead["evidence"]
    lines = summary_lines([run])
    assert lines[1].startswith("  minimal (bunqueue/2.9.5): ")
    assert "dead-link detection not used" in lines[1]
    assert not any("not full support" in line for line in lines)   # it has a failing case
