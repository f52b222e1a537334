"""The HTML report's server residue section (``html._residues``): what a run left on the
server, what it removed, what is still there and why, what could not be listed, and the health
probes a case broke.

Real runs over TCP: against the reference bunqueue server in process (one that removes what its
cases left, one told to keep it, ``--keep-residue``) and against test_residue's small server
that keeps queues with any name and whose Prometheus breaks while one is a number (the
reference server refuses such names); and RunResidues built from the model's own objects
(``traffic.inventory``'s ``Item``, ``Left``, ``Residue``, ``Break``) for what neither does
(refuse a list, hold 120 queues, blame 75 cases).
"""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

import pytest
from report_fixtures import run as synthetic_run
from test_residue import PrometheusBreaker
from test_runner import BQ, FakeBunqueue, cases_of

from queuewire.conformance import runner
from queuewire.conformance.model import RunResidue, TargetRun
from queuewire.conformance.report import html as html_report
from queuewire.conformance.residue import KEPT
from queuewire.conformance.targets import embedded
from queuewire.spec import load_profile
from queuewire.traffic.inventory import Break, Item, Left, Residue, probe_requests

RES = load_profile(BQ).model.resources
KINDS = tuple(RES.kinds)
PROBES = tuple(name for name, _ in probe_requests(RES))
HOSTILE = "<script>alert(1)</script>"
LONG = "a" * 257

# Each case leaves one thing behind on the reference server: a webhook and a queue.
LEAKY = """
cases:
  - id: t.leak.webhook
    title: a webhook
    requirements: [BQ-CMD-AddWebhook]
    steps:
      - send: {cmd: AddWebhook, url: "https://example.com/${queue}", events: [job.completed],
               queue: "${queue}"}
        expect: {ok: {}}
  - id: t.leak.queue
    title: a queue with a job
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
        expect: {ok: {}}
"""

# Queues the reference server refuses (it checks names) but a server under test may keep and
# list: markup, 257 characters, a number (which breaks PrometheusBreaker's Prometheus).
HOSTILE_CASES = f"""
cases:
  - id: t.hostile.markup
    title: a queue named with markup
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {{cmd: PUSH, queue: "{HOSTILE}", data: {{}}}}
        expect: {{ok: {{}}}}
  - id: t.hostile.long
    title: a queue with a 257-character name
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {{cmd: PUSH, queue: "{LONG}", data: {{}}}}
        expect: {{ok: {{}}}}
  - id: t.hostile.number
    title: a queue named 490
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {{cmd: PUSH, queue: 490, data: {{}}}}
        expect: {{ok: {{}}}}
"""


class _Page(HTMLParser):
    """The page as a browser reads it: the start tags seen, and the text of the residue
    section (everything after its ``<h2>``) with its markup removed."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.in_residue = False
        self.text: list[str] = []
        self._h2 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._h2 = tag == "h2"

    def handle_endtag(self, tag):
        self._h2 = False

    def handle_data(self, data):
        if self._h2:
            self.in_residue = data == "Server residue"
        if self.in_residue:
            self.text.append(data)


def parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def section(page: str, i: int = 0) -> str:
    """The residue block of run ``i``: from its heading to the next heading."""
    start = page.index(f'<h3 id="residue{i}">')
    end = page.index("<h", start + 4)
    return page[start:end]


def assert_safe(page: str) -> None:
    """The hostile queue name never reaches the page as markup; tags stay balanced."""
    assert HOSTILE not in page and "<script>alert(1)" not in page
    assert parse(page).tags.count("script") == 1  # only the report's own filter script
    for tag in ("details", "summary", "table", "tr", "td", "th", "p", "code", "span", "div", "a"):
        opened = len(re.findall(rf"<{tag}[\s>]", page))
        assert opened == page.count(f"</{tag}>"), tag


def with_residue(found: RunResidue | None, **kw) -> TargetRun:
    """The synthetic report run (real frames, one case per verdict) carrying ``found``."""
    return dataclasses.replace(synthetic_run(**kw), residue=found)


# -- real runs --------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_run_that_removes_what_its_cases_left_shows_it_clean():
    async with embedded("bunqueue", BQ) as (host, port):
        run = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ,
                                      cases=cases_of(LEAKY))
    assert {r.verdict.value for r in run.results} == {"PASS"}
    found = run.residue
    assert found is not None and found.clean and found.removing
    assert sorted(i.kind for i in found.residue.removed) == ["queues", "webhooks"]

    page = html_report.render([run])
    assert_safe(page)
    block = section(page)
    assert "<h2>Server residue</h2>" in page
    assert 'data-clean="true"' in block and "<b>clean</b>" in block
    assert html_report.e(found.summary()) in block
    # per kind: appeared, removed, still there
    for kind in ("queues", "webhooks"):
        assert f'<tr class="residue-kind" data-kind="{kind}"><th>{kind}</th><td class="n">1' \
               '</td><td class="n">1</td><td class="z">0</td></tr>' in block
    assert "removed by the run (2)" in block and "left by the cases (2)" in block
    assert "still there (" not in block
    for item in found.residue.removed:
        assert f"<code>{html_report.e(item.text())}</code>" in block
    assert "queue=&#x27;qw-t.leak.webhook-" in block and "queues &#x27;qw-t.leak.queue-" in block
    # every probe named; none broke
    assert found.probes and all(f"<code>{p}</code>" in block for p in found.probes)
    assert "residue-break" not in block
    # the summary matrix says it and links to the section
    assert '<tr class="residue"><th>server residue</th><td><a class="ok" href="#residue0">' \
           "left as found</a></td></tr>" in page


@pytest.mark.asyncio
async def test_a_kept_residue_is_listed_with_the_reason_and_not_clean():
    async with embedded("bunqueue", BQ) as (host, port):
        run = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ,
                                      cases=cases_of(LEAKY), remove_residue=False)
    found = run.residue
    assert found is not None and not found.clean and not found.removing
    page = html_report.render([run])
    assert_safe(page)
    block = section(page)
    assert 'data-clean="false"' in block and "<b>not clean</b>" in block
    assert "still there (2)" in block and "removed by the run (" not in block
    rows = re.findall(r'<tr class="residue-left" data-kind="(\w+)"><td><code>(.*?)</code></td>'
                      r"<td>(.*?)</td></tr>", block)
    assert sorted(kind for kind, _, _ in rows) == ["queues", "webhooks"]
    assert {why for _, _, why in rows} == {html_report.e(KEPT)}
    assert '<a class="bad" href="#residue0">2 still there</a>' in page


@pytest.mark.asyncio
async def test_hostile_queue_names_are_escaped_and_the_broken_probe_names_its_case():
    async with FakeBunqueue(PrometheusBreaker()) as fake:
        run = await runner.run_target("bunqueue", fake.target, profile=BQ, timeout=2.0,
                                      cases=cases_of(HOSTILE_CASES))
    assert [r.verdict.value for r in run.results] == ["PASS", "PASS", "PASS"]
    found = run.residue
    assert found is not None and [i.key for i in found.residue.removed] == [HOSTILE, LONG, 490]
    [brk] = found.breaks
    assert brk.units == ("t.hostile.number",) and brk.recovered

    page = html_report.render([run])
    assert_safe(page)
    block = section(page)
    # the markup as the model shows the key (its repr), escaped
    assert f"<code>queues {html_report.e(repr(HOSTILE))}</code>" in block
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in block
    # the long name cut by the model, its length said
    assert LONG not in block and "(257 chars)" in block
    # the break: the probe, what it answered, the case (linking to it), and that it mended
    row = re.search(r'<tr class="residue-break" data-probe="Prometheus">(.*?)</tr>', block)
    assert row is not None
    assert html_report.e(brk.error) in row.group(1)
    assert '<a href="#r0-t.hostile.number"><code>t.hostile.number</code></a>' in row.group(1)
    assert 'id="r0-t.hostile.number"' in page
    assert "answers ok again after the removals" in row.group(1)
    assert 'data-clean="false"' in block  # what was made is gone, but a probe broke


# -- what the reference server does not do: built from the model's own objects ---------------
def test_long_lists_are_cut_and_breaks_name_the_probe_and_the_cases():
    queues = tuple(Item("queues", f"qw-{n:03d}") for n in range(120))
    hostile = Item("queues", HOSTILE.encode() + b"\x00\xff")  # a key that is not even text
    left = (Left(hostile, f"Obliterate answered {HOSTILE}"),
            *(Left(q, "Obliterate answered ok, yet it is still listed") for q in queues[:60]))
    found = RunResidue(
        residue=Residue(appeared=(*queues, hostile), removed=queues[60:], left=left,
                        unlisted={"dlq in 'qw-001'": f"no reply ({HOSTILE})"}),
        kinds=KINDS, probes=PROBES,
        breaks=[Break("Prometheus", f"value.replaceAll is not a function {HOSTILE}",
                      ("bunqueue.synthetic.fail", "bunqueue.synthetic.error")),
                Break("Stats", "no reply", (), recovered=True,
                      recovered_after="after the removals")],
        failing_before={"Metrics": "Unknown command: Metrics"},
        still_broken=("Prometheus",))
    run = with_residue(found)
    page = html_report.render([run])
    assert_safe(page)
    block = section(page)
    assert 'data-clean="false"' in block
    # what appeared, per kind, cut at RESIDUE_CAP with the number left out
    cap = html_report.RESIDUE_CAP
    appeared = block[block.index('<details class="residue-appeared">'):]
    appeared = appeared[:appeared.index("</details>")]
    assert "left by the cases (121)" in appeared and "<b>queues</b> (121)" in appeared
    assert appeared.count("<code>") == cap and f"and {121 - cap} more" in appeared
    assert "<code>queues &#x27;qw-049&#x27;</code>" in appeared and "qw-050" not in appeared
    # what could not be removed: first the 50, the reason of each, and how many more
    assert "still there (61)" in block
    assert block.count('<tr class="residue-left"') == cap
    assert f"... and {61 - cap} more (see the JSON report)" in block
    assert html_report.e(hostile.text()) in block  # b'<script>...\x00\xff', escaped
    assert "Obliterate answered &lt;script&gt;alert(1)&lt;/script&gt;" in block
    assert "could not be listed (1)" in block and "dlq in &#x27;qw-001&#x27;" in block
    # the breaks: the probe, what it answers now, the cases it is blamed on (linked), after
    brk = re.search(r'<tr class="residue-break" data-probe="Prometheus">(.*?)</tr>', block)
    assert brk is not None
    assert "value.replaceAll is not a function &lt;script&gt;" in brk.group(1)
    assert '<a href="#r0-bunqueue.synthetic.fail"><code>bunqueue.synthetic.fail</code></a>' \
           in brk.group(1)
    assert 'id="r0-bunqueue.synthetic.fail"' in page  # the link has a target
    assert '<span class="bad">still failing</span>' in brk.group(1)
    stats = re.search(r'<tr class="residue-break" data-probe="Stats">(.*?)</tr>', block)
    assert stats is not None and "no case was running" in stats.group(1)
    assert "answers ok again after the removals" in stats.group(1)
    assert "failing before the run (not watched): <code>Metrics</code>: " \
           "Unknown command: Metrics" in block
    assert '<a class="bad" href="#residue0">61 still there, 1 not listed, 2 probe(s) ' \
           "broke</a>" in page


def test_a_break_blamed_on_many_cases_is_cut():
    units = tuple(f"t.case-{n}" for n in range(75))
    found = RunResidue(Residue(), kinds=KINDS, probes=PROBES,
                       breaks=[Break("Prometheus", "boom", units)], still_broken=("Prometheus",))
    block = section(html_report.render([with_residue(found)]))
    assert "<code>t.case-49</code>" in block and "t.case-50" not in block
    assert f"and {75 - html_report.RESIDUE_CAP} more" in block
    assert 'data-clean="false"' in block  # nothing left, but a probe broke


def test_a_server_left_as_found_says_so_and_lists_nothing():
    found = RunResidue(Residue(), kinds=KINDS, probes=PROBES)
    page = html_report.render([with_residue(found)])
    assert_safe(page)
    block = section(page)
    assert 'data-clean="true"' in block
    assert html_report.e(found.summary()) in block
    assert "server left as found (webhooks, crons, workers, queues, dlq, jobs" in block
    for part in ("residue-kinds", "still there", "removed by the run", "left by the cases",
                 "could not be listed", "residue-break", "failing before"):
        assert part not in block, part


def test_runs_without_residue_show_nothing_or_one_line():
    plain = synthetic_run()
    assert plain.residue is None
    page = html_report.render([plain])
    assert "Server residue" not in page and "residue" not in page.replace("residue0", "")
    # beside a run that has one, a run without it gets one line
    found = RunResidue(Residue(), kinds=KINDS, probes=PROBES)
    both = html_report.render([with_residue(found), synthetic_run(target="10.0.0.5:6789")])
    other = section(both, 1)
    assert "10.0.0.5:6789 (bunqueue/v2)" in other
    assert re.fullmatch(r'<h3 id="residue1">[^<]*</h3><p class="dim residue-none">'
                        r"not inventoried \([^<]*\)</p>\s*", other)
    assert '<td class="dim">-</td></tr>' in both.split('<tr class="residue">')[1]
    assert "".join(parse(both).text).count("not inventoried") == 1
