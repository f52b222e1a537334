"""The Spark engine of ``queuewire trace analyze``: the decoder of :mod:`.decode` on PySpark.

Design: ``binaryFile`` reads each trace file as one row (files are the unit of parallelism:
a connection's recording rotates into files of at most 64 MiB), ``mapInArrow`` runs
:class:`~.decode.FileDecoder` on each, in the executors' Python workers, yielding rows of
the one union schema :data:`~.decode.SCHEMA`; the result is persisted once and split by its
``table`` column into the Parquet tables. The loose ends of rotated connections (``opens``
and ``orphans``, a few rows per file) are matched with a join on (run, conn_id, key) and two
window ranks (the small shuffle; the rule of :func:`.loose.match`), and the few matches are
settled on the driver with :func:`.loose.settle`, whose rows join the tables. A file that
breaks the format's rules is a TraceError in the executor that decodes it; an exception
there would reach the driver as a JVM error with a Python traceback inside, so the worker
yields it as one :data:`~.decode.ERROR_TABLE` row instead and the driver, before writing
anything, raises the first such row's message as the same TraceError the local engine
raises. The
aggregates are the groupings of :func:`.summary.pandas_aggregates` in the DataFrame API,
collected small. Every figure is a count of rows (exact when a task is retried), never an
accumulator.

Defaults that work on a fresh machine (:func:`session`): the master is what ``--master``
says (``local[*]`` when absent), passed to the builder, never otherwise fixed; the workers
run this interpreter (``PYSPARK_PYTHON``), the driver binds 127.0.0.1 (``SPARK_LOCAL_IP``)
unless the environment says otherwise, the UI is off and the JVM's logs are quiet (errors
only: ``SPARK_CONF_DIR`` is ``spark_conf/`` here, with its log4j2.properties, unless the
environment names another). Java 17 or later
must be on the PATH or in JAVA_HOME; :func:`check_java` says so clearly when it is not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..spec import Profile
from ..traffic.trace_format import TraceError
from . import loose
from .decode import CONN_FIELDS, CONN_TYPES, ERROR_TABLE, SCHEMA, TABLE_COLUMNS
from .summary import AGGREGATES, PERCENTILES, SAMPLE, bucket_ns

OUTPUT_TABLES = ("frames", "pairs", "violations", "conns")
#: SPARK_CONF_DIR unless the environment names one: it holds the quiet log4j2.properties
CONF_DIR = Path(__file__).with_name("spark_conf")
#: Trace files are not splittable; partitions hold files up to this size, so files of a
#: few MiB are packed and a large one is a partition of its own (parallelism by file).
MAX_PARTITION_BYTES = 16 * 1024 * 1024


class SparkUnavailable(RuntimeError):
    """pyspark or Java is missing; the message says what to install."""


def check_java() -> str:
    """The ``java -version`` line, or :class:`SparkUnavailable` naming what to install."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise SparkUnavailable(
            "Java was not found (no java on the PATH, JAVA_HOME unset): the Spark engine needs "
            "Java 17 or later (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: "
            "brew install openjdk@17), or use --engine local")
    try:
        out = subprocess.run([java, "-version"], check=False, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkUnavailable(f"{java} -version failed: {exc}") from None
    line = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else ""
    return line


def session(master: str | None = None, *, app: str = "queuewire trace analyze",
            conf: dict[str, str] | None = None) -> Any:
    """A SparkSession (an existing one is reused with its master)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("pyspark is not installed: pip install 'queuewire[trace]' "
                               "(or use --engine local)") from None
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_CONF_DIR", str(CONF_DIR))
    builder = (SparkSession.builder.appName(app).master(master or "local[*]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.files.maxPartitionBytes", str(MAX_PARTITION_BYTES))
               .config("spark.sql.files.openCostInBytes", str(1024 * 1024))
               # a trace file is one input row: a handful per Arrow batch bounds memory
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "4")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.sql.session.timeZone", "UTC"))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _decode_partition(protocol: str | None, profile: str | None) -> Callable:
    """The ``mapInArrow`` function: batches of (path) or (path, content) in, :data:`SCHEMA`
    batches out. Given paths alone (local mode: the worker sees the driver's files), the
    worker reads each file itself instead of receiving its bytes through the JVM."""
    def decode(batches: Iterator) -> Iterator:
        from urllib.parse import unquote, urlparse

        from queuewire.trace.decode import FileDecoder, error_batch
        from queuewire.traffic.trace_format import TraceError
        decoder = FileDecoder(protocol, profile)
        for batch in batches:
            paths = batch.column(0).to_pylist()
            contents = batch.column(1) if batch.num_columns > 1 else None
            for i, path in enumerate(paths):
                try:
                    if contents is not None:
                        yield from decoder.decode(contents[i].as_buffer(), path)
                        continue
                    with open(unquote(urlparse(path).path), "rb") as fh:
                        data = fh.read()
                    yield from decoder.decode(data, path)
                except TraceError as exc:   # the driver raises it again (see the docstring)
                    yield error_batch(str(exc))
    return decode


def decode_frame(spark: Any, files: list[Path], protocol: str | None = None,
                 profile: str | None = None) -> Any:
    """The decoded rows of ``files`` (:data:`SCHEMA`), lazily: ``binaryFile`` then
    ``mapInArrow`` with :class:`~.decode.FileDecoder`. In local mode the workers open the
    files themselves (paths only cross the JVM); on a cluster the bytes come from Spark."""
    from pyspark.sql.pandas.types import from_arrow_schema

    raw = spark.read.format("binaryFile").load([str(f.resolve()) for f in files])
    columns = ["path"] if spark.sparkContext.master.startswith("local") else ["path", "content"]
    return raw.select(*columns).mapInArrow(_decode_partition(protocol, profile),
                                           from_arrow_schema(SCHEMA))


def run(files: list[Path], out: Path, *, protocol: str, profile: Profile,
        force_profile: str | None, master: str | None,
        progress: Callable[[str], None] | None = None,
        conf: dict[str, str] | None = None) -> tuple[dict[str, Any], int, str]:
    """Decode, settle and write the tables under ``out`` with Spark; returns (aggregates,
    unanswered, the master used)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    say = progress or (lambda _msg: None)
    spark = session(master, conf=conf)
    used = spark.sparkContext.master
    say(f"Spark {spark.version} up ({used}); decoding")
    decoded = decode_frame(spark, files, protocol if force_profile else None, force_profile)
    decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        refused = decoded.where(F.col("table") == ERROR_TABLE).select("message").limit(1)
        for row in refused.collect():
            raise TraceError(row["message"])
        tables = {t: decoded.where(F.col("table") == t).select(*cols)
                  for t, cols in TABLE_COLUMNS.items()}
        tables["pairs"] = tables["frames"].where(F.col("sent_ns").isNotNull()).select(
            "run", "conn_id", "seq", F.col("paired").alias("command"), "key", "sent_ns",
            F.col("t_ns").alias("answered_ns"), "ok", "answer", F.lit(False).alias("split"))
        info = F.from_json("info", ", ".join(
            f"{c} {'bigint' if c in CONN_TYPES else 'string'}" for c in CONN_FIELDS))
        tables["conns"] = tables["conns"].withColumn("i", info).select(
            "run", "conn_id", "seq", *[F.col(f"i.{c}").alias(c) for c in CONN_FIELDS])
        # the loose ends: the joins are the small shuffle; the matches settle on the driver
        matched, opens_left, orphans_left = _match(tables["opens"], tables["orphans"], F)
        pairs, violations = loose.settle(protocol, profile, matched, opens_left, orphans_left)
        for name, extra in (("pairs", pairs), ("violations", violations)):
            if extra:
                schema = tables[name].schema
                add = spark.createDataFrame([tuple(r.get(c) for c in schema.names)
                                             for r in extra], schema)
                tables[name] = tables[name].unionByName(add)
        for name in OUTPUT_TABLES:
            say(f"writing {name}")
            tables[name].write.mode("overwrite").parquet(str(out / name))
        say("aggregating")
        aggs = _aggregates(tables, F)
    finally:
        decoded.unpersist()
    return aggs, len(opens_left), used


def _match(opens: Any, orphans: Any, F: Any) -> tuple[list, list, list]:
    """:func:`.loose.match` as Spark joins; returns its three lists, collected (small)."""
    from pyspark.sql import Window

    fifo = list(loose.FIFO_CLASSES)

    def keyed(df: Any) -> Any:
        return (df.withColumn("cls", F.regexp_extract("key", r"^([^:]*):", 1))
                .withColumn("rank", F.regexp_extract("key", r"^[^:]*:(\d+)$", 1)))

    o, r = keyed(opens), keyed(orphans)
    # FIFO keys: the n-th waiting request of a (run, conn_id, class) with its n-th answer
    order = Window.partitionBy("run", "conn_id", "cls").orderBy(
        "seq", F.col("rank").cast("long"))
    fo = o.where(F.col("cls").isin(fifo)).withColumn("g", F.row_number().over(order)).alias("o")
    fr = r.where(F.col("cls").isin(fifo)).withColumn("g", F.row_number().over(order)).alias("r")
    same = [F.col(f"o.{c}") == F.col(f"r.{c}") for c in ("run", "conn_id")]
    fifo_m = fo.join(fr, [*same, F.col("o.cls") == F.col("r.cls"), F.col("o.g") == F.col("r.g"),
                          F.col("r.seq") > F.col("o.seq")])
    # identifiers: the nearest files on both sides (two window ranks)
    io = o.where(~F.col("cls").isin(fifo)).alias("o")
    ir = r.where(~F.col("cls").isin(fifo)).alias("r")
    ids = io.join(ir, [*same, F.col("o.key") == F.col("r.key"), F.col("r.seq") > F.col("o.seq")])
    by_orphan = Window.partitionBy("r.run", "r.conn_id", "r.key", "r.seq")
    by_open = Window.partitionBy("o.run", "o.conn_id", "o.key", "o.seq")
    ids = (ids.withColumn("best_o", F.max("o.seq").over(by_orphan))
           .withColumn("best_r", F.min("r.seq").over(by_open))
           .where((F.col("o.seq") == F.col("best_o")) & (F.col("r.seq") == F.col("best_r"))))
    cols_o, cols_r = TABLE_COLUMNS["opens"], TABLE_COLUMNS["orphans"]
    pick = [*(F.col(f"o.{c}").alias(f"o_{c}") for c in cols_o),
            *(F.col(f"r.{c}").alias(f"r_{c}") for c in cols_r)]
    # the matches are read three times (collected, then each side's anti-join): kept once
    both = fifo_m.select(*pick).unionByName(ids.select(*pick)).cache()
    try:
        rows = both.collect()
        matched = [({c: m[f"o_{c}"] for c in cols_o}, {c: m[f"r_{c}"] for c in cols_r})
                   for m in rows]
        keys = ["run", "conn_id", "seq", "key"]
        used_o = both.select(*(F.col(f"o_{k}").alias(k) for k in keys))
        used_r = both.select(*(F.col(f"r_{k}").alias(k) for k in keys))
        opens_left = [x.asDict() for x in opens.join(used_o, keys, "left_anti").collect()]
        orphans_left = [x.asDict() for x in orphans.join(used_r, keys, "left_anti").collect()]
    finally:
        both.unpersist()
    return matched, opens_left, orphans_left


def _pandas(df: Any, name: str) -> Any:
    import pandas as pd
    rows = df.collect()
    return pd.DataFrame([r.asDict() for r in rows], columns=list(AGGREGATES[name]))


def _aggregates(t: dict[str, Any], F: Any) -> dict[str, Any]:
    """The aggregates of :func:`.summary.pandas_aggregates`, computed by Spark."""
    frames, pairs, violations, conns = t["frames"], t["pairs"], t["violations"], t["conns"]
    real = frames.where(F.col("record") == "frame")
    requests = real.where(F.col("kind") == "request")
    out: dict[str, Any] = {}
    out["requests"] = _pandas(requests.groupBy("command").agg(F.count("*").alias("n")),
                              "requests")
    lat = pairs.withColumn("latency", F.col("answered_ns") - F.col("sent_ns"))
    pct = F.percentile("latency", list(PERCENTILES))
    latency = lat.groupBy("command").agg(
        F.count("*").alias("pairs"), F.sum(F.col("split").cast("long")).alias("split"),
        F.sum((~F.col("ok")).cast("long")).alias("errors"), pct.alias("pct"),
        F.max("latency").alias("max"), F.avg("latency").alias("mean"))
    latency = latency.select("command", "pairs", "split", "errors",
                             *[F.col("pct")[i].alias(n) for i, n in enumerate(("p50", "p95", "p99"))],
                             "max", "mean")
    out["latency"] = _pandas(latency, "latency")
    us = F.greatest(F.col("latency") / F.lit(1000.0), F.lit(1.0))
    out["histogram"] = _pandas(
        lat.withColumn("le_us", F.pow(F.lit(2.0), F.ceil(F.log2(us))).cast("long"))
        .groupBy("command", "le_us").agg(F.count("*").alias("n")), "histogram")
    c2s, s2c = F.col("direction") == "c2s", F.col("direction") == "s2c"
    gap = F.col("record") == "gap"
    req = (F.col("record") == "frame") & (F.col("kind") == "request")

    def n(cond: Any) -> Any:
        return F.sum(F.when(cond, 1).otherwise(0))
    out["conn_frames"] = _pandas(frames.groupBy("run", "conn_id").agg(
        n(c2s & ~gap).alias("frames_c2s"), n(s2c & ~gap).alias("frames_s2c"),
        F.sum(F.when(c2s, F.col("size")).otherwise(0)).alias("bytes_c2s"),
        F.sum(F.when(s2c, F.col("size")).otherwise(0)).alias("bytes_s2c"),
        n(gap).alias("gaps"), n(req).alias("requests")), "conn_frames")
    out["conn_pairs"] = _pandas(pairs.groupBy("run", "conn_id").agg(
        F.count("*").alias("pairs"), n(~F.col("ok")).alias("errors")), "conn_pairs")
    out["conn_violations"] = _pandas(violations.groupBy("run", "conn_id", "level").agg(
        F.count("*").alias("n")), "conn_violations")
    out["conn_commands"] = _pandas(requests.groupBy("run", "conn_id", "command").agg(
        F.count("*").alias("n")), "conn_commands")
    # one file of a connection holds its open record, its last the close: first non-null
    out["conns"] = _pandas(conns.groupBy("run", "conn_id").agg(
        F.first("client", ignorenulls=True).alias("client"),
        F.first("upstream", ignorenulls=True).alias("upstream"),
        F.min("opened_ns").alias("opened_ns"), F.max("closed_ns").alias("closed_ns"),
        F.first("close_reason", ignorenulls=True).alias("close_reason"),
        F.count("*").alias("files")), "conns")
    out["requirements"] = _pandas(violations.groupBy("level", "requirement", "kind").agg(
        F.count("*").alias("n")), "requirements")
    out["versions"] = _pandas(real.where(F.col("version").isNotNull()).groupBy("version").agg(
        F.count("*").alias("n")), "versions")
    span = violations.agg(F.min("t_ns").alias("lo"), F.max("t_ns").alias("hi")).collect()[0]
    if span["lo"] is None:
        out["violations_time"] = _pandas(violations.limit(0).select(
            F.lit(0).alias("bucket"), F.lit(0).alias("width"), "level", F.lit(0).alias("n")),
            "violations_time")
    else:
        width = bucket_ns(span["lo"], span["hi"])
        out["violations_time"] = _pandas(violations.withColumn(
            "bucket", F.floor(F.col("t_ns") / F.lit(width)).cast("long") * F.lit(width))
            .groupBy("bucket", "level").agg(F.count("*").alias("n"))
            .withColumn("width", F.lit(width)), "violations_time")
    out["sample"] = _pandas(violations.orderBy("t_ns", "run", "conn_id").limit(SAMPLE).select(
        *AGGREGATES["sample"]), "sample")
    return out
