#!/usr/bin/env python
"""Decode throughput of the queuewire codecs beside a plain baseline on the same bytes.

bunqueue
    A seeded, mixed stream of realistic requests (a producer/worker mix of PUSH, PUSHB, PULL,
    PULLB, ACK, ACKB, FAIL, JobHeartbeat(B), Progress, Ping, GetJob, ...), each encoded by the
    project's ``FrameEncoder``. The framed stream is the frames concatenated; the baseline
    stream is the same MessagePack payloads concatenated without their length prefixes.
    Every decoder is fed its stream in 64 KiB chunks (as socket reads arrive), returns the
    list of objects complete after each chunk, and the list is dropped (as a server would).

    * baseline: ``msgpack.Unpacker().feed(chunk)`` then ``list(unpacker)``
    * framing only: ``FrameDecoder().feed(chunk)``
    * framing + validation: the same, plus ``BunqueueValidator.request_is_valid`` on every
      message (the number of valid messages is counted and checked after the run)
    * fused decode + validation: ``RequestDecoder.feed_checked(chunk)``, the same messages
      each paired with the same verdict, with typed msgspec decoding for the common frame
      (the valid ones are counted and checked the same way)

quicx
    A seeded, mixed stream of inbound quicx frames (SUBMIT with a task type and JSON payload,
    READY, DONE, FAILED, HEARTBEAT, STATS), decoded in 64 KiB chunks by ``QuicxDecoder``
    beside a plain-Python ``struct`` header splitter (header unpack and payload slice, no
    checks) on the same bytes: ``feed`` (a ``Message`` per frame) and ``feed_rows`` (the
    same checks, each frame a plain tuple ``(opcode, *field values)``).

Throughput is frames per second over the best of ``--runs`` runs (interleaved, timed on the
process's CPU time unless ``--clock wall``); ratios are ours over the baseline (higher is
better, 1.0 is parity). Streams are built, checked and frozen out of the garbage collector's
reach before timing (see ``settle``). ``--frames`` shrinks the streams for a quick run,
``--json FILE`` writes the figures machine-readably. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import os
import platform
import random
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
try:
    import queuewire  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

import msgpack
import msgspec
from rich.console import Console
from rich.table import Table

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.codecs.bunqueue_typed import RequestDecoder
from queuewire.codecs.validation import BunqueueValidator

CHUNK = 64 * 1024
TARGET_FRAMING = 0.8      # framing-only decode >= 0.8x msgpack.Unpacker
TARGET_VALIDATION = 0.5   # decode + validation >= 0.5x msgpack.Unpacker
TARGET_FUSED = 0.7        # issue 15: decode with validation >= 0.7x msgpack.Unpacker

console = Console(width=max(Console().width, 120))


# =============================================================================================
# bunqueue stream
# =============================================================================================
QUEUES = ["emails", "webhooks", "thumbnails", "billing:invoices", "reports.daily",
          "sms-outbound", "search_index", "video.transcode"]
TEMPLATES = ["welcome", "reset-password", "invoice", "digest", "verify-email"]
EVENTS = ["order.created", "order.paid", "user.signup", "invoice.finalized", "refund.issued"]
FIRST = ["ana", "bruno", "chen", "dana", "eli", "fatima", "gus", "hana", "ivan", "jo"]
ERRORS = ["ETIMEDOUT: connect timed out after 10000ms",
          "SMTP 451 4.7.1 try again later",
          "HTTP 502 from upstream",
          "Error: image too large (max 20 MB)",
          "TypeError: Cannot read properties of undefined (reading 'id')"]
WORKERS = [f"worker-{h}-{i}" for h in ("ip-10-0-1-17", "ip-10-0-2-42", "ip-10-0-3-9")
           for i in range(4)]


class BunqueueStream:
    """A deterministic producer/worker request mix; ``make(kind)`` builds one request."""

    # kind -> weight (per 100 requests)
    MIX: ClassVar[dict[str, int]] = {
        "PUSH": 24, "PUSHB": 4, "PULL": 12, "PULLB": 5, "ACK": 22, "ACKB": 6, "FAIL": 3,
        "JobHeartbeat": 2, "JobHeartbeatB": 6, "Progress": 4, "Ping": 4, "GetJob": 3,
        "GetJobCounts": 2, "GetState": 1, "Heartbeat": 2,
    }

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.req = 0
        self.now = 1_763_700_000_000  # ms since the epoch, advanced per request

    # -- values ---------------------------------------------------------------------------------
    def uuid7(self) -> str:
        rng = self.rng
        v = ((self.now - rng.randrange(600_000)) << 80 | 0x7 << 76 | rng.getrandbits(12) << 64
             | 0b10 << 62 | rng.getrandbits(62))
        h = f"{v:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def token(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def req_id(self) -> str:
        self.req += 1
        return str(self.req)

    def data(self, queue: str) -> dict:
        rng = self.rng
        n = rng.randrange(1, 100_000)
        name = rng.choice(FIRST)
        if queue == "emails":
            return {"to": f"{name}.{n}@example.com", "template": rng.choice(TEMPLATES),
                    "vars": {"name": name.title(), "plan": rng.choice(["free", "pro", "team"])}}
        if queue == "webhooks":
            return {"url": f"https://hooks.example.com/t/{n:06d}", "event": rng.choice(EVENTS),
                    "body": {"orderId": n, "total": round(rng.uniform(1, 500), 2),
                             "currency": "EUR"}}
        if queue == "thumbnails":
            return {"bucket": "uploads", "key": f"img/2026/11/{n:08x}.jpg",
                    "sizes": [64, 256, 1024]}
        if queue == "billing:invoices":
            return {"customerId": f"cus_{n:010d}", "amountCents": rng.randrange(100, 100_000),
                    "lines": [{"sku": f"SKU-{rng.randrange(1000)}", "qty": rng.randrange(1, 5)}
                              for _ in range(rng.randrange(1, 4))]}
        if queue == "sms-outbound":
            return {"to": f"+3361{n:07d}", "text": f"Your code is {rng.randrange(10**6):06d}"}
        if queue == "video.transcode":
            return {"src": f"s3://media/raw/{n}.mov", "preset": rng.choice(["720p", "1080p"]),
                    "hdr": rng.random() < 0.2}
        return {"id": n, "user": name, "at": self.now}

    def job_options(self, job: dict) -> dict:
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            job["priority"] = rng.choice([1, 5, 10])
        if r < 0.25:
            job["maxAttempts"] = rng.choice([3, 5, 10])
            job["backoff"] = rng.choice([1000, 5000, 30000])
        if rng.random() < 0.3:
            job["removeOnComplete"] = True
        if rng.random() < 0.1:
            job["delay"] = rng.randrange(1000, 3_600_000)
        if rng.random() < 0.1:
            job["timeout"] = 60_000
        if rng.random() < 0.08:
            job["uniqueKey"] = f"dedup:{rng.getrandbits(40):x}"
        if rng.random() < 0.05:
            job["tags"] = ["tenant:" + str(rng.randrange(50)), "source:api"]
        return job

    # -- requests -------------------------------------------------------------------------------
    def make(self, kind: str) -> dict:
        rng = self.rng
        self.now += rng.randrange(3)
        msg: dict[str, Any] = {"cmd": kind, "reqId": self.req_id()}
        if kind == "PUSH":
            queue = rng.choice(QUEUES)
            msg["queue"] = queue
            msg["data"] = self.data(queue)
            self.job_options(msg)
            if rng.random() < 0.05:
                msg["jobId"] = f"order-{rng.randrange(10**7)}"
        elif kind == "PUSHB":
            queue = rng.choice(QUEUES)
            msg["queue"] = queue
            msg["jobs"] = [self.job_options({"data": self.data(queue)})
                           for _ in range(rng.randrange(2, 9))]
        elif kind == "PULL":
            msg.update(queue=rng.choice(QUEUES), timeout=rng.choice([0, 1000, 5000]),
                       owner=rng.choice(WORKERS), lockTtl=30000)
        elif kind == "PULLB":
            msg.update(queue=rng.choice(QUEUES), count=rng.choice([5, 10, 20, 50]),
                       timeout=rng.choice([0, 1000]), owner=rng.choice(WORKERS), lockTtl=30000)
        elif kind == "ACK":
            msg["id"] = self.uuid7()
            msg["token"] = self.token()
            if rng.random() < 0.5:
                msg["result"] = {"ok": True, "ms": rng.randrange(5, 2000)}
        elif kind == "ACKB":
            n = rng.randrange(2, 11)  # ackBatchSize is 10
            msg["ids"] = [self.uuid7() for _ in range(n)]
            msg["tokens"] = [self.token() for _ in range(n)]
            if rng.random() < 0.3:
                msg["results"] = [{"ok": True} for _ in range(n)]
        elif kind == "FAIL":
            msg.update(id=self.uuid7(), error=rng.choice(ERRORS), token=self.token())
        elif kind == "JobHeartbeat":
            msg.update(id=self.uuid7(), token=self.token())
        elif kind == "JobHeartbeatB":
            n = rng.randrange(1, 21)
            msg["ids"] = [self.uuid7() for _ in range(n)]
            msg["tokens"] = [self.token() for _ in range(n)]
        elif kind == "Progress":
            msg.update(id=self.uuid7(), progress=rng.randrange(0, 101))
            if rng.random() < 0.3:
                msg["message"] = f"processed {rng.randrange(10**4)} rows"
        elif kind == "GetJob" or kind == "GetState":
            msg["id"] = self.uuid7()
        elif kind == "GetJobCounts":
            msg["queue"] = rng.choice(QUEUES)
        elif kind == "Heartbeat":
            msg["id"] = rng.choice(WORKERS)
        elif kind != "Ping":
            raise ValueError(kind)
        return msg

    def kinds(self, n: int) -> list[str]:
        names = list(self.MIX)
        return self.rng.choices(names, weights=[self.MIX[k] for k in names], k=n)


def build_bunqueue(n: int, seed: int, validator: BunqueueValidator) -> dict:
    """Encode ``n`` requests; check a sample of every kind is valid before any timing."""
    gen = BunqueueStream(seed)
    encode = FrameEncoder("bunqueue/v2").encode
    kinds = gen.kinds(n)
    frames: list[bytes] = []
    append = frames.append
    checked: Counter[str] = Counter()
    samples: list[tuple[dict, bytes]] = []
    for kind in kinds:
        msg = gen.make(kind)
        frame = encode(msg)
        append(frame)
        if checked[kind] < 50:
            checked[kind] += 1
            if not validator.request_is_valid(msg):
                raise SystemExit(f"generated {kind} request is not valid: {msg!r}\n"
                                 f"{validator.request_violations(msg)}")
            samples.append((msg, frame))
    framed = b"".join(frames)
    baseline = b"".join([f[4:] for f in frames])
    # Both decoders must read the same objects off their streams.
    for msg, frame in samples:
        assert FrameDecoder().feed(frame) == [msg]
        assert RequestDecoder(validator=validator).feed_checked(frame) == [(msg, True)]
        assert msgpack.unpackb(frame[4:]) == msg
    assert len(framed) == len(baseline) + 4 * n
    return {"framed": framed, "baseline": baseline, "payloads": [f[4:] for f in frames],
            "mix": Counter(kinds)}


def chunked(data: bytes, size: int = CHUNK) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


# -- timed bodies: each returns (messages decoded, (wall s, cpu s), extra) ----------------------
def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t0: tuple[float, float]) -> tuple[float, float]:
    return time.perf_counter() - t0[0], time.process_time() - t0[1]


def run_msgpack(chunks: list[bytes]) -> tuple[int, tuple[float, float], int]:
    unpacker = msgpack.Unpacker()
    feed = unpacker.feed
    n = 0
    t0 = _now()
    for chunk in chunks:
        feed(chunk)
        out = list(unpacker)
        n += len(out)
    return n, _since(t0), 0


def run_frames(chunks: list[bytes]) -> tuple[int, tuple[float, float], int]:
    feed = FrameDecoder("bunqueue/v2").feed
    n = 0
    t0 = _now()
    for chunk in chunks:
        out = feed(chunk)
        n += len(out)
    return n, _since(t0), 0


def make_run_validated(validator: BunqueueValidator) -> Callable[[list[bytes]], tuple]:
    is_valid = validator.request_is_valid

    def run_validated(chunks: list[bytes]) -> tuple[int, tuple[float, float], int]:
        feed = FrameDecoder("bunqueue/v2").feed
        n = valid = 0
        t0 = _now()
        for chunk in chunks:
            out = feed(chunk)
            n += len(out)
            valid += sum(map(is_valid, out))
        return n, _since(t0), valid

    return run_validated


def make_run_fused(validator: BunqueueValidator) -> Callable[[list[bytes]], tuple]:
    def run_fused(chunks: list[bytes]) -> tuple[int, tuple[float, float], int]:
        feed = RequestDecoder("bunqueue/v2", validator=validator).feed_checked
        second = operator.itemgetter(1)  # the verdict of each (message, verdict) pair
        n = valid = 0
        t0 = _now()
        for chunk in chunks:
            out = feed(chunk)
            n += len(out)
            valid += sum(map(second, out))
        return n, _since(t0), valid

    return run_fused


def run_msgspec_presplit(groups: list[list[bytes]]) -> tuple[int, tuple[float, float], int]:
    """Reference only: msgspec on payloads already split (no stream, no framing work)."""
    decode = msgspec.msgpack.Decoder().decode
    n = 0
    t0 = _now()
    for group in groups:
        out = list(map(decode, group))
        n += len(out)
    return n, _since(t0), 0


# =============================================================================================
# quicx stream
# =============================================================================================
QX_PROFILE = "quicx/v1"
QX_HEADER = struct.Struct(">BBI")  # version, msg_type, len_payload (004 "Frame header")
QX_VERSION = 1
QX_CODES = {"SUBMIT": 0x01, "READY": 0x04, "DONE": 0x06, "FAILED": 0x07, "HEARTBEAT": 0x09,
            "STATS": 0x0B}  # 004 "Message types"
TASK_TYPES = ["send_email", "resize_image", "charge_card", "webhook", "index_doc", "sms"]
# What a daemon's listening side receives: producers' SUBMIT, workers' READY/DONE/FAILED/
# HEARTBEAT, a monitor's STATS.
QX_MIX = {"SUBMIT": 40, "READY": 12, "DONE": 32, "FAILED": 4, "HEARTBEAT": 8, "STATS": 4}
QX_CHECKED = 5000  # leading frames built by both the project encoder and by hand, compared


def load_quicx() -> Any:
    """The quicx codec module, or None when its API is not there (yet)."""
    try:
        from queuewire.codecs import quicx
    except ImportError:
        return None
    if not hasattr(quicx, "QuicxDecoder") or not hasattr(quicx, "encode"):
        return None
    return quicx


def quicx_specs(n: int, seed: int) -> list[tuple[str, dict]]:
    """``n`` inbound quicx messages as (kind, fields) with the codec's field names."""
    rng = random.Random(seed)
    names = list(QX_MIX)
    kinds = rng.choices(names, weights=[QX_MIX[k] for k in names], k=n)
    gen = BunqueueStream(seed + 1)  # reuse its realistic JSON job payloads
    dumps = msgspec.json.encode
    task = 1
    out: list[tuple[str, dict]] = []
    for kind in kinds:
        if kind == "SUBMIT":
            out.append((kind, {"task_type": rng.choice(TASK_TYPES),
                               "payload": dumps(gen.data(rng.choice(QUEUES)))}))
        elif kind == "DONE":
            task += rng.randrange(1, 4)
            out.append((kind, {"task_id": task}))
        elif kind == "FAILED":
            task += rng.randrange(1, 4)
            out.append((kind, {"task_id": task, "reason": rng.choice(ERRORS)[:64]}))
        else:
            out.append((kind, {}))
    return out


def quicx_frame_plain(kind: str, f: dict) -> bytes:
    """The frame as 004 lays it out, built with struct."""
    if kind == "SUBMIT":
        t = f["task_type"].encode()
        body = bytes([len(t)]) + t + f["payload"]
    elif kind == "DONE":
        body = struct.pack(">I", f["task_id"])
    elif kind == "FAILED":
        body = struct.pack(">I", f["task_id"]) + f["reason"].encode()
    else:
        body = b""
    return QX_HEADER.pack(QX_VERSION, QX_CODES[kind], len(body)) + body


def build_quicx(quicx: Any, n: int, seed: int) -> dict:
    """The quicx stream. The project encoder builds about 50k frames/s, so building 1M frames
    with it would take longer than the benchmark; every frame is built with ``struct`` from
    004's layouts instead, and the first ``QX_CHECKED`` frames (every kind) are also built
    with ``quicx.encode`` and must be byte-identical. The decoder is also checked to read the
    original fields back from them."""
    specs = quicx_specs(n, seed)
    frames = [quicx_frame_plain(kind, f) for kind, f in specs]
    enc = quicx.QuicxEncoder(QX_PROFILE).encode if hasattr(quicx, "QuicxEncoder") else (
        lambda name, **kw: quicx.encode(QX_PROFILE, name, **kw))
    head = specs[:QX_CHECKED]
    for (kind, f), frame in zip(head, frames):
        ours = enc("MSG_" + kind, **f)
        if ours != frame:
            raise SystemExit(f"quicx.encode(MSG_{kind}) gave {ours!r}, 004 says {frame!r}")
    decoded = quicx.QuicxDecoder(QX_PROFILE).feed(b"".join(frames[:QX_CHECKED]))
    assert len(decoded) == len(head)
    if hasattr(quicx.QuicxDecoder, "feed_rows"):  # rows: the same frames, as plain tuples
        rows = quicx.QuicxDecoder(QX_PROFILE).feed_rows(b"".join(frames[:QX_CHECKED]))
        assert rows == [(m.code, *m.fields.values()) for m in decoded]
    for (kind, f), msg in zip(head, decoded):
        assert msg.name == "MSG_" + kind, (msg, kind)
        assert {k: v for k, v in msg.fields.items() if not k.startswith("len_")} == f, (msg, f)
    return {"stream": b"".join(frames), "mix": Counter(kind for kind, _ in specs),
            "checked_kinds": sorted({kind for kind, _ in head})}


def run_struct_split(chunks: list[bytes]) -> tuple[int, tuple[float, float], int]:
    """Baseline: split frames with struct (header unpack + payload slice), no checks."""
    unpack_from = QX_HEADER.unpack_from
    hsize = QX_HEADER.size
    tail = b""
    n = 0
    t0 = _now()
    for chunk in chunks:
        buf = tail + chunk if tail else chunk
        end_buf = len(buf)
        pos = 0
        out = []
        append = out.append
        while end_buf - pos >= hsize:
            _version, kind, length = unpack_from(buf, pos)
            end = pos + hsize + length
            if end > end_buf:
                break
            append((kind, buf[pos + hsize:end]))
            pos = end
        tail = buf[pos:]
        n += len(out)
    return n, _since(t0), 0


def make_run_quicx(quicx: Any, method: str = "feed") -> Callable[[list[bytes]], tuple]:
    """``QuicxDecoder.<method>``: ``feed`` (a ``Message`` per frame: name, field dict, raw
    bytes, offset) or ``feed_rows`` (the same decoder and checks, each frame a plain tuple
    ``(opcode, *field values)``)."""
    def run_quicx(chunks: list[bytes]) -> tuple[int, tuple[float, float], int]:
        feed = getattr(quicx.QuicxDecoder(QX_PROFILE, "daemon"), method)
        n = 0
        t0 = _now()
        for chunk in chunks:
            out = feed(chunk)
            n += len(out)
        return n, _since(t0), 0

    return run_quicx


# =============================================================================================
# harness
# =============================================================================================
def settle() -> None:
    """Move everything alive now (the streams, the 1M-entry lists built to make them, the
    loaded spec) out of the collector's reach, so that a collection during a timed run only
    scans what the decoder under test allocated. Without it every full collection walks the
    harness's own million-object setup, an overhead that is the harness's, not the decoder's,
    and that is added to every variant alike (it pulls all ratios towards 1.0)."""
    gc.collect()
    gc.freeze()


def best_of(runs: int, variants: dict[str, tuple[Callable, Any]], expect: int,
            label: str, clock: str) -> dict[str, dict]:
    """Run every variant ``runs`` times, interleaved; keep each one's best time on ``clock``
    (``cpu``: process CPU time, ``wall``: elapsed time). Both are recorded."""
    best: dict[str, dict] = {}
    every: dict[str, list] = {}
    for r in range(runs):
        for name, (fn, arg) in variants.items():
            gc.collect()
            n, (wall, cpu), extra = fn(arg)
            if n != expect:
                raise SystemExit(f"{label}/{name}: decoded {n} messages, expected {expect}")
            if name in ("validation", "fused") and extra != expect:
                raise SystemExit(f"{label}/{name}: {expect - extra} messages judged invalid")
            dt = cpu if clock == "cpu" else wall
            console.print(f"  {label} run {r + 1}/{runs}  {name:<13} wall {wall:7.3f} s  "
                          f"cpu {cpu:7.3f} s  {n / dt / 1e6:6.3f} M frames/s", highlight=False)
            every.setdefault(name, []).append({"wall_s": wall, "cpu_s": cpu})
            if name not in best or dt < best[name]["seconds"]:
                best[name] = {"seconds": dt, "wall_s": wall, "cpu_s": cpu, "frames": n,
                              "frames_per_s": n / dt}
    for name, b in best.items():
        b["runs"] = every[name]
    return best


def _ratio(r: float) -> str:
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.4f}x (1/{1 / r:.0f})"


def versions() -> dict[str, str]:
    out = {}
    for dist in ("msgspec", "msgpack", "jsonschema-rs", "construct", "rich"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "implementation": platform.python_implementation(), "platform": platform.platform(),
            "versions": versions()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000, help="frames per stream")
    ap.add_argument("--runs", type=int, default=3, help="runs per bunqueue variant (best kept)")
    ap.add_argument("--quicx-runs", type=int, default=None,
                    help="runs per quicx variant (default: min(--runs, 2))")
    ap.add_argument("--seed", type=int, default=20261121, help="stream generator seed")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="time to rank runs by: process CPU time (default; discounts time spent "
                         "descheduled on a shared machine) or wall-clock time")
    ap.add_argument("--skip-quicx", action="store_true", help="bunqueue only")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    qx_runs = args.quicx_runs or min(args.runs, 2)

    t_start = time.perf_counter()
    info = machine()
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": info,
                              "params": {"frames": args.frames, "runs": args.runs,
                                         "quicx_runs": qx_runs, "seed": args.seed,
                                         "clock": args.clock,
                                         "chunk_bytes": CHUNK}}
    rows: list[tuple] = []

    # -- bunqueue --------------------------------------------------------------------------------
    validator = BunqueueValidator("bunqueue/v2")
    t0 = time.perf_counter()
    bq = build_bunqueue(args.frames, args.seed, validator)
    framed_chunks, base_chunks = chunked(bq["framed"]), chunked(bq["baseline"])
    per_chunk = max(1, round(args.frames / len(framed_chunks)))
    payloads = bq["payloads"]
    groups = [payloads[i:i + per_chunk] for i in range(0, len(payloads), per_chunk)]
    console.print(f"bunqueue stream: {args.frames} frames, {len(bq['framed']) / 1e6:.1f} MB framed,"
                f" {len(bq['baseline']) / 1e6:.1f} MB baseline, {len(framed_chunks)} chunks, "
                f"built in {time.perf_counter() - t0:.1f} s")
    settle()
    best = best_of(args.runs, {
        "msgpack": (run_msgpack, base_chunks),
        "framing": (run_frames, framed_chunks),
        "validation": (make_run_validated(validator), framed_chunks),
        "fused": (make_run_fused(validator), framed_chunks),
        "msgspec-split": (run_msgspec_presplit, groups),
    }, args.frames, "bunqueue", args.clock)
    base = best["msgpack"]["frames_per_s"]
    for b in best.values():
        b["ratio"] = b["frames_per_s"] / base
    best["framing"]["target"] = TARGET_FRAMING
    best["validation"]["target"] = TARGET_VALIDATION
    best["fused"]["target"] = TARGET_FUSED
    result["bunqueue"] = {
        "stream": {"frames": args.frames, "framed_bytes": len(bq["framed"]),
                   "baseline_bytes": len(bq["baseline"]),
                   "mean_payload_bytes": len(bq["baseline"]) / args.frames,
                   "mix": dict(sorted(bq["mix"].items(), key=lambda kv: -kv[1]))},
        "results": best,
    }
    nbytes = {"msgpack": len(bq["baseline"]), "framing": len(bq["framed"]),
              "validation": len(bq["framed"]), "fused": len(bq["framed"]),
              "msgspec-split": len(bq["baseline"])}
    labels = {"msgpack": "msgpack.Unpacker (baseline)",
              "framing": "FrameDecoder, framing only",
              "validation": "FrameDecoder + request_is_valid",
              "fused": "RequestDecoder.feed_checked (fused)",
              "msgspec-split": "msgspec, pre-split payloads (ref.)"}
    for name in ("msgpack", "framing", "validation", "fused", "msgspec-split"):
        b = best[name]
        b["mb_per_s"] = nbytes[name] / b["seconds"] / 1e6
        rows.append(("bunqueue", labels[name], b, name == "msgpack"))
    del bq, framed_chunks, base_chunks, payloads, groups
    gc.unfreeze()
    gc.collect()

    # -- quicx -----------------------------------------------------------------------------------
    quicx = None if args.skip_quicx else load_quicx()
    if quicx is None:
        if not args.skip_quicx:
            console.print("[yellow]quicx codec not available[/yellow]")
        result["quicx"] = None
    else:
        t0 = time.perf_counter()
        qx = build_quicx(quicx, args.frames, args.seed)
        stream, mix = qx["stream"], qx["mix"]
        chunks = chunked(stream)
        console.print(f"quicx stream: {args.frames} frames, {len(stream) / 1e6:.1f} MB, "
                      f"{len(chunks)} chunks, built in {time.perf_counter() - t0:.1f} s")
        settle()
        qvariants = {
            "struct": (run_struct_split, chunks),
            "quicx": (make_run_quicx(quicx), chunks),
        }
        if hasattr(quicx.QuicxDecoder, "feed_rows"):
            qvariants["quicx-rows"] = (make_run_quicx(quicx, "feed_rows"), chunks)
        qbest = best_of(qx_runs, qvariants, args.frames, "quicx", args.clock)
        qbase = qbest["struct"]["frames_per_s"]
        for name, label in (("struct", "struct header split (baseline)"),
                            ("quicx", "QuicxDecoder"),
                            ("quicx-rows", "QuicxDecoder.feed_rows (tuples)")):
            if name not in qbest:
                continue
            b = qbest[name]
            b["ratio"] = b["frames_per_s"] / qbase
            b["mb_per_s"] = len(stream) / b["seconds"] / 1e6
            rows.append(("quicx", label, b, name == "struct"))
        result["quicx"] = {"profile": QX_PROFILE,
                           "stream": {"frames": args.frames, "bytes": len(stream),
                                      "mix": dict(sorted(mix.items(), key=lambda kv: -kv[1]))},
                           "results": qbest}

    # -- report ----------------------------------------------------------------------------------
    table = Table(title=f"Decode throughput, {args.frames:,} frames, 64 KiB chunks, "
                        f"best of {args.runs}" + (f"/{qx_runs} (quicx)" if qx_runs != args.runs
                                                  else "") + f", {args.clock} time")
    for col, just in (("stream", "left"), ("decoder", "left"), (f"best {args.clock} s", "right"),
                      ("M frames/s", "right"), ("MB/s", "right"), ("ratio", "right"),
                      ("target", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for stream_name, label, b, is_base in rows:
        target = b.get("target")
        if target is None:
            verdict = "-"
        else:
            ok = b["ratio"] >= target
            verdict = f"[{'green' if ok else 'red'}]>= {target:.1f}x {'met' if ok else 'MISSED'}"
        table.add_row(stream_name, label, f"{b['seconds']:.3f}", f"{b['frames_per_s'] / 1e6:.3f}",
                      f"{b['mb_per_s']:.0f}", "1.00x" if is_base else _ratio(b["ratio"]),
                      verdict)
    console.print(table)
    console.print(f"python {info['python']}, {info['nproc']} cpus ({info['cpu']}), "
                  + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    result["elapsed_s"] = time.perf_counter() - t_start
    console.print(f"total {result['elapsed_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
