"""The generated Wireshark dissectors, run by the real tshark on captures of known workloads.

Each capture is made here: a reference server (bunqueue, or the quicx daemon in each quicx
profile) behind the tap, which records what crossed; the recording is exported to pcap
(:func:`queuewire.trace.pcap.export_pcap`) with 7-byte TCP segments, so every frame spans
several segments and the dissector must reassemble it. tshark (``make test`` installs it; the
test fails, never skips, without it) reads the capture with the generated dissector, and what
it shows is checked against the workload: the commands and their counts, every reqId, the
request/reply links, the task ids and their links, and a broken frame's expert info with the
requirement it cites. A personal Wireshark folder is never read (XDG_CONFIG_HOME is a temporary
directory), so an installed plugin cannot interfere.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tap"))

from tap_helpers import raw_exchange, tapped, until  # noqa: E402

from queuewire.client import Queue  # noqa: E402
from queuewire.client.quicx import QuicxProducer, QuicxWorker  # noqa: E402
from queuewire.codecs.bunqueue import FrameDecoder, encode_frame  # noqa: E402
from queuewire.codecs.errors import ProtocolError  # noqa: E402
from queuewire.codecs.quicx import QuicxEncoder  # noqa: E402
from queuewire.dissector import generate  # noqa: E402
from queuewire.reference_server.bunqueue import BunqueueServer  # noqa: E402
from queuewire.reference_server.quicx import QuicxServer  # noqa: E402
from queuewire.spec import load_profile  # noqa: E402
from queuewire.trace.pcap import export_pcap, write_pcap  # noqa: E402
from queuewire.traffic import trace_format  # noqa: E402

MSS = 7


def tshark(tmp: Path, lua: Path, pcap: Path, *fields: str, where: str | None = None) -> list[list[str]]:
    """tshark's two-pass reading of ``pcap`` with the dissector ``lua``: one row per packet
    that ``where`` selects, one cell per field (every occurrence, joined by ",")."""
    exe = shutil.which("tshark")
    if exe is None:
        pytest.fail("tshark is not installed: `make test` installs it (apt-get install tshark)")
    cmd = [exe, "-n", "-2", "-X", f"lua_script:{lua}", "-r", str(pcap), "-T", "fields",
           "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in fields:
        cmd += ["-e", f]
    if where:
        cmd += ["-Y", where]
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg"), "HOME": str(tmp)}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert "Lua Error" not in run.stdout + run.stderr, run.stdout + run.stderr
    return [line.split("|") for line in run.stdout.splitlines() if line.strip()]


def pdus(tmp: Path, lua: Path, pcap: Path, proto: str) -> list[dict]:
    """Every PDU of ``proto`` in the capture, each its fields by filter name (several PDUs of
    one packet each their own)."""
    exe = shutil.which("tshark")
    if exe is None:
        pytest.fail("tshark is not installed: `make test` installs it (apt-get install tshark)")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg"), "HOME": str(tmp)}
    run = subprocess.run([exe, "-n", "-2", "-X", f"lua_script:{lua}", "-r", str(pcap), "-Y", proto,
                          "-T", "json", "-J", proto, "--no-duplicate-keys"],
                         capture_output=True, text=True, timeout=120, env=env, check=False)
    assert run.returncode == 0 and "Lua Error" not in run.stdout + run.stderr, run.stderr
    out: list[dict] = []
    for packet in json.loads(run.stdout):
        layer = packet["_source"]["layers"][proto]
        out += layer if isinstance(layer, list) else [layer]
    return out


def cells(rows: list[list[str]], i: int) -> list[str]:
    return [v for row in rows for v in row[i].split(",") if v]


def write_lua(tmp: Path, profile: str) -> Path:
    path = tmp / f"{profile.replace('/', '_')}.lua"
    path.write_text(generate(load_profile(profile)))
    return path


def decoded(profile: str, data: bytes) -> list:
    """Every frame queuewire's decoder reads in ``data``, past the ones it refuses."""
    decoder, out, chunk = FrameDecoder(profile), [], data
    while True:
        try:
            return out + decoder.feed(chunk)
        except ProtocolError as err:
            out += err.frames
            if err.reaction == "close":
                return out
            chunk = b""


# -- bunqueue ---------------------------------------------------------------------------------
@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["bunqueue/v2", "bunqueue/2.9.5"])
async def test_bunqueue_workload_is_dissected_frame_by_frame(profile: str, tmp_path: Path) -> None:
    record = tmp_path / "rec"
    server = await BunqueueServer(profile, port=0).start()
    try:
        async with asyncio.timeout(30):
            async with tapped("bunqueue", server.port, profile=profile, record=record) as (tap, _):
                async with Queue("dissect", connection={"port": tap.port}, profile=profile) as q:
                    for i in range(5):
                        await q.add("one", {"i": i})
                    await q.add_bulk([{"name": "bulk", "data": {"i": i}} for i in range(3)])
                    assert await q.count() == 8
                    assert await q.get_job("qw-no-such-job") is None
                # a broken frame: its length covers one byte after the MessagePack object
                body = encode_frame({"cmd": "Ping", "reqId": "broken"}, profile)[4:] + b"\xc0"
                await raw_exchange(tap.port, [struct.pack(">I", len(body)) + body])
    finally:
        await server.stop()
    port = load_profile(profile).model.default_port   # where the dissector registers
    pcap = export_pcap(record, tmp_path / "capture.pcap", port=port, mss=MSS)
    # what crossed, by queuewire's own decoder: the requests and their reqIds
    sent = [m for (conn, direction), data in sorted(trace_format.streams(record).items())
            if direction == "c2s" for m in decoded(profile, data) if isinstance(m, dict)]
    commands = collections.Counter(m["cmd"] for m in sent)
    assert commands["PUSH"] == 5 and commands["PUSHB"] == 1 and commands["Count"] == 1
    lua = write_lua(tmp_path, profile)
    rows = tshark(tmp_path, lua, pcap, "bunqueue.cmd", "bunqueue.reqid", "bunqueue.response_in",
                  where=f"bunqueue && tcp.dstport == {port}")
    # the dissector also shows the broken Ping, which queuewire's decoder refuses whole
    assert collections.Counter(cells(rows, 0)) == commands + collections.Counter(["Ping"])
    assert sorted(cells(rows, 1)) == sorted([str(m["reqId"]) for m in sent] + ["broken"])
    replies = tshark(tmp_path, lua, pcap, "bunqueue.reply_to", "bunqueue.request_in",
                     "bunqueue.ok", where=f"bunqueue && tcp.srcport == {port}")
    # every request the server read was answered, and each answer names its command (the
    # broken frame's error reply carries no reqId: the server could not read it)
    assert collections.Counter(cells(replies, 0)) == commands
    assert len(cells(replies, 1)) == len(cells(rows, 2)) == sum(commands.values())
    pushes = tshark(tmp_path, lua, pcap, "frame.number", where='bunqueue.cmd == "PUSH"')
    assert len(pushes) == 5
    expert = tshark(tmp_path, lua, pcap, "_ws.expert.message", where="bunqueue.trailing_bytes")
    requirement = load_profile(profile).model.protocol_errors["trailing_bytes"].requirement
    assert len(expert) == 1 and f"1 byte(s) after the MessagePack object ({requirement})" in expert[0][0]


# -- quicx ------------------------------------------------------------------------------------
@pytest.mark.asyncio
@pytest.mark.parametrize("profile", ["quicx/v1", "quicx/1.0.3"])
async def test_quicx_tasks_are_dissected_and_linked(profile: str, tmp_path: Path) -> None:
    record = tmp_path / "rec"
    spec = load_profile(profile).model
    async with asyncio.timeout(30):
        async with QuicxServer(profile, port=0) as server:
            async with tapped("quicx", server.port, profile=profile, record=record) as (tap, _):
                async def work(task):
                    return None

                async with QuicxWorker(port=tap.port, profile=profile, concurrency=1,
                                       heartbeat_interval=0, handlers={"work": work}):
                    async with QuicxProducer(port=tap.port, profile=profile) as producer:
                        for i in range(4):
                            await producer.submit("work", b"x" * i)
                    await until(lambda: server.stats().done == 4, 10)
                bad = bytearray(QuicxEncoder(profile).encode("MSG_READY"))
                bad[0] = 9   # a header version no profile accepts
                await raw_exchange(tap.port, [bytes(bad)], expect=1)
    pcap = export_pcap(record, tmp_path / "capture.pcap", port=spec.default_port, mss=MSS)
    lua = write_lua(tmp_path, profile)
    codes = {name: str(m.code) for name, m in spec.messages.items()}
    every = pdus(tmp_path, lua, pcap, "quicx")
    by_type = collections.Counter(p["quicx.type"] for p in every)
    assert by_type[codes["MSG_SUBMIT"]] == 4 and by_type[codes["MSG_OK"]] == 4
    assert by_type[codes["MSG_TASK"]] == 4

    def of(name: str) -> list[dict]:
        return [p for p in every if p["quicx.type"] == codes[name]]
    ok_ids = sorted(p["quicx.task_id"] for p in of("MSG_OK"))
    assert sorted(p["quicx.task_id"] for p in of("MSG_TASK")) == ok_ids and len(set(ok_ids)) == 4
    # every DONE carries an accepted id (1.0.3 forwards each DONE to the producer as well)
    assert {p["quicx.task_id"] for p in of("MSG_DONE")} == set(ok_ids)
    # the links: each SUBMIT was accepted in an OK frame; each TASK points at its OK and at
    # its result; each DONE the worker sent points at its TASK
    assert all("quicx.ok_in" in p for p in of("MSG_SUBMIT"))
    assert all("quicx.submit_in" in p for p in of("MSG_OK"))
    assert all("quicx.ok_in" in p and "quicx.result_in" in p for p in of("MSG_TASK"))
    assert sum("quicx.task_in" in p for p in of("MSG_DONE")) == 4
    expert = tshark(tmp_path, lua, pcap, "_ws.expert.message", where="quicx.bad_version")
    requirement = spec.protocol_errors["bad_version"].requirement
    assert len(expert) == 1 and f"Version 9 is not one the profile accepts ({requirement})" in expert[0][0]


@pytest.mark.parametrize("profile, kind, field", [
    ("bunqueue/v2", "frame_too_large", "bunqueue.frame_too_large"),
    ("quicx/1.0.3", "payload_too_large", "quicx.payload_too_large"),
])
def test_a_declared_length_over_the_bound_is_flagged_and_stops_the_reassembly(
        tmp_path: Path, profile: str, kind: str, field: str):
    """A header that declares more than the profile allows is flagged with the kind's
    requirement at once: tshark does not wait for the bytes it declared."""
    prof = load_profile(profile)
    spec = prof.model
    if prof.protocol == "bunqueue":
        bound = spec.max_frame_bytes
        head = struct.pack(spec.len_format, bound + 1)
    else:
        bound = spec.max_payload_bytes
        head = QuicxEncoder(profile).frame(spec.messages["MSG_SUBMIT"].code, length=bound + 1)
    pcap = write_pcap(tmp_path / "big.pcap", [[("c2s", head + b"x" * 20, 1_000_000)]],
                      port=spec.default_port, mss=MSS)
    lua = write_lua(tmp_path, profile)
    rows = tshark(tmp_path, lua, pcap, "frame.number", "_ws.expert.message", "_ws.col.Info",
                  where=field)
    requirement = spec.protocol_errors[kind].requirement
    number, message, info = rows[0]
    assert number == "4"        # the first data segment, after the three-way handshake
    assert f"length {bound + 1} is over max_" in message and f"({requirement})" in message
    assert kind.replace("_", " ") in info
