"""Smoke tests of the quicx audit daemon and client (tests/quicx_audit): the correct daemon's
bytes for SUBMIT / READY / TASK / DONE / STATS over a raw socket, every variant and mutant
starts and serves, and the correct client testee passes queuewire's basic quicx client
scenario. The expected bytes are written out from document 004, not read from queuewire."""

from __future__ import annotations

import asyncio
import struct
import sys
from pathlib import Path

import pytest
from audit_support import load

HERE = Path(__file__).resolve().parent


daemon = load("daemon")
client = load("client")


def frame(mtype: int, body: bytes = b"") -> bytes:
    return struct.pack(">BBI", 1, mtype, len(body)) + body


async def read_frame(reader: asyncio.StreamReader, order: str = ">") -> bytes:
    head = await asyncio.wait_for(reader.readexactly(6), 2)
    length = struct.unpack(order + "I", head[2:])[0]
    return head + await asyncio.wait_for(reader.readexactly(length), 2)


async def nothing_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return True
    return False


def stats(depth: int, total: int, idle: int, used: int) -> bytes:
    body = struct.pack(">IIIQQ", depth, total, idle, used, daemon.POOL_BYTES)
    return b"\x01\x0c\x00\x00\x00\x1c" + body


@pytest.mark.asyncio
async def test_correct_daemon_submit_ready_task_done_stats_bytes() -> None:
    async with daemon.AuditDaemon("correct") as d:
        pr, pw = await asyncio.open_connection("127.0.0.1", d.port)
        wr, ww = await asyncio.open_connection("127.0.0.1", d.port)
        pw.write(frame(0x01, b"\x04mail" + b"hello"))                  # SUBMIT
        assert await read_frame(pr) == bytes.fromhex("0102 00000004 00000001")
        pw.write(frame(0x0B))                                           # STATS
        assert await read_frame(pr) == stats(depth=1, total=0, idle=0, used=10)
        ww.write(frame(0x04))                                           # READY
        assert await read_frame(wr) == (bytes.fromhex("0105 0000000e 00000001 04")
                                        + b"mail" + b"hello")
        pw.write(frame(0x0B))
        assert await read_frame(pr) == stats(depth=0, total=1, idle=0, used=10)
        ww.write(frame(0x06, b"\x00\x00\x00\x01"))                      # DONE: no reply
        assert await nothing_within(wr, 0.1)
        ww.write(frame(0x04))                                           # READY again: WAIT
        assert await read_frame(wr) == bytes.fromhex("0108 00000000")
        pw.write(frame(0x0B))
        assert await read_frame(pr) == stats(depth=0, total=1, idle=1, used=0)
        ww.write(frame(0x06, b"\x00\x00\x00\x01"))                      # DONE again: 0x02
        reply = await read_frame(wr)
        assert reply[:7] == bytes.fromhex("0103") + struct.pack(">I", len(reply) - 6) + b"\x02"
        ww.write(frame(0x09))                                           # HEARTBEAT
        assert await read_frame(wr) == bytes.fromhex("010a 00000000")
        for w in (pw, ww):
            w.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("name", [*daemon.VARIANTS, *daemon.MUTANTS])
async def test_every_daemon_variant_and_mutant_serves(name: str) -> None:
    async with daemon.AuditDaemon(name) as d:
        reader, writer = await asyncio.open_connection("127.0.0.1", d.port)
        writer.write(frame(0x01, b"\x01t" + b"p") + frame(0x0B))       # SUBMIT, STATS
        order = "<" if name == "little-endian-lengths" else ">"
        kinds = [(await read_frame(reader, order))[1] for _ in range(2)]
        assert kinds == [0x02, 0x0C]
        writer.close()


def test_the_tables_name_every_switch_once() -> None:
    for module in (daemon, client):
        assert not set(module.VARIANTS) & set(module.MUTANTS)
        assert set(module.VARIANTS) | set(module.MUTANTS) == set(module._SWITCHES)
        assert all(len(v) == 2 and all(v) for v in module.MUTANTS.values())


@pytest.mark.asyncio
async def test_correct_client_passes_the_basic_scenario_against_queuewire() -> None:
    from queuewire.conformance.client.runner import run_client
    from queuewire.conformance.client.scenarios import load_scenarios, select_scenarios
    from queuewire.conformance.client.testee import Testee
    from queuewire.conformance.model import Verdict
    from queuewire.spec import load_profile

    v1 = load_profile("quicx/v1")
    chosen = select_scenarios(load_scenarios("quicx", v1), ["quicx.client.basic"])
    testee = Testee(f"{sys.executable} {HERE / 'client.py'} --variant correct", label="audit")
    run = await run_client(testee, chosen, v1)
    assert [(r.case.id, r.verdict) for r in run.results] == [("quicx.client.basic", Verdict.PASS)]
