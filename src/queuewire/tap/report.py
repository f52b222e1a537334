"""The tap's reports, all drawn from
:meth:`~queuewire.traffic.analyzer.Analyzer.summary`: a rich console summary, the
summary as JSON, and one self-contained HTML page (inline CSS, no scripts, no fetches)."""

from __future__ import annotations

import datetime as _dt
import html
import json
from collections.abc import Container
from pathlib import Path
from typing import Any

from ..traffic.model import PERCENTILE_METHOD

_COLOURS = {"FAIL": "red", "NON-STRICT": "yellow", "INFO": "cyan", "PASS": "green"}


def _when(ns: int | None) -> str:
    if not ns:
        return "-"
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _us(value: Any) -> str:
    return "-" if value is None else f"{value:,.1f}"


def latency_note(summary: dict[str, Any]) -> str:
    """The percentile method, and which commands' percentiles are of a sample (over the cap of
    latencies kept), in plain text."""
    sampled = [f"{cmd} ({lat['sample']:,} of {lat['count']:,} latencies)"
               for cmd, st in summary["commands"].items()
               for lat in (st["latency"],) if lat.get("sample", lat["count"]) < lat["count"]]
    if not sampled:
        return PERCENTILE_METHOD
    return (f"{PERCENTILE_METHOD} The percentiles of {', '.join(sampled)} are of a uniform "
            "sample, the most latencies the tap keeps a command.")


def write_json(summary: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")


def print_console(summary: dict[str, Any], console: Any) -> None:
    """The summary as rich tables: totals, per command, findings by requirement."""
    from rich.table import Table

    t = summary["totals"]
    verdict = summary["verdict"]
    f = t["findings"]
    console.print(
        f"[bold]queuewire tap[/] {summary['protocol']} ({summary['profile']}): "
        f"[{_COLOURS[verdict]}]{verdict}[/]  {t['connections']} connection(s), "
        f"{t['frames']['c2s']} frames client->server, {t['frames']['s2c']} server->client, "
        f"{t['requests']} requests, {t['paired']} paired, {t['unanswered']} unanswered, "
        f"{t['gaps']} gap(s); findings: [red]{f['FAIL']} FAIL[/], [yellow]{f['NON-STRICT']} NON-STRICT[/], "
        f"[cyan]{f['INFO']} INFO[/]")
    if summary["commands"]:
        table = Table(title="per command", title_justify="left", caption=latency_note(summary),
                      caption_justify="left")
        for col in ("command", "requests", "paired", "error replies", "FAIL", "NON-STRICT", "INFO",
                    "p50 us", "p99 us", "max us"):
            table.add_column(col, justify="left" if col == "command" else "right")
        for cmd, st in summary["commands"].items():
            lat = st["latency"]
            table.add_row(cmd, str(st["requests"]), str(st["paired"]), str(st["errors"]),
                          str(st["findings"]["FAIL"]), str(st["findings"]["NON-STRICT"]),
                          str(st["findings"]["INFO"]), _us(lat["p50_us"]), _us(lat["p99_us"]),
                          _us(lat["max_us"]))
        console.print(table)
    if summary["requirements"]:
        table = Table(title="findings by requirement", title_justify="left")
        for col in ("level", "requirement", "kind", "command", "count", "requirement text"):
            table.add_column(col)
        for r in summary["requirements"]:
            table.add_row(f"[{_COLOURS[r['level']]}]{r['level']}[/]", r["requirement"] or "-",
                          r["kind"], r["command"] or "-", str(r["count"]), r["text"] or "")
        console.print(table)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3;text-align:left}td.n{text-align:right}
.FAIL{color:#b00;font-weight:bold}.NON-STRICT{color:#a60}.INFO{color:#06a}.PASS{color:#080;font-weight:bold}
code{font-size:12px}
"""


def _table(headers: list[str], rows: list[list[str]], numeric: Container[int] = frozenset()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td class='n'>{c}</td>" if i in numeric else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(summary: dict[str, Any], path: str | Path) -> None:
    """One self-contained page: verdict, totals, per command, by requirement, per connection,
    and the findings kept in full."""
    e = html.escape
    t = summary["totals"]
    verdict = summary["verdict"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>queuewire tap: "
             f"{e(summary['protocol'])}</title><style>{_CSS}</style></head><body>",
             f"<h1>queuewire tap: {e(summary['protocol'])} ({e(summary['profile'])}) "
             f"<span class='{verdict}'>{verdict}</span></h1>",
             f"<p>Profile: {e((summary.get('profile_choice') or {}).get('line') or summary['profile'])}.</p>",
             f"<p>From {_when(summary['started_ns'])} to {_when(summary['last_ns'])}. "
             f"{t['connections']} connection(s); frames {t['frames']['c2s']} client&rarr;server, "
             f"{t['frames']['s2c']} server&rarr;client; {t['requests']} requests, {t['paired']} "
             f"paired, {t['unanswered']} unanswered, {t['events']} unsolicited frame(s), "
             f"{t['gaps']} gap(s). Findings: <span class='FAIL'>{t['findings']['FAIL']} FAIL</span>, "
             f"<span class='NON-STRICT'>{t['findings']['NON-STRICT']} NON-STRICT</span>, "
             f"<span class='INFO'>{t['findings']['INFO']} INFO</span>. FAIL cites a MUST the "
             f"documents state; NON-STRICT a SHOULD (a reading or a queuewire decision); INFO what the "
             f"documents are silent on.</p>"]
    rows = []
    for cmd, st in summary["commands"].items():
        lat = st["latency"]
        rows.append([e(cmd), str(st["requests"]), str(st["paired"]), str(st["errors"]),
                     str(st["findings"]["FAIL"]), str(st["findings"]["NON-STRICT"]),
                     str(st["findings"]["INFO"]), _us(lat["p50_us"]), _us(lat["p99_us"]),
                     _us(lat["max_us"])])
    parts.append("<h2>Per command</h2>" + _table(
        ["command", "requests", "paired", "error replies", "FAIL", "NON-STRICT", "INFO", "p50 µs",
         "p99 µs", "max µs"], rows, set(range(1, 10)))
        + (f"<p>{e(latency_note(summary))}</p>" if rows else ""))
    rows = [[f"<span class='{r['level']}'>{r['level']}</span>", e(r["requirement"] or "-"),
             e(r["kind"]), e(r["command"] or "-"), str(r["count"]), e(r["text"] or "")]
            for r in summary["requirements"]]
    parts.append("<h2>Findings by requirement</h2>" + (_table(
        ["level", "requirement", "kind", "command", "count", "requirement text"], rows, {4})
        if rows else "<p>None.</p>"))
    rows = [[str(c["conn_id"]), e(c["client"]), e(c["upstream"]), _when(c["opened_ns"]),
             e(c["close_reason"] or "open"), f"{c['frames']['c2s']} / {c['frames']['s2c']}",
             f"{c['bytes']['c2s']:,} / {c['bytes']['s2c']:,}", str(c["requests"]),
             str(c["paired"]), str(c["unanswered"]), str(c["gaps"]),
             f"{c['findings']['FAIL']} / {c['findings']['NON-STRICT']} / {c['findings']['INFO']}"]
            for c in summary["connections"]]
    parts.append("<h2>Per connection</h2>" + _table(
        ["conn", "client", "upstream", "opened", "closed", "frames c→s / s→c",
         "bytes c→s / s→c", "requests", "paired", "unanswered", "gaps",
         "FAIL / NON-STRICT / INFO"], rows, {0, 7, 8, 9, 10}))
    rows = [[f"<span class='{f['level']}'>{f['level']}</span>", e(f["requirement"] or "-"),
             str(f["conn_id"]), e(f["direction"]), e(f["command"] or "-"), e(f["kind"]),
             f"<code>{e(f['message'])}</code>", _when(f["t_ns"])]
            for f in summary["findings"]]
    dropped = summary.get("findings_dropped") or 0
    parts.append("<h2>Findings</h2>" + (_table(
        ["level", "requirement", "conn", "dir", "command", "kind", "message", "time"], rows)
        if rows else "<p>None.</p>") + (f"<p>{dropped} more not kept (see the counts above).</p>"
                                        if dropped else ""))
    parts.append("</body></html>\n")
    Path(path).write_text("".join(parts), encoding="utf-8")
