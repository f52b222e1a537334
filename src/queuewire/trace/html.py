"""The HTML summary of ``queuewire trace analyze``: one self-contained page drawn from the
``summary.json`` dict, for people who would rather look than read.

:func:`render_html` turns the summary (format ``queuewire-trace-summary``, version 1) into one
HTML document and :func:`write_html` writes it. The page: a header with the verdict badge and
what was analysed (protocol, profile, engine, inputs, elapsed time); the totals as cards; a
table per command sorted by requests (pairs, error replies, error rate, latency percentiles,
and how they are computed); a latency histogram per command (the top HIST_COMMANDS by pairs);
violations over time as stacked FAIL/NON-STRICT/INFO bars on a UTC time axis; the commands of
each connection as horizontal stacked bars (the top CONN_BARS connections by frames) with a
legend; the violations by requirement, with the verdict policy in a sentence; the sample of
violations; the protocol versions seen; and the connections (at most CONN_ROWS rows).

Design: the charts are inline SVG drawn here from the numbers, with no plotting library, no
script and nothing fetched, so the page is one file that opens offline. Each chart has a
``<title>`` and ``<desc>`` (``role="img"``) and labelled axes, and every bar carries
``data-count`` and a ``<title>`` tooltip, so the numbers can be hovered (and tested). Scales
follow the data: the tallest bar fills the plot. Histogram buckets between the first and the
last power of two are filled with zeros so the x axis is a true log2 scale. Time buckets are
merged when there are more than MAX_TIME_BARS, so a day-long capture still draws, and the merge
is stated on the axis. A command keeps one colour on the whole page (histogram, connection bars,
legend), assigned in the order of the per-command table.

Rules: every string taken from the summary is escaped with :func:`html.escape`, since capture
names, addresses, command names and messages come from recorded traffic, that is from whoever
sent the bytes; verdict and level names become CSS classes only through a fixed table. No
missing key, empty list, ``None`` value or zero count raises or divides by zero: an empty chart
or table says so in words. Every cap is stated where it applies. Only the standard library, the
verdict vocabulary (:mod:`queuewire.judge`) and the sentence that states the percentile method
(:data:`queuewire.traffic.model.PERCENTILE_METHOD`, the tap's page prints it too) are imported.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
from collections.abc import Container
from pathlib import Path
from typing import Any

from ..judge import FINDING_VERDICTS, Verdict
from ..traffic.model import PERCENTILE_METHOD

HIST_COMMANDS = 12   # latency histograms drawn (commands with the most pairs)
CONN_BARS = 30       # connections in the commands-per-connection chart (most frames)
CONN_ROWS = 200      # rows of the connections table
INPUTS_SHOWN = 20    # input paths listed in the header
MESSAGE_CAP = 400    # characters of a violation message shown
MAX_TIME_BARS = 240  # bars of the violations-over-time chart; more buckets are merged
MAX_LOG2_FILL = 48   # at most this many log2 buckets are filled between first and last edge

COLOR = {"PASS": "#1a7f37", "FAIL": "#cf222e", "NON-STRICT": "#bf8700", "INFO": "#0969da"}
GREY = "#57606a"
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#17becf", "#8c564b", "#bcbd22")

POLICY = ("The verdict policy: FAIL cites a MUST the protocol documents state; NON-STRICT a SHOULD, "
          "or a reading of the documents (a queuewire decision where they are unclear); INFO "
          "what the documents are silent on. Only FAIL makes the verdict FAIL.")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1400px;
  padding:1em 2em;color:#1f2328}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.v{display:inline-block;border-radius:4px;padding:0 6px;color:#fff;font-weight:600;
  font-size:.85em;white-space:nowrap}
h1 .v{font-size:.7em;vertical-align:middle}
.dim,.empty{color:#57606a}.empty{font-style:italic}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 1em;margin:.5em 0}
dl.meta dt{color:#57606a}dl.meta dd{margin:0}
.cards{display:flex;flex-wrap:wrap;gap:.6em;margin:.5em 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.4em .9em;min-width:8em;background:#f6f8fa}
.card .big{font-size:1.5em;font-weight:600;font-variant-numeric:tabular-nums}
.card .lbl{color:#57606a;font-size:.85em}.card .sub{font-size:.8em}
.charts{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:.4em}
figcaption{font-size:.85em;color:#57606a}
svg text{font:10px system-ui,sans-serif;fill:#57606a}svg .axis{stroke:#8c959f;stroke-width:1}
.legend{display:flex;flex-wrap:wrap;gap:.3em 1em;font-size:.85em;margin:.4em 0}
.sw{display:inline-block;width:.9em;height:.9em;border-radius:2px;vertical-align:-.1em;margin-right:.3em}
code{font-size:.95em}td code{word-break:break-all}
"""


# --- values: tolerant readers and formatters ------------------------------------------------

def _e(value: Any) -> str:
    """Escape anything for HTML text or attribute values (and well-formed SVG)."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list | tuple) else []


def _num(value: Any) -> float | None:
    """A finite number, or None for anything else (missing, text, NaN, bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int:
    """A count: integers as they are, anything not a finite number as 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    n = _num(value)
    return int(n) if n is not None else 0


def _n(value: Any) -> str:
    return f"{_int(value):,}"


def _us(value: Any) -> str:
    n = _num(value)
    return "-" if n is None else f"{n:,.1f}"


def _when(ns: Any, fmt: str = "%Y-%m-%d %H:%M:%S.%f") -> str:
    n = _num(ns)
    if not n:
        return "-"
    try:
        return _dt.datetime.fromtimestamp(n / 1e9, _dt.UTC).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return "-"


def _span(seconds: float | None) -> str:
    """A duration for people: 350 ms, 12.5 s, 3 min 20 s, 2 h 5 min."""
    if seconds is None or seconds < 0:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def _latency_label(le_us: float) -> str:
    if le_us < 1000:
        return f"{le_us:g}µs"
    if le_us < 1e6:
        return f"{le_us / 1e3:.3g}ms"
    return f"{le_us / 1e6:.3g}s"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n:,} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n:,} B"  # not reached


def _level(value: Any) -> str:
    """A level or verdict as a fixed name (a CSS class and colour key), never the raw text."""
    return value if value in COLOR else "other"


def _badge(value: Any) -> str:
    shown = value if isinstance(value, str) and value else "UNKNOWN"
    return f'<span class="v" style="background:{COLOR.get(_level(value), GREY)}">{_e(shown)}</span>'


def _table(headers: list[str], rows: list[list[str]], numeric: Container[int] = frozenset(),
           empty: str = "None.") -> str:
    """A table from cells already escaped; ``empty`` (plain text) when there are no rows."""
    if not rows:
        return f'<p class="empty">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _colours(summary: dict) -> dict[str, str]:
    """One colour per command: table order first (requests, then name), then the histograms',
    then commands seen only on connections; past the palette, golden-angle hues."""
    order: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        if name not in seen:
            seen.add(name)
            order.append(name)

    for name in _command_order(_dict(summary.get("commands"))):
        add(name)
    for name in sorted(_dict(summary.get("latency_histogram")), key=str):
        add(str(name))
    totals: dict[str, int] = {}
    for conn in _list(summary.get("connections")):
        for name, n in _dict(conn.get("commands")).items():
            totals[str(name)] = totals.get(str(name), 0) + _int(n)
    for name in sorted(totals, key=lambda k: (-totals[k], k)):
        add(name)
    return {name: PALETTE[i] if i < len(PALETTE) else f"hsl({(i * 137.508) % 360:.0f},55%,48%)"
            for i, name in enumerate(order)}


def _command_order(commands: dict) -> list[str]:
    return sorted((str(k) for k in commands),
                  key=lambda k: (-_int(_dict(commands.get(k)).get("requests")), k))


def _svg_open(ident: str, width: float, height: float, title: str, desc: str) -> str:
    return (f'<svg id="{ident}" viewBox="0 0 {width:g} {height:g}" width="{width:g}" '
            f'height="{height:g}" role="img" aria-labelledby="{ident}-t {ident}-d">'
            f'<title id="{ident}-t">{_e(title)}</title><desc id="{ident}-d">{_e(desc)}</desc>')


def _ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at most ``top`` (steps of 1, 2 or 5 times a power of ten)."""
    if top <= 0:
        return [0.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    step = max(step, 1.0)
    return [i * step for i in range(int(top // step) + 1)]


def _f(x: float) -> str:
    return f"{x:.2f}"


# --- the charts -----------------------------------------------------------------------------

def _buckets(raw: Any) -> list[tuple[float | None, int]]:
    """(upper edge in µs, count) in edge order; edges that are all powers of two are filled
    with zero counts in between; an edge that is missing or infinite is the overflow bucket."""
    counts: dict[float, int] = {}
    overflow = 0
    for b in _list(raw):
        le, n = _num(b.get("le_us")), _int(b.get("count"))
        if le is None:
            overflow += n
        else:
            counts[le] = counts.get(le, 0) + n
    edges = sorted(counts)
    if edges and all(le > 0 and math.log2(le).is_integer() for le in edges):
        lo, hi = int(math.log2(edges[0])), int(math.log2(edges[-1]))
        if hi - lo < MAX_LOG2_FILL:
            edges = [2.0 ** k for k in range(lo, hi + 1)]
    out: list[tuple[float | None, int]] = [(le, counts.get(le, 0)) for le in edges]
    if overflow:
        out.append((None, overflow))
    return out


def _hist_svg(ident: str, command: str, colour: str, buckets: list[tuple[float | None, int]]) -> str:
    """One command's latency histogram: log2 buckets on x, pairs on y."""
    width, height, left, right, top, bottom = 340, 190, 44, 8, 10, 44
    pw, ph = width - left - right, height - top - bottom
    peak = max((n for _, n in buckets), default=0)
    total = sum(n for _, n in buckets)
    parts = [_svg_open(ident, width, height, f"latency histogram of {command}",
                       f"{total} pairs of {command} in {len(buckets)} buckets; the tallest "
                       f"bucket holds {peak}.")]
    slot = pw / max(len(buckets), 1)
    every = max(1, math.ceil(len(buckets) / 6))
    for i, (le, n) in enumerate(buckets):
        h = n / peak * ph if peak else 0.0
        x = left + i * slot
        label = "more" if le is None else "≤" + _latency_label(le)
        parts.append(f'<rect class="bar" data-le="{"inf" if le is None else f"{le:g}"}" '
                     f'data-count="{n}" x="{_f(x + slot * 0.08)}" y="{_f(top + ph - h)}" '
                     f'width="{_f(slot * 0.84)}" height="{_f(h)}" fill="{colour}">'
                     f"<title>{_e(label)}: {n:,}</title></rect>")
        if i % every == 0:
            parts.append(f'<text x="{_f(x + slot / 2)}" y="{top + ph + 13}" '
                         f'text-anchor="middle">{_e(label)}</text>')
    parts.append(_y_axis(left, top, ph, pw, peak, "pairs"))
    parts.append(f'<text x="{left + pw / 2:g}" y="{height - 6}" text-anchor="middle">'
                 f"latency, bucket upper edge (µs, log2)</text></svg>")
    return "".join(parts)


def _y_axis(left: float, top: float, ph: float, pw: float, peak: float, title: str) -> str:
    parts = [f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{_f(top + ph)}"/>',
             f'<line class="axis" x1="{left}" y1="{_f(top + ph)}" x2="{_f(left + pw)}" '
             f'y2="{_f(top + ph)}"/>']
    for v in _ticks(peak):
        y = top + ph - (v / peak * ph if peak else 0)
        parts.append(f'<text x="{left - 4}" y="{_f(y + 3)}" text-anchor="end">{v:,.0f}</text>')
    parts.append(f'<text transform="rotate(-90 10 {_f(top + ph / 2)})" x="10" y="{_f(top + ph / 2)}" '
                 f'text-anchor="middle">{_e(title)}</text>')
    return "".join(parts)


def _histograms(summary: dict, colours: dict[str, str]) -> str:
    hist = _dict(summary.get("latency_histogram"))
    stats = _dict(summary.get("commands"))
    drawn = []
    for name, raw in hist.items():
        buckets = _buckets(raw)
        total = sum(n for _, n in buckets)
        if total:
            drawn.append((str(name), buckets, total))
    if not drawn:
        return '<p class="empty">No latencies recorded.</p>'
    drawn.sort(key=lambda d: (-d[2], d[0]))
    figs = []
    for i, (name, buckets, total) in enumerate(drawn[:HIST_COMMANDS]):
        lat = _dict(_dict(stats.get(name)).get("latency_us"))
        figs.append(f"<figure>{_hist_svg(f'hist{i}', name, colours.get(name, GREY), buckets)}"
                    f"<figcaption><code>{_e(name)}</code>: {total:,} pairs; p50 {_us(lat.get('p50'))}"
                    f" µs, p99 {_us(lat.get('p99'))} µs</figcaption></figure>")
    more = len(drawn) - HIST_COMMANDS
    note = (f'<p class="dim">{more} more command(s) with latencies not drawn (the '
            f"{HIST_COMMANDS} with the most pairs are).</p>" if more > 0 else "")
    return f'<div class="charts">{"".join(figs)}</div>{note}'


def _time_bins(rows: list[dict], bucket_ns: int) -> tuple[int, int, int, list[dict[Verdict, int]]]:
    """(first bucket start, bin width in ns, buckets per bin, bins): the rows' buckets on a
    gap-free axis, merged k at a time so there are at most MAX_TIME_BARS bins."""
    points = [(_int(r.get("t_ns")), r) for r in rows if _num(r.get("t_ns")) is not None]
    times = sorted({t for t, _ in points})
    if bucket_ns <= 0:
        diffs = [b - a for a, b in zip(times, times[1:]) if b > a]
        bucket_ns = min(diffs) if diffs else 1_000_000_000
    t0 = times[0]
    slots = (times[-1] - t0) // bucket_ns + 1
    k = max(1, math.ceil(slots / MAX_TIME_BARS))
    width = bucket_ns * k
    bins = [dict.fromkeys(FINDING_VERDICTS, 0) for _ in range(math.ceil(slots / k))]
    for t, r in points:
        b = bins[(t - t0) // width]
        for lvl in FINDING_VERDICTS:
            b[lvl] += _int(r.get(lvl))
    return t0, width, k, bins


def _violations_over_time(summary: dict) -> str:
    rows = _list(summary.get("violations_over_time"))
    if not any(_num(r.get("t_ns")) is not None and sum(_int(r.get(lvl)) for lvl in FINDING_VERDICTS)
               for r in rows):
        return '<p class="empty">No violations recorded over time.</p>'
    t0, width_ns, merged_by, bins = _time_bins(rows, _int(summary.get("bucket_ns")))
    end = t0 + width_ns * len(bins)
    width, height, left, right, top, bottom = 900, 230, 52, 40, 10, 50
    pw, ph = width - left - right, height - top - bottom
    peak = max(sum(b.values()) for b in bins)
    total = {lvl: sum(b[lvl] for b in bins) for lvl in FINDING_VERDICTS}
    day0, day1 = _when(t0, "%Y-%m-%d"), _when(end - 1, "%Y-%m-%d")
    if width_ns < 1_000_000_000:
        fmt = "%H:%M:%S.%f"
    elif day0 != day1:
        fmt = "%m-%d %H:%M"
    else:
        fmt = "%H:%M:%S"

    def stamp(ns: int) -> str:
        s = _when(ns, fmt)
        return s[:-3] if fmt.endswith("%f") else s

    parts = [_svg_open("vtime", width, height, "violations over time",
                       f"{total[Verdict.FAIL]} FAIL, {total[Verdict.NON_STRICT]} NON-STRICT and "
                       f"{total[Verdict.INFO]} INFO "
                       f"violations in {len(bins)} time buckets of {_span(width_ns / 1e9)} from "
                       f"{_when(t0)} UTC; the busiest bucket holds {peak}.")]
    slot = pw / len(bins)
    for i, b in enumerate(bins):
        x = left + i * slot
        y: float = top + ph
        for lvl in FINDING_VERDICTS:
            if not b[lvl]:
                continue
            h = b[lvl] / peak * ph
            y -= h
            parts.append(f'<rect class="seg {lvl}" data-level="{lvl}" data-count="{b[lvl]}" '
                         f'x="{_f(x + slot * 0.05)}" y="{_f(y)}" width="{_f(max(slot * 0.9, 0.5))}" '
                         f'height="{_f(h)}" fill="{COLOR[lvl]}"><title>{_e(stamp(t0 + i * width_ns))}'
                         f" UTC: {b[lvl]:,} {lvl}</title></rect>")
    ticks = sorted({round(j * (len(bins) - 1) / 5) for j in range(6)})
    for i in ticks:
        x = left + i * slot + slot / 2
        parts.append(f'<line class="axis" x1="{_f(x)}" y1="{_f(top + ph)}" x2="{_f(x)}" '
                     f'y2="{_f(top + ph + 4)}"/><text class="tick" x="{_f(x)}" y="{top + ph + 15}" '
                     f'text-anchor="middle">{_e(stamp(t0 + i * width_ns))}</text>')
    parts.append(_y_axis(left, top, ph, pw, peak, "violations"))
    days = day0 if day0 == day1 else f"{day0} to {day1}"
    merged = f" ({merged_by} buckets merged)" if merged_by > 1 else ""
    parts.append(f'<text x="{left + pw / 2:g}" y="{height - 6}" text-anchor="middle">time (UTC, '
                 f"{_e(days)}); each bar {_e(_span(width_ns / 1e9))}{merged}</text></svg>")
    legend = "".join(f'<span><span class="sw" style="background:{COLOR[lvl]}"></span>{lvl} '
                     f"({total[lvl]:,})</span>" for lvl in FINDING_VERDICTS)
    return f'<figure>{"".join(parts)}<div class="legend">{legend}</div></figure>'


def _conn_label(conn: dict) -> str:
    label = f"#{_int(conn.get('conn_id'))} {conn.get('client') or ''}".strip()
    return label if len(label) <= 30 else label[:29] + "…"


def _commands_per_connection(summary: dict, colours: dict[str, str]) -> str:
    conns = sorted(_list(summary.get("connections")),
                   key=lambda c: (-_int(c.get("frames")), _int(c.get("conn_id"))))
    shown = [c for c in conns if sum(_int(n) for n in _dict(c.get("commands")).values())][:CONN_BARS]
    if not shown:
        return '<p class="empty">No commands recorded per connection.</p>'
    order = {name: i for i, name in enumerate(colours)}
    totals = [sum(_int(n) for n in _dict(c.get("commands")).values()) for c in shown]
    peak = max(totals)
    row, left, right, top, bottom = 20, 190, 60, 8, 40
    width, pw = 900, 900 - left - right
    height = top + row * len(shown) + bottom
    parts = [_svg_open("cmdconn", width, height, "commands per connection",
                       f"requests per command on the {len(shown)} connections with the most "
                       f"frames; the longest bar is {peak} requests.")]
    for i, (conn, total) in enumerate(zip(shown, totals)):
        y = top + i * row
        parts.append(f'<text x="{left - 6}" y="{y + row * 0.65:g}" text-anchor="end">'
                     f"{_e(_conn_label(conn))}</text>")
        x = float(left)
        cmds = sorted(((str(k), _int(v)) for k, v in _dict(conn.get("commands")).items() if _int(v)),
                      key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
        for name, n in cmds:
            w = n / peak * pw
            parts.append(f'<rect class="seg" data-command="{_e(name)}" data-count="{n}" '
                         f'x="{_f(x)}" y="{y + 2}" width="{_f(w)}" height="{row - 4}" '
                         f'fill="{colours.get(name, GREY)}"><title>connection {_int(conn.get("conn_id"))}: '
                         f"{_e(name)} {n:,}</title></rect>")
            x += w
        parts.append(f'<text x="{_f(x + 4)}" y="{y + row * 0.65:g}">{total:,}</text>')
    base = top + row * len(shown)
    parts.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{base}"/>'
                 f'<line class="axis" x1="{left}" y1="{base}" x2="{left + pw}" y2="{base}"/>')
    for v in _ticks(peak, 6):
        x = left + v / peak * pw
        parts.append(f'<text x="{_f(x)}" y="{base + 13}" text-anchor="middle">{v:,.0f}</text>')
    parts.append(f'<text x="{left + pw / 2:g}" y="{height - 6}" text-anchor="middle">requests, '
                 f"by command</text></svg>")
    used = sorted({name for c in shown for name, n in _dict(c.get("commands")).items() if _int(n)},
                  key=lambda k: (order.get(str(k), len(order)), str(k)))
    legend = "".join(f'<span class="cmd" data-command="{_e(name)}"><span class="sw" '
                     f'style="background:{colours.get(str(name), GREY)}"></span><code>{_e(name)}'
                     f"</code></span>" for name in used)
    note = (f'<p class="dim">The {len(shown)} connections with the most frames of '
            f"{len(conns)}.</p>" if len(conns) > len(shown) else "")
    return f'<figure>{"".join(parts)}<div class="legend">{legend}</div></figure>{note}'


# --- the sections ---------------------------------------------------------------------------

def _header(summary: dict) -> str:
    verdict = summary.get("verdict")
    protocol, profile = summary.get("protocol") or "?", summary.get("profile") or "?"
    engine = str(summary.get("engine") or "-")
    if summary.get("master"):
        engine += f" (master {summary['master']})"
    raw = summary.get("inputs") or []
    inputs = [str(x) for x in ([raw] if isinstance(raw, str) else raw) if x is not None]
    shown = "".join(f"<li><code>{_e(p)}</code></li>" for p in inputs[:INPUTS_SHOWN])
    if len(inputs) > INPUTS_SHOWN:
        shown += f'<li class="dim">… and {len(inputs) - INPUTS_SHOWN:,} more</li>'
    elapsed = _num(summary.get("elapsed_s"))
    opened = [_int(c.get("opened_ns")) for c in _list(summary.get("connections")) if c.get("opened_ns")]
    closed = [_int(c.get("closed_ns")) for c in _list(summary.get("connections")) if c.get("closed_ns")]
    choice = summary.get("profile_choice") or {}
    picked = f"<code>{_e(profile)}</code>" + (
        f'<br><span class="dim">{_e(choice["line"])}</span>' if choice.get("line") else "")
    meta = [("protocol", f"<code>{_e(protocol)}</code>"), ("profile", picked),
            ("engine", _e(engine)),
            ("inputs", f"{_n(summary.get('files'))} file(s) from {len(inputs)} input(s)"
                       + (f"<ul>{shown}</ul>" if shown else "")),
            ("elapsed", _e(_span(elapsed)))]
    if opened:
        meta.append(("traffic", f"{_e(_when(min(opened)))} to "
                                f"{_e(_when(max(closed + opened)))} UTC"))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in meta)
    return (f"<h1>queuewire trace analyze: <code>{_e(protocol)}</code> {_badge(verdict)}</h1>"
            f'<dl class="meta">{dl}</dl>')


def _card(label: str, big: str, sub: str = "") -> str:
    return (f'<div class="card"><div class="lbl">{_e(label)}</div><div class="big">{big}</div>'
            f'<div class="sub">{sub}</div></div>')


def _totals(summary: dict) -> str:
    t = _dict(summary.get("totals"))
    frames, size, v = _dict(t.get("frames")), _dict(t.get("bytes")), _dict(t.get("violations"))
    fc, fs = _int(frames.get("c2s")), _int(frames.get("s2c"))
    bc, bs = _int(size.get("c2s")), _int(size.get("s2c"))
    viol = " · ".join(f'<span style="color:{COLOR[lvl]}">{_n(v.get(lvl))} {lvl}</span>'
                      for lvl in FINDING_VERDICTS)
    cards = [_card("connections", _n(t.get("connections"))),
             _card("frames", f"{fc + fs:,}", f"client→server {fc:,} · server→client {fs:,}"),
             _card("bytes", _e(_bytes(bc + bs)), f"c→s {_e(_bytes(bc))} · s→c {_e(_bytes(bs))}"),
             _card("requests", _n(t.get("requests"))),
             _card("pairs", _n(t.get("pairs")), f"{_n(t.get('split_pairs'))} split over files"),
             _card("error replies", _n(t.get("errors"))),
             _card("unanswered", _n(t.get("unanswered"))),
             _card("gaps", _n(t.get("gaps")), "bytes that could not be framed"),
             _card("violations", f"{sum(_int(v.get(lvl)) for lvl in FINDING_VERDICTS):,}", viol)]
    return f'<div class="cards">{"".join(cards)}</div>'


def _error_rate(st: dict) -> str:
    rate = _num(st.get("error_rate"))
    if rate is None:
        pairs = _int(st.get("pairs"))
        rate = _int(st.get("errors")) / pairs if pairs else None
    return "-" if rate is None else f"{rate * 100:.1f} %"


def _commands(summary: dict, colours: dict[str, str]) -> str:
    commands = _dict(summary.get("commands"))
    rows = []
    for name in _command_order(commands):
        st = _dict(commands.get(name))
        lat = _dict(st.get("latency_us"))
        rows.append([f'<span class="sw" style="background:{colours.get(name, GREY)}"></span>'
                     f"<code>{_e(name)}</code>", _n(st.get("requests")), _n(st.get("pairs")),
                     _n(st.get("errors")), _error_rate(st)]
                    + [_us(lat.get(k)) for k in ("p50", "p95", "p99", "max", "mean")])
    return _table(["command", "requests", "pairs", "error replies", "error rate", "p50 µs",
                   "p95 µs", "p99 µs", "max µs", "mean µs"], rows, set(range(1, 10)),
                  "No commands recorded.")


def _requirements(summary: dict) -> str:
    rank = {lvl: i for i, lvl in enumerate(FINDING_VERDICTS)}
    reqs = sorted(_list(summary.get("requirements")),
                  key=lambda r: (rank.get(r.get("level"), 3), -_int(r.get("count")),
                                 str(r.get("requirement") or "")))
    rows = [[_badge(r.get("level")), f"<code>{_e(r.get('requirement') or '-')}</code>",
             _e(r.get("kind") or "-"), _n(r.get("count")), _e(r.get("text") or "")] for r in reqs]
    return (f"<p>{_e(POLICY)}</p>"
            + _table(["level", "requirement", "kind", "count", "requirement text"], rows, {3},
                     "No violations."))


def _sample(summary: dict) -> str:
    sample = _list(summary.get("violations_sample"))
    violations = _dict(_dict(summary.get("totals")).get("violations"))
    total = sum(_int(violations.get(lvl)) for lvl in FINDING_VERDICTS)
    rows = []
    for v in sample:
        msg = str(v.get("message") or "")
        if len(msg) > MESSAGE_CAP:
            msg = msg[:MESSAGE_CAP] + f"… ({len(msg):,} characters in all)"
        rows.append([_e(_when(v.get("t_ns"))), _n(v.get("conn_id")), _e(v.get("direction") or "-"),
                     _badge(v.get("level")), f"<code>{_e(v.get('requirement') or '-')}</code>",
                     _e(v.get("kind") or "-"), f"<code>{_e(v.get('command') or '-')}</code>",
                     f"<code>{_e(msg)}</code>"])
    note = (f'<p class="dim">The first {len(sample):,} of {total:,} violations; all of them are in '
            f"the Parquet tables.</p>" if sample and total > len(sample) else "")
    return note + _table(["time (UTC)", "conn", "dir", "level", "requirement", "kind", "command",
                          "message"], rows, {1}, "No violations.")


def _versions(summary: dict) -> str:
    rows = [[f"<code>{_e(v.get('version') if v.get('version') is not None else '-')}</code>",
             _n(v.get("frames"))] for v in _list(summary.get("versions"))]
    return _table(["version", "frames"], rows, {1}, "No protocol versions recorded.")


def _connections(summary: dict) -> str:
    conns = sorted(_list(summary.get("connections")), key=lambda c: _int(c.get("conn_id")))
    rows = []
    for c in conns[:CONN_ROWS]:
        v = _dict(c.get("violations"))
        opened, closed = _num(c.get("opened_ns")), _num(c.get("closed_ns"))
        lasted = _span((closed - opened) / 1e9) if opened and closed else "-"
        cmds = sorted(((str(k), _int(n)) for k, n in _dict(c.get("commands")).items()),
                      key=lambda kv: (-kv[1], kv[0]))
        top = ", ".join(f"{_e(k)} {n:,}" for k, n in cmds[:4]) + (" …" if len(cmds) > 4 else "")
        rows.append([_n(c.get("conn_id")), f"<code>{_e(c.get('client') or '-')}</code>",
                     f"<code>{_e(c.get('upstream') or '-')}</code>", _e(_when(opened)),
                     _e(lasted), _e(c.get("close_reason") or "open"), _n(c.get("frames")),
                     _n(c.get("requests")), _n(c.get("pairs")), _n(c.get("errors")),
                     " / ".join(f'<span style="color:{COLOR[lvl]}">{_n(v.get(lvl))}</span>'
                                for lvl in FINDING_VERDICTS), top])
    note = (f'<p class="dim">{len(conns) - CONN_ROWS:,} more connection(s) left out (the first '
            f"{CONN_ROWS} by id are shown; all are in the Parquet tables).</p>"
            if len(conns) > CONN_ROWS else "")
    return _table(["conn", "client", "upstream", "opened (UTC)", "lasted", "closed by", "frames",
                   "requests", "pairs", "errors", "FAIL / NON-STRICT / INFO", "commands"], rows,
                  {0, 6, 7, 8, 9}, "No connections recorded.") + note


def render_html(summary: dict) -> str:
    """The whole page as one HTML document (see the module docstring)."""
    summary = _dict(summary)
    colours = _colours(summary)
    protocol = summary.get("protocol") or "?"
    verdict = summary.get("verdict") or "UNKNOWN"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>queuewire trace analyze: {_e(protocol)} {_e(verdict)}</title><style>{CSS}</style></head>
<body>
{_header(summary)}
<h2>Totals</h2>
{_totals(summary)}
<h2>Per command</h2>
{_commands(summary, colours)}
<p>{_e(PERCENTILE_METHOD)}</p>
<h2>Latency histograms</h2>
<p>Request to reply, per command; each bar counts the pairs whose latency is at most its edge
and above the previous one.</p>
{_histograms(summary, colours)}
<h2>Violations over time</h2>
{_violations_over_time(summary)}
<h2>Commands per connection</h2>
{_commands_per_connection(summary, colours)}
<h2>Violations by requirement</h2>
{_requirements(summary)}
<h2>Sample of violations</h2>
{_sample(summary)}
<h2>Protocol versions</h2>
{_versions(summary)}
<h2>Connections</h2>
{_connections(summary)}
</body></html>
"""


def write_html(summary: dict, path: str | Path) -> None:
    """Write :func:`render_html` of ``summary`` to ``path`` (UTF-8)."""
    Path(path).write_text(render_html(summary), encoding="utf-8")
