"""A packet capture (pcap or pcapng) of one protocol's TCP traffic, turned into a trace
directory: the recording ``queuewire tap --record`` would have written of the same bytes.

:func:`import_pcap` reads the capture packet by packet, keeps the TCP segments to or from
the server ``port`` (and ``host``, if given), reassembles each connection's two byte streams
by sequence number, and feeds them to the tap's own :class:`~queuewire.traffic.analyzer.Analyzer`
with a :class:`~queuewire.traffic.record.Recorder` as its sink, so framing, gaps and the
trace files are exactly the tap's (``spec/trace.yaml``). The packets and the TCP segments
they carry come from :mod:`.capture`, which reads the file formats and the link, IP and TCP
headers (with ``struct``, every declared length checked before it is used); dpkt writes the
synthetic captures below.

The rules:

* **Sides.** The server is the endpoint whose TCP port is ``port`` (and address ``host``);
  ``c2s`` is towards it. A connection is its 4-tuple; conn ids count from 1 in the order of
  each connection's first packet, whose timestamp is its ``open`` record's (``client`` and
  ``upstream`` as ``host:port``, IPv6 in brackets; ``listen`` empty: there was no tap).
* **Reassembly.** Each direction starts at its SYN's sequence number + 1 or, with no SYN
  captured (a capture started mid-connection), at the first sequence number seen (its own,
  or the peer's ACK of it); framing then starts wherever that is, and the analyzer records
  what it makes of it. Sequence numbers are compared modulo 2^32 relative to the next byte
  expected, so they wrap. Every byte is delivered once, in order: a segment ahead of the
  next byte waits in a buffer; retransmitted and overlapping bytes already delivered are
  dropped (the first copy wins). A FIN is the ``eof`` of its direction once every byte
  before it is delivered; when both directions have ended the connection closes (``eof``).
  A RST closes it at once (``reset``); a connection still open when the capture ends is
  closed ``capture_ended``, as is one whose 4-tuple a new SYN reuses before an end was seen.
  Packets of a connection after its close are skipped (``after_close``).
* **Holes.** Bytes that crossed but are not in the capture (the capture dropped them, or
  the snap length cut a segment) are known lost when the peer ACKs beyond them (it received
  them, so they will not be retransmitted), when the out-of-order buffer of the direction
  passes ``max_buffer`` bytes or the buffers of all directions together pass
  ``max_total_buffer`` (a buffered segment costs its bytes plus :data:`SEGMENT_OVERHEAD`, so
  one-byte segments cannot hold a hundred times the bound), and at a RST or the end of the
  capture. Each is passed to
  :meth:`Analyzer.hole`, which records a ``missing`` gap (payload ``{"missing_bytes": n}``,
  not bytes of the stream) and an INFO ``capture_gap`` finding; every later byte of that
  direction is a ``framing_lost`` gap, since no frame boundary can be trusted after a hole.
  A hole is a count: sequence numbers that jump by 2^31 declare holes of GiBs, and cost a
  record of a few bytes each; nothing is allocated or walked in proportion to a hole.
* **Timestamps.** ``t_ns`` is the packet's capture time, exact (microsecond or nanosecond
  pcap, any pcapng ``if_tsresol`` and ``if_tsoffset``), never through a float.
* **Profile.** Given one (``profile``), the traffic is judged and recorded under it. Without
  one it is found from the traffic (:mod:`queuewire.traffic.detect`: the Hello reply, pushed
  events, the commands and opcodes only one profile defines): the analyzer holds the
  connections back until the server's frames decide, or it has held
  :data:`~queuewire.traffic.analyzer.DEFAULT_HOLD_BYTES`, or the capture ends, then judges
  them under the profile found, or the protocol's default when nothing decides.
  ``ImportStats.profile_choice`` says which, how and why, and the trace files' meta names it.
* **Errors.** A file that is neither pcap nor pcapng, a pcap of an unsupported link type, a
  length that lies (:mod:`.capture`'s bounds), or a capture with no TCP packet on the port
  raises :class:`PcapError` with a one-line message. A capture cut short inside a packet (a
  killed tcpdump) ends at the last whole packet (``ImportStats.truncated``). IP fragments are
  skipped (``ip_fragment``); checksums are not verified (offloading makes them wrong in most
  captures).

Link types: Ethernet (with 802.1Q/802.1ad tags), Linux cooked (SLL and SLL2), raw IP
(LINKTYPE_RAW, IPV4, IPV6), BSD loopback (NULL and LOOP), each with IPv4 and IPv6.

:func:`write_pcap`, :func:`conversation` and :func:`write_segments` go the other way: they
write a synthetic capture (handshake, data segments with proper seq/ack, FIN or RST) for the
tests and benchmarks, in any supported format and link type, with segments that can be split,
reordered, repeated or dropped before writing.
"""

from __future__ import annotations

import heapq
import ipaddress
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import dpkt

from ..spec import SpecError
from ..traffic.analyzer import Analyzer
from ..traffic.record import Recorder
from ..traffic.trace_format import read_dir
from .capture import (
    ETH_IP,
    ETH_IP6,
    LINK_ETHERNET,
    LINK_LOOP,
    LINK_NULL,
    LINK_RAW,
    LINK_SLL,
    LINK_SLL2,
    ImportStats,
    PcapError,
    ip_of,
    packets,
    tcp_of,
)

__all__ = ["ImportStats", "PcapError", "Segment", "conversation", "import_pcap",
           "write_pcap", "write_segments"]

#: Out-of-order bytes one direction buffers before the first missing byte is given up on.
DEFAULT_MAX_BUFFER = 16 * 1024 * 1024
#: Out-of-order bytes all directions of an import buffer together (a capture of many
#: connections each holding DEFAULT_MAX_BUFFER would otherwise hold them all at once).
DEFAULT_MAX_TOTAL_BUFFER = 256 * 1024 * 1024
#: What a buffered segment costs besides its bytes: its heap entry (a 3-tuple, two ints,
#: the bytes object's header), about 150 bytes on CPython 3.11 (sys.getsizeof).
SEGMENT_OVERHEAD = 160
_MOD = 1 << 32
_HALF = 1 << 31
_ACK_PLAUSIBLE = 1 << 30  # an ACK further ahead than this is not taken as a loss
_ENDED_KEPT = 100_000     # closed 4-tuples remembered (packets after a close are skipped)

_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10


def _addr(raw: bytes, port: int) -> str:
    ip = ipaddress.ip_address(raw)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


# -- reassembly ----------------------------------------------------------------------------
def _signed(d: int) -> int:
    return ((d + _HALF) % _MOD) - _HALF


class _Half:
    """One direction of a connection: bytes put back in order, then fed to the analyzer."""

    __slots__ = ("buffered", "conn", "delivered", "direction", "ended", "fin", "heap", "isn",
                 "next", "order")

    def __init__(self, conn: _Conn, direction: str):
        self.conn = conn
        self.direction = direction
        self.next: int | None = None  # sequence number of the next byte to deliver
        self.delivered = 0            # stream offset of that byte
        self.heap: list[tuple[int, int, bytes]] = []  # (offset, arrival, bytes) ahead of it
        self.buffered = 0
        self.order = 0
        self.fin: int | None = None   # stream offset of the FIN
        self.ended = False
        self.isn: int | None = None   # the SYN's sequence number, when it was captured

    def offset(self, seq: int) -> int:
        assert self.next is not None
        return self.delivered + _signed(seq - self.next)

    def segment(self, seq: int, payload: bytes, fin: bool, t_ns: int) -> None:
        if self.next is None:
            self.next = seq
        imp = self.conn.imp
        off = self.offset(seq)
        if self.fin is not None and off + len(payload) > self.fin:  # nothing follows a FIN
            payload = payload[:max(0, self.fin - off)]
        if payload and not self.ended:
            end = off + len(payload)
            if end <= self.delivered:
                imp.stats.duplicate_bytes += len(payload)
            elif off <= self.delivered:
                imp.stats.duplicate_bytes += self.delivered - off
                self._deliver(payload[self.delivered - off:], t_ns)
                self._drain(t_ns)
            else:
                self.order += 1
                heapq.heappush(self.heap, (off, self.order, payload))
                cost = len(payload) + SEGMENT_OVERHEAD
                self.buffered += cost
                imp.buffered += cost
                # over a bound: give up on the first missing bytes (this direction's own,
                # even when others fill the import's whole budget: it is the one growing)
                while self.heap and (self.buffered > imp.max_buffer
                                     or imp.buffered > imp.max_total_buffer):
                    self.give_up(self.heap[0][0], t_ns)
        if fin and self.fin is None:
            self.fin = off + len(payload)
        self._check_eof(t_ns)

    def acked(self, ack: int, t_ns: int) -> None:
        """The peer acknowledged every byte before ``ack``: any of them not captured never
        will be."""
        if self.next is None:  # no segment of this direction yet: it starts there
            self.next = ack
            return
        upto = self.offset(ack)
        if self.fin is not None:
            upto = min(upto, self.fin)
        if self.delivered < upto <= self.delivered + _ACK_PLAUSIBLE:
            self.give_up(upto, t_ns)

    def give_up(self, upto: int, t_ns: int) -> None:
        """Bytes before stream offset ``upto`` that have not arrived are holes."""
        while self.delivered < upto and not self.ended:
            stop = min(self.heap[0][0], upto) if self.heap else upto
            if stop > self.delivered:
                self._hole(stop - self.delivered, t_ns)
            self._drain(t_ns)
        self._check_eof(t_ns)

    def give_up_all(self, t_ns: int) -> None:
        """Nothing more will arrive (RST, end of capture)."""
        if self.next is None or self.ended:
            return
        if self.fin is not None:
            upto = self.fin
        else:
            upto = max((o + len(p) for o, _, p in self.heap), default=self.delivered)
        self.give_up(upto, t_ns)

    def _drain(self, t_ns: int) -> None:
        heap = self.heap
        while heap and heap[0][0] <= self.delivered:
            off, _, payload = heapq.heappop(heap)
            cost = len(payload) + SEGMENT_OVERHEAD
            self.buffered -= cost
            self.conn.imp.buffered -= cost
            end = off + len(payload)
            if end <= self.delivered:
                self.conn.imp.stats.duplicate_bytes += len(payload)
            else:
                self.conn.imp.stats.duplicate_bytes += self.delivered - off
                self._deliver(payload[self.delivered - off:], t_ns)

    def _deliver(self, data: bytes, t_ns: int) -> None:
        if self.fin is not None and self.delivered + len(data) > self.fin:
            data = data[:self.fin - self.delivered]  # nothing follows a FIN
            if not data:
                return
        self.conn.imp.analyzer.feed(self.conn.conn_id, self.direction, data, t_ns)
        self._advance(len(data))

    def _hole(self, n: int, t_ns: int) -> None:
        imp = self.conn.imp
        imp.analyzer.hole(self.conn.conn_id, self.direction, n, t_ns)
        imp.stats.holes += 1
        imp.stats.missing_bytes[self.direction] += n
        self._advance(n)

    def _advance(self, n: int) -> None:
        self.delivered += n
        self.next = (self.next + n) % _MOD  # type: ignore[operator]

    def _check_eof(self, t_ns: int) -> None:
        if self.fin is not None and not self.ended and self.delivered >= self.fin:
            self.ended = True
            self.heap.clear()
            self.conn.imp.buffered -= self.buffered
            self.buffered = 0
            self.conn.imp.analyzer.eof(self.conn.conn_id, self.direction, t_ns)


class _Conn:
    __slots__ = ("c2s", "closed", "conn_id", "imp", "s2c")

    def __init__(self, imp: _Importer, conn_id: int):
        self.imp = imp
        self.conn_id = conn_id
        self.c2s = _Half(self, "c2s")
        self.s2c = _Half(self, "s2c")
        self.closed = False


class _Importer:
    """The state of one import: connections by 4-tuple, the analyzer and its recorder."""

    def __init__(self, analyzer: Analyzer, stats: ImportStats, port: int, host: bytes | None,
                 max_buffer: int, max_total_buffer: int):
        self.analyzer = analyzer
        self.stats = stats
        self.port, self.host = port, host
        self.max_buffer = max_buffer
        self.max_total_buffer = max_total_buffer
        self.buffered = 0  # what every direction's out-of-order buffer costs, together
        self.live: dict[tuple, _Conn] = {}
        self.ended: dict[tuple, int] = {}  # 4-tuple -> when its connection closed
        self.next_id = 0

    def packet(self, t_ns: int, tcp: tuple) -> None:
        src, dst, sport, dport, seq, ack, flags, payload = tcp
        port, host, stats = self.port, self.host, self.stats
        if dport == port and (host is None or dst == host):
            direction, key = "c2s", (src, sport, dst, dport)
        elif sport == port and (host is None or src == host):
            direction, key = "s2c", (dst, dport, src, sport)
        else:
            stats.skip("other_port" if port not in (sport, dport) else "other_host")
            return
        stats.tcp_packets += 1
        syn = bool(flags & _SYN)
        conn = self.live.get(key)
        if conn is not None and syn and not flags & _ACK and direction == "c2s":
            c2s = conn.c2s  # a SYN again: the same connection's, or a new one on the 4-tuple
            same = c2s.isn == seq if c2s.isn is not None else (
                c2s.delivered == 0 and c2s.next == (seq + 1) % _MOD)
            if not same:
                self.close(conn, key, t_ns, "capture_ended")
                conn = None
        if conn is None:
            if key in self.ended and not syn:
                stats.skip("after_close")
                return
            self.ended.pop(key, None)
            self.next_id += 1
            conn = self.live[key] = _Conn(self, self.next_id)
            self.analyzer.open(conn.conn_id, t_ns, client=_addr(key[0], key[1]),
                               upstream=_addr(key[2], key[3]))
        half, peer = (conn.c2s, conn.s2c) if direction == "c2s" else (conn.s2c, conn.c2s)
        if syn:
            if half.isn is None and half.delivered == 0 and not half.heap:
                half.next, half.isn = (seq + 1) % _MOD, seq
            seq = (seq + 1) % _MOD
        if flags & _RST:
            for h in (conn.c2s, conn.s2c):
                h.give_up_all(t_ns)
            self.close(conn, key, t_ns, "reset")
            return
        if payload or flags & _FIN or half.next is None:
            half.segment(seq, payload, bool(flags & _FIN), t_ns)
        if flags & _ACK and not conn.closed:
            peer.acked(ack, t_ns)
        if conn.c2s.ended and conn.s2c.ended and not conn.closed:
            self.close(conn, key, t_ns, "eof")

    def close(self, conn: _Conn, key: tuple, t_ns: int, reason: str) -> None:
        conn.closed = True
        for h in (conn.c2s, conn.s2c):  # what it still buffers leaves the import's budget
            self.buffered -= h.buffered
            h.heap.clear()
            h.buffered = 0
        self.analyzer.close(conn.conn_id, t_ns, reason)
        del self.live[key]
        self.ended.pop(key, None)
        self.ended[key] = t_ns
        if len(self.ended) > _ENDED_KEPT:  # forget the oldest
            del self.ended[next(iter(self.ended))]
        self.stats.close_reasons[reason] = self.stats.close_reasons.get(reason, 0) + 1

    def finish(self, t_ns: int) -> None:
        for key, conn in list(self.live.items()):
            for h in (conn.c2s, conn.s2c):
                h.give_up_all(t_ns)
            if not conn.closed:
                reason = "eof" if conn.c2s.ended and conn.s2c.ended else "capture_ended"
                self.close(conn, key, t_ns, reason)


def import_pcap(path: str | Path, *, port: int, out_dir: str | Path, protocol: str,
                profile: str | None = None, host: str | None = None,
                rotate_bytes: int | None = None, max_buffer: int = DEFAULT_MAX_BUFFER,
                max_total_buffer: int = DEFAULT_MAX_TOTAL_BUFFER,
                run: str | None = None) -> ImportStats:
    """Import the TCP traffic of server ``port`` (and ``host``) in the capture ``path``
    into a trace directory ``out_dir`` (see the module docstring). ``profile`` None: found
    from the traffic. ``run`` names the files (default: the capture's first packet time,
    UTC). Raises :class:`PcapError` for a capture that cannot be imported; ``out_dir`` is
    only created once a connection is found."""
    stats = ImportStats(path=str(path), out_dir=str(out_dir))
    host_raw = None
    if host is not None:
        try:
            host_raw = ipaddress.ip_address(host).packed
        except ValueError:
            raise PcapError(f"host {host!r} is not an IP address") from None
    recorder: Recorder | None = None
    analyzer: Analyzer

    def sink(*record: Any) -> None:
        nonlocal recorder
        if recorder is None:
            name = run or time.strftime("%Y%m%dT%H%M%SZ",
                                        time.gmtime((stats.first_ns or 0) // 1_000_000_000))
            recorder = Recorder(out_dir, protocol=protocol, profile=analyzer.profile.name,
                                rotate_bytes=rotate_bytes, run=name)
        recorder.write(*record)

    try:
        analyzer = Analyzer(protocol, profile, sink=sink, keep_events=False,
                            detect=profile is None)
    except (ValueError, SpecError) as exc:
        raise PcapError(str(exc).splitlines()[0]) from None
    imp = _Importer(analyzer, stats, port, host_raw, max_buffer, max_total_buffer)
    try:
        with open(path, "rb") as fh:
            for link, t_ns, buf in packets(fh, stats):
                stats.packets += 1
                if stats.first_ns is None:
                    stats.first_ns = t_ns
                stats.last_ns = t_ns if stats.last_ns is None else max(stats.last_ns, t_ns)
                ip = ip_of(link, buf)
                tcp = tcp_of(ip) if isinstance(ip, bytes) else ip
                if isinstance(tcp, str):
                    stats.skip(tcp)
                    continue
                imp.packet(t_ns, tcp)
            imp.finish(stats.last_ns or 0)
            analyzer.settle()   # a detection still undecided chooses now
    except OSError as exc:
        raise PcapError(f"{path}: {exc.strerror or exc}") from None
    except (struct.error, IndexError) as exc:  # a header that lies about its lengths
        raise PcapError(f"{path}: corrupt capture at packet {stats.packets + 1} ({exc})") from None
    finally:
        if recorder is not None:
            recorder.close()
    if not stats.tcp_packets:
        kinds = ", ".join(stats.link_types) or "none"
        raise PcapError(f"{path}: no TCP packets on port {port}"
                        f"{f' of {host}' if host else ''} in {stats.packets} packet(s)"
                        f" (link types: {kinds})")
    stats.summary = summary = analyzer.summary()
    stats.profile_choice = dict(summary["profile_choice"])
    totals = summary["totals"]
    stats.connections = imp.next_id
    stats.bytes = dict(totals["bytes"])
    stats.frames = dict(totals["frames"])
    stats.gaps = totals["gaps"]
    stats.findings = dict(totals["findings"])
    if recorder is not None:
        stats.files, stats.records = recorder.files_written, recorder.records
    return stats


# -- writing synthetic captures (a test and benchmark helper) -------------------------------
Chunk = tuple[str, bytes, int]   # (direction, bytes, t_ns)


@dataclass(slots=True)
class Segment:
    """One TCP segment of a synthetic capture; ``flags`` are letters of ``SAFRP``."""

    t_ns: int
    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int
    ack: int
    flags: str
    payload: bytes = b""


_FLAG_BITS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10}


def conversation(chunks: Sequence[Chunk], *, port: int, client: tuple[str, int] = ("10.0.0.1", 40001),
                 server_host: str = "10.0.0.2", isn: tuple[int, int] = (1000, 900_000),
                 mss: int | None = None, handshake: bool = True, close: str | None = "fin",
                 acks: bool = True) -> list[Segment]:
    """The segments of one connection carrying ``chunks`` (each split into ``mss``-byte
    segments, each answered by a pure ACK from the peer when ``acks``): the three-way
    handshake at the first chunk's time, then the data, then ``close``: ``fin`` (the client's
    FIN, the server's FIN, the last ACK), ``rst`` (the client resets) or None."""
    server = (server_host, port)
    ends = {"c2s": (client, server), "s2c": (server, client)}
    nxt = {"c2s": isn[0] % _MOD, "s2c": isn[1] % _MOD}
    other = {"c2s": "s2c", "s2c": "c2s"}
    t0 = chunks[0][2] if chunks else 0
    out: list[Segment] = []

    def seg(direction: str, t: int, flags: str, payload: bytes = b"") -> None:
        src, dst = ends[direction]
        out.append(Segment(t, src, dst, nxt[direction], nxt[other[direction]], flags, payload))
        nxt[direction] = (nxt[direction] + len(payload) + ("S" in flags) + ("F" in flags)) % _MOD

    if handshake:
        src, dst = ends["c2s"]
        out.append(Segment(t0, src, dst, nxt["c2s"], 0, "S"))
        nxt["c2s"] = (nxt["c2s"] + 1) % _MOD
        seg("s2c", t0, "SA")
        seg("c2s", t0, "A")
    t = t0
    for direction, data, t in chunks:
        step = mss or max(len(data), 1)
        for i in range(0, len(data), step):
            seg(direction, t, "PA", data[i:i + step])
        if acks and data:
            seg(other[direction], t, "A")
    if close == "fin":
        seg("c2s", t, "FA")
        seg("s2c", t, "FA")
        seg("c2s", t, "A")
    elif close == "rst":
        seg("c2s", t, "RA")
    return out


def _packet(s: Segment, link: int) -> bytes:
    flags = sum(_FLAG_BITS[c] for c in s.flags)
    tcp = dpkt.tcp.TCP(sport=s.src[1], dport=s.dst[1], seq=s.seq, ack=s.ack, flags=flags,
                       win=65535, data=s.payload)
    src, dst = ipaddress.ip_address(s.src[0]), ipaddress.ip_address(s.dst[0])
    if src.version == 6:
        ip: Any = dpkt.ip6.IP6(src=src.packed, dst=dst.packed, nxt=6, hlim=64,
                               plen=len(bytes(tcp)), data=tcp)
        ip.extension_hdrs = {}
        etype, family = ETH_IP6, 30
    else:
        ip = dpkt.ip.IP(src=src.packed, dst=dst.packed, p=6, ttl=64, data=tcp)
        etype, family = ETH_IP, 2
    raw = bytes(ip)
    if link == LINK_ETHERNET:
        return bytes(dpkt.ethernet.Ethernet(src=b"\x02\x00\x00\x00\x00\x01",
                                            dst=b"\x02\x00\x00\x00\x00\x02", type=etype)) + raw
    if link == LINK_SLL:
        return bytes(dpkt.sll.SLL(type=0, hrd=1, hlen=6, hdr=b"\x02\x00\x00\x00\x00\x01\x00\x00",
                                  ethtype=etype)) + raw
    if link == LINK_SLL2:
        return bytes(dpkt.sll2.SLL2(ethtype=etype, intindex=1, hrd=1, type=0, hlen=6,
                                    hdr=b"\x02\x00\x00\x00\x00\x01\x00\x00")) + raw
    if link == LINK_NULL:
        return struct.pack("<I", family) + raw
    if link == LINK_LOOP:
        return struct.pack(">I", family) + raw
    if link == LINK_RAW:
        return raw
    raise ValueError(f"cannot write link type {link}")


_LINKS = {"ethernet": LINK_ETHERNET, "sll": LINK_SLL, "sll2": LINK_SLL2, "null": LINK_NULL,
          "loop": LINK_LOOP, "raw": LINK_RAW}


def write_segments(path: str | Path, segments: Iterable[Segment], *, fmt: str = "pcap",
                   link: str = "ethernet", nano: bool = True) -> Path:
    """Write ``segments``, in the order given, as a ``pcap`` or ``pcapng`` capture of link
    type ``link`` (ethernet, sll, sll2, null, loop, raw): nanosecond timestamps (pcapng:
    ``if_tsresol`` 9), or microseconds (truncated) when not ``nano``."""
    path = Path(path)
    linktype = _LINKS[link]
    with open(path, "wb") as fh:
        if fmt == "pcap":
            w = dpkt.pcap.Writer(fh, snaplen=262144, linktype=linktype, nano=nano)
            unit = 1 if nano else 1000
            for s in segments:
                w.writepkt(_packet(s, linktype), Decimal(s.t_ns // unit * unit) / 1_000_000_000)
        elif fmt == "pcapng":
            ng = dpkt.pcapng
            opts = [ng.PcapngOptionLE(code=ng.PCAPNG_OPT_IF_TSRESOL, data=b"\x09")] if nano else []
            idb = ng.InterfaceDescriptionBlockLE(snaplen=262144, linktype=linktype,
                                                 opts=[*opts, ng.PcapngOptionLE(code=0)])
            wng = ng.Writer(fh, idb=idb)
            for s in segments:
                pkt = _packet(s, linktype)
                ticks = s.t_ns if nano else s.t_ns // 1000
                wng.writepkt(ng.EnhancedPacketBlockLE(
                    ts_high=ticks >> 32, ts_low=ticks & 0xFFFFFFFF, caplen=len(pkt),
                    pkt_len=len(pkt), pkt_data=pkt))
        else:
            raise ValueError(f"unknown capture format {fmt!r} (pcap, pcapng)")
    return path


def write_pcap(path: str | Path, exchanges: Sequence[Sequence[Chunk]], *, port: int,
               fmt: str = "pcap", link: str = "ethernet", ipv6: bool = False,
               mss: int | None = None, close: str | None = "fin",
               edit: Callable[[list[Segment]], list[Segment]] | None = None) -> Path:
    """Write a capture of ``exchanges``, one connection each (a list of ``(direction,
    bytes, t_ns)`` chunks), client ports 40001, 40002, ... to ``port``; the connections'
    segments are interleaved by time (ties in connection order). ``edit`` may rewrite the
    final segment list (reorder, repeat, drop) before it is written."""
    client_host, server_host = ("fd00::1", "fd00::2") if ipv6 else ("10.0.0.1", "10.0.0.2")
    segments: list[Segment] = []
    for i, chunks in enumerate(exchanges):
        segments += conversation(chunks, port=port, client=(client_host, 40001 + i),
                                 server_host=server_host, mss=mss, close=close,
                                 isn=(1000 + 7919 * i, 900_000 + 104729 * i))
    segments.sort(key=lambda s: s.t_ns)
    if edit is not None:
        segments = edit(segments)
    return write_segments(path, segments, fmt=fmt, link=link)


def export_pcap(directory: str | Path, path: str | Path, *, port: int, mss: int | None = None,
                fmt: str = "pcap") -> Path:
    """The other way round: a capture of a recording (``queuewire tap --record``). Each
    connection of the trace becomes one TCP connection to ``port`` (handshake, its frames
    and gaps in each direction at the times the tap read them, cut into ``mss``-byte
    segments when given, a FIN close), so a packet tool (Wireshark, tshark with queuewire's
    dissector) sees the bytes the tap saw. ``missing`` gaps (bytes an imported capture did
    not hold) are left out."""
    by_conn: dict[int, list[Chunk]] = {}
    for rec in read_dir(directory):
        if rec.type == "frame" or (rec.type == "gap" and rec.detail != "missing"):
            by_conn.setdefault(rec.conn_id, []).append((rec.direction, rec.payload, rec.t_ns))
    return write_pcap(path, [by_conn[c] for c in sorted(by_conn)], port=port, mss=mss, fmt=fmt)
