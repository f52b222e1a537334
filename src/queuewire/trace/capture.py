"""The packets of a capture file (pcap or pcapng) and the TCP segment each one carries: the
reading layer under :mod:`.pcap`, which reassembles the segments into trace files.

:func:`packets` yields ``(link type, t_ns, bytes)`` for every packet record of a classic
pcap (micro- or nanosecond, either byte order) or a pcapng (every section, every interface,
exact times from ``if_tsresol`` and ``if_tsoffset``, never through a float); :func:`ip_of`
takes the IP packet out of a link-layer frame (Ethernet with 802.1Q/802.1ad tags, Linux
cooked SLL and SLL2, raw IP, BSD loopback) and :func:`tcp_of` the TCP segment out of an IPv4
or IPv6 packet, each returning the reason as a string when there is none (the importer counts
skipped packets by reason). Headers are read with ``struct``, not dpkt: dpkt's readers turn
timestamps into floats (a nanosecond lost), its pcapng reader knows one interface only, a
dpkt object per packet costs several times more, and its IPv6 parser copies the rest of the
packet once per extension header, the quadratic walk this module once had too.

A capture is DATA from anywhere, so every length in it is checked before it is used and no
walk is longer than the bytes it walks: a packet record's caplen and a pcapng block's length
are refused above :data:`MAX_PACKET_BYTES` and :data:`MAX_BLOCK_BYTES` before anything is
read (a declared 4 GiB is never allocated), a block whose leading and trailing lengths differ
is refused (the lengths lie; what follows cannot be found), a section may describe at most
:data:`MAX_INTERFACES` interfaces, and the IPv6 extension-header chain and the VLAN tag stack
are walked by offset (no copy per header) and given up on after :data:`MAX_IP6_EXT_HEADERS`
and :data:`MAX_VLAN_TAGS` (the packet is skipped, counted as ``ip6_ext_chain`` or
``vlan_stack``). A refusal is a :class:`PcapError` with a one-line message; a file cut short
inside a packet ends at its last whole packet (``ImportStats.truncated``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

#: The largest packet record read. libpcap caps a snapshot at 256 KiB and GRO or BIG TCP
#: captures hold packets of up to 512 KiB; a caplen above this is a record that lies.
MAX_PACKET_BYTES = 16 * 1024 * 1024
#: The largest pcapng block read: a packet of MAX_PACKET_BYTES, its options (comments,
#: hashes) and the block's own fields; section and interface blocks are far smaller.
MAX_BLOCK_BYTES = MAX_PACKET_BYTES + 1024 * 1024
#: Interfaces one pcapng section may describe (a capture has one per NIC it listened on:
#: a handful, a few hundred on a large router); each costs a table entry until the section ends.
MAX_INTERFACES = 4096
#: IPv6 extension headers walked before TCP. RFC 8200 section 4.1: each occurs at most once,
#: Destination Options at most twice, so a real chain of the kinds walked here has at most 4.
MAX_IP6_EXT_HEADERS = 8
#: 802.1Q/802.1ad tags walked before the EtherType (QinQ stacks two).
MAX_VLAN_TAGS = 8

# Link types (LINKTYPE_* values, as stored in pcap and pcapng files).
LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_LOOP = 0, 1, 101, 108
LINK_SLL, LINK_SLL2, LINK_IPV4, LINK_IPV6 = 113, 276, 228, 229
LINK_NAMES = {LINK_NULL: "null", LINK_ETHERNET: "ethernet", LINK_RAW: "raw", 12: "raw",
              14: "raw", LINK_LOOP: "loop", LINK_SLL: "sll", LINK_SLL2: "sll2",
              LINK_IPV4: "ipv4", LINK_IPV6: "ipv6"}
ETH_IP, ETH_IP6 = 0x0800, 0x86DD
_VLAN = (0x8100, 0x88A8, 0x9100)
_IP6_EXT = (0, 43, 60)  # hop-by-hop, routing, destination options (fragment: 44, skipped)

_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


class PcapError(Exception):
    """A capture that cannot be imported (not pcap/pcapng, unsupported link type, a length
    that lies, nothing on the port); the message is one line."""


@dataclass
class ImportStats:
    """What :func:`.pcap.import_pcap` read and wrote."""

    path: str
    format: str = ""                                  # pcap or pcapng
    link_types: list[str] = field(default_factory=list)
    packets: int = 0                                  # packet records in the file
    tcp_packets: int = 0                              # TCP segments on the port
    connections: int = 0
    bytes: dict[str, int] = field(default_factory=lambda: {"c2s": 0, "s2c": 0})
    frames: dict[str, int] = field(default_factory=lambda: {"c2s": 0, "s2c": 0})
    gaps: int = 0                                     # gap records (missing ones included)
    holes: int = 0                                    # missing gap records
    missing_bytes: dict[str, int] = field(default_factory=lambda: {"c2s": 0, "s2c": 0})
    duplicate_bytes: int = 0                          # retransmitted / overlapping, dropped
    skipped: dict[str, int] = field(default_factory=dict)  # packets not used, by reason
    close_reasons: dict[str, int] = field(default_factory=dict)
    findings: dict[str, int] = field(default_factory=dict)  # by level
    first_ns: int | None = None
    last_ns: int | None = None
    truncated: bool = False                           # the file ends inside a packet
    out_dir: str = ""
    files: int = 0
    records: int = 0
    summary: dict[str, Any] = field(default_factory=dict, repr=False)  # Analyzer.summary()
    #: the profile the traffic was judged and recorded under, how it was chosen and why
    #: (:class:`queuewire.traffic.detect.ProfileChoice` as data)
    profile_choice: dict[str, Any] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """The counts as plain data (``summary``, the analyzer's report, left out)."""
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()
                if k != "summary"}


# -- reading the file ----------------------------------------------------------------------
def _pcap_packets(fh: BinaryIO, stats: ImportStats) -> Iterator[tuple[int, int, bytes]]:
    """(link type, t_ns, bytes) of a classic pcap (micro- or nanosecond, either byte order)."""
    head = fh.read(24)
    if len(head) < 24:
        raise PcapError(f"{stats.path}: pcap file shorter than its header")
    endian = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = head[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = struct.unpack_from(endian + "I", head, 20)[0] & 0xFFFF  # high bits: FCS length
    if link not in LINK_NAMES:
        raise PcapError(f"{stats.path}: unsupported link type {link} (supported: "
                        "Ethernet, Linux cooked SLL/SLL2, raw IP, BSD loopback)")
    stats.link_types.append(LINK_NAMES[link])
    record = struct.Struct(endian + "IIII")
    unit = 1 if nano else 1000
    while True:
        raw = fh.read(16)
        if len(raw) < 16:
            stats.truncated = bool(raw)
            return
        sec, frac, caplen, _ = record.unpack(raw)
        if caplen > MAX_PACKET_BYTES:
            raise PcapError(f"{stats.path}: corrupt pcap: packet {stats.packets + 1} declares "
                            f"caplen {caplen}, more than the {MAX_PACKET_BYTES} bytes a "
                            "packet may have")
        buf = fh.read(caplen)
        if len(buf) < caplen:  # the file ends inside the packet
            stats.truncated = True
            return
        yield link, sec * 1_000_000_000 + frac * unit, buf


def _idb(body: bytes, endian: str) -> tuple[int, int, int, int]:
    """(link, numerator, denominator, offset_ns) of an interface description block's body."""
    link, _, _snap = struct.unpack_from(endian + "HHI", body)
    num, den, off = 1_000_000_000, 1_000_000, 0  # default resolution: microseconds
    pos = 8
    while pos + 4 <= len(body):
        code, olen = struct.unpack_from(endian + "HH", body, pos)
        val = body[pos + 4:pos + 4 + olen]
        if code == 0:
            break
        if code == 9 and len(val) >= 1:       # if_tsresol
            r = val[0]
            den = (2 ** (r & 0x7F)) if r & 0x80 else 10 ** (r & 0x7F)
        elif code == 14 and len(val) >= 8:    # if_tsoffset, seconds
            off = struct.unpack(endian + "q", val[:8])[0] * 1_000_000_000
        pos += 4 + olen + (-olen % 4)
    return link, num, den, off


def _pcapng_packets(fh: BinaryIO, stats: ImportStats) -> Iterator[tuple[int | None, int, bytes]]:
    """(link type, t_ns, bytes) of a pcapng: every section, every interface, exact times."""
    ifaces: list[tuple[int, int, int, int]] = []  # (link, numerator, denominator, offset_ns)
    seen_links = set(stats.link_types)
    endian = "<"
    while True:
        head = fh.read(12)
        if len(head) < 12:
            if head:
                stats.truncated = True
            return
        if head[:4] == _PCAPNG_MAGIC:  # a section header: its byte order mark first
            bom = head[8:12]
            endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">" if bom == b"\x1a\x2b\x3c\x4d" else ""
            if not endian:
                raise PcapError(f"{stats.path}: pcapng section with a bad byte-order mark")
            ifaces = []
        btype, blen = struct.unpack(endian + "II", head[:8])
        if blen < 12 or blen % 4:
            raise PcapError(f"{stats.path}: corrupt pcapng block (length {blen})")
        if blen > MAX_BLOCK_BYTES:
            raise PcapError(f"{stats.path}: corrupt pcapng block (type {btype}): length {blen}, "
                            f"more than the {MAX_BLOCK_BYTES} bytes a block may have")
        body = head[8:] + fh.read(blen - 12)
        if len(body) < blen - 8:
            stats.truncated = True
            return
        trailer = struct.unpack_from(endian + "I", body, len(body) - 4)[0]
        if trailer != blen:
            raise PcapError(f"{stats.path}: corrupt pcapng block (type {btype}): its leading "
                            f"length {blen} and trailing length {trailer} differ")
        body = body[:-4]
        if btype in (1, 2, 6) and len(body) < (8 if btype == 1 else 20):
            raise PcapError(f"{stats.path}: corrupt pcapng block (type {btype}, {blen} bytes)")
        if btype == 1:  # interface description
            if len(ifaces) >= MAX_INTERFACES:
                raise PcapError(f"{stats.path}: a pcapng section describes more than "
                                f"{MAX_INTERFACES} interfaces")
            ifaces.append(_idb(body, endian))
            name = LINK_NAMES.get(ifaces[-1][0], f"unsupported:{ifaces[-1][0]}")
            if name not in seen_links:
                seen_links.add(name)
                stats.link_types.append(name)
        elif btype in (6, 2):  # enhanced packet, obsolete packet block
            if btype == 6:
                iface, hi, lo, caplen, _ = struct.unpack_from(endian + "IIIII", body)
            else:
                iface, _, hi, lo, caplen, _ = struct.unpack_from(endian + "HHIIII", body)
            if iface >= len(ifaces):
                stats.skip("no_interface")
                continue
            link, num, den, off = ifaces[iface]
            ticks = (hi << 32) | lo
            yield link, ticks * num // den + off, body[20:20 + caplen]
        elif btype == 3:  # simple packet block: no timestamp, no use for a trace
            stats.packets += 1
            stats.skip("no_timestamp")


def packets(fh: BinaryIO, stats: ImportStats) -> Iterator[tuple[int | None, int, bytes]]:
    """(link type, t_ns, bytes) of every packet of the pcap or pcapng file ``fh``; sets
    ``stats.format`` and ``stats.link_types``; :class:`PcapError` for a file that is neither
    or whose lengths lie."""
    magic = fh.read(4)
    fh.seek(0)
    if magic in _PCAP_MAGICS:
        stats.format = "pcap"
        return _pcap_packets(fh, stats)
    if magic == _PCAPNG_MAGIC:
        stats.format = "pcapng"
        return _pcapng_packets(fh, stats)
    raise PcapError(f"{stats.path}: not a pcap or pcapng file (magic {magic.hex() or 'empty'})")


# -- link, IP, TCP -------------------------------------------------------------------------
def ip_of(link: int | None, buf: bytes) -> bytes | str:
    """The IP packet a link-layer frame carries, or the reason it carries none."""
    if link == LINK_ETHERNET:
        if len(buf) < 14:
            return "truncated_header"
        etype, pos = struct.unpack_from(">H", buf, 12)[0], 14
        tags = 0
        while etype in _VLAN and len(buf) >= pos + 4:
            tags += 1
            if tags > MAX_VLAN_TAGS:
                return "vlan_stack"
            etype = struct.unpack_from(">H", buf, pos + 2)[0]
            pos += 4
        return buf[pos:] if etype in (ETH_IP, ETH_IP6) else "not_ip"
    if link == LINK_SLL:
        if len(buf) < 16:
            return "truncated_header"
        return buf[16:] if struct.unpack_from(">H", buf, 14)[0] in (ETH_IP, ETH_IP6) else "not_ip"
    if link == LINK_SLL2:
        if len(buf) < 20:
            return "truncated_header"
        return buf[20:] if struct.unpack_from(">H", buf, 0)[0] in (ETH_IP, ETH_IP6) else "not_ip"
    if link in (LINK_NULL, LINK_LOOP):  # a 4-byte address family (its value differs by OS)
        return buf[4:] if len(buf) > 4 else "truncated_header"
    if link in (LINK_RAW, 12, 14, LINK_IPV4, LINK_IPV6):
        return buf
    return f"link_type_{link}"


def tcp_of(ip: bytes) -> tuple | str:
    """(src, dst, sport, dport, seq, ack, flags, payload) of a TCP segment, or why not."""
    if not ip:
        return "truncated_header"
    version = ip[0] >> 4
    if version == 4:
        if len(ip) < 20:
            return "truncated_header"
        ihl = (ip[0] & 0x0F) * 4
        if ihl < 20:
            return "truncated_header"
        total, frag, proto = struct.unpack_from(">H2xHxB", ip, 2)
        if proto != 6:
            return "not_tcp"
        if frag & 0x3FFF:  # MF set or an offset
            return "ip_fragment"
        src, dst = ip[12:16], ip[16:20]
        seg = ip[ihl:total] if total else ip[ihl:]  # total 0: TCP segmentation offload
    elif version == 6:
        if len(ip) < 40:
            return "truncated_header"
        plen, nxt = struct.unpack_from(">HB", ip, 4)
        src, dst = ip[8:24], ip[24:40]
        end = min(40 + plen, len(ip)) if plen else len(ip)  # plen 0: a jumbogram (BIG TCP)
        pos, walked = 40, 0
        while nxt in _IP6_EXT:  # by offset: one slice at the end, not one per header
            if pos + 8 > end:
                return "truncated_header"
            walked += 1
            if walked > MAX_IP6_EXT_HEADERS:
                return "ip6_ext_chain"
            nxt, pos = ip[pos], pos + (ip[pos + 1] + 1) * 8
        if nxt == 44:
            return "ip_fragment"
        if nxt != 6:
            return "not_tcp"
        seg = ip[pos:end]
    else:
        return "not_ip"
    if len(seg) < 20:
        return "truncated_header"
    sport, dport, seq, ack, off, flags = struct.unpack_from(">HHIIBB", seg)
    if off >> 4 < 5:  # a data offset inside the fixed header
        return "truncated_header"
    return src, dst, sport, dport, seq, ack, flags, seg[(off >> 4) * 4:]
