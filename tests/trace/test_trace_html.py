"""The HTML summary of ``queuewire trace analyze`` (queuewire.trace.html): a page that parses,
charts whose bars follow the numbers, escaping of whatever the traffic carried, no external
resource, and an empty summary that still renders and says so."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from queuewire.trace.html import CONN_BARS, CONN_ROWS, MAX_TIME_BARS, render_html, write_html

T0 = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC
SEC = 1_000_000_000
HOSTILE = "<script>alert(1)</script>"
HOSTILE_CLIENT = '"><img src=x onerror=alert(2)>'
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "area", "base", "source"}
SVG_LEAVES = {"rect", "line", "path", "circle"}


def _conn(i: int, frames: int, commands: dict[str, int], client: str | None = None) -> dict:
    return {"conn_id": i, "client": client or f"127.0.0.1:{5000 + i}", "upstream": "127.0.0.1:6789",
            "opened_ns": T0 + i * SEC, "closed_ns": T0 + (i + 2) * SEC, "close_reason": "eof",
            "frames": frames, "requests": sum(commands.values()), "pairs": sum(commands.values()),
            "errors": 0, "violations": {"FAIL": 0, "NON-STRICT": 0, "INFO": 0}, "commands": commands}


def rich() -> dict:
    return {
        "format": "queuewire-trace-summary", "format_version": 1,
        "engine": "spark", "master": "local[2]", "protocol": "bunqueue", "profile": "bunqueue/v2",
        "inputs": ["captures/a.pcap", "captures/b.pcapng"], "files": 12, "elapsed_s": 3.2,
        "verdict": "FAIL",
        "totals": {"connections": 3, "frames": {"c2s": 10, "s2c": 9},
                   "bytes": {"c2s": 1000, "s2c": 900}, "gaps": 0, "requests": 10, "pairs": 9,
                   "split_pairs": 1, "errors": 2, "unanswered": 1,
                   "violations": {"FAIL": 4, "NON-STRICT": 1, "INFO": 2}},
        "commands": {
            "PULL": {"requests": 3, "pairs": 3, "errors": 1, "error_rate": 1 / 3,
                     "latency_us": {"p50": 20.0, "p95": 60.0, "p99": 64.0, "max": 64.0, "mean": 30.0}},
            "PUSH": {"requests": 5, "pairs": 5, "errors": 0, "error_rate": 0.0,
                     "latency_us": {"p50": 12.5, "p95": 30.1, "p99": 40.0, "max": 41.0, "mean": 14.2}},
            HOSTILE: {"requests": 1, "pairs": 0, "errors": 0, "error_rate": None,
                      "latency_us": {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}},
            "ACK": {"requests": 2, "pairs": 1, "errors": 1},
        },
        "connections": [
            _conn(1, 19, {"PUSH": 5, "PULL": 3}),
            _conn(2, 4, {"ACK": 1, HOSTILE: 1}, client=HOSTILE_CLIENT),
            _conn(3, 0, {}),
        ],
        "requirements": [
            {"level": "INFO", "requirement": "BQ-X-9", "kind": "silence", "count": 2, "text": "quiet"},
            {"level": "FAIL", "requirement": "BQ-ENV-2", "kind": "request_schema", "count": 4,
             "text": "a frame MUST carry an id & a <type>"},
            {"level": "NON-STRICT", "requirement": "BQ-ENV-5", "kind": "reply", "count": 1, "text": "should"},
        ],
        "versions": [{"version": "2", "frames": 3}, {"version": "v<9>", "frames": 1}],
        "latency_histogram": {
            "PUSH": [{"le_us": 16, "count": 3}, {"le_us": 32, "count": 6}, {"le_us": 128, "count": 2}],
            "PULL": [{"le_us": 64, "count": 3}],
            HOSTILE: [{"le_us": 8, "count": 1}],
        },
        "violations_over_time": [
            {"t_ns": T0, "FAIL": 1, "NON-STRICT": 0, "INFO": 2},
            {"t_ns": T0 + 3 * SEC, "FAIL": 3, "NON-STRICT": 1, "INFO": 0},
        ],
        "bucket_ns": SEC,
        "violations_sample": [
            {"conn_id": 2, "t_ns": T0 + SEC, "direction": "c2s", "level": "FAIL",
             "requirement": "BQ-ENV-2", "kind": "request_schema", "command": HOSTILE,
             "message": "bad frame " + HOSTILE},
        ],
    }


def empty() -> dict:
    return {"format": "queuewire-trace-summary", "format_version": 1, "engine": "local",
            "master": None, "protocol": "quicx", "profile": "quicx/v1", "inputs": [], "files": 0,
            "elapsed_s": 0.0, "verdict": "PASS",
            "totals": {"connections": 0, "frames": {"c2s": 0, "s2c": 0}, "bytes": {"c2s": 0, "s2c": 0},
                       "gaps": 0, "requests": 0, "pairs": 0, "split_pairs": 0, "errors": 0,
                       "unanswered": 0, "violations": {"FAIL": 0, "NON-STRICT": 0, "INFO": 0}},
            "commands": {}, "connections": [], "requirements": [], "versions": [],
            "latency_histogram": {}, "violations_over_time": [], "bucket_ns": SEC,
            "violations_sample": []}


class Page(HTMLParser):
    """Every tag with its attributes, and the open-tag stack checked at each end tag."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    assert not p.errors, p.errors[:5]
    assert not p.stack, f"left open: {p.stack}"
    return p


def svgs(page: str) -> dict[str, ET.Element]:
    """Every inline chart parsed as XML, by its id."""
    found = {}
    for snippet in re.findall(r"<svg\b.*?</svg>", page, flags=re.S):
        root = ET.fromstring(snippet)
        found[root.get("id")] = root
    return found


def bars(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [r for r in svg.iter("rect") if cls in (r.get("class") or "").split()]


def test_rich_page_parses_and_shows_everything():
    page = render_html(rich())
    p = parse(page)
    text = "".join(p.text)
    assert p.tags[0][0] == "html" and any(t == "title" for t, _ in p.tags)
    assert "queuewire trace analyze: bunqueue FAIL" in re.search(r"<title>(.*?)</title>", page).group(1)
    for name in ("PUSH", "PULL", "ACK", HOSTILE):
        assert name in text, name
    for needle in ("bunqueue/v2", "spark", "local[2]", "captures/b.pcapng", "BQ-ENV-2", "BQ-ENV-5",
                   "127.0.0.1:5001", "FAIL cites a MUST", "NON-STRICT a SHOULD", "INFO what the documents"):
        assert needle in text, needle
    # the verdict badge: FAIL, in the FAIL colour, in the heading
    h1 = re.search(r"<h1>(.*?)</h1>", page, flags=re.S).group(1)
    assert re.search(r'<span class="v" style="background:#cf222e">FAIL</span>', h1)
    # every chart parses as XML and is labelled
    charts = svgs(page)
    assert {"hist0", "hist1", "hist2", "vtime", "cmdconn"} <= set(charts)
    for ident, svg in charts.items():
        assert svg.find("title") is not None and svg.find("title").text, ident
        assert svg.get("role") == "img" and svg.get("aria-labelledby") == f"{ident}-t {ident}-d"


def test_pass_verdict_is_green_and_fail_is_not_shown():
    summary = rich()
    summary["verdict"] = "PASS"
    h1 = re.search(r"<h1>(.*?)</h1>", render_html(summary), flags=re.S).group(1)
    assert "#1a7f37\">PASS<" in h1 and "FAIL" not in h1


def test_command_table_is_sorted_by_requests_with_error_rates():
    page = render_html(rich())
    table = page[page.index("<h2>Per command</h2>"):page.index("<h2>Latency histograms</h2>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]
    names = [re.search(r"<code>(.*?)</code>", r).group(1) for r in rows]
    assert names == ["PUSH", "PULL", "ACK", "&lt;script&gt;alert(1)&lt;/script&gt;"]
    cells = [re.findall(r'<td class="n">(.*?)</td>', r) for r in rows]
    assert cells[1][3] == "33.3 %"          # error_rate given as a fraction
    assert cells[2][3] == "100.0 %"         # no error_rate: errors / pairs
    assert cells[3][3] == "-"               # no pairs: no rate, no division by zero
    assert cells[0][4:8] == ["12.5", "30.1", "40.0", "41.0"]


def test_histogram_bar_heights_follow_the_counts_on_a_log2_axis():
    charts = svgs(render_html(rich()))
    push = next(s for s in charts.values() if s.find("title").text == "latency histogram of PUSH")
    assert push.get("id") == "hist0"  # the command with the most pairs is drawn first
    rects = bars(push, "bar")
    # 16, 32, 128 filled to 16, 32, 64, 128: the 64 bucket is there with no height
    assert [r.get("data-le") for r in rects] == ["16", "32", "64", "128"]
    counts = [int(r.get("data-count")) for r in rects]
    heights = [float(r.get("height")) for r in rects]
    assert counts == [3, 6, 0, 2]
    assert heights[2] == 0
    unit = heights[1] / 6
    for n, h in zip(counts, heights):
        assert h == pytest.approx(n * unit, abs=0.02)
    # bars stand on the same baseline, and the x labels name the edges
    assert len({round(float(r.get("y")) + float(r.get("height")), 1) for r in rects}) == 1
    labels = [t.text for t in push.iter("text")]
    assert "≤16µs" in labels and "pairs" in labels
    widths = [float(r.get("x")) for r in rects]
    assert widths == sorted(widths)


def test_histograms_keep_only_the_top_commands():
    summary = rich()
    summary["latency_histogram"] = {f"C{i:02d}": [{"le_us": 4, "count": i + 1}] for i in range(20)}
    page = render_html(summary)
    titles = [s.find("title").text for k, s in svgs(page).items() if k.startswith("hist")]
    assert len(titles) == 12 and titles[0] == "latency histogram of C19"
    assert "latency histogram of C07" not in titles
    assert "8 more command(s)" in page


def test_violations_over_time_stack_by_level_on_a_utc_axis():
    svg = svgs(render_html(rich()))["vtime"]
    segs = bars(svg, "seg")
    by_x: dict[str, list[ET.Element]] = {}
    for r in segs:
        by_x.setdefault(r.get("x"), []).append(r)
    assert len(by_x) == 2  # two buckets with violations, 4 slots on the axis
    heights = {(r.get("x"), r.get("data-level")): float(r.get("height")) for r in segs}
    stacks = sorted(by_x.values(), key=lambda rs: float(rs[0].get("x")))
    tallest = sum(float(r.get("height")) for r in stacks[1])   # 3 FAIL + 1 NON-STRICT
    first = sum(float(r.get("height")) for r in stacks[0])     # 1 FAIL + 2 INFO
    assert first / tallest == pytest.approx(3 / 4, abs=0.01)
    for r in segs:
        assert float(r.get("height")) == pytest.approx(int(r.get("data-count")) / 4 * tallest, abs=0.02)
        assert heights[(r.get("x"), r.get("data-level"))] > 0
    # FAIL sits at the bottom of its stack (largest y)
    for stack in stacks:
        fail = next(r for r in stack if r.get("data-level") == "FAIL")
        assert float(fail.get("y")) == max(float(r.get("y")) for r in stack)
        assert fail.get("fill") == "#cf222e"
    ticks = [t.text for t in svg.iter("text") if t.get("class") == "tick"]
    assert ticks[0] == "22:13:20" and ticks[-1] == "22:13:23"
    assert any("UTC, 2023-11-14" in (t.text or "") for t in svg.iter("text"))


def test_many_time_buckets_are_merged_without_losing_counts():
    summary = rich()
    summary["violations_over_time"] = [{"t_ns": T0 + i * SEC, "FAIL": 0, "NON-STRICT": i % 3, "INFO": 1}
                                       for i in range(1000)]
    svg = svgs(render_html(summary))["vtime"]
    segs = bars(svg, "seg")
    assert len({r.get("x") for r in segs}) <= MAX_TIME_BARS
    assert sum(int(r.get("data-count")) for r in segs if r.get("data-level") == "INFO") == 1000
    assert sum(int(r.get("data-count")) for r in segs if r.get("data-level") == "NON-STRICT") == \
        sum(i % 3 for i in range(1000))
    assert "buckets merged" in "".join(t.text or "" for t in svg.iter("text"))


def test_commands_per_connection_use_one_colour_per_command():
    page = render_html(rich())
    svg = svgs(page)["cmdconn"]
    segs = bars(svg, "seg")
    fills: dict[str, set[str]] = {}
    for r in segs:
        fills.setdefault(r.get("data-command"), set()).add(r.get("fill"))
    assert set(fills) == {"PUSH", "PULL", "ACK", HOSTILE}
    assert all(len(f) == 1 for f in fills.values())
    assert len({next(iter(f)) for f in fills.values()}) == 4
    legend = dict(re.findall(r'<span class="cmd" data-command="(.*?)"><span class="sw" '
                             r'style="background:(.*?)">', page))
    assert legend["PUSH"] == next(iter(fills["PUSH"]))
    assert legend["&lt;script&gt;alert(1)&lt;/script&gt;"] == next(iter(fills[HOSTILE]))
    # the histogram of PUSH has the colour PUSH has on the connections
    push = svgs(page)["hist0"]
    assert {r.get("fill") for r in bars(push, "bar")} == fills["PUSH"]
    # bar lengths: connection 1 has 8 requests (the longest), connection 2 has 2
    per_conn: dict[str, float] = {}
    for r in segs:
        conn = r.find("title").text.split(":")[0]
        per_conn[conn] = per_conn.get(conn, 0) + float(r.get("width"))
    assert per_conn["connection 2"] / per_conn["connection 1"] == pytest.approx(2 / 8, abs=0.01)


def test_connection_chart_and_table_are_capped():
    summary = rich()
    summary["connections"] = [_conn(i, frames=i, commands={"PUSH": i}) for i in range(1, 251)]
    page = render_html(summary)
    svg = svgs(page)["cmdconn"]
    shown = [r.find("title").text for r in bars(svg, "seg")]
    assert len(shown) == CONN_BARS and shown[0] == "connection 250: PUSH 250"
    table = page[page.index("<h2>Connections</h2>"):]
    assert len(re.findall(r"<tr>", table)) == CONN_ROWS + 1
    assert "50 more connection(s) left out" in table
    assert "127.0.0.1:5200" in table and "127.0.0.1:5201" not in table


def test_everything_from_the_traffic_is_escaped():
    page = render_html(rich())
    p = parse(page)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "an id &amp; a &lt;type&gt;" in page and "v&lt;9&gt;" in page
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "span", "code",
               "dl", "dt", "dd", "ul", "li", "div", "table", "thead", "tbody", "tr", "th", "td",
               "figure", "figcaption", "svg", "desc", "rect", "line", "text"}
    assert {t for t, _ in p.tags} <= allowed
    assert not [(t, a) for t, attrs in p.tags for a in attrs if a.startswith("on")]


def test_no_external_resources():
    for summary in (rich(), empty()):
        page = render_html(summary)
        p = parse(page)
        for tag, attrs in p.tags:
            for name in ("src", "href", "xlink:href", "action"):
                assert "http" not in (attrs.get(name) or ""), (tag, attrs)
            assert tag not in ("script", "link", "img", "iframe", "object")
        assert "url(" not in page and "@import" not in page and "//" not in page.replace("://", "")


@pytest.mark.parametrize("summary", [empty(), {}, {"totals": None, "commands": None,
                                                  "connections": [None], "latency_histogram": {"X": None},
                                                  "violations_over_time": [{"t_ns": None}]}],
                         ids=["zeros", "nothing", "nones"])
def test_empty_summaries_render_and_say_so(summary):
    page = render_html(summary)
    p = parse(page)
    text = "".join(p.text)
    assert "No latencies recorded." in text
    assert "No violations recorded over time." in text
    assert "No commands recorded per connection." in text
    assert "No connections recorded." in text and "No protocol versions recorded." in text
    assert "<svg" not in page
    assert "FAIL cites a MUST" in text


def test_zero_counts_draw_no_bars_and_divide_by_nothing():
    summary = empty()
    summary["commands"] = {"PUSH": {"requests": 0, "pairs": 0, "errors": 0, "latency_us": {}}}
    summary["latency_histogram"] = {"PUSH": [{"le_us": 16, "count": 0}]}
    summary["violations_over_time"] = [{"t_ns": T0, "FAIL": 0, "NON-STRICT": 0, "INFO": 0}]
    summary["connections"] = [_conn(1, 0, {"PUSH": 0})]
    summary["bucket_ns"] = 0
    page = render_html(summary)
    parse(page)
    assert "<svg" not in page and "PUSH" in page and "No latencies recorded." in page


def test_infinite_bucket_and_missing_bucket_width():
    summary = rich()
    summary["latency_histogram"] = {"PUSH": [{"le_us": 2, "count": 1}, {"le_us": None, "count": 4}]}
    summary["bucket_ns"] = None
    charts = svgs(render_html(summary))
    rects = bars(charts["hist0"], "bar")
    assert [r.get("data-le") for r in rects] == ["2", "inf"]
    assert float(rects[1].get("height")) == pytest.approx(4 * float(rects[0].get("height")))
    # the width is inferred from the spacing of the buckets: 3 s apart, one bar per 3 s
    assert len({r.get("x") for r in bars(charts["vtime"], "seg")}) == 2


def test_write_html_writes_the_page(tmp_path):
    summary = rich()
    before = copy.deepcopy(summary)
    out = tmp_path / "summary.html"
    write_html(summary, out)
    assert out.read_text(encoding="utf-8") == render_html(summary)
    assert summary == before  # the summary is not changed
