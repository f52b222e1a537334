"""The tap's analyzing process: a transparent TCP proxy whose forwarding runs in a process of
its own (:mod:`.forwarder`), around the sans-IO :class:`Analyzer`.

:class:`TapServer` binds the listening socket (so its port, and an error binding it, are
known at once), then starts ``python -m queuewire.tap.forwarder`` with that socket and one end
of a Unix socket pair, the channel (:mod:`.channel`). The forwarder accepts, connects
upstream, forwards both ways and reports every event as a record after it forwarded it,
holding the records while traffic flows and writing them in batches, with a ``QUIET``
record once nothing moved for a millisecond. This process reads the channel whenever it is
readable and queues the events for :class:`.backlog.Backlog`, which analyses them within
the ``--analysis-lag`` budget, in slices, once the forwarder reported the traffic quiet. So
the forwarding path never waits for the analysis, nor for this process's GIL: the analysis
competes with it for a core only. When the analysis is more than ``max_backlog`` behind,
this process stops reading the channel; the channel fills and the forwarder stops reading
every connection (bounded memory, as before). :meth:`TapServer.stop` half-closes the
channel: the forwarder closes every connection, writes what is left and exits; this process
reads the channel to its end and analyses everything. The forwarder's own errors go to its
stderr; if it dies, the tap logs it and its connections are gone (there is nothing to proxy
with).

:func:`tap_server` chooses the forwarder: ``"threads"`` (this one, the default: two pump
threads per connection), ``"epoll"`` (the same process with one ``epoll`` thread for every
connection: a little slower per read, for taps in front of many connections) or ``"loop"``
(:class:`.inloop.InLoopTapServer`, forwarding on this process's own asyncio loop, as the tap
did before).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..traffic.analyzer import Analyzer
from . import channel as fw
from .backlog import HIGH_WATER, IDLE_S, LAG_BYTES, LOW_WATER, MAX_BACKLOG, SLICE_BYTES, SLICE_NS, Backlog
from .inloop import InLoopTapServer

log = logging.getLogger("queuewire.tap")

#: ``threads`` and ``epoll`` run in the forwarding process (:mod:`.forwarder`, :mod:`.epollfwd`);
#: ``loop`` forwards on this process's own event loop (:mod:`.inloop`).
FORWARDERS = ("threads", "epoll", "loop")
_HSIZE = fw.HEADER.size
_UNPACK = fw.HEADER.unpack_from
_DATA = {fw.DATA_C2S: "c2s", fw.DATA_S2C: "s2c"}
_EOF = {fw.EOF_C2S: "c2s", fw.EOF_S2C: "s2c"}
#: The channel's socket buffers (capped by net.core.[rw]mem_max) and this side's read size.
CHANNEL_BUFFER = 1024 * 1024
READ_SIZE = 1024 * 1024


class TapServer(Backlog):
    """``queuewire tap`` with its forwarding in a child process: listens, has every
    connection proxied to ``upstream``, feeds the analyzer (and, through its sink, the
    recorder). ``high_water``/``low_water`` are kept for compatibility: the forwarder holds
    at most one read (64 KiB) per direction."""

    def __init__(self, analyzer: Analyzer, upstream_host: str, upstream_port: int, *,
                 host: str = "127.0.0.1", port: int = 0, high_water: int = HIGH_WATER,
                 low_water: int = LOW_WATER, connect_timeout: float = 10.0,
                 engine: str = "threads",
                 max_backlog: int = MAX_BACKLOG, slice_ns: int = SLICE_NS,
                 slice_bytes: int = SLICE_BYTES, lag_bytes: int = LAG_BYTES,
                 idle_s: float = IDLE_S):
        super().__init__(analyzer, max_backlog=max_backlog, slice_ns=slice_ns,
                         slice_bytes=slice_bytes, lag_bytes=lag_bytes, idle_s=idle_s)
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.host, self.port = host, port
        self.high_water, self.low_water = high_water, low_water
        self.connect_timeout = connect_timeout
        self.engine = engine
        self.process: subprocess.Popen | None = None
        self._chan: socket.socket | None = None
        self._buf = bytearray(READ_SIZE + fw.CHUNK + _HSIZE)
        self._view = memoryview(self._buf)
        self._have = 0
        self._reading = False
        self._ended: asyncio.Event | None = None
        self._stopping = False
        self._quiet = True

    async def start(self) -> TapServer:
        self.loop = asyncio.get_running_loop()
        family, type_, proto, _, addr = socket.getaddrinfo(
            self.host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        listener = socket.socket(family, type_, proto)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(addr)
            listener.listen(100)
            self.port = listener.getsockname()[1]
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except BaseException:
            listener.close()
            raise
        with contextlib.suppress(OSError):
            theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_BUFFER)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CHANNEL_BUFFER)
        src = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-S", "-m", "queuewire.tap.forwarder", str(listener.fileno()),
                 str(theirs.fileno()), self.upstream_host, str(self.upstream_port),
                 str(self.connect_timeout), str(min(self.lag_bytes, fw.HOLD_BYTES)),
                 self.engine],
                pass_fds=(listener.fileno(), theirs.fileno()),
                env=env, stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            listener.close()
            theirs.close()
        ours.setblocking(False)
        self._chan = ours
        self._ended = asyncio.Event()
        self._read(True)
        return self

    # -- the channel -----------------------------------------------------------------------
    def _read(self, on: bool) -> None:
        if self._chan is None or on == self._reading:
            return
        self._reading = on
        if on:
            self.loop.add_reader(self._chan.fileno(), self._readable)
        else:
            self.loop.remove_reader(self._chan.fileno())

    def _readable(self) -> None:
        buf, view, have = self._buf, self._view, self._have
        try:
            n = self._chan.recv_into(view[have:])  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if n == 0:
            self._end()
            return
        have += n
        off = 0
        enqueue = self.enqueue
        while have - off >= _HSIZE:
            kind, conn_id, t_ns, size = _UNPACK(buf, off)
            start = off + _HSIZE
            if have - start < size:
                break
            off = start + size
            if kind <= fw.DATA_S2C:
                self._quiet = False
                enqueue(("data", conn_id, _DATA[kind], bytes(view[start:off]), t_ns))
            elif kind == fw.QUIET:
                self._quiet = True
                self._wake()
            elif kind == fw.BUSY:
                self._quiet = False
            elif kind in _EOF:
                enqueue(("eof", conn_id, _EOF[kind], None, t_ns))
            elif kind == fw.CLOSE:
                enqueue(("close", conn_id, bytes(view[start:off]).decode(), None, t_ns))
            else:
                fields = bytes(view[start:off]).decode().split("\n", 2)
                if kind == fw.OPEN:
                    enqueue(("open", conn_id, (fields[0], fields[1]), None, t_ns))
                else:
                    log.warning("connection %d: upstream %s refused: %s", conn_id,
                                fields[1], fields[2])
                    enqueue(("refused", conn_id, (fields[0], fields[1]), fields[2], t_ns))
        if off:
            buf[:have - off] = view[off:have]
        self._have = have - off

    def _end(self) -> None:
        self._read(False)
        if self._chan is not None:
            self._chan.close()
            self._chan = None
        if not self._stopping:
            log.error("the tap's forwarder ended (exit status %s)",
                      self.process.poll() if self.process else None)
        if self._ended is not None:
            self._ended.set()

    def _flowing(self) -> bool:
        return not self._quiet

    def _recheck_s(self) -> float:
        # the forwarder says when the traffic goes quiet (_wake); until then, the lag budget
        return max(0.001, (self.lag_ns - (time.time_ns() - self._queue[0][4])) / 1e9)

    def _hold(self, on: bool) -> None:
        if not self._stopping:
            self._read(not on)

    async def stop(self) -> None:
        """Have the forwarder close every connection and exit, read what it reported to
        the end, analyse all of it, close the rest."""
        if self._stopping:
            return
        self._stopping = True
        if self._chan is not None:
            with contextlib.suppress(OSError):
                self._chan.shutdown(socket.SHUT_WR)
            self._read(True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ended.wait(), 10)  # type: ignore[union-attr]
            if self._chan is not None:
                self._end()
        if self.process is not None:
            deadline = time.monotonic() + 5
            while self.process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.analyse_all()

    async def __aenter__(self) -> TapServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


def tap_server(analyzer: Analyzer, upstream_host: str, upstream_port: int, *,
               forwarder: str = "threads", **options: Any) -> TapServer | InLoopTapServer:
    """The tap with the chosen forwarder (one of :data:`FORWARDERS`); options as for
    :class:`TapServer`."""
    if forwarder not in FORWARDERS:
        raise ValueError(f"unknown forwarder {forwarder!r}")
    if forwarder == "loop":
        return InLoopTapServer(analyzer, upstream_host, upstream_port, **options)
    return TapServer(analyzer, upstream_host, upstream_port, engine=forwarder, **options)
