"""pcap/pcapng import: synthetic captures (written by the module's own helper, with dpkt)
of real bunqueue and quicx frames, segmented, reordered, repeated, lost, reset, started
mid-connection, wrapped around 2^32, interleaved and over IPv6, import to exactly the bytes
that were sent; a lost segment is a recorded hole; bad input is a one-line PcapError; and a
capture of some traffic gives the records the tap's analyzer and recorder write of it."""

from __future__ import annotations

import json
import random
import struct

import dpkt
import pytest

from queuewire.codecs.bunqueue import encode_frame
from queuewire.codecs.quicx import QuicxEncoder
from queuewire.trace.pcap import (
    SEGMENT_OVERHEAD,
    PcapError,
    Segment,
    conversation,
    import_pcap,
    write_pcap,
    write_segments,
)
from queuewire.traffic.analyzer import Analyzer
from queuewire.traffic.record import Recorder
from queuewire.traffic.trace_format import read_dir, streams, trace_files

PORT = 6789
T0 = 1_700_000_000_123_456_789  # not a float-exact number of seconds


def _bunqueue(n: int = 6, tag: str = "r") -> tuple[bytes, bytes]:
    requests = b"".join(encode_frame({"cmd": "Ping", "reqId": f"{tag}{i}"}) for i in range(n))
    replies = b"".join(encode_frame({"ok": True, "reqId": f"{tag}{i}"}) for i in range(n))
    return requests, replies


def _chunks(requests: bytes, replies: bytes, t: int = T0) -> list[tuple[str, bytes, int]]:
    return [("c2s", requests, t), ("s2c", replies, t + 1000)]


def _import(tmp_path, segments_or_exchanges, *, protocol="bunqueue", name="cap", fmt="pcap",
            link="ethernet", **kw):
    path = tmp_path / f"{name}.{fmt}"
    if segments_or_exchanges and isinstance(segments_or_exchanges[0], Segment):
        write_segments(path, segments_or_exchanges, fmt=fmt, link=link)
    else:
        write_pcap(path, segments_or_exchanges, port=PORT, fmt=fmt, link=link)
    out = tmp_path / f"{name}-trace"
    stats = import_pcap(path, port=PORT, out_dir=out, protocol=protocol, **kw)
    return stats, out


def _held(out) -> dict[tuple[int, str], bytes]:
    """Each direction's bytes as the capture held them: frame and gap records, missing gaps
    (a count, not stream bytes) left out."""
    got: dict[tuple[int, str], bytes] = {}
    for rec in read_dir(out):
        if rec.type == "frame" or (rec.type == "gap" and rec.detail != "missing"):
            key = (rec.conn_id, rec.direction)
            got[key] = got.get(key, b"") + rec.payload
    return got


def _data_segments(segments: list[Segment], direction_port: int) -> list[int]:
    """Indexes of the payload-carrying segments sent to ``direction_port``."""
    return [i for i, s in enumerate(segments) if s.payload and s.dst[1] == direction_port]


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("link", ["ethernet", "sll", "sll2", "null", "loop", "raw"])
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_every_format_and_link_type_imports_exactly(tmp_path, fmt, link, ipv6):
    requests, replies = _bunqueue()
    path = write_pcap(tmp_path / "c", [_chunks(requests, replies)], port=PORT, fmt=fmt,
                      link=link, ipv6=ipv6, mss=9)
    out = tmp_path / "t"
    stats = import_pcap(path, port=PORT, out_dir=out, protocol="bunqueue")
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert stats.format == fmt and stats.connections == 1 and stats.holes == 0
    assert stats.frames == {"c2s": 6, "s2c": 6} and stats.gaps == 0
    assert stats.bytes == {"c2s": len(requests), "s2c": len(replies)}
    assert stats.close_reasons == {"eof": 1} and not stats.truncated
    recs = list(read_dir(out))
    assert [r.type for r in recs[:1] + recs[-3:]] == ["open", "eof", "eof", "close"]
    opened = recs[0].json()
    client, server = ("[fd00::1]", "[fd00::2]") if ipv6 else ("10.0.0.1", "10.0.0.2")
    assert opened == {"client": f"{client}:40001", "upstream": f"{server}:{PORT}", "listen": ""}
    assert recs[0].t_ns == T0  # nanoseconds, exact
    assert {r.t_ns for r in recs if r.type == "frame" and r.direction == "s2c"} == {T0 + 1000}
    assert recs[-1].json() == {"reason": "eof"}


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_microsecond_timestamps_are_exact(tmp_path, fmt):
    requests, replies = _bunqueue(2)
    path = write_segments(tmp_path / "c", conversation(_chunks(requests, replies), port=PORT),
                          fmt=fmt, nano=False)
    out = tmp_path / "t"
    import_pcap(path, port=PORT, out_dir=out, protocol="bunqueue")
    times = {r.t_ns for r in read_dir(out)}
    assert times == {T0 // 1000 * 1000, (T0 + 1000) // 1000 * 1000}


def test_quicx_one_byte_segments(tmp_path):
    enc = QuicxEncoder("quicx/v1")
    requests = enc.submit("email", b"hello") + enc.ready() + enc.done(1) + enc.heartbeat()
    replies = enc.ok(1) + enc.task(1, "email", b"hello") + enc.pong()
    path = write_pcap(tmp_path / "q.pcapng", [_chunks(requests, replies)], port=PORT,
                      fmt="pcapng", mss=1)
    out = tmp_path / "t"
    stats = import_pcap(path, port=PORT, out_dir=out, protocol="quicx", profile="quicx/v1")
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert stats.frames == {"c2s": 4, "s2c": 3}
    assert stats.tcp_packets == 3 + len(requests) + len(replies) + 2 + 3  # 2 pure ACKs


def test_out_of_order_segments_are_put_back_in_order(tmp_path):
    requests, replies = _bunqueue(10)
    segments = conversation(_chunks(requests, replies), port=PORT, mss=5)
    idx = _data_segments(segments, PORT)
    moved = [segments[i] for i in idx]
    random.Random(7).shuffle(moved)
    for i, s in zip(idx, moved, strict=True):
        segments[i] = s
    stats, out = _import(tmp_path, segments)
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert stats.frames == {"c2s": 10, "s2c": 10} and stats.holes == 0


def test_retransmitted_and_overlapping_bytes_are_delivered_once(tmp_path):
    requests, replies = _bunqueue(8)
    segments = conversation(_chunks(requests, replies), port=PORT, mss=6)
    idx = _data_segments(segments, PORT)
    first, second, third = (segments[i] for i in idx[2:5])
    last = segments[idx[-1]]
    extra = [
        Segment(first.t_ns, first.src, first.dst, first.seq, first.ack, "PA", first.payload),
        # overlapping: the tail of one segment and the head of the next, in one
        Segment(first.t_ns, first.src, first.dst, (first.seq + 3) % 2**32, first.ack, "PA",
                first.payload[3:] + second.payload[:4]),
        # a larger repacketisation spanning three segments, sent before the third
        Segment(first.t_ns, first.src, first.dst, second.seq, first.ack, "PA",
                second.payload + third.payload),
    ]
    at = idx[3]
    segments[at:at] = extra
    segments.insert(idx[-1] + len(extra) + 1, segments[idx[-1] + len(extra)])  # last, twice
    segments.insert(1, segments[0])  # the SYN, twice: still one connection
    stats, out = _import(tmp_path, segments)
    assert stats.connections == 1
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    # first again, 3 of the overlap, 4 of the repacketisation, second, third, the last again
    assert stats.duplicate_bytes == 6 + 3 + 4 + 6 + 6 + len(last.payload)
    assert stats.frames == {"c2s": 8, "s2c": 8} and stats.holes == 0


def test_a_dropped_segment_is_a_hole_and_framing_is_lost_after_it(tmp_path):
    requests, replies = _bunqueue(6)
    frame = len(requests) // 6
    segments = conversation(_chunks(requests, replies), port=PORT, mss=7)
    idx = _data_segments(segments, PORT)
    lost = idx[4]  # bytes 28..34: inside the second frame
    dropped = segments.pop(lost)
    stats, out = _import(tmp_path, segments)
    recs = [r for r in read_dir(out) if r.direction == "c2s"]
    kinds = [(r.type, r.detail) for r in recs]
    assert kinds[0] == ("frame", None)  # the first frame was whole before the hole
    assert kinds[1:3] == [("gap", "truncated"), ("gap", "missing")]
    assert json.loads(recs[2].payload) == {"missing_bytes": len(dropped.payload)}
    assert recs[1].payload == requests[frame:28]  # the frame the hole cut
    assert all(k == ("gap", "framing_lost") for k in kinds[3:-1]) and kinds[-1] == ("eof", None)
    assert _held(out) == {(1, "c2s"): requests[:28] + requests[35:], (1, "s2c"): replies}
    assert stats.holes == 1 and stats.missing_bytes == {"c2s": 7, "s2c": 0}
    assert stats.frames == {"c2s": 1, "s2c": 6}
    capture_gaps = [f for f in stats.summary["findings"] if f["kind"] == "capture_gap"]
    assert len(capture_gaps) == 1 and capture_gaps[0]["level"] == "INFO"
    assert capture_gaps[0]["direction"] == "c2s"
    assert stats.close_reasons == {"eof": 1}  # the hole was given up on at the peer's ACK


def test_a_hole_is_given_up_on_at_the_end_of_the_capture(tmp_path):
    requests, _ = _bunqueue(4)
    segments = conversation([("c2s", requests, T0)], port=PORT, mss=10, acks=False, close=None)
    idx = _data_segments(segments, PORT)
    segments.pop(idx[1])
    stats, out = _import(tmp_path, segments)
    gaps = [r.detail for r in read_dir(out) if r.type == "gap"]
    assert gaps[:2] == ["truncated", "missing"] and set(gaps[2:]) == {"framing_lost"}
    assert _held(out) == {(1, "c2s"): requests[:10] + requests[20:]}
    assert stats.holes == 1 and stats.close_reasons == {"capture_ended": 1}
    assert list(read_dir(out))[-1].json() == {"reason": "capture_ended"}


def test_a_hole_is_given_up_on_when_the_buffer_is_full(tmp_path):
    requests, _ = _bunqueue(20)
    chunks = [("c2s", requests[i:i + 10], T0 + i) for i in range(0, len(requests), 10)]
    segments = conversation(chunks, port=PORT, acks=False, close=None)
    segments.pop(_data_segments(segments, PORT)[0])
    # a buffered segment costs its bytes and SEGMENT_OVERHEAD: room for six 10-byte ones
    stats, out = _import(tmp_path, segments, max_buffer=6 * (10 + SEGMENT_OVERHEAD) + 4)
    assert stats.holes == 1 and stats.missing_bytes["c2s"] == 10
    assert _held(out) == {(1, "c2s"): requests[10:]}
    missing = next(r for r in read_dir(out) if r.detail == "missing")
    assert missing.t_ns == T0 + 70  # when the seventh segment waited behind it, not at the end
    assert stats.close_reasons == {"capture_ended": 1}


def test_a_reset_closes_the_connection(tmp_path):
    requests, replies = _bunqueue(3)
    path = write_pcap(tmp_path / "r.pcap", [_chunks(requests, replies)], port=PORT, close="rst")
    out = tmp_path / "t"
    stats = import_pcap(path, port=PORT, out_dir=out, protocol="bunqueue")
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    recs = list(read_dir(out))
    assert recs[-1].type == "close" and recs[-1].json() == {"reason": "reset"}
    assert not [r for r in recs if r.type == "eof"] and stats.close_reasons == {"reset": 1}


def test_a_connection_without_its_handshake_starts_at_its_first_packet(tmp_path):
    requests, replies = _bunqueue(4)
    segments = conversation(_chunks(requests, replies), port=PORT, mss=10)
    stats, out = _import(tmp_path, segments[3:], name="a")  # no SYN: starts on a frame
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert stats.frames == {"c2s": 4, "s2c": 4} and stats.close_reasons == {"eof": 1}
    # the capture starts inside a frame: framing is off, but every captured byte is there
    stats, out = _import(tmp_path, segments[4:], name="b")
    assert _held(out) == {(1, "c2s"): requests[10:], (1, "s2c"): replies}
    assert stats.frames["c2s"] < 4 and stats.holes == 0


def test_sequence_numbers_wrap_around(tmp_path):
    requests, replies = _bunqueue(6)
    segments = conversation(_chunks(requests, replies), port=PORT, mss=4,
                            isn=(2**32 - 50, 2**32 - 1))
    assert any(s.seq < 100 for s in segments) and any(s.seq > 2**32 - 100 for s in segments)
    idx = _data_segments(segments, PORT)
    segments[idx[10]], segments[idx[14]] = segments[idx[14]], segments[idx[10]]  # across it
    stats, out = _import(tmp_path, segments)
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert stats.close_reasons == {"eof": 1} and stats.holes == 0


def test_interleaved_connections_are_numbered_by_first_packet(tmp_path):
    exchanges, sent = [], []
    for n, start in ((3, 300), (2, 100), (4, 200)):  # conn ids: second, third, first
        requests, replies = _bunqueue(n, tag=f"c{start}-")
        sent.append((requests, replies))
        exchanges.append([("c2s", requests[:10], T0 + start), ("s2c", b"", T0 + start),
                          ("c2s", requests[10:], T0 + start + 250),
                          ("s2c", replies, T0 + start + 500)])
    stats, out = _import(tmp_path, exchanges)
    got = streams(out)
    opens = {r.conn_id: r.json()["client"] for r in read_dir(out) if r.type == "open"}
    assert opens == {1: "10.0.0.1:40002", 2: "10.0.0.1:40003", 3: "10.0.0.1:40001"}
    for conn_id, (requests, replies) in zip((3, 1, 2), sent, strict=True):
        assert got[(conn_id, "c2s")] == requests and got[(conn_id, "s2c")] == replies
    assert stats.connections == 3 and stats.close_reasons == {"eof": 3}
    # records of the interleaved connections still land in one shard per connection
    assert len(trace_files(out)) == 3


def test_a_reused_four_tuple_is_a_new_connection(tmp_path):
    requests, replies = _bunqueue(2)
    first = conversation(_chunks(requests, replies), port=PORT, close=None)
    again = conversation(_chunks(replies[:5], b"", T0 + 10_000), port=PORT, isn=(77, 88))
    stats, out = _import(tmp_path, first + again)
    assert stats.connections == 2
    assert stats.close_reasons == {"capture_ended": 1, "eof": 1}
    assert streams(out)[(2, "c2s")] == replies[:5]


def test_host_selects_the_server_and_other_traffic_is_skipped(tmp_path):
    requests, replies = _bunqueue(2)
    mine = conversation(_chunks(requests, replies), port=PORT, server_host="10.0.0.2")
    other = conversation(_chunks(replies, requests), port=PORT, server_host="10.0.0.9",
                         client=("10.0.0.1", 40009))
    elsewhere = conversation(_chunks(requests, replies), port=PORT + 1)
    stats, out = _import(tmp_path, mine + other + elsewhere, host="10.0.0.2")
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert stats.skipped["other_host"] == len(other)
    assert stats.skipped["other_port"] == len(elsewhere)


def test_small_rotation_keeps_every_byte(tmp_path):
    requests, replies = _bunqueue(30)
    stats, out = _import(tmp_path, [_chunks(requests, replies)], rotate_bytes=300)
    assert len(trace_files(out)) > 3 and stats.files == len(trace_files(out))
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}


def test_pcapng_sections_with_their_own_link_types_and_resolutions(tmp_path):
    requests, replies = _bunqueue(4)
    segments = conversation([("c2s", requests, T0), ("s2c", replies, T0 + 1000)], port=PORT,
                            mss=16)
    half = len(segments) // 2
    first = write_segments(tmp_path / "a.pcapng", segments[:half], fmt="pcapng")
    second = write_segments(tmp_path / "b.pcapng", segments[half:], fmt="pcapng", link="raw",
                            nano=False)
    path = tmp_path / "both.pcapng"
    path.write_bytes(first.read_bytes() + second.read_bytes())
    out = tmp_path / "t"
    stats = import_pcap(path, port=PORT, out_dir=out, protocol="bunqueue")
    assert stats.link_types == ["ethernet", "raw"]
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}
    assert list(read_dir(out))[-1].t_ns == (T0 + 1000) // 1000 * 1000


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_capture_cut_short_ends_at_its_last_whole_packet(tmp_path, fmt):
    requests, replies = _bunqueue(3)
    path = write_pcap(tmp_path / f"c.{fmt}", [_chunks(requests, replies)], port=PORT, fmt=fmt)
    data = path.read_bytes()
    path.write_bytes(data[:-30])
    out = tmp_path / "t"
    stats = import_pcap(path, port=PORT, out_dir=out, protocol="bunqueue")
    assert stats.truncated
    assert streams(out) == {(1, "c2s"): requests, (1, "s2c"): replies}


def test_bad_input_is_a_one_line_pcap_error(tmp_path):
    def refused(path, **kw):
        out = tmp_path / "never"
        with pytest.raises(PcapError) as info:
            import_pcap(path, port=kw.pop("port", PORT), out_dir=out, protocol="bunqueue", **kw)
        assert "\n" not in str(info.value) and not out.exists()
        return str(info.value)

    text = tmp_path / "notes.txt"
    text.write_text("not a capture at all\n")
    assert "not a pcap or pcapng file" in refused(text)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    assert "not a pcap or pcapng file" in refused(empty)
    assert "No such file" in refused(tmp_path / "missing.pcap")
    odd = tmp_path / "odd.pcap"
    with open(odd, "wb") as fh:
        dpkt.pcap.Writer(fh, linktype=147).writepkt(b"\x00" * 40, 1.0)  # DLT_USER0
    assert "unsupported link type 147" in refused(odd)
    requests, replies = _bunqueue(1)
    path = write_pcap(tmp_path / "c.pcap", [_chunks(requests, replies)], port=PORT)
    assert f"no TCP packets on port {PORT + 1}" in refused(path, port=PORT + 1)
    assert "is not an IP address" in refused(path, host="server")
    assert "not a bunqueue profile" in refused(path, profile="quicx/v1")
    assert "nope" in refused(path, profile="nope/1")
    bad_ng = tmp_path / "bad.pcapng"
    bad_ng.write_bytes(b"\x0a\x0d\x0d\x0a" + struct.pack("<I", 28) + b"\x00" * 20)
    assert "pcapng" in refused(bad_ng)


@pytest.mark.parametrize("protocol", ["bunqueue", "quicx"])
def test_a_capture_records_what_the_tap_records(tmp_path, protocol):
    """The same chunks through the tap's analyzer and recorder, and through a capture:
    the same records, times included."""
    if protocol == "bunqueue":
        requests, replies = _bunqueue(5)
        requests += b"\x00\x00\x00\x02\xc1\xc1"  # garbled MessagePack
        requests += encode_frame({"cmd": "PUSH", "queue": "bad name!", "data": {}, "reqId": "x"})
        replies += encode_frame({"ok": False, "error": "Invalid command format"})
        tail = b"\x00\x00\x00\x10abc"  # a frame cut by the FIN
        profile = "bunqueue/v2"
    else:
        enc = QuicxEncoder("quicx/v1")
        requests = enc.submit("t", b"x") + enc.frame(0x7E, b"??") + enc.ready()
        replies = enc.ok(1) + enc.task(1, "t", b"x")
        tail = enc.submit("t", b"y")[:4]
        profile = "quicx/v1"
    chunks = [("c2s", requests[:17], T0), ("c2s", requests[17:], T0 + 10),
              ("s2c", replies, T0 + 20), ("c2s", tail, T0 + 30)]
    tap_dir = tmp_path / "tap"
    recorder = Recorder(tap_dir, protocol=protocol, profile=profile, run="R")
    analyzer = Analyzer(protocol, profile, sink=recorder.write)
    analyzer.open(1, T0, client="10.0.0.1:40001", upstream=f"10.0.0.2:{PORT}", listen="")
    for direction, data, t in chunks:
        analyzer.feed(1, direction, data, t)
    end = chunks[-1][2]
    analyzer.eof(1, "c2s", end)
    analyzer.eof(1, "s2c", end)
    analyzer.close(1, end, "eof")
    recorder.close()

    path = write_pcap(tmp_path / "c.pcapng", [chunks], port=PORT, fmt="pcapng", mss=5)
    stats = import_pcap(path, port=PORT, out_dir=tmp_path / "imported", protocol=protocol,
                        profile=profile, run="R")

    def records(directory):
        return [(r.type, r.direction, r.detail, r.conn_id, r.t_ns, r.payload)
                for r in read_dir(directory)]

    assert records(tmp_path / "imported") == records(tap_dir)
    assert any(r[2] == "truncated" for r in records(tap_dir))
    tap_summary = analyzer.summary()
    assert stats.summary["totals"] == tap_summary["totals"]
    assert stats.summary["requirements"] == tap_summary["requirements"]
    assert [p.name for p in trace_files(tmp_path / "imported")] == \
        [p.name for p in trace_files(tap_dir)]


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_corrupted_capture_is_imported_or_refused_never_a_traceback(tmp_path, fmt):
    requests, replies = _bunqueue(4)
    base = write_pcap(tmp_path / f"base.{fmt}", [_chunks(requests, replies)], port=PORT,
                      fmt=fmt, mss=11).read_bytes()
    rng = random.Random(fmt)
    refused = imported = 0
    for i in range(150):
        data = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            if rng.random() < 0.7:
                data[at] = rng.randrange(256)
            else:
                del data[at:at + rng.randint(1, 40)]
        path = tmp_path / f"m{i}.{fmt}"
        path.write_bytes(bytes(data))
        try:
            import_pcap(path, port=PORT, out_dir=tmp_path / f"o{i}", protocol="bunqueue")
            imported += 1
        except PcapError as exc:
            assert "\n" not in str(exc)
            refused += 1
    assert imported and refused
