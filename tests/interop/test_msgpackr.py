"""Interop with msgpackr, the MessagePack library of the real bunqueue server and client.

A node process runs ``msgpackr_bridge.mjs`` with msgpackr 1.12.1 (the version bunqueue 2.9.5
resolves) and its module-level ``pack`` / ``unpack`` defaults, as bunqueue calls them. These
tests check the claim of the codec's docstring both ways: msgpackr reads every frame our
encoder writes as the same value (no BigInt, no surprises), and our decoder reads what
msgpackr writes. Skipped, with the reason, only where node itself is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgpack
import pytest

from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.validation import jsonable
from queuewire.spec import load_profile
from queuewire.vectors.bunqueue import bunqueue_vectors

HERE = Path(__file__).parent
NODE = shutil.which("node")
PROFILE = load_profile("bunqueue/v2")
SAFE = 2**53 - 1

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed: msgpackr interop "
                                                     "needs node (the Makefile installs msgpackr)")


class Bridge:
    def __init__(self) -> None:
        if not (HERE / "node_modules" / "msgpackr").is_dir():
            pytest.fail("msgpackr is not installed in tests/interop: run `make setup`")
        self.proc = subprocess.Popen([NODE, str(HERE / "msgpackr_bridge.mjs")], cwd=HERE,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, **request: Any) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the msgpackr bridge exited"
        return json.loads(line)

    def decode(self, payload: bytes) -> dict:
        return self.call(op="decode", hex=payload.hex())

    def encode(self, value: Any) -> bytes:
        reply = self.call(op="encode", value=value)
        assert reply["ok"], reply
        return bytes.fromhex(reply["hex"])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def bridge():
    b = Bridge()
    yield b
    b.close()


def ours(payload: bytes) -> Any:
    (value,) = FrameDecoder(PROFILE).feed(len(payload).to_bytes(4, "big") + payload)
    return value


def as_js(value: Any) -> Any:
    """Our decoded value in the bridge's tagged JSON (undefined and binary share the tags)."""
    return jsonable(value)


def message_vectors() -> list[dict]:
    return [v for v in bunqueue_vectors("bunqueue/v2")["vectors"]
            if v["kind"] == "message" and "hex" in v]


def test_msgpackr_reads_every_frame_we_encode(bridge):
    vectors = message_vectors()
    assert len(vectors) > 150  # every command's request and reply, and the limit probes
    for vec in vectors:
        payload = bytes.fromhex(vec["hex"])[4:]
        reply = bridge.decode(payload)
        assert reply["ok"], (vec["id"], reply)
        assert reply["value"] == as_js(ours(payload)), vec["id"]
        # and what msgpackr writes back (map16 everywhere) reads as the same value
        assert ours(bytes.fromhex(reply["repacked"])) == ours(payload), vec["id"]


def test_integers_beyond_32_bits_reach_msgpackr_as_numbers(bridge):
    """BQ-MSGPACK-7: our encoder writes them as float64, as msgpackr itself does; a plain
    MessagePack encoder's uint64 would arrive as a BigInt, which bunqueue's handlers refuse."""
    value = {"cmd": "PUSH", "queue": "q", "data": {"t": 1767225600000}, "delay": 2**35,
             "priority": -(2**31) - 1}
    payload = FrameEncoder(PROFILE).payload(value)
    reply = bridge.decode(payload)
    assert reply["value"] == {"cmd": "PUSH", "queue": "q", "data": {"t": 1767225600000},
                              "delay": 2**35, "priority": -(2**31) - 1}
    assert "$bigint" not in json.dumps(reply["value"])
    plain = bridge.decode(msgpack.packb(value))  # the contrast, with a plain encoder
    assert plain["value"]["delay"] == {"$bigint": str(2**35)}


def test_we_read_what_msgpackr_writes(bridge):
    cases = [
        {},
        {"cmd": "Ping", "reqId": "1"},
        {"ok": True, "id": {"$undefined": True}, "reqId": {"$undefined": True}},
        {"n": [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, SAFE, -1, -32, -33,
               -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -SAFE]},
        {"f": [0.5, -1.25, 1e300, 5e-324, 1767225600000.5]},
        {"s": ["", "a" * 31, "b" * 32, "c" * 255, "d" * 256, "é" * 40000, "😀 bunqueue"]},
        {"a": list(range(16)), "big": list(range(70000)), "nested": [[[[]]], {"x": [None]}]},
        {f"k{i}": i for i in range(20)},
        {"bin": {"$binary": "00ff10"}, "t": True, "f": False, "z": None},
    ]
    for case in cases:
        payload = bridge.encode(case)
        assert payload[:1] in (b"\xde", b"\xdf")  # msgpackr writes every map as map16/32
        assert as_js(ours(payload)) == case


def test_msgpackr_dates_are_timestamps_we_decode(bridge):
    value = ours(bridge.encode({"at": {"$date": 1700000000123}}))
    assert value["at"].timestamp() == pytest.approx(1700000000.123)


def test_msgpackr_undefined_is_our_undefined(bridge):
    value = ours(bridge.encode({"cmd": "PUSH", "priority": {"$undefined": True}}))
    assert value["priority"] is UNDEFINED
    # and ours is msgpackr's
    assert bridge.decode(FrameEncoder(PROFILE).payload({"x": UNDEFINED}))["value"] == \
        {"x": {"$undefined": True}}


@pytest.mark.parametrize("vid", ["bq.stream.trailing-bytes", "bq.stream.array32-claim",
                                 "bq.stream.str32-claim", "bq.stream.map32-claim",
                                 "bq.stream.unknown-ext"])
def test_msgpackr_refuses_what_we_refuse(bridge, vid):
    """The payload errors our decoder reports, msgpackr reports too (so bunqueue answers
    them with an error reply rather than acting on a misread command)."""
    vec = next(v for v in bunqueue_vectors("bunqueue/v2")["vectors"] if v["id"] == vid)
    data = bytes.fromhex(vec["hex"])
    with pytest.raises(ProtocolError):
        dec = FrameDecoder(PROFILE)
        dec.feed(data)
        dec.eof()
    reply = bridge.decode(data[4:])
    assert not reply["ok"], (vid, reply)
