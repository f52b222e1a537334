"""Issue 25, "Reports": what the console, HTML, JUnit, Markdown and JSON reports say about cases
that did not pass, on real runs against the embedded reference server broken in a few rules
(by subclassing its engine and gate, as test_bunqueue_suite does; never by editing it).

One broken server does what bunqueue 2.9.5 does in each case below: GetState answers
``waiting-children`` for a job held by its dependencies and an ok reply with state ``unknown``
for an unknown id (both fail BQ-JOB-1, a MUST, after a SHOULD check of the same step failed);
commands that only look a queue up take any name (BQ-LIMIT-13, generated cases by the dozen);
job data over 10 MiB is accepted (BQ-LIMIT-3); ``ttl`` is ignored (a step after a sleep);
a requeued job is reported active for a while (many GetState polls) and then ACKed without a
token; and every plain ``{ok: true}`` reply carries ``id: undefined``.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from queuewire.cli import main as cli_main
from queuewire.codecs.bunqueue import UNDEFINED
from queuewire.codecs.validation import BunqueueValidator
from queuewire.conformance.matching import show, text_size
from queuewire.conformance.model import TargetRun, Verdict, deciding_check
from queuewire.conformance.report import html as html_report
from queuewire.conformance.report import json_report, write_reports
from queuewire.conformance.report import junit as junit_report
from queuewire.conformance.report import markdown as markdown_report
from queuewire.conformance.report.common import evidence, grouped, headline
from queuewire.conformance.report.console import print_summary
from queuewire.conformance.runner import run_target
from queuewire.conformance.targets import EMBEDDED_TICK
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer
from queuewire.reference_server.bunqueue.gate import RequestGate
from queuewire.spec import load_profile

PROFILE = "bunqueue/v2"
DEPS, UNKNOWN = "bunqueue.deps.waiting-state", "bunqueue.query.get-state-unknown"
BIG = "bunqueue.limit.job_data_bytes.PUSH.data"
TTL, STALL = "bunqueue.job.ttl-expires", "bunqueue.lock.stall-requeued-ack"
STALE = "bunqueue.job.push-pull-ack"
NAMES = "bunqueue.limit.queue_name_length."
POLLS = 40  # GetState polls answered "active" after the lock of the stall case expired


class _Like295Engine(BunqueueEngine):
    """The reference engine with the deviations listed in the module docstring."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held: set[str] = set()    # jobs pushed with dependsOn
        self.locked: set[str] = set()  # jobs pulled with a lockTtl
        self.polls: dict[str, int] = {}

    def handle(self, conn_id, request):
        cmd = request.get("cmd")
        if cmd == "PUSH" and "ttl" in request:
            request = {k: v for k, v in request.items() if k != "ttl"}
        reply = super().handle(conn_id, request)
        if not isinstance(reply, dict):
            return reply
        rid = {"reqId": reply["reqId"]} if "reqId" in reply else {}
        if cmd == "PUSH" and request.get("dependsOn") and reply.get("ok"):
            self.held.add(reply["id"])
        elif cmd == "PULL" and "lockTtl" in request and isinstance(reply.get("job"), dict):
            self.locked.add(reply["job"]["id"])
        elif cmd == "GetState" and reply.get("ok") is False:
            return {"ok": True, "state": "unknown", **rid}
        elif cmd == "GetState" and request.get("id") in self.held:
            return dict(reply, state="waiting-children")
        elif cmd == "GetState" and request.get("id") in self.locked \
                and reply.get("state") == "waiting":
            n = self.polls[request["id"]] = self.polls.get(request["id"], 0) + 1
            if n <= POLLS:
                return dict(reply, state="active")
        elif cmd == "ACK" and "token" not in request and request.get("id") in self.locked:
            return {"ok": True, **rid}
        if reply.get("ok") is True and "id" not in reply:
            reply = dict(reply, id=UNDEFINED)  # what msgpackr sends for {ok: true}
        return reply


class _Lenient:
    """A request validator that lets the rules in ``dropped`` pass."""

    def __init__(self, inner, dropped):
        self.inner, self.dropped = inner, dropped

    def request_is_valid(self, msg) -> bool:
        return not self.request_violations(msg)

    def request_violations(self, msg):
        return tuple(v for v in self.inner.request_violations(msg)
                     if v.requirement not in self.dropped)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _Like295Server(BunqueueServer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = RequestGate(self.engine, self.gate.tokens, validator=_Lenient(
            BunqueueValidator(self.profile), ("BQ-LIMIT-13", "BQ-LIMIT-3")))


async def _run() -> TargetRun:
    server = _Like295Server(PROFILE, "127.0.0.1", 0, tick_interval=EMBEDDED_TICK,
                            engine=_Like295Engine(PROFILE))
    async with server:
        return await run_target("bunqueue", f"127.0.0.1:{server.port}", profile=PROFILE,
                                select=(DEPS, UNKNOWN, BIG, TTL, STALL, STALE, NAMES + "*"),
                                known_failing=(STALE,))


@pytest.fixture(scope="module")
def run() -> TargetRun:
    return asyncio.run(_run())


def _case(run: TargetRun, case_id: str):
    return next(r for r in run.results if r.case.id == case_id)


def _console(run: TargetRun) -> str:
    con = Console(file=io.StringIO(), width=400, record=True)
    print_summary(con, [run])
    return con.export_text()


@pytest.fixture(scope="module")
def pages(run: TargetRun) -> dict[str, str]:
    return {"console": _console(run), "html": html_report.render([run], transcripts="failing"),
            "junit": junit_report.render([run]), "md": markdown_report.render([run]),
            "json": json_report.dumps([run])}


def _row(console: str, case_id: str) -> str:
    """The console's 'cases to look at' row of a case (its first line)."""
    return next(line for line in console.splitlines() if f" {case_id} " in line)


# -- 1. the deciding requirement leads ---------------------------------------------------------
@pytest.mark.parametrize("case_id, should", [(DEPS, "BQ-DEPS-5"), (UNKNOWN, "BQ-JOB-13")])
def test_a_fail_is_led_by_the_must_that_decided_it(run, pages, case_id, should):
    r = _case(run, case_id)
    assert r.verdict is Verdict.FAIL
    first_failed = r.failed_checks[0]
    assert (first_failed.requirement, first_failed.level) == (should, "SHOULD")  # recorded first
    decided = deciding_check(r.checks)
    assert (decided.requirement, decided.level) == ("BQ-JOB-1", "MUST")
    assert headline(r) == ("BQ-JOB-1", "MUST")
    lead = "BQ-JOB-1 MUST: step "
    row = _row(pages["console"], case_id)
    assert "BQ-JOB-1 MUST" in row and lead in row and f"{should} SHOULD" not in row
    summary = re.search(rf'id="r0-{re.escape(case_id)}"[^>]*>.*?</summary>', pages["html"], re.S)
    assert summary and lead in summary.group(0) and should not in summary.group(0)
    assert 'class="decided"' in pages["html"]
    suite = ET.fromstring(pages["junit"]).find("testsuite")
    failure = next(tc for tc in suite.findall("testcase") if tc.get("name") == case_id) \
        .find("failure")
    assert failure.get("message").startswith(lead)
    assert failure.text.index("[BQ-JOB-1 MUST]") < failure.text.index(f"[{should} SHOULD]")
    line = next(x for x in pages["md"].splitlines() if x.startswith(f"- **FAIL** `{case_id}`"))
    assert lead in line and should not in line
    doc = json.loads(pages["json"])
    case = next(c for c in doc["runs"][0]["cases"] if c["id"] == case_id)
    assert case["checks"][case["decided_by"]]["requirement"] == "BQ-JOB-1"


# -- 2. the documents' sentence in the case block ----------------------------------------------
def test_case_blocks_quote_the_deciding_requirement_and_every_failed_one(run, pages):
    reqs = load_profile(PROFILE).requirements
    quote = reqs["BQ-JOB-1"].quote
    assert quote
    row = pages["console"].splitlines()
    at = next(i for i, line in enumerate(row) if f" {UNKNOWN} " in line)
    said = [line for line in row[at:at + 4] if "BQ-JOB-1 (001#GetState):" in line]
    assert said and quote in said[0]  # one console line with the sentence
    block = pages["html"][pages["html"].index(f'id="r0-{UNKNOWN}"'):]
    block = block[:block.index("<table>")]
    assert f'<blockquote class="quote">{escape(quote)}</blockquote>' in block
    assert escape(reqs["BQ-JOB-13"].quote) in block  # the failed SHOULD's sentence too
    # a decision has no sentence: the block says so instead of quoting nothing
    deps = pages["html"][pages["html"].index(f'id="r0-{DEPS}"'):]
    assert "no sentence of the documents to quote (decision)" in deps[:deps.index("<table>")]
    md = pages["md"]
    section = md[md.index(f"#### FAIL `{UNKNOWN}`"):]
    assert "> state: 'waiting' | 'delayed'" in section.split("Failed checks")[0]
    assert "> On failure ok is false with an error string." in section.split("Failed checks")[0]


# -- 3. true sizes ------------------------------------------------------------------------------
def test_a_10_mib_request_is_shown_with_its_true_size(run, pages):
    r = _case(run, BIG)
    assert r.verdict is Verdict.FAIL
    sent = [e for e in r.transcript.events if e.direction == "send" and len(e.data) > 10 << 20]
    assert len(sent) == 3  # limit - 1, limit, limit + 1: 10,485,759 characters is 10 MiB + 1
    n = 10 * 1024 * 1024 - 1  # as JSON, with its two quotes
    for page in ("html", "json", "md"):
        assert "(1057 characters)" not in pages[page], page
    assert "(10,485,759 characters, 10 MiB)" in pages["html"]
    assert "(10,485,759 characters, 10 MiB)" in pages["md"]
    case = next(c for c in json.loads(pages["json"])["runs"][0]["cases"] if c["id"] == BIG)
    views = [e["decoded"]["data"] for e in case["transcript"] if e["direction"] == "send"
             and isinstance(e["decoded"], dict) and isinstance(e["decoded"].get("data"), str)]
    assert views[-1].endswith(f"…[{n} characters, shortened]")
    assert text_size(views[-1])[1:] == (n, n, True)


# -- 4. one numbering of steps --------------------------------------------------------------------
def test_steps_in_messages_are_the_steps_of_the_transcript(run, pages):
    r = _case(run, TTL)  # PUSH, sleep 400, PULL: the PULL is step 3
    decided = deciding_check(r.checks)
    assert decided is not None and decided.step == 3 and decided.message.startswith("step 3:")
    pull = [e for e in r.transcript.events if e.direction == "send"
            and isinstance(e.decoded, dict) and e.decoded.get("cmd") == "PULL"]
    assert [e.step for e in pull] == [3]
    for c in r.checks:  # every judged reply sits in the transcript under the check's step
        rid = (c.actual or {}).get("reply", {}).get("reqId") if isinstance(c.actual, dict) else None
        if rid is not None:
            (ev,) = [e for e in r.transcript.events if e.direction == "send"
                     and isinstance(e.decoded, dict) and e.decoded.get("reqId") == rid]
            assert ev.step == c.step
    block = pages["html"][pages["html"].index(f'id="r0-{TTL}"'):]
    block = block[:block.index("</details></details>")] if "</details></details>" in block \
        else block
    assert '<td class="step">2</td><td colspan="5">step 2: sleep 400 ms (nothing on the wire)' \
        in block
    assert '<td class="step">3 <b class="bad" title="decisive">◀</b></td>' in block
    evidence_md = pages["md"][pages["md"].index(f"`{TTL}`: A job"):]
    assert "s2    sleep 400 ms (nothing on the wire)" in evidence_md
    assert re.search(r"^s3 c1 -> \{cmd: \"PULL\"", evidence_md, re.M)
    doc = json.loads(pages["json"])
    case = next(c for c in doc["runs"][0]["cases"] if c["id"] == TTL)
    assert [e.get("step") for e in case["transcript"] if e["direction"] == "send"][:2] == [1, 3]


# -- 5. limit checks say what was sent --------------------------------------------------------------
def test_limit_checks_say_the_field_and_value_sent(run):
    big = deciding_check(_case(run, BIG).checks)
    assert big.message.endswith("; the reply is ok; sent data = 'aaaaaaaaaaaaaaaa…' "
                                "(10,485,759 characters, 10 MiB)")
    pause = deciding_check(_case(run, NAMES + "Pause.queue").checks)
    assert pause.message.endswith("sent queue = 'aaaaaaaaaaaaaaaa…' (257 characters)")
    worker = deciding_check(_case(run, NAMES + "RegisterWorker.queues.item").checks)
    assert "sent queues[0] = 'aaaaaaaaaaaaaaaa…' (257 characters)" in worker.message


# -- 6. generated cases grouped by rule ------------------------------------------------------------
def test_generated_cases_of_one_rule_are_one_group(run, pages):
    lookups = [r for r in run.results if r.case.id.startswith(NAMES)
               and r.verdict is Verdict.NON_STRICT]
    assert len(lookups) >= 10
    (group,) = [g for g in grouped(lookups) if not hasattr(g, "case")]
    assert group.prefix == NAMES + "*" and group.requirement == "BQ-LIMIT-13"
    assert "queue = 'aaaaaaaaaaaaaaaa…' (257 characters)" in group.values
    console = pages["console"]
    assert f"{NAMES}* " in console and f"{len(lookups)} generated cases" in console
    assert f" {NAMES}Pause.queue " not in console.split("cases to look at")[1].split("matrix")[0]
    html = pages["html"]
    block = html[html.index(f'data-group="{NAMES}*"'):]
    assert "values tried that failed: <code>queue = &#x27;aaaaaaaaaaaaaaaa…&#x27; (257 characters)</code>" \
        in block
    assert html.count('class="group"') == 1
    for r in lookups:  # every case is still there, inside the group
        assert f'id="r0-{r.case.id}"' in block
    md = pages["md"]
    assert sum(1 for line in md.splitlines() if line.startswith(f"- **NON-STRICT** `{NAMES}")) == 1
    assert f"- **NON-STRICT** `{NAMES}*`: {len(lookups)} generated cases of one rule" in md
    doc = json.loads(pages["json"])
    assert {c["id"] for c in doc["runs"][0]["cases"]} >= {r.case.id for r in lookups}


# -- 7. undefined ---------------------------------------------------------------------------------
def test_undefined_is_written_undefined_where_people_read(run, pages):
    html_all = html_report.render([run], transcripts="all")
    assert '"$undefined"' not in html_all and "&quot;$undefined&quot;" not in html_all
    assert "&quot;id&quot;: undefined" in html_all
    assert "{'$undefined'" not in pages["console"] and "$undefined" not in pages["md"]
    assert re.search(r"<- \{ok: true, id: undefined, reqId: \"r\d+\"\}", pages["md"])
    doc = json.loads(pages["json"])
    assert "$undefined" in doc["notation"]  # the JSON keeps the tag and says what it is
    assert '{"$undefined": true}' in json.dumps(doc["runs"][0]["cases"])
    assert show({"ok": True, "id": {"$undefined": True}}) == "{'ok': True, 'id': undefined}"


# -- 8. the decisive exchanges --------------------------------------------------------------------
def test_a_long_poll_is_trimmed_to_the_decisive_exchanges(run, pages):
    r = _case(run, STALL)
    assert r.verdict is Verdict.NON_STRICT
    polls = [e for e in r.transcript.events if e.direction == "send"
             and e.decoded.get("cmd") == "GetState"]
    assert len(polls) > POLLS
    shown = evidence(r)
    assert shown.earlier_exchanges >= POLLS - 3
    acks = [e for e in shown.events if e.direction == "send" and e.decoded.get("cmd") == "ACK"]
    assert len(acks) == 1 and shown.start + shown.events.index(acks[0]) in shown.decisive
    html = pages["html"][pages["html"].index(f'id="r0-{STALL}"'):]
    html = html[:html.index('<details class="case"', 10)] if '<details class="case"' in html[10:] \
        else html
    assert (f"{shown.earlier_exchanges} earlier exchanges ({shown.earlier_events} events) "
            "omitted: the JSON report has them") in html
    assert html.count("GetState") < 10
    md = pages["md"][pages["md"].index(f"`{STALL}`: ACK"):]
    assert f"… {shown.earlier_exchanges} earlier exchanges" in md.split("Reproduce:")[0]
    case = next(c for c in json.loads(pages["json"])["runs"][0]["cases"] if c["id"] == STALL)
    assert len(case["transcript"]) == len(r.transcript.events)  # the JSON keeps every event


# -- 9. STALE explained where offered ------------------------------------------------------------
def test_the_stale_filter_is_explained_where_it_is_offered(run, pages):
    r = _case(run, STALE)
    assert r.known_failing and r.verdict is Verdict.PASS
    html = pages["html"]
    filters = html[html.index('<p class="filters">'):html.index('<details', html.index(
        '<p class="filters">'))]
    assert 'value="STALE"' in filters
    assert "listed in the --known-failing file but passed: the list is out of date" in filters
    assert 'title="listed in the --known-failing file but passed' in filters
    assert 'data-verdict="STALE"' in html


# -- 10. passing transcripts out of the HTML by default -------------------------------------------
def test_conform_server_leaves_passing_transcripts_out_of_the_html(tmp_path: Path):
    select = ("--select", "bunqueue.job.push-pull-ack", "--select", "bunqueue.queue.pause-resume")
    sizes = {}
    for how in ("default", "all", "failing"):
        out = tmp_path / f"{how}.html"
        extra = () if how == "default" else ("--html-transcripts", how)
        result = CliRunner().invoke(cli_main, ["conform", "server", "--protocol", "bunqueue",
                                               "--target", "embedded", *select, "--html",
                                               str(out), *extra])
        assert result.exit_code == 0, result.output
        sizes[how] = out.read_text()
    assert sizes["default"].count("tester → server") == 0
    assert sizes["default"].count("left out of this page because the case passed") == 2
    assert sizes["all"].count("tester → server") > 4
    assert len(sizes["default"]) < len(sizes["all"])
    assert sizes["failing"].count("tester → server") == 0


def test_report_dir_writes_the_markdown_report_and_honours_the_option(run, tmp_path):
    written = write_reports([run], report_dir=tmp_path, html_transcripts="failing")
    assert tmp_path / "report.md" in written
    assert (tmp_path / "report.md").read_text() == markdown_report.render([run])
    page = (tmp_path / "report.html").read_text()
    assert "left out of this page because the case passed" in page
    with pytest.raises(ValueError):
        html_report.render([run], transcripts="some")
