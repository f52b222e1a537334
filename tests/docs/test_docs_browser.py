"""The built site in a real browser: headless Chromium (Debian's ``chromium``; ``make
docs-deps`` installs it where missing) loads pages over HTTP and from ``file://`` (the site
opened from disk) from the site ``sphinx -W`` built, runs their JavaScript (mermaid's
classic build draws the diagrams client side) and the test reads the resulting DOM: the
command reference, an annotated hex dump, every diagram drawn as an SVG and the typical
session must be on the page. The packet diagrams' layout is measured through the DevTools
protocol (:mod:`chromium_devtools`): what the reader sees, not what the SVG declares.
Screenshots of those pages go to ``docs/_build/screenshots/``.

Nothing here skips: without Chromium, the docs extra or the vendored mermaid the tests fail
and say what to install."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from chromium_devtools import evaluate

DOCS = Path(__file__).resolve().parents[2] / "docs"
BUILD = DOCS / "_build"

CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SCREENSHOTS = BUILD / "screenshots"
BUDGETS_MS = (15_000, 45_000)  # virtual time for the page's scripts; the second is a retry
PAGES = {
    "cli": "cli.html",
    "quicx-messages": "protocols/quicx_v1/messages.html",
    "quicx-overview": "protocols/quicx_v1/index.html",
    "bunqueue-core-commands": "protocols/bunqueue_v2/commands-core.html",
}
SVG = re.compile(r'<svg[^>]*aria-roledescription="([A-Za-z-]+)"')


def _chromium() -> str:
    for name in CHROMIUM:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no Chromium found (looked for " + ", ".join(CHROMIUM) + "): run `make "
                "docs-deps`, or `apt-get install chromium` (Debian), then run the tests again")


def _vendored() -> None:
    if not (DOCS / "_vendor" / "mermaid" / "mermaid.min.js").is_file():
        pytest.fail("docs/_vendor/mermaid/mermaid.min.js is missing, so the site loads mermaid "
                    "from a CDN this machine cannot reach: run `make docs-deps` (it unpacks "
                    "mermaid's classic build from npm)")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - keep the test output clean
        pass


@pytest.fixture(scope="module")
def served(site):
    """The built site on an ephemeral loopback port."""
    _vendored()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--no-first-run", f"--user-data-dir={tmp}", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180)


def _dom(url: str, tmp: Path, ready) -> str:
    """The DOM after the page's scripts ran; retried with more time until ``ready``."""
    dom = ""
    for budget in BUDGETS_MS:
        done = _run([f"--virtual-time-budget={budget}", "--dump-dom", url], tmp)
        dom = done.stdout
        assert done.returncode == 0 and dom, f"chromium failed on {url}:\n{done.stderr[-3000:]}"
        if ready(dom):
            break
    return dom


def _screenshot(url: str, name: str, tmp: Path, height: int = 2400) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    path.unlink(missing_ok=True)
    done = _run([f"--virtual-time-budget={BUDGETS_MS[0]}", f"--window-size=1280,{height}",
                 f"--screenshot={path}", url], tmp)
    assert done.returncode == 0 and path.is_file(), f"no screenshot of {url}:\n{done.stderr[-3000:]}"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000, path
    return path


def _mermaid_done(dom: str) -> bool:
    """Every mermaid block on the page has been drawn (its <pre> holds an <svg>)."""
    blocks = re.findall(r'<pre class="mermaid"[^>]*>(.*?)</pre>', dom, re.S)
    return bool(blocks) and all("<svg" in b for b in blocks)


def test_command_reference_renders(served, tmp_path):
    url = f"{served}/{PAGES['cli']}"
    dom = _dom(url, tmp_path, lambda d: "cmdoption" in d)
    assert "queuewire conform server" in dom
    for option in ("cmdoption-queuewire-conform-server-target",
                   "cmdoption-queuewire-fuzz-seed", "cmdoption-queuewire-conform-client-testee"):
        assert f'id="{option}"' in dom, f"{option} is not on the command reference page"
    _screenshot(url, "cli", tmp_path)


def test_quicx_messages_show_hex_dumps_and_packet_diagrams(served, tmp_path):
    url = f"{served}/{PAGES['quicx-messages']}"
    dom = _dom(url, tmp_path, _mermaid_done)
    assert 'class="qw-hexdump"' in dom and "<code>header.msg_type</code>" in dom
    assert "0x01 (MSG_SUBMIT)" in dom and "<code>task_type</code>" in dom
    assert re.search(r'<span class="qw-c\d" title="header.version">01</span>', dom)
    kinds = SVG.findall(dom)
    assert "packet" in kinds, f"no packet diagram was drawn (diagrams: {kinds})"
    assert _mermaid_done(dom), "a mermaid diagram was not drawn"
    _screenshot(url, "quicx-messages", tmp_path, height=3000)  # MSG_SUBMIT and its dump


def test_quicx_overview_draws_header_and_state_machines(served, tmp_path):
    url = f"{served}/{PAGES['quicx-overview']}"
    dom = _dom(url, tmp_path, _mermaid_done)
    kinds = SVG.findall(dom)
    assert "packet" in kinds and "stateDiagram" in kinds, f"diagrams drawn: {kinds}"
    assert "quicx frame header" in dom
    _screenshot(url, "quicx-overview", tmp_path, height=3200)


def test_bunqueue_commands_show_annotated_msgpack(served, tmp_path):
    url = f"{served}/{PAGES['bunqueue-core-commands']}"
    dom = _dom(url, tmp_path, lambda d: "qw-hexdump" in d)
    assert "<code>len_payload</code>" in dom and "fixmap (" in dom
    assert "<code>cmd (key)</code>" in dom and "&quot;PUSH&quot;" in dom or '"PUSH"' in dom
    # the screenshot: the Auth command, whose request and reply dumps fit in one window
    _screenshot(f"{served}/protocols/bunqueue_v2/commands-auth.html", "bunqueue-auth-command",
                tmp_path, height=3600)


def test_site_keeps_every_generated_hex_dump(site, generated):
    """MyST passes the raw HTML of each dump through: the built pages hold as many as the
    generated Markdown."""
    written = sum(t.count('<div class="qw-hexdump"') for t in generated.values())
    built = sum(p.read_text(encoding="utf-8").count('class="qw-hexdump"')
                for p in (site / "protocols").rglob("*.html"))
    assert written and built == written, (built, written)


# -- from disk --------------------------------------------------------------------------------
# Pages with every kind of diagram the reference draws: the header and frame packet diagrams
# and state machines (overviews), the payload packet diagrams (messages pages).
DISK_PAGES = ("protocols/quicx_v1/index.html", "protocols/quicx_v1/messages.html",
              "protocols/quicx_1_0_3/messages.html", "protocols/bunqueue_v2/index.html",
              "protocols/bunqueue_2_9_5/index.html")
PRE = re.compile(r'<pre class="mermaid"[^>]*>(.*?)</pre>', re.S)
SVG_ELEMENT = re.compile(r"<svg\b.*?</svg>", re.S)


def _fences(generated, page: str) -> int:
    return generated[page.replace(".html", ".md")].count("```mermaid")


def test_site_opened_from_disk_draws_every_diagram(site, generated, tmp_path):
    """Issue 24: opened from file://, every mermaid block becomes an <svg> and none is left
    as its source (the classic build loads where an ES module would not)."""
    _vendored()
    for page in DISK_PAGES:
        url = (site / page).as_uri()
        dom = _dom(url, tmp_path, _mermaid_done)
        assert 'type="module"' not in dom, f"{page}: an ES module does not load from file://"
        blocks = PRE.findall(dom)
        assert len(blocks) == _fences(generated, page) > 0, (page, len(blocks))
        for i, block in enumerate(blocks):
            assert SVG_ELEMENT.search(block), f"{page}: diagram {i} was not drawn:\n{block[:300]}"
            left = SVG_ELEMENT.sub("", block).strip()
            assert not left, f"{page}: diagram {i} left source text beside its SVG: {left[:200]}"
            assert "Syntax error" not in block, f"{page}: mermaid could not parse diagram {i}"
        kinds = set(SVG.findall(dom))
        assert "packet" in kinds, (page, kinds)
    _screenshot((site / DISK_PAGES[0]).as_uri(), "quicx-overview-from-disk", tmp_path, height=1600)


# Readable packet diagrams, measured in a 1280 x 900 window: each field's box at least
# MIN_ROW_PX tall on screen and its label's line box at least MIN_LABEL_PX (mermaid draws rows
# of 32 px and labels of 12 px, a 14-px line box, at the diagram's own size), and every label
# inside its field. Before issue 24 the 48-bit header was one 1538-px row that the 736-px
# article column scaled down: measured the same way, 15.3-px rows and 6-px label boxes.
MIN_ROW_PX = 24
MIN_LABEL_PX = 12
READY = ("document.querySelectorAll('pre.mermaid').length > 0 && Array.from("
         "document.querySelectorAll('pre.mermaid')).every(p => p.querySelector('svg'))")
MEASURE = """
Array.from(document.querySelectorAll('svg[aria-roledescription="packet"]')).map(svg => ({
  title: (svg.querySelector('.packetTitle') || {}).textContent || '',
  fields: Array.from(svg.querySelectorAll('rect.packetBlock')).map(rect => {
    const box = rect.getBoundingClientRect();
    const label = rect.nextElementSibling.getBoundingClientRect();
    return {label: rect.nextElementSibling.textContent, row: box.height, width: box.width,
            labelWidth: label.width, labelHeight: label.height};
  }),
}))
"""


def test_packet_diagrams_are_readable(site, generated, tmp_path):
    _vendored()
    problems, seen = [], 0
    for page in ("protocols/quicx_v1/index.html", "protocols/quicx_v1/messages.html",
                 "protocols/quicx_1_0_3/messages.html", "protocols/bunqueue_v2/index.html"):
        profile_dir = tmp_path / page.replace("/", "_")
        profile_dir.mkdir()
        diagrams = evaluate(_chromium(), (site / page).as_uri(), ready=READY,
                            expression=MEASURE, profile_dir=profile_dir)
        assert len(diagrams) == generated[page.replace(".html", ".md")].count("packet-beta")
        for d in diagrams:
            assert d["fields"], f"{page}: {d['title']} has no fields"
            for f in d["fields"]:
                seen += 1
                where = f"{page}: {d['title']}: {f['label']}"
                if f["row"] < MIN_ROW_PX:
                    problems.append(f"{where}: row {f['row']:.1f} px tall (< {MIN_ROW_PX})")
                if f["labelHeight"] < MIN_LABEL_PX:
                    problems.append(f"{where}: label {f['labelHeight']:.1f} px (< {MIN_LABEL_PX})")
                if f["labelWidth"] > f["width"]:
                    problems.append(f"{where}: label {f['labelWidth']:.0f} px wide in a "
                                    f"{f['width']:.0f}-px field")
    assert seen >= 20, f"only {seen} packet fields measured"
    assert not problems, "\n".join(problems)


def test_typical_session_page_from_disk(site, tmp_path):
    url = (site / "protocols/bunqueue_v2/session.html").as_uri()
    dom = _dom(url, tmp_path, lambda d: "qw-hexdump" in d)
    assert dom.count('class="qw-hexdump"') == 12
    for step in ("1. Auth", "2. Hello", "3. PUSH", "4. PULL", "5. JobHeartbeat", "6. ACK"):
        assert step in dom, step
    assert "<code>token (key)</code>" in dom and "<code>owner (key)</code>" in dom
    _screenshot(url, "bunqueue-typical-session", tmp_path, height=3000)
