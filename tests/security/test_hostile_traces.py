"""Issue 22, item 10 (untrusted files), `queuewire trace analyze`: hostile trace files are
DATA. Each file here is built in the test from spec/trace.yaml's own structs (nothing checked
in), run through the CLI entry point under a time guard and, for lengths that lie, a memory
guard, and must end in a clear one-line error naming the rule (exit 2), never a traceback:
nested JSON in the meta or an open record, t_ns beyond int64, wrong JSON types, an unknown
profile, codes outside the format's tables, non-UTF-8 text, lengths and counts that lie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_guards import FAST_S, MEMORY_BYTES, assert_refused, run_cli

import queuewire.trace.local  # noqa: F401  (up front: the memory guard measures a run, not imports)
from queuewire.codecs.bunqueue import encode_frame
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal
from queuewire.traffic.trace_format import trace_format

FMT = trace_format()
T0 = 1_700_000_000_000_000_000
NEST = 5_000          # deeper than the interpreter's recursion limit, a few KiB of text
OPEN = {"client": "10.0.0.1:40001", "upstream": "10.0.0.2:6789", "listen": ""}


def meta(**over) -> bytes:
    base = {"protocol": "bunqueue", "profile": "bunqueue/v2", "conn_id": 1, "sequence": 0,
            "run": "R", "created_ns": T0, "tool": "queuewire/test"}
    base.update(over)
    return json.dumps(base).encode()


def record(kind: str, payload: bytes = b"", *, direction: str = "none", t: int = T0,
           conn: int = 1, detail: int = 0, type_code: int | None = None,
           dir_code: int | None = None, length: int | None = None) -> bytes:
    values = {"record_type": FMT.record_types[kind] if type_code is None else type_code,
              "direction": FMT.directions[direction] if dir_code is None else dir_code,
              "detail": detail, "conn_id": conn, "t_ns": t,
              "len_payload": len(payload) if length is None else length}
    return FMT.record_head.pack(*(values[f] for f in FMT.record_fields)) + payload


def ping_frame() -> bytes:
    return encode_frame({"cmd": "Ping", "reqId": "1"})


def ping() -> list[bytes]:
    """A Ping and its reply, both valid (the reply: the spec's minimal one)."""
    reply = minimal(dict(load_profile("bunqueue/v2").model.commands["Ping"].response))
    return [record("frame", ping_frame(), direction="c2s", t=T0 + 10),
            record("frame", encode_frame({**reply, "reqId": "1"}), direction="s2c",
                   t=T0 + 20)]


def trace_file(directory: Path, records: list[bytes] | None = None, *,
               meta_bytes: bytes | None = None, len_meta: int | None = None) -> Path:
    m = meta() if meta_bytes is None else meta_bytes
    if records is None:
        records = [record("open", json.dumps(OPEN).encode()), *ping(),
                   record("close", b'{"reason":"eof"}', t=T0 + 30)]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FMT.file_pattern.format(run="R", conn_id=1, sequence=0)
    head = FMT.file_head.pack(FMT.magic, FMT.version, len(m) if len_meta is None else len_meta)
    path.write_bytes(head + m + b"".join(records))
    return path


def analyze(tmp_path: Path, engine: str = "local", *extra: str):
    """``queuewire trace analyze`` of ``tmp_path/rec``, in process, guarded and measured."""
    return run_cli(["trace", "analyze", str(tmp_path / "rec"), "--out", str(tmp_path / "out"),
                    "--engine", engine, "--no-html", *extra], guard=120 if engine == "spark" else 30)


def test_a_well_formed_file_analyses(tmp_path):
    """The baseline the hostile files below differ from: exit 0."""
    trace_file(tmp_path / "rec")
    run = analyze(tmp_path)
    assert run.result.exit_code == 0, run.shown
    assert "1 paired" in run.result.output


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# (id, how to build the hostile recording, words the error must name)
HOSTILE = [
    # item 10: RecursionError on nested JSON in a trace's meta or open record
    ("meta_nested", lambda d: trace_file(d, meta_bytes=meta()[:-1] + b',"x":'
                                         + _nested(NEST) + b"}"), ("meta", "deep")),
    ("open_nested", lambda d: trace_file(d, [record("open", b'{"client":' + _nested(NEST)
                                                    + b"}"), *ping()]), ("open", "deep")),
    # item 10: OverflowError on t_ns >= 2**63
    ("t_ns_past_int64", lambda d: trace_file(d, [record("open", json.dumps(OPEN).encode()),
                                                 record("frame", ping_frame(), t=2**63,
                                                        direction="c2s")]),
     ("t_ns", str(2**63))),
    ("eof_t_ns_past_int64", lambda d: trace_file(d, [record("eof", direction="c2s",
                                                            t=2**64 - 1)]),
     ("t_ns", str(2**64 - 1))),
    # item 10: ArrowTypeError on wrong JSON types, for every field the format defines
    ("open_client_type", lambda d: trace_file(d, [record("open", json.dumps(
        {**OPEN, "client": 5}).encode()), *ping()]), ("client", "open")),
    ("close_reason_type", lambda d: trace_file(d, [*ping(), record(
        "close", b'{"reason": {"why": 1}}')]), ("reason", "close")),
    ("missing_bytes_type", lambda d: trace_file(d, [record(
        "gap", b'{"missing_bytes": "lots"}', direction="c2s",
        detail=FMT.gap_reasons["missing"])]), ("missing_bytes",)),
    ("meta_conn_id_type", lambda d: trace_file(d, meta_bytes=meta(conn_id="one")),
     ("conn_id",)),
    ("meta_protocol_type", lambda d: trace_file(d, meta_bytes=meta(protocol=["bunqueue"])),
     ("protocol",)),
    ("meta_sequence_bool", lambda d: trace_file(d, meta_bytes=meta(sequence=True)),
     ("sequence",)),
    ("meta_conn_id_past_int64", lambda d: trace_file(d, meta_bytes=meta(conn_id=2**64)),
     ("conn_id",)),
    ("meta_sequence_past_int32", lambda d: trace_file(d, meta_bytes=meta(sequence=2**40)),
     ("sequence",)),
    # item 10: SpecError on an unknown profile: name it and the known ones
    ("profile_unknown", lambda d: trace_file(d, meta_bytes=meta(profile="bunqueue/v9")),
     ("bunqueue/v9", "bunqueue/v2")),
    # more of the same kind: non-UTF-8 text, codes outside the format's tables, lengths
    ("meta_not_utf8", lambda d: trace_file(d, meta_bytes=b'{"protocol": "\xff"}'),
     ("UTF-8",)),
    ("open_not_utf8", lambda d: trace_file(d, [record("open", b'{"client": "\xff\xfe"}')]),
     ("UTF-8", "open")),
    ("open_not_an_object", lambda d: trace_file(d, [record("open", b"[1, 2]")]),
     ("open", "object")),
    ("record_type_unknown", lambda d: trace_file(d, [*ping(), record(
        "eof", type_code=99)]), ("record_type", "99")),
    ("direction_unknown", lambda d: trace_file(d, [record("frame", b"\x00\x00\x00\x00",
                                                          dir_code=7)]), ("direction", "7")),
    ("gap_reason_unknown", lambda d: trace_file(d, [record("gap", b"x", direction="c2s",
                                                           detail=99)]), ("detail", "99")),
    ("len_meta_lies", lambda d: trace_file(d, [], meta_bytes=b"{}", len_meta=0xFFFF_FFF0),
     ("meta",)),
    ("meta_huge", lambda d: trace_file(d, meta_bytes=meta()[:-1] + b',"x":"'
                                       + b"a" * (2 << 20) + b'"}'), ("meta", "bytes")),
    ("file_shorter_than_header", lambda d: (d.mkdir(parents=True), (d / FMT.file_pattern.format(
        run="R", conn_id=1, sequence=0)).write_bytes(FMT.magic[:5])), ("header",)),
]


@pytest.mark.parametrize("build,expected", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_hostile_trace_is_a_clear_error_in_bounded_time_and_memory(tmp_path, build, expected):
    """Issue 22 item 10: each hostile trace file is exit 2 with an error naming the rule."""
    build(tmp_path / "rec")
    assert_refused(analyze(tmp_path), *expected)


def test_a_record_length_that_lies_ends_the_file_at_its_last_whole_record(tmp_path):
    """Issue 22 item 10: a len_payload of 4 GiB on a small file allocates nothing and is the
    documented cut-short file (an INFO trace_truncated finding), not a 4 GiB read."""
    trace_file(tmp_path / "rec", [record("open", json.dumps(OPEN).encode()), *ping(),
                                  record("frame", b"\x00" * 8, direction="c2s",
                                         length=0xFFFF_FFFF)])
    run = analyze(tmp_path)
    assert run.result.exit_code == 0, run.shown
    assert "trace_truncated" in run.result.output and "1 paired" in run.result.output
    assert run.seconds < FAST_S and run.peak < MEMORY_BYTES


def test_spark_engine_reports_a_hostile_record_as_the_same_clear_error(tmp_path):
    """Issue 22 item 10, the Spark path's own failure mode: a record the driver never reads
    (t_ns past int64, found by the decoder in an executor) must come back as the decoder's
    TraceError (exit 2, one line), not as a Py4J traceback."""
    pytest.importorskip("pyspark")
    trace_file(tmp_path / "rec", [record("open", json.dumps(OPEN).encode()), *ping(),
                                  record("eof", direction="s2c", t=2**64 - 1)])
    try:
        run = analyze(tmp_path, "spark", "--master", "local[1]")
    finally:
        from pyspark.sql import SparkSession
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    assert_refused(run, "t_ns", str(2**64 - 1), seconds=120)   # a JVM starts
    assert "Py4J" not in run.result.output, run.shown
