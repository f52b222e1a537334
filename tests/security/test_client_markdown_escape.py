"""Issue 22, item 11 (client part): the client conformance Markdown page
(``conform client --markdown``, docs/conformance/clients/index.md) embeds what the testee and
the peer said (its stderr, its name, its error messages, the frames it sent) as data: rendered
by a CommonMark parser with raw HTML and tables on (as GitHub and MyST render it), none of it
becomes HTML, a link, an image, a heading, a table cell or the end of a code fence."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from queuewire.conformance.client.markdown import render
from queuewire.conformance.client.runner import run_client
from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
from queuewire.conformance.client.testee import Testee
from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile

GUARD = 30.0   # seconds: a hang fails the test instead of stalling the suite

EVIL = ("<script>alert(1)</script> [x](javascript:alert(1)) ![i](javascript:alert(2)) "
        "<img src=x onerror=alert(3)> | cell | `tick` ``` {{sub}} https://evil.example "
        "www.evil.example *em* _em_ &lt;b&gt;\n# injected heading\n```\n<script>alert(4)</script>"
        "\n\n| a | b |\n|---|---|\n| c | d |")

HOSTILE_TESTEE = """\
import json, socket, sys
import msgpack

EVIL = %r

def frame(msg):
    body = msgpack.packb(msg)
    return len(body).to_bytes(4, "big") + body

for line in sys.stdin:
    req = json.loads(line)
    sys.stderr.write(EVIL + "\\n"); sys.stderr.flush()
    if req["scenario"] == "bunqueue.client.not-authenticated":
        sys.exit(3)                       # an ERROR whose message quotes the stderr tail
    host, _, port = req["target"].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=3) as sock:
        sock.sendall(frame({"cmd": "Hello", "protocolVersion": 2, "reqId": "1"})
                     + frame({"cmd": EVIL, "reqId": EVIL, "queue": EVIL}))
        sock.recv(65536)
    kind = "unsupported" if req["scenario"] == "bunqueue.client.auth" else "other"
    results = [{"ok": False, "error": EVIL, "error_type": kind, "value": EVIL}
               for _ in req["actions"]]
    print(json.dumps({"scenario": req["scenario"], "results": results}), flush=True)
"""


def _walk(tokens):
    for t in tokens:
        yield t
        if t.children:
            yield from _walk(t.children)


@pytest.mark.asyncio
async def test_testee_and_peer_strings_cannot_inject_markdown_or_html(tmp_path: Path) -> None:
    """Item 11: the client Markdown report embedded testee stderr and peer strings unescaped."""
    script = tmp_path / "hostile_testee.py"
    script.write_text(HOSTILE_TESTEE % EVIL)
    profile = load_profile("bunqueue/v2")
    chosen = select_scenarios(load_scenarios("bunqueue", profile),
                              ["bunqueue.client.basic", "bunqueue.client.auth",
                               "bunqueue.client.not-authenticated"])
    async with asyncio.timeout(GUARD):
        run = await run_client(Testee(f"{sys.executable} {script}", label=EVIL), chosen, profile)
    assert {r.verdict for r in run.results} >= {Verdict.ERROR, Verdict.UNIMPLEMENTED}
    assert any(EVIL.splitlines()[0] in (r.error or "") for r in run.results)  # stderr is quoted
    run.server_info = {**(run.server_info or {}), "testee": "python t.py '`x`' ```y``` |z|"}
    page = render([run])

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    tokens = md.parse(page)
    html = md.render(page)
    assert "<script" not in html.lower() and "<img" not in html.lower(), html
    assert "&lt;script&gt;alert(1)" in html            # shown as text, not dropped
    every = list(_walk(tokens))
    kinds = {t.type for t in every}
    assert not kinds & {"html_block", "html_inline", "link_open", "image"}, kinds
    assert not any("javascript:" in str(v) for t in every for v in (t.attrs or {}).values())
    # headings: the title, one per run, one per scenario that did not pass; nothing injected
    bad = [r for r in run.results if r.verdict is not Verdict.PASS]
    assert sum(t.type == "heading_open" for t in every) == 1 + 1 + len(bad), \
        [t.content for t in every if t.type == "inline"][:5]
    # one code fence per scenario that did not pass (its wire evidence), none broken out of
    assert sum(t.type == "fence" for t in every) == len(bad)
    # one table (the matrix), every row with the header's column count, one row per scenario
    assert sum(t.type == "table_open" for t in every) == 1
    rows, row = [], 0
    for t in every:
        if t.type == "tr_open":
            row = 0
        elif t.type in ("th_open", "td_open"):
            row += 1
        elif t.type == "tr_close":
            rows.append(row)
    assert rows == [1 + 1] * (1 + len(chosen)), rows
