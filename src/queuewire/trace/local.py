"""The local engine of ``queuewire trace analyze``: the same decoder, in this process, no Spark.

For a quick look at a small capture (``--engine local``) and as the baseline the Spark
benchmark is measured against. Files are decoded one after another by
:class:`~.decode.FileDecoder`; the rows of each table are kept as Arrow batches, written as
Parquet with pyarrow (one ``part-00000.parquet`` per table directory, the layout Spark
writes), the loose ends matched and settled in Python (:mod:`.loose`), and the aggregates
computed with pandas (:func:`.summary.pandas_aggregates`). Everything is held in memory, so
this engine is for captures that fit in it; Spark is for the rest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..spec import Profile
from . import loose
from .decode import CONN_COLUMNS, CONN_FIELDS, CONN_TYPES, PAIR_COLUMNS, SCHEMA, TABLE_COLUMNS, FileDecoder
from .summary import pandas_aggregates

OUTPUT_TABLES = ("frames", "pairs", "violations", "conns")


def decode_files(files: list[Path], decoder: FileDecoder,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, pa.Table]:
    """Every file's rows, split by table (each table with its :data:`TABLE_COLUMNS`)."""
    parts: dict[str, list[pa.RecordBatch]] = {t: [] for t in TABLE_COLUMNS}
    for i, path in enumerate(files):
        for batch in decoder.decode(Path(path).read_bytes(), str(path)):
            table_col = batch.column(0)
            for name in TABLE_COLUMNS:
                # pyarrow takes a Python scalar here; its stubs want a pa.Scalar
                sub = batch.filter(pc.equal(table_col, name))  # type: ignore[call-overload]
                if sub.num_rows:
                    parts[name].append(sub)
        if progress is not None:
            progress(i + 1, len(files))
    out = {}
    for name, cols in TABLE_COLUMNS.items():
        t = pa.Table.from_batches(parts[name], schema=SCHEMA) if parts[name] else \
            SCHEMA.empty_table()
        out[name] = t.select(list(cols))
    return out


def pairs_of(frames: pa.Table) -> pa.Table:
    """The pairs table: the frames that completed a pair, as pairs (``split`` false)."""
    done = frames.filter(pc.is_valid(frames["sent_ns"]))
    cols = {"run": done["run"], "conn_id": done["conn_id"], "seq": done["seq"],
            "command": done["paired"], "key": done["key"], "sent_ns": done["sent_ns"],
            "answered_ns": done["t_ns"], "ok": done["ok"], "answer": done["answer"],
            "split": pa.array([False] * done.num_rows, pa.bool_())}
    # pa.table takes chunked arrays as a mapping's values; its stubs want an Array or a list
    return pa.table({c: cols[c] for c in PAIR_COLUMNS})  # type: ignore[misc]


def conns_of(conns: pa.Table) -> pa.Table:
    """The conns table: each row's info JSON as columns."""
    rows = []
    for r in conns.to_pylist():
        info = json.loads(r["info"] or "{}")
        rows.append({**{c: r[c] for c in ("run", "conn_id", "seq")},
                     **{f: info.get(f) for f in CONN_FIELDS}})
    schema = pa.schema([SCHEMA.field(c) if c in SCHEMA.names else
                        pa.field(c, CONN_TYPES.get(c, pa.string())) for c in CONN_COLUMNS])
    return pa.Table.from_pylist(rows, schema=schema)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def run(files: list[Path], out: Path, *, protocol: str, profile: Profile,
        force_profile: str | None, progress: Callable[[str], None] | None = None,
        ) -> tuple[dict[str, Any], int]:
    """Decode, settle, write the tables under ``out``; returns (aggregates, unanswered)."""
    say = progress or (lambda _msg: None)
    decoder = FileDecoder(protocol if force_profile else None, force_profile)
    last = [time.monotonic()]

    def tick(i: int, n: int) -> None:   # a line every 2 s, and one at the end
        now = time.monotonic()
        if i == n or now - last[0] >= 2.0:
            last[0] = now
            say(f"decoded {i}/{n} files")
    tables = decode_files(files, decoder, tick)
    tables["pairs"] = pairs_of(tables["frames"])
    tables["conns"] = conns_of(tables["conns"])
    matched, opens_left, orphans_left = loose.match(_rows(tables["opens"]),
                                                    _rows(tables["orphans"]))
    pairs, violations = loose.settle(protocol, profile, matched, opens_left, orphans_left)
    for name, extra in (("pairs", pairs), ("violations", violations)):
        if extra:
            schema = tables[name].schema
            add = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in extra],
                                       schema=schema)
            tables[name] = pa.concat_tables([tables[name], add])
    for name in OUTPUT_TABLES:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(tables[name], d / "part-00000.parquet")
    say("aggregating")
    dtypes: dict[pa.DataType, pd.api.extensions.ExtensionDtype] = {
        pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype()}
    ints = dtypes.get  # nulls stay ints
    aggs = pandas_aggregates(*(tables[t].to_pandas(types_mapper=ints)
                               for t in ("frames", "pairs", "violations", "conns")))
    return aggs, len(opens_left)
