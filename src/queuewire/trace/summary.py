"""The summary of an analysis: small aggregate tables in, ``summary.json`` out.

Both engines reduce the big tables (frames, pairs, violations) to the same small aggregates,
:data:`AGGREGATES`, each a pandas DataFrame with fixed columns: the local engine with pandas
(:func:`pandas_aggregates`, here), the Spark engine with the DataFrame API (``spark.py``,
the same groupings). :func:`build_summary` turns them into the summary, so the two engines
cannot disagree on what a figure means. Counts are rows counted, never accumulators (exact
under task retries); latency percentiles are exact, by the tap's one method
(:func:`queuewire.traffic.model.percentile`: linear interpolation between the two nearest
ranks, as numpy's default and Spark's ``percentile``); latency histograms use
power-of-two buckets in microseconds; violations over time use about :data:`TIME_BUCKETS`
buckets of a whole number of seconds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..judge import FINDING_VERDICTS, Verdict
from ..spec import Profile
from ..traffic.model import percentile

FORMAT = "queuewire-trace-summary"
FORMAT_VERSION = 1
TIME_BUCKETS = 60
#: Violations listed in full in the summary (all of them are in violations/ Parquet).
SAMPLE = 200
PERCENTILES = (0.5, 0.95, 0.99)

#: name -> columns of each aggregate table
AGGREGATES: dict[str, tuple[str, ...]] = {
    "requests": ("command", "n"),
    "latency": ("command", "pairs", "split", "errors", "p50", "p95", "p99", "max", "mean"),
    "conn_frames": ("run", "conn_id", "frames_c2s", "frames_s2c", "bytes_c2s", "bytes_s2c",
                    "gaps", "requests"),
    "conn_pairs": ("run", "conn_id", "pairs", "errors"),
    "conn_violations": ("run", "conn_id", "level", "n"),
    "conn_commands": ("run", "conn_id", "command", "n"),
    "conns": ("run", "conn_id", "client", "upstream", "opened_ns", "closed_ns", "close_reason",
              "files"),
    "requirements": ("level", "requirement", "kind", "n"),
    "versions": ("version", "n"),
    "histogram": ("command", "le_us", "n"),
    "violations_time": ("bucket", "width", "level", "n"),
    "sample": ("run", "conn_id", "t_ns", "direction", "level", "requirement", "kind", "command",
               "message"),
}


def bucket_ns(t_min: int | None, t_max: int | None) -> int:
    """The width of a violations-over-time bucket: whole seconds, about TIME_BUCKETS of them."""
    if t_min is None or t_max is None:
        return 1_000_000_000
    span = max(0, t_max - t_min)
    return max(1, math.ceil(span / TIME_BUCKETS / 1e9)) * 1_000_000_000


def le_us(latency_ns: pd.Series) -> pd.Series:
    """The power-of-two microsecond bucket a latency falls in (its upper edge; 1 for <= 1 us):
    2 ** ceil(log2(max(us, 1))), as the Spark engine computes it."""
    us = np.maximum(latency_ns.to_numpy(dtype="float64") / 1000.0, 1.0)
    return pd.Series(np.power(2.0, np.ceil(np.log2(us))).astype("int64"), index=latency_ns.index)


def _count(df: pd.DataFrame, keys: list[str], name: str = "n") -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame(columns=[*keys, name])
    return df.groupby(keys, dropna=False).size().reset_index(name=name)


def pandas_aggregates(frames: pd.DataFrame, pairs: pd.DataFrame, violations: pd.DataFrame,
                      conns: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The aggregates of the local engine (the Spark engine computes the same in Spark)."""
    out: dict[str, pd.DataFrame] = {}
    real = frames[frames["record"] == "frame"]
    requests = real[real["kind"] == "request"]
    out["requests"] = _count(requests, ["command"])
    if pairs.empty:
        out["latency"] = pd.DataFrame(columns=AGGREGATES["latency"])
        out["histogram"] = pd.DataFrame(columns=AGGREGATES["histogram"])
    else:
        lat = pairs.assign(latency=pairs["answered_ns"] - pairs["sent_ns"],
                           err=~pairs["ok"].astype(bool), sp=pairs["split"].astype(bool))
        g = lat.groupby("command")
        # the tap's one percentile method (traffic.model.percentile), over each command sorted
        commands, rows = [], []
        for cmd, s in g["latency"]:
            ordered = np.sort(s.to_numpy())
            commands.append(cmd)
            rows.append([percentile(ordered, p) for p in PERCENTILES])
        q = pd.DataFrame(rows, index=pd.Index(commands, name="command"), columns=["p50", "p95", "p99"])
        out["latency"] = pd.DataFrame({
            "pairs": g.size(), "split": g["sp"].sum(), "errors": g["err"].sum(),
            "p50": q["p50"], "p95": q["p95"], "p99": q["p99"], "max": g["latency"].max(),
            "mean": g["latency"].mean()}).reset_index()
        out["histogram"] = _count(lat.assign(le_us=le_us(lat["latency"])), ["command", "le_us"])
    f = frames.assign(c2s=frames["direction"] == "c2s", s2c=frames["direction"] == "s2c",
                      gap=frames["record"] == "gap",
                      req=(frames["record"] == "frame") & (frames["kind"] == "request"))
    f = f.assign(fc=f["c2s"] & ~f["gap"], fs=f["s2c"] & ~f["gap"],
                 bc=f["size"].where(f["c2s"], 0), bs=f["size"].where(f["s2c"], 0))
    if f.empty:
        out["conn_frames"] = pd.DataFrame(columns=AGGREGATES["conn_frames"])
    else:
        out["conn_frames"] = f.groupby(["run", "conn_id"]).agg(
            frames_c2s=("fc", "sum"), frames_s2c=("fs", "sum"), bytes_c2s=("bc", "sum"),
            bytes_s2c=("bs", "sum"), gaps=("gap", "sum"), requests=("req", "sum")).reset_index()
    if pairs.empty:
        out["conn_pairs"] = pd.DataFrame(columns=AGGREGATES["conn_pairs"])
    else:
        out["conn_pairs"] = pairs.assign(err=~pairs["ok"].astype(bool)).groupby(
            ["run", "conn_id"]).agg(pairs=("err", "size"), errors=("err", "sum")).reset_index()
    out["conn_violations"] = _count(violations, ["run", "conn_id", "level"])
    out["conn_commands"] = _count(requests, ["run", "conn_id", "command"])
    if conns.empty:
        out["conns"] = pd.DataFrame(columns=AGGREGATES["conns"])
    else:
        out["conns"] = conns.groupby(["run", "conn_id"]).agg(
            client=("client", "first"), upstream=("upstream", "first"),
            opened_ns=("opened_ns", "min"), closed_ns=("closed_ns", "max"),
            close_reason=("close_reason", "first"), files=("seq", "size")).reset_index()
    out["requirements"] = _count(violations, ["level", "requirement", "kind"])
    out["versions"] = _count(real[real["version"].notna()], ["version"])
    if violations.empty:
        out["violations_time"] = pd.DataFrame(columns=AGGREGATES["violations_time"])
    else:
        width = bucket_ns(int(violations["t_ns"].min()), int(violations["t_ns"].max()))
        out["violations_time"] = _count(
            violations.assign(bucket=violations["t_ns"] // width * width, width=width),
            ["bucket", "width", "level"])
    out["sample"] = violations.sort_values(["t_ns", "run", "conn_id"], kind="stable").head(
        SAMPLE)[list(AGGREGATES["sample"])] if not violations.empty else pd.DataFrame(
        columns=AGGREGATES["sample"])
    return out


def _int(v: Any) -> int:
    return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


def _opt(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return v.item() if hasattr(v, "item") else v


def _us(ns: Any) -> float | None:
    v = _opt(ns)
    return None if v is None else round(float(v) / 1000.0, 1)


def build_summary(aggs: dict[str, pd.DataFrame], *, profile: Profile, engine: str,
                  master: str | None, inputs: list[str], files: int, unanswered: int,
                  elapsed_s: float) -> dict[str, Any]:
    """The summary (``summary.json``, and what the HTML page draws) from the aggregates."""
    lat = {r["command"]: r for r in aggs["latency"].to_dict("records")}
    reqs = {r["command"]: _int(r["n"]) for r in aggs["requests"].to_dict("records")}
    commands: dict[str, Any] = {}
    for cmd in sorted(set(lat) | set(reqs), key=str):
        row = lat.get(cmd, {})
        pairs, errors = _int(row.get("pairs")), _int(row.get("errors"))
        commands[str(cmd)] = {
            "requests": reqs.get(cmd, 0), "pairs": pairs, "split_pairs": _int(row.get("split")),
            "errors": errors, "error_rate": round(errors / pairs, 6) if pairs else 0.0,
            "latency_us": {"p50": _us(row.get("p50")), "p95": _us(row.get("p95")),
                           "p99": _us(row.get("p99")), "max": _us(row.get("max")),
                           "mean": _us(row.get("mean"))}}
    per: dict[tuple, dict[str, Any]] = {}

    def conn(row: dict) -> dict[str, Any]:
        k = (str(row["run"]), _int(row["conn_id"]))
        c = per.get(k)
        if c is None:
            c = per[k] = {"run": k[0], "conn_id": k[1], "client": None, "upstream": None,
                          "opened_ns": None, "closed_ns": None, "close_reason": None,
                          "files": 0, "frames": {"c2s": 0, "s2c": 0},
                          "bytes": {"c2s": 0, "s2c": 0}, "gaps": 0, "requests": 0, "pairs": 0,
                          "errors": 0, "violations": dict.fromkeys(FINDING_VERDICTS, 0), "commands": {}}
        return c
    for r in aggs["conns"].to_dict("records"):
        c = conn(r)
        for f in ("client", "upstream", "opened_ns", "closed_ns", "close_reason"):
            c[f] = _opt(r[f])
        c["files"] = _int(r["files"])
    for r in aggs["conn_frames"].to_dict("records"):
        c = conn(r)
        c["frames"] = {"c2s": _int(r["frames_c2s"]), "s2c": _int(r["frames_s2c"])}
        c["bytes"] = {"c2s": _int(r["bytes_c2s"]), "s2c": _int(r["bytes_s2c"])}
        c["gaps"], c["requests"] = _int(r["gaps"]), _int(r["requests"])
    for r in aggs["conn_pairs"].to_dict("records"):
        c = conn(r)
        c["pairs"], c["errors"] = _int(r["pairs"]), _int(r["errors"])
    for r in aggs["conn_violations"].to_dict("records"):
        conn(r)["violations"][r["level"]] = _int(r["n"])
    for r in aggs["conn_commands"].to_dict("records"):
        conn(r)["commands"][str(r["command"])] = _int(r["n"])
    connections = [per[k] for k in sorted(per)]
    levels = dict.fromkeys(FINDING_VERDICTS, 0)
    requirements = []
    for r in aggs["requirements"].to_dict("records"):
        rid = _opt(r["requirement"])
        levels[r["level"]] = levels.get(r["level"], 0) + _int(r["n"])
        requirements.append({"level": r["level"], "requirement": rid, "kind": _opt(r["kind"]),
                             "count": _int(r["n"]),
                             "text": profile.requirements[rid].text
                             if rid in profile.requirements else None})
    requirements.sort(key=lambda x: (FINDING_VERDICTS.index(x["level"]), -x["count"],
                                     x["requirement"] or "", x["kind"] or ""))
    histogram: dict[str, list] = {}
    for r in aggs["histogram"].sort_values(["command", "le_us"]).to_dict("records"):
        histogram.setdefault(str(r["command"]), []).append(
            {"le_us": _int(r["le_us"]), "count": _int(r["n"])})
    vt: dict[int, dict[str, int]] = {}
    width = bucket_ns(None, None)
    for r in aggs["violations_time"].to_dict("records"):
        vt.setdefault(_int(r["bucket"]), dict.fromkeys(FINDING_VERDICTS, 0))[r["level"]] = _int(r["n"])
        width = _int(r["width"])
    times = sorted(vt)
    totals = {
        "connections": len(connections),
        "frames": {d: sum(c["frames"][d] for c in connections) for d in ("c2s", "s2c")},
        "bytes": {d: sum(c["bytes"][d] for c in connections) for d in ("c2s", "s2c")},
        "gaps": sum(c["gaps"] for c in connections),
        "requests": sum(c["requests"] for c in connections),
        "pairs": sum(c["pairs"] for c in connections),
        "split_pairs": sum(v["split_pairs"] for v in commands.values()),
        "errors": sum(c["errors"] for c in connections),
        "unanswered": unanswered,
        "violations": levels,
    }
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "engine": engine, "master": master,
        "protocol": profile.protocol, "profile": profile.name, "inputs": inputs, "files": files,
        "elapsed_s": round(elapsed_s, 3), "verdict": "FAIL" if levels[Verdict.FAIL] else "PASS",
        "totals": totals, "commands": commands, "connections": connections,
        "requirements": requirements,
        "versions": [{"version": str(r["version"]), "frames": _int(r["n"])}
                     for r in aggs["versions"].sort_values("version").to_dict("records")],
        "latency_histogram": histogram,
        "violations_over_time": [{"t_ns": t, **vt[t]} for t in times],
        "bucket_ns": width,
        "violations_sample": [{k: _opt(v) for k, v in r.items()}
                              for r in aggs["sample"].to_dict("records")],
    }
