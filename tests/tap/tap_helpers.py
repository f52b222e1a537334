"""What the tap tests share: an upstream that records what reaches it, a raw client, and a
tap with its analyzer and recorder in process."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from queuewire.tap.proxy import tap_server
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.record import Recorder


class SinkServer:
    """An upstream that keeps every byte it receives per connection and answers with
    ``reply`` bytes once per chunk (or nothing)."""

    def __init__(self, reply: bytes = b""):
        self.received: list[bytearray] = []
        self.reply = reply
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> SinkServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = bytearray()
        self.received.append(buf)
        try:
            while data := await reader.read(65536):
                buf += data
                if self.reply:
                    writer.write(self.reply)
            writer.close()
        except OSError:
            pass

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await self.server.wait_closed()


@contextlib.asynccontextmanager
async def tapped(protocol: str, upstream_port: int, *, profile: str | None = None,
                 record: Path | None = None, rotate_bytes: int | None = None,
                 forwarder: str = "threads"):
    """A running tap (its forwarder: ``process`` or ``loop``) in front of
    127.0.0.1:``upstream_port``; yields (tap, analyzer); on exit the tap is stopped and the
    recording closed."""
    recorder = None
    if record is not None:
        recorder = Recorder(record, protocol=protocol, profile=profile or "", rotate_bytes=rotate_bytes)
    analyzer = Analyzer(protocol, profile, sink=recorder.write if recorder else None)
    tap = await tap_server(analyzer, "127.0.0.1", upstream_port, forwarder=forwarder).start()
    try:
        yield tap, analyzer
    finally:
        await tap.stop()
        if recorder is not None:
            recorder.close()


async def raw_exchange(port: int, chunks: list[bytes], *, expect: int | None = None,
                       timeout: float = 5.0) -> bytes:
    """Connect, write each chunk (draining between them), half-close, and read until the
    server closes (or ``expect`` bytes arrived, then close); returns what was read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
        await asyncio.sleep(0.01)
    got = bytearray()
    if expect is None:
        writer.write_eof()
        while data := await asyncio.wait_for(reader.read(65536), timeout):
            got += data
    else:
        while len(got) < expect:
            data = await asyncio.wait_for(reader.read(65536), timeout)
            if not data:
                break
            got += data
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return bytes(got)


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)
