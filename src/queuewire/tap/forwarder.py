"""The tap's forwarder: a process of its own that only moves bytes, and reports them.

Run by :class:`queuewire.tap.proxy.TapServer` as ``python -m queuewire.tap.forwarder`` with
two inherited sockets: the listening socket and one end of the *channel* (:mod:`.channel`)
to the analyzing process. It imports the standard library only and holds no analysis, so
the analysis never holds this process's GIL, and a burst is forwarded while the analyzer
sleeps or works in the other process.

Threads and blocking sockets (the GIL is released in every system call): an acceptor thread
accepts and starts, per client, a thread that connects upstream (the connect timeout; a
refusal closes the client and is reported, no ``open``) and then pumps client to upstream,
and a second thread that pumps upstream to client. A pump is ``recv_into`` into its own
buffer, ``sendall`` of those bytes, unchanged, to the other socket, and only then the record:
stamped (``time.time_ns()``, at forward time) and appended under a lock, so records, and
their times, are in forwarding order. A pump whose peer does not take its bytes blocks in
``sendall`` and reads no more (backpressure: one buffer, ``CHUNK``, per direction). An EOF
is recorded and passed on (``shutdown(SHUT_WR)``); the connection ends when both directions
have (``eof``), or when either socket fails (``reset``: both are shut down, which wakes the
other pump). The *writer* thread sleeps until the first record after a quiet moment, then
looks every ``QUIET_S``: it writes what is held once ``hold_bytes`` wait or the oldest
waited ``HOLD_NS``, and, when nothing was forwarded for ``QUIET_S``, everything with a
``QUIET`` record. Past ``CHANNEL_LIMIT`` bytes not yet written, the pumps wait before their
next read (bounded memory). The analyzer half-closes the channel to stop: connections are
shut down (``closed``, or ``eof`` if both halves were), the rest is written, the process
exits; so it does if the analyzer goes away. SIGINT and SIGTERM are ignored (a Ctrl-C on the
terminal, or a SIGTERM to the process group, reaches the analyzer, which stops this process
in order). ``queuewire tap --forwarder epoll``
runs the single-threaded ``epoll`` engine of :mod:`.epollfwd` instead.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time

from .channel import (
    BUSY,
    CHANNEL_LIMIT,
    CHUNK,
    CLOSE,
    DATA_C2S,
    DATA_S2C,
    HEADER,
    HOLD_BYTES,
    HOLD_NS,
    OPEN,
    QUIET,
    QUIET_S,
    REFUSED,
)

_PACK = HEADER.pack
#: While traffic flows the writer looks at most this far apart (quiet is seen this late).
QUIET_MAX_S = 0.01
_HSIZE = HEADER.size


class _Link:
    __slots__ = ("conn_id", "client", "upstream", "lock", "alive", "eofs", "reason",
                 "client_addr", "upstream_addr")

    def __init__(self, conn_id: int, client: socket.socket, client_addr: str, upstream: str):
        self.conn_id, self.client = conn_id, client
        self.upstream: socket.socket | None = None
        self.lock = threading.Lock()
        self.alive = 2      # pumps still running
        self.eofs = 0       # directions that ended with an EOF
        self.reason: str | None = None
        self.client_addr, self.upstream_addr = client_addr, upstream


class Forwarder:
    def __init__(self, listener: socket.socket, channel: socket.socket, upstream_host: str,
                 upstream_port: int, connect_timeout: float, hold_bytes: int = HOLD_BYTES,
                 quiet_s: float = QUIET_S, hold_ns: int = HOLD_NS):
        self.listener, self.channel = listener, channel
        self.upstream = (upstream_host, upstream_port)
        self.upstream_name = f"{upstream_host}:{upstream_port}"
        self.connect_timeout = connect_timeout
        self.hold_bytes, self.quiet_s, self.hold_ns = hold_bytes, quiet_s, hold_ns
        self.lock = threading.Lock()              # the records, their order and times
        self.room = threading.Condition(self.lock)  # pumps wait here while too much waits
        self.records: list[list] = []             # [header, payload] not yet written
        self.size = 0                             # ... their bytes, and those being written
        self.held_since = 0                       # when the oldest record was held
        self.last_ns = 0                          # when the last one was
        self.writer_idle = True
        self.wake = threading.Event()
        self.write_lock = threading.Lock()        # one writer to the channel at a time
        self.links: dict[int, _Link] = {}
        self.next_id = 0
        self.stopping = False
        self._addrs: list | None = None
        listener.setblocking(True)
        channel.setblocking(True)

    # -- records ---------------------------------------------------------------------------
    def record(self, kind: int, conn_id: int, payload: bytes = b"") -> None:
        with self.lock:
            self._append(_PACK(kind, conn_id, time.time_ns(), len(payload)), payload)

    def _append(self, header: bytes, payload: bytes | None) -> list:
        """Under the lock: a record's slot, in order; payload ``None``: being forwarded."""
        records = self.records
        self.last_ns = now = time.monotonic_ns()
        if not records:
            self.held_since = now
        slot = [header, payload]
        records.append(slot)
        if payload is not None:
            self.size += _HSIZE + len(payload)
            if self.writer_idle:
                self.writer_idle = False
                self.wake.set()
        return slot

    def _take(self) -> bytes:
        """Under the lock: the records whose bytes were forwarded, up to the first that
        is still being forwarded (a record never reaches the analyzer before its bytes
        reached their peer)."""
        records = self.records
        n = len(records)
        for i, slot in enumerate(records):
            if slot[1] is None:
                n = i
                break
        parts = []
        for header, payload in records[:n]:
            parts.append(header)
            parts.append(payload)
        del records[:n]
        self.held_since = time.monotonic_ns() if records else 0
        return b"".join(parts)

    def writer(self) -> None:
        """Write the held records: on size or age while traffic flows, all of them (and a
        QUIET record) once nothing was forwarded for ``quiet_s``; sleep while nothing
        happens. While traffic flows it looks less and less often (up to ``QUIET_MAX_S``),
        so that it does not compete with the pumps for the GIL and a core."""
        lock, records = self.lock, self.records
        quiet_ns = int(self.quiet_s * 1e9)
        while True:
            self.wake.wait()
            self.wake.clear()
            sleep = self.quiet_s
            busy = False
            while True:
                time.sleep(sleep)
                data = None
                with self.write_lock:
                    with lock:
                        now = time.monotonic_ns()
                        quiet = now - self.last_ns >= quiet_ns and not (
                            records and records[-1][1] is None)
                        if quiet:
                            records.append([_PACK(QUIET, 0, 0, 0), b""])
                            self.size += _HSIZE
                            self.writer_idle = True
                        elif not busy:  # tell the analyzer at once: it holds its analysis
                            busy = True
                            records.append([_PACK(BUSY, 0, 0, 0), b""])
                            self.size += _HSIZE
                            self.held_since = 0
                        if quiet or self.size >= self.hold_bytes or \
                                now - self.held_since >= self.hold_ns:
                            data = self._take()
                    if data and not self._write(data):
                        return
                if quiet:
                    break
                if self.hold_bytes:  # (with hold_bytes 0 every look writes: no backing off)
                    sleep = min(sleep * 2, QUIET_MAX_S)

    def _write(self, data: bytes) -> bool:
        """Under ``write_lock``: records leave in the order they were taken."""
        try:
            self.channel.sendall(data)
        except OSError:
            return False
        finally:
            with self.lock:
                self.size -= len(data)
                self.room.notify_all()
        return True

    # -- connections -----------------------------------------------------------------------
    @staticmethod
    def _start(target, *args) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                sock, peer = self.listener.accept()
            except OSError:
                if self.stopping:
                    return
                time.sleep(0.01)  # e.g. EMFILE: leave it in the backlog for now
                continue
            self.next_id += 1
            link = _Link(self.next_id, sock, f"{peer[0]}:{peer[1]}", self.upstream_name)
            self._start(self.connect, link)

    def _connect(self) -> socket.socket:
        """The upstream, resolved once (again after a failure), each address in turn."""
        error: OSError | None = None
        addrs = self._addrs or socket.getaddrinfo(*self.upstream, type=socket.SOCK_STREAM)
        for family, type_, proto, _, addr in addrs:
            sock = socket.socket(family, type_, proto)
            try:
                sock.settimeout(self.connect_timeout)
                sock.connect(addr)
                sock.settimeout(None)
                self._addrs = addrs
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        self._addrs = None
        raise error or OSError("no address")

    def connect(self, link: _Link) -> None:
        """Connect upstream, then pump client to upstream in this thread."""
        client = link.client
        try:
            upstream = self._connect()
        except OSError as exc:
            error = "timed out" if isinstance(exc, TimeoutError) else \
                (exc.strerror or str(exc) or type(exc).__name__)
            self.record(REFUSED, link.conn_id,
                        f"{link.client_addr}\n{link.upstream_addr}\n{error}".encode())
            client.close()
            return
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link.upstream = upstream
        with self.lock:
            if self.stopping:
                upstream.close()
                client.close()
                return
            self.links[link.conn_id] = link
            payload = f"{link.client_addr}\n{link.upstream_addr}".encode()
            self._append(_PACK(OPEN, link.conn_id, time.time_ns(), len(payload)), payload)
        self._start(self.pump, link, upstream, client, DATA_S2C)
        self.pump(link, client, upstream, DATA_C2S)

    # -- the bytes -------------------------------------------------------------------------
    def pump(self, link: _Link, src: socket.socket, dst: socket.socket, code: int) -> None:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        recv_into, sendall, conn_id = src.recv_into, dst.sendall, link.conn_id
        lock, room, append = self.lock, self.room, self._append
        error = False
        try:
            while True:
                try:
                    n = recv_into(buf)
                except OSError:
                    error = True
                    break
                if not n:
                    break
                # the slot is taken (and stamped) just before the bytes go, so that a
                # reply to them is always recorded after them, and later
                with lock:
                    slot = append(_PACK(code, conn_id, time.time_ns(), n), None)
                chunk = view[:n]
                try:
                    sendall(chunk)
                except OSError:
                    error = True
                data = bytes(chunk)
                with lock:
                    slot[1] = data
                    self.last_ns = time.monotonic_ns()
                    self.size += _HSIZE + n
                    if self.writer_idle:
                        self.writer_idle = False
                        self.wake.set()
                    while self.size > CHANNEL_LIMIT and not self.stopping:
                        room.wait()  # the analyzer is too far behind: read no more
                if error:
                    break
            with link.lock:
                if link.reason is None and not error:
                    link.eofs += 1
                    eof = True
                else:
                    eof = False
                if error and link.reason is None:
                    link.reason = "reset"
            if eof:
                self.record(code + 2, conn_id)  # EOF_C2S / EOF_S2C
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
            else:  # a reset: wake the other pump
                for sock in (src, dst):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
        finally:
            self._exit(link)

    def _exit(self, link: _Link) -> None:
        with link.lock:
            link.alive -= 1
            last = link.alive == 0
        if last:
            reason = link.reason or ("eof" if link.eofs == 2 else "closed")
            link.client.close()
            if link.upstream is not None:
                link.upstream.close()
            with self.lock:
                self.links.pop(link.conn_id, None)
            self.record(CLOSE, link.conn_id, reason.encode())

    # -- the process -----------------------------------------------------------------------
    def run(self) -> None:
        writer = threading.Thread(target=self.writer, daemon=True)
        writer.start()
        self._start(self.accept)
        while True:  # the analyzer half-closes the channel to stop us (or it went away)
            try:
                if not self.channel.recv(4096):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        self.shutdown()

    def shutdown(self) -> None:
        with self.lock:
            self.stopping = True
            self.room.notify_all()
            links = list(self.links.values())
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for link in links:
            with link.lock:
                if link.reason is None and link.eofs < 2:
                    link.reason = "closed"
            for sock in (link.client, link.upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self.lock:
                if not self.links:
                    break
            time.sleep(0.001)
        with self.write_lock:
            with self.lock:
                # a pump still in its send (stuck: its peer is gone): not recorded
                self.records[:] = [slot for slot in self.records if slot[1] is not None]
                data = self._take()
            self._write(data)
            self.channel.close()


def main(argv: list[str]) -> int:
    listen_fd, chan_fd, host, port, timeout, hold_bytes, engine = argv
    for sig in (signal.SIGINT, signal.SIGTERM):  # the analyzer stops us, in order
        signal.signal(sig, signal.SIG_IGN)
    listener = socket.socket(fileno=int(listen_fd))
    channel = socket.socket(fileno=int(chan_fd))
    if engine == "epoll":
        from .epollfwd import Forwarder as EpollForwarder

        EpollForwarder(listener, channel, host, int(port), float(timeout), int(hold_bytes)).run()
    else:
        Forwarder(listener, channel, host, int(port), float(timeout), int(hold_bytes)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
