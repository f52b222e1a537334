"""The reports (JSON, JUnit, HTML, console, report directory) read synthetic runs built from
the model with real encoded frames, and say the same thing about them."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from report_fixtures import MUST_B, MUST_C, PUSH, push_frame, run
from rich.console import Console

from queuewire.conformance.model import Verdict
from queuewire.conformance.replay import load_case_file
from queuewire.conformance.report import (
    case_document,
    case_filename,
    exit_status,
    json_report,
    requirement_info,
    write_reports,
)
from queuewire.conformance.report import html as html_report
from queuewire.conformance.report import junit as junit_report
from queuewire.conformance.report.console import LiveProgress, print_summary
from queuewire.spec import load_profile


# -- JSON -------------------------------------------------------------------------------------
def test_json_round_trip_keeps_every_case_transcript_and_coverage():
    runs = [run(), run(target="embedded")]
    doc = json.loads(json_report.dumps(runs))
    assert doc == json.loads(json.dumps(json_report.build(runs), default=str))
    assert doc["exit_status"] == 1
    first = doc["runs"][0]
    assert first["counts"] == {"FAIL": 1, "ERROR": 1, "UNIMPLEMENTED": 1, "NON-STRICT": 1,
                               "INFO": 1, "PASS": 1}
    assert first["failing"] == ["bunqueue.synthetic.fail", "bunqueue.synthetic.error"]
    cases = {c["id"]: c for c in first["cases"]}
    assert len(cases) == 6
    fail = cases["bunqueue.synthetic.fail"]
    assert fail["verdict"] == "FAIL" and fail["requirements"] == [MUST_B]
    sent = [e for e in fail["transcript"] if e["direction"] == "send"]
    assert bytes.fromhex(sent[0]["hex"]) == push_frame() and sent[0]["decoded"] == PUSH
    assert "--select bunqueue.synthetic.fail" in fail["reproduction"]
    cov = first["coverage"]
    applicable = [k for k, r in load_profile("bunqueue/v2").requirements.items() if r.subject != "client"]
    assert cov["applicable"] == len(applicable)
    assert cov["exercised"] + len(cov["not_exercised_ids"]) == len(applicable)
    assert MUST_B in cov["exercised_ids"] and MUST_B not in cov["not_exercised_ids"]
    assert set(cov["not_exercised_ids"]) == set(applicable) - set(cov["exercised_ids"])


def test_json_exit_status_zero_when_only_should_fails():
    assert json_report.build([run(only=("pass", "nonstrict", "info", "unimplemented"))])["exit_status"] == 0
    assert json_report.build([run(only=("pass", "nonstrict"), strict=True)])["exit_status"] == 1


# -- JUnit ------------------------------------------------------------------------------------
def _suites(text: str) -> list[ET.Element]:
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    return root.findall("testsuite")


def test_junit_maps_verdicts_and_parses():
    text = junit_report.render([run(), run(target="embedded", strict=True, stale=False)])
    lax, strict = _suites(text)
    assert len(lax.findall("testcase")) == 6
    assert [tc.get("name") for tc in lax.findall("testcase/failure/..")] == ["bunqueue.synthetic.fail"]
    assert lax.get("failures") == "1" and lax.get("errors") == "1" and lax.get("skipped") == "2"
    assert [tc.get("name") for tc in lax.findall("testcase/error/..")] == ["bunqueue.synthetic.error"]
    skipped = {tc.get("name") for tc in lax.findall("testcase/skipped/..")}
    assert skipped == {"bunqueue.synthetic.nonstrict", "bunqueue.synthetic.unimplemented"}
    failure = lax.find("testcase/failure")
    assert failure.get("message").startswith(f"{MUST_B} MUST: PUSH must be answered ok")
    assert "expected:" in failure.text and "actual:" in failure.text
    assert "reproduce: queuewire conform server" in failure.text
    # strict: NON-STRICT and UNIMPLEMENTED fail the run, so they are failures
    assert strict.get("failures") == "3" and strict.get("skipped") == "0"
    root = ET.fromstring(text.encode())
    assert root.get("tests") == "12" and root.get("failures") == "4" and root.get("errors") == "2"


def test_junit_escapes_control_characters_and_markup():
    text = junit_report.render([run()])
    assert "\x00" not in text and "\x1b" not in text
    failure = _suites(text)[0].find("testcase/failure")
    # the control characters become visible \xNN, the markup survives as text
    assert "\\x00\\x1b<script>alert(1)</script> & done" in failure.get("message")
    assert "<script>" not in text


def test_junit_stale_known_failing_is_a_failure():
    suite = _suites(junit_report.render([run(stale=True, only=("pass", "stale"))]))[0]
    stale = [tc for tc in suite.findall("testcase") if tc.get("name") == "bunqueue.synthetic.stale"]
    assert stale[0].find("failure").get("type") == "stale-known-failing"
    assert suite.get("failures") == "1"


# -- HTML -------------------------------------------------------------------------------------
def test_html_has_transcript_hex_decoded_view_and_requirement_text():
    page = html_report.render([run()])
    frame = push_frame()
    first_line = " ".join(f"{b:02x}" for b in frame[:16])
    assert first_line in page  # hex dump of the PUSH frame the tester sent
    assert "tester → server" in page and "server → tester" in page
    assert "qw-report-test" in page  # decoded view of the request
    req = requirement_info("bunqueue/v2", MUST_B)
    assert req["level"] == "MUST" and req["text"]
    import html as _html
    assert _html.escape(req["text"]) in page
    assert "PUSH must be answered ok" in page
    assert "1.2 ms" in page and "3.4 ms" in page  # event timestamps


def test_html_escapes_server_bytes_and_is_self_contained():
    page = html_report.render([run()])
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # only the inline filter script
    for external in ("<link", " src=", "http://", "https://", "@import"):
        assert external not in page


def test_html_matrix_coverage_and_filters():
    runs = [run(), run(target="embedded", stale=True)]
    page = html_report.render(runs)
    assert "127.0.0.1:1 (bunqueue/v2)" in page and "embedded (bunqueue/v2)" in page
    assert 'data-verdict="STALE"' in page and 'data-verdict="FAIL"' in page
    not_exercised = runs[0].coverage.not_exercised
    assert not_exercised and "<code title=" in page and f">{not_exercised[-1]}</code>" in page
    assert f'{len(runs[0].coverage.exercised)}/{len(runs[0].coverage.applicable)}' in page
    for v in ("FAIL", "ERROR", "NON-STRICT", "UNIMPLEMENTED", "INFO", "PASS"):
        assert f'<input type="checkbox" value="{v}" checked>' in page


def test_html_caps_huge_frames():
    r = run(only=("pass",))
    without = len(html_report.render([r]))  # the requirement view alone is ~100 kB
    big = b"\x00\x00\x00\x00" + b"\xab" * 100_000
    r.results[0].transcript.add(1, "send", big)
    page = html_report.render([r])
    assert f"{len(big) - html_report.HEX_CAP} more bytes ({len(big)} in all)" in page
    assert len(page) - without < 10_000


# -- console ----------------------------------------------------------------------------------
def test_console_summary_lists_failing_cases_with_reproduction():
    con = Console(file=io.StringIO(), width=250, record=True)
    runs = [run(), run(target="embedded")]
    print_summary(con, runs)
    text = con.export_text()
    cov = runs[0].coverage
    assert f"{len(cov.exercised)}/{len(cov.applicable)} ({cov.ratio:.0%})" in text
    assert "bunqueue.synthetic.fail" in text and MUST_B in text
    assert ("reproduce: queuewire conform server --protocol bunqueue --target 127.0.0.1:1 "
            "--select bunqueue.synthetic.fail") in text
    assert "matrix:" in text and "embedded (bunqueue/v2)" in text
    assert "2 case(s) fail the run" not in text and "4 case(s) fail the run" in text


def test_live_progress_counts_events():
    con = Console(file=io.StringIO(), force_terminal=True, width=120)
    r = run()
    with LiveProgress(con, "synthetic") as progress:
        progress("start", len(r.results))
        for res in r.results:
            progress("case", res)
        progress("done", r)
    assert progress.counts["FAIL"] == 1 and sum(progress.counts.values()) == 6
    assert [e for e, _ in progress.events] == ["start"] + ["case"] * 6 + ["done"]


# -- report directory -------------------------------------------------------------------------
def test_report_dir_writes_every_file_and_replayable_case_files(tmp_path):
    r = run()
    written = write_reports([r], report_dir=tmp_path, junit=tmp_path / "j.xml")
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    non_pass = [x.case.id for x in r.results if x.verdict is not Verdict.PASS]
    assert {"report.html", "report.json", "junit.xml", "j.xml"} <= names
    assert {n for n in names if n.startswith("cases/")} == {f"cases/{case_filename(c)}" for c in non_pass}
    path = tmp_path / "cases" / case_filename("bunqueue.synthetic.fail")
    doc = json.loads(path.read_text())
    assert doc["protocol"] == "bunqueue" and doc["profile"] == "bunqueue/v2"
    assert doc["target"] == "127.0.0.1:1"
    assert doc == json.loads(json.dumps(case_document(r, r.results[1])))
    case = load_case_file(path)
    assert case.id == "bunqueue.synthetic.fail"
    assert [e.data for e in case.events if e.direction == "send"] == [push_frame()]
    assert exit_status([r]) == 1


@pytest.mark.parametrize("case_id, name", [("bunqueue.push.x", "bunqueue.push.x.json"),
                                           ("../../etc/passwd", "etc_passwd.json"),
                                           ("a b/c", "a_b_c.json")])
def test_case_filenames_are_safe(case_id, name):
    assert case_filename(case_id) == name


def test_json_caps_huge_events_but_keeps_their_size():
    r = run(only=("pass",))
    big = b"\x00" * (json_report.EVENT_BYTES_CAP + 10)
    r.results[0].transcript.add(1, "send", big)
    ev = json.loads(json_report.dumps([r]))["runs"][0]["cases"][0]["transcript"][-1]
    assert ev["bytes"] == len(big) and ev["truncated"] is True
    assert len(ev["hex"]) == 2 * json_report.EVENT_BYTES_CAP


def test_json_caps_huge_decoded_values():
    r = run(only=("pass",))
    r.results[0].transcript.add(1, "send", b"\x00", {"data": "x" * (json_report.VALUE_CHARS_CAP + 1)})
    r.results[0].checks[0].actual = ["y" * (json_report.VALUE_CHARS_CAP + 1)]
    case = json.loads(json_report.dumps([r]))["runs"][0]["cases"][0]
    assert case["transcript"][-1]["decoded"]["$truncated"] > json_report.VALUE_CHARS_CAP
    assert case["checks"][0]["actual"]["head"].startswith('["yyy')
    assert case["checks"][0]["expected"] == {"ok": {}}  # small values untouched


def test_html_tags_are_balanced():
    import re

    page = html_report.render([run(), run(target="embedded", stale=True)])
    for tag in ("details", "summary", "table", "tr", "td", "pre", "ul", "li", "p", "code", "span"):
        opened = len(re.findall(rf"<{tag}[\s>]", page))
        assert opened == page.count(f"</{tag}>"), tag


# -- HTML: areas and the requirement view ----------------------------------------------------
class _Rows(HTMLParser):
    """The ``<tr>`` rows of a given class: (attributes, cell texts) each."""

    def __init__(self, cls: str) -> None:
        super().__init__()
        self.cls, self.rows, self.row, self.cell = cls, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == self.cls:
            self.row = (a, [])
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row[1].append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def _rows(page: str, cls: str) -> list[tuple[dict, list[str]]]:
    parser = _Rows(cls)
    parser.feed(page)
    return parser.rows


def _area_run():
    """The synthetic run with its cases spread over areas ``frame``, ``job`` and ``cron``."""
    base = run()
    where = {"pass": "bunqueue.frame.pass", "fail": "bunqueue.frame.fail",
             "nonstrict": "bunqueue.job.nonstrict", "error": "bunqueue.job.error",
             "unimplemented": "bunqueue.cron.unimplemented", "info": "bunqueue.cron.info"}
    base.results[:] = [dataclasses.replace(r, case=dataclasses.replace(
        r.case, id=where[r.case.id.rsplit(".", 1)[1]])) for r in base.results]
    return base


def test_html_groups_cases_by_area_with_counts():
    r = _area_run()
    page = html_report.render([r])
    areas = {a["data-area"]: cells for a, cells in _rows(page, "area")}
    assert list(areas) == ["cron", "frame", "job"]
    # columns: area, FAIL, ERROR, UNIMPLEMENTED, NON-STRICT, INFO, PASS, cases
    assert areas["frame"] == ["frame", "1", "0", "0", "0", "0", "1", "2"]
    assert areas["job"] == ["job", "0", "1", "0", "1", "0", "0", "2"]
    assert areas["cron"] == ["cron", "0", "0", "1", "0", "1", "0", "2"]
    # the case list is grouped: each area heading is followed by its own cases only
    for area in ("cron", "frame", "job"):
        start = page.index(f'<h4 id="a0-{area}"')
        end = page.find("<h4 ", start + 1)
        section = page[start:end if end > 0 else len(page)]
        ids = re.findall(r'<details class="case" id="r0-([^"]+)"', section)
        assert ids and all(i.startswith(f"bunqueue.{area}.") for i in ids), (area, ids)
    doc = json_report.build([r])
    assert doc["runs"][0]["areas"]["frame"]["FAIL"] == 1


def test_html_requirement_view_lists_every_requirement_and_its_cases():
    r = _area_run()
    page = html_report.render([r])
    rows = {a["data-req"]: (a["data-status"], cells) for a, cells in _rows(page, "req")}
    profile = load_profile("bunqueue/v2")
    assert list(rows) == list(profile.requirements)  # every requirement, in spec order
    status, cells = rows[MUST_B]
    req = profile.requirements[MUST_B]
    assert status == "cited" and cells[1] == req.level and "bunqueue.frame.fail" in cells[5]
    assert "FAIL" in cells[5] and req.source in cells[3]
    if req.quote:
        assert " ".join(req.quote.split()) in cells[4]
    status, cells = rows[MUST_C]
    assert status == "cited" and "bunqueue.job.error" in cells[5]
    assert "bunqueue.cron.unimplemented" in cells[5]
    uncited = [rid for rid, (s, _) in rows.items() if s == "uncited"]
    cited_ids = {q for res in r.results for q in res.case.requirements}
    assert uncited and not set(uncited) & cited_ids
    assert all("cited by no case" in rows[rid][1][5] for rid in uncited)
    client = [k for k, q in profile.requirements.items() if q.subject == "client"]
    assert all(rows[k][0] == "client" for k in client if k not in cited_ids)
