"""Issue 22, item 10 (untrusted files), `queuewire trace import-pcap`: hostile captures are
DATA. Each capture is built in the test (struct, or the module's own synthetic-capture
writer), imported through the CLI entry point under a time guard and a memory guard: a
4 MiB IPv6 packet of chained extension headers parses in well under a second (it took 22 s),
lengths that lie (a pcap caplen, a pcapng block length) are one-line errors without the
declared allocation, a pcapng of many interfaces is linear, and sequence numbers that jump
by 2^31 make no buffer or record as large as they declare."""

from __future__ import annotations

import ipaddress
import resource
import struct
import subprocess
import sys
from pathlib import Path

from hostile_guards import FAST_S, MEMORY_BYTES, assert_refused, run_cli

import queuewire.trace.pcap  # noqa: F401  (up front: the memory guard measures a run, not imports)
from queuewire.codecs.bunqueue import encode_frame
from queuewire.trace.pcap import Segment, conversation, import_pcap, write_pcap, write_segments
from queuewire.traffic.trace_format import read_dir, streams, trace_files

PORT = 6789
T0 = 1_700_000_000_000_000_000
CLIENT, SERVER = ("fd00::1", 40001), ("fd00::2", PORT)
PCAP_LE = {b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"}


def _pings(n: int = 3) -> tuple[bytes, bytes]:
    return (b"".join(encode_frame({"cmd": "Ping", "reqId": str(i)}) for i in range(n)),
            b"".join(encode_frame({"ok": True, "reqId": str(i)}) for i in range(n)))


def _import(path: Path, out: Path):
    return run_cli(["trace", "import-pcap", str(path), "--port", str(PORT), "--protocol",
                    "bunqueue", "--out", str(out)])


def _append_packets(path: Path, packets: list[bytes]) -> None:
    """Append packet records to a classic pcap written by ``write_pcap`` (its byte order)."""
    data = path.read_bytes()
    endian = "<" if data[:4] in PCAP_LE else ">"
    with open(path, "ab") as fh:
        for i, pkt in enumerate(packets):
            fh.write(struct.pack(endian + "IIII", T0 // 10**9 + 1, i, len(pkt), len(pkt)) + pkt)


def _ipv6_ext_chain(total: int) -> bytes:
    """An Ethernet frame of one IPv6 packet (a jumbogram: payload length 0) whose ``total``
    bytes are hop-by-hop headers of 8 bytes each, chained, then a TCP SYN to the port."""
    eth = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x86\xdd"
    src, dst = (ipaddress.ip_address(h).packed for h in (CLIENT[0], SERVER[0]))
    ip6 = struct.pack(">IHBB", 0x6000_0000, 0, 0, 64) + src + dst
    pad = b"\x01\x04\x00\x00\x00\x00"                    # PadN: the rest of the 8 bytes
    n = total // 8
    chain = (b"\x00\x00" + pad) * (n - 1) + b"\x06\x00" + pad
    tcp = struct.pack(">HHIIBBHHH", CLIENT[1] + 1, PORT, 1, 0, 0x50, 0x02, 65535, 0, 0)
    return eth + ip6 + chain + tcp


def test_a_4_mib_chain_of_ipv6_extension_headers_parses_in_well_under_a_second(tmp_path):
    """Issue 22 item 10: chained IPv6 extension headers were quadratic (one copy of the rest
    of the packet per header: 22 s for 4 MB); the chain is walked by offset and bounded."""
    requests, replies = _pings()
    path = write_pcap(tmp_path / "c.pcap", [[("c2s", requests, T0), ("s2c", replies, T0 + 1)]],
                      port=PORT, ipv6=True)
    _append_packets(path, [_ipv6_ext_chain(4 << 20)])
    run = _import(path, tmp_path / "rec")
    assert run.result.exit_code == 0, run.shown
    assert run.seconds < 1.0, f"{run.seconds:.2f} s to import a 4 MiB packet"
    assert "ip6_ext_chain" in run.result.output, run.shown   # the packet, skipped and counted
    assert streams(tmp_path / "rec") == {(1, "c2s"): requests, (1, "s2c"): replies}


def _pcap_header(link: int = 1) -> bytes:
    return struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, link)


def _shb() -> bytes:
    return struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)


def _idb(link: int = 1) -> bytes:
    return struct.pack("<IIHHII", 1, 20, link, 0, 262144, 20)


def test_a_pcap_caplen_that_lies_is_refused_without_reading_it(tmp_path):
    """Issue 22 item 10: a record declaring a 4 GiB caplen made the reader allocate 4 GiB."""
    path = tmp_path / "lie.pcap"
    path.write_bytes(_pcap_header() + struct.pack("<IIII", 1, 0, 0xFFFF_FFF0, 60) + b"\x00" * 60)
    assert_refused(_import(path, tmp_path / "rec"), "caplen", str(0xFFFF_FFF0))
    assert not (tmp_path / "rec").exists()


def test_a_pcapng_block_length_that_lies_is_refused_without_reading_it(tmp_path):
    """Issue 22 item 10: a block declaring 4 GiB made the reader allocate 4 GiB."""
    path = tmp_path / "lie.pcapng"
    path.write_bytes(_shb() + _idb() + struct.pack("<II", 6, 0xFFFF_FFF0) + b"\x00" * 64)
    assert_refused(_import(path, tmp_path / "rec"), "block", str(0xFFFF_FFF0))


def test_a_pcapng_block_whose_two_lengths_differ_is_refused(tmp_path):
    """Issue 22 item 10: a block length that lies (the leading and trailing copies differ)
    is a one-line error, not a misparse of whatever follows."""
    requests, replies = _pings()
    good = write_pcap(tmp_path / "good.pcapng", [[("c2s", requests, T0), ("s2c", replies, T0)]],
                      port=PORT, fmt="pcapng").read_bytes()
    # the first enhanced packet block after the section and interface blocks: shorten it
    at = good.index(struct.pack("<I", 6))
    blen = struct.unpack_from("<I", good, at + 4)[0]
    lied = good[:at + 4] + struct.pack("<I", blen - 8) + good[at + 8:]
    path = tmp_path / "lie.pcapng"
    path.write_bytes(lied)
    assert_refused(_import(path, tmp_path / "rec"), "block", "length")


def test_a_pcapng_of_many_interfaces_is_linear_and_bounded(tmp_path):
    """Issue 22 item 10: every interface block grew a list that each later one searched
    (quadratic in distinct link types) and the interface table had no bound."""
    path = tmp_path / "many.pcapng"
    path.write_bytes(_shb() + b"".join(_idb(i % 65536) for i in range(70_000)))
    assert_refused(_import(path, tmp_path / "rec"), "interface")


def test_sequence_numbers_that_jump_make_nothing_as_large_as_they_declare(tmp_path):
    """Issue 22 item 10: a segment 2^31 - 1 bytes ahead, a FIN further still and an ACK 1 GiB
    ahead declare holes of GiBs: they are recorded as counts (a few bytes of JSON each), the
    import allocates and writes in proportion to the bytes the capture holds."""
    requests, replies = _pings()
    segs = conversation([("c2s", requests, T0), ("s2c", replies, T0 + 1)], port=PORT,
                        client=("10.0.0.1", 40001), server_host="10.0.0.2", close=None)
    c_next = max(s.seq + len(s.payload) for s in segs if s.src[1] == 40001)
    s_next = max(s.seq + len(s.payload) for s in segs if s.src[1] == PORT)
    cli, srv = ("10.0.0.1", 40001), ("10.0.0.2", PORT)
    far = [Segment(T0 + 2, cli, srv, (c_next + 2**31 - 1) % 2**32, s_next, "PA", b"x" * 100),
           Segment(T0 + 3, srv, cli, s_next, (c_next + 2**30) % 2**32, "A"),
           Segment(T0 + 4, srv, cli, (s_next + 2**31 - 2) % 2**32, c_next, "FA", b"y")]
    path = write_segments(tmp_path / "jump.pcap", segs + far)
    run = _import(path, tmp_path / "rec")
    assert run.result.exit_code == 0, run.shown
    assert run.seconds < FAST_S and run.peak < MEMORY_BYTES, (run.seconds, run.peak >> 20)
    written = sum(f.stat().st_size for f in trace_files(tmp_path / "rec"))
    assert written < 4 * path.stat().st_size, f"{written} bytes of trace files"
    missing = [r for r in read_dir(tmp_path / "rec") if r.detail == "missing"]
    assert missing and all(len(r.payload) < 64 for r in missing)
    assert sum(r.json()["missing_bytes"] for r in missing) >= 2**30


def test_many_tiny_segments_ahead_of_a_hole_count_their_overhead(tmp_path):
    """Issue 22 item 10: the out-of-order buffer counted payload bytes only, so one-byte
    segments (each a heap entry of ~150 bytes) could hold ~150 times ``max_buffer``; each
    now counts its overhead too and the hole is given up on before the capture ends."""
    data = encode_frame({"cmd": "Ping", "reqId": "x" * 300})
    segs = conversation([("c2s", data, T0)], port=PORT, mss=1, acks=False, close=None)
    first = next(i for i, s in enumerate(segs) if s.payload)
    segs = segs[:first] + segs[first + 1:]                       # the first byte is lost
    for i, s in enumerate(segs):
        s.t_ns = T0 + i                                           # a time per segment
    path = write_segments(tmp_path / "tiny.pcap", segs)
    stats = import_pcap(path, port=PORT, out_dir=tmp_path / "rec", protocol="bunqueue",
                        max_buffer=16 * 1024)
    (hole,) = [r for r in read_dir(tmp_path / "rec") if r.detail == "missing"]
    assert hole.t_ns < segs[-1].t_ns, "the hole waited for the end of the capture"
    assert stats.missing_bytes["c2s"] == 1


def test_a_capture_of_more_live_connections_than_open_files_imports(tmp_path):
    """Issue 22 item 10: the recorder kept one open file (and a 1 MiB buffer) per live
    connection, so a capture of more concurrent connections than the descriptor limit (1024
    by default) failed with "Too many open files"; it keeps a bounded set open and reopens
    the others to append. Here the limit is lowered to 200 for 300 live connections."""
    requests, replies = _pings(1)
    exchanges = [[("c2s", requests, T0 + i), ("s2c", replies, T0 + 10_000 + i)]
                 for i in range(300)]
    path = write_pcap(tmp_path / "many.pcap", exchanges, port=PORT, close=None)

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
    run = subprocess.run([str(Path(sys.executable).with_name("queuewire")), "trace",
                          "import-pcap", str(path), "--port", str(PORT), "--protocol",
                          "bunqueue", "--out", str(tmp_path / "rec")], check=False,
                         capture_output=True, text=True, timeout=60, preexec_fn=low_limit)
    assert run.returncode == 0, run.stdout + run.stderr
    got = streams(tmp_path / "rec")
    assert len(got) == 600 and set(got.values()) == {requests, replies}
