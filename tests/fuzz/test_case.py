"""The case's write plan: one connection's splits and pauses, several connections'
interleaved writes, each connection's share, frames dropped with their connections, and the
transcript form both ways (old transcripts, without the new fields, still read)."""

from __future__ import annotations

import pytest

from queuewire.fuzz.case import Case, read_transcript, write_transcript

FRAMES = [b"aaaa", b"bb", b"cccccc"]


def test_one_connection_writes_follow_splits_and_pauses():
    case = Case("bunqueue", "bunqueue/v2", FRAMES, splits=[3, 5], pauses=[10, 20])
    assert case.connections == 1
    assert case.writes() == [(0, b"aaa", 0.01), (0, b"abbcc", 0.02), (0, b"cccc", 0.0)]
    assert b"".join(c for _, c, _ in case.writes()) == case.stream
    assert case.pause_seconds == pytest.approx(0.03)


def test_interleaved_writes_keep_each_connections_order_and_flush_the_rest():
    # frame 0 and 2 on connection 0, frame 1 on connection 1; connection 0's first frame is
    # cut around connection 1's write
    case = Case("bunqueue", "bunqueue/v2", FRAMES, splits=[2, 1, 99], split_conns=[0, 1, 7],
                conns=[0, 1, 0], pauses=[5])
    assert case.connections == 2
    writes = case.writes()
    assert writes == [(0, b"aa", 0.005), (1, b"b", 0.0), (0, b"aacccccc", 0.0), (1, b"b", 0.0)]
    for n in range(2):
        assert b"".join(c for k, c, _ in writes if k == n) == case.sub_case(n).stream
    assert case.sub_case(0).frames == [b"aaaa", b"cccccc"]
    assert case.sub_case(1).frames == [b"bb"] and case.sub_case(1).connections == 1


def test_dropping_frames_drops_their_connections():
    case = Case("bunqueue", "bunqueue/v2", FRAMES, conns=[1, 0, 1], splits=[1],
                split_conns=[1])
    small = case.drop_frames(1, 1)
    assert small.frames == [b"aaaa", b"cccccc"] and small.conns == [1, 1]
    assert small.connections == 2 and small.sub_case(0).frames == []
    one = case.drop_frames(0, 1).drop_frames(1, 1)
    assert one.frames == [b"bb"] and one.conns == [] and one.connections == 1
    assert case.frames == FRAMES  # a copy: the case itself is unchanged


def test_transcripts_round_trip_and_old_ones_still_read(tmp_path):
    case = Case("bunqueue", "bunqueue/v2", FRAMES, [2, 3], True, ["interleave:2"], 9, 41,
                pauses=[1, 1], conns=[0, 1, 1], split_conns=[1, 0])
    path = str(tmp_path / "t.json")
    write_transcript(path, case, [], [[{"ok": True}], []])
    again, doc = read_transcript(path)
    assert again == case and again.writes() == case.writes()
    old = {k: v for k, v in case.as_dict().items()
           if k not in ("pauses", "conns", "split_conns")}
    plain = Case.from_dict(old)
    assert plain.connections == 1 and plain.pauses == [] and plain.stream == case.stream
    assert "conns" not in plain.as_dict() and "pauses" not in plain.as_dict()


def test_a_transcript_with_connections_that_do_not_fit_its_frames_is_refused():
    bad = Case("bunqueue", "bunqueue/v2", FRAMES).as_dict() | {"conns": [0, 1]}
    with pytest.raises(ValueError):
        Case.from_dict(bad)
