"""What a recording keeps of a credential (nothing: stars of its length, the frame still frames
as the traffic did), and what a peer's made-up command names can cost the analyzer (a bounded
number of per-command rows)."""

from __future__ import annotations

import msgpack
import pytest

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.spec import load_profile
from queuewire.traffic import trace_format as trace
from queuewire.traffic.analyzer import MAX_OTHER_COMMANDS, OTHER_COMMANDS, Analyzer
from queuewire.traffic.record import Recorder
from queuewire.traffic.redact import blank

TOKEN = "tap-s3cret-token"
SECRET = "hook-signing-s3cret"


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def test_every_credential_of_the_spec_is_marked_and_nothing_else():
    commands = load_profile("bunqueue/v2").model.commands
    marked = {name: c.secret_fields for name, c in commands.items() if c.secret_fields}
    assert marked == {"Auth": ("token",), "AddWebhook": ("secret",)}


@pytest.mark.parametrize("size", [5, 31, 32, 255, 256, 70_000])
def test_blank_overwrites_a_string_behind_any_header_and_keeps_the_length(size):
    value = ("é" + "k" * (size - 1)).encode()       # not ASCII: bytes, not characters
    str32 = b"\xdb" + len(value).to_bytes(4, "big") + value   # a header longer than needed
    for encoded in (msgpack.packb(value.decode()), str32):
        raw = b"\x81\xa5token" + encoded
        out = blank(raw, [value])
        assert len(out) == len(raw)
        assert value not in out
        assert msgpack.unpackb(out) == {"token": "*" * len(value)}
        assert out[:len(raw) - len(value)] == raw[:len(raw) - len(value)]   # header kept


def test_blank_leaves_bytes_that_are_not_the_value_of_a_string():
    # the token's bytes inside a longer string (no header of their length before them) stay
    raw = msgpack.packb({"cmd": "Auth", "token": "abc", "note": "xxabcxx"})
    out = blank(raw, [b"abc"])
    assert msgpack.unpackb(out) == {"cmd": "Auth", "token": "***", "note": "xxabcxx"}


def _recorded(tmp_path, c2s: list[bytes]) -> list[trace.Record]:
    rec = Recorder(tmp_path, protocol="bunqueue", profile="bunqueue/v2")
    analyzer = Analyzer("bunqueue", "bunqueue/v2", sink=rec.write)
    analyzer.open(1, 1, client="c", upstream="u")
    for i, data in enumerate(c2s):
        analyzer.feed(1, "c2s", data, 10 + i)
    analyzer.close(1, 100, "client closed")
    rec.close()
    return list(trace.read_dir(tmp_path))


def test_a_recording_has_stars_where_the_token_and_the_webhook_secret_were(tmp_path):
    auth = encode_frame({"cmd": "Auth", "reqId": "1", "token": TOKEN})
    hook = encode_frame({"cmd": "AddWebhook", "reqId": "2", "url": "http://127.0.0.1:9/h",
                         "events": ["job.completed"], "secret": SECRET})
    # a job whose data happens to hold the token is the user's data, not a credential
    push = encode_frame({"cmd": "PUSH", "reqId": "3", "queue": "q", "data": {"t": TOKEN}})
    stream = auth + hook + push
    records = _recorded(tmp_path, [stream[:7], stream[7:40], stream[40:]])   # split anywhere
    frames = [r.payload for r in records if r.type == "frame"]
    assert [len(f) for f in frames] == [len(auth), len(hook), len(push)]
    decoded = [FrameDecoder(load_profile("bunqueue/v2")).feed(f)[0] for f in frames]
    assert decoded[0]["token"] == "*" * len(TOKEN)
    assert decoded[1]["secret"] == "*" * len(SECRET)
    assert decoded[1]["url"] == "http://127.0.0.1:9/h"
    assert decoded[2]["data"] == {"t": TOKEN}
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert SECRET.encode() not in on_disk
    assert on_disk.count(TOKEN.encode()) == 1      # the PUSH data only


def test_made_up_command_names_share_one_row_past_the_bound():
    analyzer = Analyzer("bunqueue", "bunqueue/v2", keep_events=False)
    analyzer.open(1, 1)
    frames = b"".join(_frame(msgpack.packb({"cmd": f"Made{i}", "reqId": str(i)}))
                      for i in range(MAX_OTHER_COMMANDS * 4))
    analyzer.feed(1, "c2s", frames + encode_frame({"cmd": "Ping", "reqId": "p"}), 2)
    rows = analyzer.commands
    made = [name for name in rows if name.startswith("Made")]
    assert len(made) == MAX_OTHER_COMMANDS
    assert rows[OTHER_COMMANDS].requests == MAX_OTHER_COMMANDS * 3
    assert rows["Ping"].requests == 1      # a command the profile defines keeps its own row
    commands_in_counts = {key[3] for key in analyzer.finding_counts}
    assert len(commands_in_counts - {None, *made, OTHER_COMMANDS, "Ping"}) == 0
    assert any(key[3] == OTHER_COMMANDS for key in analyzer.finding_counts)
