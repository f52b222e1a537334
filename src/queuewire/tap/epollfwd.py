"""The tap's forwarder, the ``epoll`` engine (``queuewire tap --forwarder epoll``): one thread,
one ``epoll`` loop over non-blocking sockets, in the forwarding process.

A readable socket is read with ``recv_into`` into one preallocated buffer, the bytes are
sent on to the other socket at once and unchanged, and only then stamped and appended as a
record (:mod:`.channel`) to the channel's outgoing buffer. What the other socket does not
take is kept (at most one read) and that side is not read again until it is flushed:
backpressure, memory bounded per connection. Half-closes pass through (an EOF becomes
``shutdown(SHUT_WR)`` on the other socket once what is pending is flushed; the connection
ends when both halves are closed), a reset of either socket closes both, an upstream that
refuses or does not answer within the connect timeout closes the client and is reported.
Measured against the threaded engine of :mod:`.forwarder` (the default), it added more
latency per hop (one more system call and more interpreted work per read).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time

from .channel import (
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

_IN, _OUT, _ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR | select.EPOLLHUP
_PACK = HEADER.pack


def _address(sock: socket.socket, peer: bool) -> str:
    try:
        addr = sock.getpeername() if peer else sock.getsockname()
        return f"{addr[0]}:{addr[1]}"
    except OSError:
        return "?:0"


class _Side:
    """One socket of a link; ``code`` is the record kind of the bytes it reads."""

    __slots__ = ("sock", "fd", "link", "code", "peer", "pending", "eof_in", "shut_after",
                 "mask", "registered")

    def __init__(self, sock: socket.socket, link: _Link, code: int):
        self.sock, self.fd, self.link, self.code = sock, sock.fileno(), link, code
        self.peer: _Side = None  # type: ignore[assignment]
        self.pending: memoryview | None = None   # bytes read from the peer, not yet sent here
        self.eof_in = False        # this socket sent its EOF
        self.shut_after = False    # shut this socket's write half once pending is flushed
        self.mask = 0
        self.registered = False


class _Link:
    __slots__ = ("conn_id", "client", "upstream", "opened", "done", "addrs", "deadline",
                 "client_addr", "upstream_addr")

    def __init__(self, conn_id: int):
        self.conn_id = conn_id
        self.client: _Side = None  # type: ignore[assignment]
        self.upstream: _Side = None  # type: ignore[assignment]
        self.opened = False
        self.done = False
        self.addrs: list = []
        self.deadline = 0.0
        self.client_addr = self.upstream_addr = ""


class Forwarder:
    def __init__(self, listener: socket.socket, channel: socket.socket, upstream_host: str,
                 upstream_port: int, connect_timeout: float, hold_bytes: int = HOLD_BYTES,
                 quiet_s: float = QUIET_S, hold_ns: int = HOLD_NS):
        self.listener, self.channel = listener, channel
        self.hold_bytes, self.quiet_s, self.hold_ns = hold_bytes, quiet_s, hold_ns
        self.active = False    # events since the last QUIET record
        self.held_since = 0    # time of the oldest record not yet written
        self.upstream = (upstream_host, upstream_port)
        self.connect_timeout = connect_timeout
        self.ep = select.epoll()
        self.sides: dict[int, _Side] = {}
        self.connecting: dict[int, _Link] = {}   # upstream fd -> link
        self.links: dict[int, _Link] = {}
        self.next_id = 0
        self.out = bytearray()                   # records not yet written to the channel
        self.throttled = False
        self.chan_mask = _IN
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)
        listener.setblocking(False)
        channel.setblocking(False)
        self.ep.register(listener.fileno(), _IN)
        self.ep.register(channel.fileno(), _IN)

    # -- records ---------------------------------------------------------------------------
    def record(self, kind: int, conn_id: int, payload: bytes = b"") -> None:
        self.out += _PACK(kind, conn_id, time.time_ns(), len(payload))
        self.out += payload

    # -- registrations ---------------------------------------------------------------------
    def update(self, side: _Side) -> None:
        link = side.link
        mask = 0
        if link.opened and not link.done:
            if (not side.eof_in and side.peer.pending is None and not self.throttled):
                mask = _IN
            if side.pending is not None:
                mask |= _OUT
        if mask == side.mask and (side.registered or not mask):
            return
        if not mask:  # nothing to wait for: out of the poll (no hang-up to spin on)
            if side.registered:
                self.ep.unregister(side.fd)
                side.registered = False
        elif side.registered:
            self.ep.modify(side.fd, mask)
        else:
            self.ep.register(side.fd, mask)
            side.registered = True
        side.mask = mask

    def hangup(self, side: _Side) -> None:
        """An error or a hang-up on a side not being read (epoll reports those anyway)."""
        err = side.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err or side.pending is not None:
            self.close(side.link, "reset")
        elif side.registered:  # its FIN waits until its peer drains: stop polling it
            self.ep.unregister(side.fd)
            side.registered = False
            side.mask = 0

    def throttle(self, on: bool) -> None:
        self.throttled = on
        for link in self.links.values():
            if link.opened and not link.done:
                self.update(link.client)
                self.update(link.upstream)

    # -- connections -----------------------------------------------------------------------
    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. EMFILE: leave it in the backlog for now
                return
            sock.setblocking(False)
            self.next_id += 1
            link = _Link(self.next_id)
            link.client_addr = _address(sock, True)
            link.client = _Side(sock, link, DATA_C2S)
            link.upstream_addr = f"{self.upstream[0]}:{self.upstream[1]}"
            link.deadline = time.monotonic() + self.connect_timeout
            try:
                link.addrs = socket.getaddrinfo(*self.upstream, type=socket.SOCK_STREAM)
            except OSError as exc:
                self.refuse(link, str(exc) or type(exc).__name__)
                continue
            self.links[link.conn_id] = link
            self.connect(link, None)

    def connect(self, link: _Link, error: str | None) -> None:
        """Try the next address of the upstream; none left: the upstream refused."""
        while link.addrs:
            family, type_, proto, _, addr = link.addrs.pop(0)
            try:
                sock = socket.socket(family, type_, proto)
            except OSError as exc:
                error = str(exc)
                continue
            sock.setblocking(False)
            err = sock.connect_ex(addr)
            if err in (0, errno.EINPROGRESS):
                link.upstream = _Side(sock, link, DATA_S2C)
                self.connecting[sock.fileno()] = link
                self.ep.register(sock.fileno(), _OUT)
                return
            error = os.strerror(err)
            sock.close()
        self.links.pop(link.conn_id, None)
        self.refuse(link, error or "no address")

    def refuse(self, link: _Link, error: str) -> None:
        link.done = True
        self.record(REFUSED, link.conn_id,
                    "\n".join((link.client_addr, link.upstream_addr, error)).encode())
        link.client.sock.close()

    def connected(self, link: _Link) -> None:
        up = link.upstream
        err = up.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if not err:
            try:
                up.sock.getpeername()
            except OSError as exc:
                if exc.errno == errno.ENOTCONN:
                    return  # not yet (an event meant for a closed socket with this fd)
                err = exc.errno or errno.ECONNREFUSED
        del self.connecting[up.fd]
        if err:
            self.ep.unregister(up.fd)
            up.sock.close()
            link.upstream = None  # type: ignore[assignment]
            self.connect(link, os.strerror(err))
            return
        self.ep.unregister(up.fd)
        for side in (link.client, up):
            side.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link.client.peer, up.peer = up, link.client
        self.sides[link.client.fd] = link.client
        self.sides[up.fd] = up
        link.opened = True
        self.record(OPEN, link.conn_id, f"{link.client_addr}\n{link.upstream_addr}".encode())
        self.update(link.client)
        self.update(up)

    def timeouts(self) -> float:
        """Refuse what took too long to connect; the seconds until the next deadline."""
        if not self.connecting:
            return -1
        now = time.monotonic()
        wait = 3600.0
        for fd, link in list(self.connecting.items()):
            if now >= link.deadline:
                del self.connecting[fd]
                self.ep.unregister(fd)
                link.upstream.sock.close()
                link.upstream = None  # type: ignore[assignment]
                link.addrs = []
                self.connect(link, "timed out")
            else:
                wait = min(wait, link.deadline - now)
        return wait

    def close(self, link: _Link, reason: str) -> None:
        if link.done:
            return
        link.done = True
        for side in (link.client, link.upstream):
            if side.pending is not None:  # flush what we can, as a transport's close would
                try:
                    side.sock.send(side.pending)
                except OSError:
                    pass
            self.sides.pop(side.fd, None)
            if side.registered:
                self.ep.unregister(side.fd)
            side.sock.close()
        self.links.pop(link.conn_id, None)
        if reason == "closed" and link.client.eof_in and link.upstream.eof_in:
            reason = "eof"
        self.record(CLOSE, link.conn_id, reason.encode())

    # -- the bytes -------------------------------------------------------------------------
    def readable(self, side: _Side) -> None:
        try:
            n = side.sock.recv_into(self.buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(side.link, "reset")
            return
        peer = side.peer
        if n == 0:
            side.eof_in = True
            self.record(side.code + 2, side.link.conn_id)
            if peer.eof_in:
                if peer.pending is None and side.pending is None:
                    self.close(side.link, "eof")
                    return
            elif peer.pending is None:
                try:
                    peer.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            else:
                peer.shut_after = True
            self.update(side)
            return
        data = self.view[:n]
        try:
            sent = peer.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.out += _PACK(side.code, side.link.conn_id, time.time_ns(), n)
            self.out += data
            self.close(side.link, "reset")
            return
        self.out += _PACK(side.code, side.link.conn_id, time.time_ns(), n)
        self.out += data
        if sent < n:
            peer.pending = memoryview(bytes(data[sent:]))
            self.update(side)
            self.update(peer)

    def writable(self, side: _Side) -> None:
        try:
            sent = side.sock.send(side.pending)  # type: ignore[arg-type]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(side.link, "reset")
            return
        rest = side.pending[sent:]  # type: ignore[index]
        if len(rest):
            side.pending = rest
            return
        side.pending = None
        peer = side.peer
        if side.shut_after:
            side.shut_after = False
            try:
                side.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if side.eof_in and peer.eof_in and peer.pending is None:
            self.close(side.link, "eof")
            return
        self.update(side)
        self.update(peer)

    def flush(self) -> None:
        """Write what the channel takes; throttle every socket while too much waits."""
        out = self.out
        if out:
            try:
                sent = self.channel.send(out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            del out[:sent]
            self.held_since = time.monotonic_ns() if out else 0
        mask = _IN | _OUT if out else _IN
        if mask != self.chan_mask:
            self.ep.modify(self.channel.fileno(), mask)
            self.chan_mask = mask
        if not self.throttled and len(out) > CHANNEL_LIMIT:
            self.throttle(True)
        elif self.throttled and len(out) <= CHANNEL_LIMIT // 2:
            self.throttle(False)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        poll, sides, connecting = self.ep.poll, self.sides, self.connecting
        listen_fd, chan_fd = self.listener.fileno(), self.channel.fileno()
        running = True
        while running:
            timeout = self.timeouts()
            if self.active and (timeout < 0 or timeout > self.quiet_s):
                timeout = self.quiet_s
            events = poll(timeout)
            if not events:
                if self.active:  # quiet: say so, with everything held
                    self.active = False
                    self.out += _PACK(QUIET, 0, 0, 0)
                    self.flush()
                continue
            self.active = True
            for fd, ev in events:
                side = sides.get(fd)
                if side is not None:
                    if ev & _OUT and side.pending is not None:
                        self.writable(side)
                        if side.link.done:
                            continue
                    if side.mask & _IN:
                        if ev & (_IN | _ERR):
                            self.readable(side)
                    elif ev & _ERR and fd in sides:
                        self.hangup(side)
                elif fd == listen_fd:
                    self.accept()
                elif fd == chan_fd:
                    if ev & (_IN | _ERR) and self.stop_requested():
                        running = False
                elif fd in connecting:
                    self.connected(connecting[fd])
            out = self.out
            if out:
                if not self.held_since:
                    self.held_since = time.monotonic_ns()
                if (len(out) >= self.hold_bytes or self.chan_mask & _OUT
                        or time.monotonic_ns() - self.held_since >= self.hold_ns):
                    self.flush()
        self.shutdown()

    def stop_requested(self) -> bool:
        try:
            return self.channel.recv(4096) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def shutdown(self) -> None:
        self.listener.close()
        for link in list(self.links.values()):
            if link.opened:
                self.close(link, "closed")
            else:
                if link.upstream is not None:
                    link.upstream.sock.close()
                link.client.sock.close()
        self.channel.setblocking(True)
        try:
            self.channel.sendall(self.out)
        except OSError:
            pass
        self.channel.close()
